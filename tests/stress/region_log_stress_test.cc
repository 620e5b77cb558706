// Readers racing appends, region rollovers and evictions on the SSD tier's region log: every
// read (Read, or a range of a ReadRanges batch) that succeeds must return exactly the bytes
// appended under its key and location; otherwise it may only be OBJECT_NOT_FOUND (region
// reused) — never another tenant's bytes.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "device/io_buffer.h"
#include "device/memory_device.h"
#include "ssd/record_format.h"
#include "ssd/region_log.h"
#include "ssd/staging_area.h"

namespace tierkv {
namespace {

constexpr uint64_t kRegion = 64 * 1024;

std::string Pattern(size_t n, uint32_t seed) {
  std::string s(n, '\0');
  uint32_t x = seed * 2654435761u + 777;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    s[i] = static_cast<char>(x >> 24);
  }
  return s;
}

TEST(RegionLogStressTest, ReadersRaceAppendsAndEvictions) {
  auto d0 = MemoryDevice::Create(3 * kRegion);
  auto d1 = MemoryDevice::Create(3 * kRegion);
  ASSERT_TRUE(d0.ok() && d1.ok());
  for (auto policy : {RegionEvictionPolicy::kFifo, RegionEvictionPolicy::kLru}) {
    RegionLogOptions options;
    options.region_size = kRegion;
    options.eviction = policy;
    options.want_huge_pages = false;
    std::atomic<uint64_t> evicted_keys{0};
    auto log = RegionLog::Create(
        {d0->get(), d1->get()}, options,
        [&](uint32_t, uint64_t, std::vector<std::string> keys) { evicted_keys += keys.size(); });
    ASSERT_TRUE(log.ok()) << log.status().ToString();
    RegionLog& rl = **log;

    struct Entry {
      std::string key;
      DiskLocation loc;
      uint32_t seed;
    };
    std::mutex mu;
    std::vector<Entry> entries;  // guarded by mu
    std::atomic<bool> stop{false};
    std::atomic<uint64_t> ok_reads{0}, not_found{0}, failures{0};

    std::thread writer([&] {
      std::mt19937 rng(1);
      for (uint32_t i = 0; i < 1000; ++i) {
        const std::string key = "key-" + std::to_string(i);
        const size_t size = rng() % (3 * kBlockSize);
        const std::string value = Pattern(size, i);
        auto loc = rl.Append(key, {ConstPiece{value.data(), value.size()}});
        if (!loc.ok()) {
          ++failures;
          continue;
        }
        {
          std::lock_guard lock(mu);
          entries.push_back({key, *loc, i});
        }
        if (i % 97 == 0 && !rl.Flush().ok()) ++failures;
      }
      stop = true;
    });
    std::vector<std::thread> readers;
    for (int t = 0; t < 3; ++t) {
      readers.emplace_back([&, t] {
        std::mt19937 rng(100 + t);
        std::string out;
        while (!stop) {
          Entry e;
          {
            std::lock_guard lock(mu);
            if (entries.empty()) continue;
            // Mostly recent entries (open buffer, fresh regions), some old (being evicted).
            const size_t n = entries.size();
            const size_t back = rng() % 2 ? rng() % std::min<size_t>(n, 40) : rng() % n;
            e = entries[n - 1 - back];
          }
          out.assign(e.loc.size, '\0');
          Status s = rl.Read(e.loc, e.key, {MutPiece{out.data(), out.size()}});
          if (s.ok()) {
            if (out != Pattern(e.loc.size, e.seed)) {
              ++failures;
              ADD_FAILURE() << "wrong bytes for " << e.key;
            }
            ++ok_reads;
          } else if (s.code() == ErrorCode::OBJECT_NOT_FOUND) {
            ++not_found;
          } else {
            ++failures;
            ADD_FAILURE() << e.key << ": " << s.ToString();
          }
        }
      });
    }
    writer.join();
    for (auto& r : readers) r.join();
    EXPECT_EQ(failures.load(), 0u);
    EXPECT_GT(ok_reads.load(), 0u);
    EXPECT_GT(not_found.load(), 0u);  // old entries were read after their region's reuse
    std::printf("policy %d: %llu ok reads, %llu not found\n", static_cast<int>(policy),
                static_cast<unsigned long long>(ok_reads.load()),
                static_cast<unsigned long long>(not_found.load()));
    EXPECT_GT(rl.stats().evicted_regions, 0u);
    EXPECT_GT(evicted_keys.load(), 0u);
  }
}

// Staged reads (ReadRanges) racing region evictions: batches of whole and partial ranges of
// recent and old records, while a writer keeps rolling regions over. Every range that
// succeeds must hold exactly the bytes appended; a failed one may only be OBJECT_NOT_FOUND.
TEST(RegionLogStressTest, ReadRangesRaceRegionEvictions) {
  auto d0 = MemoryDevice::Create(3 * kRegion);
  auto d1 = MemoryDevice::Create(3 * kRegion);
  ASSERT_TRUE(d0.ok() && d1.ok());
  RegionLogOptions options;
  options.region_size = kRegion;
  options.want_huge_pages = false;
  auto log = RegionLog::Create({d0->get(), d1->get()}, options, nullptr);
  ASSERT_TRUE(log.ok()) << log.status().ToString();
  RegionLog& rl = **log;

  struct Entry {
    std::string key;
    DiskLocation loc;
    uint32_t seed;
  };
  std::mutex mu;
  std::vector<Entry> entries;  // guarded by mu
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> ok_ranges{0}, not_found{0}, failures{0};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);

  std::thread writer([&] {
    std::mt19937 rng(7);
    for (uint32_t i = 0; i < 1500 && std::chrono::steady_clock::now() < deadline; ++i) {
      const std::string key = "r-" + std::to_string(i);
      const size_t size = 1 + rng() % (3 * kBlockSize);
      const std::string value = Pattern(size, i);
      auto loc = rl.Append(key, {ConstPiece{value.data(), value.size()}});
      if (!loc.ok()) {
        ++failures;
        continue;
      }
      {
        std::lock_guard lock(mu);
        entries.push_back({key, *loc, i});
      }
      if (i % 13 == 0 && !rl.Flush().ok()) ++failures;
    }
    stop = true;
  });
  constexpr size_t kBatch = 8;
  std::vector<std::thread> readers;
  for (int t = 0; t < 3; ++t) {
    readers.emplace_back([&, t] {
      std::mt19937 rng(200 + t);
      const uint64_t slot = StagingNeed(3 * kBlockSize);
      auto buf = IoBuffer::Allocate(kBatch * slot, /*want_huge_pages=*/false);
      if (!buf.ok()) {
        ++failures;
        return;
      }
      while (!stop) {
        std::vector<Entry> picked;
        {
          std::lock_guard lock(mu);
          if (entries.size() < kBatch) continue;
          const size_t n = entries.size();
          for (size_t k = 0; k < kBatch; ++k) {
            const size_t back = rng() % 2 ? rng() % std::min<size_t>(n, 30) : rng() % n;
            picked.push_back(entries[n - 1 - back]);
          }
        }
        std::vector<RangeRead> batch;
        std::vector<const uint8_t*> values(kBatch, nullptr);
        for (size_t k = 0; k < kBatch; ++k) {
          const uint64_t size = picked[k].loc.size;
          // Half whole values (header checked), half partial ranges (generation only).
          const uint64_t off = k % 2 == 0 ? 0 : rng() % size;
          const uint64_t len = k % 2 == 0 ? size : 1 + rng() % (size - off);
          batch.push_back(RangeRead{picked[k].loc, picked[k].key, off, len, buf->data() + k * slot,
                                    &values[k]});
        }
        std::vector<Status> st = rl.ReadRanges(batch);
        for (size_t k = 0; k < kBatch; ++k) {
          if (st[k].ok()) {
            const std::string want = Pattern(picked[k].loc.size, picked[k].seed)
                                         .substr(batch[k].value_offset, batch[k].length);
            if (std::memcmp(values[k], want.data(), want.size()) != 0) {
              ++failures;
              ADD_FAILURE() << "wrong bytes for " << picked[k].key << " [" << batch[k].value_offset
                            << ", +" << batch[k].length << ")";
            }
            ++ok_ranges;
          } else if (st[k].code() == ErrorCode::OBJECT_NOT_FOUND) {
            ++not_found;
          } else {
            ++failures;
            ADD_FAILURE() << picked[k].key << ": " << st[k].ToString();
          }
        }
      }
    });
  }
  writer.join();
  for (auto& r : readers) r.join();
  EXPECT_EQ(failures.load(), 0u);
  EXPECT_GT(ok_ranges.load(), 0u);
  EXPECT_GT(not_found.load(), 0u);
  EXPECT_GT(rl.stats().evicted_regions, 0u);
  std::printf("ReadRanges: %llu ok ranges, %llu not found\n",
              static_cast<unsigned long long>(ok_ranges.load()),
              static_cast<unsigned long long>(not_found.load()));
}

}  // namespace
}  // namespace tierkv
