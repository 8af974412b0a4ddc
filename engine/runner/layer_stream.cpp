#include "engine/runner/layer_stream.h"

#include <algorithm>
#include <string>

namespace vv {
namespace {

// Tensors inside a slot start on 256-byte boundaries, as the device's own allocations do (the
// kernels' vector loads rely on that alignment).
constexpr size_t kAlign = 256;
size_t align_up(size_t n) {
  return (n + kAlign - 1) / kAlign * kAlign;
}

}  // namespace

Status LayerStream::take(int layer, const std::vector<DeviceTensor*>& tensors) {
  if (!streams(layer)) return Status::ok();
  if (layer - first_ != static_cast<int>(layers_.size())) {
    return internal_error("layer stream: layer " + std::to_string(layer) + " arrived out of order");
  }
  Streamed s;
  for (DeviceTensor* t : tensors) {
    if (t->t.data != t->buf.data()) {
      return internal_error("layer stream: a tensor of layer " + std::to_string(layer) +
                            " is not its buffer's start");
    }
    s.parts.push_back({t, s.bytes});
    s.bytes += align_up(t->buf.bytes());
  }
  s.host = be_.allocate_host(s.bytes);
  if (s.host.data() == nullptr && s.bytes > 0) {
    return Status(StatusCode::kResourceExhausted,
                  "layer stream: could not allocate " + std::to_string(s.bytes) +
                      " bytes of host memory for layer " + std::to_string(layer));
  }
  char* host = static_cast<char*>(s.host.data());
  for (const Part& p : s.parts) {
    be_.download(host + p.offset, p.tensor->buf.data(), p.tensor->buf.bytes());
    p.tensor->buf.reset();  // the device copy is gone; the view is re-pointed by finish()
    p.tensor->t.data = nullptr;
  }
  host_bytes_ += s.bytes;
  slot_bytes_ = std::max(slot_bytes_, s.bytes);
  layers_.push_back(std::move(s));
  return Status::ok();
}

Status LayerStream::finish() {
  if (static_cast<int>(layers_.size()) != count()) {
    return internal_error("layer stream: " + std::to_string(layers_.size()) + " of " +
                          std::to_string(count()) + " streamed layers were loaded");
  }
  const int nslots = count() > 1 ? 2 : count();
  for (int i = 0; i < nslots; ++i) {
    slots_[i] = be_.allocate(slot_bytes_);
    if (slots_[i].data() == nullptr) {
      return Status(StatusCode::kResourceExhausted, "layer stream: could not allocate a " +
                                                        std::to_string(slot_bytes_) + "-byte device slot");
    }
  }
  for (size_t k = 0; k < layers_.size(); ++k) {
    char* slot = static_cast<char*>(slots_[k % 2].data());
    for (const Part& p : layers_[k].parts) p.tensor->t.data = slot + p.offset;
  }
  return Status::ok();
}

void LayerStream::start_copy(int layer) {
  const int k = layer - first_;
  const Streamed& s = layers_[static_cast<size_t>(k)];
  ticket_[k % 2] = be_.copy_async(slots_[k % 2].data(), s.host.data(), s.bytes);
  in_slot_[k % 2] = layer;
  bytes_streamed_ += s.bytes;
}

void LayerStream::before_layer(int layer) {
  if (count() == 0) return;
  if (layer < 0) {  // a new step: every slot must be refilled
    in_slot_[0] = in_slot_[1] = -1;
    start_copy(first_);
    return;
  }
  if (!streams(layer)) return;
  const int k = layer - first_;
  if (in_slot_[k % 2] != layer) start_copy(layer);  // a step that began past the first streamed layer
  be_.wait_copy(ticket_[k % 2]);
  // The next layer's slot was last read by the layer before this one, whose ops are all issued:
  // copy_async waits for them on the device, then copies while this layer computes.
  if (layer + 1 < end_) start_copy(layer + 1);
}

}  // namespace vv
