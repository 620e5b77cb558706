// `tierkv bench failover`: the pool surviving its master (docs/architecture.md, "Surviving the
// master"), measured end to end on 127.0.0.1 — an etcd (Debian's etcd-server) and `masters`
// masters with --ha started by the bench, 2 stores following the leader through etcd, and
// `requesters` requester processes (this binary's hidden `bench failover-worker`).
//
// 1. Fill: this process puts `working_set_bytes` of objects of `object_bytes` (or, with
//    `objects`, that many objects of `object_bytes`: the recovery of many small objects), and
//    waits one heartbeat so that every store's index has them.
// 2. Load: the requesters get random batches of those objects (every byte checked against its
//    pattern) and put new ones (`put_ratio` of their calls), recording every call.
// 3. After `warm_s`, the leader is killed (SIGKILL). A standby takes over; the stores
//    re-register and report their indexes; the new leader rebuilds its table from them.
// 4. After `seconds` of load in all, the requesters stop and this process reads every object
//    of the fill back through the new leader.
// Summary: {"bench":"failover", "objects_before", "objects_readable_after", "recovered_ratio",
// "unavailable_s" (the kill to the first successful get that started after it), "p99_get_ms_during"
// (gets started from 1 s before the kill to 1 s after that first success, failed ones
// included), "wrong_bytes" (0: any other value is a bug), "recovery_s" (the longest store's
// report-to-linked time on the new leader), ...}; the targets: recovered_ratio >= 0.99,
// unavailable_s <= 5, wrong_bytes == 0, recovery_s < 10 for 1 M objects. Every process
// started is stopped at the end, also on errors. Thread-safety: none.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "bench_util.h"
#include "tierkv/status.h"

namespace tierkv::bench {

struct FailoverBenchOptions {
  CommonOptions common;
  uint64_t working_set_bytes = kGiB;  // bytes of objects committed before the kill
  uint64_t object_bytes = kMiB;
  size_t objects = 0;      // > 0: this many objects of object_bytes instead of working_set
  size_t requesters = 4;   // requester processes
  size_t masters = 3;      // masters on etcd (one leads)
  size_t batch = 8;        // keys per get call of a requester
  double put_ratio = 0.1;  // share of a requester's calls that are puts of new objects
  double warm_s = 2.0;     // load before the kill
  double seconds = 12.0;   // load in all
  std::string dir = "failover-bench";  // etcd's data directory goes here
  bool small_pages = false;
};

inline constexpr double kRecoveredRatioTarget = 0.99;
inline constexpr double kUnavailableSecondsTarget = 5.0;
inline constexpr double kRecoverySecondsTarget = 10.0;  // for 1 M objects

// Runs the bench and prints its results (JSON lines with --json, a summary otherwise).
// UNAVAILABLE_IN_CURRENT_MODE when there is no etcd binary (apt-get install etcd-server);
// INVALID_PARAMS for bad options; INTERNAL_ERROR when a process cannot start or the pool does not
// come back within a minute.
Status RunFailoverBench(const FailoverBenchOptions& options);

// The requester process (hidden subcommand `tierkv bench failover-worker`).
struct FailoverWorkerOptions {
  std::string master;  // etcd://...
  size_t count = 0;    // objects of the fill (keys "failover@fill@<i>")
  uint64_t object_bytes = 0;
  size_t batch = 8;
  double put_ratio = 0.1;
  double seconds = 10;
  uint64_t seed = 1;
  std::string out;  // where its records go (binary; read by the parent)
};
Status RunFailoverWorker(const FailoverWorkerOptions& options);

// Exit status of the bench when etcd is missing (the CI smoke test skips).
inline constexpr int kFailoverUnavailableExitCode = 77;

}  // namespace tierkv::bench
