// WriterOptions: the request choices that shape a response body (API.md §3.1, §3.5).
// A plain value; any thread.
#pragma once

namespace vv {

struct WriterOptions {
  bool speaker_labels = true;       // srt "[A] " / vtt "<v A>" cue prefixes (asr.subtitle_speaker_labels)
  bool include_logprobs = false;    // json: include[]=logprobs
  bool segment_granularity = true;  // verbose_json: "segments" (false only for exactly [word])
  bool word_granularity = false;    // verbose_json: "words"
};

}  // namespace vv
