// BpeModel: the byte-level BPE merge table (pair of ids → rank and merged id) and the per-piece
// merge loop (lowest rank first, leftmost on ties, as HF tokenizers' Word::merge_all).
// Built once by the loader, then immutable; encode_piece may be called from any thread (it keeps a
// lock-free per-thread cache of recent pieces).
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "engine/text/tokenizer.h"

namespace vv {

class BpeModel {
 public:
  BpeModel();
  // byte_ids[b]: the id of the one-byte token for byte b, or -1 when the vocab lacks it.
  void set_byte_ids(const std::array<TokenId, 256>& byte_ids) { byte_ids_ = byte_ids; }
  // Merge number `rank` joins (left, right) into `merged`. A repeated pair keeps its first rank.
  void add_merge(TokenId left, TokenId right, TokenId merged, std::uint32_t rank);
  std::size_t merge_count() const { return merge_count_; }

  // Appends the ids of one pre-tokenized piece (raw bytes).
  void encode_piece(std::string_view piece, std::vector<TokenId>& out) const;

 private:
  struct Slot {
    std::uint64_t key;  // (left << 32) | right; kEmpty when free
    std::uint32_t rank;
    TokenId merged;
  };
  static constexpr std::uint64_t kEmpty = ~std::uint64_t{0};
  const Slot* find(TokenId left, TokenId right) const;
  void grow();
  void merge_word(std::string_view piece, std::vector<TokenId>& out) const;

  std::array<TokenId, 256> byte_ids_{};
  std::vector<Slot> slots_;  // open addressing, power-of-two size
  std::size_t merge_count_ = 0;
  std::uint64_t instance_;  // distinguishes models in the per-thread cache
};

}  // namespace vv
