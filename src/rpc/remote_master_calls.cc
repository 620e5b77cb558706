// RemoteMaster's data-path and bookkeeping calls (the SSD tier's, the two-phase put, reads,
// removal, stats): each one request, sent through Call() (rpc/remote_master_call.h). The
// connection, registration, heartbeat and segments are in remote_master.cc.
#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include <string>
#include <utility>
#include <vector>

#include "rpc/remote_master.h"
#include "rpc/remote_master_call.h"
#include "rpc/wire.h"
#include "tierkv/master.grpc.pb.h"

namespace tierkv {
namespace {

MasterProcessStats DecodeProcessStats(const rpc::StatsResponse& response) {
  MasterProcessStats out;
  out.master = wire::DecodeStats(response);
  out.clients = response.clients();
  out.segments = response.segments();
  out.expired_clients = response.expired_clients();
  out.incarnation = response.master_incarnation();
  out.eviction_policy = response.eviction_policy();
  out.high_watermark = response.high_watermark();
  out.eviction_ratio = response.eviction_ratio();
  out.lease_ttl_ms = response.lease_ttl_ms();
  for (const rpc::TransferCount& count : response.transfers()) {
    out.transfers.push_back({count.transport(), count.read_bytes(), count.written_bytes()});
  }
  out.quarantined_bytes = response.quarantined_bytes();
  out.meta_port = response.meta_port();
  for (const rpc::SegmentRecovery& r : response.recoveries()) {
    out.recoveries.push_back(SegmentRecovery{r.segment(), r.name(), r.links(), r.reported(),
                                             r.memory_replicas(), r.disk_replicas(), r.bytes(),
                                             r.rejected(), r.seconds(), r.done()});
  }
  out.ha = response.ha();
  out.leading = !response.status().not_leader();
  out.leader = response.leader();
  out.leader_epoch = response.leader_epoch();
  out.segment_usage.reserve(static_cast<size_t>(response.segment_usage_size()));
  for (const rpc::SegmentUsage& usage : response.segment_usage()) {
    out.segment_usage.push_back(
        SegmentUsage{usage.id(), usage.name(), usage.capacity(), usage.used()});
  }
  return out;
}

}  // namespace

using remote_master_internal::CodeOf;
using remote_master_internal::DeadlineIn;
using remote_master_internal::Describe;

// ---- SSD tier bookkeeping -----------------------------------------------------------------------

uint64_t RemoteMaster::DropDiskReplicas(SegmentId segment, uint32_t region, uint64_t generation,
                                        const std::vector<std::string>& keys) {
  const SegmentId current = CurrentSegmentId(segment);
  if (current == 0) {
    spdlog::warn("DropDiskReplicas: segment {} is not mounted by this client", segment);
    return 0;
  }
  rpc::DropDiskReplicasRequest request;
  request.set_client_id(client_id_.load());
  request.set_segment_id(current);
  request.set_region(region);
  request.set_generation(generation);
  wire::EncodeKeys(keys, request.mutable_keys());
  rpc::CountResponse response;
  grpc::Status status = Call("DropDiskReplicas", false, &response,
                             [&](const Endpoint& ep, grpc::ClientContext* context) {
                               return ep.stub->DropDiskReplicas(context, request, &response);
                             });
  Status st =
      status.ok() ? wire::CallStatusOf(response.status()) : RpcFailure("DropDiskReplicas", status);
  if (!st.ok()) {
    spdlog::warn("DropDiskReplicas on segment {}: {}", segment, st.ToString());
    return 0;
  }
  return response.count();
}

std::vector<Status> RemoteMaster::AddDiskReplicas(SegmentId segment,
                                                  const std::vector<DiskRecord>& records) {
  const size_t n = records.size();
  if (n == 0) return {};
  const SegmentId current = CurrentSegmentId(segment);
  if (current == 0) {
    return std::vector<Status>(
        n, Status(ErrorCode::SEGMENT_NOT_FOUND,
                  "segment " + std::to_string(segment) + " is not mounted by this client"));
  }
  rpc::AddDiskReplicasRequest request;
  request.set_client_id(client_id_.load());
  request.set_segment_id(current);
  std::vector<std::string> keys;
  keys.reserve(n);
  for (const DiskRecord& r : records) keys.push_back(r.key);
  wire::EncodeKeys(keys, request.mutable_keys());
  request.mutable_locations()->Reserve(static_cast<int>(n));
  request.mutable_checksums()->Reserve(static_cast<int>(n));
  for (const DiskRecord& r : records) {
    rpc::DiskLocation* l = request.add_locations();
    l->set_region(r.location.region);
    l->set_generation(r.location.generation);
    l->set_offset(r.location.offset);
    l->set_size(r.location.size);
    request.add_checksums(r.checksum);
  }
  rpc::BatchResponse response;
  grpc::Status status = Call("AddDiskReplicas", false, &response,
                             [&](const Endpoint& ep, grpc::ClientContext* context) {
                               return ep.stub->AddDiskReplicas(context, request, &response);
                             });
  if (!status.ok()) return std::vector<Status>(n, RpcFailure("AddDiskReplicas", status));
  return wire::DecodeResults(response.status(), response.results(), n, "AddDiskReplicas");
}

std::vector<Status> RemoteMaster::CopyToDisk(const std::vector<std::string>& keys) {
  if (keys.empty()) return {};
  rpc::CopyToDiskRequest request;
  wire::EncodeKeys(keys, request.mutable_keys());
  rpc::BatchResponse response;
  grpc::Status status =
      Call("CopyToDisk", false, &response, [&](const Endpoint& ep, grpc::ClientContext* context) {
        return ep.stub->CopyToDisk(context, request, &response);
      });
  if (!status.ok()) return std::vector<Status>(keys.size(), RpcFailure("CopyToDisk", status));
  return wire::DecodeResults(response.status(), response.results(), keys.size(), "CopyToDisk");
}

std::vector<Result<PutStartResult>> RemoteMaster::PromoteStart(const std::vector<std::string>& keys,
                                                               uint32_t min_hits) {
  if (keys.empty()) return {};
  rpc::PromoteStartRequest request;
  wire::EncodeKeys(keys, request.mutable_keys());
  request.set_min_hits(min_hits);
  rpc::PlacementResponse response;
  grpc::Status status =
      Call("PromoteStart", false, &response, [&](const Endpoint& ep, grpc::ClientContext* context) {
        return ep.stub->PromoteStart(context, request, &response);
      });
  if (!status.ok()) {
    return std::vector<Result<PutStartResult>>(keys.size(), RpcFailure("PromoteStart", status));
  }
  return wire::DecodePlacements(response, keys.size(), "PromoteStart");
}

std::vector<Status> RemoteMaster::PromoteEnd(const std::vector<std::string>& keys,
                                             const std::vector<uint64_t>& promotion_ids,
                                             const std::vector<bool>& ok) {
  if (keys.empty()) return {};
  rpc::PromoteEndRequest request;
  wire::EncodeKeys(keys, request.mutable_keys());
  request.mutable_promotion_ids()->Add(promotion_ids.begin(), promotion_ids.end());
  for (bool b : ok) request.add_ok(b);
  rpc::BatchResponse response;
  grpc::Status status =
      Call("PromoteEnd", false, &response, [&](const Endpoint& ep, grpc::ClientContext* context) {
        return ep.stub->PromoteEnd(context, request, &response);
      });
  if (!status.ok()) return std::vector<Status>(keys.size(), RpcFailure("PromoteEnd", status));
  return wire::DecodeResults(response.status(), response.results(), keys.size(), "PromoteEnd");
}

// ---- Two-phase put ------------------------------------------------------------------------------

std::vector<Result<PutStartResult>> RemoteMaster::PutStart(const std::vector<std::string>& keys,
                                                           const std::vector<uint64_t>& sizes,
                                                           const ReplicateConfig& config) {
  return StartPuts(keys, sizes, config, /*upsert=*/false);
}

std::vector<Result<PutStartResult>> RemoteMaster::UpsertStart(const std::vector<std::string>& keys,
                                                              const std::vector<uint64_t>& sizes,
                                                              const ReplicateConfig& config) {
  return StartPuts(keys, sizes, config, /*upsert=*/true);
}

std::vector<Result<PutStartResult>> RemoteMaster::StartPuts(const std::vector<std::string>& keys,
                                                            const std::vector<uint64_t>& sizes,
                                                            const ReplicateConfig& config,
                                                            bool upsert) {
  if (keys.empty()) return {};
  rpc::PutStartRequest request;
  request.set_upsert(upsert);
  wire::EncodeKeys(keys, request.mutable_keys());
  request.mutable_sizes()->Add(sizes.begin(), sizes.end());
  wire::EncodeConfig(config, request.mutable_config());
  rpc::PlacementResponse response;
  grpc::Status status =
      Call("PutStart", false, &response, [&](const Endpoint& ep, grpc::ClientContext* context) {
        return ep.Unary(MetaMethod::kPutStart, &rpc::Master::Stub::PutStart, context, request,
                        &response);
      });
  if (!status.ok()) {
    return std::vector<Result<PutStartResult>>(keys.size(), RpcFailure("PutStart", status));
  }
  return wire::DecodePlacements(response, keys.size(), "PutStart");
}

std::vector<Status> RemoteMaster::PutEnd(const std::vector<std::string>& keys,
                                         const std::vector<uint64_t>& put_ids,
                                         const std::vector<uint64_t>& checksums) {
  if (keys.empty()) return {};
  rpc::PutEndRequest request;
  wire::EncodeKeys(keys, request.mutable_keys());
  request.mutable_put_ids()->Add(put_ids.begin(), put_ids.end());
  request.mutable_checksums()->Add(checksums.begin(), checksums.end());
  rpc::BatchResponse response;
  grpc::Status status =
      Call("PutEnd", false, &response, [&](const Endpoint& ep, grpc::ClientContext* context) {
        return ep.Unary(MetaMethod::kPutEnd, &rpc::Master::Stub::PutEnd, context, request,
                        &response);
      });
  if (!status.ok()) return std::vector<Status>(keys.size(), RpcFailure("PutEnd", status));
  return wire::DecodeResults(response.status(), response.results(), keys.size(), "PutEnd");
}

std::vector<Status> RemoteMaster::PutRevoke(const std::vector<std::string>& keys,
                                            const std::vector<uint64_t>& put_ids,
                                            const std::vector<SegmentId>& unreachable) {
  if (keys.empty()) return {};
  rpc::PutRevokeRequest request;
  wire::EncodeKeys(keys, request.mutable_keys());
  request.mutable_put_ids()->Add(put_ids.begin(), put_ids.end());
  request.mutable_unreachable_segments()->Add(unreachable.begin(), unreachable.end());
  rpc::BatchResponse response;
  grpc::Status status =
      Call("PutRevoke", false, &response, [&](const Endpoint& ep, grpc::ClientContext* context) {
        return ep.Unary(MetaMethod::kPutRevoke, &rpc::Master::Stub::PutRevoke, context, request,
                        &response);
      });
  if (!status.ok()) return std::vector<Status>(keys.size(), RpcFailure("PutRevoke", status));
  return wire::DecodeResults(response.status(), response.results(), keys.size(), "PutRevoke");
}

// ---- Reads --------------------------------------------------------------------------------------

std::vector<int> RemoteMaster::Exists(const std::vector<std::string>& keys) {
  if (keys.empty()) return {};
  rpc::ExistsRequest request;
  wire::EncodeKeys(keys, request.mutable_keys());
  rpc::ExistsResponse response;
  grpc::Status status =
      Call("Exists", true, &response, [&](const Endpoint& ep, grpc::ClientContext* context) {
        return ep.Unary(MetaMethod::kExists, &rpc::Master::Stub::Exists, context, request,
                        &response);
      });
  if (!status.ok()) {
    Status failure = RpcFailure("Exists", status);
    spdlog::debug("{}", failure.ToString());
    return std::vector<int>(keys.size(), ToInt(ErrorCode::RPC_FAIL));
  }
  return wire::DecodeExists(response, keys.size());
}

std::vector<Result<ObjectReplicas>> RemoteMaster::GetReplicas(
    const std::vector<std::string>& keys) {
  if (keys.empty()) return {};
  rpc::GetReplicasRequest request;
  wire::EncodeKeys(keys, request.mutable_keys());
  rpc::GetReplicasResponse response;
  SteadyTime sent{};
  grpc::Status status =
      Call("GetReplicas", true, &response, [&](const Endpoint& ep, grpc::ClientContext* context) {
        sent = std::chrono::steady_clock::now();
        return ep.Unary(MetaMethod::kGetReplicas, &rpc::Master::Stub::GetReplicas, context, request,
                        &response);
      });
  if (!status.ok()) {
    return std::vector<Result<ObjectReplicas>>(keys.size(), RpcFailure("GetReplicas", status));
  }
  return wire::DecodeReplicas(response, keys.size(), sent);
}

// ---- Removal ------------------------------------------------------------------------------------

Status RemoteMaster::Remove(const std::string& key, bool force) {
  std::vector<Status> out = BatchRemove({key}, force);
  return out.empty() ? Status(ErrorCode::INTERNAL_ERROR, "no result") : std::move(out[0]);
}

std::vector<Status> RemoteMaster::BatchRemove(const std::vector<std::string>& keys, bool force) {
  if (keys.empty()) return {};
  rpc::RemoveRequest request;
  wire::EncodeKeys(keys, request.mutable_keys());
  request.set_force(force);
  rpc::BatchResponse response;
  grpc::Status status =
      Call("Remove", false, &response, [&](const Endpoint& ep, grpc::ClientContext* context) {
        return ep.Unary(MetaMethod::kRemove, &rpc::Master::Stub::Remove, context, request,
                        &response);
      });
  if (!status.ok()) return std::vector<Status>(keys.size(), RpcFailure("Remove", status));
  return wire::DecodeResults(response.status(), response.results(), keys.size(), "Remove");
}

uint64_t RemoteMaster::RemoveAll(bool force) {
  rpc::RemoveAllRequest request;
  request.set_force(force);
  rpc::CountResponse response;
  grpc::Status status =
      Call("RemoveAll", false, &response, [&](const Endpoint& ep, grpc::ClientContext* context) {
        return ep.stub->RemoveAll(context, request, &response);
      });
  Status st = status.ok() ? wire::CallStatusOf(response.status()) : RpcFailure("RemoveAll", status);
  if (!st.ok()) {
    spdlog::warn("RemoveAll: {}", st.ToString());
    return 0;
  }
  return response.count();
}

Result<uint64_t> RemoteMaster::RemoveByRegex(const std::string& regex, bool force) {
  rpc::RemoveByRegexRequest request;
  request.set_regex(regex);
  request.set_force(force);
  return RemoveByRegexCall(request);
}

Result<uint64_t> RemoteMaster::RemoveInNamespace(const std::string& key_namespace,
                                                 const std::string& regex, bool force) {
  rpc::RemoveByRegexRequest request;
  request.set_regex(regex);
  request.set_force(force);
  request.set_in_namespace(true);
  request.set_key_namespace(key_namespace);
  return RemoveByRegexCall(request);
}

Result<uint64_t> RemoteMaster::RemoveByRegexCall(const rpc::RemoveByRegexRequest& request) {
  rpc::CountResponse response;
  grpc::Status status = Call("RemoveByRegex", false, &response,
                             [&](const Endpoint& ep, grpc::ClientContext* context) {
                               return ep.stub->RemoveByRegex(context, request, &response);
                             });
  Status st =
      status.ok() ? wire::CallStatusOf(response.status()) : RpcFailure("RemoveByRegex", status);
  if (!st.ok()) return st;
  return response.count();
}

std::vector<Status> RemoteMaster::ClearReplicas(const std::vector<std::string>& keys,
                                                const std::string& segment_name) {
  if (keys.empty()) return {};
  rpc::ClearReplicasRequest request;
  wire::EncodeKeys(keys, request.mutable_keys());
  request.set_segment_name(segment_name);
  rpc::BatchResponse response;
  grpc::Status status = Call("ClearReplicas", false, &response,
                             [&](const Endpoint& ep, grpc::ClientContext* context) {
                               return ep.stub->ClearReplicas(context, request, &response);
                             });
  if (!status.ok()) return std::vector<Status>(keys.size(), RpcFailure("ClearReplicas", status));
  return wire::DecodeResults(response.status(), response.results(), keys.size(), "ClearReplicas");
}

// ---- Stats --------------------------------------------------------------------------------------

Result<MasterProcessStats> RemoteMaster::ProcessStats() {
  rpc::StatsRequest request;
  rpc::StatsResponse response;
  grpc::Status status =
      Call("Stats", true, &response, [&](const Endpoint& ep, grpc::ClientContext* context) {
        return ep.stub->Stats(context, request, &response);
      });
  if (!status.ok()) return RpcFailure("Stats", status);
  if (Status call = wire::CallStatusOf(response.status()); !call.ok()) return call;
  return DecodeProcessStats(response);
}

Result<MasterProcessStats> RemoteMaster::QueryStats(const std::string& address, Millis timeout,
                                                    const ControlPlaneSecurity& security) {
  if (address.empty()) return Status(ErrorCode::INVALID_PARAMS, "master address is empty");
  if (timeout.count() <= 0) return Status(ErrorCode::INVALID_PARAMS, "timeout must be > 0 ms");
  std::string target = address;
  std::vector<std::string> masters;
  if (IsEtcdAddress(address)) {
    auto endpoints = ParseEtcdAddress(address);
    if (!endpoints.ok()) return endpoints.status();
    auto etcd = EtcdClient::Create(std::move(endpoints).value(), timeout, security.etcd);
    if (!etcd.ok()) return etcd.status();
    auto members = (*etcd)->GetPrefix(std::string(kMasterPrefix) + "members/");
    if (!members.ok()) return members.status();
    for (const EtcdKeyValue& kv : *members) masters.push_back(kv.value);
    auto leader = (*etcd)->Leader();
    if (!leader.ok()) return leader.status();
    if (!leader->has_value()) {
      return Status(ErrorCode::RPC_FAIL, "no tierkv master leads at " + address + " (" +
                                             std::to_string(masters.size()) +
                                             " running; an election may be under way)");
    }
    target = (*leader)->address;
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(wire::kMaxMessageBytes);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto channel = MasterChannel(target, security, args);
  std::unique_ptr<rpc::Master::Stub> stub = rpc::Master::NewStub(channel);
  rpc::StatsRequest request;
  rpc::StatsResponse response;
  grpc::ClientContext context;
  context.set_deadline(DeadlineIn(timeout));  // fail-fast: a refused connection ends at once
  grpc::Status status = stub->Stats(&context, request, &response);
  if (!status.ok()) {
    return Status(CodeOf(status), "cannot get stats from the tierkv master at " + target +
                                      " (timeout " + std::to_string(timeout.count()) +
                                      " ms): " + Describe(status));
  }
  if (!response.status().not_leader()) {
    if (Status call = wire::CallStatusOf(response.status()); !call.ok()) return call;
  }
  MasterProcessStats out = DecodeProcessStats(response);
  out.answered_by = target;
  out.masters = std::move(masters);
  return out;
}

MasterStats RemoteMaster::Stats() {
  Result<MasterProcessStats> stats = ProcessStats();
  if (!stats.ok()) {
    spdlog::warn("Stats: {}", stats.status().ToString());
    return MasterStats{};
  }
  return stats->master;
}

}  // namespace tierkv
