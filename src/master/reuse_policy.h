// The "reuse" eviction policy: LRU whose ages are scaled by how likely an object of the same
// class is to be referenced again, as the master measured it.
//
// Why: on KV-cache traces LRU loses most to Belady on blocks that are never read again (most
// blocks: conversations end, a request's last partial chunk is rewritten by the next turn),
// while blocks that were already reused are reused again far more often (on the Mooncake
// conversation trace 26% of blocks referenced once are referenced again, 42% after two
// references, 84% after five). Scaling each candidate's age by its class's measured reuse
// probability, relative to that of a chunk referenced once, keeps reused blocks longer and drops
// one-off and tail chunks sooner, with no constant tuned to a trace (docs/benchmarks.md, "trace").
//
// Classes (ReuseClass): the object's reference count (references within one lease period count
// once: a lookup and the read after it are one use) and whether it is a *tail* — smaller than
// the chunk it extends, known when the put names its parent (ReplicateConfig::parent_keys).
// Objects without a hint are never tails: for them the policy is LRU scaled by reference counts
// only, and exactly LRU while the classes' measured probabilities are equal or too few
// (< kMinSamples objects per class).
//
// Measuring: ReuseTracker counts, per shard and class, objects that reached the class and those
// referenced again. An object evicted from memory leaves a *ghost* (key hash, reference count,
// tail) in its shard, at most as many ghosts as the shard has objects; a put of a ghost's key is
// a reference of the evicted object (so what eviction cuts short is still measured) and the new
// object continues its count.
//
// Thread-safety: ReuseEvictionPolicy is stateless. ReuseTracker's per-shard state is guarded by
// the corresponding ObjectTable shard mutex (callers hold it); Totals() reads the counters with
// relaxed atomics and needs no lock.
#pragma once

#include <absl/container/flat_hash_map.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "common/clock.h"
#include "master/eviction_policy.h"

namespace tierkv {

struct ObjectMeta;

class ReuseEvictionPolicy final : public EvictionPolicy {
 public:
  // A class's measured probability is used once this many objects reached it.
  static constexpr uint64_t kMinSamples = 64;
  // Scale factors are kept within [1/kMaxScale, kMaxScale].
  static constexpr double kMaxScale = 64;

  const char* name() const override { return "reuse"; }
  bool learns_reuse() const override { return true; }
  // Without counts: LRU.
  void Order(std::vector<EvictionCandidate>& candidates) const override;
  // Soft-pinned candidates last; the others by age / scale(class), largest first.
  void OrderWithReuse(std::vector<EvictionCandidate>& candidates, const ReuseCounts& counts,
                      SteadyTime now) const override;
  // scale(class) = P(reuse | class) / P(reuse | referenced once, not a tail); 1 without data.
  static std::array<double, kReuseClasses> Scales(const ReuseCounts& counts);
};

class ReuseTracker {
 public:
  // `lease_ttl`: references of one object closer together than this count once.
  ReuseTracker(uint32_t shards, Millis lease_ttl);

  // A new object (PutStart) in `shard`: continues the count of a ghost of the same key hash.
  void OnPut(uint32_t shard, uint64_t key_hash, bool tail, ObjectMeta& meta, SteadyTime now);
  // A read lease granted on `meta` (Exists, GetReplicas).
  void OnReference(uint32_t shard, ObjectMeta& meta, SteadyTime now);
  // `meta` leaves memory for good (evicted, not demoted); `shard_objects` bounds the ghosts.
  void OnEvict(uint32_t shard, uint64_t key_hash, const ObjectMeta& meta, size_t shard_objects);

  ReuseCounts Totals() const;
  size_t ghosts(uint32_t shard) const { return slots_[shard].ghosts.size(); }

 private:
  struct Ghost {
    uint32_t references;
    bool tail;
    uint64_t seq;  // matches the FIFO entry that created it
  };
  struct alignas(64) Slot {
    std::array<std::atomic<uint64_t>, kReuseClasses> reached{};
    std::array<std::atomic<uint64_t>, kReuseClasses> reused{};
    absl::flat_hash_map<uint64_t, Ghost> ghosts;
    std::deque<std::pair<uint64_t, uint64_t>> fifo;  // (key hash, seq), oldest first
    uint64_t next_seq = 0;
    uint64_t updates = 0;  // since the counters were last halved
  };
  static void Bump(std::atomic<uint64_t>& c) {
    // Written only under the shard's lock: no read-modify-write needed.
    c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }

  const Millis lease_ttl_;
  std::unique_ptr<Slot[]> slots_;
  const uint32_t shards_;
};

}  // namespace tierkv
