#include "master/segment_registry.h"

#include <algorithm>
#include <mutex>
#include <utility>

#include "tierkv/types.h"

namespace tierkv {

bool IsPreferred(const std::string& name, const std::string& preferred) {
  if (preferred.empty() || name.size() < preferred.size()) return false;
  if (name.compare(0, preferred.size(), preferred) != 0) return false;
  // "host:" names every segment of that host (their names start "host:pid:n").
  if (preferred.back() == ':') return true;
  return name.size() == preferred.size() || name[preferred.size()] == '@';
}

Segment::Segment(SegmentId id_in, std::string name_in, uint64_t capacity_in,
                 MountOptions options_in, std::chrono::microseconds index_linger)
    : id(id_in),
      name(std::move(name_in)),
      capacity(capacity_in),
      allocator(OffsetAllocator::Create(capacity_in)),
      options(options_in),
      feed(options_in.index_stream ? std::make_shared<SegmentFeed>(allocator, index_linger)
                                   : nullptr),
      held(options_in.index_stream) {
  if (feed) allocator->SetFence(feed);
}

Result<SegmentId> SegmentRegistry::Mount(const std::string& name, uint64_t capacity,
                                         MountOptions options) {
  if (name.empty()) return Status(ErrorCode::INVALID_PARAMS, "segment name is empty");
  if (capacity == 0) return Status(ErrorCode::INVALID_PARAMS, "segment '" + name + "' has size 0");
  std::unique_lock lock(mu_);
  for (const auto& [id, seg] : segments_) {
    if (seg->name == name) {
      return Status(ErrorCode::SEGMENT_ALREADY_EXISTS, "segment '" + name + "' already mounted");
    }
  }
  auto seg = std::make_shared<Segment>(next_id_++, name, capacity, options, index_linger_);
  segments_.emplace(seg->id, seg);
  return seg->id;
}

Status SegmentRegistry::Unmount(SegmentId id) {
  std::shared_ptr<const Segment> gone;
  {
    std::unique_lock lock(mu_);
    auto it = segments_.find(id);
    if (it == segments_.end()) {
      return Status(ErrorCode::SEGMENT_NOT_FOUND, "segment " + std::to_string(id) + " not mounted");
    }
    gone = std::move(it->second);
    segments_.erase(it);
  }
  if (gone->feed) gone->feed->Close();
  return Status::Ok();
}

bool SegmentRegistry::Release(SegmentId id) {
  auto seg = Find(id);
  if (!seg) return false;
  seg->held.store(false, std::memory_order_release);
  return true;
}

std::shared_ptr<const Segment> SegmentRegistry::Find(SegmentId id) const {
  std::shared_lock lock(mu_);
  auto it = segments_.find(id);
  return it == segments_.end() ? nullptr : it->second;
}

std::shared_ptr<const Segment> SegmentRegistry::FindByName(const std::string& name) const {
  std::shared_lock lock(mu_);
  for (const auto& [id, seg] : segments_) {
    if (seg->name == name) return seg;
  }
  return nullptr;
}

Result<std::vector<PlacedReplica>> SegmentRegistry::Allocate(uint64_t size, size_t replica_num,
                                                             const std::string& preferred_segment,
                                                             const std::vector<SegmentId>& excluded,
                                                             SteadyTime now,
                                                             std::string_view tenant) const {
  std::vector<std::shared_ptr<const Segment>> order;
  std::string pool;
  {
    std::shared_lock lock(mu_);
    // A tenant with dedicated segments mounted goes there only; otherwise to the shared ones.
    pool = PlacementPoolLocked(tenant);
    order.reserve(segments_.size());
    for (const auto& [id, seg] : segments_) {
      if (seg->held.load(std::memory_order_acquire)) continue;
      if (seg->options.tenant != pool) continue;
      if (std::find(excluded.begin(), excluded.end(), id) != excluded.end()) continue;
      order.push_back(seg);
    }
  }
  if (order.size() < replica_num) {
    return Status(
        ErrorCode::NO_AVAILABLE_HANDLE,
        "replica_num " + std::to_string(replica_num) + " > " + std::to_string(order.size()) +
            (pool.empty() ? std::string(" mounted segments")
                          : " mounted segments of tenant '" + pool + "'") +
            (excluded.empty() ? std::string()
                              : " this requester can reach (" + std::to_string(excluded.size()) +
                                    " unreachable from it)"));
  }
  // Reachable ones first, the preferred segment ahead of the others, then the freest.
  const int64_t now_ns = now.time_since_epoch().count();
  std::vector<bool> avoided(order.size());
  std::vector<std::pair<uint64_t, size_t>> free_space;
  free_space.reserve(order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    const auto& a = order[i]->allocator;
    free_space.emplace_back(a->capacity() - a->used() - a->quarantined(), i);
    avoided[i] = order[i]->unreachable_until_ns.load(std::memory_order_relaxed) > now_ns;
  }
  std::sort(free_space.begin(), free_space.end(), [&](const auto& x, const auto& y) {
    if (avoided[x.second] != avoided[y.second]) return !avoided[x.second];
    const bool px = IsPreferred(order[x.second]->name, preferred_segment);
    const bool py = IsPreferred(order[y.second]->name, preferred_segment);
    if (px != py) return px;
    return x.first > y.first;
  });
  std::vector<PlacedReplica> placed;
  placed.reserve(replica_num);
  for (const auto& [free, idx] : free_space) {
    if (placed.size() == replica_num) break;
    auto alloc = order[idx]->allocator->Allocate(size);
    if (alloc) placed.push_back(PlacedReplica{order[idx]->id, std::move(*alloc)});
  }
  if (placed.size() < replica_num) {
    return Status(ErrorCode::NO_AVAILABLE_HANDLE,
                  "no room for " + std::to_string(replica_num) + " replica(s) of " +
                      std::to_string(size) + " bytes" +
                      (pool.empty() ? std::string()
                                    : " in tenant '" + pool +
                                          "''s segments (its quota: what its stores give)"));
  }
  return placed;
}

std::string SegmentRegistry::PlacementPoolLocked(std::string_view tenant) const {
  if (tenant.empty()) return {};
  for (const auto& [id, seg] : segments_) {
    if (seg->options.tenant == tenant) return std::string(tenant);
  }
  return {};
}

std::string SegmentRegistry::PlacementPool(std::string_view tenant) const {
  std::shared_lock lock(mu_);
  return PlacementPoolLocked(tenant);
}

std::string_view TenantOfKey(std::string_view key) {
  if (key.empty() || key.front() != kKeyNamespaceMark) return {};
  const size_t end = key.find(kKeyNamespaceMark, 1);
  if (end == std::string_view::npos) return {};
  return key.substr(1, end - 1);
}

bool SegmentRegistry::MarkUnreachable(SegmentId id, SteadyTime until) {
  std::shared_ptr<const Segment> seg = Find(id);
  if (!seg) return false;
  seg->unreachable_until_ns.store(until.time_since_epoch().count(), std::memory_order_relaxed);
  return true;
}

std::vector<SegmentUsage> SegmentRegistry::Usage() const {
  std::shared_lock lock(mu_);
  std::vector<SegmentUsage> out;
  out.reserve(segments_.size());
  for (const auto& [id, seg] : segments_) {
    out.push_back(SegmentUsage{id, seg->name, seg->capacity, seg->allocator->used(),
                               seg->allocator->quarantined()});
  }
  return out;
}

bool SegmentRegistry::WaitForQuarantine(std::chrono::milliseconds timeout) const {
  std::vector<std::shared_ptr<const Segment>> waiting;
  {
    std::shared_lock lock(mu_);
    for (const auto& [id, seg] : segments_) {
      if (seg->feed && seg->feed->attached() && seg->allocator->quarantined() > 0) {
        waiting.push_back(seg);
      }
    }
  }
  if (waiting.empty()) return false;
  // A put is waiting: what the feeds gathered goes now, not after their linger.
  for (const auto& seg : waiting) seg->feed->Flush();
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  bool released = false;
  for (const auto& seg : waiting) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    released = seg->allocator->WaitForQuarantine(left) || released;
  }
  return released;
}

uint64_t SegmentRegistry::LargestCapacity() const {
  std::shared_lock lock(mu_);
  uint64_t largest = 0;
  for (const auto& [id, seg] : segments_) largest = std::max(largest, seg->allocator->capacity());
  return largest;
}

size_t SegmentRegistry::Count() const {
  std::shared_lock lock(mu_);
  return segments_.size();
}

}  // namespace tierkv
