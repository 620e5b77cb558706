#include "master/segment_feed.h"

#include <algorithm>
#include <iterator>
#include <utility>

namespace tierkv {

void SegmentFeed::Committed(IndexEntry entry) {
  bool wake = false;
  {
    std::lock_guard lock(mu_);
    if (!attached_) return;
    open_.commits.push_back(std::move(entry));
    wake = NoteEvent();
  }
  if (wake) cv_.notify_all();
}

void SegmentFeed::DiskAttached(IndexEntry entry) {
  bool wake = false;
  {
    std::lock_guard lock(mu_);
    if (!attached_) return;
    open_.disk_attached.push_back(std::move(entry));
    wake = NoteEvent();
  }
  if (wake) cv_.notify_all();
}

void SegmentFeed::DiskDropped(std::string key, const DiskLocation& location) {
  bool wake = false;
  {
    std::lock_guard lock(mu_);
    if (!attached_) return;
    open_.disk_dropped.push_back(DiskDrop{std::move(key), location});
    wake = NoteEvent();
  }
  if (wake) cv_.notify_all();
}

void SegmentFeed::Forgotten(uint64_t offset) {
  bool wake = false;
  {
    std::lock_guard lock(mu_);
    if (!attached_) return;  // the next stream's reconciliation forgets it (not in the table)
    open_.frees.push_back(offset);
    wake = NoteEvent();
  }
  if (wake) cv_.notify_all();
}

uint64_t SegmentFeed::OnFree(uint64_t offset, uint64_t /*size*/) {
  uint64_t ticket;
  bool wake = false;
  {
    std::lock_guard lock(mu_);
    if (closed_) return 0;  // unmounted: nobody will read the segment through this allocator
    // The open batch's number: the range is reusable once that batch is acknowledged. Without a
    // stream the event is not kept, but the next stream's first batch (seq >= this one) carries
    // the reconciliation, which forgets the range, and its acknowledgment releases it.
    if (open_.seq == 0) open_.seq = sent_ + 1;
    ticket = open_.seq;
    if (!attached_) return ticket;
    open_.frees.push_back(offset);
    wake = NoteEvent();
  }
  if (wake) cv_.notify_all();
  return ticket;
}

uint64_t SegmentFeed::Attach() {
  uint64_t generation;
  {
    std::lock_guard lock(mu_);
    // A stream still attached was superseded: its batches in flight settle like a detach's.
    acked_ = sent_;
    ClearOpen(open_.seq);
    attached_ = !closed_;
    generation = ++generation_;
  }
  cv_.notify_all();
  return generation;
}

void SegmentFeed::Prepend(uint64_t generation, IndexBatch delta) {
  {
    std::lock_guard lock(mu_);
    if (!attached_ || generation != generation_) return;
    auto front = [](auto& to, auto& from) {
      from.insert(from.end(), std::make_move_iterator(to.begin()),
                  std::make_move_iterator(to.end()));
      to.swap(from);
    };
    front(open_.commits, delta.commits);
    front(open_.disk_attached, delta.disk_attached);
    front(open_.frees, delta.frees);
    front(open_.disk_dropped, delta.disk_dropped);
    // Even an empty reconciliation is sent: its acknowledgment releases what was quarantined
    // while no stream was attached.
    if (open_.seq == 0) open_.seq = sent_ + 1;
    flush_ = true;  // the reconciliation goes at once
  }
  cv_.notify_all();
}

void SegmentFeed::ClearOpen(uint64_t seq) {
  open_ = IndexBatch();
  open_.seq = seq;
  pending_since_.reset();
  flush_ = false;
}

bool SegmentFeed::NoteEvent() {
  const bool first = !pending_since_.has_value();
  if (first) pending_since_ = std::chrono::steady_clock::now();
  return linger_.count() == 0 || first || open_.events() == kMaxEventsPerPart;
}

bool SegmentFeed::Ripe(SteadyTime now) const {
  if ((open_.empty() && open_.seq <= sent_) || sent_ - acked_ >= kWindow) return false;
  if (linger_.count() == 0 || flush_ || !pending_since_ || open_.events() >= kMaxEventsPerPart) {
    return true;
  }
  return now - *pending_since_ >= linger_;
}

std::optional<IndexBatch> SegmentFeed::Next(uint64_t generation, Millis timeout) {
  std::unique_lock lock(mu_);
  auto gone = [&] { return !attached_ || closed_ || generation != generation_; };
  const SteadyTime deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (gone()) return std::nullopt;
    const SteadyTime now = std::chrono::steady_clock::now();
    if (Ripe(now)) break;
    if (now >= deadline) return std::nullopt;
    SteadyTime wake = deadline;
    // Lingering: wake when the batch comes of age (events, acks and flushes notify).
    if (pending_since_ && sent_ - acked_ < kWindow) {
      wake = std::min(wake, *pending_since_ + linger_);
    }
    cv_.wait_until(lock, wake);
  }
  if (open_.seq <= sent_) open_.seq = sent_ + 1;
  IndexBatch out;
  if (open_.events() <= kMaxEventsPerPart) {
    out = std::move(open_);
    sent_ = out.seq;
    ClearOpen(0);
  } else {
    // A prefix in application order: commits, disk attaches, frees, disk drops.
    out.seq = open_.seq;
    out.more = true;
    size_t budget = kMaxEventsPerPart;
    auto take = [&budget](auto& from, auto& to) {
      const size_t n = std::min(budget, from.size());
      to.assign(std::make_move_iterator(from.begin()),
                std::make_move_iterator(from.begin() + static_cast<std::ptrdiff_t>(n)));
      from.erase(from.begin(), from.begin() + static_cast<std::ptrdiff_t>(n));
      budget -= n;
    };
    take(open_.commits, out.commits);
    take(open_.disk_attached, out.disk_attached);
    take(open_.frees, out.frees);
    take(open_.disk_dropped, out.disk_dropped);
  }
  lock.unlock();
  if (!out.more) batches_sent_.fetch_add(1, std::memory_order_relaxed);
  events_sent_.fetch_add(out.events(), std::memory_order_relaxed);
  return out;
}

void SegmentFeed::Acked(uint64_t generation, uint64_t seq) {
  {
    std::lock_guard lock(mu_);
    // Not this stream's, not a batch sent, or old news.
    if (generation != generation_ || !attached_ || seq > sent_ || seq <= acked_) return;
    acked_ = seq;
    confirmed_ = std::max(confirmed_, seq);
  }
  cv_.notify_all();
  // Without the feed's lock: Release takes the allocator's, and frees take ours first.
  if (auto allocator = allocator_.lock()) allocator->Release(seq);
}

void SegmentFeed::Detach(uint64_t generation) {
  {
    std::lock_guard lock(mu_);
    if (generation != generation_) return;  // superseded: the newer stream stays
    attached_ = false;
    // What was sealed but not acknowledged may or may not have been applied: the next stream's
    // reconciliation settles it. Its frees stay quarantined until then.
    acked_ = sent_;
    ClearOpen(open_.seq);
  }
  cv_.notify_all();
}

void SegmentFeed::Close() {
  {
    std::lock_guard lock(mu_);
    closed_ = true;
    attached_ = false;
    ClearOpen(0);
  }
  cv_.notify_all();
}

bool SegmentFeed::attached() const {
  std::lock_guard lock(mu_);
  return attached_;
}

bool SegmentFeed::WaitAcked(Millis timeout) {
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return acked_ >= sent_ && open_.empty(); });
}

uint64_t SegmentFeed::Barrier() {
  std::lock_guard lock(mu_);
  if (!attached_ || closed_) return 0;
  if (open_.empty()) return sent_;
  if (open_.seq <= sent_) open_.seq = sent_ + 1;
  flush_ = true;  // the caller waits for this batch: no lingering
  cv_.notify_all();
  return open_.seq;
}

void SegmentFeed::Flush() {
  {
    std::lock_guard lock(mu_);
    if (open_.empty() && open_.seq <= sent_) return;
    flush_ = true;
  }
  cv_.notify_all();
}

bool SegmentFeed::WaitAckedThrough(uint64_t seq, Millis timeout) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return confirmed_ >= seq || closed_; });
  return confirmed_ >= seq;
}

uint64_t SegmentFeed::acked_seq() const {
  std::lock_guard lock(mu_);
  return acked_;
}

}  // namespace tierkv
