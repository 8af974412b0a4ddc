"""API.md §15 "§9 Metrics": C80–C83."""
import threading
import time

import pytest

FAMILIES = {
    "vibevoice_build_info": "gauge", "vibevoice_ready": "gauge", "vibevoice_model_load_duration_seconds": "gauge",
    "vibevoice_http_requests_total": "counter", "vibevoice_http_request_duration_seconds": "histogram",
    "vibevoice_http_requests_in_flight": "gauge", "vibevoice_http_request_size_bytes": "histogram",
    "vibevoice_http_connections": "gauge", "vibevoice_requests_rejected_total": "counter",
    "vibevoice_errors_total": "counter", "vibevoice_requests_total": "counter",
    "vibevoice_request_duration_seconds": "histogram", "vibevoice_queue_duration_seconds": "histogram",
    "vibevoice_time_to_first_token_seconds": "histogram", "vibevoice_inter_token_latency_seconds": "histogram",
    "vibevoice_requests_running": "gauge", "vibevoice_requests_waiting": "gauge",
    "vibevoice_max_running_requests": "gauge", "vibevoice_max_waiting_requests": "gauge",
    "vibevoice_audio_input_seconds_total": "counter", "vibevoice_audio_duration_seconds": "histogram",
    "vibevoice_audio_decode_duration_seconds": "histogram", "vibevoice_speech_encode_duration_seconds": "histogram",
    "vibevoice_real_time_factor": "histogram", "vibevoice_prompt_tokens_total": "counter",
    "vibevoice_generation_tokens_total": "counter", "vibevoice_kv_cache_pages_used": "gauge",
    "vibevoice_kv_cache_pages_total": "gauge", "vibevoice_kv_cache_page_tokens": "gauge",
    "vibevoice_engine_steps_total": "counter", "vibevoice_engine_step_duration_seconds": "histogram",
    "vibevoice_engine_batch_size": "histogram", "vibevoice_engine_batch_tokens": "histogram",
    "vibevoice_preemptions_total": "counter", "vibevoice_cancellations_total": "counter",
    "vibevoice_repetition_recoveries_total": "counter", "vibevoice_output_parse_failures_total": "counter",
    "vibevoice_gpu_memory_used_bytes": "gauge", "vibevoice_gpu_memory_total_bytes": "gauge",
    "vibevoice_gpu_memory_allocated_bytes": "gauge", "vibevoice_realtime_sessions": "gauge",
    "vibevoice_realtime_sessions_total": "counter", "vibevoice_realtime_items_total": "counter",
    "vibevoice_realtime_buffered_audio_seconds": "gauge",
}
PROCESS = ["process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds", "process_max_fds",
           "process_start_time_seconds"]


def test_c080_exposition(srv):
    r = srv.req("GET", "/metrics", auth=False)
    assert r.status == 200
    assert (r.headers.get("content-type") or "").startswith("text/plain; version=0.0.4"), r.headers
    from prometheus_client.parser import text_string_to_metric_families
    parsed = list(text_string_to_metric_families(r.text))
    assert parsed
    m = srv.metrics()
    for name, typ in FAMILIES.items():
        assert m.types.get(name) == typ, f"{name}: # TYPE {m.types.get(name)!r}, want {typ}"
    for name in PROCESS:
        assert m.has(name), name
    # Closed label sets.
    for ls in m.labelsets("vibevoice_http_requests_total"):
        assert ls["method"] in ("GET", "POST", "OPTIONS", "HEAD", "other")
    # Without a GPU: build_info says cuda="none".
    assert m.labelsets("vibevoice_build_info")[0]["cuda"] == "none"


def test_c081_transcription_counters(srv, audio):
    before = srv.metrics()
    r = srv.transcribe(file=audio.bytes("tiny.wav"))
    assert r.status == 200
    after = srv.metrics()

    def d(name, **labels):
        return after.get(name, **labels) - before.get(name, **labels)
    assert d("vibevoice_requests_total", endpoint="transcriptions", finish_reason="stop") == 1
    assert abs(d("vibevoice_audio_input_seconds_total", endpoint="transcriptions") - 3) <= 0.01
    assert d("vibevoice_http_requests_total", route="/v1/audio/transcriptions", method="POST", status="200") == 1
    assert d("vibevoice_time_to_first_token_seconds_count", endpoint="transcriptions") == 1


def test_c082_route_labels(srv):
    before = srv.metrics()
    srv.req("GET", "/v1/models/some/long/id")
    srv.req("GET", "/random")
    after = srv.metrics()

    def d(**labels):
        return after.get("vibevoice_http_requests_total", **labels) - before.get("vibevoice_http_requests_total",
                                                                                  **labels)
    assert d(route="/v1/models/{id}", method="GET", status="404") == 1
    assert d(route="other", method="GET", status="404") == 1
    for ls in after.labelsets("vibevoice_http_requests_total"):
        assert "some/long" not in ls["route"] and ls["route"] != "/random"


def test_c083_kv_pages_and_build_info(srv_slow, audio):
    s = srv_slow
    steps0 = s.metrics().get("vibevoice_engine_steps_total", phase="decode")
    conn = s.send_transcription(audio.bytes("tiny.wav"))
    try:
        seen = []
        end = time.time() + 30
        while time.time() < end and len(seen) < 5:
            m = s.metrics()
            # Sampled once the request runs and has decoded at least one token.
            if (m.get("vibevoice_requests_running") >= 1 and
                    m.get("vibevoice_engine_steps_total", phase="decode") > steps0):
                seen.append((m.get("vibevoice_kv_cache_pages_used"), m.get("vibevoice_kv_cache_pages_total")))
            time.sleep(0.05)
    finally:
        conn.close()
    assert seen, "never saw a running request"
    for used, total in seen:
        assert 0 < used <= total, seen
    v = s.req("GET", "/version", auth=False).json()
    m = s.metrics()
    bi = m.labelsets("vibevoice_build_info")
    assert len(bi) == 1 and m.get("vibevoice_build_info") == 1
    assert bi[0]["version"] == v["version"] and bi[0]["git_sha"] == v["git_sha"]


def test_engine_counters_prefix_cache_and_recoveries(srv, audio):
    """Issue 13's scheduler metrics beyond §9: prompt tokens looked up in / found in the shared-prefix
    cache (extensions named after vLLM's pair), moved from the engine's counters at scrape time. The
    second request with the same prompt finds the first one's system-prompt blocks."""
    m = srv.metrics()
    for name in ("vibevoice_prefix_cache_queries_total", "vibevoice_prefix_cache_hits_total"):
        assert m.types.get(name) == "counter", name
    for _ in range(2):
        assert srv.transcribe(file=audio.bytes("tiny.wav")).status == 200
    before = srv.metrics()
    assert srv.transcribe(file=audio.bytes("tiny.wav")).status == 200
    after = srv.metrics()
    queries = after.get("vibevoice_prefix_cache_queries_total") - before.get("vibevoice_prefix_cache_queries_total")
    hits = after.get("vibevoice_prefix_cache_hits_total") - before.get("vibevoice_prefix_cache_hits_total")
    page = after.get("vibevoice_kv_cache_page_tokens")
    assert queries > 0 and hits > 0, (queries, hits)
    assert hits <= queries and hits % page == 0 and queries % page == 0, (queries, hits, page)
    # Counters never go down between scrapes.
    for name in ("vibevoice_preemptions_total", "vibevoice_prefix_cache_queries_total",
                 "vibevoice_prefix_cache_hits_total"):
        assert after.get(name) >= before.get(name), name


def test_engine_host_gap_histogram(srv, audio):
    """Extension: the host time between two consecutive engine steps' runner calls (scheduling, the plan,
    the last step's outputs), which the decoder waits. A transcription's decode steps follow one another,
    so each after the first adds a sample; a gap is host bookkeeping, well under a second."""
    m = srv.metrics()
    assert m.types.get("vibevoice_engine_host_gap_seconds") == "histogram"
    before = m.get("vibevoice_engine_host_gap_seconds_count")
    steps0 = m.get("vibevoice_engine_steps_total", phase="decode")
    assert srv.transcribe(file=audio.bytes("tiny.wav")).status == 200
    after = srv.metrics()
    steps = after.get("vibevoice_engine_steps_total", phase="decode") - steps0
    gaps = after.get("vibevoice_engine_host_gap_seconds_count") - before
    assert steps >= 2 and 1 <= gaps, (steps, gaps)
    total = after.get("vibevoice_engine_host_gap_seconds_sum") - m.get("vibevoice_engine_host_gap_seconds_sum")
    assert 0 < total < gaps * 1.0, (total, gaps)
    assert after.get("vibevoice_engine_host_gap_seconds_bucket", le="+Inf") == after.get(
        "vibevoice_engine_host_gap_seconds_count")
