// ClientBackend: what the client's data path needs from the deployment it runs in — the master
// (MasterApi), the bytes of the segments replicas live on, the SSD tiers behind them — and, as a
// SegmentHost, where this process's own Store mounts its segment.
//
// Implementations: InProcessBackend (embedded mode: a MasterService in this process, segment
// memory by pointer; client/in_process_backend.h) and RemoteBackend (a `tierkv master` over
// gRPC, other processes' segments reached through the shm and UCX transports;
// rpc/remote_backend.h). Only segment access and transports differ between them: the client
// is one implementation (client/client_impl.h) over either.
// Thread-safety: all methods are thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "client/segment_access.h"
#include "common/disk_location.h"
#include "master/master_api.h"
#include "ssd/ssd_tier.h"
#include "store/segment_host.h"
#include "tierkv/client.h"
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
  SegmentId id = 0;  // the master's id of `segment`
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

class ClientBackend : public SegmentHost {
 public:
  ~ClientBackend() override = default;

  // The bytes of segment `id` (the master's id), or null if this client cannot reach them
  // (unknown segment, owner gone, no transport to its host). May connect to the owner on
  // first use; never waits for the master while another thread copies to a segment it knows.
  virtual std::shared_ptr<SegmentAccess> FindSegment(SegmentId id) = 0;
  // The SSD tier behind segment `id` when it lives in this process, or null (disk replicas
  // of it are loaded through its owner: StageRemote).
  virtual std::shared_ptr<SsdTier> FindTier(SegmentId id) = 0;
  // The segment's registered name, or "" when unknown.
  virtual std::string SegmentName(SegmentId id) = 0;

  // Called with an op's index once its bytes are all in and it will be returned OK, from
  // inside ReadRemote / StageRemote on the calling thread, as soon as the transport knows (at
  // the latest before the call returns); quick, no calls back into the backend. May be empty.
  using OpDone = std::function<void(size_t op)>;

  // Moves the bytes of unmapped segments through the backend's network transport, many
  // ranges in flight; one Status per op (TRANSFER_FAIL for a failed or unreachable one).
  // Reads wait at most `idle` for a silent server (0: the transport's io_timeout; see
  // NetworkSegmentClient::ReadBatch). Default: no network transport, every op fails.
  virtual std::vector<Status> ReadRemote(const std::vector<RemoteRead>& ops,
                                         std::chrono::milliseconds /*idle*/,
                                         const OpDone& /*on_done*/) {
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
                                          double /*usable_ratio*/, const OpDone& /*on_done*/) {
    return std::vector<Status>(
        ops.size(), Status(ErrorCode::OBJECT_NOT_FOUND,
                           "the SSD tier holding this disk replica is not reachable here"));
  }
  // The transport StageRemote moves the bytes of segment `id` with.
  virtual Transport StageTransport(SegmentId /*id*/) { return Transport::kLocal; }

  // How this process stands with its master (Client::HealthCheck); in-process: always healthy.
  virtual ClientHealth Health() { return ClientHealth{}; }

  // The bytes this client moved, per transport (the client's data path counts them).
  TransferCounters& transfers() { return *transfers_; }

 protected:
  std::shared_ptr<TransferCounters> transfers_ = std::make_shared<TransferCounters>();
};

}  // namespace tierkv
