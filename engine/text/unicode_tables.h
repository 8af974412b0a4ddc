// Raw Unicode data tables (generated: unicode_tables.cpp by tools/gen_unicode_tables.py) behind
// unicode_classes.h and nfc.h. Static constant data; read from any thread.
#pragma once

#include <cstddef>
#include <cstdint>

namespace vv::unicode_data {

struct CodeRange {
  char32_t lo, hi;  // inclusive
};
struct CombiningClass {
  char32_t cp;
  std::uint8_t ccc;
};
struct Decomposition {
  char32_t cp;
  std::uint32_t offset;  // into kDecompositionPool
  std::uint32_t length;  // full canonical decomposition, already in canonical order
};
struct Composition {
  char32_t first, second, composite;
};

extern const CodeRange kLetters[];  // Unicode 16.0 general category L*, sorted
extern const std::size_t kLetters_count;
extern const CodeRange kNumbers[];  // Unicode 16.0 general category Nd, Nl, No, sorted
extern const std::size_t kNumbers_count;
extern const CombiningClass kCombiningClasses[];  // Unicode 9.0, non-zero classes, sorted
extern const std::size_t kCombiningClasses_count;
extern const char32_t kDecompositionPool[];
extern const Decomposition kDecompositions[];  // Unicode 9.0, canonical, no Hangul, sorted
extern const std::size_t kDecompositions_count;
extern const Composition kCompositions[];  // Unicode 9.0 primary composites (no Hangul)
extern const std::size_t kCompositions_count;

}  // namespace vv::unicode_data
