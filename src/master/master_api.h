// MasterApi: the master's call set as requesters and stores use it — one interface, implemented
// in this process by MasterService (master/master_service.h) and over gRPC by RemoteMaster
// (rpc/remote_master.h). Client and store code is written once against it.
//
// Every call is batched and returns one result per key; a bad key never fails its neighbours.
// Semantics and per-key errors are MasterService's (its header states them); a remote master
// adds RPC_FAIL (-900) for every key of a batch it could not deliver or got no valid answer for,
// and returns 0 / empty stats from the calls whose signature has no room for an error
// (RemoveAll, DropDiskReplicas, Stats), logging why. Lease deadlines are on `clock()`.
// Thread-safety: every method is thread-safe in both implementations.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "master/master_types.h"
#include "tierkv/status.h"
#include "tierkv/types.h"

namespace tierkv {

class MasterApi {
 public:
  virtual ~MasterApi() = default;

  // --- Segments ---
  // Mounts a segment of `capacity` bytes under `name`; the id (a remote master's handle stays
  // valid across its re-mounts after a master restart). SEGMENT_ALREADY_EXISTS, INVALID_PARAMS.
  virtual Result<SegmentId> MountSegment(const std::string& name, uint64_t capacity) = 0;
  // Unmounts, dropping every replica on it (and the rest of their groups). SEGMENT_NOT_FOUND.
  virtual Status UnmountSegment(SegmentId id) = 0;

  // --- Two-phase put ---
  virtual std::vector<Result<PutStartResult>> PutStart(const std::vector<std::string>& keys,
                                                       const std::vector<uint64_t>& sizes,
                                                       const ReplicateConfig& config) = 0;
  // PutStart for an upsert: a key that exists gets space for a new version, which its PutEnd
  // publishes atomically.
  virtual std::vector<Result<PutStartResult>> UpsertStart(const std::vector<std::string>& keys,
                                                          const std::vector<uint64_t>& sizes,
                                                          const ReplicateConfig& config) = 0;
  virtual std::vector<Status> PutEnd(const std::vector<std::string>& keys,
                                     const std::vector<uint64_t>& put_ids,
                                     const std::vector<uint64_t>& checksums) = 0;
  // `unreachable`: segments the caller failed to write these puts to. Placement avoids them
  // (for every client) for MasterOptions::unreachable_hold, renewed by each report, unless
  // fewer other segments than a put's replicas remain.
  virtual std::vector<Status> PutRevoke(const std::vector<std::string>& keys,
                                        const std::vector<uint64_t>& put_ids,
                                        const std::vector<SegmentId>& unreachable = {}) = 0;

  // --- Reads (grant read leases) ---
  virtual std::vector<int> Exists(const std::vector<std::string>& keys) = 0;
  // Exists over borrowed key bytes; the same answers. This default copies the keys.
  virtual std::vector<int> ExistsViews(std::span<const std::string_view> keys) {
    return Exists(std::vector<std::string>(keys.begin(), keys.end()));
  }
  virtual std::vector<Result<ObjectReplicas>> GetReplicas(const std::vector<std::string>& keys) = 0;

  // --- Removal ---
  virtual Status Remove(const std::string& key, bool force) = 0;
  virtual std::vector<Status> BatchRemove(const std::vector<std::string>& keys, bool force) = 0;
  virtual uint64_t RemoveAll(bool force) = 0;
  virtual Result<uint64_t> RemoveByRegex(const std::string& regex, bool force) = 0;
  // RemoveByRegex within one key namespace: keys that start with `key_namespace` (a tenant's
  // prefix), or for "" keys that do not start with kKeyNamespaceMark, whose rest `regex` ("" =
  // any) matches somewhere in.
  virtual Result<uint64_t> RemoveInNamespace(const std::string& key_namespace,
                                             const std::string& regex, bool force) = 0;
  // Mooncake's batch_replica_clear: per key, drops the object (segment_name "") or its memory
  // replicas on the segment of that name (the object goes with its last replica), only where no
  // lease is held.
  virtual std::vector<Status> ClearReplicas(const std::vector<std::string>& keys,
                                            const std::string& segment_name) = 0;

  // --- SSD tiers: promotion on hit, and the bookkeeping of a segment's owner ---
  virtual std::vector<Result<PutStartResult>> PromoteStart(const std::vector<std::string>& keys,
                                                           uint32_t min_hits) = 0;
  virtual std::vector<Status> PromoteEnd(const std::vector<std::string>& keys,
                                         const std::vector<uint64_t>& promotion_ids,
                                         const std::vector<bool>& ok) = 0;
  virtual uint64_t DropDiskReplicas(SegmentId segment, uint32_t region, uint64_t generation,
                                    const std::vector<std::string>& keys) = 0;
  virtual std::vector<Status> AddDiskReplicas(SegmentId segment,
                                              const std::vector<DiskRecord>& records) = 0;

  virtual MasterStats Stats() = 0;
  // The clock the lease deadlines of GetReplicas are on (this process's steady clock for a
  // remote master; the service's own clock in this process).
  virtual const Clock* clock() const = 0;
};

}  // namespace tierkv
