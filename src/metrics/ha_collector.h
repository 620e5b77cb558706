// HaCollector: a `tierkv master --ha`'s place in its cluster as Prometheus metrics
// (tierkv_master_ha_*), read when scraped from a callback the master provides; served by leader
// and standbys alike (a standby has no MasterCollector). docs/metrics.md lists them.
// Thread-safety: thread-safe if the callback is.
#pragma once

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace tierkv {

struct HaFigures {
  bool leading = false;
  uint64_t epoch = 0;  // of this master's term while leading, else 0
  uint64_t terms = 0;  // times elected since it started
  std::string leader;  // the leader's address as last seen
  uint64_t leader_epoch = 0;
};

class HaCollector final : public prometheus::Collectable {
 public:
  explicit HaCollector(std::function<HaFigures()> figures) : figures_(std::move(figures)) {}
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const std::function<HaFigures()> figures_;
};

}  // namespace tierkv
