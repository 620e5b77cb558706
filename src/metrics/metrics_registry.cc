#include "metrics/metrics_registry.h"

#include <algorithm>
#include <iterator>
#include <utility>

namespace tierkv {

void MetricsRegistry::Add(std::shared_ptr<prometheus::Collectable> collectable) {
  if (collectable == nullptr) return;
  std::lock_guard lock(mu_);
  collectables_.push_back(std::move(collectable));
}

void MetricsRegistry::Remove(const prometheus::Collectable* collectable) {
  std::lock_guard lock(mu_);
  std::erase_if(collectables_, [collectable](const auto& c) { return c.get() == collectable; });
}

std::vector<prometheus::MetricFamily> MetricsRegistry::Collect() const {
  std::lock_guard lock(mu_);
  std::vector<prometheus::MetricFamily> out;
  for (const auto& collectable : collectables_) {
    std::vector<prometheus::MetricFamily> families = collectable->Collect();
    out.insert(out.end(), std::make_move_iterator(families.begin()),
               std::make_move_iterator(families.end()));
  }
  return out;
}

}  // namespace tierkv
