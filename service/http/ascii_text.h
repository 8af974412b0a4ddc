// ASCII helpers for HTTP header and multipart field text: case folding (header names, tokens and
// media types compare case-insensitively) and trimming of optional whitespace (RFC 9110 OWS).
#pragma once

#include <cctype>
#include <string>
#include <string_view>

namespace vv::http {

inline std::string lower(std::string_view s) {
  std::string r(s);
  for (char& c : r) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

// Strips spaces and tabs at both ends.
inline std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace vv::http
