#!/usr/bin/env python3
"""Summarises Nsight Compute's source page (`ncu --import R --page source --csv --print-source sass`).

Prints the launch's warp-stall samples: the total, the instructions holding the most samples with their top
stall reasons and execution counts, and the samples of the runs of consecutive executed instructions (a loop
body shows as one run executed many times, a prologue as runs executed once a warp).

    ncu_sass_summary.py FILE.csv [--top N] [--runs N]
"""
import argparse
import csv
import sys


def num(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def load(path):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    for i, row in enumerate(rows):  # the header row names the columns; the kernel's name may come first
        if "Source" in row and "Address" in row:
            return row, rows[i + 1:]
    raise SystemExit(f"{path}: no header row with Address and Source (not ncu's source page as CSV?)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=15, help="instructions with the most samples to print")
    ap.add_argument("--runs", type=int, default=10, help="runs of executed instructions to print")
    args = ap.parse_args()
    hdr, data = load(args.csv)
    col = {h: i for i, h in enumerate(hdr)}
    for need in ("Warp Stall Sampling (All Samples)", "Instructions Executed"):
        if need not in col:
            raise SystemExit(f"{args.csv}: no column '{need}'")
    sc, ec, src = col["Warp Stall Sampling (All Samples)"], col["Instructions Executed"], col["Source"]
    reasons = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
    total = sum(num(r[sc]) for r in data)
    executed = sum(num(r[ec]) for r in data)
    print(f"{len(data)} SASS instructions, {executed:.0f} executed (warp level), {total:.0f} stall samples")
    if total == 0:
        return
    print(f"top {args.top} instructions by samples (index, share, executed, instruction, top reasons):")
    order = sorted(range(len(data)), key=lambda i: -num(data[i][sc]))[: args.top]
    for i in sorted(order):
        r = data[i]
        top = sorted(((num(r[col[h]]), h[len("stall_"):]) for h in reasons), reverse=True)[:2]
        why = ", ".join(f"{name} {n:.0f}" for n, name in top if n > 0)
        print(f"  {i:6d} {100 * num(r[sc]) / total:5.1f} % {num(r[ec]):10.0f}  {r[src].strip()[:56]:56s} {why}")
    runs, cur = [], None
    for i, r in enumerate(data):
        e, s = num(r[ec]), num(r[sc])
        if e == 0 and s == 0:
            if cur:
                runs.append(cur)
            cur = None
            continue
        if cur is None:
            cur = [i, i, 0.0, 0.0, e]
        cur[1], cur[2], cur[3] = i, cur[2] + s, cur[3] + e
    if cur:
        runs.append(cur)
    print(f"runs of executed instructions holding the most samples (first-last, share, executed, first's count):")
    for a, b, s, e, first in sorted(sorted(runs, key=lambda x: -x[2])[: args.runs]):
        print(f"  {a:6d}-{b:6d} {100 * s / total:5.1f} % {e:10.0f} {first:8.0f}  {data[a][src].strip()[:40]}")


if __name__ == "__main__":
    sys.exit(main())
