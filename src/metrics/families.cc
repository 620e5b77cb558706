#include "metrics/families.h"

#include <string>
#include <utility>

namespace tierkv {

prometheus::MetricFamily MakeFamily(const char* prefix, const char* name, const char* help,
                                    prometheus::MetricType type) {
  prometheus::MetricFamily family;
  family.name = std::string(prefix) + name;
  family.help = help;
  family.type = type;
  return family;
}

prometheus::ClientMetric SampleOf(prometheus::MetricType type, double value) {
  prometheus::ClientMetric metric;
  if (type == prometheus::MetricType::Counter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
  return metric;
}

void AddSample(std::vector<prometheus::MetricFamily>& out, const char* prefix, const char* name,
               const char* help, prometheus::MetricType type, uint64_t value) {
  prometheus::MetricFamily family = MakeFamily(prefix, name, help, type);
  family.metric.push_back(SampleOf(type, static_cast<double>(value)));
  out.push_back(std::move(family));
}

void AddTransferBytes(std::vector<prometheus::MetricFamily>& out, const char* prefix,
                      const char* help, const std::vector<TransferCount>& counts) {
  prometheus::MetricFamily family =
      MakeFamily(prefix, "transfer_bytes_total", help, prometheus::MetricType::Counter);
  for (const TransferCount& count : counts) {
    for (const auto& [direction, bytes] :
         {std::pair{"read", count.read_bytes}, std::pair{"write", count.written_bytes}}) {
      prometheus::ClientMetric sample =
          SampleOf(prometheus::MetricType::Counter, static_cast<double>(bytes));
      sample.label = {{"transport", count.transport}, {"direction", direction}};
      family.metric.push_back(std::move(sample));
    }
  }
  out.push_back(std::move(family));
}

}  // namespace tierkv
