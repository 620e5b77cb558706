#include "rpc/wire.h"

#include <algorithm>
#include <chrono>
#include <utility>

namespace tierkv::wire {
namespace {

Status Malformed(const char* rpc_name, const std::string& what) {
  return Status(ErrorCode::RPC_FAIL, std::string("malformed ") + rpc_name + " response: " + what);
}

std::string CountMismatch(size_t got, size_t n) {
  return std::to_string(got) + " results for " + std::to_string(n) + " keys";
}

void EncodeDisk(const DiskLocation& disk, rpc::DiskLocation* out) {
  out->set_region(disk.region);
  out->set_generation(disk.generation);
  out->set_offset(disk.offset);
  out->set_size(disk.size);
}

// The message of key i's error, when it has one (codes travel separately, packed).
void AddKeyMessage(rpc::KeyResults* keys, size_t i, const Status& status) {
  if (status.message().empty()) return;
  rpc::KeyMessage* m = keys->add_messages();
  m->set_index(static_cast<uint32_t>(i));
  m->set_message(status.message());
}

}  // namespace

// ---- Encoding ----------------------------------------------------------------------------------

void SetStatus(rpc::CallStatus* out, const Status& status) {
  out->set_code(ToInt(status.code()));
  out->set_message(status.message());
}

void SetUnknownClient(rpc::CallStatus* out, uint64_t client_id) {
  out->set_code(ToInt(ErrorCode::INVALID_PARAMS));
  out->set_message("unknown client id " + std::to_string(client_id) +
                   " (expired, or registered with an earlier master process): register again");
  out->set_unknown_client(true);
}

void EncodeResults(const std::vector<Status>& statuses, rpc::KeyResults* out) {
  out->mutable_codes()->Reserve(static_cast<int>(statuses.size()));
  for (size_t i = 0; i < statuses.size(); ++i) {
    const Status& s = statuses[i];
    out->add_codes(ToInt(s.code()));
    if (!s.ok()) AddKeyMessage(out, i, s);
  }
}

void EncodeReplica(const ReplicaLocation& replica, rpc::Replica* out) {
  out->set_segment(replica.segment);
  out->set_tier(static_cast<uint32_t>(replica.tier));
  out->set_offset(replica.offset);
  out->set_size(replica.size);
  if (replica.tier == ReplicaTier::kDisk) EncodeDisk(replica.disk, out->mutable_disk());
}

void EncodePlacements(const std::vector<Result<PutStartResult>>& results,
                      rpc::PlacementResponse* out) {
  rpc::KeyResults* keys = out->mutable_results();
  keys->mutable_codes()->Reserve(static_cast<int>(results.size()));
  out->mutable_placements()->Reserve(static_cast<int>(results.size()));
  for (size_t i = 0; i < results.size(); ++i) {
    const Result<PutStartResult>& r = results[i];
    keys->add_codes(ToInt(r.code()));
    rpc::Placement* placement = out->add_placements();
    if (!r.ok()) {
      AddKeyMessage(keys, i, r.status());
      continue;
    }
    placement->set_id(r->put_id);
    for (const ReplicaLocation& replica : r->replicas) {
      EncodeReplica(replica, placement->add_replicas());
    }
  }
}

void EncodeReplicas(const std::vector<Result<ObjectReplicas>>& results, SteadyTime now,
                    rpc::GetReplicasResponse* out) {
  rpc::KeyResults* keys = out->mutable_results();
  keys->mutable_codes()->Reserve(static_cast<int>(results.size()));
  out->mutable_objects()->Reserve(static_cast<int>(results.size()));
  for (size_t i = 0; i < results.size(); ++i) {
    const Result<ObjectReplicas>& r = results[i];
    keys->add_codes(ToInt(r.code()));
    rpc::ObjectReplicas* object = out->add_objects();
    if (!r.ok()) {
      AddKeyMessage(keys, i, r.status());
      continue;
    }
    object->set_size(r->size);
    object->set_checksum(r->checksum);
    for (const ReplicaLocation& replica : r->replicas) {
      EncodeReplica(replica, object->add_replicas());
    }
    // Floor: the client's deadline is never later than the master's.
    const auto left = std::chrono::duration_cast<Millis>(r->lease_deadline - now);
    object->set_lease_ms(left.count() > 0 ? static_cast<uint64_t>(left.count()) : 0);
  }
}

void EncodeConfig(const ReplicateConfig& config, rpc::ReplicateConfig* out) {
  out->set_replica_num(config.replica_num);
  out->set_preferred_segment(config.preferred_segment);
  out->set_with_soft_pin(config.with_soft_pin);
  out->set_with_hard_pin(config.with_hard_pin);
  out->set_soft_pin_ttl_ms(config.soft_pin_ttl_ms);
  for (uint32_t id : config.excluded_segments) out->add_excluded_segments(id);
  if (!config.group_ids.empty()) EncodeKeys(config.group_ids, out->mutable_group_ids());
  if (!config.parent_keys.empty()) EncodeKeys(config.parent_keys, out->mutable_parent_keys());
}

Status DecodeConfig(const rpc::ReplicateConfig& config, ReplicateConfig* out) {
  out->replica_num = static_cast<size_t>(config.replica_num());
  out->preferred_segment = config.preferred_segment();
  out->with_soft_pin = config.with_soft_pin();
  out->with_hard_pin = config.with_hard_pin();
  out->soft_pin_ttl_ms = config.soft_pin_ttl_ms();
  out->excluded_segments.assign(config.excluded_segments().begin(),
                                config.excluded_segments().end());
  if (Status st = DecodeKeys(config.group_ids(), &out->group_ids); !st.ok()) {
    return Status(st.code(), "config.group_ids: " + st.message());
  }
  if (Status st = DecodeKeys(config.parent_keys(), &out->parent_keys); !st.ok()) {
    return Status(st.code(), "config.parent_keys: " + st.message());
  }
  return Status::Ok();
}

void EncodeStats(const MasterStats& s, rpc::StatsResponse* out) {
  out->set_objects(s.objects);
  out->set_pending_objects(s.pending_objects);
  out->set_groups(s.groups);
  out->set_evicted_objects(s.evicted_objects);
  out->set_evicted_bytes(s.evicted_bytes);
  out->set_reclaimed_puts(s.reclaimed_puts);
  out->set_lease_grants(s.lease_grants);
  out->set_demoted_objects(s.demoted_objects);
  out->set_demoted_bytes(s.demoted_bytes);
  out->set_demotion_failures(s.demotion_failures);
  out->set_written_behind(s.written_behind);
  out->set_disk_replicas_dropped(s.disk_replicas_dropped);
  out->set_memory_replicas(s.memory_replicas);
  out->set_disk_replicas(s.disk_replicas);
  out->set_promoted_objects(s.promoted_objects);
  out->set_gets(s.gets);
  out->set_get_hits(s.get_hits);
  out->set_get_misses(s.get_misses);
  out->set_puts(s.puts);
  out->set_removes(s.removes);
  out->set_recovered_replicas(s.recovered_replicas);
  out->set_recovered_bytes(s.recovered_bytes);
  out->set_recovery_rejected(s.recovery_rejected);
  out->set_lost_puts(s.lost_puts);
}

MasterStats DecodeStats(const rpc::StatsResponse& in) {
  MasterStats s;
  s.objects = in.objects();
  s.pending_objects = in.pending_objects();
  s.groups = in.groups();
  s.evicted_objects = in.evicted_objects();
  s.evicted_bytes = in.evicted_bytes();
  s.reclaimed_puts = in.reclaimed_puts();
  s.lease_grants = in.lease_grants();
  s.demoted_objects = in.demoted_objects();
  s.demoted_bytes = in.demoted_bytes();
  s.demotion_failures = in.demotion_failures();
  s.written_behind = in.written_behind();
  s.disk_replicas_dropped = in.disk_replicas_dropped();
  s.memory_replicas = in.memory_replicas();
  s.disk_replicas = in.disk_replicas();
  s.promoted_objects = in.promoted_objects();
  s.gets = in.gets();
  s.get_hits = in.get_hits();
  s.get_misses = in.get_misses();
  s.puts = in.puts();
  s.removes = in.removes();
  s.recovered_replicas = in.recovered_replicas();
  s.recovered_bytes = in.recovered_bytes();
  s.recovery_rejected = in.recovery_rejected();
  s.lost_puts = in.lost_puts();
  return s;
}

// ---- Keys
// ----------------------------------------------------------------------------------------

void EncodeKeys(const std::vector<std::string>& keys, rpc::KeyBatch* out) {
  size_t total = 0;
  for (const std::string& key : keys) total += key.size();
  std::string* data = out->mutable_data();
  data->reserve(data->size() + total);
  out->mutable_sizes()->Reserve(out->sizes_size() + static_cast<int>(keys.size()));
  for (const std::string& key : keys) {
    data->append(key);
    out->add_sizes(static_cast<uint32_t>(key.size()));
  }
}

Status DecodeKeys(const rpc::KeyBatch& batch, std::vector<std::string>* out) {
  out->clear();
  const size_t n = static_cast<size_t>(batch.sizes_size());
  if (n > kMaxBatchKeys) {
    return Status(ErrorCode::INVALID_PARAMS, "batch of " + std::to_string(n) + " keys; at most " +
                                                 std::to_string(kMaxBatchKeys) + " per call");
  }
  uint64_t total = 0;
  for (uint32_t size : batch.sizes()) total += size;
  if (total != batch.data().size()) {
    return Status(ErrorCode::INVALID_PARAMS, "key sizes add up to " + std::to_string(total) +
                                                 " bytes but the batch holds " +
                                                 std::to_string(batch.data().size()));
  }
  out->reserve(n);
  const char* p = batch.data().data();
  for (uint32_t size : batch.sizes()) {
    out->emplace_back(p, size);
    p += size;
  }
  return Status::Ok();
}

// ---- Decoding ----------------------------------------------------------------------------------

Status CallStatusOf(const rpc::CallStatus& status) {
  if (status.code() == 0) return Status::Ok();
  if (status.code() > 0) {  // codes are negative; a positive one would read as a result
    return Status(ErrorCode::RPC_FAIL,
                  "malformed response: whole-call code " + std::to_string(status.code()));
  }
  std::string message = status.message();
  if (message.empty()) message = "the master refused the call";
  return Status(static_cast<ErrorCode>(status.code()), std::move(message));
}

std::vector<Status> DecodeResults(const rpc::CallStatus& status, const rpc::KeyResults& results,
                                  size_t n, const char* rpc_name) {
  if (Status call = CallStatusOf(status); !call.ok()) return std::vector<Status>(n, call);
  if (static_cast<size_t>(results.codes_size()) != n) {
    return std::vector<Status>(n, Malformed(rpc_name, CountMismatch(results.codes_size(), n)));
  }
  std::vector<Status> out(n);
  for (size_t i = 0; i < n; ++i) {
    const int32_t code = results.codes(static_cast<int>(i));
    if (code != 0) out[i] = Status(static_cast<ErrorCode>(code), "");
  }
  for (const rpc::KeyMessage& m : results.messages()) {
    if (m.index() >= n || out[m.index()].ok()) continue;  // ignore nonsense, never crash
    out[m.index()] = Status(out[m.index()].code(), m.message());
  }
  return out;
}

std::vector<int> DecodeExists(const rpc::ExistsResponse& response, size_t n) {
  if (Status call = CallStatusOf(response.status()); !call.ok()) {
    return std::vector<int>(n, ToInt(call.code()));
  }
  if (static_cast<size_t>(response.results_size()) != n) {
    return std::vector<int>(n, ToInt(ErrorCode::RPC_FAIL));
  }
  std::vector<int> out(response.results().begin(), response.results().end());
  for (int& v : out) {
    if (v > 1) v = ToInt(ErrorCode::RPC_FAIL);  // only 1, 0 or a negative code are answers
  }
  return out;
}

bool DecodeReplica(const rpc::Replica& in, ReplicaLocation* out) {
  if (in.tier() > static_cast<uint32_t>(ReplicaTier::kDisk)) return false;
  out->segment = in.segment();
  out->tier = static_cast<ReplicaTier>(in.tier());
  out->offset = in.offset();
  out->size = in.size();
  if (in.has_disk()) {
    out->disk.region = in.disk().region();
    out->disk.generation = in.disk().generation();
    out->disk.offset = in.disk().offset();
    out->disk.size = in.disk().size();
  }
  return true;
}

std::vector<Result<PutStartResult>> DecodePlacements(const rpc::PlacementResponse& response,
                                                     size_t n, const char* rpc_name) {
  std::vector<Status> statuses = DecodeResults(response.status(), response.results(), n, rpc_name);
  std::vector<Result<PutStartResult>> out;
  out.reserve(n);
  const bool shaped = static_cast<size_t>(response.placements_size()) == n;
  for (size_t i = 0; i < n; ++i) {
    if (!statuses[i].ok()) {
      out.emplace_back(std::move(statuses[i]));
      continue;
    }
    if (!shaped) {
      out.emplace_back(
          Malformed(rpc_name, CountMismatch(response.placements_size(), n) + " (placements)"));
      continue;
    }
    const rpc::Placement& p = response.placements(static_cast<int>(i));
    PutStartResult r;
    r.put_id = p.id();
    r.replicas.resize(static_cast<size_t>(p.replicas_size()));
    bool good = true;
    for (int k = 0; k < p.replicas_size() && good; ++k) {
      good = DecodeReplica(p.replicas(k), &r.replicas[static_cast<size_t>(k)]);
    }
    if (!good) {
      out.emplace_back(Malformed(rpc_name, "unknown replica tier"));
    } else {
      out.emplace_back(std::move(r));
    }
  }
  return out;
}

std::vector<Result<ObjectReplicas>> DecodeReplicas(const rpc::GetReplicasResponse& response,
                                                   size_t n, SteadyTime sent) {
  std::vector<Status> statuses =
      DecodeResults(response.status(), response.results(), n, "GetReplicas");
  std::vector<Result<ObjectReplicas>> out;
  out.reserve(n);
  const bool shaped = static_cast<size_t>(response.objects_size()) == n;
  for (size_t i = 0; i < n; ++i) {
    if (!statuses[i].ok()) {
      out.emplace_back(std::move(statuses[i]));
      continue;
    }
    if (!shaped) {
      out.emplace_back(
          Malformed("GetReplicas", CountMismatch(response.objects_size(), n) + " (objects)"));
      continue;
    }
    const rpc::ObjectReplicas& o = response.objects(static_cast<int>(i));
    ObjectReplicas r;
    r.size = o.size();
    r.checksum = o.checksum();
    // Clamp absurd leases (a day) so the addition cannot overflow the clock.
    const uint64_t lease_ms = std::min<uint64_t>(o.lease_ms(), 86'400'000);
    r.lease_deadline = sent + Millis(static_cast<int64_t>(lease_ms));
    r.replicas.resize(static_cast<size_t>(o.replicas_size()));
    bool good = true;
    for (int k = 0; k < o.replicas_size() && good; ++k) {
      good = DecodeReplica(o.replicas(k), &r.replicas[static_cast<size_t>(k)]);
    }
    if (!good) {
      out.emplace_back(Malformed("GetReplicas", "unknown replica tier"));
    } else {
      out.emplace_back(std::move(r));
    }
  }
  return out;
}

}  // namespace tierkv::wire
