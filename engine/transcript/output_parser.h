// OutputParser: incremental reader of the model's decoded answer (MODEL.md §9) — an optional
// assistant header and code fence, then a JSON array of {Start, End, Speaker, Content} objects.
// It emits each object as soon as it closes and streams Content text as it is decoded; it tolerates
// truncation, malformed items, key variants, a missing "Start": key and free text (fallback).
// One parser per request; not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace vv {

// One object of the model's array, values as the model wrote them (not yet clamped or labelled).
struct ParsedSegment {
  std::optional<double> start;
  std::optional<double> end;
  std::optional<std::int64_t> speaker;  // absent when missing or not an integer ("N/A")
  std::string content;                  // unescaped Content bytes (not trimmed, maybe invalid UTF-8)
  // Stream byte offsets of the raw Content value (between its quotes), for token attribution.
  std::size_t content_begin = 0;
  std::size_t content_end = 0;
  std::size_t object_end = 0;           // stream offset just past the object (where to cut back to)
  bool partial = false;                 // cut off before its closing brace
};

struct ParseEvent {
  enum class Kind {
    kContent,  // more Content text of the object being read
    kSegment,  // an object closed (or, at finish, was cut off) with a Content value
  };
  Kind kind = Kind::kContent;
  std::string content;    // kContent: newly decoded bytes
  ParsedSegment segment;  // kSegment
};

struct ParseSummary {
  bool failed = false;          // nothing parseable as segments: the fallback applies (API.md §3.4)
  bool truncated = false;       // the array (or an object) was cut off before its end
  std::size_t segments = 0;     // kSegment events emitted in all
  std::size_t malformed = 0;    // items skipped: not objects, or objects without Content
  std::size_t answer_begin = 0; // stream offset where the answer starts (after header and fence)
  std::size_t answer_end = 0;   // stream offset of the end of everything fed
  std::string fallback_text;    // the whole text, special tokens and header removed, trimmed
};

class OutputParser {
 public:
  // base_offset is added to every reported stream offset.
  explicit OutputParser(std::size_t base_offset = 0);

  // Consumes the next piece of decoded text; appends what it completes to out.
  void feed(std::string_view text, std::vector<ParseEvent>& out);
  // Ends the stream: emits a cut-off last object (partial) and, when the text never started an
  // array, tries the MS recovery (first ```json fence, else first '[', else first '{').
  ParseSummary finish(std::vector<ParseEvent>& out);

 private:
  enum class State {
    kPreamble, kExpectItem, kSkipItem, kKeyOrEnd, kKey, kColon, kValue, kString, kScalar, kNested,
    kAfterValue, kSkipObject, kDone, kRaw,
  };
  enum class Key { kOther, kStart, kEnd, kSpeaker, kContent };

  void resolve_preamble(std::vector<ParseEvent>& out, bool at_end);
  void step(char c, std::vector<ParseEvent>& out);
  bool skip_char(char c);  // generic bracket/string skipper; true when depth returned to 0
  void begin_object();
  void close_object(std::vector<ParseEvent>& out);
  void string_char(char c);
  void string_byte(char c);
  void string_cp(char32_t cp);
  void flush_surrogate();
  void end_string();
  void end_scalar();
  void assign_number(Key key, std::string_view text);
  void flush_content(std::vector<ParseEvent>& out);

  State state_ = State::kPreamble;
  std::size_t base_;
  std::size_t pos_ = 0;             // stream offset of the byte being processed (without base)
  std::string raw_;                 // everything fed, for the fallback and the MS recovery
  std::size_t preamble_used_ = 0;   // bytes of raw_ consumed by the preamble
  std::size_t answer_begin_ = 0;
  bool array_mode_ = false;
  bool fenced_ = false;

  // Object being read.
  bool in_object_ = false;
  ParsedSegment cur_;
  bool has_content_ = false;
  Key key_ = Key::kOther;
  std::string key_buf_;
  std::string scalar_buf_;
  std::string value_buf_;           // string value being read (non-content keys)
  bool string_is_key_ = false;
  bool streaming_content_ = false;  // the open string is the object's Content
  bool escape_ = false;
  int unicode_digits_ = -1;         // -1: not in \uXXXX
  char32_t unicode_value_ = 0;
  char32_t high_surrogate_ = 0;
  std::string content_delta_;

  // Generic skipper.
  int skip_depth_ = 0;
  bool skip_in_string_ = false;
  bool skip_escape_ = false;

  std::size_t segments_ = 0;
  std::size_t malformed_ = 0;
};

}  // namespace vv
