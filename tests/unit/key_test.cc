#include "common/key.h"

#include <gtest/gtest.h>

#include <string>

#include "tierkv/types.h"

namespace tierkv {
namespace {

TEST(KeyTest, AcceptsAsciiAndMultibyteUtf8) {
  EXPECT_TRUE(ValidateKey("model@tp_rank:0@pcp0@dcp0@pp_rank:0@group:0@abcdef0123456789").ok());
  EXPECT_TRUE(ValidateKey("k").ok());
  EXPECT_TRUE(ValidateKey("caf\xc3\xa9").ok());                // 2-byte
  EXPECT_TRUE(ValidateKey("\xe2\x82\xac-euro").ok());          // 3-byte
  EXPECT_TRUE(ValidateKey("emoji-\xf0\x9f\x98\x80-ok").ok());  // 4-byte
  EXPECT_TRUE(ValidateKey(std::string(kMaxKeyLength, 'a')).ok());
}

TEST(KeyTest, RejectsEmptyTooLongAndNul) {
  EXPECT_EQ(ValidateKey("").code(), ErrorCode::INVALID_KEY);
  EXPECT_EQ(ValidateKey(std::string(kMaxKeyLength + 1, 'a')).code(), ErrorCode::INVALID_KEY);
  // NUL both inside the 8-byte fast path and in the byte-wise tail.
  const std::string nul_fast("abcdefg\0hijklmnop", 17);
  const std::string nul_tail("abc\0", 4);
  EXPECT_EQ(ValidateKey(nul_fast).code(), ErrorCode::INVALID_KEY);
  EXPECT_NE(ValidateKey(nul_fast).message().find("NUL"), std::string::npos);
  EXPECT_EQ(ValidateKey(nul_tail).code(), ErrorCode::INVALID_KEY);
}

TEST(KeyTest, RejectsInvalidUtf8) {
  for (const char* bad : {"\xff", "\xfe\xff", "\xc0\xaf",  // overlong '/'
                          "\xe0\x80\xaf",                  // overlong 3-byte
                          "\xed\xa0\x80",                  // surrogate U+D800
                          "\xf4\x90\x80\x80",              // past U+10FFFF
                          "\xc3", "\xe2\x82", "abc\x80", "abcdefgh\xc3\x28-more"}) {
    EXPECT_EQ(ValidateKey(bad).code(), ErrorCode::INVALID_KEY) << bad;
    EXPECT_FALSE(IsValidUtf8(bad));
  }
}

}  // namespace
}  // namespace tierkv
