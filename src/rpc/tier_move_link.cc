#include "rpc/tier_move_link.h"

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include "rpc/remote_master.h"
#include "tierkv/master.grpc.pb.h"

namespace tierkv {

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
        while (stream->Read(&request)) {
          // The master's first message (an empty request) says it attached the tier.
          connected_.store(true);
          logged_wait = false;
          if (request.request_id() == 0) continue;
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
