// Model-level test helpers: a small paged KV pool built directly on the backend (the runner's
// KvCache is a layer above engine/model), a one-sequence StepPlan, uploads of golden tensors.
// Header-only; test threads only.
#pragma once

#include <numeric>
#include <vector>

#include "engine/checkpoint/model_spec.h"
#include "engine/model/device_tensor.h"
#include "engine/model/step_plan.h"
#include "tests/unit/engine/model/golden_fixture.h"

namespace vv::test {

struct TestKv {
  std::vector<DeviceTensor> bufs;
  KvView view;
};

inline TestKv make_test_kv(Backend& be, const DecoderSpec& d, int64_t positions, int block_size = 16) {
  TestKv kv;
  const int64_t blocks = (positions + block_size - 1) / block_size;
  const int64_t width = static_cast<int64_t>(d.num_kv_heads) * d.head_dim;
  for (int l = 0; l < d.num_layers; ++l) {
    kv.bufs.push_back(alloc_f32(be, blocks * block_size, width));
    kv.bufs.push_back(alloc_f32(be, blocks * block_size, width));
    kv.view.layers.push_back(KvLayer{kv.bufs[2 * l].t, kv.bufs[2 * l + 1].t});
  }
  kv.view.block_size = block_size;
  kv.view.num_blocks = blocks;
  return kv;
}

// Blocks in reverse order, so that a wrong block-table lookup cannot pass by accident.
inline std::vector<BlockId> reversed_blocks(int64_t count) {
  std::vector<BlockId> b(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) b[i] = static_cast<BlockId>(count - 1 - i);
  return b;
}

inline DeviceTensor upload_golden(Backend& be, const GoldenTensor& g) {
  DeviceTensor d = alloc_f32(be, g.rows(), g.cols());
  be.upload(d.buf.data(), g.data.data(), g.data.size() * sizeof(float));
  return d;
}

inline std::vector<float> download(Backend& be, const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.rows() * t.cols()));
  be.synchronize();
  be.download(out.data(), t.data, out.size() * sizeof(float));
  return out;
}

}  // namespace vv::test
