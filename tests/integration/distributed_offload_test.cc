// Multi-process tests of SSD tiers in stores: a `tierkv master`, `tierkv store` processes with
// enable_offload (their tier files in a scratch directory on the build tree's filesystem) and
// requesters in this process. The master demotes into a store's tier over the TierMoves stream;
// requesters load disk replicas through the store's UCX server (staged loads), whatever their
// memory transport.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "device_test_util.h"
#include "distributed_test_util.h"
#include "http_test_util.h"
#include "size_units.h"

namespace tierkv {
namespace {

using namespace dist_test;  // NOLINT: the shared helpers
using test_util::ScratchDir;

// A store config with an SSD tier in `dir`: a 48 MiB tier file in `region` regions.
std::string WriteStoreConfig(const ScratchDir& dir, const std::string& extra = "",
                             const std::string& staging = "4MiB",
                             const std::string& region = "1MiB") {
  const std::string path = dir.File("store.json");
  std::ofstream out(path);
  out << "{\"enable_offload\": true, \"offload_paths\": [\"" << dir.File("store.tier")
      << "\"], \"offload_capacity\": \"48MiB\", \"offload_region_size\": \"" << region
      << "\", \"staging_buffer_size\": \"" << staging
      << "\", \"use_huge_pages\": false, \"offload_allow_buffered_io\": true" << extra << "}";
  return path;
}

// Disk-only objects among `keys` (replica descriptors with no memory replica).
size_t DiskOnly(Client& c, const std::vector<std::string>& keys) {
  size_t n = 0;
  for (const auto& descs : c.BatchGetReplicaDesc(keys)) {
    if (!descs.ok()) continue;
    const bool memory = std::any_of(descs->begin(), descs->end(), [](const ReplicaDesc& d) {
      return d.tier == ReplicaTier::kMemory;
    });
    n += !memory && !descs->empty();
  }
  return n;
}

std::vector<std::string> Keys(int n, const std::string& prefix = "kv/") {
  std::vector<std::string> keys;
  for (int i = 0; i < n; ++i) keys.push_back(prefix + std::to_string(i));
  return keys;
}

// The value of a store metric, or -1.
double StoreMetric(const MasterProcess& store, const std::string& series) {
  const http_test::HttpResponse r = http_test::HttpGet(store.metrics_port(), "/metrics");
  return http_test::Sample(r.body, series).value_or(-1);
}

// A master, one store whose config is `store_config` (its SSD tier) and a requester over
// `protocol`; `master`, `store` and `requester` null if any failed to start.
struct OffloadCluster {
  std::unique_ptr<MasterProcess> master, store;
  std::unique_ptr<Client> requester;
  bool ok() const { return master && store && requester; }
};
OffloadCluster StartOffloadCluster(const std::string& store_config,
                                   const std::string& protocol = "tcp",
                                   std::vector<std::string> master_args = {},
                                   const std::string& segment = "8MiB", bool metrics = false) {
  OffloadCluster c;
  c.master = StartMaster(std::move(master_args));
  if (c.master) c.store = StartStore(*c.master, segment, metrics, {"--config", store_config});
  if (c.store) c.requester = Requester(RequesterConfig(*c.master, protocol));
  return c;
}

class DistributedOffloadTest : public ::testing::TestWithParam<std::string> {};
INSTANTIATE_TEST_SUITE_P(Transports, DistributedOffloadTest, ::testing::Values("shm", "tcp"),
                         [](const auto& test_info) { return test_info.param; });

TEST_P(DistributedOffloadTest, EvictionDemotesToTheStoresTierAndGetsLoadItBack) {
  ScratchDir dir;
  OffloadCluster c = StartOffloadCluster(WriteStoreConfig(dir), GetParam(), {}, "8MiB", true);
  ASSERT_TRUE(c.ok());
  MasterProcess& master = *c.master;
  Client& requester = *c.requester;

  // 16 MiB of objects into an 8 MiB segment: the oldest are demoted to make room.
  const auto keys = Keys(64);
  for (int i = 0; i < 64; ++i) ASSERT_EQ(PutKey(requester, keys[i], i), 0) << keys[i];
  const size_t on_disk = DiskOnly(requester, keys);
  EXPECT_GE(on_disk, 24u);
  EXPECT_GT(StoreMetric(*c.store, "tierkv_store_ssd_tier_move_requests_total"), 0);
  EXPECT_GT(StoreMetric(*c.store, "tierkv_store_ssd_appended_records_total"), 23);

  // Every object reads back byte-exact, from memory or from the store's tier; a second
  // requester in another protocol sees the same.
  for (int i = 0; i < 64; ++i) EXPECT_EQ(GetKey(requester, keys[i], i), kObject) << keys[i];
  EXPECT_GE(StoreMetric(*c.store, "tierkv_store_ssd_staged_bytes_total"),
            static_cast<double>(on_disk * kObject));
  auto other = Requester(RequesterConfig(master, GetParam() == "shm" ? "tcp" : "shm"));
  ASSERT_NE(other, nullptr);
  for (int i = 0; i < 64; i += 7) EXPECT_EQ(GetKey(*other, keys[i], i), kObject) << keys[i];

  // A batch of disk objects in several pieces each, in one call.
  std::vector<std::string> batch;
  for (const auto& k : keys) {
    if (DiskOnly(requester, {k}) == 1) batch.push_back(k);
  }
  ASSERT_FALSE(batch.empty());
  std::vector<std::string> bufs(batch.size(), std::string(kObject, '\0'));
  std::vector<std::vector<void*>> ptrs;
  std::vector<std::vector<size_t>> sizes;
  for (auto& b : bufs) {
    ptrs.push_back({b.data(), b.data() + 1000, b.data() + 100 * 1024});
    sizes.push_back({1000, 100 * 1024 - 1000, kObject - 100 * 1024});
  }
  const auto got = requester.BatchGetIntoMultiBuffers(batch, ptrs, sizes);
  for (size_t k = 0; k < batch.size(); ++k) {
    const int seed = std::stoi(batch[k].substr(3));
    EXPECT_EQ(got[k], static_cast<int64_t>(kObject)) << batch[k];
    EXPECT_TRUE(bufs[k] == Pattern(kObject, seed)) << batch[k];
  }
}

TEST(DistributedOffload, AnObjectLargerThanTheStagingBufferStreamsThroughIt) {
  ScratchDir dir;
  // A 1 MiB staging buffer; 3 MiB objects go through it in ranges.
  OffloadCluster c = StartOffloadCluster(WriteStoreConfig(dir, "", "1MiB", "8MiB"));
  ASSERT_TRUE(c.ok());
  Client& requester = *c.requester;
  constexpr size_t kBig = 3 * kMiB + 12345;
  const auto keys = Keys(5, "big/");
  for (int i = 0; i < 5; ++i) {
    const std::string v = Pattern(kBig, 100 + i);
    ASSERT_EQ(requester.Put(keys[i], v.data(), v.size()), 0) << keys[i];
  }
  ASSERT_GE(DiskOnly(requester, keys), 2u);
  for (int i = 0; i < 5; ++i) {
    std::string buf(kBig, '\0');
    EXPECT_EQ(requester.Get(keys[i], buf.data(), buf.size()), static_cast<int64_t>(kBig));
    EXPECT_TRUE(buf == Pattern(kBig, 100 + i)) << keys[i];
  }
}

TEST(DistributedOffload, AKilledStoresDiskReplicasFailCleanlyAndAreDropped) {
  ScratchDir dir;
  OffloadCluster c = StartOffloadCluster(WriteStoreConfig(dir), "tcp", {"--client-ttl-ms", "1500"});
  ASSERT_TRUE(c.ok());
  Client& requester = *c.requester;
  const auto keys = Keys(48);
  for (int i = 0; i < 48; ++i) ASSERT_EQ(PutKey(requester, keys[i], i), 0);
  ASSERT_GT(DiskOnly(requester, keys), 0u);
  c.store->Kill();
  for (int i = 0; i < 48; ++i) {
    const int64_t got = GetKey(requester, keys[i], i);
    EXPECT_LT(got, 0) << keys[i];
    EXPECT_NE(got, -1000) << keys[i] << ": wrong bytes";
  }
  // After client_ttl the master has dropped the dead store's replicas, disk ones included.
  EXPECT_TRUE(Eventually(
      [&] {
        const auto exist = requester.BatchIsExist(keys);
        return std::count(exist.begin(), exist.end(), 1) == 0;
      },
      std::chrono::seconds(10)));
}

TEST(DistributedOffload, AStoreKilledDuringStagedLoadsNeverYieldsWrongBytes) {
  ScratchDir dir;
  OffloadCluster c = StartOffloadCluster(WriteStoreConfig(dir));
  ASSERT_TRUE(c.ok());
  Client& requester = *c.requester;
  const auto keys = Keys(96);
  for (int i = 0; i < 96; ++i) ASSERT_EQ(PutKey(requester, keys[i], i), 0);
  std::vector<std::string> on_disk;
  std::vector<int> seeds;
  for (int i = 0; i < 96; ++i) {
    if (DiskOnly(requester, {keys[i]}) == 1) {
      on_disk.push_back(keys[i]);
      seeds.push_back(i);
    }
  }
  ASSERT_GE(on_disk.size(), 40u);
  std::atomic<bool> killed{false};
  std::atomic<int> exact{0}, failed{0}, wrong{0}, after_kill_batches{0};
  std::thread loader([&] {
    std::vector<std::string> bufs(on_disk.size(), std::string(kObject, '\0'));
    while (after_kill_batches.load() < 3) {
      const bool was_killed = killed.load();
      std::vector<std::vector<void*>> ptrs;
      std::vector<std::vector<size_t>> sizes;
      for (auto& b : bufs) {
        ptrs.push_back({b.data()});
        sizes.push_back({kObject});
      }
      const auto got = requester.BatchGetIntoMultiBuffers(on_disk, ptrs, sizes);
      for (size_t k = 0; k < on_disk.size(); ++k) {
        if (got[k] == static_cast<int64_t>(kObject)) {
          (bufs[k] == Pattern(kObject, seeds[k]) ? exact : wrong).fetch_add(1);
        } else {
          failed.fetch_add(1);
          if (bufs[k] != std::string(kObject, '\0')) wrong.fetch_add(1);  // must be zeroed
        }
      }
      if (was_killed) after_kill_batches.fetch_add(1);
    }
  });
  // Kill once a batch has come back whole (a fixed delay was shorter than one batch under
  // ASan on a loaded machine), then a little later: in the middle of the next one.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (exact.load() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  c.store->Kill();
  killed.store(true);
  loader.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GT(exact.load(), 0);
  EXPECT_GE(failed.load(), static_cast<int>(on_disk.size()));  // the batches after the kill
}

TEST(DistributedOffload, WarmRestartReRegistersWhatTheTierHolds) {
  ScratchDir dir;
  const std::string config = WriteStoreConfig(dir, ", \"offload_warm_restart\": true");
  OffloadCluster c = StartOffloadCluster(config, "shm");
  ASSERT_TRUE(c.ok());
  MasterProcess& master = *c.master;
  Client& requester = *c.requester;
  const auto keys = Keys(64);
  for (int i = 0; i < 64; ++i) ASSERT_EQ(PutKey(requester, keys[i], i), 0);
  std::vector<int> demoted;
  for (int i = 0; i < 64; ++i) {
    if (DiskOnly(requester, {keys[i]}) == 1) demoted.push_back(i);
  }
  ASSERT_GE(demoted.size(), 24u);
  auto stopped = c.store->Stop();  // SIGTERM: the open region is flushed, the files kept
  ASSERT_TRUE(stopped.has_value());
  EXPECT_TRUE(WIFEXITED(*stopped) && WEXITSTATUS(*stopped) == 0);
  c.store = StartStore(master, "8MiB", false, {"--config", config});
  ASSERT_NE(c.store, nullptr);
  for (int i : demoted) EXPECT_EQ(GetKey(requester, keys[i], i), kObject) << keys[i];
}

TEST(DistributedOffload, WriteBehindCopiesEachPutToTheTier) {
  ScratchDir dir;
  OffloadCluster c = StartOffloadCluster(
      WriteStoreConfig(dir, ", \"offload_write_policy\": \"write_behind\""), "tcp", {}, "32MiB");
  ASSERT_TRUE(c.ok());
  Client& requester = *c.requester;
  const auto keys = Keys(8);
  for (int i = 0; i < 8; ++i) ASSERT_EQ(PutKey(requester, keys[i], i), 0);
  // Each object gets a disk replica beside its memory one (the store copies in the background).
  EXPECT_TRUE(Eventually(
      [&] {
        size_t both = 0;
        for (const auto& descs : requester.BatchGetReplicaDesc(keys)) {
          if (descs.ok() && descs->size() == 2) ++both;
        }
        return both == keys.size();
      },
      std::chrono::seconds(10)));
  for (int i = 0; i < 8; ++i) EXPECT_EQ(GetKey(requester, keys[i], i), kObject);
}

}  // namespace
}  // namespace tierkv
