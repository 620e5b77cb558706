#include "rpc/master_server.h"

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>

#include "common/key.h"
#include "metrics/auth_collector.h"
#include "metrics/latency_histograms.h"
#include "metrics/master_collector.h"
#include "rpc/channel_security.h"
#include "rpc/index_wire.h"
#include "rpc/wire.h"
#include "tierkv/master.grpc.pb.h"

namespace tierkv {
namespace {

// Largest segment a client may mount: far beyond any machine, and far from overflowing the
// allocator's offset arithmetic.
constexpr uint64_t kMaxSegmentCapacity = uint64_t{1} << 60;

bool CheckLength(const char* field, size_t got, size_t keys, rpc::CallStatus* status) {
  if (got == keys) return true;
  wire::SetStatus(status, Status(ErrorCode::INVALID_PARAMS,
                                 std::string(field) + " has " + std::to_string(got) +
                                     " entries for " + std::to_string(keys) + " keys"));
  return false;
}

// Client-supplied text (hosts, segment names) as a log-safe string: non-printable bytes become
// \xNN, and long text is cut.
std::string Printable(std::string_view text) { return LabelValue(std::string(text)); }

std::string JoinSegments(const std::vector<SegmentId>& segments) {
  std::string out;
  for (SegmentId s : segments) {
    if (!out.empty()) out += ",";
    out += std::to_string(s);
  }
  return out.empty() ? "none" : out;
}

}  // namespace

uint64_t NewIncarnation() {
  std::random_device device;
  uint64_t v = (static_cast<uint64_t>(device()) << 32) ^ device() ^
               static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  return v == 0 ? 1 : v;
}

// ---- MasterRpcHandler ---------------------------------------------------------------------------

MasterRpcHandler::MasterRpcHandler(MasterService& master, ClientRegistry& clients,
                                   uint64_t incarnation)
    : master_(master), clients_(clients), incarnation_(incarnation) {}

namespace {

// The key namespace the call being handled on this thread may act in (a tenant's prefix; "" =
// keys outside every namespace), or null: anywhere (no tenants configured, an admin, a store).
// Set by the gRPC service around each call from the caller's credential (CallScope); the fuzz
// targets and tests that drive the handler directly leave it null. A thread_local rather than
// a parameter of every handler: one place sets it, Keys() and the few whole-table calls read it.
thread_local const std::string* t_scope = nullptr;

bool InScope(std::string_view key, const std::string& scope) {
  return scope.empty() ? (key.empty() || key.front() != kKeyNamespaceMark)
                       : key.substr(0, scope.size()) == scope;
}

std::string ScopeName(const std::string& scope) {
  return scope.empty() ? std::string("the default tenant")
                       : "tenant '" + scope.substr(1, scope.size() - 2) + "'";
}

Status OutOfScope(std::string_view key, const std::string& scope) {
  return Status(ErrorCode::UNAUTHENTICATED,
                "key '" + LabelValue(std::string(key)) + "' is outside " + ScopeName(scope) +
                    ", the only one this credential may use (set tenant_id to match it)");
}

}  // namespace

MasterRpcHandler::CallScope::CallScope(const std::string* scope) { t_scope = scope; }
MasterRpcHandler::CallScope::~CallScope() { t_scope = nullptr; }

bool MasterRpcHandler::Keys(const rpc::KeyBatch& batch, std::vector<std::string>* keys,
                            rpc::CallStatus* status) const {
  Status st = wire::DecodeKeys(batch, keys);
  if (st.ok() && t_scope != nullptr) {
    for (const std::string& key : *keys) {
      if (!InScope(key, *t_scope)) {
        st = OutOfScope(key, *t_scope);
        break;
      }
    }
  }
  if (st.ok()) return true;
  wire::SetStatus(status, st);
  return false;
}

bool MasterRpcHandler::CheckOwner(uint64_t client, uint32_t segment,
                                  rpc::CallStatus* status) const {
  if (!clients_.Known(client)) {
    wire::SetUnknownClient(status, client);
    return false;
  }
  if (!clients_.Owns(client, segment)) {
    wire::SetStatus(status, Status(ErrorCode::SEGMENT_NOT_FOUND,
                                   "segment " + std::to_string(segment) +
                                       " is not mounted by client " + std::to_string(client)));
    return false;
  }
  return true;
}

void MasterRpcHandler::RegisterClient(const rpc::RegisterClientRequest& request,
                                      rpc::RegisterClientResponse* response) {
  std::string host = request.host().substr(0, wire::kMaxHostLength);
  const ClientId id = clients_.Register(host);
  response->set_client_id(id);
  response->set_client_ttl_ms(static_cast<uint64_t>(clients_.ttl().count()));
  response->set_master_incarnation(incarnation_);
  rpc::ClientDefaults* defaults = response->mutable_defaults();
  defaults->set_root_fs_dir(client_defaults_.root_fs_dir);
  defaults->set_promote_on_hit(client_defaults_.promote_on_hit);
  defaults->set_promote_min_hits(client_defaults_.promote_min_hits);
  spdlog::info("client {} registered (host '{}')", id, Printable(host));
}

void MasterRpcHandler::Heartbeat(const rpc::HeartbeatRequest& request,
                                 rpc::HeartbeatResponse* response) {
  std::vector<TransferCount> transfers;
  // Bounded: at most one entry per transport counts; more is a broken client.
  for (int i = 0; i < request.transfers_size() && i < 16; ++i) {
    const rpc::TransferCount& count = request.transfers(i);
    transfers.push_back({count.transport(), count.read_bytes(), count.written_bytes()});
  }
  response->set_known(clients_.Heartbeat(request.client_id(), transfers));
  response->set_master_incarnation(incarnation_);
}

void MasterRpcHandler::UnregisterClient(const rpc::UnregisterClientRequest& request,
                                        rpc::StatusResponse* response) {
  std::optional<std::vector<SegmentId>> segments = clients_.Unregister(request.client_id());
  if (!segments) {
    wire::SetUnknownClient(response->mutable_status(), request.client_id());
    return;
  }
  for (SegmentId s : *segments) (void)master_.UnmountSegment(s);
  spdlog::info("client {} unregistered; unmounted segments: {}", request.client_id(),
               JoinSegments(*segments));
}

void MasterRpcHandler::MountSegment(const rpc::MountSegmentRequest& request,
                                    rpc::MountSegmentResponse* response) {
  rpc::CallStatus* status = response->mutable_status();
  if (!clients_.Known(request.client_id())) {
    wire::SetUnknownClient(status, request.client_id());
    return;
  }
  if (request.name().size() > wire::kMaxSegmentNameLength) {
    wire::SetStatus(status,
                    Status(ErrorCode::INVALID_PARAMS,
                           "segment name of " + std::to_string(request.name().size()) +
                               " bytes; at most " + std::to_string(wire::kMaxSegmentNameLength)));
    return;
  }
  if (request.capacity() > kMaxSegmentCapacity) {
    wire::SetStatus(status, Status(ErrorCode::INVALID_PARAMS,
                                   "segment capacity " + std::to_string(request.capacity()) +
                                       " is larger than " + std::to_string(kMaxSegmentCapacity)));
    return;
  }
  if (!request.tenant().empty() && !IsTenantName(request.tenant())) {
    wire::SetStatus(status, Status(ErrorCode::INVALID_PARAMS,
                                   "tenant '" + Printable(request.tenant()) +
                                       "': at most 64 characters of A-Z a-z 0-9 _ . -"));
    return;
  }
  MountOptions mount;
  mount.index_stream = request.index_stream();
  mount.has_tier = request.has_tier();
  mount.tenant = request.tenant();
  Result<SegmentId> id = master_.MountSegment(request.name(), request.capacity(), mount);
  if (!id.ok()) {
    wire::SetStatus(status, id.status());
    return;
  }
  if (Status owned = clients_.AddSegment(request.client_id(), *id); !owned.ok()) {
    // The client expired between the check and the mount: undo.
    (void)master_.UnmountSegment(*id);
    wire::SetUnknownClient(status, request.client_id());
    return;
  }
  response->set_segment_id(*id);
  spdlog::info("client {} mounted segment {} ('{}', {} bytes)", request.client_id(), *id,
               Printable(request.name()), request.capacity());
}

void MasterRpcHandler::UnmountSegment(const rpc::UnmountSegmentRequest& request,
                                      rpc::StatusResponse* response) {
  rpc::CallStatus* status = response->mutable_status();
  if (!clients_.Known(request.client_id())) {
    wire::SetUnknownClient(status, request.client_id());
    return;
  }
  if (Status owned = clients_.RemoveSegment(request.client_id(), request.segment_id());
      !owned.ok()) {
    wire::SetStatus(status, owned);
    return;
  }
  wire::SetStatus(status, master_.UnmountSegment(request.segment_id()));
  spdlog::info("client {} unmounted segment {}", request.client_id(), request.segment_id());
}

void MasterRpcHandler::PutStart(const rpc::PutStartRequest& request,
                                rpc::PlacementResponse* response) {
  rpc::CallStatus* status = response->mutable_status();
  std::vector<std::string> keys;
  if (!Keys(request.keys(), &keys, status) ||
      !CheckLength("sizes", static_cast<size_t>(request.sizes_size()), keys.size(), status)) {
    return;
  }
  ReplicateConfig config;
  if (Status st = wire::DecodeConfig(request.config(), &config); !st.ok()) {
    wire::SetStatus(status, st);
    return;
  }
  if (!config.group_ids.empty() &&
      !CheckLength("config.group_ids", config.group_ids.size(), keys.size(), status)) {
    return;
  }
  if (!config.parent_keys.empty() &&
      !CheckLength("config.parent_keys", config.parent_keys.size(), keys.size(), status)) {
    return;
  }
  if (t_scope != nullptr) {
    for (const auto* names : {&config.group_ids, &config.parent_keys}) {
      for (const std::string& name : *names) {
        if (!name.empty() && !InScope(name, *t_scope)) {
          wire::SetStatus(status, OutOfScope(name, *t_scope));
          return;
        }
      }
    }
  }
  std::vector<uint64_t> sizes(request.sizes().begin(), request.sizes().end());
  wire::EncodePlacements(request.upsert() ? master_.UpsertStart(keys, sizes, config)
                                          : master_.PutStart(keys, sizes, config),
                         response);
}

void MasterRpcHandler::PutEnd(const rpc::PutEndRequest& request, rpc::BatchResponse* response) {
  rpc::CallStatus* status = response->mutable_status();
  std::vector<std::string> keys;
  if (!Keys(request.keys(), &keys, status) ||
      !CheckLength("put_ids", static_cast<size_t>(request.put_ids_size()), keys.size(), status) ||
      !CheckLength("checksums", static_cast<size_t>(request.checksums_size()), keys.size(),
                   status)) {
    return;
  }
  std::vector<uint64_t> ids(request.put_ids().begin(), request.put_ids().end());
  std::vector<uint64_t> sums(request.checksums().begin(), request.checksums().end());
  const std::vector<Status> ended = master_.PutEnd(keys, ids, sums);
  wire::EncodeResults(ended, response->mutable_results());
}

void MasterRpcHandler::PutRevoke(const rpc::PutRevokeRequest& request,
                                 rpc::BatchResponse* response) {
  rpc::CallStatus* status = response->mutable_status();
  std::vector<std::string> keys;
  if (!Keys(request.keys(), &keys, status) ||
      !CheckLength("put_ids", static_cast<size_t>(request.put_ids_size()), keys.size(), status)) {
    return;
  }
  if (request.unreachable_segments_size() > 1024) {
    wire::SetStatus(status,
                    Status(ErrorCode::INVALID_PARAMS, "more than 1024 unreachable segments"));
    return;
  }
  std::vector<uint64_t> ids(request.put_ids().begin(), request.put_ids().end());
  std::vector<SegmentId> unreachable(request.unreachable_segments().begin(),
                                     request.unreachable_segments().end());
  wire::EncodeResults(master_.PutRevoke(keys, ids, unreachable), response->mutable_results());
}

void MasterRpcHandler::Exists(const rpc::ExistsRequest& request, rpc::ExistsResponse* response) {
  std::vector<std::string> keys;
  if (!Keys(request.keys(), &keys, response->mutable_status())) return;
  const std::vector<int> found = master_.Exists(keys);
  response->mutable_results()->Add(found.begin(), found.end());
}

void MasterRpcHandler::GetReplicas(const rpc::GetReplicasRequest& request,
                                   rpc::GetReplicasResponse* response) {
  std::vector<std::string> keys;
  if (!Keys(request.keys(), &keys, response->mutable_status())) return;
  auto results = master_.GetReplicas(keys);
  wire::EncodeReplicas(results, master_.options().clock->Now(), response);
}

void MasterRpcHandler::Remove(const rpc::RemoveRequest& request, rpc::BatchResponse* response) {
  std::vector<std::string> keys;
  if (!Keys(request.keys(), &keys, response->mutable_status())) return;
  wire::EncodeResults(master_.BatchRemove(keys, request.force()), response->mutable_results());
}

void MasterRpcHandler::RemoveAll(const rpc::RemoveAllRequest& request,
                                 rpc::CountResponse* response) {
  if (t_scope != nullptr) {  // a tenant's remove_all: its namespace only
    auto removed = master_.RemoveInNamespace(*t_scope, "", request.force());
    if (!removed.ok()) {
      wire::SetStatus(response->mutable_status(), removed.status());
      return;
    }
    response->set_count(*removed);
    return;
  }
  response->set_count(master_.RemoveAll(request.force()));
}

void MasterRpcHandler::RemoveByRegex(const rpc::RemoveByRegexRequest& request,
                                     rpc::CountResponse* response) {
  if (request.regex().size() > kMaxKeyLength) {
    wire::SetStatus(response->mutable_status(),
                    Status(ErrorCode::INVALID_PARAMS, "regex longer than the longest key"));
    return;
  }
  // A namespace inside the caller's (its prefix, or nested under it).
  if (t_scope != nullptr && request.in_namespace() &&
      !(t_scope->empty() ? InScope(request.key_namespace(), *t_scope)
                         : request.key_namespace().rfind(*t_scope, 0) == 0)) {
    wire::SetStatus(response->mutable_status(), OutOfScope(request.key_namespace(), *t_scope));
    return;
  }
  auto removed =
      request.in_namespace()
          ? master_.RemoveInNamespace(request.key_namespace(), request.regex(), request.force())
      : t_scope != nullptr ? master_.RemoveInNamespace(*t_scope, request.regex(), request.force())
                           : master_.RemoveByRegex(request.regex(), request.force());
  if (!removed.ok()) {
    wire::SetStatus(response->mutable_status(), removed.status());
    return;
  }
  response->set_count(*removed);
}

void MasterRpcHandler::ClearReplicas(const rpc::ClearReplicasRequest& request,
                                     rpc::BatchResponse* response) {
  std::vector<std::string> keys;
  if (!Keys(request.keys(), &keys, response->mutable_status())) return;
  if (request.segment_name().size() > kMaxKeyLength) {
    wire::SetStatus(response->mutable_status(),
                    Status(ErrorCode::INVALID_PARAMS, "segment name longer than the longest key"));
    return;
  }
  wire::EncodeResults(master_.ClearReplicas(keys, request.segment_name()),
                      response->mutable_results());
}

void MasterRpcHandler::DropDiskReplicas(const rpc::DropDiskReplicasRequest& request,
                                        rpc::CountResponse* response) {
  rpc::CallStatus* status = response->mutable_status();
  std::vector<std::string> keys;
  if (!Keys(request.keys(), &keys, status) ||
      !CheckOwner(request.client_id(), request.segment_id(), status)) {
    return;
  }
  response->set_count(
      master_.DropDiskReplicas(request.segment_id(), request.region(), request.generation(), keys));
}

Result<std::shared_ptr<RemoteTierMover>> MasterRpcHandler::OpenTierMoves(
    const rpc::TierMoveReply& hello, std::function<bool(const rpc::TierMoveRequest&)> write) {
  if (hello.request_id() != 0 || hello.codes_size() != 0 || hello.locations_size() != 0) {
    return Status(ErrorCode::INVALID_PARAMS,
                  "TierMoves: the first message must name the segment and carry no results");
  }
  rpc::CallStatus status;
  if (!CheckOwner(hello.client_id(), hello.segment_id(), &status)) {
    return wire::CallStatusOf(status);
  }
  const std::string owner = "segment " + std::to_string(hello.segment_id()) + " of client " +
                            std::to_string(hello.client_id());
  // An index stream without a tier takes no tier moves (a store without an SSD tier).
  if (hello.has_index() && !hello.has_tier()) return std::shared_ptr<RemoteTierMover>();
  auto mover = std::make_shared<RemoteTierMover>(owner, tier_move_timeout_, std::move(write));
  master_.SetTierMover(hello.segment_id(), mover, hello.write_behind());
  spdlog::info("tier moves: {} has an SSD tier; eviction there demotes{}", owner,
               hello.write_behind() ? ", and puts there are written behind" : "");
  return mover;
}

void MasterRpcHandler::CloseTierMoves(uint32_t segment,
                                      const std::shared_ptr<RemoteTierMover>& mover,
                                      const std::string& why) {
  mover->Close(why);
  master_.DetachTierMover(segment, mover.get());
  spdlog::info("tier moves: stream of segment {} ended ({})", segment, why);
}

void MasterRpcHandler::AddDiskReplicas(const rpc::AddDiskReplicasRequest& request,
                                       rpc::BatchResponse* response) {
  rpc::CallStatus* status = response->mutable_status();
  std::vector<std::string> keys;
  if (!Keys(request.keys(), &keys, status)) return;
  const size_t n = keys.size();
  if (!CheckLength("locations", static_cast<size_t>(request.locations_size()), n, status) ||
      !CheckLength("checksums", static_cast<size_t>(request.checksums_size()), n, status) ||
      !CheckOwner(request.client_id(), request.segment_id(), status)) {
    return;
  }
  std::vector<DiskRecord> records(n);
  for (size_t i = 0; i < n; ++i) {
    const int k = static_cast<int>(i);
    const rpc::DiskLocation& l = request.locations(k);
    records[i].key = std::move(keys[i]);
    records[i].location = DiskLocation{l.region(), l.generation(), l.offset(), l.size()};
    records[i].checksum = request.checksums(k);
  }
  wire::EncodeResults(master_.AddDiskReplicas(request.segment_id(), records),
                      response->mutable_results());
}

void MasterRpcHandler::CopyToDisk(const rpc::CopyToDiskRequest& request,
                                  rpc::BatchResponse* response) {
  std::vector<std::string> keys;
  if (!Keys(request.keys(), &keys, response->mutable_status())) return;
  wire::EncodeResults(master_.CopyToDisk(keys), response->mutable_results());
}

void MasterRpcHandler::PromoteStart(const rpc::PromoteStartRequest& request,
                                    rpc::PlacementResponse* response) {
  std::vector<std::string> keys;
  if (!Keys(request.keys(), &keys, response->mutable_status())) return;
  wire::EncodePlacements(master_.PromoteStart(keys, request.min_hits()), response);
}

void MasterRpcHandler::PromoteEnd(const rpc::PromoteEndRequest& request,
                                  rpc::BatchResponse* response) {
  rpc::CallStatus* status = response->mutable_status();
  std::vector<std::string> keys;
  if (!Keys(request.keys(), &keys, status) ||
      !CheckLength("promotion_ids", static_cast<size_t>(request.promotion_ids_size()), keys.size(),
                   status) ||
      !CheckLength("ok", static_cast<size_t>(request.ok_size()), keys.size(), status)) {
    return;
  }
  std::vector<uint64_t> ids(request.promotion_ids().begin(), request.promotion_ids().end());
  std::vector<bool> ok(request.ok().begin(), request.ok().end());
  wire::EncodeResults(master_.PromoteEnd(keys, ids, ok), response->mutable_results());
}

void MasterRpcHandler::Stats(const rpc::StatsRequest& /*request*/, rpc::StatsResponse* response) {
  if (t_scope != nullptr) {  // a tenant sees its own objects and the segments it is placed on
    const std::string tenant =
        t_scope->empty() ? std::string() : t_scope->substr(1, t_scope->size() - 2);
    std::map<std::string, MasterStats> by_tenant;
    (void)master_.Stats(&by_tenant);
    wire::EncodeStats(by_tenant[tenant], response);
    const std::string pool = master_.segments().PlacementPool(tenant);
    for (const SegmentUsage& usage : master_.segments().Usage()) {
      auto seg = master_.segments().Find(usage.id);
      if (!seg || seg->options.tenant != pool) continue;
      rpc::SegmentUsage* out = response->add_segment_usage();
      out->set_id(usage.id);
      out->set_name(usage.name);
      out->set_capacity(usage.capacity);
      out->set_used(usage.used);
    }
    response->set_master_incarnation(incarnation_);
    return;
  }
  wire::EncodeStats(master_.Stats(), response);
  response->set_clients(clients_.size());
  response->set_segments(master_.segments().Count());
  response->set_expired_clients(clients_.expired_total());
  response->set_master_incarnation(incarnation_);
  const MasterOptions& mo = master_.options();
  response->set_eviction_policy(master_.policy().name());
  response->set_high_watermark(mo.high_watermark);
  response->set_eviction_ratio(mo.eviction_ratio);
  response->set_lease_ttl_ms(static_cast<uint64_t>(mo.lease_ttl.count()));
  for (const TransferCount& count : clients_.TransferTotals()) {
    rpc::TransferCount* out = response->add_transfers();
    out->set_transport(count.transport);
    out->set_read_bytes(count.read_bytes);
    out->set_written_bytes(count.written_bytes);
  }
  uint64_t quarantined = 0;
  for (const SegmentUsage& usage : master_.segments().Usage()) {
    rpc::SegmentUsage* out = response->add_segment_usage();
    out->set_id(usage.id);
    out->set_name(usage.name);
    out->set_capacity(usage.capacity);
    out->set_used(usage.used);
    quarantined += usage.quarantined;
  }
  response->set_quarantined_bytes(quarantined);
  for (const SegmentRecovery& r : master_.Recoveries()) {
    rpc::SegmentRecovery* out = response->add_recoveries();
    out->set_segment(r.segment);
    out->set_name(r.name);
    out->set_links(r.links);
    out->set_reported(r.reported);
    out->set_memory_replicas(r.memory_replicas);
    out->set_disk_replicas(r.disk_replicas);
    out->set_bytes(r.bytes);
    out->set_rejected(r.rejected);
    out->set_seconds(r.seconds);
    out->set_done(r.done);
  }
}

size_t MasterRpcHandler::ReapSilentClients() {
  std::vector<ExpiredClient> expired = clients_.ExpireSilent();
  for (const ExpiredClient& client : expired) {
    const uint64_t objects_before = master_.Stats().objects;
    for (SegmentId s : client.segments) (void)master_.UnmountSegment(s);
    const uint64_t objects_after = master_.Stats().objects;
    spdlog::warn(
        "client {} (host '{}') expired: no heartbeat for {} ms (client_ttl {} ms); unmounted "
        "segments: {}; objects {} -> {}",
        client.id, Printable(client.host), client.silent_for.count(), clients_.ttl().count(),
        JoinSegments(client.segments), objects_before, objects_after);
  }
  return expired.size();
}

// ---- gRPC service -------------------------------------------------------------------------------

// Every RPC of the Master service: X(Name, Request, Response).
#define TIERKV_MASTER_RPCS(X)                                      \
  X(RegisterClient, RegisterClientRequest, RegisterClientResponse) \
  X(Heartbeat, HeartbeatRequest, HeartbeatResponse)                \
  X(UnregisterClient, UnregisterClientRequest, StatusResponse)     \
  X(MountSegment, MountSegmentRequest, MountSegmentResponse)       \
  X(UnmountSegment, UnmountSegmentRequest, StatusResponse)         \
  X(PutStart, PutStartRequest, PlacementResponse)                  \
  X(PutEnd, PutEndRequest, BatchResponse)                          \
  X(PutRevoke, PutRevokeRequest, BatchResponse)                    \
  X(Exists, ExistsRequest, ExistsResponse)                         \
  X(GetReplicas, GetReplicasRequest, GetReplicasResponse)          \
  X(Remove, RemoveRequest, BatchResponse)                          \
  X(RemoveAll, RemoveAllRequest, CountResponse)                    \
  X(RemoveByRegex, RemoveByRegexRequest, CountResponse)            \
  X(ClearReplicas, ClearReplicasRequest, BatchResponse)            \
  X(DropDiskReplicas, DropDiskReplicasRequest, CountResponse)      \
  X(AddDiskReplicas, AddDiskReplicasRequest, BatchResponse)        \
  X(CopyToDisk, CopyToDiskRequest, BatchResponse)                  \
  X(PromoteStart, PromoteStartRequest, PlacementResponse)          \
  X(PromoteEnd, PromoteEndRequest, BatchResponse)                  \
  X(Stats, StatsRequest, StatsResponse)

namespace {

// The histogram index of each RPC, and its label value.
enum RpcMethod : size_t {
#define TIERKV_RPC_ENUM(Name, Request, Response) kRpc##Name,
  TIERKV_MASTER_RPCS(TIERKV_RPC_ENUM)
#undef TIERKV_RPC_ENUM
};

std::vector<std::string> RpcMethodNames() {
  return {
#define TIERKV_RPC_NAME(Name, Request, Response) #Name,
      TIERKV_MASTER_RPCS(TIERKV_RPC_NAME)
#undef TIERKV_RPC_NAME
  };
}

// Answers of a master that does not lead, and the epoch stamp of a leader's answers.
template <typename Response>
void AnswerNotLeader(Response* response, const std::string& leader) {
  response->Clear();
  const std::string why =
      leader.empty() ? std::string("this tierkv master is not the leader (no leader known)")
                     : "this tierkv master is not the leader; the leader is " + leader;
  if constexpr (std::is_same_v<Response, rpc::HeartbeatResponse>) {
    response->set_not_leader(true);
  } else {
    rpc::CallStatus* status = response->mutable_status();
    status->set_not_leader(true);
    status->set_code(ToInt(ErrorCode::RPC_FAIL));
    status->set_message(why);
  }
}

template <typename Response>
void StampEpoch(Response* response, uint64_t epoch) {
  if (epoch == 0) return;
  if constexpr (std::is_same_v<Response, rpc::HeartbeatResponse>) {
    response->set_leader_epoch(epoch);
  } else {
    response->mutable_status()->set_leader_epoch(epoch);
  }
}

}  // namespace

// One leadership term: the master state that serves while it lasts (the whole life of a
// server without high availability).
struct MasterServer::Term {
  Term(const MasterServerOptions& o, uint64_t incarnation, uint64_t epoch_in,
       std::shared_ptr<const TermLease> lease_in)
      : epoch(epoch_in),
        lease(std::move(lease_in)),
        master(o.master),
        clients(o.master.clock, o.client_ttl),
        handler(master, clients, incarnation) {}
  bool Valid() const { return lease == nullptr || lease->Valid(); }

  const uint64_t epoch;
  const std::shared_ptr<const TermLease> lease;
  MasterService master;
  ClientRegistry clients;
  MasterRpcHandler handler;
  std::shared_ptr<prometheus::Collectable> collector;  // in the registry while the term runs
  std::unique_ptr<PeriodicThread> maintenance;         // MasterService::RunMaintenance
  std::unique_ptr<PeriodicThread> reaper;              // expires silent clients
};

class MasterServer::Service final : public rpc::Master::Service {
 public:
  // `latency` null: calls are not timed.
  Service(MasterServer& server, LatencyHistograms* latency) : server_(server), latency_(latency) {}

#define TIERKV_RPC(Name, Request, Response)                                    \
  grpc::Status Name(grpc::ServerContext* context, const rpc::Request* request, \
                    rpc::Response* response) override {                        \
    if (!Authenticated(*context)) return Unauthenticated(*context);            \
    if (!MayCall(*context, kRpc##Name)) return NotAStore(*context, #Name);     \
    MasterRpcHandler::CallScope scope(Scope(*context));                        \
    const auto start = std::chrono::steady_clock::now();                       \
    std::shared_ptr<Term> term = server_.CurrentTerm();                        \
    /* Fencing: checked before the call runs and again before it answers. */   \
    if (term == nullptr || !term->Valid()) {                                   \
      NotLeader(response);                                                     \
    } else {                                                                   \
      term->handler.Name(*request, response);                                  \
      if (!term->Valid()) {                                                    \
        NotLeader(response);                                                   \
      } else {                                                                 \
        Stamp(response, *term);                                                \
      }                                                                        \
    }                                                                          \
    if (latency_ != nullptr) {                                                 \
      latency_->Observe(kRpc##Name, std::chrono::steady_clock::now() - start); \
    }                                                                          \
    return grpc::Status::OK;                                                   \
  }
  TIERKV_MASTER_RPCS(TIERKV_RPC)
#undef TIERKV_RPC

  grpc::Status TierMoves(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<rpc::TierMoveRequest, rpc::TierMoveReply>* stream) override {
    if (!Authenticated(*context)) return Unauthenticated(*context);
    if (!IsStore(*context)) return NotAStore(*context, "TierMoves");
    std::shared_ptr<Term> term = server_.CurrentTerm();
    if (term == nullptr || !term->Valid()) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "this tierkv master is not the leader");
    }
    {
      std::lock_guard lock(streams_mu_);
      if (closing_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the master is stopping");
      streams_.emplace(context, term.get());
    }
    struct Forget {  // the context leaves the set however the call ends
      Service* self;
      grpc::ServerContext* context;
      ~Forget() {
        std::lock_guard lock(self->streams_mu_);
        self->streams_.erase(context);
      }
    } forget{this, context};
    MasterRpcHandler& h = term->handler;
    MasterService& master = term->master;
    rpc::TierMoveReply hello;
    if (!stream->Read(&hello)) {
      return grpc::Status(grpc::StatusCode::CANCELLED, "no first message");
    }
    // Every write on the stream (tier moves, index batches, the accept) goes through this lock.
    std::mutex write_mu;
    auto write = [stream, &write_mu](const rpc::TierMoveRequest& request) {
      std::lock_guard lock(write_mu);
      return stream->Write(request);
    };
    auto mover = h.OpenTierMoves(hello, write);
    if (!mover.ok()) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, mover.status().ToString());
    }
    const uint32_t segment = hello.segment_id();
    std::unique_ptr<MasterService::IndexLink> link;
    if (hello.has_index()) {
      auto opened = master.OpenIndexLink(segment);
      if (!opened.ok()) {
        if (*mover) h.CloseTierMoves(segment, *mover, opened.status().ToString());
        return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, opened.status().ToString());
      }
      link = std::move(opened).value();
      // The owner's report comes first; the stream is accepted once it is adopted (or compared).
      rpc::TierMoveReply chunk;
      bool complete = false;
      std::vector<IndexEntry> memory, disk;
      while (!complete && stream->Read(&chunk)) {
        memory.clear();
        disk.clear();
        wire::DecodeIndexReport(chunk.report(), &memory, &disk);
        if (chunk.report().total() > 0) link->Expect(chunk.report().total());
        link->Add(memory, disk);
        complete = chunk.report().last();
      }
      Result<SegmentRecovery> linked =
          complete ? link->Finish()
                   : Result<SegmentRecovery>(Status(ErrorCode::TRANSFER_FAIL,
                                                    "the stream ended during its index report"));
      if (!linked.ok()) {
        link->feed()->Detach(link->generation());
        if (*mover) h.CloseTierMoves(segment, *mover, linked.status().ToString());
        spdlog::warn("segment link {}: {}", segment, linked.status().ToString());
        return grpc::Status(grpc::StatusCode::ABORTED, linked.status().ToString());
      }
    }
    // The owner counts the stream as accepted once it reads this.
    bool announced = false;
    if (*mover) {
      announced = (*mover)->Announce();
    } else {
      announced = write(rpc::TierMoveRequest());
    }
    std::atomic<bool> stop_sending{false};
    std::thread sender;
    if (announced && link) {
      // The index feed: batches in order; a leader whose lease ran out sends nothing more.
      sender = std::thread([&, feed = link->feed(), generation = link->generation()] {
        while (!stop_sending.load()) {
          std::optional<IndexBatch> batch = feed->Next(generation, Millis(100));
          if (!term->Valid()) {
            context->TryCancel();
            return;
          }
          if (!batch) {
            if (!feed->attached()) return;
            continue;
          }
          rpc::TierMoveRequest request;
          wire::EncodeIndexBatch(*batch, request.mutable_index());
          if (!write(request)) {
            context->TryCancel();
            return;
          }
        }
      });
    }
    if (announced) {
      rpc::TierMoveReply reply;
      while (stream->Read(&reply)) {
        if (reply.index_ack() != 0) {
          if (link) link->feed()->Acked(link->generation(), reply.index_ack());
          continue;
        }
        if (*mover) (*mover)->Deliver(reply);
      }
    }
    stop_sending.store(true);
    if (link) link->feed()->Detach(link->generation());
    if (sender.joinable()) sender.join();
    const std::string why = context->IsCancelled() ? "cancelled" : "the store closed it";
    if (*mover) {
      h.CloseTierMoves(segment, *mover, why);
    } else {
      spdlog::info("segment link {}: stream ended ({})", segment, why);
    }
    return grpc::Status::OK;
  }

  // Ends the open TierMoves streams of `term` (all of them when null), and with `closing` refuses
  // new ones (shutdown).
  void CancelStreams(const Term* term, bool closing) {
    std::lock_guard lock(streams_mu_);
    if (closing) closing_ = true;
    for (const auto& [context, of] : streams_) {
      if (term == nullptr || of == term) context->TryCancel();
    }
  }

 private:
  static std::string_view PresentedToken(const grpc::ServerContext& context) {
    const auto& metadata = context.client_metadata();
    auto it = metadata.find(kTokenMetadataKey);
    if (it == metadata.end()) return {};
    return std::string_view(it->second.data(), it->second.size());
  }
  // Whether the call carries an accepted token — the cluster's, a store's, the admin's or a
  // tenant's (always, on a master without tokens).
  bool Authenticated(const grpc::ServerContext& context) const {
    const MasterServerOptions& o = server_.options_;
    if (o.tokens == nullptr) return true;
    const std::string_view presented = PresentedToken(context);
    if (o.tokens->Accepts(presented)) return true;
    if (o.store_tokens != nullptr && o.store_tokens->Accepts(presented)) return true;
    if (o.admin_tokens != nullptr && o.admin_tokens->Accepts(presented)) return true;
    for (const TenantCredential& t : o.tenants) {
      if (t.tokens->Accepts(presented)) return true;
    }
    return false;
  }
  // The namespace the caller may act in (MasterRpcHandler::CallScope): with tenants
  // configured, a tenant's token scopes it to its prefix and the cluster token to the default
  // tenant's keys; a store's and the admin's reach everything. Without tenants: everything.
  const std::string* Scope(const grpc::ServerContext& context) const {
    const MasterServerOptions& o = server_.options_;
    if (o.tenants.empty()) return nullptr;
    const std::string_view presented = PresentedToken(context);
    for (const TenantCredential& t : o.tenants) {
      if (t.tokens->Accepts(presented)) return &t.prefix;
    }
    if (o.admin_tokens != nullptr && o.admin_tokens->Accepts(presented)) return nullptr;
    if (o.store_tokens != nullptr && o.store_tokens->Accepts(presented)) return nullptr;
    static const std::string kDefaultTenant;
    return &kDefaultTenant;
  }
  // Whether the caller holds a store's credential: the store token where one is configured,
  // else any accepted token (one credential for the whole cluster).
  bool IsStore(const grpc::ServerContext& context) const {
    const TokenSet* stores = server_.options_.store_tokens.get();
    return stores == nullptr || stores->Accepts(PresentedToken(context));
  }
  // Calls that give a segment to the pool, or report what a segment holds, need a store's
  // credential.
  bool MayCall(const grpc::ServerContext& context, RpcMethod method) const {
    const bool store_only = method == kRpcMountSegment || method == kRpcAddDiskReplicas ||
                            method == kRpcDropDiskReplicas;
    return !store_only || IsStore(context);
  }
  grpc::Status NotAStore(const grpc::ServerContext& context, const char* method) {
    server_.unauthenticated_.fetch_add(1);
    spdlog::warn("tierkv master: refused {} from {}: it needs a store's credential", method,
                 context.peer());
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        std::string(method) +
                            " needs a store's credential (the master's --store-token-file): "
                            "this process holds the cluster token of requesters");
  }
  // Counted, and logged at most once a second (with the peer, never the token presented).
  grpc::Status Unauthenticated(const grpc::ServerContext& context) {
    const uint64_t refused = server_.unauthenticated_.fetch_add(1) + 1;
    const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                            std::chrono::steady_clock::now().time_since_epoch())
                            .count();
    if (last_auth_log_s_.exchange(now) != now) {
      spdlog::warn(
          "tierkv master: refused a call from {}: no valid cluster token ({} refused so "
          "far)",
          context.peer(), refused);
    }
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "this tierkv master requires the cluster token: the call carried none, or "
                        "one it does not accept (config key cluster_token_file, or --token-file)");
  }

  template <typename Response>
  void Stamp(Response* response, const Term& term) {
    StampEpoch(response, term.epoch);
    if constexpr (std::is_same_v<Response, rpc::StatsResponse>) {
      if (server_.options_.standby) {
        response->set_ha(true);
        response->set_leader(server_.address());
        response->set_leader_epoch(term.epoch);
      }
    }
  }

  template <typename Response>
  void NotLeader(Response* response) {
    std::string leader;
    uint64_t epoch = 0;
    server_.LeaderHint(&leader, &epoch);
    AnswerNotLeader(response, leader);
    if constexpr (std::is_same_v<Response, rpc::StatsResponse>) {
      response->set_ha(true);
      response->set_leader(leader);
      response->set_leader_epoch(epoch);
      response->set_master_incarnation(server_.incarnation_);
    }
  }

  MasterServer& server_;
  LatencyHistograms* const latency_;
  std::atomic<int64_t> last_auth_log_s_{0};  // the second of the last refusal logged
  std::mutex streams_mu_;
  std::map<grpc::ServerContext*, const Term*> streams_;  // guarded by streams_mu_
  bool closing_ = false;                                 // guarded by streams_mu_
};

#undef TIERKV_MASTER_RPCS

// ---- MasterServer -------------------------------------------------------------------------------

MasterServer::MasterServer(MasterServerOptions options)
    : options_(std::move(options)), incarnation_(NewIncarnation()) {}

std::shared_ptr<MasterServer::Term> MasterServer::NewTerm(uint64_t epoch,
                                                          std::shared_ptr<const TermLease> lease) {
  MasterServerOptions o = options_;
  // Segment ids of a new term must not alias an earlier term's (or an earlier master's) in
  // requesters' caches: start from a random id (below 2^31, so they stay far from wrapping).
  if (o.master.first_segment_id <= 1) {
    o.master.first_segment_id = static_cast<SegmentId>(NewIncarnation() % (1u << 30)) + 1;
  }
  // Put ids above every earlier master's: the wall clock in microseconds (see MasterOptions).
  if (o.master.first_put_id <= 1) {
    o.master.first_put_id =
        static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                  std::chrono::system_clock::now().time_since_epoch())
                                  .count());
  }
  auto term = std::make_shared<Term>(o, incarnation_, epoch, std::move(lease));
  term->handler.set_tier_move_timeout(o.tier_move_timeout);
  term->handler.set_client_defaults(o.client_defaults);
  const Millis maint =
      o.maintenance_period.count() > 0 ? o.maintenance_period : MaintenancePeriod(o.master);
  const Millis reap = Millis(std::max<int64_t>(o.client_ttl.count() / 4, 1));
  Term* t = term.get();
  term->maintenance = std::make_unique<PeriodicThread>(maint, [t] {
    if (t->Valid()) t->master.RunMaintenance();
  });
  term->reaper = std::make_unique<PeriodicThread>(reap, [t] {
    if (t->Valid()) t->handler.ReapSilentClients();
  });
  if (o.metrics != nullptr) {
    term->collector = std::make_shared<MasterCollector>(term->master, &term->clients);
    o.metrics->Add(term->collector);
  }
  return term;
}

Result<std::unique_ptr<MasterServer>> MasterServer::Start(MasterServerOptions options) {
  auto bad = [](std::string m) { return Status(ErrorCode::INVALID_PARAMS, std::move(m)); };
  if (options.host.empty()) return bad("host is empty");
  if (options.port < 0 || options.port > 65535) {
    return bad("port " + std::to_string(options.port) + " is not in 0..65535");
  }
  if (options.client_ttl.count() <= 0) return bad("client TTL must be > 0 ms");
  if (options.master.clock == nullptr) options.master.clock = SystemClock::Instance();

  std::unique_ptr<MasterServer> server(new MasterServer(std::move(options)));
  const MasterServerOptions& o = server->options_;
  // IPv6 literals need brackets in a gRPC address.
  const std::string host =
      o.host.find(':') != std::string::npos && o.host.front() != '[' ? "[" + o.host + "]" : o.host;
  const std::string listen = host + ":" + std::to_string(o.port);

  if (o.metrics != nullptr) {
    server->rpc_latency_ = std::make_shared<LatencyHistograms>(
        "tierkv_master_rpc_duration_seconds",
        "Time the master spent in an RPC handler (gRPC's own queueing and transport excluded)",
        "method", RpcMethodNames());
  }
  if (!o.standby) server->term_ = server->NewTerm(0, nullptr);
  server->service_ = std::make_unique<Service>(*server, server->rpc_latency_.get());
  grpc::ServerBuilder builder;
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
  if (!o.tls_cert_pem.empty()) {
    grpc::SslServerCredentialsOptions ssl(
        o.tls_ca_pem.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                             : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    ssl.pem_root_certs = o.tls_ca_pem;
    ssl.pem_key_cert_pairs.push_back({o.tls_key_pem, o.tls_cert_pem});
    credentials = grpc::SslServerCredentials(ssl);
  }
  builder.AddListeningPort(listen, credentials, &server->port_);
  // Connections that never finish their handshake, or carry no call for this long, are closed
  // (a silent connection must not hold a descriptor forever; clients heartbeat every second).
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
                             static_cast<int>(o.handshake_timeout.count()));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS,
                             static_cast<int>(o.idle_timeout.count()));
  builder.RegisterService(server->service_.get());
  builder.SetMaxReceiveMessageSize(wire::kMaxMessageBytes);
  builder.SetMaxSendMessageSize(wire::kMaxMessageBytes);
  // One master per port: without this, gRPC's SO_REUSEPORT lets a second master bind the same
  // port and silently split the clients between the two.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  server->server_ = builder.BuildAndStart();
  if (!server->server_ || server->port_ == 0) {
    server->server_.reset();
    return Status(ErrorCode::RPC_FAIL,
                  "cannot listen on " + listen + " (port in use, or not an address of this host)");
  }
  if (o.metrics != nullptr) {
    o.metrics->Add(server->rpc_latency_);
    MasterServer* s = server.get();
    server->auth_collector_ = std::make_shared<AuthCollector>("tierkv_master_", [s] {
      return AuthFigures{s->unauthenticated(), 0};
    });
    o.metrics->Add(server->auth_collector_);
  }
  return server;
}

MasterServer::~MasterServer() { Shutdown(); }

void MasterServer::BeginTerm(uint64_t epoch, std::shared_ptr<const TermLease> lease) {
  if (!options_.standby) return;
  EndTerm();
  auto term = NewTerm(epoch, std::move(lease));
  std::lock_guard lock(term_mu_);
  term_ = std::move(term);
  leader_hint_ = address();
  leader_hint_epoch_ = epoch;
}

void MasterServer::EndTerm() {
  if (!options_.standby) return;
  std::shared_ptr<Term> ended;
  {
    std::lock_guard lock(term_mu_);
    ended = std::move(term_);
    term_ = nullptr;
  }
  if (!ended) return;
  if (options_.metrics != nullptr && ended->collector) {
    options_.metrics->Remove(ended->collector.get());
  }
  if (service_) service_->CancelStreams(ended.get(), /*closing=*/false);
  ended->maintenance.reset();
  ended->reaper.reset();
  // The state goes with the last call still holding the term.
}

void MasterServer::SetLeader(const std::string& address, uint64_t epoch) {
  std::lock_guard lock(term_mu_);
  leader_hint_ = address;
  leader_hint_epoch_ = epoch;
}

void MasterServer::LeaderHint(std::string* address, uint64_t* epoch) const {
  std::lock_guard lock(term_mu_);
  *address = leader_hint_;
  *epoch = leader_hint_epoch_;
}

std::shared_ptr<MasterServer::Term> MasterServer::CurrentTerm() const {
  std::lock_guard lock(term_mu_);
  return term_;
}

bool MasterServer::leading() const {
  auto term = CurrentTerm();
  return term != nullptr && term->Valid();
}

uint64_t MasterServer::epoch() const {
  auto term = CurrentTerm();
  return term ? term->epoch : 0;
}

MasterService& MasterServer::master() { return CurrentTerm()->master; }

std::vector<std::string> MasterServer::SegmentNames() const {
  std::vector<std::string> names;
  if (std::shared_ptr<Term> term = CurrentTerm()) {
    for (const SegmentUsage& u : term->master.segments().Usage()) {
      names.push_back(u.name.substr(0, u.name.find('@')));
    }
  }
  return names;
}
ClientRegistry& MasterServer::clients() { return CurrentTerm()->clients; }
MasterRpcHandler& MasterServer::handler() { return CurrentTerm()->handler; }

void MasterServer::Shutdown() {
  std::call_once(shutdown_once_, [this] {
    std::shared_ptr<Term> term;
    {
      std::lock_guard lock(term_mu_);
      term = std::move(term_);
      term_ = nullptr;
    }
    // First: once Remove returns, no scrape reads the master or the histograms any more.
    if (options_.metrics != nullptr) {
      if (term && term->collector) options_.metrics->Remove(term->collector.get());
      if (rpc_latency_) options_.metrics->Remove(rpc_latency_.get());
      if (auth_collector_) options_.metrics->Remove(auth_collector_.get());
    }
    if (service_) service_->CancelStreams(nullptr, /*closing=*/true);
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    if (term) {
      term->maintenance.reset();
      term->reaper.reset();
    }
    if (server_) server_->Wait();
  });
}

std::string MasterServer::address() const {
  const bool v6 = options_.host.find(':') != std::string::npos && options_.host.front() != '[';
  return (v6 ? "[" + options_.host + "]" : options_.host) + ":" + std::to_string(port_);
}

}  // namespace tierkv
