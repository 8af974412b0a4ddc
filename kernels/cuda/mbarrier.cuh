// Shared-memory mbarriers for the kernels that stream through stages filled by the copy engine
// (cp.async.bulk, TMA), the TMA loads themselves, and a cluster's rank and barrier. A stage's "full"
// barrier expects one arrival (the thread that issues the copies, with the bytes it expects) and
// completes when those bytes have landed; an "empty" one counts its consumers' arrivals. Addresses
// are shared-state space addresses (mma::smem_addr). sm_90 PTX: only for code compiled for such a
// device.
#pragma once

#include <cstdint>

namespace vv::cuda::mbar {

// One arrival expected a phase; then fence_init() once, before the barrier is used by the copy engine.
__device__ __forceinline__ void init1(uint32_t bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(bar));
}
__device__ __forceinline__ void fence_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// `count` arrivals expected a phase (a consumers' "stage is free" barrier).
__device__ __forceinline__ void init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}
// One plain arrival (no bytes).
__device__ __forceinline__ void arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// One arrival on the barrier at the same offset in the shared memory of CTA `rank` of this cluster.
__device__ __forceinline__ void arrive_cluster(uint32_t bar, uint32_t rank) {
  asm volatile(
      "{\n.reg .b32 ra;\nmapa.shared::cluster.u32 ra, %0, %1;\n"
      "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [ra];\n}\n" ::"r"(bar),
      "r"(rank)
      : "memory");
}
// The arrival of the phase, expecting `bytes` from the copies that complete it.
__device__ __forceinline__ void expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
// Spins until the phase of parity `phase` has completed.
__device__ __forceinline__ void wait(uint32_t bar, uint32_t phase) {
  asm volatile(
      "{\n.reg .pred p;\nWAIT_%=:\nmbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n@!p bra "
      "WAIT_%=;\n}\n" ::"r"(bar),
      "r"(phase)
      : "memory");
}
// wait(), but a phase that has not completed within about 2 s (globaltimer) traps: a pipeline that
// hangs fails its launch ("unspecified launch failure") instead of hanging the process. (No printf:
// a call in a kernel with wgmmas in flight makes the compiler serialize them.) The timer is read
// only after a failed try, so a wait that succeeds at once costs nothing more.
__device__ __forceinline__ void wait_or_trap(uint32_t bar, uint32_t phase) {
  auto try_wait = [&] {
    uint32_t done;
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(phase)
        : "memory");
    return done != 0;
  };
  if (try_wait()) return;
  uint64_t t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  while (!try_wait()) {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    if (t - t0 > 2000000000ull) __trap();
  }
}
// `bytes` (a multiple of 16; both addresses 16-byte aligned) from global memory into shared memory,
// completing on `bar`.
__device__ __forceinline__ void bulk_copy(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(src)), "r"(bytes), "r"(bar)
      : "memory");
}

// A TMA load of the box at (c0, c1) of a 2-D tensor map into shared memory, completing on `bar`.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const void* map, int c0, int c1, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], "
      "[%4];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}
// The same box into the shared memory of every CTA of the cluster in `mask` (bit r: rank r), each copy
// at offset `dst` and completing on the barrier at offset `bar` of its own CTA.
__device__ __forceinline__ void tma_load_2d_multicast(uint32_t dst, const void* map, int c0, int c1,
                                                      uint32_t bar, uint32_t mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], "
      "[%1, {%2, %3}], [%4], %5;\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar), "h"(static_cast<uint16_t>(mask))
      : "memory");
}

}  // namespace vv::cuda::mbar

namespace vv::cuda {

// This CTA's rank in its cluster.
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
// Every thread of every CTA of the cluster arrives and waits (release / acquire at cluster scope).
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}

}  // namespace vv::cuda
