// DistributedStore: Mooncake's MooncakeDistributedStore semantics over a tierkv Client — what
// the Python module `tierkv` binds (docs/python.md), usable from C++ too.
//
// Return conventions follow Mooncake's Python API: int results are 0 / a byte count on
// success and a negative ErrorCode otherwise; per-key lists never fail a key for its
// neighbours. Calls that take caller bytes or unregistered memory (Put, Get, PutBatch,
// GetBuffer, the tensor calls, GetIntoRanges) bounce them through the *local buffer*
// (`local_buffer_size` bytes, registered with the client at Setup); one that needs more than is
// free there fails with BUFFER_OVERFLOW and stores nothing. Zero-copy calls (PutFrom, GetInto,
// the multi-buffer calls) use registered memory and never touch the local buffer.
//
// Thread-safety: every method is thread-safe; Setup and Close exclude the other calls (a call
// in flight finishes first). Handles (BufferHandle) stay valid after Close.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tierkv/status.h"
#include "tierkv/types.h"

namespace tierkv {

class Client;
class LocalBuffer;

// Mooncake's SoftPinAction.
enum class SoftPinAction { kPreserve = 0, kEnable = 1, kDisable = 2 };

// Mooncake's Python ReplicateConfig; ToCore() maps it onto the core's ReplicateConfig.
struct StoreReplicateConfig {
  size_t replica_num = 1;
  bool with_hard_pin = false;
  bool with_soft_pin = false;  // the older flag: the same as soft_pin_action kEnable
  SoftPinAction soft_pin_action = SoftPinAction::kPreserve;
  // With soft_pin_action kEnable: None = the master's default TTL (default_kv_soft_pin_ttl_ms),
  // 0 = no pin (ordinary cache), else the pin lapses this many ms after the put (at most a year).
  std::optional<uint64_t> soft_pin_ttl_ms;
  std::string preferred_segment;
  std::vector<std::string> preferred_segments;  // at most one entry (see docs/python.md)
  bool prefer_alloc_in_same_node = false;       // prefer this host's segments; replica_num 1
  std::vector<std::string> group_ids;           // empty, or one per key of the call
  // Empty, or one per key of the call: the key of the chunk each one extends ("" = none); read
  // only by eviction_policy "reuse" (ReplicateConfig::parent_keys in tierkv/types.h).
  std::vector<std::string> parent_keys;

  // "ReplicateConfig(replica_num=1, with_hard_pin=false, ...)".
  std::string ToString() const;
};

// One replica of an object (Mooncake's ReplicaDescriptor).
struct StoreReplica {
  ReplicaTier tier = ReplicaTier::kMemory;
  bool local = false;  // on this client's own segment (its SSD tier for a disk replica)
  std::string segment_name;
  uint64_t offset = 0;  // memory: in the segment; disk: of the record in its region
  uint64_t size = 0;
  uint32_t region = 0;  // disk: the region of the owner's SSD tier; memory: 0
};

// Bytes of one object held in the local buffer until the last reference goes (Mooncake's
// BufferHandle). Immutable once returned; safe to share between threads.
class BufferHandle {
 public:
  virtual ~BufferHandle() = default;
  virtual const uint8_t* data() const = 0;
  virtual size_t size() const = 0;
};

// Setup arguments (Mooncake's positional setup()).
struct StoreSetupOptions {
  std::string local_hostname;
  std::string metadata_server = "P2PHANDSHAKE";
  uint64_t global_segment_size = 16ull << 20;
  uint64_t local_buffer_size = 16ull << 20;
  std::string protocol = "tcp";
  std::string device_name;         // Mooncake's rdma_devices
  std::string master_server_addr;  // "" = embedded, with an in-process master
  bool enable_ssd_offload = false;
  std::string ssd_offload_path;  // a directory; the tier file is <path>/tierkv-<pid>.tier
  // Mooncake's tenant_id: the namespace of every key this store names (1..64 characters of
  // [A-Za-z0-9_.-]; "default" = keys as given). A tenant's objects are invisible to the other
  // tenants' calls, remove_all and remove_by_regex included (src/connector/tenant_client.h).
  std::string tenant_id = "default";
  // The cluster token file (config key cluster_token_file; docs/security.md); "" = the
  // config's, else $TIERKV_CLUSTER_TOKEN_FILE, else none.
  std::string cluster_token_file;
  // tierkv Config keys applied on top (a JSON object, "" = none), e.g. {"mode": ...}.
  std::string extra_config_json;
};

// A tensor as the store sees it: Mooncake's dtype numbering (docs/python.md) and a C-order
// shape. Data are `nbytes` contiguous bytes.
struct TensorInfo {
  int32_t dtype = -1;
  std::vector<int64_t> shape;
};
struct TensorView {
  TensorInfo info;
  const void* data = nullptr;
  uint64_t nbytes = 0;
};
// A tensor read into the local buffer: the payload starts payload_offset bytes into `bytes`.
struct StoredTensor {
  TensorInfo info;
  std::shared_ptr<const BufferHandle> bytes;
  uint64_t payload_offset = 0;
  uint64_t payload_bytes = 0;
};

// Bytes of one element of `dtype`, 0 for an unknown dtype.
size_t TensorElementSize(int32_t dtype);
// The header that precedes a tensor's payload in its object (docs/python.md, "Tensor
// objects"): kTensorHeaderBytes bytes, so the payload stays 64-byte aligned.
inline constexpr size_t kTensorHeaderBytes = 128;
inline constexpr size_t kMaxTensorDims = 8;
// Writes the header of `info` into out[0, kTensorHeaderBytes). INVALID_PARAMS for an unknown
// dtype, more than kMaxTensorDims dimensions or a negative dimension.
Status EncodeTensorHeader(const TensorInfo& info, void* out);
// Parses the header of an object of `size` bytes starting at `data`. INVALID_PARAMS when the
// magic, version, dtype or shape is wrong or `size` differs from header + payload.
Result<TensorInfo> DecodeTensorHeader(const void* data, size_t size);
// Payload bytes of a tensor: product(shape) x element size (UINT64_MAX for a bad dtype, a
// negative dimension or a product over 64 bits).
uint64_t TensorPayloadBytes(const TensorInfo& info);

class DistributedStore {
 public:
  DistributedStore();
  ~DistributedStore();
  DistributedStore(const DistributedStore&) = delete;
  DistributedStore& operator=(const DistributedStore&) = delete;

  // ---- set-up ----
  // Builds the client: master_server_addr "" runs an in-process master (embedded mode);
  // otherwise a requester of that `tierkv master`, contributing global_segment_size bytes
  // (0: standalone-store requester). 0 or an error code; the reason is logged (and kept in
  // last_error()). A second Setup before Close is INVALID_PARAMS.
  int Setup(const StoreSetupOptions& options);
  // Mooncake's dict form, the dict as a JSON object (values: ints, strings such as "16MB" or
  // "16 MB", bools). Keys: local_hostname, metadata_server (both required), global_segment_size,
  // local_buffer_size, protocol, rdma_devices, master_server_addr, enable_ssd_offload,
  // ssd_offload_path, and any tierkv Config key. Unknown keys, "50%" and the like:
  // INVALID_CONFIG.
  int SetupFromJson(std::string_view json_object);
  // Mooncake's dummy client (setup_dummy): attaches to the `tierkv store` whose metrics server
  // listens at `store_address` (HOST:PORT; Mooncake's real client is 127.0.0.1:50052): reads its
  // /client_info page (the store's master, protocol and segment) and sets up as a requester of
  // that master contributing no segment, with a local buffer of `local_buffer_size`; reads
  // from the store's segment go over shared memory. AllocFromMemPool then hands out up to
  // `mem_pool_size` bytes (0 = no limit). 0 or an error: RPC_FAIL (the store did not answer or
  // its page is not a store's), and Setup's errors.
  int SetupDummy(uint64_t mem_pool_size, uint64_t local_buffer_size,
                 const std::string& store_address);
  // Mooncake's alloc_from_mem_pool: `size` bytes of zeroed, page-aligned memory this store
  // keeps until it is destroyed (not freed by Close: the caller may still hold the address),
  // for register_buffer and the zero-copy calls; 0 when the pool's limit would be passed or
  // the memory cannot be mapped (last_error() says which).
  uintptr_t AllocFromMemPool(uint64_t size);
  // Drops the client (its segment leaves the pool) and the local buffer (once no handle holds
  // it). 0; closing twice is fine.
  int Close();
  // 0 healthy, 1 not set up or closed, 2 the master does not answer.
  int HealthCheck();
  // The name of this store's own segment ("<host>:<pid>:<n>", what preferred_segment takes),
  // or, without one, local_hostname as given to Setup (else this host's name).
  std::string GetHostname() const;
  bool is_setup() const;
  std::string last_error() const;

  // ---- buffers ----
  // 0 or an error (INVALID_PARAMS: null, size 0, overlap).
  int RegisterBuffer(uintptr_t ptr, uint64_t size);
  int UnregisterBuffer(uintptr_t ptr);

  // ---- bytes through the local buffer ----
  int Put(const std::string& key, std::span<const uint8_t> value,
          const StoreReplicateConfig& config = {});
  int PutParts(const std::string& key, const std::vector<std::span<const uint8_t>>& parts,
               const StoreReplicateConfig& config = {});
  // 0, or the first failing key's code (the others are stored all the same).
  int PutBatch(const std::vector<std::string>& keys,
               const std::vector<std::span<const uint8_t>>& values,
               const StoreReplicateConfig& config = {});
  int Upsert(const std::string& key, std::span<const uint8_t> value,
             const StoreReplicateConfig& config = {});
  int UpsertParts(const std::string& key, const std::vector<std::span<const uint8_t>>& parts,
                  const StoreReplicateConfig& config = {});
  int UpsertBatch(const std::vector<std::string>& keys,
                  const std::vector<std::span<const uint8_t>>& values,
                  const StoreReplicateConfig& config = {});
  // The object's bytes in the local buffer, or an error (OBJECT_NOT_FOUND, BUFFER_OVERFLOW when
  // the local buffer cannot hold it, ...).
  Result<std::shared_ptr<const BufferHandle>> GetBuffer(const std::string& key);
  std::vector<Result<std::shared_ptr<const BufferHandle>>> BatchGetBuffer(
      const std::vector<std::string>& keys);

  // ---- zero-copy (registered memory) ----
  int PutFrom(const std::string& key, uintptr_t ptr, uint64_t size,
              const StoreReplicateConfig& config = {});
  std::vector<int> BatchPutFrom(const std::vector<std::string>& keys,
                                const std::vector<uintptr_t>& ptrs,
                                const std::vector<uint64_t>& sizes,
                                const StoreReplicateConfig& config = {});
  int UpsertFrom(const std::string& key, uintptr_t ptr, uint64_t size,
                 const StoreReplicateConfig& config = {});
  std::vector<int> BatchUpsertFrom(const std::vector<std::string>& keys,
                                   const std::vector<uintptr_t>& ptrs,
                                   const std::vector<uint64_t>& sizes,
                                   const StoreReplicateConfig& config = {});
  // Bytes read (capacity >= object size), or an error.
  int64_t GetInto(const std::string& key, uintptr_t ptr, uint64_t capacity);
  std::vector<int64_t> BatchGetInto(const std::vector<std::string>& keys,
                                    const std::vector<uintptr_t>& ptrs,
                                    const std::vector<uint64_t>& capacities);
  std::vector<int> BatchPutFromMultiBuffers(const std::vector<std::string>& keys,
                                            const std::vector<std::vector<uintptr_t>>& ptrs,
                                            const std::vector<std::vector<uint64_t>>& sizes,
                                            const StoreReplicateConfig& config = {});
  std::vector<int> BatchUpsertFromMultiBuffers(const std::vector<std::string>& keys,
                                               const std::vector<std::vector<uintptr_t>>& ptrs,
                                               const std::vector<std::vector<uint64_t>>& sizes,
                                               const StoreReplicateConfig& config = {});
  // The pieces of object i must add up to its size exactly (smaller: BUFFER_OVERFLOW, larger:
  // INVALID_PARAMS). Per key: bytes read, or an error.
  std::vector<int64_t> BatchGetIntoMultiBuffers(const std::vector<std::string>& keys,
                                                const std::vector<std::vector<uintptr_t>>& ptrs,
                                                const std::vector<std::vector<uint64_t>>& sizes);
  // Mooncake's get_into_ranges: results[i][j][k] is the bytes copied for fragment k of key j
  // into buffer i (src [src_off, src_off+size) of the object, dst [dst_off, dst_off+size) of
  // the registered buffer starting at buffer_ptrs[i]), or an error: INVALID_PARAMS (shapes,
  // buffer not registered), BUFFER_OVERFLOW (past the registered buffer), OBJECT_NOT_FOUND,
  // INVALID_READ (past the object's end). Objects bounce through the local buffer.
  std::vector<std::vector<std::vector<int64_t>>> GetIntoRanges(
      const std::vector<uintptr_t>& buffer_ptrs, const std::vector<std::vector<std::string>>& keys,
      const std::vector<std::vector<std::vector<uint64_t>>>& dst_offsets,
      const std::vector<std::vector<std::vector<uint64_t>>>& src_offsets,
      const std::vector<std::vector<std::vector<uint64_t>>>& sizes);

  // ---- query and removal ----
  // 1 exists, 0 not, or an error.
  int IsExist(const std::string& key);
  std::vector<int> BatchIsExist(const std::vector<std::string>& keys);
  // The same over borrowed key bytes (the Python binding's path: no copy of the keys).
  std::vector<int> BatchIsExistViews(std::span<const std::string_view> keys);
  // The object's size, or an error.
  int64_t GetSize(const std::string& key);
  int Remove(const std::string& key, bool force = false);
  std::vector<int> BatchRemove(const std::vector<std::string>& keys, bool force = false);
  // Objects removed whose key `regex` matches somewhere in (RE2 syntax; anchor with ^ and $),
  // or an error (INVALID_PARAMS for a bad expression).
  int64_t RemoveByRegex(const std::string& regex, bool force = false);
  int64_t RemoveAll(bool force = false);
  // Client::BatchReplicaClear: 0 or an error per key (Python returns the cleared keys).
  std::vector<int> BatchReplicaClear(const std::vector<std::string>& keys,
                                     const std::string& segment_name = "");
  std::vector<Result<std::vector<StoreReplica>>> BatchGetReplicaDesc(
      const std::vector<std::string>& keys);

  // ---- layer-wise get sessions (SGLang's direct linker; distributed_store_session.cc) ----
  // Mooncake's batch_get_session_start: one master call for the batch; each object is read
  // whole into the local buffer (its checksum checked) and held there until the session ends,
  // so the ranged reads that follow need neither the master nor a lease. Per key: 0, or Get's
  // errors (BUFFER_OVERFLOW when the local buffer cannot hold it). A key already in a session
  // is read again.
  std::vector<int> BatchGetSessionStart(const std::vector<std::string>& keys);
  // For key i, copies the object's bytes [src_offsets[i][j], +sizes[i][j]) to ptrs[i][j]
  // (registered memory). Per key: the bytes copied, or INVALID_PARAMS (no session for the key,
  // lists of different lengths, a range past the object's end), BUFFER_NOT_REGISTERED. Nothing
  // is copied for a key that fails.
  std::vector<int64_t> BatchGetIntoMultiBufferRanges(
      const std::vector<std::string>& keys, const std::vector<std::vector<uintptr_t>>& ptrs,
      const std::vector<std::vector<uint64_t>>& sizes,
      const std::vector<std::vector<uint64_t>>& src_offsets);
  // Ends the sessions of `keys` (their local-buffer space is freed); 0.
  int BatchGetSessionEnd(const std::vector<std::string>& keys);

  // ---- tensors (docs/python.md, "Tensor objects") ----
  int PutTensor(const std::string& key, const TensorView& tensor,
                const StoreReplicateConfig& config = {});
  std::vector<int> BatchPutTensor(const std::vector<std::string>& keys,
                                  const std::vector<TensorView>& tensors,
                                  const StoreReplicateConfig& config = {});
  int UpsertTensor(const std::string& key, const TensorView& tensor,
                   const StoreReplicateConfig& config = {});
  std::vector<int> BatchUpsertTensor(const std::vector<std::string>& keys,
                                     const std::vector<TensorView>& tensors,
                                     const StoreReplicateConfig& config = {});
  Result<StoredTensor> GetTensor(const std::string& key);
  std::vector<Result<StoredTensor>> BatchGetTensor(const std::vector<std::string>& keys);
  // Reads the tensor object (header + payload) into the registered buffer [ptr, ptr+capacity);
  // the payload is at ptr + kTensorHeaderBytes. Nothing is written when it does not fit.
  Result<TensorInfo> GetTensorInto(const std::string& key, uintptr_t ptr, uint64_t capacity);
  std::vector<Result<TensorInfo>> BatchGetTensorInto(const std::vector<std::string>& keys,
                                                     const std::vector<uintptr_t>& ptrs,
                                                     const std::vector<uint64_t>& capacities);
  // Reads the tensor's payload into `dst` (a contiguous tensor of the same dtype and shape):
  // payload bytes, or INVALID_PARAMS (dtype, shape or size differ: nothing written).
  int64_t GetTensorIntoTensor(const std::string& key, const TensorInfo& dst_info, uintptr_t dst,
                              uint64_t dst_bytes);
  // A tensor object already laid out (header + payload) in registered memory.
  int PutTensorFrom(const std::string& key, uintptr_t ptr, uint64_t size,
                    const StoreReplicateConfig& config = {});
  // PutTensorFrom with Upsert's semantics.
  int UpsertTensorFrom(const std::string& key, uintptr_t ptr, uint64_t size,
                       const StoreReplicateConfig& config = {});
  // Splits `tensor` along split_dim into tp_size shards (the dimension must divide evenly),
  // each stored as its own tensor object under "<key>_tp_<rank>" (tp_size 1: `key` itself).
  // 0, or the first failing shard's code.
  int PutTensorWithTp(const std::string& key, const TensorView& tensor, int tp_size, int split_dim,
                      const StoreReplicateConfig& config = {});
  // The key get_tensor_with_tp reads: "<key>_tp_<rank>" when tp_size > 1.
  static std::string TpKey(const std::string& key, int tp_rank, int tp_size);

 private:
  // Registered range containing [ptr, ptr+size): (start, size) of the registration.
  std::optional<std::pair<uintptr_t, uint64_t>> RegisteredRange(uintptr_t ptr, uint64_t size) const;
  void SetError(const std::string& message) const;
  // The bytes calls: put/upsert of one key's parts, and of a batch (per-key values; the first
  // failure's code). `call` names the Python call in errors.
  int WriteParts(const char* call, const std::string& key,
                 const std::vector<std::span<const uint8_t>>& parts,
                 const StoreReplicateConfig& config, bool upsert);
  int WriteBatch(const char* call, const std::vector<std::string>& keys,
                 const std::vector<std::span<const uint8_t>>& values,
                 const StoreReplicateConfig& config, bool upsert);
  // The multi-buffer puts and upserts over registered memory (`call` names the Python call).
  std::vector<int> WriteFromBuffers(const char* call, const std::vector<std::string>& keys,
                                    const std::vector<std::vector<uintptr_t>>& ptrs,
                                    const std::vector<std::vector<uint64_t>>& sizes,
                                    const StoreReplicateConfig& config, bool upsert);
  std::vector<int> BatchPutTensorImpl(const std::vector<std::string>& keys,
                                      const std::vector<TensorView>& tensors,
                                      const StoreReplicateConfig& config, bool upsert);

  mutable std::shared_mutex mu_;        // exclusive: Setup/Close; shared: every other call
  std::shared_ptr<Client> client_;      // guarded by mu_
  std::shared_ptr<LocalBuffer> local_;  // guarded by mu_
  std::string hostname_;                // guarded by mu_
  mutable std::mutex error_mu_;
  mutable std::string last_error_;  // guarded by error_mu_
  mutable std::mutex reg_mu_;
  std::map<uintptr_t, uint64_t> registered_;  // start -> size, guarded by reg_mu_
  std::mutex session_mu_;
  std::map<std::string, std::shared_ptr<const BufferHandle>> sessions_;  // guarded by session_mu_
  mutable std::mutex pool_mu_;
  uint64_t pool_limit_ = 0;                       // guarded by pool_mu_; 0 = no limit
  uint64_t pool_used_ = 0;                        // guarded by pool_mu_
  std::vector<std::pair<void*, uint64_t>> pool_;  // mappings, guarded by pool_mu_
};

// Mooncake's name for the same class.
using MooncakeDistributedStore = DistributedStore;

}  // namespace tierkv
