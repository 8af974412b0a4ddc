#include "engine/runner/kv_cache.h"

namespace vv {

size_t KvCache::bytes_per_position(const DecoderSpec& spec, DType dtype, int layers) {
  return 2 * static_cast<size_t>(layers) * static_cast<size_t>(spec.num_kv_heads) *
         static_cast<size_t>(spec.head_dim) * dtype_size(dtype);
}

Result<std::unique_ptr<KvCache>> KvCache::create(Backend& be, const DecoderSpec& spec, int64_t num_blocks,
                                                 int block_size, DType dtype, int layer_begin,
                                                 int layer_end) {
  if (dtype != DType::kF32 && dtype != DType::kBF16 && dtype != DType::kF16) {
    return unsupported(std::string("KV cache dtype ") + dtype_name(dtype) + " (use F32, BF16 or F16)");
  }
  if (num_blocks < 1 || block_size < 1) {
    return invalid_argument("KV cache: " + std::to_string(num_blocks) + " blocks of " +
                            std::to_string(block_size) + " positions is not a pool");
  }
  if (layer_end == 0) layer_end = spec.num_layers;
  if (layer_begin < 0 || layer_begin >= layer_end || layer_end > spec.num_layers) {
    return invalid_argument("KV cache: layers [" + std::to_string(layer_begin) + ", " +
                            std::to_string(layer_end) + ") are not inside the " +
                            std::to_string(spec.num_layers) + " layers");
  }
  const int held = layer_end - layer_begin;
  std::unique_ptr<KvCache> c(new KvCache());
  const int64_t width = static_cast<int64_t>(spec.num_kv_heads) * spec.head_dim;
  const int64_t rows = num_blocks * block_size;
  const size_t per = static_cast<size_t>(rows * width) * dtype_size(dtype);
  c->pool_ = be.allocate(per * 2 * static_cast<size_t>(held));
  if (c->pool_.data() == nullptr && per > 0) {
    return Status(
        StatusCode::kResourceExhausted,
        "KV cache: could not allocate " + std::to_string(per * 2 * static_cast<size_t>(held)) + " bytes");
  }
  char* base = static_cast<char*>(c->pool_.data());
  c->view_.layers.resize(static_cast<size_t>(spec.num_layers));
  for (int l = layer_begin; l < layer_end; ++l) {
    KvLayer& layer = c->view_.layers[static_cast<size_t>(l)];
    const size_t i = static_cast<size_t>(l - layer_begin);
    layer.k = Tensor::matrix(base + per * (2 * i), dtype, rows, width);
    layer.v = Tensor::matrix(base + per * (2 * i + 1), dtype, rows, width);
  }
  c->view_.block_size = block_size;
  c->view_.num_blocks = num_blocks;
  c->usable_ = num_blocks;
  c->free_.reserve(static_cast<size_t>(num_blocks));
  for (int64_t b = num_blocks - 1; b >= 0; --b) c->free_.push_back(static_cast<BlockId>(b));
  return c;
}

Status KvCache::reserve(std::vector<BlockId>& table, int64_t positions) {
  const int64_t need =
      (positions + view_.block_size - 1) / view_.block_size - static_cast<int64_t>(table.size());
  if (need <= 0) return Status::ok();
  if (need > free_blocks()) {
    return Status(StatusCode::kResourceExhausted,
                  "KV cache: " + std::to_string(positions) + " positions need " + std::to_string(need) +
                      " more blocks, " + std::to_string(free_blocks()) + " are free");
  }
  for (int64_t i = 0; i < need; ++i) {
    table.push_back(free_.back());
    free_.pop_back();
  }
  return Status::ok();
}

BlockId KvCache::set_aside_last_block() {
  if (set_aside_ >= 0) return set_aside_;
  if (usable_ < 2 || free_blocks() != usable_) return -1;
  set_aside_ = static_cast<BlockId>(usable_ - 1);
  free_.erase(free_.begin());  // the stack's bottom: the highest id
  --usable_;
  return set_aside_;
}

void KvCache::release(std::vector<BlockId>& table) {
  for (auto it = table.rbegin(); it != table.rend(); ++it) free_.push_back(*it);
  table.clear();
}

}  // namespace vv
