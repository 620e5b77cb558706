// `tierkv bench embedded`: data-path throughput of an embedded client (the
// master and the segment in this process) against a plain memcpy of the same
// bytes, measured in the same run.
//
// For each object size: a working set of distinct objects well above L3 is put
// with BatchPutFromMultiBuffers (each object from `pieces` buffers) and read back
// with BatchGetIntoMultiBuffers into other registered buffers, in batches of
// `batch` keys; every return code is checked and the bytes spot-checked outside
// the timed region. Output: one JSON line per (op, size), then a summary line for
// 2 MiB objects (see docs/benchmarks.md). With `paired`, another bench drives the reps
// through stdin (see EmbeddedBenchOptions::paired).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "bench_util.h"
#include "tierkv/status.h"

namespace tierkv::bench {

struct EmbeddedBenchOptions {
  CommonOptions common;
  // Bytes of distinct objects per object size; keep it well above L3 (32 MiB).
  uint64_t working_set_bytes = 512 * kMiB;
  std::vector<uint64_t> object_sizes = {256 * kKiB, 2 * kMiB, 8 * kMiB};
  size_t batch = 32;  // keys per batch call
  size_t pieces = 4;  // buffers per object (scatter on put, gather on get)
  // One rep per line on stdin, a JSON line per rep ({"op":"rep", put/get/memcpy_gbps}) after
  // a {"op":"ready"} line, until end of input; needs --json and one object size; no summary.
  bool paired = false;
};

// Targets, printed as PASS/FAIL in the human summary (never the exit code).
inline constexpr double kGetRatioTarget = 0.9;
inline constexpr double kPutRatioTarget = 0.8;

// Runs the bench and prints its results (JSON lines on stdout with --json, a
// table otherwise). Fails on bad options, a client that cannot start, any
// failed key or a wrong byte; the message names the key.
Status RunEmbeddedBench(const EmbeddedBenchOptions& options);

}  // namespace tierkv::bench
