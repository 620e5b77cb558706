// Request traces of KV-cache reuse (the Mooncake FAST'25 format) and reference cache
// simulations over them: exact LRU and Belady's furthest-next-use, pure bookkeeping (no bytes).
//
// A trace is JSON lines, one request per line:
//   {"timestamp": <ms>, "input_length": <tokens>, "output_length": <tokens>, "hash_ids": [...]}
// with one hash id per `block_tokens`-token prefix block (512 in Mooncake's traces); equal ids at
// equal positions are the same KV block. A request's last block holds
// input_length - block_tokens * (n - 1) tokens. A block is identified by (position, hash id,
// tokens): a block of another length is other bytes.
//
// Both simulations replay the requests in order with the semantics of `tierkv bench trace`:
// a request's prefix hit is the longest run of leading blocks that are cached; then every block
// of the request is referenced (cached ones touched, the others inserted), and the cache evicts
// until it holds at most `capacity_bytes` (a block's bytes = tokens * bytes_per_token). A block
// larger than the whole capacity is never cached.
// Thread-safety: plain values and functions; nothing is shared.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tierkv/status.h"

namespace tierkv::bench {

inline constexpr uint32_t kTraceBlockTokens = 512;
inline constexpr uint32_t kNoParent = UINT32_MAX;

struct TraceRequest {
  double timestamp_ms = 0;
  uint64_t input_tokens = 0;
  uint64_t output_tokens = 0;
  std::vector<uint32_t> blocks;  // dense block indices into Trace::block_tokens
};

struct Trace {
  std::vector<TraceRequest> requests;
  // Per dense block index: its tokens, and the block before it in the first request that
  // referenced it (kNoParent for a first block).
  std::vector<uint32_t> block_tokens;
  std::vector<uint32_t> block_parent;
  uint64_t block_references = 0;  // blocks over all requests
  uint64_t input_tokens = 0;      // over all requests
  uint64_t unique_tokens = 0;     // over distinct blocks

  uint64_t unique_bytes(uint64_t bytes_per_token) const { return unique_tokens * bytes_per_token; }
};

// Parses a whole trace. `name` (a path) prefixes errors. INVALID_PARAMS naming the line number
// (1-based) for a line that is not a JSON object with a non-negative "timestamp" not before the
// previous line's, a positive integer "input_length", a non-negative integer "output_length"
// (optional) and a non-empty array "hash_ids" of non-negative integers with
// block_tokens * (n - 1) < input_length <= block_tokens * n; INVALID_PARAMS for a trace without
// requests. Blank lines are skipped.
Result<Trace> ParseTrace(std::string_view text, std::string_view name,
                         uint32_t block_tokens = kTraceBlockTokens);
// Reads and parses a file: INVALID_PARAMS when it cannot be read, else ParseTrace's errors.
Result<Trace> LoadTrace(const std::string& path, uint32_t block_tokens = kTraceBlockTokens);

// What a replay (simulated or through the store) measured.
struct CacheSimResult {
  uint64_t input_tokens = 0;
  uint64_t hit_tokens = 0;  // tokens of prefix-hit blocks
  uint64_t blocks = 0;      // block references
  uint64_t hit_blocks = 0;  // prefix-hit blocks
  uint64_t inserted_blocks = 0;
  uint64_t evicted_blocks = 0;
  uint64_t peak_bytes = 0;  // most bytes held after a request

  double prefix_hit_rate() const {
    return input_tokens == 0 ? 0.0
                             : static_cast<double>(hit_tokens) / static_cast<double>(input_tokens);
  }
  double block_hit_rate() const {
    return blocks == 0 ? 0.0 : static_cast<double>(hit_blocks) / static_cast<double>(blocks);
  }
};

// Exact LRU: every reference makes a block most recent (a request's blocks in order); after a
// request's inserts the least recent blocks go until the cache fits.
CacheSimResult SimulateLru(const Trace& trace, uint64_t capacity_bytes, uint64_t bytes_per_token);

// Belady's MIN with bypass: after a request's inserts, the cached blocks whose next reference
// (the next request that names them, prefix hit or not) is furthest away go first, the
// request's own new blocks included; never-referenced-again blocks first of all. A block's
// next reference is never later than its children's (every request naming a child names its
// parent), so the rule keeps prefixes closed. Optimal for block hits with equal-size blocks;
// with the trace's shorter last blocks and the token-weighted prefix-hit rate it is the usual
// offline reference, not a proven bound.
CacheSimResult SimulateBelady(const Trace& trace, uint64_t capacity_bytes,
                              uint64_t bytes_per_token);

}  // namespace tierkv::bench
