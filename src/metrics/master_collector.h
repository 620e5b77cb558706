// MasterCollector: the master's figures as Prometheus metrics (tierkv_master_*), read when
// scraped — nothing on the request path. docs/metrics.md lists every metric.
//
// A scrape calls MasterService::Stats() (which visits every shard under its lock: O(objects),
// the same walk as the Stats RPC), SegmentRegistry::Usage() and, for a master process, the
// ClientRegistry's counts.
//
// Thread-safety: thread-safe. The MasterService and ClientRegistry must outlive every
// Collect(): remove the collector from its MetricsRegistry before destroying them.
#pragma once

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include <cstddef>
#include <string>
#include <vector>

namespace tierkv {

class ClientRegistry;
class MasterService;

class MasterCollector final : public prometheus::Collectable {
 public:
  // `clients` may be null (an embedded master has none): the client metrics are left out.
  MasterCollector(MasterService& master, const ClientRegistry* clients);

  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  MasterService& master_;
  const ClientRegistry* const clients_;
};

// `text` made safe as a Prometheus label value: printable ASCII kept, other bytes as \xNN (a
// segment name is client-supplied bytes; label values must be UTF-8). Cut after `max` bytes.
std::string LabelValue(const std::string& text, size_t max = 128);

}  // namespace tierkv
