// The cache of freed device memory (kernels/cuda/device_cache.h): which idle block may serve a request
// (host), and on a GPU: a freed Buffer comes back to the next allocation of its size zero-filled, a
// block is not handed out while a stream that was running at its free has not passed the free, idle
// blocks count as free memory and are given back by a trim; with VV_CUDA_ALLOC_CACHE=0, that nothing is
// kept. Labelled gpu: skipped with the reason where no GPU is usable (the fit test runs everywhere).
#include "kernels/cuda/device_cache.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "tests/unit/kernels/cuda/cuda_test_util.h"

namespace vv::test {
namespace {

TEST(DeviceCacheFit, ABlockServesRequestsFromItsSizeToAnEighthBelow) {
  static_assert(cuda::cache_block_fits(4096, 4096));
  static_assert(cuda::cache_block_fits(4608, 4096));   // an eighth more
  static_assert(!cuda::cache_block_fits(4864, 4096));  // more than an eighth
  static_assert(!cuda::cache_block_fits(4095, 4096));  // too small
  EXPECT_TRUE(cuda::cache_block_fits(size_t{9} << 20, size_t{8} << 20));
  EXPECT_FALSE(cuda::cache_block_fits(size_t{64} << 20, size_t{8} << 20));
  EXPECT_FALSE(cuda::cache_block_fits(256, 0));
  EXPECT_TRUE(cuda::cache_block_fits(0, 0));
}

// With the opt-out VV_CUDA_ALLOC_CACHE=0 every free is a cudaFree and nothing is kept: each test then
// checks that contract instead of the cache's (it asserts in both modes; nothing is skipped).
void check_cache_off(Backend& be) {
  const size_t bytes = (size_t{1} << 20) + 256;
  Buffer a = be.allocate(bytes);
  ASSERT_NE(a.data(), nullptr);
  const std::vector<uint8_t> ones(bytes, 0xA5);
  be.upload(a.data(), ones.data(), bytes);
  a.reset();
  be.synchronize();
  EXPECT_EQ(cuda::cache_idle_bytes(0), 0u)
      << "VV_CUDA_ALLOC_CACHE=0: a freed block must go back to the device";
  Buffer b = be.allocate(bytes);
  ASSERT_NE(b.data(), nullptr);
  std::vector<uint8_t> back(bytes, 1);
  be.download(back.data(), b.data(), bytes);
  for (uint8_t v : back) ASSERT_EQ(v, 0);
  EXPECT_EQ(cuda::cache_trim(0), 0u);
}

#define VV_CACHE_ON_OR_CHECK_OFF(be)   \
  if (!cuda::device_cache_enabled()) { \
    check_cache_off(*(be));            \
    return;                            \
  }

TEST(CudaDeviceCache, AFreedBufferComesBackZeroFilledToTheNextAllocationOfItsSize) {
  VV_CUDA_BACKEND_OR_SKIP(be, true);
  VV_CACHE_ON_OR_CHECK_OFF(be);
  const size_t bytes = (size_t{3} << 20) + 4 * 1000 + 12;  // not a multiple of the 256-byte rounding
  Buffer a = be->allocate(bytes);
  ASSERT_NE(a.data(), nullptr);
  const std::vector<uint8_t> ones(bytes, 0xA5);
  be->upload(a.data(), ones.data(), bytes);
  void* const first = a.data();
  const size_t live = be->allocated_bytes();
  a.reset();
  EXPECT_EQ(be->allocated_bytes(), live - bytes);
  be->synchronize();
  EXPECT_GE(cuda::cache_idle_bytes(0), bytes);
  Buffer b = be->allocate(bytes);
  ASSERT_EQ(b.data(), first) << "the idle block of this size was not reused";
  std::vector<uint8_t> back(bytes, 1);
  be->download(back.data(), b.data(), bytes);
  size_t nonzero = 0;
  for (uint8_t v : back) nonzero += v != 0;
  EXPECT_EQ(nonzero, 0u) << "a reused block must read as zeros, as a fresh allocation does";
  EXPECT_EQ(be->device_error(), "");
}

// Buffers freed in the reverse of their allocation (a job's members) come back at the same addresses
// when the next job allocates in the same order, even where two have one size: the op sequences that
// name them keep their graphs.
TEST(CudaDeviceCache, AJobAllocatingAsTheOneBeforeItGetsItsAddresses) {
  VV_CUDA_BACKEND_OR_SKIP(be, true);
  VV_CACHE_ON_OR_CHECK_OFF(be);
  const size_t same = (size_t{7} << 20) + 768, other = (size_t{2} << 20) + 512;
  void* first[3] = {};
  for (int job = 0; job < 3; ++job) {
    Buffer a = be->allocate(same);
    Buffer b = be->allocate(other);
    Buffer c = be->allocate(same);
    be->synchronize();
    void* got[3] = {a.data(), b.data(), c.data()};
    ASSERT_NE(got[0], got[2]);
    for (int i = 0; i < 3; ++i) {
      if (job == 0) {
        first[i] = got[i];
      } else {
        EXPECT_EQ(got[i], first[i]) << "job " << job << ", buffer " << i;
      }
    }
    // c, b, a freed here, in that order (reverse declaration)
  }
}

TEST(CudaDeviceCache, ABlockIsNotHandedOutBeforeEveryStreamPassedItsFree) {
  VV_CUDA_BACKEND_OR_SKIP(be, true);  // holds the device's streams registered while this runs
  VV_CACHE_ON_OR_CHECK_OFF(be);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  cuda::cache_register_stream(0, s);
  const size_t bytes = size_t{5} << 20;
  void* a = nullptr;
  ASSERT_EQ(cuda::cache_malloc(0, bytes, &a), cudaSuccess);
  // The stream is busy for ≈ 0.5 s past the free: a kernel there could still use the block.
  ASSERT_EQ(cuda::spin_stream_for_test(s, 500'000'000ull), cudaSuccess);
  EXPECT_EQ(cuda::cache_free(a), 0);
  void* b = nullptr;
  ASSERT_EQ(cuda::cache_malloc(0, bytes, &b), cudaSuccess);
  EXPECT_NE(b, a) << "handed out while a stream that was running at its free still runs";
  EXPECT_EQ(cudaStreamQuery(s), cudaErrorNotReady)
      << "the spin ended before the check: the test proved nothing";
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  void* c = nullptr;
  ASSERT_EQ(cuda::cache_malloc(0, bytes, &c), cudaSuccess);
  EXPECT_EQ(c, a) << "the stream has passed the free: the block should be reused";
  cuda::cache_free(b);
  cuda::cache_free(c);
  cuda::cache_unregister_stream(s);
  ASSERT_EQ(cudaStreamDestroy(s), cudaSuccess);
}

TEST(CudaDeviceCache, IdleBlocksCountAsFreeMemoryAndATrimGivesThemBack) {
  VV_CUDA_BACKEND_OR_SKIP(be, true);
  VV_CACHE_ON_OR_CHECK_OFF(be);
  be->synchronize();
  cuda::cache_trim(0);
  ASSERT_EQ(cuda::cache_idle_bytes(0), 0u);
  const size_t bytes = size_t{256} << 20;
  {
    Buffer big = be->allocate(bytes);
    ASSERT_NE(big.data(), nullptr);
  }
  be->synchronize();
  EXPECT_EQ(cuda::cache_idle_bytes(0), bytes);
  // The backend's free figure is the device's plus the idle bytes. Other processes (the other test
  // shards) allocate meanwhile: read it between two equal readings of the device's own figure.
  bool steady = false;
  for (int attempt = 0; attempt < 50 && !steady; ++attempt) {
    size_t before = 0, after = 0, total = 0, ours = 0;
    ASSERT_EQ(cudaMemGetInfo(&before, &total), cudaSuccess);
    ASSERT_TRUE(be->device_memory(&ours, &total));
    ASSERT_EQ(cudaMemGetInfo(&after, &total), cudaSuccess);
    if (before != after) continue;
    steady = true;
    EXPECT_EQ(ours, std::min(total, before + bytes));
  }
  EXPECT_TRUE(steady) << "the device's free memory moved during each of 50 readings";
  EXPECT_EQ(cuda::cache_trim(0), bytes);
  EXPECT_EQ(cuda::cache_idle_bytes(0), 0u);
  Buffer again = be->allocate(bytes);  // after a trim: a fresh cudaMalloc, still zero-filled
  ASSERT_NE(again.data(), nullptr);
  std::vector<uint8_t> head(4096, 1);
  be->download(head.data(), again.data(), head.size());
  for (uint8_t v : head) ASSERT_EQ(v, 0);
}

}  // namespace
}  // namespace vv::test
