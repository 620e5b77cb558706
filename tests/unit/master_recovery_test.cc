// Restart recovery in one process: a MasterService feeds a store's SegmentIndex (the batches a
// TierMoves stream would carry, pumped by hand), the master "crashes", and a new MasterService
// rebuilds its table from the stores' reports (MasterService::IndexLink). Also the ordering rule
// (a freed range is reused only once the store acknowledged the free), the re-link of a stream
// with the same master, and eviction that waits for a tier stream instead of dropping.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/checksum.h"
#include "common/clock.h"
#include "master/eviction_policy.h"
#include "master/master_service.h"
#include "memory/memory_segment.h"
#include "store/segment_index.h"

namespace tierkv {
namespace {

using namespace std::chrono_literals;
constexpr uint64_t kSegment = 1 << 20;

// A store as the master sees it: its segment's memory and its index, linked by hand.
struct FakeStore {
  explicit FakeStore(const std::string& n, bool tier = false) : name(n), has_tier(tier) {
    auto m = MemorySegment::Create(n, kSegment, PagePolicy::kSmallPages);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    memory = std::move(m).value();
    // Disk records "held" unless told otherwise (the tier is not exercised here).
    index = std::make_shared<SegmentIndex>(
        memory, [this](const DiskLocation& l) { return has_tier && l.region != dead_region; });
  }
  // Mounts on `m` and links the index (reporting it: recovery on a fresh master).
  SegmentRecovery MountOn(MasterService& m) {
    master = &m;
    MountOptions o;
    o.index_stream = true;
    o.has_tier = has_tier;
    auto mounted = m.MountSegment(name, kSegment, o);
    EXPECT_TRUE(mounted.ok()) << mounted.status().ToString();
    id = mounted.ok() ? *mounted : 0;
    return Link();
  }
  SegmentRecovery Link() {
    auto opened = master->OpenIndexLink(id);
    EXPECT_TRUE(opened.ok()) << opened.status().ToString();
    link = std::move(opened).value();
    const IndexReport report = index->Report();
    link->Expect(expect_total ? expect_total : report.memory.size() + report.disk.size());
    link->Add(report.memory, report.disk);
    auto done = link->Finish();
    EXPECT_TRUE(done.ok()) << done.status().ToString();
    Pump();
    return done.ok() ? *done : SegmentRecovery{};
  }
  // Delivers what the feed has, as the stream would, and acknowledges it.
  void Pump() {
    auto feed = link->feed();
    while (auto batch = feed->Next(link->generation(), 0ms)) {
      index->Apply(*batch);
      if (!batch->more) feed->Acked(link->generation(), batch->seq);
    }
  }
  void Write(uint64_t offset, const std::string& bytes) {
    std::memcpy(memory->base() + offset, bytes.data(), bytes.size());
  }
  std::string Read(uint64_t offset, size_t n) const {
    return std::string(reinterpret_cast<const char*>(memory->base() + offset), n);
  }

  std::string name;
  bool has_tier;
  uint32_t dead_region = UINT32_MAX;
  uint64_t expect_total = 0;  // the report's `total` as sent (0: the true count)
  std::shared_ptr<MemorySegment> memory;
  std::shared_ptr<SegmentIndex> index;
  MasterService* master = nullptr;
  SegmentId id = 0;
  std::unique_ptr<MasterService::IndexLink> link;
};

std::string Bytes(size_t n, char c) { return std::string(n, c); }

class MasterRecoveryTest : public ::testing::Test {
 protected:
  MasterOptions Options(uint64_t first_put_id) {
    MasterOptions o;
    o.clock = &clock_;
    o.shards = 8;
    o.lease_ttl = Millis(1000);
    o.first_put_id = first_put_id;
    o.free_ack_wait = Millis(50);
    return o;
  }
  // A master as a process would start one: put ids above every earlier master's.
  std::unique_ptr<MasterService> NewMaster() {
    next_base_ += 1'000'000;
    return std::make_unique<MasterService>(Options(next_base_));
  }
  // Puts `key` with `bytes` written into its (first) replica's segment; returns its offset.
  uint64_t Put(MasterService& m, FakeStore& store, const std::string& key, const std::string& bytes,
               ReplicateConfig rc = {}) {
    if (rc.preferred_segment.empty()) rc.preferred_segment = store.name;
    auto started = m.PutStart({key}, {bytes.size()}, rc);
    EXPECT_TRUE(started[0].ok()) << key << ": " << started[0].status().ToString();
    if (!started[0].ok()) return UINT64_MAX;
    for (const auto& r : started[0]->replicas) {
      for (FakeStore* s : stores_) {
        if (s->id == r.segment) s->Write(r.offset, bytes);
      }
    }
    EXPECT_TRUE(
        m.PutEnd({key}, {started[0]->put_id}, {Checksum(bytes.data(), bytes.size())})[0].ok());
    return started[0]->replicas[0].offset;
  }
  void PumpAll() {
    for (FakeStore* s : stores_) s->Pump();
  }

  ManualClock clock_;
  uint64_t next_base_ = 0;
  std::vector<FakeStore*> stores_;
};

TEST_F(MasterRecoveryTest, ARestartedMasterRebuildsCommittedObjectsFromTheStoresIndexes) {
  FakeStore store("store-a");
  stores_ = {&store};
  auto a = NewMaster();
  store.MountOn(*a);
  const uint64_t off1 = Put(*a, store, "k1", Bytes(1000, '1'));
  const uint64_t off2 = Put(*a, store, "k2", Bytes(3000, '2'));
  Put(*a, store, "gone", Bytes(500, 'g'));
  ASSERT_TRUE(a->Remove("gone", false).ok());
  // A put that never ended: not recovered, its space free on the next master.
  auto pending = a->PutStart({"pending"}, {2000}, ReplicateConfig{});
  ASSERT_TRUE(pending[0].ok());
  PumpAll();
  EXPECT_EQ(store.index->stats().memory_entries, 2u);
  a.reset();  // the master dies; the store keeps its segment and its index

  auto b = NewMaster();
  store.expect_total = UINT64_MAX;  // a report's `total` is a hint: a wrong one changes nothing
  const SegmentRecovery rec = store.MountOn(*b);
  EXPECT_TRUE(rec.done);
  EXPECT_EQ(rec.reported, 2u);
  EXPECT_EQ(rec.memory_replicas, 2u);
  EXPECT_EQ(rec.bytes, 4000u);
  EXPECT_EQ(rec.rejected, 0u);
  auto got = b->GetReplicas({"k1", "k2", "gone", "pending"});
  ASSERT_TRUE(got[0].ok()) << got[0].status().ToString();
  ASSERT_TRUE(got[1].ok());
  EXPECT_EQ(got[0]->replicas.at(0).segment, store.id);
  EXPECT_EQ(got[0]->replicas.at(0).offset, off1);
  EXPECT_EQ(got[1]->replicas.at(0).offset, off2);
  EXPECT_EQ(got[0]->checksum, Checksum(Bytes(1000, '1').data(), 1000));
  EXPECT_EQ(store.Read(off2, 3000), Bytes(3000, '2'));
  EXPECT_EQ(got[2].code(), ErrorCode::OBJECT_NOT_FOUND);
  EXPECT_EQ(got[3].code(), ErrorCode::OBJECT_NOT_FOUND);
  EXPECT_EQ(b->Stats().recovered_replicas, 2u);
  // New puts never land on recovered bytes.
  for (int i = 0; i < 20; ++i) {
    const uint64_t off = Put(*b, store, "new" + std::to_string(i), Bytes(4000, 'n'));
    EXPECT_TRUE(off + 4000 <= off1 || off >= off1 + 1000) << off;
    EXPECT_TRUE(off + 4000 <= off2 || off >= off2 + 3000) << off;
  }
  EXPECT_EQ(store.Read(off1, 1000), Bytes(1000, '1'));
}

// A report of many entries, some grouped, some gone: sorted into segment order (each entry
// still its own), adopted shard by shard (ungrouped) and one by one (grouped), every object
// back where it was, with its bytes.
TEST_F(MasterRecoveryTest, AReportOfManyEntriesComesInSegmentOrderAndIsAdoptedWhole) {
  FakeStore store("store-a");
  stores_ = {&store};
  auto a = NewMaster();
  store.MountOn(*a);
  std::map<std::string, uint64_t> offsets;
  for (int i = 0; i < 200; ++i) {
    const std::string key = "many-" + std::to_string(i * 7919 % 1000);
    ReplicateConfig rc;
    if (i % 10 == 0) rc.group_ids = {"group-" + std::to_string(i % 3)};
    offsets[key] = Put(*a, store, key, Bytes(1000 + i, static_cast<char>('a' + i % 26)), rc);
  }
  for (int i = 0; i < 200; i += 7) {
    const std::string key = "many-" + std::to_string(i * 7919 % 1000);
    if (i % 10 == 0) continue;  // grouped: removed with the group only
    ASSERT_TRUE(a->Remove(key, true).ok()) << key;
    offsets.erase(key);
  }
  PumpAll();
  const IndexReport report = store.index->Report();
  ASSERT_EQ(report.memory.size(), offsets.size());
  for (size_t i = 0; i < report.memory.size(); ++i) {
    if (i > 0) {
      EXPECT_LT(report.memory[i - 1].offset, report.memory[i].offset);
    }
    EXPECT_EQ(report.memory[i].offset, offsets.at(report.memory[i].key)) << report.memory[i].key;
  }
  a.reset();

  auto b = NewMaster();
  const SegmentRecovery rec = store.MountOn(*b);
  EXPECT_EQ(rec.memory_replicas, offsets.size());
  EXPECT_EQ(rec.rejected, 0u);
  for (const auto& [key, offset] : offsets) {
    auto got = b->GetReplicas({key});
    ASSERT_TRUE(got[0].ok()) << key << ": " << got[0].status().ToString();
    EXPECT_EQ(got[0]->replicas.at(0).offset, offset) << key;
    EXPECT_EQ(Checksum(store.Read(offset, got[0]->size).data(), got[0]->size), got[0]->checksum)
        << key;
  }
  // The grouped ones are whole groups again: removing one removes its group.
  EXPECT_EQ(b->Stats().groups, 3u);
}

TEST_F(MasterRecoveryTest, RepeatedAndOutOfOrderOffsetsAreAdoptedOnceAndNeverFreed) {
  FakeStore store("store-a");
  stores_ = {&store};
  auto a = NewMaster();
  store.MountOn(*a);
  for (int i = 0; i < 4; ++i) {
    Put(*a, store, "k" + std::to_string(i), Bytes(3000, static_cast<char>('a' + i)));
  }
  PumpAll();
  const IndexReport report = store.index->Report();
  ASSERT_EQ(report.memory.size(), 4u);
  a.reset();

  // A report whose parts repeat an offset (under another key) right after it and long after
  // it, and go back in the segment: each offset is adopted once, for its first entry, and the
  // repeats are neither adopted nor rejected (a rejected entry's range is freed on the store).
  auto b = NewMaster();
  MountOptions o;
  o.index_stream = true;
  auto mounted = b->MountSegment(store.name, kSegment, o);
  ASSERT_TRUE(mounted.ok()) << mounted.status().ToString();
  store.master = b.get();
  store.id = *mounted;
  auto opened = b->OpenIndexLink(store.id);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  store.link = std::move(opened).value();
  auto ghost = [&](size_t i, const std::string& key) {
    IndexEntry e = report.memory[i];
    e.key = key;
    return e;
  };
  const auto& m = report.memory;
  store.link->Expect(7);
  store.link->Add({m[0], m[1], ghost(1, "ghost-next")}, {});
  store.link->Add({m[3], m[2], ghost(0, "ghost-back")}, {});
  auto done = store.link->Finish();
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  store.Pump();
  EXPECT_EQ(done->memory_replicas, 4u);
  EXPECT_EQ(done->rejected, 0u);
  for (const IndexEntry& e : m) {
    auto got = b->GetReplicas({e.key});
    ASSERT_TRUE(got[0].ok()) << e.key << ": " << got[0].status().ToString();
    EXPECT_EQ(got[0]->replicas.at(0).offset, e.offset) << e.key;
  }
  EXPECT_FALSE(b->GetReplicas({"ghost-next"})[0].ok());
  EXPECT_FALSE(b->GetReplicas({"ghost-back"})[0].ok());
  // The store forgot none of the four.
  EXPECT_EQ(store.index->Report().memory.size(), 4u);
}

TEST_F(MasterRecoveryTest, RecoveredObjectsAreNeitherEvictedNorRemovedForOneLeaseTtl) {
  FakeStore store("store-a");
  stores_ = {&store};
  auto a = NewMaster();
  store.MountOn(*a);
  Put(*a, store, "k", Bytes(100'000, 'k'));
  PumpAll();
  a.reset();
  auto b = NewMaster();
  store.MountOn(*b);
  EXPECT_EQ(b->Remove("k", /*force=*/true).code(), ErrorCode::OBJECT_HAS_LEASE);
  EXPECT_EQ(b->EvictFromSegment(store.id, kSegment), 0u);
  EXPECT_EQ(b->RemoveAll(/*force=*/true), 0u);
  clock_.Advance(Millis(1001));
  EXPECT_TRUE(b->Remove("k", false).ok());
}

TEST_F(MasterRecoveryTest, AFreedRangeIsReusedOnlyOnceTheStoreAcknowledgedTheFree) {
  FakeStore store("store-a");
  stores_ = {&store};
  auto a = NewMaster();
  store.MountOn(*a);
  const uint64_t whole = kSegment;
  const uint64_t off = Put(*a, store, "big", Bytes(whole, 'b'));
  ASSERT_EQ(off, 0u);
  PumpAll();
  ASSERT_TRUE(a->Remove("big", false).ok());
  const auto seg = a->segments().Find(store.id);
  EXPECT_EQ(seg->allocator->quarantined(), whole);
  // Not acknowledged: the put waits its budget (50 ms), then finds no room.
  auto refused = a->PutStart({"next"}, {whole}, ReplicateConfig{});
  EXPECT_EQ(refused[0].code(), ErrorCode::NO_AVAILABLE_HANDLE);
  EXPECT_EQ(store.index->stats().memory_entries, 1u);  // the store still indexes "big"
  // Acknowledged while a put waits for it: the put gets the range.
  std::thread acker([&] {
    std::this_thread::sleep_for(10ms);
    store.Pump();
  });
  auto waited = a->PutStart({"next"}, {whole}, ReplicateConfig{});
  acker.join();
  if (!waited[0].ok()) {  // the 50 ms budget ran out before the acker: try once more
    waited = a->PutStart({"next"}, {whole}, ReplicateConfig{});
  }
  ASSERT_TRUE(waited[0].ok()) << waited[0].status().ToString();
  EXPECT_EQ(store.index->stats().memory_entries, 0u);
  EXPECT_EQ(seg->allocator->quarantined(), 0u);
}

TEST_F(MasterRecoveryTest, EvictionForAPutWaitsForTheAcknowledgmentInsteadOfFailing) {
  FakeStore store("store-a");
  stores_ = {&store};
  MasterOptions o = Options(1);
  o.free_ack_wait = Millis(5000);
  o.high_watermark = 1.0;
  auto a = std::make_unique<MasterService>(o);
  store.MountOn(*a);
  for (int i = 0; i < 4; ++i) Put(*a, store, "old" + std::to_string(i), Bytes(kSegment / 4, 'o'));
  PumpAll();
  // The segment is full: the put evicts, and its space is quarantined until the store answers.
  std::atomic<bool> stop{false};
  std::thread pumper([&] {
    while (!stop.load()) {
      store.Pump();
      std::this_thread::sleep_for(2ms);
    }
  });
  const uint64_t off = Put(*a, store, "new", Bytes(kSegment / 4, 'n'));
  stop.store(true);
  pumper.join();
  EXPECT_NE(off, UINT64_MAX);
  EXPECT_GE(a->Stats().evicted_objects, 1u);
}

TEST_F(MasterRecoveryTest, ReplicasOfOnePutOnTwoStoresAreMergedIntoOneObject) {
  FakeStore s1("store-1"), s2("store-2");
  stores_ = {&s1, &s2};
  auto a = NewMaster();
  s1.MountOn(*a);
  s2.MountOn(*a);
  ReplicateConfig two;
  two.replica_num = 2;
  two.preferred_segment = "store-1";
  Put(*a, s1, "both", Bytes(5000, 'x'), two);
  PumpAll();
  a.reset();
  auto b = NewMaster();
  s1.MountOn(*b);
  s2.MountOn(*b);
  auto got = b->GetReplicas({"both"});
  ASSERT_TRUE(got[0].ok());
  EXPECT_EQ(got[0]->replicas.size(), 2u);
  EXPECT_EQ(b->Stats().objects, 1u);
}

TEST_F(MasterRecoveryTest, OfTwoPutsOfAKeyTheNewerWinsWhicheverStoreReportsFirst) {
  for (const bool stale_first : {true, false}) {
    SCOPED_TRACE(stale_first ? "stale store reports first" : "current store reports first");
    FakeStore s1("store-1"), s2("store-2");
    stores_ = {&s1, &s2};
    auto a = NewMaster();
    s1.MountOn(*a);
    s2.MountOn(*a);
    Put(*a, s1, "k", Bytes(1000, 'o'));
    s1.Pump();
    ASSERT_TRUE(a->Remove("k", false).ok());  // s1 never learns of it (its stream is slow)
    Put(*a, s2, "k", Bytes(1000, 'n'));
    s2.Pump();
    EXPECT_EQ(s1.index->stats().memory_entries, 1u);
    a.reset();
    auto b = NewMaster();
    if (stale_first) {
      s1.MountOn(*b);
      s2.MountOn(*b);
    } else {
      s2.MountOn(*b);
      s1.MountOn(*b);
    }
    PumpAll();
    auto got = b->GetReplicas({"k"});
    ASSERT_TRUE(got[0].ok());
    ASSERT_EQ(got[0]->replicas.size(), 1u);
    EXPECT_EQ(got[0]->replicas[0].segment, s2.id);
    EXPECT_EQ(got[0]->checksum, Checksum(Bytes(1000, 'n').data(), 1000));
    // The stale store was told to forget it.
    EXPECT_EQ(s1.index->stats().memory_entries, 0u);
    EXPECT_EQ(s2.index->stats().memory_entries, 1u);
  }
}

TEST_F(MasterRecoveryTest, AStoreWhoseSegmentMemoryIsGoneReportsNothingOfIt) {
  FakeStore store("store-a");
  stores_ = {&store};
  auto a = NewMaster();
  store.MountOn(*a);
  const uint64_t off = Put(*a, store, "k1", Bytes(1000, '1'));
  Put(*a, store, "k2", Bytes(1000, '2'));
  PumpAll();
  a.reset();
  // Its memory went (a new segment of the same index) — or one object's bytes were overwritten.
  std::memset(store.memory->base() + off, 0, 1000);
  auto b = NewMaster();
  const SegmentRecovery rec = store.MountOn(*b);
  EXPECT_EQ(rec.memory_replicas, 1u);
  EXPECT_EQ(b->GetReplicas({"k1"})[0].code(), ErrorCode::OBJECT_NOT_FOUND);
  EXPECT_TRUE(b->GetReplicas({"k2"})[0].ok());
  EXPECT_EQ(store.index->stats().memory_entries, 1u);
  EXPECT_EQ(store.index->stats().report_skipped, 1u);
}

TEST_F(MasterRecoveryTest, DiskReplicasComeBackOnlyWhileTheMasterHadThemAttached) {
  FakeStore store("store-a", /*tier=*/true);
  stores_ = {&store};
  auto a = NewMaster();
  store.MountOn(*a);
  auto added = a->AddDiskReplicas(store.id, {DiskRecord{"d1", DiskLocation{1, 5, 4096, 700}, 11},
                                             DiskRecord{"d2", DiskLocation{1, 5, 8192, 800}, 22},
                                             DiskRecord{"d3", DiskLocation{2, 6, 4096, 900}, 33}});
  for (const auto& st : added) ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_TRUE(a->Remove("d2", false).ok());  // the replica's claim tells the index
  PumpAll();
  EXPECT_EQ(store.index->stats().disk_entries, 2u);
  a.reset();
  store.dead_region = 2;  // region 2 was reused since: d3's record is gone
  auto b = NewMaster();
  const SegmentRecovery rec = store.MountOn(*b);
  EXPECT_EQ(rec.disk_replicas, 1u);
  auto got = b->GetReplicas({"d1", "d2", "d3"});
  ASSERT_TRUE(got[0].ok());
  EXPECT_EQ(got[0]->replicas.at(0).tier, ReplicaTier::kDisk);
  EXPECT_EQ(got[0]->replicas.at(0).disk.offset, 4096u);
  EXPECT_EQ(got[0]->checksum, 11u);
  EXPECT_EQ(got[1].code(), ErrorCode::OBJECT_NOT_FOUND);
  EXPECT_EQ(got[2].code(), ErrorCode::OBJECT_NOT_FOUND);
}

// A report is input: a disk record off a 4 KiB page (which no tier writes) is not adopted,
// and the others of the same report are, exactly where they are.
TEST_F(MasterRecoveryTest, ADiskRecordOffAPageIsNotAdoptedAndTheOthersAre) {
  FakeStore store("store-a", /*tier=*/true);
  stores_ = {&store};
  auto m = NewMaster();
  MountOptions o;
  o.index_stream = true;
  o.has_tier = true;
  auto mounted = m->MountSegment(store.name, kSegment, o);
  ASSERT_TRUE(mounted.ok()) << mounted.status().ToString();
  auto link = m->OpenIndexLink(*mounted);
  ASSERT_TRUE(link.ok()) << link.status().ToString();
  IndexEntry good{"good", 700, 11, 1, "", false, false, 0, DiskLocation{1, 5, 8192, 700}};
  IndexEntry bad{"bad", 700, 12, 2, "", false, false, 0, DiskLocation{1, 5, 8193, 700}};
  (*link)->Expect(2);
  (*link)->Add({}, {good, bad});
  auto done = (*link)->Finish();
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ(done->disk_replicas, 1u);
  EXPECT_EQ(done->rejected, 1u);
  auto got = m->GetReplicas({"good", "bad"});
  ASSERT_TRUE(got[0].ok()) << got[0].status().ToString();
  EXPECT_EQ(got[0]->replicas.at(0).disk.offset, 8192u);
  EXPECT_EQ(got[0]->replicas.at(0).disk.generation, 5u);
  EXPECT_EQ(got[1].code(), ErrorCode::OBJECT_NOT_FOUND);
}

TEST_F(MasterRecoveryTest, APutStartedOnThePreviousMasterFailsAndCountsAsLost) {
  FakeStore store("store-a");
  stores_ = {&store};
  auto a = NewMaster();
  store.MountOn(*a);
  auto started = a->PutStart({"inflight"}, {100}, ReplicateConfig{});
  ASSERT_TRUE(started[0].ok());
  PumpAll();
  a.reset();
  auto b = NewMaster();
  store.MountOn(*b);
  auto ended = b->PutEnd({"inflight"}, {started[0]->put_id}, {7});
  EXPECT_EQ(ended[0].code(), ErrorCode::OBJECT_NOT_FOUND);
  EXPECT_EQ(b->Stats().lost_puts, 1u);
  EXPECT_EQ(b->GetReplicas({"inflight"})[0].code(), ErrorCode::OBJECT_NOT_FOUND);
}

TEST_F(MasterRecoveryTest, AStreamReLinkedWithTheSameMasterIsReconciledNotAdopted) {
  FakeStore store("store-a");
  stores_ = {&store};
  auto a = NewMaster();
  store.MountOn(*a);
  Put(*a, store, "k1", Bytes(1000, '1'));
  PumpAll();
  // The stream drops: what happens meanwhile does not reach the store.
  store.link->feed()->Detach(store.link->generation());
  ASSERT_TRUE(a->Remove("k1", false).ok());
  Put(*a, store, "k2", Bytes(1000, '2'));
  const auto seg = a->segments().Find(store.id);
  EXPECT_GT(seg->allocator->quarantined(), 0u);  // k1's range waits for the next stream
  EXPECT_EQ(store.index->stats().memory_entries, 1u);
  const SegmentRecovery rec = store.Link();  // reports the stale k1; learns of k2
  EXPECT_EQ(rec.links, 2u);
  EXPECT_EQ(a->Stats().objects, 1u);  // k1 was not resurrected
  EXPECT_EQ(store.index->stats().memory_entries, 1u);
  EXPECT_EQ(seg->allocator->quarantined(), 0u);
  a.reset();
  auto b = NewMaster();
  store.MountOn(*b);
  EXPECT_TRUE(b->GetReplicas({"k2"})[0].ok());
  EXPECT_EQ(b->GetReplicas({"k1"})[0].code(), ErrorCode::OBJECT_NOT_FOUND);
}

// A tier mover that records what it was asked to write.
class RecordingMover final : public TierMover {
 public:
  std::vector<Result<DiskLocation>> Demote(const std::vector<DemoteItem>& items) override {
    std::vector<Result<DiskLocation>> out;
    for (const auto& item : items) {
      ++demoted;
      out.emplace_back(DiskLocation{3, 9, item.offset + 4096, item.size});
    }
    return out;
  }
  int demoted = 0;
};

TEST_F(MasterRecoveryTest, EvictionWaitsForATieredStoresStreamInsteadOfDropping) {
  FakeStore store("store-a", /*tier=*/true);
  stores_ = {&store};
  MasterOptions o = Options(1);
  o.high_watermark = 0.5;
  o.eviction_ratio = 0.1;
  auto a = std::make_unique<MasterService>(o);
  store.MountOn(*a);
  for (int i = 0; i < 6; ++i) Put(*a, store, "k" + std::to_string(i), Bytes(kSegment / 8, 'k'));
  // No tier stream: nothing is dropped.
  EXPECT_EQ(a->EvictIfNeeded(), 0u);
  EXPECT_EQ(a->Stats().objects, 6u);
  auto mover = std::make_shared<RecordingMover>();
  a->SetTierMover(store.id, mover);
  EXPECT_GT(a->EvictIfNeeded(), 0u);
  EXPECT_GT(mover->demoted, 0);
  EXPECT_EQ(a->Stats().objects, 6u);  // demoted, not dropped
  EXPECT_EQ(a->Stats().demoted_objects, static_cast<uint64_t>(mover->demoted));
}

// Upsert (PutMode::kUpsert) on an indexed segment: the swap in PutEnd publishes the new version
// to the store's index and takes the replaced one out of it at once, though the replaced range
// stays allocated for its readers until their lease ends (no new put lands on it). A master that
// dies right after is replaced by one that finds only the newer version.
TEST_F(MasterRecoveryTest, AnUpsertReplacesTheOldVersionInTheIndexAtOnceAndFreesItAfterItsLease) {
  FakeStore store("store-a");
  stores_ = {&store};
  auto a = NewMaster();
  store.MountOn(*a);
  ReplicateConfig rc;
  rc.preferred_segment = store.name;
  auto upsert = [&](const std::string& bytes) {
    auto up = a->UpsertStart({"k"}, {bytes.size()}, rc);
    EXPECT_TRUE(up[0].ok()) << up[0].status().ToString();
    if (!up[0].ok()) return UINT64_MAX;
    store.Write(up[0]->replicas[0].offset, bytes);
    EXPECT_TRUE(a->PutEnd({"k"}, {up[0]->put_id}, {Checksum(bytes.data(), bytes.size())})[0].ok());
    return up[0]->replicas[0].offset;
  };
  const std::string v1 = Bytes(1000, '1'), v2 = Bytes(2000, '2'), v3 = Bytes(3000, '3');
  const uint64_t off1 = Put(*a, store, "k", v1);
  ASSERT_TRUE(a->GetReplicas({"k"})[0].ok());  // a reader's lease on v1
  const uint64_t off2 = upsert(v2);
  ASSERT_NE(off2, off1);
  PumpAll();
  EXPECT_EQ(store.index->stats().memory_entries, 1u);  // v2 only, though v1 is still leased
  EXPECT_EQ(store.index->Report().memory[0].offset, off2);
  // v1's range is still allocated: a put of its size does not land on it.
  EXPECT_NE(Put(*a, store, "other", Bytes(1000, 'o')), off1);
  clock_.Advance(Millis(1001));
  a->ReclaimAbandonedPuts();  // v1's lease is over: freed now (a free of an offset not indexed)
  PumpAll();
  EXPECT_EQ(store.index->stats().memory_entries, 2u);
  ASSERT_TRUE(a->Remove("other", true).ok());
  PumpAll();

  ASSERT_TRUE(a->GetReplicas({"k"})[0].ok());  // a reader's lease on v2
  const uint64_t off3 = upsert(v3);
  PumpAll();
  EXPECT_EQ(store.index->stats().memory_entries, 1u);
  a.reset();  // dies while v2 is still allocated for its reader

  auto b = NewMaster();
  const SegmentRecovery rec = store.MountOn(*b);
  EXPECT_TRUE(rec.done);
  EXPECT_EQ(rec.reported, 1u);
  auto got = b->GetReplicas({"k"});
  ASSERT_TRUE(got[0].ok()) << got[0].status().ToString();
  EXPECT_EQ(got[0]->size, v3.size());
  EXPECT_EQ(got[0]->checksum, Checksum(v3.data(), v3.size()));
  ASSERT_EQ(got[0]->replicas.size(), 1u);
  EXPECT_EQ(got[0]->replicas[0].offset, off3);
}

// The soak's stale read after a leader cut: a grouped key at v1 on store 1 is read (the group's
// lease keeps v1 allocated as long as the group is read), then upserted onto store 2. A new
// master that hears from store 1 before store 2 must not serve v1 in between — a miss until
// store 2 links is fine, the old bytes are not. The same when v1 is a disk replica.
TEST_F(MasterRecoveryTest, AfterAnUpsertANewMasterNeverFindsTheOldVersionAloneInAnotherStore) {
  for (const bool disk : {false, true}) {
    SCOPED_TRACE(disk ? "v1 a disk replica" : "v1 in memory");
    FakeStore s1("store-1", /*tier=*/disk), s2("store-2");
    stores_ = {&s1, &s2};
    MasterOptions o = Options(next_base_ += 1'000'000);
    o.confirm_index_updates = true;
    auto a = std::make_unique<MasterService>(o);
    s1.MountOn(*a);
    s2.MountOn(*a);
    ReplicateConfig rc;
    rc.group_ids = {"g"};
    if (disk) {
      auto added = a->AddDiskReplicas(s1.id, {DiskRecord{"k", DiskLocation{1, 5, 4096, 1000},
                                                         Checksum(Bytes(1000, '1').data(), 1000)}});
      ASSERT_TRUE(added[0].ok()) << added[0].ToString();
      rc = ReplicateConfig{};  // disk records come ungrouped; lease it as an object
    } else {
      Put(*a, s1, "k", Bytes(1000, '1'), rc);
      Put(*a, s1, "k2", Bytes(1000, 'x'), rc);
    }
    PumpAll();
    ASSERT_EQ(disk ? s1.index->stats().disk_entries : s1.index->stats().memory_entries,
              disk ? 1u : 2u);
    ASSERT_TRUE(a->GetReplicas({disk ? "k" : "k2"})[0].ok());  // the lease that pins v1

    std::atomic<bool> pumping{true};
    std::thread pump([&] {  // both stores' streams, applying and acknowledging
      while (pumping.load()) {
        PumpAll();
        std::this_thread::sleep_for(1ms);
      }
    });
    rc.preferred_segment = s2.name;
    const std::string v2 = Bytes(1500, '2');
    auto up = a->UpsertStart({"k"}, {v2.size()}, rc);
    ASSERT_TRUE(up[0].ok()) << up[0].status().ToString();
    ASSERT_EQ(up[0]->replicas[0].segment, s2.id);
    s2.Write(up[0]->replicas[0].offset, v2);
    const Status ended = a->PutEnd({"k"}, {up[0]->put_id}, {Checksum(v2.data(), v2.size())})[0];
    pumping = false;
    pump.join();
    ASSERT_TRUE(ended.ok()) << ended.ToString();
    // Confirmed by store 1 before PutEnd returned: v1 is out of its index.
    EXPECT_EQ(disk ? s1.index->stats().disk_entries : s1.index->stats().memory_entries,
              disk ? 0u : 1u);
    a.reset();

    auto b = NewMaster();
    s1.MountOn(*b);  // store 1 links first; store 2 is slow
    auto got = b->GetReplicas({"k"});
    EXPECT_FALSE(got[0].ok()) << "served the replaced version from " << s1.name;
    s2.MountOn(*b);
    got = b->GetReplicas({"k"});
    ASSERT_TRUE(got[0].ok()) << got[0].status().ToString();
    EXPECT_EQ(got[0]->checksum, Checksum(v2.data(), v2.size()));
    stores_.clear();
  }
}

// An upsert of a key the master no longer has (evicted) is a plain put; but the evicted version
// may still be in its store's index (the free on its way), and a master taking over would serve
// it. So that put's end waits for every store's index, like an upsert's: TRANSFER_FAIL while the
// old version's store is silent, OK once it applied the free.
TEST_F(MasterRecoveryTest, AnUpsertOfAnEvictedKeyWaitsUntilNoStoreHoldsTheOldVersion) {
  FakeStore s1("store-1"), s2("store-2");
  stores_ = {&s1, &s2};
  MasterOptions o = Options(next_base_ += 1'000'000);
  o.confirm_index_updates = true;
  o.free_ack_wait = Millis(200);
  auto a = std::make_unique<MasterService>(o);
  s1.MountOn(*a);
  s2.MountOn(*a);
  ReplicateConfig rc;
  rc.preferred_segment = s2.name;
  auto upsert = [&](const std::string& bytes, std::vector<FakeStore*> pumped) {
    std::atomic<bool> pumping{true};
    std::thread pump([&] {
      while (pumping.load()) {
        for (FakeStore* f : pumped) f->Pump();
        std::this_thread::sleep_for(1ms);
      }
    });
    auto up = a->UpsertStart({"k"}, {bytes.size()}, rc);
    EXPECT_TRUE(up[0].ok()) << up[0].status().ToString();
    s2.Write(up[0]->replicas[0].offset, bytes);
    const Status ended =
        a->PutEnd({"k"}, {up[0]->put_id}, {Checksum(bytes.data(), bytes.size())})[0];
    pumping = false;
    pump.join();
    return ended;
  };
  Put(*a, s1, "k", Bytes(1000, '1'));
  PumpAll();
  ASSERT_GT(a->EvictFromSegment(s1.id, 1), 0u);  // k evicted; s1 has not applied the free
  ASSERT_EQ(s1.index->stats().memory_entries, 1u);
  const Status silent = upsert(Bytes(1000, '2'), {&s2});
  EXPECT_EQ(silent.code(), ErrorCode::TRANSFER_FAIL) << silent.ToString();

  // Again, with s1 applying its feed: OK, and v1 is out of s1's index before PutEnd returned.
  PumpAll();
  ASSERT_GT(a->EvictFromSegment(s2.id, kSegment), 0u);
  Put(*a, s1, "j", Bytes(1000, 'j'));  // s1's feed busy with something else
  const std::string v3 = Bytes(1000, '3');
  const Status ok = upsert(v3, {&s1, &s2});
  EXPECT_TRUE(ok.ok()) << ok.ToString();
  a.reset();
  auto b = NewMaster();
  s1.MountOn(*b);
  EXPECT_FALSE(b->GetReplicas({"k"})[0].ok());  // nothing of k on s1
  s2.MountOn(*b);
  auto got = b->GetReplicas({"k"});
  ASSERT_TRUE(got[0].ok()) << got[0].status().ToString();
  EXPECT_EQ(got[0]->checksum, Checksum(v3.data(), v3.size()));
  stores_.clear();
}

// The hold of recovered objects covers RemoveByRegex too, and eviction under the 'reuse'
// policy; once it ends they are removable and evictable as any object.
TEST_F(MasterRecoveryTest, RemoveByRegexAndTheReusePolicyRespectTheHoldOfRecoveredObjects) {
  FakeStore store("store-a");
  stores_ = {&store};
  auto a = NewMaster();
  store.MountOn(*a);
  Put(*a, store, "k", Bytes(100'000, 'k'));
  Put(*a, store, "j", Bytes(100'000, 'j'));
  PumpAll();
  a.reset();
  next_base_ += 1'000'000;
  MasterOptions o = Options(next_base_);
  auto policy = MakeEvictionPolicy("reuse");
  ASSERT_TRUE(policy.ok()) << policy.status().ToString();
  o.policy = *policy;
  auto b = std::make_unique<MasterService>(o);
  store.MountOn(*b);
  ASSERT_EQ(b->Stats().objects, 2u);
  auto removed = b->RemoveByRegex("^k$", /*force=*/true);
  ASSERT_TRUE(removed.ok()) << removed.status().ToString();
  EXPECT_EQ(*removed, 0u);
  EXPECT_EQ(b->EvictFromSegment(store.id, kSegment), 0u);
  EXPECT_EQ(b->Stats().objects, 2u);
  clock_.Advance(Millis(1001));
  removed = b->RemoveByRegex("^k$", /*force=*/false);
  ASSERT_TRUE(removed.ok());
  EXPECT_EQ(*removed, 1u);
  EXPECT_GT(b->EvictFromSegment(store.id, kSegment), 0u);
  EXPECT_EQ(b->Stats().objects, 0u);
}

// confirm_index_updates (as `tierkv master` runs): a remove or an upsert returns once the store's
// index applied it, so a master taking over cannot find the removed object, or the replaced
// version alone, there; a store that does not confirm in time makes it TRANSFER_FAIL (the
// change is made on this master either way).
TEST_F(MasterRecoveryTest, RemovesAndUpsertsWaitForTheStoresIndexesToConfirm) {
  FakeStore store("store-a");
  stores_ = {&store};
  MasterOptions o = Options(5'000'000);
  o.confirm_index_updates = true;
  o.free_ack_wait = Millis(300);
  auto a = std::make_unique<MasterService>(o);
  store.MountOn(*a);
  ReplicateConfig rc;
  rc.preferred_segment = store.name;
  Put(*a, store, "kept", Bytes(1000, 'k'));
  Put(*a, store, "gone", Bytes(1000, 'g'));
  Put(*a, store, "late", Bytes(1000, 'l'));
  PumpAll();
  ASSERT_EQ(store.index->stats().memory_entries, 3u);

  std::atomic<bool> pumping{true};
  std::thread pump([&] {  // the store's stream, delivering and acknowledging as it goes
    while (pumping.load()) {
      store.Pump();
      std::this_thread::sleep_for(1ms);
    }
  });
  EXPECT_TRUE(a->Remove("gone", true).ok());
  EXPECT_EQ(store.index->stats().memory_entries, 2u);  // applied before Remove returned
  const std::string v2 = Bytes(1500, '2');
  auto up = a->UpsertStart({"kept"}, {v2.size()}, rc);
  ASSERT_TRUE(up[0].ok()) << up[0].status().ToString();
  store.Write(up[0]->replicas[0].offset, v2);
  EXPECT_TRUE(a->PutEnd({"kept"}, {up[0]->put_id}, {Checksum(v2.data(), v2.size())})[0].ok());
  bool indexed = false;  // v2 indexed before PutEnd returned
  for (const IndexEntry& e : store.index->Report().memory) indexed |= e.put_id == up[0]->put_id;
  EXPECT_TRUE(indexed);
  pumping = false;
  pump.join();

  // The store stops confirming (cut off from the master): both fail after free_ack_wait.
  const auto t0 = std::chrono::steady_clock::now();
  const Status removed = a->Remove("late", true);
  EXPECT_EQ(removed.code(), ErrorCode::TRANSFER_FAIL) << removed.ToString();
  EXPECT_NE(removed.message().find("did not confirm"), std::string::npos) << removed.ToString();
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 250ms);
  EXPECT_FALSE(a->GetReplicas({"late"})[0].ok());  // removed on this master all the same
  const std::string v3 = Bytes(1200, '3');
  up = a->UpsertStart({"kept"}, {v3.size()}, rc);
  ASSERT_TRUE(up[0].ok()) << up[0].status().ToString();
  store.Write(up[0]->replicas[0].offset, v3);
  const Status ended = a->PutEnd({"kept"}, {up[0]->put_id}, {Checksum(v3.data(), v3.size())})[0];
  EXPECT_EQ(ended.code(), ErrorCode::TRANSFER_FAIL) << ended.ToString();
  auto got = a->GetReplicas({"kept"});
  ASSERT_TRUE(got[0].ok());
  EXPECT_EQ(got[0]->size, v3.size());  // the new version is in place here
  // Batches wait once for all their keys' stores.
  PumpAll();
  EXPECT_EQ(a->BatchRemove({"kept", "nothing"}, true)[0].code(), ErrorCode::TRANSFER_FAIL);
}

// A store this master unmounted (it expired: cut off, stopped) that comes back with the same
// segment: its index is discarded, not adopted — the master went on without it (here: an
// upsert to another store that the returning store never heard of), so what it reports may be
// a version this master replaced. A new master still adopts.
TEST_F(MasterRecoveryTest, AStoreThisMasterUnmountedComesBackEmpty) {
  FakeStore a_store("store-a"), b_store("store-b");
  stores_ = {&a_store, &b_store};
  auto m = NewMaster();
  a_store.MountOn(*m);
  b_store.MountOn(*m);
  Put(*m, a_store, "k", Bytes(1000, '1'));
  PumpAll();
  ASSERT_EQ(a_store.index->stats().memory_entries, 1u);
  ASSERT_TRUE(m->UnmountSegment(a_store.id).ok());  // expired
  ReplicateConfig rc;
  rc.preferred_segment = b_store.name;
  const std::string v2 = Bytes(1000, '2');
  auto up = m->UpsertStart({"k"}, {v2.size()}, rc);  // k is gone: a plain put, on b
  ASSERT_TRUE(up[0].ok()) << up[0].status().ToString();
  b_store.Write(up[0]->replicas[0].offset, v2);
  ASSERT_TRUE(m->PutEnd({"k"}, {up[0]->put_id}, {Checksum(v2.data(), v2.size())})[0].ok());
  ASSERT_TRUE(m->Remove("k", true).ok());  // and removed: nothing of k should come back
  PumpAll();

  const SegmentRecovery rec = a_store.MountOn(*m);  // the same store, back
  EXPECT_EQ(rec.reported, 1u);
  EXPECT_EQ(rec.memory_replicas, 0u);
  EXPECT_EQ(rec.rejected, 1u);
  EXPECT_FALSE(m->GetReplicas({"k"})[0].ok());           // not resurrected
  EXPECT_EQ(a_store.index->stats().memory_entries, 0u);  // told to forget it

  // A new master knows nothing of this: it adopts what the stores report.
  Put(*m, a_store, "j", Bytes(500, 'j'));
  PumpAll();
  m.reset();
  auto n = NewMaster();
  EXPECT_EQ(a_store.MountOn(*n).memory_replicas, 1u);
  EXPECT_TRUE(n->GetReplicas({"j"})[0].ok());
}

// What confirm_index_updates waits for is the store's own acknowledgment: a stream that ended
// with a batch in flight confirms nothing (the window settles, the index did not learn it), and
// the next stream's reconciliation, once acknowledged, confirms it.
TEST_F(MasterRecoveryTest, AnEndedStreamConfirmsNothing) {
  FakeStore store("store-a");
  stores_ = {&store};
  auto m = NewMaster();
  store.MountOn(*m);
  Put(*m, store, "k", Bytes(100, 'k'));  // its commit is in the feed, not delivered
  auto feed = store.link->feed();
  const uint64_t seq = feed->Barrier();
  ASSERT_GT(seq, 0u);
  ASSERT_TRUE(feed->Next(store.link->generation(), 0ms).has_value());  // sent, never acked
  feed->Detach(store.link->generation());                              // the stream broke
  EXPECT_FALSE(feed->WaitAckedThrough(seq, 50ms));
  store.Link();  // a new stream: reconciled, delivered and acknowledged
  EXPECT_TRUE(feed->WaitAckedThrough(seq, 50ms));
  EXPECT_EQ(store.index->stats().memory_entries, 1u);
}

}  // namespace
}  // namespace tierkv
