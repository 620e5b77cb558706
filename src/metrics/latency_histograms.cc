#include "metrics/latency_histograms.h"

#include <prometheus/client_metric.h>
#include <prometheus/metric_type.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

namespace tierkv {

std::vector<double> LatencyHistograms::DefaultBounds() {
  return {10e-6, 25e-6, 50e-6,  100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3,
          25e-3, 50e-3, 100e-3, 250e-3, 500e-3, 1.0,    2.5,  5.0,    10.0};
}

LatencyHistograms::LatencyHistograms(std::string name, std::string help, std::string label,
                                     std::vector<std::string> values, std::vector<double> bounds)
    : name_(std::move(name)),
      help_(std::move(help)),
      label_(std::move(label)),
      values_(std::move(values)),
      bounds_(bounds.empty() ? DefaultBounds() : std::move(bounds)) {
  std::sort(bounds_.begin(), bounds_.end());
  bounds_.erase(std::unique(bounds_.begin(), bounds_.end()), bounds_.end());
  for (double b : bounds_) bounds_ns_.push_back(static_cast<int64_t>(std::llround(b * 1e9)));
  counts_ = std::make_unique<std::atomic<uint64_t>[]>(values_.size() * Buckets());
  sums_ns_ = std::make_unique<std::atomic<uint64_t>[]>(values_.size());
}

void LatencyHistograms::Observe(size_t index, std::chrono::nanoseconds elapsed) {
  if (index >= values_.size()) return;
  const int64_t ns = std::max<int64_t>(elapsed.count(), 0);
  // The first bound >= ns: Prometheus buckets are "less than or equal".
  const size_t bucket = static_cast<size_t>(
      std::lower_bound(bounds_ns_.begin(), bounds_ns_.end(), ns) - bounds_ns_.begin());
  counts_[index * Buckets() + bucket].fetch_add(1, std::memory_order_relaxed);
  sums_ns_[index].fetch_add(static_cast<uint64_t>(ns), std::memory_order_relaxed);
}

std::vector<prometheus::MetricFamily> LatencyHistograms::Collect() const {
  prometheus::MetricFamily family;
  family.name = name_;
  family.help = help_;
  family.type = prometheus::MetricType::Histogram;
  family.metric.reserve(values_.size());
  for (size_t i = 0; i < values_.size(); ++i) {
    prometheus::ClientMetric metric;
    metric.label.push_back({label_, values_[i]});
    uint64_t cumulative = 0;
    for (size_t b = 0; b < Buckets(); ++b) {
      cumulative += counts_[i * Buckets() + b].load(std::memory_order_relaxed);
      prometheus::ClientMetric::Bucket bucket;
      bucket.cumulative_count = cumulative;
      bucket.upper_bound =
          b < bounds_.size() ? bounds_[b] : std::numeric_limits<double>::infinity();
      metric.histogram.bucket.push_back(bucket);
    }
    metric.histogram.sample_count = cumulative;
    metric.histogram.sample_sum =
        static_cast<double>(sums_ns_[i].load(std::memory_order_relaxed)) * 1e-9;
    family.metric.push_back(std::move(metric));
  }
  return {std::move(family)};
}

}  // namespace tierkv
