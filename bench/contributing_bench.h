// `tierkv bench remote --contributing N`: Mooncake's usual deployment measured — N engine
// processes (this executable, `bench contributing-worker`) each contribute a segment to one
// `tierkv master` on 127.0.0.1 and serve it over tierkv's TCP transport (protocol tcp). Worker
// i puts its objects on worker i+1's segment (preferred_segment) and reads them back, all
// workers at once, so every byte crosses the network path between two engine processes.
// Baseline, in the same run: a raw loopback TCP stream of the same bytes between two processes
// (bench/tcp_stream.h). Reported per size: per-process GB/s (the median over the workers) and
// the aggregate (all workers' bytes over the slowest one's time), each with its ratio to the
// raw stream; medians over the reps. Every code is checked and the bytes verified outside the
// timed regions. Output: docs/benchmarks.md ("remote --contributing").
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "remote_bench.h"
#include "tierkv/status.h"

namespace tierkv::bench {

// The remote bench's options; `workers` engine processes (>= 2).
Status RunContributingBench(const RemoteBenchOptions& options, size_t workers);

// The worker process: a client of `master` contributing `segment_bytes` over `protocol`,
// driven by lines on stdin (put/get/remove/exit), answering "@@ ..." lines on stdout.
// Returns the exit status.
int RunContributingWorker(const std::string& master, size_t index, uint64_t segment_bytes,
                          uint64_t buffer_bytes, size_t batch, size_t pieces,
                          const std::string& config_path);

}  // namespace tierkv::bench
