// SHA-256 (FIPS 180-4) for API-key comparison (API.md §0.5: keys are compared as digests, in
// constant time). Pure function; any thread.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace vv::api {

using Digest = std::array<std::uint8_t, 32>;

Digest sha256(std::string_view data);

// Constant-time equality of two digests (no early exit).
bool digest_equal(const Digest& a, const Digest& b);

}  // namespace vv::api
