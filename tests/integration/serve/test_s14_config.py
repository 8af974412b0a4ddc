"""API.md §15 "§14 Configuration": C102–C106."""
import os
import socket
import subprocess

import pytest

import vvhttp


def run_serve(vv_bin, model_paths, args, env=None, timeout=30, cwd=None):
    e = {k: v for k, v in os.environ.items() if not k.startswith("VIBEVOICE_")}
    e.update(env or {})
    return subprocess.run([str(vv_bin), "serve", "--model", str(model_paths["model"]), "--tokenizer",
                           str(model_paths["tokenizer"]), *args], capture_output=True, text=True, env=e,
                          timeout=timeout, cwd=cwd)


def test_c102_invalid_values_exit_2(vv_bin, model_paths):
    r = run_serve(vv_bin, model_paths, ["--http-port=70000"])
    assert r.returncode == 2, r.stderr
    assert "http.port" in r.stderr
    assert any(l.startswith("config error: http.port:") for l in r.stderr.splitlines()), r.stderr
    r = run_serve(vv_bin, model_paths, ["--host", "127.0.0.1"], env={"VIBEVOICE_HTTP_PORT": "abc"})
    assert r.returncode == 2, r.stderr
    assert "http.port" in r.stderr and "VIBEVOICE_HTTP_PORT" in r.stderr


def test_c103_unknown_toml_key(vv_bin, model_paths, tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text("[http]\nprot = 1\n")
    r = run_serve(vv_bin, model_paths, ["--config", str(cfg)])
    assert r.returncode == 2, r.stderr
    assert "http.prot" in r.stderr


def free_ports(n):
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def test_c104_precedence(make_server, tmp_path):
    p1, p2, p3 = free_ports(3)
    cfg = tmp_path / "c.toml"
    cfg.write_text(f"[http]\nport = {p1}\n")
    env = {"VIBEVOICE_HTTP_PORT": str(p2)}
    s = make_server(flags=["--config", str(cfg), "--host", "127.0.0.1", "--port", str(p3)], env_extra=env)
    assert s.port == p3
    assert vvhttp.request(p3, "GET", "/health").status == 200
    s2 = make_server(flags=["--config", str(cfg), "--host", "127.0.0.1"], env_extra=env)
    assert s2.port == p2
    assert vvhttp.request(p2, "GET", "/health").status == 200


def test_c105_print_and_check_config(vv_bin, model_paths, tmp_path):
    r = run_serve(vv_bin, model_paths, ["--api-key", "sk-secret-value-123", "--print-config"])
    assert r.returncode == 0, r.stderr
    assert 'api_keys = ["***"]' in r.stdout, r.stdout
    assert "sk-secret-value-123" not in r.stdout + r.stderr
    cfg = tmp_path / "ok.toml"
    cfg.write_text("[http]\nport = 8123\n[engine]\nmax_running_requests = 8\n")
    r = run_serve(vv_bin, model_paths, ["--config", str(cfg), "--check-config"])
    assert r.returncode == 0, r.stderr


def test_c106_gpustack_command_line(make_server, model_dir_with_tokenizer):
    # `vibevoice serve {{model_path}} --port {{port}} --served-model-name {{model_name}} --host {{worker_ip}}`
    port, = free_ports(1)
    s = make_server(positional_model=True, keys=(), model=model_dir_with_tokenizer, tokenizer_flag=False,
                    flags=["--port", str(port), "--served-model-name", "asr-a", "--host", "127.0.0.1"])
    assert s.port == port
    r = vvhttp.request(port, "GET", "/v1/models")
    assert r.status == 200
    assert [m["id"] for m in r.json()["data"]] == ["asr-a"]


def test_engine_encoder_launch_settings(make_server, audio):
    """engine.encoder_segment_s / engine.encoder_pack_s reach the engine loop: a server encoding in
    0.5 s segments one request per launch, and one whose packed launches exceed the model's 60 s
    chunk (a larger encoder workspace), both transcribe, with the scripted decoder's text."""
    script = '[{"Start":0.0,"End":0.9,"Speaker":0,"Content":"Hello there."}]'
    for cfg in ({"engine.encoder_segment_s": 0.5, "engine.encoder_pack_s": 0},
                {"engine.encoder_segment_s": 1, "engine.encoder_pack_s": 90}):
        s = make_server(script=script, config=cfg)
        r = s.transcribe(file=audio.bytes("tiny.wav"), fields=[("response_format", "json")])
        assert r.status == 200, (cfg, r.text)
        assert r.json()["text"] == "Hello there.", (cfg, r.json())
