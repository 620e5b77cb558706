// MasterService::ClearReplicas: Mooncake's BatchReplicaClear (master_service.cpp, kvcache-ai/
// Mooncake 3b5a59413) on tierkv's table — an engine hands back space it knows it will not read
// again, one key at a time, only where no reader can be reading.
#include <algorithm>
#include <optional>
#include <string_view>

#include "common/key.h"
#include "master/master_service.h"
#include "master/replica_util.h"

namespace tierkv {

std::vector<Status> MasterService::ClearReplicas(const std::vector<std::string>& keys,
                                                 const std::string& segment_name) {
  std::vector<Status> out;
  out.reserve(keys.size());
  // The segments named so: by their whole name, or by the part before '@' (the name a client's
  // get_hostname() and the replica descriptors report). A name no segment has clears nothing:
  // every key answers SEGMENT_NOT_FOUND.
  std::vector<SegmentId> only;
  if (!segment_name.empty()) {
    for (const SegmentUsage& seg : segments_.Usage()) {
      const std::string_view name = seg.name;
      if (name == segment_name || name.substr(0, name.find('@')) == segment_name) {
        only.push_back(seg.id);
      }
    }
  }
  auto named = [&only](const Replica& r) {
    return r.tier == ReplicaTier::kMemory &&
           std::find(only.begin(), only.end(), r.segment) != only.end();
  };
  const SteadyTime now = options_.clock->Now();
  for (const std::string& key : keys) {
    if (Status st = ValidateKey(key); !st.ok()) {
      out.push_back(std::move(st));
      continue;
    }
    Status result(ErrorCode::OBJECT_NOT_FOUND, key);
    std::optional<ObjectMeta> removed;  // freed after the shard lock is released
    uint32_t home = 0;
    table_.WithObject(key, [&](uint32_t idx, Shard& s, ObjectMeta& meta) {
      if (meta.state != ObjectState::kComplete || meta.next() || meta.demoting) {
        result = Status(ErrorCode::REPLICA_IS_NOT_READY,
                        "a put, upsert or tier move of " + key + " is in progress");
        return;
      }
      if (IsLeased(s, meta, now) || HeldUntil(meta) > now) {
        result = Status(ErrorCode::OBJECT_HAS_LEASE, key + " is leased by a reader");
        return;
      }
      // A fresh object counts as leased for one lease TTL after its put started, as Mooncake's
      // test_batch_replica_clear expects: the writer's own engine is about to read it back.
      if (meta.put_started + options_.lease_ttl > now) {
        result = Status(ErrorCode::OBJECT_HAS_LEASE,
                        key + " was put less than a lease TTL ago (default_kv_lease_ttl)");
        return;
      }
      if (!segment_name.empty()) {
        if (std::none_of(meta.replicas.begin(), meta.replicas.end(), named)) {
          result = Status(ErrorCode::SEGMENT_NOT_FOUND,
                          "no memory replica of " + key + " on segment '" + segment_name + "'");
          return;
        }
        for (SegmentId id : only) DropMemoryReplicas(meta, id);
        result = Status::Ok();
        if (!meta.replicas.empty()) return;
      }
      home = idx;
      removed = table_.EraseLocked(s, s.objects.find(key));
      result = Status::Ok();
    });
    if (removed && !removed->group_id().empty()) table_.CleanupRedirect(key, home);
    if (removed) removes_.fetch_add(1, std::memory_order_relaxed);
    out.push_back(std::move(result));
  }
  return out;
}

}  // namespace tierkv
