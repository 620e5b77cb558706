// ClientImpl: the one implementation of tierkv::Client — the data path of puts and gets over a
// ClientBackend, which says where the master is and how segments are reached:
//   - embedded mode: an InProcessBackend (a MasterService in this process; a transfer is a
//     memcpy between the caller's buffers and the segment);
//   - a remote master (master_server_address): a RemoteBackend (rpc/remote_backend.h; other
//     processes' segments mapped over shared memory or reached over UCX).
// In mode embedded the client also contributes a segment: it owns a Store (store/store.h) that
// mounts it on the backend's master, with the SSD tier behind it when enable_offload.
//
// Files: client_impl.cc (creation, registration, queries, removal), client_put.cc (the put
// path), client_get.cc (the get path: memory replicas, then disk replicas).
// Thread-safety: all public methods are thread-safe. Overrides repeat the base's default
// arguments (same values) so code holding a ClientImpl can call them directly.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "client/buffer_registry.h"
#include "client/client_backend.h"
#include "client/in_process_master.h"
#include "client/staged_loader.h"
#include "ssd/ssd_tier.h"
#include "store/store.h"
#include "tierkv/client.h"
#include "transfer/copy.h"
#include "transfer/transfer_pool.h"

namespace tierkv {

class BatchSegments;

class ClientImpl final : public Client {
 public:
  // ValidateConfig, and what a client adds: enable_offload needs mode embedded (a requester
  // contributes no segment to put the tier behind). INVALID_CONFIG naming the key.
  static Status CheckConfig(const Config& config);
  // A client over `backend`. Mode embedded contributes a segment of global_segment_size (a
  // Store on the backend; `store_options` says where it serves it and may adjust its tier);
  // standalone-store contributes nothing. Errors: INVALID_CONFIG (CheckConfig), and
  // Store::Create's.
  static Result<std::unique_ptr<ClientImpl>> Create(const Config& config,
                                                    std::shared_ptr<ClientBackend> backend,
                                                    StoreOptions store_options = {});
  // Embedded mode with the master in this process: `master` (shared by several clients of a
  // process, each contributing a segment), or a new one with MasterOptionsFrom(config) whose
  // maintenance runs every MaintenancePeriod. Errors: as Create; INVALID_CONFIG unless mode is
  // embedded.
  static Result<std::unique_ptr<ClientImpl>> CreateEmbedded(
      const Config& config, std::shared_ptr<InProcessMaster> master = nullptr,
      StoreOptions store_options = {});
  ~ClientImpl() override;

  Status RegisterBuffer(void* ptr, size_t size) override;
  Status UnregisterBuffer(void* ptr) override;
  int Put(const std::string& key, const void* data, size_t size,
          const ReplicateConfig& config = {}) override;
  int64_t Get(const std::string& key, void* buf, size_t capacity) override;
  int Upsert(const std::string& key, const void* data, size_t size,
             const ReplicateConfig& config = {}) override;
  std::vector<int> BatchPutFromMultiBuffers(const std::vector<std::string>& keys,
                                            const std::vector<std::vector<void*>>& ptrs,
                                            const std::vector<std::vector<size_t>>& sizes,
                                            const ReplicateConfig& config = {}) override;
  std::vector<int> BatchUpsertFromMultiBuffers(const std::vector<std::string>& keys,
                                               const std::vector<std::vector<void*>>& ptrs,
                                               const std::vector<std::vector<size_t>>& sizes,
                                               const ReplicateConfig& config = {}) override;
  std::vector<int64_t> BatchGetIntoMultiBuffers(
      const std::vector<std::string>& keys, const std::vector<std::vector<void*>>& ptrs,
      const std::vector<std::vector<size_t>>& sizes) override;
  std::vector<int64_t> BatchGetInto(const std::vector<std::string>& keys,
                                    const std::vector<void*>& bufs,
                                    const std::vector<size_t>& capacities) override;
  std::vector<int64_t> BatchGetAllocated(
      const std::vector<std::string>& keys,
      const std::function<void*(size_t index, uint64_t size)>& allocate) override;
  std::vector<int> BatchIsExist(const std::vector<std::string>& keys) override;
  std::vector<int> BatchIsExistViews(std::span<const std::string_view> keys) override;
  std::vector<Result<std::vector<ReplicaDesc>>> BatchGetReplicaDesc(
      const std::vector<std::string>& keys) override;
  int Remove(const std::string& key, bool force = false) override;
  int64_t RemoveAll(bool force = false) override;
  std::vector<int> BatchRemove(const std::vector<std::string>& keys, bool force = false) override;
  int64_t RemoveByRegex(const std::string& regex, bool force = false) override;
  int64_t RemoveInNamespace(const std::string& key_namespace, const std::string& regex,
                            bool force = false) override;
  std::vector<int> BatchReplicaClear(const std::vector<std::string>& keys,
                                     const std::string& segment_name = "") override;
  std::string LocalSegmentName() const override { return mounted_segment_name(); }
  ClientHealth HealthCheck() override { return backend_->Health(); }

  // The store this client contributes its segment through; null in mode standalone-store.
  Store* store() const { return store_.get(); }
  // The in-process master of embedded mode (null with a remote master): benches and tests
  // drive maintenance and inspect state with it.
  const std::shared_ptr<InProcessMaster>& in_process_master() const { return in_process_; }
  // The name this client's segment is mounted under ("" when it contributes none).
  const std::string& mounted_segment_name() const;
  // The bytes this client moved between its callers' buffers and segments, per transport.
  std::vector<TransferCount> transfer_counts() const { return backend_->transfers().Snapshot(); }

 private:
  ClientImpl(Config config, std::shared_ptr<ClientBackend> backend);

  // The shared body of all puts: pieces per key, registration checked or not; `upsert`: an
  // existing key gets a new version (UpsertStart) instead of OBJECT_ALREADY_EXISTS.
  std::vector<int> PutImpl(const std::vector<std::string>& keys,
                           const std::vector<std::vector<ConstPiece>>& pieces,
                           const ReplicateConfig& config, bool check_registered,
                           bool upsert = false, bool retried = false);
  // PutStart (UpsertStart with `upsert`) for the keys, re-placing a key whose placement names a
  // segment this client cannot reach (FindSegment: not served over its protocol, or its owner
  // gone): that placement is revoked and the key asked for again with such segments excluded,
  // so a put never fails for a segment the master could have avoided. Every segment of the
  // placements returned is in `segments`.
  std::vector<Result<PutStartResult>> StartReachable(const std::vector<std::string>& keys,
                                                     const std::vector<uint64_t>& sizes,
                                                     const ReplicateConfig& config, bool upsert,
                                                     BatchSegments& segments);
  std::vector<int> MultiBufferPut(const std::vector<std::string>& keys,
                                  const std::vector<std::vector<void*>>& ptrs,
                                  const std::vector<std::vector<size_t>>& sizes,
                                  const ReplicateConfig& config, bool upsert);
  // Sizes a get's destination once the object's size is known (BatchGetAllocated).
  using GetAllocator = std::function<void*(size_t index, uint64_t size)>;
  // The shared body of all gets. `exact`: the pieces must add up to the object
  // size exactly; otherwise they are a capacity and the bytes fill a prefix. With `allocate`,
  // `given` only passes the shape checks: each key's destination comes from allocate().
  std::vector<int64_t> GetImpl(const std::vector<std::string>& keys,
                               const std::vector<std::vector<MutPiece>>& given,
                               bool check_registered, bool exact,
                               const GetAllocator* allocate = nullptr);
  // Writes the replicas on segments not mapped here (remote[j]: key j's) through the
  // backend's transport; a failed one fails its key (codes[j] = TRANSFER_FAIL) and adds its
  // segment to failed[j].
  void WriteRemoteReplicas(const std::vector<std::vector<RemoteWrite>>& remote,
                           std::vector<int>& codes, std::vector<std::vector<SegmentId>>& failed);
  // Reads the keys whose first reachable memory replica is not mapped here (remote_from[j] =
  // 1 + that replica), falling back replica by replica, then to the disk (wants_disk).
  void ReadRemoteReplicas(const std::vector<std::string>& keys,
                          const std::vector<Result<ObjectReplicas>>& replicas,
                          const std::vector<std::vector<MutPiece>>& dsts,
                          std::vector<size_t>& remote_from, const std::vector<size_t>& idx,
                          std::vector<int64_t>& results, std::vector<uint8_t>& wants_disk);
  // Reads the keys whose memory replicas all failed from their disk replicas (in order; a
  // failed read falls back to the next one), and promotes hits when promote_on_hit.
  void ReadDiskReplicas(const std::vector<std::string>& keys,
                        const std::vector<Result<ObjectReplicas>>& replicas,
                        std::vector<std::vector<MutPiece>>& dsts, const std::vector<size_t>& idx,
                        const std::vector<uint8_t>& wants_disk, std::vector<int64_t>& results);
  // Loads one round of disk reads: from tiers in this process with the staged loader, from
  // other processes' through the backend (verified here against the checksum).
  void LoadDisk(std::vector<DiskRead>& round, const std::vector<SegmentId>& segments);
  // promote_on_hit: copies disk hits (reads[hits[k]], already verified in the caller's
  // buffers) back into DRAM once the master admits them.
  void Promote(const std::vector<DiskRead>& reads, const std::vector<size_t>& hits);

  const Config config_;
  const std::shared_ptr<ClientBackend> backend_;  // the data path's master and segments
  MasterApi& master_;                             // backend_->master()
  std::shared_ptr<InProcessMaster> in_process_;   // embedded mode's master, else null
  std::unique_ptr<Store> store_;                  // this client's segment (mode embedded)
  BufferRegistry buffers_;
  TransferPool pool_;
  StagedLoader loader_;
  const bool tier_log_;  // TIERKV_TIER_LOG=1: one summary line per get batch
};

}  // namespace tierkv
