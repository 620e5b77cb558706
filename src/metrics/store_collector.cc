#include "metrics/store_collector.h"

#include <utility>

#include "metrics/families.h"
#include "metrics/master_collector.h"

namespace tierkv {

std::vector<prometheus::MetricFamily> StoreCollector::Collect() const {
  constexpr const char* kPrefix = "tierkv_store_";
  const StoreFigures f = figures_();
  std::vector<prometheus::MetricFamily> out;
  prometheus::MetricFamily capacity =
      MakeFamily(kPrefix, "segment_capacity_bytes", "DRAM this store contributes, in bytes",
                 prometheus::MetricType::Gauge);
  prometheus::ClientMetric sample =
      SampleOf(prometheus::MetricType::Gauge, static_cast<double>(f.segment_bytes));
  sample.label = {{"segment", LabelValue(f.segment)}};
  capacity.metric.push_back(std::move(sample));
  out.push_back(std::move(capacity));
  AddSample(out, kPrefix, "shm_connections",
            "Same-host requesters holding a mapping of the segment (open connections)",
            prometheus::MetricType::Gauge, f.shm_connections);
  AddSample(out, kPrefix, "master_connected", "1 if the master answered the last heartbeat",
            prometheus::MetricType::Gauge, f.master_connected ? 1 : 0);
  AddSample(out, kPrefix, "registrations_total",
            "Times this store registered with a master (re-registrations follow master restarts)",
            prometheus::MetricType::Counter, f.registrations);
  AddTransferBytes(out, kPrefix,
                   "Bytes requesters moved over the network transport: read from the segment, "
                   "written into it",
                   f.transfers);
  return out;
}

}  // namespace tierkv
