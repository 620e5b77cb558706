// SegmentFeed's linger: under load one stream message carries many PutEnds' commits, while
// whoever waits on the feed (a remove or upsert's Barrier, a put waiting for quarantined frees)
// never waits for the linger.
#include "master/segment_feed.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <thread>

#include "memory/offset_allocator.h"

namespace tierkv {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

IndexEntry Commit(uint64_t offset) {
  IndexEntry e;
  e.key = "k" + std::to_string(offset);
  e.size = 64;
  e.checksum = offset;
  e.put_id = offset + 1;
  e.offset = offset;
  return e;
}

class SegmentFeedTest : public ::testing::Test {
 protected:
  std::shared_ptr<SegmentFeed> Make(std::chrono::microseconds linger) {
    auto feed = std::make_shared<SegmentFeed>(std::weak_ptr<OffsetAllocator>(), linger);
    generation_ = feed->Attach();
    return feed;
  }
  uint64_t generation_ = 0;
};

TEST_F(SegmentFeedTest, WithoutALingerEachEventGoesAtOnce) {
  auto feed = Make(0us);
  feed->Committed(Commit(0));
  auto batch = feed->Next(generation_, 0ms);
  ASSERT_TRUE(batch.has_value());
  EXPECT_EQ(batch->commits.size(), 1u);
  EXPECT_FALSE(feed->Next(generation_, 0ms).has_value());  // nothing more
}

TEST_F(SegmentFeedTest, EventsWithinTheLingerRideInOneBatch) {
  auto feed = Make(200ms);
  const auto start = Clock::now();
  feed->Committed(Commit(0));
  EXPECT_FALSE(feed->Next(generation_, 20ms).has_value());  // still gathering
  for (uint64_t i = 1; i < 10; ++i) feed->Committed(Commit(i * 64));
  auto batch = feed->Next(generation_, 2000ms);
  const auto waited = Clock::now() - start;
  ASSERT_TRUE(batch.has_value());
  EXPECT_EQ(batch->commits.size(), 10u);
  EXPECT_GE(waited, 200ms);  // it went when the first event was 200 ms old, not before
  EXPECT_LT(waited, 1500ms);
  EXPECT_EQ(feed->batches_sent(), 1u);
}

TEST_F(SegmentFeedTest, ASenderWaitingForTheLingerWakesWhenItEnds) {
  auto feed = Make(50ms);
  std::optional<IndexBatch> got;
  std::thread sender([&] { got = feed->Next(generation_, 5000ms); });
  std::this_thread::sleep_for(10ms);
  const auto start = Clock::now();
  feed->Committed(Commit(0));
  sender.join();
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->commits.size(), 1u);
  EXPECT_GE(Clock::now() - start, 45ms);
  EXPECT_LT(Clock::now() - start, 2000ms);
}

TEST_F(SegmentFeedTest, ABarrierSendsTheOpenBatchWithoutLingering) {
  auto feed = Make(10s);
  feed->Committed(Commit(0));
  EXPECT_FALSE(feed->Next(generation_, 0ms).has_value());
  const uint64_t seq = feed->Barrier();
  auto batch = feed->Next(generation_, 0ms);  // at once, though the linger is 10 s
  ASSERT_TRUE(batch.has_value());
  EXPECT_EQ(batch->seq, seq);
  EXPECT_FALSE(feed->WaitAckedThrough(seq, 0ms));
  feed->Acked(generation_, seq);
  EXPECT_TRUE(feed->WaitAckedThrough(seq, 0ms));
  // The flush was for that batch only: the next one lingers again.
  feed->Committed(Commit(64));
  EXPECT_FALSE(feed->Next(generation_, 0ms).has_value());
}

TEST_F(SegmentFeedTest, AFlushWakesASenderThatIsLingering) {
  auto feed = Make(10s);
  std::optional<IndexBatch> got;
  feed->Committed(Commit(0));
  std::thread sender([&] { got = feed->Next(generation_, 5000ms); });
  std::this_thread::sleep_for(20ms);
  const auto start = Clock::now();
  feed->Flush();
  sender.join();
  ASSERT_TRUE(got.has_value());
  EXPECT_LT(Clock::now() - start, 2000ms);
}

TEST_F(SegmentFeedTest, AFullPartGoesWithoutLingering) {
  auto feed = Make(10s);
  for (uint64_t i = 0; i < SegmentFeed::kMaxEventsPerPart; ++i) feed->Committed(Commit(i * 64));
  auto batch = feed->Next(generation_, 0ms);
  ASSERT_TRUE(batch.has_value());
  EXPECT_EQ(batch->commits.size(), SegmentFeed::kMaxEventsPerPart);
}

TEST_F(SegmentFeedTest, AFreeDuringTheLingerIsReleasedOnlyByItsAcknowledgment) {
  auto allocator = OffsetAllocator::Create(1 << 20);
  auto feed = std::make_shared<SegmentFeed>(allocator, 30ms);
  allocator->SetFence(feed);
  const uint64_t generation = feed->Attach();
  {
    auto a = allocator->Allocate(1 << 20);
    ASSERT_TRUE(a.has_value());
  }  // freed: quarantined under the open batch's ticket
  EXPECT_GT(allocator->quarantined(), 0u);
  EXPECT_FALSE(allocator->Allocate(1 << 20).has_value());
  auto batch = feed->Next(generation, 2000ms);  // after the linger
  ASSERT_TRUE(batch.has_value());
  EXPECT_EQ(batch->frees.size(), 1u);
  EXPECT_GT(allocator->quarantined(), 0u);  // sent, not yet acknowledged
  feed->Acked(generation, batch->seq);
  EXPECT_EQ(allocator->quarantined(), 0u);
  EXPECT_TRUE(allocator->Allocate(1 << 20).has_value());
}

}  // namespace
}  // namespace tierkv
