#!/usr/bin/env python3
"""The figures of a host_measure.sh output folder, one line per configuration.

Reads every <step>.json that host_measure.sh kept (the last JSON line a tool printed) under the
folders given, groups the runs of one configuration (names that differ only in a trailing repeat
index _r1, _r2, ...) and prints, per configuration and figure, the median and the runs: scalars only,
plus the curve's points (full_tps and decode_tps per concurrency) and the batched decode bench's
(tok_s, ms_step and bound_tok_s per row count). Usage: summarize.py DIR [DIR ...]
"""
import json
import pathlib
import re
import statistics
import sys

FIGURES = ("prefill_tok_s", "decode_tok_s", "decode_step_tok_s", "job_rtf", "copy_gbps", "decode_bound_tok_s",
           "ab_a_step_tok_s", "ab_b_step_tok_s", "ab_ratio", "ab_b_won")


def figures(doc):
    out = {}
    for k, v in doc.items():
        if isinstance(v, (int, float)) and not isinstance(v, bool) and (k in FIGURES or k.startswith("encoder_ms")):
            out[k] = float(v)
    for p in doc.get("points", []) or []:
        if isinstance(p, dict) and "n" in p:
            for k in ("full_tps", "decode_tps"):
                if k in p:
                    out[f"{k}@{p['n']}"] = float(p[k])
        if isinstance(p, dict) and "rows" in p:  # cuda_decode_bench --batch-bench
            for k in ("tok_s", "ms_step", "bound_tok_s"):
                if k in p:
                    out[f"{k}@{p['rows']}"] = float(p[k])
    return out


def main(argv):
    if len(argv) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    groups = {}
    for d in argv[1:]:
        for f in sorted(pathlib.Path(d).rglob("*.json")):
            try:
                doc = json.loads(f.read_text())
            except (OSError, ValueError) as e:
                print(f"{f}: unreadable ({e})", file=sys.stderr)
                continue
            if not isinstance(doc, dict):
                continue
            name = re.sub(r"_r\d+$", "", f.stem)
            for k, v in figures(doc).items():
                groups.setdefault(name, {}).setdefault(k, []).append(v)
    for name in sorted(groups):
        for k, vs in sorted(groups[name].items()):
            runs = " ".join(f"{v:g}" for v in vs)
            print(f"{name:48s} {k:22s} median {statistics.median(vs):10g}   runs {runs}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
