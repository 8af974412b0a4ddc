// Prompt builder: the VibeVoice-ASR prompt (MODEL.md §7.3) as token ids, and the user context
// ("extra info") built from prompt / keywords / hotwords (API.md §3.3).
// Free functions over a borrowed Tokenizer; pure, any thread.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "config/status.h"
#include "engine/text/tokenizer.h"

namespace vv {

// API.md §3.3 steps 1–3: terms = keywords then comma-split hotwords, each trimmed, empties and
// exact duplicates dropped; extra = join(non-empty [join(terms, ", "), trim(prompt)], "\n"), with
// control characters other than \n and \t removed from the prompt; then "Language: <code>" on a
// new line when language_hint is non-empty.
std::string compose_context(std::string_view prompt, std::span<const std::string> keywords,
                            std::string_view hotwords, std::string_view language_hint = {});

// "%.2f" of samples_24k / 24000.0 (MODEL.md §4.5), e.g. 36000 → "1.50".
std::string format_duration(std::int64_t samples_24k);

struct AsrPrompt {
  std::vector<TokenId> ids;
  std::int64_t speech_begin = 0;   // index in ids of the first speech pad (<|box_start|>)
  std::int64_t speech_frames = 0;  // number of speech pads, F
};

// MODEL.md §7.3: system turn, user head, `frames` × <|box_start|>, tail with the duration of
// samples_24k; the "with extra info" variant when `context` is non-empty after trimming
// whitespace (context is tokenized with special-token parsing off). add_generation_prompt appends
// `<|im_start|>assistant\n` (the vLLM form; the reference prompt has none).
Result<AsrPrompt> build_asr_prompt(const Tokenizer& tokenizer, std::int64_t frames,
                                   std::int64_t samples_24k, std::string_view context,
                                   bool add_generation_prompt = false);

}  // namespace vv
