// MetricsRegistry: the one place a process's metrics are collected from. It is created by the
// process (tools/master_command.cc), passed to what produces metrics (MasterServer) and to
// what serves them (MetricsServer); nothing reaches it as a singleton.
//
// It holds prometheus::Collectable objects — collectors that read their figures when scraped
// (MasterCollector), lock-free histograms (LatencyHistograms), or a prometheus::Registry of
// ordinary counters and gauges — and Collect() concatenates what each returns, in the order
// they were added.
//
// Thread-safety: thread-safe. Collect() holds mu_ while it calls each collectable, and
// Remove() takes mu_, so once Remove() returns no scrape is still reading the removed
// collectable: its owner may destroy what it reads. Lock order: mu_ comes before any lock a
// collectable takes (MasterService's shard locks, SegmentRegistry, ClientRegistry); no
// collectable may call back into the registry.
#pragma once

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include <memory>
#include <mutex>
#include <vector>

namespace tierkv {

class MetricsRegistry final : public prometheus::Collectable {
 public:
  // Adds a collectable (shared: the registry keeps it alive until removed). Null is ignored.
  void Add(std::shared_ptr<prometheus::Collectable> collectable);
  // Removes it (no-op if absent), waiting for a Collect() in progress.
  void Remove(const prometheus::Collectable* collectable);

  // Every family of every collectable. Two collectables must not produce the same family
  // name (the text format would repeat it); the producers here use distinct names.
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  mutable std::mutex mu_;
  std::vector<std::shared_ptr<prometheus::Collectable>> collectables_;  // guarded by mu_
};

}  // namespace tierkv
