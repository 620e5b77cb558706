// Client of embedded mode: metadata calls go straight to an in-process
// MasterService; bytes move by memcpy between user buffers and segments.
// Thread-safety: all public methods are thread-safe. Overrides repeat the
// base's default arguments (same values) so tests can call them directly.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "client/buffer_registry.h"
#include "client/client_backend.h"
#include "client/in_process_master.h"
#include "client/remote_backend.h"
#include "client/staged_loader.h"
#include "master/write_behind.h"
#include "rpc/tier_move_link.h"
#include "ssd/ssd_tier.h"
#include "tierkv/client.h"
#include "transfer/copy.h"
#include "transfer/transfer_pool.h"
#include "transport/shm_segment_server.h"
#include "transport/ucx_segment_server.h"

namespace tierkv {

class EmbeddedClient final : public Client {
 public:
  // Contributes a segment of config.global_segment_size to `master` (a new
  // in-process master when null). Several clients may share one master.
  // `tier_hook` (tests) may adjust the SSD tier's options before it opens.
  static Result<std::unique_ptr<EmbeddedClient>> Create(
      const Config& config, std::shared_ptr<InProcessMaster> master = nullptr,
      const std::function<void(SsdTierOptions&)>& tier_hook = nullptr);
  // A requester with a remote master (config.master_server_address): mode
  // standalone-store contributes nothing; mode embedded contributes a segment of
  // global_segment_size, served to same-host requesters over the shm transport and, when
  // `data_host` is not empty, over the UCX network transport on data_host (a free port) —
  // what `tierkv store` runs. protocol: shm (same-host segments only), tcp or rdma (UCX),
  // auto (shm on this host, tcp otherwise); rdma without verbs devices, or a device_name this
  // host lacks: UNAVAILABLE_IN_CURRENT_MODE. Connection errors: RPC_FAIL within 5 s.
  // enable_offload (mode embedded only; else INVALID_CONFIG): the SSD tier is opened behind the
  // segment; the master demotes into it over the TierMoves stream this process keeps open
  // (TierMoveLink; RPC_FAIL if the master does not take it within 5 s), other processes load
  // from it through the UCX server (on data_host, or on 127.0.0.1 when data_host is empty), and
  // warm restart re-registers what the tier still holds. `tier_hook` (tests) adjusts the tier's
  // options.
  static Result<std::unique_ptr<EmbeddedClient>> CreateRemote(
      const Config& config, const std::string& data_host = "",
      const std::function<void(SsdTierOptions&)>& tier_hook = nullptr);
  ~EmbeddedClient() override;

  Status RegisterBuffer(void* ptr, size_t size) override;
  Status UnregisterBuffer(void* ptr) override;
  int Put(const std::string& key, const void* data, size_t size,
          const ReplicateConfig& config = {}) override;
  int64_t Get(const std::string& key, void* buf, size_t capacity) override;
  std::vector<int> BatchPutFromMultiBuffers(const std::vector<std::string>& keys,
                                            const std::vector<std::vector<void*>>& ptrs,
                                            const std::vector<std::vector<size_t>>& sizes,
                                            const ReplicateConfig& config = {}) override;
  std::vector<int64_t> BatchGetIntoMultiBuffers(
      const std::vector<std::string>& keys, const std::vector<std::vector<void*>>& ptrs,
      const std::vector<std::vector<size_t>>& sizes) override;
  std::vector<int> BatchIsExist(const std::vector<std::string>& keys) override;
  std::vector<Result<std::vector<ReplicaDesc>>> BatchGetReplicaDesc(
      const std::vector<std::string>& keys) override;
  int Remove(const std::string& key, bool force = false) override;
  int64_t RemoveAll(bool force = false) override;

  // The in-process master (tests drive maintenance and inspect state with it).
  const std::shared_ptr<InProcessMaster>& TEST_master() const { return master_; }
  // The name this client's segment is mounted under ("" when it contributes none).
  const std::string& mounted_segment_name() const { return mounted_name_; }
  // Remote mode (CreateRemote), for a store's metrics: same-host requesters holding a mapping
  // of this client's segment, whether the master answered the last heartbeat, and how often
  // this client registered. 0 / false in embedded mode.
  size_t shm_connections() const { return shm_server_ ? shm_server_->open_connections() : 0; }
  bool master_connected() const { return remote_ && remote_->master().connected(); }
  uint64_t registrations() const { return remote_ ? remote_->master().registrations() : 0; }
  // The bytes requesters moved through this client's network segment server (read from the
  // segment, written into it); empty without one.
  std::vector<TransferCount> served_transfers() const;
  // The bytes this client moved between its callers' buffers and segments, per transport.
  std::vector<TransferCount> transfer_counts() const { return backend_->transfers().Snapshot(); }
  // The SSD tier behind this client's segment (null without enable_offload), and how many
  // tier-move requests a remote master sent it.
  const std::shared_ptr<SsdTier>& tier() const { return tier_; }
  uint64_t tier_move_requests() const { return tier_link_ ? tier_link_->requests() : 0; }
  SegmentId TEST_segment_id() const { return segment_id_; }
  MemorySegment* TEST_segment() const { return segment_.get(); }
  SsdTier* TEST_tier() const { return tier_.get(); }
  WriteBehind* TEST_write_behind() const { return write_behind_.get(); }

 private:
  EmbeddedClient(Config config, std::shared_ptr<InProcessMaster> master,
                 std::shared_ptr<RemoteBackend> remote = nullptr);

  // The shared body of all puts: pieces per key, registration checked or not.
  std::vector<int> PutImpl(const std::vector<std::string>& keys,
                           const std::vector<std::vector<ConstPiece>>& pieces,
                           const ReplicateConfig& config, bool check_registered);
  // The shared body of all gets. `exact`: the pieces must add up to the object
  // size exactly; otherwise they are a capacity and the bytes fill a prefix.
  std::vector<int64_t> GetImpl(const std::vector<std::string>& keys,
                               const std::vector<std::vector<MutPiece>>& pieces,
                               bool check_registered, bool exact);
  // Per-key shape/duplicate/registration checks; 0 = fine.
  template <typename Piece>
  std::vector<int> CheckBatch(const std::vector<std::string>& keys,
                              const std::vector<std::vector<Piece>>& pieces,
                              bool check_registered) const;

  // Writes the replicas on segments not mapped here (remote[j]: key j's) through the
  // backend's transport; a failed one fails its key (codes[j] = TRANSFER_FAIL).
  void WriteRemoteReplicas(const std::vector<std::vector<RemoteWrite>>& remote,
                           std::vector<int>& codes);
  // Reads the keys whose first reachable memory replica is not mapped here (remote_from[j] =
  // 1 + that replica), falling back replica by replica, then to the disk (wants_disk).
  void ReadRemoteReplicas(const std::vector<Result<ObjectReplicas>>& replicas,
                          const std::vector<std::vector<MutPiece>>& dsts,
                          std::vector<size_t>& remote_from, const std::vector<size_t>& idx,
                          std::vector<int64_t>& results, std::vector<uint8_t>& wants_disk);

  // enable_offload: opens this process's SSD tier behind its segment (warm restart
  // re-registers what the tier still holds).
  Status OpenTier(const SsdTierOptions& options);
  // The same with a remote master, in two steps: open the tier (before the servers start, so
  // they serve it), then, once the segment is mounted, register what warm restart found, open
  // the tier-move stream and start write-behind.
  Status OpenRemoteTier(const SsdTierOptions& options, std::vector<ScannedRecord>* surviving);
  Status AttachRemoteTier(std::vector<ScannedRecord>& surviving);
  // Loads one round of disk reads: from tiers in this process with the staged loader, from
  // other processes' through the backend (verified here against the checksum).
  void LoadDisk(std::vector<DiskRead>& round, const std::vector<SegmentId>& segments);

  // One info line with the SSD tier's counters (at shutdown; /metrics comes with the
  // distributed build).
  void LogTierCounters() const;
  // promote_on_hit: copies disk hits (reads[hits[k]], already verified in the caller's
  // buffers) back into DRAM once the master admits them.
  void Promote(const std::vector<DiskRead>& reads, const std::vector<size_t>& hits);

  const Config config_;
  std::shared_ptr<InProcessMaster> master_;
  std::shared_ptr<ClientBackend> backend_;  // the data path's master and segments
  std::shared_ptr<RemoteBackend> remote_;   // remote master (CreateRemote), else null
  std::unique_ptr<transport::ShmSegmentServer> shm_server_;  // serves segment_ (remote)
  std::unique_ptr<transport::UcxSegmentServer> ucx_server_;  // and over the network
  std::string mounted_name_;
  std::shared_ptr<MemorySegment> segment_;
  SegmentId segment_id_ = 0;
  std::shared_ptr<SsdTier> tier_;
  // The tier's segment as the master knows it (0 until mounted), for its eviction callback.
  std::shared_ptr<std::atomic<SegmentId>> tier_segment_ =
      std::make_shared<std::atomic<SegmentId>>(0);
  std::unique_ptr<TierMoveLink> tier_link_;    // remote master: its demotions into tier_
  std::unique_ptr<WriteBehind> write_behind_;  // offload_write_policy "write_behind"
  BufferRegistry buffers_;
  TransferPool pool_;
  StagedLoader loader_;
  const bool tier_log_;  // TIERKV_TIER_LOG=1: one summary line per get batch
};

// The SSD tier options `config` asks for (enable_offload).
SsdTierOptions TierOptionsFrom(const Config& config);

}  // namespace tierkv
