#include "embedded_bench.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "tierkv/client.h"
#include "tierkv/config.h"

namespace tierkv::bench {
namespace {

constexpr uint64_t kPatternSeed = 0x7469'6572'6b76ull;  // "tierkv"
constexpr uint8_t kPoison = 0xA5;
constexpr size_t kSpotBytes = 64;               // checked at each end of every object
constexpr uint64_t kSegmentMargin = 64 * kMiB;  // on top of 2x the working set

double Round3(double value) { return std::round(value * 1000.0) / 1000.0; }

// One batch call's arguments, built once per object size, outside timing.
struct Batch {
  std::vector<std::string> keys;
  std::vector<size_t> objects;  // object index of each key
  std::vector<std::vector<void*>> src_ptrs;
  std::vector<std::vector<void*>> dst_ptrs;
  std::vector<std::vector<size_t>> piece_sizes;
};

struct SizeResult {
  uint64_t object_bytes = 0;
  size_t objects = 0;
  double put_gbps = 0, get_gbps = 0, memcpy_gbps = 0;
  double put_ratio() const { return memcpy_gbps > 0 ? put_gbps / memcpy_gbps : 0; }
  double get_ratio() const { return memcpy_gbps > 0 ? get_gbps / memcpy_gbps : 0; }
};

// Splits `size` into `pieces` parts; the last takes the remainder.
std::vector<size_t> PieceSizes(uint64_t size, size_t pieces) {
  std::vector<size_t> out(pieces, size / pieces);
  out.back() += size % pieces;
  return out;
}

std::string ObjectKey(uint64_t object_bytes, size_t index) {
  return "bench-embedded@size:" + std::to_string(object_bytes) + "@" + HexHash64(index);
}

Status ValidateOptions(const EmbeddedBenchOptions& o) {
  auto bad = [](std::string m) { return Status(ErrorCode::INVALID_PARAMS, std::move(m)); };
  if (o.common.reps < 1) return bad("--reps must be >= 1");
  if (o.batch < 1) return bad("--batch must be >= 1");
  if (o.pieces < 1) return bad("pieces must be >= 1");
  if (o.object_sizes.empty()) return bad("--sizes is empty");
  for (uint64_t size : o.object_sizes) {
    if (size < o.pieces || size < 2 * kSpotBytes) {
      return bad("object size " + std::to_string(size) + " is too small (minimum " +
                 std::to_string(std::max<uint64_t>(o.pieces, 2 * kSpotBytes)) + " bytes)");
    }
    if (size > (uint64_t{1} << 31) - 1) {
      return bad("object size " + FormatBytes(size) + " is above 2 GiB - 1");
    }
  }
  if (o.working_set_bytes == 0) return bad("--working-set must be > 0");
  return Status::Ok();
}

// Runs every rep for one object size. `src` holds the pattern; `dst` is
// overwritten by gets and by the memcpy baseline.
class SizeRun {
 public:
  SizeRun(Client* client, const EmbeddedBenchOptions& options, uint64_t object_bytes,
          const AlignedBuffer& src, const AlignedBuffer& dst, Progress* progress)
      : client_(client),
        options_(options),
        object_bytes_(object_bytes),
        src_(src),
        dst_(dst),
        progress_(progress) {
    objects_ = std::max<size_t>(1, options.working_set_bytes / object_bytes);
  }

  size_t objects() const { return objects_; }
  uint64_t total_bytes() const { return objects_ * object_bytes_; }

  Result<SizeResult> Run() {
    Build();
    std::vector<double> put_gbps, get_gbps, memcpy_gbps;
    const int reps = options_.common.reps;
    for (int rep = 0; rep < reps; ++rep) {
      Status status = OneRep(rep, &put_gbps, &get_gbps, &memcpy_gbps);
      if (!status.ok()) return status;
    }
    SizeResult result;
    result.object_bytes = object_bytes_;
    result.objects = objects_;
    result.put_gbps = Median(put_gbps);
    result.get_gbps = Median(get_gbps);
    result.memcpy_gbps = Median(memcpy_gbps);
    return result;
  }

 private:
  void Build() {
    const std::vector<size_t> pieces = PieceSizes(object_bytes_, options_.pieces);
    for (size_t first = 0; first < objects_; first += options_.batch) {
      Batch batch;
      const size_t end = std::min(objects_, first + options_.batch);
      for (size_t i = first; i < end; ++i) {
        batch.keys.push_back(ObjectKey(object_bytes_, i));
        batch.objects.push_back(i);
        std::vector<void*> src_ptrs, dst_ptrs;
        size_t offset = i * object_bytes_;
        for (size_t piece : pieces) {
          src_ptrs.push_back(src_.data() + offset);
          dst_ptrs.push_back(dst_.data() + offset);
          copies_.push_back({src_.data() + offset, dst_.data() + offset, piece});
          offset += piece;
        }
        batch.src_ptrs.push_back(std::move(src_ptrs));
        batch.dst_ptrs.push_back(std::move(dst_ptrs));
        batch.piece_sizes.push_back(pieces);
      }
      batches_.push_back(std::move(batch));
    }
  }

  void Report(int rep, const char* phase) {
    if (!progress_->enabled()) return;
    progress_->Update(FormatBytes(object_bytes_) + " x " + std::to_string(objects_) + ", rep " +
                      std::to_string(rep + 1) + "/" + std::to_string(options_.common.reps) + ": " +
                      phase);
  }

  // The object whose every byte is checked this rep, in batch `b`.
  size_t FullCheckObject(size_t b, int rep) const {
    const Batch& batch = batches_[b];
    return batch.objects[(b + static_cast<size_t>(rep)) % batch.objects.size()];
  }

  // Overwrites what the checks look at, so stale bytes from an earlier copy are
  // never taken for a correct transfer: both ends of every object, and all of
  // one object per batch. Done before the get and before the memcpy alike, so
  // both start from the same cache state.
  void Poison(int rep) {
    for (size_t i = 0; i < objects_; ++i) {
      uint8_t* object = dst_.data() + i * object_bytes_;
      std::memset(object, kPoison, kSpotBytes);
      std::memset(object + object_bytes_ - kSpotBytes, kPoison, kSpotBytes);
    }
    for (size_t b = 0; b < batches_.size(); ++b) {
      std::memset(dst_.data() + FullCheckObject(b, rep) * object_bytes_, kPoison, object_bytes_);
    }
  }

  // Compares dst with src where Poison() wrote; `what` names the copy.
  void CheckBytes(int rep, const char* what, FailureLog* failures) {
    auto differs = [&](size_t offset, size_t bytes) {
      return std::memcmp(dst_.data() + offset, src_.data() + offset, bytes) != 0;
    };
    auto name = [&](size_t i) { return std::string(what) + " of " + ObjectKey(object_bytes_, i); };
    for (size_t i = 0; i < objects_; ++i) {
      const size_t base = i * object_bytes_;
      if (differs(base, kSpotBytes)) failures->Add(name(i) + ": wrong bytes at its start");
      if (differs(base + object_bytes_ - kSpotBytes, kSpotBytes)) {
        failures->Add(name(i) + ": wrong bytes at its end");
      }
    }
    for (size_t b = 0; b < batches_.size(); ++b) {
      const size_t i = FullCheckObject(b, rep);
      const uint8_t* got = dst_.data() + i * object_bytes_;
      const uint8_t* want = src_.data() + i * object_bytes_;
      if (std::memcmp(got, want, object_bytes_) != 0) {
        size_t at = 0;
        while (at < object_bytes_ && got[at] == want[at]) ++at;
        failures->Add(name(i) + ": wrong byte at offset " + std::to_string(at));
      }
    }
  }

  Status OneRep(int rep, std::vector<double>* put_gbps, std::vector<double>* get_gbps,
                std::vector<double>* memcpy_gbps) {
    const uint64_t bytes = total_bytes();
    std::vector<std::vector<int>> put_codes(batches_.size());
    std::vector<std::vector<int64_t>> get_codes(batches_.size());

    // Put: src pieces -> the store.
    Report(rep, "put");
    Stopwatch watch;
    for (size_t b = 0; b < batches_.size(); ++b) {
      const Batch& batch = batches_[b];
      put_codes[b] =
          client_->BatchPutFromMultiBuffers(batch.keys, batch.src_ptrs, batch.piece_sizes);
    }
    put_gbps->push_back(Gbps(bytes, watch.Seconds()));
    FailureLog failures;
    for (size_t b = 0; b < batches_.size(); ++b) {
      const Batch& batch = batches_[b];
      if (put_codes[b].size() != batch.keys.size()) {
        failures.Add("batch put returned " + std::to_string(put_codes[b].size()) + " results for " +
                     std::to_string(batch.keys.size()) + " keys");
        continue;
      }
      for (size_t k = 0; k < batch.keys.size(); ++k) {
        if (put_codes[b][k] < 0) {
          failures.Add("put of " + batch.keys[k] + ": " + CodeString(put_codes[b][k]));
        }
      }
    }
    if (!failures.empty()) return failures.ToStatus(FormatBytes(object_bytes_) + " put");

    // Get: the store -> dst pieces.
    Report(rep, "get");
    Poison(rep);
    watch.Restart();
    for (size_t b = 0; b < batches_.size(); ++b) {
      const Batch& batch = batches_[b];
      get_codes[b] =
          client_->BatchGetIntoMultiBuffers(batch.keys, batch.dst_ptrs, batch.piece_sizes);
    }
    get_gbps->push_back(Gbps(bytes, watch.Seconds()));
    for (size_t b = 0; b < batches_.size(); ++b) {
      const Batch& batch = batches_[b];
      if (get_codes[b].size() != batch.keys.size()) {
        failures.Add("batch get returned " + std::to_string(get_codes[b].size()) + " results for " +
                     std::to_string(batch.keys.size()) + " keys");
        continue;
      }
      for (size_t k = 0; k < batch.keys.size(); ++k) {
        const int64_t code = get_codes[b][k];
        if (code < 0) {
          failures.Add("get of " + batch.keys[k] + ": " + CodeString(code));
        } else if (static_cast<uint64_t>(code) != object_bytes_) {
          failures.Add("get of " + batch.keys[k] + " returned " + std::to_string(code) +
                       " bytes, expected " + std::to_string(object_bytes_));
        }
      }
    }
    if (failures.empty()) CheckBytes(rep, "get", &failures);
    if (!failures.empty()) return failures.ToStatus(FormatBytes(object_bytes_) + " get");

    // Baseline: the same bytes, src -> dst, same pieces, same order.
    Report(rep, "memcpy");
    Poison(rep);
    memcpy_gbps->push_back(Gbps(bytes, TimedMemcpy(copies_)));
    CheckBytes(rep, "memcpy", &failures);
    if (!failures.empty()) return failures.ToStatus("memcpy baseline");

    // Empty the store for the next rep (force: gets leave read leases behind).
    Report(rep, "remove");
    const int64_t removed = client_->RemoveAll(/*force=*/true);
    if (removed < 0) {
      return Status(ErrorCode::INTERNAL_ERROR, "RemoveAll failed: " + CodeString(removed));
    }
    if (static_cast<uint64_t>(removed) != objects_) {
      return Status(ErrorCode::INTERNAL_ERROR, "RemoveAll removed " + std::to_string(removed) +
                                                   " objects, expected " +
                                                   std::to_string(objects_));
    }
    return Status::Ok();
  }

  Client* client_;
  const EmbeddedBenchOptions& options_;
  uint64_t object_bytes_;
  const AlignedBuffer& src_;
  const AlignedBuffer& dst_;
  Progress* progress_;
  size_t objects_ = 0;
  std::vector<Batch> batches_;
  std::vector<CopyPiece> copies_;
};

void PrintHuman(std::ostream& out, const EmbeddedBenchOptions& options, const Config& config,
                const std::vector<SizeResult>& results, const SizeResult& summary) {
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
    for (const SizeResult& r : results) {
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
  if (Status status = ValidateOptions(options); !status.ok()) return status;

  Result<Config> loaded = LoadConfig(options.common.config_path);
  if (!loaded.ok()) return loaded.status();
  Config config = std::move(loaded).value();
  if (config.mode != Mode::kEmbedded || config.global_segment_size == 0) {
    return Status(ErrorCode::INVALID_CONFIG,
                  "bench embedded needs mode \"embedded\" with a global_segment_size > 0");
  }

  // Size everything for the largest per-size working set.
  uint64_t largest = 0;
  for (uint64_t size : options.object_sizes) {
    const uint64_t objects = std::max<uint64_t>(1, options.working_set_bytes / size);
    largest = std::max(largest, objects * size);
  }
  // Nothing may be evicted: the segment holds 2x the working set plus a margin,
  // far below the eviction watermark.
  config.global_segment_size = std::max(config.global_segment_size, 2 * largest + kSegmentMargin);

  Progress progress("embedded", options.common.progress);
  Result<TransferBuffers> buffers = AllocateTransferBuffers(largest, kPatternSeed, progress);
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

  std::vector<SizeResult> results;
  for (uint64_t size : options.object_sizes) {
    SizeRun run(client.get(), options, size, *src, *dst, &progress);
    Result<SizeResult> result = run.Run();
    if (!result.ok()) {
      progress.Done();
      return result.status();
    }
    results.push_back(*result);
    if (options.common.json) {
      for (const char* op : {"put", "get"}) {
        const bool put = op[0] == 'p';
        const SizeResult& r = *result;
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
  SizeResult summary = results.front();
  for (const SizeResult& r : results) {
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
