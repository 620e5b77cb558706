// RemoteBackend: ClientBackend of a requester that talks to a `tierkv master` over gRPC and
// reaches other processes' segments through a transport.
//
// Segments: a segment served to other processes is mounted under the name
// "<name>@<socket path>" (SegmentEndpointName), where the socket is the owner's
// ShmSegmentServer. FindSegment(id) returns this process's own segment directly; another
// segment's name comes from the master's segment list (fetched on a miss, at most every
// 100 ms) and, when its host is this host, it is mapped once through the ShmSegmentMapper
// and cached; otherwise (protocol tcp/rdma, or auto for another host) it connects a
// UcxSegmentClient to the address after '#' and the bytes move with ReadRemote/WriteRemote.
// A connection whose owner hung up is dead: FindSegment returns null for it from then on (its
// replicas fail rather than return bytes of a dead owner), and the master drops them after
// client_ttl. A segment this protocol cannot reach: null, logged once per segment.
//
// Thread-safety: thread-safe.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "client/client_backend.h"
#include "memory/memory_segment.h"
#include "rpc/remote_master.h"
#include "transport/shm_segment_client.h"
#include "transport/ucx_options.h"

namespace tierkv {

// "<name>@<socket path>" (and "#<tcp address>" when the segment is also served over the
// network transport): the name a served segment is mounted under.
std::string SegmentEndpointName(const std::string& name, const std::string& socket_path,
                                const std::string& tcp_address = "");
// Splits a mounted name into name, socket path and network address ("" when absent).
void SplitSegmentEndpoint(const std::string& mounted, std::string* name, std::string* socket_path,
                          std::string* tcp_address = nullptr);
// The host part of a segment name "<host>:<pid>:<n>" (everything before the first ':').
std::string SegmentHost(const std::string& name);

class RemoteBackend final : public ClientBackend {
 public:
  // Connects to the master at `address` within `timeout` and registers this process as
  // `host` ("" = gethostname()). `protocol`: "shm" (same-host segments only), "tcp" or "rdma"
  // (every segment through the UCX transport, `ucx` says how), "auto" (shm on this host, the
  // network otherwise). Errors: as RemoteMaster::Connect.
  static Result<std::shared_ptr<RemoteBackend>> Connect(const std::string& address, Millis timeout,
                                                        const std::string& host,
                                                        const std::string& protocol,
                                                        const transport::UcxTransportOptions& ucx);

  // Mounts this process's own segment on the master under `mounted_name` and serves
  // FindSegment for it directly.
  Result<SegmentId> MountOwn(std::shared_ptr<MemorySegment> segment,
                             const std::string& mounted_name);
  Status UnmountOwn(SegmentId handle);

  RemoteMaster& master() { return *master_; }
  const RemoteMaster& master() const { return *master_; }
  const std::string& host() const { return host_; }

  std::vector<Result<PutStartResult>> PutStart(const std::vector<std::string>& keys,
                                               const std::vector<uint64_t>& sizes,
                                               const ReplicateConfig& config) override;
  std::vector<Status> PutEnd(const std::vector<std::string>& keys,
                             const std::vector<uint64_t>& put_ids,
                             const std::vector<uint64_t>& checksums) override;
  std::vector<Status> PutRevoke(const std::vector<std::string>& keys,
                                const std::vector<uint64_t>& put_ids) override;
  std::vector<int> Exists(const std::vector<std::string>& keys) override;
  std::vector<Result<ObjectReplicas>> GetReplicas(const std::vector<std::string>& keys) override;
  std::vector<Result<PutStartResult>> PromoteStart(const std::vector<std::string>& keys,
                                                   uint32_t min_hits) override;
  std::vector<Status> PromoteEnd(const std::vector<std::string>& keys,
                                 const std::vector<uint64_t>& promotion_ids,
                                 const std::vector<bool>& ok) override;
  Status Remove(const std::string& key, bool force) override;
  uint64_t RemoveAll(bool force) override;
  const Clock* clock() const override;

  std::shared_ptr<SegmentAccess> FindSegment(SegmentId id) override;
  // This process's own tier (SetOwnTier) for its own segment; null for any other.
  std::shared_ptr<SsdTier> FindTier(SegmentId id) override;
  // Gives this process's segment `handle` (MountOwn's) an SSD tier read in-process.
  void SetOwnTier(SegmentId handle, std::shared_ptr<SsdTier> tier);
  // Through the owner's UCX segment server (tcp for a segment mapped over shm: the disk, not
  // loopback, is the limit); one connection per owner, kept.
  std::vector<Status> StageRemote(const std::vector<RemoteStage>& ops,
                                  double usable_ratio) override;
  Transport StageTransport(SegmentId id) override;
  std::string SegmentName(SegmentId id) override;
  std::vector<Status> ReadRemote(const std::vector<RemoteRead>& ops) override;
  std::vector<Status> WriteRemote(const std::vector<RemoteWrite>& ops) override;

 private:
  RemoteBackend(std::unique_ptr<RemoteMaster> master, std::string host, std::string protocol,
                transport::UcxTransportOptions ucx)
      : master_(std::move(master)),
        host_(std::move(host)),
        protocol_(std::move(protocol)),
        ucx_(std::move(ucx)) {}
  // Connects segment `id` through the shm or UCX transport. Requires mu_.
  std::shared_ptr<SegmentAccess> ConnectLocked(SegmentId id, const std::string& mounted);
  // A UCX connection to segment `id`'s owner for staged loads, or null (logged). Requires mu_.
  std::shared_ptr<SegmentAccess> StageAccessLocked(SegmentId id);
  // Refreshes names_ from the master's segment list (rate-limited) and drops mappings whose
  // id now names another segment. Requires mu_.
  void RefreshNamesLocked();
  // Clears the caches when the RemoteMaster registered again (master restart). Requires mu_.
  void ForgetIfReregisteredLocked();

  const std::unique_ptr<RemoteMaster> master_;
  const std::string host_;
  const std::string protocol_;
  const transport::UcxTransportOptions ucx_;
  transport::ShmSegmentMapper mapper_;
  std::mutex mu_;
  std::map<SegmentId, std::shared_ptr<MemorySegment>> own_;     // by handle; guarded by mu_
  std::map<SegmentId, std::string> names_;                      // guarded by mu_
  std::map<SegmentId, std::shared_ptr<SegmentAccess>> mapped_;  // guarded by mu_
  std::map<SegmentId, std::shared_ptr<SsdTier>> own_tiers_;     // by handle; guarded by mu_
  // UCX connections for staged loads from segments mapped over shm; guarded by mu_.
  std::map<SegmentId, std::shared_ptr<SegmentAccess>> stage_access_;
  std::set<SegmentId> unreachable_;                       // logged; guarded by mu_
  std::chrono::steady_clock::time_point last_refresh_{};  // guarded by mu_
  uint64_t seen_registrations_ = 1;  // master_->registrations() the caches belong to; mu_
};

}  // namespace tierkv
