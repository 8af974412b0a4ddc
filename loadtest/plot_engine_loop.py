#!/usr/bin/env python3
"""Plot the scheduler's concurrency curve (issue 13): summed decode tok/s against concurrent requests,
ours next to the PyTorch reference and plain cuBLAS's weights-only floor, all from one device call.

    plot_engine_loop.py --ours engine_loop.txt --reference bench_reference.json \
        --roofline roofline.txt --out curve.png [--title "..."]

--ours: the output of tests/bench/engine_loop_bench (its last line is JSON); --reference: the JSON of
../shared/golden/bench_reference.py (decode_batch); --roofline: the JSON of decode_roofline.py
(graph_replay). Needs matplotlib (`.venv/bin/pip install matplotlib`). Also prints the table.
"""
import argparse
import json
import sys


def last_json_line(path):
    with open(path) as f:
        lines = [ln for ln in f.read().splitlines() if ln.strip().startswith("{")]
    if not lines:
        sys.exit(f"{path}: no JSON line")
    return json.loads(lines[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ours", required=True)
    ap.add_argument("--reference")
    ap.add_argument("--roofline")
    ap.add_argument("--out", required=True)
    ap.add_argument("--title", default="VibeVoice-ASR 7B (bf16), summed decode throughput, one H200")
    ap.add_argument("--reference-label", default="PyTorch reference (transformers, sdpa)")
    args = ap.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("matplotlib is missing: .venv/bin/pip install matplotlib")

    ours = last_json_line(args.ours)
    pts = [(p["n"], p["decode_tps"]) for p in ours["points"]]
    # Full steps (every request decoding): the cost of an N-row step, without the ramp's mixed steps.
    full = [(p["n"], p["full_tps"]) for p in ours["points"] if p.get("full_steps", 0) > 0]
    ref = []
    if args.reference:
        with open(args.reference) as f:
            r = json.load(f)
        ref = sorted((int(b), v["tokens_per_second"]) for b, v in r.get("decode_batch", {}).items())
    roof = []
    if args.roofline:
        rl = last_json_line(args.roofline)
        roof = sorted((int(m), v["tok_s"]) for m, v in rl.get("graph_replay", {}).items() if int(m) <= 256)

    print(f"{'N':>5} {'ours tok/s':>12} {'full steps':>12} {'reference':>12} {'cuBLAS floor':>13}")
    refd, roofd, fulld = dict(ref), dict(roof), dict(full)
    for n, t in pts:
        print(f"{n:>5} {t:>12.1f} {fulld.get(n, float('nan')):>12.1f} {refd.get(n, float('nan')):>12.1f} "
              f"{roofd.get(n, float('nan')):>13.1f}")

    fig, ax = plt.subplots(figsize=(7.5, 4.8), dpi=110)
    ax.plot(*zip(*pts), "o-", label="vibevoice (EngineLoop, CUDA, bf16): all decode steps")
    if full:
        ax.plot(*zip(*full), "o-", label="vibevoice: full steps (all N requests decoding)")
    if ref:
        ax.plot(*zip(*ref), "s--", label=args.reference_label)
    if roof:
        ax.plot(*zip(*roof), "^:", label="cuBLAS weights-only floor (graph-replayed)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(f"concurrent requests ({ours.get('audio_s', 30):g} s audio, {ours.get('tokens', 256)} forced tokens each)")
    ax.set_ylabel("summed decode tokens / s")
    ax.set_title(args.title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
