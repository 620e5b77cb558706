#include "client/client_impl.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <string_view>

#include "client/in_process_backend.h"

namespace tierkv {
namespace {

bool TierLogEnabled() {
  const char* v = std::getenv("TIERKV_TIER_LOG");
  return v != nullptr && std::string_view(v) == "1";
}

}  // namespace

Status ClientImpl::CheckConfig(const Config& config) {
  if (Status st = ValidateConfig(config); !st.ok()) return st;
  if (config.enable_offload && config.mode != Mode::kEmbedded) {
    return Status(ErrorCode::INVALID_CONFIG,
                  "enable_offload needs a segment to put the SSD tier behind: mode 'embedded' (a "
                  "store, or a rank contributing a segment), not a requester that contributes "
                  "none");
  }
  return Status::Ok();
}

Result<std::unique_ptr<ClientImpl>> ClientImpl::CreateEmbedded(
    const Config& config, std::shared_ptr<InProcessMaster> master, StoreOptions store_options) {
  if (Status st = ValidateConfig(config); !st.ok()) return st;
  if (config.mode != Mode::kEmbedded) {
    return Status(ErrorCode::INVALID_CONFIG,
                  "mode 'standalone-store' needs master_server_address (the `tierkv master` "
                  "the stores registered with)");
  }
  if (!master) {
    const MasterOptions options = MasterOptionsFrom(config);
    master = std::make_shared<InProcessMaster>(options, MaintenancePeriod(options));
  }
  auto client =
      Create(config, std::make_shared<InProcessBackend>(master), std::move(store_options));
  if (!client.ok()) return client.status();
  (*client)->in_process_ = std::move(master);
  return client;
}

Result<std::unique_ptr<ClientImpl>> ClientImpl::Create(const Config& config,
                                                       std::shared_ptr<ClientBackend> backend,
                                                       StoreOptions store_options) {
  if (Status st = CheckConfig(config); !st.ok()) return st;
  if (!backend) return Status(ErrorCode::INVALID_PARAMS, "ClientImpl::Create: no backend");
  std::unique_ptr<ClientImpl> client(new ClientImpl(config, backend));
  if (config.mode == Mode::kEmbedded) {
    auto store = Store::Create(config, backend, std::move(store_options));
    if (!store.ok()) return store.status();
    client->store_ = std::move(store).value();
    spdlog::info("client: segment {} of {} bytes ({} pages), {} transfer threads",
                 client->store_->mounted_name(), client->store_->segment()->size(),
                 client->store_->segment()->page_kind(), client->pool_.threads());
  } else {
    spdlog::info("requester (contributes no segment), {} transfer threads",
                 client->pool_.threads());
  }
  return client;
}

ClientImpl::ClientImpl(Config config, std::shared_ptr<ClientBackend> backend)
    : config_(std::move(config)),
      backend_(std::move(backend)),
      master_(backend_->master()),
      pool_(DefaultTransferThreads(config_.transfer_threads)),
      loader_(config_.staging_usable_ratio, &pool_),
      tier_log_(TierLogEnabled()) {}

ClientImpl::~ClientImpl() {
  store_.reset();  // unmounts while the backend (and an in-process master) still stand
}

const std::string& ClientImpl::mounted_segment_name() const {
  static const std::string kNone;
  return store_ ? store_->mounted_name() : kNone;
}

Status ClientImpl::RegisterBuffer(void* ptr, size_t size) { return buffers_.Register(ptr, size); }
Status ClientImpl::UnregisterBuffer(void* ptr) { return buffers_.Unregister(ptr); }

std::vector<int> ClientImpl::BatchIsExist(const std::vector<std::string>& keys) {
  return master_.Exists(keys);
}

std::vector<int> ClientImpl::BatchIsExistViews(std::span<const std::string_view> keys) {
  return master_.ExistsViews(keys);
}

std::vector<Result<std::vector<ReplicaDesc>>> ClientImpl::BatchGetReplicaDesc(
    const std::vector<std::string>& keys) {
  auto replicas = master_.GetReplicas(keys);
  std::vector<Result<std::vector<ReplicaDesc>>> out;
  out.reserve(keys.size());
  for (auto& r : replicas) {
    if (!r.ok()) {
      out.emplace_back(r.status());
      continue;
    }
    std::vector<ReplicaDesc> descs;
    for (const auto& loc : r->replicas) {
      std::string name = backend_->SegmentName(loc.segment);
      const bool disk = loc.tier == ReplicaTier::kDisk;
      descs.push_back(ReplicaDesc{loc.tier, name.empty() ? std::string("<unmounted>") : name,
                                  disk ? loc.disk.offset : loc.offset, r->size,
                                  disk ? loc.disk.region : 0});
    }
    out.emplace_back(std::move(descs));
  }
  return out;
}

int ClientImpl::Remove(const std::string& key, bool force) {
  return ToInt(master_.Remove(key, force).code());
}

int64_t ClientImpl::RemoveAll(bool force) { return static_cast<int64_t>(master_.RemoveAll(force)); }

std::vector<int> ClientImpl::BatchRemove(const std::vector<std::string>& keys, bool force) {
  std::vector<int> out;
  out.reserve(keys.size());
  for (const Status& st : master_.BatchRemove(keys, force)) out.push_back(ToInt(st.code()));
  return out;
}

std::vector<int> ClientImpl::BatchReplicaClear(const std::vector<std::string>& keys,
                                               const std::string& segment_name) {
  std::vector<int> out;
  out.reserve(keys.size());
  for (const Status& st : master_.ClearReplicas(keys, segment_name))
    out.push_back(ToInt(st.code()));
  return out;
}

namespace {
// The count removed, or the error's code (logged): RemoveByRegex and RemoveInNamespace.
int64_t RemovedOrCode(const Result<uint64_t>& removed) {
  if (!removed.ok()) {
    spdlog::warn("remove_by_regex: {}", removed.status().ToString());
    return ToInt(removed.code());
  }
  return static_cast<int64_t>(*removed);
}
}  // namespace

int64_t ClientImpl::RemoveInNamespace(const std::string& key_namespace, const std::string& regex,
                                      bool force) {
  return RemovedOrCode(master_.RemoveInNamespace(key_namespace, regex, force));
}

int64_t ClientImpl::RemoveByRegex(const std::string& regex, bool force) {
  return RemovedOrCode(master_.RemoveByRegex(regex, force));
}

}  // namespace tierkv
