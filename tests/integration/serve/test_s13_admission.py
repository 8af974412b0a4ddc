"""API.md §15 "§13 Admission and shutdown": C96–C101."""
import json
import signal
import socket
import time

import pytest

import vvhttp
from conftest import KEY, KEY2
from vvhttp import assert_error

SLOW = {"VIBEVOICE_TEST_TOKEN_DELAY_MS": 50}
LONG_SCRIPT = "[" + ",".join('{"Start":%d.0,"End":%d.5,"Speaker":0,"Content":"Sentence %d of a long talk."}'
                             % (i, i, i) for i in range(300)) + "]"


def wait_until(pred, timeout, step=0.02):
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return True
        time.sleep(step)
    return pred()


def test_c096_queue_full(make_server, audio):
    s = make_server(script=LONG_SCRIPT, hooks=SLOW, config={"engine.max_running_requests": 1,
                                                           "engine.max_waiting_requests": 1,
                                                           "model.warmup": "false"})
    wav = audio.bytes("tiny.wav")
    a = s.send_transcription(wav)
    assert wait_until(lambda: s.metrics().get("vibevoice_requests_running") == 1, 30)
    b = s.send_transcription(wav)
    assert wait_until(lambda: s.metrics().get("vibevoice_requests_waiting") == 1, 30)
    try:
        r = s.transcribe(file=wav)
        assert_error(r, 503, "server_overloaded")
        ra = r.headers.get("retry-after")
        assert ra is not None and ra.isdigit() and 1 <= int(ra) <= 60, r.headers
        assert r.headers.get("retry-after-ms") and r.headers.get("retry-after-ms").isdigit()
        assert r.headers.get("x-should-retry") == "true"
    finally:
        a.close()
        b.close()


def test_c097_per_key_concurrency(make_server, audio):
    s = make_server(script=LONG_SCRIPT, hooks=SLOW, config={"auth.max_concurrent_requests_per_key": 1,
                                                           "model.warmup": "false"})
    wav = audio.bytes("tiny.wav")
    a = s.send_transcription(wav, key=KEY)
    try:
        assert wait_until(lambda: s.metrics().get("vibevoice_requests_running") >= 1, 30)
        r = s.transcribe(file=wav, key=KEY)
        e = assert_error(r, 429, "rate_limit_exceeded")
        assert e["type"] == "rate_limit_error"
        assert r.headers.get("retry-after") == "1"
        b = s.send_transcription(wav, key=KEY2)
        try:
            # Accepted: it is admitted and runs (it does not get a 429).
            assert wait_until(lambda: s.metrics().get("vibevoice_requests_running") >= 2, 30)
        finally:
            b.close()
    finally:
        a.close()


def test_c098_request_deadline(make_server, audio):
    s = make_server(script=LONG_SCRIPT, hooks=SLOW, config={"model.warmup": "false"})
    before = s.metrics().get("vibevoice_cancellations_total", reason="deadline")
    t0 = time.time()
    r = s.transcribe(file=audio.bytes("long.wav"), headers={"X-Request-Timeout": "1"}, timeout=120)
    assert_error(r, 504, "deadline_exceeded")
    assert r.headers.get("x-should-retry") == "false"
    assert time.time() - t0 < 30
    assert s.metrics().get("vibevoice_cancellations_total", reason="deadline") == before + 1


def test_c099_graceful_drain(make_server, audio):
    s = make_server(script='[{"Start":0.0,"End":1.0,"Speaker":0,"Content":"Hello there."}]',
                    config={"shutdown.pre_stop_delay_s": 5, "shutdown.grace_s": 25})
    wav = audio.bytes("tiny.wav")
    s.pause()  # lengthens the request: it waits until resumed
    conn = s.send_transcription(wav)
    time.sleep(0.5)
    t_sig = time.time()
    s.signal(signal.SIGTERM)
    r = None
    while time.time() - t_sig < 0.1:
        r = s.req("GET", "/ready", auth=False, timeout=1)
        if r.status == 503:
            break
    assert r is not None and r.status == 503 and r.json()["status"] == "draining", r
    assert s.req("GET", "/health", auth=False).status == 200
    time.sleep(max(0.0, t_sig + 6 - time.time()))
    r = s.transcribe(file=wav, timeout=10)
    assert_error(r, 503, "shutting_down")
    assert r.headers.get("retry-after") == "5"
    s.resume()
    first = conn.read_response("POST")
    conn.close()
    assert first.status == 200, first
    assert first.json()["text"] == "Hello there."
    s.proc.wait(timeout=30)
    assert s.proc.returncode == 0


def test_c100_drain_grace_ends_streams(make_server, audio):
    s = make_server(script=LONG_SCRIPT, hooks=SLOW, config={"shutdown.pre_stop_delay_s": 0, "shutdown.grace_s": 1,
                                                           "model.warmup": "false"})
    sse = s.stream_transcribe(fields=[("stream", "true")], file=audio.bytes("tiny.wav"), timeout=60)
    assert sse.status == 200
    it = iter(sse)
    for _, f in it:
        if '"transcript.text.delta"' in f:
            break
    s.signal(signal.SIGTERM)
    for _ in it:
        pass
    data = [f[len("data: "):] for _, f in sse.frames if f.startswith("data: ")]
    assert data[-1] != "[DONE]"
    last = json.loads(data[-1])
    assert last["type"] == "error" and last["error"]["code"] == "shutting_down", last
    s.proc.wait(timeout=30)
    assert s.proc.returncode == 0


def test_c101_slow_clients_and_connection_cap(make_server, audio):
    s = make_server(config={"http.header_timeout_s": 2, "http.body_idle_timeout_s": 1})
    # Slowloris: one header byte per second; closed after the header timeout.
    c = vvhttp.Conn(s.port, timeout=10)
    req = vvhttp.build_request("GET", "/v1/models", s.auth())
    t0 = time.time()
    closed_at = None
    for b in req:
        try:
            c.send(bytes([b]))
        except (BrokenPipeError, ConnectionResetError):
            closed_at = time.time()
            break
        if c.wait_closed(1.0):
            closed_at = time.time()
            break
    c.close()
    assert closed_at is not None, "slowloris connection never closed"
    assert 1.5 <= closed_at - t0 <= 4.5, closed_at - t0
    # Stalled body: 408.
    mp = vvhttp.Multipart()
    mp.file("file", audio.bytes("tiny.wav"))
    body = mp.body()
    with vvhttp.Conn(s.port, timeout=10) as c:
        c.send(vvhttp.build_request("POST", "/v1/audio/transcriptions",
                                    {**s.auth(), "Content-Type": mp.content_type, "Content-Length": str(len(body))}))
        c.send(body[:1000])
        r = c.read_response("POST")
        assert_error(r, 408, "request_timeout")
        assert "close" in (r.headers.get("connection") or "").lower()
    # Connection cap.
    s2 = make_server(config={"http.max_connections": 2})
    idle = [vvhttp.Conn(s2.port) for _ in range(2)]
    try:
        time.sleep(0.3)
        with vvhttp.Conn(s2.port, timeout=10) as c:
            try:
                c.send(vvhttp.build_request("GET", "/health", {}))
            except OSError:
                pass
            r = c.read_response()
            assert_error(r, 503, "too_many_connections")
            assert c.wait_closed(5)
    finally:
        for c in idle:
            c.close()
