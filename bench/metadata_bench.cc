#include "metadata_bench.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tierkv/client.h"
#include "tierkv/config.h"

namespace tierkv::bench {
namespace {

constexpr uint64_t kPatternSeed = 0x6d65'7461ull;  // "meta"
constexpr size_t kPutBatch = 1024;

std::string KvKey(uint64_t id) { return MetadataKey(id); }
using QueryBatch = MetadataQuery;

Status ValidateOptions(const MetadataBenchOptions& o) {
  auto bad = [](std::string m) { return Status(ErrorCode::INVALID_PARAMS, std::move(m)); };
  if (o.common.reps < 1) return bad("--reps must be >= 1");
  if (o.batch < 1) return bad("--batch must be >= 1");
  if (o.objects < 1) return bad("--objects must be >= 1");
  if (o.object_bytes < 1) return bad("--object-size must be >= 1");
  if (!(o.hit_ratio >= 0.0 && o.hit_ratio <= 1.0)) return bad("--hit-ratio must be in [0, 1]");
  if (o.batches == 0 && !(o.seconds > 0.0)) return bad("--seconds must be > 0");
  return Status::Ok();
}

}  // namespace

std::string MetadataKey(uint64_t id) {
  return "bench-model@tp_rank:" + std::to_string(id % 4) + "@pcp0@dcp0@pp_rank:0@group:0@" +
         HexHash64(id);
}

std::vector<MetadataQuery> BuildMetadataQueries(const MetadataBenchOptions& options) {
  const size_t hits = static_cast<size_t>(std::llround(options.batch * options.hit_ratio));
  const size_t count = hits == 0 ? 16 : std::max<size_t>(1, (options.objects + hits - 1) / hits);
  std::mt19937_64 rng(42);
  std::vector<QueryBatch> batches(count);
  uint64_t next_hit = 0;
  uint64_t next_miss = options.objects;  // ids >= objects were never put
  for (QueryBatch& batch : batches) {
    std::vector<std::pair<uint64_t, int>> ids;
    for (size_t k = 0; k < options.batch; ++k) {
      if (k < hits) {
        ids.emplace_back(next_hit++ % options.objects, 1);
      } else {
        ids.emplace_back(next_miss++, 0);
      }
    }
    std::shuffle(ids.begin(), ids.end(), rng);
    for (const auto& [id, expected] : ids) {
      batch.keys.push_back(KvKey(id));
      batch.expected.push_back(expected);
    }
  }
  return batches;
}

Result<ExistsLoopResult> RunExistsLoop(
    const MetadataBenchOptions& options, const std::vector<MetadataQuery>& queries,
    const std::function<std::vector<int>(const std::vector<std::string>&)>& exists,
    const std::string& what, Progress& progress) {
  const double rep_budget = options.seconds / options.common.reps;
  ExistsLoopResult out;
  FailureLog failures;
  size_t cursor = 0;
  for (int rep = 0; rep < options.common.reps; ++rep) {
    progress.Update(what + ", rep " + std::to_string(rep + 1) + "/" +
                    std::to_string(options.common.reps));
    size_t done = 0;
    double busy = 0;
    while (options.batches > 0 ? done < options.batches : busy < rep_budget) {
      const MetadataQuery& query = queries[cursor++ % queries.size()];
      Stopwatch watch;
      std::vector<int> answers = exists(query.keys);
      busy += watch.Seconds();
      ++done;
      if (answers.size() != query.keys.size()) {
        failures.Add(what + " returned " + std::to_string(answers.size()) + " results for " +
                     std::to_string(query.keys.size()) + " keys");
        break;
      }
      for (size_t k = 0; k < answers.size(); ++k) {
        if (answers[k] != query.expected[k]) {
          failures.Add(what + " of " + query.keys[k] + " gave " +
                       (answers[k] < 0 ? CodeString(answers[k]) : std::to_string(answers[k])) +
                       ", expected " + std::to_string(query.expected[k]));
        }
      }
      if (!failures.empty()) break;
    }
    if (!failures.empty()) break;
    out.rates.push_back(busy > 0 ? static_cast<double>(done * options.batch) / busy : 0);
    out.batches += done;
    out.seconds += busy;
  }
  progress.Done();
  if (!failures.empty()) return failures.ToStatus("metadata " + what);
  return out;
}

Status RunMetadataBench(const MetadataBenchOptions& options) {
  if (Status status = ValidateOptions(options); !status.ok()) return status;
  if (options.remote) return RunRemoteMetadataBench(options);

  Result<Config> loaded = LoadConfig(options.common.config_path);
  if (!loaded.ok()) return loaded.status();
  Config config = std::move(loaded).value();
  if (config.mode != Mode::kEmbedded || config.global_segment_size == 0) {
    return Status(ErrorCode::INVALID_CONFIG,
                  "bench metadata needs mode \"embedded\" with a global_segment_size > 0");
  }
  // Room for every object even if the allocator rounds each up to 4 KiB.
  const uint64_t data_bytes = options.objects * options.object_bytes;
  const uint64_t rounded = options.objects * ((options.object_bytes + 4095) / 4096 * 4096);
  config.global_segment_size = std::max(config.global_segment_size, 2 * rounded + 64 * kMiB);

  Progress progress("metadata", options.common.progress);
  Result<AlignedBuffer> src = AlignedBuffer::Allocate(data_bytes);
  if (!src.ok()) return src.status();
  FillPattern(src->data(), src->size(), kPatternSeed);

  progress.Update("starting the embedded client");
  Result<std::unique_ptr<Client>> created = Client::Create(config);
  if (!created.ok()) return created.status();
  std::unique_ptr<Client> client = std::move(created).value();
  if (Status s = client->RegisterBuffer(src->data(), src->size()); !s.ok()) return s;

  // Put every object, in batches, timing the calls only.
  progress.Update("putting " + std::to_string(options.objects) + " objects of " +
                  FormatBytes(options.object_bytes));
  FailureLog failures;
  double put_seconds = 0;
  for (size_t first = 0; first < options.objects && failures.empty(); first += kPutBatch) {
    const size_t end = std::min(options.objects, first + kPutBatch);
    std::vector<std::string> keys;
    std::vector<std::vector<void*>> ptrs;
    std::vector<std::vector<size_t>> sizes;
    for (size_t i = first; i < end; ++i) {
      keys.push_back(KvKey(i));
      ptrs.push_back({src->data() + i * options.object_bytes});
      sizes.push_back({options.object_bytes});
    }
    Stopwatch watch;
    std::vector<int> codes = client->BatchPutFromMultiBuffers(keys, ptrs, sizes);
    put_seconds += watch.Seconds();
    if (codes.size() != keys.size()) {
      failures.Add("batch put returned " + std::to_string(codes.size()) + " results for " +
                   std::to_string(keys.size()) + " keys");
      continue;
    }
    for (size_t k = 0; k < keys.size(); ++k) {
      if (codes[k] < 0) failures.Add("put of " + keys[k] + ": " + CodeString(codes[k]));
    }
  }
  if (!failures.empty()) return failures.ToStatus("metadata put");
  const double put_keys_per_s = put_seconds > 0 ? options.objects / put_seconds : 0;

  progress.Update("building query batches");
  const std::vector<QueryBatch> queries = BuildMetadataQueries(options);

  // Timed BatchIsExist calls; each answer is checked between calls.
  auto loop = RunExistsLoop(
      options, queries,
      [&](const std::vector<std::string>& keys) { return client->BatchIsExist(keys); },
      "batch_is_exist", progress);
  if (!loop.ok()) return loop.status();
  const std::vector<double>& rates = loop->rates;
  const size_t total_batches = loop->batches;
  const double total_seconds = loop->seconds;
  (void)client->UnregisterBuffer(src->data());
  client.reset();

  const double keys_per_s = Median(rates);
  const size_t hits = static_cast<size_t>(std::llround(options.batch * options.hit_ratio));
  const double hit_ratio = static_cast<double>(hits) / static_cast<double>(options.batch);
  if (options.common.json) {
    JsonLine()
        .Add("bench", "metadata")
        .Add("op", "put")
        .Add("objects", options.objects)
        .Add("object_bytes", options.object_bytes)
        .Add("batch", kPutBatch)
        .Add("keys_per_s", std::llround(put_keys_per_s))
        .Emit();
    JsonLine()
        .Add("bench", "metadata")
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
        .Add("keys_per_s", std::llround(keys_per_s))
        .Add("batch", options.batch)
        .Add("objects", options.objects)
        .Add("hit_ratio", hit_ratio)
        .Add("put_keys_per_s", std::llround(put_keys_per_s))
        .Add("target_keys_per_s", static_cast<int64_t>(kKeysPerSecondTarget))
        .Emit();
  }

  std::ostream& out = options.common.json ? std::cerr : std::cout;
  char line[256];
  std::snprintf(line, sizeof(line),
                "tierkv bench metadata: %zu objects of %s, batch %zu, %.0f%% hits, median of %d "
                "rep%s (%zu batches in %.2f s)\n",
                options.objects, FormatBytes(options.object_bytes).c_str(), options.batch,
                hit_ratio * 100, options.common.reps, options.common.reps == 1 ? "" : "s",
                total_batches, total_seconds);
  out << line;
  std::snprintf(line, sizeof(line), "  put (batch %zu):        %12.0f keys/s\n", kPutBatch,
                put_keys_per_s);
  out << line;
  std::snprintf(line, sizeof(line),
                "  batch_is_exist:         %12.0f keys/s (target >= %.0f: %s)\n", keys_per_s,
                kKeysPerSecondTarget, keys_per_s >= kKeysPerSecondTarget ? "PASS" : "FAIL");
  out << line << std::flush;
  return Status::Ok();
}

}  // namespace tierkv::bench
