// `tierkv bench redis`: the get workload of `tierkv bench remote` against a redis-server on
// 127.0.0.1, with the tierkv figures measured in the same run.
//
// The bench starts redis-server itself (a free port, no persistence: `--save '' --appendonly
// no`, in a temporary directory that is removed at the end; the server is stopped on every
// return). If redis-server is not on PATH it runs `apt-get install -y redis-server` (via
// `sudo -n` when not root) and fails with a clear error if that does not work. Per object
// size the same objects are SET once (untimed, pipelined), then read by `connections`
// threads, each with its own hiredis connection, each GETting its share of the objects in
// pipelines of `batch` keys, every value landing in the same destination slots as the
// tierkv gets (checked outside timing); the same again with raw RESP readers that receive each
// value straight into its slot, and redis-benchmark on the same server (redis_baselines.h).
// Ratios are against the fastest of the three in each rep (Redis at its best). The tierkv side is
// the remote bench's: a master and a store as child processes, an shm requester and a tcp requester
// (the tcp figures null, with the refusal's text, when Client::Create refuses it). Output: see
// docs/benchmarks.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "bench_util.h"
#include "tierkv/status.h"

namespace tierkv::bench {

struct RedisBenchOptions {
  CommonOptions common;
  uint64_t working_set_bytes = 512 * kMiB;  // per object size, as `bench remote`
  std::vector<uint64_t> object_sizes = {256 * kKiB, 2 * kMiB};
  size_t batch = 32;         // keys per tierkv batch call and per redis pipeline
  size_t pieces = 4;         // buffers per object on the tierkv side
  size_t connections = 4;    // redis client threads, one connection each
  bool small_pages = false;  // the tierkv store's segment on 4 KiB pages
};

// Targets, printed as PASS/FAIL in the human summary (never the exit code).
inline constexpr double kShmVsRedisTarget = 4.0;
inline constexpr double kTcpVsRedisTarget = 1.2;

// The exit code a run returns (through the CLI) when redis-server is missing and cannot be
// installed: the CTest smoke test treats it as skipped.
inline constexpr int kRedisUnavailableExitCode = 77;

// Runs the bench and prints its results. UNAVAILABLE_IN_CURRENT_MODE when redis-server is
// missing and cannot be installed, or the build has no hiredis; INVALID_PARAMS for bad
// options; INTERNAL_ERROR for a failed process, key or byte (the message names it).
Status RunRedisBench(const RedisBenchOptions& options);

}  // namespace tierkv::bench
