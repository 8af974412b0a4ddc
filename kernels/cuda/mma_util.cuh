// Tensor-core building blocks shared by the hand-written bf16 kernels (prefill attention, the
// encoders' fused FFN): ldmatrix loads from shared memory, the m16n8k16 bf16 mma with f32
// accumulation, and bf16 packing. Fragment layouts (PTX ISA, mma.m16n8k16, g = lane/4, t = lane%4):
//   A 16×16 row-major: a0 (g, 2t..2t+1), a1 (g+8, 2t..), a2 (g, 2t+8..), a3 (g+8, 2t+8..)
//   B 16×8 (k × n):    b0 (k 2t..2t+1, n g), b1 (k 2t+8.., n g)
//   C 16×8 f32:        c0,c1 (g, 2t..2t+1), c2,c3 (g+8, 2t..2t+1)
// so the C fragments of two adjacent 8-column tiles are, packed to bf16, the A fragment of a
// following mma over those 16 columns.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace vv::cuda::mma {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void ldsm_x4(const void* p, uint32_t& r0, uint32_t& r1, uint32_t& r2,
                                        uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm_x4_t(const void* p, uint32_t& r0, uint32_t& r1, uint32_t& r2,
                                          uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(smem_addr(p)));
}
// The same from a 32-bit shared-memory address: a kernel that keeps one base address per operand and
// adds constant offsets lets ptxas fold them into the instruction (no address register per fragment).
__device__ __forceinline__ void ldsm_x4_at(uint32_t addr, uint32_t* r) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t_at(uint32_t addr, uint32_t* r) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
// A lane's element offset within a tile for ldsm_a, ldsm_b_nmajor and ldsm_b_kmajor (below): their
// base + this offset is the lane's row address.
__device__ __forceinline__ int ldsm_a_lane(int ld, int lane) {
  return (lane & 15) * ld + (lane >> 4) * 8;
}
__device__ __forceinline__ int ldsm_b_nmajor_lane(int ld, int lane) {
  return ((lane & 7) + ((lane >> 4) << 3)) * ld + ((lane >> 3) & 1) * 8;
}
__device__ __forceinline__ int ldsm_b_kmajor_lane(int ld, int lane) {
  return ((lane & 7) + ((lane >> 3) & 1) * 8) * ld + (lane >> 4) * 8;
}

// c += a·b for one 16×8 tile.
__device__ __forceinline__ void mma_bf16(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// Two floats as bf16 (round to nearest even), `lo` in the low half (the lower column).
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// The A fragment of a 16×16 tile from the f32 C fragments of two adjacent 8-column tiles (lo: columns
// 0-7, hi: 8-15), rounded to bf16: how a product (scores, hidden activations) feeds the next mma.
__device__ __forceinline__ void pack_a_from_c(const float* lo, const float* hi, uint32_t* a) {
  a[0] = pack_bf16(lo[0], lo[1]);
  a[1] = pack_bf16(lo[2], lo[3]);
  a[2] = pack_bf16(hi[0], hi[1]);
  a[3] = pack_bf16(hi[2], hi[3]);
}

// B fragments of two adjacent 8-wide n tiles from a matrix stored n-major in shared memory
// (row = n, 16 consecutive k per row, row stride ld elements): base points at (n0, k0).
// r0,r1: tile n0..n0+7; r2,r3: tile n0+8..n0+15. (Keys of K for Q·Kᵀ; rows of W for X·Wᵀ.)
__device__ __forceinline__ void ldsm_b_nmajor(const __nv_bfloat16* base, int ld, int lane, uint32_t& r0,
                                              uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  ldsm_x4(base + ((lane & 7) + ((lane >> 4) << 3)) * ld + ((lane >> 3) & 1) * 8, r0, r1, r2, r3);
}
// B fragments of two adjacent 8-wide n tiles from a matrix stored k-major (row = k, n contiguous):
// base points at (k0, n0). r0,r1: n0..n0+7; r2,r3: n0+8..n0+15. (V for P·V.)
__device__ __forceinline__ void ldsm_b_kmajor(const __nv_bfloat16* base, int ld, int lane, uint32_t& r0,
                                              uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  ldsm_x4_t(base + ((lane & 7) + ((lane >> 3) & 1) * 8) * ld + (lane >> 4) * 8, r0, r1, r2, r3);
}
// A fragment of a 16×16 tile stored row-major: base points at (m0, k0).
__device__ __forceinline__ void ldsm_a(const __nv_bfloat16* base, int ld, int lane, uint32_t* a) {
  ldsm_x4(base + (lane & 15) * ld + (lane >> 4) * 8, a[0], a[1], a[2], a[3]);
}

// Eight f16 values (one 16-byte load) as eight bf16 values packed the same way.
__device__ __forceinline__ uint4 f16x8_to_bf16x8(uint4 u) {
  const __half2* h = reinterpret_cast<const __half2*>(&u);
  uint32_t o[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __half22float2(h[i]);
    o[i] = pack_bf16(f.x, f.y);
  }
  return make_uint4(o[0], o[1], o[2], o[3]);
}

// cp.async: 16 bytes global → shared without a register round trip (L2 only, .cg); the _zfill form
// copies nothing and writes zeros when !valid (gmem must still be a valid address). Groups are
// committed per thread, and cp_async_wait<N>() waits until at most N of this thread's are in flight.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(smem)), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async16_zfill(void* smem, const void* gmem, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem),
               "r"(valid ? 16 : 0)
               : "memory");
}
// 4 bytes (zeros where !valid; gmem is then not read): a thread copying exactly the elements it
// later reads itself needs no barrier after its own cp_async_wait.
__device__ __forceinline__ void cp_async4_zfill(void* smem, const void* gmem, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem),
               "r"(valid ? 4 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Max and sum over the four lanes of a quad (the threads sharing an accumulator row of a fragment).
__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

}  // namespace vv::cuda::mma
