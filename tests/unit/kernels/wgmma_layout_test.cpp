// The wgmma layouts and descriptors the Hopper kernels build (kernels/cuda/wgmma_layout.h), on the
// host: the 128-byte swizzle is TMA's (a permutation of each 1,024-byte atom's 16-byte chunks, address
// bits 4-6 XORed with bits 7-9), and the descriptor's fields are where PTX's "Matrix Descriptor Format"
// puts them, checked against the ISA's worked examples. (Whether the hardware reads them as intended is
// the gpu tests' part: CudaFlashPrefill.*OnHopper, the stream GEMM's.)
#include "kernels/cuda/wgmma_layout.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <set>

namespace vv::test {
namespace {

using cuda::sw128_desc;
using cuda::sw128_desc_mn;
using cuda::sw128_offset;
using cuda::wgmma_desc;

struct Fields {
  uint32_t start, lbo, sbo, base, mode;
};
Fields fields(uint64_t d) {
  return {static_cast<uint32_t>(d & 0x3FFF), static_cast<uint32_t>((d >> 16) & 0x3FFF),
          static_cast<uint32_t>((d >> 32) & 0x3FFF), static_cast<uint32_t>((d >> 49) & 7),
          static_cast<uint32_t>(d >> 62)};
}

TEST(WgmmaLayout, Swizzle128IsTmasPermutationOfEachAtom) {
  for (int atom = 0; atom < 4; ++atom) {
    std::set<uint32_t> seen;
    for (int r = atom * 8; r < atom * 8 + 8; ++r) {
      for (int c = 0; c < 8; ++c) {
        const uint32_t linear = static_cast<uint32_t>(r) * 128u + static_cast<uint32_t>(c) * 16u;
        const uint32_t want = linear ^ (((linear >> 7) & 7u) << 4);
        EXPECT_EQ(sw128_offset(r, c), want) << "row " << r << " chunk " << c;
        EXPECT_EQ(sw128_offset(r, c) / 1024, static_cast<uint32_t>(atom)) << "row " << r << " chunk " << c;
        seen.insert(sw128_offset(r, c));
      }
    }
    EXPECT_EQ(seen.size(), 64u) << "atom " << atom << ": chunks collide";
  }
}

TEST(WgmmaLayout, DescriptorFieldsMatchThePtxExamples) {
  // K-major, no swizzle, tf32 (ISA example): LBO 64·4 bytes encodes as 16, SBO 32·4 as 8.
  Fields f = fields(wgmma_desc(0x1000, 64 * 4, 32 * 4, 0));
  EXPECT_EQ(f.start, 0x1000u >> 4);
  EXPECT_EQ(f.lbo, 16u);
  EXPECT_EQ(f.sbo, 8u);
  EXPECT_EQ(f.base, 0u);
  EXPECT_EQ(f.mode, 0u);
  // MN-major, 64-byte swizzle, bf16: LBO 256·2 bytes encodes as 32, SBO 512·2 as 64, mode 2.
  f = fields(wgmma_desc(0x2400, 256 * 2, 512 * 2, 2));
  EXPECT_EQ(f.start, 0x2400u >> 4);
  EXPECT_EQ(f.lbo, 32u);
  EXPECT_EQ(f.sbo, 64u);
  EXPECT_EQ(f.mode, 2u);
  // The address field keeps 18 bits of the shared-memory address (the top of 228 KB fits).
  EXPECT_EQ(fields(wgmma_desc(0x38FF0, 0, 0, 0)).start, 0x38FF0u >> 4);
}

TEST(WgmmaLayout, TheKernelsDescriptors) {
  // K-major 128-byte swizzle (the stream GEMM's and the flash forms' Q and K): LBO encoded 1 (unused),
  // SBO 1,024 bytes, mode 1; the same bits as the stream GEMM's hand-written encoding.
  for (uint32_t addr : {0x0u, 0x400u, 0x2020u, 0x1C060u}) {
    const Fields f = fields(sw128_desc(addr));
    EXPECT_EQ(f.start, addr >> 4);
    EXPECT_EQ(f.lbo, 1u);
    EXPECT_EQ(f.sbo, 64u);
    EXPECT_EQ(f.mode, 1u);
    EXPECT_EQ(sw128_desc(addr), (static_cast<uint64_t>(addr >> 4)) | (uint64_t{1} << 16) |
                                    (uint64_t{1024 >> 4} << 32) | (uint64_t{1} << 62));
  }
  // MN-major 128-byte swizzle (wgf's V): the next 64 d an 8,192-byte atom on, 8-key groups 1,024 apart.
  const Fields v = fields(sw128_desc_mn(0x6800, 8192));
  EXPECT_EQ(v.start, 0x6800u >> 4);
  EXPECT_EQ(v.lbo, 8192u >> 4);
  EXPECT_EQ(v.sbo, 1024u >> 4);
  EXPECT_EQ(v.mode, 1u);
}

}  // namespace
}  // namespace vv::test
