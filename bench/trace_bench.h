// `tierkv bench trace`: replays a request trace (bench/trace.h) through a real tierkv store and
// puts its prefix-hit rate beside exact LRU and Belady simulations at the same capacity.
//
// Per request, in arrival order: BatchGetReplicaDesc on all its blocks (the lookup: the longest
// run of leading blocks that exist is the prefix hit, and their replicas say which tier holds
// them), BatchGetIntoMultiBuffers of the hit blocks (real bytes, compared with what was put),
// then BatchPutFromMultiBuffers of the blocks after the first miss (OBJECT_ALREADY_EXISTS counts
// as existing). Block bytes = tokens * bytes_per_token, slices of one pattern buffer, so every
// block has its own bytes. The store's DRAM segment is sized so that it holds `capacity_bytes`
// of objects at its high watermark (StoreSizing); the simulations hold exactly that many.
// Thread-safety: none (one replay at a time per call).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench_util.h"
#include "tierkv/config.h"
#include "tierkv/status.h"
#include "trace.h"

namespace tierkv::bench {

// How a store run is set up.
struct StoreRunConfig {
  uint64_t capacity_bytes = 0;  // object bytes the DRAM tier holds at its high watermark
  uint64_t ssd_bytes = 0;       // 0 = no SSD tier
  uint64_t bytes_per_token = 64;
  std::string policy = "lru";  // the master's eviction_policy
  double speed = 0;            // > 0: request i starts at timestamp_i / speed; 0: at once
  bool hints = true;           // pass each block's parent in ReplicateConfig::parent_keys
  // "" = embedded (in-process master); "spawn" = a `tierkv master` child process started for
  // this run; else HOST:PORT of a running master (its own eviction policy is used).
  std::string master;
  std::string binary;   // the tierkv executable ("spawn")
  std::string ssd_dir;  // where the SSD tier file goes
  double eviction_ratio = 0.005;
  uint64_t lease_ms = 0;  // 0 = 10000 / speed, or 100 when speed is 0
  double prefill_tokens_per_s = 10000;
  // > 0: this DRAM segment instead of SizeStore's, with the base config's watermark (to see
  // what a store sized naively holds).
  uint64_t segment_bytes = 0;
  Config base;  // other client settings (--config)
};

// The DRAM segment of a run: `segment_bytes` (a multiple of 2 MiB) and the high watermark
// that makes watermark * segment_bytes cover capacity_bytes of objects after the allocator's
// 64-byte alignment. Eviction passes start above that and free eviction_ratio * segment_bytes:
// the store holds between capacity_bytes - eviction_ratio * segment_bytes and capacity_bytes.
struct StoreSizing {
  uint64_t segment_bytes = 0;
  double high_watermark = 0;
  double alignment_overhead = 1;  // allocated bytes / object bytes over the trace's blocks
};
StoreSizing SizeStore(const Trace& trace, uint64_t capacity_bytes, uint64_t bytes_per_token);

struct StoreRunResult {
  std::string policy;  // as the master reports it
  StoreSizing sizing;
  CacheSimResult total;
  uint64_t requests = 0;
  uint64_t dram_hit_tokens = 0, ssd_hit_tokens = 0;
  uint64_t dram_hit_blocks = 0, ssd_hit_blocks = 0;
  uint64_t bytes_put = 0, bytes_got_dram = 0, bytes_got_ssd = 0;
  uint64_t put_existing = 0;  // OBJECT_ALREADY_EXISTS
  uint64_t put_failed = 0;    // any other put error (e.g. NO_AVAILABLE_HANDLE)
  uint64_t get_failed = 0;    // looked up, then not read (the prefix ends there)
  uint64_t evictions = 0, demotions = 0, ssd_dropped = 0;
  double wall_s = 0, lookup_s = 0, get_s = 0, put_s = 0;
  double hit_prefill_s = 0;    // prefill time of the hit tokens at prefill_tokens_per_s
  double input_prefill_s = 0;  // prefill time of all input tokens
};

// Replays `trace` through a store set up by `config`. Fails on a client that cannot start, a
// get that returns wrong bytes, or a lookup/get/put error other than the expected misses.
Result<StoreRunResult> ReplayThroughStore(const Trace& trace, const StoreRunConfig& config,
                                          Progress* progress);

struct TraceBenchOptions {
  CommonOptions common;
  std::string trace_path;  // "" = kDefaultTracePath
  uint64_t bytes_per_token = 64;
  std::string dram_capacity = "1/8";  // a size, or a fraction of the trace's unique bytes
  uint64_t ssd_capacity = 0;          // bytes; with --sweep the DRAM+SSD runs use 8x DRAM
  std::string policy;                 // "" = lru and kDefaultTracePolicy; else only this one
  double speed = 0;
  double prefill_tokens_per_s = 10000;
  bool sweep = false;
  std::string plot_path;
  std::string master;
  std::string ssd_dir;  // "" = <directory of the tierkv binary>/trace-ssd
  bool hints = true;
  size_t max_requests = 0;  // > 0: only the first N requests (smoke runs)
  double eviction_ratio = 0.005;
  uint64_t lease_ms = 0;
  uint64_t segment_bytes = 0;  // > 0: override the explicit sizing (StoreRunConfig)
};

// The policy the bench runs beside LRU by default.
inline constexpr const char* kDefaultTracePolicy = "reuse";
// The sweep's DRAM capacities, as fractions of the trace's unique bytes.
std::vector<double> SweepFractions();

Status RunTraceBench(const TraceBenchOptions& options);

}  // namespace tierkv::bench
