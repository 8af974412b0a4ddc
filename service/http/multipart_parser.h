// MultipartParser: a streaming multipart/form-data parser (RFC 7578) that checks the limits of
// API.md §2.1/§2.2 as bytes arrive, so an over-limit or malformed body is refused before it has
// been read in full. Holds the parts it keeps (the `file` part and non-file fields; other file
// parts are counted and dropped). One per request; not thread-safe (the session's strand feeds it).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace vv::http {

struct FormPart {
  std::string name;
  std::optional<std::string> filename;
  std::string content_type;  // logged only; never used to choose a decoder
  std::string data;
};

struct MultipartError {
  std::string code;                  // "invalid_multipart" or "invalid_value"
  std::optional<std::string> param;  // the field for invalid_value
  std::string message;
};

struct MultipartLimits {
  std::size_t max_parts = 128;
  std::size_t max_field_bytes = 65536;
  std::size_t max_part_header_bytes = 8192;
};

// The boundary parameter of a Content-Type value, if the type is multipart/form-data:
// nullopt when the type is something else, "" when the boundary is missing or invalid (1–70 chars).
std::optional<std::string> multipart_boundary(std::string_view content_type);

class MultipartParser {
 public:
  MultipartParser(std::string boundary, MultipartLimits limits);

  // Feeds the next body bytes. Returns false once an error is known (then error() says which).
  bool feed(std::string_view bytes);
  // The body ended: false if the closing boundary never came (or an earlier error).
  bool finish();

  const std::optional<MultipartError>& error() const { return error_; }
  std::vector<FormPart>& parts() { return parts_; }
  std::size_t part_count() const { return part_count_; }

 private:
  enum class State { kPreamble, kAfterBoundary, kHeaders, kBody, kEpilogue, kError };
  bool fail(std::string code, std::string message, std::optional<std::string> param = std::nullopt);
  bool parse_headers(std::string_view block);
  bool append_body(std::string_view bytes);
  // Parses v from pos on; pos ends at the first byte not consumed (to be carried over).
  bool parse(std::string_view v, std::size_t& pos);

  std::string delimiter_;  // "\r\n--" + boundary
  MultipartLimits limits_;
  State state_ = State::kPreamble;
  std::string pending_;  // an unfinished delimiter, boundary line or header block
  std::vector<FormPart> parts_;
  std::size_t part_count_ = 0;
  bool keep_current_ = false;
  bool current_is_field_ = false;
  std::size_t current_size_ = 0;
  std::string current_name_;
  std::optional<MultipartError> error_;
};

}  // namespace vv::http
