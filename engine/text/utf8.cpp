#include "engine/text/utf8.h"

#include <cstdint>

namespace vv::text_utf8 {
namespace {

// Number of bytes of the sequence a lead byte starts (0: not a valid lead).
int sequence_length(unsigned char b) {
  if (b < 0x80) return 1;
  if (b < 0xC2) return 0;
  if (b < 0xE0) return 2;
  if (b < 0xF0) return 3;
  if (b < 0xF5) return 4;
  return 0;
}

// Valid range of the second byte after lead b (Unicode Table 3-7).
bool second_ok(unsigned char lead, unsigned char b) {
  switch (lead) {
    case 0xE0: return b >= 0xA0 && b <= 0xBF;
    case 0xED: return b >= 0x80 && b <= 0x9F;
    case 0xF0: return b >= 0x90 && b <= 0xBF;
    case 0xF4: return b >= 0x80 && b <= 0x8F;
    default: return b >= 0x80 && b <= 0xBF;
  }
}

// Length of the valid sequence at s[i] (1–4), or 0 when s[i] starts a maximal invalid subpart;
// in that case *bad is the subpart's length (≥ 1). A truncated but valid prefix at the end of s
// counts as an invalid subpart of its own length.
std::size_t valid_at(std::string_view s, std::size_t i, std::size_t* bad) {
  auto b0 = static_cast<unsigned char>(s[i]);
  int n = sequence_length(b0);
  if (n == 1) return 1;
  if (n == 0) {
    *bad = 1;
    return 0;
  }
  std::size_t k = 1;
  for (; k < static_cast<std::size_t>(n); ++k) {
    if (i + k >= s.size()) break;
    auto b = static_cast<unsigned char>(s[i + k]);
    bool ok = k == 1 ? second_ok(b0, b) : (b >= 0x80 && b <= 0xBF);
    if (!ok) break;
  }
  if (k == static_cast<std::size_t>(n)) return k;
  *bad = k;
  return 0;
}

}  // namespace

void append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

char32_t next(std::string_view s, std::size_t& i) {
  auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    ++i;
    return b0;
  }
  int n = sequence_length(b0);
  if (n == 0 || i + static_cast<std::size_t>(n) > s.size()) {  // not valid UTF-8: never loop
    ++i;
    return 0xFFFD;
  }
  char32_t cp = b0 & (0x7F >> n);
  for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += n;
  return cp;
}

std::optional<std::size_t> first_invalid(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    std::size_t bad = 0;
    std::size_t n = valid_at(s, i, &bad);
    if (n == 0) return i;
    i += n;
  }
  return std::nullopt;
}

void append_lossy(std::string& out, std::string_view bytes) {
  std::size_t i = 0;
  while (i < bytes.size()) {
    std::size_t start = i;
    while (i < bytes.size() && static_cast<unsigned char>(bytes[i]) < 0x80) ++i;
    if (i > start) out.append(bytes.substr(start, i - start));
    if (i >= bytes.size()) break;
    std::size_t bad = 0;
    std::size_t n = valid_at(bytes, i, &bad);
    if (n > 0) {
      out.append(bytes.substr(i, n));
      i += n;
    } else {
      out.append("\xEF\xBF\xBD");
      i += bad;
    }
  }
}

std::size_t incomplete_tail(std::string_view s) {
  // An unfinished sequence is at most 3 bytes: find the last lead byte within them.
  std::size_t n = s.size();
  for (std::size_t back = 1; back <= 3 && back <= n; ++back) {
    auto b = static_cast<unsigned char>(s[n - back]);
    if (b >= 0x80 && b <= 0xBF) continue;  // continuation byte: keep looking for its lead
    int need = sequence_length(b);
    if (need <= 1 || static_cast<std::size_t>(need) <= back) return 0;
    // Check that the bytes after the lead are a valid prefix.
    for (std::size_t k = 1; k < back; ++k) {
      auto c = static_cast<unsigned char>(s[n - back + k]);
      bool ok = k == 1 ? second_ok(b, c) : (c >= 0x80 && c <= 0xBF);
      if (!ok) return 0;
    }
    return back;
  }
  return 0;
}

}  // namespace vv::text_utf8
