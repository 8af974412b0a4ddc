#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace vv::cuda {

// Freed device memory kept for the next allocation of about its size. A server allocates and frees
// a few buffers for every request (a speech job's rows, each encoder stream's state) while other
// requests decode; cudaFree waits for the whole device and cudaMalloc maps fresh pages, so both stall
// the thread that drives the GPU. Here a free only records an event on every registered stream of the
// block's device, and the block is handed out again once all of those events have completed (polled
// on the host: no stream is made to wait on another, and a block still in use is never given out).
// Where cudaMalloc finds too little memory, the device's idle blocks are given back first and the
// allocation is tried again. Thread-safe. Off with VV_CUDA_ALLOC_CACHE=0 (read once): then every free
// is a cudaFree, as before.
bool device_cache_enabled();

// A stream whose work may touch cached blocks of `device`; registered streams get an event at every
// free of a block of that device. Unregister before destroying the stream: the last stream of a device
// to go gives that device's idle blocks back.
void cache_register_stream(int device, cudaStream_t stream);
void cache_unregister_stream(cudaStream_t stream);

// At least `bytes` on `device` (the current device) into *p: an idle block that fits, else cudaMalloc.
cudaError_t cache_malloc(int device, size_t bytes, void** p);

// Takes back a block from cache_malloc (while the cache is off, or a stream of its device is being
// captured into a graph, it goes to cudaFree; so does a pointer that is not the cache's). Returns the
// block's device, or -1 where the pointer was not the cache's.
int cache_free(void* p);

// Bytes of `device` held by the cache for reuse (counted as free by the backend's device_memory).
size_t cache_idle_bytes(int device);

// cudaFree every idle block of `device` (waiting for their events first); returns the bytes given back.
size_t cache_trim(int device);

// Whether an idle block of `block` bytes may serve a request of `request` bytes: at least the request
// and at most an eighth more, so that a small request does not hold a large block.
constexpr bool cache_block_fits(size_t block, size_t request) {
  return block >= request && block - request <= request / 8;
}

// Test hook: a kernel on `stream` that spins for about `ns` nanoseconds (keeps a stream busy).
cudaError_t spin_stream_for_test(cudaStream_t stream, unsigned long long ns);

}  // namespace vv::cuda
