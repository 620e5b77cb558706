#include "metrics/ha_collector.h"

#include <utility>

#include "metrics/families.h"
#include "metrics/master_collector.h"

namespace tierkv {

std::vector<prometheus::MetricFamily> HaCollector::Collect() const {
  constexpr const char* kHaMetricPrefix = "tierkv_master_ha_";
  const HaFigures f = figures_();
  std::vector<prometheus::MetricFamily> out;
  AddSample(out, kHaMetricPrefix, "leader",
            "1 while this master leads (its etcd lease valid), else 0",
            prometheus::MetricType::Gauge, f.leading ? 1 : 0);
  AddSample(out, kHaMetricPrefix, "epoch", "Epoch of this master's term while it leads, else 0",
            prometheus::MetricType::Gauge, f.epoch);
  AddSample(out, kHaMetricPrefix, "terms_total", "Times this master was elected leader",
            prometheus::MetricType::Counter, f.terms);
  prometheus::MetricFamily leader = MakeFamily(
      kHaMetricPrefix, "leader_epoch", "Epoch of the leader this master last saw, by address",
      prometheus::MetricType::Gauge);
  prometheus::ClientMetric sample =
      SampleOf(prometheus::MetricType::Gauge, static_cast<double>(f.leader_epoch));
  sample.label = {{"leader", LabelValue(f.leader)}};
  leader.metric.push_back(std::move(sample));
  out.push_back(std::move(leader));
  return out;
}

}  // namespace tierkv
