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

constexpr uint64_t kMetadataPatternSeed = 0x6d65'7461ull;  // "meta"

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

namespace {

struct PolicyRun {
  double put_keys_per_s = 0;
  double exist_keys_per_s = 0;
};

// One fresh client with `policy`: puts every object (timed), then the exists loop (one rep).
Result<PolicyRun> RunWithPolicy(const MetadataBenchOptions& options, Config config,
                                const std::string& policy, const AlignedBuffer& src,
                                const std::vector<MetadataQuery>& queries, Progress& progress) {
  config.eviction_policy = policy;
  Result<std::unique_ptr<Client>> created = Client::Create(config);
  if (!created.ok()) return created.status();
  std::unique_ptr<Client> client = std::move(created).value();
  if (Status s = client->RegisterBuffer(src.data(), src.size()); !s.ok()) return s;
  FailureLog failures;
  double put_seconds = 0;
  std::vector<std::string> keys;
  std::vector<std::vector<void*>> ptrs;
  std::vector<std::vector<size_t>> sizes;
  ReplicateConfig put_config;
  for (size_t first = 0; first < options.objects && failures.empty(); first += kMetadataPutBatch) {
    const size_t end = std::min(options.objects, first + kMetadataPutBatch);
    keys.clear();
    ptrs.clear();
    sizes.clear();
    put_config.parent_keys.clear();
    for (size_t i = first; i < end; ++i) {
      keys.push_back(KvKey(i));
      ptrs.push_back({src.data() + i * options.object_bytes});
      sizes.push_back({options.object_bytes});
      if (options.parent_hints) put_config.parent_keys.push_back(i > 0 ? KvKey(i - 1) : "");
    }
    Stopwatch watch;
    std::vector<int> codes = client->BatchPutFromMultiBuffers(keys, ptrs, sizes, put_config);
    put_seconds += watch.Seconds();
    for (size_t k = 0; k < keys.size(); ++k) {
      if (k >= codes.size() || codes[k] < 0) failures.Add("put of " + keys[k] + " failed");
    }
  }
  if (!failures.empty()) return failures.ToStatus("metadata put (" + policy + ")");
  MetadataBenchOptions one = options;
  one.common.reps = 1;
  one.seconds = options.seconds / options.common.reps / 2;
  auto loop = RunExistsLoop(
      one, queries, [&](const std::vector<std::string>& k) { return client->BatchIsExist(k); },
      "batch_is_exist (" + policy + ")", progress);
  if (!loop.ok()) return loop.status();
  (void)client->UnregisterBuffer(src.data());
  PolicyRun run;
  run.put_keys_per_s = put_seconds > 0 ? static_cast<double>(options.objects) / put_seconds : 0;
  run.exist_keys_per_s = loop->rates.empty() ? 0 : loop->rates[0];
  return run;
}

Status RunPolicyComparison(const MetadataBenchOptions& options, const Config& config,
                           const AlignedBuffer& src, Progress& progress) {
  const std::vector<MetadataQuery> queries = BuildMetadataQueries(options);
  std::vector<double> lru_put, lru_exist, pol_put, pol_exist, put_ratio, exist_ratio;
  for (int rep = 0; rep < options.common.reps; ++rep) {
    PolicyRun runs[2];
    // Alternate which goes first, so drift over the run (other load, page cache) cancels out.
    for (int k = 0; k < 2; ++k) {
      const bool lru_turn = (k == 0) == (rep % 2 == 0);
      progress.Update("pair " + std::to_string(rep + 1) + "/" +
                      std::to_string(options.common.reps) + ": " +
                      (lru_turn ? std::string("lru") : options.compare_policy));
      Result<PolicyRun> r = RunWithPolicy(
          options, config, lru_turn ? "lru" : options.compare_policy, src, queries, progress);
      if (!r.ok()) return r.status();
      runs[lru_turn ? 0 : 1] = *r;
    }
    lru_put.push_back(runs[0].put_keys_per_s);
    lru_exist.push_back(runs[0].exist_keys_per_s);
    pol_put.push_back(runs[1].put_keys_per_s);
    pol_exist.push_back(runs[1].exist_keys_per_s);
    put_ratio.push_back(runs[1].put_keys_per_s / runs[0].put_keys_per_s);
    exist_ratio.push_back(runs[1].exist_keys_per_s / runs[0].exist_keys_per_s);
    if (options.common.json) {
      JsonLine()
          .Add("bench", "metadata")
          .Add("op", "policy_pair")
          .Add("pair", rep)
          .Add("policy", options.compare_policy)
          .Add("lru_put_keys_per_s", std::llround(runs[0].put_keys_per_s))
          .Add("policy_put_keys_per_s", std::llround(runs[1].put_keys_per_s))
          .Add("lru_exist_keys_per_s", std::llround(runs[0].exist_keys_per_s))
          .Add("policy_exist_keys_per_s", std::llround(runs[1].exist_keys_per_s))
          .Emit();
    }
  }
  progress.Done();
  const double pr = Median(put_ratio), er = Median(exist_ratio);
  if (options.common.json) {
    JsonLine()
        .Add("bench", "metadata")
        .Add("op", "policy_compare")
        .Add("policy", options.compare_policy)
        .Add("baseline", "lru")
        .Add("parent_hints", options.parent_hints)
        .Add("objects", options.objects)
        .Add("batch", options.batch)
        .Add("pairs", options.common.reps)
        .Add("lru_put_keys_per_s", std::llround(Median(lru_put)))
        .Add("policy_put_keys_per_s", std::llround(Median(pol_put)))
        .Add("lru_exist_keys_per_s", std::llround(Median(lru_exist)))
        .Add("policy_exist_keys_per_s", std::llround(Median(pol_exist)))
        .Add("put_ratio", std::round(pr * 1000) / 1000)
        .Add("exist_ratio", std::round(er * 1000) / 1000)
        .Add("pair_put_ratios", put_ratio)
        .Add("pair_exist_ratios", exist_ratio)
        .Add("target_ratio", kPolicyCostRatioTarget)
        .Emit();
  }
  std::ostream& out = options.common.json ? std::cerr : std::cout;
  char line[320];
  std::snprintf(line, sizeof(line),
                "tierkv bench metadata: eviction policy %s against lru, %d paired runs, %zu "
                "objects%s, batch %zu\n",
                options.compare_policy.c_str(), options.common.reps, options.objects,
                options.parent_hints ? " with parent hints" : "", options.batch);
  out << line;
  std::snprintf(line, sizeof(line),
                "  put:            lru %12.0f  %s %12.0f keys/s  ratio %.3f (target >= %.2f: %s)\n",
                Median(lru_put), options.compare_policy.c_str(), Median(pol_put), pr,
                kPolicyCostRatioTarget, pr >= kPolicyCostRatioTarget ? "PASS" : "FAIL");
  out << line;
  std::snprintf(line, sizeof(line),
                "  batch_is_exist: lru %12.0f  %s %12.0f keys/s  ratio %.3f (target >= %.2f: %s)\n",
                Median(lru_exist), options.compare_policy.c_str(), Median(pol_exist), er,
                kPolicyCostRatioTarget, er >= kPolicyCostRatioTarget ? "PASS" : "FAIL");
  out << line << std::flush;
  return Status::Ok();
}

}  // namespace

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
  FillPattern(src->data(), src->size(), kMetadataPatternSeed);

  if (!options.compare_policy.empty()) return RunPolicyComparison(options, config, *src, progress);

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
  for (size_t first = 0; first < options.objects && failures.empty(); first += kMetadataPutBatch) {
    const size_t end = std::min(options.objects, first + kMetadataPutBatch);
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
        .Add("batch", kMetadataPutBatch)
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
  std::snprintf(line, sizeof(line), "  put (batch %zu):        %12.0f keys/s\n", kMetadataPutBatch,
                put_keys_per_s);
  out << line;
  std::snprintf(line, sizeof(line),
                "  batch_is_exist:         %12.0f keys/s (target >= %.0f: %s)\n", keys_per_s,
                kKeysPerSecondTarget, keys_per_s >= kKeysPerSecondTarget ? "PASS" : "FAIL");
  out << line << std::flush;
  return Status::Ok();
}

}  // namespace tierkv::bench
