#include "master/eviction_policy.h"

#include <algorithm>

#include "master/reuse_policy.h"

namespace tierkv {

int ReuseClass(uint32_t references, bool tail) {
  int bucket = 0;
  if (references <= 4) {
    bucket = references == 0 ? 0 : static_cast<int>(references) - 1;
  } else {
    // 5-8 -> 4, 9-16 -> 5, 17-32 -> 6, 33+ -> 7
    bucket = std::min(kReuseRefBuckets - 1, 2 + (32 - __builtin_clz(references - 1)) - 1);
  }
  return bucket + (tail ? kReuseRefBuckets : 0);
}

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

bool IsEvictionPolicyName(std::string_view name) { return name == "lru" || name == "reuse"; }

std::string EvictionPolicyNames() { return "\"lru\", \"reuse\""; }

Result<std::shared_ptr<const EvictionPolicy>> MakeEvictionPolicy(std::string_view name) {
  if (name == "lru") return std::shared_ptr<const EvictionPolicy>(MakeDefaultEvictionPolicy());
  if (name == "reuse") return std::shared_ptr<const EvictionPolicy>(new ReuseEvictionPolicy());
  return Status(ErrorCode::INVALID_PARAMS, "unknown eviction policy \"" + std::string(name) +
                                               "\"; known: " + EvictionPolicyNames());
}

}  // namespace tierkv
