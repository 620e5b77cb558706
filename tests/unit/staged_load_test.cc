// The staged-load checks and descriptor both segment clients (TCP, UCX) send: src/transport/
// staged_load.h.
#include "transport/staged_load.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <string>

#include "transport/ucx_protocol.h"

namespace tierkv::transport {
namespace {

TEST(StagedLoadTest, MaxRangeFitsTheUsableStagingAndTheRequestLimit) {
  // 1 MiB of staging, all usable: (1 MiB - 8192) rounded down to 4 KiB.
  EXPECT_EQ(MaxStagedRange(1.0, 1 << 20, 64 << 20), (1u << 20) - 8192);
  // Half usable: 512 KiB - 8192.
  EXPECT_EQ(MaxStagedRange(0.5, 1 << 20, 64 << 20), (512u << 10) - 8192);
  // Not page-aligned usable space rounds down.
  EXPECT_EQ(MaxStagedRange(1.0, 8192 + 4096 + 5000, 64 << 20), 8192u);
  // The transport's request limit caps it.
  EXPECT_EQ(MaxStagedRange(1.0, 256 << 20, 16 << 20), 16u << 20);
  // Not even one 4 KiB range (plus its 8 KiB of slack) fits: 0; no staging buffer at all: 0.
  EXPECT_EQ(MaxStagedRange(1.0, 8192 + 4096, 64 << 20), 0u);
  EXPECT_EQ(MaxStagedRange(1.0, 0, 64 << 20), 0u);
  EXPECT_EQ(MaxStagedRange(0.0, 1 << 30, 64 << 20), 0u);
}

TEST(StagedLoadTest, DescriptorCarriesTheLocationAndKey) {
  std::array<uint8_t, 300> a{}, b{};
  NetworkSegmentClient::StageOp op;
  op.key = "model@tp_rank:0@abc";
  op.location = DiskLocation{.region = 7, .generation = 42, .offset = 1 << 20, .size = 600};
  op.dst = {MutPiece{a.data(), a.size()}, MutPiece{b.data(), b.size()}};
  auto encoded = StageDescriptorFor(op, "tcp");
  ASSERT_TRUE(encoded.ok()) << encoded.status().ToString();
  auto back = DecodeUcxStageDescriptor(encoded->data(), encoded->size());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->region, 7u);
  EXPECT_EQ(back->generation, 42u);
  EXPECT_EQ(back->record_offset, 1u << 20);
  EXPECT_EQ(back->object_size, 600u);
  EXPECT_EQ(back->key, op.key);
}

TEST(StagedLoadTest, BadKeysAndShortBuffersAreRefusedWithTheirReason) {
  std::array<uint8_t, 100> a{};
  NetworkSegmentClient::StageOp op;
  op.location.size = 100;
  op.dst = {MutPiece{a.data(), a.size()}};

  op.key = "";
  auto empty = StageDescriptorFor(op, "ucx");
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.code(), ErrorCode::INVALID_KEY);
  EXPECT_NE(empty.status().message().find("ucx staged load: a key of 0 bytes"), std::string::npos)
      << empty.status().message();

  op.key = std::string(kUcxMaxNameLength + 1, 'k');
  auto longer = StageDescriptorFor(op, "tcp");
  ASSERT_FALSE(longer.ok());
  EXPECT_EQ(longer.code(), ErrorCode::INVALID_KEY);

  op.key = std::string(kUcxMaxNameLength, 'k');
  EXPECT_TRUE(StageDescriptorFor(op, "tcp").ok());

  op.key = "k";
  op.location.size = 101;  // one byte more than the buffer holds
  auto short_buffer = StageDescriptorFor(op, "tcp");
  ASSERT_FALSE(short_buffer.ok());
  EXPECT_EQ(short_buffer.code(), ErrorCode::INVALID_PARAMS);
  EXPECT_NE(
      short_buffer.status().message().find("tcp staged load of k: 100 bytes of buffer for 101"),
      std::string::npos)
      << short_buffer.status().message();
}

}  // namespace
}  // namespace tierkv::transport
