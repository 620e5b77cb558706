// DistributedStore: queries, removal and replica descriptors (include/tierkv/distributed_store.h).
#include <spdlog/spdlog.h>

#include "connector/distributed_store_internal.h"

namespace tierkv {

using dstore::Code;
using dstore::kOk;

// ---- query and removal --------------------------------------------------------------------

int DistributedStore::IsExist(const std::string& key) { return BatchIsExist({key})[0]; }

std::vector<int> DistributedStore::BatchIsExist(const std::vector<std::string>& keys) {
  TIERKV_REQUIRE_CLIENT("batch_is_exist",
                        std::vector<int>(keys.size(), Code(ErrorCode::INVALID_PARAMS)));
  return client_->BatchIsExist(keys);
}

std::vector<int> DistributedStore::BatchIsExistViews(std::span<const std::string_view> keys) {
  TIERKV_REQUIRE_CLIENT("batch_is_exist",
                        std::vector<int>(keys.size(), Code(ErrorCode::INVALID_PARAMS)));
  return client_->BatchIsExistViews(keys);
}

int64_t DistributedStore::GetSize(const std::string& key) {
  TIERKV_REQUIRE_CLIENT("get_size", Code(ErrorCode::INVALID_PARAMS));
  auto descs = client_->BatchGetReplicaDesc({key});
  if (!descs[0].ok()) return Code(descs[0].code());
  if (descs[0]->empty()) return Code(ErrorCode::OBJECT_NOT_FOUND);
  return static_cast<int64_t>((*descs[0])[0].size);
}

int DistributedStore::Remove(const std::string& key, bool force) {
  TIERKV_REQUIRE_CLIENT("remove", Code(ErrorCode::INVALID_PARAMS));
  return client_->Remove(key, force);
}

std::vector<int> DistributedStore::BatchRemove(const std::vector<std::string>& keys, bool force) {
  TIERKV_REQUIRE_CLIENT("batch_remove",
                        std::vector<int>(keys.size(), Code(ErrorCode::INVALID_PARAMS)));
  return client_->BatchRemove(keys, force);
}

int64_t DistributedStore::RemoveByRegex(const std::string& regex, bool force) {
  TIERKV_REQUIRE_CLIENT("remove_by_regex", Code(ErrorCode::INVALID_PARAMS));
  // Only this store's tenant: the default tenant's calls never reach another tenant's keys.
  // (A TenantClient's "" namespace is its tenant's.)
  return client_->RemoveInNamespace("", regex, force);
}

std::vector<int> DistributedStore::BatchReplicaClear(const std::vector<std::string>& keys,
                                                     const std::string& segment_name) {
  TIERKV_REQUIRE_CLIENT("batch_replica_clear",
                        std::vector<int>(keys.size(), Code(ErrorCode::INVALID_PARAMS)));
  return client_->BatchReplicaClear(keys, segment_name);
}

int64_t DistributedStore::RemoveAll(bool force) {
  TIERKV_REQUIRE_CLIENT("remove_all", Code(ErrorCode::INVALID_PARAMS));
  return client_->RemoveInNamespace("", "", force);  // this store's tenant only
}

std::vector<Result<std::vector<StoreReplica>>> DistributedStore::BatchGetReplicaDesc(
    const std::vector<std::string>& keys) {
  using Out = std::vector<Result<std::vector<StoreReplica>>>;
  TIERKV_REQUIRE_CLIENT("batch_get_replica_desc",
                        Out(keys.size(), Status(ErrorCode::INVALID_PARAMS, "store not set up")));
  const std::string own = client_->LocalSegmentName();
  Out out;
  for (auto& r : client_->BatchGetReplicaDesc(keys)) {
    if (!r.ok()) {
      out.emplace_back(r.status());
      continue;
    }
    std::vector<StoreReplica> replicas;
    for (const ReplicaDesc& d : *r) {
      replicas.push_back(StoreReplica{d.tier, !own.empty() && d.segment_name == own, d.segment_name,
                                      d.offset, d.size, d.region});
    }
    out.emplace_back(std::move(replicas));
  }
  return out;
}

}  // namespace tierkv
