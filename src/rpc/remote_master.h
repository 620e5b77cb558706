// RemoteMaster: the MasterApi of a MasterService in another process (`tierkv master`), reached
// over gRPC. Each batch is one RPC. Nothing throws: a call
// that cannot reach the master, times out or gets a malformed answer fails every key of its
// batch with RPC_FAIL (-900), the message naming the RPC, the address and gRPC's reason.
// Calls whose MasterService signature has no room for an error (RemoveAll, DropDiskReplicas,
// Stats) return 0 / empty stats on failure and log a warning; ProcessStats() and Ping() report
// errors.
//
// The master's address is "host:port", or "etcd://host:port[;host:port...]" for masters with
// standbys (tierkv master --ha): the client then asks etcd who leads (rpc/etcd_client.h), talks
// to that master, and follows the leader when it changes — a master answering not_leader, or
// with another epoch than the one etcd named, is not obeyed.
//
// Riding through a master's restart or failover: the idempotent calls (Exists, GetReplicas,
// ProcessStats/Stats) are retried — on the new leader, or on the same address — while the master
// is unreachable or not the leader, until `rpc_timeout` after the call started, never longer.
// The others fail at once with RPC_FAIL (a put whose PutStart reached a master that then died
// can never end: its PutEnd fails on the next master, and its bytes never become readable).
//
// Liveness: Connect registers this client (naming its host) and a background thread heartbeats
// every `heartbeat_interval` (default 1 s), or every client_ttl / 3 when the master's TTL (sent
// in the RegisterClient answer) is shorter than 3 intervals, and every 100 ms while the master
// does not answer. When the master answers that it does not know the client — it restarted,
// another master took over, or it expired the client after client_ttl of silence — the thread
// registers again and re-mounts every segment this client mounted, so its owner carries on.
// A failed call also wakes the thread early. Segment handles returned by MountSegment stay
// valid across such re-mounts: UnmountSegment, DropDiskReplicas and AddDiskReplicas translate
// them to the master's current segment id (CurrentSegmentId). Replica locations in answers
// carry the master's current ids.
//
// Destroying a RemoteMaster stops the heartbeat and unregisters the client, which unmounts its
// segments (best effort, within 1 s). Thread-safety: thread-safe.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "master/master_api.h"
#include "rpc/channel_security.h"
#include "rpc/etcd_client.h"
#include "tierkv/status.h"
#include "tierkv/types.h"
#include "transfer/transfer_counters.h"

namespace grpc {
class Channel;
class ClientContext;
class Status;
}  // namespace grpc

namespace tierkv {
namespace rpc {
class RemoveByRegexRequest;
}  // namespace rpc

struct RemoteMasterOptions {
  Millis rpc_timeout{10000};        // deadline of each call
  Millis heartbeat_interval{1000};  // 0 = no heartbeat thread (tests: a silent client)
  std::string host;                 // this client's host name; "" = gethostname()
  // Called at each heartbeat: the client's cumulative transfer bytes, reported to the master.
  std::function<std::vector<TransferCount>()> transfer_counts;
  // The cluster token and TLS (rpc/channel_security.h); default: plaintext, no token.
  ControlPlaneSecurity security;
  // Send the data path's batch calls (PutStart, PutEnd, PutRevoke, Exists, GetReplicas,
  // Remove) over the master's metadata channel when it offers one (rpc/meta_client.h); never
  // with TLS. false = every call over gRPC (config key master_meta_channel).
  bool meta_channel = true;
};

// What the master process reports beyond MasterStats.
struct MasterProcessStats {
  MasterStats master;
  uint64_t clients = 0;                     // registered now
  uint64_t segments = 0;                    // mounted now
  uint64_t expired_clients = 0;             // since the master started
  uint64_t incarnation = 0;                 // random per master process
  std::vector<SegmentUsage> segment_usage;  // every mounted segment, by id (empty: old master)
  std::vector<TransferCount> transfers;     // bytes clients reported, per transport (empty: old)
  // The master's eviction settings ("" and 0 from an older master).
  std::string eviction_policy;
  double high_watermark = 0;
  double eviction_ratio = 0;
  uint64_t lease_ttl_ms = 0;
  std::vector<SegmentRecovery> recoveries;  // per segment with an index (restart recovery)
  uint64_t quarantined_bytes = 0;           // freed, waiting for the stores' acknowledgments
  uint32_t meta_port = 0;                   // the metadata channel's port (0: none)
  // High availability (tierkv master --ha): whether the master runs with it, whether the one
  // that answered leads (a standby answers only this part), and the leader it knows.
  bool ha = false;
  bool leading = true;
  std::string leader;
  uint64_t leader_epoch = 0;
  std::string answered_by;           // the address that answered
  std::vector<std::string> masters;  // etcd: every running master (leader and standbys)
};

class RemoteMaster final : public MasterApi {
 public:
  // Connects to the master at `address` ("host:port"), registers this client and starts the
  // heartbeat. Retries until `connect_timeout`, then fails with RPC_FAIL naming the address, the
  // timeout and gRPC's last reason (e.g. "Connection refused"); INVALID_PARAMS for an empty
  // address or a non-positive timeout.
  static Result<std::unique_ptr<RemoteMaster>> Connect(const std::string& address,
                                                       Millis connect_timeout,
                                                       RemoteMasterOptions options = {});
  ~RemoteMaster();
  RemoteMaster(const RemoteMaster&) = delete;
  RemoteMaster& operator=(const RemoteMaster&) = delete;

  // --- Segments (owned by this client; re-mounted after a master restart) ---
  Result<SegmentId> MountSegment(const std::string& name, uint64_t capacity) override;
  // With what the master should know of the segment (MountOptions; kept for re-mounts).
  Result<SegmentId> MountSegment(const std::string& name, uint64_t capacity, MountOptions options);
  Status UnmountSegment(SegmentId id) override;
  // The master's current id of a segment handle (they differ after a re-mount); 0 if unknown
  // or not mounted right now. Never waits for an RPC (a registration in progress).
  SegmentId CurrentSegmentId(SegmentId handle) const;

  // --- SSD tier bookkeeping (segment owners) ---
  uint64_t DropDiskReplicas(SegmentId segment, uint32_t region, uint64_t generation,
                            const std::vector<std::string>& keys) override;
  std::vector<Status> AddDiskReplicas(SegmentId segment,
                                      const std::vector<DiskRecord>& records) override;
  std::vector<Status> CopyToDisk(const std::vector<std::string>& keys);
  std::vector<Result<PutStartResult>> PromoteStart(const std::vector<std::string>& keys,
                                                   uint32_t min_hits) override;
  std::vector<Status> PromoteEnd(const std::vector<std::string>& keys,
                                 const std::vector<uint64_t>& promotion_ids,
                                 const std::vector<bool>& ok) override;

  // --- Two-phase put ---
  std::vector<Result<PutStartResult>> PutStart(const std::vector<std::string>& keys,
                                               const std::vector<uint64_t>& sizes,
                                               const ReplicateConfig& config) override;
  // PutStart with the request's `upsert` set.
  std::vector<Result<PutStartResult>> UpsertStart(const std::vector<std::string>& keys,
                                                  const std::vector<uint64_t>& sizes,
                                                  const ReplicateConfig& config) override;
  std::vector<Status> PutEnd(const std::vector<std::string>& keys,
                             const std::vector<uint64_t>& put_ids,
                             const std::vector<uint64_t>& checksums) override;
  std::vector<Status> PutRevoke(const std::vector<std::string>& keys,
                                const std::vector<uint64_t>& put_ids,
                                const std::vector<SegmentId>& unreachable = {}) override;

  // --- Reads (grant read leases; deadlines are on this process's steady clock) ---
  std::vector<int> Exists(const std::vector<std::string>& keys) override;
  std::vector<Result<ObjectReplicas>> GetReplicas(const std::vector<std::string>& keys) override;

  // --- Removal ---
  Status Remove(const std::string& key, bool force) override;
  std::vector<Status> BatchRemove(const std::vector<std::string>& keys, bool force) override;
  uint64_t RemoveAll(bool force) override;
  Result<uint64_t> RemoveByRegex(const std::string& regex, bool force) override;
  Result<uint64_t> RemoveInNamespace(const std::string& key_namespace, const std::string& regex,
                                     bool force) override;
  std::vector<Status> ClearReplicas(const std::vector<std::string>& keys,
                                    const std::string& segment_name) override;

  MasterStats Stats() override;
  // This process's steady clock: lease deadlines are converted to it on arrival.
  const Clock* clock() const override { return SystemClock::Instance(); }
  Result<MasterProcessStats> ProcessStats();
  // One Stats RPC to the master at `address` on a channel of its own, without registering
  // (`tierkv stat`: looking must not add a client). With "etcd://...", to the leader etcd names,
  // and `masters` lists every running master; a standby's answer has leading false and only
  // the HA fields. Fails fast when nothing answers: RPC_FAIL naming the address, the timeout
  // and gRPC's reason, within `timeout`; INVALID_PARAMS for an empty address or a non-positive
  // timeout. Thread-safe.
  static Result<MasterProcessStats> QueryStats(const std::string& address, Millis timeout,
                                               const ControlPlaneSecurity& security = {});

  // One heartbeat now: OK if the master answered (re-registering first if it did not know this
  // client), RPC_FAIL otherwise.
  Status Ping();
  // Something looks wrong with the master (a stream broke): heartbeat soon. Never blocks.
  void Nudge() { Kick(); }

  // The address this client was given ("host:port" or "etcd://...").
  const std::string& address() const { return address_; }
  // The master it talks to now: the leader's address (the same as address() without etcd),
  // and the leader's epoch (0 without etcd).
  std::string master_address() const;
  uint64_t leader_epoch() const;
  // Times this client followed a new leader (etcd only).
  uint64_t leader_changes() const { return leader_changes_.load(); }
  // The channel to the master it talks to now (SegmentLink opens its stream on it).
  std::shared_ptr<grpc::Channel> channel() const;
  uint64_t client_id() const { return client_id_.load(); }
  // What the master told at the last registration (RegisterClientResponse.defaults).
  ClientDefaults client_defaults() const {
    std::lock_guard lock(defaults_mu_);
    return client_defaults_;
  }
  // Times this client registered (1 after Connect; +1 per re-registration).
  uint64_t registrations() const { return registrations_.load(); }
  // The master's metadata channel this client uses ("" = none: every call over gRPC), and the
  // calls it answered on the current one.
  std::string meta_address() const;
  uint64_t meta_calls() const;
  // False after a failed heartbeat, until one succeeds.
  bool connected() const { return connected_.load(); }

 private:
  struct Endpoint;
  // PutStart and UpsertStart: one PutStart RPC with `upsert` set as asked.
  std::vector<Result<PutStartResult>> StartPuts(const std::vector<std::string>& keys,
                                                const std::vector<uint64_t>& sizes,
                                                const ReplicateConfig& config, bool upsert);
  struct OwnedSegment {
    SegmentId handle = 0;   // what MountSegment returned first
    SegmentId current = 0;  // the master's id now; 0 = not mounted (re-mount pending)
    std::string name;
    uint64_t capacity = 0;
    MountOptions options;
  };

  RemoteMaster(std::string address, RemoteMasterOptions options);
  std::shared_ptr<const Endpoint> endpoint() const;
  void UseEndpoint(const std::string& address, uint64_t epoch);
  // etcd only: asks etcd who leads (at most every 50 ms unless `force`) and switches to it;
  // true if the master talked to changed.
  bool FollowLeader(bool force = false);
  // Whether an answer must not be obeyed: not the leader, or another epoch than etcd named.
  bool Stale(const Endpoint& endpoint, bool not_leader, uint64_t epoch) const;
  // One RPC: `rpc(stub, context)` with this client's deadline. With `idempotent`, retried until
  // the deadline while the master is unreachable (UNAVAILABLE) or not the leader, after
  // following the leader (etcd) or a short pause. An answer that is not obeyed comes back as
  // UNAVAILABLE.
  template <typename Response, typename Rpc>
  grpc::Status Call(const char* name, bool idempotent, Response* response, Rpc&& rpc);
  // Waits (up to `deadline`) for another master to try: true when it is worth trying again.
  bool AwaitMaster(const std::shared_ptr<const Endpoint>& tried,
                   std::chrono::system_clock::time_point deadline);
  // Uses the metadata channel `port` of the master at `ep` offers (0: none) for `ep`'s calls.
  void UseMetaChannel(const Endpoint& ep, uint32_t port);
  Status MountOne(OwnedSegment& segment);  // one MountSegment RPC; requires owner_mu_
  Status Register(Millis timeout);
  // Registers again and re-mounts every owned segment. Requires owner_mu_.
  Status ReregisterLocked(const char* why);
  // Mounts owned segments whose re-mount failed earlier. Requires owner_mu_.
  void RemountPendingLocked();
  // Publishes segments_' (handle, current id) pairs for CurrentSegmentId. Requires owner_mu_.
  void PublishIdsLocked();
  Status Beat();
  void HeartbeatLoop();
  Millis HeartbeatInterval() const;  // options_.heartbeat_interval, shortened for a short TTL
  void Kick();
  // RemoveByRegex and RemoveInNamespace.
  Result<uint64_t> RemoveByRegexCall(const rpc::RemoveByRegexRequest& request);
  // RPC_FAIL naming the call, the address and gRPC's reason; wakes the heartbeat.
  Status RpcFailure(const char* rpc, const grpc::Status& status);

  const std::string address_;
  const RemoteMasterOptions options_;
  std::unique_ptr<EtcdClient> etcd_;                     // "etcd://" addresses only
  mutable std::mutex endpoint_mu_;                       // a leaf lock
  std::shared_ptr<const Endpoint> endpoint_;             // guarded by endpoint_mu_
  std::chrono::steady_clock::time_point last_follow_{};  // guarded by endpoint_mu_
  std::atomic<uint64_t> leader_changes_{0};
  std::atomic<uint64_t> client_id_{0};
  mutable std::mutex defaults_mu_;
  ClientDefaults client_defaults_;                 // guarded by defaults_mu_
  std::atomic<uint64_t> master_client_ttl_ms_{0};  // from RegisterClient; 0 = not told
  std::atomic<uint64_t> registrations_{0};
  std::atomic<bool> connected_{true};

  mutable std::mutex owner_mu_;         // serializes registration and mount/unmount
  std::vector<OwnedSegment> segments_;  // guarded by owner_mu_
  // A copy of segments_' ids, replaced whole under owner_mu_: lookups on the data path never
  // wait behind a registration's RPCs. ids_mu_ is a leaf lock (held to copy the pointer).
  mutable std::mutex ids_mu_;
  std::shared_ptr<const std::vector<std::pair<SegmentId, SegmentId>>> ids_;  // guarded by ids_mu_

  std::mutex beat_mu_;
  std::condition_variable beat_cv_;
  bool stop_ = false;    // guarded by beat_mu_
  bool kicked_ = false;  // guarded by beat_mu_
  std::thread heartbeat_;
};

}  // namespace tierkv
