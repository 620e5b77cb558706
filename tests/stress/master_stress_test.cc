// MasterService under concurrency: threads race puts (ended, revoked or
// abandoned), reads, removes, evictions, reclaims and segment mount/unmount on
// overlapping keys whose group changes from put to put (so redirects between
// key shards and group shards come and go). Afterwards the space accounting
// must add up exactly and nothing may be left behind. Run under TSan in CI, with each eviction
// policy (the "reuse" one keeps reference counts, per-shard statistics and ghosts on these paths;
// puts name random parents for it).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "master/master_service.h"
#include "tierkv/status.h"
#include "tierkv/types.h"

namespace tierkv {
namespace {

constexpr int kStressKeys = 96;
constexpr int kGroups = 12;
constexpr uint64_t kMaxSize = 48 << 10;
constexpr uint64_t kAlign = 64;
constexpr Millis kStressTtl{40};
constexpr Millis kPutTimeout{100};

std::string KeyName(int n) {
  return "model@tp_rank:" + std::to_string(n % 4) + "@" + std::to_string(n);
}
// The checksum a writer stores, so a reader can tell whose PutEnd it sees.
uint64_t ChecksumOf(const std::string& key, uint64_t size) {
  return std::hash<std::string>{}(key) ^ (size * 0x9E3779B97F4A7C15ull);
}
uint64_t Aligned(uint64_t size) { return (size + kAlign - 1) / kAlign * kAlign; }

// Collects unexpected outcomes from any thread; reported on the main thread.
class Errors {
 public:
  void Add(const std::string& what) {
    std::lock_guard lock(mu_);
    if (list_.size() < 20) list_.push_back(what);
    ++count_;
  }
  void Expect(bool ok, const std::string& what) {
    if (!ok) Add(what);
  }
  void Report() {
    std::lock_guard lock(mu_);
    for (const auto& e : list_) ADD_FAILURE() << e;
    EXPECT_EQ(count_, 0u);
  }

 private:
  std::mutex mu_;
  std::vector<std::string> list_;
  uint64_t count_ = 0;
};

bool OneOf(ErrorCode c, std::initializer_list<ErrorCode> codes) {
  return std::find(codes.begin(), codes.end(), c) != codes.end();
}

void Worker(MasterService& m, ManualClock& clock, int seed, int ops, Errors& errors,
            std::atomic<uint64_t>& puts_ok) {
  std::mt19937 rng(seed);
  auto key_of = [&] { return KeyName(static_cast<int>(rng() % kStressKeys)); };
  for (int op = 0; op < ops; ++op) {
    const int kind = static_cast<int>(rng() % 100);
    if (kind < 40) {  // put a batch: ended, revoked or abandoned
      std::vector<std::string> keys;
      std::vector<uint64_t> sizes;
      ReplicateConfig cfg;
      cfg.replica_num = 1 + rng() % 2;
      cfg.with_soft_pin = rng() % 8 == 0;
      cfg.with_hard_pin = rng() % 16 == 0;
      const bool grouped = rng() % 3 != 0;
      const std::string group = "grp-" + std::to_string(rng() % kGroups);
      const int n = 1 + static_cast<int>(rng() % 4);
      for (int i = 0; i < n; ++i) {
        keys.push_back(key_of());
        sizes.push_back(1 + rng() % kMaxSize);
        cfg.group_ids.push_back(grouped && rng() % 4 != 0 ? group : "");
        cfg.parent_keys.push_back(rng() % 2 == 0 ? key_of() : "");
      }
      auto r = m.PutStart(keys, sizes, cfg);
      std::vector<std::string> ended;
      std::vector<uint64_t> ids, sums;
      std::set<std::string> seen;
      for (size_t i = 0; i < keys.size(); ++i) {
        const bool dup = !seen.insert(keys[i]).second;
        if (!r[i].ok()) {
          errors.Expect(dup ? r[i].code() == ErrorCode::DUPLICATE_KEY
                            : OneOf(r[i].code(), {ErrorCode::OBJECT_ALREADY_EXISTS,
                                                  ErrorCode::NO_AVAILABLE_HANDLE}),
                        "PutStart " + keys[i] + ": " + r[i].status().ToString());
          continue;
        }
        errors.Expect(!dup && r[i]->replicas.size() == cfg.replica_num,
                      "PutStart " + keys[i] + " placed a wrong number of replicas");
        ended.push_back(keys[i]);
        ids.push_back(r[i]->put_id);
        sums.push_back(ChecksumOf(keys[i], sizes[i]));
      }
      if (rng() % 8 == 0) clock.Advance(Millis(rng() % 8));
      const int outcome = static_cast<int>(rng() % 10);
      if (outcome < 7) {
        auto st = m.PutEnd(ended, ids, sums);
        for (size_t i = 0; i < st.size(); ++i) {
          if (st[i].ok()) {
            puts_ok.fetch_add(1, std::memory_order_relaxed);
            continue;
          }
          // Reclaimed or unmounted meanwhile (and maybe put again by another).
          errors.Expect(
              OneOf(st[i].code(), {ErrorCode::OBJECT_NOT_FOUND, ErrorCode::INVALID_WRITE}),
              "PutEnd " + ended[i] + ": " + st[i].ToString());
        }
      } else if (outcome < 9) {
        for (const auto& st : m.PutRevoke(ended, ids)) {
          errors.Expect(
              st.ok() || OneOf(st.code(), {ErrorCode::OBJECT_NOT_FOUND, ErrorCode::INVALID_WRITE}),
              "PutRevoke: " + st.ToString());
        }
      }  // else abandoned: ReclaimAbandonedPuts frees it later
    } else if (kind < 55) {
      std::vector<std::string> keys{key_of(), key_of(), key_of()};
      for (int e : m.Exists(keys)) errors.Expect(e == 0 || e == 1, "Exists: " + std::to_string(e));
    } else if (kind < 70) {
      std::vector<std::string> keys{key_of(), key_of()};
      auto r = m.GetReplicas(keys);
      for (size_t i = 0; i < keys.size(); ++i) {
        if (!r[i].ok()) {
          errors.Expect(
              OneOf(r[i].code(), {ErrorCode::OBJECT_NOT_FOUND, ErrorCode::REPLICA_IS_NOT_READY}),
              "GetReplicas " + keys[i] + ": " + r[i].status().ToString());
          continue;
        }
        const ObjectReplicas& rep = *r[i];
        errors.Expect(rep.checksum == ChecksumOf(keys[i], rep.size),
                      "GetReplicas " + keys[i] + ": checksum of another put");
        errors.Expect(
            !rep.replicas.empty() && rep.replicas.size() <= 2,
            "GetReplicas " + keys[i] + ": " + std::to_string(rep.replicas.size()) + " replicas");
        std::set<SegmentId> segs;
        for (const auto& loc : rep.replicas) {
          segs.insert(loc.segment);
          errors.Expect(loc.size == rep.size, "GetReplicas: replica size differs");
        }
        errors.Expect(segs.size() == rep.replicas.size(), "GetReplicas: replicas share a segment");
      }
    } else if (kind < 82) {
      const Status st = m.Remove(key_of(), rng() % 2 == 0);
      errors.Expect(
          st.ok() || OneOf(st.code(), {ErrorCode::OBJECT_NOT_FOUND, ErrorCode::OBJECT_HAS_LEASE,
                                       ErrorCode::REPLICA_IS_NOT_READY}),
          "Remove: " + st.ToString());
    } else if (kind < 90) {
      m.EvictFromSegment(static_cast<SegmentId>(1 + rng() % 5), rng() % (256 << 10));
    } else if (kind < 94) {
      m.ReclaimAbandonedPuts();
    } else if (kind < 97) {
      m.EvictIfNeeded();
    } else if (kind < 98) {
      m.RemoveAll(rng() % 2 == 0);
    } else {
      clock.Advance(Millis(rng() % 20));
    }
  }
}

void RacingOperationsKeepSpaceAccountingExact(const char* policy) {
  ManualClock clock;
  MasterOptions opts;
  opts.clock = &clock;
  opts.shards = 16;
  opts.lease_ttl = kStressTtl;
  opts.put_timeout = kPutTimeout;
  auto made = MakeEvictionPolicy(policy);
  ASSERT_TRUE(made.ok());
  opts.policy = *made;
  MasterService m(opts);
  std::vector<SegmentId> fixed;
  for (const char* name : {"s0", "s1", "s2"}) {
    auto id = m.MountSegment(name, 1 << 20);  // ~2x smaller than the key space
    ASSERT_TRUE(id.ok());
    fixed.push_back(*id);
  }

  Errors errors;
  std::atomic<uint64_t> puts_ok{0};
  std::atomic<int> running{0};
  constexpr int kThreads = 4;
  constexpr int kOps = 1500;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    running.fetch_add(1);
    threads.emplace_back([&, t] {
      Worker(m, clock, 1000 + t, kOps, errors, puts_ok);
      running.fetch_sub(1);
    });
  }
  // A segment that comes and goes: its replicas are dropped on unmount, and a
  // group that loses a member to it goes whole.
  std::vector<std::shared_ptr<const Segment>> unmounted;
  threads.emplace_back([&] {
    while (running.load() > 0 && unmounted.size() < 200) {
      auto id = m.MountSegment("tmp", 512 << 10);
      if (!id.ok()) {
        errors.Add("Mount tmp: " + id.status().ToString());
        return;
      }
      std::this_thread::yield();
      auto seg = m.segments().Find(*id);
      const Status st = m.UnmountSegment(*id);
      errors.Expect(st.ok(), "Unmount tmp: " + st.ToString());
      unmounted.push_back(std::move(seg));
    }
  });
  for (auto& th : threads) th.join();
  errors.Report();
  EXPECT_GT(puts_ok.load(), 100u);
  EXPECT_GT(m.Stats().evicted_objects, 0u);

  // Quiesced: every pending put is abandoned by now; reclaim them all.
  clock.Advance(kPutTimeout + kStressTtl + Millis(1));
  m.ReclaimAbandonedPuts();
  MasterStats st = m.Stats();
  EXPECT_EQ(st.pending_objects, 0u);

  // used() of each segment is exactly the aligned sizes of the live replicas
  // on it, and no live replica is on an unmounted segment.
  std::map<SegmentId, uint64_t> expect;
  uint64_t live = 0;
  for (int n = 0; n < kStressKeys; ++n) {
    const std::string key = KeyName(n);
    auto r = m.GetReplicas({key});
    if (!r[0].ok()) {
      EXPECT_EQ(r[0].code(), ErrorCode::OBJECT_NOT_FOUND) << key;
      continue;
    }
    ++live;
    for (const auto& loc : r[0]->replicas) {
      EXPECT_NE(m.segments().Find(loc.segment), nullptr) << key << " on unmounted " << loc.segment;
      expect[loc.segment] += Aligned(loc.size);
    }
  }
  EXPECT_EQ(st.objects, live);
  for (SegmentId id : fixed) {
    EXPECT_EQ(m.segments().Find(id)->allocator->used(), expect[id]) << "segment " << id;
  }
  for (const auto& seg : unmounted) {
    EXPECT_EQ(seg->allocator->used(), 0u) << "unmounted segment " << seg->id;
  }

  // Everything removed: no space, object, group or stale redirect remains.
  EXPECT_EQ(m.RemoveAll(true), live);
  for (SegmentId id : fixed) EXPECT_EQ(m.segments().Find(id)->allocator->used(), 0u);
  st = m.Stats();
  EXPECT_EQ(st.objects, 0u);
  EXPECT_EQ(st.groups, 0u);
  std::vector<std::string> keys;
  for (int n = 0; n < kStressKeys; ++n) keys.push_back(KeyName(n));
  auto r = m.PutStart(keys, std::vector<uint64_t>(keys.size(), 64), {});
  std::vector<uint64_t> ids;
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_TRUE(r[i].ok()) << keys[i] << ": " << r[i].status().ToString();
    ids.push_back(r[i]->put_id);
  }
  for (const auto& s : m.PutEnd(keys, ids, std::vector<uint64_t>(keys.size(), 0))) {
    EXPECT_TRUE(s.ok());
  }
  EXPECT_EQ(m.Exists(keys), std::vector<int>(keys.size(), 1));
}

TEST(MasterConcurrencyTest, RacingOperationsKeepSpaceAccountingExact) {
  RacingOperationsKeepSpaceAccountingExact("lru");
}

TEST(MasterConcurrencyTest, RacingOperationsKeepSpaceAccountingExactWithReusePolicy) {
  RacingOperationsKeepSpaceAccountingExact("reuse");
}

// Restart recovery: two stores link at once (links of different segments adopt in parallel),
// one holding the older version of every key and the other the newer version of a third of them
// (grouped keys among them: redirects between shards), while a reader reads. The newer put is
// what stays, every range is either adopted or handed back to its store, nothing counts twice.
TEST(MasterConcurrencyTest, TwoStoresLinkingAtOnceKeepTheNewerVersionOfEachKey) {
  constexpr int kKeys = 3000, kTwice = 1000;
  constexpr uint64_t kObject = 1024;
  MasterOptions o;
  o.shards = 16;
  MasterService master(o);
  MountOptions mount;
  mount.index_stream = true;
  auto older = master.MountSegment("store-old", 8 << 20, mount);
  auto newer = master.MountSegment("store-new", 8 << 20, mount);
  ASSERT_TRUE(older.ok() && newer.ok());
  auto entry = [](int key, uint64_t slot, uint64_t put_id) {
    IndexEntry e;
    e.key = KeyName(key);
    e.size = kObject;
    e.checksum = put_id;
    e.put_id = put_id;
    e.group_id = key % 3 == 0 ? "g" + std::to_string(key) : "";
    e.offset = slot * kObject;
    return e;
  };
  std::vector<IndexEntry> old_report, new_report;
  for (int i = 0; i < kKeys; ++i) old_report.push_back(entry(i, i, 1000 + i));
  for (int i = 0; i < kTwice; ++i) new_report.push_back(entry(i, i, 1'000'000 + i));
  auto old_link = master.OpenIndexLink(*older);
  auto new_link = master.OpenIndexLink(*newer);
  ASSERT_TRUE(old_link.ok() && new_link.ok());
  std::atomic<bool> done{false};
  std::thread reader([&] {
    std::vector<std::string> keys;
    for (int i = 0; i < 64; ++i) keys.push_back(KeyName(i * 40));
    while (!done.load()) (void)master.GetReplicas(keys);
  });
  auto link_all = [](MasterService::IndexLink& link, const std::vector<IndexEntry>& report) {
    link.Expect(report.size());
    for (size_t first = 0; first < report.size(); first += 256) {
      const size_t end = std::min(report.size(), first + 256);
      link.Add(std::vector<IndexEntry>(report.begin() + first, report.begin() + end), {});
    }
  };
  std::thread other([&] { link_all(**new_link, new_report); });
  link_all(**old_link, old_report);
  other.join();
  done = true;
  reader.join();
  auto old_rec = (*old_link)->Finish();
  auto new_rec = (*new_link)->Finish();
  ASSERT_TRUE(old_rec.ok() && new_rec.ok());
  EXPECT_EQ(old_rec->memory_replicas + old_rec->rejected, old_report.size());
  EXPECT_EQ(new_rec->memory_replicas, new_report.size());  // the newer always wins
  EXPECT_EQ(master.Stats().objects, static_cast<uint64_t>(kKeys));
  for (int i = 0; i < kKeys; ++i) {
    auto got = master.GetReplicas({KeyName(i)});
    ASSERT_TRUE(got[0].ok()) << KeyName(i) << ": " << got[0].status().ToString();
    ASSERT_EQ(got[0]->replicas.size(), 1u);
    EXPECT_EQ(got[0]->replicas[0].segment, i < kTwice ? *newer : *older) << KeyName(i);
  }
  // The older versions' ranges are free again (rejected, or adopted and then replaced).
  EXPECT_EQ(master.segments().Find(*older)->allocator->used(), (kKeys - kTwice) * kObject);
}

}  // namespace
}  // namespace tierkv
