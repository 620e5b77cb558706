// MasterService, part 3: SSD-tier bookkeeping — tier movers, promotion on hit, write-behind
// copies, disk replicas dropped by region reuse or added by warm restart.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <optional>
#include <unordered_set>

#include "common/key.h"
#include "master/master_service.h"
#include "master/replica_util.h"

namespace tierkv {

std::vector<Result<PutStartResult>> MasterService::PromoteStart(
    const std::vector<std::string>& keys, uint32_t min_hits) {
  std::vector<Result<PutStartResult>> out;
  out.reserve(keys.size());
  const SteadyTime now = options_.clock->Now();
  for (const auto& key : keys) {
    Result<PutStartResult> r(ErrorCode::OBJECT_NOT_FOUND, key);
    if (Status st = ValidateKey(key); !st.ok()) {
      out.emplace_back(st);
      continue;
    }
    table_.WithObject(key, [&](uint32_t, Shard&, ObjectMeta& meta) {
      const bool disk_only =
          !meta.replicas.empty() &&
          std::all_of(meta.replicas.begin(), meta.replicas.end(),
                      [](const Replica& rep) { return rep.tier == ReplicaTier::kDisk; });
      if (meta.promotion_id() != 0) {
        std::lock_guard lock(promotions_mu_);
        if (!promotions_.contains(meta.promotion_id())) meta.set_promotion_id(0);  // reclaimed
      }
      if (meta.state != ObjectState::kComplete || !disk_only || meta.promotion_id() != 0) {
        r = Result<PutStartResult>(ErrorCode::NO_AVAILABLE_HANDLE, "not a promotion candidate");
        return;
      }
      if (meta.disk_hits < ObjectMeta::kMaxDiskHits) ++meta.disk_hits;
      if (meta.disk_hits < min_hits) {
        r = Result<PutStartResult>(ErrorCode::NO_AVAILABLE_HANDLE, "below the admission hits");
        return;
      }
      auto seg = segments_.Find(meta.replicas.front().segment);
      auto placed = segments_.Allocate(meta.size, 1, seg ? seg->name : std::string(), {},
                                       options_.clock->Now(), TenantOfKey(key));
      if (!placed.ok()) {
        r = placed.status();
        return;
      }
      PutStartResult res;
      res.put_id = next_put_id_.fetch_add(1, std::memory_order_relaxed);
      Promotion promotion{{}, now};
      for (auto& p : *placed) {
        res.replicas.push_back(
            ReplicaLocation{p.segment, ReplicaTier::kMemory, p.allocation.offset(), meta.size, {}});
        promotion.replicas.push_back(
            Replica{p.segment, ReplicaTier::kMemory, std::move(p.allocation), {}});
      }
      {
        std::lock_guard lock(promotions_mu_);
        promotions_.emplace(res.put_id, std::move(promotion));
      }
      meta.set_promotion_id(res.put_id);
      r = std::move(res);
    });
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<Status> MasterService::PromoteEnd(const std::vector<std::string>& keys,
                                              const std::vector<uint64_t>& promotion_ids,
                                              const std::vector<bool>& ok) {
  std::vector<Status> out;
  out.reserve(keys.size());
  uint64_t promoted = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i >= promotion_ids.size() || i >= ok.size()) {
      out.emplace_back(ErrorCode::INVALID_PARAMS, "promotion_ids/ok shorter than keys");
      continue;
    }
    // Take the range first: whatever happens next, it is either attached or freed here.
    std::optional<Promotion> taken;
    {
      std::lock_guard lock(promotions_mu_);
      auto it = promotions_.find(promotion_ids[i]);
      if (it != promotions_.end()) {
        taken = std::move(it->second);
        promotions_.erase(it);
      }
    }
    Status st(ErrorCode::OBJECT_NOT_FOUND, "no promotion of " + keys[i]);
    table_.WithObject(keys[i], [&](uint32_t, Shard&, ObjectMeta& meta) {
      if (meta.promotion_id() != promotion_ids[i]) return;
      meta.set_promotion_id(0);
      if (!taken) return;  // reclaimed after put_timeout
      st = Status::Ok();
      if (!ok[i]) return;
      PublishCommit(keys[i], meta, taken->replicas);
      for (auto& rep : taken->replicas) meta.replicas.push_back(std::move(rep));
      meta.disk_hits = 0;
      ++promoted;
    });
    out.push_back(std::move(st));
  }
  promoted_objects_.fetch_add(promoted, std::memory_order_relaxed);
  return out;
}

std::shared_ptr<TierMover> MasterService::MoverOf(SegmentId segment) const {
  std::lock_guard lock(movers_mu_);
  auto it = movers_.find(segment);
  return it == movers_.end() ? nullptr : it->second;
}

void MasterService::DetachTierMover(SegmentId segment, const TierMover* mover) {
  std::lock_guard lock(movers_mu_);
  auto it = movers_.find(segment);
  if (it != movers_.end() && it->second.get() == mover) {
    movers_.erase(it);
    write_behind_segments_.erase(segment);
  }
}

void MasterService::SetTierMover(SegmentId segment, std::shared_ptr<TierMover> mover,
                                 bool write_behind) {
  std::lock_guard lock(movers_mu_);
  if (!mover) {
    movers_.erase(segment);
    write_behind_segments_.erase(segment);
    return;
  }
  movers_[segment] = std::move(mover);
  if (!write_behind) {
    write_behind_segments_.erase(segment);
    return;
  }
  write_behind_segments_.insert(segment);
  if (!write_behind_) {
    write_behind_ = std::make_unique<WriteBehind>([this](const std::vector<std::string>& keys) {
      return CopyToDisk(keys, [this](SegmentId s) {
        std::lock_guard segments_lock(movers_mu_);
        return write_behind_segments_.count(s) != 0;
      });
    });
    has_write_behind_.store(true, std::memory_order_release);
  }
}

void MasterService::DrainWriteBehind() {
  if (has_write_behind_.load(std::memory_order_acquire)) write_behind_->Drain();
}

uint64_t MasterService::write_behind_dropped() const {
  return has_write_behind_.load(std::memory_order_acquire) ? write_behind_->dropped() : 0;
}

uint64_t MasterService::write_behind_failed() const {
  return has_write_behind_.load(std::memory_order_acquire) ? write_behind_->failed() : 0;
}

uint64_t MasterService::DropDiskReplicas(SegmentId segment, uint32_t region, uint64_t generation,
                                         const std::vector<std::string>& keys) {
  uint64_t removed = 0;
  uint64_t dropped_replicas = 0;
  for (const auto& key : keys) {
    RedirectList redirects;
    std::vector<ObjectMeta> dropped;
    table_.WithObject(key, [&](uint32_t idx, Shard& s, ObjectMeta& meta) {
      const size_t before = meta.replicas.size();
      EraseReplicasIf(meta.replicas, [&](const Replica& r) {
        return r.tier == ReplicaTier::kDisk && r.segment == segment && r.disk.region == region &&
               r.disk.generation == generation;
      });
      dropped_replicas += before - meta.replicas.size();
      if (!meta.replicas.empty()) return;
      // Gone from every tier: remove it, and the rest of its group (no partial groups).
      std::vector<std::string> victims{key};
      if (!meta.group_id().empty()) {
        auto g = s.groups.find(meta.group_id());
        if (g != s.groups.end()) victims.assign(g->second.members.begin(), g->second.members.end());
      }
      for (const auto& v : victims) {
        auto it = s.objects.find(v);
        if (it == s.objects.end()) continue;
        if (!it->second.group_id().empty() && table_.ShardOf(v) != idx)
          redirects.emplace_back(v, idx);
        dropped.push_back(table_.EraseLocked(s, it));
      }
    });
    removed += dropped.size();
    dropped.clear();
    for (const auto& [k, home] : redirects) table_.CleanupRedirect(k, home);
  }
  disk_replicas_dropped_.fetch_add(dropped_replicas, std::memory_order_relaxed);
  return removed;
}

Replica MasterService::MakeDiskReplica(SegmentId segment, const std::string& key,
                                       const ObjectMeta& meta, const DiskLocation& location) {
  Replica r{segment, ReplicaTier::kDisk, Allocation(), location};
  auto seg = segments_.Find(segment);
  if (!seg || !seg->feed) return r;
  IndexEntry e = IndexEntryOf(key, meta);
  e.disk = location;
  seg->feed->DiskAttached(std::move(e));
  r.claim = std::make_unique<DiskClaim>(seg->feed, key, location);
  return r;
}

std::vector<Status> MasterService::AddDiskReplicas(SegmentId segment,
                                                   const std::vector<DiskRecord>& records) {
  std::vector<Status> out;
  out.reserve(records.size());
  if (!segments_.Find(segment)) {
    return std::vector<Status>(records.size(),
                               Status(ErrorCode::SEGMENT_NOT_FOUND,
                                      "segment " + std::to_string(segment) + " is not mounted"));
  }
  const SteadyTime now = options_.clock->Now();
  for (const auto& rec : records) {
    if (Status st = ValidateKey(rec.key); !st.ok()) {
      out.push_back(st);
      continue;
    }
    if (rec.location.size == 0) {
      out.emplace_back(ErrorCode::INVALID_PARAMS, "disk record of " + rec.key + " is empty");
      continue;
    }
    if (!DiskLocationFits(rec.location)) {
      out.emplace_back(ErrorCode::INVALID_PARAMS,
                       "disk record of " + rec.key + " at offset " +
                           std::to_string(rec.location.offset) +
                           ": a record starts on a 4 KiB page below 16 TiB of its region");
      continue;
    }
    const uint32_t a = table_.ShardOf(rec.key);
    Shard& ks = table_.shard(a);
    bool redirected = false;
    {
      std::lock_guard lock(ks.mu);
      redirected = ks.redirects.contains(rec.key);
      if (!redirected && !ks.objects.contains(rec.key)) {
        ObjectMeta meta;
        meta.size = rec.location.size;
        meta.checksum = rec.checksum;
        meta.put_id = next_put_id_.fetch_add(1, std::memory_order_relaxed);
        meta.state = ObjectState::kComplete;
        meta.put_started = now;
        meta.last_access = now;
        meta.replicas.push_back(MakeDiskReplica(segment, rec.key, meta, rec.location));
        ks.objects.emplace(rec.key, std::move(meta));
        out.push_back(Status::Ok());
        continue;
      }
    }
    // A grouped object of this key may live elsewhere (or the redirect is stale): keep the
    // stored one either way; warm restart never overrides what the pool already holds.
    out.emplace_back(ErrorCode::OBJECT_ALREADY_EXISTS, rec.key + " is already stored");
  }
  return out;
}

std::vector<Status> MasterService::CopyToDisk(const std::vector<std::string>& keys,
                                              const std::function<bool(SegmentId)>& only) {
  std::vector<Status> out(keys.size(), Status(ErrorCode::OBJECT_NOT_FOUND, "not stored"));
  struct Job {
    size_t index;
    uint32_t shard;
    DemoteItem item;
    uint64_t put_id;
  };
  std::map<SegmentId, std::pair<std::shared_ptr<TierMover>, std::vector<Job>>> by_segment;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (Status st = ValidateKey(keys[i]); !st.ok()) {
      out[i] = st;
      continue;
    }
    table_.WithObject(keys[i], [&](uint32_t idx, Shard&, ObjectMeta& meta) {
      if (meta.state != ObjectState::kComplete) {
        out[i] = Status(ErrorCode::REPLICA_IS_NOT_READY, "put of " + keys[i] + " has not ended");
        return;
      }
      out[i] = Status::Ok();
      if (meta.demoting || HasDiskReplica(meta)) return;
      bool elsewhere = false;  // on segments `only` leaves out
      for (const auto& r : meta.replicas) {
        if (r.tier != ReplicaTier::kMemory) continue;
        if (only && !only(r.segment)) {
          elsewhere = true;
          continue;
        }
        auto mover = MoverOf(r.segment);
        if (!mover) continue;
        auto& slot = by_segment[r.segment];
        slot.first = std::move(mover);
        slot.second.push_back(
            Job{i, idx, DemoteItem{keys[i], r.allocation.offset(), meta.size, meta.checksum},
                meta.put_id});
        meta.demoting = true;
        return;
      }
      if (elsewhere) return;  // OK: not this copy's to make
      out[i] = Status(ErrorCode::UNAVAILABLE_IN_CURRENT_MODE,
                      keys[i] + " has no memory replica on a segment with an SSD tier");
    });
  }
  const SteadyTime now = options_.clock->Now();
  for (auto& [segment, slot] : by_segment) {
    auto& [mover, jobs] = slot;
    std::vector<DemoteItem> items;
    for (const auto& j : jobs) items.push_back(j.item);
    std::vector<Result<DiskLocation>> written = mover->Demote(items);
    written.resize(items.size(), Result<DiskLocation>(ErrorCode::INTERNAL_ERROR,
                                                      "tier mover returned too few results"));
    for (size_t k = 0; k < jobs.size(); ++k) {
      std::vector<Result<DiskLocation>> one{written[k]};
      FinishDemotion(jobs[k].shard, segment, {{jobs[k].item, jobs[k].put_id}}, one,
                     /*drop_memory=*/false, std::string(), now);
      if (!written[k].ok()) out[jobs[k].index] = written[k].status();
    }
  }
  return out;
}

}  // namespace tierkv
