// MasterService, part 4: segment index links — restart recovery from the stores' indexes and the
// reconciliation of an index with the table (docs/architecture.md, "Surviving the master").
#include <absl/container/flat_hash_map.h>
#include <absl/strings/string_view.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "common/key.h"
#include "master/master_service.h"
#include "master/replica_util.h"

namespace tierkv {
namespace {

bool SameLocation(const DiskLocation& a, const DiskLocation& b) {
  return a.region == b.region && a.generation == b.generation && a.offset == b.offset &&
         a.size == b.size;
}

}  // namespace

// What the owner reported on this link, to compare with the table at Finish.
struct MasterService::IndexLink::Reported {
  // Later links: offset -> put id of every memory entry. The first link needs the offsets only,
  // to skip a repeated one: while they come in increasing order (a store reports in segment
  // order) a repeat is the last one seen, and they are kept in `ordered_offsets`; the first
  // offset out of order moves them into `memory` (a random insert per entry was a seventh of
  // adopting millions).
  absl::flat_hash_map<uint64_t, uint64_t> memory;
  std::vector<uint64_t> ordered_offsets;
  bool out_of_order = false;
  absl::flat_hash_map<std::string, std::pair<uint64_t, DiskLocation>> disk;  // key -> (put id, at)
  // First link only: the reported entries not adopted (what the owner must forget).
  std::vector<uint64_t> unadopted_memory;
  std::vector<DiskDrop> unadopted_disk;
};

MasterService::IndexLink::IndexLink(MasterService& master, std::shared_ptr<const Segment> segment,
                                    uint64_t generation, bool discard)
    : master_(master),
      segment_(std::move(segment)),
      generation_(generation),
      discard_(discard),
      started_(std::chrono::steady_clock::now()),
      reported_(std::make_unique<Reported>()) {
  recovery_.segment = segment_->id;
  recovery_.name = segment_->name;
}

MasterService::IndexLink::~IndexLink() = default;

Result<std::unique_ptr<MasterService::IndexLink>> MasterService::OpenIndexLink(SegmentId segment) {
  auto seg = segments_.Find(segment);
  if (!seg) {
    return Status(ErrorCode::SEGMENT_NOT_FOUND,
                  "segment " + std::to_string(segment) + " is not mounted");
  }
  if (!seg->feed) {
    return Status(ErrorCode::INVALID_PARAMS,
                  "segment " + std::to_string(segment) + " was mounted without an index stream");
  }
  const uint64_t generation = seg->feed->Attach();
  bool discard = false;
  if (generation == 1) {
    std::lock_guard lock(recoveries_mu_);
    discard = unmounted_names_.erase(seg->name) > 0;
  }
  if (discard) {
    spdlog::warn(
        "segment {} ('{}') was unmounted by this master before (its store expired): what its "
        "index reports is discarded, not adopted",
        segment, seg->name);
  }
  return std::unique_ptr<IndexLink>(new IndexLink(*this, std::move(seg), generation, discard));
}

void MasterService::IndexLink::Expect(uint64_t entries) {
  if (!first() || discard_ || entries == 0) return;
  // A report of millions of entries otherwise regrows each shard's table a dozen times, each
  // growth rehashing every object adopted so far.
  // Not trusted beyond what the segment can hold (each memory entry takes at least one
  // allocation unit) and 16 Mi entries: past that the table grows as usual.
  const uint64_t cap = std::min(
      {entries, segment_->capacity / segment_->allocator->alignment() + 1024, uint64_t{16} << 20});
  reported_->ordered_offsets.reserve(reported_->ordered_offsets.size() + cap);
  const uint64_t per_shard =
      cap / master_.table_.num_shards() + cap / 16 / master_.table_.num_shards() + 16;
  for (uint32_t i = 0; i < master_.table_.num_shards(); ++i) {
    Shard& s = master_.table_.shard(i);
    std::lock_guard lock(s.mu);
    s.objects.reserve(s.objects.size() + per_shard);
    s.objects.PrefaultEntries(cap / master_.table_.num_shards());
  }
}

void MasterService::IndexLink::Add(const std::vector<IndexEntry>& memory,
                                   const std::vector<IndexEntry>& disk) {
  const SteadyTime now = master_.options_.clock->Now();
  recovery_.reported += first() ? memory.size() + disk.size() : 0;
  if (first() && !discard_) {
    // Put ids stay above every adopted one: noted once per part (a compare-and-swap per entry
    // was 5 % of adopting 4 M entries).
    uint64_t max_put_id = 0;
    for (const auto* entries : {&memory, &disk}) {
      for (const IndexEntry& e : *entries) max_put_id = std::max(max_put_id, e.put_id);
    }
    master_.NotePutId(max_put_id);
  }
  // The first link adopts what it has not seen yet, shard by shard.
  auto adopt = [&](const std::vector<const IndexEntry*>& entries, bool on_disk) {
    return discard_ ? std::vector<bool>(entries.size(), false)
                    : master_.AdoptReportedAll(*segment_, entries, on_disk, now);
  };
  std::vector<const IndexEntry*> fresh;
  for (const IndexEntry& e : memory) {
    if (!FirstSeen(e)) continue;  // one per offset
    if (first()) fresh.push_back(&e);
  }
  std::vector<bool> adopted = adopt(fresh, /*on_disk=*/false);
  for (size_t i = 0; i < fresh.size(); ++i) {
    if (adopted[i]) {
      ++recovery_.memory_replicas;
      recovery_.bytes += fresh[i]->size;
    } else {
      ++recovery_.rejected;
      reported_->unadopted_memory.push_back(fresh[i]->offset);
    }
  }
  fresh.clear();
  for (const IndexEntry& e : disk) {
    if (!reported_->disk.try_emplace(e.key, e.put_id, e.disk).second) continue;  // one per key
    if (first()) fresh.push_back(&e);
  }
  adopted = adopt(fresh, /*on_disk=*/true);
  for (size_t i = 0; i < fresh.size(); ++i) {
    if (adopted[i]) {
      ++recovery_.disk_replicas;
    } else {
      ++recovery_.rejected;
      reported_->unadopted_disk.push_back(DiskDrop{fresh[i]->key, fresh[i]->disk});
    }
  }
}

bool MasterService::IndexLink::FirstSeen(const IndexEntry& e) {
  Reported& r = *reported_;
  if (!first()) return r.memory.emplace(e.offset, e.put_id).second;
  if (!r.out_of_order) {
    if (r.ordered_offsets.empty() || e.offset > r.ordered_offsets.back()) {
      r.ordered_offsets.push_back(e.offset);
      return true;
    }
    if (e.offset == r.ordered_offsets.back()) return false;
    r.out_of_order = true;
    r.memory.reserve(r.ordered_offsets.size() * 2);
    for (uint64_t offset : r.ordered_offsets) r.memory.emplace(offset, 0);
    r.ordered_offsets.clear();
    r.ordered_offsets.shrink_to_fit();
  }
  return r.memory.emplace(e.offset, e.put_id).second;
}

Result<SegmentRecovery> MasterService::IndexLink::Finish() {
  MasterService& m = master_;
  if (m.segments_.Find(segment_->id) != segment_) {
    return Status(ErrorCode::SEGMENT_NOT_FOUND,
                  "segment " + std::to_string(segment_->id) + " was unmounted during its link");
  }
  // The table's view of the segment against the report: what the owner must learn (in the
  // table, not reported) and forget (reported, not in the table). Pending puts are left out:
  // their commits come through the feed, which is attached already.
  IndexBatch delta;
  const SegmentId id = segment_->id;
  if (first()) {
    // The segment was held out of placement from its mount to now, and its feed attached
    // before the report: the table's replicas on it are exactly the adopted ones, less those
    // dropped since (whose frees are in the feed already). So the owner only has to forget
    // what was not adopted — no walk over the whole table (at 1 M objects the walk took longer
    // than the adoption).
    delta.frees = std::move(reported_->unadopted_memory);
    delta.disk_dropped = std::move(reported_->unadopted_disk);
  }
  for (uint32_t i = 0; !first() && i < m.table_.num_shards(); ++i) {
    Shard& s = m.table_.shard(i);
    std::lock_guard lock(s.mu);
    for (const auto& [key, meta] : s.objects) {
      if (meta.state != ObjectState::kComplete) continue;
      for (const Replica& r : meta.replicas) {
        if (r.segment != id) continue;
        if (r.tier == ReplicaTier::kMemory) {
          auto it = reported_->memory.find(r.allocation.offset());
          if (it != reported_->memory.end() && it->second == meta.put_id) {
            reported_->memory.erase(it);
            continue;
          }
          IndexEntry e = IndexEntryOf(key.view(), meta);
          e.offset = r.allocation.offset();
          delta.commits.push_back(std::move(e));
        } else {
          auto it = reported_->disk.find(absl::string_view(key.data(), key.size()));
          if (it != reported_->disk.end() && it->second.first == meta.put_id &&
              SameLocation(it->second.second, r.disk_location())) {
            reported_->disk.erase(it);
            continue;
          }
          IndexEntry e = IndexEntryOf(key.view(), meta);
          e.disk = r.disk_location();
          delta.disk_attached.push_back(std::move(e));
        }
      }
    }
  }
  if (!first()) {
    for (const auto& [offset, put_id] : reported_->memory) delta.frees.push_back(offset);
    for (auto& [key, at] : reported_->disk) delta.disk_dropped.push_back(DiskDrop{key, at.second});
  }
  const size_t learn = delta.commits.size() + delta.disk_attached.size();
  const size_t forget = delta.frees.size() + delta.disk_dropped.size();
  segment_->feed->Prepend(generation_, std::move(delta));
  m.segments_.Release(id);

  recovery_.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  recovery_.done = true;
  SegmentRecovery record;
  {
    std::lock_guard lock(m.recoveries_mu_);
    SegmentRecovery& r = m.recoveries_[id];
    if (first()) {
      r = recovery_;
    } else {
      r.segment = id;
      r.name = segment_->name;
    }
    ++r.links;
    record = r;
  }
  if (first()) {
    m.recovered_replicas_.fetch_add(recovery_.memory_replicas + recovery_.disk_replicas,
                                    std::memory_order_relaxed);
    m.recovered_bytes_.fetch_add(recovery_.bytes, std::memory_order_relaxed);
    m.recovery_rejected_.fetch_add(recovery_.rejected, std::memory_order_relaxed);
    if (recovery_.reported > 0) {
      spdlog::info(
          "segment {} ('{}'): recovered {} memory and {} disk replicas ({} bytes) of {} reported "
          "by its store in {:.3f} s; {} not adopted",
          id, segment_->name, recovery_.memory_replicas, recovery_.disk_replicas, recovery_.bytes,
          recovery_.reported, recovery_.seconds, recovery_.rejected);
    }
  } else {
    spdlog::info("segment {}: index stream re-linked ({} entries to learn, {} to forget)", id,
                 learn, forget);
  }
  return record;
}

std::vector<SegmentRecovery> MasterService::Recoveries() const {
  std::lock_guard lock(recoveries_mu_);
  std::vector<SegmentRecovery> out;
  out.reserve(recoveries_.size());
  for (const auto& [id, r] : recoveries_) out.push_back(r);
  return out;
}

void MasterService::NotePutId(uint64_t put_id) {
  uint64_t next = next_put_id_.load(std::memory_order_relaxed);
  while (next <= put_id &&
         !next_put_id_.compare_exchange_weak(next, put_id + 1, std::memory_order_relaxed)) {
  }
}

bool MasterService::Adoptable(const Segment& segment, const IndexEntry& e, bool disk) {
  if (!ValidateKey(e.key).ok() || e.size == 0 || e.put_id == 0) return false;
  if (!e.group_id.empty() && !ValidateKey(e.group_id).ok()) return false;
  if (disk) return DiskLocationFits(e.disk);  // a record starts on a 4 KiB page
  return e.size <= segment.capacity;
}

std::vector<bool> MasterService::AdoptReportedAll(const Segment& segment,
                                                  const std::vector<const IndexEntry*>& entries,
                                                  bool disk, SteadyTime now) {
  std::vector<bool> out(entries.size(), false);
  // Ungrouped keys under their shard's lock, one lock per shard for the whole part (a lock per
  // entry was a seventh of adopting millions); grouped or redirected ones one by one, since
  // they involve other shards.
  const uint32_t num = table_.num_shards();
  std::vector<uint64_t> hashes(entries.size());
  std::vector<std::vector<uint32_t>> by_shard(num);
  std::vector<uint32_t> one_by_one;
  std::vector<Allocation> ranges(disk ? 0 : entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    const IndexEntry& e = *entries[i];
    if (!e.group_id.empty()) {
      one_by_one.push_back(static_cast<uint32_t>(i));
      continue;
    }
    if (!Adoptable(segment, e, disk)) continue;
    if (!disk) {
      // Ranges taken in the report's order (the segment's), before the shard walk scatters it:
      // one after another, each splits the front of the free range instead of fragmenting it.
      auto at = segment.allocator->AllocateAt(e.offset, e.size);
      if (!at) continue;  // a range taken already (an overlapping entry) is refused
      ranges[i] = std::move(*at);
    }
    hashes[i] = HashKey(e.key);
    by_shard[table_.ShardOfHash(hashes[i])].push_back(static_cast<uint32_t>(i));
  }
  std::vector<ObjectMeta> dropped;  // older objects the adopted ones replace; freed unlocked
  for (uint32_t a = 0; a < num; ++a) {
    if (by_shard[a].empty()) continue;
    {
      Shard& s = table_.shard(a);
      std::lock_guard lock(s.mu);
      for (uint32_t i : by_shard[a]) {
        const IndexEntry& e = *entries[i];
        const HashedKey hk{e.key, hashes[i]};
        if (s.redirects.contains(hk)) {         // a grouped object of this key lives elsewhere
          if (!disk) ranges[i] = Allocation();  // taken again one by one
          one_by_one.push_back(i);
          continue;
        }
        const uint32_t where = s.objects.contains(hk) ? a : kNoShard;
        out[i] = AdoptLocked(segment, e, hk, a, a, where, disk, now, dropped,
                             disk ? nullptr : &ranges[i]);
      }
    }
    dropped.clear();
  }
  for (uint32_t i : one_by_one) out[i] = AdoptReported(segment, *entries[i], disk, now);
  return out;
}

bool MasterService::AdoptReported(const Segment& segment, const IndexEntry& e, bool disk,
                                  SteadyTime now) {
  if (!Adoptable(segment, e, disk)) return false;
  // The key's hash once for every probe below (millions of entries per report).
  const HashedKey hk{e.key, HashKey(e.key)};
  const uint32_t a = table_.ShardOfHash(hk.hash);
  const uint32_t home = e.group_id.empty() ? a : table_.ShardOf(e.group_id);
  std::vector<ObjectMeta> dropped;  // an older object this one replaces; freed after the locks
  Shard& ks = table_.shard(a);
  Shard& hs = table_.shard(home);
  // Where an object of this key lives now, if anywhere: under the locks of the key's shard, its
  // home shard, and the shard its redirect names (read first, without them). A redirect that
  // moved meanwhile (another link adopting a replica or version of the same grouped key) means
  // looking again: skipping the entry could let an older version win.
  std::vector<std::unique_lock<std::mutex>> locks;
  uint32_t where = kNoShard;
  for (bool moved = true; moved;) {
    locks.clear();  // a retry: nothing held while the redirect is read again
    uint32_t seen_redirect = kNoShard;
    {
      std::lock_guard lock(ks.mu);
      auto r = ks.redirects.find(hk);
      if (r != ks.redirects.end()) seen_redirect = r->second;
    }
    std::vector<uint32_t> wanted{a, home};
    if (seen_redirect != kNoShard) wanted.push_back(seen_redirect);
    locks = table_.LockShards(wanted);
    moved = false;
    where = ks.objects.contains(hk) ? a : kNoShard;
    if (where == kNoShard) {
      auto r = ks.redirects.find(hk);
      if (r != ks.redirects.end()) {
        if (r->second != seen_redirect) {
          moved = true;
        } else if (table_.shard(r->second).objects.contains(hk)) {
          where = r->second;
        } else {
          ks.redirects.erase(r);  // stale
        }
      }
    }
  }
  if (where == kNoShard && home != a && hs.objects.contains(hk)) where = home;
  return AdoptLocked(segment, e, hk, a, home, where, disk, now, dropped, nullptr);
}

bool MasterService::AdoptLocked(const Segment& segment, const IndexEntry& e, const HashedKey& hk,
                                uint32_t a, uint32_t home, uint32_t where, bool disk,
                                SteadyTime now, std::vector<ObjectMeta>& dropped,
                                Allocation* range) {
  Shard& ks = table_.shard(a);
  Shard& hs = table_.shard(home);
  const ReplicaTier tier = disk ? ReplicaTier::kDisk : ReplicaTier::kMemory;
  Replica replica{segment.id, tier, Allocation(), e.disk};
  if (disk) {
    // The owner has the record already: no event, but a claim, so that dropping the replica
    // tells its index.
    replica.claim = std::make_unique<DiskClaim>(segment.feed, e.key, e.disk);
  } else {
    if (range != nullptr) {
      replica.allocation = std::move(*range);
    } else {
      // Exactly where the owner has it; a range taken already (an overlapping entry) is
      // refused.
      auto at = segment.allocator->AllocateAt(e.offset, e.size);
      if (!at) return false;
      replica.allocation = std::move(*at);
    }
  }
  const SteadyTime hold = now + options_.lease_ttl;

  if (where != kNoShard) {
    Shard& ws = table_.shard(where);
    auto it = ws.objects.find(hk);
    ObjectMeta& m = it->second;
    if (m.state == ObjectState::kComplete && m.put_id == e.put_id && m.size == e.size &&
        m.checksum == e.checksum && m.group_id() == e.group_id) {
      // Another replica of the same put (another store's, or this segment's other tier).
      for (const Replica& r : m.replicas) {
        if (r.segment == segment.id && r.tier == tier) return false;
      }
      m.replicas.push_back(std::move(replica));
      // Leased until `hold` at least (the own lease runs until last_access + TTL).
      m.last_access = std::max(m.last_access, now);
      m.leased = true;
      m.recovered = true;  // held until a lease TTL after this report (HeldUntil)
      m.put_started = std::max(m.put_started, now);
      return true;
    }
    // A newer put of the key (or one in progress) stays; a reported newer put replaces an older
    // complete one, whose replicas are freed (their owners' indexes learn it through the feeds).
    // (An older one recovered from another store moments ago was removed on the previous
    // master, whose free that store had not learned yet.)
    if (m.state != ObjectState::kComplete || m.put_id >= e.put_id) return false;
    dropped.push_back(table_.EraseLocked(ws, it));
    if (where != a && where != home) ks.redirects.erase(e.key);
  }

  ObjectMeta meta;
  meta.size = e.size;
  meta.checksum = e.checksum;
  meta.put_id = e.put_id;
  meta.state = ObjectState::kComplete;
  meta.soft_pin = e.soft_pin;
  meta.hard_pin = e.hard_pin;
  meta.set_group_id(e.group_id);
  meta.put_started = now;
  meta.last_access = now;
  meta.leased = true;     // until `hold` (last_access + lease TTL)
  meta.recovered = true;  // held until `hold` (HeldUntil: put_started + lease TTL)
  // To a policy that learns reuse it is a new object of this master (the previous master's
  // counts are gone): referenced once, not known to be a tail chunk (no parent hint survives).
  if (reuse_) reuse_->OnPut(home, hk.hash, false, meta, now);
  meta.replicas.push_back(std::move(replica));
  if (!e.group_id.empty()) {
    GroupMeta& g = hs.groups[e.group_id];
    g.members.insert(e.key);
    g.lease_deadline = std::max(g.lease_deadline, hold);
  }
  hs.objects.emplace(e.key, hk.hash, std::move(meta));
  if (home != a) ks.redirects[e.key] = home;
  return true;
}

}  // namespace tierkv
