// ClientBackend: what a client's data path needs from the deployment it runs in — the
// master's batched metadata calls and the bytes of the segments replicas live on.
//
// Implementations: InProcessBackend (embedded mode: a MasterService in this process, segment
// memory by pointer) and RemoteBackend (a `tierkv master` over gRPC, other processes'
// segments mapped through a transport). The metadata calls have MasterService's semantics
// (see master/master_service.h); lease deadlines are on this process's steady clock
// (`clock()`).
// Thread-safety: all methods are thread-safe.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "master/master_service.h"
#include "memory/segment_access.h"
#include "ssd/ssd_tier.h"
#include "transfer/copy.h"
#include "transfer/transfer_counters.h"

namespace tierkv {

// Byte ranges of segments not mapped in this process (SegmentAccess::mapped() false).
struct RemoteRead {
  std::shared_ptr<SegmentAccess> segment;
  uint64_t offset = 0;
  std::vector<MutPiece> dst;  // their total is the range's length
};
struct RemoteWrite {
  std::shared_ptr<SegmentAccess> segment;
  uint64_t offset = 0;
  std::vector<ConstPiece> src;
};
// A disk replica in the SSD tier of another process's segment, loaded through its owner.
struct RemoteStage {
  SegmentId segment = 0;
  std::string key;
  DiskLocation location;
  std::vector<MutPiece> dst;  // exactly location.size bytes
};

class ClientBackend {
 public:
  virtual ~ClientBackend() = default;

  virtual std::vector<Result<PutStartResult>> PutStart(const std::vector<std::string>& keys,
                                                       const std::vector<uint64_t>& sizes,
                                                       const ReplicateConfig& config) = 0;
  virtual std::vector<Status> PutEnd(const std::vector<std::string>& keys,
                                     const std::vector<uint64_t>& put_ids,
                                     const std::vector<uint64_t>& checksums) = 0;
  virtual std::vector<Status> PutRevoke(const std::vector<std::string>& keys,
                                        const std::vector<uint64_t>& put_ids) = 0;
  virtual std::vector<int> Exists(const std::vector<std::string>& keys) = 0;
  virtual std::vector<Result<ObjectReplicas>> GetReplicas(const std::vector<std::string>& keys) = 0;
  virtual std::vector<Result<PutStartResult>> PromoteStart(const std::vector<std::string>& keys,
                                                           uint32_t min_hits) = 0;
  virtual std::vector<Status> PromoteEnd(const std::vector<std::string>& keys,
                                         const std::vector<uint64_t>& promotion_ids,
                                         const std::vector<bool>& ok) = 0;
  virtual Status Remove(const std::string& key, bool force) = 0;
  virtual uint64_t RemoveAll(bool force) = 0;
  // The clock lease deadlines are on.
  virtual const Clock* clock() const = 0;

  // The bytes of segment `id` (the master's id), or null if this client cannot reach them
  // (unknown segment, owner gone, no transport to its host). May connect to the owner on
  // first use.
  virtual std::shared_ptr<SegmentAccess> FindSegment(SegmentId id) = 0;
  // The SSD tier behind segment `id`, or null (disk replicas of it cannot be loaded here).
  virtual std::shared_ptr<SsdTier> FindTier(SegmentId id) = 0;
  // The segment's registered name, or "" when unknown.
  virtual std::string SegmentName(SegmentId id) = 0;

  // Moves the bytes of unmapped segments through the backend's network transport, many
  // ranges in flight; one Status per op (TRANSFER_FAIL for a failed or unreachable one).
  // Default: no network transport, every op fails.
  virtual std::vector<Status> ReadRemote(const std::vector<RemoteRead>& ops) {
    return std::vector<Status>(
        ops.size(), Status(ErrorCode::TRANSFER_FAIL, "no network transport in this backend"));
  }
  virtual std::vector<Status> WriteRemote(const std::vector<RemoteWrite>& ops) {
    return std::vector<Status>(
        ops.size(), Status(ErrorCode::TRANSFER_FAIL, "no network transport in this backend"));
  }

  // Staged loads from the SSD tiers of other processes' segments (FindTier null): one Status
  // per op; the bytes are NOT verified (the caller checks the checksum). `usable_ratio`: the
  // share of the owner's staging buffer one request may need. Default: no such path,
  // OBJECT_NOT_FOUND.
  virtual std::vector<Status> StageRemote(const std::vector<RemoteStage>& ops,
                                          double /*usable_ratio*/) {
    return std::vector<Status>(
        ops.size(), Status(ErrorCode::OBJECT_NOT_FOUND,
                           "the SSD tier holding this disk replica is not reachable here"));
  }
  // The transport StageRemote moves the bytes of segment `id` with.
  virtual Transport StageTransport(SegmentId /*id*/) { return Transport::kLocal; }

  // The bytes this client moved, per transport (the client's data path counts them).
  TransferCounters& transfers() { return *transfers_; }

 protected:
  std::shared_ptr<TransferCounters> transfers_ = std::make_shared<TransferCounters>();
};

}  // namespace tierkv
