#include "rpc/master_rpc_handler.h"

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

}  // namespace tierkv
