#include "master/eviction_policy.h"

#include <algorithm>

namespace tierkv {

void LruEvictionPolicy::Order(std::vector<EvictionCandidate>& candidates) const {
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const EvictionCandidate& a, const EvictionCandidate& b) {
                     if (a.soft_pinned != b.soft_pinned) return !a.soft_pinned;
                     return a.last_access < b.last_access;
                   });
}

std::unique_ptr<EvictionPolicy> MakeDefaultEvictionPolicy() {
  return std::make_unique<LruEvictionPolicy>();
}

}  // namespace tierkv
