// The region log's warm restart: Scan (every live record, newest wins; torn records, old
// tenants and records out of sequence) and Recover (byte-exact records, torn records and corrupt
// region headers, free regions used first then the oldest evicted, LRU order, duplicate keys,
// the generation counter, a never-written device).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/checksum.h"
#include "region_log_test_util.h"
#include "ssd/record_format.h"
#include "ssd/region_log.h"

namespace tierkv::region_log_test {
namespace {

TEST_F(RegionLogTest, ScanFindsEveryLiveRecordNewestWins) {
  auto d0 = MakeDevice(2);
  auto d1 = MakeDevice(2);
  std::vector<Device*> devices = {d0.get(), d1.get()};
  auto log = Make(devices);
  struct Rec {
    std::string key;
    DiskLocation loc;
  };
  std::vector<Rec> all;
  for (int i = 0; i < 60; ++i) {  // 9 per region, 4 regions: wraps once
    const std::string key = "s" + std::to_string(i);
    auto loc = Put(*log, key, Pattern(FillBlocks(key.size(), 7), i));
    ASSERT_TRUE(loc.ok());
    all.push_back({key, *loc});
  }
  auto dup_old = Put(*log, "s59", Pattern(10, 1000));  // s59 again: newest wins
  ASSERT_TRUE(dup_old.ok());
  ASSERT_TRUE(log->Flush().ok());
  all.back().loc = *dup_old;

  auto scanned = RegionLog::Scan(devices, Small());
  ASSERT_TRUE(scanned.ok()) << scanned.status().ToString();
  std::map<std::string, ScannedRecord> by_key;
  for (auto& r : *scanned) by_key[r.key] = r;
  EXPECT_EQ(by_key.size(), scanned->size());
  size_t live = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    auto v = Get(*log, all[i].loc, all[i].key);
    auto it = by_key.find(all[i].key);
    if (!v.ok()) {
      EXPECT_TRUE(it == by_key.end()) << all[i].key << " was evicted but scanned";
      continue;
    }
    ++live;
    ASSERT_TRUE(it != by_key.end()) << all[i].key;
    EXPECT_EQ(it->second.location.region, all[i].loc.region);
    EXPECT_EQ(it->second.location.generation, all[i].loc.generation);
    EXPECT_EQ(it->second.location.offset, all[i].loc.offset);
    EXPECT_EQ(it->second.location.size, all[i].loc.size);
    EXPECT_EQ(it->second.checksum, Checksum(v->data(), v->size()));
    // The scanned location reads through the log like the original one.
    auto again = Get(*log, it->second.location, all[i].key);
    ASSERT_TRUE(again.ok());
  }
  EXPECT_EQ(live, scanned->size());
  EXPECT_GE(live, 27u);
}

TEST_F(RegionLogTest, ScanStopsAtATornRecordAndIgnoresOldTenants) {
  auto dev = MakeDevice(2);
  std::vector<Device*> devices = {dev.get()};
  auto log = Make(devices);
  // Region 0: 9 records, then region 1 gets 9 and region 0 is reused with only 3.
  std::vector<DiskLocation> r1;
  for (int i = 0; i < 18; ++i) {
    const std::string key = "t" + std::to_string(i);
    auto loc = Put(*log, key, Pattern(FillBlocks(key.size(), 7), i));
    ASSERT_TRUE(loc.ok());
    if (i >= 9) r1.push_back(*loc);
  }
  for (int i = 18; i < 21; ++i) {
    const std::string key = "t" + std::to_string(i);
    ASSERT_TRUE(Put(*log, key, Pattern(FillBlocks(key.size(), 7), i)).ok());
  }
  ASSERT_TRUE(log->Flush().ok());

  auto keys_of = [&]() {
    auto scanned = RegionLog::Scan(devices, Small());
    EXPECT_TRUE(scanned.ok());
    std::set<std::string> keys;
    for (auto& r : *scanned) keys.insert(r.key);
    return keys;
  };
  std::set<std::string> expected;
  for (int i = 9; i < 21; ++i) expected.insert("t" + std::to_string(i));
  // Region 0's old tenant (t3..t8 after the new tenant's 3 records) is not resurrected.
  EXPECT_EQ(keys_of(), expected);

  // Corrupt a value byte of region 1's 5th record (t13): t13 is skipped; its header is intact,
  // so t14..t17 behind it are found and checked on their own.
  uint8_t* d = dev->TEST_data();
  d[kRegion + r1[4].offset + kRecordHeaderSize + 3 + 100] ^= 0x40;
  expected.erase("t13");
  EXPECT_EQ(keys_of(), expected);
  // A key byte of t14: skipped too.
  d[kRegion + r1[5].offset + kRecordHeaderSize] ^= 0x01;
  expected.erase("t14");
  EXPECT_EQ(keys_of(), expected);
  // A torn header (t16 zeroed from its start) ends the region: t16 and t17 are gone.
  std::memset(d + kRegion + r1[7].offset, 0, kBlockSize);
  expected.erase("t16");
  expected.erase("t17");
  EXPECT_EQ(keys_of(), expected);

  // A torn tail: the last record of region 0 (t20) zeroed from its middle on.
  const uint64_t t20 = kFirstRecordOffset + 2 * 7 * kBlockSize;
  std::memset(d + t20 + 3 * kBlockSize, 0, 4 * kBlockSize);
  expected.erase("t20");
  EXPECT_EQ(keys_of(), expected);

  // A corrupt region header hides the whole region.
  d[kRegion + 9] ^= 0x01;
  for (int i = 9; i < 18; ++i) expected.erase("t" + std::to_string(i));
  EXPECT_EQ(keys_of(), expected);
}

// A record header that is intact but not the one appended at its place (here t3's header over
// t2's) ends the region's walk: the sequence number says it is out of place.
TEST_F(RegionLogTest, ScanStopsAtARecordOutOfSequence) {
  auto dev = MakeDevice(2);
  std::vector<Device*> devices = {dev.get()};
  std::vector<Written> written;
  {
    auto log = Make(devices);
    written = Fill(*log, "t", 0, 9);  // region 0: t0..t8
    ASSERT_TRUE(log->Flush().ok());
  }
  uint8_t* d = dev->TEST_data();
  std::memcpy(d + written[2].loc.offset, d + written[3].loc.offset, kRecordHeaderSize);
  auto scanned = RegionLog::Scan(devices, Small());
  ASSERT_TRUE(scanned.ok()) << scanned.status().ToString();
  std::set<std::string> keys;
  for (const auto& r : *scanned) keys.insert(r.key);
  EXPECT_EQ(keys, (std::set<std::string>{"t0", "t1"}));
}

TEST_F(RegionLogTest, RecoverAfterFlushRestoresEveryRecordByteExact) {
  auto d0 = MakeDevice(2);
  auto d1 = MakeDevice(2);
  std::vector<Device*> devices = {d0.get(), d1.get()};
  std::vector<Written> written;
  {
    auto log = Make(devices);
    written = Fill(*log, "w", 0, 20);  // regions 0, 1 full, 2 of region 2
    ASSERT_EQ(written.size(), 20u);
    ASSERT_TRUE(log->Flush().ok());
  }
  std::vector<ScannedRecord> surviving;
  auto log = Recover(devices, &surviving);
  auto by_key = ByKey(surviving);
  ASSERT_EQ(by_key.size(), written.size());
  for (const auto& w : written) {
    auto it = by_key.find(w.key);
    ASSERT_TRUE(it != by_key.end()) << w.key;
    EXPECT_TRUE(SameLocation(it->second.location, w.loc)) << w.key;
    EXPECT_EQ(it->second.checksum, Checksum(w.value.data(), w.value.size()));
    auto v = Get(*log, it->second.location, w.key);
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    EXPECT_EQ(*v, w.value);
  }
  // Same answer as Scan; nothing evicted; the next append takes the free region 3.
  auto scanned = RegionLog::Scan(devices, Small());
  ASSERT_TRUE(scanned.ok());
  EXPECT_EQ(scanned->size(), surviving.size());
  EXPECT_TRUE(evicted_.empty());
  auto next = Put(*log, "next", "v");
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->region, 3u);
  EXPECT_EQ(log->stats().reads, written.size());
}

TEST_F(RegionLogTest, RecoverSkipsATornRecordAndKeepsTheIntactOnesAroundIt) {
  auto dev = MakeDevice(3);
  std::vector<Device*> devices = {dev.get()};
  std::vector<Written> written;
  {
    auto log = Make(devices);
    written = Fill(*log, "t", 0, 14);  // region 0: t0..t8, region 1: t9..t13
    ASSERT_TRUE(log->Flush().ok());
  }
  ASSERT_EQ(written[11].loc.region, 1u);
  // The write of region 1 tore inside t11 (a drive may persist a large write's blocks in any
  // order): t11's value is zeroed from its middle on, t12 and t13 made it.
  uint8_t* d = dev->TEST_data();
  std::memset(d + kRegion + written[11].loc.offset + 3 * kBlockSize, 0, 4 * kBlockSize);
  std::vector<ScannedRecord> surviving;
  auto log = Recover(devices, &surviving);
  auto by_key = ByKey(surviving);
  EXPECT_EQ(by_key.size(), 13u);  // all but t11
  for (int i = 0; i < 14; ++i) {
    const Written& w = written[i];
    auto it = by_key.find(w.key);
    if (i == 11) {
      EXPECT_TRUE(it == by_key.end()) << w.key << " is torn";
      continue;
    }
    ASSERT_TRUE(it != by_key.end()) << w.key;
    auto v = Get(*log, it->second.location, w.key);
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    EXPECT_EQ(*v, w.value);
  }
  // Region 1 is sealed with only its valid keys: fill region 2 and force region 0, then 1 out.
  Fill(*log, "n", 0, 9 * 3);
  ASSERT_EQ(evicted_.size(), 2u);
  EXPECT_EQ(evicted_[0].region, 0u);
  EXPECT_EQ(evicted_[1].region, 1u);
  EXPECT_EQ(evicted_[1].keys, (std::vector<std::string>{"t9", "t10", "t12", "t13"}));
}

TEST_F(RegionLogTest, RecoverTreatsARegionWithACorruptHeaderAsFree) {
  auto dev = MakeDevice(3);
  std::vector<Device*> devices = {dev.get()};
  std::vector<Written> written;
  {
    auto log = Make(devices);
    written = Fill(*log, "c", 0, 18);  // regions 0 and 1, full
    ASSERT_TRUE(log->Flush().ok());
  }
  dev->TEST_data()[kRegion + 17] ^= 0x04;  // region 1's header (generation field)
  std::vector<ScannedRecord> surviving;
  auto log = Recover(devices, &surviving);
  auto by_key = ByKey(surviving);
  ASSERT_EQ(by_key.size(), 9u);
  for (int i = 0; i < 9; ++i) EXPECT_EQ(by_key.count(written[i].key), 1u);
  // Region 1's old locations do not read; it is free and, being the lowest free, used first.
  EXPECT_EQ(Get(*log, written[9].loc, written[9].key).code(), ErrorCode::OBJECT_NOT_FOUND);
  auto next = Put(*log, "next", "v");
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->region, 1u);
  EXPECT_GT(next->generation, written.back().loc.generation);
  EXPECT_TRUE(evicted_.empty());
}

TEST_F(RegionLogTest, RecoverThenAppendUsesFreeRegionsThenEvictsTheOldest) {
  auto dev = MakeDevice(4);
  std::vector<Device*> devices = {dev.get()};
  std::vector<Written> written;
  {
    auto log = Make(devices);
    // r0 g1, r1 g2, r2 g3, r3 g4, then r0 reused as g5 (q36..q44).
    written = Fill(*log, "q", 0, 45);
    ASSERT_TRUE(log->Flush().ok());
  }
  ASSERT_EQ(written[44].loc.region, 0u);
  ASSERT_EQ(written[44].loc.generation, 5u);
  dev->TEST_data()[3 * kRegion] ^= 0x01;  // region 3's header: region 3 is free
  evicted_.clear();
  std::vector<ScannedRecord> surviving;
  auto log = Recover(devices, &surviving);
  ASSERT_EQ(surviving.size(), 27u);
  auto keys = [&](int first) {
    std::vector<std::string> k;
    for (int i = first; i < first + 9; ++i) k.push_back("q" + std::to_string(i));
    return k;
  };
  // 9 records go to the free region 3 without evicting anything.
  auto fresh = Fill(*log, "n", 0, 9);
  EXPECT_TRUE(evicted_.empty());
  EXPECT_EQ(fresh.front().loc.region, 3u);
  // The next region evicts the oldest recovered one: region 1 (g2), not region 0 (g5).
  Fill(*log, "n", 9, 1);
  ASSERT_EQ(evicted_.size(), 1u);
  EXPECT_EQ(evicted_[0].region, 1u);
  EXPECT_EQ(evicted_[0].generation, 2u);
  EXPECT_EQ(evicted_[0].keys, keys(9));
  for (int i = 9; i < 18; ++i) {
    EXPECT_EQ(Get(*log, written[i].loc, written[i].key).code(), ErrorCode::OBJECT_NOT_FOUND);
  }
  // Region 0's recovered records still read; then regions 2 (g3) and 0 (g5) go, in order.
  auto v = Get(*log, written[40].loc, written[40].key);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(*v, written[40].value);
  Fill(*log, "n", 10, 18);
  ASSERT_EQ(evicted_.size(), 3u);
  EXPECT_EQ(evicted_[1].region, 2u);
  EXPECT_EQ(evicted_[1].keys, keys(18));
  EXPECT_EQ(evicted_[2].region, 0u);
  EXPECT_EQ(evicted_[2].generation, 5u);
  EXPECT_EQ(evicted_[2].keys, keys(36));
  EXPECT_EQ(Get(*log, written[40].loc, written[40].key).code(), ErrorCode::OBJECT_NOT_FOUND);
  EXPECT_EQ(log->stats().evicted_regions, 3u);
}

TEST_F(RegionLogTest, RecoverLruStartsInGenerationOrder) {
  auto dev = MakeDevice(3);
  std::vector<Device*> devices = {dev.get()};
  std::vector<Written> written;
  {
    auto log = Make(devices, Small(RegionEvictionPolicy::kLru));
    written = Fill(*log, "l", 0, 36);  // r1 g2, r2 g3, r0 g4
    ASSERT_TRUE(log->Flush().ok());
  }
  evicted_.clear();
  auto log = Recover(devices, nullptr, Small(RegionEvictionPolicy::kLru));
  // Reading region 1 makes it the most recently used: region 2 goes first, then region 0.
  ASSERT_TRUE(Get(*log, written[9].loc, written[9].key).ok());
  Fill(*log, "m", 0, 19);
  ASSERT_EQ(evicted_.size(), 3u);
  EXPECT_EQ(evicted_[0].region, 2u);
  EXPECT_EQ(evicted_[1].region, 0u);
  EXPECT_EQ(evicted_[2].region, 1u);
}

TEST_F(RegionLogTest, RecoverDuplicateKeyNewestGenerationWins) {
  auto dev = MakeDevice(3);
  std::vector<Device*> devices = {dev.get()};
  const std::string old_value = Pattern(5000, 1), new_value = Pattern(7000, 2);
  DiskLocation newest;
  {
    auto log = Make(devices);
    Fill(*log, "a", 0, 9);                          // region 0 (g1)
    ASSERT_TRUE(Put(*log, "dup", old_value).ok());  // region 1 (g2)
    Fill(*log, "b", 0, 8);
    Fill(*log, "c", 0, 9);                   // region 2 (g3)
    auto loc = Put(*log, "dup", new_value);  // evicts region 0: region 0 (g4)
    ASSERT_TRUE(loc.ok());
    newest = *loc;
    ASSERT_TRUE(log->Flush().ok());
  }
  ASSERT_EQ(newest.region, 0u);
  std::vector<ScannedRecord> surviving;
  auto log = Recover(devices, &surviving);
  auto by_key = ByKey(surviving);
  ASSERT_EQ(by_key.count("dup"), 1u);
  EXPECT_TRUE(SameLocation(by_key["dup"].location, newest));
  auto v = Get(*log, by_key["dup"].location, "dup");
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(*v, new_value);
  EXPECT_EQ(surviving.size(), 1u + 8 + 9);
}

TEST_F(RegionLogTest, RecoverContinuesTheGenerationCounter) {
  auto dev = MakeDevice(3);
  std::vector<Device*> devices = {dev.get()};
  uint64_t max_gen = 0;
  std::vector<Written> written;
  {
    auto log = Make(devices);
    written = Fill(*log, "g", 0, 27);  // g1, g2, g3
    ASSERT_TRUE(log->Flush().ok());
    for (const auto& w : written) max_gen = std::max(max_gen, w.loc.generation);
  }
  ASSERT_EQ(max_gen, 3u);
  // Region 2 (the newest, g3) loses its header: its leftover records still carry g3, so the
  // counter must start above 3 or a new tenant of region 2 would adopt them.
  dev->TEST_data()[2 * kRegion + 1] ^= 0x01;
  {
    std::vector<ScannedRecord> surviving;
    auto log = Recover(devices, &surviving);
    EXPECT_EQ(surviving.size(), 18u);
    auto next = Fill(*log, "x", 0, 2);  // into region 2, fewer records than it held
    ASSERT_EQ(next.size(), 2u);
    EXPECT_EQ(next[0].loc.region, 2u);
    EXPECT_GT(next[0].loc.generation, max_gen);
    ASSERT_TRUE(log->Flush().ok());
  }
  // A second restart: the old g3 records after x0, x1 in region 2 are not resurrected, and
  // the counter keeps growing.
  std::vector<ScannedRecord> surviving;
  auto log = Recover(devices, &surviving);
  auto by_key = ByKey(surviving);
  EXPECT_EQ(by_key.size(), 20u);
  for (int i = 18; i < 27; ++i) EXPECT_EQ(by_key.count(written[i].key), 0u) << written[i].key;
  EXPECT_EQ(by_key.count("x0"), 1u);
  EXPECT_EQ(by_key.count("x1"), 1u);
  // Region 0 (g1) is the oldest: the next region evicts it, under a generation above all.
  auto more = Fill(*log, "y", 0, 1);
  ASSERT_EQ(more.size(), 1u);
  EXPECT_EQ(evicted_.size(), 1u);
  EXPECT_EQ(more[0].loc.region, 0u);
  EXPECT_GT(more[0].loc.generation, by_key["x0"].location.generation);
}

TEST_F(RegionLogTest, RecoverOfANeverWrittenDeviceStartsEmpty) {
  auto d0 = MakeDevice(2);
  auto d1 = MakeDevice(1);
  std::vector<Device*> devices = {d0.get(), d1.get()};
  std::vector<ScannedRecord> surviving = {ScannedRecord{"stale", {}, 0}};
  auto log = Recover(devices, &surviving);
  EXPECT_TRUE(surviving.empty());
  EXPECT_EQ(log->num_regions(), 3u);
  auto w = Fill(*log, "e", 0, 27);  // regions 0, 1, 2 in order, nothing evicted
  ASSERT_EQ(w.size(), 27u);
  EXPECT_EQ(w[0].loc.region, 0u);
  EXPECT_EQ(w[0].loc.generation, 1u);
  EXPECT_EQ(w[9].loc.region, 1u);
  EXPECT_EQ(w[18].loc.region, 2u);
  EXPECT_TRUE(evicted_.empty());
  auto v = Get(*log, w[5].loc, w[5].key);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, w[5].value);
  auto cb = [](uint32_t, uint64_t, std::vector<std::string>) {};
  EXPECT_EQ(RegionLog::Recover({}, Small(), cb, nullptr).code(), ErrorCode::INVALID_PARAMS);
  RegionLogOptions bad = Small();
  bad.region_size = kRegion + 100;
  EXPECT_EQ(RegionLog::Recover(devices, bad, cb, nullptr).code(), ErrorCode::INVALID_PARAMS);
}

}  // namespace
}  // namespace tierkv::region_log_test
