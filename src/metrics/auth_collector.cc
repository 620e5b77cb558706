#include "metrics/auth_collector.h"

#include "metrics/families.h"

namespace tierkv {

std::vector<prometheus::MetricFamily> AuthCollector::Collect() const {
  const AuthFigures f = figures_();
  prometheus::MetricFamily family =
      MakeFamily(prefix_.c_str(), "unauthenticated_total",
                 "Requests refused for a missing or wrong cluster credential, by plane (control: "
                 "gRPC calls; data: data-port handshakes)",
                 prometheus::MetricType::Counter);
  for (const auto& [plane, value] : {std::pair<const char*, uint64_t>{"control", f.control},
                                     std::pair<const char*, uint64_t>{"data", f.data}}) {
    prometheus::ClientMetric sample =
        SampleOf(prometheus::MetricType::Counter, static_cast<double>(value));
    sample.label = {{"plane", plane}};
    family.metric.push_back(std::move(sample));
  }
  std::vector<prometheus::MetricFamily> out;
  out.push_back(std::move(family));
  return out;
}

}  // namespace tierkv
