// The generated character table against facts from the Unicode Character Database.
#include <gtest/gtest.h>

#include "tokenizer/byte_level.h"
#include "tokenizer/unicode_props.h"

namespace fathom::tok {
namespace {

TEST(UnicodeTable, KnownCharacters) {
  EXPECT_EQ(char_flags('a'), kLetter);
  EXPECT_EQ(char_flags('_'), kPunct | kConnector);
  EXPECT_EQ(char_flags('$'), kSymbol);
  EXPECT_EQ(char_flags('7'), kNumber);
  EXPECT_EQ(char_flags(0x301), kMark);
  EXPECT_EQ(char_flags(0x4E2D), kLetter | kCjk);
  EXPECT_EQ(char_flags(0x9FA6), kLetter);  // just outside DeepSeek's CJK class
  EXPECT_EQ(char_flags(0x30FB), kPunct | kCjk);
  EXPECT_EQ(char_flags(0x85), kSpace);  // NEL is White_Space (as in Oniguruma)
  EXPECT_EQ(char_flags(0xFEFF), 0);     // BOM is Cf, not space
  EXPECT_EQ(char_flags(0x180E), 0);     // Mongolian vowel separator: Cf since Unicode 6.3
  EXPECT_EQ(char_flags(0x1C), 0);       // information separators are not White_Space
  EXPECT_EQ(char_flags(0x3000), kSpace);
  EXPECT_EQ(char_flags(0x1F600), kSymbol);
  EXPECT_EQ(char_flags(0x2EBF0), kLetter);  // CJK Ext I (Unicode 15.1)
  EXPECT_EQ(char_flags(0x323B0), 0);        // CJK Ext J (Unicode 17.0): unknown to HF 0.23.2
  EXPECT_EQ(char_flags(0x10FFFF), 0);
  EXPECT_EQ(char_flags(0x110000), 0);
  EXPECT_STREQ(unicode_version(), "16.0");
}

TEST(ByteLevelAlphabet, IsABijection) {
  for (int b = 0; b < 256; ++b) {
    uint32_t c = byte_level::char_of_byte(static_cast<uint8_t>(b));
    EXPECT_EQ(byte_level::byte_of_char(c), b);
  }
  EXPECT_EQ(byte_level::char_of_byte(' '), 0x120u);   // 'Ġ'
  EXPECT_EQ(byte_level::char_of_byte('\n'), 0x10Au);  // 'Ċ'
  EXPECT_EQ(byte_level::char_of_byte('A'), uint32_t('A'));
  EXPECT_EQ(byte_level::byte_of_char(0x4E2D), -1);
}

}  // namespace
}  // namespace fathom::tok
