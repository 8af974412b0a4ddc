// The shared-memory layouts and matrix descriptors of Hopper's wgmma (PTX ISA, "Matrix Descriptor
// Format" and "Canonical Layouts"), as plain constexpr functions: the kernels (wgmma_util.cuh) and a
// host test (tests/unit/kernels/cuda/wgmma_layout_test.cpp) use the same ones. No CUDA headers.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define VV_HD __host__ __device__
#else
#define VV_HD
#endif

namespace vv::cuda {

// Byte offset, within a 128-byte-swizzled region (rows of 128 bytes, the region 1,024-byte aligned),
// of the 16-byte chunk c (0..7) of row r: the chunk index is XORed with the row's index mod 8 (TMA's
// SWIZZLE_128B, address bits 4-6 ^= bits 7-9).
VV_HD constexpr uint32_t sw128_offset(int r, int c) {
  return static_cast<uint32_t>(r) * 128u + (static_cast<uint32_t>(c ^ (r & 7)) << 4);
}

// matrix-descriptor-encode(x) = (x & 0x3FFFF) >> 4; fields: start address bits 0-13, leading
// dimension byte offset (LBO) 16-29, stride dimension byte offset (SBO) 32-45, base offset 49-51 (0:
// every pattern starts on a 1,024-byte boundary here), swizzle mode 62-63 (1: 128-byte).
VV_HD constexpr uint64_t wgmma_desc(uint32_t addr, uint32_t lbo, uint32_t sbo, uint32_t swizzle_mode) {
  return (static_cast<uint64_t>((addr & 0x3FFFF) >> 4)) |
         (static_cast<uint64_t>((lbo & 0x3FFFF) >> 4) << 16) |
         (static_cast<uint64_t>((sbo & 0x3FFFF) >> 4) << 32) |
         (static_cast<uint64_t>(swizzle_mode & 3) << 62);
}

// A K-major operand in 128-byte-swizzled rows: eight-row groups SBO = 1,024 bytes apart; LBO unused
// (encoded 1, as PTX assumes).
VV_HD constexpr uint64_t sw128_desc(uint32_t addr) {
  return wgmma_desc(addr, 16, 1024, 1);
}

// An MN-major operand in 128-byte-swizzled atoms (the canonical ((8,8,m),(8,k)) bf16 layout): rows of
// 128 bytes are 64 consecutive N elements at one k, eight k rows make a 1,024-byte atom; the next eight
// k rows are SBO = 1,024 bytes on, the next 64 N elements LBO = `lbo` bytes on.
VV_HD constexpr uint64_t sw128_desc_mn(uint32_t addr, uint32_t lbo) {
  return wgmma_desc(addr, lbo, 1024, 1);
}

}  // namespace vv::cuda

#undef VV_HD
