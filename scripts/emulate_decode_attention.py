#!/usr/bin/env python3
"""Here, no GPU needed: a per-lane numpy emulation of mma_decode_stream_kernel (kernels/cuda/
decode_ops.cu) -- its cp.async copies into the swizzled stages (both block-table paths), ldmatrix
(plain and .trans), the m16n8k16 fragment layouts of mma_util.cuh, the online softmax, the ring's
refills and the last unit's merge (lanes over units, shuffled weights, 32-unit passes, unit 0
prefetched) -- against a float64 reference, within the GPU test's 4e-3 of max(|ref|, 1). It checks
indexing, not rounding (products are summed in float64). Keep it in step with the kernel when the
kernel's layouts change; a planted index bug (swizzle, lane map, a missing .trans) fails it.
Usage: .venv/bin/python scripts/emulate_decode_attention.py"""
import numpy as np


def bf16(x):
    b = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    b = (b + 0x7FFF + ((b >> 16) & 1)) >> 16
    return (b.astype(np.uint32) << 16).view(np.float32)


def ldsm(smem, addrs, trans):
    """ldmatrix .x4: lanes 8i..8i+7 give the rows of matrix i; register i of lane T holds
    (row T/4, cols 2(T%4), +1), or with .trans (rows 2(T%4), +1, col T/4)."""
    regs = [[None] * 4 for _ in range(32)]
    for i in range(4):
        m = np.stack([smem[addrs[8 * i + j]:addrs[8 * i + j] + 8] for j in range(8)])
        for T in range(32):
            if trans:
                regs[T][i] = (m[2 * (T % 4), T // 4], m[2 * (T % 4) + 1, T // 4])
            else:
                regs[T][i] = (m[T // 4, 2 * (T % 4)], m[T // 4, 2 * (T % 4) + 1])
    return regs


def mma(c, a, b0, b1):
    """c += a·b for one m16n8k16 tile, fragments as in mma_util.cuh (g = T/4, t = T%4)."""
    A = np.zeros((16, 16))
    B = np.zeros((16, 8))
    for T in range(32):
        g, t = T // 4, T % 4
        A[g, 2 * t:2 * t + 2] = a[T][0]
        A[g + 8, 2 * t:2 * t + 2] = a[T][1]
        A[g, 2 * t + 8:2 * t + 10] = a[T][2]
        A[g + 8, 2 * t + 8:2 * t + 10] = a[T][3]
        B[2 * t:2 * t + 2, g] = b0[T]
        B[2 * t + 8:2 * t + 10, g] = b1[T]
    C = A @ B
    for T in range(32):
        g, t = T // 4, T % 4
        c[T][0] += C[g, 2 * t]
        c[T][1] += C[g, 2 * t + 1]
        c[T][2] += C[g + 8, 2 * t]
        c[T][3] += C[g + 8, 2 * t + 1]


def run_unit(q, kc, vc, tab, bs, L, kvh, G, D, chunk, unit, S, scale_log2):
    """One warp's unit: its partial (acc [G][D], max [8], sum [8]) as the kernel leaves it in ws."""
    KS, DT, CPR = D // 16, D // 8, D // 8
    KPP = 32 // CPR
    PASSES = 16 // KPP
    ROWS = 16 * D
    k0 = unit * chunk
    k1 = min(L, k0 + chunk)
    nsteps = (k1 - k0 + 15) // 16
    hoff = kvh * D
    sm = np.full(S * 2 * ROWS, np.nan, np.float32)  # stale shared memory
    tiled = bs % 16 == 0

    def issue(step, stage):
        j0 = k0 + 16 * step
        for lane in range(32):
            cn, cc = lane // CPR, lane % CPR
            if tiled:
                base = tab[j0 // bs] * bs + j0 % bs
                slots = [base + cn + KPP * p for p in range(PASSES)]
            else:
                slots = []
                for p in range(PASSES):
                    j = min(j0 + cn + KPP * p, k1 - 1)
                    slots.append(tab[j // bs] * bs + j % bs)
            ks = stage * 2 * ROWS
            vs = ks + ROWS
            for p in range(PASSES):
                n = cn + KPP * p
                so = n * D + 8 * (cc ^ (n & 7))
                if j0 + n < k1:
                    sm[ks + so:ks + so + 8] = kc[slots[p], hoff + 8 * cc:hoff + 8 * cc + 8]
                    sm[vs + so:vs + so + 8] = vc[slots[p], hoff + 8 * cc:hoff + 8 * cc + 8]
                else:  # zero-filled
                    sm[ks + so:ks + so + 8] = 0
                    sm[vs + so:vs + so + 8] = 0

    for s in range(min(S, nsteps)):
        issue(s, s)
    qa = [[None] * KS for _ in range(32)]
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for kk in range(KS):
            x = [q[(kvh * G + g) * D + 2 * t + 16 * kk + (e >> 1) * 8 + (e & 1)] if g < G else 0.0
                 for e in range(4)]
            x = bf16(np.array(x, np.float32))
            qa[lane][kk] = ((x[0], x[1]), (x[2], x[3]))
    o = [[[0.0, 0.0] for _ in range(DT)] for _ in range(32)]
    m = [-np.inf] * 32
    l_ = [0.0] * 32
    for st in range(nsteps):
        ks = (st % S) * 2 * ROWS
        vs = ks + ROWS
        j0 = k0 + 16 * st
        s = [[[[0.0] * 4 for _ in range(2)] for _ in range(2)] for _ in range(32)]  # [lane][parity][tile]
        for kk in range(KS):
            addrs = []
            for lane in range(32):
                kn = (lane & 7) + ((lane >> 4) << 3)
                c = 2 * kk + ((lane >> 3) & 1)
                addrs.append(ks + kn * D + 8 * (c ^ (kn & 7)))
            b = ldsm(sm, addrs, False)
            a = [(qa[T][kk][0], (0, 0), qa[T][kk][1], (0, 0)) for T in range(32)]
            for h2 in range(2):
                mma([s[T][kk & 1][h2] for T in range(32)], a, [b[T][2 * h2] for T in range(32)],
                    [b[T][2 * h2 + 1] for T in range(32)])
        p = [[[0.0, 0.0], [0.0, 0.0]] for _ in range(32)]
        mxl = []
        for T in range(32):
            t = T % 4
            mx = -np.inf
            for h2 in range(2):
                for e in range(2):
                    j = j0 + 8 * h2 + 2 * t + e
                    p[T][h2][e] = (s[T][0][h2][e] + s[T][1][h2][e]) * scale_log2 if j < k1 else -np.inf
                    mx = max(mx, p[T][h2][e])
            mxl.append(mx)
        pa, corr = [], [0.0] * 32
        for T in range(32):
            mx = max(mxl[T - T % 4:T - T % 4 + 4])
            m_new = max(m[T], mx)
            corr[T] = 2.0 ** (m[T] - m_new) if m[T] != -np.inf else 0.0
            tot = 0.0
            for h2 in range(2):
                for e in range(2):
                    p[T][h2][e] = 2.0 ** (p[T][h2][e] - m_new) if p[T][h2][e] != -np.inf else 0.0
                    tot += p[T][h2][e]
            l_[T] = l_[T] * corr[T] + tot
            m[T] = m_new
            pb = bf16(np.array([p[T][0][0], p[T][0][1], p[T][1][0], p[T][1][1]], np.float32))
            pa.append(((pb[0], pb[1]), (0, 0), (pb[2], pb[3]), (0, 0)))
        for dp in range(DT // 2):
            addrs = []
            for lane in range(32):
                vn = (lane & 7) + ((lane >> 3) & 1) * 8
                c = 2 * dp + (lane >> 4)
                addrs.append(vs + vn * D + 8 * (c ^ (vn & 7)))
            b = ldsm(sm, addrs, True)
            for h in range(2):
                cf = [[o[T][2 * dp + h][0] * corr[T], o[T][2 * dp + h][1] * corr[T], 0.0, 0.0] for T in range(32)]
                mma(cf, pa, [b[T][2 * h] for T in range(32)], [b[T][2 * h + 1] for T in range(32)])
                for T in range(32):
                    o[T][2 * dp + h][0], o[T][2 * dp + h][1] = cf[T][0], cf[T][1]
        if st + S < nsteps:
            issue(st + S, st % S)
    lq = [sum(l_[T - T % 4:T - T % 4 + 4]) for T in range(32)]
    wu = np.zeros(G * D + 16)
    for T in range(32):
        g, t = T // 4, T % 4
        if g < G:
            for dt in range(DT):
                wu[g * D + 8 * dt + 2 * t] = o[T][dt][0]
                wu[g * D + 8 * dt + 2 * t + 1] = o[T][dt][1]
            if t == 0:
                wu[G * D + g] = m[T]
                wu[G * D + 8 + g] = lq[T]
    return wu


def merge(wp, ns, G, D):
    """The last unit's merge as the kernel's lanes do it."""
    UF, VEC = G * D + 16, D // 32

    def load_unit(u, lane):
        x = np.zeros((8, VEC))
        for gg in range(G):
            x[gg] = wp[u * UF + lane * VEC + gg * D:u * UF + lane * VEC + gg * D + VEC]
        return x

    acc = np.zeros((32, 8, VEC))
    mu, lu = np.full((32, 8), -np.inf), np.zeros((32, 8))
    for lane in range(min(ns, 32)):
        for gg in range(G):
            mu[lane][gg] = wp[lane * UF + G * D + gg]
            lu[lane][gg] = wp[lane * UF + G * D + 8 + gg]
    x0 = [load_unit(0, lane) for lane in range(32)]
    M, Ls = mu.copy(), np.zeros((32, 8))
    for lane in range(32):
        for u in range(lane + 32, ns, 32):
            for gg in range(G):
                M[lane][gg] = max(M[lane][gg], wp[u * UF + G * D + gg])
    Mw = M.max(axis=0)

    def add_unit(xs, wl, i):
        for lane in range(32):
            for gg in range(G):
                acc[lane][gg] += xs[lane][gg] * wl[i][gg]

    for u0 in range(0, ns, 32):
        wl = np.zeros((32, 8))
        for lane in range(32):
            u = u0 + lane
            for gg in range(G):
                if u < ns:
                    mg = mu[lane][gg] if u0 == 0 else wp[u * UF + G * D + gg]
                    lg = lu[lane][gg] if u0 == 0 else wp[u * UF + G * D + 8 + gg]
                    wl[lane][gg] = 2.0 ** (mg - Mw[gg])
                    Ls[lane][gg] += lg * wl[lane][gg]
        i = 0
        if u0 == 0:
            add_unit(x0, wl, 0)
            i = 1
        for i in range(i, min(32, ns - u0)):
            add_unit([load_unit(u0 + i, lane) for lane in range(32)], wl, i)
    out = np.zeros(G * D)
    for gg in range(G):
        den = Ls[:, gg].sum()
        for lane in range(32):
            out[gg * D + lane * VEC:gg * D + lane * VEC + VEC] = acc[lane][gg] / den
    return out


def case(heads, kvh, D, bs, L, chunk=64, S=2, seed=0):
    rng = np.random.default_rng(seed)
    G = heads // kvh
    nblk = (L + bs - 1) // bs + 3
    tab = rng.permutation(nblk + 4)[:nblk]
    slots = (nblk + 4) * bs
    kc = bf16(rng.uniform(-1, 1, (slots, kvh * D)).astype(np.float32))
    vc = bf16(rng.uniform(-1, 1, (slots, kvh * D)).astype(np.float32))
    q = rng.uniform(-2, 2, heads * D).astype(np.float32)
    scale = 1 / np.sqrt(D)
    qb = bf16(q).astype(np.float64)
    ref = np.zeros(heads * D)
    for h in range(heads):
        kh = h // G
        rows = [tab[j // bs] * bs + j % bs for j in range(L)]
        sc = kc[rows, kh * D:(kh + 1) * D].astype(np.float64) @ qb[h * D:(h + 1) * D] * scale
        w = np.exp(sc - sc.max())
        ref[h * D:(h + 1) * D] = (w / w.sum()) @ vc[rows, kh * D:(kh + 1) * D].astype(np.float64)
    got = np.zeros(heads * D)
    ns = (L + chunk - 1) // chunk
    for kh in range(kvh):
        parts = [run_unit(q, kc, vc, tab, bs, L, kh, G, D, chunk, u, S, scale * 1.4426950408889634)
                 for u in range(ns)]
        if ns == 1:
            p = parts[0]
            got[kh * G * D:(kh + 1) * G * D] = [p[i] / p[G * D + 8 + i // D] for i in range(G * D)]
        else:
            got[kh * G * D:(kh + 1) * G * D] = merge(np.concatenate(parts), ns, G, D)
    err = np.abs(got - ref).max() / max(np.abs(ref).max(), 1)
    ok = err < 4e-3
    print(f"heads {heads}/{kvh} D {D} bs {bs} L {L} chunk {chunk} S {S}: {err:.2e} {'ok' if ok else 'FAIL'}")
    return ok


if __name__ == "__main__":
    results = [
        case(7, 1, 128, 16, 1),
        case(7, 1, 128, 16, 17),
        case(7, 1, 128, 16, 65),
        case(14, 2, 64, 32, 150, S=4),
        case(8, 1, 128, 8, 97),
        case(4, 1, 64, 24, 70, chunk=128),
        case(8, 8, 128, 16, 40),
        case(7, 1, 64, 16, 2200, seed=3),  # 35 units: the merge's second 32-unit pass
    ]
    print("all ok" if all(results) else "FAILED")
    raise SystemExit(0 if all(results) else 1)
