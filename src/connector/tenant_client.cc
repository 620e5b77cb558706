#include "connector/tenant_client.h"

#include "common/key.h"

namespace tierkv {

Result<std::string> TenantKeyPrefix(const std::string& tenant) {
  if (tenant == "default") return std::string();
  if (!IsTenantName(tenant)) {
    return Status(ErrorCode::INVALID_PARAMS,
                  "tenant_id '" + tenant + "': 1 to 64 characters of A-Z a-z 0-9 _ . -");
  }
  return std::string(1, kKeyNamespaceMark) + tenant + std::string(1, kKeyNamespaceMark);
}

std::vector<std::string> TenantClient::Keys(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(prefix_ + k);
  return out;
}

ReplicateConfig TenantClient::Config(const ReplicateConfig& config) const {
  ReplicateConfig out = config;
  for (auto& g : out.group_ids) {
    if (!g.empty()) g = prefix_ + g;
  }
  for (auto& p : out.parent_keys) {
    if (!p.empty()) p = prefix_ + p;
  }
  return out;
}

Status TenantClient::RegisterBuffer(void* ptr, size_t size) {
  return inner_->RegisterBuffer(ptr, size);
}
Status TenantClient::UnregisterBuffer(void* ptr) { return inner_->UnregisterBuffer(ptr); }

int TenantClient::Put(const std::string& key, const void* data, size_t size,
                      const ReplicateConfig& config) {
  return inner_->Put(Key(key), data, size, Config(config));
}
int64_t TenantClient::Get(const std::string& key, void* buf, size_t capacity) {
  return inner_->Get(Key(key), buf, capacity);
}
int TenantClient::Upsert(const std::string& key, const void* data, size_t size,
                         const ReplicateConfig& config) {
  return inner_->Upsert(Key(key), data, size, Config(config));
}
std::vector<int> TenantClient::BatchPutFromMultiBuffers(
    const std::vector<std::string>& keys, const std::vector<std::vector<void*>>& ptrs,
    const std::vector<std::vector<size_t>>& sizes, const ReplicateConfig& config) {
  return inner_->BatchPutFromMultiBuffers(Keys(keys), ptrs, sizes, Config(config));
}
std::vector<int> TenantClient::BatchUpsertFromMultiBuffers(
    const std::vector<std::string>& keys, const std::vector<std::vector<void*>>& ptrs,
    const std::vector<std::vector<size_t>>& sizes, const ReplicateConfig& config) {
  return inner_->BatchUpsertFromMultiBuffers(Keys(keys), ptrs, sizes, Config(config));
}
std::vector<int64_t> TenantClient::BatchGetIntoMultiBuffers(
    const std::vector<std::string>& keys, const std::vector<std::vector<void*>>& ptrs,
    const std::vector<std::vector<size_t>>& sizes) {
  return inner_->BatchGetIntoMultiBuffers(Keys(keys), ptrs, sizes);
}
std::vector<int64_t> TenantClient::BatchGetInto(const std::vector<std::string>& keys,
                                                const std::vector<void*>& bufs,
                                                const std::vector<size_t>& capacities) {
  return inner_->BatchGetInto(Keys(keys), bufs, capacities);
}
std::vector<int64_t> TenantClient::BatchGetAllocated(
    const std::vector<std::string>& keys,
    const std::function<void*(size_t index, uint64_t size)>& allocate) {
  return inner_->BatchGetAllocated(Keys(keys), allocate);
}
std::vector<int> TenantClient::BatchIsExist(const std::vector<std::string>& keys) {
  return inner_->BatchIsExist(Keys(keys));
}
std::vector<Result<std::vector<ReplicaDesc>>> TenantClient::BatchGetReplicaDesc(
    const std::vector<std::string>& keys) {
  return inner_->BatchGetReplicaDesc(Keys(keys));
}
int TenantClient::Remove(const std::string& key, bool force) {
  return inner_->Remove(Key(key), force);
}
int64_t TenantClient::RemoveAll(bool force) {
  return inner_->RemoveInNamespace(prefix_, "", force);
}
std::vector<int> TenantClient::BatchRemove(const std::vector<std::string>& keys, bool force) {
  return inner_->BatchRemove(Keys(keys), force);
}
int64_t TenantClient::RemoveByRegex(const std::string& regex, bool force) {
  return inner_->RemoveInNamespace(prefix_, regex, force);
}
int64_t TenantClient::RemoveInNamespace(const std::string& key_namespace, const std::string& regex,
                                        bool force) {
  // Namespaces nest under the tenant's: a caller never leaves it.
  return inner_->RemoveInNamespace(prefix_ + key_namespace, regex, force);
}
std::vector<int> TenantClient::BatchReplicaClear(const std::vector<std::string>& keys,
                                                 const std::string& segment_name) {
  return inner_->BatchReplicaClear(Keys(keys), segment_name);
}

}  // namespace tierkv
