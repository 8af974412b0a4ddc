#!/usr/bin/env python3
"""Service benchmarks for `vibevoice serve` (issue 12 "Benchmarks"): a small open-loop load generator
on asyncio streams (no third-party packages; one keep-alive connection per in-flight request).

Scenarios (each prints one JSON object and, with --out, writes it to a file):

  latency  2 s WAV uploads (POST /v1/audio/transcriptions, json) at --rate req/s for --duration s on
           loopback against a server with the no-op engine: p50/p90/p99/max of the request latency.
           Latency is measured from the request's *scheduled* send time to the last response byte
           (open loop: a slow server cannot hide its queueing by slowing the client down).
  idle     --connections keep-alive connections, each after one GET /health, held idle for --hold s:
           server RSS before/after (VmRSS of the server pid, else process_resident_memory_bytes from
           /metrics) and how many connections the server still holds open.
  soak     --requests 2 s WAV uploads at --concurrency in flight; server RSS sampled every --every
           requests; RSS drift = (last - first sample after warm-up) / first.

The server is either started here (--vibevoice BIN: `vibevoice serve` on an ephemeral port with the
fake engine of service/api/test_hooks.h and an empty script, i.e. a near no-op engine) or given with
--url (then RSS comes from /metrics, or from --pid).
"""
import argparse
import asyncio
import io
import json
import math
import os
import pathlib
import re
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import wave

REPO = pathlib.Path(__file__).resolve().parents[1]


# ---- the request --------------------------------------------------------------------------------
def make_wav(seconds=2.0, rate=16000):
    """A 2 s 16 kHz mono s16 WAV: a 440 Hz tone (the content does not matter to a no-op engine)."""
    n = int(seconds * rate)
    frames = bytearray()
    for i in range(n):
        v = int(8000 * math.sin(2 * math.pi * 440 * i / rate))
        frames += v.to_bytes(2, "little", signed=True)
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(bytes(frames))
    return buf.getvalue()


def transcription_request(host, port, wav, key=None):
    boundary = "vvloadBoundary7f3a"
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n"
            f"Content-Type: audio/wav\r\n\r\n").encode() + wav + (
        f"\r\n--{boundary}\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nvibevoice-asr\r\n"
        f"--{boundary}--\r\n").encode()
    head = (f"POST /v1/audio/transcriptions HTTP/1.1\r\nHost: {host}:{port}\r\n"
            f"Content-Type: multipart/form-data; boundary={boundary}\r\nContent-Length: {len(body)}\r\n")
    if key:
        head += f"Authorization: Bearer {key}\r\n"
    return (head + "\r\n").encode() + body


async def read_response(reader):
    """Reads one response; returns (status, body). Handles Content-Length and chunked bodies."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for ln in lines[1:]:
        if ":" in ln:
            k, v = ln.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = b""
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                await reader.readuntil(b"\r\n")
                break
            body += await reader.readexactly(size + 2)
        return status, body, headers
    n = int(headers.get("content-length", "0"))
    return status, await reader.readexactly(n), headers


# ---- server ---------------------------------------------------------------------------------------
class Target:
    def __init__(self, args):
        self.proc = None
        self.key = args.key
        self.pid = args.pid
        if args.url:
            m = re.match(r"http://([^:/]+):(\d+)", args.url)
            self.host, self.port = m.group(1), int(m.group(2))
            return
        binary = args.vibevoice or next((str(REPO / p) for p in ("build/serve/service/vibevoice",
                                                                  "build/apitests/service/vibevoice")
                                         if (REPO / p).exists()), None)
        if not binary:
            sys.exit("give --url or --vibevoice")
        self.tmp = pathlib.Path(tempfile.mkdtemp(prefix="vvload-"))
        (self.tmp / "script.txt").write_text(args.script)
        env = {k: v for k, v in os.environ.items() if not k.startswith("VIBEVOICE_")}
        env.update({"VIBEVOICE_TEST_FAKE_ENGINE": "1", "VIBEVOICE_TEST_SCRIPT": str(self.tmp / "script.txt"),
                    "VIBEVOICE_HTTP_MAX_CONNECTIONS": str(max(1024, args.connections + 100)),
                    "VIBEVOICE_ENGINE_MAX_WAITING_REQUESTS": "100000",
                    "VIBEVOICE_ENGINE_MAX_RUNNING_REQUESTS": "1024",
                    })
        env.update(dict(kv.split("=", 1) for kv in args.env))
        cmd = [binary, "serve", "--model", str(REPO / "tests/data/golden/model-hf"), "--tokenizer",
               str(REPO / "tests/data/tokenizer/tokenizer.json"), "--host", "127.0.0.1", "--port", "0"]
        if self.key:
            cmd += ["--api-key", self.key]
        self.log = open(self.tmp / "stderr.log", "wb")

        def raise_nofile():
            _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self.log, env=env,
                                     preexec_fn=raise_nofile)
        self.pid = self.proc.pid
        self.host = "127.0.0.1"
        end = time.time() + 60
        while time.time() < end:
            m = re.search(r"listening on 127\.0\.0\.1:(\d+)", (self.tmp / "stderr.log").read_text(errors="replace"))
            if m:
                self.port = int(m.group(1))
                break
            if self.proc.poll() is not None:
                sys.exit("server exited:\n" + (self.tmp / "stderr.log").read_text(errors="replace")[-3000:])
            time.sleep(0.05)
        else:
            sys.exit("server did not start")
        while time.time() < end:
            try:
                if asyncio.run(self.get("/ready"))[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        sys.exit("server not ready")

    async def get(self, path):
        r, w = await asyncio.open_connection(self.host, self.port)
        w.write(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        await w.drain()
        out = await read_response(r)
        w.close()
        return out

    def rss(self):
        if self.pid and os.path.exists(f"/proc/{self.pid}/status"):
            for line in open(f"/proc/{self.pid}/status"):
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        status, body, _ = asyncio.run(self.get("/metrics")) if not _in_loop() else (0, b"", {})
        m = re.search(rb"^process_resident_memory_bytes (\S+)", body, re.M)
        return int(float(m.group(1))) if m else None

    async def rss_async(self):
        if self.pid and os.path.exists(f"/proc/{self.pid}/status"):
            return self.rss()
        _, body, _ = await self.get("/metrics")
        m = re.search(rb"^process_resident_memory_bytes (\S+)", body, re.M)
        return int(float(m.group(1))) if m else None

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def _in_loop():
    try:
        asyncio.get_running_loop()
        return True
    except RuntimeError:
        return False


def _le_key(le):
    return float("inf") if le == "+Inf" else float(le)


async def server_histogram(t):
    """The server's own view: vibevoice_http_request_duration_seconds buckets (headers received → last
    byte written) of the transcription route, cumulative counts by `le`."""
    try:
        _, body, _ = await t.get("/metrics")
    except OSError:
        return None
    out = {}
    for m in re.finditer(rb'^vibevoice_http_request_duration_seconds_bucket\{([^}]*)\} (\S+)$', body, re.M):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1).decode()))
        if labels.get("route") == "/v1/audio/transcriptions":
            out[labels["le"]] = out.get(labels["le"], 0) + float(m.group(2))
    return out or None


def pct(xs, p):
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(math.ceil(p / 100 * len(xs))) - 1)]


# ---- scenarios ------------------------------------------------------------------------------------
def access_log_size(t):
    log = getattr(t, "tmp", None)
    return (log / "stderr.log").stat().st_size if log and (log / "stderr.log").exists() else None


def access_log_durations(t, offset, path):
    """duration_ms of the access-log lines for `path` written after `offset` (None: no log here)."""
    if offset is None:
        return []
    with open(t.tmp / "stderr.log", "rb") as f:
        f.seek(offset)
        text = f.read().decode(errors="replace")
    out = []
    for line in text.splitlines():
        if '"access"' in line and f'"path":"{path}"' in line.replace(" ", ""):
            m = re.search(r'"duration_ms"\s*:\s*"?([0-9.]+)', line)
            if m:
                out.append(float(m.group(1)))
    return out


async def scenario_latency(t, args):
    req = transcription_request(t.host, t.port, make_wav(2.0), t.key)
    pool = asyncio.Queue()
    for _ in range(args.pool):
        pool.put_nowait(await asyncio.open_connection(t.host, t.port))
    lat, service, statuses, late = [], [], {}, 0

    async def one(sched):
        nonlocal late
        conn = pool.get_nowait() if not pool.empty() else await asyncio.open_connection(t.host, t.port)
        r, w = conn
        start = time.perf_counter()
        if start - sched > 0.001:
            late += 1
        w.write(req)
        await w.drain()
        status, _, headers = await read_response(r)
        end = time.perf_counter()
        statuses[status] = statuses.get(status, 0) + 1
        lat.append(end - sched)
        service.append(end - start)
        if "close" in headers.get("connection", "").lower():
            w.close()
            conn = await asyncio.open_connection(t.host, t.port)
        pool.put_nowait(conn)

    # Warm-up: one second at the target rate, not recorded.
    hist0 = None
    for phase, dur in (("warmup", 1.0), ("measure", args.duration)):
        if phase == "measure":
            hist0 = await server_histogram(t)
            log_from = access_log_size(t)
        lat.clear(), service.clear(), statuses.clear()
        late = 0
        n = int(dur * args.rate)
        t0 = time.perf_counter() + 0.05
        tasks = []
        for i in range(n):
            sched = t0 + i / args.rate
            delay = sched - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(sched)))
        await asyncio.gather(*tasks)
        wall = time.perf_counter() - t0
    hist1 = await server_histogram(t)
    server_side = None
    if hist0 and hist1:
        n = hist1.get("+Inf", 0) - hist0.get("+Inf", 0)
        server_side = {"requests": n, "share_within_s": {
            le: round((hist1[le] - hist0.get(le, 0)) / n, 4) for le in sorted(hist1, key=_le_key) if n}}
    ms = lambda x: None if x is None else round(x * 1000, 3)  # noqa: E731
    # The service's own time per upload (head received -> last byte written, audio decode included;
    # the access log's duration_ms), when this script started the server and so reads its log.
    own = [d / 1000 for d in access_log_durations(t, log_from, "/v1/audio/transcriptions")]
    server_ms = ({"requests": len(own), "p50": ms(pct(own, 50)), "p90": ms(pct(own, 90)),
                  "p99": ms(pct(own, 99)), "max": ms(max(own))} if own else None)
    return {"scenario": "latency", "server_ms": server_ms, "server_histogram": server_side, "rate_target": args.rate, "requests": len(lat), "wall_s": round(wall, 3),
            "rate_achieved": round(len(lat) / wall, 1), "statuses": statuses, "upload_bytes": len(req),
            "latency_ms": {"p50": ms(pct(lat, 50)), "p90": ms(pct(lat, 90)), "p99": ms(pct(lat, 99)),
                           "max": ms(max(lat)), "mean": ms(statistics.fmean(lat))},
            "send_to_response_ms": {"p50": ms(pct(service, 50)), "p99": ms(pct(service, 99))},
            "sends_late_over_1ms": late}


async def scenario_idle(t, args):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = args.connections + 256
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))
    rss0 = await t.rss_async()
    conns = []
    for i in range(args.connections):
        r, w = await asyncio.open_connection(t.host, t.port)
        w.write(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        await w.drain()
        status, _, _ = await read_response(r)
        if status != 200:
            raise RuntimeError(f"connection {i}: /health {status}")
        conns.append((r, w))
    rss_open = await t.rss_async()
    await asyncio.sleep(args.hold)
    rss_held = await t.rss_async()
    # Which connections are still open: a second request on each must succeed.
    alive = 0
    for r, w in conns:
        try:
            w.write(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            await w.drain()
            status, _, _ = await asyncio.wait_for(read_response(r), 5)
            alive += status == 200
        except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError):
            pass
    for _, w in conns:
        w.close()
    mib = lambda x: None if x is None else round(x / 2**20, 1)  # noqa: E731
    return {"scenario": "idle", "connections": args.connections, "hold_s": args.hold,
            "rss_mib": {"before": mib(rss0), "all_open": mib(rss_open), "after_hold": mib(rss_held)},
            "rss_growth_mib": mib(rss_held - rss0) if rss0 and rss_held else None,
            "still_open_after_hold": alive}


async def scenario_soak(t, args):
    req = transcription_request(t.host, t.port, make_wav(2.0), t.key)
    samples, statuses = [], {}
    done = 0
    lock = asyncio.Lock()

    async def worker():
        nonlocal done
        r, w = await asyncio.open_connection(t.host, t.port)
        while True:
            async with lock:
                if done >= args.requests:
                    break
                done += 1
                k = done
            w.write(req)
            await w.drain()
            status, _, headers = await read_response(r)
            statuses[status] = statuses.get(status, 0) + 1
            if "close" in headers.get("connection", "").lower():
                w.close()
                r, w = await asyncio.open_connection(t.host, t.port)
            if k % args.every == 0:
                samples.append((k, await t.rss_async()))
        w.close()
    t0 = time.perf_counter()
    samples.append((0, await t.rss_async()))
    await asyncio.gather(*[worker() for _ in range(args.concurrency)])
    wall = time.perf_counter() - t0
    samples.append((args.requests, await t.rss_async()))
    warm = [s for s in samples if s[0] >= args.warmup]
    base = warm[0][1]
    drift = max(abs(v - base) / base for _, v in warm)
    return {"scenario": "soak", "requests": args.requests, "concurrency": args.concurrency,
            "wall_s": round(wall, 1), "statuses": statuses,
            "rss_mib": [(k, round(v / 2**20, 2)) for k, v in samples],
            "rss_first_after_warmup_mib": round(base / 2**20, 2), "rss_last_mib": round(warm[-1][1] / 2**20, 2),
            "max_drift_pct_after_warmup": round(100 * drift, 2),
            "end_drift_pct": round(100 * (warm[-1][1] - base) / base, 2)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scenario", choices=["latency", "idle", "soak", "all"])
    ap.add_argument("--url", help="an already running server, e.g. http://127.0.0.1:8000")
    ap.add_argument("--pid", type=int, help="its pid (for RSS), else /metrics is read")
    ap.add_argument("--vibevoice", help="start `BIN serve` with the fake engine instead")
    ap.add_argument("--script", default="[]", help="the fake engine's answer (default: an empty transcript)")
    ap.add_argument("--env", action="append", default=[], help="extra VAR=VALUE for the started server")
    ap.add_argument("--key", default=None, help="API key to configure/send")
    ap.add_argument("--rate", type=float, default=500)
    ap.add_argument("--duration", type=float, default=10)
    ap.add_argument("--pool", type=int, default=64, help="keep-alive connections opened up front")
    ap.add_argument("--connections", type=int, default=5000)
    ap.add_argument("--hold", type=float, default=10)
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--every", type=int, default=1000)
    ap.add_argument("--warmup", type=int, default=1000)
    ap.add_argument("--out", help="write the JSON results here")
    args = ap.parse_args()
    t = Target(args)
    results = {"machine": {"cpus": os.cpu_count(), "uname": " ".join(os.uname())}, "runs": []}
    try:
        for sc in (["latency", "idle", "soak"] if args.scenario == "all" else [args.scenario]):
            fn = {"latency": scenario_latency, "idle": scenario_idle, "soak": scenario_soak}[sc]
            res = asyncio.run(fn(t, args))
            results["runs"].append(res)
            print(json.dumps(res), flush=True)
    finally:
        t.stop()
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
