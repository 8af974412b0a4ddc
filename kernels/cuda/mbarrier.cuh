// Shared-memory mbarriers for the kernels that stream through stages filled by the copy engine
// (cp.async.bulk, TMA): each stage's barrier expects one arrival (the thread that issues the copy,
// with the bytes it expects) and completes when those bytes have landed. Addresses are shared-state
// space addresses (mma::smem_addr). sm_90 PTX: only for code compiled for such a device.
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
// `bytes` (a multiple of 16; both addresses 16-byte aligned) from global memory into shared memory,
// completing on `bar`.
__device__ __forceinline__ void bulk_copy(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(src)), "r"(bytes), "r"(bar)
      : "memory");
}

}  // namespace vv::cuda::mbar
