// The region log's append and flush paths over MemoryDevice/FaultyDevice: byte-exact append
// and read back (open buffer and device), multi-piece values, block alignment, rollover,
// oversized records, geometry errors, striping over devices, a caller's known checksum, flush
// errors, and the background region writes (write_buffers >= 2: reads of a flushing region,
// appends waiting for a buffer, a failed background write, the destructor; and inline writes).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/checksum.h"
#include "device/faulty_device.h"
#include "device/io_buffer.h"
#include "device/memory_device.h"
#include "region_log_test_util.h"
#include "ssd/record_format.h"
#include "ssd/region_log.h"
#include "ssd/staging_area.h"

namespace tierkv::region_log_test {
namespace {

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
  // As WaitForWritesStarted, giving up after `timeout`: whether they started.
  bool WaitForWritesStartedFor(uint64_t n, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return started_ >= n; });
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

// Striping: with a buffer per device plus one, each device writes a region at the same time
// (one flusher per device); with a single writer the second device's write would wait for the
// first's.
TEST_F(RegionLogTest, TwoDevicesWriteTheirRegionsAtOnce) {
  GateDevice dev0(MakeDevice(2));
  GateDevice dev1(MakeDevice(2));
  RegionLogOptions options = Small();
  options.write_buffers = 3;
  auto log = Make({&dev0, &dev1}, options);
  dev0.Hold();
  dev1.Hold();
  std::vector<Written> written = Fill(*log, "a", 0, 9);  // region 0 (device 0) full
  std::vector<Written> more = Fill(*log, "b", 0, 9);     // seals region 0; fills region 1
  std::vector<Written> last = Fill(*log, "c", 0, 1);     // seals region 1 (device 1)
  ASSERT_EQ(more.size(), 9u);
  ASSERT_EQ(last.size(), 1u);
  EXPECT_EQ(more[0].loc.region, 1u);
  EXPECT_EQ(last[0].loc.region, 2u);
  EXPECT_TRUE(dev0.WaitForWritesStartedFor(1, std::chrono::seconds(10)));
  EXPECT_TRUE(dev1.WaitForWritesStartedFor(1, std::chrono::seconds(10)))
      << "device 1's region write did not start while device 0's was in flight";
  EXPECT_EQ(log->stats().buffer_waits, 0u);
  dev0.Release();
  dev1.Release();
  ASSERT_TRUE(log->Flush().ok());
  EXPECT_EQ(dev0.writes_done(), 2u);  // regions 0 and 2
  EXPECT_EQ(dev1.writes_done(), 1u);
  written.insert(written.end(), more.begin(), more.end());
  written.insert(written.end(), last.begin(), last.end());
  ExpectReadsBack(*log, written);
}

}  // namespace
}  // namespace tierkv::region_log_test
