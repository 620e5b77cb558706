// The region log's eviction and region reuse: FIFO/LRU victims and the callback that reports
// their keys before reuse, stale locations (OBJECT_NOT_FOUND, never the new tenant's bytes),
// reads and ranges racing a reuse, and LRU refreshed by ranges.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "device/memory_device.h"
#include "region_log_test_util.h"
#include "ssd/record_format.h"
#include "ssd/region_log.h"

namespace tierkv::region_log_test {
namespace {

// Region 0's first tenant in the reuse tests: keys[i] -> Pattern(size, i), in order. Their
// locations; fewer, with a test failure, if an append fails.
std::vector<DiskLocation> PutEach(RegionLog& log, const std::vector<std::string>& keys,
                                  uint64_t size) {
  std::vector<DiskLocation> locs;
  for (size_t i = 0; i < keys.size(); ++i) {
    const std::string value = Pattern(size, static_cast<uint32_t>(i));
    auto loc = log.Append(keys[i], {ConstPiece{value.data(), value.size()}});
    EXPECT_TRUE(loc.ok()) << loc.status().ToString();
    if (!loc.ok()) break;
    locs.push_back(*loc);
  }
  return locs;
}

TEST_F(RegionLogTest, FifoEvictionReportsKeysBeforeReuse) {
  auto dev = MakeDevice(3);
  auto log = Make({dev.get()});
  std::vector<std::string> region0_keys;
  for (int i = 0; i < 40; ++i) {
    const std::string key = "q" + std::to_string(i);
    auto loc = Put(*log, key, Pattern(FillBlocks(key.size(), 7), i));  // 9 per region
    ASSERT_TRUE(loc.ok());
    if (loc->region == 0 && evicted_.empty()) region0_keys.push_back(key);
  }
  // 40 records, 9 per region: regions 0, 1, 2, then 0 and 1 again.
  ASSERT_EQ(evicted_.size(), 2u);
  EXPECT_EQ(evicted_[0].region, 0u);
  EXPECT_EQ(evicted_[0].keys, region0_keys);
  EXPECT_EQ(evicted_[1].region, 1u);
  EXPECT_EQ(evicted_[1].keys.front(), "q9");
  EXPECT_EQ(evicted_[1].keys.size(), 9u);
  EXPECT_EQ(log->stats().evicted_regions, 2u);
  // Another round: FIFO keeps going in seal order, 2 then 0 (its second tenant).
  for (int i = 40; i < 58; ++i) {
    const std::string key = "q" + std::to_string(i);
    ASSERT_TRUE(Put(*log, key, Pattern(FillBlocks(key.size(), 7), i)).ok());
  }
  ASSERT_EQ(evicted_.size(), 4u);
  EXPECT_EQ(evicted_[2].region, 2u);
  EXPECT_EQ(evicted_[3].region, 0u);
  EXPECT_EQ(evicted_[3].keys.front(), "q27");
  EXPECT_GT(evicted_[3].generation, evicted_[0].generation);
}

TEST_F(RegionLogTest, LruEvictsTheRegionReadLongestAgo) {
  for (auto policy : {RegionEvictionPolicy::kFifo, RegionEvictionPolicy::kLru}) {
    evicted_.clear();
    auto dev = MakeDevice(3);
    auto log = Make({dev.get()}, Small(policy));
    std::vector<DiskLocation> locs;
    for (int i = 0; i < 27; ++i) {  // regions 0, 1, 2 full (9 each)
      const std::string key = "l" + std::to_string(i);
      auto loc = Put(*log, key, Pattern(FillBlocks(key.size(), 7), i));
      ASSERT_TRUE(loc.ok());
      locs.push_back(*loc);
    }
    ASSERT_TRUE(log->Flush().ok());
    ASSERT_TRUE(Get(*log, locs[0], "l0").ok());  // touch region 0
    ASSERT_TRUE(Put(*log, "new", "v").ok());     // needs a region: evicts one
    ASSERT_EQ(evicted_.size(), 1u);
    EXPECT_EQ(evicted_[0].region, policy == RegionEvictionPolicy::kLru ? 1u : 0u);
  }
}

TEST_F(RegionLogTest, StaleLocationAfterReuseIsNotFound) {
  auto dev = MakeDevice(2);
  auto log = Make({dev.get()});
  // The old and the new tenant of region 0 put same-sized records at the same offsets.
  const uint64_t size = FillBlocks(2, 9);
  std::vector<DiskLocation> old_locs =
      PutEach(*log, {"o0", "o1", "o2", "o3", "o4", "o5", "o6"}, size);
  ASSERT_EQ(old_locs.size(), 7u);
  for (int i = 0; i < 7; ++i)
    ASSERT_TRUE(Put(*log, "p" + std::to_string(i), Pattern(size, 50 + i)).ok());
  // Region 0 is reused, still open: the old locations must not read the new buffer.
  auto n0 = Put(*log, "o0", Pattern(size, 99));  // same key, same offset
  ASSERT_TRUE(n0.ok());
  ASSERT_EQ(n0->region, 0u);
  ASSERT_EQ(n0->offset, old_locs[0].offset);
  EXPECT_EQ(Get(*log, old_locs[0], "o0").code(), ErrorCode::OBJECT_NOT_FOUND);
  ASSERT_TRUE(log->Flush().ok());  // the new tenant is now on the device at the same offsets
  EXPECT_EQ(Get(*log, old_locs[0], "o0").code(), ErrorCode::OBJECT_NOT_FOUND);
  EXPECT_EQ(Get(*log, old_locs[3], "o3").code(), ErrorCode::OBJECT_NOT_FOUND);
  EXPECT_GE(log->stats().stale_reads, 3u);
  auto v = Get(*log, *n0, "o0");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, Pattern(size, 99));
  // A location that does not name a record of this key is not found either.
  EXPECT_EQ(Get(*log, *n0, "other").code(), ErrorCode::OBJECT_NOT_FOUND);
  DiskLocation wrong = *n0;
  wrong.offset += kBlockSize;  // inside the record's value
  EXPECT_NE(Get(*log, wrong, "o0").code(), ErrorCode::OK);
}

// A device that runs a hook (once) just before serving a read: lets a test reuse a region
// and write its new tenant while a reader is "in" its IO.
class HookDevice final : public Device {
 public:
  explicit HookDevice(std::unique_ptr<MemoryDevice> inner)
      : Device(inner->size(), inner->alignment()), inner_(std::move(inner)) {}
  std::function<void()> before_read;

 protected:
  Status DoRead(uint64_t offset, void* buf, uint64_t len) override {
    if (before_read) {
      auto hook = std::move(before_read);
      before_read = nullptr;
      hook();
    }
    return inner_->Read(offset, buf, len);
  }
  Status DoWrite(uint64_t offset, const void* buf, uint64_t len) override {
    return inner_->Write(offset, buf, len);
  }

 private:
  std::unique_ptr<MemoryDevice> inner_;
};

TEST_F(RegionLogTest, ReadRacingReuseNeverReturnsTheNewTenant) {
  HookDevice dev(MakeDevice(2));
  auto log = Make({&dev});
  const uint64_t size = FillBlocks(1, 9);  // 7 records per region
  std::vector<DiskLocation> old_locs = PutEach(*log, std::vector<std::string>(7, "k"), size);
  ASSERT_EQ(old_locs.size(), 7u);
  ASSERT_TRUE(Put(*log, "x", "roll").ok());  // region 0 sealed, region 1 open
  ASSERT_TRUE(log->Flush().ok());
  // While the read of region 0 is in flight, region 0 is evicted and its new tenant — same
  // key, same sizes, same offsets — reaches the device before the read does.
  dev.before_read = [&] {
    for (int i = 0; i < 7; ++i) ASSERT_TRUE(Put(*log, "k", Pattern(size, 100 + i)).ok());
    ASSERT_TRUE(log->Flush().ok());
    ASSERT_EQ(evicted_.size(), 1u);
  };
  EXPECT_EQ(Get(*log, old_locs[2], "k").code(), ErrorCode::OBJECT_NOT_FOUND);
  EXPECT_EQ(log->stats().stale_reads, 1u);
}

TEST_F(RegionLogTest, ReadRangesAfterReuseAreNotFound) {
  auto dev = MakeDevice(2);
  auto log = Make({dev.get()});
  const uint64_t size = FillBlocks(2, 9);
  std::vector<DiskLocation> old_locs =
      PutEach(*log, {"o0", "o1", "o2", "o3", "o4", "o5", "o6"}, size);
  ASSERT_EQ(old_locs.size(), 7u);
  ASSERT_TRUE(ReadRange(*log, old_locs[1], "o1", 100, 5000).ok());
  for (int i = 0; i < 7; ++i) {
    ASSERT_TRUE(Put(*log, "p" + std::to_string(i), Pattern(size, 50 + i)).ok());
  }
  // Region 0's new tenant: same keys, same offsets, other bytes.
  for (int i = 0; i < 7; ++i) {
    auto loc = Put(*log, "o" + std::to_string(i), Pattern(size, 99 + i));
    ASSERT_TRUE(loc.ok());
    ASSERT_EQ(loc->region, 0u);
    ASSERT_EQ(loc->offset, old_locs[i].offset);
  }
  const uint64_t stale_before = log->stats().stale_reads;
  EXPECT_EQ(ReadRange(*log, old_locs[1], "o1", 0, size).code(), ErrorCode::OBJECT_NOT_FOUND);
  EXPECT_EQ(ReadRange(*log, old_locs[1], "o1", 100, 5000).code(), ErrorCode::OBJECT_NOT_FOUND);
  ASSERT_TRUE(log->Flush().ok());  // the new tenant is on the device now
  EXPECT_EQ(ReadRange(*log, old_locs[1], "o1", 0, size).code(), ErrorCode::OBJECT_NOT_FOUND);
  // A partial range has no header to check: only the sealed generation protects it.
  EXPECT_EQ(ReadRange(*log, old_locs[1], "o1", 100, 5000).code(), ErrorCode::OBJECT_NOT_FOUND);
  EXPECT_EQ(log->stats().stale_reads, stale_before + 4);
}

TEST_F(RegionLogTest, PartialRangeRacingReuseNeverReturnsTheNewTenant) {
  HookDevice dev(MakeDevice(2));
  auto log = Make({&dev});
  const uint64_t size = FillBlocks(1, 9);
  std::vector<DiskLocation> old_locs = PutEach(*log, std::vector<std::string>(7, "k"), size);
  ASSERT_EQ(old_locs.size(), 7u);
  ASSERT_TRUE(Put(*log, "x", "roll").ok());
  ASSERT_TRUE(log->Flush().ok());
  // The reuse and the new tenant's write happen while the range read is "in flight".
  dev.before_read = [&] {
    for (int i = 0; i < 7; ++i) ASSERT_TRUE(Put(*log, "k", Pattern(size, 100 + i)).ok());
    ASSERT_TRUE(log->Flush().ok());
  };
  EXPECT_EQ(ReadRange(*log, old_locs[2], "k", 4096, 8192).code(), ErrorCode::OBJECT_NOT_FOUND);
  EXPECT_EQ(evicted_.size(), 1u);
  EXPECT_EQ(log->stats().stale_reads, 1u);
}

TEST_F(RegionLogTest, ReadRangesRefreshLruAccess) {
  auto dev = MakeDevice(2);
  auto log = Make({dev.get()}, Small(RegionEvictionPolicy::kLru));
  auto w = Fill(*log, "l", 0, 18);  // regions 0 and 1 sealed (region 1 by the next append)
  ASSERT_TRUE(log->Flush().ok());
  ASSERT_TRUE(ReadRange(*log, w[0].loc, w[0].key, 10, 100).ok());  // touch region 0
  ASSERT_TRUE(Put(*log, "new", "v").ok());
  ASSERT_EQ(evicted_.size(), 1u);
  EXPECT_EQ(evicted_[0].region, 1u);
}

}  // namespace
}  // namespace tierkv::region_log_test
