// The SSD tier through the client API (embedded mode): demotion under memory pressure,
// staged loads split by the staging budget, streaming of objects larger than the budget,
// write-behind, warm restart, corruption and injected IO faults.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "client/client_impl.h"
#include "common/logging.h"
#include "device/faulty_device.h"
#include "device_test_util.h"
#include "pattern_test_util.h"
#include "size_units.h"
#include "ssd/record_format.h"
#include "ssd/ssd_tier.h"

namespace tierkv {
namespace {

using test_util::PatternBytes;

std::string Key(int i) { return "tierkv:model@chunk-" + std::to_string(i); }

class ClientOffloadTest : public ::testing::Test {
 protected:
  Config MakeConfig() const {
    Config c;
    c.global_segment_size = 8 * kMiB;
    c.use_huge_pages = false;
    c.transfer_threads = 2;
    c.enable_offload = true;
    c.offload_paths = {dir_.File("t0.tier")};
    c.offload_capacity = 32 * kMiB;
    c.offload_region_size = 1 * kMiB;
    c.staging_buffer_size = 4 * kMiB;
    return c;
  }
  void Open(const Config& c, std::function<void(SsdTierOptions&)> hook = nullptr) {
    client_.reset();
    auto r = ClientImpl::CreateEmbedded(c, nullptr, StoreOptions{"", hook});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    client_ = std::move(r).value();
  }
  void PutAll(int n, size_t size, int first = 0) {
    for (int i = first; i < first + n; ++i) {
      auto data = PatternBytes(size, static_cast<uint32_t>(i));
      ASSERT_EQ(client_->Put(Key(i), data.data(), data.size()), 0) << Key(i);
    }
  }
  // Gets keys [first, first+n) in one batch; expects each byte-exact or `missing_ok`
  // OBJECT_NOT_FOUND. Returns how many were found.
  int GetAllExact(int n, size_t size, int first = 0, bool missing_ok = false) {
    std::vector<std::vector<uint8_t>> bufs(n, std::vector<uint8_t>(size, 0xEE));
    std::vector<std::string> keys;
    std::vector<std::vector<void*>> ptrs;
    std::vector<std::vector<size_t>> sizes;
    for (int i = 0; i < n; ++i) {
      keys.push_back(Key(first + i));
      ptrs.push_back({bufs[i].data()});
      sizes.push_back({size});
      EXPECT_TRUE(client_->RegisterBuffer(bufs[i].data(), size).ok());
    }
    auto got = client_->BatchGetIntoMultiBuffers(keys, ptrs, sizes);
    int found = 0;
    for (int i = 0; i < n; ++i) {
      EXPECT_TRUE(client_->UnregisterBuffer(bufs[i].data()).ok());
      if (missing_ok && got[i] == ToInt(ErrorCode::OBJECT_NOT_FOUND)) continue;
      EXPECT_EQ(got[i], static_cast<int64_t>(size)) << keys[i];
      if (got[i] == static_cast<int64_t>(size)) {
        ++found;
        EXPECT_EQ(bufs[i], PatternBytes(size, static_cast<uint32_t>(first + i))) << keys[i];
      }
    }
    return found;
  }
  std::vector<ReplicaTier> Tiers(const std::string& key) {
    auto d = client_->BatchGetReplicaDesc({key});
    std::vector<ReplicaTier> out;
    if (d[0].ok()) {
      for (const auto& r : *d[0]) out.push_back(r.tier);
    }
    return out;
  }
  MasterService& Master() { return client_->in_process_master()->master(); }
  // Puts keys [first, first+n), evicts them all to the tier and flushes it.
  void PutAndDemote(int n, size_t size, int first = 0) {
    PutAll(n, size, first);
    Master().EvictFromSegment(client_->store()->segment_id(), 8 * kMiB);
    ASSERT_TRUE(client_->store()->tier()->Flush().ok());
  }
  // Opens the client with its tier's device wrapped in a FaultyDevice, and returns that.
  FaultyDevice* OpenFaulty(const Config& c) {
    FaultyDevice* faulty = nullptr;
    Open(c, [&](SsdTierOptions& o) {
      o.TEST_wrap_device = [&faulty](std::unique_ptr<Device> d) {
        auto f = std::make_unique<FaultyDevice>(std::move(d));
        faulty = f.get();
        return std::unique_ptr<Device>(std::move(f));
      };
    });
    return faulty;
  }
  // Flips one byte of `key`'s value (of `size` bytes) on the disk, `at` bytes into the value
  // (one tier file: region x region size + offset in the region is the file offset).
  void FlipDiskByte(const std::string& key, size_t size, uint64_t at) {
    auto desc = client_->BatchGetReplicaDesc({key});
    ASSERT_TRUE(desc[0].ok());
    ASSERT_EQ((*desc[0])[0].tier, ReplicaTier::kDisk);
    const ReplicaDesc& d = (*desc[0])[0];
    const uint64_t record = uint64_t{d.region} * MakeConfig().offload_region_size + d.offset;
    const uint64_t pos = record + RecordValueOffset(key.size(), size) + at;
    const int fd = ::open(MakeConfig().offload_paths[0].c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    uint8_t b = 0;
    ASSERT_EQ(::pread(fd, &b, 1, static_cast<off_t>(pos)), 1);
    b ^= 0x5A;
    ASSERT_EQ(::pwrite(fd, &b, 1, static_cast<off_t>(pos)), 1);
    ::fsync(fd);
    ::close(fd);
  }

  test_util::ScratchDir dir_;
  std::unique_ptr<ClientImpl> client_;
};

TEST_F(ClientOffloadTest, DemotionUnderMemoryPressureKeepsEveryObjectReadable) {
  Open(MakeConfig());
  constexpr size_t kSize = 256 * kKiB;
  PutAll(64, kSize);  // 16 MiB into an 8 MiB segment
  const auto st = Master().Stats();
  EXPECT_GE(st.demoted_objects, 30u);
  EXPECT_EQ(st.evicted_objects, 0u);
  EXPECT_EQ(st.objects, 64u);
  EXPECT_EQ(Tiers(Key(0)), std::vector<ReplicaTier>{ReplicaTier::kDisk});
  EXPECT_EQ(Tiers(Key(63)), std::vector<ReplicaTier>{ReplicaTier::kMemory});
  EXPECT_EQ(GetAllExact(64, kSize), 64);
  EXPECT_GT(client_->store()->tier()->stats().staged_pieces, 0u);
}

TEST_F(ClientOffloadTest, DiskRegionReuseDropsTheOldestObjectsCleanly) {
  Open(MakeConfig());
  constexpr size_t kSize = 256 * kKiB;
  PutAll(200, kSize);  // more than DRAM + disk hold
  EXPECT_GT(Master().Stats().disk_replicas_dropped, 0u);
  const int found = GetAllExact(200, kSize, 0, /*missing_ok=*/true);
  EXPECT_GT(found, 100);
  EXPECT_LT(found, 200);
  EXPECT_EQ(found, static_cast<int>(Master().Stats().objects));
}

TEST_F(ClientOffloadTest, SmallStagingBudgetSplitsBatchesAndStreamsLargeObjects) {
  Config c = MakeConfig();
  c.offload_region_size = 4 * kMiB;
  c.staging_buffer_size = 1 * kMiB;
  c.staging_usable_ratio = 0.9;  // 921 KiB usable: a 3 MiB object streams in 4 pieces
  Open(c);
  constexpr size_t kSize = 3 * kMiB;
  PutAll(2, kSize);
  for (int i = 10; i < 30; ++i) {  // small ones: a batch of them needs several parts
    auto data = PatternBytes(100 * kKiB, static_cast<uint32_t>(i));
    ASSERT_EQ(client_->Put(Key(i), data.data(), data.size()), 0);
  }
  ASSERT_GT(Master().EvictFromSegment(client_->store()->segment_id(), 8 * kMiB), 0u);
  ASSERT_EQ(Tiers(Key(0)), std::vector<ReplicaTier>{ReplicaTier::kDisk});
  ASSERT_EQ(Tiers(Key(10)), std::vector<ReplicaTier>{ReplicaTier::kDisk});
  const uint64_t before = client_->store()->tier()->stats().staging.reservations;
  EXPECT_EQ(GetAllExact(2, kSize), 2);
  const uint64_t streamed = client_->store()->tier()->stats().staging.reservations - before;
  EXPECT_EQ(streamed, 8u);  // 2 objects x 4 pieces
  EXPECT_EQ(GetAllExact(20, 100 * kKiB, 10), 20);
  EXPECT_GE(client_->store()->tier()->stats().staging.reservations - before - streamed, 4u);
  EXPECT_EQ(client_->store()->tier()->stats().staging.bytes_in_use, 0u);
}

TEST_F(ClientOffloadTest, CorruptRecordIsChecksumMismatchAndZeroed) {
  Open(MakeConfig());
  constexpr size_t kSize = 200 * kKiB;
  ASSERT_NO_FATAL_FAILURE(PutAndDemote(3, kSize));
  FlipDiskByte(Key(1), kSize, 1000);
  std::vector<uint8_t> out(kSize, 0xEE);
  EXPECT_EQ(client_->Get(Key(1), out.data(), out.size()), ToInt(ErrorCode::CHECKSUM_MISMATCH));
  EXPECT_EQ(out, std::vector<uint8_t>(kSize, 0));  // never the corrupt bytes
  EXPECT_EQ(GetAllExact(1, kSize, 0), 1);          // the neighbours are fine
  EXPECT_EQ(GetAllExact(1, kSize, 2), 1);
}

TEST_F(ClientOffloadTest, ReadErrorsFailTheirKeysAndTheNextReadWorks) {
  FaultyDevice* faulty = OpenFaulty(MakeConfig());
  ASSERT_NE(faulty, nullptr);
  constexpr size_t kSize = 256 * kKiB;
  ASSERT_NO_FATAL_FAILURE(PutAndDemote(8, kSize));
  for (FaultKind kind : {FaultKind::kReadEio, FaultKind::kShortRead}) {
    ASSERT_TRUE(faulty->AddFault(FaultRule::Once(kind)).ok());
    std::vector<uint8_t> out(kSize, 0xEE);
    EXPECT_EQ(client_->Get(Key(0), out.data(), out.size()), ToInt(ErrorCode::FILE_READ_FAIL));
    EXPECT_EQ(out, std::vector<uint8_t>(kSize, 0));
    EXPECT_EQ(GetAllExact(8, kSize), 8);  // the IO path keeps working
  }
}

// ---- Direct loads: block-aligned values into block-aligned buffers, no staging ----------------

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using Aligned = std::unique_ptr<uint8_t, FreeDeleter>;
Aligned AlignedBytes(size_t size, uint8_t fill) {
  Aligned b(static_cast<uint8_t*>(std::aligned_alloc(4096, size)));
  std::memset(b.get(), fill, size);
  return b;
}
std::vector<uint8_t> Bytes(const uint8_t* p, size_t n) { return std::vector<uint8_t>(p, p + n); }

TEST_F(ClientOffloadTest, DirectLoadsFillAlignedBuffersWithoutStagingOthersAreStaged) {
  Open(MakeConfig());
  constexpr size_t kSize = 256 * kKiB;       // block-aligned on disk, a multiple of 4096
  constexpr size_t kOdd = 200 * kKiB + 100;  // block-aligned on disk, not a multiple of 4096
  constexpr size_t kSmall = 16 * kKiB;       // packed after its key on disk
  PutAll(16, kSize);
  for (int i = 100; i < 104; ++i) {
    auto data = PatternBytes(i < 102 ? kOdd : kSmall, static_cast<uint32_t>(i));
    ASSERT_EQ(client_->Put(Key(i), data.data(), data.size()), 0);
  }
  ASSERT_GT(Master().EvictFromSegment(client_->store()->segment_id(), 8 * kMiB), 0u);
  ASSERT_TRUE(client_->store()->tier()->Flush().ok());
  for (int i : {0, 15, 100, 103}) {
    ASSERT_EQ(Tiers(Key(i)), std::vector<ReplicaTier>{ReplicaTier::kDisk}) << i;
  }

  // One batch: whole aligned buffers, two aligned pieces per object, an aligned buffer at a
  // misaligned address (+512), and values that cannot be read straight (odd size, small).
  constexpr int kWhole = 8, kSplit = 4;
  std::vector<Aligned> bufs;
  std::vector<size_t> lengths;  // of bufs
  std::vector<std::string> keys;
  std::vector<std::vector<void*>> ptrs;
  std::vector<std::vector<size_t>> sizes;
  for (int i = 0; i < kWhole; ++i) {
    bufs.push_back(AlignedBytes(kSize, 0xEE));
    lengths.push_back(kSize);
    keys.push_back(Key(i));
    ptrs.push_back({bufs.back().get()});
    sizes.push_back({kSize});
  }
  for (int i = kWhole; i < kWhole + kSplit; ++i) {
    bufs.push_back(AlignedBytes(kSize, 0xEE));
    lengths.push_back(kSize);
    keys.push_back(Key(i));
    ptrs.push_back({bufs.back().get() + kSize / 2, bufs.back().get()});  // halves swapped
    sizes.push_back({kSize / 2, kSize / 2});
  }
  bufs.push_back(AlignedBytes(kSize + 4096, 0xEE));
  lengths.push_back(kSize + 4096);
  keys.push_back(Key(12));
  ptrs.push_back({bufs.back().get() + 512});
  sizes.push_back({kSize});
  for (int i = 100; i < 104; ++i) {
    const size_t n = i < 102 ? kOdd : kSmall;
    bufs.push_back(AlignedBytes(AlignUpToBlock(n), 0xEE));
    lengths.push_back(AlignUpToBlock(n));
    keys.push_back(Key(i));
    ptrs.push_back({bufs.back().get()});
    sizes.push_back({n});
  }
  for (size_t k = 0; k < bufs.size(); ++k) {
    ASSERT_TRUE(client_->RegisterBuffer(bufs[k].get(), lengths[k]).ok());
  }
  const SsdTierStats before = client_->store()->tier()->stats();
  auto got = client_->BatchGetIntoMultiBuffers(keys, ptrs, sizes);
  const SsdTierStats after = client_->store()->tier()->stats();
  for (size_t k = 0; k < keys.size(); ++k) {
    const int i = k < kWhole + kSplit + 1 ? static_cast<int>(k) : static_cast<int>(k) + 100 - 13;
    const size_t n = i < 100 ? kSize : (i < 102 ? kOdd : kSmall);
    ASSERT_EQ(got[k], static_cast<int64_t>(n)) << keys[k];
    const auto want = PatternBytes(n, static_cast<uint32_t>(i));
    if (k >= kWhole && k < kWhole + kSplit) {
      const uint8_t* b = bufs[k].get();
      EXPECT_EQ(Bytes(b + kSize / 2, kSize / 2),
                std::vector<uint8_t>(want.begin(), want.begin() + kSize / 2))
          << keys[k];
      EXPECT_EQ(Bytes(b, kSize / 2), std::vector<uint8_t>(want.begin() + kSize / 2, want.end()))
          << keys[k];
    } else {
      EXPECT_EQ(Bytes(static_cast<const uint8_t*>(ptrs[k][0]), n), want) << keys[k];
    }
  }
  // The first 12 went straight into their buffers; key 12 and the last four were staged.
  EXPECT_EQ(after.direct_reads - before.direct_reads, uint64_t{kWhole + kSplit});
  EXPECT_EQ(after.direct_bytes - before.direct_bytes, uint64_t{kWhole + kSplit} * kSize);
  EXPECT_EQ(after.staged_pieces - before.staged_pieces, 5u);
  EXPECT_EQ(after.direct_errors, 0u);
}

// With offload_page_cache_reads the tier reads through a buffered descriptor: direct loads
// still land exactly in the caller's aligned buffers (no alignment rule broken, no staging).
TEST_F(ClientOffloadTest, DirectLoadsThroughThePageCache) {
  Config c = MakeConfig();
  c.offload_page_cache_reads = true;
  Open(c);
  constexpr size_t kSize = 128 * kKiB;
  PutAll(24, kSize);
  ASSERT_GT(Master().EvictFromSegment(client_->store()->segment_id(), 8 * kMiB), 0u);
  ASSERT_TRUE(client_->store()->tier()->Flush().ok());
  for (int round = 0; round < 2; ++round) {  // the second round reads cached pages
    for (int i = 0; i < 24; ++i) {
      Aligned b = AlignedBytes(kSize + 4096, 0xEE);
      ASSERT_EQ(client_->Get(Key(i), b.get(), kSize), static_cast<int64_t>(kSize)) << i;
      EXPECT_EQ(Bytes(b.get(), kSize), PatternBytes(kSize, static_cast<uint32_t>(i))) << i;
      EXPECT_EQ(b.get()[kSize], 0xEE) << "a byte past the object was written";
    }
  }
  EXPECT_EQ(client_->store()->tier()->stats().direct_reads, 48u);
  EXPECT_EQ(client_->store()->tier()->stats().staged_pieces, 0u);
}

TEST_F(ClientOffloadTest, DirectLoadFaultsFailTheirKeysZeroedAndTheNextReadWorks) {
  FaultyDevice* faulty = OpenFaulty(MakeConfig());
  ASSERT_NE(faulty, nullptr);
  constexpr size_t kSize = 256 * kKiB;
  ASSERT_NO_FATAL_FAILURE(PutAndDemote(8, kSize));
  auto read_all = [&] {
    int exact = 0;
    for (int i = 0; i < 8; ++i) {
      Aligned b = AlignedBytes(kSize, 0xEE);
      if (client_->Get(Key(i), b.get(), kSize) == static_cast<int64_t>(kSize) &&
          Bytes(b.get(), kSize) == PatternBytes(kSize, static_cast<uint32_t>(i))) {
        ++exact;
      }
    }
    return exact;
  };
  for (FaultKind kind : {FaultKind::kReadEio, FaultKind::kShortRead}) {
    ASSERT_TRUE(faulty->AddFault(FaultRule::Once(kind)).ok());
    Aligned b = AlignedBytes(kSize, 0xEE);
    EXPECT_EQ(client_->Get(Key(0), b.get(), kSize), ToInt(ErrorCode::FILE_READ_FAIL));
    EXPECT_EQ(Bytes(b.get(), kSize), std::vector<uint8_t>(kSize, 0)) << "never partial bytes";
    EXPECT_EQ(read_all(), 8);  // the IO path keeps working
  }
  EXPECT_EQ(client_->store()->tier()->stats().direct_errors, 2u);

  // A flipped value byte on the disk: caught by the checksum in the caller's buffer, zeroed.
  FlipDiskByte(Key(3), kSize, 5000);
  Aligned b = AlignedBytes(kSize, 0xEE);
  EXPECT_EQ(client_->Get(Key(3), b.get(), kSize), ToInt(ErrorCode::CHECKSUM_MISMATCH));
  EXPECT_EQ(Bytes(b.get(), kSize), std::vector<uint8_t>(kSize, 0));
  EXPECT_EQ(read_all(), 7);
}

TEST_F(ClientOffloadTest, WriteErrorsDropTheDemotedObjectsAndTheTierRecovers) {
  FaultyDevice* faulty = OpenFaulty(MakeConfig());
  constexpr size_t kSize = 256 * kKiB;
  for (FaultKind kind : {FaultKind::kWriteEio, FaultKind::kWriteEnospc, FaultKind::kShortWrite}) {
    SCOPED_TRACE(static_cast<int>(kind));
    ASSERT_TRUE(client_->RemoveAll(true) >= 0);
    PutAll(8, kSize);
    Master().EvictFromSegment(client_->store()->segment_id(), 8 * kMiB);
    ASSERT_TRUE(faulty->AddFault(FaultRule::Once(kind)).ok());
    // The region holding the demoted records fails to reach the disk: they are gone, never
    // wrong.
    EXPECT_EQ(client_->store()->tier()->Flush().code(), ErrorCode::FILE_WRITE_FAIL);
    const int found = GetAllExact(8, kSize, 0, /*missing_ok=*/true);
    EXPECT_LT(found, 8);
    // The next demotion and flush work.
    ASSERT_TRUE(client_->RemoveAll(true) >= 0);
    ASSERT_NO_FATAL_FAILURE(PutAndDemote(8, kSize, 100));
    EXPECT_EQ(GetAllExact(8, kSize, 100), 8);
  }
}

TEST_F(ClientOffloadTest, WriteBehindCopiesAtPutAndEvictionOnlyFreesMemory) {
  Config c = MakeConfig();
  c.offload_write_policy = "write_behind";
  Open(c);
  constexpr size_t kSize = 256 * kKiB;
  PutAll(4, kSize);
  Master().DrainWriteBehind();
  // (Replica descriptions would lease the objects and keep them from eviction: use stats.)
  auto st = Master().Stats();
  EXPECT_EQ(st.written_behind, 4u);
  EXPECT_EQ(st.memory_replicas, 4u);
  EXPECT_EQ(st.disk_replicas, 4u);
  const uint64_t appended = client_->store()->tier()->stats().log.appended_records;
  Master().EvictFromSegment(client_->store()->segment_id(), 8 * kMiB);
  EXPECT_EQ(client_->store()->tier()->stats().log.appended_records, appended);  // no second write
  st = Master().Stats();
  EXPECT_EQ(st.memory_replicas, 0u);
  EXPECT_EQ(st.disk_replicas, 4u);
  EXPECT_EQ(GetAllExact(4, kSize), 4);
}

TEST_F(ClientOffloadTest, WarmRestartBringsDemotedObjectsBack) {
  Config c = MakeConfig();
  c.offload_warm_restart = true;
  Open(c);
  constexpr size_t kSize = 256 * kKiB;
  PutAll(10, kSize);
  Master().EvictFromSegment(client_->store()->segment_id(), 8 * kMiB);
  ASSERT_EQ(Tiers(Key(0)), std::vector<ReplicaTier>{ReplicaTier::kDisk});
  client_.reset();  // flushes the open region and keeps the file
  ASSERT_TRUE(std::filesystem::exists(c.offload_paths[0]));
  Open(c);
  EXPECT_EQ(Master().Stats().objects, 10u);
  EXPECT_EQ(GetAllExact(10, kSize), 10);
  client_.reset();
  // Without warm restart the file is removed at shutdown.
  c.offload_warm_restart = false;
  Open(c);
  EXPECT_EQ(Master().Stats().objects, 0u);
  client_.reset();
  EXPECT_FALSE(std::filesystem::exists(c.offload_paths[0]));
}

// Bytes changed in memory after the put (a stray write into the segment) are demoted with the
// checksum recorded at PutEnd, not one taken from the changed bytes: loads fail them, and a warm
// restart does not bring them back as if they were intact.
TEST_F(ClientOffloadTest, BytesChangedInMemoryAfterThePutAreNeverVouchedForOnDisk) {
  Config c = MakeConfig();
  c.offload_warm_restart = true;
  c.default_kv_lease_ttl_ms = 1;  // the lookup below must not pin the object in memory
  Open(c);
  constexpr size_t kSize = 256 * kKiB;
  PutAll(3, kSize);
  auto desc = client_->BatchGetReplicaDesc({Key(2)});
  ASSERT_TRUE(desc[0].ok());
  ASSERT_EQ((*desc[0])[0].tier, ReplicaTier::kMemory);
  client_->store()->segment()->base()[(*desc[0])[0].offset + 1234] ^= 0x5A;
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the lease runs out
  Master().EvictFromSegment(client_->store()->segment_id(), 8 * kMiB);
  ASSERT_TRUE(client_->store()->tier()->Flush().ok());
  ASSERT_EQ(Tiers(Key(2)), std::vector<ReplicaTier>{ReplicaTier::kDisk});
  std::vector<uint8_t> out(kSize, 0xEE);
  EXPECT_EQ(client_->Get(Key(2), out.data(), out.size()), ToInt(ErrorCode::CHECKSUM_MISMATCH));
  EXPECT_EQ(out, std::vector<uint8_t>(kSize, 0));
  EXPECT_EQ(GetAllExact(2, kSize), 2);
  client_.reset();
  Open(c);
  EXPECT_EQ(Master().Stats().objects, 2u);
  EXPECT_EQ(GetAllExact(2, kSize), 2);
  EXPECT_EQ(GetAllExact(1, kSize, 2, /*missing_ok=*/true), 0);
}

TEST_F(ClientOffloadTest, KilledOwnerLosesAtMostItsUnflushedRegion) {
  Config c = MakeConfig();
  c.offload_warm_restart = true;
  constexpr size_t kSize = 256 * kKiB;
  GTEST_FLAG_SET(death_test_style, "fast");  // the child must share this test's directory
  EXPECT_EXIT(
      {
        Open(c);
        PutAll(10, kSize);
        Master().EvictFromSegment(client_->store()->segment_id(), 8 * kMiB);
        if (!client_->store()->tier()->Flush().ok()) std::_Exit(3);
        PutAll(2, kSize, 10);  // demoted into the open region, which never reaches the disk
        Master().EvictFromSegment(client_->store()->segment_id(), 8 * kMiB);
        std::raise(SIGKILL);
      },
      ::testing::KilledBySignal(SIGKILL), "");
  Open(c);
  EXPECT_EQ(Master().Stats().objects, 10u);
  EXPECT_EQ(GetAllExact(10, kSize), 10);
  EXPECT_EQ(GetAllExact(2, kSize, 10, /*missing_ok=*/true), 0);
}

TEST_F(ClientOffloadTest, TierLogSummarisesEachGetBatch) {
  InitLogging();  // as Client::Create does: logs go to stderr
  ::setenv("TIERKV_TIER_LOG", "1", 1);
  Open(MakeConfig());
  ::unsetenv("TIERKV_TIER_LOG");
  constexpr size_t kSize = 256 * kKiB;
  PutAll(4, kSize);
  Master().EvictFromSegment(client_->store()->segment_id(), 2 * kSize);  // keys 0, 1 to disk
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(GetAllExact(4, kSize), 4);
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("tier: get batch of 4 keys: 2 from memory (524288 bytes), 2 from disk "
                     "(524288 bytes), 0 disk reads failed"),
            std::string::npos)
      << log;
}

TEST_F(ClientOffloadTest, AbandonedStagingSpaceIsReclaimedAfterItsTtl) {
  ManualClock clock;
  Open(MakeConfig(), [&](SsdTierOptions& o) {
    o.staging.clock = &clock;
    o.staging.ttl = Millis(1000);
  });
  constexpr size_t kSize = 256 * kKiB;
  PutAll(4, kSize);
  Master().EvictFromSegment(client_->store()->segment_id(), 8 * kMiB);
  auto reps = Master().GetReplicas({Key(0)});
  ASSERT_TRUE(reps[0].ok());
  // A requester stages and vanishes without releasing.
  auto staged =
      client_->store()->tier()->Stage({StageRequest{Key(0), reps[0]->replicas[0].disk, 0, kSize}});
  ASSERT_TRUE(staged.ok()) << staged.status().ToString();
  EXPECT_GT(client_->store()->tier()->stats().staging.bytes_in_use, 0u);
  EXPECT_EQ(client_->store()->tier()->ReclaimExpired(), 0u);
  clock.Advance(Millis(1001));
  EXPECT_EQ(client_->store()->tier()->ReclaimExpired(), 1u);
  EXPECT_EQ(client_->store()->tier()->stats().staging.bytes_in_use, 0u);
  EXPECT_FALSE(client_->store()->tier()->Held(staged->ticket));
  EXPECT_EQ(GetAllExact(4, kSize), 4);
}

TEST_F(ClientOffloadTest, PromotionOnHitBringsHotObjectsBackToMemory) {
  Config c = MakeConfig();
  c.promote_on_hit = true;
  c.promote_min_hits = 2;
  Open(c);
  constexpr size_t kSize = 256 * kKiB;
  PutAll(4, kSize);
  Master().EvictFromSegment(client_->store()->segment_id(), 8 * kMiB);
  EXPECT_EQ(Master().Stats().memory_replicas, 0u);
  EXPECT_EQ(GetAllExact(4, kSize), 4);  // first hit: not admitted
  EXPECT_EQ(Master().Stats().memory_replicas, 0u);
  EXPECT_EQ(GetAllExact(2, kSize), 2);  // second hit of keys 0, 1: promoted
  EXPECT_EQ(Master().Stats().promoted_objects, 2u);
  EXPECT_EQ(Tiers(Key(0)), (std::vector<ReplicaTier>{ReplicaTier::kMemory, ReplicaTier::kDisk}));
  const uint64_t staged = client_->store()->tier()->stats().staged_pieces;
  EXPECT_EQ(GetAllExact(2, kSize), 2);  // served from memory now, byte-exact
  EXPECT_EQ(client_->store()->tier()->stats().staged_pieces, staged);
}

TEST_F(ClientOffloadTest, BadTierPathFailsAtStartWithTheReason) {
  Config c = MakeConfig();
  c.offload_paths = {dir_.File("no-such-dir/t.tier")};
  auto r = ClientImpl::CreateEmbedded(c);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.code(), ErrorCode::FILE_OPEN_FAIL);
  EXPECT_NE(r.status().message().find("no-such-dir"), std::string::npos) << r.status().message();
}

TEST_F(ClientOffloadTest, StripedOverTwoPaths) {
  Config c = MakeConfig();
  c.offload_paths = {dir_.File("a.tier"), dir_.File("b.tier")};
  c.offload_capacity = 8 * kMiB;
  Open(c);
  constexpr size_t kSize = 256 * kKiB;
  PutAll(60, kSize);
  EXPECT_EQ(GetAllExact(60, kSize, 0, /*missing_ok=*/true),
            static_cast<int>(Master().Stats().objects));
  EXPECT_GE(client_->store()->tier()->stats().log.flushes, 4u);
}

}  // namespace
}  // namespace tierkv
