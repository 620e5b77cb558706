// BatchSegments and the client's batches over it: each segment of a batch is looked up once and
// its owner asked once, after every copy of the batch; an owner found dead then fails the
// batch's puts to it and sends its gets to their next replica, never returning its bytes.
#include "client/batch_segments.h"

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "client/client_impl.h"
#include "client/in_process_backend.h"
#include "pattern_test_util.h"
#include "status_test_util.h"

namespace tierkv {
namespace {

using test_util::PatternBytes;

// A segment whose owner's liveness the test decides, counting how often it is asked.
class WatchedAccess final : public SegmentAccess {
 public:
  WatchedAccess(std::shared_ptr<SegmentAccess> inner, const std::atomic<bool>* owner_alive,
                std::atomic<int>* asked)
      : inner_(std::move(inner)), owner_alive_(owner_alive), asked_(asked) {}
  uint8_t* base() const override { return inner_->base(); }
  bool mapped() const override { return inner_->mapped(); }
  uint64_t size() const override { return inner_->size(); }
  const std::string& name() const override { return inner_->name(); }
  bool alive() const override {
    asked_->fetch_add(1);
    return owner_alive_->load();
  }
  Transport transport() const override { return Transport::kShm; }

 private:
  std::shared_ptr<SegmentAccess> inner_;
  const std::atomic<bool>* owner_alive_;
  std::atomic<int>* asked_;
};

// The in-process backend, with segment `watched`'s owner dying when the test says so: found
// (as an owner that dies after the lookup would be), but not alive when asked after a copy.
class WatchedBackend final : public ClientBackend {
 public:
  explicit WatchedBackend(std::shared_ptr<InProcessMaster> master) : inner_(std::move(master)) {}

  MasterApi& master() override { return inner_.master(); }
  bool serves_other_processes() const override { return false; }
  Result<SegmentId> MountOwn(std::shared_ptr<MemorySegment> segment,
                             const std::string& mounted_name, OwnTier tier) override {
    return inner_.MountOwn(std::move(segment), mounted_name, std::move(tier));
  }
  void DropOwnDiskReplicas(SegmentId id, uint32_t region, uint64_t generation,
                           const std::vector<std::string>& keys) override {
    inner_.DropOwnDiskReplicas(id, region, generation, keys);
  }
  Status UnmountOwn(SegmentId id) override { return inner_.UnmountOwn(id); }
  std::shared_ptr<SsdTier> FindTier(SegmentId id) override { return inner_.FindTier(id); }
  std::string SegmentName(SegmentId id) override { return inner_.SegmentName(id); }

  std::shared_ptr<SegmentAccess> FindSegment(SegmentId id) override {
    {
      std::lock_guard lock(mu_);
      ++lookups_[id];
    }
    auto access = inner_.FindSegment(id);
    if (access == nullptr || id != watched.load()) return access;
    return std::make_shared<WatchedAccess>(std::move(access), &owner_alive, &asked);
  }
  int lookups(SegmentId id) {
    std::lock_guard lock(mu_);
    return lookups_[id];
  }

  std::atomic<SegmentId> watched{0};
  std::atomic<bool> owner_alive{true};
  std::atomic<int> asked{0};

 private:
  InProcessBackend inner_;
  std::mutex mu_;
  std::map<SegmentId, int> lookups_;
};

Config WatchedConfig() {
  Config c;
  c.global_segment_size = 32ull << 20;
  c.use_huge_pages = false;
  c.transfer_threads = 2;
  c.require_registered_buffers = false;
  return c;
}

constexpr size_t kBatchKeys = 32;
constexpr size_t kBatchObject = 64 << 10;

class BatchSegmentsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    master_ = std::make_shared<InProcessMaster>(MasterOptions{}, Millis(0));
    backend_ = std::make_shared<WatchedBackend>(master_);
    auto watched = ClientImpl::Create(WatchedConfig(), backend_);
    ASSERT_TRUE(watched.ok()) << watched.status().ToString();
    client_ = std::move(watched).value();
    backend_->watched = client_->store()->segment_id();
    for (size_t i = 0; i < kBatchKeys; ++i) {
      keys_.push_back("k" + std::to_string(i));
      values_.push_back(PatternBytes(kBatchObject, static_cast<uint32_t>(i)));
      out_.emplace_back(kBatchObject, 0xEE);
    }
  }
  std::vector<int> PutAll(Client& client, const ReplicateConfig& config = {}) {
    std::vector<std::vector<void*>> ptrs;
    std::vector<std::vector<size_t>> sizes;
    for (auto& v : values_) {
      ptrs.push_back({v.data()});
      sizes.push_back({v.size()});
    }
    return client.BatchPutFromMultiBuffers(keys_, ptrs, sizes, config);
  }
  std::vector<int64_t> GetAll(Client& client) {
    std::vector<std::vector<void*>> ptrs;
    std::vector<std::vector<size_t>> sizes;
    for (auto& o : out_) {
      std::fill(o.begin(), o.end(), 0xEE);
      ptrs.push_back({o.data()});
      sizes.push_back({o.size()});
    }
    return client.BatchGetIntoMultiBuffers(keys_, ptrs, sizes);
  }
  SegmentId watched() const { return backend_->watched.load(); }

  std::shared_ptr<InProcessMaster> master_;
  std::shared_ptr<WatchedBackend> backend_;
  std::unique_ptr<ClientImpl> client_;
  std::vector<std::string> keys_;
  std::vector<std::vector<uint8_t>> values_, out_;
};

TEST_F(BatchSegmentsTest, LooksEachSegmentUpOnceAndAsksItsOwnerOnceAfterTheCopies) {
  BatchSegments segments(*backend_);
  const auto& first = segments.Find(watched());
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(segments.Find(watched()), first);
  EXPECT_EQ(segments.Found(watched()), first);
  EXPECT_EQ(backend_->lookups(watched()), 1);
  EXPECT_EQ(segments.Found(watched() + 1000), nullptr);  // never looked up
  EXPECT_EQ(backend_->asked.load(), 0);                  // the lookup did not ask the owner
  EXPECT_TRUE(segments.AliveAfterCopies(watched()));
  backend_->owner_alive = false;
  EXPECT_TRUE(segments.AliveAfterCopies(watched()));  // asked once per batch: the first answer
  EXPECT_EQ(backend_->asked.load(), 1);
  BatchSegments next(*backend_);
  next.Find(watched());
  EXPECT_FALSE(next.AliveAfterCopies(watched()));  // a new batch asks again
  // A segment that cannot be reached is never alive.
  EXPECT_EQ(next.Find(watched() + 1000), nullptr);
  EXPECT_FALSE(next.AliveAfterCopies(watched() + 1000));
}

TEST_F(BatchSegmentsTest, ABatchLooksItsSegmentUpAndAsksItsOwnerOncePerCall) {
  for (int code : PutAll(*client_)) ASSERT_EQ(code, 0);
  EXPECT_EQ(backend_->lookups(watched()), 1);
  EXPECT_EQ(backend_->asked.load(), 1);
  const auto got = GetAll(*client_);
  for (size_t i = 0; i < kBatchKeys; ++i) {
    ASSERT_EQ(got[i], static_cast<int64_t>(kBatchObject)) << keys_[i];
    EXPECT_EQ(out_[i], values_[i]) << keys_[i];
  }
  EXPECT_EQ(backend_->lookups(watched()), 2);
  EXPECT_EQ(backend_->asked.load(), 2);
}

TEST_F(BatchSegmentsTest, AnOwnerDeadAfterTheCopiesFailsThePutsAndTheirSpaceIsFreed) {
  backend_->owner_alive = false;
  for (int code : PutAll(*client_)) EXPECT_EQ(code, ToInt(ErrorCode::TRANSFER_FAIL));
  for (int exists : client_->BatchIsExist(keys_)) EXPECT_EQ(exists, 0);
  // Revoked, not left pending: the same keys go in once the owner answers again.
  backend_->owner_alive = true;
  for (int code : PutAll(*client_)) EXPECT_EQ(code, 0);
}

TEST_F(BatchSegmentsTest, AnOwnerDeadAfterTheCopiesNeverYieldsItsBytes) {
  for (int code : PutAll(*client_)) ASSERT_EQ(code, 0);
  backend_->owner_alive = false;
  const auto got = GetAll(*client_);
  for (size_t i = 0; i < kBatchKeys; ++i) {
    EXPECT_EQ(got[i], ToInt(ErrorCode::TRANSFER_FAIL)) << keys_[i];
    EXPECT_EQ(out_[i], std::vector<uint8_t>(kBatchObject, 0)) << keys_[i] << ": zeroes, not bytes";
  }
}

TEST_F(BatchSegmentsTest, AnOwnerDeadAfterTheCopiesSendsTheGetsToTheNextReplica) {
  auto other = ClientImpl::CreateEmbedded(WatchedConfig(), master_);
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  ReplicateConfig two;
  two.replica_num = 2;
  two.preferred_segment = client_->store()->segment()->name();  // the watched one first
  for (int code : PutAll(*client_, two)) ASSERT_EQ(code, 0);
  auto desc = client_->BatchGetReplicaDesc({keys_[0]});
  ASSERT_TRUE(desc[0].ok());
  ASSERT_EQ(desc[0]->size(), 2u);
  ASSERT_EQ((*desc[0])[0].segment_name, client_->store()->segment()->name());
  backend_->owner_alive = false;
  const auto got = GetAll(*client_);
  for (size_t i = 0; i < kBatchKeys; ++i) {
    ASSERT_EQ(got[i], static_cast<int64_t>(kBatchObject)) << keys_[i];
    EXPECT_EQ(out_[i], values_[i]) << keys_[i] << ": the second replica's bytes";
  }
  // Read from the other client's segment (kLocal), none from the dead owner's (kShm here).
  for (const TransferCount& t : client_->transfer_counts()) {
    if (t.transport == "shm") {
      EXPECT_EQ(t.read_bytes, 0u);
    } else if (t.transport == "local") {
      EXPECT_EQ(t.read_bytes, kBatchKeys * kBatchObject);
    }
  }
}

}  // namespace
}  // namespace tierkv
