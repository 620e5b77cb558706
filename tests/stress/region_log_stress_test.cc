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

#include "device/device.h"
#include "device/io_buffer.h"
#include "device/memory_device.h"
#include "pattern_test_util.h"
#include "ssd/record_format.h"
#include "ssd/region_log.h"
#include "ssd/staging_area.h"

namespace tierkv {
namespace {

using test_util::Pattern;

constexpr uint64_t kRegion = 64 * 1024;

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

// A MemoryDevice whose writes take a while (so regions stay "flushing" for many reads) and
// every `fail_every`-th of which fails.
class SlowDevice final : public Device {
 public:
  SlowDevice(std::unique_ptr<MemoryDevice> inner, uint64_t fail_every)
      : Device(inner->size(), inner->alignment()),
        inner_(std::move(inner)),
        fail_every_(fail_every) {}
  std::atomic<uint64_t> failed{0};

 protected:
  Status DoRead(uint64_t offset, void* buf, uint64_t len) override {
    return inner_->Read(offset, buf, len);
  }
  Status DoWrite(uint64_t offset, const void* buf, uint64_t len) override {
    std::this_thread::sleep_for(std::chrono::microseconds(500));
    if (++writes_ % fail_every_ == 0) {
      ++failed;
      return Status(ErrorCode::FILE_WRITE_FAIL, "injected write failure");
    }
    return inner_->Write(offset, buf, len);
  }

 private:
  std::unique_ptr<MemoryDevice> inner_;
  const uint64_t fail_every_;
  std::atomic<uint64_t> writes_{0};
};

// Readers (Read and ReadRanges) racing appends while full regions are written in the
// background by a slow device, some writes failing: a success is always the appended bytes,
// a failure only OBJECT_NOT_FOUND (region reused, or its write failed); failed writes are
// reported through the callback and by Flush, never by Append.
TEST(RegionLogStressTest, ReadersRaceBackgroundFlushes) {
  auto m0 = MemoryDevice::Create(3 * kRegion);
  auto m1 = MemoryDevice::Create(3 * kRegion);
  ASSERT_TRUE(m0.ok() && m1.ok());
  SlowDevice d0(std::move(m0).value(), 7);
  SlowDevice d1(std::move(m1).value(), 11);
  RegionLogOptions options;
  options.region_size = kRegion;
  options.want_huge_pages = false;
  options.write_buffers = 2;
  std::atomic<uint64_t> dropped_keys{0};
  auto log = RegionLog::Create(
      {&d0, &d1}, options,
      [&](uint32_t, uint64_t, std::vector<std::string> keys) { dropped_keys += keys.size(); });
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
  std::atomic<uint64_t> ok_reads{0}, not_found{0}, failures{0}, flush_failures{0};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);

  std::thread writer([&] {
    std::mt19937 rng(11);
    for (uint32_t i = 0; i < 3000 && std::chrono::steady_clock::now() < deadline; ++i) {
      const std::string key = "f-" + std::to_string(i);
      const std::string value = Pattern(1 + rng() % (3 * kBlockSize), i);
      auto loc = rl.Append(key, {ConstPiece{value.data(), value.size()}});
      if (!loc.ok()) {
        ++failures;
        ADD_FAILURE() << key << ": " << loc.status().ToString();
        continue;
      }
      {
        std::lock_guard lock(mu);
        entries.push_back({key, *loc, i});
      }
      if (i % 151 == 0) {
        Status s = rl.Flush();
        if (s.code() == ErrorCode::FILE_WRITE_FAIL) {
          ++flush_failures;
        } else if (!s.ok()) {
          ++failures;
        }
      }
    }
    if (rl.Flush().code() == ErrorCode::FILE_WRITE_FAIL) ++flush_failures;
    stop = true;
  });
  constexpr size_t kBatch = 6;
  std::vector<std::thread> readers;
  for (int t = 0; t < 3; ++t) {
    readers.emplace_back([&, t] {
      std::mt19937 rng(300 + t);
      const uint64_t slot = StagingNeed(3 * kBlockSize);
      auto buf = IoBuffer::Allocate(kBatch * slot, /*want_huge_pages=*/false);
      if (!buf.ok()) {
        ++failures;
        return;
      }
      std::string out;
      while (!stop) {
        std::vector<Entry> picked;
        {
          std::lock_guard lock(mu);
          if (entries.size() < kBatch) continue;
          const size_t n = entries.size();
          for (size_t k = 0; k < kBatch; ++k) {
            // Mostly the last two regions' worth (open and flushing), some older.
            const size_t back = rng() % 4 ? rng() % std::min<size_t>(n, 50) : rng() % n;
            picked.push_back(entries[n - 1 - back]);
          }
        }
        auto check = [&](const Status& s, const Entry& e, const uint8_t* got, uint64_t off,
                         uint64_t len) {
          if (s.ok()) {
            const std::string want = Pattern(e.loc.size, e.seed).substr(off, len);
            if (std::memcmp(got, want.data(), len) != 0) {
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
        };
        // One plain Read, then a batch of whole and partial ranges.
        out.assign(picked[0].loc.size, '\0');
        Status s = rl.Read(picked[0].loc, picked[0].key, {MutPiece{out.data(), out.size()}});
        check(s, picked[0], reinterpret_cast<const uint8_t*>(out.data()), 0, picked[0].loc.size);
        std::vector<RangeRead> batch;
        std::vector<const uint8_t*> values(kBatch, nullptr);
        for (size_t k = 0; k < kBatch; ++k) {
          const uint64_t size = picked[k].loc.size;
          const uint64_t off = k % 2 == 0 ? 0 : rng() % size;
          const uint64_t len = k % 2 == 0 ? size : 1 + rng() % (size - off);
          batch.push_back(RangeRead{picked[k].loc, picked[k].key, off, len, buf->data() + k * slot,
                                    &values[k]});
        }
        std::vector<Status> st = rl.ReadRanges(batch);
        for (size_t k = 0; k < kBatch; ++k) {
          check(st[k], picked[k], values[k], batch[k].value_offset, batch[k].length);
        }
      }
    });
  }
  writer.join();
  for (auto& r : readers) r.join();
  const RegionLogStats stats = rl.stats();
  EXPECT_EQ(failures.load(), 0u);
  EXPECT_GT(ok_reads.load(), 0u);
  EXPECT_GT(stats.flushes, 0u);
  EXPECT_EQ(stats.flush_errors, d0.failed.load() + d1.failed.load());
  EXPECT_GT(stats.flush_errors, 0u);
  EXPECT_GT(flush_failures.load(), 0u);
  EXPECT_GT(dropped_keys.load(), 0u);
  std::printf(
      "background flushes: %llu ok reads, %llu not found, %llu flushes, %llu failed, "
      "%llu buffer waits\n",
      static_cast<unsigned long long>(ok_reads.load()),
      static_cast<unsigned long long>(not_found.load()),
      static_cast<unsigned long long>(stats.flushes),
      static_cast<unsigned long long>(stats.flush_errors),
      static_cast<unsigned long long>(stats.buffer_waits));
}

}  // namespace
}  // namespace tierkv
