#!/usr/bin/env python3
"""Sums Nsight Compute's per-launch durations (`ncu --csv --metrics gpu__time_duration.sum,...`) by kernel.

Each row of the table: a kernel (its name cut to its template head and arguments) with its grid and block, the
launches, the total and mean µs, and the share of the total. --runs N divides counts and totals by N (a process
that ran the same work N times, e.g. warm-ups and a timed run).

    ncu_kernel_table.py FILE [--runs N] [--top N]
"""
import argparse
import collections
import csv
import io
import sys


def rows_of(path):
    text = open(path, errors="replace").read()
    start = text.find('"ID"')
    if start < 0:
        raise SystemExit(f"{path}: no CSV header with an ID column (not `ncu --csv` output?)")
    return list(csv.DictReader(io.StringIO(text[start:])))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file")
    ap.add_argument("--runs", type=float, default=1.0, help="divide counts and times by this")
    ap.add_argument("--top", type=int, default=40, help="rows to print")
    a = ap.parse_args()
    launches = collections.defaultdict(dict)  # launch id -> metric -> value
    names = {}
    for r in rows_of(a.file):
        lid = r.get("ID")
        if lid is None:
            continue
        names[lid] = r.get("Kernel Name", "?")
        value = r.get("Metric Value", "").replace(",", "")
        try:
            v = float(value)
        except ValueError:
            continue
        unit = r.get("Metric Unit", "")
        metric = r.get("Metric Name", "")
        if metric == "gpu__time_duration.sum":
            v *= {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3, "s": 1e6, "second": 1e6}.get(unit, 1.0)
        launches[lid][metric] = v
    groups = collections.defaultdict(lambda: [0, 0.0])
    for lid, m in launches.items():
        if "gpu__time_duration.sum" not in m:
            continue
        name = names[lid]
        key = (name[:110], int(m.get("launch__grid_size", 0)), int(m.get("launch__block_size", 0)))
        groups[key][0] += 1
        groups[key][1] += m["gpu__time_duration.sum"]
    total = sum(g[1] for g in groups.values())
    if total <= 0:
        raise SystemExit(f"{a.file}: no launch with a duration")
    print(f"{len(launches)} launches, {total / a.runs:.1f} us a run ({a.runs:g} runs)")
    print(f"{'us a run':>10} {'share':>6} {'launches':>8} {'mean us':>9} {'grid':>7} {'block':>5}  kernel")
    for (name, grid, block), (n, t) in sorted(groups.items(), key=lambda kv: -kv[1][1])[: a.top]:
        print(f"{t / a.runs:10.1f} {100 * t / total:5.1f}% {n / a.runs:8.1f} {t / n:9.2f} {grid:7d} {block:5d}  {name}")


if __name__ == "__main__":
    sys.exit(main())
