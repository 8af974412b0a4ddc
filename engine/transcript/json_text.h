// JSON text pieces the response writers share: string escaping and number formatting.
// Pure functions; any thread.
#pragma once

#include <string>
#include <string_view>

namespace vv::json {

// Appends s as a JSON string literal: quotes, backslash and control characters escaped, other
// characters (valid UTF-8 expected) written raw, as OpenAI's responses do.
void append_string(std::string& out, std::string_view s);
// Appends a number the way Python's repr writes a float (the shape of API.md's examples):
// shortest round-trip digits, "0.0" and "2.48", exponent form outside 1e-4 <= |v| < 1e16.
// Non-finite values (not representable in JSON) are written as 0.0.
void append_double(std::string& out, double v);
std::string format_double(double v);

}  // namespace vv::json
