// The tierkv client: put and get KV-cache objects in the shared pool.
//
// Results per key follow Mooncake's store API: >= 0 is success (bytes read for
// gets, 0 for puts/removes), a negative value is an ErrorCode (docs/errors.md). One bad key
// never fails its neighbours. All methods are thread-safe and may be called concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tierkv/config.h"
#include "tierkv/status.h"
#include "tierkv/types.h"

namespace tierkv {

// What Client::HealthCheck reports: how the client stands with its master right now.
struct ClientHealth {
  // The master answers and, when the client contributes a segment, the segment is linked to it
  // (its index stream is up: puts may be placed on it and a new master can recover it).
  bool healthy = true;
  bool master_connected = true;  // the last heartbeat was answered (always, in-process)
  bool segment_linked = true;    // true too when the client contributes no segment
  std::string master;            // the master talked to now (the leader, with etcd); "" in-process
  uint64_t leader_epoch = 0;     // of that leader, with etcd; else 0
  uint64_t registrations = 0;    // 1 + times the client registered again (restarts, failovers)
  uint64_t leader_changes = 0;   // times it followed a new leader (etcd)
  std::string message;           // what is wrong, when not healthy
};

class Client {
 public:
  // Builds a client for `config`: embedded mode without master_server_address starts an
  // in-process master; with it (both modes) the client registers with that `tierkv master`.
  // Mode embedded contributes a segment of global_segment_size (and, with enable_offload, the
  // SSD tier behind it); standalone-store contributes nothing. Fails with INVALID_CONFIG (a
  // rejected config, the message names the key), UNAVAILABLE_IN_CURRENT_MODE (a remote master
  // in a program linked with tierkv::embedded; protocol rdma without verbs devices; a
  // device_name this host lacks), RPC_FAIL (no master answered within 5 s, or it did not take
  // the SSD tier's stream), INTERNAL_ERROR (segment memory could not be mapped or pre-faulted),
  // FILE_OPEN_FAIL (a tier file could not be created or reopened), TRANSFER_FAIL (the segment
  // could not be served on the network). Thread-safe.
  static Result<std::unique_ptr<Client>> Create(const Config& config);
  // Unmounts the contributed segment (its replicas are dropped) and stops what the client
  // started. No call may be in progress.
  virtual ~Client() = default;

  // Registers [ptr, ptr+size) for zero-copy batch transfers. INVALID_PARAMS for a null pointer,
  // size 0 or an overlap with an existing registration. The caller keeps ownership and keeps
  // the memory valid until UnregisterBuffer.
  virtual Status RegisterBuffer(void* ptr, size_t size) = 0;
  // Unregisters the buffer registered at exactly `ptr` (else INVALID_PARAMS).
  virtual Status UnregisterBuffer(void* ptr) = 0;

  // Puts one object from any memory (no registration needed); `data` is only read during the
  // call. 0, or an error: INVALID_KEY, INVALID_PARAMS (size 0, null data, group_ids not one per
  // key), OBJECT_ALREADY_EXISTS (the first writer won: treat as success), OBJECT_TOO_LARGE,
  // NO_AVAILABLE_HANDLE (no space even after eviction), TRANSFER_FAIL (a replica's owner died or
  // could not be reached: nothing was stored), OBJECT_NOT_FOUND / INVALID_WRITE (the pending
  // put was reclaimed after put_start_discard_timeout_ms), RPC_FAIL (remote master).
  virtual int Put(const std::string& key, const void* data, size_t size,
                  const ReplicateConfig& config = {}) = 0;
  // Reads one object into [buf, buf+capacity). Bytes read, or an error: INVALID_KEY,
  // INVALID_PARAMS (null buf), OBJECT_NOT_FOUND, REPLICA_IS_NOT_READY (its put has not ended),
  // BUFFER_OVERFLOW (capacity < object size; nothing is written), and the transfer errors:
  // TRANSFER_FAIL, CHECKSUM_MISMATCH, LEASE_EXPIRED (the read outlived its lease), the SSD
  // tier's FILE_READ_FAIL, RPC_FAIL. On a transfer error the object's bytes in buf are zeroed,
  // never left wrong.
  virtual int64_t Get(const std::string& key, void* buf, size_t capacity) = 0;

  // Like Put, but a key that exists gets a new version instead of OBJECT_ALREADY_EXISTS. The
  // new version is published atomically when its bytes are in: a reader sees the old bytes or
  // the new ones, never a mix; a reader that already holds a lease on the old version finishes
  // reading it, and the old version's space is freed when the last such lease ends. Errors as
  // Put, plus REPLICA_IS_NOT_READY while another put or upsert of the key is in progress, and
  // INVALID_PARAMS when config.group_ids names another group than the object's.
  virtual int Upsert(const std::string& key, const void* data, size_t size,
                     const ReplicateConfig& config = {}) = 0;

  // Object i is the concatenation of buffers ptrs[i][j] of sizes[i][j] (registered ones unless
  // require_registered_buffers is false). Per key: 0, or Put's errors, and DUPLICATE_KEY (the
  // key appears earlier in the batch), BUFFER_NOT_REGISTERED, INVALID_PARAMS (ptrs[i] and
  // sizes[i] missing or of different lengths).
  virtual std::vector<int> BatchPutFromMultiBuffers(const std::vector<std::string>& keys,
                                                    const std::vector<std::vector<void*>>& ptrs,
                                                    const std::vector<std::vector<size_t>>& sizes,
                                                    const ReplicateConfig& config = {}) = 0;
  // BatchPutFromMultiBuffers with Upsert's semantics per key.
  virtual std::vector<int> BatchUpsertFromMultiBuffers(
      const std::vector<std::string>& keys, const std::vector<std::vector<void*>>& ptrs,
      const std::vector<std::vector<size_t>>& sizes, const ReplicateConfig& config = {}) = 0;
  // Object i is scattered over ptrs[i][j]; the sizes must add up to the object size exactly
  // (smaller: BUFFER_OVERFLOW, larger: INVALID_PARAMS). Per key: bytes read, or Get's errors,
  // DUPLICATE_KEY and BUFFER_NOT_REGISTERED.
  virtual std::vector<int64_t> BatchGetIntoMultiBuffers(
      const std::vector<std::string>& keys, const std::vector<std::vector<void*>>& ptrs,
      const std::vector<std::vector<size_t>>& sizes) = 0;

  // Object i is read into [bufs[i], bufs[i]+capacities[i]) (registered memory, as for the
  // multi-buffer calls); a larger buffer is fine. Per key: bytes read, or Get's errors,
  // DUPLICATE_KEY and BUFFER_NOT_REGISTERED (BUFFER_OVERFLOW when the capacity is smaller than
  // the object: nothing is written). Lists shorter than `keys` fail the keys they miss with
  // INVALID_PARAMS.
  virtual std::vector<int64_t> BatchGetInto(const std::vector<std::string>& keys,
                                            const std::vector<void*>& bufs,
                                            const std::vector<size_t>& capacities) = 0;
  // Reads objects whose sizes the caller does not know: once key i is looked up, the client
  // calls allocate(i, size) — on the calling thread, before any byte is copied — for a
  // destination of exactly `size` bytes (memory the caller vouches for; it need not be
  // registered), or nullptr to fail the key with BUFFER_OVERFLOW. One master call for the
  // batch, so the size a destination is given is the size of the version read. Per key: bytes
  // read, or Get's errors (allocate is not called for keys that fail before).
  virtual std::vector<int64_t> BatchGetAllocated(
      const std::vector<std::string>& keys,
      const std::function<void*(size_t index, uint64_t size)>& allocate) = 0;

  // Per key: 1 exists (readable), 0 does not (absent, or its put has not ended), or
  // INVALID_KEY / RPC_FAIL. Grants a read lease on what exists.
  virtual std::vector<int> BatchIsExist(const std::vector<std::string>& keys) = 0;
  // BatchIsExist over borrowed key bytes (valid for the call), with the same answers; an
  // embedded client looks them up without copying them. This default copies the keys.
  virtual std::vector<int> BatchIsExistViews(std::span<const std::string_view> keys) {
    return BatchIsExist(std::vector<std::string>(keys.begin(), keys.end()));
  }
  // Per key: where its replicas are (tier, segment, offset), or INVALID_KEY, OBJECT_NOT_FOUND,
  // REPLICA_IS_NOT_READY, RPC_FAIL. Grants a read lease.
  virtual std::vector<Result<std::vector<ReplicaDesc>>> BatchGetReplicaDesc(
      const std::vector<std::string>& keys) = 0;

  // Removes one object. 0, or INVALID_KEY, OBJECT_NOT_FOUND, OBJECT_HAS_LEASE (leased, unless
  // `force`), REPLICA_IS_NOT_READY (its put has not ended), RPC_FAIL.
  virtual int Remove(const std::string& key, bool force = false) = 0;
  // Removes every complete object (leased ones only with `force`); the count removed (0 when a
  // remote master could not be reached; logged).
  virtual int64_t RemoveAll(bool force = false) = 0;
  // Remove per key, in one master call.
  virtual std::vector<int> BatchRemove(const std::vector<std::string>& keys,
                                       bool force = false) = 0;
  // Removes the complete objects whose key `regex` matches somewhere in (RE2 syntax, as
  // Mooncake's regex_search: anchor with ^ and $; leased ones only with `force`): the count, or
  // INVALID_PARAMS for a bad expression (RPC_FAIL when the master does not answer).
  virtual int64_t RemoveByRegex(const std::string& regex, bool force = false) = 0;
  // RemoveByRegex within one key namespace (a tenant's key prefix, kKeyNamespaceMark + tenant +
  // kKeyNamespaceMark; "" = keys outside every namespace), `regex` ("" = any) matched against
  // the rest of the key.
  virtual int64_t RemoveInNamespace(const std::string& key_namespace, const std::string& regex,
                                    bool force = false) = 0;
  // Mooncake's batch_replica_clear, per key in one master call: 0 when cleared — the object
  // removed (`segment_name` empty) or its memory replicas on that segment dropped (the object
  // goes with its last replica) — else INVALID_KEY, OBJECT_NOT_FOUND, OBJECT_HAS_LEASE (a
  // reader holds a lease: never forced), REPLICA_IS_NOT_READY, SEGMENT_NOT_FOUND (no memory
  // replica there), RPC_FAIL.
  virtual std::vector<int> BatchReplicaClear(const std::vector<std::string>& keys,
                                             const std::string& segment_name = "") = 0;

  // The name this client's own segment is mounted under ("" when it contributes none), as
  // ReplicaDesc::segment_name reports it.
  virtual std::string LocalSegmentName() const = 0;

  // How the client stands with its master (no RPC: what its heartbeat and streams last saw).
  // While a master restarts or a standby takes over, master_connected turns false within a
  // heartbeat; calls meanwhile either ride through (BatchIsExist, BatchGetReplicaDesc and the
  // metadata part of gets are retried on the new master within the RPC timeout) or fail with
  // RPC_FAIL (puts), never waiting longer than that timeout. Thread-safe.
  virtual ClientHealth HealthCheck() = 0;
};

}  // namespace tierkv
