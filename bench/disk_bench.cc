#include "disk_bench.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "device/device.h"
#include "device/tier_file.h"
#include "ssd/record_format.h"
#include "ssd/region_log.h"

extern char** environ;

namespace tierkv::bench {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kPatternSeed = 0x6469'736b'6265'6e63ull;  // "diskbenc"
constexpr uint8_t kPoison = 0xA5;
constexpr size_t kSpotBytes = 64;  // checked at each end of every object
constexpr size_t kFullCheckEvery = 32;
constexpr uint32_t kFioWideQueueDepth = 32;  // the informational extra read job
constexpr int64_t kTmpfsMagic = 0x01021994;

double Round3(double value) { return std::round(value * 1000.0) / 1000.0; }

std::string ObjectKey(size_t index) { return "bench-disk@" + HexHash64(index); }

Status Bad(std::string message) { return Status(ErrorCode::INVALID_PARAMS, std::move(message)); }
Status Failed(std::string message) { return Status(ErrorCode::INTERNAL_ERROR, std::move(message)); }

Status ValidateOptions(const DiskBenchOptions& o) {
  if (o.common.reps < 1) return Bad("--reps must be >= 1");
  if (o.dir.empty()) return Bad("--dir is empty");
  if (o.object_bytes < 2 * kSpotBytes) return Bad("object size below 128 bytes");
  if (o.region_bytes % kBlockSize != 0 || o.region_bytes < 2 * kBlockSize) {
    return Bad("region size must be a multiple of 4 KiB and >= 8 KiB");
  }
  if (RecordSpan(ObjectKey(0).size(), o.object_bytes) > o.region_bytes - kBlockSize) {
    return Bad("object of " + FormatBytes(o.object_bytes) + " does not fit a region of " +
               FormatBytes(o.region_bytes));
  }
  if (o.working_set_bytes < o.object_bytes) {
    return Bad("--working-set must hold at least one " + FormatBytes(o.object_bytes) + " object");
  }
  return Status::Ok();
}

const char* FsName(int64_t magic) {
  switch (magic) {
    case 0xEF53:
      return "ext4";
    case 0x58465342:
      return "xfs";
    case 0x9123683E:
      return "btrfs";
    case kTmpfsMagic:
      return "tmpfs";
    case 0x794c7630:
      return "overlayfs";
    case 0x2FC12FC1:
      return "zfs";
    case 0x6969:
      return "nfs";
    default:
      return "other";
  }
}

// ---- Running fio -------------------------------------------------------------

// Runs argv[0] (searched on PATH) with the child's stdout and stderr sent to the given
// files ("" = this process's stderr: stdout carries results only). Returns the exit status,
// or -1 with *error set when the program could not be started or did not exit normally.
int Spawn(const std::vector<std::string>& args, const std::string& stdout_path,
          const std::string& stderr_path, std::string* error) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (stdout_path.empty()) {
    posix_spawn_file_actions_adddup2(&actions, STDERR_FILENO, STDOUT_FILENO);
  } else {
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, stdout_path.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0600);
  }
  if (!stderr_path.empty()) {
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, stderr_path.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0600);
  }
  std::vector<char*> argv;
  for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    *error = "cannot start " + args[0] + ": " + std::strerror(rc);
    return -1;
  }
  int wstatus = 0;
  while (waitpid(pid, &wstatus, 0) < 0) {
    if (errno != EINTR) {
      *error = "waitpid(" + args[0] + "): " + std::strerror(errno);
      return -1;
    }
  }
  if (!WIFEXITED(wstatus)) {
    *error = args[0] + " was killed by signal " + std::to_string(WTERMSIG(wstatus));
    return -1;
  }
  return WEXITSTATUS(wstatus);
}

bool OnPath(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    // Built with append(): GCC 12 at -O3 warns (-Wrestrict, a known false
    // positive) on `dir + "/" + program`.
    std::string candidate = dir.empty() ? std::string(".") : dir;
    candidate.append("/").append(program);
    if (access(candidate.c_str(), X_OK) == 0) return true;
  }
  return false;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// fio on PATH, or installed with apt-get (as root, else through `sudo -n`).
Status EnsureFio(Progress* progress) {
  if (OnPath("fio")) return Status::Ok();
  progress->Update("fio is missing: apt-get install -y fio");
  std::cerr << "tierkv bench disk: fio not found on PATH; trying apt-get install -y fio"
            << std::endl;
  std::vector<std::string> prefix;
  if (geteuid() != 0) prefix = {"sudo", "-n"};
  auto apt = [&](std::vector<std::string> args) {
    std::vector<std::string> argv = prefix;
    argv.insert(argv.end(), {"env", "DEBIAN_FRONTEND=noninteractive", "apt-get"});
    argv.insert(argv.end(), args.begin(), args.end());
    std::string error;
    const int rc = Spawn(argv, "", "", &error);
    if (rc < 0) std::cerr << "tierkv bench disk: " << error << std::endl;
    return rc == 0;
  };
  // A fresh machine may have no package lists yet: update, then retry once.
  if (!apt({"install", "-y", "--no-install-recommends", "fio"})) {
    (void)apt({"update"});
    (void)apt({"install", "-y", "--no-install-recommends", "fio"});
  }
  if (!OnPath("fio")) {
    return Failed(
        "fio is not installed and `apt-get install -y fio` failed; install fio "
        "(scripts/install-deps.sh lists it) and run again");
  }
  return Status::Ok();
}

struct FioJob {
  std::string name;  // "write", "read", "read_qd32"
  bool write = false;
  uint64_t block_bytes = 0;
  uint64_t size_bytes = 0;
  uint32_t iodepth = 1;
};

// Runs one fio job on `file` and returns its bandwidth in GB/s (bw_bytes of the job).
Result<double> RunFio(const FioJob& job, const std::string& file, const std::string& dir,
                      bool direct) {
  const std::string json_path = dir + "/fio-" + job.name + ".json";
  const std::string err_path = dir + "/fio-" + job.name + ".stderr";
  const std::vector<std::string> args = {
      "fio",
      "--name=tierkv-disk-" + job.name,
      "--filename=" + file,
      std::string("--rw=") + (job.write ? "write" : "read"),
      "--bs=" + std::to_string(job.block_bytes),
      "--size=" + std::to_string(job.size_bytes),
      "--ioengine=io_uring",
      std::string("--direct=") + (direct ? "1" : "0"),
      "--iodepth=" + std::to_string(job.iodepth),
      "--numjobs=1",
      "--end_fsync=0",
      "--output-format=json",
      "--output=" + json_path,
  };
  std::string error;
  const int rc = Spawn(args, "/dev/null", err_path, &error);
  const std::string stderr_text = ReadFile(err_path);
  const std::string json_text = ReadFile(json_path);
  std::error_code ignored;
  fs::remove(json_path, ignored);
  fs::remove(err_path, ignored);
  if (rc != 0) {
    return Failed("fio " + job.name + " failed (" +
                  (rc < 0 ? error : "exit " + std::to_string(rc)) + "): " + stderr_text);
  }
  // fio may print notes before the JSON object.
  const size_t start = json_text.find('{');
  nlohmann::json parsed =
      nlohmann::json::parse(start == std::string::npos ? std::string() : json_text.substr(start),
                            nullptr, /*allow_exceptions=*/false);
  const char* section = job.write ? "write" : "read";
  if (parsed.is_discarded() || !parsed.contains("jobs") || !parsed["jobs"].is_array() ||
      parsed["jobs"].empty() || !parsed["jobs"][0].contains(section)) {
    return Failed("fio " + job.name +
                  ": cannot parse its JSON output: " + json_text.substr(0, 200));
  }
  const nlohmann::json& j = parsed["jobs"][0];
  if (j.value("error", 0) != 0) {
    return Failed("fio " + job.name + ": job error " + std::to_string(j.value("error", 0)));
  }
  const uint64_t io_bytes = j[section].value("io_bytes", uint64_t{0});
  const double bw_bytes = j[section].value("bw_bytes", 0.0);
  if (io_bytes < job.size_bytes / 2 || bw_bytes <= 0) {
    return Failed("fio " + job.name + " moved " + std::to_string(io_bytes) + " of " +
                  std::to_string(job.size_bytes) + " bytes");
  }
  return bw_bytes / 1e9;
}

// ---- The region log ----------------------------------------------------------

struct Geometry {
  size_t objects = 0;
  uint64_t span = 0;           // bytes of one record (the read size)
  size_t per_region = 0;       // records per region
  size_t regions = 0;          // regions written
  uint64_t flush_bytes = 0;    // bytes of one full region's flush (the write size)
  uint64_t written_bytes = 0;  // bytes the region log writes to the device
  uint64_t value_bytes = 0;    // objects * object_bytes: what the GB/s figures count
  uint64_t capacity = 0;       // tier file size
};

Geometry ComputeGeometry(const DiskBenchOptions& o) {
  Geometry g;
  g.objects = static_cast<size_t>(o.working_set_bytes / o.object_bytes);
  g.span = RecordSpan(ObjectKey(0).size(), o.object_bytes);
  g.per_region = static_cast<size_t>((o.region_bytes - kFirstRecordOffset) / g.span);
  g.regions = (g.objects + g.per_region - 1) / g.per_region;
  g.flush_bytes = kFirstRecordOffset + g.per_region * g.span;
  const size_t last = g.objects - (g.regions - 1) * g.per_region;
  g.written_bytes = (g.regions - 1) * g.flush_bytes + kFirstRecordOffset + last * g.span;
  g.value_bytes = g.objects * o.object_bytes;
  g.capacity = (g.regions + 1) * o.region_bytes;  // one spare: nothing is ever evicted
  return g;
}

struct RepResult {
  double demote_gbps = 0, load_gbps = 0;
  double fio_write_gbps = 0, fio_read_gbps = 0, fio_read_wide_gbps = 0;
};

class DiskRun {
 public:
  DiskRun(const DiskBenchOptions& options, const Geometry& geometry, const std::string& dir,
          const AlignedBuffer& src, const AlignedBuffer& dst, Progress* progress)
      : o_(options), g_(geometry), dir_(dir), src_(src), dst_(dst), progress_(progress) {
    for (size_t i = 0; i < g_.objects; ++i) keys_.push_back(ObjectKey(i));
  }

  bool direct_io() const { return direct_io_; }

  Result<RepResult> OneRep(int rep) {
    RepResult result;
    if (Status s = RegionLogRep(rep, &result); !s.ok()) return s;
    if (Status s = FioRep(rep, &result); !s.ok()) return s;
    return result;
  }

 private:
  void Report(int rep, const std::string& phase) {
    if (!progress_->enabled()) return;
    progress_->Update("rep " + std::to_string(rep + 1) + "/" + std::to_string(o_.common.reps) +
                      ": " + phase);
  }

  uint8_t* DstOf(size_t i) const { return dst_.data() + i * o_.object_bytes; }
  const uint8_t* SrcOf(size_t i) const { return src_.data() + i * o_.object_bytes; }
  bool FullCheck(size_t i, int rep) const {
    return i % kFullCheckEvery == static_cast<size_t>(rep) % kFullCheckEvery;
  }

  void Poison(int rep) {
    for (size_t i = 0; i < g_.objects; ++i) {
      if (FullCheck(i, rep)) {
        std::memset(DstOf(i), kPoison, o_.object_bytes);
      } else {
        std::memset(DstOf(i), kPoison, kSpotBytes);
        std::memset(DstOf(i) + o_.object_bytes - kSpotBytes, kPoison, kSpotBytes);
      }
    }
  }

  void CheckBytes(int rep, FailureLog* failures) {
    const size_t n = o_.object_bytes;
    for (size_t i = 0; i < g_.objects; ++i) {
      const uint8_t* got = DstOf(i);
      const uint8_t* want = SrcOf(i);
      if (std::memcmp(got, want, kSpotBytes) != 0) {
        failures->Add("load of " + keys_[i] + ": wrong bytes at its start");
      }
      if (std::memcmp(got + n - kSpotBytes, want + n - kSpotBytes, kSpotBytes) != 0) {
        failures->Add("load of " + keys_[i] + ": wrong bytes at its end");
      }
      if (FullCheck(i, rep) && std::memcmp(got, want, n) != 0) {
        size_t at = 0;
        while (at < n && got[at] == want[at]) ++at;
        failures->Add("load of " + keys_[i] + ": wrong byte at offset " + std::to_string(at));
      }
    }
  }

  Status RegionLogRep(int rep, RepResult* result) {
    Report(rep, "creating the tier file (" + FormatBytes(g_.capacity) + ")");
    TierFileOptions file_options;
    file_options.capacity = g_.capacity;
    file_options.allow_buffered_fallback = o_.allow_tmpfs;
    Result<TierFile> file = TierFile::Create(dir_ + "/region-log.tier", file_options);
    if (!file.ok()) return file.status();
    direct_io_ = file->direct_io();
    DeviceOptions device_options;
    device_options.engine = DeviceEngine::kUring;
    Result<std::unique_ptr<Device>> device = OpenDevice(*file, device_options);
    if (!device.ok()) return device.status();
    RegionLogOptions log_options;
    log_options.region_size = o_.region_bytes;
    size_t evictions = 0;
    Result<std::unique_ptr<RegionLog>> log = RegionLog::Create(
        {device->get()}, log_options,
        [&evictions](uint32_t, uint64_t, std::vector<std::string>) { ++evictions; });
    if (!log.ok()) return log.status();
    RegionLog& region_log = **log;

    // Demote: append every object, then flush the last region.
    std::vector<DiskLocation> locations(g_.objects);
    Status failed;
    size_t failed_at = 0;
    Report(rep, "region log demote (" + FormatBytes(g_.value_bytes) + ")");
    Stopwatch watch;
    for (size_t i = 0; i < g_.objects; ++i) {
      Result<DiskLocation> loc =
          region_log.Append(keys_[i], {ConstPiece{SrcOf(i), o_.object_bytes}});
      if (!loc.ok()) {
        failed = loc.status();
        failed_at = i;
        break;
      }
      locations[i] = *loc;
    }
    if (failed.ok()) failed = region_log.Flush();
    const double demote_seconds = watch.Seconds();
    if (!failed.ok()) {
      return Failed("demote of " + keys_[failed_at] +
                    " (or the final flush): " + failed.ToString());
    }
    const RegionLogStats after_demote = region_log.stats();
    if (evictions != 0 || after_demote.flushes != g_.regions) {
      return Failed("region log: " + std::to_string(after_demote.flushes) + " flushes and " +
                    std::to_string(evictions) + " evictions, expected " +
                    std::to_string(g_.regions) + " flushes and none");
    }
    result->demote_gbps = Gbps(g_.value_bytes, demote_seconds);

    // Load: read every object back (all regions are sealed: every read hits the device).
    Poison(rep);
    Report(rep, "region log load (" + FormatBytes(g_.value_bytes) + ")");
    watch.Restart();
    for (size_t i = 0; i < g_.objects; ++i) {
      failed = region_log.Read(locations[i], keys_[i], {MutPiece{DstOf(i), o_.object_bytes}});
      if (!failed.ok()) {
        failed_at = i;
        break;
      }
    }
    const double load_seconds = watch.Seconds();
    if (!failed.ok()) return Failed("load of " + keys_[failed_at] + ": " + failed.ToString());
    result->load_gbps = Gbps(g_.value_bytes, load_seconds);
    FailureLog failures;
    CheckBytes(rep, &failures);
    return failures.ToStatus("region log load");
  }

  Status FioRep(int rep, RepResult* result) {
    const std::string file = dir_ + "/fio.dat";
    struct Remover {
      std::string path;
      ~Remover() {
        std::error_code ignored;
        fs::remove(path, ignored);
      }
    } remover{file};
    // The same bytes the region log wrote: whole flushes of the region log's write size.
    FioJob write{.name = "write",
                 .write = true,
                 .block_bytes = g_.flush_bytes,
                 .size_bytes = g_.regions * g_.flush_bytes,
                 .iodepth = 1};
    // The same bytes the region log read: one record span per request.
    FioJob read{.name = "read",
                .write = false,
                .block_bytes = g_.span,
                .size_bytes = g_.objects * g_.span,
                .iodepth = 1};
    FioJob wide = read;
    wide.name = "read_qd" + std::to_string(kFioWideQueueDepth);
    wide.iodepth = kFioWideQueueDepth;
    for (const FioJob* job : {&write, &read, &wide}) {
      Report(rep, "fio " + job->name);
      Result<double> gbps = RunFio(*job, file, dir_, direct_io_);
      if (!gbps.ok()) return gbps.status();
      double* out = job == &write  ? &result->fio_write_gbps
                    : job == &read ? &result->fio_read_gbps
                                   : &result->fio_read_wide_gbps;
      *out = *gbps;
    }
    return Status::Ok();
  }

  const DiskBenchOptions& o_;
  const Geometry& g_;
  const std::string dir_;
  const AlignedBuffer& src_;
  const AlignedBuffer& dst_;
  Progress* progress_;
  std::vector<std::string> keys_;
  bool direct_io_ = true;
};

double Ratio(double value, double baseline) { return baseline > 0 ? value / baseline : 0; }

void PrintHuman(std::ostream& out, const DiskBenchOptions& o, const Geometry& g,
                const std::string& dir, const char* fs_name, bool direct, const RepResult& r) {
  char line[320];
  out << "tierkv bench disk (region log raw path): " << FormatBytes(g.value_bytes) << " of "
      << FormatBytes(o.object_bytes) << " objects (" << g.objects << "), region "
      << FormatBytes(o.region_bytes) << ", " << dir << " on " << fs_name
      << (direct ? ", O_DIRECT" : ", buffered (no O_DIRECT)") << ", io_uring, median of "
      << o.common.reps << " rep" << (o.common.reps == 1 ? "" : "s") << "\n";
  std::snprintf(line, sizeof(line), "  %-7s %12s %3s %9s %9s %7s\n", "op", "block", "qd", "GB/s",
                "fio GB/s", "ratio");
  out << line;
  std::snprintf(line, sizeof(line), "  %-7s %12s %3d %9.2f %9.2f %7.2f\n", "demote",
                FormatBytes(g.flush_bytes).c_str(), 1, r.demote_gbps, r.fio_write_gbps,
                Ratio(r.demote_gbps, r.fio_write_gbps));
  out << line;
  std::snprintf(line, sizeof(line), "  %-7s %12s %3d %9.2f %9.2f %7.2f\n", "load",
                FormatBytes(g.span).c_str(), 1, r.load_gbps, r.fio_read_gbps,
                Ratio(r.load_gbps, r.fio_read_gbps));
  out << line;
  std::snprintf(line, sizeof(line), "  (fio read at qd%u, same block: %.2f GB/s)\n",
                kFioWideQueueDepth, r.fio_read_wide_gbps);
  out << line;
  auto verdict = [](double ratio, double target) { return ratio >= target ? "PASS" : "FAIL"; };
  const double load_ratio = Ratio(r.load_gbps, r.fio_read_gbps);
  const double demote_ratio = Ratio(r.demote_gbps, r.fio_write_gbps);
  std::snprintf(line, sizeof(line),
                "load %.2f GB/s = %.2f x fio (target >= %.2f: %s), "
                "demote %.2f GB/s = %.2f x fio (target >= %.2f: %s)\n",
                r.load_gbps, load_ratio, kLoadRatioTarget, verdict(load_ratio, kLoadRatioTarget),
                r.demote_gbps, demote_ratio, kDemoteRatioTarget,
                verdict(demote_ratio, kDemoteRatioTarget));
  out << line << std::flush;
}

}  // namespace

Status RunDiskBench(const DiskBenchOptions& options) {
  if (Status status = ValidateOptions(options); !status.ok()) return status;
  const Geometry geometry = ComputeGeometry(options);
  const std::string dir = options.dir;

  // The directory: created if missing (and removed at the end if it is then empty).
  std::error_code ec;
  const bool existed = fs::exists(dir, ec);
  if (!existed && !fs::create_directories(dir, ec)) {
    return Status(ErrorCode::FILE_OPEN_FAIL, "cannot create " + dir + ": " + ec.message());
  }
  if (!fs::is_directory(dir, ec)) return Bad(dir + " is not a directory");
  struct DirRemover {
    std::string dir;
    bool created;
    ~DirRemover() {
      std::error_code ignored;
      if (created) fs::remove(dir, ignored);  // only if empty
    }
  } dir_remover{dir, !existed};
  struct statfs st {};
  if (statfs(dir.c_str(), &st) != 0) {
    return Status(ErrorCode::FILE_OPEN_FAIL, "statfs " + dir + ": " + std::strerror(errno));
  }
  const int64_t fs_magic = static_cast<int64_t>(st.f_type);
  const char* fs_name = FsName(fs_magic);
  if (fs_magic == kTmpfsMagic && !options.allow_tmpfs) {
    return Bad(dir + " is on tmpfs (memory, no O_DIRECT): pass --dir on a disk, or --allow-tmpfs");
  }

  Progress progress("disk", options.common.progress);
  if (Status s = EnsureFio(&progress); !s.ok()) {
    progress.Done();
    return s;
  }

  progress.Update("allocating and pre-faulting 2 x " + FormatBytes(geometry.value_bytes) +
                  " of buffers");
  Result<AlignedBuffer> src = AlignedBuffer::Allocate(geometry.value_bytes);
  if (!src.ok()) return src.status();
  Result<AlignedBuffer> dst = AlignedBuffer::Allocate(geometry.value_bytes);
  if (!dst.ok()) return dst.status();
  for (size_t i = 0; i < geometry.objects; ++i) {
    FillPattern(src->data() + i * options.object_bytes, options.object_bytes, kPatternSeed + i);
  }

  DiskRun run(options, geometry, dir, *src, *dst, &progress);
  std::vector<double> demote, load, fio_write, fio_read, fio_wide;
  for (int rep = 0; rep < options.common.reps; ++rep) {
    Result<RepResult> r = run.OneRep(rep);
    if (!r.ok()) {
      progress.Done();
      return r.status();
    }
    demote.push_back(r->demote_gbps);
    load.push_back(r->load_gbps);
    fio_write.push_back(r->fio_write_gbps);
    fio_read.push_back(r->fio_read_gbps);
    fio_wide.push_back(r->fio_read_wide_gbps);
  }
  progress.Done();
  RepResult m;
  m.demote_gbps = Median(demote);
  m.load_gbps = Median(load);
  m.fio_write_gbps = Median(fio_write);
  m.fio_read_gbps = Median(fio_read);
  m.fio_read_wide_gbps = Median(fio_wide);
  const double load_ratio = Ratio(m.load_gbps, m.fio_read_gbps);
  const double demote_ratio = Ratio(m.demote_gbps, m.fio_write_gbps);

  if (options.common.json) {
    auto common = [&](JsonLine& line, const char* op, const char* path, uint64_t block, uint32_t qd,
                      uint64_t bytes) -> JsonLine& {
      return line.Add("bench", "disk")
          .Add("op", op)
          .Add("path", path)
          .Add("fs", fs_name)
          .Add("direct_io", run.direct_io())
          .Add("block_bytes", block)
          .Add("queue_depth", qd)
          .Add("bytes", bytes)
          .Add("reps", options.common.reps);
    };
    {
      JsonLine line;
      common(line, "demote", "region_log", geometry.flush_bytes, 1, geometry.value_bytes)
          .Add("object_bytes", options.object_bytes)
          .Add("objects", geometry.objects)
          .Add("region_bytes", options.region_bytes)
          .Add("gbps", Round3(m.demote_gbps))
          .Emit();
    }
    {
      JsonLine line;
      common(line, "load", "region_log", geometry.span, 1, geometry.value_bytes)
          .Add("object_bytes", options.object_bytes)
          .Add("objects", geometry.objects)
          .Add("region_bytes", options.region_bytes)
          .Add("gbps", Round3(m.load_gbps))
          .Emit();
    }
    {
      JsonLine line;
      common(line, "write", "fio", geometry.flush_bytes, 1, geometry.regions * geometry.flush_bytes)
          .Add("gbps", Round3(m.fio_write_gbps))
          .Emit();
    }
    {
      JsonLine line;
      common(line, "read", "fio", geometry.span, 1, geometry.objects * geometry.span)
          .Add("gbps", Round3(m.fio_read_gbps))
          .Emit();
    }
    {
      JsonLine line;
      common(line, "read", "fio", geometry.span, kFioWideQueueDepth,
             geometry.objects * geometry.span)
          .Add("gbps", Round3(m.fio_read_wide_gbps))
          .Emit();
    }
    JsonLine()
        .Add("bench", "disk")
        .Add("load_gbps", Round3(m.load_gbps))
        .Add("fio_read_gbps", Round3(m.fio_read_gbps))
        .Add("load_ratio", Round3(load_ratio))
        .Add("demote_gbps", Round3(m.demote_gbps))
        .Add("fio_write_gbps", Round3(m.fio_write_gbps))
        .Add("demote_ratio", Round3(demote_ratio))
        .Add("load_target", kLoadRatioTarget)
        .Add("demote_target", kDemoteRatioTarget)
        .Emit();
  }
  PrintHuman(options.common.json ? std::cerr : std::cout, options, geometry, dir, fs_name,
             run.direct_io(), m);
  return Status::Ok();
}

}  // namespace tierkv::bench
