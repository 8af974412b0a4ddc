"""API.md §15 "§7 Models" (C73–C74) and "§8 Health and lifecycle" (C75–C79)."""
import re
import shutil
import subprocess
import time

import pytest

from vvhttp import assert_error


def test_c073_models_list(srv):
    r = srv.req("GET", "/v1/models")
    assert r.status == 200, r
    assert r.headers.get("content-type") == "application/json"
    b = r.json()
    assert b["object"] == "list"
    assert [m["id"] for m in b["data"]] == ["vibevoice-asr"]  # aliases not listed
    for m in b["data"]:
        assert m["object"] == "model"
        assert isinstance(m["created"], int) and not isinstance(m["created"], bool)
        assert isinstance(m["owned_by"], str) and m["owned_by"]


def test_c074_model_by_id(srv, make_server):
    r = srv.req("GET", "/v1/models/whisper-1")
    assert r.status == 200, r
    assert r.json()["id"] == "whisper-1" and r.json()["object"] == "model"
    assert_error(srv.req("GET", "/v1/models/nope"), 404, "model_not_found")
    s = make_server(config={"model.served_names": "microsoft/VibeVoice-ASR"})
    r = s.req("GET", "/v1/models/microsoft/VibeVoice-ASR")
    assert r.status == 200, r
    assert r.json()["id"] == "microsoft/VibeVoice-ASR"
    r = s.req("GET", "/v1/models/microsoft%2FVibeVoice-ASR")
    assert r.status == 200 and r.json()["id"] == "microsoft/VibeVoice-ASR"


def test_c075_while_loading(make_server, audio):
    s = make_server(hooks={"VIBEVOICE_TEST_LOAD_DELAY_MS": 60000}, wait_ready=False)
    assert s.req("GET", "/health", auth=False).status == 200
    r = s.req("GET", "/ready", auth=False)
    assert r.status == 503
    b = r.json()
    assert b["status"] == "loading" and 0 <= b["progress"] <= 1, b
    r = s.transcribe(file=audio.bytes("tiny.wav"))
    assert_error(r, 503, "model_not_ready")
    assert r.headers.get("retry-after") == "10"
    assert r.headers.get("x-should-retry") == "true"
    r = s.req("GET", "/v1/models")
    assert_error(r, 503, "model_not_ready")
    assert r.headers.get("retry-after") == "10"
    assert s.metrics().get("vibevoice_ready") == 0


def test_c076_ready_after_warmup(srv):
    r = srv.req("GET", "/ready", auth=False)
    assert r.status == 200
    b = r.json()
    assert b["status"] == "ready" and b["model"] == "vibevoice-asr"
    assert srv.metrics().get("vibevoice_ready") == 1


def test_c077_bad_model_path_and_corrupt_weights(vv_bin, model_paths, tmp_path):
    t0 = time.time()
    r = subprocess.run([str(vv_bin), "serve", "--model", str(tmp_path / "nope"), "--tokenizer",
                        str(model_paths["tokenizer"]), "--host", "127.0.0.1", "--port", "0"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2, r.stderr
    assert "listening on" not in r.stderr
    assert "model.path" in r.stderr
    bad = tmp_path / "corrupt"
    bad.mkdir()
    for f in model_paths["model"].iterdir():
        if f.suffix == ".json":
            shutil.copy(f, bad / f.name)
    (bad / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{\"x\": garbage}" + b"\0" * 64)
    r = subprocess.run([str(vv_bin), "serve", "--model", str(bad), "--tokenizer", str(model_paths["tokenizer"]),
                        "--host", "127.0.0.1", "--port", "0"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r.stderr
    assert time.time() - t0 < 60


def test_c078_version(srv, vv_bin):
    r = srv.req("GET", "/version", auth=False)
    assert r.status == 200
    b = r.json()
    assert re.fullmatch(r"[0-9a-f]{40}", b["git_sha"]), b
    assert b["api_contract"] == 1
    assert isinstance(b["version"], str) and b["version"]
    assert b["model"]["served_names"] == ["vibevoice-asr"]
    assert b["cuda"] is None  # the test machines are CPU-only
    assert (srv.req("GET", "/health", auth=False).headers.get("server") ==
            f"vibevoice-server/{b['version']}")
    out = subprocess.run([str(vv_bin), "--version"], capture_output=True, text=True, timeout=10)
    assert out.returncode == 0
    assert b["version"] in out.stdout + out.stderr


def test_c079_stall_makes_health_fail(make_server, audio):
    s = make_server(script='[{"Start":0.0,"End":1.0,"Speaker":0,"Content":"Hello."}]',
                    config={"engine.stall_timeout_s": 5})
    assert s.req("GET", "/health", auth=False).status == 200
    s.pause()
    conn = s.send_transcription(audio.bytes("tiny.wav"))
    time.sleep(1)
    assert s.req("GET", "/health", auth=False).status == 200  # not yet stalled long enough
    end = time.time() + 15
    r = None
    while time.time() < end:
        r = s.req("GET", "/health", auth=False)
        if r.status == 503:
            break
        time.sleep(0.25)
    assert r.status == 503, r
    b = r.json()
    assert b["status"] == "error" and isinstance(b.get("reason"), str), b
    s.resume()
    r = conn.read_response("POST")
    conn.close()
    assert r.status == 200, r
