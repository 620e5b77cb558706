// The tierkv client: put and get KV-cache objects in the shared pool.
//
// Results per key follow Mooncake's store API: >= 0 is success (bytes read for
// gets, 0 for puts/removes), a negative value is an ErrorCode. One bad key never
// fails its neighbours. All methods are thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tierkv/config.h"
#include "tierkv/status.h"
#include "tierkv/types.h"

namespace tierkv {

class Client {
 public:
  // Builds a client for `config`. Embedded mode without master_server_address
  // starts an in-process master and mounts this process's segment.
  // Fails with INVALID_CONFIG, UNAVAILABLE_IN_CURRENT_MODE (a remote master,
  // standalone-store or enable_offload: not in this build yet) or
  // INTERNAL_ERROR (segment memory could not be mapped or pre-faulted).
  static Result<std::unique_ptr<Client>> Create(const Config& config);
  virtual ~Client() = default;

  // Registers [ptr, ptr+size) for zero-copy batch transfers. Overlapping an
  // existing registration -> INVALID_PARAMS. The caller keeps ownership.
  virtual Status RegisterBuffer(void* ptr, size_t size) = 0;
  // Unregisters the buffer registered at exactly `ptr` (else INVALID_PARAMS).
  virtual Status UnregisterBuffer(void* ptr) = 0;

  // Puts one object from any memory (no registration needed). 0 or an error.
  virtual int Put(const std::string& key, const void* data, size_t size,
                  const ReplicateConfig& config = {}) = 0;
  // Reads one object into [buf, buf+capacity). Bytes read, or an error;
  // BUFFER_OVERFLOW when capacity < object size (nothing is written then).
  virtual int64_t Get(const std::string& key, void* buf, size_t capacity) = 0;

  // Object i is the concatenation of buffers ptrs[i][j] of sizes[i][j].
  // Per key: 0, or an error (OBJECT_ALREADY_EXISTS means someone else put it).
  virtual std::vector<int> BatchPutFromMultiBuffers(const std::vector<std::string>& keys,
                                                    const std::vector<std::vector<void*>>& ptrs,
                                                    const std::vector<std::vector<size_t>>& sizes,
                                                    const ReplicateConfig& config = {}) = 0;
  // Object i is scattered over ptrs[i][j]; the sizes must add up to the object
  // size exactly (smaller: BUFFER_OVERFLOW, larger: INVALID_PARAMS).
  // Per key: bytes read, or an error.
  virtual std::vector<int64_t> BatchGetIntoMultiBuffers(
      const std::vector<std::string>& keys, const std::vector<std::vector<void*>>& ptrs,
      const std::vector<std::vector<size_t>>& sizes) = 0;

  // Per key: 1 exists (readable), 0 does not, or an error. Grants a read lease.
  virtual std::vector<int> BatchIsExist(const std::vector<std::string>& keys) = 0;
  // Per key: where its replicas are (tier, segment), or an error. Grants a lease.
  virtual std::vector<Result<std::vector<ReplicaDesc>>> BatchGetReplicaDesc(
      const std::vector<std::string>& keys) = 0;

  // Removes one object. OBJECT_HAS_LEASE while leased unless `force`.
  virtual int Remove(const std::string& key, bool force = false) = 0;
  // Removes every complete object (leased ones only with `force`); the count.
  virtual int64_t RemoveAll(bool force = false) = 0;
};

}  // namespace tierkv
