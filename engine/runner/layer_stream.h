// LayerStream: decoder layers that are not resident (--gpu-layers). Their weights live in host
// memory the device copies from asynchronously (Backend::allocate_host: pinned under CUDA) and
// are copied, each step, into one of two device slots just before use: the copy of the next
// streamed layer runs (on the backend's copy stream) while the current one computes. Every
// streamed layer's tensors point into its slot (layers alternate), so the decoder runs them
// unchanged. Owned by a Runner, driven by its engine thread through the decoder's layer hook.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "config/status.h"
#include "engine/model/device_tensor.h"
#include "kernels/backend.h"

namespace vv {

class LayerStream {
 public:
  // Layers [first, end) stream; the others are left alone.
  LayerStream(Backend& be, int first, int end) : be_(be), first_(first), end_(end) {}

  bool streams(int layer) const { return layer >= first_ && layer < end_; }
  int first() const { return first_; }
  int count() const { return end_ - first_; }

  // During loading, right after layer l's weights reached the device: copies them into host memory
  // and frees their device buffers (the views are re-pointed by finish()).
  Status take(int layer, const std::vector<DeviceTensor*>& tensors);
  // After the last layer was taken: allocates the two device slots and points every streamed
  // layer's tensors into its slot.
  Status finish();

  // The decoder's layer hook: -1 at the start of a step (the first streamed layer starts copying),
  // then each layer before its ops are issued (waits for its copy, starts the next one).
  void before_layer(int layer);

  size_t slot_bytes() const { return slot_bytes_; }
  size_t host_bytes() const { return host_bytes_; }
  // Bytes copied to the device since creation (for bandwidth figures).
  uint64_t bytes_streamed() const { return bytes_streamed_; }

 private:
  struct Part {
    DeviceTensor* tensor;
    size_t offset;  // in the layer's image and in its slot
  };
  struct Streamed {
    Buffer host;  // the layer's weights, tensor after tensor at `offset`s
    size_t bytes = 0;
    std::vector<Part> parts;
  };
  void start_copy(int layer);

  Backend& be_;
  int first_, end_;
  std::vector<Streamed> layers_;  // index: layer - first
  Buffer slots_[2];
  size_t slot_bytes_ = 0, host_bytes_ = 0;
  int in_slot_[2] = {-1, -1};  // the layer last copied into each slot this step (-1: none)
  uint64_t ticket_[2] = {0, 0};
  uint64_t bytes_streamed_ = 0;
};

}  // namespace vv
