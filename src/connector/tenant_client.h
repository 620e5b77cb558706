// TenantClient: a Client whose keys live in one tenant's namespace of the pool — every key (and
// group id and parent key) it is given is stored as kKeyNamespaceMark + tenant +
// kKeyNamespaceMark + key, and RemoveAll / RemoveByRegex reach only that namespace. What
// DistributedStore's tenant_id (Mooncake's setup argument) builds on. A namespace, not access
// control: who may claim a tenant comes with authentication (docs/security.md).
// Thread-safety: as the wrapped client's.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tierkv/client.h"

namespace tierkv {

// The key prefix of `tenant` ("" for "default", whose keys are stored as given). INVALID_PARAMS
// unless the name is 1..64 characters of [A-Za-z0-9_.-].
Result<std::string> TenantKeyPrefix(const std::string& tenant);

class TenantClient final : public Client {
 public:
  TenantClient(std::shared_ptr<Client> inner, std::string prefix)
      : inner_(std::move(inner)), prefix_(std::move(prefix)) {}

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
  std::string LocalSegmentName() const override { return inner_->LocalSegmentName(); }
  ClientHealth HealthCheck() override { return inner_->HealthCheck(); }

 private:
  std::string Key(const std::string& key) const { return prefix_ + key; }
  std::vector<std::string> Keys(const std::vector<std::string>& keys) const;
  ReplicateConfig Config(const ReplicateConfig& config) const;

  const std::shared_ptr<Client> inner_;
  const std::string prefix_;
};

}  // namespace tierkv
