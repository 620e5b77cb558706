#include "rpc/tier_moves.h"

#include <spdlog/spdlog.h>

namespace tierkv {

// ---- RemoteTierMover (master side) ----------------------------------------------------------

RemoteTierMover::RemoteTierMover(std::string owner, Millis timeout,
                                 std::function<bool(const rpc::TierMoveRequest&)> write)
    : owner_(std::move(owner)), timeout_(timeout), write_(std::move(write)) {}

RemoteTierMover::~RemoteTierMover() { Close("the mover was destroyed"); }

std::vector<Result<DiskLocation>> RemoteTierMover::Demote(const std::vector<DemoteItem>& items) {
  auto fail_all = [&](ErrorCode code, const std::string& why) {
    return std::vector<Result<DiskLocation>>(
        items.size(), Result<DiskLocation>(Status(code, "tier move to " + owner_ + ": " + why)));
  };
  if (items.empty()) return {};
  rpc::TierMoveRequest request;
  Waiter waiter;
  waiter.items = items.size();
  {
    std::lock_guard lock(mu_);
    if (closed_) return fail_all(ErrorCode::TRANSFER_FAIL, why_closed_);
    request.set_request_id(next_id_++);
    waiting_[request.request_id()] = &waiter;
  }
  for (const DemoteItem& item : items) {
    rpc::TierMoveItem* out = request.add_items();
    out->set_key(item.key);
    out->set_offset(item.offset);
    out->set_size(item.size);
    out->set_checksum(item.checksum);
  }
  bool written = false;
  {
    std::lock_guard write_lock(write_mu_);
    bool closed;
    {
      std::lock_guard lock(mu_);
      closed = closed_;
    }
    if (!closed) written = write_(request);
  }
  std::unique_lock lock(mu_);
  if (!written) {
    waiting_.erase(request.request_id());
    return fail_all(ErrorCode::TRANSFER_FAIL,
                    closed_ ? why_closed_ : std::string("the stream to the store broke"));
  }
  const bool answered = cv_.wait_for(lock, timeout_, [&] { return waiter.done; });
  waiting_.erase(request.request_id());
  if (!answered) {
    spdlog::warn(
        "tier move to {}: no answer within {} ms for {} objects; they count as not "
        "written",
        owner_, timeout_.count(), items.size());
    return fail_all(ErrorCode::TRANSFER_FAIL,
                    "no answer within " + std::to_string(timeout_.count()) + " ms");
  }
  return std::move(waiter.results);
}

void RemoteTierMover::Deliver(const rpc::TierMoveReply& reply) {
  std::lock_guard lock(mu_);
  auto it = waiting_.find(reply.request_id());
  if (it == waiting_.end()) {
    spdlog::warn("tier move from {}: an answer to no request in flight (id {}); ignored", owner_,
                 reply.request_id());
    return;
  }
  Waiter& w = *it->second;
  const size_t n = w.items;
  if (static_cast<size_t>(reply.codes_size()) != n ||
      static_cast<size_t>(reply.locations_size()) != n) {
    w.results.assign(
        n, Result<DiskLocation>(Status(
               ErrorCode::RPC_FAIL, "tier move from " + owner_ + ": an answer with " +
                                        std::to_string(reply.codes_size()) + " codes and " +
                                        std::to_string(reply.locations_size()) + " locations for " +
                                        std::to_string(n) + " objects")));
  } else {
    std::vector<std::string> messages(n);
    for (const rpc::KeyMessage& m : reply.messages()) {
      if (m.index() < n) messages[m.index()] = m.message();
    }
    w.results.clear();
    w.results.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      const int code = reply.codes(static_cast<int>(i));
      if (code != 0) {
        const auto error = code < 0 ? static_cast<ErrorCode>(code) : ErrorCode::RPC_FAIL;
        w.results.emplace_back(Status(error, "tier move on " + owner_ + ": " + messages[i]));
        continue;
      }
      const rpc::DiskLocation& l = reply.locations(static_cast<int>(i));
      w.results.emplace_back(DiskLocation{l.region(), l.generation(), l.offset(), l.size()});
    }
  }
  w.done = true;
  waiting_.erase(it);
  cv_.notify_all();
}

bool RemoteTierMover::Announce() {
  std::lock_guard write_lock(write_mu_);
  {
    std::lock_guard lock(mu_);
    if (closed_) return false;
  }
  return write_(rpc::TierMoveRequest());
}

void RemoteTierMover::Close(const std::string& why) {
  std::lock_guard write_lock(write_mu_);  // waits out a write in progress
  std::lock_guard lock(mu_);
  if (closed_) return;
  closed_ = true;
  why_closed_ = "the store's tier stream closed (" + why + ")";
  for (auto& [id, waiter] : waiting_) {
    waiter->results.assign(
        waiter->items, Result<DiskLocation>(Status(ErrorCode::TRANSFER_FAIL,
                                                   "tier move to " + owner_ + ": " + why_closed_)));
    waiter->done = true;
  }
  waiting_.clear();
  cv_.notify_all();
}

}  // namespace tierkv
