"""Fixtures for the `vibevoice serve` conformance tests (API.md §15, C1–C83 and C96–C120).

Every test talks to a real `vibevoice serve` on 127.0.0.1 started from the binary given with
--vibevoice (ctest passes it) or $VIBEVOICE_BIN, with the tiny golden model on the CPU. How a server
is started and which test-only variables it honours is documented in service/api/test_hooks.h:
`--port 0` and the plain stderr line `listening on 127.0.0.1:<port>`; VIBEVOICE_TEST_SCRIPT (the
scripted decoder), VIBEVOICE_TEST_PAUSE_FILE, VIBEVOICE_TEST_LOAD_DELAY_MS,
VIBEVOICE_TEST_FAULT_AFTER_TOKENS, VIBEVOICE_TEST_TOKEN_DELAY_MS. Configuration goes through the
spec's own channels (§14): `VIBEVOICE_<KEY>` environment variables and `--flags`.

Audio is made at test time with ffmpeg / espeak-ng from the bundled golden WAVs (see audio.py).
"""
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import vvhttp  # noqa: E402
from audio import AudioFactory  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[3]

# Two valid keys (C3–C5, C97); long enough that a wrong key can share 20 leading characters (C5).
KEY = "sk-vvtest-0123456789abcdefghijklmnop"
KEY2 = "sk-vvtest-second-key-ABCDEFGHIJKLMNOP"

# The scripted decoder's default answer: three segments, two speakers, all inside 3 s so that the
# same script fits tiny.wav (3 s) and two.wav (>= 10 s). MODEL.md §9.1 shape.
SCRIPT_TWO_SPEAKERS = (
    '[{"Start":0.0,"End":0.9,"Speaker":0,"Content":"Good morning, thanks for joining the call."},'
    '{"Start":1.0,"End":1.8,"Speaker":1,"Content":"Happy to be here. Shall we start?"},'
    '{"Start":1.9,"End":2.8,"Speaker":0,"Content":"Yes, let\'s begin with the budget."}]')
SCRIPT_SEGMENT_TEXTS = ["Good morning, thanks for joining the call.", "Happy to be here. Shall we start?",
                        "Yes, let's begin with the budget."]


def pytest_addoption(parser):
    # tests/integration/conftest.py registers the same option when both are loaded.
    try:
        parser.addoption("--vibevoice", action="store", default=None, help="path of the vibevoice binary")
    except ValueError:
        pass


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: takes more than a few seconds")


@pytest.fixture(scope="session")
def vv_bin(request):
    path = request.config.getoption("--vibevoice") or os.environ.get("VIBEVOICE_BIN")
    if not path:
        for cand in ("build/serve/service/vibevoice", "build/apitests/service/vibevoice",
                     "build/cpu/service/vibevoice"):
            if (REPO / cand).exists():
                path = str(REPO / cand)
                break
    if not path:
        pytest.fail("pass --vibevoice PATH (ctest does) or set VIBEVOICE_BIN")
    return pathlib.Path(path)


@pytest.fixture(scope="session")
def test_data():
    root = os.environ.get("VV_TEST_DATA_DIR") or str(REPO / "tests" / "data")
    return pathlib.Path(root)


@pytest.fixture(scope="session")
def model_paths(test_data):
    golden = pathlib.Path(os.environ.get("VV_GOLDEN_DIR") or test_data / "golden")
    model = golden / "model-hf"
    if not (model / "model.safetensors").exists():
        model = golden / "model-orig"
    return {"model": model, "tokenizer": test_data / "tokenizer" / "tokenizer.json", "golden": golden}


@pytest.fixture(scope="session")
def model_dir_with_tokenizer(model_paths, session_tmp):
    """The tiny model as a real model directory: its files plus tokenizer.json (links)."""
    d = session_tmp / "model-with-tokenizer"
    if not d.exists():
        d.mkdir()
        for f in model_paths["model"].iterdir():
            (d / f.name).symlink_to(f.resolve())
        (d / "tokenizer.json").symlink_to(model_paths["tokenizer"].resolve())
    return d


@pytest.fixture(scope="session")
def session_tmp():
    d = pathlib.Path(tempfile.mkdtemp(prefix="vv-serve-tests-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def audio(session_tmp, model_paths):
    return AudioFactory(session_tmp / "audio", model_paths["golden"])


class Server:
    """One `vibevoice serve` process. Config is a dict of dotted keys (§14.3) passed as
    VIBEVOICE_* variables; `flags` are extra command-line arguments; `hooks` test_hooks.h variables."""

    def __init__(self, binary, model_paths, workdir, keys=(KEY, KEY2), config=None, flags=(), hooks=None,
                 script=None, model=None, positional_model=False, wait_ready=True, env_extra=None,
                 tokenizer_flag=True):
        self.workdir = pathlib.Path(tempfile.mkdtemp(prefix="srv-", dir=workdir))
        self.keys = list(keys)
        self.log_path = self.workdir / "stderr.log"
        self.pause_file = self.workdir / "pause"
        env = {k: v for k, v in os.environ.items() if not k.startswith("VIBEVOICE_")}
        # Fast, deterministic defaults for tests: no drain delay, short grace.
        cfg = {"shutdown.pre_stop_delay_s": "0", "shutdown.grace_s": "5", "log.level": "info"}
        cfg.update({k: str(v) for k, v in (config or {}).items()})
        for k, v in cfg.items():
            if v is None:
                continue
            env["VIBEVOICE_" + k.upper().replace(".", "_")] = v
        env["VIBEVOICE_TEST_PAUSE_FILE"] = str(self.pause_file)
        if script is not None:
            sp = self.workdir / "script.txt"
            sp.write_bytes(script.encode() if isinstance(script, str) else script)
            env["VIBEVOICE_TEST_SCRIPT"] = str(sp)
            env["VIBEVOICE_TEST_SCRIPT_CHAT"] = "1"
        for k, v in (hooks or {}).items():
            env[k] = str(v)
        env.update(env_extra or {})
        model_dir = str(model or model_paths["model"])
        args = [str(binary), "serve"]
        args += [model_dir] if positional_model else ["--model", model_dir]
        if tokenizer_flag:
            args += ["--tokenizer", str(model_paths["tokenizer"])]
        if not any(f in ("--host", "--port") for f in flags):
            args += ["--host", "127.0.0.1", "--port", "0"]
        for k in self.keys:
            args += ["--api-key", k]
        args += list(flags)
        self.args = args
        self.env = env
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=self._log, env=env,
                                     cwd=self.workdir)
        self.port = None
        self._wait_port(timeout=30)
        if wait_ready:
            self.wait_ready(timeout=120)

    # -- lifecycle -------------------------------------------------------------------------------
    def log(self, tail=4000):
        try:
            return self.log_path.read_text(errors="replace")[-tail:]
        except OSError:
            return ""

    def _wait_port(self, timeout):
        end = time.time() + timeout
        while time.time() < end:
            m = re.search(r"listening on 127\.0\.0\.1:(\d+)", self.log(tail=1 << 20))
            if m:
                self.port = int(m.group(1))
                return
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode} before listening:\n{self.log()}")
            time.sleep(0.02)
        raise RuntimeError(f"server did not print 'listening on' within {timeout}s:\n{self.log()}")

    def wait_ready(self, timeout=120):
        end = time.time() + timeout
        last = None
        while time.time() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log()}")
            try:
                last = vvhttp.request(self.port, "GET", "/ready", timeout=5)
                if last.status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"server not ready within {timeout}s (last {last and last.status}):\n{self.log()}")

    def signal(self, sig=signal.SIGTERM):
        self.proc.send_signal(sig)

    def stop(self, timeout=30):
        """SIGTERM, wait; returns the exit code (SIGKILL after `timeout`, then the code is None)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                self._log.close()
                return None
        self._log.close()
        return self.proc.returncode

    def rss_bytes(self):
        for line in pathlib.Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0

    # -- requests --------------------------------------------------------------------------------
    @property
    def base_url(self):
        return f"http://127.0.0.1:{self.port}"

    def auth(self, key=None):
        k = key if key is not None else (self.keys[0] if self.keys else "anything")
        return {"Authorization": f"Bearer {k}"}

    def req(self, method, path, body=None, headers=None, auth=True, key=None, timeout=60, **kw):
        h = dict(self.auth(key)) if auth else {}
        h.update(headers or {})
        r = vvhttp.request(self.port, method, path, body=body, headers=h, timeout=timeout, **kw)
        # C2 and C9 hold for every response of the checklist, so every request made here checks them.
        assert r.headers.get("x-request-id"), f"C2: no x-request-id on {method} {path}: {r}"
        probe = path.split("?")[0].rstrip("/") in ("/health", "/healthz", "/livez", "/ready", "/readyz")
        if r.status >= 400 and not probe:
            assert r.headers.get("content-type") == "application/json", f"C9: {method} {path}: {r}"
            vvhttp.check_envelope(r.json())
        return r

    def transcribe(self, fields=None, file=None, path="/v1/audio/transcriptions", filename="audio.wav",
                   file_ctype="audio/wav", headers=None, timeout=120, **kw):
        mp = vvhttp.Multipart()
        if file is not None:
            mp.file("file", file, filename=filename, ctype=file_ctype)
        for k, v in (fields or []):
            mp.field(k, v)
        h = {"Content-Type": mp.content_type}
        h.update(headers or {})
        return self.req("POST", path, body=mp.body(), headers=h, timeout=timeout, **kw)

    def stream_transcribe(self, fields=None, file=None, path="/v1/audio/transcriptions", headers=None,
                          timeout=120):
        """Sends a transcription and returns the vvhttp.SSE reader (status/headers read; frames not)."""
        mp = vvhttp.Multipart()
        if file is not None:
            mp.file("file", file)
        for k, v in (fields or []):
            mp.field(k, v)
        h = dict(self.auth())
        h["Content-Type"] = mp.content_type
        h.update(headers or {})
        return vvhttp.sse_request(self.port, "POST", path, mp.body(), h, timeout=timeout)

    def send_transcription(self, file, fields=(), key=None, headers=None, path="/v1/audio/transcriptions"):
        """Sends a transcription request without reading the answer; returns the open vvhttp.Conn
        (read with conn.read_response("POST"), or close it to cancel)."""
        mp = vvhttp.Multipart()
        mp.file("file", file)
        for k, v in fields:
            mp.field(k, v)
        h = dict(self.auth(key))
        h["Content-Type"] = mp.content_type
        h.update(headers or {})
        c = vvhttp.Conn(self.port, timeout=300)
        c.send(vvhttp.build_request("POST", path, h, mp.body()))
        return c

    def stream_chat(self, body, headers=None, timeout=120):
        import json
        h = dict(self.auth())
        h["Content-Type"] = "application/json"
        h.update(headers or {})
        return vvhttp.sse_request(self.port, "POST", "/v1/chat/completions", json.dumps(body), h,
                                  timeout=timeout)

    def chat(self, body, headers=None, timeout=120, **kw):
        import json
        data = body if isinstance(body, (bytes, str)) else json.dumps(body)
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        return self.req("POST", "/v1/chat/completions", body=data, headers=h, timeout=timeout, **kw)

    def metrics(self):
        r = self.req("GET", "/metrics", auth=False)
        assert r.status == 200, r.text
        return vvhttp.parse_metrics(r.text)

    def pause(self):
        self.pause_file.write_text("paused")

    def resume(self):
        try:
            self.pause_file.unlink()
        except FileNotFoundError:
            pass


@pytest.fixture(scope="session")
def server_factory(vv_bin, model_paths, session_tmp):
    """Starts servers; those made through it are stopped at the end of the session (or by the test)."""
    made = []

    def make(**kw):
        s = Server(vv_bin, model_paths, session_tmp, **kw)
        made.append(s)
        return s

    yield make
    for s in made:
        s.stop(timeout=10)


@pytest.fixture
def make_server(vv_bin, model_paths, session_tmp):
    """Function-scoped: servers with a test's own configuration, stopped after the test."""
    made = []

    def make(**kw):
        s = Server(vv_bin, model_paths, session_tmp, **kw)
        made.append(s)
        return s

    yield make
    for s in made:
        s.resume()
        s.stop(timeout=10)


@pytest.fixture(scope="session")
def srv(server_factory):
    """The default server of §15: keys configured, ready, the scripted decoder saying the two-speaker
    transcript (so items about segments, speakers and `stop` are decidable with the tiny model)."""
    return server_factory(script=SCRIPT_TWO_SPEAKERS)


@pytest.fixture(scope="session")
def srv_model(server_factory):
    """Keys configured, no script: the tiny random model chooses the tokens (its output is noise and
    usually not a JSON array, so the fallback segment applies). Short generations keep it fast."""
    return server_factory(config={"asr.max_new_tokens": 24, "chat.default_max_tokens": 16})


@pytest.fixture(scope="session")
def srv_slow(server_factory):
    """Keys configured, scripted, but every engine step takes 50 ms: requests last seconds."""
    long_script = "[" + ",".join(
        '{"Start":%d.0,"End":%d.5,"Speaker":%d,"Content":"Segment number %d of a long meeting."}'
        % (i, i, i % 2, i) for i in range(200)) + "]"
    return server_factory(script=long_script, hooks={"VIBEVOICE_TEST_TOKEN_DELAY_MS": 50},
                          config={"model.warmup": "false"})
