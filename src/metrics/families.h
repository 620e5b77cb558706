// Small builders for Prometheus metric families, shared by the collectors (master, store).
// Thread-safety: pure functions.
#pragma once

#include <prometheus/client_metric.h>
#include <prometheus/metric_family.h>
#include <prometheus/metric_type.h>

#include <cstdint>
#include <vector>

namespace tierkv {

// An empty family named `prefix` + `name`.
prometheus::MetricFamily MakeFamily(const char* prefix, const char* name, const char* help,
                                    prometheus::MetricType type);
// One sample of a counter or gauge.
prometheus::ClientMetric SampleOf(prometheus::MetricType type, double value);
// Appends a family with a single, unlabelled sample.
void AddSample(std::vector<prometheus::MetricFamily>& out, const char* prefix, const char* name,
               const char* help, prometheus::MetricType type, uint64_t value);

}  // namespace tierkv
