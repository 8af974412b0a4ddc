#include "engine/runner/kv_cache.h"

namespace vv {

Result<std::unique_ptr<KvCache>> KvCache::create(Backend& be, const DecoderSpec& spec, int64_t num_blocks,
                                                 int block_size, DType dtype) {
  if (dtype != DType::kF32 && dtype != DType::kBF16 && dtype != DType::kF16) {
    return unsupported(std::string("KV cache dtype ") + dtype_name(dtype) + " (use F32, BF16 or F16)");
  }
  if (num_blocks < 1 || block_size < 1) {
    return invalid_argument("KV cache: " + std::to_string(num_blocks) + " blocks of " + std::to_string(block_size) +
                            " positions is not a pool");
  }
  std::unique_ptr<KvCache> c(new KvCache());
  const int64_t width = static_cast<int64_t>(spec.num_kv_heads) * spec.head_dim;
  const int64_t rows = num_blocks * block_size;
  const size_t per = static_cast<size_t>(rows * width) * dtype_size(dtype);
  c->pool_ = be.allocate(per * 2 * static_cast<size_t>(spec.num_layers));
  if (c->pool_.data() == nullptr && per > 0 && spec.num_layers > 0) {
    return Status(StatusCode::kResourceExhausted, "KV cache: could not allocate " +
                                                      std::to_string(per * 2 * spec.num_layers) + " bytes");
  }
  char* base = static_cast<char*>(c->pool_.data());
  for (int l = 0; l < spec.num_layers; ++l) {
    KvLayer layer;
    layer.k = Tensor::matrix(base + per * (2 * l), dtype, rows, width);
    layer.v = Tensor::matrix(base + per * (2 * l + 1), dtype, rows, width);
    c->view_.layers.push_back(layer);
  }
  c->view_.block_size = block_size;
  c->view_.num_blocks = num_blocks;
  c->free_.reserve(static_cast<size_t>(num_blocks));
  for (int64_t b = num_blocks - 1; b >= 0; --b) c->free_.push_back(static_cast<BlockId>(b));
  return c;
}

Status KvCache::reserve(std::vector<BlockId>& table, int64_t positions) {
  const int64_t need = (positions + view_.block_size - 1) / view_.block_size - static_cast<int64_t>(table.size());
  if (need <= 0) return Status::ok();
  if (need > free_blocks()) {
    return Status(StatusCode::kResourceExhausted, "KV cache: " + std::to_string(positions) + " positions need " +
                                                      std::to_string(need) + " more blocks, " +
                                                      std::to_string(free_blocks()) + " are free");
  }
  for (int64_t i = 0; i < need; ++i) {
    table.push_back(free_.back());
    free_.pop_back();
  }
  return Status::ok();
}

void KvCache::release(std::vector<BlockId>& table) {
  for (auto it = table.rbegin(); it != table.rend(); ++it) free_.push_back(*it);
  table.clear();
}

}  // namespace vv
