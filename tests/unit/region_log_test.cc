// The SSD tier's region log over MemoryDevice/FaultyDevice: byte-exact append and read (open
// buffer and device), rollover, striping, FIFO/LRU region eviction and its callback, stale
// locations, corruption, IO errors, and Scan (including torn regions).
#include "ssd/region_log.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/checksum.h"
#include "device/faulty_device.h"
#include "device/io_buffer.h"
#include "device/memory_device.h"
#include "pattern_test_util.h"
#include "ssd/record_format.h"
#include "ssd/staging_area.h"
#include "tierkv/types.h"

namespace tierkv {
namespace {

using test_util::Pattern;

constexpr uint64_t kRegion = 256 * 1024;

std::unique_ptr<MemoryDevice> MakeDevice(uint64_t regions) {
  auto dev = MemoryDevice::Create(regions * kRegion);
  EXPECT_TRUE(dev.ok()) << dev.status().ToString();
  return std::move(dev).value();
}

RegionLogOptions Small(RegionEvictionPolicy policy = RegionEvictionPolicy::kFifo) {
  RegionLogOptions o;
  o.region_size = kRegion;
  o.eviction = policy;
  o.want_huge_pages = false;
  return o;
}

// Value size that makes a record with a key of `key_size` bytes fill exactly `blocks` blocks.
uint64_t FillBlocks(size_t key_size, uint64_t blocks) {
  uint64_t value = blocks * kBlockSize - kRecordHeaderSize - key_size;
  // A value this big starts on a block of its own: header and key take whole blocks.
  if (RecordValueAligned(value)) value = blocks * kBlockSize - AlignUpToBlock(64 + key_size);
  if (RecordSpan(key_size, value) != blocks * kBlockSize) std::abort();  // no such value
  return value;
}

struct Evicted {
  uint32_t region;
  uint64_t generation;
  std::vector<std::string> keys;
};

class RegionLogTest : public ::testing::Test {
 protected:
  std::unique_ptr<RegionLog> Make(std::vector<Device*> devices,
                                  const RegionLogOptions& options = Small()) {
    auto log = RegionLog::Create(std::move(devices), options,
                                 [this](uint32_t r, uint64_t g, std::vector<std::string> keys) {
                                   std::lock_guard lock(mu_);
                                   evicted_.push_back(Evicted{r, g, std::move(keys)});
                                 });
    EXPECT_TRUE(log.ok()) << log.status().ToString();
    return std::move(log).value();
  }

  static Result<DiskLocation> Put(RegionLog& log, const std::string& key, const std::string& v) {
    return log.Append(key, {ConstPiece{v.data(), v.size()}});
  }

  // Reads into a buffer pre-filled with a sentinel: on failure the caller may check it.
  static Result<std::string> Get(RegionLog& log, const DiskLocation& loc, const std::string& key) {
    std::string out(loc.size, '\x5a');
    Status s = log.Read(loc, key, {MutPiece{out.data(), out.size()}});
    if (!s.ok()) {
      EXPECT_EQ(out, std::string(loc.size, '\x5a')) << "failed read wrote into dst";
      return s;
    }
    return out;
  }

  std::unique_ptr<RegionLog> Recover(std::vector<Device*> devices,
                                     std::vector<ScannedRecord>* surviving,
                                     const RegionLogOptions& options = Small()) {
    auto log = RegionLog::Recover(
        std::move(devices), options,
        [this](uint32_t r, uint64_t g, std::vector<std::string> keys) {
          std::lock_guard lock(mu_);
          evicted_.push_back(Evicted{r, g, std::move(keys)});
        },
        surviving);
    EXPECT_TRUE(log.ok()) << log.status().ToString();
    return std::move(log).value();
  }

  std::mutex mu_;
  std::vector<Evicted> evicted_;
};

// A record written by a test: key, value and where the log put it.
struct Written {
  std::string key;
  std::string value;
  DiskLocation loc;
};

// Appends `n` records "<prefix><i>" of 7 blocks each (9 fill a region), i from `first`.
std::vector<Written> Fill(RegionLog& log, const std::string& prefix, int first, int n) {
  std::vector<Written> out;
  for (int i = first; i < first + n; ++i) {
    const std::string key = prefix + std::to_string(i);
    const std::string value = Pattern(FillBlocks(key.size(), 7), static_cast<uint32_t>(i));
    auto loc = log.Append(key, {ConstPiece{value.data(), value.size()}});
    EXPECT_TRUE(loc.ok()) << loc.status().ToString();
    if (!loc.ok()) break;
    out.push_back(Written{key, value, *loc});
  }
  return out;
}

std::map<std::string, ScannedRecord> ByKey(const std::vector<ScannedRecord>& records) {
  std::map<std::string, ScannedRecord> m;
  for (const auto& r : records) {
    EXPECT_TRUE(m.emplace(r.key, r).second) << "duplicate " << r.key;
  }
  return m;
}

bool SameLocation(const DiskLocation& a, const DiskLocation& b) {
  return a.region == b.region && a.generation == b.generation && a.offset == b.offset &&
         a.size == b.size;
}

TEST_F(RegionLogTest, AppendAndReadBackFromBufferAndAfterFlush) {
  auto dev = MakeDevice(4);
  auto log = Make({dev.get()});
  const std::vector<size_t> sizes = {0, 1, 100, 4000, FillBlocks(2, 1), 4096, 10000, 65536};
  std::vector<DiskLocation> locs;
  for (size_t i = 0; i < sizes.size(); ++i) {
    auto loc = Put(*log, "k" + std::to_string(i), Pattern(sizes[i], i));
    ASSERT_TRUE(loc.ok()) << loc.status().ToString();
    EXPECT_EQ(loc->region, 0u);
    EXPECT_EQ(loc->size, sizes[i]);
    locs.push_back(*loc);
  }
  for (size_t i = 0; i < sizes.size(); ++i) {  // from the open buffer
    auto v = Get(*log, locs[i], "k" + std::to_string(i));
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    EXPECT_EQ(*v, Pattern(sizes[i], i));
  }
  EXPECT_EQ(log->stats().flushes, 0u);
  // Nothing reached the device yet.
  EXPECT_EQ(dev->TEST_data()[0], 0);
  ASSERT_TRUE(log->Flush().ok());
  EXPECT_EQ(log->stats().flushes, 1u);
  auto rh = DecodeRegionHeader(dev->TEST_data(), kBlockSize);
  ASSERT_TRUE(rh.ok()) << rh.status().ToString();
  EXPECT_EQ(rh->generation, locs[0].generation);
  for (size_t i = 0; i < sizes.size(); ++i) {  // from the device
    auto v = Get(*log, locs[i], "k" + std::to_string(i));
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    EXPECT_EQ(*v, Pattern(sizes[i], i));
  }
  const RegionLogStats st = log->stats();
  EXPECT_EQ(st.appended_records, sizes.size());
  EXPECT_EQ(st.reads, 2 * sizes.size());
  // Flush of an empty log region is a no-op; the next append opens a new region.
  ASSERT_TRUE(log->Flush().ok());
  EXPECT_EQ(log->stats().flushes, 1u);
  auto next = Put(*log, "after", "x");
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->region, 1u);
  EXPECT_GT(next->generation, locs[0].generation);
}

TEST_F(RegionLogTest, MultiPieceValuesAndScatteredReads) {
  auto dev = MakeDevice(2);
  auto log = Make({dev.get()});
  const std::string whole = Pattern(3 * 4096 + 123, 7);
  std::vector<ConstPiece> pieces = {{whole.data(), 1},
                                    {nullptr, 0},  // empty pieces are allowed, even null
                                    {whole.data() + 1, 4095},
                                    {whole.data() + 4096, 5000},
                                    {whole.data() + 9096, whole.size() - 9096}};
  auto loc = log->Append("multi", pieces);
  ASSERT_TRUE(loc.ok()) << loc.status().ToString();
  EXPECT_EQ(loc->size, whole.size());
  for (int pass = 0; pass < 2; ++pass) {
    std::string a(7, '\0'), b(4096, '\0'), c(whole.size() - 7 - 4096 + 10, '\0');
    ASSERT_TRUE(
        log->Read(*loc, "multi", {{a.data(), a.size()}, {b.data(), b.size()}, {c.data(), c.size()}})
            .ok());
    EXPECT_EQ(a + b + c.substr(0, c.size() - 10), whole);
    EXPECT_EQ(c.substr(c.size() - 10), std::string(10, '\0'));  // past the value: untouched
    std::string small(whole.size() - 1, '\0');
    EXPECT_EQ(log->Read(*loc, "multi", {{small.data(), small.size()}}).code(),
              ErrorCode::BUFFER_OVERFLOW);
    ASSERT_TRUE(log->Flush().ok());
  }
  EXPECT_EQ(log->Append("bad", {{nullptr, 5}}).code(), ErrorCode::INVALID_PARAMS);
  EXPECT_EQ(Put(*log, "", "v").code(), ErrorCode::INVALID_KEY);
  EXPECT_EQ(Put(*log, std::string(5000, 'k'), "v").code(), ErrorCode::INVALID_KEY);
}

TEST_F(RegionLogTest, RecordsAreBlockAlignedAndSpanBoundaries) {
  auto dev = MakeDevice(2);
  auto log = Make({dev.get()});
  const std::string key = "ab";
  const std::vector<uint64_t> sizes = {FillBlocks(2, 1), FillBlocks(2, 1) + 1, 1,
                                       FillBlocks(2, 3) - 1, 3 * kBlockSize};
  // Exactly one block; one byte over (two blocks); one block; just under three; four blocks.
  const std::vector<uint64_t> expected = {4096, 8192, 16384, 20480, 32768};
  std::vector<DiskLocation> locs;
  for (size_t i = 0; i < sizes.size(); ++i) {
    auto loc = Put(*log, key, Pattern(sizes[i], 100 + i));
    ASSERT_TRUE(loc.ok());
    EXPECT_EQ(loc->offset, expected[i]) << i;
    locs.push_back(*loc);
  }
  ASSERT_TRUE(log->Flush().ok());
  for (size_t i = 0; i < sizes.size(); ++i) {
    auto v = Get(*log, locs[i], key);
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    EXPECT_EQ(*v, Pattern(sizes[i], 100 + i));
  }
  // Padding after a record is zeroes on the device.
  const uint8_t* d = dev->TEST_data();
  for (uint64_t b = 4096 + 64 + 2 + sizes[0]; b < 8192; ++b) ASSERT_EQ(d[b], 0);
  for (uint64_t b = 16384 + 64 + 2 + 1; b < 20480; ++b) ASSERT_EQ(d[b], 0);
}

TEST_F(RegionLogTest, RolloverFlushesTheFullRegion) {
  auto dev = MakeDevice(4);
  auto log = Make({dev.get()});
  // 63 blocks of records fit after the header block: 21 records of 3 blocks.
  std::vector<DiskLocation> locs;
  for (int i = 0; i < 22; ++i) {
    auto loc = Put(*log, "r" + std::to_string(i), Pattern(FillBlocks(3, 3), i));
    ASSERT_TRUE(loc.ok());
    locs.push_back(*loc);
  }
  EXPECT_EQ(locs[20].region, 0u);
  EXPECT_EQ(locs[20].offset, kRegion - 3 * kBlockSize);
  EXPECT_EQ(locs[21].region, 1u);
  EXPECT_EQ(locs[21].offset, kFirstRecordOffset);
  // The rollover handed region 0 to the background writer (write_buffers = 2): wait for it.
  for (int i = 0; i < 5000 && log->stats().flushes == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(log->stats().flushes, 1u);
  for (int i = 0; i < 22; ++i) {
    auto v = Get(*log, locs[i], "r" + std::to_string(i));
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    EXPECT_EQ(*v, Pattern(FillBlocks(3, 3), i));
  }
}

TEST_F(RegionLogTest, RecordLargerThanARegionIsRefused) {
  auto dev = MakeDevice(2);
  auto log = Make({dev.get()});
  // The region header's block, the record header's and key's block, then the value.
  const uint64_t max_value = kRegion - 2 * kBlockSize;
  auto too_big = Put(*log, "big", std::string(max_value + 1, 'x'));
  EXPECT_EQ(too_big.code(), ErrorCode::OBJECT_TOO_LARGE);
  EXPECT_NE(too_big.status().message().find("region capacity"), std::string::npos);
  auto fits = Put(*log, "big", Pattern(max_value, 3));
  ASSERT_TRUE(fits.ok()) << fits.status().ToString();
  ASSERT_TRUE(log->Flush().ok());
  auto v = Get(*log, *fits, "big");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, Pattern(max_value, 3));
}

TEST_F(RegionLogTest, CreateRejectsBadGeometry) {
  auto dev = MakeDevice(2);
  auto cb = [](uint32_t, uint64_t, std::vector<std::string>) {};
  EXPECT_EQ(RegionLog::Create({}, Small(), cb).code(), ErrorCode::INVALID_PARAMS);
  EXPECT_EQ(RegionLog::Create({nullptr}, Small(), cb).code(), ErrorCode::INVALID_PARAMS);
  RegionLogOptions o = Small();
  o.region_size = kRegion + 100;
  EXPECT_EQ(RegionLog::Create({dev.get()}, o, cb).code(), ErrorCode::INVALID_PARAMS);
  o.region_size = 4 * kRegion;  // bigger than the device
  EXPECT_EQ(RegionLog::Create({dev.get()}, o, cb).code(), ErrorCode::INVALID_PARAMS);
  o = Small();
  o.write_buffers = 0;
  EXPECT_EQ(RegionLog::Create({dev.get()}, o, cb).code(), ErrorCode::INVALID_PARAMS);
}

TEST_F(RegionLogTest, RegionsAreStripedOverDevices) {
  auto d0 = MakeDevice(3);
  auto d1 = MakeDevice(3);
  auto log = Make({d0.get(), d1.get()});
  ASSERT_EQ(log->num_regions(), 6u);
  for (uint32_t r = 0; r < 6; ++r) {
    EXPECT_EQ(log->region_device(r), r % 2);
    EXPECT_EQ(log->region_base(r), (r / 2) * kRegion);
  }
  // One record filling each region: region r is written at its place on device r % 2.
  std::vector<DiskLocation> locs;
  for (uint32_t r = 0; r < 6; ++r) {
    auto loc = Put(*log, "s" + std::to_string(r), Pattern(FillBlocks(2, 63), r));
    ASSERT_TRUE(loc.ok());
    EXPECT_EQ(loc->region, r);
    locs.push_back(*loc);
  }
  ASSERT_TRUE(log->Flush().ok());
  for (uint32_t r = 0; r < 6; ++r) {
    MemoryDevice* dev = r % 2 == 0 ? d0.get() : d1.get();
    const uint8_t* base = dev->TEST_data() + (r / 2) * kRegion;
    auto rh = DecodeRegionHeader(base, kBlockSize);
    ASSERT_TRUE(rh.ok()) << r;
    EXPECT_EQ(rh->region_index, r);
    const std::string value = Pattern(FillBlocks(2, 63), r);
    // A value this big starts on the block after its header's (disk-format.md).
    EXPECT_EQ(0, std::memcmp(base + kBlockSize + RecordValueOffset(2, value.size()), value.data(),
                             value.size()));
    auto v = Get(*log, locs[r], "s" + std::to_string(r));
    ASSERT_TRUE(v.ok());
    EXPECT_EQ(*v, value);
  }

  // Unequal devices: the smaller one leaves the rotation when full.
  auto big = MakeDevice(3);
  auto small = MakeDevice(1);
  auto log2 = Make({big.get(), small.get()});
  ASSERT_EQ(log2->num_regions(), 4u);
  EXPECT_EQ(log2->region_device(0), 0u);
  EXPECT_EQ(log2->region_device(1), 1u);
  EXPECT_EQ(log2->region_device(2), 0u);
  EXPECT_EQ(log2->region_base(2), kRegion);
  EXPECT_EQ(log2->region_device(3), 0u);
  EXPECT_EQ(log2->region_base(3), 2 * kRegion);
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
  std::vector<DiskLocation> old_locs;
  for (int i = 0; i < 7; ++i) {
    auto loc = Put(*log, "o" + std::to_string(i), Pattern(size, i));
    ASSERT_TRUE(loc.ok());
    old_locs.push_back(*loc);
  }
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
  std::vector<DiskLocation> old_locs;
  for (int i = 0; i < 7; ++i) {
    auto loc = Put(*log, "k", Pattern(size, i));
    ASSERT_TRUE(loc.ok());
    old_locs.push_back(*loc);
  }
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

TEST_F(RegionLogTest, CorruptedDeviceBytesAreChecksumMismatch) {
  auto dev = MakeDevice(2);
  auto log = Make({dev.get()});
  auto a = Put(*log, "a", Pattern(10000, 1));
  auto b = Put(*log, "b", Pattern(10000, 2));
  auto c = Put(*log, "c", Pattern(100, 3));
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  ASSERT_TRUE(log->Flush().ok());
  uint8_t* d = dev->TEST_data();
  d[a->offset + kRecordHeaderSize + 1 + 5000] ^= 0xff;  // a value byte
  d[b->offset + 20] ^= 0x01;                            // a header byte
  d[c->offset + kRecordHeaderSize] ^= 0x01;             // the key byte
  EXPECT_EQ(Get(*log, *a, "a").code(), ErrorCode::CHECKSUM_MISMATCH);
  EXPECT_EQ(Get(*log, *b, "b").code(), ErrorCode::CHECKSUM_MISMATCH);
  EXPECT_EQ(Get(*log, *c, "c").code(), ErrorCode::CHECKSUM_MISMATCH);
  EXPECT_EQ(log->stats().checksum_failures, 3u);
}

// Demotion passes the checksum recorded at PutEnd: the record carries it as given, so bytes
// that no longer match it (changed in memory since the put) are never vouched for.
TEST_F(RegionLogTest, AKnownChecksumIsRecordedAsGivenNotRecomputed) {
  auto dev = MakeDevice(2);
  auto log = Make({dev.get()});
  const std::string good = Pattern(20000, 1), changed = Pattern(20000, 2);
  const uint64_t sum = Checksum(good.data(), good.size());
  auto a = log->Append("a", {ConstPiece{good.data(), good.size()}}, sum);
  // "b" was put as `good` but its memory now holds `changed`.
  auto b = log->Append("b", {ConstPiece{changed.data(), changed.size()}}, sum);
  auto c = log->Append("c", {ConstPiece{good.data(), good.size()}});  // hashed by the log
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  ASSERT_EQ(a->region, c->region);
  // From the open region's buffer, then from the device.
  for (int pass = 0; pass < 2; ++pass) {
    for (const auto& [key, loc] : {std::pair{"a", *a}, std::pair{"c", *c}}) {
      auto got = Get(*log, loc, key);
      ASSERT_TRUE(got.ok()) << key << ": " << got.status().ToString();
      EXPECT_EQ(*got, good);
    }
    EXPECT_EQ(Get(*log, *b, "b").code(), ErrorCode::CHECKSUM_MISMATCH) << "pass " << pass;
    ASSERT_TRUE(log->Flush().ok());
  }
  // Warm restart does not bring the mismatching record back; the records around it come back.
  auto scanned = RegionLog::Scan({dev.get()}, Small());
  ASSERT_TRUE(scanned.ok()) << scanned.status().ToString();
  std::vector<std::string> keys;
  for (const ScannedRecord& r : *scanned) {
    keys.push_back(r.key);
    EXPECT_EQ(r.checksum, sum) << r.key;
  }
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(keys, (std::vector<std::string>{"a", "c"}));
}

TEST_F(RegionLogTest, ReadIoErrorFailsOnlyThatRead) {
  auto faulty = std::make_unique<FaultyDevice>(MakeDevice(2));
  auto log = Make({faulty.get()});
  auto loc = Put(*log, "k", Pattern(20000, 4));
  ASSERT_TRUE(loc.ok());
  ASSERT_TRUE(log->Flush().ok());
  ASSERT_TRUE(faulty->AddFault(FaultRule::Once(FaultKind::kReadEio)).ok());
  auto r = Get(*log, *loc, "k");
  EXPECT_EQ(r.code(), ErrorCode::FILE_READ_FAIL);
  ASSERT_TRUE(faulty->AddFault(FaultRule::Once(FaultKind::kShortRead)).ok());
  EXPECT_EQ(Get(*log, *loc, "k").code(), ErrorCode::FILE_READ_FAIL);
  auto ok = Get(*log, *loc, "k");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(*ok, Pattern(20000, 4));
  EXPECT_EQ(log->stats().read_errors, 2u);
}

// write_buffers = 1: the region write is synchronous, so the call that triggered it reports the
// failure (the background-write contract is BackgroundWriteFailureDropsExactlyThatRegion).
TEST_F(RegionLogTest, FlushErrorsAreSurfacedAndTheLogKeepsWorking) {
  auto faulty = std::make_unique<FaultyDevice>(MakeDevice(3));
  RegionLogOptions options = Small();
  options.write_buffers = 1;
  auto log = Make({faulty.get()}, options);
  // EIO on an explicit Flush.
  auto lost = Put(*log, "lost", Pattern(5000, 1));
  ASSERT_TRUE(lost.ok());
  ASSERT_TRUE(faulty->AddFault(FaultRule::Once(FaultKind::kWriteEio)).ok());
  Status s = log->Flush();
  EXPECT_EQ(s.code(), ErrorCode::FILE_WRITE_FAIL);
  ASSERT_EQ(evicted_.size(), 1u);
  EXPECT_EQ(evicted_[0].keys, std::vector<std::string>{"lost"});
  EXPECT_EQ(Get(*log, *lost, "lost").code(), ErrorCode::OBJECT_NOT_FOUND);

  // ENOSPC on the flush of a rollover: that Append fails, the next ones work.
  std::vector<std::pair<std::string, DiskLocation>> kept;
  for (int i = 0; i < 9; ++i) {
    const std::string key = "e" + std::to_string(i);
    auto loc = Put(*log, key, Pattern(FillBlocks(key.size(), 7), i));
    ASSERT_TRUE(loc.ok());
  }
  ASSERT_TRUE(faulty->AddFault(FaultRule::Once(FaultKind::kWriteEnospc)).ok());
  auto failed = Put(*log, "trigger", "x");
  EXPECT_EQ(failed.code(), ErrorCode::FILE_WRITE_FAIL);
  EXPECT_NE(failed.status().message().find("No space"), std::string::npos);
  ASSERT_EQ(evicted_.size(), 2u);
  EXPECT_EQ(evicted_[1].keys.size(), 9u);
  for (int i = 0; i < 30; ++i) {
    const std::string key = "w" + std::to_string(i);
    auto loc = Put(*log, key, Pattern(FillBlocks(key.size(), 7), i));
    ASSERT_TRUE(loc.ok()) << loc.status().ToString();
    kept.emplace_back(key, *loc);
  }
  ASSERT_TRUE(log->Flush().ok());
  // The last 3 regions' worth of records (27 of 30, minus the evicted) read back.
  int good = 0;
  for (size_t i = 0; i < kept.size(); ++i) {
    auto v = Get(*log, kept[i].second, kept[i].first);
    if (v.ok()) {
      EXPECT_EQ(*v, Pattern(FillBlocks(kept[i].first.size(), 7), static_cast<uint32_t>(i)));
      ++good;
    } else {
      EXPECT_EQ(v.code(), ErrorCode::OBJECT_NOT_FOUND);
    }
  }
  EXPECT_GE(good, 18);
  EXPECT_EQ(log->stats().flush_errors, 2u);
}

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

// ---- Staged reads: ReadRanges ----

// An aligned destination for ranges, pre-filled with a sentinel.
IoBuffer Staging(uint64_t bytes) {
  auto buf = IoBuffer::Allocate(bytes, /*want_huge_pages=*/false);
  EXPECT_TRUE(buf.ok()) << buf.status().ToString();
  std::memset(buf->data(), 0x5a, buf->size());
  return std::move(buf).value();
}

// Reads one range into a fresh buffer of exactly StagingNeed(length) bytes.
Result<std::string> ReadRange(RegionLog& log, const DiskLocation& loc, const std::string& key,
                              uint64_t value_offset, uint64_t length) {
  IoBuffer buf = Staging(StagingNeed(length));
  const uint8_t* value = nullptr;
  RangeRead r{loc, key, value_offset, length, buf.data(), &value};
  Status s = std::move(log.ReadRanges({r})[0]);
  if (!s.ok()) return s;
  EXPECT_NE(value, nullptr);
  EXPECT_GE(value, buf.data());
  EXPECT_LE(value + length,
            buf.data() + RegionLog::RangeReadBytes(key.size(), loc.size, value_offset, length));
  // Nothing past the blocks the range needs was touched.
  for (uint64_t b = RegionLog::RangeReadBytes(key.size(), loc.size, value_offset, length);
       b < buf.size(); ++b) {
    EXPECT_EQ(buf.data()[b], 0x5a) << "byte " << b << " written past the range's blocks";
    if (buf.data()[b] != 0x5a) break;
  }
  return std::string(reinterpret_cast<const char*>(value), length);
}

TEST_F(RegionLogTest, RangeReadBytesFitsStagingNeed) {
  for (uint64_t key :
       {uint64_t{1}, uint64_t{100}, uint64_t{4031}, uint64_t{4032}, uint64_t{kMaxKeyLength}}) {
    for (uint64_t off :
         {uint64_t{0}, uint64_t{1}, uint64_t{4095}, uint64_t{4096}, uint64_t{12345}}) {
      for (uint64_t len : {uint64_t{1}, uint64_t{2}, uint64_t{4095}, uint64_t{4096}, uint64_t{4097},
                           uint64_t{65536}, uint64_t{100001}}) {
        // Values on both sides of the aligned-layout threshold.
        for (uint64_t value : {off + len, off + len + kAlignedValueMin}) {
          const uint64_t need = RegionLog::RangeReadBytes(key, value, off, len);
          EXPECT_LE(need, StagingNeed(len)) << key << " " << value << " " << off << " " << len;
          EXPECT_EQ(need % kBlockSize, 0u);
          EXPECT_GE(need, len);
        }
      }
    }
  }
}

TEST_F(RegionLogTest, ReadRangesWholeAndPartialAreByteExact) {
  auto dev = MakeDevice(2);
  auto log = Make({dev.get()});
  // The last two are block-aligned on disk (RecordValueAligned).
  const std::vector<uint64_t> sizes = {
      1, 100, 4000, FillBlocks(3, 2), 10000, 50000, kAlignedValueMin, 100001};
  std::vector<Written> w;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const std::string key = "k" + std::to_string(i) + std::string(i * 37, 'x');
    const std::string value = Pattern(sizes[i], static_cast<uint32_t>(i));
    auto loc = Put(*log, key, value);
    ASSERT_TRUE(loc.ok()) << loc.status().ToString();
    w.push_back(Written{key, value, *loc});
  }
  for (int pass = 0; pass < 2; ++pass) {  // open buffer, then device
    for (const Written& r : w) {
      const uint64_t n = r.value.size();
      std::vector<std::pair<uint64_t, uint64_t>> ranges = {{0, n}, {0, (n + 1) / 2}};
      if (n > 1) ranges.push_back({1, n - 1});
      if (n > 3000) {
        ranges.push_back({n / 3, n / 3});
        ranges.push_back({n - 1, 1});
      }
      if (n > 9000) {
        ranges.push_back({4096 - 64 - r.key.size(), 4096});  // starts on a block boundary
        ranges.push_back({n - 4097, 4097});
      }
      for (auto [off, len] : ranges) {
        auto v = ReadRange(*log, r.loc, r.key, off, len);
        ASSERT_TRUE(v.ok()) << r.key << " [" << off << ", +" << len
                            << "): " << v.status().ToString();
        EXPECT_EQ(*v, r.value.substr(off, len)) << r.key << " [" << off << ", +" << len << ")";
      }
    }
    ASSERT_TRUE(log->Flush().ok());
  }
  EXPECT_EQ(log->stats().read_errors, 0u);
  EXPECT_GT(log->stats().reads, 2 * w.size());
}

// value_only ranges: the device reads exactly the range into the caller's memory (no header,
// no bytes around it), from the open buffer and from the device; anything not block-aligned
// is refused before any IO; a reused region answers OBJECT_NOT_FOUND.
TEST_F(RegionLogTest, ValueOnlyRangesReadExactlyTheRangeIntoTheCallersBytes) {
  auto dev = MakeDevice(4);
  auto log = Make({dev.get()});
  const std::string key = "direct";
  const std::string value = Pattern(3 * 65536, 9);  // 192 KiB: block-aligned on disk
  auto loc = Put(*log, key, value);
  ASSERT_TRUE(loc.ok()) << loc.status().ToString();
  const std::string odd = Pattern(kAlignedValueMin + 100, 4);  // aligned on disk, odd size
  auto odd_loc = Put(*log, "odd", odd);
  ASSERT_TRUE(odd_loc.ok());
  const std::string small = Pattern(10000, 3);  // packed after its key
  auto small_loc = Put(*log, "small", small);
  ASSERT_TRUE(small_loc.ok());
  ASSERT_TRUE(RegionLog::DirectReadable(value.size(), 0, value.size(), dev->TEST_data()));
  EXPECT_FALSE(RegionLog::DirectReadable(small.size(), 0, 8192, dev->TEST_data()));

  auto read = [&](const DiskLocation& at, const std::string& k, uint64_t off, uint64_t len,
                  uint64_t dst_offset) -> Result<std::string> {
    IoBuffer buf = Staging(len + 3 * 4096);
    const uint8_t* p = nullptr;
    RangeRead r{at, k, off, len, buf.data() + dst_offset, &p};
    r.value_only = true;
    Status st = std::move(log->ReadRanges({r})[0]);
    // Not one byte outside [dst, dst + len) is touched, whatever happened.
    for (uint64_t b = 0; b < buf.size(); ++b) {
      if (b >= dst_offset && b < dst_offset + len) continue;
      EXPECT_EQ(buf.data()[b], 0x5a) << "byte " << b << " outside the range was written";
      if (buf.data()[b] != 0x5a) break;
    }
    if (!st.ok()) return st;
    EXPECT_EQ(p, buf.data() + dst_offset);
    return std::string(reinterpret_cast<const char*>(buf.data() + dst_offset), len);
  };
  for (int pass = 0; pass < 2; ++pass) {  // open buffer, then device
    for (auto [off, len] : std::vector<std::pair<uint64_t, uint64_t>>{
             {0, value.size()}, {65536, 131072}, {4096, 4096}, {value.size() - 4096, 4096}}) {
      auto v = read(*loc, key, off, len, 4096);
      ASSERT_TRUE(v.ok()) << pass << " [" << off << ", +" << len << "): " << v.status().ToString();
      EXPECT_EQ(*v, value.substr(off, len)) << pass << " [" << off << ", +" << len << ")";
    }
    auto head = read(*odd_loc, "odd", 0, kAlignedValueMin, 4096);  // its whole blocks
    ASSERT_TRUE(head.ok()) << head.status().ToString();
    EXPECT_EQ(*head, odd.substr(0, kAlignedValueMin));
    // Refused before any IO: a packed value, an unaligned offset, length or destination, a
    // range past the value (the odd value's last partial block), the wrong key's location.
    EXPECT_EQ(read(*small_loc, "small", 0, 8192, 4096).status().code(), ErrorCode::INVALID_PARAMS);
    EXPECT_EQ(read(*loc, key, 100, 4096, 4096).status().code(), ErrorCode::INVALID_PARAMS);
    EXPECT_EQ(read(*loc, key, 0, 5000, 4096).status().code(), ErrorCode::INVALID_PARAMS);
    EXPECT_EQ(read(*loc, key, 0, 4096, 512).status().code(), ErrorCode::INVALID_PARAMS);
    EXPECT_EQ(read(*odd_loc, "odd", kAlignedValueMin, 4096, 4096).status().code(),
              ErrorCode::INVALID_PARAMS);
    ASSERT_TRUE(log->Flush().ok());
  }
  EXPECT_EQ(log->stats().read_errors, 0u);

  // Fill the log until the first region is reused: its location is stale, never new bytes.
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(Put(*log, "filler" + std::to_string(i), Pattern(3 * 65536, 100 + i)).ok());
  }
  ASSERT_TRUE(log->Flush().ok());
  ASSERT_FALSE(evicted_.empty());
  auto stale = read(*loc, key, 0, value.size(), 4096);
  EXPECT_EQ(stale.status().code(), ErrorCode::OBJECT_NOT_FOUND) << stale.status().ToString();
}

TEST_F(RegionLogTest, ReadRangesStreamsAnObjectThroughASmallBuffer) {
  auto dev = MakeDevice(2);
  auto log = Make({dev.get()});
  const std::string key = "streamed";
  const std::string value = Pattern(100000, 42);
  auto loc = Put(*log, key, value);
  ASSERT_TRUE(loc.ok());
  ASSERT_TRUE(log->Flush().ok());
  // A requester with a 5-block budget pulls the value in pieces of StagingNeed(12288) bytes.
  const uint64_t piece = 12288;
  IoBuffer buf = Staging(StagingNeed(piece));
  std::string out;
  for (uint64_t off = 0; off < value.size(); off += piece) {
    const uint64_t len = std::min<uint64_t>(piece, value.size() - off);
    const uint8_t* p = nullptr;
    Status s = std::move(log->ReadRanges({RangeRead{*loc, key, off, len, buf.data(), &p}})[0]);
    ASSERT_TRUE(s.ok()) << off << ": " << s.ToString();
    out.append(reinterpret_cast<const char*>(p), len);
  }
  EXPECT_EQ(out, value);
  EXPECT_EQ(Checksum(out.data(), out.size()), Checksum(value.data(), value.size()));
  // The same pieces in one batch, laid out back to back.
  std::vector<RangeRead> batch;
  std::vector<const uint8_t*> ptrs(9, nullptr);
  IoBuffer all = Staging(9 * StagingNeed(piece));
  for (uint64_t i = 0, off = 0; off < value.size(); ++i, off += piece) {
    batch.push_back(RangeRead{*loc, key, off, std::min<uint64_t>(piece, value.size() - off),
                              all.data() + i * StagingNeed(piece), &ptrs[i]});
  }
  ASSERT_EQ(batch.size(), 9u);
  std::vector<Status> st = log->ReadRanges(batch);
  std::string joined;
  for (size_t i = 0; i < batch.size(); ++i) {
    ASSERT_TRUE(st[i].ok()) << i << ": " << st[i].ToString();
    joined.append(reinterpret_cast<const char*>(ptrs[i]), batch[i].length);
  }
  EXPECT_EQ(joined, value);
}

TEST_F(RegionLogTest, ReadRangesMixesOpenSealedAndBadRangesIndependently) {
  auto d0 = MakeDevice(2);
  auto d1 = MakeDevice(2);
  auto log = Make({d0.get(), d1.get()});
  auto sealed = Fill(*log, "s", 0, 18);  // regions 0 (d0) and 1 (d1) sealed
  auto open = Fill(*log, "o", 0, 2);     // region 2 open
  ASSERT_EQ(open.size(), 2u);
  ASSERT_EQ(open[0].loc.region, 2u);
  ASSERT_EQ(sealed[0].loc.region, 0u);
  ASSERT_EQ(sealed[17].loc.region, 1u);
  IoBuffer buf = Staging(8 * StagingNeed(30000));
  auto at = [&](int i) { return buf.data() + i * StagingNeed(30000); };
  std::vector<const uint8_t*> p(8, nullptr);
  const Written& a = sealed[3];
  const Written& b = sealed[12];
  const Written& c = open[1];
  std::vector<RangeRead> batch = {
      {a.loc, a.key, 0, a.value.size(), at(0), &p[0]},
      {b.loc, b.key, 777, 20000, at(1), &p[1]},
      {c.loc, c.key, 0, 10, at(2), &p[2]},
      {c.loc, c.key, 5000, 20000, at(3), &p[3]},
      {a.loc, a.key, 1, a.value.size(), at(4), &p[4]},  // past the value's end
      {a.loc, "", 0, 1, at(5), &p[5]},                  // bad key
      {a.loc, a.key, 0, 1, at(6) + 512, &p[6]},         // unaligned dst
      {b.loc, "s3", 0, 1, at(7), &p[7]},                // another key's location
  };
  // The callback hears of each range once (from one thread per device, so under a mutex),
  // with its final status and, when OK, its bytes already in place.
  std::mutex mu;
  std::vector<int> calls(batch.size(), 0);
  std::vector<ErrorCode> seen(batch.size(), ErrorCode::OK);
  std::vector<std::string> early(batch.size());
  std::vector<Status> st = log->ReadRanges(batch, [&](size_t i, const Status& s) {
    std::lock_guard lock(mu);
    ++calls[i];
    seen[i] = s.code();
    if (s.ok() && p[i] != nullptr) {
      early[i].assign(reinterpret_cast<const char*>(p[i]), std::min<uint64_t>(batch[i].length, 64));
    }
  });
  ASSERT_EQ(st.size(), batch.size());
  for (size_t i = 0; i < batch.size(); ++i) {
    EXPECT_EQ(calls[i], 1) << i;
    EXPECT_EQ(seen[i], st[i].code()) << i;
    if (st[i].ok()) {
      EXPECT_EQ(early[i], std::string(reinterpret_cast<const char*>(p[i]), early[i].size())) << i;
      EXPECT_FALSE(early[i].empty()) << i;
    }
  }
  ASSERT_TRUE(st[0].ok()) << st[0].ToString();
  ASSERT_TRUE(st[1].ok()) << st[1].ToString();
  ASSERT_TRUE(st[2].ok()) << st[2].ToString();
  ASSERT_TRUE(st[3].ok()) << st[3].ToString();
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(p[0]), a.value.size()), a.value);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(p[1]), 20000), b.value.substr(777, 20000));
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(p[2]), 10), c.value.substr(0, 10));
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(p[3]), 20000), c.value.substr(5000, 20000));
  EXPECT_EQ(st[4].code(), ErrorCode::INVALID_PARAMS);
  EXPECT_EQ(st[5].code(), ErrorCode::INVALID_KEY);
  EXPECT_EQ(st[6].code(), ErrorCode::INVALID_PARAMS);
  EXPECT_EQ(st[7].code(), ErrorCode::OBJECT_NOT_FOUND);
  EXPECT_EQ(p[4], nullptr);
  // A zero-length range checks the header and key only; a zero-length range inside the value
  // names nothing.
  std::vector<Status> zero =
      log->ReadRanges({{a.loc, a.key, 0, 0, at(0), nullptr}, {a.loc, a.key, 5, 0, at(1), nullptr}});
  EXPECT_TRUE(zero[0].ok()) << zero[0].ToString();
  EXPECT_EQ(zero[1].code(), ErrorCode::INVALID_PARAMS);
  EXPECT_TRUE(log->ReadRanges({}).empty());
}

// Passes reads and writes to a MemoryDevice and counts the reads, for a read-device test.
class CountingDevice final : public Device {
 public:
  explicit CountingDevice(Device* inner)
      : Device(inner->size(), inner->alignment()), inner_(inner) {}
  std::atomic<uint64_t> reads{0};

 protected:
  Status DoRead(uint64_t offset, void* buf, uint64_t len) override {
    ++reads;
    return inner_->Read(offset, buf, len);
  }
  Status DoWrite(uint64_t offset, const void* buf, uint64_t len) override {
    return inner_->Write(offset, buf, len);
  }

 private:
  Device* inner_;
};

TEST_F(RegionLogTest, ReadRangesBatchPerDeviceAndReadDevices) {
  auto m0 = MakeDevice(2);
  auto m1 = MakeDevice(2);
  CountingDevice w0(m0.get()), w1(m1.get());  // what the log writes through
  CountingDevice r0(m0.get()), r1(m1.get());  // what it must read through
  auto created = RegionLog::Create({&w0, &w1}, Small(), nullptr, {&r0, &r1});
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  RegionLog& log = **created;
  auto w = Fill(log, "d", 0, 18);  // region 0 on device 0, region 1 on device 1
  ASSERT_TRUE(log.Flush().ok());
  IoBuffer buf = Staging(w.size() * StagingNeed(30000));
  std::vector<RangeRead> batch;
  std::vector<const uint8_t*> p(w.size(), nullptr);
  for (size_t i = 0; i < w.size(); ++i) {
    batch.push_back(RangeRead{w[i].loc, w[i].key, 0, w[i].value.size(),
                              buf.data() + i * StagingNeed(30000), &p[i]});
  }
  std::vector<Status> st = log.ReadRanges(batch);
  for (size_t i = 0; i < w.size(); ++i) {
    ASSERT_TRUE(st[i].ok()) << i << ": " << st[i].ToString();
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(p[i]), w[i].value.size()), w[i].value);
  }
  EXPECT_EQ(r0.reads.load(), 9u);
  EXPECT_EQ(r1.reads.load(), 9u);
  EXPECT_EQ(w0.reads.load() + w1.reads.load(), 0u);  // no read went to the write devices
  auto v = Get(log, w[4].loc, w[4].key);             // Read() too
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(r0.reads.load(), 10u);
  // Read devices must match the devices one to one.
  auto cb = [](uint32_t, uint64_t, std::vector<std::string>) {};
  EXPECT_EQ(RegionLog::Create({&w0, &w1}, Small(), cb, {&r0}).code(), ErrorCode::INVALID_PARAMS);
  EXPECT_EQ(RegionLog::Create({&w0, &w1}, Small(), cb, {&r0, nullptr}).code(),
            ErrorCode::INVALID_PARAMS);
  auto small = MakeDevice(1);
  EXPECT_EQ(RegionLog::Create({&w0}, Small(), cb, {small.get()}).code(), ErrorCode::INVALID_PARAMS);
  EXPECT_EQ(RegionLog::Recover({&w0, &w1}, Small(), cb, nullptr, {&r1}).code(),
            ErrorCode::INVALID_PARAMS);
}

TEST_F(RegionLogTest, ReadRangesAfterReuseAreNotFound) {
  auto dev = MakeDevice(2);
  auto log = Make({dev.get()});
  const uint64_t size = FillBlocks(2, 9);
  std::vector<DiskLocation> old_locs;
  for (int i = 0; i < 7; ++i) {
    auto loc = Put(*log, "o" + std::to_string(i), Pattern(size, i));
    ASSERT_TRUE(loc.ok());
    old_locs.push_back(*loc);
  }
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
  std::vector<DiskLocation> old_locs;
  for (int i = 0; i < 7; ++i) {
    auto loc = Put(*log, "k", Pattern(size, i));
    ASSERT_TRUE(loc.ok());
    old_locs.push_back(*loc);
  }
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

TEST_F(RegionLogTest, ReadRangesCheckHeaderAndKeyButNotTheValue) {
  auto dev = MakeDevice(2);
  auto log = Make({dev.get()});
  auto a = Put(*log, "a", Pattern(10000, 1));
  auto b = Put(*log, "b", Pattern(10000, 2));
  auto c = Put(*log, "c", Pattern(100, 3));
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  ASSERT_TRUE(log->Flush().ok());
  uint8_t* d = dev->TEST_data();
  d[b->offset + 20] ^= 0x01;                            // a header byte
  d[c->offset + kRecordHeaderSize] ^= 0x01;             // the key byte
  d[a->offset + kRecordHeaderSize + 1 + 5000] ^= 0xff;  // a value byte
  EXPECT_EQ(ReadRange(*log, *b, "b", 0, 10000).code(), ErrorCode::CHECKSUM_MISMATCH);
  EXPECT_EQ(ReadRange(*log, *c, "c", 0, 100).code(), ErrorCode::CHECKSUM_MISMATCH);
  EXPECT_EQ(log->stats().checksum_failures, 2u);
  // The value is the requester's to verify (one hash, against the object checksum) ...
  auto v = ReadRange(*log, *a, "a", 0, 10000);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_NE(*v, Pattern(10000, 1));
  EXPECT_NE(Checksum(v->data(), v->size()), Checksum(Pattern(10000, 1).data(), 10000));
  // ... while Read() still verifies it.
  EXPECT_EQ(Get(*log, *a, "a").code(), ErrorCode::CHECKSUM_MISMATCH);
  EXPECT_EQ(log->stats().checksum_failures, 3u);
}

TEST_F(RegionLogTest, ReadRangesIoErrorFailsOnlyThatRangeAndTheNextCallWorks) {
  auto faulty = std::make_unique<FaultyDevice>(MakeDevice(2));
  auto log = Make({faulty.get()});
  auto w = Fill(*log, "f", 0, 3);
  ASSERT_TRUE(log->Flush().ok());
  IoBuffer buf = Staging(3 * StagingNeed(30000));
  std::vector<const uint8_t*> p(3, nullptr);
  std::vector<RangeRead> batch;
  for (size_t i = 0; i < 3; ++i) {
    batch.push_back(
        RangeRead{w[i].loc, w[i].key, i * 1000, 20000, buf.data() + i * StagingNeed(30000), &p[i]});
  }
  for (FaultKind kind : {FaultKind::kReadEio, FaultKind::kShortRead}) {
    ASSERT_TRUE(faulty->AddFault(FaultRule::Once(kind)).ok());
    std::vector<Status> st = log->ReadRanges(batch);
    EXPECT_EQ(st[0].code(), ErrorCode::FILE_READ_FAIL);
    for (size_t i = 1; i < 3; ++i) {
      ASSERT_TRUE(st[i].ok()) << st[i].ToString();
      EXPECT_EQ(std::string(reinterpret_cast<const char*>(p[i]), 20000),
                w[i].value.substr(i * 1000, 20000));
    }
    std::vector<Status> again = log->ReadRanges(batch);
    for (size_t i = 0; i < 3; ++i) {
      ASSERT_TRUE(again[i].ok()) << again[i].ToString();
      EXPECT_EQ(std::string(reinterpret_cast<const char*>(p[i]), 20000),
                w[i].value.substr(i * 1000, 20000));
    }
  }
  EXPECT_EQ(log->stats().read_errors, 2u);
  EXPECT_EQ(faulty->counters().read_eio, 1u);
  EXPECT_EQ(faulty->counters().short_read, 1u);
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

// Background region writes (write_buffers = 2, the default).

// Passes IO to a MemoryDevice; while held, writes wait in DoWrite until released, so a region
// stays "flushing" for as long as a test needs. fail_next makes the next write fail (EIO).
class GateDevice final : public Device {
 public:
  explicit GateDevice(std::unique_ptr<MemoryDevice> inner)
      : Device(inner->size(), inner->alignment()), inner_(std::move(inner)) {}
  MemoryDevice& inner() { return *inner_; }
  void Hold() {
    std::lock_guard lock(mu_);
    held_ = true;
  }
  void Release() {
    std::lock_guard lock(mu_);
    held_ = false;
    cv_.notify_all();
  }
  void FailNext() {
    std::lock_guard lock(mu_);
    fail_next_ = true;
  }
  // Waits until `n` writes have entered DoWrite.
  void WaitForWritesStarted(uint64_t n) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return started_ >= n; });
  }
  uint64_t writes_done() {
    std::lock_guard lock(mu_);
    return done_;
  }

 protected:
  Status DoRead(uint64_t offset, void* buf, uint64_t len) override {
    return inner_->Read(offset, buf, len);
  }
  Status DoWrite(uint64_t offset, const void* buf, uint64_t len) override {
    bool fail = false;
    {
      std::unique_lock lock(mu_);
      fail = std::exchange(fail_next_, false);  // taken by the write that enters next
      ++started_;
      cv_.notify_all();
      cv_.wait(lock, [&] { return !held_; });
    }
    Status s = fail ? Status(ErrorCode::FILE_WRITE_FAIL, "injected write failure")
                    : inner_->Write(offset, buf, len);
    std::lock_guard lock(mu_);
    ++done_;
    cv_.notify_all();
    return s;
  }

 private:
  std::unique_ptr<MemoryDevice> inner_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool held_ = false;
  bool fail_next_ = false;
  uint64_t started_ = 0;
  uint64_t done_ = 0;
};

void ExpectReadsBack(RegionLog& log, const std::vector<Written>& written) {
  for (const Written& w : written) {
    std::string out(w.loc.size, '\0');
    Status s = log.Read(w.loc, w.key, {MutPiece{out.data(), out.size()}});
    ASSERT_TRUE(s.ok()) << w.key << ": " << s.ToString();
    EXPECT_EQ(out, w.value) << w.key;
  }
}

TEST_F(RegionLogTest, FlushingRegionIsReadableFromItsBufferAndAppendsContinue) {
  GateDevice dev(MakeDevice(4));
  auto log = Make({&dev});
  dev.Hold();
  std::vector<Written> first = Fill(*log, "a", 0, 9);  // region 0 full
  ASSERT_EQ(first.size(), 9u);
  // The 10th record seals region 0: its write starts and is held; appends go on in region 1.
  std::vector<Written> second = Fill(*log, "b", 0, 8);
  ASSERT_EQ(second.size(), 8u);
  EXPECT_EQ(second[0].loc.region, 1u);
  dev.WaitForWritesStarted(1);
  EXPECT_EQ(dev.writes_done(), 0u);
  EXPECT_EQ(log->stats().flushes, 0u);
  EXPECT_EQ(log->stats().buffer_waits, 0u);
  // Nothing of region 0 is on the device yet: these reads come from the flushing buffer.
  const uint8_t* d = dev.inner().TEST_data();
  EXPECT_TRUE(std::all_of(d, d + kRegion, [](uint8_t b) { return b == 0; }));
  ExpectReadsBack(*log, first);
  ExpectReadsBack(*log, second);
  // Same checks as the open region: another key, or an offset naming no record, is not found.
  EXPECT_EQ(Get(*log, first[0].loc, "other").code(), ErrorCode::OBJECT_NOT_FOUND);
  DiskLocation inside = first[1].loc;
  inside.offset += kBlockSize;
  EXPECT_EQ(Get(*log, inside, "a1").code(), ErrorCode::OBJECT_NOT_FOUND);
  // Staged reads of the flushing region: a whole value (header checked) and a partial range.
  auto buf = IoBuffer::Allocate(2 * StagingNeed(kRegion), /*want_huge_pages=*/false);
  ASSERT_TRUE(buf.ok());
  const Written& w = first[4];
  const uint8_t* whole = nullptr;
  const uint8_t* part = nullptr;
  std::vector<Status> st = log->ReadRanges(
      {RangeRead{w.loc, w.key, 0, w.loc.size, buf->data(), &whole},
       RangeRead{w.loc, w.key, 5000, 3000, buf->data() + StagingNeed(kRegion), &part},
       RangeRead{w.loc, "zz", 0, w.loc.size, buf->data(), nullptr}});
  ASSERT_TRUE(st[0].ok()) << st[0].ToString();
  ASSERT_TRUE(st[1].ok()) << st[1].ToString();
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(whole), w.loc.size), w.value);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(part), 3000), w.value.substr(5000, 3000));
  EXPECT_EQ(st[2].code(), ErrorCode::OBJECT_NOT_FOUND);

  dev.Release();
  ASSERT_TRUE(log->Flush().ok());
  EXPECT_EQ(log->stats().flushes, 2u);
  EXPECT_EQ(dev.writes_done(), 2u);
  ExpectReadsBack(*log, first);  // now from the device
  ExpectReadsBack(*log, second);
  EXPECT_TRUE(evicted_.empty());
}

TEST_F(RegionLogTest, AppendWaitsWhenEveryBufferIsBusy) {
  GateDevice dev(MakeDevice(4));
  auto log = Make({&dev});
  dev.Hold();
  std::vector<Written> written = Fill(*log, "k", 0, 18);  // regions 0 (flushing) and 1 full
  ASSERT_EQ(written.size(), 18u);
  dev.WaitForWritesStarted(1);
  // The next record seals region 1 (queued behind region 0) and needs a third buffer.
  std::atomic<bool> returned{false};
  Result<DiskLocation> blocked = Status(ErrorCode::INTERNAL_ERROR, "not run");
  const std::string value = Pattern(1000, 77);
  std::thread appender([&] {
    blocked = log->Append("blocked", {ConstPiece{value.data(), value.size()}});
    returned = true;
  });
  while (log->stats().buffer_waits == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(returned.load());
  // Both busy regions stay readable from their buffers meanwhile.
  ExpectReadsBack(*log, written);
  dev.Release();
  appender.join();
  ASSERT_TRUE(blocked.ok()) << blocked.status().ToString();
  EXPECT_EQ(blocked->region, 2u);
  EXPECT_EQ(log->stats().buffer_waits, 1u);
  ASSERT_TRUE(log->Flush().ok());
  EXPECT_EQ(log->stats().flushes, 3u);
  ExpectReadsBack(*log, written);
  auto v = Get(*log, *blocked, "blocked");
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(*v, value);
}

TEST_F(RegionLogTest, AppendWaitsForAFlushingRegionWhenNoneIsFreeOrSealed) {
  // One region, two buffers: the next region is the flushing one, once it is sealed.
  GateDevice dev(MakeDevice(1));
  auto log = Make({&dev});
  dev.Hold();
  std::vector<Written> written = Fill(*log, "k", 0, 9);
  ASSERT_EQ(written.size(), 9u);
  std::thread releaser([&] {
    dev.WaitForWritesStarted(1);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    dev.Release();
  });
  auto next = Put(*log, "next", "value");  // seals region 0, waits for it, evicts it
  releaser.join();
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_EQ(next->region, 0u);
  ASSERT_EQ(evicted_.size(), 1u);
  EXPECT_EQ(evicted_[0].keys.size(), 9u);
  EXPECT_EQ(Get(*log, written[0].loc, "k0").code(), ErrorCode::OBJECT_NOT_FOUND);
  ASSERT_TRUE(log->Flush().ok());
  EXPECT_EQ(*Get(*log, *next, "next"), "value");
}

TEST_F(RegionLogTest, BackgroundWriteFailureDropsExactlyThatRegion) {
  GateDevice dev(MakeDevice(4));
  auto log = Make({&dev});
  std::vector<Written> kept = Fill(*log, "a", 0, 9);  // region 0
  dev.Hold();
  std::vector<Written> lost = Fill(*log, "b", 0, 9);  // region 0 flushing (held), region 1
  ASSERT_EQ(lost.size(), 9u);
  dev.WaitForWritesStarted(1);
  dev.FailNext();  // region 0's write (already entered) succeeds ...
  dev.Release();
  // ... region 1's fails: Append does not see it.
  std::vector<Written> after = Fill(*log, "c", 0, 3);
  ASSERT_EQ(after.size(), 3u);
  // Flush waits for both and reports the failure once.
  Status s = log->Flush();
  EXPECT_EQ(s.code(), ErrorCode::FILE_WRITE_FAIL);
  EXPECT_NE(s.message().find("injected"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("region 1"), std::string::npos) << s.ToString();
  EXPECT_EQ(log->stats().flush_errors, 1u);
  ASSERT_EQ(evicted_.size(), 1u);
  EXPECT_EQ(evicted_[0].region, 1u);
  std::vector<std::string> lost_keys;
  for (const Written& w : lost) lost_keys.push_back(w.key);
  EXPECT_EQ(evicted_[0].keys, lost_keys);
  for (const Written& w : lost) {
    EXPECT_EQ(Get(*log, w.loc, w.key).code(), ErrorCode::OBJECT_NOT_FOUND) << w.key;
  }
  ExpectReadsBack(*log, kept);
  ExpectReadsBack(*log, after);
  EXPECT_TRUE(log->Flush().ok());  // reported once
  // The failed region is free again (reused by `after` or `more`, as their timing has it, under
  // a new generation) and the next writes work.
  std::vector<Written> more = Fill(*log, "d", 0, 5);
  ASSERT_EQ(more.size(), 5u);
  const Written& reused = after[0].loc.region == 1 ? after[0] : more[0];
  EXPECT_EQ(reused.loc.region, 1u);
  EXPECT_GT(reused.loc.generation, lost[0].loc.generation);
  ASSERT_TRUE(log->Flush().ok());
  ExpectReadsBack(*log, more);
  EXPECT_EQ(log->stats().flush_errors, 1u);
}

TEST_F(RegionLogTest, DestructorWaitsForTheWriteInFlightAndDropsTheOpenRegion) {
  auto mem = MakeDevice(4);
  MemoryDevice* raw = mem.get();
  GateDevice dev(std::move(mem));
  auto log = Make({&dev});
  dev.Hold();
  std::vector<Written> written = Fill(*log, "k", 0, 10);  // region 0 flushing, 1 record open
  ASSERT_EQ(written.size(), 10u);
  dev.WaitForWritesStarted(1);
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    dev.Release();
  });
  log.reset();
  releaser.join();
  EXPECT_EQ(dev.writes_done(), 1u);  // region 0 only; the open region is dropped
  auto found = RegionLog::Scan({raw}, Small());
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  auto by_key = ByKey(*found);
  EXPECT_EQ(by_key.size(), 9u);
  for (int i = 0; i < 9; ++i) {
    ASSERT_TRUE(by_key.count(written[i].key)) << written[i].key;
    EXPECT_TRUE(SameLocation(by_key[written[i].key].location, written[i].loc));
  }
  EXPECT_FALSE(by_key.count(written[9].key));
}

TEST_F(RegionLogTest, OneWriteBufferWritesInline) {
  GateDevice dev(MakeDevice(4));
  RegionLogOptions options = Small();
  options.write_buffers = 1;
  auto log = Make({&dev}, options);
  std::vector<Written> written = Fill(*log, "k", 0, 10);
  ASSERT_EQ(written.size(), 10u);
  // The rollover wrote region 0 before the 10th Append returned.
  EXPECT_EQ(dev.writes_done(), 1u);
  EXPECT_EQ(log->stats().flushes, 1u);
  ASSERT_TRUE(log->Flush().ok());
  EXPECT_EQ(dev.writes_done(), 2u);
  ExpectReadsBack(*log, written);
}

}  // namespace
}  // namespace tierkv
