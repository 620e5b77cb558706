// StagingArea: reserve/release, alignment and offsets, waiting for space (woken by a release,
// or timing out), too-large and zero-byte requests, TTL reclaim with a ManualClock, Held().
#include "ssd/staging_area.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "size_units.h"

namespace tierkv {
namespace {

class StagingAreaTest : public ::testing::Test {
 protected:
  std::unique_ptr<StagingArea> Make(uint64_t capacity, Millis wait = Millis(0),
                                    Millis ttl = Millis(1000)) {
    StagingOptions o;
    o.capacity = capacity;
    o.wait = wait;
    o.ttl = ttl;
    o.want_huge_pages = false;
    o.clock = &clock_;
    auto area = StagingArea::Create(o);
    EXPECT_TRUE(area.ok()) << area.status().ToString();
    return std::move(area).value();
  }
  ManualClock clock_;
};

TEST_F(StagingAreaTest, StagingNeedCoversTheAlignedRecordRange) {
  EXPECT_EQ(StagingNeed(1), 3 * 4096u);
  EXPECT_EQ(StagingNeed(4096), 3 * 4096u);
  EXPECT_EQ(StagingNeed(4097), 4 * 4096u);
  EXPECT_EQ(StagingNeed(0), 2 * 4096u);
}

TEST_F(StagingAreaTest, ReservationsAreAlignedDisjointAndReleasable) {
  auto area = Make(64 * kKiB);
  EXPECT_EQ(area->capacity(), 64 * kKiB);
  auto a = area->Reserve(5000);  // rounded up to 8 KiB
  auto b = area->Reserve(4096);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a->ticket, 0u);
  EXPECT_NE(a->ticket, b->ticket);
  EXPECT_EQ(a->size, 8 * kKiB);
  EXPECT_EQ(b->size, 4 * kKiB);
  for (const auto* r : {&*a, &*b}) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(r->data) % 4096, 0u);
    EXPECT_EQ(r->offset % 4096, 0u);
    EXPECT_EQ(r->data, area->base() + r->offset);
  }
  EXPECT_TRUE(a->offset + a->size <= b->offset || b->offset + b->size <= a->offset);
  std::memset(a->data, 0xAA, a->size);  // the memory is really there
  std::memset(b->data, 0xBB, b->size);
  EXPECT_TRUE(area->Held(a->ticket));
  EXPECT_EQ(area->stats().bytes_in_use, 12 * kKiB);
  ASSERT_TRUE(area->Release(a->ticket).ok());
  EXPECT_FALSE(area->Held(a->ticket));
  EXPECT_TRUE(area->Held(b->ticket));
  EXPECT_EQ(area->Release(a->ticket).code(), ErrorCode::OBJECT_NOT_FOUND);  // twice
  EXPECT_EQ(area->Release(12345).code(), ErrorCode::OBJECT_NOT_FOUND);
  EXPECT_EQ(area->Release(0).code(), ErrorCode::OBJECT_NOT_FOUND);
  ASSERT_TRUE(area->Release(b->ticket).ok());
  const StagingStats s = area->stats();
  EXPECT_EQ(s.reservations, 2u);
  EXPECT_EQ(s.released, 2u);
  EXPECT_EQ(s.bytes_in_use, 0u);
  // All of it can be taken again at once.
  auto all = area->Reserve(64 * kKiB);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_EQ(all->offset, 0u);
}

TEST_F(StagingAreaTest, ZeroAndTooLargeAreRefusedAtOnce) {
  auto area = Make(64 * kKiB, Millis(10000));
  EXPECT_EQ(area->Reserve(0).code(), ErrorCode::INVALID_PARAMS);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(area->Reserve(64 * kKiB + 1).code(), ErrorCode::OBJECT_TOO_LARGE);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1)) << "it waited";
  EXPECT_EQ(area->stats().timeouts, 0u);
}

TEST_F(StagingAreaTest, CreateRejectsBadOptions) {
  StagingOptions o;
  o.want_huge_pages = false;
  o.capacity = 0;
  EXPECT_EQ(StagingArea::Create(o).code(), ErrorCode::INVALID_PARAMS);
  o.capacity = 8192;
  o.ttl = Millis(0);
  EXPECT_EQ(StagingArea::Create(o).code(), ErrorCode::INVALID_PARAMS);
  o.ttl = Millis(10);
  o.wait = Millis(-1);
  EXPECT_EQ(StagingArea::Create(o).code(), ErrorCode::INVALID_PARAMS);
  o.wait = Millis(0);
  o.clock = nullptr;
  EXPECT_EQ(StagingArea::Create(o).code(), ErrorCode::INVALID_PARAMS);
  o.clock = SystemClock::Instance();
  o.capacity = 5000;  // rounded up to whole blocks
  auto area = StagingArea::Create(o);
  ASSERT_TRUE(area.ok());
  EXPECT_EQ((*area)->capacity(), 8192u);
}

TEST_F(StagingAreaTest, FullAreaTimesOutAfterWait) {
  auto area = Make(16 * kKiB, Millis(50));
  auto a = area->Reserve(16 * kKiB);
  ASSERT_TRUE(a.ok());
  const auto start = std::chrono::steady_clock::now();
  auto b = area->Reserve(4096);
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(b.code(), ErrorCode::NO_AVAILABLE_HANDLE);
  EXPECT_NE(b.status().message().find("16384 of 16384 bytes in use"), std::string::npos)
      << b.status().message();
  EXPECT_GE(waited, std::chrono::milliseconds(45));
  EXPECT_LT(waited, std::chrono::seconds(5));
  EXPECT_EQ(area->stats().timeouts, 1u);
  EXPECT_EQ(area->stats().waits, 1u);
  // wait = 0 fails without waiting.
  auto quick = Make(16 * kKiB, Millis(0));
  ASSERT_TRUE(quick->Reserve(16 * kKiB).ok());
  EXPECT_EQ(quick->Reserve(4096).code(), ErrorCode::NO_AVAILABLE_HANDLE);
}

TEST_F(StagingAreaTest, WaitingReserveIsWokenByARelease) {
  auto area = Make(16 * kKiB, Millis(20000));
  auto a = area->Reserve(12 * kKiB);
  ASSERT_TRUE(a.ok());
  Result<StagingArea::Reservation> b = Status(ErrorCode::INTERNAL_ERROR, "not run");
  const auto start = std::chrono::steady_clock::now();
  std::thread waiter([&] { b = area->Reserve(8 * kKiB); });
  // Let the waiter block, then free the space it needs.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(area->stats().reservations, 1u);
  const Status released = area->Release(a->ticket);
  waiter.join();
  ASSERT_TRUE(released.ok()) << released.ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_EQ(b->size, 8 * kKiB);
  EXPECT_EQ(area->stats().timeouts, 0u);
  EXPECT_EQ(area->stats().waits, 1u);
}

TEST_F(StagingAreaTest, ExpiredTicketsAreReclaimedByTtl) {
  auto area = Make(32 * kKiB, Millis(0), Millis(1000));
  auto old = area->Reserve(16 * kKiB);
  ASSERT_TRUE(old.ok());
  clock_.Advance(Millis(600));
  auto young = area->Reserve(8 * kKiB);
  ASSERT_TRUE(young.ok());
  EXPECT_EQ(area->ReclaimExpired(), 0u);  // neither is past its ttl
  clock_.Advance(Millis(500));            // old: 1100 ms, young: 500 ms
  EXPECT_EQ(area->ReclaimExpired(), 1u);
  EXPECT_FALSE(area->Held(old->ticket));  // its requester must not trust copied bytes
  EXPECT_TRUE(area->Held(young->ticket));
  EXPECT_EQ(area->Release(old->ticket).code(), ErrorCode::OBJECT_NOT_FOUND);
  EXPECT_EQ(area->stats().reclaimed, 1u);
  EXPECT_EQ(area->stats().bytes_in_use, 8 * kKiB);
  clock_.Advance(Millis(1000));
  EXPECT_EQ(area->ReclaimExpired(), 1u);
  EXPECT_EQ(area->ReclaimExpired(), 0u);
  EXPECT_EQ(area->stats().bytes_in_use, 0u);
}

TEST_F(StagingAreaTest, ReserveReclaimsExpiredTicketsBeforeGivingUp) {
  auto area = Make(16 * kKiB, Millis(0), Millis(1000));
  auto dead = area->Reserve(16 * kKiB);  // its requester "died"
  ASSERT_TRUE(dead.ok());
  EXPECT_EQ(area->Reserve(4096).code(), ErrorCode::NO_AVAILABLE_HANDLE);
  clock_.Advance(Millis(1001));
  auto next = area->Reserve(4096);
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_FALSE(area->Held(dead->ticket));
  EXPECT_EQ(area->stats().reclaimed, 1u);
}

TEST_F(StagingAreaTest, ConcurrentReserveAndReleaseKeepTheBudget) {
  auto area = Make(64 * kKiB, Millis(5000));
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        auto r = area->Reserve(static_cast<uint64_t>((t + i) % 5 + 1) * 4096);
        if (!r.ok()) {
          ++failures;
          continue;
        }
        std::memset(r->data, t, r->size);
        for (uint64_t k = 0; k < r->size; k += 512) {
          if (r->data[k] != t) ++failures;  // another reservation overlapped this one
        }
        if (!area->Release(r->ticket).ok()) ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(area->stats().bytes_in_use, 0u);
  EXPECT_EQ(area->stats().reservations, 800u);
}

}  // namespace
}  // namespace tierkv
