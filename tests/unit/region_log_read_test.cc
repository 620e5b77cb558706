// The region log's reads over MemoryDevice/FaultyDevice: corruption (CHECKSUM_MISMATCH), IO
// errors, and staged reads (ReadRanges): whole, partial and value-only ranges, streaming
// through a small buffer, open, sealed and bad ranges in one batch, one batch per device and
// read devices, header and key checks, and IO errors that fail only their range.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
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
#include "tierkv/types.h"

namespace tierkv::region_log_test {
namespace {

// Three flushed records, one byte of each then flipped on the device: a value byte of "a"
// (10000 bytes), a header byte of "b" (10000 bytes) and the key byte of "c" (100 bytes).
struct Corrupted {
  DiskLocation a, b, c;
};
std::optional<Corrupted> PutAndCorrupt(RegionLog& log, MemoryDevice& dev) {
  auto put = [&](const std::string& key, size_t size, uint32_t seed) {
    const std::string value = Pattern(size, seed);
    return log.Append(key, {ConstPiece{value.data(), value.size()}});
  };
  auto a = put("a", 10000, 1);
  auto b = put("b", 10000, 2);
  auto c = put("c", 100, 3);
  EXPECT_TRUE(a.ok() && b.ok() && c.ok());
  if (!a.ok() || !b.ok() || !c.ok()) return std::nullopt;
  Status flushed = log.Flush();
  EXPECT_TRUE(flushed.ok()) << flushed.ToString();
  if (!flushed.ok()) return std::nullopt;
  uint8_t* d = dev.TEST_data();
  d[a->offset + kRecordHeaderSize + 1 + 5000] ^= 0xff;  // a value byte
  d[b->offset + 20] ^= 0x01;                            // a header byte
  d[c->offset + kRecordHeaderSize] ^= 0x01;             // the key byte
  return Corrupted{*a, *b, *c};
}

TEST_F(RegionLogTest, CorruptedDeviceBytesAreChecksumMismatch) {
  auto dev = MakeDevice(2);
  auto log = Make({dev.get()});
  const std::optional<Corrupted> corrupted = PutAndCorrupt(*log, *dev);
  ASSERT_TRUE(corrupted);
  EXPECT_EQ(Get(*log, corrupted->a, "a").code(), ErrorCode::CHECKSUM_MISMATCH);
  EXPECT_EQ(Get(*log, corrupted->b, "b").code(), ErrorCode::CHECKSUM_MISMATCH);
  EXPECT_EQ(Get(*log, corrupted->c, "c").code(), ErrorCode::CHECKSUM_MISMATCH);
  EXPECT_EQ(log->stats().checksum_failures, 3u);
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

TEST_F(RegionLogTest, ReadRangesCheckHeaderAndKeyButNotTheValue) {
  auto dev = MakeDevice(2);
  auto log = Make({dev.get()});
  const std::optional<Corrupted> corrupted = PutAndCorrupt(*log, *dev);
  ASSERT_TRUE(corrupted);
  EXPECT_EQ(ReadRange(*log, corrupted->b, "b", 0, 10000).code(), ErrorCode::CHECKSUM_MISMATCH);
  EXPECT_EQ(ReadRange(*log, corrupted->c, "c", 0, 100).code(), ErrorCode::CHECKSUM_MISMATCH);
  EXPECT_EQ(log->stats().checksum_failures, 2u);
  // The value is the requester's to verify (one hash, against the object checksum) ...
  auto v = ReadRange(*log, corrupted->a, "a", 0, 10000);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_NE(*v, Pattern(10000, 1));
  EXPECT_NE(Checksum(v->data(), v->size()), Checksum(Pattern(10000, 1).data(), 10000));
  // ... while Read() still verifies it.
  EXPECT_EQ(Get(*log, corrupted->a, "a").code(), ErrorCode::CHECKSUM_MISMATCH);
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

}  // namespace
}  // namespace tierkv::region_log_test
