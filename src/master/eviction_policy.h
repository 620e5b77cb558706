// Eviction policy: orders eviction candidates, most evictable first.
//
// The master collects candidates (ungrouped objects, or whole groups) that are
// complete, unleased and not hard-pinned; the policy only orders them. A
// prefix-aware policy (a later issue) plugs in here. Implementations must be
// thread-safe for concurrent Order() calls (stateless ones trivially are).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"

namespace tierkv {

struct EvictionCandidate {
  uint32_t shard = 0;
  std::string name;  // the key, or the group id when is_group
  bool is_group = false;
  bool soft_pinned = false;  // any member soft-pinned
  SteadyTime last_access{};  // latest access over the members
  uint64_t bytes = 0;        // bytes freed on the segment under pressure
};

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;
  virtual const char* name() const = 0;
  // Reorders `candidates` so that the first should be evicted first.
  virtual void Order(std::vector<EvictionCandidate>& candidates) const = 0;
};

// Least recently used first; soft-pinned candidates after all others.
class LruEvictionPolicy final : public EvictionPolicy {
 public:
  const char* name() const override { return "lru"; }
  void Order(std::vector<EvictionCandidate>& candidates) const override;
};

std::unique_ptr<EvictionPolicy> MakeDefaultEvictionPolicy();

}  // namespace tierkv
