// `tierkv bench disk`: the SSD tier measured through the client API (embedded mode) against
// fio on a file in the same directory, in the same run.
//
// Per rep, a fresh ClientImpl with enable_offload (one tier file in --dir, enough regions
// for the working set plus a spare, so nothing is evicted from disk) gets every object put
// from a registered, pre-faulted source buffer (untimed). Demote (timed → demote_gbps): the
// master's EvictFromSegment over the whole segment (every object written to the tier's
// region log through the segment's tier mover) and the tier's Flush; every object must end
// up with a disk replica only. Load (timed → load_gbps): BatchGetIntoMultiBuffers of every
// object, --batch keys per call, into a registered, poisoned destination: staged loads
// (StagedLoader: parts staged with batched io_uring reads while the previous part is copied
// out and verified); every result must be the object size and the bytes are verified
// outside timing (both ends of every object, one whole object per 32). Baseline: fio
// (io_uring, O_DIRECT) writing with the region log's write size at queue depth 1 (one
// region flush at a time) and reading with one record span per request at the queue depth
// of one staged part, the same number of bytes. Output: one JSON line per measurement, then
// a summary line (see docs/benchmarks.md). The bench files are removed at the end.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "bench_util.h"
#include "tierkv/status.h"

namespace tierkv::bench {

struct DiskBenchOptions {
  // 5 reps by default: each rep is a fresh put and demotion of the whole working set (one
  // timed demotion, between two fio writes) and 3 timed loads (each between a fio write and a
  // fio read), and takes ~13 s; the ratios are medians of 5 demotion and 15 load pairs.
  // --config is the base client config; the bench sets the segment, SSD tier and staging keys
  // itself (see the docs).
  CommonOptions common{.json = false, .progress = false, .reps = 5, .config_path = {}};
  // Directory for the tier file and fio's file; created if missing (and then removed).
  std::string dir = "./tierkv-disk-bench";
  // --dirs: several directories (e.g. one per drive), used instead of `dir`: the tier is
  // striped over one file in each (offload_paths) and fio's baselines run one job per
  // directory at once, on a file in each.
  std::vector<std::string> dirs;
  bool allow_tmpfs = false;  // tmpfs has no O_DIRECT: refused unless set
  uint64_t working_set_bytes = 1 * kGiB;
  uint64_t object_bytes = 2 * kMiB;
  uint64_t region_bytes = 64 * kMiB;
  uint64_t staging_bytes = 1280 * kMiB;  // the client's staging_buffer_size
  size_t batch = 32;                     // keys per BatchGetIntoMultiBuffers / put call
  // fio's IO buffers: "auto" (2 MiB hugetlb pages via --mem=mmaphuge, like the tier's 2 MiB
  // pages; when too few are free and /proc/sys/vm/nr_hugepages is writable, the bench raises it
  // for the fio jobs and restores it; else malloc), "malloc" (fio's default: 4 KiB pages with
  // THP in madvise mode) or "mmaphuge" (as auto, but fail instead of falling back).
  std::string fio_mem = "auto";
};

// Targets, printed as PASS/FAIL in the human summary (never the exit code).
// statfs(2)'s f_type of tmpfs: the disk benches refuse it (no direct IO) unless told otherwise.
inline constexpr int64_t kTmpfsMagic = 0x01021994;
// DeviceOptions::queue_depth of the tier's io_uring ring in the disk benches.
inline constexpr uint32_t kRingQueueDepth = 32;
// INVALID_PARAMS with `message`: a bad option of a disk bench.
inline Status BadDiskOption(std::string message) {
  return Status(ErrorCode::INVALID_PARAMS, std::move(message));
}

inline constexpr double kLoadRatioTarget = 0.9;
inline constexpr double kDemoteRatioTarget = 0.9;

// Runs the bench and prints its results (JSON lines on stdout with --json, a table
// otherwise). Fails on bad options or config, a tmpfs directory without allow_tmpfs, a
// missing fio that cannot be installed, a failed put, an object not demoted, a failed get,
// a failed fio job, or a wrong byte.
Status RunDiskBench(const DiskBenchOptions& options);

}  // namespace tierkv::bench
