// Puts, gets and removes racing on one embedded client whose small segment and small SSD
// tier keep demotion, staged loads and disk region reuse busy all the time. Every byte read
// is verified against the key's known content: a read is byte-exact or a clean error,
// never wrong bytes. Run under TSan in CI.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <random>
#include <thread>

#include "client/client_impl.h"
#include "device_test_util.h"

namespace tierkv {
namespace {

// Every third key has whole 4 KiB blocks of at least kAlignedValueMin bytes: read into an
// aligned buffer it takes the direct path (SsdTier::ReadDirect), the others are staged.
size_t OffloadSizeOf(int n) {
  if (n % 3 == 0) return (16 + static_cast<size_t>(n % 13)) * 4096;
  return 8192 + static_cast<size_t>(n % 29) * 9000;
}
void OffloadFill(int n, uint8_t* out, size_t size) {
  uint64_t x = static_cast<uint64_t>(n) * 0x9E3779B97F4A7C15ull + 7;
  for (size_t i = 0; i < size; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(out + i, &x, std::min<size_t>(8, size - i));
  }
}

TEST(ClientOffloadStress, ReadsRacingDemotionAndRegionReuseAreExactOrClean) {
  test_util::ScratchDir dir;
  Config c;
  c.global_segment_size = 4ull << 20;
  c.use_huge_pages = false;
  c.transfer_threads = 2;
  c.enable_offload = true;
  c.offload_paths = {dir.File("a.tier"), dir.File("b.tier")};
  c.offload_capacity = 4ull << 20;  // 2 x 4 regions: reused all the time
  c.offload_region_size = 1ull << 20;
  c.staging_buffer_size = 1ull << 20;
  c.default_kv_lease_ttl_ms = 50;
  c.put_start_discard_timeout_ms = 2000;
  auto client = ClientImpl::CreateEmbedded(c);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  ClientImpl& cl = **client;

  constexpr int kKeys = 120, kThreads = 4, kOps = 400;
  std::atomic<uint64_t> exact{0}, missing{0}, wrong{0}, other{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t) {
    workers.emplace_back([&, t] {
      std::mt19937 rng(99 + t);
      std::vector<uint8_t> src(1 << 20), expect(1 << 20);
      // Odd threads read into a block-aligned buffer (direct loads), even ones into a
      // misaligned one (staged loads).
      std::vector<uint8_t> storage((1 << 20) + 8192);
      uint8_t* aligned = reinterpret_cast<uint8_t*>(
          (reinterpret_cast<uintptr_t>(storage.data()) + 4095) & ~uintptr_t{4095});
      uint8_t* const dst = t % 2 == 1 ? aligned : aligned + 8;
      // Batches of 3 keys into 3 aligned slots of 320 KiB (direct loads of several objects).
      constexpr size_t kSlot = 320 << 10;
      std::vector<uint8_t> batch_storage(3 * kSlot + 4096);
      uint8_t* const slots = reinterpret_cast<uint8_t*>(
          (reinterpret_cast<uintptr_t>(batch_storage.data()) + 4095) & ~uintptr_t{4095});
      ASSERT_TRUE(cl.RegisterBuffer(slots, 3 * kSlot).ok());
      for (int op = 0; op < kOps; ++op) {
        const int n = static_cast<int>(rng() % kKeys);
        const std::string key = "stress-" + std::to_string(n);
        const size_t size = OffloadSizeOf(n);
        const unsigned what = rng() % 10;
        if (what < 4) {
          OffloadFill(n, src.data(), size);
          (void)cl.Put(key, src.data(), size);
        } else if (what == 8) {
          std::vector<std::string> keys;
          std::vector<std::vector<void*>> ptrs;
          std::vector<std::vector<size_t>> sizes;
          for (int k = 0; k < 3; ++k) {
            const int m = (n / 3 * 3 + 3 * k) % kKeys;  // keys with whole 4 KiB blocks
            keys.push_back("stress-" + std::to_string(m));
            ptrs.push_back({slots + k * kSlot});
            sizes.push_back({OffloadSizeOf(m)});  // batch gets take exact sizes
          }
          const std::vector<int64_t> got = cl.BatchGetIntoMultiBuffers(keys, ptrs, sizes);
          for (int k = 0; k < 3; ++k) {
            const int m = (n / 3 * 3 + 3 * k) % kKeys;
            if (got[k] == static_cast<int64_t>(OffloadSizeOf(m))) {
              OffloadFill(m, expect.data(), OffloadSizeOf(m));
              if (std::memcmp(slots + k * kSlot, expect.data(), OffloadSizeOf(m)) == 0) {
                ++exact;
              } else {
                ++wrong;
              }
            } else if (got[k] == ToInt(ErrorCode::OBJECT_NOT_FOUND)) {
              ++missing;
            } else {
              ++other;
            }
          }
        } else if (what < 9) {
          const int64_t got = cl.Get(key, dst, 1 << 20);
          if (got == static_cast<int64_t>(size)) {
            OffloadFill(n, expect.data(), size);
            if (std::memcmp(dst, expect.data(), size) == 0) {
              ++exact;
            } else {
              ++wrong;
            }
          } else if (got == ToInt(ErrorCode::OBJECT_NOT_FOUND)) {
            ++missing;
          } else {
            ++other;  // e.g. LEASE_EXPIRED, NO_AVAILABLE_HANDLE: clean errors
          }
        } else {
          (void)cl.Remove(key, /*force=*/rng() % 2 == 0);
        }
      }
    });
  }
  for (auto& w : workers) w.join();
  EXPECT_EQ(wrong.load(), 0u);
  EXPECT_GT(exact.load(), 0u);
  const auto st = cl.in_process_master()->master().Stats();
  EXPECT_GT(st.demoted_objects, 0u);
  EXPECT_GT(cl.store()->tier()->stats().log.evicted_regions, 0u);
  EXPECT_GT(cl.store()->tier()->stats().direct_reads, 0u);
  EXPECT_GT(cl.store()->tier()->stats().staged_pieces, 0u);
  std::printf("exact %lu missing %lu other %lu demoted %lu regions reused %lu direct %lu\n",
              static_cast<unsigned long>(exact.load()), static_cast<unsigned long>(missing.load()),
              static_cast<unsigned long>(other.load()),
              static_cast<unsigned long>(st.demoted_objects),
              static_cast<unsigned long>(cl.store()->tier()->stats().log.evicted_regions),
              static_cast<unsigned long>(cl.store()->tier()->stats().direct_reads));
}

}  // namespace
}  // namespace tierkv
