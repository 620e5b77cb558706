#include "master/reuse_policy.h"

#include <algorithm>
#include <chrono>

#include "master/object_table.h"

namespace tierkv {
namespace {

// A shard's counters are halved after this many updates, so the measured probabilities follow
// a workload that changes (the last few million references of the pool weigh most).
constexpr uint64_t kHalveEvery = uint64_t{1} << 20;
// What ObjectMeta keeps (a lease period each: years of references at any lease TTL).
constexpr uint32_t kMaxReferences = ObjectMeta::kMaxReuseReferences;

}  // namespace

void ReuseEvictionPolicy::Order(std::vector<EvictionCandidate>& candidates) const {
  LruEvictionPolicy().Order(candidates);
}

std::array<double, kReuseClasses> ReuseEvictionPolicy::Scales(const ReuseCounts& counts) {
  std::array<double, kReuseClasses> scale;
  scale.fill(1.0);
  const int base = ReuseClass(1, false);
  if (counts.reached[base] < kMinSamples || counts.reused[base] == 0) return scale;
  const double p_base =
      static_cast<double>(counts.reused[base]) / static_cast<double>(counts.reached[base]);
  for (int c = 0; c < kReuseClasses; ++c) {
    if (counts.reached[c] < kMinSamples) continue;
    const double p = static_cast<double>(counts.reused[c]) / static_cast<double>(counts.reached[c]);
    scale[c] = std::clamp(p / p_base, 1.0 / kMaxScale, kMaxScale);
  }
  return scale;
}

void ReuseEvictionPolicy::OrderWithReuse(std::vector<EvictionCandidate>& candidates,
                                         const ReuseCounts& counts, SteadyTime now) const {
  const std::array<double, kReuseClasses> scale = Scales(counts);
  std::vector<std::pair<double, size_t>> keyed(candidates.size());
  for (size_t i = 0; i < candidates.size(); ++i) {
    const EvictionCandidate& c = candidates[i];
    const double age = std::chrono::duration<double>(now - c.last_access).count();
    const double scaled = std::max(age, 0.0) / scale[c.reuse_class % kReuseClasses];
    // Soft-pinned candidates after all others, whatever their age.
    keyed[i] = {c.soft_pinned ? -1.0 / (1.0 + scaled) : scaled, i};
  }
  std::stable_sort(keyed.begin(), keyed.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<EvictionCandidate> ordered;
  ordered.reserve(candidates.size());
  for (const auto& [key, i] : keyed) ordered.push_back(std::move(candidates[i]));
  candidates = std::move(ordered);
}

ReuseTracker::ReuseTracker(uint32_t shards, Millis lease_ttl)
    : lease_ttl_(lease_ttl), slots_(new Slot[shards]), shards_(shards) {}

void ReuseTracker::OnPut(uint32_t shard, uint64_t key_hash, bool tail, ObjectMeta& meta,
                         SteadyTime now) {
  Slot& s = slots_[shard];
  uint32_t references = 1;
  auto g = s.ghosts.find(key_hash);
  if (g != s.ghosts.end()) {
    // The evicted object was wanted again: a reuse of its class, and its count goes on.
    Bump(s.reused[ReuseClass(g->second.references, g->second.tail)]);
    references = std::min(g->second.references + 1, kMaxReferences);
    s.ghosts.erase(g);
  }
  meta.reuse_references = references;
  meta.reuse_tail = tail;
  meta.reuse_until = now + lease_ttl_;
  Bump(s.reached[ReuseClass(references, tail)]);
  if (++s.updates >= kHalveEvery) {
    s.updates = 0;
    for (int c = 0; c < kReuseClasses; ++c) {
      s.reached[c].store(s.reached[c].load(std::memory_order_relaxed) / 2,
                         std::memory_order_relaxed);
      s.reused[c].store(s.reused[c].load(std::memory_order_relaxed) / 2, std::memory_order_relaxed);
    }
  }
}

void ReuseTracker::OnReference(uint32_t shard, ObjectMeta& meta, SteadyTime now) {
  // A lookup and the read after it, or readers of one prefix close together: one use.
  if (now < meta.reuse_until) return;
  Slot& s = slots_[shard];
  Bump(s.reused[ReuseClass(meta.reuse_references, meta.reuse_tail)]);
  meta.reuse_references =
      std::min(static_cast<uint32_t>(meta.reuse_references) + 1, kMaxReferences);
  Bump(s.reached[ReuseClass(meta.reuse_references, meta.reuse_tail)]);
  meta.reuse_until = now + lease_ttl_;
  ++s.updates;
}

void ReuseTracker::OnEvict(uint32_t shard, uint64_t key_hash, const ObjectMeta& meta,
                           size_t shard_objects) {
  Slot& s = slots_[shard];
  const uint64_t seq = s.next_seq++;
  s.ghosts[key_hash] = Ghost{static_cast<uint32_t>(meta.reuse_references), meta.reuse_tail, seq};
  s.fifo.emplace_back(key_hash, seq);
  auto live = [&](const std::pair<uint64_t, uint64_t>& entry) {
    auto it = s.ghosts.find(entry.first);
    return it != s.ghosts.end() && it->second.seq == entry.second;
  };
  // At most as many ghosts as objects: the oldest go (and FIFO entries of taken ghosts).
  const size_t bound = std::max<size_t>(shard_objects, 1);
  while (!s.fifo.empty() && (s.ghosts.size() > bound || !live(s.fifo.front()))) {
    if (live(s.fifo.front())) s.ghosts.erase(s.fifo.front().first);
    s.fifo.pop_front();
  }
}

ReuseCounts ReuseTracker::Totals() const {
  ReuseCounts out;
  for (uint32_t i = 0; i < shards_; ++i) {
    for (int c = 0; c < kReuseClasses; ++c) {
      out.reached[c] += slots_[i].reached[c].load(std::memory_order_relaxed);
      out.reused[c] += slots_[i].reused[c].load(std::memory_order_relaxed);
    }
  }
  return out;
}

}  // namespace tierkv
