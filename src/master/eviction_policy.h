// Eviction policy: orders eviction candidates, most evictable first.
//
// The master collects candidates (ungrouped objects, or whole groups) that are
// complete, unleased and not hard-pinned; the policy only orders them, so every
// guarantee of the core eviction (leases, pins, pending puts, whole groups, the
// watermarks) holds whatever the order. Implementations must be thread-safe for
// concurrent Order() calls (stateless ones trivially are).
//
// Policies by name (the master's `eviction_policy`): "lru" (the default) and "reuse"
// (src/master/reuse_policy.h: LRU whose ages are scaled by the reuse probability the master
// measures per class of object).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "tierkv/status.h"

namespace tierkv {

// Reuse classes: how often an object was referenced (1, 2, 3, 4, 5-8, 9-16, 17-32, 33+) and
// whether it is a tail (smaller than the chunk it extends: a request's last, partial chunk).
inline constexpr int kReuseRefBuckets = 8;
inline constexpr int kReuseClasses = 2 * kReuseRefBuckets;
int ReuseClass(uint32_t references, bool tail);

// Per reuse class, summed over the master's shards: objects that reached the class, and how
// many of them were referenced again (while stored, or put again soon after eviction).
struct ReuseCounts {
  std::array<uint64_t, kReuseClasses> reached{};
  std::array<uint64_t, kReuseClasses> reused{};
};

struct EvictionCandidate {
  uint32_t shard = 0;
  std::string name;  // the key, or the group id when is_group
  bool is_group = false;
  bool soft_pinned = false;  // any member soft-pinned
  SteadyTime last_access{};  // latest access over the members
  uint64_t bytes = 0;        // bytes freed on the segment under pressure
  uint8_t reuse_class = 0;   // ReuseClass of the object (of the most referenced member)
};

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;
  virtual const char* name() const = 0;
  // Reorders `candidates` so that the first should be evicted first.
  virtual void Order(std::vector<EvictionCandidate>& candidates) const = 0;
  // Whether the master should count references per object, keep ReuseCounts and remember
  // recently evicted keys for this policy (a few nanoseconds on each read and put).
  virtual bool learns_reuse() const { return false; }
  // Order() with what the master measured; policies that do not learn ignore it.
  virtual void OrderWithReuse(std::vector<EvictionCandidate>& candidates,
                              const ReuseCounts& /*counts*/, SteadyTime /*now*/) const {
    Order(candidates);
  }
};

// Least recently used first; soft-pinned candidates after all others.
class LruEvictionPolicy final : public EvictionPolicy {
 public:
  const char* name() const override { return "lru"; }
  void Order(std::vector<EvictionCandidate>& candidates) const override;
};

std::unique_ptr<EvictionPolicy> MakeDefaultEvictionPolicy();
// The policy called `name`; INVALID_PARAMS naming the known ones otherwise.
Result<std::shared_ptr<const EvictionPolicy>> MakeEvictionPolicy(std::string_view name);
bool IsEvictionPolicyName(std::string_view name);
// "\"lru\", \"reuse\"": for messages and --help.
std::string EvictionPolicyNames();

}  // namespace tierkv
