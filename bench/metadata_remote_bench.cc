// `tierkv bench metadata --remote`: the metadata bench over gRPC against a `tierkv master`
// child process (this executable, `master --port 0 --host 127.0.0.1`).
//
// Same objects and query batches as the local mode (metadata_bench.cc). The objects are
// metadata only — the master never holds bytes — so the fill is PutStart + PutEnd on a segment
// this process mounts (no memory behind it). The timed figure is RemoteMaster::Exists, one
// RPC per batch; every answer is checked outside the timed calls.
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/cluster_token.h"
#include "metadata_bench.h"
#include "rpc/master_process.h"
#include "rpc/remote_master.h"

namespace tierkv::bench {
namespace {

// A `tierkv master` child filled with the bench's objects, and the RemoteMaster that filled it.
struct FilledMaster {
  std::unique_ptr<MasterProcess> process;
  std::unique_ptr<RemoteMaster> master;
  SegmentId segment = 0;
  double put_keys_per_s = 0;

  // Unregisters (unmounts the segment), then SIGTERM and a clean exit.
  Status Stop() {
    (void)master->UnmountSegment(segment);
    master.reset();
    const std::optional<int> exit_status = process->Stop();
    if (!exit_status || !WIFEXITED(*exit_status) || WEXITSTATUS(*exit_status) != 0) {
      return Status(ErrorCode::INTERNAL_ERROR, "tierkv master did not exit cleanly on SIGTERM");
    }
    return Status::Ok();
  }
};

// `token_file` non-empty: the master is started with it and every call carries it.
Result<FilledMaster> StartFilledMaster(const MetadataBenchOptions& options,
                                       const std::string& token_file, Progress& progress) {
  const std::string self = SelfExecutable();
  if (self.empty()) return Status(ErrorCode::INTERNAL_ERROR, "cannot read /proc/self/exe");
  progress.Update("starting tierkv master");
  MasterProcessOptions child_options;
  child_options.binary = self;
  // Metrics served (on a free port) as by a production master: every RPC is timed.
  child_options.args = {"--port", "0", "--host", "127.0.0.1", "--metrics-port", "0"};
  if (!token_file.empty()) {
    child_options.args.insert(child_options.args.end(), {"--token-file", token_file});
  }
  if (std::getenv("TIERKV_LOG_LEVEL") == nullptr)
    child_options.env = {{"TIERKV_LOG_LEVEL", "error"}};
  Result<std::unique_ptr<MasterProcess>> child = MasterProcess::Start(child_options);
  if (!child.ok()) return child.status();
  FilledMaster out;
  out.process = std::move(child).value();

  RemoteMasterOptions remote_options;
  if (!token_file.empty()) {
    auto tokens = TokenSet::Load(token_file);
    if (!tokens.ok()) return tokens.status();
    remote_options.security.tokens = std::move(tokens).value();
  }
  Result<std::unique_ptr<RemoteMaster>> connected =
      RemoteMaster::Connect(out.process->address(), Millis(5000), remote_options);
  if (!connected.ok()) return connected.status();
  out.master = std::move(connected).value();
  RemoteMaster* master = out.master.get();

  // A segment with room for every object twice (metadata only: nothing is allocated here).
  const uint64_t rounded = (options.object_bytes + 63) / 64 * 64;
  const uint64_t capacity = 2 * options.objects * rounded + 64 * kMiB;
  Result<SegmentId> segment = master->MountSegment("bench-remote-segment", capacity);
  if (!segment.ok()) return segment.status();
  out.segment = *segment;

  progress.Update("putting " + std::to_string(options.objects) + " objects (metadata)");
  FailureLog failures;
  double put_seconds = 0;
  for (size_t first = 0; first < options.objects && failures.empty(); first += kMetadataPutBatch) {
    const size_t end = std::min(options.objects, first + kMetadataPutBatch);
    std::vector<std::string> keys;
    std::vector<uint64_t> sizes;
    std::vector<uint64_t> checksums;
    for (size_t i = first; i < end; ++i) {
      keys.push_back(MetadataKey(i));
      sizes.push_back(options.object_bytes);
      checksums.push_back(Mix64(i));
    }
    Stopwatch watch;
    std::vector<Result<PutStartResult>> started = master->PutStart(keys, sizes, ReplicateConfig{});
    std::vector<uint64_t> put_ids;
    for (size_t k = 0; k < started.size(); ++k) {
      if (!started[k].ok()) {
        failures.Add("PutStart of " + keys[k] + ": " + started[k].status().ToString());
        put_ids.push_back(0);
      } else {
        put_ids.push_back(started[k]->put_id);
      }
    }
    if (!failures.empty()) break;
    std::vector<Status> ended = master->PutEnd(keys, put_ids, checksums);
    put_seconds += watch.Seconds();
    for (size_t k = 0; k < ended.size(); ++k) {
      if (!ended[k].ok()) failures.Add("PutEnd of " + keys[k] + ": " + ended[k].ToString());
    }
  }
  if (!failures.empty()) return failures.ToStatus("remote metadata put");
  out.put_keys_per_s = put_seconds > 0 ? options.objects / put_seconds : 0;
  return out;
}

// `--auth`: a master without a token and one with a token, filled alike; each rep times
// Exists on both (the order alternating), and the ratio with / without is the figure.
Status RunRemoteMetadataAuthBench(const MetadataBenchOptions& options) {
  Progress progress("metadata", options.common.progress);
  Result<std::unique_ptr<TempTokenFile>> token_file_made = TempTokenFile::Create();
  if (!token_file_made.ok()) return token_file_made.status();
  const std::string token_file = (*token_file_made)->path();
  Result<FilledMaster> plain = StartFilledMaster(options, "", progress);
  if (!plain.ok()) return plain.status();
  Result<FilledMaster> token = StartFilledMaster(options, token_file, progress);
  if (!token.ok()) return token.status();
  const std::vector<MetadataQuery> queries = BuildMetadataQueries(options);
  MetadataBenchOptions one = options;
  one.common.reps = 1;
  one.seconds = options.seconds / std::max(1, options.common.reps);
  std::vector<double> plain_rates, token_rates, ratios;
  for (int rep = 0; rep < options.common.reps; ++rep) {
    double rate[2] = {0, 0};
    for (int k = 0; k < 2; ++k) {
      const int which = (rep + k) % 2;  // 0 plain, 1 token; the order alternates
      RemoteMaster* master = which == 0 ? plain->master.get() : token->master.get();
      auto loop = RunExistsLoop(
          one, queries, [&](const std::vector<std::string>& keys) { return master->Exists(keys); },
          which == 0 ? "Exists over gRPC" : "Exists over gRPC with the token", progress);
      if (!loop.ok()) return loop.status();
      rate[which] = loop->rates.at(0);
    }
    plain_rates.push_back(rate[0]);
    token_rates.push_back(rate[1]);
    ratios.push_back(rate[0] > 0 ? rate[1] / rate[0] : 0);
  }
  if (Status st = plain->Stop(); !st.ok()) return st;
  if (Status st = token->Stop(); !st.ok()) return st;
  const double ratio = Median(ratios);
  const double low = *std::min_element(ratios.begin(), ratios.end());
  const double high = *std::max_element(ratios.begin(), ratios.end());
  const bool pass = ratio >= kAuthControlPlaneRatioTarget;
  if (options.common.json) {
    JsonLine()
        .Add("bench", "metadata")
        .Add("mode", "remote-auth")
        .Add("objects", options.objects)
        .Add("batch", options.batch)
        .Add("reps", options.common.reps)
        .Add("keys_per_s_without_token", std::llround(Median(plain_rates)))
        .Add("keys_per_s_with_token", std::llround(Median(token_rates)))
        .Add("ratio", std::round(ratio * 1000) / 1000)
        .Add("ratio_min", std::round(low * 1000) / 1000)
        .Add("ratio_max", std::round(high * 1000) / 1000)
        .Add("target_ratio", kAuthControlPlaneRatioTarget)
        .Add("pass", pass)
        .Emit();
  }
  std::ostream& out = options.common.json ? std::cerr : std::cout;
  char line[320];
  std::snprintf(line, sizeof(line),
                "tierkv bench metadata --remote --auth: batch_is_exist over gRPC (127.0.0.1), "
                "%zu objects, batch %zu, %d paired reps (order alternating)\n"
                "  without a token: %12.0f keys/s (median)\n"
                "  with the token:  %12.0f keys/s (median)\n"
                "  ratio with/without: %.3f (min %.3f, max %.3f; target >= %.2f: %s)\n",
                options.objects, options.batch, options.common.reps, Median(plain_rates),
                Median(token_rates), ratio, low, high, kAuthControlPlaneRatioTarget,
                pass ? "PASS" : "FAIL");
  out << line << std::flush;
  return Status::Ok();
}

}  // namespace

Status RunRemoteMetadataBench(const MetadataBenchOptions& options) {
  if (options.auth) return RunRemoteMetadataAuthBench(options);
  Progress progress("metadata", options.common.progress);
  Result<FilledMaster> filled = StartFilledMaster(options, "", progress);
  if (!filled.ok()) return filled.status();
  RemoteMaster* master = filled->master.get();
  const double put_keys_per_s = filled->put_keys_per_s;

  progress.Update("building query batches");
  const std::vector<MetadataQuery> queries = BuildMetadataQueries(options);

  auto loop = RunExistsLoop(
      options, queries, [&](const std::vector<std::string>& keys) { return master->Exists(keys); },
      "Exists over gRPC", progress);
  if (!loop.ok()) return loop.status();
  const std::vector<double>& rates = loop->rates;
  const size_t total_batches = loop->batches;
  const double total_seconds = loop->seconds;

  if (Status st = filled->Stop(); !st.ok()) return st;

  const double keys_per_s = Median(rates);
  const size_t hits = static_cast<size_t>(std::llround(options.batch * options.hit_ratio));
  const double hit_ratio = static_cast<double>(hits) / static_cast<double>(options.batch);
  const bool pass = keys_per_s >= kRemoteKeysPerSecondTarget;
  if (options.common.json) {
    JsonLine()
        .Add("bench", "metadata")
        .Add("mode", "remote")
        .Add("op", "put")
        .Add("objects", options.objects)
        .Add("object_bytes", options.object_bytes)
        .Add("batch", kMetadataPutBatch)
        .Add("keys_per_s", std::llround(put_keys_per_s))
        .Emit();
    JsonLine()
        .Add("bench", "metadata")
        .Add("mode", "remote")
        .Add("op", "is_exist")
        .Add("objects", options.objects)
        .Add("batch", options.batch)
        .Add("hit_ratio", hit_ratio)
        .Add("reps", options.common.reps)
        .Add("batches", total_batches)
        .Add("seconds", std::round(total_seconds * 1000) / 1000)
        .Add("keys_per_s", std::llround(keys_per_s))
        .Emit();
    JsonLine()
        .Add("bench", "metadata")
        .Add("mode", "remote")
        .Add("keys_per_s", std::llround(keys_per_s))
        .Add("batch", options.batch)
        .Add("objects", options.objects)
        .Add("hit_ratio", hit_ratio)
        .Add("put_keys_per_s", std::llround(put_keys_per_s))
        .Add("target_keys_per_s", static_cast<int64_t>(kRemoteKeysPerSecondTarget))
        .Add("pass", pass)
        .Emit();
  }

  std::ostream& out = options.common.json ? std::cerr : std::cout;
  char line[256];
  std::snprintf(line, sizeof(line),
                "tierkv bench metadata --remote: %zu objects of %s over gRPC (127.0.0.1), batch "
                "%zu, %.0f%% hits, median of %d rep%s (%zu batches in %.2f s)\n",
                options.objects, FormatBytes(options.object_bytes).c_str(), options.batch,
                hit_ratio * 100, options.common.reps, options.common.reps == 1 ? "" : "s",
                total_batches, total_seconds);
  out << line;
  std::snprintf(line, sizeof(line), "  put (PutStart+PutEnd, batch %zu): %12.0f keys/s\n",
                kMetadataPutBatch, put_keys_per_s);
  out << line;
  std::snprintf(line, sizeof(line),
                "  batch_is_exist:                    %12.0f keys/s (target >= %.0f: %s)\n",
                keys_per_s, kRemoteKeysPerSecondTarget, pass ? "PASS" : "FAIL");
  out << line << std::flush;
  return Status::Ok();
}

}  // namespace tierkv::bench
