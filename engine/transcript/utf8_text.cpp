#include "engine/transcript/utf8_text.h"

namespace vv::utf8 {

Decoded decode(std::string_view s, std::size_t pos) {
  const auto b0 = static_cast<unsigned char>(s[pos]);
  if (b0 < 0x80) return {b0, 1, true};
  std::size_t need = 0;
  char32_t cp = 0;
  char32_t min = 0;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1, cp = b0 & 0x1F, min = 0x80;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2, cp = b0 & 0x0F, min = 0x800;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3, cp = b0 & 0x07, min = 0x10000;
  } else {
    return {kReplacement, 1, false};
  }
  for (std::size_t i = 1; i <= need; ++i) {
    if (pos + i >= s.size()) return {kReplacement, 0, false};  // cut off: wait for more bytes
    const auto b = static_cast<unsigned char>(s[pos + i]);
    if ((b & 0xC0) != 0x80) return {kReplacement, 1, false};
    cp = (cp << 6) | (b & 0x3F);
    // Reject overlong, surrogate and > U+10FFFF forms as soon as the second byte shows them.
    if (i == 1) {
      if ((b0 == 0xE0 && b < 0xA0) || (b0 == 0xED && b > 0x9F) || (b0 == 0xF0 && b < 0x90) ||
          (b0 == 0xF4 && b > 0x8F)) {
        return {kReplacement, 1, false};
      }
    }
  }
  if (cp < min) return {kReplacement, 1, false};
  return {cp, need + 1, true};
}

void append(std::string& out, char32_t cp) {
  if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) cp = kReplacement;
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

std::size_t complete_prefix(std::string_view s) {
  // Only the last three bytes can start an incomplete sequence.
  const std::size_t from = s.size() > 3 ? s.size() - 3 : 0;
  for (std::size_t i = from; i < s.size(); ++i) {
    const auto b = static_cast<unsigned char>(s[i]);
    if ((b & 0xC0) == 0x80) continue;
    if (decode(s, i).length == 0) return i;
  }
  return s.size();
}

std::string sanitize(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  std::size_t i = 0;
  while (i < s.size()) {
    const Decoded d = decode(s, i);
    if (d.valid) {
      out.append(s.substr(i, d.length));
      i += d.length;
    } else {
      append(out, kReplacement);
      i += d.length == 0 ? s.size() - i : d.length;  // a cut-off tail becomes one U+FFFD
    }
  }
  return out;
}

bool is_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

bool is_cjk(char32_t c) {
  return (c >= 0x3000 && c <= 0x30FF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x4E00 && c <= 0x9FFF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0xFF00 && c <= 0xFFEF);
}

std::string_view trim(std::string_view s) {
  std::size_t b = 0;
  while (b < s.size()) {
    const Decoded d = decode(s, b);
    if (d.length == 0 || !is_space(d.cp)) break;
    b += d.length;
  }
  std::size_t e = s.size();
  while (e > b) {
    std::size_t start = e - 1;
    while (start > b && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80 && e - start < 4) --start;
    const Decoded d = decode(s, start);
    if (d.length != e - start || !is_space(d.cp)) break;
    e = start;
  }
  return s.substr(b, e - b);
}

char32_t first_cp(std::string_view s) { return s.empty() ? 0 : decode(s, 0).cp; }

char32_t last_cp(std::string_view s) {
  if (s.empty()) return 0;
  std::size_t start = s.size() - 1;
  while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80 && s.size() - start < 4) --start;
  const Decoded d = decode(s, start);
  return d.length == s.size() - start ? d.cp : kReplacement;
}

std::size_t length(std::string_view s) {
  std::size_t n = 0;
  for (std::size_t i = 0; i < s.size();) {
    const Decoded d = decode(s, i);
    i += d.length == 0 ? s.size() - i : d.length;
    ++n;
  }
  return n;
}

}  // namespace vv::utf8
