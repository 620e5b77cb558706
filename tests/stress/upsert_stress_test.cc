// Readers racing upserts of the same keys (run under TSan in CI): every get returns exactly
// one version's bytes, never a mix, while writers publish new versions back to back and the
// maintenance thread frees replaced versions once their leases end.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "client/client_impl.h"

namespace tierkv {
namespace {

// Version v of key k: a size and a content that are functions of (k, v) alone; the first 8
// bytes carry v so a reader knows what the rest must be.
size_t SizeOf(uint64_t v) { return (16u << 10) + (v % 5) * 4096 + 24; }
void Fill(int k, uint64_t v, uint8_t* out) {
  const size_t size = SizeOf(v);
  std::memcpy(out, &v, 8);
  for (size_t i = 8; i + 8 <= size; i += 8) {
    const uint64_t word = (v << 32) ^ (static_cast<uint64_t>(k) << 24) ^ i;
    std::memcpy(out + i, &word, 8);
  }
}
bool Check(int k, const uint8_t* data, int64_t n) {
  if (n < 8) return false;
  uint64_t v;
  std::memcpy(&v, data, 8);
  if (static_cast<size_t>(n) != SizeOf(v)) return false;
  for (size_t i = 8; i + 8 <= static_cast<size_t>(n); i += 8) {
    const uint64_t word = (v << 32) ^ (static_cast<uint64_t>(k) << 24) ^ i;
    if (std::memcmp(data + i, &word, 8) != 0) return false;
  }
  return true;
}

TEST(UpsertStress, ReadersNeverSeeAMixOfVersions) {
  MasterOptions opts;
  opts.shards = 8;
  opts.lease_ttl = Millis(2000);
  auto master = std::make_shared<InProcessMaster>(opts, Millis(5));
  Config config;
  config.global_segment_size = 32ull << 20;
  config.use_huge_pages = false;
  config.transfer_threads = 2;
  auto made = ClientImpl::CreateEmbedded(config, master);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  ClientImpl& client = **made;
  constexpr int kKeys = 2;
  constexpr int kVersions = 250;
  constexpr uint64_t kMinReads = 200;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  std::atomic<bool> done{false};
  std::atomic<uint64_t> reads{0}, mixed{0}, upserts{0}, busy{0};
  std::atomic<int> ready{0};
  std::vector<std::thread> readers, writers;
  for (int r = 0; r < 4; ++r) {
    readers.emplace_back([&, r] {
      std::vector<uint8_t> buf(64 << 10);
      Status reg = client.RegisterBuffer(buf.data(), buf.size());
      ++ready;
      ASSERT_TRUE(reg.ok()) << reg.ToString();
      bool seen_a_version = false;
      while (!done.load()) {
        const int k = r % kKeys;
        const std::string key = "key-" + std::to_string(k);
        const int64_t n = r < 2 ? client.Get(key, buf.data(), buf.size())
                                : client.BatchGetInto({key}, {buf.data()}, {buf.size()})[0];
        // Before the first version is complete the key is absent, then its first put is in
        // progress (REPLICA_IS_NOT_READY). Once a version was read, every later get must
        // succeed: an upsert keeps the old version readable until the new one is published.
        if (!seen_a_version && (n == ToInt(ErrorCode::OBJECT_NOT_FOUND) ||
                                n == ToInt(ErrorCode::REPLICA_IS_NOT_READY))) {
          continue;
        }
        EXPECT_GT(n, 0) << "get of " << key << " failed";
        if (n <= 0) break;
        seen_a_version = true;
        ++reads;
        if (!Check(k, buf.data(), n)) ++mixed;
      }
      EXPECT_TRUE(client.UnregisterBuffer(buf.data()).ok());
    });
  }
  while (ready.load() < 4) std::this_thread::yield();  // readers race from the first upsert
  for (int k = 0; k < kKeys; ++k) {
    writers.emplace_back([&, k] {
      std::vector<uint8_t> buf(64 << 10);
      const std::string key = "key-" + std::to_string(k);
      // At least kVersions, and on until the readers have raced some of them: on a loaded
      // machine the writers can finish before a reader thread first runs.
      for (uint64_t v = 1; v <= kVersions || (reads.load() < kMinReads &&
                                              std::chrono::steady_clock::now() < deadline);
           ++v) {
        Fill(k, v, buf.data());
        const int rc = client.Upsert(key, buf.data(), SizeOf(v));
        if (rc == 0) {
          ++upserts;
        } else {
          ++busy;  // e.g. NO_AVAILABLE_HANDLE while many old versions are still leased
        }
      }
    });
  }
  for (auto& t : writers) t.join();
  done = true;
  for (auto& t : readers) t.join();
  EXPECT_EQ(mixed.load(), 0u);
  EXPECT_GE(reads.load(), kMinReads);
  EXPECT_GT(upserts.load(), static_cast<uint64_t>(kKeys * kVersions / 2)) << busy.load();
  // The last version of every key is what a get returns now.
  std::vector<uint8_t> buf(64 << 10);
  for (int k = 0; k < kKeys; ++k) {
    const int64_t n = client.Get("key-" + std::to_string(k), buf.data(), buf.size());
    ASSERT_TRUE(Check(k, buf.data(), n));
  }
}

}  // namespace
}  // namespace tierkv
