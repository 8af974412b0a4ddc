#include "scheduler/kv_manager.h"

#include <algorithm>

namespace vv {

std::int64_t KvManager::match_prefix(RequestId id, std::span<const TokenId> tokens, std::int64_t shareable) {
  Table& t = tables_[id];
  const int bs = pool_.block_size();
  shareable = std::min<std::int64_t>(shareable, static_cast<std::int64_t>(tokens.size()));
  const std::int64_t full = shareable / bs;
  query_blocks_ += full;
  std::uint64_t h = 0;
  for (std::int64_t b = 0; b < full; ++b) {
    auto block = tokens.subspan(static_cast<std::size_t>(b * bs), static_cast<std::size_t>(bs));
    h = kv_block_hash(h, block);
    auto hit = pool_.lookup(h, block);
    if (!hit) break;
    pool_.ref(*hit);
    t.blocks.push_back(*hit);
    t.hashes.push_back(h);
    ++hit_blocks_;
  }
  return static_cast<std::int64_t>(t.blocks.size()) * bs;
}

std::int64_t KvManager::blocks_needed(RequestId id, std::int64_t positions) const {
  const int bs = pool_.block_size();
  auto it = tables_.find(id);
  const std::int64_t have = it == tables_.end() ? 0 : static_cast<std::int64_t>(it->second.blocks.size());
  return std::max<std::int64_t>(0, (positions + bs - 1) / bs - have);
}

bool KvManager::grow(RequestId id, std::int64_t positions) {
  const std::int64_t need = blocks_needed(id, positions);
  if (need == 0) return true;
  if (need > pool_.free_blocks()) return false;
  Table& t = tables_[id];
  for (std::int64_t i = 0; i < need; ++i) t.blocks.push_back(*pool_.allocate());
  return true;
}

void KvManager::commit(RequestId id, std::span<const TokenId> tokens, std::int64_t computed,
                       std::int64_t shareable) {
  auto it = tables_.find(id);
  if (it == tables_.end()) return;
  Table& t = it->second;
  const int bs = pool_.block_size();
  const std::int64_t limit = std::min({computed, shareable, static_cast<std::int64_t>(tokens.size())}) / bs;
  for (auto b = static_cast<std::int64_t>(t.hashes.size());
       b < limit && b < static_cast<std::int64_t>(t.blocks.size()); ++b) {
    auto block = tokens.subspan(static_cast<std::size_t>(b * bs), static_cast<std::size_t>(bs));
    const std::uint64_t h = kv_block_hash(t.hashes.empty() ? 0 : t.hashes.back(), block);
    pool_.set_hash(t.blocks[static_cast<std::size_t>(b)], h, block);
    t.hashes.push_back(h);
  }
}

void KvManager::release(RequestId id) {
  auto it = tables_.find(id);
  if (it == tables_.end()) return;
  for (auto b = it->second.blocks.rbegin(); b != it->second.blocks.rend(); ++b) pool_.unref(*b);
  tables_.erase(it);
}

const std::vector<BlockId>& KvManager::table(RequestId id) const {
  static const std::vector<BlockId> kNone;
  auto it = tables_.find(id);
  return it == tables_.end() ? kNone : it->second.blocks;
}

std::vector<std::pair<RequestId, const std::vector<BlockId>*>> KvManager::tables() const {
  std::vector<std::pair<RequestId, const std::vector<BlockId>*>> out;
  out.reserve(tables_.size());
  for (const auto& [id, t] : tables_) out.emplace_back(id, &t.blocks);
  return out;
}

}  // namespace vv
