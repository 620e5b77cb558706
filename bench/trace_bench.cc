#include "trace_bench.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <thread>

#include "client/client_impl.h"
#include "master/eviction_policy.h"
#include "rpc/master_process.h"
#include "rpc/remote_master.h"

#ifndef TIERKV_DEFAULT_TRACE
#define TIERKV_DEFAULT_TRACE ""
#endif

namespace tierkv::bench {
namespace {

constexpr uint64_t kSegmentAlign = 2 * kMiB;  // segments are mapped in 2 MiB pages when possible
constexpr uint64_t kAllocAlign = 64;          // OffsetAllocator's alignment
// The pattern the blocks' bytes are cut from: block b starts at slot (b * odd) mod kSlots.
constexpr uint64_t kPatternSlots = uint64_t{1} << 20;
constexpr uint64_t kSlotBytes = 64;

uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

double Seconds(const Stopwatch& w) { return w.Seconds(); }

std::string BlockKey(uint32_t block) {
  // Shaped like a connector key (model, rank, a 64-hex chunk hash): realistic metadata sizes.
  return "trace@tp_rank:0@pp_rank:0@" + HexHash64(block);
}

// Bytes of every block, cut from one pre-faulted pattern.
class BlockBytes {
 public:
  static Result<BlockBytes> Create(uint64_t max_block_bytes) {
    BlockBytes b;
    Result<AlignedBuffer> buf =
        AlignedBuffer::Allocate(kPatternSlots * kSlotBytes + max_block_bytes);
    if (!buf.ok()) return buf.status();
    b.buf_ = std::move(buf).value();
    FillPattern(b.buf_.data(), b.buf_.size(), 0x7ace);
    return b;
  }
  uint8_t* Of(uint32_t block) const {
    const uint64_t slot = (uint64_t{block} * 0x9E3779B1ull) % kPatternSlots;
    return buf_.data() + slot * kSlotBytes;
  }
  uint8_t* data() const { return buf_.data(); }
  uint64_t size() const { return buf_.size(); }

 private:
  AlignedBuffer buf_;
};

struct Stats3 {
  uint64_t evictions = 0, demotions = 0, ssd_dropped = 0;
};

// Where the run's master is and how to read its counters.
class RunMaster {
 public:
  virtual ~RunMaster() = default;
  virtual Result<Stats3> Counters() = 0;
};

class EmbeddedCounters final : public RunMaster {
 public:
  explicit EmbeddedCounters(std::shared_ptr<InProcessMaster> master) : master_(std::move(master)) {}
  Result<Stats3> Counters() override {
    const MasterStats st = master_->master().Stats();
    return Stats3{st.evicted_objects, st.demoted_objects, st.disk_replicas_dropped};
  }

 private:
  std::shared_ptr<InProcessMaster> master_;
};

class RemoteCounters final : public RunMaster {
 public:
  explicit RemoteCounters(std::string address) : address_(std::move(address)) {}
  Result<Stats3> Counters() override {
    auto st = RemoteMaster::QueryStats(address_, Millis(5000));
    if (!st.ok()) return st.status();
    return Stats3{st->master.evicted_objects, st->master.demoted_objects,
                  st->master.disk_replicas_dropped};
  }

 private:
  std::string address_;
};

std::string SsdDirDefault() {
  const std::string self = SelfExecutable();
  const std::filesystem::path dir =
      self.empty() ? std::filesystem::current_path() : std::filesystem::path(self).parent_path();
  return (dir / "trace-ssd").string();
}

// "1/8", "0.125", "512MiB" -> bytes.
Result<uint64_t> ParseCapacity(const std::string& text, uint64_t unique_bytes) {
  const size_t slash = text.find('/');
  char* end = nullptr;
  if (slash != std::string::npos) {
    const double num = std::strtod(text.c_str(), &end);
    const double den = std::strtod(text.c_str() + slash + 1, &end);
    if (num > 0 && den > 0 && *end == '\0') {
      return static_cast<uint64_t>(static_cast<double>(unique_bytes) * num / den);
    }
    return Status(ErrorCode::INVALID_PARAMS, "DRAM capacity " + text + " is not a fraction N/D");
  }
  const double frac = std::strtod(text.c_str(), &end);
  if (end != text.c_str() && *end == '\0' && frac > 0 && frac <= 1 &&
      text.find('.') != std::string::npos) {
    return static_cast<uint64_t>(static_cast<double>(unique_bytes) * frac);
  }
  Result<uint64_t> size = ParseSize(text);
  if (!size.ok() || *size == 0) {
    return Status(ErrorCode::INVALID_PARAMS,
                  "DRAM capacity " + text +
                      " is neither a size (e.g. 512MiB) nor a fraction of "
                      "the trace's unique bytes (e.g. 1/8 or 0.125)");
  }
  return *size;
}

}  // namespace

std::vector<double> SweepFractions() {
  return {1.0 / 32, 1.0 / 16, 1.0 / 8, 3.0 / 16, 1.0 / 4, 3.0 / 8, 1.0 / 2};
}

StoreSizing SizeStore(const Trace& trace, uint64_t capacity_bytes, uint64_t bytes_per_token) {
  StoreSizing s;
  uint64_t raw = 0, aligned = 0;
  for (uint32_t tokens : trace.block_tokens) {
    raw += uint64_t{tokens} * bytes_per_token;
    aligned += AlignUp(uint64_t{tokens} * bytes_per_token, kAllocAlign);
  }
  s.alignment_overhead = raw == 0 ? 1.0 : static_cast<double>(aligned) / static_cast<double>(raw);
  const double allocated = static_cast<double>(capacity_bytes) * s.alignment_overhead;
  // 0.9 as the default watermark: a tenth of the segment stays free for the allocator.
  s.segment_bytes = AlignUp(static_cast<uint64_t>(std::ceil(allocated / 0.9)), kSegmentAlign);
  s.high_watermark = allocated / static_cast<double>(s.segment_bytes);
  return s;
}

Result<StoreRunResult> ReplayThroughStore(const Trace& trace, const StoreRunConfig& rc,
                                          Progress* progress) {
  StoreRunResult out;
  out.policy = rc.policy;
  out.sizing = SizeStore(trace, rc.capacity_bytes, rc.bytes_per_token);
  if (rc.segment_bytes > 0) {
    out.sizing.segment_bytes = rc.segment_bytes;
    out.sizing.high_watermark = rc.base.eviction_high_watermark_ratio;
  }
  const uint64_t lease_ms =
      rc.lease_ms > 0
          ? rc.lease_ms
          : (rc.speed > 0 ? std::max<uint64_t>(1, std::llround(10000 / rc.speed)) : 100);

  Config config = rc.base;
  config.mode = Mode::kEmbedded;
  config.global_segment_size = out.sizing.segment_bytes;
  config.eviction_high_watermark_ratio = out.sizing.high_watermark;
  config.eviction_ratio = std::min(rc.eviction_ratio, out.sizing.high_watermark);
  config.default_kv_lease_ttl_ms = lease_ms;
  config.eviction_policy = rc.policy;
  std::string ssd_file;
  if (rc.ssd_bytes > 0) {
    std::error_code ec;
    std::filesystem::create_directories(rc.ssd_dir, ec);
    if (ec) {
      return Status(ErrorCode::INVALID_PARAMS,
                    "cannot create the SSD directory " + rc.ssd_dir + ": " + ec.message());
    }
    static int counter = 0;
    ssd_file = rc.ssd_dir + "/trace-" + std::to_string(getpid()) + "-" + std::to_string(counter++) +
               ".tier";
    config.enable_offload = true;
    config.offload_paths = {ssd_file};
    config.offload_region_size =
        std::clamp<uint64_t>(AlignUp(rc.ssd_bytes / 32, 1 * kMiB), 1 * kMiB, 64 * kMiB);
    config.offload_capacity = AlignUp(rc.ssd_bytes, config.offload_region_size);
    config.staging_buffer_size = std::min<uint64_t>(config.staging_buffer_size, 256 * kMiB);
  }

  // The master: in-process, a child process, or one running elsewhere.
  std::unique_ptr<MasterProcess> child;
  std::string address = rc.master;
  if (rc.master == "spawn") {
    MasterProcessOptions mo;
    mo.binary = rc.binary.empty() ? SelfExecutable() : rc.binary;
    mo.args = {"--port",
               "0",
               "--metrics-port",
               "-1",
               "--eviction-policy",
               rc.policy,
               "--lease-ttl-ms",
               std::to_string(lease_ms),
               "--high-watermark",
               std::to_string(out.sizing.high_watermark),
               "--eviction-ratio",
               std::to_string(config.eviction_ratio)};
    auto started = MasterProcess::Start(mo);
    if (!started.ok()) return started.status();
    child = std::move(started).value();
    address = child->address();
  }
  if (!address.empty()) {
    auto st = RemoteMaster::QueryStats(address, Millis(5000));
    if (!st.ok()) return st.status();
    out.policy = st->eviction_policy;
    if (st->high_watermark > 0 && rc.master != "spawn") {
      // A running master keeps its own watermark: size the segment to it.
      const double allocated =
          static_cast<double>(rc.capacity_bytes) * out.sizing.alignment_overhead;
      out.sizing.high_watermark = st->high_watermark;
      out.sizing.segment_bytes =
          AlignUp(static_cast<uint64_t>(std::ceil(allocated / st->high_watermark)), kSegmentAlign);
      config.global_segment_size = out.sizing.segment_bytes;
    }
    config.master_server_address = address;
    config.protocol = "auto";
  }

  // Embedded: a ClientImpl, whose in-process master the counters are read from. Distributed:
  // the public Client::Create (a remote master; mode embedded contributes the segment).
  std::unique_ptr<Client> client;
  std::unique_ptr<RunMaster> counters;
  if (address.empty()) {
    auto created = ClientImpl::CreateEmbedded(config);
    if (!created.ok()) return created.status();
    counters = std::make_unique<EmbeddedCounters>((*created)->in_process_master());
    client = std::move(created).value();
  } else {
    auto created = Client::Create(config);
    if (!created.ok()) return created.status();
    client = std::move(created).value();
    counters = std::make_unique<RemoteCounters>(address);
  }
  Result<Stats3> before = counters->Counters();
  if (!before.ok()) return before.status();

  uint64_t max_request_bytes = 0;
  for (const TraceRequest& r : trace.requests) {
    max_request_bytes = std::max(max_request_bytes, r.input_tokens * rc.bytes_per_token);
  }
  const uint64_t max_block_bytes =
      uint64_t{kTraceBlockTokens} * rc.bytes_per_token +
      *std::max_element(trace.block_tokens.begin(), trace.block_tokens.end()) * rc.bytes_per_token;
  auto source = BlockBytes::Create(max_block_bytes);
  if (!source.ok()) return source.status();
  auto dst = AlignedBuffer::Allocate(std::max<uint64_t>(max_request_bytes, 4096));
  if (!dst.ok()) return dst.status();
  Client& c = *client;
  if (Status s = c.RegisterBuffer(source->data(), source->size()); !s.ok()) return s;
  if (Status s = c.RegisterBuffer(dst->data(), dst->size()); !s.ok()) return s;

  std::vector<std::string> keys(trace.block_tokens.size());
  for (uint32_t b = 0; b < keys.size(); ++b) keys[b] = BlockKey(b);
  auto bytes_of = [&](uint32_t b) { return uint64_t{trace.block_tokens[b]} * rc.bytes_per_token; };

  FailureLog failures;
  std::vector<std::string> rkeys, put_keys;
  std::vector<std::vector<void*>> ptrs;
  std::vector<std::vector<size_t>> sizes;
  ReplicateConfig put_config;
  const Stopwatch wall;
  const size_t total = trace.requests.size();
  for (size_t ri = 0; ri < total; ++ri) {
    const TraceRequest& r = trace.requests[ri];
    if (rc.speed > 0) {
      const auto due = std::chrono::duration<double>(r.timestamp_ms / 1000.0 / rc.speed);
      const double now = Seconds(wall);
      if (due.count() > now) {
        std::this_thread::sleep_for(std::chrono::duration<double>(due.count() - now));
      }
    }
    if (progress != nullptr && (ri % 512 == 0 || ri + 1 == total)) {
      char line[160];
      std::snprintf(line, sizeof(line), "%s, %s DRAM%s: request %zu/%zu, prefix hit %.1f%%",
                    out.policy.c_str(), FormatBytes(rc.capacity_bytes).c_str(),
                    rc.ssd_bytes > 0 ? (" + " + FormatBytes(rc.ssd_bytes) + " SSD").c_str() : "",
                    ri + 1, total, 100 * out.total.prefix_hit_rate());
      progress->Update(line);
    }
    const size_t n = r.blocks.size();
    rkeys.clear();
    for (uint32_t b : r.blocks) rkeys.push_back(keys[b]);
    out.total.input_tokens += r.input_tokens;
    out.total.blocks += n;
    ++out.requests;

    Stopwatch step;
    const std::vector<Result<std::vector<ReplicaDesc>>> descs = c.BatchGetReplicaDesc(rkeys);
    out.lookup_s += step.Seconds();
    if (descs.size() != n) return Status(ErrorCode::INTERNAL_ERROR, "lookup: wrong result count");
    size_t k = 0;
    while (k < n && descs[k].ok()) ++k;
    for (size_t j = 0; j < n; ++j) {
      if (!descs[j].ok() && descs[j].code() != ErrorCode::OBJECT_NOT_FOUND) {
        failures.Add("lookup of " + rkeys[j] + ": " + descs[j].status().ToString());
      }
    }
    size_t hits = 0;
    if (k > 0) {
      ptrs.assign(k, {});
      sizes.assign(k, {});
      uint64_t off = 0;
      for (size_t j = 0; j < k; ++j) {
        ptrs[j] = {dst->data() + off};
        sizes[j] = {bytes_of(r.blocks[j])};
        off += bytes_of(r.blocks[j]);
      }
      std::vector<std::string> get_keys(rkeys.begin(), rkeys.begin() + k);
      step.Restart();
      const std::vector<int64_t> got = c.BatchGetIntoMultiBuffers(get_keys, ptrs, sizes);
      const double get_s = step.Seconds();
      out.get_s += get_s;
      while (hits < k && got[hits] == static_cast<int64_t>(sizes[hits][0])) ++hits;
      if (hits < k) ++out.get_failed;
      for (size_t j = 0; j < hits; ++j) {
        const uint32_t b = r.blocks[j];
        if (std::memcmp(ptrs[j][0], source->Of(b), sizes[j][0]) != 0) {
          return Status(ErrorCode::INTERNAL_ERROR, "get of " + rkeys[j] + " returned wrong bytes");
        }
        bool memory = false;
        for (const ReplicaDesc& d : *descs[j]) memory = memory || d.tier == ReplicaTier::kMemory;
        (memory ? out.dram_hit_tokens : out.ssd_hit_tokens) += trace.block_tokens[b];
        (memory ? out.dram_hit_blocks : out.ssd_hit_blocks) += 1;
        (memory ? out.bytes_got_dram : out.bytes_got_ssd) += sizes[j][0];
        out.total.hit_tokens += trace.block_tokens[b];
        ++out.total.hit_blocks;
      }
      uint64_t hit_tokens = 0;
      for (size_t j = 0; j < hits; ++j) hit_tokens += trace.block_tokens[r.blocks[j]];
      out.hit_prefill_s += static_cast<double>(hit_tokens) / rc.prefill_tokens_per_s;
    }
    out.input_prefill_s += static_cast<double>(r.input_tokens) / rc.prefill_tokens_per_s;

    // Put the blocks after the prefix; the ones that exist answer OBJECT_ALREADY_EXISTS.
    if (hits < n) {
      const size_t m = n - hits;
      put_keys.assign(rkeys.begin() + hits, rkeys.end());
      ptrs.assign(m, {});
      sizes.assign(m, {});
      put_config.parent_keys.clear();
      for (size_t j = 0; j < m; ++j) {
        const uint32_t b = r.blocks[hits + j];
        ptrs[j] = {source->Of(b)};
        sizes[j] = {bytes_of(b)};
        if (rc.hints) put_config.parent_keys.push_back(hits + j > 0 ? rkeys[hits + j - 1] : "");
      }
      step.Restart();
      const std::vector<int> put = c.BatchPutFromMultiBuffers(put_keys, ptrs, sizes, put_config);
      out.put_s += step.Seconds();
      for (size_t j = 0; j < m; ++j) {
        if (put[j] == 0) {
          out.bytes_put += sizes[j][0];
          ++out.total.inserted_blocks;
        } else if (put[j] == static_cast<int>(ErrorCode::OBJECT_ALREADY_EXISTS)) {
          ++out.put_existing;
        } else {
          ++out.put_failed;
          if (put[j] != static_cast<int>(ErrorCode::NO_AVAILABLE_HANDLE)) {
            failures.Add("put of " + put_keys[j] + ": " + CodeString(put[j]));
          }
        }
      }
    }
    if (!failures.empty()) return failures.ToStatus("trace replay");
  }
  out.wall_s = Seconds(wall);
  Result<Stats3> after = counters->Counters();
  if (!after.ok()) return after.status();
  out.evictions = after->evictions - before->evictions;
  out.demotions = after->demotions - before->demotions;
  out.ssd_dropped = after->ssd_dropped - before->ssd_dropped;
  out.total.evicted_blocks = out.evictions;
  (void)c.UnregisterBuffer(source->data());
  (void)c.UnregisterBuffer(dst->data());
  client.reset();
  if (child) child->Stop();
  if (!ssd_file.empty()) {
    std::error_code ec;
    std::filesystem::remove(ssd_file, ec);
  }
  return out;
}

namespace {

struct CapacityRuns {
  CapacityRuns(double f, uint64_t c) : fraction(f), capacity(c) {}
  double fraction = 0;  // of the unique bytes
  uint64_t capacity = 0;
  CacheSimResult lru_sim, belady_sim;
  std::vector<StoreRunResult> dram;  // one per policy, in run order
  std::vector<StoreRunResult> ssd;   // DRAM + SSD runs
};

double Round4(double v) { return std::round(v * 10000) / 10000; }

void EmitSim(const TraceBenchOptions& o, const CapacityRuns& cr, const char* policy,
             const CacheSimResult& s) {
  JsonLine()
      .Add("bench", "trace")
      .Add("kind", "sim")
      .Add("policy", policy)
      .Add("capacity_bytes", cr.capacity)
      .Add("capacity_fraction", Round4(cr.fraction))
      .Add("bytes_per_token", o.bytes_per_token)
      .Add("prefix_hit", Round4(s.prefix_hit_rate()))
      .Add("block_hit", Round4(s.block_hit_rate()))
      .Add("evicted_blocks", s.evicted_blocks)
      .Emit();
}

void EmitStore(const TraceBenchOptions& o, const CapacityRuns& cr, const StoreRunConfig& rc,
               const StoreRunResult& r) {
  const uint64_t moved = r.bytes_put + r.bytes_got_dram + r.bytes_got_ssd;
  JsonLine()
      .Add("bench", "trace")
      .Add("kind", "store")
      .Add("policy", r.policy)
      .Add("tiers", rc.ssd_bytes > 0 ? "dram+ssd" : "dram")
      .Add("mode", rc.master.empty() ? "embedded" : "distributed")
      .Add("capacity_bytes", cr.capacity)
      .Add("capacity_fraction", Round4(cr.fraction))
      .Add("ssd_bytes", rc.ssd_bytes)
      .Add("bytes_per_token", o.bytes_per_token)
      .Add("hints", rc.hints)
      .Add("segment_bytes", r.sizing.segment_bytes)
      .Add("high_watermark", Round4(r.sizing.high_watermark))
      .Add("prefix_hit", Round4(r.total.prefix_hit_rate()))
      .Add("block_hit", Round4(r.total.block_hit_rate()))
      .Add("dram_prefix_hit", Round4(static_cast<double>(r.dram_hit_tokens) /
                                     std::max<uint64_t>(1, r.total.input_tokens)))
      .Add("ssd_prefix_hit", Round4(static_cast<double>(r.ssd_hit_tokens) /
                                    std::max<uint64_t>(1, r.total.input_tokens)))
      .Add("dram_block_hit",
           Round4(static_cast<double>(r.dram_hit_blocks) / std::max<uint64_t>(1, r.total.blocks)))
      .Add("ssd_block_hit",
           Round4(static_cast<double>(r.ssd_hit_blocks) / std::max<uint64_t>(1, r.total.blocks)))
      .Add("bytes_put", r.bytes_put)
      .Add("bytes_got_dram", r.bytes_got_dram)
      .Add("bytes_got_ssd", r.bytes_got_ssd)
      .Add("put_existing", r.put_existing)
      .Add("put_failed", r.put_failed)
      .Add("get_failed", r.get_failed)
      .Add("evictions", r.evictions)
      .Add("demotions", r.demotions)
      .Add("ssd_dropped", r.ssd_dropped)
      .Add("wall_s", Round3(r.wall_s))
      .Add("lookup_s", Round3(r.lookup_s))
      .Add("get_s", Round3(r.get_s))
      .Add("put_s", Round3(r.put_s))
      .Add("gbps", Round3(Gbps(moved, r.wall_s)))
      .Add("requests_per_s",
           std::llround(r.wall_s > 0 ? static_cast<double>(r.requests) / r.wall_s : 0))
      .Add("prefill_tokens_per_s", o.prefill_tokens_per_s)
      .Add("hit_prefill_s", Round3(r.hit_prefill_s))
      .Add("load_s", Round3(r.lookup_s + r.get_s))
      .Add("ttft_saved_s", Round3(r.hit_prefill_s - r.lookup_s - r.get_s))
      .Add("ttft_saved_fraction",
           Round4((r.hit_prefill_s - r.lookup_s - r.get_s) / std::max(1e-12, r.input_prefill_s)))
      .Emit();
}

// Draws prefix-hit rate vs DRAM capacity with gnuplot (installed from Debian if missing).
Status Plot(const std::string& png, const std::vector<CapacityRuns>& runs) {
  if (!OnPath("gnuplot")) AptInstall("gnuplot-nox", "tierkv bench trace");
  if (!OnPath("gnuplot")) {
    return Status(ErrorCode::UNAVAILABLE_IN_CURRENT_MODE,
                  "--plot needs gnuplot (Debian: apt-get install gnuplot-nox)");
  }
  std::vector<const CapacityRuns*> sorted;
  for (const auto& r : runs) sorted.push_back(&r);
  std::sort(sorted.begin(), sorted.end(),
            [](const CapacityRuns* a, const CapacityRuns* b) { return a->capacity < b->capacity; });
  const std::string data = png + ".dat", script = png + ".gp";
  std::string lru_name = "lru", policy_name, ssd_name;
  {
    std::ofstream f(data);
    f << "# fraction lru_sim belady store_lru store_policy store_policy_ssd\n";
    for (const CapacityRuns* cr : sorted) {
      double store_lru = NAN, store_policy = NAN, ssd = NAN;
      for (const auto& r : cr->dram) {
        if (r.policy == "lru") {
          store_lru = r.total.prefix_hit_rate();
        } else {
          store_policy = r.total.prefix_hit_rate();
          policy_name = r.policy;
        }
      }
      for (const auto& r : cr->ssd) {
        ssd = r.total.prefix_hit_rate();
        ssd_name = r.policy;
      }
      f << cr->fraction << ' ' << cr->lru_sim.prefix_hit_rate() << ' '
        << cr->belady_sim.prefix_hit_rate() << ' ' << store_lru << ' ' << store_policy << ' ' << ssd
        << '\n';
    }
    if (!f) return Status(ErrorCode::INTERNAL_ERROR, "cannot write " + data);
  }
  {
    std::ofstream f(script);
    f << "set terminal png size 900,560\n"
      << "set output '" << png << "'\n"
      << "set logscale x 2\n"
      << "set xtics (\"1/32\" 0.03125, \"1/16\" 0.0625, \"1/8\" 0.125, \"3/16\" 0.1875, "
         "\"1/4\" 0.25, \"3/8\" 0.375, \"1/2\" 0.5)\n"
      << "set xlabel \"DRAM capacity (fraction of the trace's unique block bytes)\"\n"
      << "set ylabel \"prefix-hit rate (hit tokens / input tokens)\"\n"
      << "set key bottom right\n"
      << "set grid\n"
      << "set datafile missing 'nan'\n"
      << "plot '" << data << "' using 1:2 with linespoints title 'exact LRU (simulation)', \\\n"
      << "  '' using 1:3 with linespoints title 'Belady (simulation)', \\\n"
      << "  '' using 1:4 with linespoints title 'tierkv lru', \\\n"
      << "  '' using 1:5 with linespoints title 'tierkv " << policy_name << "', \\\n"
      << "  '' using 1:6 with linespoints title 'tierkv " << ssd_name << " DRAM + SSD (8x DRAM)'\n";
    if (!f) return Status(ErrorCode::INTERNAL_ERROR, "cannot write " + script);
  }
  const std::string command = "gnuplot '" + script + "' 1>&2";
  if (std::system(command.c_str()) != 0) {
    return Status(ErrorCode::INTERNAL_ERROR, "gnuplot failed on " + script);
  }
  return Status::Ok();
}

}  // namespace

Status RunTraceBench(const TraceBenchOptions& o) {
  Progress progress("trace", o.common.progress);
  const std::string path = o.trace_path.empty() ? TIERKV_DEFAULT_TRACE : o.trace_path;
  if (path.empty()) return Status(ErrorCode::INVALID_PARAMS, "no trace: pass --trace FILE");
  progress.Update("reading " + path);
  Result<Trace> loaded = LoadTrace(path);
  if (!loaded.ok()) return loaded.status();
  Trace trace = std::move(loaded).value();
  if (o.max_requests > 0 && o.max_requests < trace.requests.size()) {
    // Keep the first requests; the block table keeps blocks they do not name (never used).
    trace.requests.resize(o.max_requests);
    trace.input_tokens = 0;
    trace.block_references = 0;
    std::vector<uint8_t> named(trace.block_tokens.size(), 0);
    for (const TraceRequest& r : trace.requests) {
      trace.input_tokens += r.input_tokens;
      trace.block_references += r.blocks.size();
      for (uint32_t b : r.blocks) named[b] = 1;
    }
    trace.unique_tokens = 0;
    for (size_t b = 0; b < named.size(); ++b) {
      if (named[b]) trace.unique_tokens += trace.block_tokens[b];
    }
  }
  const uint64_t unique = trace.unique_bytes(o.bytes_per_token);

  std::vector<std::string> policies;
  if (o.policy.empty()) {
    policies = {"lru", kDefaultTracePolicy};
  } else {
    policies = {o.policy};
  }
  for (const auto& p : policies) {
    if (!IsEvictionPolicyName(p)) {
      return Status(ErrorCode::INVALID_PARAMS,
                    "unknown --policy " + p + "; known: " + EvictionPolicyNames());
    }
  }
  Result<uint64_t> default_capacity = ParseCapacity(o.dram_capacity, unique);
  if (!default_capacity.ok()) return default_capacity.status();

  std::vector<CapacityRuns> runs;
  size_t default_index = 0;
  if (o.sweep) {
    for (double f : SweepFractions()) {
      runs.emplace_back(f, static_cast<uint64_t>(static_cast<double>(unique) * f));
    }
    // The summary's capacity is the default one; add it when the sweep lacks it.
    auto it = std::find_if(runs.begin(), runs.end(),
                           [&](const CapacityRuns& r) { return r.capacity == *default_capacity; });
    if (it == runs.end()) {
      runs.emplace_back(static_cast<double>(*default_capacity) / static_cast<double>(unique),
                        *default_capacity);
      it = runs.end() - 1;
    }
    default_index = static_cast<size_t>(it - runs.begin());
  } else {
    runs.emplace_back(static_cast<double>(*default_capacity) / static_cast<double>(unique),
                      *default_capacity);
  }

  StoreRunConfig base;
  base.bytes_per_token = o.bytes_per_token;
  base.speed = o.speed;
  base.hints = o.hints;
  base.master = o.master;
  base.ssd_dir = o.ssd_dir.empty() ? SsdDirDefault() : o.ssd_dir;
  base.eviction_ratio = o.eviction_ratio;
  base.lease_ms = o.lease_ms;
  base.prefill_tokens_per_s = o.prefill_tokens_per_s;
  base.segment_bytes = o.segment_bytes;
  if (!o.common.config_path.empty()) {
    Result<Config> cfg = LoadConfig(o.common.config_path);
    if (!cfg.ok()) return cfg.status();
    base.base = *cfg;
  }
  if (!o.master.empty() && o.master != "spawn" && policies.size() > 1) {
    // A running master has one policy; run just that one.
    policies.resize(1);
  }
  const std::string ssd_policy = policies.back();

  std::ostream& human = o.common.json ? std::cerr : std::cout;
  for (size_t i = 0; i < runs.size(); ++i) {
    CapacityRuns& cr = runs[i];
    progress.Update("simulating LRU and Belady at " + FormatBytes(cr.capacity));
    cr.lru_sim = SimulateLru(trace, cr.capacity, o.bytes_per_token);
    cr.belady_sim = SimulateBelady(trace, cr.capacity, o.bytes_per_token);
    if (o.common.json) {
      EmitSim(o, cr, "lru", cr.lru_sim);
      EmitSim(o, cr, "belady", cr.belady_sim);
    }
    for (const std::string& p : policies) {
      StoreRunConfig rc = base;
      rc.capacity_bytes = cr.capacity;
      rc.policy = p;
      rc.ssd_bytes = o.sweep ? 0 : o.ssd_capacity;
      Result<StoreRunResult> r = ReplayThroughStore(trace, rc, &progress);
      if (!r.ok()) return r.status();
      if (o.common.json) EmitStore(o, cr, rc, *r);
      cr.dram.push_back(std::move(r).value());
    }
    if (o.sweep) {
      StoreRunConfig rc = base;
      rc.capacity_bytes = cr.capacity;
      rc.policy = ssd_policy;
      // 8x DRAM, but never more than the trace can fill (1.5x its unique bytes covers the
      // records' headers and 4 KiB alignment): the file is preallocated.
      rc.ssd_bytes = o.ssd_capacity > 0 ? o.ssd_capacity
                                        : std::min<uint64_t>(8 * cr.capacity, unique + unique / 2);
      Result<StoreRunResult> r = ReplayThroughStore(trace, rc, &progress);
      if (!r.ok()) return r.status();
      if (o.common.json) EmitStore(o, cr, rc, *r);
      cr.ssd.push_back(std::move(r).value());
    }
  }
  progress.Done();

  // Summary at the default capacity.
  const CapacityRuns& d = runs[default_index];
  const StoreRunResult* lru = nullptr;
  const StoreRunResult* best = nullptr;
  for (const StoreRunResult& r : d.dram) {
    if (r.policy == "lru") lru = &r;
    if (r.policy != "lru" || d.dram.size() == 1) best = &r;
  }
  const double lru_sim = d.lru_sim.prefix_hit_rate();
  const double belady = d.belady_sim.prefix_hit_rate();
  const double lru_hit = lru != nullptr ? lru->total.prefix_hit_rate() : lru_sim;
  const double policy_hit = best->total.prefix_hit_rate();
  const double gap = belady - lru_hit;
  const double gap_closed = gap > 0 ? (policy_hit - lru_hit) / gap : 0.0;
  if (o.common.json) {
    JsonLine line;
    line.Add("bench", "trace")
        .Add("capacity_bytes", d.capacity)
        .Add("bytes_per_token", o.bytes_per_token)
        .Add("lru_hit", Round4(lru_hit))
        .Add("lru_sim_hit", Round4(lru_sim))
        .Add("belady_hit", Round4(belady))
        .Add("policy", best->policy)
        .Add("policy_hit", Round4(policy_hit))
        .Add("gap_closed", Round3(gap_closed));
    if (lru == nullptr) line.Add("lru_from", "sim");
    line.Emit();
  }

  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "tierkv bench trace: %s, %zu requests, %zu blocks (%s unique at %llu B/token)\n",
                path.c_str(), trace.requests.size(), trace.block_tokens.size(),
                FormatBytes(unique).c_str(), static_cast<unsigned long long>(o.bytes_per_token));
  human << buf;
  human << "  capacity       LRU sim  Belady  | store: policy       prefix hit  block hit  "
           "DRAM/SSD hit     evictions demotions  wall s\n";
  for (const CapacityRuns& cr : runs) {
    auto row = [&](const StoreRunResult& r, const char* tiers) {
      std::snprintf(
          buf, sizeof(buf),
          "  %-9s %5.3f  %7.4f  %6.4f  | %-6s %-13s %7.4f     %7.4f  %6.4f/%6.4f  %9llu "
          "%9llu  %6.1f\n",
          FormatBytes(cr.capacity).c_str(), cr.fraction, cr.lru_sim.prefix_hit_rate(),
          cr.belady_sim.prefix_hit_rate(), tiers, r.policy.c_str(), r.total.prefix_hit_rate(),
          r.total.block_hit_rate(),
          static_cast<double>(r.dram_hit_tokens) / std::max<uint64_t>(1, r.total.input_tokens),
          static_cast<double>(r.ssd_hit_tokens) / std::max<uint64_t>(1, r.total.input_tokens),
          static_cast<unsigned long long>(r.evictions),
          static_cast<unsigned long long>(r.demotions), r.wall_s);
      human << buf;
    };
    for (const auto& r : cr.dram) row(r, "DRAM");
    for (const auto& r : cr.ssd) row(r, "+SSD");
  }
  std::snprintf(buf, sizeof(buf),
                "  at %s: LRU store %.4f (sim %.4f, %+.4f), Belady %.4f, %s %.4f: gap closed "
                "%.3f (target >= 0.10)\n",
                FormatBytes(d.capacity).c_str(), lru_hit, lru_sim, lru_hit - lru_sim, belady,
                best->policy.c_str(), policy_hit, gap_closed);
  human << buf << std::flush;

  if (!o.plot_path.empty()) {
    if (Status s = Plot(o.plot_path, runs); !s.ok()) return s;
    human << "  plot: " << o.plot_path << "\n" << std::flush;
  }
  return Status::Ok();
}

}  // namespace tierkv::bench
