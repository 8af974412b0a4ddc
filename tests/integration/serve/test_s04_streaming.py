"""API.md §15 "§4 Streaming": C52–C58."""
import json
import time

import pytest

from vvhttp import assert_error


def frames_ok(sse):
    """C52 framing: every frame is a `data: ` line or a `:` comment; returns the data payloads."""
    out = []
    for _, f in sse.frames:
        if f.startswith(":"):
            assert "\n" not in f, f
            continue
        assert f.startswith("data: ") and "\n" not in f, repr(f)
        out.append(f[len("data: "):])
    return out


def test_c052_stream_framing(srv, audio):
    sse = srv.stream_transcribe(fields=[("stream", "true")], file=audio.bytes("tiny.wav")).read_all()
    assert sse.status == 200, sse.error_body
    assert (sse.headers.get("content-type") or "").startswith("text/event-stream")
    assert sse.headers.get("cache-control") == "no-cache"
    assert sse.headers.get("x-accel-buffering") == "no"
    assert "chunked" in (sse.headers.get("transfer-encoding") or "").lower()
    assert sse.body.endswith(b"\n\n")
    data = frames_ok(sse)
    assert data[-1] == "[DONE]"
    objs = [json.loads(d) for d in data[:-1]]
    done = [o for o in objs if o["type"] == "transcript.text.done"]
    assert len(done) == 1 and objs[-1] is done[0]
    deltas = [o["delta"] for o in objs if o["type"] == "transcript.text.delta"]
    assert all(isinstance(d, str) and d for d in deltas)
    assert "".join(deltas) == done[0]["text"]
    assert done[0]["text"]
    assert done[0]["finish_reason"] == "stop"


def test_c053_done_usage(srv, audio):
    sse = srv.stream_transcribe(fields=[("stream", "true")], file=audio.bytes("tiny.wav")).read_all()
    done = [o for o in sse.data_objects() if o["type"] == "transcript.text.done"][0]
    u = done["usage"]
    assert u["type"] == "tokens"
    for k in ("input_tokens", "output_tokens", "total_tokens"):
        assert isinstance(u[k], int) and not isinstance(u[k], bool)
    assert u["total_tokens"] == u["input_tokens"] + u["output_tokens"]
    d = u["input_token_details"]
    assert isinstance(d["audio_tokens"], int) and isinstance(d["text_tokens"], int)
    assert d["audio_tokens"] == 23  # ceil(3 s * 24000 / 3200)
    assert d["audio_tokens"] + d["text_tokens"] == u["input_tokens"]


def test_c054_segment_events(srv, audio):
    sse = srv.stream_transcribe(fields=[("stream", "true"), ("response_format", "diarized_json")],
                                file=audio.bytes("two.wav")).read_all()
    assert sse.status == 200
    objs = sse.data_objects()
    segs = [o for o in objs if o["type"] == "transcript.text.segment"]
    assert len(segs) >= 2
    assert [s["id"] for s in segs] == [f"seg_{i}" for i in range(len(segs))]
    assert all(s["speaker"] for s in segs)
    assert segs[0]["speaker"] == "A"
    seen_segment = set()
    for o in objs:
        if o["type"] == "transcript.text.delta":
            assert "segment_id" in o, o
            assert o["segment_id"] not in seen_segment, "delta after its segment event"
            k = int(o["segment_id"].split("_")[1])
            assert all(f"seg_{j}" in seen_segment for j in range(k)), "delta of seg_k before seg_{k-1} event"
        elif o["type"] == "transcript.text.segment":
            seen_segment.add(o["id"])
    # A json stream has no segment events.
    sse = srv.stream_transcribe(fields=[("stream", "true"), ("response_format", "json")],
                                file=audio.bytes("two.wav")).read_all()
    assert not [o for o in sse.data_objects() if o["type"] == "transcript.text.segment"]


def test_c055_keepalive_while_paused(make_server, audio):
    s = make_server(script='[{"Start":0.0,"End":1.0,"Speaker":0,"Content":"Hello there."}]',
                    config={"stream.keepalive_s": 1})
    s.pause()
    sse = s.stream_transcribe(fields=[("stream", "true")], file=audio.bytes("tiny.wav"), timeout=10)
    assert sse.status == 200
    t0 = time.time()
    resumed = False
    keepalives_before_delta = 0
    for t, f in sse:
        if not resumed and t - t0 >= 3:
            s.resume()
            resumed = True
        if f == ": keep-alive":
            keepalives_before_delta += 1
            if not resumed and time.time() - t0 >= 3:
                s.resume()
                resumed = True
            continue
        if f.startswith("data: ") and '"transcript.text.delta"' in f:
            break
    assert keepalives_before_delta >= 2, sse.frames
    s.resume()


def _running(s):
    return s.metrics().get("vibevoice_requests_running")


def _cancels(s, reason):
    return s.metrics().get("vibevoice_cancellations_total", reason=reason)


def _wait_until(pred, timeout):
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return True
        time.sleep(0.02)
    return pred()


def test_c056_disconnect_cancels(srv_slow, audio):
    s = srv_slow
    long_wav = audio.bytes("long.wav")
    # Streaming: close after the first delta.
    before_running = _running(s)
    before = _cancels(s, "client_disconnect")
    sse = s.stream_transcribe(fields=[("stream", "true")], file=long_wav, timeout=300)
    assert sse.status == 200
    for _, f in sse:
        if '"transcript.text.delta"' in f:
            break
    sse.conn.close()
    t0 = time.time()
    assert _wait_until(lambda: _cancels(s, "client_disconnect") >= before + 1 and _running(s) == before_running,
                       1.0), (time.time() - t0, _cancels(s, "client_disconnect"), _running(s))
    assert _cancels(s, "client_disconnect") == before + 1
    # Non-streaming: close 1 s into the request.
    import vvhttp
    before = _cancels(s, "client_disconnect")
    mp = vvhttp.Multipart()
    mp.file("file", long_wav)
    c = vvhttp.Conn(s.port, timeout=60)
    c.send(vvhttp.build_request("POST", "/v1/audio/transcriptions",
                                {**s.auth(), "Content-Type": mp.content_type}, mp.body()))
    assert _wait_until(lambda: _running(s) > before_running, 60), "request never started running"
    time.sleep(1)
    c.close()
    assert _wait_until(lambda: _cancels(s, "client_disconnect") >= before + 1 and _running(s) == before_running,
                       1.0)
    assert _cancels(s, "client_disconnect") == before + 1


def test_c057_engine_fault_mid_stream(make_server, audio):
    s = make_server(script='[{"Start":0.0,"End":1.0,"Speaker":0,"Content":"One two three four five six seven '
                           'eight nine ten eleven twelve."}]',
                    hooks={"VIBEVOICE_TEST_FAULT_AFTER_TOKENS": 5}, config={"model.warmup": "false"})
    sse = s.stream_transcribe(fields=[("stream", "true")], file=audio.bytes("tiny.wav")).read_all()
    assert sse.status == 200, sse.error_body
    data = frames_ok(sse)
    assert data and data[-1] != "[DONE]"
    last = json.loads(data[-1])
    assert last["type"] == "error"
    err = last["error"]
    assert err["code"] == "engine_error" and err["type"] == "server_error"
    assert "message" in err and "param" in err
    assert sum(1 for d in data if d.startswith("{") and json.loads(d)["type"] == "error") == 1


def test_c058_stream_with_invalid_format_and_stream_false(srv, audio):
    r = srv.transcribe(file=audio.bytes("tiny.wav"), fields=[("stream", "true"), ("response_format", "xml")])
    assert_error(r, 400, "invalid_value", param="response_format")
    r = srv.transcribe(file=audio.bytes("tiny.wav"), fields=[("stream", "false")])
    assert r.status == 200
    assert r.headers.get("content-type") == "application/json"
    assert sorted(r.json()) == ["text", "usage"]
