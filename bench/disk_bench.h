// `tierkv bench disk`: the SSD tier's raw data path — RegionLog over a TierFile (O_DIRECT)
// and an io_uring Device — against fio on a file in the same directory, measured in the
// same run.
//
// Demote: every object of the working set is appended to a fresh RegionLog (64 MiB regions)
// from a pre-faulted buffer, then Flush; timed → demote_gbps. Load: every object is read
// back with RegionLog::Read into a pre-faulted destination; timed → load_gbps; bytes are
// verified outside timing (both ends of every object and one whole object per 32). Baseline:
// fio (io_uring, direct) writing and reading the same amount of data with the region log's
// write size (one region flush) and read size (one record span) at queue depth 1, as the
// region log issues them. Output: one JSON line per measurement, then a summary line (see
// docs/benchmarks.md). The bench files are removed at the end.
#pragma once

#include <cstdint>
#include <string>

#include "bench_util.h"
#include "tierkv/status.h"

namespace tierkv::bench {

struct DiskBenchOptions {
  // One rep by default (each rep writes the whole working set); --config is unused.
  CommonOptions common{.json = false, .progress = false, .reps = 1, .config_path = {}};
  // Directory for the tier file and fio's file; created if missing (and then removed).
  std::string dir = "./tierkv-disk-bench";
  bool allow_tmpfs = false;  // tmpfs has no O_DIRECT: refused unless set
  uint64_t working_set_bytes = 1 * kGiB;
  uint64_t object_bytes = 2 * kMiB;
  uint64_t region_bytes = 64 * kMiB;
};

// Targets, printed as PASS/FAIL in the human summary (never the exit code).
inline constexpr double kLoadRatioTarget = 0.9;
inline constexpr double kDemoteRatioTarget = 0.9;

// Runs the bench and prints its results (JSON lines on stdout with --json, a table
// otherwise). Fails on bad options, a tmpfs directory without allow_tmpfs, a missing fio
// that cannot be installed, any failed append/read/fio job, or a wrong byte.
Status RunDiskBench(const DiskBenchOptions& options);

}  // namespace tierkv::bench
