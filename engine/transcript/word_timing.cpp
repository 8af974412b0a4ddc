#include "engine/transcript/word_timing.h"

#include <utf8proc.h>

#include <cmath>
#include <string_view>

#include "engine/transcript/utf8_text.h"

namespace vv {
namespace {

bool is_punct(char32_t cp) {
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_PC:
    case UTF8PROC_CATEGORY_PD:
    case UTF8PROC_CATEGORY_PS:
    case UTF8PROC_CATEGORY_PE:
    case UTF8PROC_CATEGORY_PI:
    case UTF8PROC_CATEGORY_PF:
    case UTF8PROC_CATEGORY_PO: return true;
    default: return false;
  }
}

struct Piece {
  std::string text;
  std::size_t chars = 0;
};

std::vector<Piece> split_words(std::string_view text) {
  std::vector<Piece> words;
  std::vector<Piece> chars;
  bool has_space = false;
  bool all_cjk = true;
  bool any_cjk = false;
  Piece cur;
  for (std::size_t i = 0; i < text.size();) {
    utf8::Decoded d = utf8::decode(text, i);
    if (d.length == 0) d.length = text.size() - i;
    const std::string_view bytes = text.substr(i, d.length);
    i += d.length;
    if (utf8::is_space(d.cp)) {
      has_space = true;
      if (cur.chars) words.push_back(std::move(cur));
      cur = {};
      continue;
    }
    cur.text += bytes;
    ++cur.chars;
    chars.push_back({std::string(bytes), 1});
    any_cjk |= utf8::is_cjk(d.cp);
    all_cjk &= utf8::is_cjk(d.cp) || is_punct(d.cp);
  }
  if (cur.chars) words.push_back(std::move(cur));
  if (!has_space && any_cjk && all_cjk) return chars;
  return words;
}

std::string strip_punct(std::string_view w) {
  std::size_t b = 0;
  std::size_t e = w.size();
  while (b < e) {
    const utf8::Decoded d = utf8::decode(w, b);
    if (d.length == 0 || !is_punct(d.cp)) break;
    b += d.length;
  }
  while (e > b) {
    std::size_t s = e - 1;
    while (s > b && (static_cast<unsigned char>(w[s]) & 0xC0) == 0x80) --s;
    const utf8::Decoded d = utf8::decode(w, s);
    if (d.length != e - s || !is_punct(d.cp)) break;
    e = s;
  }
  return std::string(w.substr(b, e - b));
}

double round_ms(double t) { return std::round(t * 1000.0) / 1000.0; }

}  // namespace

std::vector<Word> interpolate_words(const std::vector<Segment>& segments) {
  std::vector<Word> out;
  for (const Segment& seg : segments) {
    const std::vector<Piece> pieces = split_words(seg.text);
    std::size_t total = 0;
    for (const auto& p : pieces) total += p.chars;
    if (total == 0) continue;
    const double span = seg.end - seg.start;
    std::size_t before = 0;
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      const double start = seg.start + span * static_cast<double>(before) / static_cast<double>(total);
      before += pieces[i].chars;
      const double end = i + 1 == pieces.size()
                             ? seg.end
                             : seg.start + span * static_cast<double>(before) / static_cast<double>(total);
      std::string word = strip_punct(pieces[i].text);
      if (word.empty()) continue;
      out.push_back({std::move(word), round_ms(start), round_ms(end)});
    }
  }
  return out;
}

}  // namespace vv
