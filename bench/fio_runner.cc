#include "fio_runner.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

namespace tierkv::bench {
namespace {

namespace fs = std::filesystem;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

// fio on PATH, or installed with apt-get (as root, else through `sudo -n`).
Status EnsureFio(Progress* progress) {
  if (OnPath("fio")) return Status::Ok();
  progress->Update("fio is missing: apt-get install -y fio");
  std::cerr << "tierkv bench disk: fio not found on PATH; trying apt-get install -y fio"
            << std::endl;
  AptInstall("fio", "tierkv bench disk");
  if (!OnPath("fio")) {
    return Failed(
        "fio is not installed and `apt-get install -y fio` failed; install fio "
        "(scripts/install-deps.sh lists it) and run again");
  }
  return Status::Ok();
}

Result<double> RunFio(const FioJob& job, const std::string& file, const std::string& dir,
                      bool direct) {
  return RunFio(job, std::vector<std::string>{file}, dir, direct);
}

// Runs the job on each of `files` at once (one fio job per file, their figures summed by
// --group_reporting) and returns the bandwidth in GB/s (bw_bytes).
Result<double> RunFio(const FioJob& job, const std::vector<std::string>& files,
                      const std::string& dir, bool direct) {
  if (files.empty()) return Failed("fio " + job.name + ": no file");
  const std::string json_path = dir + "/fio-" + job.name + ".json";
  const std::string err_path = dir + "/fio-" + job.name + ".stderr";
  // Each file gets its share of the bytes, in whole blocks, rounded up (a read job then never
  // reads past what the write job of the same size wrote into that file).
  const uint64_t total_blocks = std::max<uint64_t>(1, job.size_bytes / job.block_bytes);
  const uint64_t blocks = (total_blocks + files.size() - 1) / files.size();
  // Global options first (they apply to every job), then one --name/--filename per file.
  std::vector<std::string> args = {
      "fio",
      std::string("--rw=") + (job.write ? "write" : "read"),
      "--bs=" + std::to_string(job.block_bytes),
      "--size=" + std::to_string(blocks * job.block_bytes),
      "--ioengine=io_uring",
      std::string("--direct=") + (direct ? "1" : "0"),
      "--iodepth=" + std::to_string(job.iodepth),
      "--numjobs=1",
      std::string("--mem=") + (job.huge_pages ? "mmaphuge" : "malloc"),
      "--end_fsync=0",
      "--group_reporting",
      "--output-format=json",
      "--output=" + json_path,
  };
  for (size_t i = 0; i < files.size(); ++i) {
    args.push_back("--name=tierkv-disk-" + job.name + (files.size() > 1 ? std::to_string(i) : ""));
    args.push_back("--filename=" + files[i]);
  }
  // Debian's fio 3.33 now and then dies of SIGSEGV and a double free in its own teardown
  // (axboe/fio#1598): a baseline run killed by a signal is run once more, and said so; a
  // second crash is the error.
  std::string error, stderr_text, json_text;
  int rc = -1;
  for (int attempt = 1; attempt <= 2; ++attempt) {
    bool signaled = false;
    error.clear();
    rc = RunProgram(args, "/dev/null", err_path, &error, &signaled);
    stderr_text = ReadFile(err_path);
    json_text = ReadFile(json_path);
    std::error_code ignored;
    fs::remove(json_path, ignored);
    fs::remove(err_path, ignored);
    if (rc == 0 || !signaled || attempt == 2) break;
    std::fprintf(stderr, "bench: fio %s crashed (%s: %s); running it again\n", job.name.c_str(),
                 error.c_str(), stderr_text.c_str());
  }
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
  if (io_bytes < blocks * job.block_bytes * files.size() / 2 || bw_bytes <= 0) {
    return Failed("fio " + job.name + " moved " + std::to_string(io_bytes) + " of " +
                  std::to_string(job.size_bytes) + " bytes");
  }
  return bw_bytes / 1e9;
}

// ---- Direct IO and hugetlb pages --------------------------------------------------------

// Whether files in `dir` can be opened with O_DIRECT (what the tier file and fio then use).
bool ProbeDirectIo(const std::string& dir) {
  const std::string probe = dir + "/.tierkv-direct-probe";
  ::unlink(probe.c_str());  // a leftover of a killed run
  const int fd = ::open(probe.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_DIRECT, 0600);
  if (fd < 0) return false;
  ::close(fd);
  ::unlink(probe.c_str());
  return true;
}

HugetlbPages ReadHugetlbPages() {
  HugetlbPages pages;
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string name;
    uint64_t value = 0;
    fields >> name >> value;
    if (name == "HugePages_Total:") pages.total = value;
    if (name == "HugePages_Free:") pages.free = value;
    if (name == "Hugepagesize:") pages.page_bytes = value * 1024;  // "2048 kB"
  }
  if (pages.page_bytes == 0) pages.page_bytes = 2 * kMiB;
  return pages;
}

const char* const kNrHugepages = "/proc/sys/vm/nr_hugepages";

static bool WriteNrHugepages(uint64_t pages) {
  std::ofstream out(kNrHugepages);
  out << pages << "\n";
  out.flush();
  return static_cast<bool>(out);
}

HugetlbReservation::HugetlbReservation(uint64_t needed) {
  const HugetlbPages pages = ReadHugetlbPages();
  if (pages.free >= needed) {
    ok_ = true;
    return;
  }
  if (access(kNrHugepages, W_OK) != 0) return;
  if (!WriteNrHugepages(pages.total + (needed - pages.free))) return;
  raised_ = true;
  original_ = pages.total;
  ok_ = ReadHugetlbPages().free >= needed;  // the kernel may find fewer free 2 MiB blocks
}

HugetlbReservation::~HugetlbReservation() {
  if (raised_ && !WriteNrHugepages(original_)) {
    std::cerr << "tierkv bench disk: could not restore " << kNrHugepages << " to " << original_
              << std::endl;
  }
}

uint64_t HugetlbPagesFor(const FioJob& job) {
  const uint64_t page = ReadHugetlbPages().page_bytes;
  // fio needs more than the buffers themselves: with exactly blocks + 1 pages, a 64 MiB
  // write at depth 1 crashed in fio 3.33 (SIGSEGV); blocks + 2 works.
  return (job.block_bytes * job.iodepth + page - 1) / page + 2;
}

std::unique_ptr<HugetlbReservation> ReserveSegmentHugePages(uint64_t segment_bytes) {
  const uint64_t page = ReadHugetlbPages().page_bytes;  // 2 MiB when /proc/meminfo says none
  return std::make_unique<HugetlbReservation>((segment_bytes + page - 1) / page + 1);
}

const char* FioMemName(bool huge_pages) { return huge_pages ? "mmaphuge" : "malloc"; }

}  // namespace tierkv::bench
