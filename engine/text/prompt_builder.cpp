#include "engine/text/prompt_builder.h"

#include <cstdio>

namespace vv {
namespace {

constexpr std::string_view kSystemTurn =
    "<|im_start|>system\nYou are a helpful assistant that transcribes audio input into text output "
    "in JSON format.<|im_end|>\n<|im_start|>user\n";
constexpr std::string_view kKeys = "Start time, End time, Speaker ID, Content";

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// Trims ASCII white space and the Unicode White_Space characters Python's str.strip() removes
// at the ends (U+0085, U+00A0, U+1680, U+2000–U+200A, U+2028, U+2029, U+202F, U+205F, U+3000).
std::string_view trim(std::string_view s) {
  auto ws_len_front = [](std::string_view t) -> std::size_t {
    if (t.empty()) return 0;
    auto b0 = static_cast<unsigned char>(t[0]);
    if (b0 < 0x80) return is_space(t[0]) || (b0 >= 0x1C && b0 <= 0x1F) ? 1 : 0;
    if (t.size() >= 2 && b0 == 0xC2 && (static_cast<unsigned char>(t[1]) == 0x85 || static_cast<unsigned char>(t[1]) == 0xA0)) return 2;
    if (t.size() >= 3) {
      auto b1 = static_cast<unsigned char>(t[1]), b2 = static_cast<unsigned char>(t[2]);
      if (b0 == 0xE1 && b1 == 0x9A && b2 == 0x80) return 3;                 // U+1680
      if (b0 == 0xE2 && b1 == 0x80 && (b2 <= 0x8A || b2 == 0xA8 || b2 == 0xA9 || b2 == 0xAF)) return 3;
      if (b0 == 0xE2 && b1 == 0x81 && b2 == 0x9F) return 3;                 // U+205F
      if (b0 == 0xE3 && b1 == 0x80 && b2 == 0x80) return 3;                 // U+3000
    }
    return 0;
  };
  while (std::size_t n = ws_len_front(s)) s.remove_prefix(n);
  while (!s.empty()) {
    // Step back over one character (at most 4 bytes) and test it.
    std::size_t k = 1;
    while (k < s.size() && k < 4 && (static_cast<unsigned char>(s[s.size() - k]) & 0xC0) == 0x80) ++k;
    std::string_view last = s.substr(s.size() - k);
    if (ws_len_front(last) != k) break;
    s.remove_suffix(k);
  }
  return s;
}

// Removes C0/C1 control characters and DEL except \n and \t.
std::string strip_controls(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    auto b = static_cast<unsigned char>(s[i]);
    if ((b < 0x20 && b != '\n' && b != '\t') || b == 0x7F) continue;
    if (b == 0xC2 && i + 1 < s.size()) {
      auto c = static_cast<unsigned char>(s[i + 1]);
      if (c >= 0x80 && c <= 0x9F) {
        ++i;
        continue;
      }
    }
    out.push_back(static_cast<char>(b));
  }
  return out;
}

}  // namespace

std::string compose_context(std::string_view prompt, std::span<const std::string> keywords,
                            std::string_view hotwords, std::string_view language_hint) {
  std::vector<std::string> terms;
  auto add_term = [&](std::string_view t) {
    t = trim(t);
    if (t.empty()) return;
    for (const auto& e : terms) {
      if (e == t) return;
    }
    terms.emplace_back(t);
  };
  for (const auto& k : keywords) add_term(k);
  while (!hotwords.empty()) {
    std::size_t comma = hotwords.find(',');
    add_term(hotwords.substr(0, comma));
    if (comma == std::string_view::npos) break;
    hotwords.remove_prefix(comma + 1);
  }
  std::string extra;
  for (std::size_t i = 0; i < terms.size(); ++i) {
    if (i) extra += ", ";
    extra += terms[i];
  }
  std::string cleaned = strip_controls(prompt);
  std::string_view p = trim(cleaned);
  if (!p.empty()) {
    if (!extra.empty()) extra += "\n";
    extra += p;
  }
  if (!language_hint.empty()) {
    if (!extra.empty()) extra += "\n";
    extra += "Language: ";
    extra += language_hint;
  }
  return extra;
}

std::string format_duration(std::int64_t samples_24k) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f", static_cast<double>(samples_24k) / 24000.0);
  return buf;
}

Result<AsrPrompt> build_asr_prompt(const Tokenizer& tokenizer, std::int64_t frames,
                                   std::int64_t samples_24k, std::string_view context,
                                   bool add_generation_prompt) {
  if (frames < 0) return invalid_argument("build_asr_prompt: negative frame count");
  if (samples_24k < 0) return invalid_argument("build_asr_prompt: negative sample count");
  auto id_of = [&](std::string_view name) -> Result<TokenId> {
    auto id = tokenizer.token_to_id(name);
    if (!id) return not_found("tokenizer: no token \"" + std::string(name) + "\" (needed by the ASR prompt)");
    return *id;
  };
  VV_ASSIGN_OR_RETURN(TokenId speech_start, id_of("<|object_ref_start|>"));
  VV_ASSIGN_OR_RETURN(TokenId speech_pad, id_of("<|box_start|>"));
  VV_ASSIGN_OR_RETURN(TokenId speech_end, id_of("<|object_ref_end|>"));
  VV_ASSIGN_OR_RETURN(TokenId im_start, id_of("<|im_start|>"));
  VV_ASSIGN_OR_RETURN(TokenId im_end, id_of("<|im_end|>"));

  AsrPrompt p;
  VV_ASSIGN_OR_RETURN(p.ids, tokenizer.encode(kSystemTurn, /*parse_special=*/true));
  p.ids.push_back(speech_start);
  p.speech_begin = static_cast<std::int64_t>(p.ids.size());
  p.speech_frames = frames;
  p.ids.insert(p.ids.end(), static_cast<std::size_t>(frames), speech_pad);
  p.ids.push_back(speech_end);

  std::string_view ctx = trim(context);
  std::string tail = "\nThis is a " + format_duration(samples_24k) + " seconds audio, ";
  if (ctx.empty()) {
    tail += "please transcribe it with these keys: ";
  } else {
    tail += "with extra info: ";
    tail += ctx;
    tail += "\n\nPlease transcribe it with these keys: ";
  }
  tail += kKeys;
  // The user's context is plain text: no special-token parsing anywhere in the tail.
  VV_ASSIGN_OR_RETURN(std::vector<TokenId> tail_ids, tokenizer.encode(tail, /*parse_special=*/false));
  p.ids.insert(p.ids.end(), tail_ids.begin(), tail_ids.end());
  p.ids.push_back(im_end);
  VV_ASSIGN_OR_RETURN(std::vector<TokenId> nl, tokenizer.encode("\n", false));
  p.ids.insert(p.ids.end(), nl.begin(), nl.end());
  if (add_generation_prompt) {
    p.ids.push_back(im_start);
    VV_ASSIGN_OR_RETURN(std::vector<TokenId> head, tokenizer.encode("assistant\n", false));
    p.ids.insert(p.ids.end(), head.begin(), head.end());
  }
  return p;
}

}  // namespace vv
