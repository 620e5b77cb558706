// The `tierkv` command line: one binary, one subcommand per job.
//
//   tierkv bench embedded [flags]   data-path throughput vs memcpy
//   tierkv master [flags]           the metadata service as its own process (gRPC)
//   tierkv stat --master HOST:PORT  what a running master holds (one Stats RPC)
//   tierkv bench metadata [flags]   BatchIsExist keys per second (--remote: over gRPC)
//   tierkv bench disk [flags]       SSD tier demote/load through the client vs fio
//   tierkv bench disk-remote [flags] a store's SSD tier loaded by a requester (tcp) vs fio
//   tierkv bench remote [flags]     master + store processes: shm/tcp put/get vs memcpy/raw TCP
//   tierkv bench redis [flags]      the remote get workload against a redis-server it starts
//   tierkv bench python [flags]     the Python binding vs the C++ client (bench/python_bench.py)
//   tierkv bench engine [flags]     the tiny engine's TTFT with tierkv (bench/engine_bench.py)
//   tierkv bench trace [flags]      a request trace replayed through a store vs LRU/Belady
//   tierkv bench failover [flags]   the leader killed under load: recovery from the stores
//
// Exit codes: 0 success; 1 a run failed (a client error, a wrong byte); 2 bad
// option values or a rejected config; CLI11's own codes (> 100) for command
// lines it cannot parse (unknown flag, value out of range, missing subcommand).
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "common/logging.h"
#include "contributing_bench.h"
#include "disk_bench.h"
#include "embedded_bench.h"
#include "exit_codes.h"
#include "failover_bench.h"
#include "master_command.h"
#include "metadata_bench.h"
#include "mooncake_flags.h"
#include "redis_bench.h"
#include "remote_bench.h"
#include "remote_disk_bench.h"
#include "stat_command.h"
#include "store_command.h"
#include "tierkv/config.h"
#include "tierkv/status.h"
#include "trace_bench.h"

#ifndef TIERKV_VERSION  // set by CMake from project(VERSION)
#define TIERKV_VERSION "unknown"
#endif

namespace {

using tierkv::cli::kExitFailed;
using tierkv::cli::kExitUsage;

// Accepts what tierkv::ParseSize accepts ("512MiB", "2MB", "4096").
const CLI::Validator kSizeValidator(
    [](const std::string& text) -> std::string {
      tierkv::Result<uint64_t> size = tierkv::ParseSize(text);
      if (!size.ok()) return "not a size: " + size.status().message();
      if (*size == 0) return "must be > 0";
      return "";
    },
    "SIZE");

void AddCommonFlags(CLI::App* command, tierkv::bench::CommonOptions* common) {
  command->add_flag("--json", common->json,
                    "JSON lines on stdout (one per measurement, then a summary); the "
                    "human-readable summary goes to stderr");
  command->add_option("--reps", common->reps, "Repetitions; the median is reported")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  command->add_option(
      "--config", common->config_path,
      "JSON client config (tierkv::LoadConfig); default: $TIERKV_CONFIG_PATH, "
      "else built-in defaults; a missing or unreadable file is INVALID_CONFIG, exit "
      "status 2");
  command->add_flag("--progress", common->progress,
                    "Show a progress line on stderr even when it is not a terminal");
}

uint64_t SizeOf(const std::string& text) { return *tierkv::ParseSize(text); }

// Runs a bench's body: logging to stderr (warnings only unless
// TIERKV_LOG_LEVEL says otherwise), and the exit code from its Status.
int Report(const char* name, const tierkv::Status& status) {
  if (status.ok()) return 0;
  std::cerr << "tierkv bench " << name << ": error: " << status.ToString() << std::endl;
  const bool usage = status.code() == tierkv::ErrorCode::INVALID_PARAMS ||
                     status.code() == tierkv::ErrorCode::INVALID_CONFIG;
  return usage ? kExitUsage : kExitFailed;
}

// `tierkv bench python`: replaces this process with the bench script under the interpreter the
// module was built for, the build's package first on PYTHONPATH and this executable named for
// the C++ baselines. Returns only on failure.
int RunPythonBench(const char* script, const std::vector<std::string>& args) {
#ifdef TIERKV_PYTHON_BENCH
  std::string self = "/proc/self/exe";
  char path[4096];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n > 0) self.assign(path, static_cast<size_t>(n));
  const char* old = std::getenv("PYTHONPATH");
  const std::string pythonpath = std::string(TIERKV_PYTHON_DIR) +
                                 (old != nullptr && *old != '\0' ? ":" + std::string(old) : "");
  setenv("PYTHONPATH", pythonpath.c_str(), 1);
  std::vector<std::string> argv_strings = {TIERKV_PYTHON_EXECUTABLE, script, "--tierkv", self};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv_ptrs;
  for (auto& a : argv_strings) argv_ptrs.push_back(a.data());
  argv_ptrs.push_back(nullptr);
  execv(TIERKV_PYTHON_EXECUTABLE, argv_ptrs.data());
  std::cerr << "tierkv bench python: cannot run " << TIERKV_PYTHON_EXECUTABLE << ": "
            << std::strerror(errno) << std::endl;
  return kExitFailed;
#else
  (void)script;
  (void)args;
  std::cerr << "tierkv bench python: this build has no Python module (configure with "
               "-DTIERKV_PYTHON=ON, the default outside sanitizer builds)"
            << std::endl;
  return kExitFailed;
#endif
}

}  // namespace

int main(int argc, char** argv) {
  // stdout carries results only (JSON lines are parsed by scripts); InitLogging
  // sends logs to stderr.
  tierkv::InitLogging();
  if (std::getenv("TIERKV_LOG_LEVEL") == nullptr) spdlog::set_level(spdlog::level::warn);

  CLI::App app{"tierkv: a tiered KV-cache store for LLM inference engines", "tierkv"};
  app.set_version_flag("--version", std::string("tierkv ") + TIERKV_VERSION);
  app.require_subcommand(1);
  int exit_code = 0;  // set by the subcommand that ran

  // ---- bench ----------------------------------------------------------------
  CLI::App* bench = app.add_subcommand("bench", "Measure tierkv on this machine");
  bench->require_subcommand(1);

  tierkv::bench::EmbeddedBenchOptions embedded_options;
  std::string working_set = "512MiB";
  std::vector<std::string> sizes = {"256KiB", "2MiB", "8MiB"};
  CLI::App* embedded = bench->add_subcommand(
      "embedded",
      "Put/get throughput of an embedded client (in-process master and segment) against a "
      "single-thread memcpy of the same bytes");
  AddCommonFlags(embedded, &embedded_options.common);
  embedded
      ->add_option("--working-set", working_set,
                   "Bytes of distinct objects per object size (keep it above L3)")
      ->check(kSizeValidator)
      ->capture_default_str();
  embedded->add_option("--sizes", sizes, "Object sizes, comma-separated")
      ->delimiter(',')
      ->check(kSizeValidator)
      ->capture_default_str();
  embedded->add_option("--batch", embedded_options.batch, "Keys per batch call")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  embedded
      ->add_option("--pieces", embedded_options.pieces,
                   "Buffers per object (scatter on put, gather on get)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  embedded->add_flag(
      "--paired", embedded_options.paired,
      "Run one rep per line read on stdin, each printed as a JSON line at once, until "
      "end of input (for a bench that interleaves its own reps; needs --json and one "
      "--sizes)");
  embedded->callback([&] {
    embedded_options.working_set_bytes = SizeOf(working_set);
    embedded_options.object_sizes.clear();
    for (const std::string& size : sizes) embedded_options.object_sizes.push_back(SizeOf(size));
    exit_code = Report("embedded", tierkv::bench::RunEmbeddedBench(embedded_options));
  });

  tierkv::bench::MetadataBenchOptions metadata_options;
  std::string object_size = "64";
  CLI::App* metadata = bench->add_subcommand(
      "metadata", "BatchIsExist throughput (keys/s) of an embedded client over small objects");
  AddCommonFlags(metadata, &metadata_options.common);
  metadata->add_option("--objects", metadata_options.objects, "Objects put before timing")
      ->check(CLI::Range(1, 1 << 26))
      ->capture_default_str();
  metadata->add_option("--object-size", object_size, "Bytes per object")
      ->check(kSizeValidator)
      ->capture_default_str();
  metadata->add_option("--batch", metadata_options.batch, "Keys per BatchIsExist call")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  metadata
      ->add_option("--hit-ratio", metadata_options.hit_ratio, "Share of queried keys that exist")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  metadata
      ->add_option("--seconds", metadata_options.seconds,
                   "Time spent in BatchIsExist calls, split over the reps")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  metadata
      ->add_option("--batches", metadata_options.batches,
                   "Fixed number of batches per rep instead of --seconds (0 = use --seconds)")
      ->capture_default_str();
  metadata
      ->add_option("--compare-policy", metadata_options.compare_policy,
                   "Paired runs (--reps pairs, order alternating): put and batch_is_exist with "
                   "eviction_policy lru and with this one, fresh clients each; the ratios are "
                   "medians of the pairs (target >= 0.90)")
      ->check(CLI::IsMember({"lru", "reuse"}));
  metadata->add_flag("--parent-hints", metadata_options.parent_hints,
                     "Puts name the previous object as their parent (ReplicateConfig::"
                     "parent_keys)");
  metadata->add_flag("--remote", metadata_options.remote,
                     "Through a `tierkv master` child process over gRPC (127.0.0.1, a free port): "
                     "RemoteMaster::Exists, one RPC per batch, target >= 1e6 keys/s");
  metadata->add_flag("--auth", metadata_options.auth,
                     "With --remote: paired reps against a master without a cluster token and "
                     "one with (every call carries it); reports the ratio (target >= 0.9)");
  metadata->add_flag("--scale", metadata_options.scale,
                     "The scale sweep at 65536, 1 Mi and --objects objects (64-byte keys): "
                     "master bytes per object, put/exists/get keys/s, eviction rounds and restart "
                     "recovery (embedded), with ratios against 65536");
  metadata->callback([&] {
    metadata_options.object_bytes = SizeOf(object_size);
    exit_code = Report("metadata", metadata_options.scale
                                       ? tierkv::bench::RunMetadataScaleBench(metadata_options)
                                       : tierkv::bench::RunMetadataBench(metadata_options));
  });

  tierkv::bench::DiskBenchOptions disk_options;
  std::string disk_working_set = "1GiB";
  std::string disk_staging = "1280MiB";
  std::string disk_region = "64MiB";
  CLI::App* disk = bench->add_subcommand(
      "disk",
      "The SSD tier through the client API (embedded): demotion (EvictFromSegment + Flush) and "
      "loads (BatchGetIntoMultiBuffers: direct, or staged) over an O_DIRECT io_uring tier file, "
      "against fio on a file in the same directory (3 loads per rep interleaved with fio's runs; "
      "medians)");
  AddCommonFlags(disk, &disk_options.common);
  disk->add_option("--dir", disk_options.dir,
                   "Directory for the bench files (created if missing; files removed at the end)")
      ->capture_default_str();
  disk->add_option("--dirs", disk_options.dirs,
                   "Several directories, comma-separated (one per drive), instead of --dir: the "
                   "tier striped over a file in each, fio run on a file in each at once")
      ->delimiter(',');
  disk->add_flag("--allow-tmpfs", disk_options.allow_tmpfs,
                 "Accept a directory on tmpfs (memory, buffered IO: not a disk figure)");
  disk->add_option("--working-set", disk_working_set, "Bytes of distinct 2 MiB objects")
      ->check(kSizeValidator)
      ->capture_default_str();
  disk->add_option("--staging-buffer", disk_staging,
                   "The client's staging_buffer_size (staged loads land here)")
      ->check(kSizeValidator)
      ->capture_default_str();
  disk->add_option("--region-size", disk_region, "The client's offload_region_size")
      ->check(kSizeValidator)
      ->capture_default_str();
  disk->add_option("--batch", disk_options.batch, "Keys per put and get call")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  disk->add_option("--fio-mem", disk_options.fio_mem,
                   "fio's IO buffers: auto (2 MiB hugetlb pages, --mem=mmaphuge, raising "
                   "vm.nr_hugepages for the fio jobs if needed and allowed; else malloc), "
                   "malloc, or mmaphuge (fail instead of falling back to malloc)")
      ->check(CLI::IsMember({"auto", "malloc", "mmaphuge"}))
      ->capture_default_str();
  disk->callback([&] {
    disk_options.working_set_bytes = SizeOf(disk_working_set);
    disk_options.staging_bytes = SizeOf(disk_staging);
    disk_options.region_bytes = SizeOf(disk_region);
    exit_code = Report("disk", tierkv::bench::RunDiskBench(disk_options));
  });

  tierkv::bench::RemoteDiskBenchOptions rdisk_options;
  std::string rdisk_working_set = "1GiB", rdisk_segment = "256MiB", rdisk_staging = "1280MiB",
              rdisk_region = "64MiB";
  CLI::App* rdisk = bench->add_subcommand(
      "disk-remote",
      "A store's SSD tier from a requester in another process: a `tierkv master` and a `tierkv "
      "store` with an SSD tier (children, 127.0.0.1); a tcp requester puts a working set larger "
      "than the store's DRAM (the master demotes into the tier) and loads the demoted objects "
      "back (staged loads over TCP), against fio on a file in the same directory");
  AddCommonFlags(rdisk, &rdisk_options.common);
  rdisk
      ->add_option("--dir", rdisk_options.dir,
                   "Directory for the tier and fio files (created if missing; removed at the end)")
      ->capture_default_str();
  rdisk
      ->add_option("--dirs", rdisk_options.dirs,
                   "Several directories, comma-separated (one per drive), instead of --dir: the "
                   "store's tier striped over a file in each, fio run on a file in each at once")
      ->delimiter(',');
  rdisk->add_option("--working-set", rdisk_working_set, "Bytes of distinct 2 MiB objects")
      ->check(kSizeValidator)
      ->capture_default_str();
  rdisk->add_option("--segment-size", rdisk_segment, "The store's DRAM segment")
      ->check(kSizeValidator)
      ->capture_default_str();
  rdisk->add_option("--staging-buffer", rdisk_staging, "The store's staging_buffer_size")
      ->check(kSizeValidator)
      ->capture_default_str();
  rdisk->add_option("--region-size", rdisk_region, "The store's offload_region_size")
      ->check(kSizeValidator)
      ->capture_default_str();
  rdisk->add_option("--batch", rdisk_options.batch, "Keys per put and get call")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  rdisk->add_option("--fio-mem", rdisk_options.fio_mem, "fio's IO buffers, as for `bench disk`")
      ->check(CLI::IsMember({"auto", "malloc", "mmaphuge"}))
      ->capture_default_str();
  rdisk->callback([&] {
    rdisk_options.working_set_bytes = SizeOf(rdisk_working_set);
    rdisk_options.segment_bytes = SizeOf(rdisk_segment);
    rdisk_options.staging_bytes = SizeOf(rdisk_staging);
    rdisk_options.region_bytes = SizeOf(rdisk_region);
    exit_code = Report("disk-remote", tierkv::bench::RunRemoteDiskBench(rdisk_options));
  });

  tierkv::bench::RemoteBenchOptions remote_options;
  std::string remote_working_set = "512MiB";
  std::vector<std::string> remote_sizes = {"64KiB", "256KiB", "2MiB"};
  CLI::App* remote = bench->add_subcommand(
      "remote",
      "Batched put/get from a requester to a `tierkv store` (with a `tierkv master`; child "
      "processes on 127.0.0.1), per transport: shm against a single-thread memcpy, tcp against a "
      "raw loopback TCP stream between two processes (null if the tcp requester is refused)");
  AddCommonFlags(remote, &remote_options.common);
  remote
      ->add_option("--working-set", remote_working_set,
                   "Bytes of distinct objects per object size (the store's segment is sized to "
                   "2x this + 64 MiB)")
      ->check(kSizeValidator)
      ->capture_default_str();
  remote->add_option("--object-size,--sizes", remote_sizes, "Object sizes, comma-separated")
      ->delimiter(',')
      ->check(kSizeValidator)
      ->capture_default_str();
  remote->add_option("--batch", remote_options.batch, "Keys per batch call")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  remote
      ->add_option("--pieces", remote_options.pieces,
                   "Buffers per object (scatter on put, gather on get)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  remote->add_flag("--small-pages", remote_options.small_pages,
                   "The store's segment on 4 KiB pages (default: 2 MiB pages when available)");
  remote->add_flag("--auth", remote_options.auth,
                   "Also run a cluster with a cluster token and time its tcp requester in the "
                   "same reps: the ratio with / without the token (target >= 0.97)");
  remote->add_flag("--tls", remote_options.tls,
                   "Also run a cluster with the token and TLS on the data port (certificates made "
                   "with openssl) and time its tcp requester in the same reps: the ratio against "
                   "plaintext, reported");
  size_t remote_contributing = 0;
  remote
      ->add_option("--contributing", remote_contributing,
                   "Mooncake's deployment instead: N engine processes (>= 2) each contributing a "
                   "segment to the master over TCP, process i writing to and reading from "
                   "process i+1's segment, all at once, against a raw loopback TCP stream "
                   "(--working-set is per process; 0 = the store mode)")
      ->check(CLI::Range(0, 16))
      ->capture_default_str();
  remote->callback([&] {
    remote_options.working_set_bytes = SizeOf(remote_working_set);
    remote_options.object_sizes.clear();
    for (const std::string& size : remote_sizes) {
      remote_options.object_sizes.push_back(SizeOf(size));
    }
    exit_code = Report(
        "remote", remote_contributing > 0
                      ? tierkv::bench::RunContributingBench(remote_options, remote_contributing)
                      : tierkv::bench::RunRemoteBench(remote_options));
  });
  // The engine process of `remote --contributing` (started by it; not for direct use).
  std::vector<std::string> worker_args;
  CLI::App* contributing_worker = bench->add_subcommand("contributing-worker", "");
  contributing_worker->group("");  // hidden: started by `bench remote --contributing` only
  contributing_worker->add_option("args", worker_args)->expected(7);
  contributing_worker->callback([&] {
    exit_code = tierkv::bench::RunContributingWorker(
        worker_args[0], std::stoul(worker_args[1]), std::stoull(worker_args[2]),
        std::stoull(worker_args[3]), std::stoul(worker_args[4]), std::stoul(worker_args[5]),
        worker_args[6] == "-" ? std::string() : worker_args[6]);
  });

  tierkv::bench::RedisBenchOptions redis_options;
  std::string redis_working_set = "512MiB";
  std::vector<std::string> redis_sizes = {"256KiB", "2MiB"};
  CLI::App* redis = bench->add_subcommand(
      "redis",
      "The remote get workload against a redis-server started on 127.0.0.1 (no persistence; "
      "installed with apt-get if missing), read by several connections with pipelined GETs, "
      "against tierkv's shm (and tcp) gets in the same run");
  AddCommonFlags(redis, &redis_options.common);
  redis->add_option("--working-set", redis_working_set, "Bytes of distinct objects per size")
      ->check(kSizeValidator)
      ->capture_default_str();
  redis->add_option("--object-size,--sizes", redis_sizes, "Object sizes, comma-separated")
      ->delimiter(',')
      ->check(kSizeValidator)
      ->capture_default_str();
  redis->add_option("--batch", redis_options.batch, "Keys per tierkv batch call and redis pipeline")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  redis->add_option("--pieces", redis_options.pieces, "Buffers per object on the tierkv side")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  redis
      ->add_option("--connections", redis_options.connections,
                   "redis client threads, one connection each")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  redis->add_flag("--small-pages", redis_options.small_pages,
                  "The tierkv store's segment on 4 KiB pages");
  redis->callback([&] {
    redis_options.working_set_bytes = SizeOf(redis_working_set);
    redis_options.object_sizes.clear();
    for (const std::string& size : redis_sizes) redis_options.object_sizes.push_back(SizeOf(size));
    const tierkv::Status status = tierkv::bench::RunRedisBench(redis_options);
    exit_code = Report("redis", status);
    // redis-server missing and not installable (or no hiredis): the smoke test skips.
    if (status.code() == tierkv::ErrorCode::UNAVAILABLE_IN_CURRENT_MODE) {
      exit_code = tierkv::bench::kRedisUnavailableExitCode;
    }
  });

  CLI::App* python = bench->add_subcommand(
      "python",
      "The Python binding (tierkv.DistributedStore) against the C++ client in the same run: "
      "multi-buffer put/get of 2 MiB objects and batch_is_exist (bench/python_bench.py; its "
      "flags, e.g. --json --reps N --working-set SIZE, pass through: `tierkv bench python "
      "--help` shows them)");
  python->allow_extras();
  python->set_help_flag();  // --help goes to the script
#ifdef TIERKV_PYTHON_BENCH
  python->callback([&] { exit_code = RunPythonBench(TIERKV_PYTHON_BENCH, python->remaining()); });
#else
  python->callback([&] { exit_code = RunPythonBench(nullptr, python->remaining()); });
#endif

  CLI::App* engine = bench->add_subcommand(
      "engine",
      "The tiny engine (examples/tiny_engine) reusing its KV cache through tierkv: TTFT "
      "recomputed vs reloaded from DRAM and from the SSD tier, half cached, load rates vs "
      "memcpy and fio, and a trace replay vs the engine's local cache alone "
      "(bench/engine_bench.py; its flags, e.g. --json --tokens N, pass through)");
  engine->allow_extras();
  engine->set_help_flag();  // --help goes to the script
#ifdef TIERKV_ENGINE_BENCH
  engine->callback([&] { exit_code = RunPythonBench(TIERKV_ENGINE_BENCH, engine->remaining()); });
#else
  engine->callback([&] { exit_code = RunPythonBench(nullptr, engine->remaining()); });
#endif

  CLI::App* soak = bench->add_subcommand(
      "soak",
      "A cluster (etcd, 3 masters, 3 stores, one with an SSD tier, requester processes) under "
      "a mixed load with every byte checked, while a chaos thread kills, stops and restarts "
      "stores and masters and cuts and heals links: wrong bytes and unexpected errors (must "
      "be 0), memory growth, latency per minute, a PNG (bench/soak_bench.py; hosts in "
      "network namespaces as root, or --loopback; its flags, e.g. --duration 30m --json, "
      "pass through)");
  soak->allow_extras();
  soak->set_help_flag();  // --help goes to the script
#ifdef TIERKV_SOAK_BENCH
  soak->callback([&] { exit_code = RunPythonBench(TIERKV_SOAK_BENCH, soak->remaining()); });
#else
  soak->callback([&] { exit_code = RunPythonBench(nullptr, soak->remaining()); });
#endif

  tierkv::bench::TraceBenchOptions trace_options;
  std::string trace_ssd = "0";
  CLI::App* trace = bench->add_subcommand(
      "trace",
      "Replays a KV-cache request trace (Mooncake FAST'25 JSON lines) through a real store in "
      "arrival order (lookup, get the prefix hit, put the rest) and reports its prefix-hit rate "
      "beside exact LRU and Belady simulations at the same capacity, per tier");
  AddCommonFlags(trace, &trace_options.common);
  trace->add_option("--trace", trace_options.trace_path,
                    "Trace file (default: the Mooncake conversation trace next to the repository, "
                    "shared/data/traces/conversation_trace.jsonl)");
  trace
      ->add_option("--bytes-per-token", trace_options.bytes_per_token,
                   "Bytes of KV cache per token: a block of 512 tokens is 512x this")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  trace
      ->add_option("--dram-capacity", trace_options.dram_capacity,
                   "DRAM tier capacity in object bytes: a size (512MiB) or a fraction of the "
                   "trace's unique block bytes (1/8, 0.125)")
      ->capture_default_str();
  trace
      ->add_option("--ssd-capacity", trace_ssd,
                   "SSD tier behind the DRAM tier (a file under --ssd-dir); 0 = none. With "
                   "--sweep the DRAM + SSD runs use this, or 8x each DRAM capacity when 0")
      ->capture_default_str();
  trace
      ->add_option("--policy", trace_options.policy,
                   "Run the store with this eviction policy only (lru, reuse); default: both "
                   "(the summary still has lru_hit)")
      ->check(CLI::IsMember({"lru", "reuse"}));
  trace
      ->add_option("--speed", trace_options.speed,
                   "Time scaling: request i starts at timestamp_i / speed (1 = real time); 0 = "
                   "as fast as possible")
      ->check(CLI::Range(0.0, 1e9))
      ->capture_default_str();
  trace
      ->add_option("--prefill-tokens-per-s", trace_options.prefill_tokens_per_s,
                   "Prefill speed of the modelled engine: a hit saves hit_tokens / this seconds "
                   "of TTFT, minus the measured lookup and load time")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  trace->add_flag("--sweep", trace_options.sweep,
                  "Run the capacities 1/32, 1/16, 1/8, 3/16, 1/4, 3/8, 1/2 of the unique bytes "
                  "(each: simulations, the store per policy, and DRAM + SSD)");
  trace->add_option("--plot", trace_options.plot_path,
                    "Draw prefix-hit rate vs DRAM capacity into this PNG (gnuplot; use with "
                    "--sweep)");
  trace->add_option("--master", trace_options.master,
                    "Distributed mode: 'spawn' starts a `tierkv master` child per store run; "
                    "HOST:PORT uses a running master (its eviction policy). The bench contributes "
                    "the DRAM segment (and SSD tier) itself");
  trace->add_option("--ssd-dir", trace_options.ssd_dir,
                    "Directory of the SSD tier file (default: trace-ssd next to the tierkv "
                    "binary, i.e. under the build folder)");
  trace->add_flag("!--no-hints", trace_options.hints,
                  "Do not pass each block's parent in ReplicateConfig::parent_keys");
  trace
      ->add_option("--max-requests", trace_options.max_requests,
                   "Replay only the first N requests (0 = all)")
      ->capture_default_str();
  trace
      ->add_option("--eviction-ratio", trace_options.eviction_ratio,
                   "The store's eviction_ratio (share of the segment one pass frees)")
      ->check(CLI::Range(0.0001, 0.5))
      ->capture_default_str();
  trace
      ->add_option("--lease-ms", trace_options.lease_ms,
                   "Read lease of the store; 0 = 10000 / speed, or 100 ms when speed is 0")
      ->capture_default_str();
  std::string trace_segment = "0";
  trace
      ->add_option("--segment-size", trace_segment,
                   "Size the DRAM segment yourself (the config's watermark then applies) instead "
                   "of holding exactly the DRAM capacity; 0 = the explicit sizing")
      ->capture_default_str();
  trace->callback([&] {
    trace_options.ssd_capacity = trace_ssd == "0" ? 0 : SizeOf(trace_ssd);
    trace_options.segment_bytes = trace_segment == "0" ? 0 : SizeOf(trace_segment);
    exit_code = Report("trace", tierkv::bench::RunTraceBench(trace_options));
  });

  tierkv::bench::FailoverBenchOptions failover_options;
  std::string failover_working_set = "1GiB";
  std::string failover_object_size = "1MiB";
  CLI::App* failover = bench->add_subcommand(
      "failover",
      "The pool surviving its master: an etcd and --masters masters with --ha (children, "
      "127.0.0.1), 2 stores and --requesters requester processes under a get/put load; the "
      "leader is SIGKILLed, a standby takes over and rebuilds the objects from the stores' "
      "indexes. Reports the objects readable afterwards, the unavailability, p99 get latency "
      "during the failover, wrong bytes and the recovery time (needs etcd-server)");
  AddCommonFlags(failover, &failover_options.common);
  failover->add_option("--working-set", failover_working_set, "Bytes of objects committed first")
      ->check(kSizeValidator)
      ->capture_default_str();
  failover->add_option("--object-size", failover_object_size, "Bytes per object")
      ->check(kSizeValidator)
      ->capture_default_str();
  failover
      ->add_option("--objects", failover_options.objects,
                   "Commit this many objects of --object-size instead of --working-set (e.g. "
                   "1000000 objects of 1KiB: the recovery of many small objects)")
      ->capture_default_str();
  failover->add_option("--requesters", failover_options.requesters, "Requester processes")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  failover->add_option("--masters", failover_options.masters, "Masters on etcd (one leads)")
      ->check(CLI::Range(2, 9))
      ->capture_default_str();
  failover->add_option("--batch", failover_options.batch, "Keys per get call of a requester")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  failover->add_option("--put-ratio", failover_options.put_ratio, "Share of calls that are puts")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  failover->add_option("--warm-s", failover_options.warm_s, "Load before the leader is killed")
      ->capture_default_str();
  failover->add_option("--seconds", failover_options.seconds, "Load in all")->capture_default_str();
  failover
      ->add_option("--dir", failover_options.dir,
                   "Directory for etcd's data and the requesters' records")
      ->capture_default_str();
  failover->add_flag("--small-pages", failover_options.small_pages,
                     "The stores' segments on 4 KiB pages");
  failover->callback([&] {
    failover_options.working_set_bytes = SizeOf(failover_working_set);
    failover_options.object_bytes = SizeOf(failover_object_size);
    const tierkv::Status status = tierkv::bench::RunFailoverBench(failover_options);
    exit_code = Report("failover", status);
    if (status.code() == tierkv::ErrorCode::UNAVAILABLE_IN_CURRENT_MODE) {
      exit_code = tierkv::bench::kFailoverUnavailableExitCode;
    }
  });
  tierkv::bench::FailoverWorkerOptions worker_options;
  CLI::App* worker = bench->add_subcommand("failover-worker", "A requester of bench failover");
  worker->group("");  // hidden: started by `bench failover` only
  worker->add_option("--master", worker_options.master)->required();
  worker->add_option("--count", worker_options.count)->required();
  worker->add_option("--object-size", worker_options.object_bytes)->required();
  worker->add_option("--batch", worker_options.batch);
  worker->add_option("--put-ratio", worker_options.put_ratio);
  worker->add_option("--seconds", worker_options.seconds);
  worker->add_option("--seed", worker_options.seed);
  worker->add_option("--out", worker_options.out)->required();
  worker->callback([&] {
    exit_code = Report("failover-worker", tierkv::bench::RunFailoverWorker(worker_options));
  });

  // ---- master -----------------------------------------------------------------
  tierkv::cli::AddMasterCommand(app, &exit_code);

  // ---- stat -------------------------------------------------------------------
  tierkv::cli::AddStatCommand(app, &exit_code);
  tierkv::cli::AddStoreCommand(app, &exit_code);

  try {
    // `tierkv master` takes a Mooncake deployment's mooncake_master flags too.
    std::vector<std::string> args(argv + 1, argv + argc);
    if (!args.empty() && args[0] == "master") {
      auto translated = tierkv::cli::TranslateMooncakeMasterFlags({args.begin() + 1, args.end()});
      if (!translated.ok()) {
        std::cerr << "tierkv master: error: " << translated.status().message() << std::endl;
        return kExitUsage;
      }
      args.resize(1);
      args.insert(args.end(), translated->begin(), translated->end());
    }
    std::reverse(args.begin(), args.end());  // CLI11 takes the arguments last to first
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    // --help is a ParseError of exit code 0; every other one is a bad flag or value: exit 2.
    return app.exit(e) == 0 ? 0 : kExitUsage;
  }
  return exit_code;
}
