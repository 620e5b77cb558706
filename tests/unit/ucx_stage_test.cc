// Staged loads over the UCX transport: a UcxSegmentServer serving an SsdTier, and
// UcxSegmentClient::StageBatch pulling record ranges through the server's staging buffer
// (byte-exact for every size and piece layout, per-range errors, IO faults, a server without a
// tier, staging space given back, concurrent requesters on a small staging buffer).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "device/faulty_device.h"
#include "device_test_util.h"
#include "memory/memory_segment.h"
#include "pattern_test_util.h"
#include "size_units.h"
#include "ssd/ssd_tier.h"
#include "store/tier_stager.h"
#include "transport/ucx_segment_client.h"
#include "transport/ucx_segment_server.h"

namespace tierkv::transport {
namespace {

using test_util::Pattern;

constexpr auto kStageTimeout = std::chrono::milliseconds(5000);

struct Stored {
  std::string key;
  std::string value;
  DiskLocation location;
};

class UcxStageTest : public ::testing::Test {
 protected:
  // 16 regions of 8 MiB, a 2 MiB staging buffer (usable: 0.9 of it per range).
  void Start(uint64_t staging = 2 * kMiB, bool faulty = false) {
    SsdTierOptions o;
    o.paths = {scratch_.File("stage.tier")};
    o.region_size = 8 * kMiB;
    o.capacity_per_path = 16 * o.region_size;
    o.allow_buffered_fallback = scratch_.IsTmpfs();
    o.want_huge_pages = false;
    o.staging.capacity = staging;
    o.staging.want_huge_pages = false;
    o.staging.wait = std::chrono::milliseconds(5000);
    o.staging.ttl = std::chrono::milliseconds(10000);
    if (faulty) {
      o.TEST_wrap_device = [this](std::unique_ptr<Device> d) -> std::unique_ptr<Device> {
        auto f = std::make_unique<FaultyDevice>(std::move(d));
        device_ = f.get();
        return f;
      };
    }
    auto tier = SsdTier::Open(
        o, [](uint32_t, uint64_t, std::vector<std::string>) {}, nullptr);
    ASSERT_TRUE(tier.ok()) << tier.status().ToString();
    tier_ = std::shared_ptr<SsdTier>(std::move(tier).value());
    auto segment = MemorySegment::Create("stage-seg", kMiB, PagePolicy::kSmallPages);
    ASSERT_TRUE(segment.ok());
    segment_ = std::move(segment).value();
    auto stager = TierStager::Start(tier_, "stage-test");
    ASSERT_TRUE(stager.ok()) << stager.status().ToString();
    stager_ = std::move(stager).value();
    auto server = UcxSegmentServer::Start(segment_, "127.0.0.1", 0, {}, stager_);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(server).value();
  }
  void TearDown() override {
    if (server_) server_->Stop();
  }

  Stored Put(const std::string& key, size_t size, uint32_t seed) {
    Stored s{key, Pattern(size, seed), {}};
    auto loc = tier_->Append(key, {ConstPiece{s.value.data(), s.value.size()}});
    EXPECT_TRUE(loc.ok()) << loc.status().ToString();
    if (loc.ok()) s.location = *loc;
    return s;
  }

  std::unique_ptr<UcxSegmentClient> Connect() {
    auto c = UcxSegmentClient::Connect(server_->address(), "stage-seg", kStageTimeout);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(c).value() : nullptr;
  }

  test_util::ScratchDir scratch_;
  std::shared_ptr<SsdTier> tier_;
  std::shared_ptr<TierStager> stager_;
  std::shared_ptr<MemorySegment> segment_;
  std::unique_ptr<UcxSegmentServer> server_;
  FaultyDevice* device_ = nullptr;
};

// `pieces` destination pieces of uneven sizes over `buf`.
std::vector<MutPiece> Split(std::string& buf, int pieces) {
  std::vector<MutPiece> out;
  size_t at = 0;
  for (int k = 0; k < pieces; ++k) {
    // Halving sizes (a large piece, then ever smaller ones), the last taking the rest.
    const size_t half = buf.size() >> std::min(k + 1, 40);
    const size_t len = k + 1 == pieces ? buf.size() - at : std::min(buf.size() - at, half + 1);
    out.push_back(MutPiece{buf.data() + at, len});
    at += len;
  }
  return out;
}

TEST_F(UcxStageTest, EverySizeAndPieceLayoutLoadsByteExact) {
  Start();
  // Sizes around page and request boundaries, and objects larger than the usable staging
  // budget (1.8 MiB), which the client streams through it in ranges.
  const std::vector<size_t> sizes = {
      1,          4095,        4096,     4097,           300 * 1024,
      512 * 1024, 1536 * 1024, 2 * kMiB, 5 * kMiB + 333, 100 * 1024 + 7};
  std::vector<Stored> stored;
  for (size_t i = 0; i < sizes.size(); ++i) {
    stored.push_back(Put("obj/" + std::to_string(i), sizes[i], static_cast<uint32_t>(i)));
  }
  ASSERT_TRUE(tier_->Flush().ok());
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  EXPECT_EQ(client->staging_capacity(), 2 * kMiB);
  for (int pieces : {1, 3, 40}) {
    std::vector<std::string> bufs;
    for (const auto& s : stored) bufs.emplace_back(s.value.size(), '\0');
    std::vector<UcxSegmentClient::StageOp> ops;
    for (size_t i = 0; i < stored.size(); ++i) {
      const int n = static_cast<int>(std::min<size_t>(pieces, stored[i].value.size()));
      ops.push_back({stored[i].key, stored[i].location, Split(bufs[i], n)});
    }
    const auto done = client->StageBatch(ops, 0.9);
    for (size_t i = 0; i < stored.size(); ++i) {
      EXPECT_TRUE(done[i].ok()) << stored[i].key << ": " << done[i].ToString();
      EXPECT_TRUE(bufs[i] == stored[i].value) << stored[i].key << " in " << pieces << " pieces";
    }
  }
  // Every ticket was released once its replies were sent.
  EXPECT_TRUE([&] {
    for (int i = 0; i < 200 && tier_->stats().staging.bytes_in_use != 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return tier_->stats().staging.bytes_in_use == 0;
  }());
  EXPECT_GT(server_->read_bytes(), 0u);
}

TEST_F(UcxStageTest, ABadRangeFailsOnlyItselfAndTheConnectionLives) {
  Start();
  const Stored a = Put("a", 100000, 1);
  const Stored b = Put("b", 70000, 2);
  ASSERT_TRUE(tier_->Flush().ok());
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  std::string ba(a.value.size(), '\0'), bb(b.value.size(), '\0'), bw(a.value.size(), '\x55'),
      bg(a.value.size(), '\x55'), bs(10, '\0');
  DiskLocation stale = a.location;
  stale.generation += 1;  // the region reused since
  const std::vector<UcxSegmentClient::StageOp> ops = {
      {"a", a.location, {MutPiece{ba.data(), ba.size()}}},
      {"not-a", a.location, {MutPiece{bw.data(), bw.size()}}},  // another key's record
      {"a", stale, {MutPiece{bg.data(), bg.size()}}},
      {"a", a.location, {MutPiece{bs.data(), bs.size()}}},  // not the object's size
      {"", a.location, {MutPiece{ba.data(), 0}}},
      {"b", b.location, {MutPiece{bb.data(), bb.size()}}},
  };
  const auto done = client->StageBatch(ops, 0.9);
  EXPECT_TRUE(done[0].ok()) << done[0].ToString();
  EXPECT_TRUE(ba == a.value);
  EXPECT_FALSE(done[1].ok());
  EXPECT_TRUE(done[1].code() == ErrorCode::OBJECT_NOT_FOUND ||
              done[1].code() == ErrorCode::CHECKSUM_MISMATCH)
      << done[1].ToString();
  EXPECT_EQ(done[2].code(), ErrorCode::OBJECT_NOT_FOUND) << done[2].ToString();
  EXPECT_EQ(done[3].code(), ErrorCode::INVALID_PARAMS) << done[3].ToString();
  EXPECT_EQ(done[4].code(), ErrorCode::INVALID_KEY) << done[4].ToString();
  EXPECT_TRUE(done[5].ok()) << done[5].ToString();
  EXPECT_TRUE(bb == b.value);
  EXPECT_TRUE(client->alive());
}

TEST_F(UcxStageTest, AnIoErrorFailsThatLoadAndTheNextSucceeds) {
  Start(2 * kMiB, /*faulty=*/true);
  ASSERT_NE(device_, nullptr);
  const Stored a = Put("a", 300000, 3);
  ASSERT_TRUE(tier_->Flush().ok());
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  for (FaultKind kind : {FaultKind::kReadEio, FaultKind::kShortRead}) {
    ASSERT_TRUE(device_->AddFault(FaultRule::Once(kind)).ok());
    std::string buf(a.value.size(), '\0');
    auto done = client->StageBatch({{"a", a.location, {MutPiece{buf.data(), buf.size()}}}}, 0.9);
    EXPECT_EQ(done[0].code(), ErrorCode::FILE_READ_FAIL) << done[0].ToString();
    done = client->StageBatch({{"a", a.location, {MutPiece{buf.data(), buf.size()}}}}, 0.9);
    EXPECT_TRUE(done[0].ok()) << done[0].ToString();
    EXPECT_TRUE(buf == a.value);
  }
}

TEST_F(UcxStageTest, FourRequestersShareASmallStagingBuffer) {
  Start(1 * kMiB);  // usable per range: ~0.9 MiB; four requesters contend for it
  std::vector<Stored> stored;
  for (int i = 0; i < 24; ++i) {
    stored.push_back(Put("c/" + std::to_string(i), 256 * 1024 + 1000 * i, 10u + i));
  }
  ASSERT_TRUE(tier_->Flush().ok());
  std::vector<std::thread> threads;
  std::atomic<int> exact{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      auto client = Connect();
      if (client == nullptr) return;
      for (int round = 0; round < 3; ++round) {
        std::vector<std::string> bufs;
        for (const auto& s : stored) bufs.emplace_back(s.value.size(), '\0');
        std::vector<UcxSegmentClient::StageOp> ops;
        for (size_t i = 0; i < stored.size(); ++i) {
          ops.push_back({stored[i].key, stored[i].location, Split(bufs[i], 1 + (t + i) % 3)});
        }
        const auto done = client->StageBatch(ops, 0.9);
        for (size_t i = 0; i < stored.size(); ++i) {
          if (done[i].ok() && bufs[i] == stored[i].value) exact.fetch_add(1);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(exact.load(), 4 * 3 * 24);
}

TEST(UcxStageNoTierTest, AServerWithoutATierRefusesStagedLoads) {
  auto segment = MemorySegment::Create("plain", kMiB, PagePolicy::kSmallPages);
  ASSERT_TRUE(segment.ok());
  auto server = UcxSegmentServer::Start(std::move(segment).value(), "127.0.0.1", 0);
  ASSERT_TRUE(server.ok());
  auto client = UcxSegmentClient::Connect((*server)->address(), "plain", kStageTimeout);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  EXPECT_EQ((*client)->staging_capacity(), 0u);
  std::string buf(4096, '\0');
  const auto done = (*client)->StageBatch(
      {{"k", DiskLocation{0, 1, 0, buf.size()}, {MutPiece{buf.data(), buf.size()}}}}, 0.9);
  EXPECT_EQ(done[0].code(), ErrorCode::UNAVAILABLE_IN_CURRENT_MODE) << done[0].ToString();
  EXPECT_NE(done[0].message().find("no SSD tier"), std::string::npos) << done[0].ToString();
}

}  // namespace
}  // namespace tierkv::transport
