#include "disk_bench.h"

#include <fcntl.h>
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

#include "client/client_impl.h"
#include "client/staged_loader.h"
#include "fio_runner.h"
#include "ssd/record_format.h"
#include "ssd/ssd_tier.h"
#include "ssd/staging_area.h"
#include "tierkv/config.h"
#include "transfer/transfer_pool.h"
#include "workload.h"

namespace tierkv::bench {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kDiskPatternSeed = 0x6469'736b'6265'6e63ull;  // "diskbenc"
constexpr size_t kFullCheckEvery = 32;
constexpr uint32_t kFioWideQueueDepth = 32;  // the informational extra read job
// Timed loads per rep, each between a fio write and a fio read (see ClientRep).
constexpr int kLoadRuns = 3;
// The segment holds the working set plus this share of it free below the eviction watermark,
// so nothing is evicted (or demoted) before the timed demotion.
constexpr double kSegmentHeadroom = 1.1;

std::vector<double> Rounded(std::vector<double> values) {
  for (double& v : values) v = Round3(v);
  return values;
}

std::string ObjectKey(size_t index) { return "bench-disk@" + HexHash64(index); }

uint64_t RoundUp(uint64_t value, uint64_t unit) { return (value + unit - 1) / unit * unit; }

Status ValidateOptions(const DiskBenchOptions& o) {
  if (o.common.reps < 1) return BadDiskOption("--reps must be >= 1");
  if (o.dir.empty()) return BadDiskOption("--dir is empty");
  for (size_t i = 0; i < o.dirs.size(); ++i) {
    if (o.dirs[i].empty()) return BadDiskOption("--dirs has an empty directory");
    for (size_t j = 0; j < i; ++j) {
      if (fs::weakly_canonical(o.dirs[i]) == fs::weakly_canonical(o.dirs[j])) {
        return BadDiskOption("--dirs names " + o.dirs[i] + " twice");
      }
    }
  }
  if (o.batch < 1) return BadDiskOption("--batch must be >= 1");
  if (o.object_bytes < 2 * kSpotBytes) return BadDiskOption("object size below 128 bytes");
  if (o.region_bytes % kBlockSize != 0 || o.region_bytes < 2 * kBlockSize) {
    return BadDiskOption("region size must be a multiple of 4 KiB and >= 8 KiB");
  }
  if (RecordSpan(ObjectKey(0).size(), o.object_bytes) > o.region_bytes - kBlockSize) {
    return BadDiskOption("object of " + FormatBytes(o.object_bytes) + " does not fit a region of " +
                         FormatBytes(o.region_bytes));
  }
  if (o.working_set_bytes < o.object_bytes) {
    return BadDiskOption("--working-set must hold at least one " + FormatBytes(o.object_bytes) +
                         " object");
  }
  if (o.fio_mem != "auto" && o.fio_mem != "malloc" && o.fio_mem != "mmaphuge") {
    return BadDiskOption("--fio-mem must be auto, malloc or mmaphuge");
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

// ---- The client run ---------------------------------------------------------

struct Geometry {
  size_t objects = 0;
  uint64_t span = 0;  // bytes of one record (one staged read)
  // Loads read each value straight into the destination (SsdTier::ReadDirect: a block-aligned
  // value of whole blocks, into a block-aligned slice of the destination), one read of
  // object_bytes; else they stage whole records (one read of span).
  bool direct = false;
  uint64_t read_bytes = 0;     // bytes of one load read
  size_t per_region = 0;       // records per region
  size_t regions = 0;          // regions written
  uint64_t flush_bytes = 0;    // bytes of one full region's flush (the write size)
  uint64_t written_bytes = 0;  // bytes the region log writes to the device
  uint64_t value_bytes = 0;    // objects * object_bytes: what the GB/s figures count
  uint64_t capacity = 0;       // size of each tier file
  uint64_t segment_bytes = 0;  // the client's global_segment_size
};

Geometry ComputeGeometry(const DiskBenchOptions& o, double high_watermark, size_t paths) {
  Geometry g;
  g.objects = static_cast<size_t>(o.working_set_bytes / o.object_bytes);
  g.span = RecordSpan(ObjectKey(0).size(), o.object_bytes);
  g.direct = RecordValueAligned(o.object_bytes) && o.object_bytes % kBlockSize == 0;
  g.read_bytes = g.direct ? o.object_bytes : g.span;
  g.per_region = static_cast<size_t>((o.region_bytes - kFirstRecordOffset) / g.span);
  g.regions = (g.objects + g.per_region - 1) / g.per_region;
  g.flush_bytes = kFirstRecordOffset + g.per_region * g.span;
  const size_t last = g.objects - (g.regions - 1) * g.per_region;
  g.written_bytes = (g.regions - 1) * g.flush_bytes + kFirstRecordOffset + last * g.span;
  g.value_bytes = g.objects * o.object_bytes;
  // Per tier file: its share of the regions and one spare, so nothing is ever evicted.
  g.capacity = ((g.regions + paths - 1) / paths + 1) * o.region_bytes;
  const double segment = static_cast<double>(g.objects * RoundUp(o.object_bytes, 4096)) *
                         kSegmentHeadroom / high_watermark;
  g.segment_bytes = RoundUp(static_cast<uint64_t>(segment), 2 * kMiB);
  return g;
}

// Reads a load keeps in flight. Direct loads (SsdTier::ReadDirect) submit a whole call's
// reads at once and the io_uring ring keeps min(batch, kRingQueueDepth, 16 MiB of reads) in
// flight, refilled as reads complete. Staged loads cut a batch into parts of at most min(usable /
// 2, kStageBatchBytes) staging bytes (StagingNeed per object) and issue each part's reads together.
uint32_t LoadQueueDepth(const DiskBenchOptions& o, bool direct, double usable_ratio,
                        uint64_t staging_capacity) {
  if (direct) {
    // The ring also bounds a batch's bytes in flight (DeviceOptions::max_inflight_bytes).
    const uint64_t by_bytes =
        std::max<uint64_t>(1, DeviceOptions{}.max_inflight_bytes / o.object_bytes);
    return static_cast<uint32_t>(std::min<uint64_t>({kRingQueueDepth, o.batch, by_bytes}));
  }
  const StagedLoader loader(usable_ratio, nullptr);
  const uint64_t usable = loader.PartBudget(staging_capacity);
  const uint64_t part = std::min(usable / 2, kStageBatchBytes);
  const uint64_t per_part = std::max<uint64_t>(1, part / StagingNeed(o.object_bytes));
  return static_cast<uint32_t>(
      std::min<uint64_t>({per_part, kRingQueueDepth, static_cast<uint64_t>(o.batch)}));
}

double Ratio(double value, double baseline) { return baseline > 0 ? value / baseline : 0; }

// What one rep measured.
struct DiskRepResult {
  double demote_gbps = 0;
  double fio_read_wide_gbps = 0;                      // the informational qd32 read
  std::vector<double> fio_write_runs, fio_read_runs;  // each baseline run
  std::vector<double> load_runs;                      // each timed load
  // Paired ratios: the demotion against the mean of the fio writes just before and after it;
  // each load against the fio read right after it (same stretch of the disk's drift).
  double demote_pair_ratio = 0;
  std::vector<double> load_pair_ratios;
};

// What a run reports: GB/s medians over every run of every rep, ratios the medians of the pairs.
struct Summary {
  double demote_gbps = 0, load_gbps = 0;
  double fio_write_gbps = 0, fio_read_gbps = 0, fio_read_wide_gbps = 0;
  double demote_ratio = 0, load_ratio = 0;
  size_t demote_pairs = 0, load_pairs = 0;
};

// What a rep learned about the client's setup (the same in every rep).
struct Setup {
  uint64_t staging_capacity = 0;
  uint32_t load_queue_depth = 1;
  std::string segment_pages;
  bool fio_huge_pages = false;      // fio's buffers on 2 MiB hugetlb pages (--mem=mmaphuge)
  bool fio_hugetlb_raised = false;  // the bench raised nr_hugepages for fio (and restored it)
};

class DiskRun {
 public:
  DiskRun(const DiskBenchOptions& options, const Config& config, const Geometry& geometry,
          const std::vector<std::string>& dirs, bool direct_io, const AlignedBuffer& src,
          const AlignedBuffer& dst, Progress* progress)
      : o_(options),
        config_(config),
        g_(geometry),
        dirs_(dirs),
        direct_io_(direct_io),
        src_(src),
        dst_(dst),
        progress_(progress) {
    for (size_t i = 0; i < g_.objects; ++i) keys_.push_back(ObjectKey(i));
  }

  bool direct_io() const { return direct_io_; }
  const Setup& setup() const { return setup_; }

  Result<DiskRepResult> OneRep(int rep) {
    DiskRepResult result;
    Fio fio;
    for (const std::string& dir : dirs_) fio.files.push_back(dir + "/fio.dat");
    struct Remover {
      const std::vector<std::string>& paths;
      ~Remover() {
        std::error_code ignored;
        for (const std::string& path : paths) fs::remove(path, ignored);
      }
    } remover{fio.files};
    // The client's loads and fio's baseline runs alternate inside ClientRep.
    if (Status s = ClientRep(rep, &result, &fio); !s.ok()) return s;
    if (Status s = FinishFio(rep, &fio, &result); !s.ok()) return s;
    return result;
  }

 private:
  // fio's side of a rep: its jobs, the hugetlb reservation, and the baseline runs so far.
  struct Fio {
    std::vector<std::string> files;  // one per directory, written by one job each at once
    FioJob write, read, wide;
    std::unique_ptr<HugetlbReservation> reservation;
    std::vector<double> writes, reads;
  };

  void Report(int rep, const std::string& phase) {
    if (!progress_->enabled()) return;
    progress_->Update("rep " + std::to_string(rep + 1) + "/" + std::to_string(o_.common.reps) +
                      ": " + phase);
  }

  uint8_t* DstOf(size_t i) const { return dst_.data() + i * o_.object_bytes; }
  uint8_t* SrcOf(size_t i) const { return src_.data() + i * o_.object_bytes; }
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

  // The batches of --batch keys, each object one piece of `base`.
  struct Batch {
    std::vector<std::string> keys;
    std::vector<std::vector<void*>> ptrs;
    std::vector<std::vector<size_t>> sizes;
  };
  std::vector<Batch> Batches(uint8_t* base) const {
    std::vector<Batch> batches;
    for (size_t first = 0; first < g_.objects; first += o_.batch) {
      Batch& b = batches.emplace_back();
      for (size_t i = first; i < std::min(g_.objects, first + o_.batch); ++i) {
        b.keys.push_back(keys_[i]);
        b.ptrs.push_back({base + i * o_.object_bytes});
        b.sizes.push_back({o_.object_bytes});
      }
    }
    return batches;
  }

  static std::string StatsText(const MasterStats& st) {
    return std::to_string(st.objects) + " objects, " + std::to_string(st.memory_replicas) +
           " memory and " + std::to_string(st.disk_replicas) + " disk replicas, " +
           std::to_string(st.demoted_objects) + " demoted, " +
           std::to_string(st.demotion_failures) + " demotion failures, " +
           std::to_string(st.evicted_objects) + " evicted";
  }

  Status ClientRep(int rep, DiskRepResult* result, Fio* fio) {
    Report(rep, "starting the client (segment " + FormatBytes(g_.segment_bytes) + ", tier file " +
                    FormatBytes(g_.capacity) + ", staging " +
                    FormatBytes(config_.staging_buffer_size) + ")");
    Result<std::unique_ptr<ClientImpl>> created = ClientImpl::CreateEmbedded(config_);
    if (!created.ok()) return created.status();
    std::unique_ptr<ClientImpl> client = std::move(created).value();
    SsdTier* tier = client->store()->tier().get();
    if (tier == nullptr) return Failed("the client opened no SSD tier");
    MasterService& master = client->in_process_master()->master();
    setup_.staging_capacity = tier->staging_capacity();
    setup_.load_queue_depth =
        LoadQueueDepth(o_, g_.direct, config_.staging_usable_ratio, setup_.staging_capacity);
    setup_.segment_pages = client->store()->segment()->page_kind();

    // Put (untimed): every object from the registered source buffer.
    Report(rep, "put (" + FormatBytes(g_.value_bytes) + ")");
    if (Status s = client->RegisterBuffer(src_.data(), src_.size()); !s.ok()) return s;
    FailureLog put_failures;
    for (const Batch& b : Batches(src_.data())) {
      const std::vector<int> codes = client->BatchPutFromMultiBuffers(b.keys, b.ptrs, b.sizes);
      for (size_t k = 0; k < b.keys.size(); ++k) {
        const int code = k < codes.size() ? codes[k] : ToInt(ErrorCode::INTERNAL_ERROR);
        if (code != 0) put_failures.Add("put of " + b.keys[k] + ": " + CodeString(code));
      }
    }
    if (Status s = put_failures.ToStatus("put"); !s.ok()) return s;
    const MasterStats before = master.Stats();
    if (before.objects != g_.objects || before.memory_replicas != g_.objects ||
        before.disk_replicas != 0) {
      return Failed("after the puts: " + StatsText(before) + "; expected " +
                    std::to_string(g_.objects) + " objects in memory only");
    }
    // The demotion is timed between two fio writes (of fresh files): the one before it here,
    // the first of the load runs' after it.
    if (Status s = PrepareFio(rep, fio); !s.ok()) return s;
    if (Status s = FioBaselineRun(rep, -1, /*write=*/true, fio); !s.ok()) return s;

    // Demote (timed): evict the whole segment through the tier mover, then flush.
    Report(rep, "demote (" + FormatBytes(g_.value_bytes) + ")");
    Stopwatch watch;
    const uint64_t freed = master.EvictFromSegment(client->store()->segment_id(), g_.segment_bytes);
    const Status flushed = tier->Flush();
    const double demote_seconds = watch.Seconds();
    if (!flushed.ok()) return Failed("flushing the SSD tier: " + flushed.ToString());
    const MasterStats after = master.Stats();
    const SsdTierStats tier_after = tier->stats();
    if (after.demoted_objects != g_.objects || after.memory_replicas != 0 ||
        after.disk_replicas != g_.objects || after.demotion_failures != 0) {
      return Failed("demotion (" + FormatBytes(freed) + " freed): " + StatsText(after) +
                    "; expected all " + std::to_string(g_.objects) + " demoted");
    }
    if (tier_after.log.flushes != g_.regions || tier_after.log.evicted_regions != 0) {
      return Failed("SSD tier: " + std::to_string(tier_after.log.flushes) + " flushes and " +
                    std::to_string(tier_after.log.evicted_regions) + " evicted regions, expected " +
                    std::to_string(g_.regions) + " flushes and none");
    }
    result->demote_gbps = Gbps(g_.value_bytes, demote_seconds);

    // Load (timed), kLoadRuns times, interleaved with fio's baseline runs so that each load
    // and its baseline sample the disk over the same stretch of time (this virtual disk drifts
    // by +-10 % over seconds): fio write (a fresh file), load, fio read. Each read, the tier's
    // and fio's, then reads data written before another 1 GiB of IO (what a host-side cache of
    // the virtual disk sees is the same for both).
    if (Status s = client->RegisterBuffer(dst_.data(), dst_.size()); !s.ok()) return s;
    FailureLog failures;
    for (int run = 0; run < kLoadRuns && failures.empty(); ++run) {
      if (Status s = FioBaselineRun(rep, run, /*write=*/true, fio); !s.ok()) return s;
      Result<double> gbps = LoadOnce(rep, run, *client, *tier, &failures);
      if (!gbps.ok()) return gbps.status();
      result->load_runs.push_back(*gbps);
      if (Status s = FioBaselineRun(rep, run, /*write=*/false, fio); !s.ok()) return s;
      result->load_pair_ratios.push_back(Ratio(*gbps, fio->reads.back()));
    }
    // The writes just before and after the demotion (the first run's).
    result->demote_pair_ratio = Ratio(result->demote_gbps, (fio->writes[0] + fio->writes[1]) / 2);
    (void)client->UnregisterBuffer(src_.data());
    (void)client->UnregisterBuffer(dst_.data());
    return failures.ToStatus("load");
  }

  // One timed load of every object into the poisoned destination; checks the codes, the path
  // the bytes took and the bytes. GB/s, or the failure.
  Result<double> LoadOnce(int rep, int run, ClientImpl& client, SsdTier& tier,
                          FailureLog* failures) {
    Poison(rep + run);
    const std::vector<Batch> batches = Batches(dst_.data());
    std::vector<std::vector<int64_t>> results(batches.size());
    const SsdTierStats before = tier.stats();
    Report(rep, "load " + std::to_string(run + 1) + "/" + std::to_string(kLoadRuns) + " (" +
                    FormatBytes(g_.value_bytes) + ")");
    Stopwatch watch;
    for (size_t b = 0; b < batches.size(); ++b) {
      results[b] =
          client.BatchGetIntoMultiBuffers(batches[b].keys, batches[b].ptrs, batches[b].sizes);
    }
    const double load_seconds = watch.Seconds();
    for (size_t b = 0; b < batches.size(); ++b) {
      for (size_t k = 0; k < batches[b].keys.size(); ++k) {
        const int64_t got =
            k < results[b].size() ? results[b][k] : ToInt(ErrorCode::INTERNAL_ERROR);
        if (got != static_cast<int64_t>(o_.object_bytes)) {
          failures->Add("load of " + batches[b].keys[k] + ": " +
                        (got < 0 ? CodeString(got) : std::to_string(got) + " bytes"));
        }
      }
    }
    if (Status s = failures->ToStatus("load"); !s.ok()) return s;
    // Every value byte came the expected way: straight into the destination, or through the
    // tier's staging buffer (objects too big for one part are streamed in several pieces).
    const uint64_t staged = tier.stats().staged_bytes - before.staged_bytes;
    const uint64_t direct = tier.stats().direct_bytes - before.direct_bytes;
    if ((g_.direct ? direct : staged) != g_.value_bytes || staged + direct != g_.value_bytes) {
      return Failed("load: the SSD tier read " + std::to_string(direct) + " bytes directly and " +
                    std::to_string(staged) + " bytes through staging for " +
                    std::to_string(g_.value_bytes) + " bytes of objects (expected all " +
                    (g_.direct ? "direct" : "staged") + ")");
    }
    CheckBytes(rep + run, failures);
    return Gbps(g_.value_bytes, load_seconds);
  }

  // The jobs (once the client's load queue depth is known) and fio's hugetlb pages.
  Status PrepareFio(int rep, Fio* fio) {
    // The same bytes the region log wrote: whole flushes of its write size, one at a time.
    fio->write = FioJob{.name = "write",
                        .write = true,
                        .block_bytes = g_.flush_bytes,
                        .size_bytes = g_.regions * g_.flush_bytes,
                        .iodepth = 1};
    // The same bytes the loads read: one value (direct) or record span (staged) per request,
    // as many in flight as a load keeps.
    fio->read = FioJob{.name = "read",
                       .write = false,
                       .block_bytes = g_.read_bytes,
                       .size_bytes = g_.objects * g_.read_bytes,
                       .iodepth = setup_.load_queue_depth};
    fio->wide = fio->read;
    fio->wide.name = "read_qd" + std::to_string(kFioWideQueueDepth);
    fio->wide.iodepth = kFioWideQueueDepth;
    // fio's buffers on 2 MiB pages like the tier's (--fio-mem auto/mmaphuge): the jobs run one
    // after the other, so the largest job's pages are enough.
    if (o_.fio_mem != "malloc") {
      uint64_t needed = 0;
      for (const FioJob* job : {&fio->write, &fio->read, &fio->wide}) {
        needed = std::max(needed, HugetlbPagesFor(*job) * dirs_.size());  // a job per dir
      }
      Report(rep, "reserving " + std::to_string(needed) + " hugetlb pages for fio");
      fio->reservation = std::make_unique<HugetlbReservation>(needed);
      if (!fio->reservation->ok() && o_.fio_mem == "mmaphuge") {
        return BadDiskOption("--fio-mem mmaphuge: fio needs " + std::to_string(needed) +
                             " free hugetlb pages and they could not be reserved (" +
                             std::to_string(ReadHugetlbPages().free) + " free; " + kNrHugepages +
                             (access(kNrHugepages, W_OK) == 0 ? " raised, too few granted)"
                                                              : " not writable: run as root)"));
      }
      setup_.fio_hugetlb_raised = fio->reservation->raised();
    }
    setup_.fio_huge_pages = fio->reservation != nullptr && fio->reservation->ok();
    for (FioJob* job : {&fio->write, &fio->read, &fio->wide}) {
      job->huge_pages = setup_.fio_huge_pages;
    }
    return Status::Ok();
  }

  // One run of a baseline: the write (of a fresh file) or the read (of that file). Every
  // write starts from a fresh file, as the tier writes into a freshly fallocated one:
  // overwriting blocks fio wrote before skips the filesystem's conversion of unwritten extents
  // and measured 3.2-3.8 GB/s against 1.9-2.0 for a fresh file (same run, same disk).
  Status FioBaselineRun(int rep, int run, bool write, Fio* fio) {
    if (write) {
      std::error_code ignored;
      for (const std::string& file : fio->files) fs::remove(file, ignored);
    }
    FioJob& job = write ? fio->write : fio->read;
    Report(rep, "fio " + job.name + " " +
                    (run < 0 ? std::string("before the demotion")
                             : std::to_string(run + 1) + "/" + std::to_string(kLoadRuns)) +
                    (job.huge_pages ? " (2 MiB pages)" : " (malloc)"));
    Result<double> gbps = RunFio(job, fio->files, dirs_.front(), direct_io_);
    if (!gbps.ok()) return gbps.status();
    (write ? fio->writes : fio->reads).push_back(*gbps);
    return Status::Ok();
  }

  // The baselines' runs, and the informational qd32 read (once).
  Status FinishFio(int rep, Fio* fio, DiskRepResult* result) {
    result->fio_write_runs = fio->writes;
    result->fio_read_runs = fio->reads;
    Report(rep, "fio " + fio->wide.name + (fio->wide.huge_pages ? " (2 MiB pages)" : " (malloc)"));
    Result<double> gbps = RunFio(fio->wide, fio->files, dirs_.front(), direct_io_);
    if (!gbps.ok()) return gbps.status();
    result->fio_read_wide_gbps = *gbps;
    return Status::Ok();
  }

  const DiskBenchOptions& o_;
  const Config& config_;
  const Geometry& g_;
  const std::vector<std::string> dirs_;
  const bool direct_io_;
  const AlignedBuffer& src_;
  const AlignedBuffer& dst_;
  Progress* progress_;
  std::vector<std::string> keys_;
  Setup setup_;
};

void PrintHuman(std::ostream& out, const DiskBenchOptions& o, const Geometry& g, const Setup& setup,
                const std::string& dir, const char* fs_name, bool direct, const Summary& r) {
  char line[320];
  out << "tierkv bench disk (client API, embedded, SSD tier): " << FormatBytes(g.value_bytes)
      << " of " << FormatBytes(o.object_bytes) << " objects (" << g.objects << "), region "
      << FormatBytes(o.region_bytes) << ", staging " << FormatBytes(setup.staging_capacity)
      << ", batch " << o.batch << ", " << dir << " on " << fs_name
      << (direct ? ", O_DIRECT" : ", buffered (no O_DIRECT)") << ", io_uring, fio buffers "
      << (setup.fio_huge_pages ? "on 2 MiB hugetlb pages"
                               : "malloc (4 KiB pages: no hugetlb pages could be reserved)")
      << ", " << o.common.reps << " rep" << (o.common.reps == 1 ? "" : "s")
      << "; GB/s: medians of every run; ratio: median of each run against the fio run(s) beside "
         "it ("
      << r.demote_pairs << " demotions, " << r.load_pairs << " loads)\n";
  std::snprintf(line, sizeof(line), "  %-7s %12s %3s %9s %9s %7s\n", "op", "block", "qd", "GB/s",
                "fio GB/s", "ratio");
  out << line;
  std::snprintf(line, sizeof(line), "  %-7s %12s %3d %9.2f %9.2f %7.2f\n", "demote",
                FormatBytes(g.flush_bytes).c_str(), 1, r.demote_gbps, r.fio_write_gbps,
                r.demote_ratio);
  out << line;
  std::snprintf(line, sizeof(line), "  %-7s %12s %3u %9.2f %9.2f %7.2f\n", "load",
                FormatBytes(g.read_bytes).c_str(), setup.load_queue_depth, r.load_gbps,
                r.fio_read_gbps, r.load_ratio);
  out << line;
  std::snprintf(line, sizeof(line), "  (fio read at qd%u, same block: %.2f GB/s)\n",
                kFioWideQueueDepth, r.fio_read_wide_gbps);
  out << line;
  auto verdict = [](double ratio, double target) { return ratio >= target ? "PASS" : "FAIL"; };
  std::snprintf(line, sizeof(line),
                "load %.2f GB/s = %.3f x fio (target >= %.2f: %s), "
                "demote %.2f GB/s = %.3f x fio (target >= %.2f: %s)\n",
                r.load_gbps, r.load_ratio, kLoadRatioTarget,
                verdict(r.load_ratio, kLoadRatioTarget), r.demote_gbps, r.demote_ratio,
                kDemoteRatioTarget, verdict(r.demote_ratio, kDemoteRatioTarget));
  out << line << std::flush;
}

}  // namespace

Status RunDiskBench(const DiskBenchOptions& options) {
  if (Status status = ValidateOptions(options); !status.ok()) return status;
  Result<Config> loaded = LoadConfig(options.common.config_path);
  if (!loaded.ok()) return loaded.status();
  Config config = std::move(loaded).value();
  if (config.mode != Mode::kEmbedded) {
    return Status(ErrorCode::INVALID_CONFIG, "bench disk needs mode \"embedded\"");
  }
  const std::vector<std::string> dirs =
      options.dirs.empty() ? std::vector<std::string>{options.dir} : options.dirs;
  const Geometry geometry =
      ComputeGeometry(options, config.eviction_high_watermark_ratio, dirs.size());
  std::string dir_names;  // for the summary
  for (const std::string& d : dirs) dir_names += (dir_names.empty() ? "" : ",") + d;

  // The client: a segment that holds everything, an SSD tier with room for everything, staged
  // loads only (no promotion, no write-behind), io_uring like fio.
  config.master_server_address.clear();
  config.global_segment_size = geometry.segment_bytes;
  config.use_huge_pages = true;
  config.enable_offload = true;
  config.offload_paths.clear();
  for (const std::string& d : dirs) config.offload_paths.push_back(d + "/bench.tier");
  config.offload_capacity = geometry.capacity;
  config.offload_region_size = options.region_bytes;
  config.offload_eviction_policy = "fifo";
  config.offload_write_policy = "demote_on_evict";
  config.offload_io_engine = "io_uring";
  config.offload_warm_restart = false;
  config.offload_page_cache_reads = false;
  config.offload_allow_buffered_io = options.allow_tmpfs;
  config.staging_buffer_size = options.staging_bytes;
  config.promote_on_hit = false;
  if (Status s = ValidateConfig(config); !s.ok()) return s;

  // The directories: created if missing (and removed at the end if they are then empty).
  struct DirRemover {
    std::vector<std::string> created;
    ~DirRemover() {
      std::error_code ignored;
      for (const std::string& d : created) fs::remove(d, ignored);  // only if empty
    }
  } dir_remover;
  const char* fs_name = "?";
  for (const std::string& dir : dirs) {
    std::error_code ec;
    const bool existed = fs::exists(dir, ec);
    if (!existed && !fs::create_directories(dir, ec)) {
      return Status(ErrorCode::FILE_OPEN_FAIL, "cannot create " + dir + ": " + ec.message());
    }
    if (!existed) dir_remover.created.push_back(dir);
    if (!fs::is_directory(dir, ec)) return BadDiskOption(dir + " is not a directory");
    struct statfs st {};
    if (statfs(dir.c_str(), &st) != 0) {
      return Status(ErrorCode::FILE_OPEN_FAIL, "statfs " + dir + ": " + std::strerror(errno));
    }
    const int64_t fs_magic = static_cast<int64_t>(st.f_type);
    fs_name = FsName(fs_magic);
    if (fs_magic == kTmpfsMagic && !options.allow_tmpfs) {
      return BadDiskOption(
          dir + " is on tmpfs (memory, no O_DIRECT): pass --dir on a disk, or --allow-tmpfs");
    }
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
    FillPattern(src->data() + i * options.object_bytes, options.object_bytes, kDiskPatternSeed + i);
  }

  bool direct_io = true;
  std::string no_direct;
  for (const std::string& dir : dirs) {
    if (!ProbeDirectIo(dir)) {
      direct_io = false;
      no_direct = dir;
    }
  }
  if (!direct_io && !options.allow_tmpfs) {
    return BadDiskOption(no_direct +
                         " does not support O_DIRECT: pass --dir on a disk, or --allow-tmpfs to "
                         "measure buffered IO");
  }
  progress.Update("reserving hugetlb pages for the segment");
  const std::unique_ptr<HugetlbReservation> segment_pages =
      ReserveSegmentHugePages(geometry.segment_bytes);
  DiskRun run(options, config, geometry, dirs, direct_io, *src, *dst, &progress);
  std::vector<double> demote, fio_wide;
  std::vector<double> fio_write_runs, fio_read_runs;  // every baseline run of every rep
  std::vector<double> load_runs;                      // every timed load of every rep
  std::vector<double> demote_pairs, load_pairs;       // every paired ratio of every rep
  for (int rep = 0; rep < options.common.reps; ++rep) {
    Result<DiskRepResult> r = run.OneRep(rep);
    if (!r.ok()) {
      progress.Done();
      return r.status();
    }
    demote.push_back(r->demote_gbps);
    fio_wide.push_back(r->fio_read_wide_gbps);
    for (double v : r->fio_write_runs) fio_write_runs.push_back(Round3(v));
    for (double v : r->fio_read_runs) fio_read_runs.push_back(Round3(v));
    for (double v : r->load_runs) load_runs.push_back(Round3(v));
    demote_pairs.push_back(Round3(r->demote_pair_ratio));
    for (double v : r->load_pair_ratios) load_pairs.push_back(Round3(v));
  }
  progress.Done();
  // Absolute figures: medians over every run. Ratios: medians of the paired ratios (each
  // client run against the fio run(s) beside it), which cancels the disk's drift between runs.
  Summary m;
  m.demote_gbps = Median(demote);
  m.load_gbps = Median(load_runs);
  m.fio_write_gbps = Median(fio_write_runs);
  m.fio_read_gbps = Median(fio_read_runs);
  m.fio_read_wide_gbps = Median(fio_wide);
  m.load_ratio = Median(load_pairs);
  m.demote_ratio = Median(demote_pairs);
  m.load_pairs = load_pairs.size();
  m.demote_pairs = demote_pairs.size();
  const Setup& setup = run.setup();

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
    auto client = [&](JsonLine& line) -> JsonLine& {
      return line.Add("object_bytes", options.object_bytes)
          .Add("objects", geometry.objects)
          .Add("region_bytes", options.region_bytes)
          .Add("staging_bytes", setup.staging_capacity)
          .Add("batch", options.batch)
          .Add("segment_pages", setup.segment_pages)
          .Add("transfer_threads", DefaultTransferThreads(config.transfer_threads));
    };
    {
      JsonLine line;
      common(line, "demote", "client", geometry.flush_bytes, 1, geometry.value_bytes);
      client(line)
          .Add("device_bytes", geometry.written_bytes)
          .Add("runs_gbps", Rounded(demote))
          .Add("pair_ratios", demote_pairs)
          .Add("gbps", Round3(m.demote_gbps))
          .Emit();
    }
    {
      JsonLine line;
      common(line, "load", "client", geometry.read_bytes, setup.load_queue_depth,
             geometry.value_bytes);
      client(line)
          .Add("load_path", geometry.direct ? "direct" : "staged")
          .Add("runs_gbps", load_runs)
          .Add("pair_ratios", load_pairs)
          .Add("device_bytes", geometry.objects * geometry.read_bytes)
          .Add("gbps", Round3(m.load_gbps))
          .Emit();
    }
    {
      JsonLine line;
      common(line, "write", "fio", geometry.flush_bytes, 1, geometry.regions * geometry.flush_bytes)
          .Add("fio_mem", FioMemName(setup.fio_huge_pages))
          .Add("gbps", Round3(m.fio_write_gbps))
          .Add("runs_gbps", fio_write_runs)
          .Emit();
    }
    {
      JsonLine line;
      common(line, "read", "fio", geometry.read_bytes, setup.load_queue_depth,
             geometry.objects * geometry.read_bytes)
          .Add("fio_mem", FioMemName(setup.fio_huge_pages))
          .Add("gbps", Round3(m.fio_read_gbps))
          .Add("runs_gbps", fio_read_runs)
          .Emit();
    }
    {
      JsonLine line;
      common(line, "read", "fio", geometry.read_bytes, kFioWideQueueDepth,
             geometry.objects * geometry.read_bytes)
          .Add("fio_mem", FioMemName(setup.fio_huge_pages))
          .Add("gbps", Round3(m.fio_read_wide_gbps))
          .Emit();
    }
    JsonLine summary;
    summary.Add("bench", "disk")
        .Add("load_gbps", Round3(m.load_gbps))
        .Add("fio_read_gbps", Round3(m.fio_read_gbps))
        .Add("load_ratio", Round3(m.load_ratio))
        .Add("demote_gbps", Round3(m.demote_gbps))
        .Add("fio_write_gbps", Round3(m.fio_write_gbps))
        .Add("demote_ratio", Round3(m.demote_ratio))
        .Add("ratio_method", "median of paired runs")
        .Add("load_pairs", m.load_pairs)
        .Add("demote_pairs", m.demote_pairs)
        .Add("load_queue_depth", setup.load_queue_depth)
        .Add("load_path", geometry.direct ? "direct" : "staged")
        .Add("fio_read_qd32_gbps", Round3(m.fio_read_wide_gbps))
        .Add("fio_mem", FioMemName(setup.fio_huge_pages))
        .Add("fio_hugetlb_reserved", setup.fio_hugetlb_raised)
        .Add("load_target", kLoadRatioTarget)
        .Add("demote_target", kDemoteRatioTarget)
        .Add("dirs", dirs.size());
    if (dirs.size() > 1) {
      // Striped over the directories' drives, against fio over the same files at once: the
      // lower of the two ratios.
      summary.Add("stripe_ratio", Round3(std::min(m.load_ratio, m.demote_ratio)));
    }
    summary.Emit();
  }
  PrintHuman(options.common.json ? std::cerr : std::cout, options, geometry, setup, dir_names,
             fs_name, run.direct_io(), m);
  return Status::Ok();
}

}  // namespace tierkv::bench
