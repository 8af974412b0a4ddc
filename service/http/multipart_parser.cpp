#include "service/http/multipart_parser.h"

#include "service/http/ascii_text.h"
#include <algorithm>
#include <cctype>

namespace vv::http {
namespace {

// Splits "a; b=c; d=\"e;f\"" into parameters, honouring quotes. The first item is the value.
std::vector<std::pair<std::string, std::string>> header_params(std::string_view v) {
  std::vector<std::pair<std::string, std::string>> out;
  std::size_t i = 0;
  while (i <= v.size()) {
    std::string item;
    bool quoted = false;
    while (i < v.size() && (quoted || v[i] != ';')) {
      if (v[i] == '"') {
        quoted = !quoted;
      } else if (quoted && v[i] == '\\' && i + 1 < v.size()) {
        item += v[++i];
      } else {
        item += v[i];
      }
      ++i;
    }
    ++i;
    std::string_view it = trim(item);
    auto eq = it.find('=');
    if (eq == std::string_view::npos) {
      out.emplace_back(lower(it), "");
    } else {
      out.emplace_back(lower(trim(it.substr(0, eq))), std::string(trim(it.substr(eq + 1))));
    }
  }
  return out;
}

int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::optional<std::string> multipart_boundary(std::string_view content_type) {
  auto params = header_params(content_type);
  if (params.empty() || params[0].first != "multipart/form-data") return std::nullopt;
  for (std::size_t i = 1; i < params.size(); ++i) {
    if (params[i].first == "boundary") {
      const std::string& b = params[i].second;
      if (b.empty() || b.size() > 70) return std::string();
      return b;
    }
  }
  return std::string();
}

MultipartParser::MultipartParser(std::string boundary, MultipartLimits limits)
    : delimiter_("\r\n--" + boundary), limits_(limits) {
  // The first boundary may open the body without a preceding CRLF.
  pending_ = "\r\n";
}

bool MultipartParser::fail(std::string code, std::string message, std::optional<std::string> param) {
  state_ = State::kError;
  error_ = MultipartError{std::move(code), std::move(param), std::move(message)};
  pending_.clear();
  return false;
}

bool MultipartParser::append_body(std::string_view bytes) {
  current_size_ += bytes.size();
  if (current_is_field_ && current_size_ > limits_.max_field_bytes) {
    return fail("invalid_value",
                "The form field '" + current_name_.substr(0, 64) + "' is larger than " +
                    std::to_string(limits_.max_field_bytes) + " bytes.",
                current_name_);
  }
  if (keep_current_) parts_.back().data.append(bytes);
  return true;
}

bool MultipartParser::parse_headers(std::string_view block) {
  FormPart part;
  bool has_disposition = false;
  std::size_t pos = 0;
  while (pos < block.size()) {
    std::size_t eol = block.find("\r\n", pos);
    if (eol == std::string_view::npos) eol = block.size();
    std::string_view line = block.substr(pos, eol - pos);
    pos = eol + 2;
    if (line.empty()) continue;
    auto colon = line.find(':');
    if (colon == std::string_view::npos) return fail("invalid_multipart", "A multipart part header has no colon.");
    const std::string name = lower(trim(line.substr(0, colon)));
    const std::string_view value = trim(line.substr(colon + 1));
    if (name == "content-disposition") {
      auto params = header_params(value);
      if (params.empty() || params[0].first != "form-data") {
        return fail("invalid_multipart", "A multipart part's Content-Disposition is not form-data.");
      }
      has_disposition = true;
      bool has_name = false;
      for (std::size_t i = 1; i < params.size(); ++i) {
        if (params[i].first == "name") {
          part.name = params[i].second;
          has_name = true;
        } else if (params[i].first == "filename") {
          if (!part.filename) part.filename = params[i].second;
        } else if (params[i].first == "filename*") {
          // RFC 5987: charset'lang'percent-encoded
          std::string_view v = params[i].second;
          auto q = v.find('\'');
          auto q2 = q == std::string_view::npos ? q : v.find('\'', q + 1);
          std::string decoded;
          std::string_view enc = q2 == std::string_view::npos ? v : v.substr(q2 + 1);
          for (std::size_t j = 0; j < enc.size(); ++j) {
            if (enc[j] == '%' && j + 2 < enc.size() + 0 && hexval(enc[j + 1]) >= 0 && hexval(enc[j + 2]) >= 0) {
              decoded += static_cast<char>(hexval(enc[j + 1]) * 16 + hexval(enc[j + 2]));
              j += 2;
            } else {
              decoded += enc[j];
            }
          }
          part.filename = decoded;
        }
      }
      if (!has_name) return fail("invalid_multipart", "A multipart part has no name.");
    } else if (name == "content-type") {
      part.content_type = std::string(value);
    }
  }
  if (!has_disposition) return fail("invalid_multipart", "A multipart part has no Content-Disposition.");
  if (++part_count_ > limits_.max_parts) {
    return fail("invalid_multipart",
                "The multipart body has more than " + std::to_string(limits_.max_parts) + " parts.");
  }
  // Keep the audio part and plain fields; other file parts only count toward the body limit.
  current_is_field_ = !part.filename.has_value() && part.name != "file";
  keep_current_ = part.name == "file" || current_is_field_;
  current_size_ = 0;
  current_name_ = part.name;
  if (keep_current_) parts_.push_back(std::move(part));
  return true;
}

bool MultipartParser::feed(std::string_view bytes) {
  if (state_ == State::kError) return false;
  if (state_ == State::kEpilogue) return true;
  // The body is scanned where it lies (the read buffer): only an unfinished delimiter, boundary
  // line or header block is carried over in pending_, never the part data.
  if (!pending_.empty() && (state_ == State::kPreamble || state_ == State::kBody) &&
      bytes.size() >= delimiter_.size()) {
    // pending_ is shorter than a delimiter here: with the head of the new bytes it holds any
    // delimiter that starts in it; one that starts later is found in the new bytes themselves.
    std::string joined = pending_;
    joined.append(bytes.substr(0, delimiter_.size()));
    const std::size_t at = joined.find(delimiter_);
    if (at != std::string::npos && at < pending_.size()) {
      if (state_ == State::kBody && !append_body(std::string_view(joined).substr(0, at))) return false;
      bytes.remove_prefix(at + delimiter_.size() - pending_.size());
      state_ = State::kAfterBoundary;
    } else if (state_ == State::kBody && !append_body(pending_)) {
      return false;
    }
    pending_.clear();
  }
  std::size_t pos = 0;
  if (pending_.empty()) {
    if (!parse(bytes, pos)) return false;
    if (state_ != State::kEpilogue) pending_.assign(bytes.substr(pos));
    return true;
  }
  pending_.append(bytes);
  if (!parse(pending_, pos)) return false;
  pending_.erase(0, pos);
  return true;
}

bool MultipartParser::parse(std::string_view v, std::size_t& pos) {
  for (;;) {
    switch (state_) {
      case State::kPreamble:
      case State::kBody: {
        const std::size_t at = v.find(delimiter_, pos);
        if (at == std::string_view::npos) {
          // Keep what could be the start of a delimiter; the rest is part data (or preamble).
          const std::size_t rest = v.size() - pos;
          const std::size_t keep = std::min(rest, delimiter_.size() - 1);
          const std::size_t emit = rest - keep;
          if (state_ == State::kBody && !append_body(v.substr(pos, emit))) return false;
          if (state_ == State::kPreamble && emit > 0 && rest > 1 << 20) {
            // A preamble is allowed, but a megabyte without a boundary is not a form.
            return fail("invalid_multipart", "No multipart boundary found in the body.");
          }
          pos += emit;
          return true;
        }
        if (state_ == State::kBody && !append_body(v.substr(pos, at - pos))) return false;
        pos = at + delimiter_.size();
        state_ = State::kAfterBoundary;
        break;
      }
      case State::kAfterBoundary: {
        const std::string_view r = v.substr(pos);
        if (r.size() < 2) return true;
        if (r.substr(0, 2) == "--") {
          state_ = State::kEpilogue;
          pos = v.size();
          return true;
        }
        // Transport padding (spaces/tabs) may precede the CRLF.
        std::size_t i = 0;
        while (i < r.size() && (r[i] == ' ' || r[i] == '\t')) ++i;
        if (i + 2 > r.size()) {
          if (i > 256) return fail("invalid_multipart", "Malformed multipart boundary line.");
          return true;
        }
        if (r.substr(i, 2) != "\r\n") return fail("invalid_multipart", "Malformed multipart boundary line.");
        pos += i + 2;
        state_ = State::kHeaders;
        break;
      }
      case State::kHeaders: {
        const std::string_view r = v.substr(pos);
        std::size_t end = r.find("\r\n\r\n");
        // A part with no headers at all starts directly with the blank line.
        if (r.substr(0, 2) == "\r\n") end = 0;
        if (end == std::string_view::npos) {
          if (r.size() > limits_.max_part_header_bytes) {
            return fail("invalid_multipart", "A multipart part header block is larger than 8 KiB.");
          }
          return true;
        }
        if (end > limits_.max_part_header_bytes) {
          return fail("invalid_multipart", "A multipart part header block is larger than 8 KiB.");
        }
        if (!parse_headers(r.substr(0, end))) return false;
        pos += end == 0 ? 2 : end + 4;
        state_ = State::kBody;
        break;
      }
      case State::kEpilogue:
        pos = v.size();
        return true;
      case State::kError: return false;
    }
  }
}

bool MultipartParser::finish() {
  if (state_ == State::kError) return false;
  if (state_ != State::kEpilogue) {
    return fail("invalid_multipart", "The multipart body is truncated: the closing boundary is missing.");
  }
  return true;
}

}  // namespace vv::http
