#include "rpc/remote_master.h"

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <thread>
#include <utility>

#include "common/host_name.h"
#include "rpc/meta_client.h"
#include "rpc/remote_master_call.h"
#include "rpc/wire.h"
#include "tierkv/master.grpc.pb.h"
#include "transport/socket_address.h"

namespace tierkv {
namespace {

const char* GrpcCodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return "OK";
    case grpc::StatusCode::CANCELLED:
      return "CANCELLED";
    case grpc::StatusCode::UNKNOWN:
      return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED:
      return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL:
      return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS:
      return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    default:
      return "gRPC error";
  }
}

}  // namespace

namespace remote_master_internal {

// What a failed call becomes: UNAUTHENTICATED and PERMISSION_DENIED are tierkv's UNAUTHENTICATED
// (a missing or wrong token, or a requester's token where a store's is needed: retrying cannot
// help), anything else is RPC_FAIL.
ErrorCode CodeOf(const grpc::Status& status) {
  return status.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
                 status.error_code() == grpc::StatusCode::PERMISSION_DENIED
             ? ErrorCode::UNAUTHENTICATED
             : ErrorCode::RPC_FAIL;
}

std::string Describe(const grpc::Status& status) {
  std::string out = GrpcCodeName(status.error_code());
  if (!status.error_message().empty()) out += ": " + status.error_message();
  return out;
}

std::chrono::system_clock::time_point DeadlineIn(Millis timeout) {
  return std::chrono::system_clock::now() + timeout;
}

}  // namespace remote_master_internal

using remote_master_internal::CodeOf;
using remote_master_internal::DeadlineIn;
using remote_master_internal::Describe;

RemoteMaster::RemoteMaster(std::string address, RemoteMasterOptions options)
    : address_(std::move(address)), options_(std::move(options)) {}

void RemoteMaster::UseEndpoint(const std::string& address, uint64_t epoch) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(wire::kMaxMessageBytes);
  args.SetMaxSendMessageSize(wire::kMaxMessageBytes);
  // Reconnect quickly after a master restart (gRPC's default backoff grows to 120 s).
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetInt(GRPC_ARG_DNS_MIN_TIME_BETWEEN_RESOLUTIONS_MS, 200);
  // A connection of our own: two RemoteMasters in one process are two clients.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto endpoint = std::make_shared<Endpoint>();
  endpoint->address = address;
  endpoint->epoch = epoch;
  endpoint->channel = MasterChannel(address, options_.security, args);
  endpoint->stub = rpc::Master::NewStub(endpoint->channel);
  std::shared_ptr<const Endpoint> old;
  {
    std::lock_guard lock(endpoint_mu_);
    old = std::exchange(endpoint_, std::move(endpoint));
  }
  if (old) old->Retire();
}

std::shared_ptr<const RemoteMaster::Endpoint> RemoteMaster::endpoint() const {
  std::lock_guard lock(endpoint_mu_);
  return endpoint_;
}

std::string RemoteMaster::master_address() const {
  auto ep = endpoint();
  return ep ? ep->address : std::string();
}

uint64_t RemoteMaster::leader_epoch() const {
  auto ep = endpoint();
  return ep ? ep->epoch : 0;
}

std::shared_ptr<grpc::Channel> RemoteMaster::channel() const {
  auto ep = endpoint();
  return ep ? ep->channel : nullptr;
}

bool RemoteMaster::FollowLeader(bool force) {
  if (!etcd_) return false;
  {
    std::lock_guard lock(endpoint_mu_);
    const auto now = std::chrono::steady_clock::now();
    if (!force && now - last_follow_ < Millis(50)) return false;
    last_follow_ = now;
  }
  auto leader = etcd_->Leader();
  if (!leader.ok()) {
    spdlog::debug("looking up the leader: {}", leader.status().ToString());
    return false;
  }
  if (!leader->has_value()) return false;  // an election is under way
  auto current = endpoint();
  if (current && current->address == (*leader)->address && current->epoch == (*leader)->epoch) {
    return false;
  }
  UseEndpoint((*leader)->address, (*leader)->epoch);
  leader_changes_.fetch_add(current ? 1 : 0);
  if (current) {
    spdlog::warn("tierkv master: following the new leader {} (epoch {}; was {} epoch {})",
                 (*leader)->address, (*leader)->epoch, current->address, current->epoch);
  }
  return true;
}

bool RemoteMaster::Stale(const Endpoint& endpoint, bool not_leader, uint64_t epoch) const {
  if (not_leader) return true;
  // With etcd: an answer from another term than the one etcd named (an old leader back from a
  // stop, or a newer term at the same address) is not obeyed.
  return etcd_ != nullptr && epoch != endpoint.epoch;
}

bool RemoteMaster::AwaitMaster(const std::shared_ptr<const Endpoint>& tried,
                               std::chrono::system_clock::time_point deadline) {
  Kick();  // the heartbeat re-registers (and re-mounts) with whoever answers next
  while (std::chrono::system_clock::now() + Millis(20) < deadline) {
    if (etcd_) {
      FollowLeader(/*force=*/true);
      if (endpoint() != tried) return true;
    }
    std::this_thread::sleep_for(Millis(etcd_ ? 50 : 100));
    if (!etcd_) return true;  // the same address again: a restarted master may answer now
  }
  return false;
}

Result<std::unique_ptr<RemoteMaster>> RemoteMaster::Connect(const std::string& address,
                                                            Millis connect_timeout,
                                                            RemoteMasterOptions options) {
  if (address.empty()) return Status(ErrorCode::INVALID_PARAMS, "master address is empty");
  if (connect_timeout.count() <= 0) {
    return Status(ErrorCode::INVALID_PARAMS, "connect timeout must be > 0 ms");
  }
  if (options.rpc_timeout.count() <= 0) {
    return Status(ErrorCode::INVALID_PARAMS, "RPC timeout must be > 0 ms");
  }
  options.host = HostName(options.host);
  std::unique_ptr<RemoteMaster> master(new RemoteMaster(address, std::move(options)));
  if (IsEtcdAddress(address)) {
    auto endpoints = ParseEtcdAddress(address);
    if (!endpoints.ok()) return endpoints.status();
    auto etcd = EtcdClient::Create(std::move(endpoints).value(),
                                   std::min(master->options_.rpc_timeout, Millis(1000)),
                                   master->options_.security.etcd);
    if (!etcd.ok()) return etcd.status();
    master->etcd_ = std::move(etcd).value();
    // The leader etcd names; an election may be under way: wait for one, within the timeout.
    const auto deadline = std::chrono::steady_clock::now() + connect_timeout;
    Status last(ErrorCode::RPC_FAIL, "no leader elected");
    while (true) {
      auto leader = master->etcd_->Leader();
      if (leader.ok() && leader->has_value()) {
        master->UseEndpoint((*leader)->address, (*leader)->epoch);
        break;
      }
      if (!leader.ok()) last = leader.status();
      if (!leader.ok() && leader.code() == ErrorCode::UNAUTHENTICATED) return leader.status();
      if (std::chrono::steady_clock::now() + Millis(50) >= deadline) {
        return Status(ErrorCode::RPC_FAIL, "no tierkv master leads at " + address + " within " +
                                               std::to_string(connect_timeout.count()) +
                                               " ms (connect timeout): " + last.message());
      }
      std::this_thread::sleep_for(Millis(50));
    }
  } else {
    master->UseEndpoint(address, 0);
  }
  if (Status st = master->Register(connect_timeout); !st.ok()) return st;
  if (master->options_.heartbeat_interval.count() > 0) {
    master->heartbeat_ = std::thread([m = master.get()] { m->HeartbeatLoop(); });
  }
  return master;
}

RemoteMaster::~RemoteMaster() {
  {
    std::lock_guard lock(beat_mu_);
    stop_ = true;
  }
  beat_cv_.notify_all();
  if (heartbeat_.joinable()) heartbeat_.join();
  // Unregister: the master unmounts our segments now instead of after client_ttl. (Never
  // registered: Connect failed, nothing to undo.)
  if (client_id_.load() == 0) return;
  auto ep = endpoint();
  if (!ep) return;
  rpc::UnregisterClientRequest request;
  request.set_client_id(client_id_.load());
  rpc::StatusResponse response;
  grpc::ClientContext context;
  context.set_deadline(DeadlineIn(std::min(options_.rpc_timeout, Millis(1000))));
  grpc::Status status = ep->stub->UnregisterClient(&context, request, &response);
  if (!status.ok()) {
    spdlog::debug("unregistering client {} from {}: {}", client_id_.load(), ep->address,
                  Describe(status));
  }
}

Status RemoteMaster::RpcFailure(const char* rpc, const grpc::Status& status) {
  Kick();
  return Status(CodeOf(status), std::string("RPC ") + rpc + " to the tierkv master at " +
                                    master_address() + " failed: " + Describe(status));
}

// ---- Registration and heartbeat -------------------------------------------------------------

Status RemoteMaster::Register(Millis timeout) {
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = DeadlineIn(timeout);
  std::string last;
  ErrorCode last_code = ErrorCode::RPC_FAIL;
  for (;;) {
    const std::shared_ptr<const Endpoint> ep = endpoint();
    rpc::RegisterClientRequest request;
    request.set_host(options_.host);
    rpc::RegisterClientResponse response;
    grpc::ClientContext context;
    context.set_deadline(deadline);
    grpc::Status status = ep->stub->RegisterClient(&context, request, &response);
    if (status.ok() &&
        Stale(*ep, response.status().not_leader(), response.status().leader_epoch())) {
      status = grpc::Status(grpc::StatusCode::UNAVAILABLE,
                            "the tierkv master at " + ep->address + " is not the leader");
    }
    if (status.ok()) {
      if (Status call = wire::CallStatusOf(response.status()); !call.ok()) return call;
      if (response.client_id() == 0) {
        return Status(ErrorCode::RPC_FAIL,
                      "malformed RegisterClient response from " + ep->address + ": client id 0");
      }
      client_id_.store(response.client_id());
      master_client_ttl_ms_.store(response.client_ttl_ms());
      {
        std::lock_guard lock(defaults_mu_);
        client_defaults_.root_fs_dir = response.defaults().root_fs_dir();
        client_defaults_.promote_on_hit = response.defaults().promote_on_hit();
        client_defaults_.promote_min_hits = response.defaults().promote_min_hits();
      }
      UseMetaChannel(*ep, response.meta_port());
      registrations_.fetch_add(1);
      connected_.store(true);
      spdlog::debug("registered with the tierkv master at {} as client {}", ep->address,
                    response.client_id());
      return Status::Ok();
    }
    // Retries may end in "tcp handshaker shutdown" (gRPC cancelling its own attempt), which
    // says less than the reason before it ("Connection refused"): keep that one then.
    std::string reason = Describe(status);
    if (last.empty() || reason.find("handshaker shutdown") == std::string::npos) {
      last = std::move(reason);
    }
    last_code = CodeOf(status);
    // UNAVAILABLE: nothing listens yet, the channel is backing off, or (etcd) the leader
    // changed; try again until the deadline. Anything else (a deadline, a server that is not a
    // tierkv master) is final.
    const bool retry = status.error_code() == grpc::StatusCode::UNAVAILABLE &&
                       std::chrono::system_clock::now() + Millis(50) < deadline;
    if (!retry) break;
    FollowLeader(/*force=*/true);
    std::this_thread::sleep_for(Millis(50));
  }
  const auto waited =
      std::chrono::duration_cast<Millis>(std::chrono::steady_clock::now() - start).count();
  if (last_code == ErrorCode::UNAUTHENTICATED) {
    return Status(last_code, "the tierkv master at " + address_ + " refused this process: " + last);
  }
  return Status(ErrorCode::RPC_FAIL, "cannot reach the tierkv master at " + address_ + " within " +
                                         std::to_string(timeout.count()) +
                                         " ms (connect timeout; gave up after " +
                                         std::to_string(waited) + " ms): " + last);
}

void RemoteMaster::UseMetaChannel(const Endpoint& ep, uint32_t port) {
  // Not over TLS: the channel has none, and a client configured for TLS must not send its
  // calls in the clear.
  if (!options_.meta_channel || port == 0 || !options_.security.tls_ca_pem.empty()) {
    ep.UseMeta(nullptr);
    return;
  }
  auto host_port = transport::ParseHostPort(ep.address, /*allow_zero=*/false);
  if (!host_port.ok()) {
    spdlog::warn("tierkv master at {}: not using its metadata channel: {}", ep.address,
                 host_port.status().ToString());
    ep.UseMeta(nullptr);
    return;
  }
  const std::string address = transport::FormatHostPort(host_port->host, static_cast<int>(port));
  std::shared_ptr<MetaChannel> current = ep.Meta();
  if (current && current->address() == address) return;  // the same master's: keep its pool
  ep.UseMeta(std::make_shared<MetaChannel>(address, options_.security.tokens));
}

uint64_t RemoteMaster::meta_calls() const {
  auto ep = endpoint();
  auto channel = ep ? ep->Meta() : nullptr;
  return channel ? channel->calls() : 0;
}

std::string RemoteMaster::meta_address() const {
  auto ep = endpoint();
  auto channel = ep ? ep->Meta() : nullptr;
  return channel ? channel->address() : std::string();
}

Status RemoteMaster::ReregisterLocked(const char* why) {
  const uint64_t old_id = client_id_.load();
  if (Status st = Register(options_.rpc_timeout); !st.ok()) return st;
  for (OwnedSegment& segment : segments_) segment.current = 0;
  PublishIdsLocked();
  RemountPendingLocked();
  size_t mounted = 0;
  for (const OwnedSegment& segment : segments_) mounted += segment.current != 0 ? 1 : 0;
  spdlog::warn(
      "tierkv master at {} {}: client {} registered again as client {}; re-mounted {} of {} "
      "segment(s)",
      master_address(), why, old_id, client_id_.load(), mounted, segments_.size());
  return Status::Ok();
}

Status RemoteMaster::MountOne(OwnedSegment& segment) {
  rpc::MountSegmentRequest request;
  request.set_client_id(client_id_.load());
  request.set_name(segment.name);
  request.set_capacity(segment.capacity);
  request.set_index_stream(segment.options.index_stream);
  request.set_has_tier(segment.options.has_tier);
  request.set_tenant(segment.options.tenant);
  rpc::MountSegmentResponse response;
  grpc::Status status =
      Call("MountSegment", false, &response, [&](const Endpoint& ep, grpc::ClientContext* context) {
        return ep.stub->MountSegment(context, request, &response);
      });
  if (!status.ok()) return RpcFailure("MountSegment", status);
  if (Status call = wire::CallStatusOf(response.status()); !call.ok()) return call;
  if (response.segment_id() == 0) {
    return Status(ErrorCode::RPC_FAIL, "malformed MountSegment response: segment id 0");
  }
  segment.current = response.segment_id();
  return Status::Ok();
}

void RemoteMaster::RemountPendingLocked() {
  for (OwnedSegment& segment : segments_) {
    if (segment.current != 0) continue;
    if (Status st = MountOne(segment); !st.ok()) {
      spdlog::warn("re-mounting segment '{}' on {} failed (retried at the next heartbeat): {}",
                   segment.name, master_address(), st.ToString());
    }
  }
  PublishIdsLocked();
}

void RemoteMaster::PublishIdsLocked() {
  auto ids = std::make_shared<std::vector<std::pair<SegmentId, SegmentId>>>();
  for (const OwnedSegment& s : segments_) ids->emplace_back(s.handle, s.current);
  std::lock_guard lock(ids_mu_);
  ids_ = std::move(ids);
}

Status RemoteMaster::Beat() {
  for (int attempt = 0;; ++attempt) {
    const uint64_t id = client_id_.load();
    const std::shared_ptr<const Endpoint> ep = endpoint();
    rpc::HeartbeatRequest request;
    request.set_client_id(id);
    if (options_.transfer_counts) {
      for (const TransferCount& count : options_.transfer_counts()) {
        rpc::TransferCount* out = request.add_transfers();
        out->set_transport(count.transport);
        out->set_read_bytes(count.read_bytes);
        out->set_written_bytes(count.written_bytes);
      }
    }
    rpc::HeartbeatResponse response;
    grpc::ClientContext context;
    const Millis interval = HeartbeatInterval();
    const Millis timeout = interval.count() > 0
                               ? std::min(options_.rpc_timeout, std::max(2 * interval, Millis(500)))
                               : options_.rpc_timeout;
    context.set_deadline(DeadlineIn(timeout));
    grpc::Status status = ep->stub->Heartbeat(&context, request, &response);
    if (status.ok() && Stale(*ep, response.not_leader(), response.leader_epoch())) {
      status = grpc::Status(grpc::StatusCode::UNAVAILABLE,
                            "the tierkv master at " + ep->address + " is not the leader");
    }
    if (!status.ok()) {
      // With etcd: another master may lead now; try it at once.
      if (attempt == 0 && FollowLeader(/*force=*/true)) continue;
      if (connected_.exchange(false)) {
        spdlog::warn("lost the tierkv master at {}: {} (retrying every 100 ms)", ep->address,
                     Describe(status));
      }
      return Status(ErrorCode::RPC_FAIL, "heartbeat to the tierkv master at " + ep->address +
                                             " failed: " + Describe(status));
    }
    if (!connected_.exchange(true)) spdlog::warn("tierkv master at {} answers", ep->address);
    std::lock_guard lock(owner_mu_);
    if (!response.known()) {
      // Someone else (a mount that was refused) may have registered again meanwhile.
      if (client_id_.load() != id) return Status::Ok();
      return ReregisterLocked(
          "does not know this client (it restarted, took over as leader, or expired the "
          "client)");
    }
    RemountPendingLocked();
    return Status::Ok();
  }
}

void RemoteMaster::Kick() {
  {
    std::lock_guard lock(beat_mu_);
    kicked_ = true;
  }
  beat_cv_.notify_all();
}

Millis RemoteMaster::HeartbeatInterval() const {
  // A master whose client_ttl is not well above our interval would expire us between two
  // healthy beats (one late beat under load is enough): beat at least 3 times per TTL.
  const Millis configured = options_.heartbeat_interval;
  const auto ttl = static_cast<int64_t>(master_client_ttl_ms_.load());
  if (ttl <= 0 || configured.count() <= 0) return configured;
  return std::min(configured, Millis(std::max<int64_t>(ttl / 3, 10)));
}

void RemoteMaster::HeartbeatLoop() {
  std::unique_lock lock(beat_mu_);
  while (!stop_) {
    // While the master does not answer, look again every 100 ms: a restarted master or a new
    // leader is found within that.
    const Millis wait =
        connected_.load() ? HeartbeatInterval() : std::min(HeartbeatInterval(), Millis(100));
    beat_cv_.wait_for(lock, wait, [this] { return stop_ || kicked_; });
    if (stop_) break;
    if (kicked_) {
      // A failed call: beat soon, but at most ~20 times a second while calls keep failing.
      kicked_ = false;
      if (beat_cv_.wait_for(lock, Millis(50), [this] { return stop_; })) break;
    }
    lock.unlock();
    (void)Beat();
    lock.lock();
  }
}

Status RemoteMaster::Ping() { return Beat(); }

// ---- Segments ---------------------------------------------------------------------------------

Result<SegmentId> RemoteMaster::MountSegment(const std::string& name, uint64_t capacity) {
  return MountSegment(name, capacity, MountOptions{});
}

Result<SegmentId> RemoteMaster::MountSegment(const std::string& name, uint64_t capacity,
                                             MountOptions options) {
  std::lock_guard lock(owner_mu_);
  OwnedSegment segment{0, 0, name, capacity, options};
  for (int attempt = 0;; ++attempt) {
    rpc::MountSegmentRequest request;
    request.set_client_id(client_id_.load());
    request.set_name(name);
    request.set_capacity(capacity);
    request.set_index_stream(options.index_stream);
    request.set_has_tier(options.has_tier);
    request.set_tenant(options.tenant);
    rpc::MountSegmentResponse response;
    grpc::Status status = Call("MountSegment", false, &response,
                               [&](const Endpoint& ep, grpc::ClientContext* context) {
                                 return ep.stub->MountSegment(context, request, &response);
                               });
    if (!status.ok()) return RpcFailure("MountSegment", status);
    if (response.status().unknown_client() && attempt == 0) {
      if (Status st = ReregisterLocked("refused a mount from an unknown client"); !st.ok()) {
        return st;
      }
      continue;
    }
    if (Status call = wire::CallStatusOf(response.status()); !call.ok()) return call;
    if (response.segment_id() == 0) {
      return Status(ErrorCode::RPC_FAIL, "malformed MountSegment response: segment id 0");
    }
    segment.handle = segment.current = response.segment_id();
    segments_.push_back(segment);
    PublishIdsLocked();
    return static_cast<SegmentId>(response.segment_id());
  }
}

Status RemoteMaster::UnmountSegment(SegmentId id) {
  std::lock_guard lock(owner_mu_);
  auto it = std::find_if(segments_.begin(), segments_.end(),
                         [id](const OwnedSegment& s) { return s.handle == id; });
  if (it == segments_.end()) {
    return Status(ErrorCode::SEGMENT_NOT_FOUND,
                  "segment " + std::to_string(id) + " is not mounted by this client");
  }
  const SegmentId current = it->current;
  // Forget it locally whatever the master says: it must not come back at a re-mount.
  segments_.erase(it);
  PublishIdsLocked();
  if (current == 0) return Status::Ok();  // not mounted on this master incarnation
  rpc::UnmountSegmentRequest request;
  request.set_client_id(client_id_.load());
  request.set_segment_id(current);
  rpc::StatusResponse response;
  grpc::Status status = Call("UnmountSegment", false, &response,
                             [&](const Endpoint& ep, grpc::ClientContext* context) {
                               return ep.stub->UnmountSegment(context, request, &response);
                             });
  if (!status.ok()) return RpcFailure("UnmountSegment", status);
  // An unknown client had its segments unmounted already (expiry, restart).
  if (response.status().unknown_client()) return Status::Ok();
  return wire::CallStatusOf(response.status());
}

SegmentId RemoteMaster::CurrentSegmentId(SegmentId handle) const {
  std::shared_ptr<const std::vector<std::pair<SegmentId, SegmentId>>> ids;
  {
    std::lock_guard lock(ids_mu_);
    ids = ids_;
  }
  if (ids) {
    for (const auto& [h, current] : *ids) {
      if (h == handle) return current;
    }
  }
  return 0;
}

}  // namespace tierkv
