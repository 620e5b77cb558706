// MasterService, the removals: Remove, BatchRemove, RemoveAll, RemoveByRegex and
// RemoveInNamespace, and the wait for the stores' indexes that removes and upserts make under
// confirm_index_updates (docs/architecture.md, "Surviving the master").
#include <re2/re2.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "common/key.h"
#include "master/master_service.h"
#include "master/replica_util.h"

namespace tierkv {
namespace {

Status UnconfirmedRemoval(const std::string& key, SegmentId segment, Millis waited) {
  return Status(ErrorCode::TRANSFER_FAIL,
                "removed " + key + ", but segment " + std::to_string(segment) +
                    " did not confirm within " + std::to_string(waited.count()) +
                    " ms (its store is unreachable from the master?): a master that takes over "
                    "may find the object again there");
}

}  // namespace

Status MasterService::Remove(const std::string& key, bool force) {
  return BatchRemove({key}, force)[0];
}

Status MasterService::RemoveOne(const std::string& key, bool force,
                                std::vector<SegmentId>* touched) {
  if (Status st = ValidateKey(key); !st.ok()) return st;
  Status result(ErrorCode::OBJECT_NOT_FOUND, key);
  // Not a std::optional: GCC 12 sees a maybe-uninitialized read in its inlined destructor.
  ObjectMeta removed;
  bool erased = false;
  uint32_t home = 0;
  const SteadyTime now = options_.clock->Now();
  table_.WithObject(key, [&](uint32_t idx, Shard& s, ObjectMeta& meta) {
    if (meta.state != ObjectState::kComplete || meta.next()) {
      result =
          Status(ErrorCode::REPLICA_IS_NOT_READY, "a put or upsert of " + key + " is in progress");
    } else if (!force && IsLeased(s, meta, now)) {
      result = Status(ErrorCode::OBJECT_HAS_LEASE, key + " is leased by a reader");
    } else if (HeldUntil(meta) > now) {
      result = Status(ErrorCode::OBJECT_HAS_LEASE,
                      key +
                          " was recovered from a store moments ago: readers may still hold "
                          "leases of the previous master");
    } else {
      home = idx;
      removed = table_.EraseLocked(s, s.objects.find(key));
      erased = true;
      result = Status::Ok();
    }
  });
  if (erased && !removed.group_id().empty()) table_.CleanupRedirect(key, home);
  if (erased) {
    removes_.fetch_add(1, std::memory_order_relaxed);
    for (const Replica& r : removed.replicas) touched->push_back(r.segment);
    removed = ObjectMeta();  // the frees (and disk drops) enter the stores' feeds now
  }
  return result;
}

std::vector<Status> MasterService::BatchRemove(const std::vector<std::string>& keys, bool force) {
  std::vector<Status> out;
  out.reserve(keys.size());
  std::vector<std::vector<SegmentId>> touched(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) out.push_back(RemoveOne(keys[i], force, &touched[i]));
  ConfirmIndexes(touched, out, [&](size_t i, SegmentId id) {
    return UnconfirmedRemoval(keys[i], id, options_.free_ack_wait);
  });
  return out;
}

void MasterService::ConfirmIndexes(const std::vector<std::vector<SegmentId>>& touched,
                                   std::vector<Status>& out,
                                   const std::function<Status(size_t, SegmentId)>& unconfirmed) {
  if (!options_.confirm_index_updates) return;
  std::vector<SegmentId> all;
  for (const auto& t : touched) all.insert(all.end(), t.begin(), t.end());
  if (all.empty()) return;
  const std::vector<SegmentId> late = AwaitIndexes(std::move(all));
  for (size_t i = 0; i < touched.size() && !late.empty(); ++i) {
    for (SegmentId id : touched[i]) {
      if (std::find(late.begin(), late.end(), id) == late.end()) continue;
      out[i] = unconfirmed(i, id);
      break;
    }
  }
}

std::vector<SegmentId> MasterService::AwaitIndexes(std::vector<SegmentId> segments) {
  std::sort(segments.begin(), segments.end());
  segments.erase(std::unique(segments.begin(), segments.end()), segments.end());
  const auto deadline = std::chrono::steady_clock::now() + options_.free_ack_wait;
  std::vector<SegmentId> late;
  for (SegmentId id : segments) {
    auto seg = segments_.Find(id);
    if (!seg) {  // unmounted meanwhile: an expired store may still be found by a new master
      late.push_back(id);
      continue;
    }
    if (!seg->feed) continue;  // no index: nothing to recover from
    const uint64_t seq = seg->feed->Barrier();
    const auto left =
        std::chrono::duration_cast<Millis>(deadline - std::chrono::steady_clock::now());
    if (seq == 0 || left.count() <= 0 || !seg->feed->WaitAckedThrough(seq, left)) {
      late.push_back(id);
    }
  }
  if (!late.empty()) {
    const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::steady_clock::now().time_since_epoch())
                            .count();
    int64_t last = last_unconfirmed_log_.load(std::memory_order_relaxed);
    if (now - last > 1000 &&
        last_unconfirmed_log_.compare_exchange_strong(last, now, std::memory_order_relaxed)) {
      spdlog::warn(
          "segment {} did not confirm an index update within {} ms (a removal or "
          "upsert reported TRANSFER_FAIL; its store is unreachable from the master?)",
          late.front(), options_.free_ack_wait.count());
    }
  }
  return late;
}

uint64_t MasterService::RemoveAll(bool force) {
  const SteadyTime now = options_.clock->Now();
  const uint64_t removed =
      EraseWhere(table_, [&](Shard& s, const StoredKey&, const ObjectMeta& meta) {
        return meta.state == ObjectState::kComplete && !meta.next() &&
               (force || !IsLeased(s, meta, now)) && HeldUntil(meta) <= now;
      });
  removes_.fetch_add(removed, std::memory_order_relaxed);
  return removed;
}

Result<uint64_t> MasterService::RemoveByRegex(const std::string& regex, bool force) {
  return RemoveMatching(nullptr, regex, force);
}

Result<uint64_t> MasterService::RemoveInNamespace(const std::string& key_namespace,
                                                  const std::string& regex, bool force) {
  return RemoveMatching(&key_namespace, regex, force);
}

Result<uint64_t> MasterService::RemoveMatching(const std::string* key_namespace,
                                               const std::string& regex, bool force) {
  // RE2: linear time and no recursion, so no expression a client sends can stall or overflow
  // the master's stack (std::regex can do both on 4 KiB keys).
  RE2::Options opts;
  opts.set_log_errors(false);
  const RE2 re(regex, opts);
  if (!re.ok()) {
    return Status(
        ErrorCode::INVALID_PARAMS,
        "remove_by_regex: '" + regex + "' is not a valid regular expression: " + re.error());
  }
  const SteadyTime now = options_.clock->Now();
  const uint64_t removed =
      EraseWhere(table_, [&](Shard& s, const StoredKey& key, const ObjectMeta& meta) {
        std::string_view rest = key.view();
        if (key_namespace != nullptr) {
          if (key_namespace->empty() ? (!rest.empty() && rest[0] == kKeyNamespaceMark)
                                     : !rest.starts_with(*key_namespace)) {
            return false;
          }
          rest.remove_prefix(key_namespace->size());
        }
        return meta.state == ObjectState::kComplete && !meta.next() &&
               (force || !IsLeased(s, meta, now)) && HeldUntil(meta) <= now &&
               RE2::PartialMatch(re2::StringPiece(rest.data(), rest.size()), re);
      });
  removes_.fetch_add(removed, std::memory_order_relaxed);
  return removed;
}

}  // namespace tierkv
