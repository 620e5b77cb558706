#include "transport/ucx_segment_server.h"

#include <spdlog/spdlog.h>
#include <sys/eventfd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "transport/stage_inbox.h"
#include "transport/ucx_protocol.h"
#include "transport/ucx_worker.h"

namespace tierkv::transport {
namespace {

using Clock = std::chrono::steady_clock;

// Stop waits this long for cancelled transfers and endpoint closes to finish.
constexpr std::chrono::milliseconds kShutdownGrace{1000};
// While anything waits on a clock (a handshake deadline, a closing endpoint) the loop wakes at
// least this often.
constexpr int kUcxHousekeepingMs = 50;
// Connections beyond this are rejected at the listener.
constexpr size_t kMaxConnections = 4096;

}  // namespace

struct UcxSegmentServer::Loop {
  // One peer, from its connection request until its endpoint is closed and every transfer on it
  // has finished.
  struct Connection {
    Loop* loop = nullptr;
    ucp_ep_h ep = nullptr;
    std::string peer;  // the requester's address, for logs
    Clock::time_point accepted;
    bool established = false;  // hello answered with status 0
    bool closing = false;      // endpoint closed or about to be; nothing more is sent
    size_t in_flight = 0;      // UCX requests (sends, rendezvous receives) not yet completed
    ucs_status_ptr_t close_request = nullptr;  // the endpoint's close, until it completes
  };

  // A reply in flight, or a rendezvous receive followed by its reply. Owned by the UCX request
  // (freed by its callback), or freed at once when UCX completes immediately.
  struct Op {
    Connection* connection = nullptr;
    UcxReply reply;
    UcxHeader header{};                // must outlive the send
    std::shared_ptr<const void> hold;  // stage replies: keeps their staging space
  };

  // A reply decided inside a UCX callback, sent once the callback has returned.
  struct PendingReply {
    Connection* connection;
    UcxReply reply;
    const void* data;  // read replies: bytes of the segment; stage replies: of the staging buffer
    size_t length;
    std::shared_ptr<const void> hold = nullptr;
  };

  // A stage request back from the source with its staged bytes (or its error).
  struct StageJob {
    Connection* connection = nullptr;  // counted in its in_flight until the reply is queued
    uint64_t id = 0;
    uint64_t length = 0;
    std::string key;  // for the log
    transport::StagedRange staged;
  };
  using Inbox = StageInbox<StageJob>;  // stage_inbox.h

  std::shared_ptr<MemorySegment> segment;
  std::shared_ptr<StageSource> stages;  // null: stage requests are refused
  UcxTransportOptions options;
  std::string address;
  std::atomic<size_t>* open_endpoints = nullptr;
  std::atomic<uint64_t>* read_bytes = nullptr;     // served to requesters
  std::atomic<uint64_t>* written_bytes = nullptr;  // written into the segment
  std::unique_ptr<UcxWorker> worker;
  ucp_listener_h listener = nullptr;

  std::vector<std::unique_ptr<Connection>> connections;
  std::unordered_map<ucp_ep_h, Connection*> by_ep;  // open endpoints only
  std::vector<PendingReply> replies;
  struct ToClose {
    Connection* connection;
    std::string reason;  // for the log
    bool broke_protocol;
  };
  std::vector<ToClose> to_close;

  // Stage requests go to the source, which stages them off the progress thread and hands them
  // back through the inbox and the wake fd.
  std::shared_ptr<Inbox> inbox = std::make_shared<Inbox>();

  ~Loop() {
    inbox->Close();
    if (listener != nullptr) ucp_listener_destroy(listener);
  }

  void TakeStaged();  // on the progress thread: queue the replies

  bool InBounds(uint64_t offset, uint64_t length) const {
    return offset <= segment->size() && length <= segment->size() - offset;
  }

  // Marks `connection` for closing after the current UCX callback; further messages from it are
  // dropped. `reason` is logged: as a warning for a peer that broke the protocol, else as info.
  void Drop(Connection* connection, std::string reason, bool broke_protocol = false) {
    if (connection->closing) return;
    connection->closing = true;
    by_ep.erase(connection->ep);
    to_close.push_back({connection, std::move(reason), broke_protocol});
  }

  // Closes `connection` for a message that breaks the protocol.
  void Reject(Connection* connection, std::string reason) {
    Drop(connection, std::move(reason), /*broke_protocol=*/true);
  }

  void Reply(Connection* connection, UcxOp op, uint64_t id, ErrorCode status, uint64_t value,
             const void* data = nullptr, size_t length = 0) {
    UcxReply reply;
    reply.op = op;
    reply.id = id;
    reply.status = ToInt(status);
    reply.value = value;
    replies.push_back({connection, reply, data, length});
  }

  static void OnConnRequest(ucp_conn_request_h request, void* arg);
  static void OnEndpointError(void* arg, ucp_ep_h ep, ucs_status_t status);
  static ucs_status_t OnRequest(void* arg, const void* header, size_t header_length, void* data,
                                size_t length, const ucp_am_recv_param_t* param);
  static void OnSendDone(void* request, ucs_status_t status, void* user_data);
  static void OnReceiveDone(void* request, ucs_status_t status, size_t length, void* user_data);

  void Accept(ucp_conn_request_h request);
  void HandleRequest(Connection* connection, const UcxRequest& request, void* data, size_t length,
                     bool rendezvous);
  void SendReplies();
  void CloseMarked();
  void CheckHandshakes();
  void Reap();
  bool Waiting() const;  // anything that needs the housekeeping tick
  void Shutdown();
};

void UcxSegmentServer::Loop::OnConnRequest(ucp_conn_request_h request, void* arg) {
  static_cast<Loop*>(arg)->Accept(request);
}

void UcxSegmentServer::Loop::Accept(ucp_conn_request_h request) {
  ucp_conn_request_attr_t attr{};
  attr.field_mask = UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR;
  std::string peer = "?";
  if (ucp_conn_request_query(request, &attr) == UCS_OK) peer = DescribeAddress(attr.client_address);
  if (by_ep.size() >= kMaxConnections) {
    spdlog::warn("ucx segment server {}: rejecting {}: {} connections open", address, peer,
                 by_ep.size());
    ucp_listener_reject(listener, request);
    return;
  }
  auto connection = std::make_unique<Connection>();
  connection->loop = this;
  connection->peer = peer;
  connection->accepted = Clock::now();
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLER |
                      UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  params.conn_request = request;
  params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  params.err_handler.cb = &Loop::OnEndpointError;
  params.err_handler.arg = connection.get();
  ucp_ep_h ep = nullptr;
  const ucs_status_t status = ucp_ep_create(worker->get(), &params, &ep);
  if (status != UCS_OK) {
    spdlog::warn("ucx segment server {}: cannot accept {}: ucp_ep_create: {}", address, peer,
                 UcsReason(status));
    return;
  }
  connection->ep = ep;
  by_ep.emplace(ep, connection.get());
  connections.push_back(std::move(connection));
  open_endpoints->fetch_add(1, std::memory_order_relaxed);
}

void UcxSegmentServer::Loop::OnEndpointError(void* arg, ucp_ep_h /*ep*/, ucs_status_t status) {
  auto* connection = static_cast<Connection*>(arg);
  connection->loop->Drop(connection, "disconnected: " + UcsReason(status));
}

ucs_status_t UcxSegmentServer::Loop::OnRequest(void* arg, const void* header, size_t header_length,
                                               void* data, size_t length,
                                               const ucp_am_recv_param_t* param) {
  Loop* loop = static_cast<Loop*>(arg);
  if ((param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) == 0 || param->reply_ep == nullptr) {
    spdlog::warn("ucx segment server {}: dropped a request sent without a reply endpoint",
                 loop->address);
    return UCS_OK;  // nobody to answer; a rendezvous is dropped too
  }
  const auto it = loop->by_ep.find(param->reply_ep);
  if (it == loop->by_ep.end()) return UCS_OK;  // an endpoint being closed
  Connection* connection = it->second;
  Result<UcxRequest> request = DecodeUcxRequest(header, header_length);
  if (!request.ok()) {
    loop->Reject(connection, request.status().message());
    return UCS_OK;
  }
  loop->HandleRequest(connection, *request, data, length,
                      (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0);
  return UCS_OK;
}

void UcxSegmentServer::Loop::HandleRequest(Connection* connection, const UcxRequest& request,
                                           void* data, size_t length, bool rendezvous) {
  const uint64_t size = segment->size();
  switch (request.op) {
    case UcxOp::kChallenge:  // refused by DecodeUcxRequest; never reaches here
      return Reject(connection, "a challenge (the TCP transport's)");
    case UcxOp::kHello: {
      if (connection->established) return Reject(connection, "a second hello");
      if (rendezvous || length != request.length || length == 0 || length > kUcxMaxNameLength) {
        return Reject(connection, "hello with a name of " + std::to_string(length) +
                                      " bytes (announced " + std::to_string(request.length) +
                                      ", allowed 1.." + std::to_string(kUcxMaxNameLength) + ")");
      }
      const std::string name(static_cast<const char*>(data), length);
      if (name != segment->name()) {
        spdlog::info("ucx segment server {}: {} asked for segment '{}', this server has '{}'",
                     address, connection->peer, name, segment->name());
        return Reply(connection, request.op, request.id, ErrorCode::SEGMENT_NOT_FOUND, 0);
      }
      connection->established = true;
      Reply(connection, request.op, request.id, ErrorCode::OK, size);
      if (stages != nullptr) {
        replies.back().reply.aux = static_cast<uint32_t>(
            std::min<uint64_t>(stages->staging_capacity() / kUcxStagingUnit, UINT32_MAX));
      }
      return;
    }
    case UcxOp::kStage: {
      if (!connection->established) return Reject(connection, "a stage before the hello");
      if (rendezvous) return Reject(connection, "a stage descriptor sent by rendezvous");
      Result<UcxStageDescriptor> d = DecodeUcxStageDescriptor(data, length);
      if (!d.ok()) return Reject(connection, d.status().message());
      if (stages == nullptr) {
        return Reply(connection, request.op, request.id, ErrorCode::UNAVAILABLE_IN_CURRENT_MODE, 0);
      }
      if (request.length == 0 || request.offset > d->object_size ||
          request.length > d->object_size - request.offset) {
        return Reply(connection, request.op, request.id, ErrorCode::INVALID_PARAMS, 0);
      }
      StageRange range;
      range.key = std::move(d->key);
      range.location = DiskLocation{d->region, d->generation, d->record_offset, d->object_size};
      range.value_offset = request.offset;
      range.length = request.length;
      ++connection->in_flight;  // until its reply is queued
      StageDone done = [inbox = inbox, connection, id = request.id, length = request.length,
                        key = range.key](StagedRange staged) {
        inbox->Push(StageJob{connection, id, length, key, std::move(staged)});
      };
      stages->Submit(std::move(range), std::move(done));
      return;
    }
    case UcxOp::kRead: {
      if (!connection->established) return Reject(connection, "a read before the hello");
      if (length != 0) {
        return Reject(connection, "a read carrying " + std::to_string(length) + " data bytes");
      }
      if (!InBounds(request.offset, request.length)) {
        return Reply(connection, request.op, request.id, ErrorCode::INVALID_PARAMS, 0);
      }
      read_bytes->fetch_add(request.length, std::memory_order_relaxed);
      return Reply(connection, request.op, request.id, ErrorCode::OK, request.length,
                   segment->base() + request.offset, request.length);
    }
    case UcxOp::kWrite: {
      if (!connection->established) return Reject(connection, "a write before the hello");
      if (length != request.length) {
        return Reject(connection, "a write announcing " + std::to_string(request.length) +
                                      " bytes and carrying " + std::to_string(length));
      }
      if (!InBounds(request.offset, request.length)) {
        // Returning UCS_OK drops a rendezvous without fetching its bytes.
        return Reply(connection, request.op, request.id, ErrorCode::INVALID_PARAMS, 0);
      }
      uint8_t* target = segment->base() + request.offset;
      if (!rendezvous) {
        if (length != 0) std::memcpy(target, data, length);
        written_bytes->fetch_add(length, std::memory_order_relaxed);
        return Reply(connection, request.op, request.id, ErrorCode::OK, length);
      }
      auto* op = new Op;
      op->connection = connection;
      op->reply.op = request.op;
      op->reply.id = request.id;
      op->reply.value = length;
      ucp_request_param_t param{};
      param.op_attr_mask =
          UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_DATATYPE;
      param.cb.recv_am = &Loop::OnReceiveDone;
      param.user_data = op;
      param.datatype = ucp_dt_make_contig(1);
      ucs_status_ptr_t started = ucp_am_recv_data_nbx(worker->get(), data, target, length, &param);
      if (started == nullptr) {
        delete op;
        written_bytes->fetch_add(length, std::memory_order_relaxed);
        return Reply(connection, request.op, request.id, ErrorCode::OK, length);
      }
      if (UCS_PTR_IS_ERR(started)) {
        delete op;
        return Drop(connection, "receiving a write: " + UcsReason(UCS_PTR_STATUS(started)));
      }
      ++connection->in_flight;
      return;
    }
  }
}

void UcxSegmentServer::Loop::OnReceiveDone(void* request, ucs_status_t status, size_t /*length*/,
                                           void* user_data) {
  auto* op = static_cast<Op*>(user_data);
  Connection* connection = op->connection;
  --connection->in_flight;
  if (!connection->closing) {
    if (status == UCS_OK) {
      connection->loop->written_bytes->fetch_add(op->reply.value, std::memory_order_relaxed);
      connection->loop->Reply(connection, op->reply.op, op->reply.id, ErrorCode::OK,
                              op->reply.value);
    } else {
      connection->loop->Drop(connection, "receiving a write: " + UcsReason(status));
    }
  }
  ucp_request_free(request);
  delete op;
}

void UcxSegmentServer::Loop::OnSendDone(void* request, ucs_status_t status, void* user_data) {
  auto* op = static_cast<Op*>(user_data);
  --op->connection->in_flight;
  if (status == UCS_OK && op->reply.op == UcxOp::kStage) {
    op->connection->loop->read_bytes->fetch_add(op->reply.value, std::memory_order_relaxed);
  }
  if (status != UCS_OK && !op->connection->closing) {
    op->connection->loop->Drop(op->connection, "sending a reply: " + UcsReason(status));
  }
  ucp_request_free(request);
  delete op;
}

void UcxSegmentServer::Loop::SendReplies() {
  // Sending may run callbacks that queue more replies: take the queue first.
  std::vector<PendingReply> batch;
  batch.swap(replies);
  for (PendingReply& pending : batch) {
    Connection* connection = pending.connection;
    if (connection->closing) continue;
    auto* op = new Op;
    op->connection = connection;
    op->reply = pending.reply;
    op->header = EncodeUcxReply(pending.reply);
    op->hold = std::move(pending.hold);
    ucp_request_param_t param{};
    param.op_attr_mask =
        UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_DATATYPE;
    param.cb.send = &Loop::OnSendDone;
    param.user_data = op;
    param.datatype = ucp_dt_make_contig(1);
    ucs_status_ptr_t sent =
        ucp_am_send_nbx(connection->ep, kUcxReplyAmId, op->header.data(), op->header.size(),
                        pending.data, pending.length, &param);
    if (sent == nullptr) {
      if (op->reply.op == UcxOp::kStage) {
        read_bytes->fetch_add(op->reply.value, std::memory_order_relaxed);
      }
      delete op;
    } else if (UCS_PTR_IS_ERR(sent)) {
      delete op;
      Drop(connection, "sending a reply: " + UcsReason(UCS_PTR_STATUS(sent)));
    } else {
      ++connection->in_flight;
    }
  }
}

void UcxSegmentServer::Loop::TakeStaged() {
  for (StageJob& job : inbox->Take()) {
    Connection* connection = job.connection;
    --connection->in_flight;
    if (connection->closing) continue;  // the hold goes with the job
    if (!job.staged.status.ok()) {
      const ErrorCode code = job.staged.status.code();
      spdlog::debug("ucx segment server {}: staging {} for {}: {}", address, job.key,
                    connection->peer, job.staged.status.ToString());
      Reply(connection, UcxOp::kStage, job.id, code, 0);
      continue;
    }
    Reply(connection, UcxOp::kStage, job.id, ErrorCode::OK, job.length, job.staged.data,
          job.length);
    replies.back().hold = std::move(job.staged.hold);
  }
}

void UcxSegmentServer::Loop::CloseMarked() {
  std::vector<ToClose> batch;
  batch.swap(to_close);
  for (const auto& [connection, reason, broke_protocol] : batch) {
    spdlog::log(broke_protocol ? spdlog::level::warn : spdlog::level::info,
                "ucx segment server {}: closing the endpoint of {}: {}", address, connection->peer,
                reason);
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_EP_CLOSE_FLAG_FORCE;
    ucs_status_ptr_t request = ucp_ep_close_nbx(connection->ep, &param);
    if (UCS_PTR_IS_PTR(request)) connection->close_request = request;
    open_endpoints->fetch_sub(1, std::memory_order_relaxed);
  }
}

void UcxSegmentServer::Loop::CheckHandshakes() {
  const auto now = Clock::now();
  for (const auto& connection : connections) {
    if (!connection->established && !connection->closing &&
        now - connection->accepted > options.io_timeout) {
      Drop(connection.get(),
           "no hello within " + std::to_string(options.io_timeout.count()) + " ms");
    }
  }
}

void UcxSegmentServer::Loop::Reap() {
  std::erase_if(connections, [](const std::unique_ptr<Connection>& connection) {
    if (!connection->closing || connection->in_flight != 0) return false;
    if (connection->close_request != nullptr) {
      if (ucp_request_check_status(connection->close_request) == UCS_INPROGRESS) return false;
      ucp_request_free(connection->close_request);
      connection->close_request = nullptr;
    }
    return true;
  });
}

bool UcxSegmentServer::Loop::Waiting() const {
  return std::any_of(connections.begin(), connections.end(),
                     [](const std::unique_ptr<Connection>& connection) {
                       return !connection->established || connection->closing;
                     });
}

void UcxSegmentServer::Loop::Shutdown() {
  if (listener != nullptr) {
    ucp_listener_destroy(listener);
    listener = nullptr;
  }
  for (const auto& connection : connections) Drop(connection.get(), "the server is stopping");
  // What the source has queued fails at once; a batch it is reading finishes (its replies are
  // not sent), and one waiting for staging space gets it as the closes release the replies
  // holding it.
  if (stages != nullptr) {
    stages->FailQueued(Status(ErrorCode::TRANSFER_FAIL, "the segment server is stopping"));
  }
  const auto deadline = Clock::now() + kShutdownGrace;
  while (true) {
    TakeStaged();
    worker->ProgressAll();
    replies.clear();  // nothing more is sent
    CloseMarked();
    Reap();
    if (connections.empty() || Clock::now() >= deadline) break;
    worker->ProgressOrWait(0, kUcxHousekeepingMs);
  }
  if (!connections.empty()) {
    spdlog::warn("ucx segment server {}: {} endpoints still closing after {} ms; releasing UCX",
                 address, connections.size(), kShutdownGrace.count());
  }
  inbox->Close();  // later callbacks drop their ranges
}

Result<std::unique_ptr<UcxSegmentServer>> UcxSegmentServer::Start(
    std::shared_ptr<MemorySegment> segment, const std::string& host, int port,
    const UcxTransportOptions& options, std::shared_ptr<StageSource> stages) {
  using R = Result<std::unique_ptr<UcxSegmentServer>>;
  if (segment == nullptr) return R(ErrorCode::INVALID_PARAMS, "ucx segment server: no segment");
  if (host.empty()) return R(ErrorCode::INVALID_PARAMS, "ucx segment server: empty host");
  if (port < 0 || port > 65535) {
    return R(ErrorCode::INVALID_PARAMS,
             "ucx segment server: port " + std::to_string(port) + " outside 0..65535");
  }
  const std::string wanted = FormatHostPort(host, port);
  Result<SocketAddress> listen_at = ResolveHost(host, port, true, ErrorCode::TRANSFER_FAIL);
  if (!listen_at.ok()) {
    return R(listen_at.code(), "ucx segment server: " + listen_at.status().message());
  }

  auto loop = std::make_unique<Loop>();
  loop->segment = std::move(segment);
  loop->stages = std::move(stages);
  loop->options = options;
  loop->address = wanted;
  Result<std::unique_ptr<UcxWorker>> worker = UcxWorker::Create(options, "ucx segment server");
  if (!worker.ok()) return worker.status();
  loop->worker = std::move(worker).value();

  ucp_am_handler_param_t handler{};
  handler.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
                       UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
  handler.id = kUcxRequestAmId;
  handler.flags = UCP_AM_FLAG_WHOLE_MSG;
  handler.cb = &Loop::OnRequest;
  handler.arg = loop.get();
  ucs_status_t status = ucp_worker_set_am_recv_handler(loop->worker->get(), &handler);
  if (status != UCS_OK) {
    return R(ErrorCode::INTERNAL_ERROR,
             "ucx segment server: ucp_worker_set_am_recv_handler: " + UcsReason(status));
  }

  ucp_listener_params_t params{};
  params.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
  params.sockaddr.addr = listen_at->get();
  params.sockaddr.addrlen = listen_at->length;
  params.conn_handler.cb = &Loop::OnConnRequest;
  params.conn_handler.arg = loop.get();
  status = ucp_listener_create(loop->worker->get(), &params, &loop->listener);
  if (status != UCS_OK) {
    loop->listener = nullptr;
    return R(ErrorCode::TRANSFER_FAIL,
             "ucx segment server: cannot listen on " + wanted + ": " + UcsReason(status));
  }
  ucp_listener_attr_t attr{};
  attr.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
  status = ucp_listener_query(loop->listener, &attr);
  if (status != UCS_OK || PortOf(attr.sockaddr) <= 0) {
    return R(ErrorCode::INTERNAL_ERROR,
             "ucx segment server: ucp_listener_query on " + wanted + ": " + UcsReason(status));
  }
  loop->address = FormatHostPort(host, PortOf(attr.sockaddr));

  UniqueFd wake(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake.valid()) {
    return R(ErrorCode::INTERNAL_ERROR,
             std::string("ucx segment server: eventfd: ") + std::strerror(errno));
  }
  std::string address = loop->address;
  std::unique_ptr<UcxSegmentServer> server(
      new UcxSegmentServer(std::move(address), std::move(loop), std::move(wake)));
  server->loop_->open_endpoints = &server->open_endpoints_;
  server->loop_->read_bytes = &server->read_bytes_;
  server->loop_->written_bytes = &server->written_bytes_;
  server->protocol_ = options.protocol;
  server->loop_->inbox->wake_fd = server->wake_.get();
  try {
    server->thread_ = std::thread([raw = server.get()] { raw->Run(); });
  } catch (const std::system_error& error) {
    return R(ErrorCode::INTERNAL_ERROR,
             std::string("ucx segment server: cannot start its thread: ") + error.what());
  }
  spdlog::info("ucx segment server: serving segment '{}' ({} bytes) on {} over {}",
               server->loop_->segment->name(), server->loop_->segment->size(), server->address_,
               options.protocol);
  return server;
}

UcxSegmentServer::UcxSegmentServer(std::string address, std::unique_ptr<Loop> loop, UniqueFd wake)
    : address_(std::move(address)), loop_(std::move(loop)), wake_(std::move(wake)) {}

UcxSegmentServer::~UcxSegmentServer() { Stop(); }

void UcxSegmentServer::Run() {
  Loop& loop = *loop_;
  while (!stopping_.load(std::memory_order_acquire)) {
    const int timeout = loop.Waiting() ? kUcxHousekeepingMs : -1;
    loop.worker->ProgressOrWait(static_cast<int>(loop.options.spin.count()), timeout, wake_.get());
    uint64_t wakes = 0;  // drained, or the next wait would not block
    while (::read(wake_.get(), &wakes, sizeof(wakes)) < 0 && errno == EINTR) {
    }
    loop.TakeStaged();
    // Callbacks only queue work; act on it now that UCX is not inside one.
    while (!loop.replies.empty() || !loop.to_close.empty()) {
      loop.SendReplies();
      loop.CloseMarked();
      loop.worker->ProgressAll();
    }
    loop.CheckHandshakes();
    loop.CloseMarked();
    loop.Reap();
  }
  loop.Shutdown();
}

void UcxSegmentServer::Stop() {
  std::lock_guard<std::mutex> lock(stop_mu_);
  if (stopped_) return;
  stopped_ = true;
  stopping_.store(true, std::memory_order_release);
  const uint64_t one = 1;
  while (::write(wake_.get(), &one, sizeof(one)) < 0 && errno == EINTR) {
  }
  if (thread_.joinable()) thread_.join();
  loop_.reset();  // the listener, then the worker and context
  spdlog::info("ucx segment server {}: stopped", address_);
}

}  // namespace tierkv::transport
