// ClientRegistry: registration, heartbeats, segment ownership and expiry on a ManualClock.
#include "master/client_registry.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "tierkv/status.h"

namespace tierkv {
namespace {

constexpr Millis kRegistryTtl{1000};

class ClientRegistryTest : public ::testing::Test {
 protected:
  ManualClock clock_;
  ClientRegistry registry_{&clock_, kRegistryTtl, /*id_base=*/100};
};

TEST_F(ClientRegistryTest, RegisterGivesDistinctNonZeroIds) {
  std::set<ClientId> ids;
  for (int i = 0; i < 100; ++i) {
    const ClientId id = registry_.Register("host-" + std::to_string(i));
    EXPECT_NE(id, 0u);
    EXPECT_TRUE(ids.insert(id).second);
  }
  EXPECT_EQ(registry_.size(), 100u);
  std::optional<ClientInfo> info = registry_.Find(*ids.begin());
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->host, "host-0");
}

TEST_F(ClientRegistryTest, RandomBasesDiffer) {
  // Two registries (two master processes) do not hand out the same first id.
  ClientRegistry a(&clock_, kRegistryTtl);
  ClientRegistry b(&clock_, kRegistryTtl);
  EXPECT_NE(a.Register("x"), b.Register("x"));
}

TEST_F(ClientRegistryTest, HeartbeatOfUnknownIdIsRefused) {
  EXPECT_FALSE(registry_.Heartbeat(12345));
  EXPECT_FALSE(registry_.Known(12345));
  const ClientId id = registry_.Register("h");
  EXPECT_TRUE(registry_.Heartbeat(id));
  EXPECT_TRUE(registry_.Known(id));
}

TEST_F(ClientRegistryTest, SilentClientExpiresAtTtlWithItsSegments) {
  const ClientId silent = registry_.Register("silent-host");
  const ClientId live = registry_.Register("live-host");
  ASSERT_TRUE(registry_.AddSegment(silent, 7).ok());
  ASSERT_TRUE(registry_.AddSegment(silent, 9).ok());
  ASSERT_TRUE(registry_.AddSegment(live, 8).ok());

  clock_.Advance(kRegistryTtl - Millis(1));
  EXPECT_TRUE(registry_.Heartbeat(live));
  EXPECT_TRUE(registry_.ExpireSilent().empty());  // 999 ms of silence: not yet

  clock_.Advance(Millis(1));
  std::vector<ExpiredClient> expired = registry_.ExpireSilent();
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_EQ(expired[0].id, silent);
  EXPECT_EQ(expired[0].host, "silent-host");
  EXPECT_EQ(expired[0].silent_for, kRegistryTtl);
  EXPECT_EQ(expired[0].segments, (std::vector<SegmentId>{7, 9}));

  // Gone: heartbeats are refused (the client registers again), its segments have no owner.
  EXPECT_FALSE(registry_.Heartbeat(silent));
  EXPECT_EQ(registry_.OwnerOf(7), 0u);
  EXPECT_EQ(registry_.OwnerOf(8), live);
  EXPECT_EQ(registry_.expired_total(), 1u);
  EXPECT_EQ(registry_.size(), 1u);
  EXPECT_TRUE(registry_.ExpireSilent().empty());  // expired once only
}

TEST_F(ClientRegistryTest, HeartbeatsKeepAClientAlive) {
  const ClientId id = registry_.Register("h");
  for (int i = 0; i < 10; ++i) {
    clock_.Advance(kRegistryTtl / 2);
    EXPECT_TRUE(registry_.Heartbeat(id));
    EXPECT_TRUE(registry_.ExpireSilent().empty());
  }
  EXPECT_TRUE(registry_.Known(id));
}

TEST_F(ClientRegistryTest, SegmentOwnership) {
  const ClientId a = registry_.Register("a");
  const ClientId b = registry_.Register("b");
  ASSERT_TRUE(registry_.AddSegment(a, 1).ok());
  EXPECT_TRUE(registry_.Owns(a, 1));
  EXPECT_FALSE(registry_.Owns(b, 1));
  EXPECT_EQ(registry_.AddSegment(b, 1).code(), ErrorCode::SEGMENT_ALREADY_EXISTS);
  EXPECT_EQ(registry_.RemoveSegment(b, 1).code(), ErrorCode::SEGMENT_NOT_FOUND);
  EXPECT_EQ(registry_.AddSegment(999, 2).code(), ErrorCode::INVALID_PARAMS);  // unknown client
  EXPECT_EQ(registry_.RemoveSegment(999, 1).code(), ErrorCode::INVALID_PARAMS);
  ASSERT_TRUE(registry_.RemoveSegment(a, 1).ok());
  EXPECT_FALSE(registry_.Owns(a, 1));
  EXPECT_EQ(registry_.RemoveSegment(a, 1).code(), ErrorCode::SEGMENT_NOT_FOUND);
  ASSERT_TRUE(registry_.AddSegment(b, 1).ok());  // free again
}

TEST_F(ClientRegistryTest, UnregisterReturnsSegments) {
  const ClientId id = registry_.Register("h");
  ASSERT_TRUE(registry_.AddSegment(id, 3).ok());
  std::optional<std::vector<SegmentId>> segments = registry_.Unregister(id);
  ASSERT_TRUE(segments.has_value());
  EXPECT_EQ(*segments, std::vector<SegmentId>{3});
  EXPECT_FALSE(registry_.Known(id));
  EXPECT_EQ(registry_.OwnerOf(3), 0u);
  EXPECT_FALSE(registry_.Unregister(id).has_value());
  EXPECT_EQ(registry_.expired_total(), 0u);  // a clean exit is not an expiry
}

TEST_F(ClientRegistryTest, ReRegisteringGivesANewId) {
  const ClientId first = registry_.Register("h");
  clock_.Advance(kRegistryTtl);
  ASSERT_EQ(registry_.ExpireSilent().size(), 1u);
  const ClientId second = registry_.Register("h");
  EXPECT_NE(first, second);
  EXPECT_TRUE(registry_.Heartbeat(second));
  EXPECT_FALSE(registry_.Heartbeat(first));
}

// The bytes of one transport in the registry's totals.
TransferCount TotalOf(const ClientRegistry& registry, const std::string& transport) {
  for (const TransferCount& c : registry.TransferTotals()) {
    if (c.transport == transport) return c;
  }
  return {};
}

TEST_F(ClientRegistryTest, TransferTotalsAddWhatEachClientsCountsGrewBy) {
  const ClientId a = registry_.Register("a");
  const ClientId b = registry_.Register("b");
  EXPECT_EQ(registry_.TransferTotals().size(), kTransportNames.size());  // all, zero
  EXPECT_EQ(TotalOf(registry_, "tcp").read_bytes, 0u);
  ASSERT_TRUE(registry_.Heartbeat(a, {{"tcp", 100, 10}, {"shm", 5, 0}}));
  ASSERT_TRUE(registry_.Heartbeat(b, {{"tcp", 50, 0}}));
  ASSERT_TRUE(registry_.Heartbeat(a, {{"tcp", 160, 10}, {"shm", 5, 7}}));  // cumulative
  EXPECT_EQ(TotalOf(registry_, "tcp").read_bytes, 210u);
  EXPECT_EQ(TotalOf(registry_, "tcp").written_bytes, 10u);
  EXPECT_EQ(TotalOf(registry_, "shm").read_bytes, 5u);
  EXPECT_EQ(TotalOf(registry_, "shm").written_bytes, 7u);
  // Unknown transports are ignored, not new labels; an unknown client adds nothing.
  ASSERT_TRUE(registry_.Heartbeat(a, {{"carrier-pigeon", 1000, 1000}}));
  EXPECT_EQ(registry_.TransferTotals().size(), kTransportNames.size());
  EXPECT_FALSE(registry_.Heartbeat(999, {{"tcp", 1000, 0}}));
  EXPECT_EQ(TotalOf(registry_, "tcp").read_bytes, 210u);
  // A count that went down started again from 0: all of it is new.
  ASSERT_TRUE(registry_.Heartbeat(b, {{"tcp", 20, 0}}));
  EXPECT_EQ(TotalOf(registry_, "tcp").read_bytes, 230u);
  // Nonsense counts saturate instead of wrapping the totals around.
  ASSERT_TRUE(registry_.Heartbeat(a, {{"rdma", UINT64_MAX, 0}}));
  ASSERT_TRUE(registry_.Heartbeat(b, {{"rdma", UINT64_MAX - 1, 0}}));
  EXPECT_EQ(TotalOf(registry_, "rdma").read_bytes, UINT64_MAX);
  // The totals outlive the clients.
  clock_.Advance(kRegistryTtl);
  EXPECT_EQ(registry_.ExpireSilent().size(), 2u);
  EXPECT_EQ(TotalOf(registry_, "tcp").read_bytes, 230u);
}

}  // namespace
}  // namespace tierkv
