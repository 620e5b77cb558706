#include "transport/ucx_segment_client.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <limits>
#include <mutex>
#include <type_traits>
#include <utility>

#include "transport/piece_slice.h"
#include "transport/staged_load.h"
#include "transport/ucx_protocol.h"
#include "transport/ucx_worker.h"

namespace tierkv::transport {
namespace {

using Clock = std::chrono::steady_clock;

// Larger ranges go as several requests of at most this many bytes, so that a long transfer
// shows progress well within any io_timeout and shares the window with others.
constexpr uint64_t kMaxRequestBytes = uint64_t{16} << 20;
// UCX 1.13 moves an iov (several pieces in one message) through a slow packing path over tcp:
// 2 MiB objects in 4 pieces went at 0.86 GB/s as one iov each, 2.9 GB/s as 4 contiguous
// requests. So a piece of at least kContiguousPieceBytes is a request of its own, and a run of
// smaller pieces (up to kBounceBytes) is one contiguous request through a bounce buffer: gathered
// into it before a write is sent, scattered out of it when a read has arrived. Many small
// requests are slow too (64 KiB ones: ~1.5 GB/s), hence the threshold. At most kMaxBounceChunks
// bounce buffers per connection, allocated when first needed.
constexpr uint64_t kContiguousPieceBytes = uint64_t{512} << 10;
constexpr uint64_t kBounceBytes = uint64_t{2} << 20;
constexpr size_t kMaxBounceChunks = 8;
// How long closing the endpoint may take before the client gives up on a clean close.
constexpr int kCloseGraceMs = 1000;

}  // namespace

struct UcxSegmentClient::Impl {
  // One request of the call in progress (an op, or a part of a large one), from submission until
  // UCX has handed back every buffer it uses and the reply has been processed.
  struct Pending {
    Impl* impl = nullptr;
    UcxOp op = UcxOp::kRead;
    size_t op_index = 0;     // which op of the batch it serves
    uint64_t op_offset = 0;  // that op's range, for messages
    uint64_t op_total = 0;
    uint64_t id = 0;
    uint64_t offset = 0;  // this request's range
    uint64_t total = 0;
    const std::vector<MutPiece>* dst = nullptr;    // read: the op's pieces, or `dst_part`
    const std::vector<ConstPiece>* src = nullptr;  // write: the op's pieces, or `src_part`
    std::vector<MutPiece> dst_part;                // a part of a large op
    std::vector<ConstPiece> src_part;
    const std::string* name = nullptr;                 // hello
    const std::vector<uint8_t>* descriptor = nullptr;  // stage
    std::vector<ucp_dt_iov_t> iov;                     // several pieces (only when not bounced)
    bool bounced = false;       // several pieces, moved through a bounce buffer
    uint8_t* bounce = nullptr;  // that buffer, from submission to completion
    UcxHeader header{};         // must outlive the send
    bool submitted = false;
    bool sent = false;       // UCX finished the send (and released src)
    bool replied = false;    // the reply was processed
    bool receiving = false;  // a rendezvous receive into dst is in flight
    bool completed = false;  // all of the above, and counted out of in_flight
    bool failed = false;     // the connection failed under it
    uint64_t value = 0;      // the reply's value
    uint32_t aux = 0;        // hello: the reply's staging capacity field
    Status status;           // the server's refusal, or a local check's
  };

  std::string address;
  std::string segment_name;
  UcxTransportOptions options;
  uint64_t size = 0;
  uint64_t staging_capacity = 0;  // the server's, from the hello; 0: no SSD tier
  std::unique_ptr<UcxWorker> worker;

  // Serialises every use of the worker and of the fields below (UCX callbacks run inside
  // progress calls, which only run under it).
  mutable std::mutex mu;
  ucp_ep_h ep = nullptr;
  std::string failure;  // why the connection ended; empty while alive
  std::atomic<bool> alive{true};
  // The call in progress.
  std::vector<Pending>* batch = nullptr;
  uint64_t first_id = 0;
  uint64_t next_id = 1;
  size_t in_flight = 0;
  uint64_t in_flight_bytes = 0;
  Clock::time_point last_event;
  // Bounce buffers (kBounceBytes each) for runs of small pieces.
  std::vector<std::unique_ptr<uint8_t[]>> bounce_chunks;
  std::vector<uint8_t*> bounce_free;

  ~Impl() {
    std::lock_guard<std::mutex> lock(mu);
    CloseEndpoint(/*force=*/!alive.load());
    worker.reset();
  }

  // Ends the connection for good (the first cause is kept).
  void Fail(const std::string& why) {
    if (failure.empty()) failure = why;
    alive.store(false, std::memory_order_release);
  }

  std::string Describe(const Pending& p) const {
    if (p.op == UcxOp::kHello) {
      return "ucx connect to " + address + " (segment '" + segment_name + "')";
    }
    const std::string range =
        p.op_total <= ~p.op_offset
            ? "[" + std::to_string(p.op_offset) + ", " + std::to_string(p.op_offset + p.op_total) +
                  ")"
            : std::to_string(p.op_total) + " bytes at " + std::to_string(p.op_offset);
    if (p.op == UcxOp::kStage) {
      return "ucx staged load of value bytes " + range + " from the SSD tier of segment '" +
             segment_name + "' at " + address;
    }
    return std::string("ucx ") + (p.op == UcxOp::kRead ? "read of " : "write of ") + range +
           " of segment '" + segment_name + "' at " + address;
  }

  void CloseEndpoint(bool force) {
    if (ep == nullptr) return;
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    ucs_status_ptr_t request = ucp_ep_close_nbx(ep, &param);
    ep = nullptr;
    const ucs_status_t status = WaitRequest(*worker, request, kCloseGraceMs);
    if (status != UCS_OK && !force) {
      spdlog::debug("ucx segment client {}: closing: {}", address, UcsReason(status));
    }
  }

  void MaybeComplete(Pending& p) {
    if (p.completed || !p.submitted || !p.sent || !p.replied || p.receiving) return;
    p.completed = true;
    --in_flight;
    in_flight_bytes -= p.total;
    last_event = Clock::now();
    if (p.bounce != nullptr) {
      bounce_free.push_back(p.bounce);
      p.bounce = nullptr;
    }
  }

  // Gives `p` a bounce buffer if it needs one; false when all are in use.
  bool AcquireBounce(Pending& p) {
    if (!p.bounced || p.bounce != nullptr) return true;
    if (bounce_free.empty()) {
      if (bounce_chunks.size() == kMaxBounceChunks) return false;
      bounce_chunks.push_back(std::make_unique_for_overwrite<uint8_t[]>(kBounceBytes));
      bounce_free.push_back(bounce_chunks.back().get());
    }
    p.bounce = bounce_free.back();
    bounce_free.pop_back();
    return true;
  }

  void Submit(Pending& p);
  void StartReceive(Pending& p, void* descriptor);
  // Runs `pendings` to completion; fails the connection when nothing happens for `idle`.
  void Run(std::vector<Pending>& pendings, std::chrono::milliseconds idle);
  // Checks op `index` (its range and pieces) and appends its requests to `out`: one, already
  // completed, when it fails the checks or is empty; else one per large piece (or
  // kMaxRequestBytes of it) and one per run of small pieces (bounced when it has several).
  // `limit`: the end of the addressable range (the segment's size; for a stage, the object's);
  // `max_request`: the largest request (kMaxRequestBytes; for a stage, what fits the server's
  // staging budget).
  template <typename Piece>
  void AddOp(std::vector<Pending>& out, UcxOp op, size_t index, uint64_t offset,
             const std::vector<Piece>& pieces, uint64_t limit, uint64_t max_request);
  // Runs the requests of `count` ops and returns one status per op: its first failure, if any.
  // Runs the ops, failing them after `idle` without a reply (0: options.io_timeout).
  std::vector<Status> RunOps(std::vector<Pending>& pendings, size_t count,
                             std::chrono::milliseconds idle = {});

  static void OnEndpointError(void* arg, ucp_ep_h ep, ucs_status_t status);
  static ucs_status_t OnReply(void* arg, const void* header, size_t header_length, void* data,
                              size_t length, const ucp_am_recv_param_t* param);
  static void OnSendDone(void* request, ucs_status_t status, void* user_data);
  static void OnReceiveDone(void* request, ucs_status_t status, size_t length, void* user_data);
};

void UcxSegmentClient::Impl::OnEndpointError(void* arg, ucp_ep_h /*ep*/, ucs_status_t status) {
  static_cast<Impl*>(arg)->Fail("the connection failed: " + UcsReason(status));
}

void UcxSegmentClient::Impl::OnSendDone(void* request, ucs_status_t status, void* user_data) {
  auto& p = *static_cast<Pending*>(user_data);
  p.sent = true;
  if (status != UCS_OK) {
    p.failed = true;
    p.replied = true;  // no reply will come
    p.impl->Fail("sending a request failed: " + UcsReason(status));
  }
  ucp_request_free(request);
  p.impl->MaybeComplete(p);
}

void UcxSegmentClient::Impl::OnReceiveDone(void* request, ucs_status_t status, size_t /*length*/,
                                           void* user_data) {
  auto& p = *static_cast<Pending*>(user_data);
  p.receiving = false;
  if (status != UCS_OK) {
    p.failed = true;
    p.impl->Fail("receiving read data failed: " + UcsReason(status));
  } else if (p.bounce != nullptr) {
    ScatterCopy(p.bounce, *p.dst, /*hash=*/false);
  }
  ucp_request_free(request);
  p.impl->MaybeComplete(p);
}

ucs_status_t UcxSegmentClient::Impl::OnReply(void* arg, const void* header, size_t header_length,
                                             void* data, size_t length,
                                             const ucp_am_recv_param_t* param) {
  Impl* self = static_cast<Impl*>(arg);
  Result<UcxReply> reply = DecodeUcxReply(header, header_length);
  if (!reply.ok()) {
    self->Fail("protocol error: " + reply.status().message());
    return UCS_OK;
  }
  Pending* p = nullptr;
  if (self->batch != nullptr && reply->id >= self->first_id &&
      reply->id - self->first_id < self->batch->size()) {
    p = &(*self->batch)[reply->id - self->first_id];
  }
  if (p == nullptr || !p->submitted || p->replied || p->op != reply->op) {
    self->Fail("protocol error: a reply to no request in flight (id " + std::to_string(reply->id) +
               ")");
    return UCS_OK;
  }
  p->replied = true;
  self->last_event = Clock::now();
  const bool rendezvous = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
  if (reply->status != 0) {
    const auto code =
        reply->status < 0 ? static_cast<ErrorCode>(reply->status) : ErrorCode::TRANSFER_FAIL;
    std::string what = self->Describe(*p) +
                       ": the server refused: " + std::string(ErrorCodeName(code)) + " (" +
                       std::to_string(reply->status) + ")";
    if (code == ErrorCode::INVALID_PARAMS && p->op != UcxOp::kStage) {
      what += ": the range is outside its segment of " + std::to_string(self->size) + " bytes";
    } else if (code == ErrorCode::SEGMENT_NOT_FOUND) {
      what += ": it serves another segment";
    }
    p->status = Status(code, std::move(what));
    self->MaybeComplete(*p);
    return UCS_OK;  // drops a rendezvous, if any
  }
  p->value = reply->value;
  if (p->op == UcxOp::kHello) p->aux = reply->aux;
  if (p->op == UcxOp::kRead || p->op == UcxOp::kStage) {
    if (length != p->total || reply->value != p->total) {
      p->failed = true;
      self->Fail("protocol error: a read or stage reply of " + std::to_string(length) +
                 " bytes for " + std::to_string(p->total) + " asked");
    } else if (!rendezvous) {
      ScatterCopy(static_cast<const uint8_t*>(data), *p->dst, /*hash=*/false);
    } else {
      self->StartReceive(*p, data);
    }
  } else if (p->op == UcxOp::kWrite && reply->value != p->total) {
    p->failed = true;
    self->Fail("protocol error: the server wrote " + std::to_string(reply->value) + " of " +
               std::to_string(p->total) + " bytes");
  }
  self->MaybeComplete(*p);
  return UCS_OK;
}

void UcxSegmentClient::Impl::StartReceive(Pending& p, void* descriptor) {
  ucp_request_param_t param{};
  param.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_DATATYPE;
  param.cb.recv_am = &Impl::OnReceiveDone;
  param.user_data = &p;
  void* buffer = nullptr;
  size_t count = 0;
  if (p.bounce != nullptr) {
    p.iov.push_back(ucp_dt_iov_t{p.bounce, p.total});
  } else {
    for (const MutPiece& piece : *p.dst) {
      if (piece.size != 0) p.iov.push_back(ucp_dt_iov_t{piece.ptr, piece.size});
    }
  }
  if (p.iov.size() == 1) {
    param.datatype = ucp_dt_make_contig(1);
    buffer = p.iov[0].buffer;
    count = p.iov[0].length;
  } else {
    param.datatype = ucp_dt_make_iov();
    buffer = p.iov.data();
    count = p.iov.size();
  }
  ucs_status_ptr_t started = ucp_am_recv_data_nbx(worker->get(), descriptor, buffer, count, &param);
  if (UCS_PTR_IS_ERR(started)) {
    p.failed = true;
    Fail("receiving read data failed: " + UcsReason(UCS_PTR_STATUS(started)));
  } else if (started != nullptr) {
    p.receiving = true;
  }
}

void UcxSegmentClient::Impl::Submit(Pending& p) {
  p.submitted = true;
  ++in_flight;
  in_flight_bytes += p.total;
  UcxRequest request;
  request.op = p.op;
  request.id = p.id;
  request.offset = p.offset;
  request.length = p.total;
  p.header = EncodeUcxRequest(request);

  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                       UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_FLAGS;
  param.cb.send = &Impl::OnSendDone;
  param.user_data = &p;
  param.datatype = ucp_dt_make_contig(1);
  param.flags = UCP_AM_SEND_FLAG_REPLY;
  const void* buffer = nullptr;
  size_t count = 0;
  if (p.op == UcxOp::kHello) {
    param.flags |= UCP_AM_SEND_FLAG_EAGER;
    buffer = p.name->data();
    count = p.name->size();
  } else if (p.op == UcxOp::kStage) {
    param.flags |= UCP_AM_SEND_FLAG_EAGER;
    buffer = p.descriptor->data();
    count = p.descriptor->size();
  } else if (p.op == UcxOp::kWrite) {
    if (p.bounce != nullptr) {
      GatherCopy(p.bounce, *p.src, /*hash=*/false);
      p.iov.push_back(ucp_dt_iov_t{p.bounce, p.total});
    } else {
      for (const ConstPiece& piece : *p.src) {
        if (piece.size != 0) {
          p.iov.push_back(ucp_dt_iov_t{const_cast<void*>(piece.ptr), piece.size});
        }
      }
    }
    if (p.iov.size() == 1) {
      buffer = p.iov[0].buffer;
      count = p.iov[0].length;
    } else {
      param.datatype = ucp_dt_make_iov();
      buffer = p.iov.data();
      count = p.iov.size();
    }
  } else {
    param.flags |= UCP_AM_SEND_FLAG_EAGER;
  }
  if (ep == nullptr) {
    p.sent = p.replied = p.failed = true;
    MaybeComplete(p);
    return;
  }
  ucs_status_ptr_t sent =
      ucp_am_send_nbx(ep, kUcxRequestAmId, p.header.data(), p.header.size(), buffer, count, &param);
  if (sent == nullptr) {
    p.sent = true;
  } else if (UCS_PTR_IS_ERR(sent)) {
    p.sent = p.replied = p.failed = true;
    Fail("sending a request failed: " + UcsReason(UCS_PTR_STATUS(sent)));
  }
  MaybeComplete(p);
}

void UcxSegmentClient::Impl::Run(std::vector<Pending>& pendings, std::chrono::milliseconds idle) {
  batch = &pendings;
  first_id = next_id;
  next_id += pendings.size();
  in_flight = 0;
  in_flight_bytes = 0;
  last_event = Clock::now();
  for (size_t i = 0; i < pendings.size(); ++i) {
    pendings[i].impl = this;
    pendings[i].id = first_id + i;
  }
  size_t next = 0;
  while (true) {
    while (next < pendings.size() && failure.empty() && in_flight < kMaxInFlight &&
           (in_flight == 0 || in_flight_bytes + pendings[next].total <= kMaxInFlightBytes)) {
      Pending& p = pendings[next];
      if (!p.completed && !AcquireBounce(p)) break;  // all in use: one comes back on completion
      ++next;
      if (!p.completed) Submit(p);
    }
    if (!failure.empty() || (in_flight == 0 && next == pendings.size())) break;
    const auto idle_deadline = last_event + idle;
    if (Clock::now() >= idle_deadline) {
      Fail("no reply from the server within " + std::to_string(idle.count()) + " ms");
      break;
    }
    worker->ProgressOrWait(static_cast<int>(options.spin.count()),
                           std::min(MillisUntil(idle_deadline), 100));
  }
  if (!failure.empty()) {
    // Closing the endpoint cancels whatever UCX still does with the caller's buffers; wait for
    // it to hand them all back before returning.
    CloseEndpoint(/*force=*/true);
    const auto until = Clock::now() + std::chrono::milliseconds(kCloseGraceMs);
    auto busy = [&pendings] {
      return std::any_of(pendings.begin(), pendings.end(),
                         [](const Pending& p) { return p.submitted && (!p.sent || p.receiving); });
    };
    while (busy() && Clock::now() < until) worker->ProgressOrWait(0, 10);
    if (busy()) {
      spdlog::error("ucx segment client {}: UCX still holds request buffers {} ms after closing",
                    address, kCloseGraceMs);
    }
  }
  batch = nullptr;
}

template <typename Piece>
void UcxSegmentClient::Impl::AddOp(std::vector<Pending>& out, UcxOp op, size_t index,
                                   uint64_t offset, const std::vector<Piece>& pieces,
                                   uint64_t limit, uint64_t max_request) {
  uint64_t total = 0;
  bool null_piece = false;
  for (const Piece& piece : pieces) {
    if (piece.ptr == nullptr && piece.size != 0) null_piece = true;
    if (piece.size > std::numeric_limits<uint64_t>::max() - total) {
      total = std::numeric_limits<uint64_t>::max();
      break;
    }
    total += piece.size;
  }
  Pending first;
  first.op = op;
  first.op_index = index;
  first.op_offset = offset;
  first.op_total = total;
  if (null_piece) {
    first.status = Status(ErrorCode::INVALID_PARAMS, Describe(first) + ": a piece has no buffer");
  } else if (offset > limit || total > limit - offset) {
    first.status =
        Status(ErrorCode::INVALID_PARAMS, Describe(first) + ": the range is outside the " +
                                              (op == UcxOp::kStage ? "object" : "segment") +
                                              " of " + std::to_string(limit) + " bytes");
  } else if (max_request == 0 && staging_capacity == 0) {
    first.status = Status(ErrorCode::UNAVAILABLE_IN_CURRENT_MODE,
                          Describe(first) + ": the server has no SSD tier");
  } else if (max_request == 0) {
    first.status = Status(ErrorCode::OBJECT_TOO_LARGE,
                          Describe(first) + ": the server's staging buffer of " +
                              std::to_string(staging_capacity) + " bytes holds no range");
  }
  if (!first.status.ok() || total == 0) {
    first.completed = true;  // nothing to send
    out.push_back(std::move(first));
    return;
  }
  // Neighbouring pieces that are contiguous in memory are one piece: one request, no bounce
  // (2 MiB objects in 4 adjacent pieces: gets 2.5 GB/s as 4 requests, 2.8-3.0 as one).
  std::vector<Piece> merged;
  merged.reserve(pieces.size());
  for (const Piece& piece : pieces) {
    if (piece.size == 0) continue;
    if (!merged.empty() && static_cast<const uint8_t*>(merged.back().ptr) + merged.back().size ==
                               static_cast<const uint8_t*>(piece.ptr)) {
      merged.back().size += piece.size;
      continue;
    }
    merged.push_back(piece);
  }
  const bool as_given = merged.size() == pieces.size();
  // Parts, as (from, length) within the op: a piece of kContiguousPieceBytes or more goes as
  // requests of its own (none over max_request), a run of smaller neighbours (up to
  // kBounceBytes) as one, through a bounce buffer when it has more than one piece.
  const uint64_t run_max = std::min(kBounceBytes, max_request);
  struct Part {
    uint64_t from, length;
    bool bounced;
  };
  std::vector<Part> parts;
  uint64_t pos = 0, run_from = 0, run_length = 0;
  size_t run_pieces = 0;
  auto end_run = [&] {
    if (run_length != 0) parts.push_back(Part{run_from, run_length, run_pieces > 1});
    run_length = 0;
    run_pieces = 0;
  };
  for (const Piece& piece : merged) {
    if (piece.size >= kContiguousPieceBytes) {
      end_run();
      for (uint64_t done = 0; done < piece.size; done += max_request) {
        parts.push_back(Part{pos + done, std::min(max_request, piece.size - done), false});
      }
    } else if (piece.size > run_max) {
      end_run();  // a small piece, but over a small staging budget
      for (uint64_t done = 0; done < piece.size; done += run_max) {
        parts.push_back(Part{pos + done, std::min(run_max, piece.size - done), false});
      }
    } else if (piece.size != 0) {
      if (run_length + piece.size > run_max) end_run();
      if (run_length == 0) run_from = pos;
      run_length += piece.size;
      ++run_pieces;
    }
    pos += piece.size;
  }
  end_run();
  for (const auto& [from, length, bounced] : parts) {
    Pending& p = out.emplace_back(first);
    p.offset = offset + from;
    p.total = length;
    p.bounced = bounced;
    if (as_given && p.total == total) {
      if constexpr (std::is_same_v<Piece, MutPiece>) p.dst = &pieces;
      if constexpr (std::is_same_v<Piece, ConstPiece>) p.src = &pieces;
    } else {
      if constexpr (std::is_same_v<Piece, MutPiece>) p.dst_part = Slice(merged, from, length);
      if constexpr (std::is_same_v<Piece, ConstPiece>) p.src_part = Slice(merged, from, length);
    }
  }
}

std::vector<Status> UcxSegmentClient::Impl::RunOps(std::vector<Pending>& pendings, size_t count,
                                                   std::chrono::milliseconds idle) {
  for (Pending& p : pendings) {  // the vector no longer grows: point parts at their pieces
    if (!p.dst_part.empty()) p.dst = &p.dst_part;
    if (!p.src_part.empty()) p.src = &p.src_part;
  }
  if (idle.count() <= 0 || idle > options.io_timeout) idle = options.io_timeout;
  if (failure.empty()) Run(pendings, idle);
  std::vector<Status> out(count);
  for (Pending& p : pendings) {
    Status& result = out[p.op_index];
    if (!result.ok()) continue;  // the op's first failure stands
    if (!p.status.ok()) {
      result = std::move(p.status);
    } else if (!p.completed || p.failed) {
      result = Status(ErrorCode::TRANSFER_FAIL, Describe(p) + ": " + failure);
    }
  }
  return out;
}

Result<std::unique_ptr<UcxSegmentClient>> UcxSegmentClient::Connect(
    const std::string& address, const std::string& segment_name, std::chrono::milliseconds timeout,
    const UcxTransportOptions& options) {
  Result<HostPort> host_port = ParseHostPort(address, /*allow_zero=*/false);
  if (!host_port.ok()) return host_port.status();
  const std::string prefix = "ucx connect to " + address + " (segment '" + segment_name + "'): ";
  if (segment_name.empty() || segment_name.size() > kUcxMaxNameLength) {
    return Status(ErrorCode::INVALID_PARAMS,
                  prefix + "the segment name must have 1.." + std::to_string(kUcxMaxNameLength) +
                      " bytes, not " + std::to_string(segment_name.size()));
  }
  if (timeout.count() <= 0) {
    return Status(ErrorCode::INVALID_PARAMS, prefix + "the timeout must be positive");
  }
  Result<SocketAddress> remote =
      ResolveHost(host_port->host, host_port->port, /*passive=*/false, ErrorCode::TRANSFER_FAIL);
  if (!remote.ok()) return Status(remote.code(), prefix + remote.status().message());

  auto impl = std::make_unique<Impl>();
  impl->address = address;
  impl->segment_name = segment_name;
  impl->options = options;
  Result<std::unique_ptr<UcxWorker>> worker = UcxWorker::Create(options, "ucx segment client");
  if (!worker.ok()) return worker.status();
  impl->worker = std::move(worker).value();

  std::unique_lock<std::mutex> lock(impl->mu);
  ucp_am_handler_param_t handler{};
  handler.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
                       UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
  handler.id = kUcxReplyAmId;
  handler.flags = UCP_AM_FLAG_WHOLE_MSG;
  handler.cb = &Impl::OnReply;
  handler.arg = impl.get();
  ucs_status_t status = ucp_worker_set_am_recv_handler(impl->worker->get(), &handler);
  if (status != UCS_OK) {
    return Status(ErrorCode::INTERNAL_ERROR,
                  prefix + "ucp_worker_set_am_recv_handler: " + UcsReason(status));
  }

  status = ConnectEndpoint(*impl->worker, *remote, &Impl::OnEndpointError, impl.get(), &impl->ep);
  if (status != UCS_OK) {
    impl->ep = nullptr;
    return Status(ErrorCode::TRANSFER_FAIL, prefix + "ucp_ep_create: " + UcsReason(status));
  }

  std::vector<Impl::Pending> hello(1);
  hello[0].op = UcxOp::kHello;
  hello[0].name = &impl->segment_name;
  hello[0].total = segment_name.size();
  impl->Run(hello, timeout);
  if (!impl->failure.empty()) {
    return Status(ErrorCode::TRANSFER_FAIL, prefix + impl->failure +
                                                " (is a ucx segment server listening there, "
                                                "reachable over " +
                                                options.protocol + "?)");
  }
  if (!hello[0].status.ok()) return hello[0].status;
  impl->size = hello[0].value;
  impl->staging_capacity = uint64_t{hello[0].aux} * kUcxStagingUnit;
  lock.unlock();
  return std::unique_ptr<UcxSegmentClient>(new UcxSegmentClient(std::move(impl)));
}

UcxSegmentClient::UcxSegmentClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

UcxSegmentClient::~UcxSegmentClient() = default;

uint64_t UcxSegmentClient::size() const { return impl_->size; }
uint64_t UcxSegmentClient::staging_capacity() const { return impl_->staging_capacity; }
const std::string& UcxSegmentClient::address() const { return impl_->address; }
const std::string& UcxSegmentClient::segment_name() const { return impl_->segment_name; }

bool UcxSegmentClient::alive() const {
  if (!impl_->alive.load(std::memory_order_acquire)) return false;
  std::unique_lock<std::mutex> lock(impl_->mu, std::try_to_lock);
  if (lock.owns_lock()) impl_->worker->ProgressAll();
  return impl_->alive.load(std::memory_order_acquire);
}

namespace {

// UCX completes a batch's ops inside its progress loop, out of this code's sight: on_done hears
// of the successful ones when the batch ends.
std::vector<Status> Notify(std::vector<Status> done, const NetworkSegmentClient::OpDone& on_done) {
  if (on_done) {
    for (size_t i = 0; i < done.size(); ++i) {
      if (done[i].ok()) on_done(i);
    }
  }
  return done;
}

}  // namespace

std::vector<Status> UcxSegmentClient::ReadBatch(const std::vector<ReadOp>& ops,
                                                std::chrono::milliseconds idle,
                                                const OpDone& on_done) {
  std::vector<Impl::Pending> pendings;
  pendings.reserve(ops.size());
  std::lock_guard<std::mutex> lock(impl_->mu);
  for (size_t i = 0; i < ops.size(); ++i) {
    impl_->AddOp(pendings, UcxOp::kRead, i, ops[i].offset, ops[i].dst, impl_->size,
                 kMaxRequestBytes);
  }
  return Notify(impl_->RunOps(pendings, ops.size(), idle), on_done);
}

std::vector<Status> UcxSegmentClient::WriteBatch(const std::vector<WriteOp>& ops) {
  std::vector<Impl::Pending> pendings;
  pendings.reserve(ops.size());
  std::lock_guard<std::mutex> lock(impl_->mu);
  for (size_t i = 0; i < ops.size(); ++i) {
    impl_->AddOp(pendings, UcxOp::kWrite, i, ops[i].offset, ops[i].src, impl_->size,
                 kMaxRequestBytes);
  }
  return impl_->RunOps(pendings, ops.size());
}

std::vector<Status> UcxSegmentClient::StageBatch(const std::vector<StageOp>& ops,
                                                 double usable_ratio, const OpDone& on_done) {
  const uint64_t max_range =
      MaxStagedRange(usable_ratio, impl_->staging_capacity, kMaxRequestBytes);
  std::vector<std::vector<uint8_t>> descriptors(ops.size());
  std::vector<Impl::Pending> pendings;
  pendings.reserve(ops.size());
  std::lock_guard<std::mutex> lock(impl_->mu);
  for (size_t i = 0; i < ops.size(); ++i) {
    Result<std::vector<uint8_t>> descriptor = StageDescriptorFor(ops[i], "ucx");
    if (!descriptor.ok()) {
      Impl::Pending refused;
      refused.op = UcxOp::kStage;
      refused.op_index = i;
      refused.completed = true;
      refused.status = descriptor.status();
      pendings.push_back(std::move(refused));
      continue;
    }
    descriptors[i] = std::move(descriptor).value();
    const size_t first = pendings.size();
    impl_->AddOp(pendings, UcxOp::kStage, i, 0, ops[i].dst, ops[i].location.size, max_range);
    for (size_t k = first; k < pendings.size(); ++k) pendings[k].descriptor = &descriptors[i];
  }
  return Notify(impl_->RunOps(pendings, ops.size()), on_done);
}

}  // namespace tierkv::transport
