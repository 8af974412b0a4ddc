// TranscriptAssembler: turns the decoded answer, piece by piece, into the request's Transcript and
// its stream events (API.md §3.4, §4.3): text deltas that carry only Content text (separators go
// with the first delta of the next segment, never a split UTF-8 character) and finished segments
// (trimmed, clamped, labelled, empty ones skipped); the single fallback segment when nothing parses.
// One per request, owned by its decode state; not thread-safe.
#pragma once

#include <cstddef>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/transcript/output_parser.h"
#include "engine/transcript/speaker_labels.h"
#include "engine/transcript/transcript.h"

namespace vv {

struct TranscriptEvent {
  enum class Kind {
    kDelta,    // delta: text to append to transcript().text (concatenation of all = final text)
    kSegment,  // transcript().segments[segment_index] is complete
  };
  Kind kind = Kind::kDelta;
  std::size_t segment_index = 0;  // for kDelta: the segment the text belongs to
  std::string delta;
};

// One generated token as the decoder produced it (stop tokens are never fed).
struct GeneratedToken {
  TokenId id = 0;
  std::string_view bytes;    // its decoded bytes (a special token as its text)
  float logprob = 0.0f;      // <= 0
  float temperature = 0.0f;  // the temperature it was sampled at
};

class TranscriptAssembler {
 public:
  // duration: the decoded audio's length; segment times are clamped to [0, duration].
  explicit TranscriptAssembler(Seconds duration);

  // The next piece of decoded text (special tokens may be present; stop tokens should not be fed).
  void feed(std::string_view text, std::vector<TranscriptEvent>& out);
  // The next token: feeds its bytes and attributes it (API.md §3.4 "tokens that carry transcript
  // text"): a token overlapping a segment's Content goes to that segment's tokens / avg_logprob /
  // temperature and to transcript().logprobs; after a fallback every answer token goes to segment 0.
  // Use either feed() or feed_token() for one request, not both.
  void feed_token(const GeneratedToken& token, std::vector<TranscriptEvent>& out);
  // End of generation: emits the cut-off last segment, or the fallback segment.
  void finish(std::vector<TranscriptEvent>& out);

  const Transcript& transcript() const { return transcript_; }
  Transcript& transcript() { return transcript_; }  // the caller sets finish_reason, language, …
  bool finished() const { return finished_; }

  // The segment whose Content overlaps stream bytes [begin, end) of the fed text (a token's bytes),
  // or nullopt (JSON syntax, header, skipped items). After a fallback, any bytes of the answer map
  // to segment 0.
  std::optional<std::size_t> segment_at(std::size_t begin, std::size_t end) const;

  // Cutting back after a repetition loop (API.md §3.7): the stream offset just past segment
  // index's JSON object, and how many segments end at or before a stream offset. To resume, keep
  // the tokens that cover [0, offset) and feed their text to a fresh assembler.
  std::optional<std::size_t> segment_end_offset(std::size_t index) const;
  std::size_t segments_ending_by(std::size_t offset) const;

 private:
  void handle(ParseEvent& e, std::vector<TranscriptEvent>& out);
  void content(std::string_view bytes, bool flush, std::vector<TranscriptEvent>& out);
  void close_segment(const ParsedSegment& p, std::vector<TranscriptEvent>& out);
  Seconds clamp_time(Seconds t) const;
  void attribute_tokens(std::size_t segment, std::size_t content_begin, std::size_t content_end,
                        std::size_t object_end);

  struct PendingToken {
    TokenId id;
    float logprob;
    float temperature;
    std::size_t begin;
    std::size_t end;
    std::string bytes;
  };

  OutputParser parser_;
  Transcript transcript_;
  SpeakerLabels labels_;
  std::vector<std::pair<std::size_t, std::size_t>> content_ranges_;  // per kept segment
  std::vector<std::size_t> object_ends_;                             // per kept segment
  std::size_t answer_begin_ = 0;
  std::size_t fed_ = 0;                      // stream bytes fed so far
  std::deque<PendingToken> pending_tokens_;  // fed, not yet attributed
  std::vector<std::size_t> token_counts_;    // per kept segment, for avg_logprob
  std::vector<double> logprob_sums_;
  bool fallback_ = false;
  bool finished_ = false;
  Seconds previous_end_ = 0.0;

  // The segment being streamed.
  std::string utf8_hold_;   // a cut-off UTF-8 sequence waiting for its remaining bytes
  std::string pending_ws_;  // whitespace held back until more text follows (segments are trimmed)
  std::string open_text_;
  bool open_started_ = false;
};

}  // namespace vv
