#include "rpc/remote_backend.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <map>
#include <thread>
#include <type_traits>
#include <utility>

#include "common/host_name.h"
#include "transport/network_segment.h"
#include "transport/segment_endpoint.h"

namespace tierkv {
namespace {

constexpr auto kRefreshInterval = std::chrono::milliseconds(100);
constexpr auto kMapTimeout = std::chrono::milliseconds(5000);
// A network connect (handshake included). A store behind a partition drops the SYN silently:
// this bounds how long a get waits there before it moves on to another replica, and how long
// the thread connecting holds connect_mu_.
constexpr auto kNetworkConnectTimeout = std::chrono::milliseconds(2000);
// How long a segment found unreachable is skipped (puts placed elsewhere, gets to the next
// replica) before connecting to it is tried again.
constexpr auto kUnreachableRetry = std::chrono::milliseconds(5000);

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

// A segment of another process reached through the network transport (tcp or rdma): no mapping.
class UcxAccess final : public SegmentAccess {
 public:
  UcxAccess(std::unique_ptr<transport::NetworkSegmentClient> c, Transport t)
      : c_(std::move(c)), transport_(t) {}
  uint8_t* base() const override { return nullptr; }
  bool mapped() const override { return false; }
  uint64_t size() const override { return c_->size(); }
  const std::string& name() const override { return c_->segment_name(); }
  bool alive() const override { return c_->alive(); }
  Transport transport() const override { return transport_; }
  transport::NetworkSegmentClient& client() const { return *c_; }

 private:
  const std::unique_ptr<transport::NetworkSegmentClient> c_;
  const Transport transport_;
};

}  // namespace

Result<std::shared_ptr<RemoteBackend>> RemoteBackend::Connect(
    const std::string& address, Millis timeout, const std::string& host,
    const std::string& protocol, const transport::UcxTransportOptions& ucx,
    ControlPlaneSecurity security, bool meta_channel) {
  RemoteMasterOptions options;
  options.meta_channel = meta_channel;
  options.security = std::move(security);
  options.host = HostName(host);
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

RemoteBackend::~RemoteBackend() {
  std::map<SegmentId, std::unique_ptr<SegmentLink>> links;
  {
    std::lock_guard lock(mu_);
    links.swap(links_);
  }
  links.clear();  // their streams close before the master connection goes
}

Result<SegmentId> RemoteBackend::MountOwn(std::shared_ptr<MemorySegment> segment,
                                          const std::string& mounted_name, OwnTier tier) {
  auto access = std::make_shared<LocalSegmentAccess>(segment);
  SegmentIndex::DiskHolds holds;
  if (tier.tier) {
    holds = [t = tier.tier](const DiskLocation& location) { return t->Holds(location); };
  }
  auto index = std::make_shared<SegmentIndex>(segment, std::move(holds));
  SegmentLinkOptions link_options;
  link_options.mover = tier.mover;
  link_options.write_behind = tier.write_behind;
  link_options.index = index;
  MountOptions mount;
  mount.index_stream = true;
  mount.has_tier = tier.tier != nullptr;
  mount.tenant = segment_tenant_;
  SegmentId handle = 0;
  {
    // Publish the memory before the master can place replicas on it: under mu_, so a lookup of
    // the new id finds it once the master can hand the id out.
    std::lock_guard lock(mu_);
    link_options.test = test_hooks_;
    auto id = master_->MountSegment(mounted_name, access->size(), mount);
    if (!id.ok()) return id;
    handle = *id;
    own_.emplace(handle, std::move(access));
    if (tier.tier) own_tiers_[handle] = tier.tier;
    indexes_[handle] = index;
  }
  // The segment's stream: the master holds the segment out of placement until it linked the
  // index (and attached the tier) through it. With write_behind the master copies every put on
  // this segment to the tier soon after its PutEnd (the puts come from other processes: only the
  // master sees them all).
  auto link = std::make_unique<SegmentLink>(*master_, handle, std::move(link_options));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!link->connected() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (!link->connected()) {
    link.reset();
    (void)master_->UnmountSegment(handle);
    std::lock_guard lock(mu_);
    own_.erase(handle);
    own_tiers_.erase(handle);
    indexes_.erase(handle);
    return Status(ErrorCode::RPC_FAIL, "the master at " + master_->address() +
                                           " did not take the segment's stream within 5 s "
                                           "(a master without segment indexes?)");
  }
  std::lock_guard lock(mu_);
  links_[handle] = std::move(link);
  return handle;
}

void RemoteBackend::DropOwnDiskReplicas(SegmentId handle, uint32_t region, uint64_t generation,
                                        const std::vector<std::string>& keys) {
  std::shared_ptr<SegmentIndex> index = OwnIndex(handle);
  // The index first: it must never report a record whose region is being rewritten.
  if (index) index->DropDiskRegion(region, generation, keys);
  master_->DropDiskReplicas(handle, region, generation, keys);
}

std::shared_ptr<SegmentIndex> RemoteBackend::OwnIndex(SegmentId handle) {
  std::lock_guard lock(mu_);
  auto it = indexes_.find(handle);
  return it == indexes_.end() ? nullptr : it->second;
}

bool RemoteBackend::OwnLinkConnected(SegmentId handle) {
  std::lock_guard lock(mu_);
  auto it = links_.find(handle);
  return it != links_.end() && it->second->connected();
}

void RemoteBackend::TEST_SetLinkHooks(const SegmentLinkOptions::TestHooks& hooks) {
  std::lock_guard lock(mu_);
  test_hooks_ = hooks;
}

ClientHealth RemoteBackend::Health() {
  ClientHealth h;
  h.master_connected = master_->connected();
  h.master = master_->master_address();
  h.leader_epoch = master_->leader_epoch();
  h.registrations = master_->registrations();
  h.leader_changes = master_->leader_changes();
  {
    std::lock_guard lock(mu_);
    for (const auto& [handle, link] : links_)
      h.segment_linked = h.segment_linked && link->connected();
  }
  h.healthy = h.master_connected && h.segment_linked;
  if (!h.master_connected) {
    h.message = "the tierkv master at " + (h.master.empty() ? master_->address() : h.master) +
                " does not answer (restarting, or a standby taking over?)";
  } else if (!h.segment_linked) {
    h.message =
        "this client's segment is not linked to the master yet (re-mounting after a "
        "master change)";
  }
  return h;
}

Status RemoteBackend::UnmountOwn(SegmentId handle) {
  std::unique_ptr<SegmentLink> link;
  {
    std::lock_guard lock(mu_);
    if (auto it = links_.find(handle); it != links_.end()) {
      link = std::move(it->second);
      links_.erase(it);
    }
  }
  link.reset();  // no more demotions into this process
  Status st = master_->UnmountSegment(handle);
  std::lock_guard lock(mu_);
  own_.erase(handle);
  own_tiers_.erase(handle);
  indexes_.erase(handle);
  return st;
}

void RemoteBackend::RefreshNames() {
  // connect_mu_ is held by the caller: one refresh at a time, rate-limited.
  bool now_due = false;
  {
    std::lock_guard lock(mu_);
    now_due = std::exchange(refresh_due_, false);
  }
  const auto now = std::chrono::steady_clock::now();
  if (!now_due && now - last_refresh_ < kRefreshInterval) return;
  last_refresh_ = now;
  auto stats = master_->ProcessStats();  // no lock held: lookups of known segments go on
  if (!stats.ok()) {
    spdlog::warn("requester: listing the master's segments failed: {}", stats.status().ToString());
    return;
  }
  std::map<SegmentId, std::string> names;
  for (const SegmentUsage& s : stats->segment_usage) names[s.id] = s.name;
  std::lock_guard lock(mu_);
  names_ = std::move(names);  // unmounted segments drop out
  stage_access_.clear();      // reconnected when next needed
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
  refresh_due_ = true;
}

std::shared_ptr<SegmentAccess> RemoteBackend::CachedLocked(SegmentId id, bool* known) {
  ForgetIfReregisteredLocked();
  *known = true;
  for (const auto& [handle, segment] : own_) {
    if (master_->CurrentSegmentId(handle) == id) return segment;
  }
  if (auto it = mapped_.find(id); it != mapped_.end()) {
    if (it->second->alive()) return it->second;
    // Never bytes of a dead connection. Its owner may be alive behind a partition (a read
    // waited in vain, the connection was closed): connect again after kUnreachableRetry, as
    // for a segment never reached. A new connection's hello names the segment, and a
    // restarted owner serves another name, so a reconnect never reaches another process's
    // bytes.
    mapped_.erase(it);
    unreachable_[id] = std::chrono::steady_clock::now();
    return nullptr;
  }
  if (auto u = unreachable_.find(id); u != unreachable_.end()) {
    if (std::chrono::steady_clock::now() - u->second < kUnreachableRetry) return nullptr;
    unreachable_.erase(u);  // try it again
  }
  *known = false;
  return nullptr;
}

std::string RemoteBackend::NameOf(SegmentId id) {
  {
    std::lock_guard lock(mu_);
    ForgetIfReregisteredLocked();
    if (auto it = names_.find(id); it != names_.end()) return it->second;
  }
  RefreshNames();
  std::lock_guard lock(mu_);
  auto it = names_.find(id);
  return it == names_.end() ? std::string() : it->second;
}

std::shared_ptr<SegmentAccess> RemoteBackend::FindSegment(SegmentId id) {
  bool known = false;
  {
    std::lock_guard lock(mu_);
    auto cached = CachedLocked(id, &known);
    if (known) return cached;
  }
  // A segment not connected yet: list and connect without mu_, one thread at a time.
  std::lock_guard connecting(connect_mu_);
  {
    std::lock_guard lock(mu_);
    auto cached = CachedLocked(id, &known);  // another thread may have connected it meanwhile
    if (known) return cached;
  }
  const uint64_t registrations = master_->registrations();
  const std::string mounted = NameOf(id);
  if (mounted.empty()) return nullptr;  // unmounted meanwhile
  auto access = Connect(id, mounted);
  std::lock_guard lock(mu_);
  // Ids of an older master incarnation must not be cached under the new one's.
  if (registrations != master_->registrations()) return nullptr;
  if (access) {
    mapped_.emplace(id, access);
  } else {
    unreachable_[id] = std::chrono::steady_clock::now();
  }
  return access;
}

std::shared_ptr<SegmentAccess> RemoteBackend::Connect(SegmentId id, const std::string& mounted) {
  std::string name, socket_path, tcp_address;
  SplitSegmentEndpoint(mounted, &name, &socket_path, &tcp_address);
  const bool same_host = !socket_path.empty() && SegmentHostName(name) == host_;
  const bool use_shm = protocol_ == "shm" || (protocol_ == "auto" && same_host);
  if (use_shm) {
    if (!same_host) {
      spdlog::warn(
          "requester on host '{}' with protocol shm: segment {} ('{}') is not served on this "
          "host; its replicas cannot be read here (protocol tcp or auto reaches it)",
          host_, id, mounted);
      return nullptr;
    }
    auto mapped = mapper_.Map(socket_path, name, kMapTimeout);
    if (!mapped.ok()) {
      spdlog::warn("requester: mapping segment {} ('{}') failed: {}", id, name,
                   mapped.status().ToString());
      return nullptr;
    }
    return std::make_shared<MappedAccess>(std::move(mapped).value());
  }
  if (tcp_address.empty()) {
    spdlog::warn("requester with protocol {}: segment {} ('{}') is not served over the network",
                 protocol_, id, mounted);
    return nullptr;
  }
  auto connected =
      transport::ConnectNetworkSegment(tcp_address, name, kNetworkConnectTimeout, ucx_);
  if (!connected.ok()) {
    spdlog::warn("requester: connecting to segment {} ('{}') at {} failed: {}", id, name,
                 tcp_address, connected.status().ToString());
    return nullptr;
  }
  return std::make_shared<UcxAccess>(std::move(connected).value(),
                                     protocol_ == "rdma" ? Transport::kRdma : Transport::kTcp);
}

namespace {

// Runs `ops` (RemoteRead or RemoteWrite) as one batch per UCX segment, so each connection keeps
// many requests in flight; `run(client, batch, on_batch_done)` is ReadBatch or WriteBatch;
// on_done (may be empty) hears of each op done, by its index in `ops`.
template <typename Op, typename BatchOp, typename Run>
std::vector<Status> PerSegment(const std::vector<Op>& ops, const Run& run,
                               const ClientBackend::OpDone& on_done = {}) {
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
    transport::NetworkSegmentClient::OpDone on_batch_done;
    if (on_done) on_batch_done = [&on_done, &list](size_t k) { on_done(list[k]); };
    std::vector<Status> done = run(ucx->client(), batch, on_batch_done);
    for (size_t k = 0; k < list.size(); ++k) out[list[k]] = std::move(done[k]);
  }
  return out;
}

}  // namespace

std::vector<Status> RemoteBackend::ReadRemote(const std::vector<RemoteRead>& ops,
                                              std::chrono::milliseconds idle,
                                              const OpDone& on_done) {
  using Batch = transport::NetworkSegmentClient::ReadOp;
  return PerSegment<RemoteRead, Batch>(
      ops,
      [idle](transport::NetworkSegmentClient& c, const std::vector<Batch>& b,
             const transport::NetworkSegmentClient::OpDone& batch_done) {
        return c.ReadBatch(b, idle, batch_done);
      },
      on_done);
}

std::vector<Status> RemoteBackend::WriteRemote(const std::vector<RemoteWrite>& ops) {
  using Batch = transport::NetworkSegmentClient::WriteOp;
  return PerSegment<RemoteWrite, Batch>(
      ops, [](transport::NetworkSegmentClient& c, const std::vector<Batch>& b,
              const transport::NetworkSegmentClient::OpDone&) { return c.WriteBatch(b); });
}

std::shared_ptr<SsdTier> RemoteBackend::FindTier(SegmentId id) {
  std::lock_guard lock(mu_);
  for (const auto& [handle, tier] : own_tiers_) {
    if (master_->CurrentSegmentId(handle) == id) return tier;
  }
  return nullptr;
}

std::shared_ptr<SegmentAccess> RemoteBackend::StageAccess(SegmentId id) {
  {
    std::lock_guard lock(mu_);
    ForgetIfReregisteredLocked();
    if (auto it = mapped_.find(id); it != mapped_.end() && !it->second->mapped()) {
      return it->second->alive() ? it->second : nullptr;
    }
    if (auto it = stage_access_.find(id); it != stage_access_.end()) {
      if (it->second->alive()) return it->second;
      stage_access_.erase(it);  // the owner went; a restarted one has a new endpoint
    }
  }
  std::lock_guard connecting(connect_mu_);
  {
    std::lock_guard lock(mu_);
    if (auto it = stage_access_.find(id); it != stage_access_.end() && it->second->alive()) {
      return it->second;  // connected by another thread meanwhile
    }
  }
  const uint64_t registrations = master_->registrations();
  const std::string mounted = NameOf(id);
  if (mounted.empty()) return nullptr;
  std::string name, socket_path, tcp_address;
  SplitSegmentEndpoint(mounted, &name, &socket_path, &tcp_address);
  if (tcp_address.empty()) {
    spdlog::warn(
        "requester: segment {} ('{}') has no network endpoint: its SSD tier cannot be "
        "read from here",
        id, mounted);
    return nullptr;
  }
  transport::UcxTransportOptions options = ucx_;
  if (protocol_ == "shm" || protocol_ == "auto") options.protocol = "tcp";
  auto connected =
      transport::ConnectNetworkSegment(tcp_address, name, kNetworkConnectTimeout, options);
  if (!connected.ok()) {
    spdlog::warn("requester: connecting to segment {} ('{}') at {} for a staged load failed: {}",
                 id, name, tcp_address, connected.status().ToString());
    return nullptr;
  }
  auto access =
      std::make_shared<UcxAccess>(std::move(connected).value(),
                                  options.protocol == "rdma" ? Transport::kRdma : Transport::kTcp);
  std::lock_guard lock(mu_);
  if (registrations == master_->registrations()) stage_access_[id] = access;
  return access;
}

std::vector<Status> RemoteBackend::StageRemote(const std::vector<RemoteStage>& ops,
                                               double usable_ratio, const OpDone& on_done) {
  std::vector<Status> out(ops.size());
  std::map<SegmentId, std::vector<size_t>> by_segment;
  for (size_t i = 0; i < ops.size(); ++i) by_segment[ops[i].segment].push_back(i);
  for (const auto& [id, list] : by_segment) {
    std::shared_ptr<SegmentAccess> access = StageAccess(id);
    const auto* ucx = dynamic_cast<const UcxAccess*>(access.get());
    if (ucx == nullptr) {
      for (size_t i : list) {
        out[i] = Status(ErrorCode::OBJECT_NOT_FOUND,
                        "the SSD tier of segment " + std::to_string(id) + " is not reachable");
      }
      continue;
    }
    std::vector<transport::NetworkSegmentClient::StageOp> batch;
    batch.reserve(list.size());
    for (size_t i : list) batch.push_back({ops[i].key, ops[i].location, ops[i].dst});
    transport::NetworkSegmentClient::OpDone on_batch_done;
    if (on_done) on_batch_done = [&on_done, &list](size_t k) { on_done(list[k]); };
    std::vector<Status> done = ucx->client().StageBatch(batch, usable_ratio, on_batch_done);
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
  std::lock_guard connecting(connect_mu_);
  return NameOf(id);
}

}  // namespace tierkv
