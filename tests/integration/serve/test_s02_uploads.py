"""API.md §15 "§2 Uploads": C14–C33."""
import math
import socket
import time

import pytest

import vvhttp
from audio import duration_of
from conftest import KEY
from vvhttp import assert_error

T = "/v1/audio/transcriptions"


def test_c014_wrong_content_type_and_missing_boundary(srv, audio):
    r = srv.req("POST", T, body=b'{"file": "x"}', headers={"Content-Type": "application/json"})
    assert_error(r, 415, "unsupported_media_type")
    mp = vvhttp.Multipart()
    mp.file("file", audio.bytes("tiny.wav"))
    r = srv.req("POST", T, body=mp.body(), headers={"Content-Type": "multipart/form-data"})
    assert_error(r, 400, "invalid_multipart")


def test_c015_missing_closing_boundary(srv, audio):
    mp = vvhttp.Multipart()
    mp.file("file", audio.bytes("tiny.wav"))
    body = mp.body(closing=False)
    r = srv.req("POST", T, body=body, headers={"Content-Type": mp.content_type})
    assert_error(r, 400, "invalid_multipart")


def test_c016_half_close_mid_body(srv, audio):
    mp = vvhttp.Multipart()
    mp.file("file", audio.bytes("tiny.wav"))
    body = mp.body()
    with vvhttp.Conn(srv.port, timeout=20) as c:
        c.send(vvhttp.build_request("POST", T, {**srv.auth(), "Content-Type": mp.content_type,
                                                "Content-Length": str(len(body))}))
        c.send(body[:len(body) // 2])
        c.shutdown_write()
        r = c.read_response("POST")
        assert_error(r, 400, "invalid_multipart")
        assert c.wait_closed(5), "connection not closed after the error"


def _expect_request(srv, headers, body_len):
    h = {"Content-Length": str(body_len), "Expect": "100-continue"}
    h.update(headers)
    return vvhttp.build_request("POST", T, h)


def test_c017_expect_100_continue(make_server, srv, audio):
    s = make_server(config={"http.max_body_bytes": 1 << 20})
    mp = vvhttp.Multipart()
    mp.file("file", audio.bytes("tiny.wav"))
    # Oversized declared length: final 413, no 100 Continue, nothing of the body is needed.
    with vvhttp.Conn(s.port, timeout=10) as c:
        c.send(_expect_request(s, {**s.auth(), "Content-Type": mp.content_type}, (1 << 20) + 1))
        r = c.read_response("POST")
        assert r.interim == [], r.interim
        assert_error(r, 413, "request_too_large")
    # Invalid key: 401, no 100 Continue.
    body = mp.body()
    with vvhttp.Conn(s.port, timeout=10) as c:
        c.send(_expect_request(s, {"Authorization": "Bearer wrong-key-xyz", "Content-Type": mp.content_type},
                               len(body)))
        r = c.read_response("POST")
        assert r.interim == []
        assert_error(r, 401, "invalid_api_key")
    # Valid: 100 Continue first, then (after the body) 200.
    with vvhttp.Conn(s.port, timeout=60) as c:
        c.send(_expect_request(s, {**s.auth(), "Content-Type": mp.content_type}, len(body)))
        status, _, _ = c.read_head()
        assert status == 100
        c.send(body)
        r = c.read_response("POST")
        assert r.status == 200, r
        assert "text" in r.json()


def test_c018_oversized_body_written_whole_still_reads_413(make_server, audio):
    limit = 1 << 20
    s = make_server(config={"http.max_body_bytes": limit})
    mp = vvhttp.Multipart()
    mp.file("file", b"\0" * (4 * limit))
    body = mp.body()
    with vvhttp.Conn(s.port, timeout=20) as c:
        c.send(vvhttp.build_request("POST", T, {**s.auth(), "Content-Type": mp.content_type,
                                                "Content-Length": str(len(body))}))
        # Write everything like a naive client, ignoring errors from a server that stopped reading.
        try:
            c.send(body)
        except (BrokenPipeError, ConnectionResetError) as e:
            pytest.fail(f"server reset the connection while the client was writing: {e}")
        r = c.read_response("POST")
        assert_error(r, 413, "request_too_large")
        assert "close" in (r.headers.get("connection") or "").lower(), r.headers


def test_c019_chunked_upload_over_limit(make_server):
    limit = 1 << 20
    s = make_server(config={"http.max_body_bytes": limit})
    mp = vvhttp.Multipart()
    boundary = mp.boundary
    with vvhttp.Conn(s.port, timeout=20) as c:
        c.send(vvhttp.build_request("POST", T, {**s.auth(), "Content-Type": mp.content_type,
                                                "Transfer-Encoding": "chunked"}))
        first = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n\r\n"
                 ).encode()
        c.send(b"%x\r\n%s\r\n" % (len(first), first))
        sent = len(first)
        chunk = b"\1" * 65536
        # Stay below the limit: no response yet.
        while sent + len(chunk) <= limit - 1024:
            c.send(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            sent += len(chunk)
        c.settimeout(0.5)
        with pytest.raises(socket.timeout):
            c._fill()
        # Cross the limit: the 413 comes without waiting for the end of the body.
        c.settimeout(10)
        c.send(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        t0 = time.time()
        r = c.read_response("POST")
        assert time.time() - t0 < 5
        assert_error(r, 413, "request_too_large")
        assert c.wait_closed(5), "connection still open after the chunked 413"


def test_c020_header_block_and_uri_limits(srv):
    with vvhttp.Conn(srv.port, timeout=10) as c:
        c.send(vvhttp.build_request("GET", "/v1/models", {**srv.auth(), "X-Big": "a" * 20480}))
        r = c.read_response()
        assert_error(r, 431, "headers_too_large")
    with vvhttp.Conn(srv.port, timeout=10) as c:
        c.send(vvhttp.build_request("GET", "/v1/models?" + "q" * 10240, srv.auth()))
        r = c.read_response()
        assert_error(r, 414, "uri_too_long")


def test_c021_missing_and_duplicate_file(srv, audio):
    r = srv.transcribe(fields=[("model", "vibevoice-asr")])
    assert_error(r, 400, "missing_required_parameter", param="file")
    mp = vvhttp.Multipart()
    mp.file("file", audio.bytes("tiny.wav"))
    mp.file("file", audio.bytes("tiny.wav"))
    r = srv.req("POST", T, body=mp.body(), headers={"Content-Type": mp.content_type})
    assert_error(r, 400, "duplicate_parameter", param="file")


def test_c022_empty_file(srv):
    r = srv.transcribe(file=b"")
    assert_error(r, 400, "empty_file", param="file")


def test_c023_not_audio(srv, audio):
    r = srv.transcribe(file=audio.bytes("png.png"), filename="x.png", file_ctype="image/png")
    assert_error(r, 400, "invalid_file_format", param="file")
    r = srv.transcribe(file=b"./a.mp3", filename=None, file_ctype=None)
    e = assert_error(r, 400, "invalid_file_format", param="file")
    assert "file=@" in e["message"], e


def test_c024_filename_and_part_type_are_not_used(srv, audio):
    r = srv.transcribe(file=audio.bytes("tiny.wav"), filename="x.mp3", file_ctype="video/mp4")
    assert r.status == 200, r
    r = srv.transcribe(file=audio.bytes("tiny.wav"), filename=None, file_ctype=None)
    assert r.status == 200, r


@pytest.mark.parametrize("name", ["tiny.wav", "f32.wav", "mulaw.wav", "tiny.flac", "tiny.mp3", "opus.ogg",
                                  "vorbis.ogg", "tiny.webm", "tiny.m4a", "video.mp4"])
def test_c025_formats(srv, audio, name):
    r = srv.transcribe(file=audio.bytes(name), filename=name, fields=[("response_format", "verbose_json")])
    assert r.status == 200, (name, r)
    body = r.json()
    assert body["text"].strip(), body
    assert abs(body["duration"] - 3.0) < 0.2, body["duration"]  # codec priming/padding only


def test_c026_stereo_44k(srv, audio):
    p = audio.path("stereo44k.wav")
    r = srv.transcribe(file=p.read_bytes(), fields=[("response_format", "verbose_json")])
    assert r.status == 200, r
    assert abs(r.json()["duration"] - duration_of(p)) <= 0.001 + 1e-9, (r.json()["duration"], duration_of(p))


def test_c027_too_short_too_long_and_decode_bomb(srv, make_server, audio):
    r = srv.transcribe(file=audio.bytes("short005.wav"))
    assert_error(r, 400, "audio_too_short", param="file")
    # realtime.max_item_s must not exceed asr.max_audio_seconds (§14.3), so it comes down too.
    s = make_server(config={"asr.max_audio_seconds": 60, "realtime.max_item_s": 60})
    r = s.transcribe(file=audio.bytes("long61.wav"))
    assert_error(r, 400, "audio_too_long", param="file")
    bomb = audio.bytes("silence10h.flac")
    t0 = time.time()
    r = s.transcribe(file=bomb, filename="b.flac", timeout=30)
    assert_error(r, 400, "audio_too_long", param="file")
    assert time.time() - t0 < 5, f"decode bomb ({len(bomb)} bytes) took {time.time() - t0:.1f}s to refuse"


def test_c028_truncated_mp3(srv, audio):
    full = audio.bytes("long.mp3")
    a = srv.transcribe(file=full, filename="a.mp3", fields=[("response_format", "verbose_json")])
    assert a.status == 200, a
    b = srv.transcribe(file=full[:len(full) // 2], filename="a.mp3", fields=[("response_format", "verbose_json")])
    assert b.status == 200, b
    da, db = a.json()["duration"], b.json()["duration"]
    assert abs(db - da / 2) < 0.05 * da, (da, db)


def test_truncated_wav_is_transcribed(srv, audio):
    """§2.6 (no C-number): a file whose data simply ends early is transcribed up to the truncation."""
    full = audio.bytes("tiny.wav")
    r = srv.transcribe(file=full[:len(full) // 2], fields=[("response_format", "verbose_json")])
    assert r.status == 200, r
    assert abs(r.json()["duration"] - 1.5) < 0.01, r.json()["duration"]


@pytest.fixture(scope="module")
def srv_silent(server_factory):
    """The scripted decoder answers an empty array: what the model says for silence."""
    return server_factory(script="[]")


def test_c029_silence(srv_silent, audio):
    wav = audio.bytes("silence10.wav")
    r = srv_silent.transcribe(file=wav)
    assert r.status == 200, r
    assert r.json()["text"] == ""
    r = srv_silent.transcribe(file=wav, fields=[("response_format", "verbose_json")])
    assert r.status == 200 and r.json()["segments"] == [], r
    r = srv_silent.transcribe(file=wav, fields=[("response_format", "srt")])
    assert r.status == 200 and r.body == b"", r
    r = srv_silent.transcribe(file=wav, fields=[("response_format", "vtt")])
    assert r.status == 200 and r.body == b"WEBVTT\n\n", r


def test_c030_unknown_field_and_extra_file_part(srv, audio):
    base = srv.transcribe(file=audio.bytes("tiny.wav"))
    mp = vvhttp.Multipart()
    mp.file("file", audio.bytes("tiny.wav"))
    mp.field("foo", "bar")
    mp.file("attachment", b"whatever bytes", filename="notes.txt", ctype="text/plain")
    r = srv.req("POST", T, body=mp.body(), headers={"Content-Type": mp.content_type})
    assert r.status == 200, r
    assert r.json() == base.json()


def test_c031_invalid_utf8_field(srv, audio):
    mp = vvhttp.Multipart()
    mp.file("file", audio.bytes("tiny.wav"))
    mp.field("language", b"\xc3\x28")
    r = srv.req("POST", T, body=mp.body(), headers={"Content-Type": mp.content_type})
    assert_error(r, 400, "invalid_value", param="language")


def test_c032_refusal_order(srv):
    huge = str(10 * (1 << 30))
    with vvhttp.Conn(srv.port, timeout=10) as c:
        c.send(vvhttp.build_request("POST", T, {"Authorization": "Bearer wrong-key-123",
                                                "Content-Type": "multipart/form-data; boundary=x",
                                                "Content-Length": huge}))
        assert_error(c.read_response("POST"), 401, "invalid_api_key")
    with vvhttp.Conn(srv.port, timeout=10) as c:
        c.send(vvhttp.build_request("POST", T, {**srv.auth(), "Content-Type": "text/plain",
                                                "Content-Length": huge}))
        assert_error(c.read_response("POST"), 415, "unsupported_media_type")


def test_c033_content_encoding(srv, audio):
    import gzip
    mp = vvhttp.Multipart()
    mp.file("file", audio.bytes("tiny.wav"))
    r = srv.req("POST", T, body=gzip.compress(mp.body()),
                headers={"Content-Type": mp.content_type, "Content-Encoding": "gzip"})
    assert_error(r, 415, "unsupported_media_type")
