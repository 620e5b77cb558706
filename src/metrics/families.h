// Small builders for Prometheus metric families, shared by the collectors (master, store).
// Thread-safety: pure functions.
#pragma once

#include <prometheus/client_metric.h>
#include <prometheus/metric_family.h>
#include <prometheus/metric_type.h>

#include <cstdint>
#include <vector>

#include "transfer/transfer_counters.h"

namespace tierkv {

// An empty family named `prefix` + `name`.
prometheus::MetricFamily MakeFamily(const char* prefix, const char* name, const char* help,
                                    prometheus::MetricType type);
// One sample of a counter or gauge.
prometheus::ClientMetric SampleOf(prometheus::MetricType type, double value);
// Appends a family with a single, unlabelled sample.
void AddSample(std::vector<prometheus::MetricFamily>& out, const char* prefix, const char* name,
               const char* help, prometheus::MetricType type, uint64_t value);
// Appends `prefix`transfer_bytes_total: a counter per transport and direction ("read": segment
// to requester, "write": requester to segment).
void AddTransferBytes(std::vector<prometheus::MetricFamily>& out, const char* prefix,
                      const char* help, const std::vector<TransferCount>& counts);

}  // namespace tierkv
