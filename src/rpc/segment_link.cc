#include "rpc/segment_link.h"

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include <deque>
#include <utility>
#include <vector>

#include "rpc/index_wire.h"
#include "rpc/remote_master.h"
#include "tierkv/master.grpc.pb.h"

namespace tierkv {
namespace {

rpc::TierMoveReply AnswerDemotes(const rpc::TierMoveRequest& request, TierMover& mover) {
  std::vector<DemoteItem> items;
  items.reserve(request.items_size());
  for (const rpc::TierMoveItem& in : request.items()) {
    items.push_back(DemoteItem{in.key(), in.offset(), in.size(), in.checksum()});
  }
  const std::vector<Result<DiskLocation>> done = mover.Demote(items);
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
      const Status st =
          i < done.size() ? done[i].status() : Status(ErrorCode::INTERNAL_ERROR, "no result");
      reply.add_codes(ToInt(st.code()));
      rpc::KeyMessage* m = reply.add_messages();
      m->set_index(static_cast<uint32_t>(i));
      m->set_message(st.message());
    }
  }
  return reply;
}

// The tier moves of one stream, answered on a thread of their own so that index batches (and
// their acknowledgments, which the master's puts may wait for) never queue behind a disk write.
class DemoteWorker {
 public:
  DemoteWorker(TierMover* mover, std::function<bool(const rpc::TierMoveReply&)> write)
      : mover_(mover), write_(std::move(write)), thread_([this] { Loop(); }) {}
  ~DemoteWorker() {
    {
      std::lock_guard lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void Push(rpc::TierMoveRequest request) {
    {
      std::lock_guard lock(mu_);
      queue_.push_back(std::move(request));
    }
    cv_.notify_all();
  }
  uint64_t answered() const { return answered_.load(); }

 private:
  void Loop() {
    std::unique_lock lock(mu_);
    while (true) {
      cv_.wait(lock, [&] { return done_ || !queue_.empty(); });
      if (queue_.empty()) return;  // done: requests not taken yet fail on the master's side
      rpc::TierMoveRequest request = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      rpc::TierMoveReply reply;
      if (mover_ != nullptr) {
        reply = AnswerDemotes(request, *mover_);
      } else {
        reply.set_request_id(request.request_id());
        for (int i = 0; i < request.items_size(); ++i) {
          reply.add_codes(ToInt(ErrorCode::UNAVAILABLE_IN_CURRENT_MODE));
          reply.add_locations();
        }
      }
      answered_.fetch_add(1);
      const bool written = write_(reply);
      lock.lock();
      if (!written) done_ = true;
    }
  }

  TierMover* const mover_;
  const std::function<bool(const rpc::TierMoveReply&)> write_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<rpc::TierMoveRequest> queue_;  // guarded by mu_
  bool done_ = false;                       // guarded by mu_
  std::atomic<uint64_t> answered_{0};
  std::thread thread_;
};

}  // namespace

SegmentLink::SegmentLink(RemoteMaster& master, uint64_t handle, SegmentLinkOptions options)
    : master_(master), handle_(handle), options_(std::move(options)) {
  runner_ = std::thread([this] { Run(); });
  watcher_ = std::thread([this] { Watch(); });
}

SegmentLink::~SegmentLink() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    if (context_ != nullptr) context_->TryCancel();
  }
  cv_.notify_all();
  runner_.join();
  watcher_.join();
}

void SegmentLink::Watch() {
  std::unique_lock lock(mu_);
  while (!cv_.wait_for(lock, Millis(50), [this] { return stop_; })) {
    if (context_ == nullptr) continue;
    // Re-mounted under another id (a master restart, a new leader, or an expiry): the stream
    // is bound to the old one; end it so Run opens one for the new id.
    const uint64_t segment = master_.CurrentSegmentId(static_cast<SegmentId>(handle_));
    if (segment != bound_segment_ || master_.client_id() != bound_client_) context_->TryCancel();
  }
}

void SegmentLink::Run() {
  bool logged_wait = false;
  bool reopening = false;
  while (true) {
    {
      std::unique_lock lock(mu_);
      if (stop_) return;
      if (reopening && options_.test.reopen_delay.count() > 0 &&
          cv_.wait_for(lock, options_.test.reopen_delay, [this] { return stop_; })) {
        return;
      }
    }
    const uint64_t segment = master_.CurrentSegmentId(static_cast<SegmentId>(handle_));
    const uint64_t client = master_.client_id();
    const std::shared_ptr<grpc::Channel> channel = master_.channel();
    grpc::ClientContext context;
    {
      std::lock_guard lock(mu_);
      if (stop_) return;
      context_ = &context;
      bound_segment_ = segment;
      bound_client_ = client;
    }
    bool served = false;
    if (segment != 0 && channel) {
      reopening = true;
      auto stub = rpc::Master::NewStub(channel);
      auto stream = stub->TierMoves(&context);
      std::mutex write_mu;
      auto write = [&](const rpc::TierMoveReply& message) {
        std::lock_guard lock(write_mu);
        return stream->Write(message);
      };
      rpc::TierMoveReply hello;
      hello.set_client_id(client);
      hello.set_segment_id(static_cast<uint32_t>(segment));
      hello.set_write_behind(options_.write_behind && options_.mover != nullptr);
      hello.set_has_index(options_.index != nullptr);
      hello.set_has_tier(options_.mover != nullptr);
      bool ok = write(hello);
      if (ok) opened_.fetch_add(1);
      if (ok && options_.index) {
        if (options_.test.wipe_before_report && opened_.load() > 1) {
          options_.index->TEST_WipeSegment();
        }
        // The report: what this store holds for the master to adopt (a new master) or check.
        const IndexReport report = options_.index->Report();
        size_t m = 0, d = 0;
        do {
          rpc::TierMoveReply chunk;
          rpc::IndexReport* out = chunk.mutable_report();
          if (m == 0 && d == 0) out->set_total(report.memory.size() + report.disk.size());
          for (size_t n = 0; n < kReportChunk && m < report.memory.size(); ++n, ++m) {
            wire::EncodeIndexEntry(report.memory[m], out->add_memory());
          }
          for (size_t n = out->memory_size(); n < kReportChunk && d < report.disk.size();
               ++n, ++d) {
            wire::EncodeIndexEntry(report.disk[d], out->add_disk());
          }
          out->set_last(m == report.memory.size() && d == report.disk.size());
          ok = write(chunk);
          if (ok && !out->last() && options_.test.report_chunk_delay.count() > 0) {
            std::this_thread::sleep_for(options_.test.report_chunk_delay);
          }
          if (out->last()) break;
        } while (ok);
        if (ok && !report.memory.empty()) {
          spdlog::info("segment {}: reported {} memory and {} disk entries of its index", segment,
                       report.memory.size(), report.disk.size());
        }
      }
      if (ok) {
        DemoteWorker worker(options_.mover.get(), write);
        rpc::TierMoveRequest request;
        while (stream->Read(&request)) {
          if (request.has_index()) {
            const IndexBatch batch = wire::DecodeIndexBatch(request.index());
            if (options_.index) options_.index->Apply(batch);
            batches_.fetch_add(1);
            if (!batch.more) {
              rpc::TierMoveReply ack;
              ack.set_index_ack(batch.seq);
              if (!write(ack)) break;
            }
            continue;
          }
          if (request.request_id() == 0) {
            // The master's first message: it linked the index and attached the tier.
            connected_.store(true);
            logged_wait = false;
            continue;
          }
          served = true;
          requests_.fetch_add(1);
          worker.Push(std::move(request));
        }
        connected_.store(false);
      }
      connected_.store(false);
      (void)stream->WritesDone();
      const grpc::Status status = stream->Finish();
      bool stopping;
      {
        std::lock_guard lock(mu_);
        stopping = stop_;
      }
      if (!stopping) {
        master_.Nudge();  // the master may be gone: let the heartbeat find out now
        if (!logged_wait) {
          spdlog::info("segment link {}: stream ended ({}: {}); re-opening", segment,
                       static_cast<int>(status.error_code()), status.error_message());
          logged_wait = !served;
        }
      }
    }
    {
      std::unique_lock lock(mu_);
      context_ = nullptr;
      if (cv_.wait_for(lock, options_.retry, [this] { return stop_; })) return;
    }
  }
}

}  // namespace tierkv
