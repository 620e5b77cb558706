// RemoteMaster: the MasterApi of a MasterService in another process (`tierkv master`), reached
// over gRPC. Each batch is one RPC. Nothing throws: a call
// that cannot reach the master, times out or gets a malformed answer fails every key of its
// batch with RPC_FAIL (-900), the message naming the RPC, the address and gRPC's reason.
// Calls whose MasterService signature has no room for an error (RemoveAll, DropDiskReplicas,
// Stats) return 0 / empty stats on failure and log a warning; ProcessStats() and Ping() report
// errors.
//
// Liveness: Connect registers this client (naming its host) and a background thread heartbeats
// every `heartbeat_interval` (default 1 s), or every client_ttl / 3 when the master's TTL (sent
// in the RegisterClient answer) is shorter than 3 intervals. When the master answers that it does
// not know the client — it restarted, or expired the client after client_ttl of silence — the
// thread registers again and re-mounts every segment this client mounted, so its owner carries on.
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
#include "tierkv/status.h"
#include "tierkv/types.h"
#include "transfer/transfer_counters.h"

namespace grpc {
class Channel;
class ClientContext;
class Status;
}  // namespace grpc

namespace tierkv {
struct RemoteMasterOptions {
  Millis rpc_timeout{10000};        // deadline of each call
  Millis heartbeat_interval{1000};  // 0 = no heartbeat thread (tests: a silent client)
  std::string host;                 // this client's host name; "" = gethostname()
  // Called at each heartbeat: the client's cumulative transfer bytes, reported to the master.
  std::function<std::vector<TransferCount>()> transfer_counts;
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
                                const std::vector<uint64_t>& put_ids) override;

  // --- Reads (grant read leases; deadlines are on this process's steady clock) ---
  std::vector<int> Exists(const std::vector<std::string>& keys) override;
  std::vector<Result<ObjectReplicas>> GetReplicas(const std::vector<std::string>& keys) override;

  // --- Removal ---
  Status Remove(const std::string& key, bool force) override;
  std::vector<Status> BatchRemove(const std::vector<std::string>& keys, bool force) override;
  uint64_t RemoveAll(bool force) override;
  Result<uint64_t> RemoveByRegex(const std::string& regex, bool force) override;

  MasterStats Stats() override;
  // This process's steady clock: lease deadlines are converted to it on arrival.
  const Clock* clock() const override { return SystemClock::Instance(); }
  Result<MasterProcessStats> ProcessStats();
  // One Stats RPC to the master at `address` on a channel of its own, without registering
  // (`tierkv stat`: looking must not add a client). Fails fast when nothing answers: RPC_FAIL
  // naming the address, the timeout and gRPC's reason, within `timeout`; INVALID_PARAMS for an
  // empty address or a non-positive timeout. Thread-safe.
  static Result<MasterProcessStats> QueryStats(const std::string& address, Millis timeout);

  // One heartbeat now: OK if the master answered (re-registering first if it did not know this
  // client), RPC_FAIL otherwise.
  Status Ping();

  const std::string& address() const { return address_; }
  // The channel to the master (TierMoveLink opens its stream on it).
  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }
  uint64_t client_id() const { return client_id_.load(); }
  // Times this client registered (1 after Connect; +1 per re-registration).
  uint64_t registrations() const { return registrations_.load(); }
  // False after a failed heartbeat, until one succeeds.
  bool connected() const { return connected_.load(); }

 private:
  struct Stub;
  // PutStart and UpsertStart: one PutStart RPC with `upsert` set as asked.
  std::vector<Result<PutStartResult>> StartPuts(const std::vector<std::string>& keys,
                                                const std::vector<uint64_t>& sizes,
                                                const ReplicateConfig& config, bool upsert);
  struct OwnedSegment {
    SegmentId handle = 0;   // what MountSegment returned first
    SegmentId current = 0;  // the master's id now; 0 = not mounted (re-mount pending)
    std::string name;
    uint64_t capacity = 0;
  };

  RemoteMaster(std::string address, RemoteMasterOptions options);
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
  // RPC_FAIL naming the call, the address and gRPC's reason; wakes the heartbeat.
  Status RpcFailure(const char* rpc, const grpc::Status& status);
  void SetDeadline(grpc::ClientContext& context) const;

  const std::string address_;
  const RemoteMasterOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<Stub> stub_;
  std::atomic<uint64_t> client_id_{0};
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
