"""API.md §15 "§1 Models": C11–C13."""
from vvhttp import assert_error


def test_c011_aliases(srv, make_server, audio):
    base = srv.transcribe(file=audio.bytes("tiny.wav"), fields=[("model", "vibevoice-asr")])
    assert base.status == 200, base
    for name in ("whisper-1", "gpt-4o-transcribe", "gpt-4o-transcribe-diarize"):
        r = srv.transcribe(file=audio.bytes("tiny.wav"), fields=[("model", name)])
        assert r.status == 200, (name, r)
        assert r.json() == base.json()
    s = make_server(config={"model.aliases": ""})
    r = s.transcribe(file=audio.bytes("tiny.wav"), fields=[("model", "whisper-1")])
    assert_error(r, 404, "model_not_found", param="model")


def test_c012_unknown_model_and_no_model(srv, audio):
    r = srv.transcribe(file=audio.bytes("tiny.wav"), fields=[("model", "no-such-model")])
    e = assert_error(r, 404, "model_not_found", param="model")
    assert e["message"] == "The model 'no-such-model' does not exist."
    r = srv.transcribe(file=audio.bytes("tiny.wav"))
    assert r.status == 200, r


def test_c013_chat_echoes_alias(srv):
    r = srv.chat({"model": "whisper-1", "messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 4})
    assert r.status == 200, r
    assert r.json()["model"] == "whisper-1"
