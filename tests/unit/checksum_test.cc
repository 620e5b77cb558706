#include "common/checksum.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace tierkv {
namespace {

// The checksum is part of the on-disk format later: it must be the standard
// xxh3-64 whatever SIMD path the machine picks.
TEST(ChecksumTest, MatchesReferenceXxh3) { EXPECT_EQ(Checksum("", 0), 0x2D06800538D394C2ull); }

TEST(ChecksumTest, StreamingEqualsOneShotForAnySplit) {
  std::vector<uint8_t> data(3 << 20);
  std::mt19937_64 rng(7);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  const uint64_t whole = Checksum(data.data(), data.size());
  for (size_t piece : {1ul, 63ul, 4096ul, 131072ul, 1000003ul}) {
    ChecksumStream s;
    for (size_t off = 0; off < data.size(); off += piece) {
      s.Update(data.data() + off, std::min(piece, data.size() - off));
    }
    EXPECT_EQ(s.Digest(), whole) << piece;
  }
  data[12345] ^= 1;
  EXPECT_NE(Checksum(data.data(), data.size()), whole);
}

}  // namespace
}  // namespace tierkv
