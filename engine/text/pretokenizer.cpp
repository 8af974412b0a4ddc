#include "engine/text/pretokenizer.h"

#include <cstdint>

#include "engine/text/unicode_classes.h"
#include "engine/text/utf8.h"

namespace vv {
namespace {

enum Cls : std::uint8_t { kLetter, kNumber, kSpace, kNewline /* \r or \n */, kOther };

struct Char {
  std::size_t begin, end;  // byte range
  char32_t cp;
  Cls cls;
};

Cls classify(char32_t cp) {
  if (cp == '\r' || cp == '\n') return kNewline;
  if (unicode::is_letter(cp)) return kLetter;
  if (unicode::is_number(cp)) return kNumber;
  if (unicode::is_white_space(cp)) return kSpace;
  return kOther;
}

bool is_ws(Cls c) { return c == kSpace || c == kNewline; }

// (?i:'s|'t|'re|'ve|'m|'ll|'d) at chars[i] (an apostrophe): number of chars matched, or 0.
// Case-insensitive with Unicode simple case folding: U+017F (long s) folds to 's' and
// U+212A (Kelvin) to 'k'; no other character folds to these letters.
std::size_t contraction(const std::vector<Char>& c, std::size_t i) {
  auto lower = [&](std::size_t k) -> char32_t {
    if (k >= c.size()) return 0;
    char32_t cp = c[k].cp;
    if (cp >= 'A' && cp <= 'Z') return cp + 32;
    if (cp == 0x17F) return 's';
    return cp;
  };
  char32_t a = lower(i + 1);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  char32_t b = lower(i + 2);
  if ((a == 'r' || a == 'v') && b == 'e') return 3;
  if (a == 'l' && b == 'l') return 3;
  return 0;
}

}  // namespace

void pretokenize(std::string_view text, std::vector<std::string_view>& pieces) {
  thread_local std::vector<Char> chars;
  chars.clear();
  for (std::size_t i = 0; i < text.size();) {
    std::size_t b = i;
    char32_t cp = text_utf8::next(text, i);
    chars.push_back({b, i, cp, classify(cp)});
  }
  const std::size_t n = chars.size();
  auto emit = [&](std::size_t from, std::size_t to) {  // chars [from, to)
    pieces.push_back(text.substr(chars[from].begin, chars[to - 1].end - chars[from].begin));
  };
  std::size_t i = 0;
  while (i < n) {
    const Cls c = chars[i].cls;
    // 1. contractions
    if (chars[i].cp == '\'') {
      if (std::size_t m = contraction(chars, i)) {
        emit(i, i + m);
        i += m;
        continue;
      }
    }
    // 2. [^\r\n\p{L}\p{N}]?\p{L}+
    if (c == kLetter || (c != kNewline && c != kNumber && i + 1 < n && chars[i + 1].cls == kLetter)) {
      std::size_t j = i + 1;
      while (j < n && chars[j].cls == kLetter) ++j;
      emit(i, j);
      i = j;
      continue;
    }
    // 3. \p{N}
    if (c == kNumber) {
      emit(i, i + 1);
      ++i;
      continue;
    }
    // 4.  ?[^\s\p{L}\p{N}]+[\r\n]*
    {
      std::size_t j = i;
      if (chars[j].cp == ' ' && j + 1 < n && chars[j + 1].cls == kOther) ++j;
      if (chars[j].cls == kOther) {
        while (j < n && chars[j].cls == kOther) ++j;
        while (j < n && chars[j].cls == kNewline) ++j;
        emit(i, j);
        i = j;
        continue;
      }
    }
    // Here chars[i] is white space. Its maximal run is [i, j).
    std::size_t j = i;
    while (j < n && is_ws(chars[j].cls)) ++j;
    // 5. \s*[\r\n]+ : up to and including the last \r or \n of the run.
    std::size_t last_nl = j;
    for (std::size_t k = j; k > i; --k) {
      if (chars[k - 1].cls == kNewline) {
        last_nl = k - 1;
        break;
      }
    }
    if (last_nl != j) {
      emit(i, last_nl + 1);
      i = last_nl + 1;
      continue;
    }
    // 6. \s+(?!\S) : the run, less its last char when a non-space follows.
    if (j == n) {
      emit(i, j);
      i = j;
      continue;
    }
    if (j - i >= 2) {
      emit(i, j - 1);
      i = j - 1;
      continue;
    }
    // 7. \s+
    emit(i, j);
    i = j;
  }
}

}  // namespace vv
