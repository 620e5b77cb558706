// `tierkv bench metadata`: metadata throughput of an embedded client, measured
// as keys per second through BatchIsExist.
//
// Puts `objects` small objects under keys shaped like the connector's KV keys
// ("model@tp_rank:0@pcp0@dcp0@pp_rank:0@group:0@<64 hex>"), then calls
// BatchIsExist on `batch`-key batches mixing hits and misses (`hit_ratio`),
// for a time budget or a fixed number of batches. Every answer is checked
// (hit -> 1, miss -> 0) outside the timed calls.
#pragma once

#include <cstddef>
#include <cstdint>

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
};

inline constexpr double kKeysPerSecondTarget = 5e6;

// Runs the bench and prints its results (JSON lines on stdout with --json, a
// table otherwise). Fails on bad options, a client that cannot start, a failed
// put or a wrong answer.
Status RunMetadataBench(const MetadataBenchOptions& options);

}  // namespace tierkv::bench
