#!/usr/bin/env python3
"""Here, no GPU needed: a per-lane numpy emulation of skinny_gemm_kernel and skinny_reduce_kernel
(kernels/cuda/skinny_gemm.cu) -- the plan, each block's cp.async copies into the padded stages
(zero-filled past N, M and the slice), the ring of S stages in the kernel's order, ldmatrix and the
m16n8k16 fragments of mma_util.cuh (emulate_decode_attention.py's), the epilogue's row/column map,
the partials and their reduction -- against a float64 reference on the same bf16 operands. It checks
indexing, not rounding (products are summed in float64). Keep it in step with the kernel.
Usage: .venv/bin/python scripts/emulate_skinny_gemm.py"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from emulate_decode_attention import bf16, ldsm, mma  # noqa: E402

BN, BK, LD, THREADS = 128, 64, 72, 128


def plan(N, K, sms, per_sm=2):
    tiles = max((N + BN - 1) // BN, 1)
    slots = max(per_sm, 1) * max(sms, 1)
    splits = max(1, (slots + tiles - 1) // tiles)
    splits = min(splits, max(1, K // 256))
    ks = max(((K + splits - 1) // splits + BK - 1) // BK * BK, BK)
    return max((K + ks - 1) // ks, 1), ks


def config(M):
    return (1, 4) if M <= 16 else (2, 4) if M <= 32 else (4, 4) if M <= 64 else (8, 3)


def block(a, w, M, N, K, bx, split, ks, MT, S):
    """One block's accumulators: acc[warp][mt][nt] = 32 lanes x 4 floats."""
    MR = 16 * MT
    n0, k_begin = bx * BN, split * ks
    k_end = min(K, k_begin + ks)
    steps = (k_end - k_begin + BK - 1) // BK
    Ws = np.full(S * BN * LD, np.nan)  # padding and stale stages must never be read
    As = np.full(S * MR * LD, np.nan)

    def load(stage, step):
        k0 = k_begin + step * BK
        for tid in range(THREADS):
            for i in range(BN * 8 // THREADS):
                c = tid + i * THREADS
                r, k = c >> 3, k0 + (c & 7) * 8
                dst = stage * BN * LD + r * LD + (c & 7) * 8
                valid = n0 + r < N and k < k_end
                Ws[dst:dst + 8] = w[n0 + r, k:k + 8] if valid else 0.0
            for i in range(MR * 8 // THREADS):
                c = tid + i * THREADS
                r, k = c >> 3, k0 + (c & 7) * 8
                dst = stage * MR * LD + r * LD + (c & 7) * 8
                valid = r < M and k < k_end
                As[dst:dst + 8] = a[r, k:k + 8] if valid else 0.0

    acc = [[[[[0.0] * 4 for _ in range(32)] for _ in range(4)] for _ in range(MT)] for _ in range(4)]
    for st in range(S - 1):
        if st < steps:
            load(st, st)
    for i in range(steps):
        if i + S - 1 < steps:
            load((i + S - 1) % S, i + S - 1)
        for warp in range(4):
            wst = (i % S) * BN * LD + warp * 32 * LD
            ast = (i % S) * MR * LD
            for kk in range(0, BK, 16):
                b = []
                for half in range(2):
                    base = wst + half * 16 * LD + kk
                    r = ldsm(Ws, [base + ((T & 7) + ((T >> 4) << 3)) * LD + ((T >> 3) & 1) * 8 for T in range(32)],
                             False)
                    b.append(([r[T][0] for T in range(32)], [r[T][1] for T in range(32)]))
                    b.append(([r[T][2] for T in range(32)], [r[T][3] for T in range(32)]))
                for mt in range(MT):
                    base = ast + mt * 16 * LD + kk
                    af = ldsm(As, [base + (T & 15) * LD + (T >> 4) * 8 for T in range(32)], False)
                    for nt in range(4):
                        mma(acc[warp][mt][nt], af, b[nt][0], b[nt][1])
    return acc


def run(a, w, bias, out0, accumulate, sms):
    M, K = a.shape
    N = w.shape[0]
    splits, ks = plan(N, K, sms)
    MT, S = config(M)
    out = out0.copy()
    ws = np.full((splits, M, N), np.nan)
    for bx in range((N + BN - 1) // BN):
        for split in range(splits):
            acc = block(a, w, M, N, K, bx, split, ks, MT, S)
            for warp in range(4):
                for T in range(32):
                    g, t4 = T // 4, T % 4
                    for mt in range(MT):
                        for h in range(2):
                            m = mt * 16 + g + 8 * h
                            if m >= M:
                                continue
                            for nt in range(4):
                                for j in range(2):
                                    n = bx * BN + warp * 32 + nt * 8 + 2 * t4 + j
                                    if n >= N:
                                        continue
                                    v = acc[warp][mt][nt][T][2 * h + j]
                                    if splits == 1:
                                        r = v + bias[n] if bias is not None else v
                                        out[m, n] = out[m, n] + r if accumulate else r
                                    else:
                                        ws[split, m, n] = v
    if splits > 1:
        v = ws[0].copy()
        for s in range(1, splits):
            v += ws[s]
        r = v + bias[None, :] if bias is not None else v
        out = out + r if accumulate else r
    return out, splits


def case(M, N, K, sms, use_bias, accumulate, seed):
    rng = np.random.default_rng(seed)
    a = bf16(rng.uniform(-1.5, 1.5, (M, K))).astype(np.float64)
    w = bf16(rng.uniform(-1, 1, (N, K)) / np.sqrt(K)).astype(np.float64)
    bias = rng.uniform(-0.5, 0.5, N) if use_bias else None
    out0 = rng.uniform(-2, 2, (M, N)) if accumulate else np.full((M, N), np.nan)
    got, splits = run(a, w, bias, out0, accumulate, sms)
    want = a @ w.T + (bias[None, :] if use_bias else 0) + (out0 if accumulate else 0)
    err = np.max(np.abs(got - want)) if np.all(np.isfinite(got)) else np.inf
    ok = err <= 1e-9 * max(1.0, np.max(np.abs(want)))
    print(f"M={M:3d} N={N:4d} K={K:5d} sms={sms:2d} splits={splits:2d} bias={int(use_bias)} "
          f"residual={int(accumulate)}: max err {err:.2e} {'ok' if ok else 'FAIL'}")
    return ok


if __name__ == "__main__":
    cases = [
        (2, 8, 8, 4, False, False),
        (3, 129, 72, 4, True, False),     # a column past a block; K of one stage and a bit
        (5, 130, 1000, 3, True, True),    # several slices, the last one short
        (17, 136, 520, 2, False, True),   # two 16-row tiles, 2 slices
        (33, 64, 264, 1, True, False),    # the 64-row form
        (70, 40, 296, 2, True, True),     # the 128-row form (3 stages)
    ]
    results = [case(*c, seed=i) for i, c in enumerate(cases)]
    sys.exit(0 if all(results) else 1)
