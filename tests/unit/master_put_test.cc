// MasterService two-phase put, removal and unmount: exact codes and states.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "master/master_service.h"
#include "size_units.h"
#include "tierkv/status.h"
#include "tierkv/types.h"

namespace tierkv {
namespace {

ReplicateConfig Prefer(const std::string& segment) {
  ReplicateConfig c;
  c.preferred_segment = segment;
  return c;
}
ReplicateConfig Replicas(size_t n) {
  ReplicateConfig c;
  c.replica_num = n;
  return c;
}
ReplicateConfig HardPin() {
  ReplicateConfig c;
  c.with_hard_pin = true;
  return c;
}
ReplicateConfig SoftPin() {
  ReplicateConfig c;
  c.with_soft_pin = true;
  return c;
}

class MasterPutTest : public ::testing::Test {
 protected:
  MasterOptions Options() {
    MasterOptions o;
    o.clock = &clock_;
    o.shards = 16;
    return o;
  }
  void Make() { master_ = std::make_unique<MasterService>(Options()); }
  void SetUp() override { Make(); }

  SegmentId Mount(const std::string& name, uint64_t capacity) {
    auto r = master_->MountSegment(name, capacity);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : 0;
  }
  uint64_t Used(SegmentId id) const {
    auto seg = master_->segments().Find(id);
    EXPECT_NE(seg, nullptr) << "segment " << id;
    return seg ? seg->allocator->used() : UINT64_MAX;
  }
  // PutStart of one key; fails the test on error.
  PutStartResult Start(const std::string& key, uint64_t size, const ReplicateConfig& cfg = {}) {
    auto r = master_->PutStart({key}, {size}, cfg);
    EXPECT_EQ(r.size(), 1u);
    EXPECT_TRUE(r[0].ok()) << key << ": " << r[0].status().ToString();
    return r[0].ok() ? *r[0] : PutStartResult{};
  }
  void End(const std::string& key, uint64_t put_id, uint64_t checksum = 0) {
    auto st = master_->PutEnd({key}, {put_id}, {checksum});
    ASSERT_EQ(st.size(), 1u);
    EXPECT_TRUE(st[0].ok()) << key << ": " << st[0].ToString();
  }
  PutStartResult Put(const std::string& key, uint64_t size, const ReplicateConfig& cfg = {},
                     uint64_t checksum = 0) {
    PutStartResult r = Start(key, size, cfg);
    End(key, r.put_id, checksum);
    return r;
  }
  ErrorCode EndCode(const std::string& key, uint64_t put_id, uint64_t checksum = 0) {
    return master_->PutEnd({key}, {put_id}, {checksum})[0].code();
  }
  ErrorCode RevokeCode(const std::string& key, uint64_t put_id) {
    return master_->PutRevoke({key}, {put_id})[0].code();
  }
  ErrorCode GetCode(const std::string& key) { return master_->GetReplicas({key})[0].code(); }
  int ExistsOne(const std::string& key) { return master_->Exists({key})[0]; }

  ManualClock clock_;
  std::unique_ptr<MasterService> master_;
};

TEST_F(MasterPutTest, PutStartPlacesReplicasOnDistinctSegments) {
  const SegmentId a = Mount("a", kMiB);
  const SegmentId b = Mount("b", kMiB);
  const SegmentId c = Mount("c", kMiB);
  ReplicateConfig cfg;
  cfg.replica_num = 2;
  auto r = master_->PutStart({"k"}, {1000}, cfg);
  ASSERT_EQ(r.size(), 1u);
  ASSERT_TRUE(r[0].ok()) << r[0].status().ToString();
  EXPECT_NE(r[0]->put_id, 0u);
  ASSERT_EQ(r[0]->replicas.size(), 2u);
  std::set<SegmentId> segs;
  for (const auto& loc : r[0]->replicas) {
    segs.insert(loc.segment);
    EXPECT_EQ(loc.size, 1000u);
    EXPECT_EQ(loc.tier, ReplicaTier::kMemory);
    EXPECT_EQ(loc.offset % 64, 0u);
  }
  EXPECT_EQ(segs.size(), 2u);
  // Space is reserved (aligned to 64) on exactly the two chosen segments.
  uint64_t total = 0;
  for (SegmentId id : {a, b, c}) {
    const uint64_t used = Used(id);
    EXPECT_EQ(used, segs.contains(id) ? 1024u : 0u) << "segment " << id;
    total += used;
  }
  EXPECT_EQ(total, 2048u);
  // Each replica of one more object lands on a distinct segment too.
  cfg.replica_num = 3;
  auto r3 = master_->PutStart({"k3"}, {64}, cfg);
  ASSERT_TRUE(r3[0].ok());
  std::set<SegmentId> segs3;
  for (const auto& loc : r3[0]->replicas) segs3.insert(loc.segment);
  EXPECT_EQ(segs3, (std::set<SegmentId>{a, b, c}));
}

TEST_F(MasterPutTest, ObjectNotReadableUntilPutEnd) {
  Mount("a", kMiB);
  Mount("b", kMiB);
  ReplicateConfig cfg;
  cfg.replica_num = 2;
  PutStartResult started = Start("obj", 5000, cfg);
  EXPECT_EQ(ExistsOne("obj"), 0);
  EXPECT_EQ(GetCode("obj"), ErrorCode::REPLICA_IS_NOT_READY);
  EXPECT_EQ(master_->Stats().pending_objects, 1u);

  End("obj", started.put_id, 0xfeedbeefcafeull);
  EXPECT_EQ(ExistsOne("obj"), 1);
  auto g = master_->GetReplicas({"obj"});
  ASSERT_TRUE(g[0].ok()) << g[0].status().ToString();
  EXPECT_EQ(g[0]->size, 5000u);
  EXPECT_EQ(g[0]->checksum, 0xfeedbeefcafeull);
  ASSERT_EQ(g[0]->replicas.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(g[0]->replicas[i].segment, started.replicas[i].segment);
    EXPECT_EQ(g[0]->replicas[i].offset, started.replicas[i].offset);
    EXPECT_EQ(g[0]->replicas[i].size, 5000u);
  }
  MasterStats st = master_->Stats();
  EXPECT_EQ(st.objects, 1u);
  EXPECT_EQ(st.pending_objects, 0u);
}

TEST_F(MasterPutTest, PutRevokeFreesSpace) {
  const SegmentId a = Mount("a", kMiB);
  const SegmentId b = Mount("b", kMiB);
  ReplicateConfig cfg;
  cfg.replica_num = 2;
  PutStartResult started = Start("obj", 4096, cfg);
  EXPECT_EQ(Used(a), 4096u);
  EXPECT_EQ(Used(b), 4096u);
  EXPECT_EQ(RevokeCode("obj", started.put_id), ErrorCode::OK);
  EXPECT_EQ(Used(a), 0u);
  EXPECT_EQ(Used(b), 0u);
  EXPECT_EQ(ExistsOne("obj"), 0);
  EXPECT_EQ(GetCode("obj"), ErrorCode::OBJECT_NOT_FOUND);
  EXPECT_EQ(master_->Stats().objects, 0u);
  // The key is free again.
  PutStartResult again = Put("obj", 100, cfg, 7);
  EXPECT_NE(again.put_id, started.put_id);
  EXPECT_EQ(ExistsOne("obj"), 1);
}

TEST_F(MasterPutTest, ExistingKeyIsRejectedWhilePendingAndWhenComplete) {
  const SegmentId a = Mount("a", kMiB);
  PutStartResult first = Start("k", 1000);
  auto again = master_->PutStart({"k"}, {1000}, {});
  EXPECT_EQ(again[0].code(), ErrorCode::OBJECT_ALREADY_EXISTS);
  EXPECT_EQ(Used(a), 1024u);  // nothing allocated for the loser
  End("k", first.put_id, 1);
  again = master_->PutStart({"k"}, {2000}, {});
  EXPECT_EQ(again[0].code(), ErrorCode::OBJECT_ALREADY_EXISTS);
  EXPECT_EQ(Used(a), 1024u);
  // The first writer's object is untouched.
  auto g = master_->GetReplicas({"k"});
  ASSERT_TRUE(g[0].ok());
  EXPECT_EQ(g[0]->size, 1000u);
  EXPECT_EQ(g[0]->checksum, 1u);
}

TEST_F(MasterPutTest, EndAndRevokeErrors) {
  Mount("a", kMiB);
  // Never started.
  EXPECT_EQ(EndCode("nope", 1), ErrorCode::OBJECT_NOT_FOUND);
  EXPECT_EQ(RevokeCode("nope", 1), ErrorCode::OBJECT_NOT_FOUND);
  EXPECT_EQ(EndCode("", 1), ErrorCode::INVALID_KEY);

  // Double PutEnd.
  PutStartResult p = Start("ended", 100);
  EXPECT_EQ(EndCode("ended", p.put_id, 5), ErrorCode::OK);
  EXPECT_EQ(EndCode("ended", p.put_id, 6), ErrorCode::INVALID_WRITE);
  EXPECT_EQ(RevokeCode("ended", p.put_id), ErrorCode::INVALID_WRITE);
  auto g = master_->GetReplicas({"ended"});
  ASSERT_TRUE(g[0].ok());
  EXPECT_EQ(g[0]->checksum, 5u);  // the second PutEnd changed nothing

  // Double PutRevoke.
  PutStartResult q = Start("revoked", 100);
  EXPECT_EQ(RevokeCode("revoked", q.put_id), ErrorCode::OK);
  EXPECT_EQ(RevokeCode("revoked", q.put_id), ErrorCode::OBJECT_NOT_FOUND);
  EXPECT_EQ(EndCode("revoked", q.put_id), ErrorCode::OBJECT_NOT_FOUND);

  // Wrong put_id: rejected, and the object stays pending for its real writer.
  PutStartResult w = Start("wrong", 100);
  EXPECT_EQ(EndCode("wrong", w.put_id + 1000), ErrorCode::INVALID_WRITE);
  EXPECT_EQ(RevokeCode("wrong", w.put_id + 1000), ErrorCode::INVALID_WRITE);
  EXPECT_EQ(GetCode("wrong"), ErrorCode::REPLICA_IS_NOT_READY);
  EXPECT_EQ(EndCode("wrong", w.put_id, 9), ErrorCode::OK);
  EXPECT_EQ(ExistsOne("wrong"), 1);

  // Batches: one result per key, a bad key does not fail its neighbours;
  // put_ids shorter than keys fails only the keys without one.
  PutStartResult x = Start("x", 100);
  PutStartResult y = Start("y", 100);
  auto st = master_->PutEnd({"x", "missing", "y"}, {x.put_id, 1}, {1, 2, 3});
  ASSERT_EQ(st.size(), 3u);
  EXPECT_EQ(st[0].code(), ErrorCode::OK);
  EXPECT_EQ(st[1].code(), ErrorCode::OBJECT_NOT_FOUND);
  EXPECT_EQ(st[2].code(), ErrorCode::INVALID_PARAMS);
  EXPECT_EQ(GetCode("y"), ErrorCode::REPLICA_IS_NOT_READY);
  auto rv = master_->PutRevoke({"y", "x"}, {y.put_id});
  ASSERT_EQ(rv.size(), 2u);
  EXPECT_EQ(rv[0].code(), ErrorCode::OK);
  EXPECT_EQ(rv[1].code(), ErrorCode::INVALID_PARAMS);
  EXPECT_EQ(ExistsOne("x"), 1);
}

TEST_F(MasterPutTest, AbandonedPutReclaimedAfterTimeout) {
  MasterOptions o = Options();
  o.put_timeout = Millis(30000);
  master_ = std::make_unique<MasterService>(o);
  const SegmentId a = Mount("a", kMiB);
  PutStartResult done = Put("done", 1024);
  PutStartResult old = Start("k", 2048);
  EXPECT_EQ(Used(a), 3072u);

  clock_.Advance(Millis(29999));
  EXPECT_EQ(master_->ReclaimAbandonedPuts(), 0u);
  EXPECT_EQ(Used(a), 3072u);
  EXPECT_EQ(GetCode("k"), ErrorCode::REPLICA_IS_NOT_READY);

  clock_.Advance(Millis(1));
  EXPECT_EQ(master_->ReclaimAbandonedPuts(), 1u);
  EXPECT_EQ(Used(a), 1024u);  // the complete object is never reclaimed
  EXPECT_EQ(ExistsOne("done"), 1);
  EXPECT_EQ(GetCode("k"), ErrorCode::OBJECT_NOT_FOUND);
  EXPECT_EQ(master_->Stats().reclaimed_puts, 1u);
  EXPECT_EQ(master_->ReclaimAbandonedPuts(), 0u);

  // A new writer can put the key; the old writer's PutEnd/PutRevoke fail and
  // leave the new put alone.
  PutStartResult fresh = Start("k", 4096);
  EXPECT_NE(fresh.put_id, old.put_id);
  EXPECT_EQ(EndCode("k", old.put_id), ErrorCode::INVALID_WRITE);
  EXPECT_EQ(RevokeCode("k", old.put_id), ErrorCode::INVALID_WRITE);
  EXPECT_EQ(Used(a), 1024u + 4096u);
  EXPECT_EQ(EndCode("k", fresh.put_id, 42), ErrorCode::OK);
  auto g = master_->GetReplicas({"k"});
  ASSERT_TRUE(g[0].ok());
  EXPECT_EQ(g[0]->size, 4096u);
  EXPECT_EQ(g[0]->checksum, 42u);
}

// Maintenance visits only the keys that began a put (Shard::pending_keys), not every object:
// puts still within their time survive the visits (and the list's compactions, on one shard
// with thousands of puts ending meanwhile) and are reclaimed when their time is up; complete
// objects are never touched.
TEST_F(MasterPutTest, ReclaimFindsEveryAbandonedPutAmongThousandsOfCompleteOnes) {
  MasterOptions o = Options();
  o.put_timeout = Millis(30000);
  o.shards = 1;
  master_ = std::make_unique<MasterService>(o);
  Mount("a", 64 * kMiB);
  for (int i = 0; i < 50; ++i) Start("early" + std::to_string(i), 64);
  for (int i = 0; i < 3000; ++i) Put("done" + std::to_string(i), 64);
  clock_.Advance(Millis(20000));
  for (int i = 0; i < 50; ++i) Start("late" + std::to_string(i), 64);
  EXPECT_EQ(master_->ReclaimAbandonedPuts(), 0u);
  for (int i = 0; i < 3000; ++i) Put("more" + std::to_string(i), 64);  // compacts the list
  clock_.Advance(Millis(10000));
  EXPECT_EQ(master_->ReclaimAbandonedPuts(), 50u);  // the early ones
  EXPECT_EQ(GetCode("early7"), ErrorCode::OBJECT_NOT_FOUND);
  EXPECT_EQ(GetCode("late7"), ErrorCode::REPLICA_IS_NOT_READY);
  clock_.Advance(Millis(20000));
  EXPECT_EQ(master_->ReclaimAbandonedPuts(), 50u);  // the late ones
  EXPECT_EQ(master_->ReclaimAbandonedPuts(), 0u);
  for (int i = 0; i < 3000; i += 299) {
    EXPECT_EQ(ExistsOne("done" + std::to_string(i)), 1);
    EXPECT_EQ(ExistsOne("more" + std::to_string(i)), 1);
  }
  EXPECT_EQ(master_->Stats().reclaimed_puts, 100u);
}

TEST_F(MasterPutTest, OldWriterEndAfterReclaimIsNotFound) {
  const SegmentId a = Mount("a", kMiB);
  PutStartResult old = Start("k", 2048);
  clock_.Advance(Options().put_timeout + Millis(1));
  EXPECT_EQ(master_->ReclaimAbandonedPuts(), 1u);
  EXPECT_EQ(Used(a), 0u);
  EXPECT_EQ(EndCode("k", old.put_id), ErrorCode::OBJECT_NOT_FOUND);
  EXPECT_EQ(ExistsOne("k"), 0);
}

TEST_F(MasterPutTest, BadKeysFailAloneInABatch) {
  const SegmentId a = Mount("a", kMiB);
  const std::string too_long(kMaxKeyLength + 1, 'k');
  const std::string longest(kMaxKeyLength, 'm');
  const std::vector<std::string> keys = {
      "good1",                     // 0 ok
      "",                          // 1 empty
      too_long,                    // 2 too long
      "\xff\xfe",                  // 3 not UTF-8
      "\xc0\xaf",                  // 4 overlong '/'
      "zero",                      // 5 size 0
      "good1",                     // 6 duplicate of 0
      "huge",                      // 7 larger than any segment
      longest,                     // 8 ok: exactly the limit
      std::string("nul\0key", 7),  // 9 contains NUL
      "\xed\xa0\x80",              // 10 surrogate U+D800
      "caf\xc3\xa9",               // 11 ok: valid UTF-8
      "zero",                      // 12 duplicate of an invalid-size key
  };
  const std::vector<uint64_t> sizes = {100,      100, 100, 100, 100, 0,  100,
                                       2 * kMiB, 200, 100, 100, 300, 100};
  auto r = master_->PutStart(keys, sizes, {});
  ASSERT_EQ(r.size(), keys.size());
  const std::vector<ErrorCode> want = {
      ErrorCode::OK,
      ErrorCode::INVALID_KEY,
      ErrorCode::INVALID_KEY,
      ErrorCode::INVALID_KEY,
      ErrorCode::INVALID_KEY,
      ErrorCode::INVALID_PARAMS,
      ErrorCode::DUPLICATE_KEY,
      ErrorCode::OBJECT_TOO_LARGE,
      ErrorCode::OK,
      ErrorCode::INVALID_KEY,
      ErrorCode::INVALID_KEY,
      ErrorCode::OK,
      ErrorCode::DUPLICATE_KEY,
  };
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(r[i].code(), want[i]) << "key #" << i << ": " << r[i].status().ToString();
  }
  EXPECT_EQ(Used(a), 128u + 256u + 320u);  // only the three good keys hold space
  for (size_t i : {0u, 8u, 11u}) {
    ASSERT_TRUE(r[i].ok());
    End(keys[i], r[i]->put_id, i);
    EXPECT_EQ(ExistsOne(keys[i]), 1) << "key #" << i;
  }
  EXPECT_EQ(ExistsOne("zero"), 0);
  EXPECT_EQ(ExistsOne("huge"), 0);
  // Reads report invalid keys per key too.
  auto e = master_->Exists({"good1", "", "\xc0\xaf"});
  EXPECT_EQ(e, (std::vector<int>{1, ToInt(ErrorCode::INVALID_KEY), ToInt(ErrorCode::INVALID_KEY)}));
  auto g = master_->GetReplicas({too_long, "good1"});
  EXPECT_EQ(g[0].code(), ErrorCode::INVALID_KEY);
  EXPECT_TRUE(g[1].ok());
  EXPECT_EQ(master_->Remove("\xff", true).code(), ErrorCode::INVALID_KEY);
}

TEST_F(MasterPutTest, InvalidGroupIdFailsOnlyItsKey) {
  Mount("a", kMiB);
  ReplicateConfig cfg;
  cfg.group_ids = {"g", "\xff", ""};
  auto r = master_->PutStart({"k1", "k2", "k3"}, {10, 10, 10}, cfg);
  EXPECT_TRUE(r[0].ok());
  EXPECT_EQ(r[1].code(), ErrorCode::INVALID_PARAMS);
  EXPECT_TRUE(r[2].ok());
}

TEST_F(MasterPutTest, ObjectTooLargeIsAgainstTheLargestSegment) {
  Mount("small", kMiB);
  const SegmentId big = Mount("big", 4 * kMiB);
  auto r = master_->PutStart({"fits-big", "too-big", "exact"}, {2 * kMiB, 4 * kMiB + 1, 64}, {});
  ASSERT_TRUE(r[0].ok());
  EXPECT_EQ(r[0]->replicas.at(0).segment, big);
  EXPECT_EQ(r[1].code(), ErrorCode::OBJECT_TOO_LARGE);
  EXPECT_TRUE(r[2].ok());
}

TEST_F(MasterPutTest, NoSegmentMountedIsNoAvailableHandle) {
  auto r = master_->PutStart({"a", "", "b"}, {10, 10, 10}, {});
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].code(), ErrorCode::NO_AVAILABLE_HANDLE);
  EXPECT_EQ(r[1].code(), ErrorCode::INVALID_KEY);
  EXPECT_EQ(r[2].code(), ErrorCode::NO_AVAILABLE_HANDLE);
  EXPECT_EQ(master_->Stats().objects, 0u);
}

TEST_F(MasterPutTest, ReplicaNumAboveMountedSegmentsEvictsNothing) {
  const SegmentId a = Mount("a", kMiB);
  const SegmentId b = Mount("b", kMiB);
  Put("old-a", 1000, Prefer("a"));
  Put("old-b", 1000, Prefer("b"));
  ReplicateConfig cfg;
  cfg.replica_num = 3;
  auto r = master_->PutStart({"x", "y"}, {100, 100}, cfg);
  EXPECT_EQ(r[0].code(), ErrorCode::NO_AVAILABLE_HANDLE);
  EXPECT_EQ(r[1].code(), ErrorCode::NO_AVAILABLE_HANDLE);
  // No space leaked, and no object was evicted for a put no eviction can help.
  EXPECT_EQ(Used(a), 1024u);
  EXPECT_EQ(Used(b), 1024u);
  EXPECT_EQ(master_->Stats().evicted_objects, 0u);
  EXPECT_EQ(master_->Exists({"old-a", "old-b", "x"}), (std::vector<int>{1, 1, 0}));
}

TEST_F(MasterPutTest, InvalidParamsFailTheWholeBatch) {
  const SegmentId a = Mount("a", kMiB);
  ReplicateConfig zero;
  zero.replica_num = 0;
  for (const auto& r : master_->PutStart({"a", "b"}, {10, 10}, zero)) {
    EXPECT_EQ(r.code(), ErrorCode::INVALID_PARAMS);
  }
  ReplicateConfig groups;
  groups.group_ids = {"g"};
  auto r = master_->PutStart({"a", "b"}, {10, 10}, groups);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].code(), ErrorCode::INVALID_PARAMS);
  EXPECT_EQ(r[1].code(), ErrorCode::INVALID_PARAMS);
  r = master_->PutStart({"a", "b"}, {10}, {});
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].code(), ErrorCode::INVALID_PARAMS);
  EXPECT_EQ(r[1].code(), ErrorCode::INVALID_PARAMS);
  EXPECT_EQ(Used(a), 0u);
  EXPECT_EQ(master_->Stats().objects, 0u);
  EXPECT_TRUE(master_->PutStart({}, {}, {}).empty());
}

TEST_F(MasterPutTest, PreferredSegmentMatchesANameWithOrWithoutItsEndpoint) {
  EXPECT_TRUE(IsPreferred("h:1:0@/tmp/tierkv-0/s.sock", "h:1:0"));
  EXPECT_TRUE(IsPreferred("h:1:0@/tmp/tierkv-0/s.sock", "h:1:0@/tmp/tierkv-0/s.sock"));
  EXPECT_TRUE(IsPreferred("h:1:0", "h:1:0"));
  EXPECT_FALSE(IsPreferred("h:1:01@/p", "h:1:0"));  // a prefix of another name is not it
  EXPECT_FALSE(IsPreferred("h:1:0", ""));
  EXPECT_FALSE(IsPreferred("h:1", "h:1:0"));
  Mount("a@/x.sock", kMiB);
  const SegmentId b = Mount("b@/y.sock", kMiB);
  Put("fill", 4096, Prefer("b"));  // "b" is the fullest now, and still preferred
  ReplicateConfig cfg;
  cfg.preferred_segment = "b";
  EXPECT_EQ(Start("p", 100, cfg).replicas.at(0).segment, b);
}

TEST_F(MasterPutTest, PreferredSegmentHonoured) {
  const SegmentId a = Mount("a", kMiB);
  const SegmentId b = Mount("b", kMiB);
  const SegmentId c = Mount("c", kMiB);
  // Make "b" the fullest: freest-first placement would never pick it.
  Put("fill", 4096, Prefer("b"));
  ASSERT_EQ(Used(b), 4096u);
  ReplicateConfig cfg;
  cfg.preferred_segment = "b";
  PutStartResult r = Start("p", 100, cfg);
  ASSERT_EQ(r.replicas.size(), 1u);
  EXPECT_EQ(r.replicas[0].segment, b);
  // With two replicas the preferred one comes first, the other is elsewhere.
  cfg.replica_num = 2;
  r = Start("p2", 100, cfg);
  ASSERT_EQ(r.replicas.size(), 2u);
  EXPECT_EQ(r.replicas[0].segment, b);
  EXPECT_NE(r.replicas[1].segment, b);
  // Without a preference the freest segment wins: "a" and "c" are empty, then
  // one of them gets 128 bytes from p2, so the next goes to the other.
  const SegmentId emptier = Used(a) < Used(c) ? a : c;
  r = Start("free", 100, {});
  EXPECT_EQ(r.replicas.at(0).segment, emptier);
  // An unknown preferred name falls back to the freest segment.
  r = Start("unknown", 100, Prefer("zzz"));
  EXPECT_NE(r.replicas.at(0).segment, b);
  // A preferred segment without room falls back to another one.
  const SegmentId small = Mount("small", 1024);
  Put("small-fill", 1024, Prefer("small"));
  ASSERT_EQ(Used(small), 1024u);
  r = Start("spill", 100, Prefer("small"));
  EXPECT_NE(r.replicas.at(0).segment, small);
}

TEST_F(MasterPutTest, RemoveCodes) {
  const SegmentId a = Mount("a", kMiB);
  Put("leased", 1000);
  Put("plain", 1000);
  Put("hard", 1000, HardPin());
  PutStartResult pending = Start("pending", 1000);
  ASSERT_EQ(ExistsOne("leased"), 1);  // grants a lease

  EXPECT_EQ(master_->Remove("missing", false).code(), ErrorCode::OBJECT_NOT_FOUND);
  EXPECT_EQ(master_->Remove("missing", true).code(), ErrorCode::OBJECT_NOT_FOUND);
  EXPECT_EQ(master_->Remove("pending", false).code(), ErrorCode::REPLICA_IS_NOT_READY);
  EXPECT_EQ(master_->Remove("pending", true).code(), ErrorCode::REPLICA_IS_NOT_READY);
  EXPECT_EQ(master_->Remove("leased", false).code(), ErrorCode::OBJECT_HAS_LEASE);
  EXPECT_EQ(ExistsOne("leased"), 1);
  EXPECT_EQ(Used(a), 4 * 1024u);

  EXPECT_TRUE(master_->Remove("plain", false).ok());
  EXPECT_TRUE(master_->Remove("hard", false).ok());
  EXPECT_TRUE(master_->Remove("leased", true).ok());
  EXPECT_EQ(master_->Exists({"plain", "hard", "leased"}), (std::vector<int>{0, 0, 0}));
  EXPECT_EQ(Used(a), 1024u);  // only the pending put holds space
  EXPECT_EQ(master_->Remove("plain", false).code(), ErrorCode::OBJECT_NOT_FOUND);

  // The pending put is unaffected and can still end.
  EXPECT_EQ(EndCode("pending", pending.put_id), ErrorCode::OK);
  EXPECT_TRUE(master_->Remove("pending", false).ok());
  EXPECT_EQ(Used(a), 0u);
  EXPECT_EQ(master_->Stats().objects, 0u);
}

TEST_F(MasterPutTest, RemoveAllSkipsLeasedUnlessForcedAndPending) {
  const SegmentId a = Mount("a", kMiB);
  Put("plain", 1000);
  Put("hard", 1000, HardPin());
  Put("soft", 1000, SoftPin());
  Put("leased", 1000);
  PutStartResult pending = Start("pending", 1000);
  ASSERT_EQ(ExistsOne("leased"), 1);

  EXPECT_EQ(master_->RemoveAll(false), 3u);  // plain, hard, soft
  EXPECT_EQ(master_->Exists({"plain", "hard", "soft", "leased"}), (std::vector<int>{0, 0, 0, 1}));
  EXPECT_EQ(GetCode("pending"), ErrorCode::REPLICA_IS_NOT_READY);
  EXPECT_EQ(Used(a), 2048u);

  EXPECT_EQ(master_->RemoveAll(true), 1u);  // leased; pending still skipped
  EXPECT_EQ(ExistsOne("leased"), 0);
  EXPECT_EQ(GetCode("pending"), ErrorCode::REPLICA_IS_NOT_READY);
  EXPECT_EQ(Used(a), 1024u);
  EXPECT_EQ(master_->RemoveAll(true), 0u);

  EXPECT_EQ(EndCode("pending", pending.put_id), ErrorCode::OK);
  EXPECT_EQ(master_->RemoveAll(false), 1u);
  EXPECT_EQ(Used(a), 0u);
  EXPECT_EQ(master_->Stats().objects, 0u);
}

TEST_F(MasterPutTest, UnmountSegmentDropsItsReplicas) {
  const SegmentId a = Mount("a", kMiB);
  const SegmentId b = Mount("b", kMiB);
  Put("only-a", 1000, Prefer("a"), 1);
  Put("only-b", 1000, Prefer("b"), 2);
  Put("both", 2000, Replicas(2), 3);
  PutStartResult pending_a = Start("pending-a", 500, Prefer("a"));
  ASSERT_EQ(pending_a.replicas.at(0).segment, a);
  auto seg_a = master_->segments().Find(a);
  ASSERT_NE(seg_a, nullptr);
  EXPECT_EQ(seg_a->allocator->used(), 1024u + 2048u + 512u);

  ASSERT_TRUE(master_->UnmountSegment(a).ok());
  EXPECT_EQ(master_->segments().Find(a), nullptr);
  EXPECT_EQ(master_->segments().Count(), 1u);
  // Every allocation on the unmounted segment was dropped.
  EXPECT_EQ(seg_a->allocator->used(), 0u);

  EXPECT_EQ(GetCode("only-a"), ErrorCode::OBJECT_NOT_FOUND);
  EXPECT_EQ(GetCode("pending-a"), ErrorCode::OBJECT_NOT_FOUND);
  EXPECT_EQ(EndCode("pending-a", pending_a.put_id), ErrorCode::OBJECT_NOT_FOUND);
  auto g = master_->GetReplicas({"only-b", "both"});
  ASSERT_TRUE(g[0].ok());
  ASSERT_EQ(g[0]->replicas.size(), 1u);
  EXPECT_EQ(g[0]->replicas[0].segment, b);
  ASSERT_TRUE(g[1].ok());
  ASSERT_EQ(g[1]->replicas.size(), 1u);
  EXPECT_EQ(g[1]->replicas[0].segment, b);
  EXPECT_EQ(g[1]->checksum, 3u);
  EXPECT_EQ(Used(b), 1024u + 2048u);
  EXPECT_EQ(master_->Stats().objects, 2u);

  // New puts only land on mounted segments; the old name is no preference.
  PutStartResult r = Start("after", 100, Prefer("a"));
  EXPECT_EQ(r.replicas.at(0).segment, b);
  EXPECT_EQ(master_->UnmountSegment(a).code(), ErrorCode::SEGMENT_NOT_FOUND);
  EXPECT_EQ(master_->UnmountSegment(999).code(), ErrorCode::SEGMENT_NOT_FOUND);
  // The name can be mounted again, as a new segment.
  auto again = master_->MountSegment("a", kMiB);
  ASSERT_TRUE(again.ok());
  EXPECT_NE(*again, a);
  EXPECT_EQ(master_->MountSegment("a", kMiB).code(), ErrorCode::SEGMENT_ALREADY_EXISTS);
}

}  // namespace
}  // namespace tierkv
