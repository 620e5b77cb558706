// RemoteBackend: the ClientBackend of a process whose master is a `tierkv master` (over gRPC):
// a requester, or a Store (the `tierkv store` process, or an embedded rank contributing a
// segment to a remote master). Other processes' segments are reached through a transport.
//
// Segments: a served segment is mounted under "<name>@<socket path>[#<address>]"
// (transport/segment_endpoint.h). FindSegment(id) returns this process's own segment directly;
// another segment's name comes from the master's segment list (fetched on a miss, at most
// every 100 ms) and, when its host is this host, it is mapped once through the
// ShmSegmentMapper and cached; otherwise (protocol tcp/rdma, or auto for another host) it
// connects a NetworkSegmentClient (tcp: TcpSegmentClient; rdma: UcxSegmentClient) to the
// address after '#' and the bytes move with
// ReadRemote/WriteRemote. A dead connection (its owner hung up, or a read waited in vain behind a
// partition) is never used again: FindSegment returns null for its segment (its replicas fail
// rather than return bytes of a dead owner) and connects anew after 5 s, as for a segment it
// cannot reach (null, logged; the client places puts elsewhere meanwhile); the master drops a
// dead owner's segments after client_ttl. Fetching the list and connecting
// happen outside the lock the lookups of known segments take: a slow master or owner never stalls
// transfers to segments already known.
//
// Own segments (SegmentHost): MountOwn keeps an index of the segment (store/segment_index.h) and
// a SegmentLink (rpc/segment_link.h): the segment's stream to the master, which feeds the index,
// reports it to every new master (restart recovery) and takes the master's demotions into the
// tier; UnmountOwn closes it first.
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
#include "rpc/segment_link.h"
#include "store/segment_index.h"
#include "transport/shm_segment_client.h"
#include "transport/ucx_options.h"

namespace tierkv {

class RemoteBackend final : public ClientBackend {
 public:
  // Connects to the master at `address` within `timeout` and registers this process as
  // `host` ("" = HostName()). `protocol`: "shm" (same-host segments only), "tcp" or "rdma"
  // (every segment through the UCX transport, `ucx` says how), "auto" (shm on this host, the
  // network otherwise). `meta_channel`: RemoteMasterOptions::meta_channel. Errors: as
  // RemoteMaster::Connect.
  static Result<std::shared_ptr<RemoteBackend>> Connect(const std::string& address, Millis timeout,
                                                        const std::string& host,
                                                        const std::string& protocol,
                                                        const transport::UcxTransportOptions& ucx,
                                                        ControlPlaneSecurity security = {},
                                                        bool meta_channel = true);
  ~RemoteBackend() override;

  MasterApi& master() override { return *master_; }
  // The gRPC client itself: connection state and registrations, for a store's metrics.
  RemoteMaster& remote_master() { return *master_; }
  const RemoteMaster& remote_master() const { return *master_; }
  const std::string& host() const { return host_; }

  bool serves_other_processes() const override { return true; }
  // The tenant this process's own segments are dedicated to (config key segment_tenant; "" =
  // shared). Set before MountOwn.
  void set_segment_tenant(std::string tenant) { segment_tenant_ = std::move(tenant); }
  Result<SegmentId> MountOwn(std::shared_ptr<MemorySegment> segment,
                             const std::string& mounted_name, OwnTier tier) override;
  void DropOwnDiskReplicas(SegmentId handle, uint32_t region, uint64_t generation,
                           const std::vector<std::string>& keys) override;
  Status UnmountOwn(SegmentId handle) override;
  // The index of own segment `handle` (null if unknown), and its link's state.
  std::shared_ptr<SegmentIndex> OwnIndex(SegmentId handle);
  bool OwnLinkConnected(SegmentId handle);
  // Test hooks for the links of segments mounted from now on (SegmentLinkOptions::test).
  void TEST_SetLinkHooks(const SegmentLinkOptions::TestHooks& hooks);

  ClientHealth Health() override;

  std::shared_ptr<SegmentAccess> FindSegment(SegmentId id) override;
  // This process's own tier (AttachOwnTier) for its own segment; null for any other.
  std::shared_ptr<SsdTier> FindTier(SegmentId id) override;
  // Through the owner's UCX segment server (tcp for a segment mapped over shm: the disk, not
  // loopback, is the limit); one connection per owner, kept.
  std::vector<Status> StageRemote(const std::vector<RemoteStage>& ops, double usable_ratio,
                                  const OpDone& on_done) override;
  Transport StageTransport(SegmentId id) override;
  std::string SegmentName(SegmentId id) override;
  std::vector<Status> ReadRemote(const std::vector<RemoteRead>& ops, std::chrono::milliseconds idle,
                                 const OpDone& on_done) override;
  std::vector<Status> WriteRemote(const std::vector<RemoteWrite>& ops) override;

 private:
  RemoteBackend(std::unique_ptr<RemoteMaster> master, std::string host, std::string protocol,
                transport::UcxTransportOptions ucx)
      : master_(std::move(master)),
        host_(std::move(host)),
        protocol_(std::move(protocol)),
        ucx_(std::move(ucx)) {}
  // The cached access of segment `id` (own, or connected earlier), or null; sets *known when
  // the answer is final (a dead or unreachable segment). Requires mu_.
  std::shared_ptr<SegmentAccess> CachedLocked(SegmentId id, bool* known);
  // The mounted name of segment `id`, fetching the master's segment list when it is not known
  // (rate-limited); "" when the master does not list it. Requires connect_mu_; takes mu_
  // itself, and the RPC runs without it.
  std::string NameOf(SegmentId id);
  // Fetches the master's segment list (at most every 100 ms, or at once after a
  // re-registration) and installs it under mu_, dropping mappings whose id now names another
  // segment. Requires connect_mu_.
  void RefreshNames();
  // Connects segment `id` through the shm or UCX transport (no lock held); null when it
  // cannot be reached (logged).
  std::shared_ptr<SegmentAccess> Connect(SegmentId id, const std::string& mounted);
  // A UCX connection to segment `id`'s owner for staged loads, or null (logged).
  std::shared_ptr<SegmentAccess> StageAccess(SegmentId id);
  // Clears the caches when the RemoteMaster registered again (master restart). Requires mu_.
  void ForgetIfReregisteredLocked();

  const std::unique_ptr<RemoteMaster> master_;
  const std::string host_;
  const std::string protocol_;
  const transport::UcxTransportOptions ucx_;
  std::string segment_tenant_;  // MountOwn's segments' tenant ("" = shared)
  transport::ShmSegmentMapper mapper_;
  // Serializes the slow paths (list refresh, connecting): one connection per segment. Taken
  // before mu_, never while holding it.
  std::mutex connect_mu_;
  std::mutex mu_;  // guards the maps below; held only for lookups and inserts
  std::map<SegmentId, std::shared_ptr<SegmentAccess>> own_;     // by handle
  std::map<SegmentId, std::shared_ptr<SsdTier>> own_tiers_;     // by handle
  std::map<SegmentId, std::unique_ptr<SegmentLink>> links_;     // by handle
  std::map<SegmentId, std::shared_ptr<SegmentIndex>> indexes_;  // by handle
  SegmentLinkOptions::TestHooks test_hooks_;                    // guarded by mu_
  std::map<SegmentId, std::string> names_;                      // the master's list
  std::map<SegmentId, std::shared_ptr<SegmentAccess>> mapped_;  // connected segments
  // UCX connections for staged loads from segments mapped over shm.
  std::map<SegmentId, std::shared_ptr<SegmentAccess>> stage_access_;
  // Segments found unreachable, and when: tried again after kUnreachableRetry (a transient
  // failure must not take a segment out of this requester's pool for good).
  std::map<SegmentId, std::chrono::steady_clock::time_point> unreachable_;
  std::chrono::steady_clock::time_point last_refresh_{};  // guarded by connect_mu_
  uint64_t seen_registrations_ = 1;  // master_->registrations() the caches belong to; mu_
  bool refresh_due_ = false;         // the next RefreshNames ignores the rate limit; mu_
};

}  // namespace tierkv
