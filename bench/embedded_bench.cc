#include "embedded_bench.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "tierkv/client.h"
#include "tierkv/config.h"
#include "workload.h"

namespace tierkv::bench {
namespace {

constexpr uint64_t kEmbeddedPatternSeed = 0x7469'6572'6b76ull;  // "tierkv"

struct EmbeddedSizeResult {
  uint64_t object_bytes = 0;
  size_t objects = 0;
  double put_gbps = 0, get_gbps = 0, memcpy_gbps = 0;
  double put_ratio() const { return memcpy_gbps > 0 ? put_gbps / memcpy_gbps : 0; }
  double get_ratio() const { return memcpy_gbps > 0 ? get_gbps / memcpy_gbps : 0; }
};

struct EmbeddedRepResult {
  double put_gbps = 0, get_gbps = 0, memcpy_gbps = 0;
};

// One rep of one object size: put, get and the memcpy baseline (each checked), then
// RemoveAll(force), which empties the store for the next rep (gets leave read leases behind).
Result<EmbeddedRepResult> RunRep(Client& client, TransferWorkload& workload, int rep, int reps,
                                 Progress& progress) {
  auto report = [&](const char* phase) {
    if (!progress.enabled()) return;
    progress.Update(FormatBytes(workload.object_bytes()) + " x " +
                    std::to_string(workload.objects()) + ", rep " + std::to_string(rep + 1) +
                    (reps > 0 ? "/" + std::to_string(reps) : std::string()) + ": " + phase);
  };
  EmbeddedRepResult r;
  report("put");
  Result<double> put = workload.Put(client);
  if (!put.ok()) return put.status();
  r.put_gbps = Gbps(workload.total_bytes(), *put);
  report("get");
  Result<double> get = workload.Get(client, rep);
  if (!get.ok()) return get.status();
  r.get_gbps = Gbps(workload.total_bytes(), *get);
  // Baseline: the same bytes, src -> dst, same pieces, same order.
  report("memcpy");
  Result<double> copy = workload.Memcpy(rep);
  if (!copy.ok()) return copy.status();
  r.memcpy_gbps = Gbps(workload.total_bytes(), *copy);
  report("remove");
  if (Status s = workload.RemoveAll(client); !s.ok()) return s;
  return r;
}

// Every rep of one object size; the medians.
Result<EmbeddedSizeResult> RunSize(Client& client, TransferWorkload& workload, int reps,
                                   Progress& progress) {
  std::vector<double> put_gbps, get_gbps, memcpy_gbps;
  for (int rep = 0; rep < reps; ++rep) {
    Result<EmbeddedRepResult> r = RunRep(client, workload, rep, reps, progress);
    if (!r.ok()) return r.status();
    put_gbps.push_back(r->put_gbps);
    get_gbps.push_back(r->get_gbps);
    memcpy_gbps.push_back(r->memcpy_gbps);
  }
  EmbeddedSizeResult result;
  result.object_bytes = workload.object_bytes();
  result.objects = workload.objects();
  result.put_gbps = Median(put_gbps);
  result.get_gbps = Median(get_gbps);
  result.memcpy_gbps = Median(memcpy_gbps);
  return result;
}

// --paired: one rep per line read on stdin, each rep's figures as a JSON line on stdout right
// away, until end of input. Another bench (bench/python_bench.py) drives it to interleave its
// own reps with these within milliseconds, both stores built once: a baseline measured seconds
// apart, in a fresh process, moves with the machine's memory bandwidth more than the binding's
// cost it is there to show.
Status RunPaired(Client& client, TransferWorkload& workload, Progress& progress) {
  JsonLine().Add("bench", "embedded").Add("op", "ready").Emit();
  std::string line;
  for (int rep = 0; std::getline(std::cin, line); ++rep) {
    Result<EmbeddedRepResult> r = RunRep(client, workload, rep, 0, progress);
    if (!r.ok()) return r.status();
    JsonLine()
        .Add("bench", "embedded")
        .Add("op", "rep")
        .Add("rep", rep)
        .Add("object_bytes", workload.object_bytes())
        .Add("put_gbps", Round3(r->put_gbps))
        .Add("get_gbps", Round3(r->get_gbps))
        .Add("memcpy_gbps", Round3(r->memcpy_gbps))
        .Emit();
  }
  return Status::Ok();
}

void PrintHuman(std::ostream& out, const EmbeddedBenchOptions& options, const Config& config,
                const std::vector<EmbeddedSizeResult>& results, const EmbeddedSizeResult& summary) {
  char line[256];
  out << "tierkv bench embedded: " << FormatBytes(options.working_set_bytes)
      << " working set per size, batch " << options.batch << ", " << options.pieces
      << " buffers per object, median of " << options.common.reps << " rep"
      << (options.common.reps == 1 ? "" : "s") << ", checksum verify "
      << (config.verify_checksum ? "on" : "off") << ", segment "
      << FormatBytes(config.global_segment_size) << "\n";
  std::snprintf(line, sizeof(line), "  %-4s %10s %8s %9s %12s %7s\n", "op", "object", "objects",
                "GB/s", "memcpy GB/s", "ratio");
  out << line;
  for (const char* op : {"put", "get"}) {
    for (const EmbeddedSizeResult& r : results) {
      const bool put = op[0] == 'p';
      std::snprintf(line, sizeof(line), "  %-4s %10s %8zu %9.2f %12.2f %7.2f\n", op,
                    FormatBytes(r.object_bytes).c_str(), r.objects, put ? r.put_gbps : r.get_gbps,
                    r.memcpy_gbps, put ? r.put_ratio() : r.get_ratio());
      out << line;
    }
  }
  auto verdict = [](double ratio, double target) { return ratio >= target ? "PASS" : "FAIL"; };
  std::snprintf(line, sizeof(line),
                "%s objects: get %.2f GB/s = %.2f x memcpy (target >= %.2f: %s), "
                "put %.2f GB/s = %.2f x memcpy (target >= %.2f: %s)\n",
                FormatBytes(summary.object_bytes).c_str(), summary.get_gbps, summary.get_ratio(),
                kGetRatioTarget, verdict(summary.get_ratio(), kGetRatioTarget), summary.put_gbps,
                summary.put_ratio(), kPutRatioTarget,
                verdict(summary.put_ratio(), kPutRatioTarget));
  out << line << std::flush;
}

}  // namespace

Status RunEmbeddedBench(const EmbeddedBenchOptions& options) {
  if (Status status = ValidateTransferOptions(options.common, options.working_set_bytes,
                                              options.object_sizes, options.batch, options.pieces);
      !status.ok()) {
    return status;
  }
  if (options.paired && (!options.common.json || options.object_sizes.size() != 1)) {
    return Status(ErrorCode::INVALID_PARAMS, "--paired needs --json and exactly one --sizes");
  }

  Result<Config> loaded = LoadConfig(options.common.config_path);
  if (!loaded.ok()) return loaded.status();
  Config config = std::move(loaded).value();
  if (config.mode != Mode::kEmbedded || config.global_segment_size == 0) {
    return Status(ErrorCode::INVALID_CONFIG,
                  "bench embedded needs mode \"embedded\" with a global_segment_size > 0");
  }

  // Size everything for the largest per-size working set. Nothing may be evicted: the segment
  // holds 2x the working set plus a margin, far below the eviction watermark.
  const uint64_t largest = LargestWorkingSet(options.working_set_bytes, options.object_sizes);
  config.global_segment_size = std::max(config.global_segment_size, SegmentBytesFor(largest));

  Progress progress("embedded", options.common.progress);
  Result<TransferBuffers> buffers =
      AllocateTransferBuffers(largest, kEmbeddedPatternSeed, progress);
  if (!buffers.ok()) return buffers.status();
  AlignedBuffer* src = &buffers->src;
  AlignedBuffer* dst = &buffers->dst;

  progress.Update("starting the embedded client (segment " +
                  FormatBytes(config.global_segment_size) + ")");
  Result<std::unique_ptr<Client>> created = Client::Create(config);
  if (!created.ok()) return created.status();
  std::unique_ptr<Client> client = std::move(created).value();
  if (Status s = client->RegisterBuffer(src->data(), src->size()); !s.ok()) return s;
  if (Status s = client->RegisterBuffer(dst->data(), dst->size()); !s.ok()) return s;

  if (options.paired) {
    TransferWorkload workload("embedded", options.object_sizes.front(),
                              ObjectsFor(options.working_set_bytes, options.object_sizes.front()),
                              options.batch, options.pieces, *src, *dst);
    Status status = RunPaired(*client, workload, progress);
    progress.Done();
    return status;
  }

  std::vector<EmbeddedSizeResult> results;
  for (uint64_t size : options.object_sizes) {
    TransferWorkload workload("embedded", size, ObjectsFor(options.working_set_bytes, size),
                              options.batch, options.pieces, *src, *dst);
    Result<EmbeddedSizeResult> result = RunSize(*client, workload, options.common.reps, progress);
    if (!result.ok()) {
      progress.Done();
      return result.status();
    }
    results.push_back(*result);
    if (options.common.json) {
      for (const char* op : {"put", "get"}) {
        const bool put = op[0] == 'p';
        const EmbeddedSizeResult& r = *result;
        JsonLine()
            .Add("bench", "embedded")
            .Add("op", op)
            .Add("object_bytes", r.object_bytes)
            .Add("batch", options.batch)
            .Add("objects", r.objects)
            .Add("pieces", options.pieces)
            .Add("reps", options.common.reps)
            .Add("checksum", config.verify_checksum)
            .Add("gbps", Round3(put ? r.put_gbps : r.get_gbps))
            .Add("memcpy_gbps", Round3(r.memcpy_gbps))
            .Add("ratio", Round3(put ? r.put_ratio() : r.get_ratio()))
            .Emit();
      }
    }
  }
  (void)client->UnregisterBuffer(src->data());
  (void)client->UnregisterBuffer(dst->data());
  client.reset();
  progress.Done();

  // The summary is for 2 MiB objects, or the first size when 2 MiB was not run.
  EmbeddedSizeResult summary = results.front();
  for (const EmbeddedSizeResult& r : results) {
    if (r.object_bytes == 2 * kMiB) summary = r;
  }
  if (options.common.json) {
    JsonLine()
        .Add("bench", "embedded")
        .Add("object_bytes", summary.object_bytes)
        .Add("get_gbps", Round3(summary.get_gbps))
        .Add("put_gbps", Round3(summary.put_gbps))
        .Add("memcpy_gbps", Round3(summary.memcpy_gbps))
        .Add("get_ratio", Round3(summary.get_ratio()))
        .Add("put_ratio", Round3(summary.put_ratio()))
        .Add("get_target", kGetRatioTarget)
        .Add("put_target", kPutRatioTarget)
        .Emit();
  }
  PrintHuman(options.common.json ? std::cerr : std::cout, options, config, results, summary);
  return Status::Ok();
}

}  // namespace tierkv::bench
