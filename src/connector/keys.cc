// Keys, group ids and rank namespaces in vLLM's MooncakeStoreConnector schema
// (include/tierkv/connector.h).
#include <algorithm>
#include <string>

#include "tierkv/connector.h"

namespace tierkv::connector {

std::string ModelName(std::string_view model_path) {
  while (!model_path.empty() && model_path.back() == '/') model_path.remove_suffix(1);
  const size_t slash = model_path.rfind('/');
  return std::string(slash == std::string_view::npos ? model_path : model_path.substr(slash + 1));
}

std::string KeyPrefix(const KeyMetadata& m) {
  std::string out;
  out.reserve(m.cache_prefix.size() + m.model_name.size() + 48);
  if (!m.cache_prefix.empty()) {
    out += m.cache_prefix;
    out += '@';
  }
  out += m.model_name;
  out += "@tp_rank:" + std::to_string(m.tp_rank);
  out += "@pcp" + std::to_string(m.pcp_rank);
  out += "@dcp" + std::to_string(m.dcp_rank);
  out += "@pp_rank:" + std::to_string(m.pp_rank);
  out += "@group:" + std::to_string(m.group);
  return out;
}

std::string ChunkKey(const KeyMetadata& metadata, std::string_view chunk_hash_hex) {
  std::string out = KeyPrefix(metadata);
  out += '@';
  out += chunk_hash_hex;
  return out;
}

std::string GroupId(std::string_view cache_prefix, std::string_view model_name,
                    std::string_view chunk_hash_hex) {
  std::string out = "tierkv:";
  if (!cache_prefix.empty()) {
    out += cache_prefix;
    out += '@';
  }
  out += model_name;
  out += '@';
  out += chunk_hash_hex;
  return out;
}

Result<int> TpReplicationFactor(AttentionKind kind, int tp_size, int num_kv_heads, int dcp_size) {
  if (tp_size < 1 || dcp_size < 1) {
    return Status(ErrorCode::INVALID_PARAMS, "tp_size and dcp_size must be >= 1, got " +
                                                 std::to_string(tp_size) + " and " +
                                                 std::to_string(dcp_size));
  }
  if (dcp_size > 1 || kind == AttentionKind::kRankSpecific) return 1;
  if (kind == AttentionKind::kMla) return tp_size;
  if (num_kv_heads < 1) {
    return Status(ErrorCode::INVALID_PARAMS,
                  "num_kv_heads must be >= 1 for GQA, got " + std::to_string(num_kv_heads));
  }
  return std::max(1, tp_size / num_kv_heads);
}

Result<int> KeyTpRank(int tp_rank, int factor) {
  if (tp_rank < 0 || factor < 1) {
    return Status(ErrorCode::INVALID_PARAMS, "tp_rank must be >= 0 and factor >= 1, got " +
                                                 std::to_string(tp_rank) + " and " +
                                                 std::to_string(factor));
  }
  return tp_rank / factor;
}

Result<std::vector<std::string>> LookupNamespaces(const KeyMetadata& base, int tp_size,
                                                  int pcp_size, int pp_size, int factor,
                                                  int dcp_size) {
  if (tp_size < 1 || pcp_size < 1 || pp_size < 1 || dcp_size < 1 || factor < 1 ||
      tp_size % factor != 0) {
    return Status(ErrorCode::INVALID_PARAMS,
                  "tp_size, pcp_size, pp_size and dcp_size must be >= 1 and factor must divide "
                  "tp_size (tp_size " +
                      std::to_string(tp_size) + ", factor " + std::to_string(factor) + ")");
  }
  std::vector<std::string> out;
  KeyMetadata m = base;
  for (int pcp = 0; pcp < pcp_size; ++pcp) {
    const int shards = dcp_size > 1 ? tp_size : tp_size / factor;
    for (int shard = 0; shard < shards; ++shard) {
      for (int pp = 0; pp < pp_size; ++pp) {
        m.tp_rank = shard;
        m.pcp_rank = pcp;
        m.dcp_rank = dcp_size > 1 ? shard % dcp_size : 0;
        m.pp_rank = pp;
        out.push_back(KeyPrefix(m));
      }
    }
  }
  return out;
}

}  // namespace tierkv::connector
