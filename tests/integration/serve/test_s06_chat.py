"""API.md §15 "§6 Chat": C61–C72."""
import base64
import json
import math

from audio import duration_of
from vvhttp import assert_error

INSTR = "Please transcribe it with these keys: Start time, End time, Speaker ID, Content"


def test_c061_chat_basic(srv_model):
    r = srv_model.chat({"messages": [{"role": "user", "content": "Say hi"}]})
    assert r.status == 200, r
    assert r.headers.get("content-type") == "application/json"
    b = r.json()
    assert b["object"] == "chat.completion"
    assert b["id"].startswith("chatcmpl-")
    assert isinstance(b["created"], int)
    assert len(b["choices"]) == 1
    ch = b["choices"][0]
    assert ch["index"] == 0 and ch["message"]["role"] == "assistant"
    assert isinstance(ch["message"]["content"], str)
    assert ch["finish_reason"] in ("stop", "length")
    u = b["usage"]
    assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"]


def test_c062_chat_stream_usage(srv_model):
    msgs = [{"role": "user", "content": "Say hi"}]
    sse = srv_model.stream_chat({"messages": msgs, "stream": True, "max_tokens": 8,
                                 "stream_options": {"include_usage": True}}).read_all()
    assert sse.status == 200, sse.error_body
    assert (sse.headers.get("content-type") or "").startswith("text/event-stream")
    data = [f[len("data: "):] for _, f in sse.frames if f.startswith("data: ")]
    assert data[-1] == "[DONE]"
    chunks = [json.loads(d) for d in data[:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert len({c["id"] for c in chunks}) == 1
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    last = chunks[-1]
    assert last["choices"] == [] and last["usage"] is not None
    assert last["usage"]["total_tokens"] == last["usage"]["prompt_tokens"] + last["usage"]["completion_tokens"]
    assert all("usage" in c and c["usage"] is None for c in chunks[:-1])
    fin = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"] is not None]
    assert len(fin) == 1 and fin[0]["choices"][0]["delta"] == {}
    sse = srv_model.stream_chat({"messages": msgs, "stream": True, "max_tokens": 8}).read_all()
    data = [f[len("data: "):] for _, f in sse.frames if f.startswith("data: ")]
    assert data[-1] == "[DONE]"
    assert all("usage" not in json.loads(d) for d in data[:-1])


def test_c063_max_tokens(srv_model):
    msgs = [{"role": "user", "content": "Tell me a very long story about the sea."}]
    r = srv_model.chat({"messages": msgs, "max_tokens": 5, "temperature": 0})
    assert r.status == 200, r
    b = r.json()
    assert b["choices"][0]["finish_reason"] == "length"
    assert b["usage"]["completion_tokens"] == 5
    r = srv_model.chat({"messages": msgs, "max_tokens": 50, "max_completion_tokens": 5, "temperature": 0})
    assert r.status == 200, r
    assert r.json()["usage"]["completion_tokens"] == 5


def test_c064_stop_string(make_server):
    # The scripted decoder says two lines; the stop string cuts before the newline.
    s = make_server(script="Hi there!\nHow can I help you today?")
    r = s.chat({"messages": [{"role": "user", "content": "Say hi"}], "stop": ["\n"]})
    assert r.status == 200, r
    c = r.json()["choices"][0]
    assert c["message"]["content"] == "Hi there!"
    assert c["finish_reason"] == "stop"
    r = s.chat({"messages": [{"role": "user", "content": "Say hi"}]})
    assert r.json()["choices"][0]["message"]["content"] == "Hi there!\nHow can I help you today?"


def test_c065_seed(srv_model):
    body = {"messages": [{"role": "user", "content": "Say something random"}], "temperature": 1, "seed": 1234,
            "max_tokens": 12}
    a = srv_model.chat(body)
    b = srv_model.chat(body)
    assert a.status == b.status == 200
    assert a.json()["choices"][0]["message"]["content"] == b.json()["choices"][0]["message"]["content"]


def test_c066_unsupported(srv):
    m = [{"role": "user", "content": "hi"}]
    assert_error(srv.chat({"messages": m, "n": 2}), 400, "unsupported_value", param="n")
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    e = assert_error(srv.chat({"messages": m, "tools": tools}), 400, "unsupported_parameter")
    assert e["param"] == "tools"
    rf = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}
    e = assert_error(srv.chat({"messages": m, "response_format": rf}), 400, "unsupported_value")
    assert e["param"].startswith("response_format")


def _b64(b):
    return base64.b64encode(b).decode()


def test_c067_input_audio(srv_model, audio):
    p = audio.path("tiny.wav")
    r = srv_model.chat({"messages": [{"role": "user", "content": [
        {"type": "input_audio", "input_audio": {"data": _b64(p.read_bytes()), "format": "wav"}},
        {"type": "text", "text": INSTR}]}], "max_tokens": 4})
    assert r.status == 200, r
    details = r.json()["usage"]["prompt_tokens_details"]
    assert details["audio_tokens"] == math.ceil(round(duration_of(p) * 24000) / 3200)


def test_c068_audio_url(srv_model, audio):
    data = "data:audio/wav;base64," + _b64(audio.bytes("tiny.wav"))
    r = srv_model.chat({"messages": [{"role": "user", "content": [
        {"type": "audio_url", "audio_url": {"url": data}}, {"type": "text", "text": INSTR}]}], "max_tokens": 4})
    assert r.status == 200, r
    r = srv_model.chat({"messages": [{"role": "user", "content": [
        {"type": "audio_url", "audio_url": {"url": "https://example.com/a.wav"}}]}], "max_tokens": 4})
    assert_error(r, 400, "unsupported_value")


def test_c069_invalid_json(srv):
    assert_error(srv.chat(b'{"messages": ['), 400, "invalid_json")
    assert_error(srv.chat(b"[]"), 400, "invalid_json")
    assert_error(srv.chat(b'{"messages": [{"role": "user", "content": "\xc3\x28"}]}'), 400, "invalid_json")


def test_c070_unknown_member_and_empty_messages(srv):
    r = srv.chat({"messages": [{"role": "user", "content": "hi"}], "foo": 1, "max_tokens": 4})
    assert r.status == 200, r
    assert_error(srv.chat({"messages": []}), 400, "invalid_value", param="messages")


def test_c071_context_length(srv_model):
    text = "hello world " * 40000  # ~80k tokens > 65536
    r = srv_model.chat({"messages": [{"role": "user", "content": text}]})
    assert_error(r, 400, "context_length_exceeded", param="messages")


def test_c072_chat_content_type(srv):
    r = srv.req("POST", "/v1/chat/completions", body=json.dumps({"messages": [{"role": "user", "content": "hi"}]}),
                headers={"Content-Type": "text/plain"})
    assert_error(r, 415, "unsupported_media_type")
