#include "rpc/tier_moves.h"

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include "rpc/remote_master.h"
#include "tierkv/master.grpc.pb.h"

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

// ---- TierMoveLink (owner side) --------------------------------------------------------------

TierMoveLink::TierMoveLink(RemoteMaster& master, uint64_t handle, std::shared_ptr<TierMover> local,
                           bool write_behind, Millis retry)
    : master_(master),
      handle_(handle),
      local_(std::move(local)),
      write_behind_(write_behind),
      retry_(retry) {
  runner_ = std::thread([this] { Run(); });
  watcher_ = std::thread([this] { Watch(); });
}

TierMoveLink::~TierMoveLink() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    if (context_ != nullptr) context_->TryCancel();
  }
  cv_.notify_all();
  runner_.join();
  watcher_.join();
}

void TierMoveLink::Watch() {
  std::unique_lock lock(mu_);
  while (!cv_.wait_for(lock, Millis(100), [this] { return stop_; })) {
    if (context_ == nullptr) continue;
    // Re-mounted under another id (the master restarted, or expired this client): the stream
    // is bound to the old one; end it so Run opens one for the new id.
    const uint64_t segment = master_.CurrentSegmentId(static_cast<SegmentId>(handle_));
    if (segment != bound_segment_ || master_.client_id() != bound_client_) context_->TryCancel();
  }
}

void TierMoveLink::Run() {
  auto stub = rpc::Master::NewStub(master_.channel());
  bool logged_wait = false;
  while (true) {
    {
      std::unique_lock lock(mu_);
      if (stop_) return;
    }
    const uint64_t segment = master_.CurrentSegmentId(static_cast<SegmentId>(handle_));
    const uint64_t client = master_.client_id();
    grpc::ClientContext context;
    {
      std::lock_guard lock(mu_);
      if (stop_) return;
      context_ = &context;
      bound_segment_ = segment;
      bound_client_ = client;
    }
    bool served = false;
    if (segment != 0) {
      auto stream = stub->TierMoves(&context);
      rpc::TierMoveReply hello;
      hello.set_client_id(client);
      hello.set_segment_id(static_cast<uint32_t>(segment));
      hello.set_write_behind(write_behind_);
      rpc::TierMoveRequest request;
      if (stream->Write(hello)) {
        opened_.fetch_add(1);
        connected_.store(true);
        logged_wait = false;
        while (stream->Read(&request)) {
          served = true;
          std::vector<DemoteItem> items;
          items.reserve(request.items_size());
          for (const rpc::TierMoveItem& in : request.items()) {
            items.push_back(DemoteItem{in.key(), in.offset(), in.size(), in.checksum()});
          }
          const std::vector<Result<DiskLocation>> done = local_->Demote(items);
          rpc::TierMoveReply reply;
          reply.set_request_id(request.request_id());
          for (size_t i = 0; i < items.size(); ++i) {
            rpc::DiskLocation* l = reply.add_locations();
            if (i < done.size() && done[i].ok()) {
              reply.add_codes(0);
              l->set_region(done[i]->region);
              l->set_generation(done[i]->generation);
              l->set_offset(done[i]->offset);
              l->set_size(done[i]->size);
            } else {
              const Status st = i < done.size() ? done[i].status()
                                                : Status(ErrorCode::INTERNAL_ERROR, "no result");
              reply.add_codes(ToInt(st.code()));
              rpc::KeyMessage* m = reply.add_messages();
              m->set_index(static_cast<uint32_t>(i));
              m->set_message(st.message());
            }
          }
          requests_.fetch_add(1);
          if (!stream->Write(reply)) break;
        }
      }
      connected_.store(false);
      (void)stream->WritesDone();
      const grpc::Status status = stream->Finish();
      bool stopping;
      {
        std::lock_guard lock(mu_);
        stopping = stop_;
      }
      if (!stopping && !logged_wait) {
        spdlog::info("tier moves for segment {}: stream ended ({}: {}); re-opening", segment,
                     static_cast<int>(status.error_code()), status.error_message());
        logged_wait = !served;
      }
    }
    {
      std::unique_lock lock(mu_);
      context_ = nullptr;
      if (cv_.wait_for(lock, retry_, [this] { return stop_; })) return;
    }
  }
}

}  // namespace tierkv
