"""API.md §15 "§3 Transcriptions": C34–C51."""
import json
import math
import pathlib
import re

import pytest

from conftest import SCRIPT_SEGMENT_TEXTS
from vvhttp import assert_error

SRT_TIME = r"\d\d:\d\d:\d\d,\d{3} --> \d\d:\d\d:\d\d,\d{3}"
VTT_TIME = r"\d\d:\d\d:\d\d\.\d{3} --> \d\d:\d\d:\d\d\.\d{3}"


def fmt(srv, audio, name="tiny.wav", **fields):
    return srv.transcribe(file=audio.bytes(name), fields=list(fields.items()))


def test_c034_default_json(srv, audio):
    r = fmt(srv, audio)
    assert r.status == 200, r
    assert r.headers.get("content-type") == "application/json"
    body = r.json()
    assert sorted(body) == ["text", "usage"], body
    dur = float(r.headers.get("x-vibevoice-audio-duration"))
    assert body["usage"] == {"type": "duration", "seconds": max(1, math.ceil(dur))}
    assert re.search(rb'"seconds"\s*:\s*\d+[,}]', r.body), r.body  # a JSON integer, not 3.0
    assert isinstance(body["usage"]["seconds"], int)


def test_c035_text_format(srv_model, audio):
    j = fmt(srv_model, audio, response_format="json", temperature="0")
    t = fmt(srv_model, audio, response_format="text", temperature="0")
    assert j.status == t.status == 200, (j, t)
    assert t.headers.get("content-type") == "text/plain; charset=utf-8"
    assert t.body.decode("utf-8") == j.json()["text"] + "\n"


def parse_srt(body):
    assert body.endswith("\n\n"), body[-20:]
    cues = body[:-2].split("\n\n")
    out = []
    for i, cue in enumerate(cues, 1):
        lines = cue.split("\n")
        assert lines[0] == str(i), cue
        assert re.fullmatch(SRT_TIME, lines[1]), cue
        out.append((lines[1], "\n".join(lines[2:])))
    return out


def test_c036_srt(srv, audio):
    r = fmt(srv, audio, name="two.wav", response_format="srt")
    assert r.status == 200, r
    assert r.headers.get("content-type") == "text/plain; charset=utf-8"
    cues = parse_srt(r.body.decode())
    assert len(cues) == len(SCRIPT_SEGMENT_TEXTS)
    for _, text in cues:
        assert text.startswith("[A] ") or text.startswith("[B] "), text
    assert {t[:4] for _, t in cues} == {"[A] ", "[B] "}


def test_c037_vtt(srv, audio):
    r = fmt(srv, audio, name="two.wav", response_format="vtt")
    assert r.status == 200, r
    assert r.headers.get("content-type") == "text/plain; charset=utf-8"
    body = r.body.decode()
    assert body.startswith("WEBVTT\n\n")
    cues = body[len("WEBVTT\n\n"):].rstrip("\n").split("\n\n")
    assert cues and cues[0]
    for cue in cues:
        lines = cue.split("\n")
        assert re.fullmatch(VTT_TIME, lines[0]), cue
        assert lines[1].startswith("<v A>") or lines[1].startswith("<v B>"), cue
    r = fmt(srv, audio, name="two.wav", response_format="vtt", speaker_labels="false")
    assert r.status == 200
    assert "<v" not in r.body.decode()


def check_verbose(body, duration=None):
    for k in ("task", "language", "duration", "text", "segments", "usage", "finish_reason"):
        assert k in body, (k, body)
    assert body["task"] == "transcribe"
    dur = body["duration"]
    for i, s in enumerate(body["segments"]):
        assert s["id"] == i and isinstance(s["id"], int)
        assert isinstance(s["seek"], int)
        for k in ("start", "end", "temperature", "avg_logprob", "compression_ratio", "no_speech_prob"):
            assert isinstance(s[k], (int, float)) and not isinstance(s[k], bool), (k, s)
        assert isinstance(s["text"], str)
        assert isinstance(s["tokens"], list) and all(isinstance(t, int) for t in s["tokens"])
        assert re.fullmatch(r"[A-Z]+", s["speaker"]), s
        assert 0 <= s["start"] <= s["end"] <= dur + 1e-9, (s, dur)


def test_c038_verbose_json(srv, audio):
    r = fmt(srv, audio, name="two.wav", response_format="verbose_json")
    assert r.status == 200, r
    body = r.json()
    check_verbose(body)
    assert len({s["speaker"] for s in body["segments"]}) >= 2
    assert body["usage"] == {"type": "duration", "seconds": max(1, math.ceil(body["duration"]))}


def test_c039_word_timestamps(srv, audio):
    tiny = audio.bytes("tiny.wav")
    r = srv.transcribe(file=tiny, fields=[("response_format", "verbose_json"),
                                          ("timestamp_granularities[]", "word"),
                                          ("timestamp_granularities[]", "segment")])
    assert r.status == 200, r
    assert r.headers.get("x-vibevoice-word-timestamps") == "interpolated"
    body = r.json()
    assert body["segments"] and body["words"]
    words = body["words"]
    prev_end = 0.0
    for w in words:
        assert set(w) >= {"word", "start", "end"} and w["word"]
        assert w["start"] <= w["end"]
        assert w["start"] >= prev_end - 1e-9, "words overlap or are out of order"
        prev_end = w["end"]
        assert any(s["start"] - 1e-9 <= w["start"] and w["end"] <= s["end"] + 1e-9 for s in body["segments"]), w
    r2 = srv.transcribe(file=tiny, fields=[("response_format", "verbose_json"),
                                           ("timestamp_granularities[]", "word")])
    assert r2.status == 200
    assert "words" in r2.json() and "segments" not in r2.json()
    r3 = srv.transcribe(file=tiny, fields=[("response_format", "verbose_json"),
                                           ("timestamp_granularities", "word,segment")])
    assert r3.status == 200
    assert r3.json() == body


def test_c040_diarized_json(srv, audio):
    r = fmt(srv, audio, name="two.wav", response_format="diarized_json")
    assert r.status == 200, r
    body = r.json()
    for k in ("task", "duration", "text", "segments", "usage"):
        assert k in body
    assert [s["id"] for s in body["segments"]] == [f"seg_{i}" for i in range(len(body["segments"]))]
    assert body["segments"]
    assert all(s["type"] == "transcript.text.segment" for s in body["segments"])
    assert body["segments"][0]["speaker"] == "A"


@pytest.fixture(scope="module")
def srv_cjk(server_factory):
    return server_factory(script='[{"Start":0.0,"End":1.0,"Speaker":0,"Content":"你好世界。"},'
                                 '{"Start":1.0,"End":2.0,"Speaker":1,"Content":"今天天气很好"},'
                                 '{"Start":2.0,"End":2.5,"Speaker":0,"Content":"好的"}]')


def test_c041_text_joining(srv, srv_cjk, audio):
    r = fmt(srv, audio, name="two.wav", response_format="verbose_json")
    body = r.json()
    assert body["text"] == " ".join(s["text"] for s in body["segments"])
    assert body["text"] == " ".join(SCRIPT_SEGMENT_TEXTS)
    r = srv_cjk.transcribe(file=audio.bytes("mandarin.wav"), fields=[("response_format", "verbose_json")])
    assert r.status == 200, r
    assert r.json()["text"] == "你好世界。今天天气很好好的"


def test_c042_response_format_validation_order(srv, audio):
    r = fmt(srv, audio, response_format="xml")
    assert_error(r, 400, "invalid_value", param="response_format")
    r = fmt(srv, audio, response_format="xml", temperature="9")
    assert_error(r, 400, "invalid_value", param="response_format")


def test_c043_temperature(srv, audio):
    assert_error(fmt(srv, audio, temperature="1.5"), 400, "invalid_value", param="temperature")
    assert_error(fmt(srv, audio, temperature="abc"), 400, "invalid_type", param="temperature")
    assert_error(fmt(srv, audio, temperature="NaN"), 400, "invalid_value", param="temperature")


def test_c044_language(srv, audio):
    assert_error(fmt(srv, audio, language="english"), 400, "invalid_value", param="language")
    assert fmt(srv, audio, language="en").status == 200
    assert fmt(srv, audio, language="zh-Hant").status == 200
    assert fmt(srv, audio, language="en", response_format="verbose_json").json()["language"] == "en"
    assert fmt(srv, audio, response_format="verbose_json").json()["language"] == "unknown"


def token_bytes(tokenizer_json):
    """id -> raw bytes of a byte-level BPE tokenizer.json (GPT-2 byte-to-unicode mapping reversed)."""
    import json as _json
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    dec = {chr(c): b for b, c in zip(bs, cs)}
    t = _json.loads(pathlib.Path(tokenizer_json).read_text())
    out = {i: bytes(dec[ch] for ch in tok) for tok, i in t["model"]["vocab"].items()}
    for a in t.get("added_tokens", []):
        out[a["id"]] = a["content"].encode()
    return out


def test_c045_logprobs(srv, audio, model_paths):
    r = srv.transcribe(file=audio.bytes("tiny.wav"), fields=[("include[]", "logprobs")])
    assert r.status == 200, r
    body = r.json()
    lps = body["logprobs"]
    assert isinstance(lps, list) and lps
    joined = b""
    for e in lps:
        assert set(e) >= {"token", "logprob", "bytes"}
        assert e["logprob"] <= 0
        assert all(isinstance(b, int) and 0 <= b <= 255 for b in e["bytes"])
        raw = bytes(e["bytes"])
        joined += raw
        try:
            assert e["token"] == raw.decode("utf-8"), e
        except UnicodeDecodeError:
            assert "\ufffd" in e["token"], e
    # The tokens that carry transcript text cover every segment's text.
    for t in SCRIPT_SEGMENT_TEXTS:
        assert t.encode() in joined.replace(b"\\'", b"'"), (t, joined)
    # `bytes` are the tokens' raw bytes: the same tokens' ids (verbose_json segments[].tokens, the
    # same scripted answer) decoded with the tokenizer's byte-level vocabulary give the same bytes.
    v = srv.transcribe(file=audio.bytes("tiny.wav"), fields=[("response_format", "verbose_json")]).json()
    ids = [i for seg in v["segments"] for i in seg["tokens"]]
    raw = token_bytes(model_paths["tokenizer"])
    assert b"".join(raw[i] for i in ids) == joined
    assert [bytes(e["bytes"]) for e in lps] == [raw[i] for i in ids]


def test_c046_known_speaker_names(srv, audio):
    r = srv.transcribe(file=audio.bytes("tiny.wav"), fields=[("known_speaker_names[]", "alice")])
    assert_error(r, 400, "unsupported_parameter", param="known_speaker_names")


def test_c047_chunking_strategy(srv, audio):
    tiny = audio.bytes("tiny.wav")
    for fields in ([("chunking_strategy", "auto")],
                   [("chunking_strategy[type]", "server_vad"), ("chunking_strategy[threshold]", "0.4")],
                   [("chunking_strategy", '{"type":"server_vad"}')]):
        r = srv.transcribe(file=tiny, fields=fields)
        assert r.status == 200, (fields, r)
    r = srv.transcribe(file=tiny, fields=[("chunking_strategy[type]", "server_vad"),
                                          ("chunking_strategy[threshold]", "7")])
    assert_error(r, 400, "invalid_value")


def test_c048_prompt_and_keywords(srv, audio):
    tiny = audio.bytes("tiny.wav")
    r = srv.transcribe(file=tiny, fields=[("keywords[]", "Kubernetes"), ("keywords[]", "Grafana"),
                                          ("prompt", "A meeting about the budget.")])
    assert r.status == 200, r
    r = srv.transcribe(file=tiny, fields=[("prompt", "word " * 20000)])
    assert_error(r, 400, "invalid_value", param="prompt")


def test_c049_temperature_zero_is_deterministic(srv_model, audio):
    a = fmt(srv_model, audio, response_format="verbose_json", temperature="0")
    b = fmt(srv_model, audio, response_format="verbose_json", temperature="0")
    assert a.status == b.status == 200
    assert a.body == b.body


def test_c050_success_headers(srv, audio):
    r = fmt(srv, audio)
    assert r.status == 200
    assert re.fullmatch(r"\d+\.\d{3}", r.headers.get("x-vibevoice-audio-duration") or ""), r.headers
    assert abs(float(r.headers.get("x-vibevoice-audio-duration")) - 3.0) <= 0.001
    assert r.headers.get("x-vibevoice-finish-reason") == "stop"
    assert (r.headers.get("server") or "").startswith("vibevoice-server/")


def test_c051_length_and_repetition(make_server, audio):
    s = make_server(script="[" + ",".join(
        '{"Start":%d.0,"End":%d.5,"Speaker":0,"Content":"This is sentence number %d of a long talk."}'
        % (i, i, i) for i in range(40)) + "]", config={"asr.max_new_tokens": 64})
    r = s.transcribe(file=audio.bytes("long.wav"), fields=[("response_format", "verbose_json")], timeout=300)
    assert r.status == 200, r
    assert r.headers.get("x-vibevoice-finish-reason") == "length"
    assert r.json()["finish_reason"] == "length"
    assert r.json()["text"].strip()
    # Five identical 20-character segments with no recovery allowed: cut to one, `repetition`.
    seg = "Twenty chars here ok"
    assert len(seg) == 20
    rep = make_server(script="[" + ",".join(
        '{"Start":%d.0,"End":%d.5,"Speaker":0,"Content":"%s"}' % (i, i, seg) for i in range(5)) + "]",
        config={"asr.repetition_retries": 0})
    r = rep.transcribe(file=audio.bytes("tiny.wav"), fields=[("response_format", "verbose_json")])
    assert r.status == 200, r
    body = r.json()
    assert body["finish_reason"] == "repetition"
    assert r.headers.get("x-vibevoice-finish-reason") == "repetition"
    assert [s["text"] for s in body["segments"]] == [seg]
