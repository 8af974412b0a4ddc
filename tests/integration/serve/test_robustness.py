"""API.md §15 "Robustness (fuzz)": C116–C120."""
import base64
import hashlib
import json
import os
import random
import socket
import struct
import time

import pytest

import vvhttp
from vvhttp import assert_error, check_envelope

T = "/v1/audio/transcriptions"


def mutate(rng, body, boundary):
    b = bytearray(body)
    op = rng.randrange(8)
    if op == 0 and b:  # truncate
        del b[rng.randrange(len(b)):]
    elif op == 1 and b:  # flip bytes
        for _ in range(rng.randint(1, 16)):
            b[rng.randrange(len(b))] = rng.randrange(256)
    elif op == 2:  # damage the boundary
        i = bytes(b).find(boundary.encode())
        if i >= 0:
            b[i + rng.randrange(len(boundary))] ^= 0xFF
    elif op == 3:  # damage part headers
        i = bytes(b).find(b"Content-Disposition")
        if i >= 0:
            b[i:i + rng.randint(1, 40)] = os.urandom(rng.randint(0, 40))
    elif op == 4:  # random file bytes
        i = bytes(b).find(b"\r\n\r\n")
        if i >= 0:
            b[i + 4:i + 4 + 2048] = os.urandom(2048)
    elif op == 5:  # insert junk
        i = rng.randrange(len(b) + 1)
        b[i:i] = os.urandom(rng.randint(1, 200))
    elif op == 6:  # duplicate a slice
        i = rng.randrange(len(b) + 1)
        b[i:i] = b[max(0, i - 300):i]
    else:  # remove CRLFs
        b = bytearray(bytes(b).replace(b"\r\n", b"\n", rng.randint(1, 5)))
    return bytes(b)


def test_c116_multipart_fuzz(make_server, audio):
    # The fake engine (test_hooks.h): this item is about the HTTP and multipart layers.
    s = make_server(script='[{"Start":0.0,"End":0.5,"Speaker":0,"Content":"ok"}]',
                    hooks={"VIBEVOICE_TEST_FAKE_ENGINE": 1}, config={"http.body_idle_timeout_s": 2})
    rng = random.Random(116)
    wav = audio.bytes("half.wav")  # 0.5 s of speech
    mp = vvhttp.Multipart(boundary="fuzzBoundary123")
    mp.file("file", wav)
    mp.field("response_format", "json")
    mp.field("temperature", "0")
    base = mp.body()
    rss0 = s.rss_bytes()
    statuses = {}
    c = vvhttp.Conn(s.port, timeout=30)
    n = int(os.environ.get("VV_FUZZ_N", "10000"))
    for i in range(n):
        body = mutate(rng, base, mp.boundary)
        req = vvhttp.build_request("POST", T, {**s.auth(), "Content-Type": mp.content_type}, body)
        for attempt in range(2):
            try:
                c.send(req)
                r = c.read_response("POST")
                break
            except (vvhttp.Closed, OSError):
                c.close()
                c = vvhttp.Conn(s.port, timeout=30)
        else:
            pytest.fail(f"no response to mutation {i}")
        statuses[r.status] = statuses.get(r.status, 0) + 1
        assert r.status in (200, 400, 408, 413, 415), (i, r)
        if r.status != 200:
            check_envelope(r.json())
        if r.closed:
            c.close()
            c = vvhttp.Conn(s.port, timeout=30)
    c.close()
    assert s.proc.poll() is None, "server died"
    growth = s.rss_bytes() - rss0
    print(f"C116: {n} mutated bodies, statuses {statuses}, RSS growth {growth / 2**20:.1f} MiB")
    assert sum(statuses.values()) == n
    assert growth < 50 * (1 << 20), f"RSS grew {growth / 2**20:.1f} MiB; statuses {statuses}"


def json_cases(rng):
    """(body, hostile): hostile bodies must be refused; random mutations may happen to stay valid."""
    good = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    m = '"messages": [{"role": "user", "content": "hi"}]'
    for body in ["[" * 10000 + "]" * 10000,
                 '{"messages":' + "[" * 10000 + "]" * 10000 + "}",
                 '{"a":' * 10000 + "1" + "}" * 10000,
                 '{%s, "x": %s}' % (m, "[" * 65 + "]" * 65),
                 '{%s, "max_tokens": 1e400}' % m,
                 '{%s, "max_tokens": 99999999999999999999999999}' % m,
                 '{%s, "temperature": -1e308}' % m,
                 '{%s, "seed": 1e999}' % m,
                 '{"messages": "hi"}',
                 '{"messages": [{"role": 1, "content": "hi"}]}',
                 '{"messages": [{"role": "user", "content": 5}]}',
                 '{%s, "max_tokens": "2"}' % m,
                 '{%s, "stream": "yes"}' % m,
                 b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}',
                 b'{"messages": [{"role": "user", "content": "hi"}], "\xc0\xaf": 1}',
                 '{%s, %s}' % (m, m),
                 '{%s, "max_tokens": 2, "max_tokens": 3}' % m,
                 "{}", "null", '"string"', "", "{" * 100, '{"messages": [}', "\ufeff{}"]:
        yield body, True
    raw = json.dumps(good)
    for _ in range(400):
        b = bytearray(raw.encode())
        for _ in range(rng.randint(1, 4)):
            b[rng.randrange(len(b))] = rng.choice(b'{}[]",:\\\x00\xff')
        yield bytes(b), False


def test_c117_chat_json_fuzz(srv):
    rng = random.Random(117)
    allowed = {"invalid_json", "invalid_type", "invalid_value", "missing_required_parameter"}
    for body, hostile in json_cases(rng):
        data = body.encode() if isinstance(body, str) else body
        try:
            obj = json.loads(data)
            valid = isinstance(obj, dict)
        except (ValueError, UnicodeDecodeError, RecursionError):
            valid = False
        t0 = time.time()
        r = srv.chat(data, timeout=30)
        assert time.time() - t0 < 10, data[:100]
        if r.status == 200:
            assert valid and not hostile, (data[:100], r)
            continue
        assert r.status == 400, (data[:100], r)
        e = check_envelope(r.json())
        assert e["code"] in allowed, (data[:100], e)
        if not valid:
            assert e["code"] == "invalid_json", (data[:100], e)
    assert srv.proc.poll() is None
    assert srv.req("GET", "/health", auth=False).status == 200


def ws_connect(port, key):
    c = vvhttp.Conn(port, timeout=10)
    wskey = base64.b64encode(os.urandom(16)).decode()
    c.send(vvhttp.build_request("GET", "/v1/realtime?intent=transcription", {
        "Authorization": f"Bearer {key}", "Upgrade": "websocket", "Connection": "Upgrade",
        "Sec-WebSocket-Key": wskey, "Sec-WebSocket-Version": "13"}))
    status, _, headers = c.read_head()
    assert status == 101, (status, headers)
    accept = base64.b64encode(hashlib.sha1((wskey + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest())
    assert headers.get("sec-websocket-accept") == accept.decode()
    return c


def ws_frame(opcode, payload, fin=True, mask=True, rsv=0, length=None):
    b0 = (0x80 if fin else 0) | (rsv << 4) | opcode
    n = len(payload) if length is None else length
    mbit = 0x80 if mask else 0
    if n < 126:
        head = struct.pack("!BB", b0, mbit | n)
    elif n < 65536:
        head = struct.pack("!BBH", b0, mbit | 126, n)
    else:
        head = struct.pack("!BBQ", b0, mbit | 127, n)
    if mask:
        key = os.urandom(4)
        payload = bytes(p ^ key[i % 4] for i, p in enumerate(payload))
        head += key
    return head + payload


def ws_close_code(c, timeout=5):
    """Reads frames until a close frame; returns its code (None if the TCP connection just ends)."""
    end = time.time() + timeout
    c.settimeout(timeout)
    try:
        while time.time() < end:
            h = c._read_exact(2)
            op = h[0] & 0x0F
            n = h[1] & 0x7F
            if n == 126:
                n = struct.unpack("!H", c._read_exact(2))[0]
            elif n == 127:
                n = struct.unpack("!Q", c._read_exact(8))[0]
            payload = c._read_exact(n)
            if op == 0x8:
                return struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else 1005
    except (vvhttp.Closed, socket.timeout, OSError):
        return None
    return None


def ws_read_frame(c):
    """One server frame: (opcode, payload)."""
    h = c._read_exact(2)
    n = h[1] & 0x7F
    if n == 126:
        n = struct.unpack("!H", c._read_exact(2))[0]
    elif n == 127:
        n = struct.unpack("!Q", c._read_exact(8))[0]
    return h[0] & 0x0F, c._read_exact(n)


def ws_events_until(c, want, timeout=10):
    """Reads frames (answering nothing) until a text event of type `want`; returns the event types
    seen, or raises AssertionError on a close frame / timeout."""
    c.settimeout(timeout)
    seen = []
    end = time.time() + timeout
    while time.time() < end:
        op, payload = ws_read_frame(c)
        if op == 0x8:
            raise AssertionError(f"closed {payload[:2].hex()} while waiting for {want}: {seen}")
        if op == 0x1:
            ev = json.loads(payload)
            seen.append(ev["type"])
            if ev["type"] == want:
                return seen
        else:
            seen.append(f"opcode {op}")
    raise AssertionError(f"no {want} within {timeout}s: {seen}")


def test_c118_websocket_frame_fuzz(srv, audio):
    """Hostile frames end only their own connection, with 1002/1007/1009 (or are handled as normal
    traffic); a well-behaved session open meanwhile keeps working (it transcribes afterwards)."""
    from conftest import KEY
    cases = {
        "unmasked": (ws_frame(0x1, b'{"type":"x"}', mask=False), {1002}),
        "bad opcode": (ws_frame(0x3, b"x"), {1002}),
        "reserved opcode control": (ws_frame(0xB, b""), {1002}),
        "reserved bits": (ws_frame(0x1, b"{}", rsv=4), {1002}),
        "invalid utf-8": (ws_frame(0x1, b"\xc3\x28"), {1007}),
        "invalid utf-8 across fragments": (ws_frame(0x1, b"\xe2\x82", fin=False) + ws_frame(0x0, b"\x28"), {1007}),
        "huge length": (ws_frame(0x2, b"", length=20 << 20), {1009, 1002}),
        "bogus 64-bit length": (struct.pack("!BBQ", 0x82, 0xFF, 1 << 63) + os.urandom(4), {1002, 1009}),
        # 9 MiB + a second 9 MiB fragment: the message passes realtime.max_message_bytes (16 MiB).
        "oversized across fragments": (b"".join([struct.pack("!BBQ", 0x02, 0xFF, 9 << 20), b"\0" * 4, b"\0" * (9 << 20),
                                                 struct.pack("!BBQ", 0x80, 0xFF, 9 << 20), b"\0" * 4]), {1009}),
        "continuation without start": (ws_frame(0x0, b"abc"), {1002}),
        "fragmented control": (ws_frame(0x9, b"p", fin=False), {1002}),
        "control frame too long": (ws_frame(0x9, b"p" * 126), {1002}),
        "new message inside a fragmented one": (ws_frame(0x1, b"{", fin=False) + ws_frame(0x1, b"}"), {1002}),
        "non-minimal length": (struct.pack("!BBH", 0x82, 0xFE, 5) + b"\0" * 4 + b"\0" * 5, {1002, None}),
        "bad close code": (ws_frame(0x8, struct.pack("!H", 999)), {1002}),
        "close reason invalid utf-8": (ws_frame(0x8, struct.pack("!H", 1000) + b"\xff"), {1007, 1002}),
    }
    bystander = ws_connect(srv.port, KEY)
    assert ws_events_until(bystander, "session.created")[-1] == "session.created"
    bystander.send(ws_frame(0x1, json.dumps({"type": "session.update", "session": {"type": "transcription", "audio": {
        "input": {"format": {"type": "audio/pcm", "rate": 16000}, "turn_detection": None}}}}).encode()))
    ws_events_until(bystander, "session.updated")
    for name, (frame, codes) in cases.items():
        c = ws_connect(srv.port, KEY)
        c.send(frame)
        code = ws_close_code(c)
        c.close()
        assert code in codes, (name, code)
    # Random frames: random header bits, lengths and payloads after a valid session start.
    rng = random.Random(118)
    for i in range(60):
        bystander.send(ws_frame(0x9, b"keep"))  # the bystander stays live (its pongs are read later)
        c = ws_connect(srv.port, KEY)
        data = b""
        for _ in range(rng.randint(1, 4)):
            op = rng.choice([0x0, 0x1, 0x2, 0x3, 0x8, 0x9, 0xA, 0xF])
            payload = bytes(rng.randrange(256) for _ in range(rng.choice([0, 1, 5, 125, 126, 300])))
            data += ws_frame(op, payload, fin=rng.random() < 0.7, mask=rng.random() < 0.9,
                             rsv=rng.choice([0, 0, 0, 1, 2, 4]))
        if rng.random() < 0.3:
            data = data[:rng.randrange(1, len(data) + 1)]
        c.send(data)
        code = ws_close_code(c, timeout=1.0)
        c.close()
        # 1000: the peer echoes a close frame the fuzzer sent; None: still open (normal operation).
        assert code in (1002, 1007, 1009, 1000, None), (i, data[:64], code)
    # Normal operation: fragmented text with a ping in the middle → a pong, then the event's answer.
    c = ws_connect(srv.port, KEY)
    ws_events_until(c, "session.created")
    c.send(ws_frame(0x1, b'{"type":"input_audio_', fin=False) + ws_frame(0x9, b"ping") +
           ws_frame(0x0, b'buffer.', fin=False) + ws_frame(0x0, b'clear"}'))
    seen = ws_events_until(c, "input_audio_buffer.cleared")
    assert "opcode 10" in seen, seen  # the pong came mid-message
    c.send(ws_frame(0x8, struct.pack("!H", 1000)))
    assert ws_close_code(c) == 1000
    c.close()
    # The bystander still works end to end: 1 s of speech committed and transcribed.
    with __import__("wave").open(str(audio.path("tiny.wav"))) as w:
        pcm = w.readframes(16000)
    bystander.send(ws_frame(0x2, pcm))
    bystander.send(ws_frame(0x1, b'{"type":"input_audio_buffer.commit"}'))
    seen = ws_events_until(bystander, "conversation.item.input_audio_transcription.completed", timeout=120)
    assert "input_audio_buffer.committed" in seen, seen
    bystander.send(ws_frame(0x8, struct.pack("!H", 1000)))
    assert ws_close_code(bystander) == 1000
    bystander.close()
    assert srv.proc.poll() is None
    assert srv.req("GET", "/health", auth=False).status == 200


def test_c119_many_slow_clients(make_server, audio):
    s = make_server(script='[{"Start":0.0,"End":1.0,"Speaker":0,"Content":"Hello."}]',
                    config={"http.header_timeout_s": 3, "http.body_idle_timeout_s": 3})
    req = vvhttp.build_request("GET", "/v1/models", s.auth())
    conns = [vvhttp.Conn(s.port, timeout=10) for _ in range(200)]
    alive = set(range(200))
    t0 = time.time()
    normal = None
    i = 0
    while alive and time.time() - t0 < 12:
        for k in list(alive):
            try:
                conns[k].send(req[i:i + 1])
            except OSError:
                alive.discard(k)
        i += 1
        if normal is None and time.time() - t0 > 1:
            normal = s.transcribe(file=audio.bytes("tiny.wav"), timeout=30)
        for k in list(alive):
            conns[k].sock.setblocking(False)
            try:
                d = conns[k].sock.recv(65536)
                if d == b"":
                    alive.discard(k)
            except BlockingIOError:
                pass
            except OSError:
                alive.discard(k)
            finally:
                try:
                    conns[k].sock.setblocking(True)
                except OSError:
                    pass
        time.sleep(1)
    for c in conns:
        c.close()
    assert normal is not None and normal.status == 200, normal
    assert not alive, f"{len(alive)} slow clients still connected after {time.time() - t0:.1f}s"


def test_c120_header_abuse(srv):
    hs = [(f"X-F{i:04d}", "aaaa") for i in range(2000)]  # 2000 fields of ~10 bytes = 20 KB
    with vvhttp.Conn(srv.port, timeout=10) as c:
        c.send(vvhttp.build_request("GET", "/v1/models", [("Authorization", srv.auth()["Authorization"])] + hs))
        assert_error(c.read_response(), 431, "headers_too_large")
    with vvhttp.Conn(srv.port, timeout=10) as c:
        c.send(b"GET /v1/models HTTP/1.1\r\nHost: x\r\nThis line has no colon\r\n\r\n")
        r = c.read_response()
        assert_error(r, 400, "bad_http_request")
        assert c.wait_closed(5)
    with vvhttp.Conn(srv.port, timeout=10) as c:
        c.send(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: " +
               srv.auth()["Authorization"].encode() +
               b"\r\nContent-Type: application/json\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n"
               b"0\r\n\r\n")
        r = c.read_response("POST")
        assert_error(r, 400, "bad_http_request")
        assert c.wait_closed(5)
