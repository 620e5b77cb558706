// The engine connector's logic, shared by every engine integration (tierkv.connector in
// Python): chunk hashes of a token sequence, store keys in vLLM's schema, group ids, the
// filter that drops already-stored keys from a put batch, the longest-prefix lookup across
// rank namespaces, the SSD tier's staging-budget split, and strict parsing of the
// connector's extra config.
//
// Everything here is a pure function of its arguments (no process state, no hash seed):
// the same tokens give the same hashes and keys in every process. Thread-safety: all
// functions are thread-safe; LongestPrefixHit calls `batch_is_exist` once from the calling
// thread. docs/python.md ("tierkv.connector") documents the formats.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tierkv/status.h"

namespace tierkv {
class Client;
}

namespace tierkv::connector {

// ---- Chunk hashing ----------------------------------------------------------------------

enum class HashAlgorithm { kSha256, kXxh3_128 };

// "sha256" or "xxh3_128" (exactly); anything else is INVALID_PARAMS.
Result<HashAlgorithm> ParseHashAlgorithm(std::string_view name);
std::string_view HashAlgorithmName(HashAlgorithm algorithm);
// Digest length in bytes: 32 (SHA-256) or 16 (xxh3-128).
size_t DigestSize(HashAlgorithm algorithm);

struct ChunkHashOptions {
  size_t chunk_size = 256;  // tokens per chunk (the engine's block size); > 0
  HashAlgorithm algorithm = HashAlgorithm::kSha256;
  bool hash_partial_last = false;  // also hash a last chunk of fewer than chunk_size tokens
};

// h_i = H(h_{i-1} || u32le(n_i) || n_i x i64le(token) || u32le(len(extra_i)) || extra_i), with
// h_{-1} empty; one raw digest per chunk, in order. `extra_keys` is empty (none) or holds one
// byte string per hashed chunk (e.g. LoRA name, multimodal hashes), else INVALID_PARAMS.
// INVALID_PARAMS also for chunk_size 0. SHA-256 through OpenSSL's libcrypto; xxh3-128 through
// libxxhash (canonical big-endian bytes).
Result<std::vector<std::string>> ChunkHashes(const ChunkHashOptions& options,
                                             std::span<const int64_t> tokens,
                                             const std::vector<std::string>& extra_keys = {});
// Lower-case hex of raw bytes (what keys and group ids carry).
std::string Hex(std::string_view bytes);

// ---- Keys and group ids -----------------------------------------------------------------

// The parts of a key before the chunk hash (vLLM's KeyMetadata).
struct KeyMetadata {
  std::string cache_prefix;  // "" = none: the key is byte-identical to the unprefixed form
  std::string model_name;    // e.g. ModelName("meta-llama/Llama-3.1-8B") = "Llama-3.1-8B"
  int tp_rank = 0;           // the key's tp rank (KeyTpRank), not necessarily the worker's
  int pcp_rank = 0;
  int dcp_rank = 0;
  int pp_rank = 0;
  int group = 0;  // the KV-cache group index
};

// The last path component of a model name or path, trailing '/' ignored (vLLM's rule).
std::string ModelName(std::string_view model_path);
// "[cache_prefix@]model@tp_rank:T@pcpP@dcpD@pp_rank:R@group:G".
std::string KeyPrefix(const KeyMetadata& metadata);
// KeyPrefix(metadata) + "@" + chunk_hash_hex.
std::string ChunkKey(const KeyMetadata& metadata, std::string_view chunk_hash_hex);
// "tierkv:[cache_prefix@]model@<chunk_hash_hex>": the lifecycle unit of all ranks' and
// groups' objects of one chunk (no tp/pp/pcp/dcp rank, no KV-cache group index).
std::string GroupId(std::string_view cache_prefix, std::string_view model_name,
                    std::string_view chunk_hash_hex);

enum class AttentionKind { kGqa, kMla, kRankSpecific };

// How many TP ranks hold byte-identical KV for one cache group (vLLM's rule): MLA: tp_size
// (one copy for all); GQA: max(1, tp_size / num_kv_heads); rank-specific state (Mamba) or
// dcp_size > 1: 1. INVALID_PARAMS for tp_size < 1, num_kv_heads < 1 (GQA) or dcp_size < 1.
Result<int> TpReplicationFactor(AttentionKind kind, int tp_size, int num_kv_heads,
                                int dcp_size = 1);
// The tp_rank a worker writes into its keys: tp_rank / factor (ranks sharing bytes share
// one copy). INVALID_PARAMS unless 0 <= tp_rank and factor >= 1.
Result<int> KeyTpRank(int tp_rank, int factor);

// The key prefixes a lookup must find a chunk in for it to be loadable by every worker:
// with dcp_size > 1, (tp, pcp, tp % dcp_size, pp) for every rank; otherwise
// (shard, pcp, 0, pp) for shard < tp_size / factor. `base` gives cache_prefix, model and
// group. INVALID_PARAMS for sizes < 1 or a factor that does not divide tp_size.
Result<std::vector<std::string>> LookupNamespaces(const KeyMetadata& base, int tp_size,
                                                  int pcp_size, int pp_size, int factor,
                                                  int dcp_size = 1);

// ---- Put filtering ----------------------------------------------------------------------

// A batch for batch_put_from_multi_buffers: object i = pieces ptrs[i][j] of sizes[i][j].
struct PutBatch {
  std::vector<std::string> keys;
  std::vector<std::vector<uintptr_t>> ptrs;
  std::vector<std::vector<uint64_t>> sizes;
  std::vector<std::string> group_ids;  // empty, or one per key
  std::vector<size_t> indices;         // FilterMissing's result: positions in the input
};

// The keys of `batch` that batch_is_exist did not report as present (exists[i] != 1: absent
// or an error), with their buffers, sizes and group ids compressed by the same indices.
// INVALID_PARAMS when the lengths disagree (ptrs, sizes and exists must match keys;
// group_ids must be empty or match).
Result<PutBatch> FilterMissing(const PutBatch& batch, const std::vector<int>& exists);

// ---- Longest-prefix lookup --------------------------------------------------------------

using BatchIsExistFn = std::function<std::vector<int>(const std::vector<std::string>&)>;

struct LookupResult {
  uint64_t hit_tokens = 0;  // tokens the engine may load (all but the last on a full hit)
  size_t hit_chunks = 0;    // leading chunks present in every namespace
  size_t keys_checked = 0;  // keys sent in the one batch_is_exist call
};

// Builds the key of every (chunk, namespace) pair — chunks in order, the namespaces of a
// chunk together — for the first min(chunk_hashes_hex.size(), ceil(num_tokens / chunk_size))
// chunks, calls `batch_is_exist` once with them, and returns the longest run of leading chunks
// present (== 1) in every namespace. hit_tokens = min(hit_chunks x chunk_size, num_tokens),
// and a hit covering all num_tokens is reported as num_tokens - 1 (the engine recomputes the
// last token to sample from it). INVALID_PARAMS for chunk_size 0 or no namespace; an answer
// of the wrong length is INTERNAL_ERROR. No call is made when there is nothing to check.
Result<LookupResult> LongestPrefixHit(const std::vector<std::string>& chunk_hashes_hex,
                                      const std::vector<std::string>& namespaces,
                                      uint64_t num_tokens, uint64_t chunk_size,
                                      const BatchIsExistFn& batch_is_exist);
// The same against a tierkv Client (its BatchIsExist).
Result<LookupResult> LongestPrefixHit(const std::vector<std::string>& chunk_hashes_hex,
                                      const std::vector<std::string>& namespaces,
                                      uint64_t num_tokens, uint64_t chunk_size, Client& client);

// ---- Staging-budget split (the SSD tier's rule) -----------------------------------------

// Staging bytes one object of `value_bytes` needs: align_up(value_bytes, 4096) + 8192.
uint64_t StagingNeed(uint64_t value_bytes);

struct StreamedObject {
  size_t index = 0;          // position in the input
  uint64_t piece_bytes = 0;  // value bytes per streamed piece (a multiple of 4096)
  uint64_t pieces = 0;
};

struct StagingPlan {
  // Consecutive runs of input positions, in order; each part's StagingNeed total fits in
  // part_budget, or the part holds one object whose need is over part_budget but within the
  // usable budget.
  std::vector<std::vector<size_t>> parts;
  // Objects whose need exceeds the usable budget: staged in pieces of the largest length
  // whose need fits it.
  std::vector<StreamedObject> streamed;
  uint64_t usable_budget = 0;  // floor(usable_ratio x staging_capacity)
  uint64_t part_budget = 0;
};

// Splits a get of objects of `value_sizes` bytes for an owner with `staging_capacity` staging
// bytes. part_budget 0 = the usable budget. Every position lands in exactly one part or in
// `streamed`, order kept. INVALID_PARAMS for a ratio outside (0, 1], a part_budget over the
// usable budget, or a usable budget too small to stream one 4096-byte piece
// (<= 8192 + 4096) while some object needs streaming.
Result<StagingPlan> PlanStagedLoad(const std::vector<uint64_t>& value_sizes,
                                   uint64_t staging_capacity, double usable_ratio,
                                   uint64_t part_budget = 0);

// ---- Extra config -----------------------------------------------------------------------

// The connector's keys of vLLM's kv_connector_extra_config.
struct ExtraConfig {
  bool enable_group_semantics = false;  // put with group ids (GroupId) per chunk
  bool load_async = true;
  bool lookup_async = false;
  std::string cache_prefix;
};

// Parses the JSON object `json_text`. The three booleans are true for JSON true or a string
// equal to "true" in any case, false for JSON false or "false" in any case; anything else
// ("0", "1", "", "yes", a number, null) is INVALID_CONFIG naming the key. cache_prefix must be
// a string. Other keys belong to the engine and are ignored.
Result<ExtraConfig> ParseExtraConfig(std::string_view json_text);

}  // namespace tierkv::connector
