"""`vibevoice bench` on seeded random weights and on the bundled checkpoint: every figure is
measured, positive, and stated against this machine's own bounds."""
import json
import os
import subprocess


def bench(vibevoice, tmp_path, *args):
    out = tmp_path / "bench.json"
    r = subprocess.run([str(vibevoice), "bench", *args, "--audio-seconds", "2", "--prefill-tokens", "64",
                        "--decode-tokens", "4", "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return r, json.loads(out.read_text())


def test_bench_random_tiny_reports_every_figure_with_its_bound(vibevoice, tmp_path):
    r, fig = bench(vibevoice, tmp_path, "--random", "tiny", "--threads", "1")
    for key in ("triad_gbps", "read_gbps", "fma_gflops", "encoder_ms_per_audio_s", "prefill_tok_s", "decode_tok_s",
                "prefill_gflops", "decode_gbps", "decode_cpu_gbps", "decode_cpu_share"):
        assert fig[key] > 0, key
    assert fig["threads"] == 1
    # The memory bound is the higher of the two probes, and decode's ratios are taken against it.
    assert fig["bw_bound_gbps"] == max(fig["triad_gbps"], fig["read_gbps"])
    assert abs(fig["decode_ratio"] - fig["decode_gbps"] / fig["bw_bound_gbps"]) <= 1e-3 * fig["decode_ratio"] + 1e-4
    assert abs(fig["decode_cpu_ratio"] - fig["decode_cpu_gbps"] / fig["bw_bound_gbps"]) <= \
        1e-3 * fig["decode_cpu_ratio"] + 1e-4
    # Per CPU-second is never slower than per wall second by more than rounding (the share is at most ~1).
    assert fig["decode_cpu_gbps"] >= fig["decode_gbps"] * 0.95
    assert 0 < fig["prefill_ratio"] and 0 < fig["decode_ratio"]
    # The median step: positive, its tok/s the batch over it.
    assert fig["decode_median_ms_per_step"] > 0
    assert abs(fig["decode_median_tok_s"] - fig["batch"] * 1000 / fig["decode_median_ms_per_step"]) <= \
        1e-3 * fig["decode_median_tok_s"]
    assert "median step" in r.stdout
    assert "of the bound" in r.stdout and "decode:" in r.stdout and "prefill:" in r.stdout
    assert "read stream" in r.stdout and "per CPU-second" in r.stdout


def test_bench_thread_count_follows_the_environment_like_the_backend(vibevoice, tmp_path):
    env = dict(os.environ, VIBEVOICE_THREADS="1")
    out = tmp_path / "bench.json"
    r = subprocess.run([str(vibevoice), "bench", "--random", "tiny", "--skip-probes", "--skip-encoder",
                        "--prefill-tokens", "8", "--decode-tokens", "2", "--json", str(out)],
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    fig = json.loads(out.read_text())
    assert fig["threads"] == 1 and "(1 threads)" in r.stdout


def test_bench_help_says_what_the_memory_bound_measures(vibevoice):
    r = subprocess.run([str(vibevoice), "bench", "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0
    text = " ".join(r.stdout.split())
    for phrase in ("STREAM triad", "read-only", "best of 7 passes", "best of 9 passes", "larger than the LLC",
                   "CPU time"):
        assert phrase in text, phrase


def test_bench_checkpoint_directory(vibevoice, golden_dir, tmp_path):
    _, fig = bench(vibevoice, tmp_path, "--model", str(golden_dir / "model-hf"), "--skip-probes", "--batch", "3")
    assert fig["batch"] == 3 and fig["decode_tok_s"] > 0 and fig["triad_gbps"] == 0
    assert fig["read_gbps"] == 0 and fig["bw_bound_gbps"] == 0 and fig["decode_ratio"] == 0


def test_bench_refuses_both_or_neither_source(vibevoice, golden_dir):
    for args in ([], ["--random", "tiny", "--model", str(golden_dir / "model-hf")]):
        r = subprocess.run([str(vibevoice), "bench", *args], capture_output=True, text=True, timeout=60)
        assert r.returncode != 0 and "--random" in r.stderr


def test_bench_refuses_unknown_shape(vibevoice):
    r = subprocess.run([str(vibevoice), "bench", "--random", "13b"], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "13b" in r.stderr
