"""API.md §15 "§5 Translations": C59–C60."""
import vvhttp
from vvhttp import assert_error

TR = "/v1/audio/translations"


def test_c059_translation_refused_even_while_loading(srv, make_server, audio):
    r = srv.transcribe(file=audio.bytes("tiny.wav"), path=TR)
    e = assert_error(r, 400, "translation_unsupported", param="model")
    assert "/v1/audio/transcriptions" in e["message"]
    r = srv.transcribe(file=audio.bytes("tiny.wav"), path=TR, key="sk-wrong-key-000")
    assert_error(r, 401, "invalid_api_key")
    loading = make_server(hooks={"VIBEVOICE_TEST_LOAD_DELAY_MS": 60000}, wait_ready=False)
    assert loading.req("GET", "/ready", auth=False).status == 503
    r = loading.transcribe(file=audio.bytes("tiny.wav"), path=TR)
    assert_error(r, 400, "translation_unsupported", param="model")
    r = loading.transcribe(file=audio.bytes("tiny.wav"), path=TR, key="sk-wrong-key-000")
    assert_error(r, 401, "invalid_api_key")


def test_c060_translations_as_transcription(make_server, audio):
    s = make_server(script='[{"Start":0.0,"End":1.0,"Speaker":0,"Content":"Hello there."}]',
                    config={"asr.translations": "transcribe"})
    r = s.transcribe(file=audio.bytes("tiny.wav"), path=TR)
    assert r.status == 200, r
    assert r.headers.get("x-vibevoice-translation") == "not-performed"
    assert r.json()["text"] == "Hello there."
    r = s.transcribe(file=audio.bytes("tiny.wav"), path=TR, fields=[("response_format", "verbose_json")])
    assert r.status == 200
    assert r.json()["task"] == "translate"
    assert r.headers.get("x-vibevoice-translation") == "not-performed"
