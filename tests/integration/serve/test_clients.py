"""API.md §15 "Real clients": C107–C113 (C114/C115 are [not here]). The official `openai` Python SDK,
curl, and LiteLLM."""
import json
import re
import shutil
import subprocess
import time

import pytest

openai = pytest.importorskip("openai")

from conftest import KEY, SCRIPT_SEGMENT_TEXTS  # noqa: E402
from test_s13_admission import LONG_SCRIPT, SLOW, wait_until  # noqa: E402


def client(srv, key=None, **kw):
    return openai.OpenAI(base_url=srv.base_url + "/v1", api_key=key or KEY, **kw)


def test_c107_sdk_transcriptions_every_format(srv, audio):
    c = client(srv)
    p = audio.path("two.wav")
    with open(p, "rb") as f:
        t = c.audio.transcriptions.create(model="vibevoice-asr", file=f)
    assert isinstance(t, openai.types.audio.Transcription)
    assert t.text == " ".join(SCRIPT_SEGMENT_TEXTS)
    assert t._request_id
    for fmt in ("text", "srt", "vtt"):
        with open(p, "rb") as f:
            out = c.audio.transcriptions.create(model="vibevoice-asr", file=f, response_format=fmt)
        assert isinstance(out, str) and out, fmt
    with open(p, "rb") as f:
        v = c.audio.transcriptions.create(model="whisper-1", file=f, response_format="verbose_json")
    assert isinstance(v, openai.types.audio.TranscriptionVerbose)
    assert isinstance(v.segments[0].start, float)
    assert v.duration > 10
    with open(p, "rb") as f:
        d = c.audio.transcriptions.create(model="gpt-4o-transcribe-diarize", file=f, response_format="diarized_json")
    assert type(d).__name__ == "TranscriptionDiarized", type(d)
    assert d.segments[0].speaker == "A"


def test_c108_sdk_streaming(srv, audio):
    c = client(srv)
    types = openai.types.audio

    def collect(**kw):
        with open(audio.path("two.wav"), "rb") as f:
            stream = c.audio.transcriptions.create(model="vibevoice-asr", file=f, stream=True, **kw)
            return list(stream)
    events = collect()
    deltas = [e for e in events if isinstance(e, types.TranscriptionTextDeltaEvent)]
    dones = [e for e in events if isinstance(e, types.TranscriptionTextDoneEvent)]
    assert deltas and len(dones) == 1 and events[-1] is dones[0]
    assert "".join(d.delta for d in deltas) == dones[0].text
    events = collect(response_format="diarized_json")
    segs = [e for e in events if type(e).__name__ == "TranscriptionTextSegmentEvent"]
    assert segs, [type(e).__name__ for e in events]
    assert segs[0].speaker == "A"


def test_c109_sdk_chat_stream_and_models(srv_model):
    c = client(srv_model)
    msgs = [{"role": "user", "content": "Say hi"}]
    full = c.chat.completions.create(model="vibevoice-asr", messages=msgs, temperature=0, max_tokens=12)
    chunks = list(c.chat.completions.create(model="vibevoice-asr", messages=msgs, temperature=0, max_tokens=12,
                                            stream=True))
    assert chunks and all(isinstance(ch, openai.types.chat.ChatCompletionChunk) for ch in chunks)
    joined = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert joined == full.choices[0].message.content
    assert [m.id for m in c.models.list()] == ["vibevoice-asr"]


def test_c110_sdk_retries_then_raises(make_server, audio):
    s = make_server(script=LONG_SCRIPT, hooks=SLOW, config={"engine.max_running_requests": 1,
                                                           "engine.max_waiting_requests": 1,
                                                           "model.warmup": "false"})
    wav = audio.bytes("tiny.wav")
    a = s.send_transcription(wav)
    assert wait_until(lambda: s.metrics().get("vibevoice_requests_running") == 1, 30)
    b = s.send_transcription(wav)
    assert wait_until(lambda: s.metrics().get("vibevoice_requests_waiting") == 1, 30)
    try:
        before = s.metrics().get("vibevoice_requests_rejected_total", reason="queue_full")
        c = client(s, max_retries=2, timeout=60)
        t0 = time.time()
        with pytest.raises(openai.InternalServerError) as ei:
            c.audio.transcriptions.create(model="vibevoice-asr", file=("a.wav", wav))
        elapsed = time.time() - t0
        assert ei.value.status_code == 503
        # Three attempts (one + two retries), each refused.
        assert s.metrics().get("vibevoice_requests_rejected_total", reason="queue_full") - before == 3
        assert elapsed >= 2 * 0.9, elapsed  # waited per Retry-After (>= 1 s) between attempts
    finally:
        a.close()
        b.close()
    with pytest.raises(openai.AuthenticationError):
        client(s, key="sk-wrong").models.list()


def test_c111_open_webui_style_upload(srv, audio):
    import vvhttp
    for data in (audio.bytes("tiny.wav"), audio.bytes("tiny.webm")):
        mp = vvhttp.Multipart()
        mp.file("file", data, filename="audio.webm", ctype=None)
        mp.field("model", "whisper-1")
        r = srv.req("POST", "/v1/audio/transcriptions", body=mp.body(), headers={"Content-Type": mp.content_type})
        assert r.status == 200, r
        assert r.json()["text"] == " ".join(SCRIPT_SEGMENT_TEXTS)


def test_c112_curl_srt(srv, audio):
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    out = subprocess.run(["curl", "-sS", "-f", srv.base_url + "/v1/audio/transcriptions",
                          "-H", f"Authorization: Bearer {KEY}", "-F", f"file=@{audio.path('two.wav')}",
                          "-F", "model=whisper-1", "-F", "response_format=srt"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    cues = out.stdout.split("\n\n")
    assert cues[-1] == ""
    for i, cue in enumerate(cues[:-1], 1):
        lines = cue.split("\n")
        assert lines[0] == str(i)
        assert re.fullmatch(r"\d\d:\d\d:\d\d,\d{3} --> \d\d:\d\d:\d\d,\d{3}", lines[1])
        assert lines[2]


def test_c113_litellm(srv, audio, monkeypatch):
    # LiteLLM's transcription path (what its proxy runs) with this server as an OpenAI-compatible
    # backend. No network: the bundled model cost map.
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    litellm = pytest.importorskip("litellm", reason="litellm is not installed (scripts/setup.sh installs it)")
    with open(audio.path("two.wav"), "rb") as f:
        r = litellm.transcription(model="openai/whisper-1", file=f, api_base=srv.base_url + "/v1", api_key=KEY)
    assert r.text == " ".join(SCRIPT_SEGMENT_TEXTS)
    with open(audio.path("two.wav"), "rb") as f:
        r = litellm.transcription(model="openai/whisper-1", file=f, api_base=srv.base_url + "/v1", api_key=KEY,
                                  response_format="verbose_json")
    assert r.text == " ".join(SCRIPT_SEGMENT_TEXTS)
    usage = getattr(r, "usage", None) or (r.get("usage") if hasattr(r, "get") else None)
    seconds = usage.get("seconds") if isinstance(usage, dict) else getattr(usage, "seconds", None)
    assert seconds and seconds > 0, usage
