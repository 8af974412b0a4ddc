#include "engine/text/unicode_classes.h"

#include <cstdint>
#include <vector>

#include "engine/text/unicode_tables.h"

namespace vv::unicode {
namespace {

// No letter or number lies above plane 3 in Unicode 16.0; a bitset over planes 0–3 answers both.
constexpr char32_t kBitsetLimit = 0x40000;

struct ClassBits {
  std::vector<std::uint64_t> letter, number;
  ClassBits() : letter(kBitsetLimit / 64), number(kBitsetLimit / 64) {
    fill(letter, unicode_data::kLetters, unicode_data::kLetters_count);
    fill(number, unicode_data::kNumbers, unicode_data::kNumbers_count);
  }
  static void fill(std::vector<std::uint64_t>& bits, const unicode_data::CodeRange* r, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
      for (char32_t cp = r[i].lo; cp <= r[i].hi && cp < kBitsetLimit; ++cp) {
        bits[cp >> 6] |= std::uint64_t{1} << (cp & 63);
      }
    }
  }
};

const ClassBits& bits() {
  static const ClassBits b;
  return b;
}

bool test(const std::vector<std::uint64_t>& v, char32_t cp) {
  return cp < kBitsetLimit && ((v[cp >> 6] >> (cp & 63)) & 1);
}

}  // namespace

bool is_letter(char32_t cp) {
  if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
  return test(bits().letter, cp);
}

bool is_number(char32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  return test(bits().number, cp);
}

bool is_white_space(char32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
  switch (cp) {
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

}  // namespace vv::unicode
