// The pinned Unicode data: \p{L}/\p{N} of Unicode 16.0 and White_Space for the pre-tokenizer, NFC
// with Unicode 9.0 data (README of the tokenizer goldens, "Unicode versions").
#include <gtest/gtest.h>

#include <string>

#include "engine/text/nfc.h"
#include "engine/text/unicode_classes.h"

namespace vv::unicode {
namespace {

TEST(UnicodeClasses, LettersAndNumbersAreThoseOfUnicode16) {
  EXPECT_TRUE(is_letter(U'a'));
  EXPECT_TRUE(is_letter(0x4E2D));    // 中
  EXPECT_TRUE(is_letter(0x10D50));   // Garay capital letter (16.0)
  EXPECT_TRUE(is_letter(0x1E5D0));   // Ol Onal (16.0)
  EXPECT_TRUE(is_letter(0x31350));   // CJK Extension H (15.0)
  EXPECT_FALSE(is_letter(0x323B0));  // CJK Extension J (17.0): not yet a letter
  EXPECT_FALSE(is_letter(0x10940));  // Sidetic (17.0)
  EXPECT_TRUE(is_number(0x10D40));   // Garay digit (16.0)
  EXPECT_TRUE(is_number(0x00B2));    // superscript two (No)
  EXPECT_TRUE(is_number(0x2160));    // Roman numeral one (Nl)
  EXPECT_FALSE(is_number(0x11DE0));  // Tolong Siki digit (17.0)
  EXPECT_FALSE(is_letter(0x1FAE8));  // emoji
}

TEST(UnicodeClasses, WhiteSpaceIsTheWhiteSpaceProperty) {
  for (char32_t cp : {0x20, 0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x85, 0xA0, 0x1680, 0x2000, 0x200A, 0x2028,
                      0x2029, 0x202F, 0x205F, 0x3000}) {
    EXPECT_TRUE(is_white_space(cp)) << std::hex << static_cast<unsigned>(cp);
  }
  for (char32_t cp : {0x200B, 0xFEFF, 0x1C, 0x1D, 0x1E, 0x1F, 0x180E}) {
    EXPECT_FALSE(is_white_space(cp)) << std::hex << static_cast<unsigned>(cp);
  }
}

std::string nfc(const std::string& s) {
  std::string out;
  append_nfc(out, s);
  return out;
}

TEST(Nfc, ComposesReordersAndUsesUnicode9Data) {
  EXPECT_EQ(nfc("e\xCC\x81"), "\xC3\xA9");              // e + U+0301 → é
  EXPECT_EQ(nfc("\xE2\x84\xAB"), "\xC3\x85");           // U+212B Angstrom → U+00C5 (singleton)
  EXPECT_EQ(nfc("a\xCC\xA3\xCC\x81"), nfc("a\xCC\x81\xCC\xA3"));  // marks reordered by class
  EXPECT_EQ(nfc("\xE1\x84\x92\xE1\x85\xA1\xE1\x86\xAB"), "\xED\x95\x9C");  // Hangul jamo → 한
  // U+1DF6 (Unicode 10.0) has class 0 in 9.0 data: a + U+1DF6 + U+0323 stays as is.
  EXPECT_EQ(nfc("a\xE1\xB7\xB6\xCC\xA3"), "a\xE1\xB7\xB6\xCC\xA3");
  // Dives Akuru U+11935 + U+11930 (composition added in 13.0) is not composed.
  EXPECT_EQ(nfc("\xF0\x91\xA4\xB5\xF0\x91\xA4\xB0"), "\xF0\x91\xA4\xB5\xF0\x91\xA4\xB0");
  EXPECT_TRUE(is_nfc_quick("plain ASCII and Latin-1: \xC3\xA9"));
  EXPECT_FALSE(is_nfc_quick("e\xCC\x81"));
}

}  // namespace
}  // namespace vv::unicode
