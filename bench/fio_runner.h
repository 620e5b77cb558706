// fio as a baseline for the disk benches: installed when missing, one job run and its
// bandwidth read from fio's JSON output. Thread-safety: free functions, no shared state.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bench_util.h"
#include "tierkv/status.h"

namespace tierkv::bench {

// fio on PATH, or installed with apt-get (as root, else through `sudo -n`). INTERNAL_ERROR
// naming what to do when that fails.
Status EnsureFio(Progress* progress);

struct FioJob {
  std::string name;  // "write", "read", "read_qd32"
  bool write = false;
  uint64_t block_bytes = 0;
  uint64_t size_bytes = 0;
  uint32_t iodepth = 1;
  bool huge_pages = false;  // --mem=mmaphuge (hugetlb 2 MiB pages) instead of malloc
};

// Runs one fio job (io_uring; O_DIRECT when `direct`) on `file`, its output files in `dir`, and
// returns its bandwidth in GB/s (bw_bytes of the job). INTERNAL_ERROR with fio's stderr when it
// fails, its output does not parse, or it moved less than half the bytes.
Result<double> RunFio(const FioJob& job, const std::string& file, const std::string& dir,
                      bool direct);
// The job on each of `files` at the same time (one fio job per file, e.g. one per drive), each
// with its share of size_bytes; the summed bandwidth (fio --group_reporting).
Result<double> RunFio(const FioJob& job, const std::vector<std::string>& files,
                      const std::string& dir, bool direct);

// Hugetlb pages of the default size and that size, from /proc/meminfo (0s if unknown).
struct HugetlbPages {
  uint64_t total = 0;
  uint64_t free = 0;
  uint64_t page_bytes = 0;
};

HugetlbPages ReadHugetlbPages();
extern const char* const kNrHugepages;  // /proc/sys/vm/nr_hugepages

// Makes `needed` hugetlb pages free for fio's buffers (--mem=mmaphuge): when fewer are free
// and /proc/sys/vm/nr_hugepages is writable (root), raises it by the shortfall for the
// lifetime of this object and puts the old value back at the end. ok() says whether
// `needed` pages are free now.
class HugetlbReservation {
 public:
  explicit HugetlbReservation(uint64_t needed);
  ~HugetlbReservation();
  HugetlbReservation(const HugetlbReservation&) = delete;
  HugetlbReservation& operator=(const HugetlbReservation&) = delete;

  bool ok() const { return ok_; }
  bool raised() const { return raised_; }

 private:
  bool ok_ = false;
  bool raised_ = false;
  uint64_t original_ = 0;
};

// Hugetlb pages one fio job's buffers need (block x iodepth, plus two).
uint64_t HugetlbPagesFor(const FioJob& job);

// hugetlb pages for a tierkv segment of `segment_bytes` (a store's, or an embedded client's),
// reserved like fio's (HugetlbReservation) for the caller's lifetime: a segment falls back to
// 4 KiB pages when none are free, and on this kind of VM copies into and out of a 4 KiB-page
// segment ran 3-5x slower and erratic (the tier's demotion 1-2 GB/s instead of 8; see
// docs/benchmarks.md, issue 27). A bench measures tierkv as it should be deployed: on 2 MiB
// pages, as the fio baseline's buffers are.
std::unique_ptr<HugetlbReservation> ReserveSegmentHugePages(uint64_t segment_bytes);
// fio's --mem value: "mmaphuge" or "malloc".
const char* FioMemName(bool huge_pages);

// Whether files in `dir` can be opened with O_DIRECT (what the tier file and fio then use).
bool ProbeDirectIo(const std::string& dir);

}  // namespace tierkv::bench
