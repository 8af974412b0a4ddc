#include "engine/text/bpe_model.h"

#include <atomic>
#include <algorithm>
#include <functional>
#include <string>

namespace vv {
namespace {

std::atomic<std::uint64_t> g_next_instance{1};

inline std::uint64_t hash_key(std::uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  return k;
}

// Per-thread direct-mapped cache of piece → ids for the model used last on this thread: a slot
// is overwritten on collision, so memory stays bounded and lookups never allocate.
struct PieceCache {
  struct Entry {
    std::string key;
    std::vector<TokenId> ids;
    bool used = false;
  };
  std::uint64_t owner = 0;
  std::vector<Entry> slots;
};
constexpr std::size_t kCacheSlots = 1 << 14;
constexpr std::size_t kCacheMaxPieceBytes = 64;

}  // namespace

BpeModel::BpeModel() : instance_(g_next_instance.fetch_add(1)) {
  byte_ids_.fill(-1);
  slots_.assign(1024, Slot{kEmpty, 0, 0});
}

const BpeModel::Slot* BpeModel::find(TokenId left, TokenId right) const {
  std::uint64_t key = (std::uint64_t(std::uint32_t(left)) << 32) | std::uint32_t(right);
  std::size_t mask = slots_.size() - 1;
  for (std::size_t i = hash_key(key) & mask;; i = (i + 1) & mask) {
    const Slot& s = slots_[i];
    if (s.key == key) return &s;
    if (s.key == kEmpty) return nullptr;
  }
}

void BpeModel::grow() {
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(old.size() * 2, Slot{kEmpty, 0, 0});
  std::size_t mask = slots_.size() - 1;
  for (const Slot& s : old) {
    if (s.key == kEmpty) continue;
    std::size_t i = hash_key(s.key) & mask;
    while (slots_[i].key != kEmpty) i = (i + 1) & mask;
    slots_[i] = s;
  }
}

void BpeModel::add_merge(TokenId left, TokenId right, TokenId merged, std::uint32_t rank) {
  if ((merge_count_ + 1) * 2 > slots_.size()) grow();
  std::uint64_t key = (std::uint64_t(std::uint32_t(left)) << 32) | std::uint32_t(right);
  std::size_t mask = slots_.size() - 1;
  std::size_t i = hash_key(key) & mask;
  while (slots_[i].key != kEmpty) {
    if (slots_[i].key == key) return;  // first rank wins
    i = (i + 1) & mask;
  }
  slots_[i] = Slot{key, rank, merged};
  ++merge_count_;
}

void BpeModel::encode_piece(std::string_view piece, std::vector<TokenId>& out) const {
  if (piece.size() == 1) {
    TokenId id = byte_ids_[static_cast<std::uint8_t>(piece[0])];
    if (id >= 0) out.push_back(id);
    return;
  }
  if (piece.size() > kCacheMaxPieceBytes) {
    merge_word(piece, out);
    return;
  }
  thread_local PieceCache cache;
  if (cache.owner != instance_) {
    cache.slots.assign(kCacheSlots, {});
    cache.owner = instance_;
  }
  std::size_t h = std::hash<std::string_view>{}(piece);
  PieceCache::Entry& e = cache.slots[h & (kCacheSlots - 1)];
  if (e.used && e.key == piece) {
    out.insert(out.end(), e.ids.begin(), e.ids.end());
    return;
  }
  std::size_t before = out.size();
  merge_word(piece, out);
  e.key.assign(piece);
  e.ids.assign(out.begin() + static_cast<std::ptrdiff_t>(before), out.end());
  e.used = true;
}

void BpeModel::merge_word(std::string_view piece, std::vector<TokenId>& out) const {
  struct Symbol {
    TokenId id;
    std::int32_t prev, next;
    bool alive;
  };
  struct Candidate {
    std::uint32_t rank;
    std::int32_t pos;
    TokenId merged;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  thread_local std::vector<Symbol> syms;
  syms.clear();
  for (char c : piece) {
    TokenId id = byte_ids_[static_cast<std::uint8_t>(c)];
    if (id < 0) continue;  // no such byte token and no unknown token: dropped, as HF
    auto n = static_cast<std::int32_t>(syms.size());
    syms.push_back({id, n - 1, n + 1, true});
  }
  if (syms.empty()) return;
  syms.back().next = -1;
  // Min-heap on (rank, pos) over a per-thread vector, so no allocation per word.
  thread_local std::vector<Candidate> heap;
  heap.clear();
  auto later = [](const Candidate& x, const Candidate& y) { return x > y; };
  auto push = [&](Candidate c) {
    heap.push_back(c);
    std::push_heap(heap.begin(), heap.end(), later);
  };
  for (std::size_t i = 0; i + 1 < syms.size(); ++i) {
    if (const Slot* s = find(syms[i].id, syms[i + 1].id)) {
      push({s->rank, static_cast<std::int32_t>(i), s->merged});
    }
  }
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    Candidate top = heap.back();
    heap.pop_back();
    Symbol& left = syms[static_cast<std::size_t>(top.pos)];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = syms[static_cast<std::size_t>(left.next)];
    const Slot* s = find(left.id, right.id);
    if (s == nullptr || s->merged != top.merged) continue;
    left.id = top.merged;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) syms[static_cast<std::size_t>(right.next)].prev = top.pos;
    if (left.prev >= 0) {
      const Symbol& p = syms[static_cast<std::size_t>(left.prev)];
      if (const Slot* m = find(p.id, left.id)) push({m->rank, left.prev, m->merged});
    }
    if (left.next >= 0) {
      const Symbol& nx = syms[static_cast<std::size_t>(left.next)];
      if (const Slot* m = find(left.id, nx.id)) push({m->rank, top.pos, m->merged});
    }
  }
  for (std::int32_t i = 0; i >= 0; i = syms[static_cast<std::size_t>(i)].next) {
    out.push_back(syms[static_cast<std::size_t>(i)].id);
  }
}

}  // namespace vv
