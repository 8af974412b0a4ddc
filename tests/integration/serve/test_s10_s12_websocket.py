"""API.md §10–§12: the live-transcription WebSocket (`GET /v1/realtime`), checklist items C84–C95.

Clients: the `websockets` library (a real RFC 6455 client), raw sockets where the test needs exact
bytes (handshake refusals, invalid UTF-8, oversized frames), and the official `openai` SDK (C95).
Audio: PCM16 cut from tiny.wav (16 kHz speech, made by audio.py) or digital silence."""
import base64
import json
import os
import time
import wave

import pytest

import vvhttp
from conftest import KEY, SCRIPT_SEGMENT_TEXTS
from test_robustness import ws_close_code, ws_connect, ws_frame, ws_read_frame

websockets = pytest.importorskip("websockets", reason="websockets is not installed (scripts/setup.sh installs it)")
from websockets.exceptions import ConnectionClosed, InvalidStatus  # noqa: E402
from websockets.sync.client import connect  # noqa: E402

RATE = 16000
DELTA = "conversation.item.input_audio_transcription.delta"
SEGMENT = "conversation.item.input_audio_transcription.segment"
COMPLETED = "conversation.item.input_audio_transcription.completed"
FAILED = "conversation.item.input_audio_transcription.failed"


def pcm16(audio, seconds, start=0.0):
    """`seconds` of tiny.wav (16 kHz mono s16) from `start`, as raw little-endian PCM16 bytes."""
    with wave.open(str(audio.path("tiny.wav"))) as w:
        assert w.getframerate() == RATE and w.getnchannels() == 1 and w.getsampwidth() == 2
        w.setpos(int(start * RATE))
        data = w.readframes(int(seconds * RATE))
    assert len(data) == int(seconds * RATE) * 2
    return data


def silence(seconds):
    return b"\x00\x00" * int(seconds * RATE)


def ws_open(port, query="?intent=transcription", key=KEY, headers=None, subprotocols=None):
    h = {"Authorization": f"Bearer {key}"} if key else {}
    h.update(headers or {})
    return connect(f"ws://127.0.0.1:{port}/v1/realtime{query}", additional_headers=h, subprotocols=subprotocols,
                   max_size=None, open_timeout=15, close_timeout=5)


def recv(ws, timeout=60):
    msg = ws.recv(timeout=timeout)
    assert isinstance(msg, str), msg
    ev = json.loads(msg)
    assert isinstance(ev.get("type"), str) and ev["type"], ev
    assert ev.get("event_id", "").startswith("event_"), ev
    return ev


def recv_until(ws, types, timeout=120):
    """Events up to and including the first whose type is in `types`."""
    types = {types} if isinstance(types, str) else set(types)
    out = []
    end = time.time() + timeout
    while True:
        ev = recv(ws, timeout=max(0.1, end - time.time()))
        out.append(ev)
        if ev["type"] in types:
            return out


def manual_session(ws, rate=RATE, created="session.created", updated="session.updated"):
    ev = recv(ws)
    assert ev["type"] == created, ev
    ws.send(json.dumps({"type": "session.update", "session": {
        "type": "transcription",
        "audio": {"input": {"format": {"type": "audio/pcm", "rate": rate}, "turn_detection": None}}}}))
    ev = recv(ws)
    assert ev["type"] == updated, ev
    return ev


def raw_upgrade(port, target, headers):
    """Sends an upgrade request on a raw socket; returns the vvhttp.Response (refusals have a body)."""
    c = vvhttp.Conn(port, timeout=15)
    h = {"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Key": base64.b64encode(os.urandom(16)).decode(),
         "Sec-WebSocket-Version": "13"}
    h.update(headers)
    c.send(vvhttp.build_request("GET", target, h))
    r = c.read_response("GET")
    c.close()
    assert r.headers.get("x-request-id"), r
    return r


def transcribe_item(ws, audio_bytes, as_base64=False, chunk=8000):
    """Appends the audio (binary frames or base64 appends), commits; returns the item's events."""
    for i in range(0, len(audio_bytes), chunk):
        part = audio_bytes[i:i + chunk]
        if as_base64:
            ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": base64.b64encode(part).decode()}))
        else:
            ws.send(part)
    ws.send(json.dumps({"type": "input_audio_buffer.commit", "event_id": "c1"}))
    return recv_until(ws, {COMPLETED, FAILED})


def test_c084_handshake_auth(srv):
    r = raw_upgrade(srv.port, "/v1/realtime?intent=transcription", {})
    vvhttp.assert_error(r, 401, "missing_api_key")
    with pytest.raises(InvalidStatus) as e:
        ws_open(srv.port, key=None)
    assert e.value.response.status_code == 401
    # Browser-style: the key in a subprotocol, `realtime` offered alongside and selected.
    with ws_open(srv.port, key=None, subprotocols=["realtime", f"openai-insecure-api-key.{KEY}"]) as ws:
        assert ws.subprotocol == "realtime"
        assert ws.response.headers.get("x-request-id")
        ev = recv(ws)
        assert ev["type"] == "session.created", ev
        s = ev["session"]
        assert s["type"] == "transcription" and s["object"] == "realtime.session", s
        assert s["id"].startswith("sess_"), s
        assert s["audio"]["input"]["format"] == {"type": "audio/pcm", "rate": 24000}, s
        assert s["audio"]["input"]["transcription"]["model"] == "vibevoice-asr", s
        assert s["audio"]["input"]["turn_detection"]["type"] == "server_vad", s
        # The key subprotocol is never echoed.
        assert KEY not in str(ws.response.headers)
    # A wrong key in the subprotocol is refused like a wrong header key.
    r = raw_upgrade(srv.port, "/v1/realtime", {"Sec-WebSocket-Protocol": "realtime, openai-insecure-api-key.sk-wrong"})
    vvhttp.assert_error(r, 401, "invalid_api_key")


def test_c085_plain_get_and_bad_intent(srv):
    r = srv.req("GET", "/v1/realtime")
    vvhttp.assert_error(r, 426, "upgrade_required")
    assert r.headers.get("upgrade", "").lower() == "websocket", r
    r = raw_upgrade(srv.port, "/v1/realtime?intent=conversation", srv.auth())
    vvhttp.assert_error(r, 400, "invalid_value", param="intent")
    r = raw_upgrade(srv.port, "/v1/realtime?intent=transcription&model=no-such-model", srv.auth())
    vvhttp.assert_error(r, 404, "model_not_found")
    # An alias is accepted and echoed (§1).
    with ws_open(srv.port, query="?intent=transcription&model=whisper-1") as ws:
        ev = recv(ws)
        assert ev["session"]["audio"]["input"]["transcription"]["model"] == "whisper-1", ev


def test_c086_beta_dialect(srv):
    with ws_open(srv.port, headers={"OpenAI-Beta": "realtime=v1"}) as ws:
        ev = recv(ws)
        assert ev["type"] == "transcription_session.created", ev
        s = ev["session"]
        assert s["object"] == "realtime.transcription_session" and s["input_audio_format"] == "pcm16", s
        ws.send(json.dumps({"type": "transcription_session.update", "session": {
            "input_audio_format": "g711_ulaw", "turn_detection": None,
            "input_audio_transcription": {"model": "vibevoice-asr", "language": "en"}}}))
        ev = recv(ws)
        assert ev["type"] == "transcription_session.updated", ev
        s = ev["session"]
        assert s["input_audio_format"] == "g711_ulaw" and s["turn_detection"] is None, s
        assert s["input_audio_transcription"]["language"] == "en", s
        # The GA event name is accepted in the beta dialect too; the answer keeps the dialect.
        ws.send(json.dumps({"type": "session.update", "session": {"input_audio_format": "pcm16"}}))
        ev = recv(ws)
        assert ev["type"] == "transcription_session.updated" and ev["session"]["input_audio_format"] == "pcm16", ev
    # The beta subprotocol selects the dialect as well.
    with ws_open(srv.port, subprotocols=["realtime", "openai-beta.realtime-v1"]) as ws:
        assert ws.subprotocol == "realtime"
        assert recv(ws)["type"] == "transcription_session.created"


def test_c087_binary_audio_manual_commit(srv, audio):
    with ws_open(srv.port) as ws:
        manual_session(ws)
        events = transcribe_item(ws, pcm16(audio, 2.0))
    types = [e["type"] for e in events]
    committed = events[types.index("input_audio_buffer.committed")]
    assert committed["audio_start_ms"] == 0 and committed["audio_end_ms"] == 2000, committed
    assert committed["previous_item_id"] is None and committed["reason"] == "client", committed
    item = committed["item_id"]
    assert item.startswith("item_"), committed
    added = events[types.index("conversation.item.added")]
    assert added["item"]["id"] == item and added["item"]["role"] == "user", added
    assert added["item"]["content"][0]["type"] == "input_audio", added
    assert types[-1] == COMPLETED, types
    deltas = [e for e in events if e["type"] == DELTA]
    segments = [e for e in events if e["type"] == SEGMENT]
    assert deltas and segments, types
    # §12.1 order: committed, added, deltas/segments, completed.
    assert types.index("input_audio_buffer.committed") < types.index("conversation.item.added") < types.index(DELTA)
    assert all(e["item_id"] == item and e["content_index"] == 0 for e in deltas + segments)
    assert all(s["speaker"] in ("A", "B") for s in segments), segments
    assert [s["text"] for s in segments] == SCRIPT_SEGMENT_TEXTS[:len(segments)], segments
    for s in segments:
        assert 0 <= s["start"] <= s["end"] <= 2.0 + 1e-3, s
        assert abs(s["session_start"] - s["start"]) < 1e-3 and abs(s["session_end"] - s["end"]) < 1e-3, s
    done = events[-1]
    assert done["item_id"] == item and done["transcript"] == "".join(d["delta"] for d in deltas), done
    assert done["transcript"].startswith(SCRIPT_SEGMENT_TEXTS[0]), done
    u = done["usage"]
    assert u["type"] == "tokens" and u["input_tokens"] > 0 and u["output_tokens"] > 0, u
    assert u["total_tokens"] == u["input_tokens"] + u["output_tokens"], u
    assert u["input_token_details"]["audio_tokens"] > 0, u
    assert done["finish_reason"] == "stop", done


def test_c088_base64_appends_same_transcript(srv_model, audio):
    """The tiny model's own tokens (no script) at temperature 0: both ways must give one transcript."""
    data = pcm16(audio, 2.0)
    transcripts = []
    for as_base64 in (False, True):
        with ws_open(srv_model.port) as ws:
            manual_session(ws)
            events = transcribe_item(ws, data, as_base64=as_base64, chunk=6401)  # odd byte counts: carried over
            assert events[-1]["type"] == COMPLETED, events[-1]
            committed = next(e for e in events if e["type"] == "input_audio_buffer.committed")
            assert committed["audio_end_ms"] == 2000, committed
            transcripts.append(events[-1]["transcript"])
    assert transcripts[0] == transcripts[1], transcripts


def test_c089_commit_too_short(srv, audio):
    with ws_open(srv.port) as ws:
        manual_session(ws)
        ws.send(pcm16(audio, 0.05))
        ws.send(json.dumps({"type": "input_audio_buffer.commit", "event_id": "short-1"}))
        ev = recv(ws)
        assert ev["type"] == "error", ev
        assert ev["error"]["code"] == "input_audio_buffer_commit_empty", ev
        assert ev["error"]["type"] == "invalid_request_error" and ev["error"]["event_id"] == "short-1", ev
        # The session stays open and the 50 ms were kept: 50 + 100 ms commit as one item.
        ws.send(pcm16(audio, 0.1, start=0.05))
        ws.send(json.dumps({"type": "input_audio_buffer.commit"}))
        ev = recv(ws)
        assert ev["type"] == "input_audio_buffer.committed" and ev["audio_end_ms"] == 150, ev
        assert recv_until(ws, {COMPLETED, FAILED})[-1]["type"] == COMPLETED


def test_c090_server_vad_two_turns(srv, audio):
    speech = pcm16(audio, 2.0)
    stream = speech + silence(2.0) + speech + silence(1.0)
    with ws_open(srv.port) as ws:
        ev = recv(ws)
        assert ev["session"]["audio"]["input"]["turn_detection"]["type"] == "server_vad", ev
        ws.send(json.dumps({"type": "session.update", "session": {
            "type": "transcription", "audio": {"input": {"format": {"type": "audio/pcm", "rate": RATE}}}}}))
        ev = recv(ws)
        assert ev["type"] == "session.updated", ev
        td = ev["session"]["audio"]["input"]["turn_detection"]
        assert td["type"] == "server_vad" and td["silence_duration_ms"] == 500, td
        for i in range(0, len(stream), 3200):  # 100 ms frames
            ws.send(stream[i:i + 3200])
        events = []
        while sum(e["type"] in (COMPLETED, FAILED) for e in events) < 2:
            events.append(recv(ws, timeout=120))
    types = [e["type"] for e in events]
    started = [e for e in events if e["type"] == "input_audio_buffer.speech_started"]
    stopped = [e for e in events if e["type"] == "input_audio_buffer.speech_stopped"]
    committed = [e for e in events if e["type"] == "input_audio_buffer.committed"]
    assert len(started) == 2 and len(stopped) == 2 and len(committed) == 2, types
    ids = [c["item_id"] for c in committed]
    assert [s["item_id"] for s in started] == ids and [s["item_id"] for s in stopped] == ids, events
    assert committed[0]["previous_item_id"] is None and committed[1]["previous_item_id"] == ids[0], committed
    assert all(c["reason"] == "vad" for c in committed), committed
    # Turn 1 is in the first 2 s (+ the 500 ms of silence that ends it), turn 2 starts after the gap.
    assert 0 <= started[0]["audio_start_ms"] < 1000 and 2000 <= stopped[0]["audio_end_ms"] <= 2700, (started, stopped)
    assert 3500 <= started[1]["audio_start_ms"] < 5000 and 6000 <= stopped[1]["audio_end_ms"] <= 6700, (started, stopped)
    assert committed[0]["audio_end_ms"] == stopped[0]["audio_end_ms"], committed
    # Items are transcribed in order: item 1's completed precedes item 2's first delta.
    done1 = next(i for i, e in enumerate(events) if e["type"] == COMPLETED)
    assert events[done1]["item_id"] == ids[0]
    first2 = next(i for i, e in enumerate(events) if e["type"] == DELTA and e["item_id"] == ids[1])
    assert done1 < first2, types


def test_c091_client_errors_and_closes(srv):
    with ws_open(srv.port) as ws:
        assert recv(ws)["type"] == "session.created"
        ws.send(json.dumps({"type": "response.create", "event_id": "e1"}))
        ev = recv(ws)
        assert ev["type"] == "error" and ev["error"]["code"] == "unknown_event", ev
        assert ev["error"]["event_id"] == "e1" and ev["error"]["param"] == "type", ev
        ws.send("{")
        ev = recv(ws)
        assert ev["type"] == "error" and ev["error"]["code"] == "invalid_json", ev
        ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": "***not base64***", "event_id": "a1"}))
        ev = recv(ws)
        assert ev["error"]["code"] == "invalid_value" and ev["error"]["param"] == "audio", ev
        ws.send(json.dumps({"type": "session.update", "session": {"type": "realtime"}}))
        ev = recv(ws)
        assert ev["error"]["code"] == "unsupported_value", ev
        # Still open after recoverable errors.
        ws.send(json.dumps({"type": "input_audio_buffer.clear"}))
        assert recv(ws)["type"] == "input_audio_buffer.cleared"
    # Invalid UTF-8 in a text frame → 1007; a 20 MiB message → 1009 (raw frames).
    c = ws_connect(srv.port, KEY)
    c.send(ws_frame(0x1, b'{"type":"\xc3\x28"}'))
    assert ws_close_code(c) == 1007
    c.close()
    c = ws_connect(srv.port, KEY)
    big = 20 << 20
    c.send(ws_frame(0x2, b"", length=big))
    c.send(b"\x00" * 65536)
    assert ws_close_code(c) == 1009
    c.close()
    # The same with the library: the whole 20 MiB binary message.
    with ws_open(srv.port) as ws:
        recv(ws)
        with pytest.raises(ConnectionClosed) as e:
            ws.send(b"\x00" * big)
            while True:
                ws.recv(timeout=30)
        assert e.value.rcvd is not None and e.value.rcvd.code == 1009, e.value


def test_c092_session_finish(srv, audio):
    with ws_open(srv.port) as ws:
        manual_session(ws)
        ws.send(pcm16(audio, 1.0))
        ws.send(json.dumps({"type": "input_audio_buffer.commit"}))
        ws.send(pcm16(audio, 0.5, start=1.0))  # uncommitted: session.finish commits it
        ws.send(json.dumps({"type": "session.finish"}))
        events = recv_until(ws, "session.finished")
        with pytest.raises(ConnectionClosed) as e:
            ws.recv(timeout=10)
    assert e.value.rcvd is not None and e.value.rcvd.code == 1000, e.value
    committed = [e for e in events if e["type"] == "input_audio_buffer.committed"]
    assert [c["reason"] for c in committed] == ["client", "finish"], committed
    assert committed[1]["audio_start_ms"] == 1000 and committed[1]["audio_end_ms"] == 1500, committed
    done = [e for e in events if e["type"] == COMPLETED]
    assert [d["item_id"] for d in done] == [c["item_id"] for c in committed], events
    assert events[-1]["items"] == 2, events[-1]
    # Every item completed before session.finished.
    assert max(i for i, e in enumerate(events) if e["type"] == COMPLETED) < len(events) - 1


def test_c093_idle_timeout(make_server):
    s = make_server(config={"realtime.idle_timeout_s": 5, "realtime.ping_interval_s": 1})
    with ws_open(s.port) as ws:
        t0 = time.time()
        assert recv(ws)["type"] == "session.created"
        # The client library answers the server's pings meanwhile: pings are not client data.
        ev = recv(ws, timeout=30)
        waited = time.time() - t0
        assert ev["type"] == "error" and ev["error"]["code"] == "idle_timeout", ev
        assert 4.5 <= waited <= 15, waited
        with pytest.raises(ConnectionClosed) as e:
            ws.recv(timeout=10)
    assert e.value.rcvd is not None and e.value.rcvd.code == 1008, e.value


def test_c094_max_sessions(make_server):
    s = make_server(config={"realtime.max_sessions": 1})
    with ws_open(s.port) as ws:
        assert recv(ws)["type"] == "session.created"
        r = raw_upgrade(s.port, "/v1/realtime?intent=transcription", s.auth())
        vvhttp.assert_error(r, 503, "server_overloaded")
        assert 1 <= int(r.headers.get("retry-after")) <= 60, r
    # The slot is free again once the first session ended.
    end = time.time() + 10
    while True:
        try:
            with ws_open(s.port) as ws:
                assert recv(ws)["type"] == "session.created"
            break
        except InvalidStatus:
            assert time.time() < end, "the session slot was not released"
            time.sleep(0.1)


def test_c095_openai_sdk_realtime(srv, audio):
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=srv.base_url + "/v1", api_key=KEY, max_retries=0)
    data = pcm16(audio, 1.5)
    seen = []
    with client.realtime.connect(model="vibevoice-asr", extra_query={"intent": "transcription"}) as conn:
        ev = conn.recv()
        assert ev.type == "session.created", ev
        conn.session.update(session={"type": "transcription", "audio": {"input": {
            "format": {"type": "audio/pcm", "rate": RATE}, "turn_detection": None}}})
        for i in range(0, len(data), 8000):
            conn.input_audio_buffer.append(audio=base64.b64encode(data[i:i + 8000]).decode())
        conn.input_audio_buffer.commit()
        for ev in conn:
            seen.append(ev)
            assert ev.type != "error", ev
            if ev.type == COMPLETED:
                break
    types = [e.type for e in seen]
    assert types[0] == "session.updated", types
    assert "input_audio_buffer.committed" in types and DELTA in types, types
    deltas = "".join(e.delta for e in seen if e.type == DELTA)
    assert seen[-1].transcript == deltas and deltas, seen[-1]


def test_c100_websocket_drain_closes_1001(make_server, audio):
    """The WebSocket half of C100 (§13.4): on SIGTERM with shutdown.grace_s=1 an item still being
    transcribed fails with shutting_down and its session closes with 1001; an idle session closes
    with 1001 as soon as the server stops taking new work; new upgrades get 503."""
    from test_s13_admission import LONG_SCRIPT, SLOW
    import signal
    s = make_server(script=LONG_SCRIPT, hooks=SLOW, config={"shutdown.pre_stop_delay_s": 0.5, "shutdown.grace_s": 1,
                                                           "model.warmup": "false"})
    with ws_open(s.port) as idle, ws_open(s.port) as busy:
        assert recv(idle)["type"] == "session.created"
        manual_session(busy)
        busy.send(pcm16(audio, 1.0))
        busy.send(json.dumps({"type": "input_audio_buffer.commit"}))
        recv_until(busy, DELTA)
        s.signal(signal.SIGTERM)
        t0 = time.time()
        with pytest.raises(ConnectionClosed) as e:
            idle.recv(timeout=10)
        assert e.value.rcvd is not None and e.value.rcvd.code == 1001, e.value
        events = recv_until(busy, FAILED, timeout=30)
        assert events[-1]["error"]["code"] == "shutting_down", events[-1]
        assert COMPLETED not in [ev["type"] for ev in events]
        assert time.time() - t0 >= 1.0  # the item had its grace period
        with pytest.raises(ConnectionClosed) as e:
            busy.recv(timeout=10)
        assert e.value.rcvd is not None and e.value.rcvd.code == 1001, e.value
    s.proc.wait(timeout=30)
    assert s.proc.returncode == 0


def test_s12_3_slow_reader_closed_1008(make_server):
    """§12.3 outbound backpressure: a client that sends but never reads is closed with 1008
    ("client too slow") once its unsent events pass realtime.send_queue_bytes."""
    import socket
    s = make_server(config={"realtime.send_queue_bytes": 65536})
    c = ws_connect(s.port, KEY)
    c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    bad = ws_frame(0x1, b"{")  # each one answers with an ~200-byte error event
    c.settimeout(30)
    sent = 0
    try:
        for _ in range(200):
            c.send(bad * 500)
            sent += 500
    except OSError:
        pass  # the server gave up on us first
    time.sleep(0.5)
    assert ws_close_code(c, timeout=20) == 1008, sent
    c.close()
    # The server itself is fine.
    with ws_open(s.port) as ws:
        assert recv(ws)["type"] == "session.created"


def test_s12_4_heartbeat_drops_silent_peer(make_server):
    """§12.4: the server pings a quiet peer every realtime.ping_interval_s and, when nothing at all
    comes back for twice that, drops the TCP connection without a close handshake (well before
    realtime.idle_timeout_s)."""
    s = make_server(config={"realtime.ping_interval_s": 1, "realtime.idle_timeout_s": 30})
    c = ws_connect(s.port, KEY)
    c.settimeout(10)
    t0 = time.time()
    pings = []
    ended = None
    try:
        while time.time() - t0 < 10:
            op, _ = ws_read_frame(c)
            assert op != 0x8, "a close frame: the peer should just be dropped"
            if op == 0x9:
                pings.append(time.time() - t0)
    except (vvhttp.Closed, ConnectionResetError):
        ended = time.time() - t0
    c.close()
    assert pings and 0.5 <= pings[0] <= 2.0, pings
    assert ended is not None and 1.5 <= ended <= 4.0, (ended, pings)


def test_s12_3_session_expired(make_server):
    s = make_server(config={"realtime.max_session_s": 10, "realtime.idle_timeout_s": 60})
    with ws_open(s.port) as ws:
        t0 = time.time()
        assert recv(ws)["type"] == "session.created"
        end = time.time() + 20
        ev = None
        while time.time() < end:
            try:
                ev = recv(ws, timeout=1)
            except TimeoutError:
                ws.send(json.dumps({"type": "input_audio_buffer.clear"}))  # busy, not idle
                continue
            if ev["type"] == "error":
                break
        assert ev["type"] == "error" and ev["error"]["code"] == "session_expired", ev
        assert 9.5 <= time.time() - t0 <= 15
        with pytest.raises(ConnectionClosed) as e:
            while True:
                ws.recv(timeout=10)
    assert e.value.rcvd is not None and e.value.rcvd.code == 1008, e.value


def test_s09_realtime_metrics(make_server, audio):
    s = make_server(script='[{"Start":0.0,"End":0.9,"Speaker":0,"Content":"Hello there."}]')
    with ws_open(s.port) as ws:
        manual_session(ws)
        assert s.metrics().get("vibevoice_realtime_sessions") == 1
        transcribe_item(ws, pcm16(audio, 1.0))
        ws.send(json.dumps({"type": "session.finish"}))
        recv_until(ws, "session.finished")
    end = time.time() + 5
    while s.metrics().get("vibevoice_realtime_sessions") != 0 and time.time() < end:
        time.sleep(0.05)
    m = s.metrics()
    assert m.get("vibevoice_realtime_sessions") == 0
    assert m.get("vibevoice_realtime_sessions_total", close_code="1000") == 1
    assert m.get("vibevoice_realtime_items_total", outcome="completed") == 1
    assert m.get("vibevoice_realtime_buffered_audio_seconds") == 0


def test_s12_1_max_item_and_buffer_full(make_server, audio):
    """§12.1: an uncommitted buffer reaching realtime.max_item_s is committed (reason max_duration);
    §12.3: with manual commits, an append past realtime.max_buffer_s is dropped with buffer_full."""
    s = make_server(script='[{"Start":0.0,"End":0.5,"Speaker":0,"Content":"Hi."}]', config={"realtime.max_item_s": 1})
    with ws_open(s.port) as ws:
        manual_session(ws)
        ws.send(pcm16(audio, 2.5))
        events = []
        while sum(e["type"] == COMPLETED for e in events) < 2:
            events.append(recv(ws))
        committed = [e for e in events if e["type"] == "input_audio_buffer.committed"]
        assert [(c["audio_start_ms"], c["audio_end_ms"], c["reason"]) for c in committed] == [
            (0, 1000, "max_duration"), (1000, 2000, "max_duration")], committed
        # The remaining 500 ms are still uncommitted: a commit takes exactly them.
        ws.send(json.dumps({"type": "input_audio_buffer.commit"}))
        ev = recv_until(ws, "input_audio_buffer.committed")[-1]
        assert (ev["audio_start_ms"], ev["audio_end_ms"], ev["reason"]) == (2000, 2500, "client"), ev
    s2 = make_server(script='[{"Start":0.0,"End":0.5,"Speaker":0,"Content":"Hi."}]', config={"realtime.max_buffer_s": 1})
    with ws_open(s2.port) as ws:
        manual_session(ws)
        ws.send(pcm16(audio, 0.8))
        ws.send(json.dumps({"type": "input_audio_buffer.append", "event_id": "big",
                            "audio": base64.b64encode(pcm16(audio, 0.5)).decode()}))
        ev = recv(ws)
        assert ev["type"] == "error" and ev["error"]["code"] == "buffer_full", ev
        assert ev["error"]["event_id"] == "big", ev
        ws.send(json.dumps({"type": "input_audio_buffer.commit"}))
        ev = recv(ws)
        assert ev["type"] == "input_audio_buffer.committed" and ev["audio_end_ms"] == 800, ev


INTERIM = "conversation.item.input_audio_transcription.interim"


def test_s12_1_interim_results(make_server, srv, audio):
    """§12.1 extension: with realtime.interim_interval_ms > 0 the pending item's uncommitted audio is
    re-transcribed while VAD hears speech; each interim names the item speech_started named, carries
    the transcript so far and where its audio ends, and none comes after the item's committed event.
    Off by default (the session-scoped server sends none)."""
    def run(server, pace):
        speech = pcm16(audio, 2.0)
        stream = speech + silence(1.0)
        with ws_open(server.port) as ws:
            assert recv(ws)["type"] == "session.created"
            ws.send(json.dumps({"type": "session.update", "session": {
                "type": "transcription", "audio": {"input": {"format": {"type": "audio/pcm", "rate": RATE}}}}}))
            assert recv(ws)["type"] == "session.updated"
            for i in range(0, len(stream), 3200):  # 100 ms frames, sent at twice real time
                ws.send(stream[i:i + 3200])
                time.sleep(pace)
            return recv_until(ws, {COMPLETED, FAILED}, timeout=120)

    events = run(make_server(script='[{"Start":0.0,"End":1.5,"Speaker":0,"Content":"Hello there."}]',
                             config={"realtime.interim_interval_ms": 200}), 0.05)
    types = [e["type"] for e in events]
    started = next(e for e in events if e["type"] == "input_audio_buffer.speech_started")
    committed_at = types.index("input_audio_buffer.committed")
    interims = [e for e in events if e["type"] == INTERIM]
    assert interims, types
    assert types.index(INTERIM) < committed_at and INTERIM not in types[committed_at:], types
    ends = [e["audio_end_ms"] for e in interims]
    assert ends == sorted(ends) and all(started["audio_start_ms"] < x <= 2600 for x in ends), (started, ends)
    for e in interims:
        assert e["item_id"] == started["item_id"], e
        assert isinstance(e["transcript"], str) and e["transcript"], e
    assert events[-1]["type"] == COMPLETED and events[-1]["item_id"] == started["item_id"], events[-1]

    plain = run(srv, 0.0)
    assert INTERIM not in [e["type"] for e in plain], plain
