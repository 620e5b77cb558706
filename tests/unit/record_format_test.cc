// The on-disk headers of the SSD tier's region log: round trips, the documented byte layout
// (docs/disk-format.md), and detection of every corrupted or truncated header byte.
#include "ssd/record_format.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "common/checksum.h"

namespace tierkv {
namespace {

uint64_t Le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

RecordHeader SampleRecord() {
  RecordHeader h;
  h.key_size = 17;
  h.value_size = 0x0102030405060708ULL;
  h.value_checksum = 0xdeadbeefcafef00dULL;
  h.generation = 42;
  h.sequence = 7;
  h.key_hash = RecordKeyHash("some-key");
  return h;
}

TEST(RecordFormatTest, RecordHeaderRoundTrip) {
  const RecordHeader h = SampleRecord();
  uint8_t buf[kRecordHeaderSize];
  EncodeRecordHeader(h, buf);
  auto d = DecodeRecordHeader(buf, sizeof(buf));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->key_size, h.key_size);
  EXPECT_EQ(d->value_size, h.value_size);
  EXPECT_EQ(d->value_checksum, h.value_checksum);
  EXPECT_EQ(d->generation, h.generation);
  EXPECT_EQ(d->sequence, h.sequence);
  EXPECT_EQ(d->key_hash, h.key_hash);
}

TEST(RecordFormatTest, RecordHeaderByteLayoutIsLittleEndian) {
  uint8_t buf[kRecordHeaderSize];
  EncodeRecordHeader(SampleRecord(), buf);
  EXPECT_EQ(0, std::memcmp(buf, "TKRC", 4));
  EXPECT_EQ(buf[4], 2);  // version
  EXPECT_EQ(buf[5], 0);
  EXPECT_EQ(buf[6], 64);     // header length
  EXPECT_EQ(buf[8], 17);     // key size
  EXPECT_EQ(buf[16], 0x08);  // value size, low byte first
  EXPECT_EQ(buf[23], 0x01);
  EXPECT_EQ(Le64(buf + 24), 0xdeadbeefcafef00dULL);
  EXPECT_EQ(Le64(buf + 32), 42u);
  EXPECT_EQ(Le64(buf + 40), 7u);
  EXPECT_EQ(Le64(buf + 48), RecordKeyHash("some-key"));
  EXPECT_EQ(Le64(buf + 56), Checksum(buf, 56));
}

TEST(RecordFormatTest, RegionHeaderRoundTripAndLayout) {
  uint8_t buf[kRegionHeaderSize];
  EncodeRegionHeader(RegionHeader{5, 99, 256 * 1024}, buf);
  EXPECT_EQ(0, std::memcmp(buf, "TKRG", 4));
  EXPECT_EQ(buf[8], 5);
  EXPECT_EQ(Le64(buf + 16), 99u);
  EXPECT_EQ(Le64(buf + 24), 256u * 1024);
  EXPECT_EQ(Le64(buf + 40), Checksum(buf, 40));
  auto d = DecodeRegionHeader(buf, sizeof(buf));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->region_index, 5u);
  EXPECT_EQ(d->generation, 99u);
  EXPECT_EQ(d->region_size, 256u * 1024);
}

TEST(RecordFormatTest, EveryFlippedRecordHeaderByteIsDetected) {
  uint8_t good[kRecordHeaderSize];
  EncodeRecordHeader(SampleRecord(), good);
  for (size_t i = 0; i < kRecordHeaderSize; ++i) {
    uint8_t buf[kRecordHeaderSize];
    std::memcpy(buf, good, sizeof(buf));
    buf[i] ^= 0x10;
    auto d = DecodeRecordHeader(buf, sizeof(buf));
    EXPECT_EQ(d.code(), ErrorCode::CHECKSUM_MISMATCH) << "byte " << i;
  }
}

TEST(RecordFormatTest, EveryFlippedRegionHeaderByteIsDetected) {
  uint8_t good[kRegionHeaderSize];
  EncodeRegionHeader(RegionHeader{1, 2, 8192}, good);
  for (size_t i = 0; i < kRegionHeaderSize; ++i) {
    uint8_t buf[kRegionHeaderSize];
    std::memcpy(buf, good, sizeof(buf));
    buf[i] ^= 0x01;
    EXPECT_EQ(DecodeRegionHeader(buf, sizeof(buf)).code(), ErrorCode::CHECKSUM_MISMATCH)
        << "byte " << i;
  }
}

TEST(RecordFormatTest, ZeroesTruncationAndOtherVersionsAreRejected) {
  std::vector<uint8_t> zeros(kBlockSize, 0);
  EXPECT_EQ(DecodeRecordHeader(zeros.data(), zeros.size()).code(), ErrorCode::CHECKSUM_MISMATCH);
  EXPECT_EQ(DecodeRegionHeader(zeros.data(), zeros.size()).code(), ErrorCode::CHECKSUM_MISMATCH);

  uint8_t buf[kRecordHeaderSize];
  EncodeRecordHeader(SampleRecord(), buf);
  EXPECT_EQ(DecodeRecordHeader(buf, kRecordHeaderSize - 1).code(), ErrorCode::CHECKSUM_MISMATCH);

  // A well-checksummed header of another version (1: the packed layout of every value):
  // refused by the version, not the checksum.
  buf[4] = 1;
  const uint64_t sum = Checksum(buf, 56);
  for (int i = 0; i < 8; ++i) buf[56 + i] = static_cast<uint8_t>(sum >> (8 * i));
  auto d = DecodeRecordHeader(buf, sizeof(buf));
  EXPECT_EQ(d.code(), ErrorCode::CHECKSUM_MISMATCH);
  EXPECT_NE(d.status().message().find("version"), std::string::npos) << d.status().message();
}

TEST(RecordFormatTest, RecordSpanPadsToBlocks) {
  EXPECT_EQ(RecordSpan(1, 0), kBlockSize);
  EXPECT_EQ(RecordSpan(32, kBlockSize - 64 - 32), kBlockSize);
  EXPECT_EQ(RecordSpan(32, kBlockSize - 64 - 32 + 1), 2 * kBlockSize);
  EXPECT_EQ(RecordSpan(10, 3 * kBlockSize), 4 * kBlockSize);
}

TEST(RecordFormatTest, BigValuesStartOnABlockOfTheirOwn) {
  // Below the threshold the value follows the key; from it on, it starts on the next block.
  EXPECT_FALSE(RecordValueAligned(kAlignedValueMin - 1));
  EXPECT_TRUE(RecordValueAligned(kAlignedValueMin));
  EXPECT_EQ(RecordValueOffset(10, kAlignedValueMin - 1), 64u + 10);
  EXPECT_EQ(RecordValueOffset(10, kAlignedValueMin), kBlockSize);
  EXPECT_EQ(RecordValueOffset(4032, kAlignedValueMin), kBlockSize);  // header + key = 1 block
  EXPECT_EQ(RecordValueOffset(4033, kAlignedValueMin), 2 * kBlockSize);
  // A 2 MiB value with a short key: one block of header and key, then exactly the value.
  EXPECT_EQ(RecordSpan(40, uint64_t{2} << 20), (uint64_t{2} << 20) + kBlockSize);
  EXPECT_EQ(RecordSpan(40, kAlignedValueMin + 1), kBlockSize + kAlignedValueMin + kBlockSize);

  // The header says which layout it describes; a flag that contradicts the value size is
  // refused (a reader would look for the value in the wrong place).
  for (uint64_t value : {uint64_t{100}, kAlignedValueMin, uint64_t{2} << 20}) {
    RecordHeader h = SampleRecord();
    h.value_size = value;
    uint8_t buf[kRecordHeaderSize];
    EncodeRecordHeader(h, buf);
    EXPECT_EQ(buf[12], RecordValueAligned(value) ? 1 : 0) << value;
    ASSERT_TRUE(DecodeRecordHeader(buf, sizeof(buf)).ok()) << value;
    buf[12] ^= 1;
    const uint64_t sum = Checksum(buf, 56);
    for (int i = 0; i < 8; ++i) buf[56 + i] = static_cast<uint8_t>(sum >> (8 * i));
    auto d = DecodeRecordHeader(buf, sizeof(buf));
    EXPECT_EQ(d.code(), ErrorCode::CHECKSUM_MISMATCH) << value;
    EXPECT_NE(d.status().message().find("layout flag"), std::string::npos) << value;
    buf[12] = 4;  // an unknown flag
    const uint64_t sum2 = Checksum(buf, 56);
    for (int i = 0; i < 8; ++i) buf[56 + i] = static_cast<uint8_t>(sum2 >> (8 * i));
    d = DecodeRecordHeader(buf, sizeof(buf));
    EXPECT_NE(d.status().message().find("unknown flags"), std::string::npos) << value;
  }
}

}  // namespace
}  // namespace tierkv
