#include "engine/transcript/output_parser.h"

#include <charconv>
#include <cmath>

#include "engine/transcript/utf8_text.h"

namespace vv {
namespace {

bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

std::string_view trim_ascii(std::string_view s) {
  while (!s.empty() && is_ws(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_ws(s.back())) s.remove_suffix(1);
  return s;
}

std::optional<double> parse_number(std::string_view s) {
  s = trim_ascii(s);
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  double v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || ptr != s.data() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

// The text of a key that is really a number: `{"2.99,"End":…` lost its `Start":`.
bool is_number_text(std::string_view s) {
  s = trim_ascii(s);
  return !s.empty() && (s.front() == '-' || (s.front() >= '0' && s.front() <= '9')) && parse_number(s);
}

// A speaker id: a JSON integer (or integral number), or a string of digits; anything else
// ("N/A", a name, a fraction) is not an id.
std::optional<std::int64_t> parse_speaker(std::string_view s, bool quoted) {
  s = trim_ascii(s);
  if (quoted) {
    if (s.empty() || s.size() > 15) return std::nullopt;
    for (char c : s) {
      if (c < '0' || c > '9') return std::nullopt;
    }
  }
  const std::optional<double> v = parse_number(s);
  if (!v || *v != std::floor(*v) || std::fabs(*v) > 1e15) return std::nullopt;
  return static_cast<std::int64_t>(*v);
}

// Special tokens such as <|im_end|> (lower-case letters, digits, '_').
std::size_t special_token_length(std::string_view s, std::size_t i) {
  if (s.compare(i, 2, "<|") != 0) return 0;
  for (std::size_t j = i + 2; j < s.size() && j < i + 40; ++j) {
    const char c = s[j];
    if (c == '|') return j + 1 < s.size() && s[j + 1] == '>' && j > i + 2 ? j + 2 - i : 0;
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return 0;
  }
  return 0;
}

std::string make_fallback_text(std::string_view raw) {
  std::string text;
  text.reserve(raw.size());
  for (std::size_t i = 0; i < raw.size();) {
    if (const std::size_t n = special_token_length(raw, i)) {
      i += n;
    } else {
      text.push_back(raw[i++]);
    }
  }
  std::string_view t = utf8::trim(text);
  constexpr std::string_view kHeader = "assistant";
  if (t.starts_with(kHeader) && (t.size() == kHeader.size() || t[kHeader.size()] == '\n')) {
    t = utf8::trim(t.substr(kHeader.size()));
  }
  return std::string(t);
}

}  // namespace

OutputParser::OutputParser(std::size_t base_offset) : base_(base_offset) {}

void OutputParser::feed(std::string_view text, std::vector<ParseEvent>& out) {
  const std::size_t from = raw_.size();
  raw_.append(text);
  if (state_ == State::kPreamble) {
    resolve_preamble(out, false);
  } else if (state_ != State::kRaw && state_ != State::kDone) {
    for (pos_ = from; pos_ < raw_.size(); ++pos_) step(raw_[pos_], out);
  }
  pos_ = raw_.size();
  flush_content(out);
}

void OutputParser::resolve_preamble(std::vector<ParseEvent>& out, bool at_end) {
  constexpr std::string_view kSkipped[] = {"<|im_start|>", "assistant"};
  for (;;) {
    std::string_view rest = std::string_view(raw_).substr(preamble_used_);
    std::size_t i = 0;
    while (i < rest.size() && is_ws(rest[i])) ++i;
    rest.remove_prefix(i);
    if (rest.empty()) {
      if (at_end) state_ = State::kRaw;
      return;
    }
    bool consumed = false;
    for (std::string_view tok : kSkipped) {
      if (rest.starts_with(tok)) {
        preamble_used_ += i + tok.size();
        consumed = true;
        break;
      }
      if (!at_end && tok.starts_with(rest)) return;  // maybe the header: wait for more
    }
    if (consumed) continue;
    if (!fenced_ && (rest.starts_with("```") || (!at_end && std::string_view("```").starts_with(rest)))) {
      const std::size_t nl = rest.find('\n');
      if (nl != std::string_view::npos) {
        preamble_used_ += i + nl + 1;
        fenced_ = true;
        continue;
      }
      if (!at_end && rest.size() < 32) return;  // the fence line is not complete yet
    }
    answer_begin_ = preamble_used_ + i;
    const char c = raw_[answer_begin_];
    if (c == '[' || c == '{') {
      array_mode_ = c == '[';
      state_ = State::kExpectItem;
      for (pos_ = answer_begin_ + (array_mode_ ? 1 : 0); pos_ < raw_.size(); ++pos_) step(raw_[pos_], out);
    } else {
      state_ = State::kRaw;
    }
    pos_ = raw_.size();
    return;
  }
}

void OutputParser::begin_object() {
  in_object_ = true;
  cur_ = ParsedSegment{};
  has_content_ = false;
  key_ = Key::kOther;
  streaming_content_ = false;
}

void OutputParser::close_object(std::vector<ParseEvent>& out) {
  in_object_ = false;
  const char c = pos_ < raw_.size() ? raw_[pos_] : '\0';
  cur_.object_end = base_ + (c == '}' || c == ']' ? pos_ + 1 : pos_);
  if (!has_content_) {
    ++malformed_;
    return;
  }
  flush_content(out);
  ParseEvent e;
  e.kind = ParseEvent::Kind::kSegment;
  e.segment = std::move(cur_);
  out.push_back(std::move(e));
  ++segments_;
}

void OutputParser::flush_content(std::vector<ParseEvent>& out) {
  if (content_delta_.empty()) return;
  ParseEvent e;
  e.kind = ParseEvent::Kind::kContent;
  e.content = std::move(content_delta_);
  content_delta_.clear();
  out.push_back(std::move(e));
}

bool OutputParser::skip_char(char c) {
  if (skip_in_string_) {
    if (skip_escape_) {
      skip_escape_ = false;
    } else if (c == '\\') {
      skip_escape_ = true;
    } else if (c == '"') {
      skip_in_string_ = false;
    }
    return false;
  }
  if (c == '"') {
    skip_in_string_ = true;
  } else if (c == '{' || c == '[') {
    ++skip_depth_;
  } else if (c == '}' || c == ']') {
    --skip_depth_;
  }
  return skip_depth_ <= 0;
}

void OutputParser::string_byte(char c) {
  flush_surrogate();
  if (streaming_content_) {
    cur_.content.push_back(c);
    content_delta_.push_back(c);
  } else {
    value_buf_.push_back(c);
  }
}

void OutputParser::string_cp(char32_t cp) {
  std::string bytes;
  utf8::append(bytes, cp);
  if (streaming_content_) {
    cur_.content += bytes;
    content_delta_ += bytes;
  } else {
    value_buf_ += bytes;
  }
}

void OutputParser::flush_surrogate() {
  if (high_surrogate_ == 0) return;
  high_surrogate_ = 0;
  string_cp(utf8::kReplacement);
}

void OutputParser::string_char(char c) {
  if (unicode_digits_ >= 0) {
    int digit = -1;
    if (c >= '0' && c <= '9') digit = c - '0';
    if (c >= 'a' && c <= 'f') digit = c - 'a' + 10;
    if (c >= 'A' && c <= 'F') digit = c - 'A' + 10;
    if (digit >= 0) {
      unicode_value_ = unicode_value_ * 16 + static_cast<char32_t>(digit);
      if (++unicode_digits_ < 4) return;
      unicode_digits_ = -1;
      const char32_t v = unicode_value_;
      if (v >= 0xD800 && v <= 0xDBFF) {
        flush_surrogate();
        high_surrogate_ = v;
      } else if (v >= 0xDC00 && v <= 0xDFFF) {
        const char32_t high = high_surrogate_;
        high_surrogate_ = 0;
        string_cp(high ? 0x10000 + ((high - 0xD800) << 10) + (v - 0xDC00) : utf8::kReplacement);
      } else {
        flush_surrogate();
        string_cp(v);
      }
      return;
    }
    unicode_digits_ = -1;  // a broken \u escape: mark it and read c normally
    flush_surrogate();
    string_cp(utf8::kReplacement);
  }
  if (escape_) {
    escape_ = false;
    switch (c) {
      case 'n': string_byte('\n'); return;
      case 't': string_byte('\t'); return;
      case 'r': string_byte('\r'); return;
      case 'b': string_byte('\b'); return;
      case 'f': string_byte('\f'); return;
      case 'u':
        unicode_digits_ = 0;
        unicode_value_ = 0;
        return;
      default: string_byte(c); return;  // \" \\ \/ and unknown escapes keep the character
    }
  }
  if (c == '\\') {
    escape_ = true;
  } else if (c == '"') {
    flush_surrogate();
    end_string();
  } else {
    string_byte(c);
  }
}

void OutputParser::end_string() {
  state_ = State::kAfterValue;
  if (streaming_content_) {
    streaming_content_ = false;
    cur_.content_end = base_ + pos_;
    return;
  }
  switch (key_) {
    case Key::kStart:
    case Key::kEnd: assign_number(key_, value_buf_); break;
    case Key::kSpeaker: cur_.speaker = parse_speaker(value_buf_, true); break;
    default: break;
  }
}

void OutputParser::assign_number(Key key, std::string_view text) {
  const std::optional<double> v = parse_number(text);
  if (!v) return;
  if (key == Key::kStart) cur_.start = v;
  if (key == Key::kEnd) cur_.end = v;
}

void OutputParser::end_scalar() {
  switch (key_) {
    case Key::kStart:
    case Key::kEnd: assign_number(key_, scalar_buf_); break;
    case Key::kSpeaker: cur_.speaker = parse_speaker(scalar_buf_, false); break;
    case Key::kContent:
      if (!has_content_) {
        has_content_ = true;
        cur_.content_begin = base_ + pos_ - scalar_buf_.size();
        cur_.content_end = base_ + pos_;
        if (scalar_buf_ != "null" && scalar_buf_ != "true" && scalar_buf_ != "false") {
          cur_.content = scalar_buf_;
          content_delta_ += scalar_buf_;
        }
      }
      break;
    default: break;
  }
}

void OutputParser::step(char c, std::vector<ParseEvent>& out) {
  auto enter_skip_object = [&] {
    state_ = State::kSkipObject;
    skip_depth_ = 1;
    skip_in_string_ = skip_escape_ = false;
    step(c, out);
  };
  auto start_key = [&] {
    key_buf_.clear();
    escape_ = false;
    state_ = State::kKey;
  };
  auto close = [&](char closer) {
    close_object(out);
    state_ = closer == ']' && array_mode_ ? State::kDone : State::kExpectItem;
  };
  switch (state_) {
    case State::kExpectItem:
      if (is_ws(c) || c == ',') return;
      if (c == ']') {
        if (array_mode_) state_ = State::kDone;
        return;
      }
      if (c == '{') {
        begin_object();
        state_ = State::kKeyOrEnd;
        return;
      }
      ++malformed_;
      state_ = State::kSkipItem;
      skip_depth_ = 0;
      skip_in_string_ = skip_escape_ = false;
      step(c, out);
      return;
    case State::kSkipItem:
      if (!skip_in_string_ && skip_depth_ == 0) {
        if (c == ',') {
          state_ = State::kExpectItem;
          return;
        }
        if (c == ']') {
          if (array_mode_) state_ = State::kDone;
          return;
        }
        if (c == '{') {  // an object after junk: read it
          begin_object();
          state_ = State::kKeyOrEnd;
          return;
        }
      }
      skip_char(c);
      if (skip_depth_ < 0) skip_depth_ = 0;
      return;
    case State::kKeyOrEnd:
      if (is_ws(c) || c == ',') return;
      if (c == '"') return start_key();
      if (c == '}' || c == ']') return close(c);
      if (c == '{') {  // the previous object lost its closing brace
        close_object(out);
        begin_object();
        return;
      }
      if (c == '-' || (c >= '0' && c <= '9')) {  // {2.99,"End":…: the "Start": key is missing
        key_ = Key::kStart;
        scalar_buf_.assign(1, c);
        state_ = State::kScalar;
        return;
      }
      return enter_skip_object();
    case State::kKey:
      if (escape_) {
        escape_ = false;
        key_buf_.push_back(c);
      } else if (c == '\\') {
        escape_ = true;
      } else if (c == '"') {
        std::string k;
        for (char ch : key_buf_) {
          if (ch == ' ' || ch == '_' || ch == '-') continue;
          k.push_back(ch >= 'A' && ch <= 'Z' ? static_cast<char>(ch - 'A' + 'a') : ch);
        }
        key_ = (k == "start" || k == "starttime")  ? Key::kStart
               : (k == "end" || k == "endtime")    ? Key::kEnd
               : (k == "speaker" || k == "speakerid") ? Key::kSpeaker
               : (k == "content" || k == "text")   ? Key::kContent
                                                   : Key::kOther;
        state_ = State::kColon;
      } else if (c == ',' && is_number_text(key_buf_)) {
        // {"2.99,"End":…: the model dropped `Start":` (MODEL.md §9.2); the "key" is the start time.
        assign_number(Key::kStart, key_buf_);
        state_ = State::kKeyOrEnd;
      } else {
        key_buf_.push_back(c);
      }
      return;
    case State::kColon:
      if (is_ws(c)) return;
      if (c == ':') {
        state_ = State::kValue;
        return;
      }
      return enter_skip_object();
    case State::kValue:
      if (is_ws(c)) return;
      if (c == '"') {
        streaming_content_ = key_ == Key::kContent && !has_content_;
        if (streaming_content_) {
          has_content_ = true;
          cur_.content.clear();
          cur_.content_begin = base_ + pos_ + 1;
        }
        value_buf_.clear();
        escape_ = false;
        unicode_digits_ = -1;
        high_surrogate_ = 0;
        state_ = State::kString;
        return;
      }
      if (c == '{' || c == '[') {
        state_ = State::kNested;
        skip_depth_ = 1;
        skip_in_string_ = skip_escape_ = false;
        return;
      }
      if (c == ',') {
        state_ = State::kKeyOrEnd;
        return;
      }
      if (c == '}' || c == ']') return close(c);
      scalar_buf_.assign(1, c);
      state_ = State::kScalar;
      return;
    case State::kString:
      string_char(c);
      return;
    case State::kScalar:
      if (is_ws(c) || c == ',' || c == '}' || c == ']') {
        end_scalar();
        state_ = State::kAfterValue;
        step(c, out);
      } else if (scalar_buf_.size() < 64) {
        scalar_buf_.push_back(c);
      }
      return;
    case State::kNested:
      if (skip_char(c)) state_ = State::kAfterValue;
      return;
    case State::kAfterValue:
      if (is_ws(c)) return;
      if (c == ',') {
        state_ = State::kKeyOrEnd;
        return;
      }
      if (c == '}' || c == ']') return close(c);
      if (c == '"') return start_key();  // a missing comma
      if (c == '{') {
        close_object(out);
        begin_object();
        state_ = State::kKeyOrEnd;
        return;
      }
      return enter_skip_object();
    case State::kSkipObject:
      if (!skip_in_string_ && skip_depth_ == 1 && (c == '}' || c == ']')) return close(c);
      skip_char(c);
      return;
    case State::kPreamble:
    case State::kDone:
    case State::kRaw:
      return;
  }
}

ParseSummary OutputParser::finish(std::vector<ParseEvent>& out) {
  if (state_ == State::kPreamble) resolve_preamble(out, true);
  if (state_ == State::kPreamble) state_ = State::kRaw;
  ParseSummary summary;
  summary.answer_begin = base_ + answer_begin_;
  summary.answer_end = base_ + raw_.size();
  if (state_ == State::kRaw) {
    // The MS recovery: a fenced block, else the first bracket anywhere.
    const std::string_view text = std::string_view(raw_).substr(answer_begin_);
    std::size_t j = std::string_view::npos;
    const std::size_t fence = text.find("```json");
    if (fence != std::string_view::npos) j = text.find_first_of("[{", fence);
    if (j == std::string_view::npos) j = text.find('[');
    if (j == std::string_view::npos) j = text.find('{');
    if (j != std::string_view::npos) {
      OutputParser sub(base_ + answer_begin_ + j);
      std::vector<ParseEvent> events;
      sub.feed(text.substr(j), events);
      const ParseSummary s = sub.finish(events);
      if (s.segments > 0) {
        out.insert(out.end(), std::make_move_iterator(events.begin()), std::make_move_iterator(events.end()));
        summary.segments = s.segments;
        summary.malformed = s.malformed;
        summary.truncated = s.truncated;
        return summary;
      }
    }
    summary.failed = true;
  } else {
    if (in_object_) {
      if (state_ == State::kString && streaming_content_) {
        flush_surrogate();
        cur_.content_end = base_ + raw_.size();
      }
      if (state_ == State::kScalar) end_scalar();
      summary.truncated = true;
      if (has_content_) {
        cur_.partial = true;
        pos_ = raw_.size();
        close_object(out);
      }
      in_object_ = false;
    } else if (array_mode_ && state_ != State::kDone) {
      summary.truncated = true;
    }
    flush_content(out);
    state_ = State::kDone;
    summary.segments = segments_;
    summary.malformed = malformed_;
    summary.failed = segments_ == 0 && malformed_ > 0;
  }
  if (summary.failed) summary.fallback_text = make_fallback_text(raw_);
  return summary;
}

}  // namespace vv
