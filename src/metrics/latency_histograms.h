// LatencyHistograms: one Prometheus histogram family with a fixed set of label values (e.g.
// tierkv_master_rpc_duration_seconds{method="PutStart"}), recorded without a lock.
//
// prometheus::Histogram::Observe takes a mutex per observation; these histograms sit on every
// RPC, from all of gRPC's threads at once, so each bucket is a relaxed atomic counter instead.
// A scrape reads the counters one by one: it may see an observation in its bucket and not yet
// in the sum (or the reverse), never a count that does not match its buckets (the count is the
// sum of the buckets read).
//
// Thread-safety: thread-safe; Observe is lock-free and wait-free.
#pragma once

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tierkv {

class LatencyHistograms final : public prometheus::Collectable {
 public:
  // `name` (ends in _seconds) and `help` describe the family; one histogram per entry of
  // `values`, labelled `label`="value". `bounds` are the buckets' upper bounds in seconds,
  // increasing (a +Inf bucket is added); empty = DefaultBounds().
  LatencyHistograms(std::string name, std::string help, std::string label,
                    std::vector<std::string> values, std::vector<double> bounds = {});

  // Records one duration in histogram `index` (the position in `values`; out of range is
  // ignored). Negative durations count as 0.
  void Observe(size_t index, std::chrono::nanoseconds elapsed);

  std::vector<prometheus::MetricFamily> Collect() const override;

  // 10 us .. 10 s, roughly 1-2.5-5 per decade: RPCs of a metadata service.
  static std::vector<double> DefaultBounds();

 private:
  size_t Buckets() const { return bounds_ns_.size() + 1; }  // + the +Inf bucket

  const std::string name_;
  const std::string help_;
  const std::string label_;
  const std::vector<std::string> values_;
  std::vector<double> bounds_;      // seconds, as exported
  std::vector<int64_t> bounds_ns_;  // the same, in ns, for Observe
  // counts_[index * Buckets() + bucket]: observations in that (non-cumulative) bucket.
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;
  std::unique_ptr<std::atomic<uint64_t>[]> sums_ns_;  // per histogram
};

}  // namespace tierkv
