// Put filtering, the longest-prefix lookup and the staging-budget split
// (include/tierkv/connector.h).
#include <string>

#include "ssd/staging_area.h"
#include "ssd/staging_plan.h"
#include "tierkv/client.h"
#include "tierkv/connector.h"

namespace tierkv::connector {

Result<PutBatch> FilterMissing(const PutBatch& batch, const std::vector<int>& exists) {
  const size_t n = batch.keys.size();
  if (batch.ptrs.size() != n || batch.sizes.size() != n || exists.size() != n ||
      (!batch.group_ids.empty() && batch.group_ids.size() != n)) {
    return Status(
        ErrorCode::INVALID_PARAMS,
        "FilterMissing: " + std::to_string(n) + " keys but " + std::to_string(batch.ptrs.size()) +
            " buffer lists, " + std::to_string(batch.sizes.size()) + " size lists, " +
            std::to_string(batch.group_ids.size()) + " group ids (0 or one per key) and " +
            std::to_string(exists.size()) + " existence answers");
  }
  PutBatch out;
  for (size_t i = 0; i < n; ++i) {
    if (exists[i] == 1) continue;
    out.keys.push_back(batch.keys[i]);
    out.ptrs.push_back(batch.ptrs[i]);
    out.sizes.push_back(batch.sizes[i]);
    if (!batch.group_ids.empty()) out.group_ids.push_back(batch.group_ids[i]);
    out.indices.push_back(batch.indices.empty() ? i : batch.indices[i]);
  }
  return out;
}

Result<LookupResult> LongestPrefixHit(const std::vector<std::string>& chunk_hashes_hex,
                                      const std::vector<std::string>& namespaces,
                                      uint64_t num_tokens, uint64_t chunk_size,
                                      const BatchIsExistFn& batch_is_exist) {
  if (chunk_size == 0) return Status(ErrorCode::INVALID_PARAMS, "chunk_size must be > 0");
  if (namespaces.empty()) {
    return Status(ErrorCode::INVALID_PARAMS, "a lookup needs at least one key namespace");
  }
  const uint64_t wanted = (num_tokens + chunk_size - 1) / chunk_size;
  const size_t chunks = static_cast<size_t>(std::min<uint64_t>(chunk_hashes_hex.size(), wanted));
  LookupResult result;
  if (chunks == 0) return result;
  std::vector<std::string> keys;
  keys.reserve(chunks * namespaces.size());
  for (size_t c = 0; c < chunks; ++c) {
    for (const std::string& ns : namespaces) {
      std::string key;
      key.reserve(ns.size() + 1 + chunk_hashes_hex[c].size());
      key += ns;
      key += '@';
      key += chunk_hashes_hex[c];
      keys.push_back(std::move(key));
    }
  }
  result.keys_checked = keys.size();
  const std::vector<int> exists = batch_is_exist(keys);
  if (exists.size() != keys.size()) {
    return Status(ErrorCode::INTERNAL_ERROR, "batch_is_exist answered " +
                                                 std::to_string(exists.size()) + " results for " +
                                                 std::to_string(keys.size()) + " keys");
  }
  size_t hit = 0;
  for (; hit < chunks; ++hit) {
    bool all = true;
    for (size_t j = 0; j < namespaces.size() && all; ++j) {
      all = exists[hit * namespaces.size() + j] == 1;
    }
    if (!all) break;
  }
  result.hit_chunks = hit;
  result.hit_tokens = std::min<uint64_t>(hit * chunk_size, num_tokens);
  if (result.hit_tokens == num_tokens && num_tokens > 0) result.hit_tokens = num_tokens - 1;
  return result;
}

Result<LookupResult> LongestPrefixHit(const std::vector<std::string>& chunk_hashes_hex,
                                      const std::vector<std::string>& namespaces,
                                      uint64_t num_tokens, uint64_t chunk_size, Client& client) {
  return LongestPrefixHit(
      chunk_hashes_hex, namespaces, num_tokens, chunk_size,
      [&client](const std::vector<std::string>& keys) { return client.BatchIsExist(keys); });
}

uint64_t StagingNeed(uint64_t value_bytes) { return tierkv::StagingNeed(value_bytes); }

Result<StagingPlan> PlanStagedLoad(const std::vector<uint64_t>& value_sizes,
                                   uint64_t staging_capacity, double usable_ratio,
                                   uint64_t part_budget) {
  if (!(usable_ratio > 0.0 && usable_ratio <= 1.0)) {
    return Status(ErrorCode::INVALID_PARAMS,
                  "usable_ratio must be in (0, 1], got " + std::to_string(usable_ratio));
  }
  StagingPlan plan;
  plan.usable_budget = static_cast<uint64_t>(usable_ratio * static_cast<double>(staging_capacity));
  if (part_budget > plan.usable_budget) {
    return Status(ErrorCode::INVALID_PARAMS, "part_budget " + std::to_string(part_budget) +
                                                 " exceeds the usable budget " +
                                                 std::to_string(plan.usable_budget));
  }
  plan.part_budget = part_budget == 0 ? plan.usable_budget : part_budget;
  StagingSplit split = SplitForStaging(value_sizes, plan.usable_budget, plan.part_budget);
  for (const StagingStream& s : split.streamed) {
    if (s.piece_bytes == 0) {
      return Status(ErrorCode::INVALID_PARAMS,
                    "a usable staging budget of " + std::to_string(plan.usable_budget) +
                        " bytes cannot stream even one 4096-byte piece (object " +
                        std::to_string(s.index) + " of " + std::to_string(value_sizes[s.index]) +
                        " bytes)");
    }
    plan.streamed.push_back(StreamedObject{s.index, s.piece_bytes, s.pieces});
  }
  plan.parts = std::move(split.parts);
  return plan;
}

}  // namespace tierkv::connector
