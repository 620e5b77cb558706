// `tierkv bench disk-remote`: a store's SSD tier measured from a requester in another process,
// against fio on a file in the same directory, in the same run.
//
// A `tierkv master` and a `tierkv store` (children of this process, on 127.0.0.1) whose
// config gives the store an SSD tier in --dir (regions of --region-size, a staging buffer of
// --staging-buffer, room for the whole working set) and a DRAM segment of --segment-size,
// smaller than the working set. A requester here (protocol tcp: the staged bytes cross the
// UCX transport) puts every 2 MiB object (timed → put_gbps: puts while the master demotes the
// oldest objects into the store's tier over the TierMoves stream to make room), then gets the
// leading objects that only have a disk replica (timed → load_gbps: staged loads, the store
// reading its tier through its staging buffer and sending each range as it is read; the
// requester verifies every object's checksum). Every result code is checked and the bytes
// verified outside timing. Baselines: fio (io_uring, O_DIRECT, the same buffer page size
// policy as `bench disk`) reading the same bytes in record-sized blocks at the queue depth the
// store's stagers reach together (TierStager::kThreads batches of kStageBatchBytes),
// and writing them in region-sized blocks at queue depth 1; and raw TCP at its best (TcpStream:
// one stream of large writes from a child process into the same slots). remote_load_ratio is
// each rep's load against the slower of the two, the median over reps. Output: see
// docs/benchmarks.md. Every process and file is removed at the end.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench_util.h"
#include "tierkv/status.h"

namespace tierkv::bench {

struct RemoteDiskBenchOptions {
  CommonOptions common{.json = false, .progress = false, .reps = 1, .config_path = {}};
  std::string dir = "./tierkv-disk-bench";  // created if missing (and then removed)
  // --dirs: several directories (one per drive) instead of `dir`: the store's tier striped over
  // a file in each, fio run on a file in each at once.
  std::vector<std::string> dirs;
  uint64_t working_set_bytes = 1 * kGiB;
  uint64_t object_bytes = 2 * kMiB;
  uint64_t segment_bytes = 256 * kMiB;  // the store's DRAM: most of the working set is demoted
  uint64_t region_bytes = 64 * kMiB;
  uint64_t staging_bytes = 1280 * kMiB;  // the store's staging_buffer_size
  size_t batch = 32;                     // keys per put and get call
  std::string fio_mem = "auto";          // as `bench disk`: auto, malloc, mmaphuge
};

// Issue 27's target for remote_load_ratio: staged loads against the slower of fio read and raw
// TCP at its best, paired per rep.
inline constexpr double kRemoteLoadRatioTarget = 0.8;

// Runs the bench and prints its results (JSON lines on stdout with --json, a table
// otherwise). Fails on bad options, a directory on tmpfs or without O_DIRECT, processes that do
// not start, a failed put or get, a wrong byte, no object demoted, or a failed fio job.
Status RunRemoteDiskBench(const RemoteDiskBenchOptions& options);

}  // namespace tierkv::bench
