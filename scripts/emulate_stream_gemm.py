#!/usr/bin/env python3
"""Here, no GPU needed: a per-lane numpy emulation of stream_gemm_kernel (kernels/cuda/stream_gemm.cu)
-- the stream-K cut of (128-row tile x 64-deep K step) units over the grid, each block's cp.async
copies into the padded stages (zero-filled past N, M and K), the ring of S stages in the kernel's
order, ldmatrix and the m16n8k16 fragments of mma_util.cuh (emulate_decode_attention.py's) with the
weight as operand A and a's rows as operand B, and the flush at a tile's or a run's end (plain store
for a whole tile, atomic add otherwise, after the launcher's zeroing) -- against a float64 reference
on the same bf16 operands. It checks indexing, not rounding (products are summed in float64). Keep
it in step with the kernel.
Usage: .venv/bin/python scripts/emulate_stream_gemm.py"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from emulate_decode_attention import bf16, ldsm, mma  # noqa: E402

BN, BK, LD, THREADS, PER_SM = 128, 64, 72, 128, 2


def nt_for(M):
    return 1 if M <= 16 else 2 if M <= 32 else 4 if M <= 64 else 8


def stages_for(NT):
    return 3 if NT >= 8 else 4


def geometry(N, K, sms):
    ksteps = (K + BK - 1) // BK
    units = (N + BN - 1) // BN * ksteps
    return ksteps, units, min(units, PER_SM * max(sms, 1))


def unit_begin(b, G, units):
    return b * units // G


def split_tiles(N, K, sms):
    ksteps, units, G = geometry(N, K, sms)
    return sum(unit_begin(b, G, units) % ksteps != 0 for b in range(1, G))


def run_block(a, w, bias, out, accumulate, M, N, K, bx, G, ksteps, units):
    NT = nt_for(M)
    S, XR = stages_for(NT), 16 * NT
    u0, u1 = unit_begin(bx, G, units), unit_begin(bx + 1, G, units)
    Ws = np.full(S * BN * LD, np.nan)  # padding and stale stages must never be read
    Xs = np.full(S * XR * LD, np.nan)

    def load_w(stage, u):
        n0, k0 = (u // ksteps) * BN, (u % ksteps) * BK
        for tid in range(THREADS):
            for i in range(BN * 8 // THREADS):
                c = tid + i * THREADS
                r, k = c >> 3, k0 + (c & 7) * 8
                dst = stage * BN * LD + r * LD + (c & 7) * 8
                Ws[dst:dst + 8] = w[n0 + r, k:k + 8] if (n0 + r < N and k < K) else 0.0

    def load_x(stage, u):
        k0 = (u % ksteps) * BK
        for tid in range(THREADS):
            for i in range(XR * 8 // THREADS):
                c = tid + i * THREADS
                r, k = c >> 3, k0 + (c & 7) * 8
                dst = stage * XR * LD + r * LD + (c & 7) * 8
                Xs[dst:dst + 8] = a[r, k:k + 8] if (r < M and k < K) else 0.0

    def zero():
        return [[[[[0.0] * 4 for _ in range(32)] for _ in range(2 * NT)] for _ in range(2)] for _ in range(4)]

    for st in range(S - 1):
        if u0 + st < u1:
            load_w(st, u0 + st)
    for st in range(S - 1):
        if u0 + st < u1:
            load_x(st, u0 + st)
    acc = zero()
    seg = u0
    for u in range(u0, u1):
        i = u - u0
        if u + S - 1 < u1:
            load_w((i + S - 1) % S, u + S - 1)
            load_x((i + S - 1) % S, u + S - 1)
        for warp in range(4):
            wst = (i % S) * BN * LD + warp * 32 * LD
            xst = (i % S) * XR * LD
            for kk in range(0, BK, 16):
                af = [ldsm(Ws, [wst + mt * 16 * LD + kk + (T & 15) * LD + (T >> 4) * 8 for T in range(32)], False)
                      for mt in range(2)]
                for j in range(NT):
                    base = xst + 16 * j * LD + kk
                    r = ldsm(Xs, [base + ((T & 7) + ((T >> 4) << 3)) * LD + ((T >> 3) & 1) * 8 for T in range(32)],
                             False)
                    b0, b1 = [r[T][0] for T in range(32)], [r[T][1] for T in range(32)]
                    b2, b3 = [r[T][2] for T in range(32)], [r[T][3] for T in range(32)]
                    for mt in range(2):
                        mma(acc[warp][mt][2 * j], af[mt], b0, b1)
                        mma(acc[warp][mt][2 * j + 1], af[mt], b2, b3)
        if u + 1 != u1 and (u + 1) % ksteps != 0:
            continue
        first = seg % ksteps == 0
        whole = first and (u + 1) % ksteps == 0
        for warp in range(4):
            nb = (u // ksteps) * BN + warp * 32
            for T in range(32):
                g, t4 = T // 4, T % 4
                for mt in range(2):
                    for h in range(2):
                        n = nb + mt * 16 + g + 8 * h
                        if n >= N:
                            continue
                        bv = bias[n] if first and bias is not None else 0.0
                        for nt in range(2 * NT):
                            for jj in range(2):
                                m = nt * 8 + 2 * t4 + jj
                                if m >= M:
                                    continue
                                v = acc[warp][mt][nt][T][2 * h + jj] + bv
                                if whole:
                                    out[m, n] = out[m, n] + v if accumulate else v
                                else:
                                    out[m, n] += v  # atomicAdd
        acc = zero()
        seg = u + 1


def run(a, w, bias, out0, accumulate, sms):
    M, K = a.shape
    N = w.shape[0]
    ksteps, units, G = geometry(N, K, sms)
    out = out0.copy()
    splits = split_tiles(N, K, sms)
    if not accumulate and splits > 0:
        out[:, :] = 0.0  # the launcher's cudaMemset2DAsync
    for bx in range(G):
        run_block(a, w, bias, out, accumulate, M, N, K, bx, G, ksteps, units)
    return out, G, splits


def case(M, N, K, sms, use_bias, accumulate, seed):
    rng = np.random.default_rng(seed)
    a = bf16(rng.uniform(-1.5, 1.5, (M, K))).astype(np.float64)
    w = bf16(rng.uniform(-1, 1, (N, K)) / np.sqrt(K)).astype(np.float64)
    bias = rng.uniform(-0.5, 0.5, N) if use_bias else None
    out0 = rng.uniform(-2, 2, (M, N)) if accumulate else np.full((M, N), np.nan)
    got, G, splits = run(a, w, bias, out0, accumulate, sms)
    want = a @ w.T + (bias[None, :] if use_bias else 0) + (out0 if accumulate else 0)
    err = np.max(np.abs(got - want)) if np.all(np.isfinite(got)) else np.inf
    ok = err <= 1e-9 * max(1.0, np.max(np.abs(want)))
    print(f"M={M:3d} N={N:4d} K={K:5d} sms={sms:2d} grid={G:3d} split points={splits:2d} bias={int(use_bias)} "
          f"residual={int(accumulate)}: max err {err:.2e} {'ok' if ok else 'FAIL'}")
    return ok


if __name__ == "__main__":
    cases = [
        (2, 8, 8, 4, False, False),        # one unit: a block alone, whole tile
        (3, 129, 72, 1, True, False),      # two tiles over two blocks, K of one step and a bit
        (5, 130, 1000, 3, True, True),     # tiles shared by blocks, residual
        (17, 136, 520, 2, False, False),   # 32-row form, shared tiles, zeroed output
        (40, 300, 264, 2, True, False),    # 64-row form, three tiles over four blocks
        (70, 40, 296, 1, True, True),      # 128-row form (3 stages)
        (1, 256, 128, 8, True, False),     # one row; fewer units than blocks: one unit each
    ]
    results = [case(*c, seed=i) for i, c in enumerate(cases)]
    sys.exit(0 if all(results) else 1)
