#include "client/remote_backend.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <map>
#include <type_traits>

#include "transport/ucx_segment_client.h"

namespace tierkv {
namespace {

constexpr auto kRefreshInterval = std::chrono::milliseconds(100);
constexpr auto kMapTimeout = std::chrono::milliseconds(5000);

// A segment of another process on this host, mapped through the shm transport.
class MappedAccess final : public SegmentAccess {
 public:
  explicit MappedAccess(std::shared_ptr<transport::MappedSegment> m) : m_(std::move(m)) {}
  uint8_t* base() const override { return m_->base(); }
  uint64_t size() const override { return m_->size(); }
  const std::string& name() const override { return m_->name(); }
  bool alive() const override { return m_->alive(); }
  Transport transport() const override { return Transport::kShm; }

 private:
  const std::shared_ptr<transport::MappedSegment> m_;
};

// A segment of another process reached through the UCX transport: no mapping here.
class UcxAccess final : public SegmentAccess {
 public:
  UcxAccess(std::unique_ptr<transport::UcxSegmentClient> c, Transport t)
      : c_(std::move(c)), transport_(t) {}
  uint8_t* base() const override { return nullptr; }
  bool mapped() const override { return false; }
  uint64_t size() const override { return c_->size(); }
  const std::string& name() const override { return c_->segment_name(); }
  bool alive() const override { return c_->alive(); }
  Transport transport() const override { return transport_; }
  transport::UcxSegmentClient& client() const { return *c_; }

 private:
  const std::unique_ptr<transport::UcxSegmentClient> c_;
  const Transport transport_;
};

std::string ThisHost() {
  char buf[256] = {};
  return gethostname(buf, sizeof(buf) - 1) == 0 ? std::string(buf) : std::string("localhost");
}

}  // namespace

std::string SegmentEndpointName(const std::string& name, const std::string& socket_path,
                                const std::string& tcp_address) {
  return name + "@" + socket_path + (tcp_address.empty() ? "" : "#" + tcp_address);
}

void SplitSegmentEndpoint(const std::string& mounted, std::string* name, std::string* socket_path,
                          std::string* tcp_address) {
  const size_t at = mounted.find('@');
  *name = at == std::string::npos ? mounted : mounted.substr(0, at);
  const std::string rest = at == std::string::npos ? std::string() : mounted.substr(at + 1);
  const size_t hash = rest.find('#');
  *socket_path = rest.substr(0, hash);
  if (tcp_address != nullptr) {
    *tcp_address = hash == std::string::npos ? std::string() : rest.substr(hash + 1);
  }
}

std::string SegmentHost(const std::string& name) { return name.substr(0, name.find(':')); }

Result<std::shared_ptr<RemoteBackend>> RemoteBackend::Connect(
    const std::string& address, Millis timeout, const std::string& host,
    const std::string& protocol, const transport::UcxTransportOptions& ucx) {
  RemoteMasterOptions options;
  options.host = host.empty() ? ThisHost() : host;
  // Every heartbeat reports this client's transfer bytes (the master's metrics sum them).
  auto counters = std::make_shared<TransferCounters>();
  options.transfer_counts = [counters] { return counters->Snapshot(); };
  auto master = RemoteMaster::Connect(address, timeout, options);
  if (!master.ok()) return master.status();
  std::shared_ptr<RemoteBackend> backend(
      new RemoteBackend(std::move(master).value(), options.host, protocol, ucx));
  backend->transfers_ = std::move(counters);
  return backend;
}

Result<SegmentId> RemoteBackend::MountOwn(std::shared_ptr<MemorySegment> segment,
                                          const std::string& mounted_name) {
  // Publish the memory before the master can place replicas on it.
  std::lock_guard lock(mu_);
  auto id = master_->MountSegment(mounted_name, segment->size());
  if (!id.ok()) return id;
  own_.emplace(*id, std::move(segment));
  return id;
}

Status RemoteBackend::UnmountOwn(SegmentId handle) {
  Status st = master_->UnmountSegment(handle);
  std::lock_guard lock(mu_);
  own_.erase(handle);
  return st;
}

void RemoteBackend::RefreshNamesLocked() {
  const auto now = std::chrono::steady_clock::now();
  if (now - last_refresh_ < kRefreshInterval) return;
  last_refresh_ = now;
  auto stats = master_->ProcessStats();
  if (!stats.ok()) {
    spdlog::warn("requester: listing the master's segments failed: {}", stats.status().ToString());
    return;
  }
  names_.clear();         // unmounted segments drop out
  stage_access_.clear();  // reconnected when next needed
  for (const SegmentUsage& s : stats->segment_usage) names_[s.id] = s.name;
  // A cached mapping whose id now names another segment is stale (never write through it).
  for (auto it = mapped_.begin(); it != mapped_.end();) {
    auto name = names_.find(it->first);
    std::string base, path;
    if (name != names_.end()) SplitSegmentEndpoint(name->second, &base, &path);
    if (name == names_.end() || base != it->second->name()) {
      it = mapped_.erase(it);
    } else {
      ++it;
    }
  }
}

void RemoteBackend::ForgetIfReregisteredLocked() {
  // A new registration means a new master incarnation (or an expiry): its segment ids are not
  // the ones cached. Forget them; mappings in use stay valid through their shared_ptrs.
  const uint64_t registrations = master_->registrations();
  if (registrations == seen_registrations_) return;
  seen_registrations_ = registrations;
  names_.clear();
  mapped_.clear();
  stage_access_.clear();
  unreachable_.clear();
  last_refresh_ = {};
}

std::shared_ptr<SegmentAccess> RemoteBackend::FindSegment(SegmentId id) {
  std::lock_guard lock(mu_);
  ForgetIfReregisteredLocked();
  for (const auto& [handle, segment] : own_) {
    if (master_->CurrentSegmentId(handle) == id) return segment;
  }
  if (auto it = mapped_.find(id); it != mapped_.end()) {
    return it->second->alive() ? it->second : nullptr;  // never bytes of a dead owner
  }
  if (unreachable_.count(id) != 0) return nullptr;
  auto name_it = names_.find(id);
  if (name_it == names_.end()) {
    RefreshNamesLocked();
    name_it = names_.find(id);
    if (name_it == names_.end()) return nullptr;  // unmounted meanwhile
  }
  return ConnectLocked(id, name_it->second);
}

std::shared_ptr<SegmentAccess> RemoteBackend::ConnectLocked(SegmentId id,
                                                            const std::string& mounted) {
  std::string name, socket_path, tcp_address;
  SplitSegmentEndpoint(mounted, &name, &socket_path, &tcp_address);
  const bool same_host = !socket_path.empty() && SegmentHost(name) == host_;
  const bool use_shm = protocol_ == "shm" || (protocol_ == "auto" && same_host);
  std::shared_ptr<SegmentAccess> access;
  if (use_shm) {
    if (!same_host) {
      unreachable_.insert(id);
      spdlog::warn(
          "requester on host '{}' with protocol shm: segment {} ('{}') is not served on this "
          "host; its replicas cannot be read here (protocol tcp or auto reaches it)",
          host_, id, mounted);
      return nullptr;
    }
    // Mapped under the lock: a segment is mapped once, the first time it is needed.
    auto mapped = mapper_.Map(socket_path, name, kMapTimeout);
    if (!mapped.ok()) {
      unreachable_.insert(id);
      spdlog::warn("requester: mapping segment {} ('{}') failed: {}", id, name,
                   mapped.status().ToString());
      return nullptr;
    }
    access = std::make_shared<MappedAccess>(std::move(mapped).value());
  } else {
    if (tcp_address.empty()) {
      unreachable_.insert(id);
      spdlog::warn("requester with protocol {}: segment {} ('{}') is not served over the network",
                   protocol_, id, mounted);
      return nullptr;
    }
    auto connected = transport::UcxSegmentClient::Connect(tcp_address, name, kMapTimeout, ucx_);
    if (!connected.ok()) {
      unreachable_.insert(id);
      spdlog::warn("requester: connecting to segment {} ('{}') at {} failed: {}", id, name,
                   tcp_address, connected.status().ToString());
      return nullptr;
    }
    access = std::make_shared<UcxAccess>(std::move(connected).value(),
                                         protocol_ == "rdma" ? Transport::kRdma : Transport::kTcp);
  }
  mapped_.emplace(id, access);
  return access;
}

namespace {

// Runs `ops` (RemoteRead or RemoteWrite) as one batch per UCX segment, so each connection keeps
// many requests in flight; `run(client, batch)` is ReadBatch or WriteBatch.
template <typename Op, typename BatchOp, typename Run>
std::vector<Status> PerSegment(const std::vector<Op>& ops, const Run& run) {
  std::vector<Status> out(ops.size());
  std::map<const UcxAccess*, std::vector<size_t>> by_segment;
  for (size_t i = 0; i < ops.size(); ++i) {
    const auto* ucx = dynamic_cast<const UcxAccess*>(ops[i].segment.get());
    if (ucx == nullptr) {
      out[i] = Status(ErrorCode::TRANSFER_FAIL,
                      "segment " + ops[i].segment->name() + " is not reached through the network");
      continue;
    }
    by_segment[ucx].push_back(i);
  }
  for (const auto& [ucx, list] : by_segment) {
    std::vector<BatchOp> batch;
    batch.reserve(list.size());
    for (size_t i : list) {
      if constexpr (std::is_same_v<Op, RemoteRead>) {
        batch.push_back({ops[i].offset, ops[i].dst});
      } else {
        batch.push_back({ops[i].offset, ops[i].src});
      }
    }
    std::vector<Status> done = run(ucx->client(), batch);
    for (size_t k = 0; k < list.size(); ++k) out[list[k]] = std::move(done[k]);
  }
  return out;
}

}  // namespace

std::vector<Status> RemoteBackend::ReadRemote(const std::vector<RemoteRead>& ops) {
  using Batch = transport::UcxSegmentClient::ReadOp;
  return PerSegment<RemoteRead, Batch>(
      ops,
      [](transport::UcxSegmentClient& c, const std::vector<Batch>& b) { return c.ReadBatch(b); });
}

std::vector<Status> RemoteBackend::WriteRemote(const std::vector<RemoteWrite>& ops) {
  using Batch = transport::UcxSegmentClient::WriteOp;
  return PerSegment<RemoteWrite, Batch>(
      ops,
      [](transport::UcxSegmentClient& c, const std::vector<Batch>& b) { return c.WriteBatch(b); });
}

std::shared_ptr<SsdTier> RemoteBackend::FindTier(SegmentId id) {
  std::lock_guard lock(mu_);
  for (const auto& [handle, tier] : own_tiers_) {
    if (master_->CurrentSegmentId(handle) == id) return tier;
  }
  return nullptr;
}

void RemoteBackend::SetOwnTier(SegmentId handle, std::shared_ptr<SsdTier> tier) {
  std::lock_guard lock(mu_);
  own_tiers_[handle] = std::move(tier);
}

std::shared_ptr<SegmentAccess> RemoteBackend::StageAccessLocked(SegmentId id) {
  if (auto it = mapped_.find(id); it != mapped_.end() && !it->second->mapped()) {
    return it->second->alive() ? it->second : nullptr;
  }
  if (auto it = stage_access_.find(id); it != stage_access_.end()) {
    if (it->second->alive()) return it->second;
    stage_access_.erase(it);  // the owner went; a restarted one has a new endpoint
  }
  auto name_it = names_.find(id);
  if (name_it == names_.end()) {
    RefreshNamesLocked();
    name_it = names_.find(id);
    if (name_it == names_.end()) return nullptr;
  }
  std::string name, socket_path, tcp_address;
  SplitSegmentEndpoint(name_it->second, &name, &socket_path, &tcp_address);
  if (tcp_address.empty()) {
    spdlog::warn(
        "requester: segment {} ('{}') has no network endpoint: its SSD tier cannot be "
        "read from here",
        id, name_it->second);
    return nullptr;
  }
  transport::UcxTransportOptions options = ucx_;
  if (protocol_ == "shm" || protocol_ == "auto") options.protocol = "tcp";
  auto connected = transport::UcxSegmentClient::Connect(tcp_address, name, kMapTimeout, options);
  if (!connected.ok()) {
    spdlog::warn("requester: connecting to segment {} ('{}') at {} for a staged load failed: {}",
                 id, name, tcp_address, connected.status().ToString());
    return nullptr;
  }
  auto access =
      std::make_shared<UcxAccess>(std::move(connected).value(),
                                  options.protocol == "rdma" ? Transport::kRdma : Transport::kTcp);
  stage_access_.emplace(id, access);
  return access;
}

std::vector<Status> RemoteBackend::StageRemote(const std::vector<RemoteStage>& ops,
                                               double usable_ratio) {
  std::vector<Status> out(ops.size());
  std::map<SegmentId, std::vector<size_t>> by_segment;
  for (size_t i = 0; i < ops.size(); ++i) by_segment[ops[i].segment].push_back(i);
  for (const auto& [id, list] : by_segment) {
    std::shared_ptr<SegmentAccess> access;
    {
      std::lock_guard lock(mu_);
      ForgetIfReregisteredLocked();
      access = StageAccessLocked(id);
    }
    const auto* ucx = dynamic_cast<const UcxAccess*>(access.get());
    if (ucx == nullptr) {
      for (size_t i : list) {
        out[i] = Status(ErrorCode::OBJECT_NOT_FOUND,
                        "the SSD tier of segment " + std::to_string(id) + " is not reachable");
      }
      continue;
    }
    std::vector<transport::UcxSegmentClient::StageOp> batch;
    batch.reserve(list.size());
    for (size_t i : list) batch.push_back({ops[i].key, ops[i].location, ops[i].dst});
    std::vector<Status> done = ucx->client().StageBatch(batch, usable_ratio);
    for (size_t k = 0; k < list.size(); ++k) out[list[k]] = std::move(done[k]);
  }
  return out;
}

Transport RemoteBackend::StageTransport(SegmentId id) {
  std::lock_guard lock(mu_);
  for (const auto* m : {&mapped_, &stage_access_}) {
    if (auto it = m->find(id); it != m->end() && !it->second->mapped()) {
      return it->second->transport();
    }
  }
  return protocol_ == "rdma" ? Transport::kRdma : Transport::kTcp;
}

std::string RemoteBackend::SegmentName(SegmentId id) {
  std::lock_guard lock(mu_);
  ForgetIfReregisteredLocked();
  auto it = names_.find(id);
  if (it == names_.end()) {
    RefreshNamesLocked();
    it = names_.find(id);
  }
  return it == names_.end() ? std::string() : it->second;
}

std::vector<Result<PutStartResult>> RemoteBackend::PutStart(const std::vector<std::string>& keys,
                                                            const std::vector<uint64_t>& sizes,
                                                            const ReplicateConfig& config) {
  return master_->PutStart(keys, sizes, config);
}
std::vector<Status> RemoteBackend::PutEnd(const std::vector<std::string>& keys,
                                          const std::vector<uint64_t>& put_ids,
                                          const std::vector<uint64_t>& checksums) {
  return master_->PutEnd(keys, put_ids, checksums);
}
std::vector<Status> RemoteBackend::PutRevoke(const std::vector<std::string>& keys,
                                             const std::vector<uint64_t>& put_ids) {
  return master_->PutRevoke(keys, put_ids);
}
std::vector<int> RemoteBackend::Exists(const std::vector<std::string>& keys) {
  return master_->Exists(keys);
}
std::vector<Result<ObjectReplicas>> RemoteBackend::GetReplicas(
    const std::vector<std::string>& keys) {
  return master_->GetReplicas(keys);
}
std::vector<Result<PutStartResult>> RemoteBackend::PromoteStart(
    const std::vector<std::string>& keys, uint32_t min_hits) {
  return master_->PromoteStart(keys, min_hits);
}
std::vector<Status> RemoteBackend::PromoteEnd(const std::vector<std::string>& keys,
                                              const std::vector<uint64_t>& promotion_ids,
                                              const std::vector<bool>& ok) {
  return master_->PromoteEnd(keys, promotion_ids, ok);
}
Status RemoteBackend::Remove(const std::string& key, bool force) {
  return master_->Remove(key, force);
}
uint64_t RemoteBackend::RemoveAll(bool force) { return master_->RemoveAll(force); }
const Clock* RemoteBackend::clock() const { return SystemClock::Instance(); }

}  // namespace tierkv
