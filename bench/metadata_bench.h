// `tierkv bench metadata`: metadata throughput of an embedded client, measured
// as keys per second through BatchIsExist.
//
// Puts `objects` small objects under keys shaped like the connector's KV keys
// ("model@tp_rank:0@pcp0@dcp0@pp_rank:0@group:0@<64 hex>"), then calls
// BatchIsExist on `batch`-key batches mixing hits and misses (`hit_ratio`),
// for a time budget or a fixed number of batches. Every answer is checked
// (hit -> 1, miss -> 0) outside the timed calls.
//
// With `remote`, the same objects and queries go to a `tierkv master` child process over
// gRPC (bench/metadata_remote_bench.cc): batch_is_exist is RemoteMaster::Exists, one RPC per
// batch, against kRemoteKeysPerSecondTarget.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "bench_util.h"
#include "tierkv/status.h"

namespace tierkv::bench {

struct MetadataBenchOptions {
  CommonOptions common;
  size_t objects = 64 * 1024;  // objects put before timing
  uint64_t object_bytes = 64;
  size_t batch = 1024;     // keys per BatchIsExist call
  double hit_ratio = 0.9;  // share of keys in a batch that exist
  double seconds = 2.0;    // timing budget, split evenly over the reps
  size_t batches = 0;      // > 0: this many batches per rep instead of `seconds`
  bool remote = false;     // through a `tierkv master` child process over gRPC
  // With remote: paired reps against a master without and one with a cluster token.
  bool auth = false;
  // Paired runs: each rep puts and queries with a fresh LRU client and a fresh client with this
  // eviction policy (order alternating), reporting both and the median of the per-pair ratios.
  std::string compare_policy;
  // Puts name the previous object as their parent (ReplicateConfig::parent_keys), as a KV
  // connector passing its chain would.
  bool parent_hints = false;
  // The scale sweep (bench/metadata_scale_bench.cc): 65 Ki, 1 Mi and `objects`.
  bool scale = false;
};

// The throughput a policy may cost against LRU in the paired comparison: >= 0.90 of LRU's.
// Keys per put batch when the metadata benches fill the table.
inline constexpr size_t kMetadataPutBatch = 1024;
inline constexpr double kPolicyCostRatioTarget = 0.90;

inline constexpr double kKeysPerSecondTarget = 5e6;
inline constexpr double kRemoteKeysPerSecondTarget = 1e6;
// The control plane with the cluster token against without it, same run: >= 0.90.
inline constexpr double kAuthControlPlaneRatioTarget = 0.90;

// Runs the bench and prints its results (JSON lines on stdout with --json, a
// table otherwise). Fails on bad options, a client that cannot start, a failed
// put or a wrong answer.
Status RunMetadataBench(const MetadataBenchOptions& options);
// `--scale`: master memory per object, put/exists/get throughput, eviction rounds and restart
// recovery at 65 Ki, 1 Mi and options.objects objects (64-byte keys); --remote for a child
// master (memory and throughput only).
Status RunMetadataScaleBench(const MetadataBenchOptions& options);

// ---- Shared by the local and the remote mode ----------------------------------------------

// A key shaped like the connector's: model@tp_rank:T@pcpP@dcpD@pp_rank:R@group:G@<hash>.
std::string MetadataKey(uint64_t id);

struct MetadataQuery {
  std::vector<std::string> keys;
  std::vector<int> expected;  // 1 hit, 0 miss
};

// Batches that together ask for every object once, each mixing hits and misses in a shuffled
// order.
std::vector<MetadataQuery> BuildMetadataQueries(const MetadataBenchOptions& options);

// What the timed batch_is_exist loop measured.
struct ExistsLoopResult {
  std::vector<double> rates;  // keys/s per rep
  size_t batches = 0;
  double seconds = 0;  // time inside the calls
};

// The timed loop of both modes: calls `exists` on `queries` round-robin, options.batches per
// rep (or for seconds/reps), checking every answer between calls. `what` names the call in
// failures ("batch_is_exist", "Exists").
Result<ExistsLoopResult> RunExistsLoop(
    const MetadataBenchOptions& options, const std::vector<MetadataQuery>& queries,
    const std::function<std::vector<int>(const std::vector<std::string>&)>& exists,
    const std::string& what, Progress& progress);

// The remote mode: starts `tierkv master --port 0` (this executable), fills it, times
// RemoteMaster::Exists, stops the child.
Status RunRemoteMetadataBench(const MetadataBenchOptions& options);

}  // namespace tierkv::bench
