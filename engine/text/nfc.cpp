#include "engine/text/nfc.h"

#include <algorithm>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "engine/text/unicode_tables.h"
#include "engine/text/utf8.h"

namespace vv::unicode {
namespace {

constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount;
constexpr char32_t kSCount = kLCount * kNCount;
// Every character that can change under NFC (Unicode 9.0) lies below this.
constexpr char32_t kLimit = 0x30000;

struct NfcData {
  std::vector<std::uint64_t> maybe;  // bit set: the character may change under NFC
  std::unordered_map<char32_t, std::uint8_t> ccc;
  std::unordered_map<char32_t, std::pair<std::uint32_t, std::uint32_t>> decomp;
  std::unordered_map<std::uint64_t, char32_t> compose;

  NfcData() : maybe(kLimit / 64) {
    using namespace unicode_data;
    for (std::size_t i = 0; i < kCombiningClasses_count; ++i) {
      ccc.emplace(kCombiningClasses[i].cp, kCombiningClasses[i].ccc);
      mark(kCombiningClasses[i].cp);
    }
    for (std::size_t i = 0; i < kDecompositions_count; ++i) {
      decomp.emplace(kDecompositions[i].cp,
                     std::make_pair(kDecompositions[i].offset, kDecompositions[i].length));
    }
    std::unordered_map<char32_t, bool> primary;
    for (std::size_t i = 0; i < kCompositions_count; ++i) {
      const auto& c = kCompositions[i];
      compose.emplace(key(c.first, c.second), c.composite);
      primary.emplace(c.composite, true);
      mark(c.second);  // a character that may combine with what precedes it
    }
    // Decomposable characters that do not recompose to themselves (singletons, exclusions).
    for (std::size_t i = 0; i < kDecompositions_count; ++i) {
      if (!primary.count(kDecompositions[i].cp)) mark(kDecompositions[i].cp);
    }
    for (char32_t cp = kVBase; cp < kVBase + kVCount; ++cp) mark(cp);
    for (char32_t cp = kTBase + 1; cp < kTBase + kTCount; ++cp) mark(cp);
  }
  void mark(char32_t cp) {
    if (cp < kLimit) maybe[cp >> 6] |= std::uint64_t{1} << (cp & 63);
  }
  bool may_change(char32_t cp) const { return cp < kLimit && ((maybe[cp >> 6] >> (cp & 63)) & 1); }
  static std::uint64_t key(char32_t a, char32_t b) { return (std::uint64_t{a} << 21) | b; }
  std::uint8_t class_of(char32_t cp) const {
    if (cp < 0x300) return 0;
    auto it = ccc.find(cp);
    return it == ccc.end() ? 0 : it->second;
  }
  char32_t composite(char32_t a, char32_t b) const {
    if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
      return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
    }
    if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
        b < kTBase + kTCount) {
      return a + (b - kTBase);
    }
    auto it = compose.find(key(a, b));
    return it == compose.end() ? 0 : it->second;
  }
  void decompose(char32_t cp, std::vector<char32_t>& out) const {
    if (cp >= kSBase && cp < kSBase + kSCount) {
      char32_t s = cp - kSBase;
      out.push_back(kLBase + s / kNCount);
      out.push_back(kVBase + (s % kNCount) / kTCount);
      if (s % kTCount) out.push_back(kTBase + s % kTCount);
      return;
    }
    if (cp >= 0xC0) {
      auto it = decomp.find(cp);
      if (it != decomp.end()) {
        const char32_t* p = unicode_data::kDecompositionPool + it->second.first;
        out.insert(out.end(), p, p + it->second.second);
        return;
      }
    }
    out.push_back(cp);
  }
};

const NfcData& data() {
  static const NfcData d;
  return d;
}

}  // namespace

bool is_nfc_quick(std::string_view s) {
  const NfcData& d = data();
  std::size_t i = 0;
  while (i < s.size()) {
    // Code points below U+0300 never change under NFC and never combine with what precedes them.
    auto b = static_cast<unsigned char>(s[i]);
    if (b < 0xCC) {
      i += b < 0x80 ? 1 : 2;
      continue;
    }
    if (d.may_change(text_utf8::next(s, i))) return false;
  }
  return true;
}

void append_nfc(std::string& out, std::string_view s) {
  const NfcData& d = data();
  std::vector<char32_t> buf;
  buf.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) d.decompose(text_utf8::next(s, i), buf);
  // Canonical ordering: stable sort each run of non-starters by combining class.
  for (std::size_t i = 0; i < buf.size();) {
    if (d.class_of(buf[i]) == 0) {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < buf.size() && d.class_of(buf[j]) != 0) ++j;
    std::stable_sort(buf.begin() + static_cast<std::ptrdiff_t>(i),
                     buf.begin() + static_cast<std::ptrdiff_t>(j),
                     [&](char32_t a, char32_t b) { return d.class_of(a) < d.class_of(b); });
    i = j;
  }
  // Canonical composition (UAX #15).
  if (!buf.empty()) {
    std::size_t starter = 0;
    int last_class = d.class_of(buf[0]) ? 256 : 0;
    std::size_t kept = 1;
    for (std::size_t i = 1; i < buf.size(); ++i) {
      char32_t ch = buf[i];
      int cls = d.class_of(ch);
      char32_t comp = d.composite(buf[starter], ch);
      if (comp != 0 && (last_class < cls || last_class == 0)) {
        buf[starter] = comp;
        continue;
      }
      if (cls == 0) starter = kept;
      last_class = cls;
      buf[kept++] = ch;
    }
    buf.resize(kept);
  }
  for (char32_t cp : buf) text_utf8::append(out, cp);
}

}  // namespace vv::unicode
