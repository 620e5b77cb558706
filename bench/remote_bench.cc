#include "remote_bench.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fio_runner.h"
#include "local_cluster.h"
#include "tcp_stream.h"
#include "tierkv/client.h"
#include "tierkv/config.h"
#include "workload.h"

namespace tierkv::bench {
namespace {

void EmitJson(const nlohmann::ordered_json& line) {
  std::cout << line.dump() << '\n' << std::flush;
}

// ---- The bench ----------------------------------------------------------------------------

// Medians of one object size; the tcp figures nullopt where the transport could not run.
struct RemoteSizeResult {
  uint64_t object_bytes = 0;
  size_t objects = 0;
  PairedFigure shm_put, shm_get;                 // against memcpy
  std::optional<PairedFigure> tcp_put, tcp_get;  // against raw TCP at its best
  double memcpy_gbps = 0;
  // TCP at its best (per rep, the faster of the bulk stream and the per-object exchange; the
  // bulk one in practice), and the per-object exchange alone.
  double tcp_raw_gbps = 0, tcp_raw_per_object_gbps = 0;
  // The figure of one row (transport, op).
  std::optional<PairedFigure> Row(bool shm, bool put) const {
    if (shm) return put ? shm_put : shm_get;
    return put ? tcp_put : tcp_get;
  }
};

std::optional<double> RatioOf(const std::optional<PairedFigure>& f) {
  return f ? std::optional<double>(f->ratio()) : std::nullopt;
}
std::optional<double> GbpsOf(const std::optional<PairedFigure>& f) {
  return f ? std::optional<double>(f->median_gbps()) : std::nullopt;
}

// The issue-27 targets by path and size (ratio against the path's baseline); 0 = none.
double TargetRatio(bool shm, bool put, uint64_t size) {
  if (size == 64 * kKiB) return shm ? (put ? 0.6 : 0.75) : (put ? 0.5 : 0.6);
  if (size == 256 * kKiB) return shm ? (put ? 0.8 : 0.9) : (put ? 0.7 : 0.8);
  if (size == 2 * kMiB)
    return shm ? (put ? 0.9 : kShmGetRatioTarget) : (put ? 0.8 : kTcpGetRatioTarget);
  return 0;
}

// "64k", "256k", "2m": the suffix of a size's summary fields.
std::string SizeLabel(uint64_t size) {
  if (size % kMiB == 0) return std::to_string(size / kMiB) + "m";
  if (size % kKiB == 0) return std::to_string(size / kKiB) + "k";
  return std::to_string(size) + "b";
}

std::string Optional(const std::optional<double>& value, const char* format) {
  if (!value) return "n/a";
  char text[32];
  std::snprintf(text, sizeof(text), format, *value);
  return text;
}

void PrintHuman(std::ostream& out, const RemoteBenchOptions& options, const Config& config,
                uint64_t segment_bytes, const std::vector<RemoteSizeResult>& results,
                const RemoteSizeResult& summary, const std::string& tcp_status) {
  char line[256];
  out << "tierkv bench remote: master + store processes on 127.0.0.1 (store segment "
      << FormatBytes(segment_bytes) << (options.small_pages ? ", 4 KiB pages" : "") << "), "
      << FormatBytes(options.working_set_bytes) << " working set per size, batch " << options.batch
      << ", " << options.pieces << " buffers per object, median of " << options.common.reps
      << " rep" << (options.common.reps == 1 ? "" : "s") << ", checksum verify "
      << (config.verify_checksum ? "on" : "off") << "\n";
  std::snprintf(line, sizeof(line), "  %-4s %-4s %10s %8s %9s %-8s %9s %6s %13s %7s\n", "tr", "op",
                "object", "objects", "GB/s", "baseline", "GB/s", "ratio", "min-max", "target");
  out << line;
  for (const RemoteSizeResult& r : results) {
    for (const bool shm_row : {true, false}) {
      for (const bool put : {true, false}) {
        const std::optional<PairedFigure> f = r.Row(shm_row, put);
        const double target = TargetRatio(shm_row, put, r.object_bytes);
        std::string verdict = "-";
        if (f && target > 0) {
          verdict = std::string(f->ratio() >= target ? "PASS " : "FAIL ") +
                    std::to_string(target).substr(0, 4);
        }
        char spread[32] = "n/a";
        if (f) std::snprintf(spread, sizeof(spread), "%.2f-%.2f", f->ratio_min(), f->ratio_max());
        std::snprintf(line, sizeof(line), "  %-4s %-4s %10s %8zu %9s %-8s %9.2f %6s %13s %7s\n",
                      shm_row ? "shm" : "tcp", put ? "put" : "get",
                      FormatBytes(r.object_bytes).c_str(), r.objects,
                      Optional(GbpsOf(f), "%.2f").c_str(), shm_row ? "memcpy" : "raw TCP",
                      shm_row ? r.memcpy_gbps : r.tcp_raw_gbps,
                      Optional(RatioOf(f), "%.2f").c_str(), spread, verdict.c_str());
        out << line;
      }
    }
    std::snprintf(line, sizeof(line),
                  "  (raw TCP at its best: one stream of %s writes; an object-at-a-time "
                  "exchange of the same bytes: %.2f GB/s)\n",
                  FormatBytes(TcpStream::kBulkWriteBytes).c_str(), r.tcp_raw_per_object_gbps);
    out << line;
  }
  if (!tcp_status.empty()) out << "  tcp transport: " << tcp_status << "\n";
  // The headline's size is 2 MiB when it was run, else the first size: its own targets (none
  // for a size the issue names no target for).
  const double shm_target = TargetRatio(true, false, summary.object_bytes);
  const double tcp_target = TargetRatio(false, false, summary.object_bytes);
  auto verdict = [](double ratio, double target) {
    if (target <= 0) return std::string("no target");
    return "target >= " + std::to_string(target).substr(0, 4) + ": " +
           (ratio >= target ? "PASS" : "FAIL");
  };
  std::snprintf(
      line, sizeof(line),
      "%s objects: shm get %.2f GB/s = %.2f x memcpy (%s); tcp get %s = %s x raw TCP "
      "%.2f GB/s (%s)\n",
      FormatBytes(summary.object_bytes).c_str(), summary.shm_get.median_gbps(),
      summary.shm_get.ratio(), verdict(summary.shm_get.ratio(), shm_target).c_str(),
      summary.tcp_get ? Optional(GbpsOf(summary.tcp_get), "%.2f GB/s").c_str() : "not available",
      Optional(RatioOf(summary.tcp_get), "%.2f").c_str(), summary.tcp_raw_gbps,
      verdict(RatioOf(summary.tcp_get).value_or(0), tcp_target).c_str());
  out << line << std::flush;
}

// --auth and --tls: the JSON line of one size's paired comparison (printed with --json) and its
// human line (returned). `target` 0: reported without one.
std::string PairedLine(const RemoteBenchOptions& options, uint64_t size, const char* auth,
                       const char* base_name, const char* name, const std::vector<double>& base_get,
                       const std::vector<double>& get, const std::vector<double>& put,
                       const std::vector<double>& ratios, double target) {
  const double ratio = Median(ratios);
  const double low = *std::min_element(ratios.begin(), ratios.end());
  const double high = *std::max_element(ratios.begin(), ratios.end());
  const bool pass = ratio >= target;
  nlohmann::ordered_json line;
  line["bench"] = "remote";
  line["transport"] = "tcp";
  line["auth"] = auth;
  line["object_bytes"] = size;
  line["reps"] = options.common.reps;
  line[std::string("get_gbps_") + base_name] = Round3(Median(base_get));
  line[std::string("get_gbps_") + name] = Round3(Median(get));
  line[std::string("put_gbps_") + name] = Round3(Median(put));
  line["get_ratio"] = Round3(ratio);
  line["get_ratio_min"] = Round3(low);
  line["get_ratio_max"] = Round3(high);
  if (target > 0) {
    line["target_ratio"] = target;
    line["pass"] = pass;
  }
  if (options.common.json) EmitJson(line);
  char text[320];
  std::snprintf(text, sizeof(text),
                "tcp get (%s), %s objects: %.3f GB/s vs %.3f GB/s (%s): ratio %.3f, min %.3f, "
                "max %.3f over %d paired reps; %s\n",
                auth, FormatBytes(size).c_str(), Median(get), Median(base_get), base_name, ratio,
                low, high, options.common.reps,
                target > 0 ? (std::string("target >= ") + std::to_string(target).substr(0, 4) +
                              (pass ? ": PASS" : ": FAIL"))
                                 .c_str()
                           : "reported");
  return text;
}

}  // namespace

// ---- RunRemoteBench -----------------------------------------------------------------------

Status RunRemoteBench(const RemoteBenchOptions& options) {
  if (Status s = ValidateTransferOptions(options.common, options.working_set_bytes,
                                         options.object_sizes, options.batch, options.pieces);
      !s.ok()) {
    return s;
  }
  Result<Config> loaded = LoadConfig(options.common.config_path);
  if (!loaded.ok()) return loaded.status();
  const Config base = std::move(loaded).value();
  const uint64_t largest = LargestWorkingSet(options.working_set_bytes, options.object_sizes);
  const uint64_t segment_bytes = SegmentBytesFor(largest);

  Progress progress("remote", options.common.progress);
  // First of all, before anything in this process touches gRPC: fork the raw TCP sender.
  progress.Update("starting the raw TCP sender (a forked child)");
  Result<std::unique_ptr<TcpStream>> stream_started = TcpStream::Start(largest);
  if (!stream_started.ok()) return stream_started.status();
  std::unique_ptr<TcpStream> stream = std::move(stream_started).value();

  Result<TransferBuffers> buffers = AllocateTransferBuffers(largest, kRemotePatternSeed, progress);
  if (!buffers.ok()) return buffers.status();
  AlignedBuffer* src = &buffers->src;
  AlignedBuffer* dst = &buffers->dst;

  // The store's segment on 2 MiB pages (fio_runner.h: ReserveSegmentHugePages), unless asked
  // for 4 KiB pages; each run with --auth / --tls starts one more store.
  const std::unique_ptr<HugetlbReservation> segment_pages =
      options.small_pages
          ? nullptr
          : ReserveSegmentHugePages(segment_bytes * (1 + (options.auth || options.tls ? 1 : 0) +
                                                     (options.tls ? 1 : 0)));
  progress.Update("starting tierkv master and tierkv store (segment " + FormatBytes(segment_bytes) +
                  "), connecting the requesters");
  Result<RemoteRun> started =
      RemoteRun::Start(base, segment_bytes, options.small_pages, *src, *dst);
  if (!started.ok()) return started.status();
  RemoteRun run = std::move(started).value();
  // --auth: the same cluster again, every process holding a token.
  std::unique_ptr<TempTokenFile> token_file;
  std::unique_ptr<TempTlsFiles> tls_files;
  std::optional<RemoteRun> auth_run, tls_run;
  if (options.auth || options.tls) {
    Result<std::unique_ptr<TempTokenFile>> made = TempTokenFile::Create();
    if (!made.ok()) return made.status();
    token_file = std::move(made).value();
    progress.Update("starting a second master and store with a cluster token");
    Result<RemoteRun> with_token =
        RemoteRun::Start(base, segment_bytes, options.small_pages, *src, *dst, token_file->path());
    if (!with_token.ok()) return with_token.status();
    auth_run = std::move(with_token).value();
    if (auth_run->clients.tcp == nullptr) {
      return Status(ErrorCode::INTERNAL_ERROR,
                    "--auth: no tcp requester: " + auth_run->clients.tcp_status);
    }
  }
  if (options.tls) {
    Result<std::unique_ptr<TempTlsFiles>> made = TempTlsFiles::Create();
    if (!made.ok()) return made.status();
    tls_files = std::move(made).value();
    progress.Update("starting a third master and store: the token and TLS on the data port");
    Config tls_base = base;
    tls_base.data_tls_ca_file = tls_files->ca();
    Result<RemoteRun> with_tls = RemoteRun::Start(
        tls_base, segment_bytes, options.small_pages, *src, *dst, token_file->path(),
        {"--data-tls-cert", tls_files->cert(), "--data-tls-key", tls_files->key()});
    if (!with_tls.ok()) return with_tls.status();
    tls_run = std::move(with_tls).value();
    if (tls_run->clients.tcp == nullptr) {
      return Status(ErrorCode::INTERNAL_ERROR,
                    "--tls: no tcp requester: " + tls_run->clients.tcp_status);
    }
  }
  Client* const shm = run.clients.shm.get();
  Client* const tcp = run.clients.tcp.get();
  const std::string tcp_status = run.clients.tcp_status;

  std::vector<RemoteSizeResult> results;
  std::string auth_lines;  // --auth: the summary's lines
  const int reps = options.common.reps;
  for (uint64_t size : options.object_sizes) {
    TransferWorkload workload("remote", size, ObjectsFor(options.working_set_bytes, size),
                              options.batch, options.pieces, *src, *dst);
    std::vector<double> shm_put, shm_get, tcp_put, tcp_get, memcpy_gbps, raw_gbps,
        raw_per_object_gbps;
    std::vector<double> token_put, token_get, token_ratio;  // --auth
    std::vector<double> tls_put, tls_get, tls_ratio;        // --tls
    for (int rep = 0; rep < reps; ++rep) {
      const std::string where = FormatBytes(size) + " x " + std::to_string(workload.objects()) +
                                ", rep " + std::to_string(rep + 1) + "/" + std::to_string(reps);
      progress.Update(where + ": shm put, get");
      if (Status s = ClientRep(*shm, workload, rep, &shm_put, &shm_get); !s.ok()) return s;
      if (tcp != nullptr) {
        progress.Update(where + ": tcp put, get");
        if (Status s = ClientRep(*tcp, workload, rep, &tcp_put, &tcp_get); !s.ok()) return s;
      }
      if (auth_run.has_value() && tcp != nullptr) {
        progress.Update(where + ": tcp put, get with the cluster token");
        Client& with_token = *auth_run->clients.tcp;
        if (Status s = ClientRep(with_token, workload, rep, &token_put, &token_get); !s.ok()) {
          return s;
        }
        token_ratio.push_back(tcp_get.back() > 0 ? token_get.back() / tcp_get.back() : 0);
      }
      if (tls_run.has_value() && tcp != nullptr) {
        progress.Update(where + ": tcp put, get with the token over TLS");
        if (Status s = ClientRep(*tls_run->clients.tcp, workload, rep, &tls_put, &tls_get);
            !s.ok()) {
          return s;
        }
        tls_ratio.push_back(tcp_get.back() > 0 ? tls_get.back() / tcp_get.back() : 0);
      }
      progress.Update(where + ": memcpy");
      Result<double> copy = workload.Memcpy(rep);
      if (!copy.ok()) return copy.status();
      memcpy_gbps.push_back(Gbps(workload.total_bytes(), *copy));
      progress.Update(where + ": raw TCP stream (bulk, then per object)");
      Result<double> bulk = stream->Receive(workload, rep, TcpStream::Mode::kBulk);
      if (!bulk.ok()) return bulk.status();
      Result<double> per_object = stream->Receive(workload, rep, TcpStream::Mode::kPerObject);
      if (!per_object.ok()) return per_object.status();
      raw_per_object_gbps.push_back(Gbps(workload.total_bytes(), *per_object));
      raw_gbps.push_back(std::max(Gbps(workload.total_bytes(), *bulk), raw_per_object_gbps.back()));
    }
    RemoteSizeResult r;
    r.object_bytes = size;
    r.objects = workload.objects();
    for (int i = 0; i < reps; ++i) {
      r.shm_put.Add(shm_put[i], memcpy_gbps[i]);
      r.shm_get.Add(shm_get[i], memcpy_gbps[i]);
    }
    r.memcpy_gbps = Median(memcpy_gbps);
    r.tcp_raw_gbps = Median(raw_gbps);
    r.tcp_raw_per_object_gbps = Median(raw_per_object_gbps);
    if (tcp != nullptr) {
      r.tcp_put.emplace();
      r.tcp_get.emplace();
      for (int i = 0; i < reps; ++i) {
        r.tcp_put->Add(tcp_put[i], raw_gbps[i]);
        r.tcp_get->Add(tcp_get[i], raw_gbps[i]);
      }
    }
    results.push_back(r);
    if (!tls_ratio.empty()) {
      auth_lines += PairedLine(options, size, "token+tls", "plaintext", "tls", tcp_get, tls_get,
                               tls_put, tls_ratio, 0);
    }
    if (!token_ratio.empty()) {
      auth_lines += PairedLine(options, size, "token", "without_token", "with_token", tcp_get,
                               token_get, token_put, token_ratio, kTokenDataPlaneRatioTarget);
    }
    if (options.common.json) {
      for (const bool shm_row : {true, false}) {
        for (const bool put : {true, false}) {
          const std::optional<PairedFigure> f = r.Row(shm_row, put);
          nlohmann::ordered_json line;
          line["bench"] = "remote";
          line["transport"] = shm_row ? "shm" : "tcp";
          line["op"] = put ? "put" : "get";
          line["object_bytes"] = r.object_bytes;
          line["batch"] = options.batch;
          line["objects"] = r.objects;
          line["pieces"] = options.pieces;
          line["reps"] = reps;
          line["checksum"] = base.verify_checksum;
          line["gbps"] = OrNull(GbpsOf(f));
          line["baseline"] = shm_row ? "memcpy" : "tcp_raw";
          line["baseline_gbps"] = Round3(shm_row ? r.memcpy_gbps : r.tcp_raw_gbps);
          if (!shm_row) line["tcp_raw_per_object_gbps"] = Round3(r.tcp_raw_per_object_gbps);
          line["ratio"] = OrNull(RatioOf(f));
          line["ratio_min"] = f ? nlohmann::ordered_json(Round3(f->ratio_min())) : nullptr;
          line["ratio_max"] = f ? nlohmann::ordered_json(Round3(f->ratio_max())) : nullptr;
          const double target = TargetRatio(shm_row, put, r.object_bytes);
          if (target > 0) line["target_ratio"] = target;
          if (!shm_row && !tcp_status.empty()) line["status"] = tcp_status;
          EmitJson(line);
        }
      }
    }
  }

  progress.Update("stopping the requesters, the store, the master and the TCP sender");
  const Status cluster_stopped = run.Stop(*src, *dst);
  const Status auth_stopped = auth_run.has_value() ? auth_run->Stop(*src, *dst) : Status::Ok();
  const Status tls_stopped = tls_run.has_value() ? tls_run->Stop(*src, *dst) : Status::Ok();
  const Status stream_stopped = stream->Stop();
  progress.Done();
  if (!cluster_stopped.ok()) return cluster_stopped;
  if (!auth_stopped.ok()) return auth_stopped;
  if (!tls_stopped.ok()) return tls_stopped;
  if (!stream_stopped.ok()) return stream_stopped;

  // The summary is for 2 MiB objects, or the first size when 2 MiB was not run.
  RemoteSizeResult summary = results.front();
  for (const RemoteSizeResult& r : results) {
    if (r.object_bytes == 2 * kMiB) summary = r;
  }
  if (options.common.json) {
    nlohmann::ordered_json line;
    line["bench"] = "remote";
    line["object_bytes"] = summary.object_bytes;
    line["shm_get_ratio"] = Round3(summary.shm_get.ratio());
    line["tcp_get_ratio"] = OrNull(RatioOf(summary.tcp_get));
    line["shm_get_gbps"] = Round3(summary.shm_get.median_gbps());
    line["tcp_get_gbps"] = OrNull(GbpsOf(summary.tcp_get));
    line["memcpy_gbps"] = Round3(summary.memcpy_gbps);
    line["tcp_raw_gbps"] = Round3(summary.tcp_raw_gbps);
    line["tcp_raw_per_object_gbps"] = Round3(summary.tcp_raw_per_object_gbps);
    line["shm_put_ratio"] = Round3(summary.shm_put.ratio());
    line["tcp_put_ratio"] = OrNull(RatioOf(summary.tcp_put));
    line["shm_put_gbps"] = Round3(summary.shm_put.median_gbps());
    line["tcp_put_gbps"] = OrNull(GbpsOf(summary.tcp_put));
    // Every size's four ratios: shm_get_ratio_64k, tcp_put_ratio_256k, ...
    for (const RemoteSizeResult& r : results) {
      const std::string label = SizeLabel(r.object_bytes);
      line["shm_get_ratio_" + label] = Round3(r.shm_get.ratio());
      line["shm_put_ratio_" + label] = Round3(r.shm_put.ratio());
      line["tcp_get_ratio_" + label] = OrNull(RatioOf(r.tcp_get));
      line["tcp_put_ratio_" + label] = OrNull(RatioOf(r.tcp_put));
    }
    line["tcp_status"] = tcp_status.empty() ? "OK" : tcp_status;
    // The targets of the summary's size (null: none for it).
    auto target_or_null = [](double target) {
      return target > 0 ? nlohmann::ordered_json(target) : nlohmann::ordered_json(nullptr);
    };
    line["shm_get_target"] = target_or_null(TargetRatio(true, false, summary.object_bytes));
    line["tcp_get_target"] = target_or_null(TargetRatio(false, false, summary.object_bytes));
    line["store_segment_bytes"] = segment_bytes;
    line["store_segment_hugetlb_raised"] = segment_pages != nullptr && segment_pages->raised();
    EmitJson(line);
  }
  PrintHuman(options.common.json ? std::cerr : std::cout, options, base, segment_bytes, results,
             summary, tcp_status);
  (options.common.json ? std::cerr : std::cout) << auth_lines << std::flush;
  return Status::Ok();
}

}  // namespace tierkv::bench
