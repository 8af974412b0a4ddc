#include "engine/transcript/transcript_assembler.h"

#include <algorithm>
#include <cmath>

#include "engine/transcript/utf8_text.h"

namespace vv {

TranscriptAssembler::TranscriptAssembler(Seconds duration) {
  transcript_.duration = duration;
}

void TranscriptAssembler::feed_token(const GeneratedToken& token, std::vector<TranscriptEvent>& out) {
  if (finished_) return;
  pending_tokens_.push_back({token.id, token.logprob, token.temperature, fed_, fed_ + token.bytes.size(),
                             std::string(token.bytes)});
  feed(token.bytes, out);
}

void TranscriptAssembler::feed(std::string_view text, std::vector<TranscriptEvent>& out) {
  if (finished_) return;
  fed_ += text.size();
  std::vector<ParseEvent> events;
  parser_.feed(text, events);
  for (auto& e : events) handle(e, out);
}

void TranscriptAssembler::finish(std::vector<TranscriptEvent>& out) {
  if (finished_) return;
  finished_ = true;
  std::vector<ParseEvent> events;
  const ParseSummary summary = parser_.finish(events);
  for (auto& e : events) handle(e, out);
  answer_begin_ = summary.answer_begin;
  transcript_.truncated = summary.truncated;
  if (!summary.failed) return;
  transcript_.parse_failed = true;
  fallback_ = true;
  std::string text = utf8::sanitize(summary.fallback_text);
  if (text.empty() || !transcript_.segments.empty()) return;
  Segment s;
  s.start = 0.0;
  s.end = std::max(0.0, transcript_.duration);
  s.speaker.assign(1, 'A');
  s.text = text;
  transcript_.text = text;
  transcript_.segments.push_back(std::move(s));
  out.push_back({TranscriptEvent::Kind::kDelta, 0, std::move(text)});
  out.push_back({TranscriptEvent::Kind::kSegment, 0, {}});
  object_ends_.push_back(summary.answer_end);
  token_counts_.push_back(0);
  logprob_sums_.push_back(0.0);
  attribute_tokens(0, answer_begin_, summary.answer_end, summary.answer_end);
}

void TranscriptAssembler::handle(ParseEvent& e, std::vector<TranscriptEvent>& out) {
  if (e.kind == ParseEvent::Kind::kContent) {
    content(e.content, false, out);
  } else {
    content({}, true, out);
    close_segment(e.segment, out);
  }
}

void TranscriptAssembler::content(std::string_view bytes, bool flush, std::vector<TranscriptEvent>& out) {
  utf8_hold_.append(bytes);
  const std::size_t n = flush ? utf8_hold_.size() : utf8::complete_prefix(utf8_hold_);
  std::string delta;
  std::size_t i = 0;
  while (i < n) {
    utf8::Decoded d = utf8::decode(std::string_view(utf8_hold_).substr(0, n), i);
    std::string cp_bytes;
    if (d.valid) {
      cp_bytes = utf8_hold_.substr(i, d.length);
    } else {
      utf8::append(cp_bytes, utf8::kReplacement);
      if (d.length == 0) d.length = n - i;  // a cut-off tail at the end of a segment
    }
    i += d.length;
    if (utf8::is_space(d.cp) && d.valid) {
      if (open_started_) pending_ws_ += cp_bytes;
      continue;
    }
    if (!open_started_) {
      open_started_ = true;
      const char32_t prev = utf8::last_cp(transcript_.text);
      if (prev != 0 && !utf8::is_cjk(prev) && !utf8::is_cjk(d.cp)) delta.push_back(' ');
    }
    delta += pending_ws_;
    open_text_ += pending_ws_;
    pending_ws_.clear();
    delta += cp_bytes;
    open_text_ += cp_bytes;
  }
  utf8_hold_.erase(0, n);
  if (delta.empty()) return;
  transcript_.text += delta;
  out.push_back({TranscriptEvent::Kind::kDelta, transcript_.segments.size(), std::move(delta)});
}

Seconds TranscriptAssembler::clamp_time(Seconds t) const {
  if (!std::isfinite(t) || t < 0.0) return 0.0;
  return transcript_.duration > 0.0 ? std::min(t, transcript_.duration) : t;
}

void TranscriptAssembler::close_segment(const ParsedSegment& p, std::vector<TranscriptEvent>& out) {
  const bool started = open_started_;
  open_started_ = false;
  pending_ws_.clear();
  utf8_hold_.clear();
  if (!started) return;  // Content empty after trimming: skipped
  Segment s;
  s.start = clamp_time(p.start.value_or(previous_end_));
  s.end = std::max(s.start, clamp_time(p.end.value_or(s.start)));
  s.speaker = labels_.label_for(p.speaker);
  s.text = std::move(open_text_);
  open_text_.clear();
  previous_end_ = s.end;
  transcript_.segments.push_back(std::move(s));
  content_ranges_.emplace_back(p.content_begin, p.content_end);
  object_ends_.push_back(p.object_end);
  token_counts_.push_back(0);
  logprob_sums_.push_back(0.0);
  attribute_tokens(transcript_.segments.size() - 1, p.content_begin, p.content_end, p.object_end);
  out.push_back({TranscriptEvent::Kind::kSegment, transcript_.segments.size() - 1, {}});
}

std::optional<std::size_t> TranscriptAssembler::segment_at(std::size_t begin, std::size_t end) const {
  if (fallback_) {
    if (transcript_.segments.empty() || end <= answer_begin_) return std::nullopt;
    return 0;
  }
  // Ranges are in stream order: the first whose end is past begin is the only candidate.
  auto it = std::upper_bound(content_ranges_.begin(), content_ranges_.end(), begin,
                             [](std::size_t b, const auto& r) { return b < r.second; });
  if (it == content_ranges_.end() || it->first >= end) return std::nullopt;
  return static_cast<std::size_t>(it - content_ranges_.begin());
}

}  // namespace vv

namespace vv {

std::optional<std::size_t> TranscriptAssembler::segment_end_offset(std::size_t index) const {
  if (index >= object_ends_.size()) return std::nullopt;
  return object_ends_[index];
}

std::size_t TranscriptAssembler::segments_ending_by(std::size_t offset) const {
  return static_cast<std::size_t>(std::upper_bound(object_ends_.begin(), object_ends_.end(), offset) -
                                  object_ends_.begin());
}

}  // namespace vv

namespace vv {

void TranscriptAssembler::attribute_tokens(std::size_t segment, std::size_t content_begin,
                                           std::size_t content_end, std::size_t object_end) {
  Segment& seg = transcript_.segments[segment];
  while (!pending_tokens_.empty() && pending_tokens_.front().begin < object_end) {
    PendingToken& t = pending_tokens_.front();
    const bool overlaps = t.begin < content_end && content_begin < t.end;
    // A token reaching into the next object stays queued unless it already counted here.
    if (!overlaps && t.end > object_end) break;
    if (overlaps) {
      seg.tokens.push_back(t.id);
      seg.temperature = t.temperature;
      logprob_sums_[segment] += t.logprob;
      seg.avg_logprob = logprob_sums_[segment] / static_cast<double>(++token_counts_[segment]);
      transcript_.logprobs.push_back({utf8::sanitize(t.bytes), std::min(0.0, double(t.logprob)), std::move(t.bytes)});
    }
    pending_tokens_.pop_front();
  }
}

}  // namespace vv
