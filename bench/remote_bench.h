// `tierkv bench remote`: the distributed data path — a requester in this process, a
// `tierkv master` and a `tierkv store` as child processes on 127.0.0.1 — against the
// baselines of its transports, measured in the same run.
//
// Per object size (64 KiB, 256 KiB and 2 MiB by default) a working set of distinct objects is put
// with BatchPutFromMultiBuffers and read back with BatchGetIntoMultiBuffers (registered,
// pre-faulted buffers, `batch` keys per call), once per transport:
//  - shm (the store's segment mapped through the shared-memory transport): against a
//    single-thread memcpy of the same bytes between the same buffers;
//  - tcp (the store's segment over tierkv's TCP transport on 127.0.0.1): against raw loopback
//    TCP at its best: the same bytes as one stream of 4 MiB writes from a forked child process
//    to this one (an object-at-a-time exchange, slower for small objects, is reported beside). When
//    Client::Create refuses a tcp requester, the tcp figures are reported as null with the
//    refusal's text (never a number).
// Ratios are medians of per-rep ratios (each rep times a path and its baseline back to back),
// with their spread. Every result code is checked and the bytes verified outside the timed
// regions. Every
// process started is stopped at the end, also on errors. Output: see docs/benchmarks.md.
//
// The workload and the processes are shared with `tierkv bench redis` and `disk-remote`
// (workload.h, local_cluster.h); the raw TCP baseline is this bench's own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "bench_util.h"
#include "tierkv/status.h"

namespace tierkv::bench {

struct RemoteBenchOptions {
  CommonOptions common;
  // Bytes of distinct objects per object size; keep it well above L3 (32 MiB).
  uint64_t working_set_bytes = 512 * kMiB;
  std::vector<uint64_t> object_sizes = {64 * kKiB, 256 * kKiB, 2 * kMiB};
  size_t batch = 32;         // keys per batch call
  size_t pieces = 4;         // buffers per object (scatter on put, gather on get)
  bool small_pages = false;  // the store's segment on 4 KiB pages (`tierkv store --small-pages`)
  // A second cluster with a cluster token: its tcp requester is timed beside the first's, in the
  // same reps, and the ratio with / without the token reported.
  bool auth = false;
  // A third cluster with the token and TLS on the data plane (tierkv store --data-tls-cert),
  // timed the same way; its ratio is reported (no target).
  bool tls = false;
};

// Targets, printed as PASS/FAIL in the human summary (never the exit code).
inline constexpr double kShmGetRatioTarget = 0.85;
inline constexpr double kTcpGetRatioTarget = 0.8;
// tcp gets with the cluster token against without it (paired reps): >= 0.97.
inline constexpr double kTokenDataPlaneRatioTarget = 0.97;

// Runs the bench and prints its results (JSON lines on stdout with --json, a table
// otherwise). Fails on bad options (INVALID_PARAMS), a process or client that cannot start,
// any failed key or a wrong byte; the message names the key.
Status RunRemoteBench(const RemoteBenchOptions& options);

}  // namespace tierkv::bench
