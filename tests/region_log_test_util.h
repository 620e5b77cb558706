// Shared by the region log's unit tests (tests/unit/region_log_*_test.cc): small regions over
// MemoryDevices, the RegionLogTest fixture (a log whose eviction callback records what it
// reports), and helpers to fill regions and read ranges back.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "device/device.h"
#include "device/io_buffer.h"
#include "device/memory_device.h"
#include "pattern_test_util.h"
#include "ssd/record_format.h"
#include "ssd/region_log.h"
#include "ssd/staging_area.h"

namespace tierkv::region_log_test {

using test_util::Pattern;

inline constexpr uint64_t kRegion = 256 * 1024;

inline std::unique_ptr<MemoryDevice> MakeDevice(uint64_t regions) {
  auto dev = MemoryDevice::Create(regions * kRegion);
  EXPECT_TRUE(dev.ok()) << dev.status().ToString();
  return std::move(dev).value();
}

inline RegionLogOptions Small(RegionEvictionPolicy policy = RegionEvictionPolicy::kFifo) {
  RegionLogOptions o;
  o.region_size = kRegion;
  o.eviction = policy;
  o.want_huge_pages = false;
  return o;
}

// Value size that makes a record with a key of `key_size` bytes fill exactly `blocks` blocks.
inline uint64_t FillBlocks(size_t key_size, uint64_t blocks) {
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
inline std::vector<Written> Fill(RegionLog& log, const std::string& prefix, int first, int n) {
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

inline std::map<std::string, ScannedRecord> ByKey(const std::vector<ScannedRecord>& records) {
  std::map<std::string, ScannedRecord> m;
  for (const auto& r : records) {
    EXPECT_TRUE(m.emplace(r.key, r).second) << "duplicate " << r.key;
  }
  return m;
}

inline bool SameLocation(const DiskLocation& a, const DiskLocation& b) {
  return a.region == b.region && a.generation == b.generation && a.offset == b.offset &&
         a.size == b.size;
}

// An aligned destination for ranges, pre-filled with a sentinel.
inline IoBuffer Staging(uint64_t bytes) {
  auto buf = IoBuffer::Allocate(bytes, /*want_huge_pages=*/false);
  EXPECT_TRUE(buf.ok()) << buf.status().ToString();
  std::memset(buf->data(), 0x5a, buf->size());
  return std::move(buf).value();
}

// Reads one range into a fresh buffer of exactly StagingNeed(length) bytes.
inline Result<std::string> ReadRange(RegionLog& log, const DiskLocation& loc,
                                     const std::string& key, uint64_t value_offset,
                                     uint64_t length) {
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

}  // namespace tierkv::region_log_test
