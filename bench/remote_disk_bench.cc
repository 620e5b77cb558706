#include "remote_disk_bench.h"

#include <sys/statfs.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "disk_bench.h"
#include "fio_runner.h"
#include "local_cluster.h"
#include "ssd/record_format.h"
#include "ssd/staging_area.h"
#include "store/tier_stager.h"
#include "tcp_stream.h"
#include "tierkv/client.h"
#include "tierkv/config.h"
#include "workload.h"

namespace tierkv::bench {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kRemoteDiskPatternSeed = 0x7264'6973'6b62'656eull;  // "rdiskben"
// The workload's name: its keys are "bench-disk-remote@size:...".
constexpr const char* kName = "disk-remote";

Status Validate(const RemoteDiskBenchOptions& o) {
  if (o.common.reps < 1 || o.common.reps > 100) return BadDiskOption("--reps must be 1..100");
  if (o.object_bytes == 0 || o.working_set_bytes < 4 * o.object_bytes) {
    return BadDiskOption("--working-set must hold at least 4 objects of " +
                         FormatBytes(o.object_bytes));
  }
  if (o.segment_bytes < o.batch * o.object_bytes * 2) {
    return BadDiskOption("--segment-size must hold two put batches (" +
                         FormatBytes(o.batch * o.object_bytes * 2) + ")");
  }
  if (o.segment_bytes >= o.working_set_bytes) {
    return BadDiskOption(
        "--segment-size must be smaller than --working-set, or nothing is demoted");
  }
  if (o.batch == 0 || o.batch > 4096) return BadDiskOption("--batch must be 1..4096");
  if (o.fio_mem != "auto" && o.fio_mem != "malloc" && o.fio_mem != "mmaphuge") {
    return BadDiskOption("--fio-mem must be auto, malloc or mmaphuge");
  }
  if (o.dir.empty()) return BadDiskOption("--dir is empty");
  for (const std::string& d : o.dirs) {
    if (d.empty()) return BadDiskOption("--dirs has an empty directory");
  }
  return Status::Ok();
}

struct Result3 {
  double put_gbps = 0, load_gbps = 0, fio_read_gbps = 0, fio_write_gbps = 0, tcp_raw_gbps = 0;
  size_t disk_objects = 0;
  uint32_t load_queue_depth = 1;
  bool fio_huge_pages = false;
};

// The number of leading objects of `workload` (in put order: the first demoted) that have
// only disk replicas now.
Result<size_t> LeadingDiskOnly(Client& client, const TransferWorkload& workload) {
  size_t n = 0;
  constexpr size_t kChunk = 1024;
  for (size_t first = 0; first < workload.objects(); first += kChunk) {
    std::vector<std::string> keys;
    for (size_t i = first; i < std::min(workload.objects(), first + kChunk); ++i) {
      keys.push_back(workload.key(i));
    }
    const auto descs = client.BatchGetReplicaDesc(keys);
    for (const auto& d : descs) {
      if (!d.ok()) return Failed("replica descriptors: " + d.status().ToString());
      const bool disk_only =
          !d->empty() && std::all_of(d->begin(), d->end(), [](const ReplicaDesc& r) {
            return r.tier == ReplicaTier::kDisk;
          });
      if (!disk_only) return n;
      ++n;
    }
  }
  return n;
}

}  // namespace

Status RunRemoteDiskBench(const RemoteDiskBenchOptions& options) {
  if (Status s = Validate(options); !s.ok()) return s;
  Result<Config> loaded = LoadConfig(options.common.config_path);
  if (!loaded.ok()) return loaded.status();
  const Config base = std::move(loaded).value();
  const RemoteDiskBenchOptions& o = options;
  const size_t objects = static_cast<size_t>(o.working_set_bytes / o.object_bytes);
  const uint64_t value_bytes = objects * o.object_bytes;

  std::error_code ec;
  const std::vector<std::string> dirs = o.dirs.empty() ? std::vector<std::string>{o.dir} : o.dirs;
  struct DirRemover {
    std::string config;
    std::vector<std::string> created;
    ~DirRemover() {
      std::error_code ignored;
      fs::remove(config, ignored);
      for (const std::string& d : created) fs::remove(d, ignored);  // only if empty
    }
  } remover{dirs.front() + "/store.json", {}};
  for (const std::string& dir : dirs) {
    const bool existed = fs::exists(dir, ec);
    if (!existed && !fs::create_directories(dir, ec)) {
      return Status(ErrorCode::FILE_OPEN_FAIL, "cannot create " + dir + ": " + ec.message());
    }
    if (!existed) remover.created.push_back(dir);
    struct statfs st {};
    if (statfs(dir.c_str(), &st) != 0 || static_cast<int64_t>(st.f_type) == kTmpfsMagic ||
        !ProbeDirectIo(dir)) {
      return BadDiskOption(dir + " is not on a disk with O_DIRECT (tmpfs?): pass --dir on a disk");
    }
  }

  // The store: an SSD tier with room for everything (nothing leaves the disk), io_uring.
  // TransferWorkload's key of object 0 (all keys of one size have one length).
  const std::string key0 = std::string("bench-") + kName +
                           "@size:" + std::to_string(o.object_bytes) + "@" + HexHash64(0);
  const uint64_t span = RecordSpan(key0.size(), o.object_bytes);
  const uint64_t per_region = (o.region_bytes - kFirstRecordOffset) / span;
  if (per_region == 0) return BadDiskOption("--region-size holds no object");
  // Per tier file: its share of the regions, and two spare.
  const uint64_t regions =
      ((objects + per_region - 1) / per_region + dirs.size() - 1) / dirs.size() + 2;
  const std::string config_path = remover.config;
  {
    std::ofstream out(config_path);
    out << "{\"enable_offload\": true, \"offload_paths\": [";
    for (size_t i = 0; i < dirs.size(); ++i) {
      out << (i == 0 ? "" : ", ") << nlohmann::json(dirs[i] + "/remote.tier").dump();
    }
    out << "], \"offload_capacity\": " << regions * o.region_bytes
        << ", \"offload_region_size\": " << o.region_bytes
        << ", \"staging_buffer_size\": " << o.staging_bytes
        << ", \"offload_io_engine\": \"io_uring\"}\n";
    if (!out) return Failed("cannot write " + config_path);
  }

  Progress progress("disk-remote", o.common.progress);
  // The store's segment on 2 MiB pages, as fio's buffers (fio_runner.h).
  const std::unique_ptr<HugetlbReservation> segment_pages =
      ReserveSegmentHugePages(o.segment_bytes);
  if (Status s = EnsureFio(&progress); !s.ok()) return s;
  // Raw TCP at its best, the network's side of the baseline: forked before any gRPC use.
  progress.Update("starting the raw TCP baseline's sender");
  Result<std::unique_ptr<TcpStream>> stream_started =
      TcpStream::Start(value_bytes, kRemoteDiskPatternSeed);
  if (!stream_started.ok()) return stream_started.status();
  std::unique_ptr<TcpStream> stream = std::move(stream_started).value();
  Result<TransferBuffers> buffers =
      AllocateTransferBuffers(value_bytes, kRemoteDiskPatternSeed, progress);
  if (!buffers.ok()) return buffers.status();

  std::vector<Result3> reps;
  for (int rep = 0; rep < o.common.reps; ++rep) {
    const std::string where =
        "rep " + std::to_string(rep + 1) + "/" + std::to_string(o.common.reps);
    Result3 r;
    {
      progress.Update(where + ": starting tierkv master and a tierkv store with an SSD tier");
      auto cluster = LocalCluster::Start(o.segment_bytes, false, {"--config", config_path});
      if (!cluster.ok()) return cluster.status();
      auto created = Client::Create(RequesterConfig(base, (*cluster)->master_address(), "tcp"));
      if (!created.ok()) return created.status();
      std::unique_ptr<Client> client = std::move(created).value();
      if (Status s = client->RegisterBuffer(buffers->src.data(), buffers->src.size()); !s.ok()) {
        return s;
      }
      if (Status s = client->RegisterBuffer(buffers->dst.data(), buffers->dst.size()); !s.ok()) {
        return s;
      }
      if (Status s = WarmUpRequester(*client); !s.ok()) return s;
      TransferWorkload all(kName, o.object_bytes, objects, o.batch, 1, buffers->src, buffers->dst);

      progress.Update(where + ": put " + FormatBytes(value_bytes) + " (demoting as it goes)");
      Result<double> put = all.Put(*client);
      if (!put.ok()) return put.status();
      r.put_gbps = Gbps(value_bytes, *put);
      // Let the master's maintenance finish the eviction pass the last puts started.
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      Result<size_t> disk_only = LeadingDiskOnly(*client, all);
      if (!disk_only.ok()) return disk_only.status();
      if (*disk_only < 2) {
        return Failed("only " + std::to_string(*disk_only) +
                      " objects were demoted to the store's SSD tier");
      }
      r.disk_objects = *disk_only;
      TransferWorkload loads(kName, o.object_bytes, r.disk_objects, o.batch, 1, buffers->src,
                             buffers->dst);
      progress.Update(where + ": get " + std::to_string(r.disk_objects) +
                      " objects from the store's SSD tier");
      Result<double> load = loads.Get(*client, rep);
      if (!load.ok()) return load.status();
      r.load_gbps = Gbps(r.disk_objects * o.object_bytes, *load);
      // The same bytes into the same slots as one TCP stream between two processes.
      progress.Update(where + ": raw TCP, the same " + std::to_string(r.disk_objects) + " objects");
      Result<double> raw = stream->Receive(loads, rep, TcpStream::Mode::kBulk);
      if (!raw.ok()) return raw.status();
      r.tcp_raw_gbps = Gbps(r.disk_objects * o.object_bytes, *raw);
      if (Status s = all.RemoveAll(*client); !s.ok()) return s;
      (void)client->UnregisterBuffer(buffers->src.data());
      (void)client->UnregisterBuffer(buffers->dst.data());
      client.reset();
      progress.Update(where + ": stopping the store and the master");
      if (Status s = (*cluster)->Stop(); !s.ok()) return s;
    }

    // fio, the same bytes: records read at the queue depth the store's stagers reach (their
    // batches together, at most the ring), regions written at depth 1.
    const uint64_t batch_bytes = std::min(o.staging_bytes / 2, kStageBatchBytes);
    const uint64_t per_batch = std::max<uint64_t>(1, batch_bytes / StagingNeed(o.object_bytes));
    r.load_queue_depth = static_cast<uint32_t>(std::min<uint64_t>(
        {per_batch * TierStager::kThreads, kRingQueueDepth, static_cast<uint64_t>(o.batch)}));
    FioJob read{.name = "read",
                .write = false,
                .block_bytes = span,
                .size_bytes = r.disk_objects * span,
                .iodepth = r.load_queue_depth};
    FioJob write{.name = "write",
                 .write = true,
                 .block_bytes = o.region_bytes,
                 .size_bytes =
                     (r.disk_objects * span + o.region_bytes - 1) / o.region_bytes * o.region_bytes,
                 .iodepth = 1};
    std::unique_ptr<HugetlbReservation> reservation;
    if (o.fio_mem != "malloc") {
      reservation = std::make_unique<HugetlbReservation>(
          std::max(HugetlbPagesFor(read), HugetlbPagesFor(write)) * dirs.size());
      if (!reservation->ok() && o.fio_mem == "mmaphuge") {
        return BadDiskOption("--fio-mem mmaphuge: not enough free hugetlb pages for fio");
      }
    }
    r.fio_huge_pages = reservation != nullptr && reservation->ok();
    std::vector<std::string> files;
    for (const std::string& dir : dirs) files.push_back(dir + "/fio.dat");
    auto remove_files = [&] {
      for (const std::string& file : files) fs::remove(file, ec);
    };
    for (FioJob* job : {&write, &read}) {
      job->huge_pages = r.fio_huge_pages;
      progress.Update(where + ": fio " + job->name);
      Result<double> gbps = RunFio(*job, files, dirs.front(), /*direct=*/true);
      if (!gbps.ok()) {
        remove_files();
        return gbps.status();
      }
      (job->write ? r.fio_write_gbps : r.fio_read_gbps) = *gbps;
    }
    remove_files();
    reps.push_back(r);
  }
  if (Status s = stream->Stop(); !s.ok()) return s;
  progress.Done();

  auto median = [&](double Result3::*field) {
    std::vector<double> v;
    for (const Result3& r : reps) v.push_back(r.*field);
    return Median(v);
  };
  const double load = median(&Result3::load_gbps), put = median(&Result3::put_gbps);
  const double fio_read = median(&Result3::fio_read_gbps);
  const double fio_write = median(&Result3::fio_write_gbps);
  const double tcp_raw = median(&Result3::tcp_raw_gbps);
  // Paired per rep: load against fio read, and against the slower of the two things a remote
  // load is made of (the drive, the network) at their best in the same rep.
  PairedFigure load_vs_fio, put_vs_fio, remote_load;
  size_t tcp_bound = 0;
  for (const Result3& r : reps) {
    load_vs_fio.Add(r.load_gbps, r.fio_read_gbps);
    put_vs_fio.Add(r.put_gbps, r.fio_write_gbps);
    remote_load.Add(r.load_gbps, std::min(r.fio_read_gbps, r.tcp_raw_gbps));
    if (r.tcp_raw_gbps < r.fio_read_gbps) ++tcp_bound;
  }
  const double load_ratio = load_vs_fio.ratio(), put_ratio = put_vs_fio.ratio();
  const char* bound_by = tcp_bound * 2 > reps.size() ? "tcp_raw" : "fio_read";
  const Result3& last = reps.back();
  if (o.common.json) {
    JsonLine()
        .Add("bench", "disk_remote")
        .Add("transport", "tcp")
        .Add("object_bytes", o.object_bytes)
        .Add("objects", objects)
        .Add("disk_objects", last.disk_objects)
        .Add("store_segment_bytes", o.segment_bytes)
        .Add("region_bytes", o.region_bytes)
        .Add("staging_bytes", o.staging_bytes)
        .Add("batch", o.batch)
        .Add("reps", o.common.reps)
        .Add("load_gbps", Round3(load))
        .Add("fio_read_gbps", Round3(fio_read))
        .Add("load_ratio", Round3(load_ratio))
        .Add("load_queue_depth", last.load_queue_depth)
        .Add("put_gbps", Round3(put))
        .Add("fio_write_gbps", Round3(fio_write))
        .Add("put_ratio", Round3(put_ratio))
        .Add("fio_mem", FioMemName(last.fio_huge_pages))
        .Add("tcp_raw_gbps", Round3(tcp_raw))
        .Add("remote_load_ratio", Round3(remote_load.ratio()))
        .Add("remote_load_ratio_min", Round3(remote_load.ratio_min()))
        .Add("remote_load_ratio_max", Round3(remote_load.ratio_max()))
        .Add("remote_load_baseline", bound_by)
        .Add("remote_load_target", kRemoteLoadRatioTarget)
        .Emit();
  }
  std::ostream& out = o.common.json ? std::cerr : std::cout;
  out << "tierkv bench disk-remote: " << objects << " x " << FormatBytes(o.object_bytes)
      << " put through a requester (tcp) into a store with a " << FormatBytes(o.segment_bytes)
      << " segment; " << last.disk_objects << " objects loaded back from its SSD tier ("
      << (o.dirs.empty() ? o.dir : std::to_string(o.dirs.size()) + " directories")
      << "), median of " << o.common.reps << " rep(s)\n"
      << "  staged load  " << Round3(load) << " GB/s   fio read (qd " << last.load_queue_depth
      << ", " << FioMemName(last.fio_huge_pages) << ") " << Round3(fio_read) << " GB/s   ratio "
      << Round3(load_ratio) << "\n"
      << "  raw TCP (one stream, " << FormatBytes(TcpStream::kBulkWriteBytes) << " writes) "
      << Round3(tcp_raw) << " GB/s   staged load / min(fio read, raw TCP) "
      << Round3(remote_load.ratio()) << " [" << Round3(remote_load.ratio_min()) << ", "
      << Round3(remote_load.ratio_max()) << "] (target " << kRemoteLoadRatioTarget << ": "
      << (remote_load.ratio() >= kRemoteLoadRatioTarget ? "PASS" : "FAIL") << "; bound by "
      << bound_by << ")\n"
      << "  put+demote   " << Round3(put) << " GB/s   fio write (qd 1) " << Round3(fio_write)
      << " GB/s   ratio " << Round3(put_ratio) << " (informational)\n";
  return Status::Ok();
}

}  // namespace tierkv::bench
