#include "transport/tcp_segment_client.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <limits>
#include <mutex>
#include <type_traits>
#include <utility>

#include "common/errno_text.h"
#include "common/unique_fd.h"
#include "transport/piece_slice.h"
#include "transport/staged_load.h"
#include "transport/tcp_protocol.h"
#include "transport/tls_stream.h"
#include "transport/ucx_worker.h"

namespace tierkv::transport {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kMaxIov = 64;
// Read-ahead past the frame being received: many small replies in one recv, and the next
// reply's header read with the data of a read of at most kReadAheadMaxFrame bytes. Measured
// (paired, 2026-12-05): 64 KiB gets 1.06x with it, 256 KiB the same, 2 MiB gets 0.94x when it is
// on for them too (not explained; a syscall saved per 2 MiB is nothing to gain).
constexpr size_t kReadAheadBytes = 4096;
constexpr uint64_t kReadAheadMaxFrame = uint64_t{256} << 10;

// Fills `iov` with the pieces from byte `skip` on (at most `max` entries); returns the count.
template <typename Piece>
int IovFrom(const std::vector<Piece>& pieces, uint64_t skip, iovec* iov, int max) {
  int count = 0;
  for (const Piece& piece : pieces) {
    if (count == max) break;
    if (skip >= piece.size) {
      skip -= piece.size;
      continue;
    }
    iov[count++] = {const_cast<uint8_t*>(static_cast<const uint8_t*>(piece.ptr)) + skip,
                    static_cast<size_t>(piece.size - skip)};
    skip = 0;
  }
  return count;
}

// Copies `length` bytes from `src` into the pieces, from byte `skip` of them on.
void CopyIntoPieces(const std::vector<MutPiece>& pieces, uint64_t skip, const uint8_t* src,
                    uint64_t length) {
  for (const MutPiece& piece : pieces) {
    if (length == 0) break;
    if (skip >= piece.size) {
      skip -= piece.size;
      continue;
    }
    const uint64_t n = std::min<uint64_t>(piece.size - skip, length);
    std::memcpy(static_cast<uint8_t*>(piece.ptr) + skip, src, n);
    src += n;
    length -= n;
    skip = 0;
  }
}

// Reads the server's first frame, its challenge (tcp_protocol.h), by `deadline`; over TLS
// (`tls` not null) this runs the handshake too.
Status ReadChallenge(int fd, TlsStream* tls, Clock::time_point deadline, TokenDigest* nonce,
                     bool* required) {
  uint8_t frame[kTcpHeaderSize + kTcpProofBytes];
  size_t have = 0;
  while (have < sizeof(frame)) {
    const ssize_t n = tls ? tls->Read(frame + have, sizeof(frame) - have)
                          : recv(fd, frame + have, sizeof(frame) - have, MSG_DONTWAIT);
    if (n > 0) {
      const size_t before = have;
      have += static_cast<size_t>(n);
      if (before < kTcpHeaderSize && have >= kTcpHeaderSize) {
        Result<TcpReply> reply = DecodeTcpReply(frame);
        if (!reply.ok()) {
          return Status(ErrorCode::TRANSFER_FAIL, "protocol error: " + reply.status().message());
        }
        if (reply->op != UcxOp::kChallenge) {
          return Status(ErrorCode::TRANSFER_FAIL,
                        "protocol error: the server's first frame is not a challenge");
        }
        *required = reply->aux != 0;
      }
      continue;
    }
    if (n == 0)
      return Status(ErrorCode::TRANSFER_FAIL,
                    "the server closed the connection before its challenge");
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      if (tls != nullptr) {
        return Status(ErrorCode::TRANSFER_FAIL,
                      tls->error() +
                          " (a store without TLS on its data port, or a certificate "
                          "the data_tls_ca_file did not sign?)");
      }
      return Status(ErrorCode::TRANSFER_FAIL, "receiving the challenge: " + ErrnoText(errno));
    }
    const int wait = MillisUntil(deadline);
    if (wait <= 0) {
      return Status(ErrorCode::TRANSFER_FAIL,
                    tls != nullptr ? "no challenge from the server in time"
                                   : "no challenge from the server in time (a store with TLS on "
                                     "its data port? set data_tls_ca_file)");
    }
    pollfd p{fd, static_cast<short>(tls != nullptr && tls->wants_write() ? POLLOUT : POLLIN), 0};
    (void)::poll(&p, 1, wait);
  }
  std::memcpy(nonce->data(), frame + kTcpHeaderSize, kTcpProofBytes);
  return Status::Ok();
}

}  // namespace

struct TcpSegmentClient::Impl {
  struct Pending {
    UcxOp op = UcxOp::kRead;
    size_t op_index = 0;
    uint64_t op_offset = 0;  // the op's range, for messages
    uint64_t op_total = 0;
    uint64_t id = 0;
    uint64_t offset = 0;  // this request's range
    uint64_t total = 0;
    std::vector<MutPiece> dst;
    std::vector<ConstPiece> src;
    const std::string* name = nullptr;                 // hello
    const std::vector<uint8_t>* descriptor = nullptr;  // stage
    TcpHeader header{};                                // encoded when the request is started
    uint64_t send_total = 0;                           // header + data bytes
    bool header_sent = false;
    bool replied = false;
    bool completed = false;
    bool failed = false;
    uint64_t value = 0;
    uint32_t aux = 0;
    Status status;
  };

  std::string address;
  std::string segment_name;
  UcxTransportOptions options;
  uint64_t size = 0;
  uint64_t staging_capacity = 0;

  mutable std::mutex mu;
  UniqueFd fd;
  std::unique_ptr<TlsStream> tls;  // TLS on the data plane, else null
  std::string failure;             // why the connection ended; empty while alive
  std::atomic<bool> alive{true};
  uint64_t next_id = 1;

  void Fail(const std::string& why) {
    if (failure.empty()) failure = why;
    alive.store(false, std::memory_order_release);
    if (fd.valid()) ::shutdown(fd.get(), SHUT_RDWR);
  }

  std::string Describe(const Pending& p) const {
    if (p.op == UcxOp::kHello) {
      return "tcp connect to " + address + " (segment '" + segment_name + "')";
    }
    // fmt, not "[" + std::to_string(..): GCC 12 at -O3 reports that insert as an out-of-bounds
    // memcpy (a false positive of -Wstringop-overflow / -Warray-bounds).
    const std::string range = p.op_total <= ~p.op_offset
                                  ? fmt::format("[{}, {})", p.op_offset, p.op_offset + p.op_total)
                                  : fmt::format("{} bytes at {}", p.op_total, p.op_offset);
    if (p.op == UcxOp::kStage) {
      return "tcp staged load of value bytes " + range + " from the SSD tier of segment '" +
             segment_name + "' at " + address;
    }
    return std::string("tcp ") + (p.op == UcxOp::kRead ? "read of " : "write of ") + range +
           " of segment '" + segment_name + "' at " + address;
  }

  void Run(std::vector<Pending>& pendings, std::chrono::milliseconds idle,
           const NetworkSegmentClient::OpDone& on_done);
  template <typename Piece>
  void AddOp(std::vector<Pending>& out, UcxOp op, size_t index, uint64_t offset,
             const std::vector<Piece>& pieces, uint64_t limit, uint64_t max_request);
  // Runs the ops, failing them after `idle` without a reply (0: options.io_timeout).
  std::vector<Status> RunOps(std::vector<Pending>& pendings, size_t count,
                             std::chrono::milliseconds idle = {},
                             const NetworkSegmentClient::OpDone& on_done = {});
};

void TcpSegmentClient::Impl::Run(std::vector<Pending>& pendings, std::chrono::milliseconds idle,
                                 const NetworkSegmentClient::OpDone& on_done) {
  const uint64_t first_id = next_id;
  next_id += pendings.size();
  for (size_t i = 0; i < pendings.size(); ++i) pendings[i].id = first_id + i;
  size_t in_flight = 0;
  uint64_t in_flight_bytes = 0;
  size_t remaining = static_cast<size_t>(std::count_if(
      pendings.begin(), pendings.end(), [](const Pending& p) { return !p.completed; }));
  // For on_done: each op's requests not yet completed, and whether one of them failed.
  std::vector<size_t> op_left;
  std::vector<uint8_t> op_failed;
  if (on_done) {
    for (const Pending& p : pendings) {
      if (p.op_index >= op_left.size()) {
        op_left.resize(p.op_index + 1, 0);
        op_failed.resize(p.op_index + 1, 0);
      }
      if (!p.completed) ++op_left[p.op_index];
      if (p.completed && !p.status.ok()) op_failed[p.op_index] = 1;
    }
  }
  auto complete = [&](Pending& p) {
    if (p.completed) return;
    p.completed = true;
    --in_flight;
    --remaining;
    in_flight_bytes -= p.total;
    if (!on_done) return;
    if (!p.status.ok() || p.failed) op_failed[p.op_index] = 1;
    if (--op_left[p.op_index] == 0 && op_failed[p.op_index] == 0) on_done(p.op_index);
  };

  // Sending: requests [send_index, started_end) are started (in flight, headers encoded);
  // `send_pos` bytes of the first of them are written. One sendmsg carries as many of them as
  // fit in kMaxIov pieces: a syscall per batch of small requests, not per request.
  auto skip_completed = [&](size_t i) {
    while (i < pendings.size() && pendings[i].completed) ++i;
    return i;
  };
  size_t send_index = skip_completed(0);
  size_t started_end = send_index;
  uint64_t send_pos = 0;
  // Receiving: a reply header, then (reads, stages) its data into the request's pieces. `rx`
  // holds bytes read past the frame at hand (the next replies): one recv takes many small
  // replies, and a read's data is read together with the next reply's header.
  uint8_t reply_header[kTcpHeaderSize];
  size_t reply_have = 0;
  Pending* receiving = nullptr;
  uint64_t data_have = 0;
  uint8_t rx[kReadAheadBytes];
  size_t rx_begin = 0;
  size_t rx_end = 0;

  auto last_event = Clock::now();
  auto start_next = [&]() {
    while (started_end < pendings.size()) {
      Pending& p = pendings[started_end];
      if (in_flight != 0 &&
          (in_flight >= kMaxInFlight || in_flight_bytes + p.total > kMaxInFlightBytes)) {
        return;
      }
      TcpRequest request;
      request.op = p.op;
      request.id = p.id;
      request.offset = p.offset;
      request.length = p.op == UcxOp::kHello ? 0 : p.total;
      uint64_t data = 0;
      if (p.op == UcxOp::kHello) data = p.name->size();
      if (p.op == UcxOp::kWrite) data = p.total;
      if (p.op == UcxOp::kStage) data = p.descriptor->size();
      request.data_length = static_cast<uint32_t>(data);
      p.header = EncodeTcpRequest(request);
      p.send_total = kTcpHeaderSize + data;
      ++in_flight;
      in_flight_bytes += p.total;
      started_end = skip_completed(started_end + 1);
    }
  };
  auto sending = [&]() { return send_index < started_end; };
  auto outstanding = [&]() { return remaining != 0; };

  // One attempt to send; false when the socket would block (or the connection failed).
  auto try_send = [&]() -> bool {
    start_next();
    if (!sending()) return false;
    iovec iov[kMaxIov];
    int count = 0;
    uint64_t pos = send_pos;
    for (size_t i = send_index; i < started_end && count < kMaxIov; ++i, pos = 0) {
      Pending& p = pendings[i];
      // Completed before it was started (refused, or nothing to send): start_next stepped over
      // it, and so does the count of the bytes sent below.
      if (p.completed) continue;
      if (pos < kTcpHeaderSize) {
        iov[count++] = {p.header.data() + pos, static_cast<size_t>(kTcpHeaderSize - pos)};
        if (count == kMaxIov) break;
      }
      const uint64_t data_pos = pos > kTcpHeaderSize ? pos - kTcpHeaderSize : 0;
      if (p.op == UcxOp::kHello) {
        iov[count++] = {const_cast<char*>(p.name->data()) + data_pos, p.name->size() - data_pos};
      } else if (p.op == UcxOp::kStage) {
        iov[count++] = {const_cast<uint8_t*>(p.descriptor->data()) + data_pos,
                        p.descriptor->size() - data_pos};
      } else if (p.op == UcxOp::kWrite) {
        count += IovFrom(p.src, data_pos, iov + count, kMaxIov - count);
      }
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(count);
    const ssize_t n =
        tls ? tls->Write(iov, count) : sendmsg(fd.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) return true;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return false;
      Fail(tls ? tls->error() : "sending a request failed: " + ErrnoText(errno));
      return false;
    }
    last_event = Clock::now();
    // The bytes written cover the requests in order, as the pieces were laid out.
    uint64_t left = static_cast<uint64_t>(n);
    while (sending()) {
      Pending& p = pendings[send_index];
      const uint64_t take = std::min(left, p.send_total - send_pos);
      send_pos += take;
      left -= take;
      if (send_pos >= kTcpHeaderSize) p.header_sent = true;
      if (send_pos < p.send_total) break;
      send_pos = 0;
      send_index = skip_completed(send_index + 1);
    }
    return true;
  };

  auto on_reply = [&](const TcpReply& reply) {
    Pending* p = nullptr;
    if (reply.id >= first_id && reply.id - first_id < pendings.size()) {
      p = &pendings[reply.id - first_id];
    }
    if (p == nullptr || !p->header_sent || p->replied || p->completed || p->op != reply.op) {
      Fail("protocol error: a reply to no request in flight (id " + std::to_string(reply.id) + ")");
      return;
    }
    const bool fully_sent = static_cast<size_t>(p - pendings.data()) < send_index;
    if (!fully_sent) {
      Fail("protocol error: a reply to a request still being sent (id " + std::to_string(reply.id) +
           ")");
      return;
    }
    p->replied = true;
    if (reply.status != 0) {
      const auto code =
          reply.status < 0 ? static_cast<ErrorCode>(reply.status) : ErrorCode::TRANSFER_FAIL;
      std::string what = Describe(*p) +
                         ": the server refused: " + std::string(ErrorCodeName(code)) + " (" +
                         std::to_string(reply.status) + ")";
      if (code == ErrorCode::INVALID_PARAMS && p->op != UcxOp::kStage) {
        what += ": the range is outside its segment of " + std::to_string(size) + " bytes";
      } else if (code == ErrorCode::SEGMENT_NOT_FOUND) {
        what += ": it serves another segment";
      }
      p->status = Status(code, std::move(what));
      complete(*p);
      return;
    }
    p->value = reply.value;
    p->aux = reply.aux;
    if (p->op == UcxOp::kHello && reply.data_length != 0) {  // the server's proof
      p->total = reply.data_length;
      in_flight_bytes += p->total;
      receiving = p;
      data_have = 0;
      return;
    }
    if (p->op == UcxOp::kRead || p->op == UcxOp::kStage) {
      if (reply.value != p->total) {
        p->failed = true;
        Fail("protocol error: a read or stage reply of " + std::to_string(reply.value) +
             " bytes for " + std::to_string(p->total) + " asked");
        return;
      }
      receiving = p;
      data_have = 0;
      return;
    }
    if (p->op == UcxOp::kWrite && reply.value != p->total) {
      p->failed = true;
      Fail("protocol error: the server wrote " + std::to_string(reply.value) + " of " +
           std::to_string(p->total) + " bytes");
      return;
    }
    complete(*p);
  };

  // Acts on `rx`'s bytes: the rest of the data being received, then reply headers.
  auto take_buffered = [&]() {
    while (rx_begin < rx_end && failure.empty()) {
      if (receiving != nullptr) {
        const uint64_t take = std::min<uint64_t>(rx_end - rx_begin, receiving->total - data_have);
        CopyIntoPieces(receiving->dst, data_have, rx + rx_begin, take);
        rx_begin += take;
        data_have += take;
        if (data_have == receiving->total) {
          complete(*receiving);
          receiving = nullptr;
        }
        continue;
      }
      const size_t take = std::min(rx_end - rx_begin, kTcpHeaderSize - reply_have);
      std::memcpy(reply_header + reply_have, rx + rx_begin, take);
      rx_begin += take;
      reply_have += take;
      if (reply_have < kTcpHeaderSize) break;
      reply_have = 0;
      Result<TcpReply> reply = DecodeTcpReply(reply_header);
      if (!reply.ok()) {
        Fail("protocol error: " + reply.status().message());
        return;
      }
      on_reply(*reply);
    }
  };

  // One attempt to receive; false when nothing is there (or the connection failed).
  auto try_receive = [&]() -> bool {
    if (rx_begin < rx_end) {
      take_buffered();
      return failure.empty();
    }
    rx_begin = rx_end = 0;
    ssize_t n;
    uint64_t to_data = 0;  // of n, the bytes that went straight into `receiving`'s pieces
    if (receiving != nullptr && tls == nullptr) {
      iovec iov[kMaxIov + 1];
      int count = IovFrom(receiving->dst, data_have, iov, kMaxIov);
      uint64_t covered = 0;
      for (int i = 0; i < count; ++i) covered += iov[i].iov_len;
      // The next reply may follow in the same call only once the pieces take the whole rest.
      if (receiving->total <= kReadAheadMaxFrame && covered == receiving->total - data_have) {
        iov[count++] = {rx, sizeof(rx)};
      }
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = static_cast<size_t>(count);
      n = recvmsg(fd.get(), &msg, MSG_DONTWAIT);
      if (n > 0) to_data = std::min<uint64_t>(static_cast<uint64_t>(n), covered);
    } else if (receiving != nullptr) {
      iovec iov[1] = {{rx, 0}};
      IovFrom(receiving->dst, data_have, iov, 1);
      n = tls->Read(iov[0].iov_base, iov[0].iov_len);
      if (n > 0) to_data = static_cast<uint64_t>(n);
    } else {
      n = tls ? tls->Read(rx, sizeof(rx)) : recv(fd.get(), rx, sizeof(rx), MSG_DONTWAIT);
    }
    if (n == 0) {
      Fail("the server closed the connection");
      return false;
    }
    if (n < 0) {
      if (errno == EINTR) return true;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return false;
      Fail(tls ? tls->error() : "receiving failed: " + ErrnoText(errno));
      return false;
    }
    last_event = Clock::now();
    rx_end = static_cast<size_t>(static_cast<uint64_t>(n) - to_data);
    if (receiving != nullptr) {
      data_have += to_data;
      if (data_have == receiving->total) {
        complete(*receiving);
        receiving = nullptr;
      }
    }
    take_buffered();
    return failure.empty();
  };

  while (failure.empty() && outstanding()) {
    bool progressed = false;
    for (int round = 0; round < 64 && failure.empty(); ++round) {
      const bool sent = try_send();
      const bool received = failure.empty() && try_receive();
      if (!sent && !received) break;
      progressed = true;
    }
    if (!failure.empty() || !outstanding()) break;
    if (progressed) continue;
    const auto deadline = last_event + idle;
    if (Clock::now() >= deadline) {
      Fail("no reply from the server within " + std::to_string(idle.count()) + " ms");
      break;
    }
    start_next();
    if (tls && tls->Pending()) continue;  // decrypted bytes the socket no longer shows
    const bool out = sending() || (tls && tls->wants_write());
    pollfd p{fd.get(), static_cast<short>(POLLIN | (out ? POLLOUT : 0)), 0};
    const int rc = ::poll(&p, 1, std::min(MillisUntil(deadline), 100));
    (void)rc;  // EINTR and timeouts: loop, the deadline decides
  }
}

template <typename Piece>
void TcpSegmentClient::Impl::AddOp(std::vector<Pending>& out, UcxOp op, size_t index,
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
  std::vector<Piece> merged;  // neighbouring pieces contiguous in memory: one iov entry
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
  for (uint64_t from = 0; from < total; from += max_request) {
    Pending& p = out.emplace_back(first);
    p.offset = offset + from;
    p.total = std::min(max_request, total - from);
    if constexpr (std::is_same_v<Piece, MutPiece>) p.dst = Slice(merged, from, p.total);
    if constexpr (std::is_same_v<Piece, ConstPiece>) p.src = Slice(merged, from, p.total);
  }
}

std::vector<Status> TcpSegmentClient::Impl::RunOps(std::vector<Pending>& pendings, size_t count,
                                                   std::chrono::milliseconds idle,
                                                   const NetworkSegmentClient::OpDone& on_done) {
  if (idle.count() <= 0 || idle > options.io_timeout) idle = options.io_timeout;
  if (failure.empty()) Run(pendings, idle, on_done);
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

Result<std::unique_ptr<TcpSegmentClient>> TcpSegmentClient::Connect(
    const std::string& address, const std::string& segment_name, std::chrono::milliseconds timeout,
    const UcxTransportOptions& options) {
  Result<HostPort> host_port = ParseHostPort(address, /*allow_zero=*/false);
  if (!host_port.ok()) return host_port.status();
  const std::string prefix = "tcp connect to " + address + " (segment '" + segment_name + "'): ";
  if (segment_name.empty() || segment_name.size() > kUcxMaxNameLength) {
    return Status(ErrorCode::INVALID_PARAMS,
                  prefix + "the segment name must have 1.." + std::to_string(kUcxMaxNameLength) +
                      " bytes, not " + std::to_string(segment_name.size()));
  }
  if (timeout.count() <= 0) {
    return Status(ErrorCode::INVALID_PARAMS, prefix + "the timeout must be positive");
  }
  if (options.io_timeout.count() <= 0) {
    return Status(ErrorCode::INVALID_CONFIG, prefix + "io_timeout must be positive");
  }
  Result<SocketAddress> remote =
      ResolveHost(host_port->host, host_port->port, /*passive=*/false, ErrorCode::TRANSFER_FAIL);
  if (!remote.ok()) return Status(remote.code(), prefix + remote.status().message());

  auto impl = std::make_unique<Impl>();
  impl->address = address;
  impl->segment_name = segment_name;
  impl->options = options;
  impl->fd =
      UniqueFd(::socket(remote->storage.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!impl->fd.valid())
    return Status(ErrorCode::INTERNAL_ERROR, prefix + "socket: " + ErrnoText(errno));
  const int one = 1;
  setsockopt(impl->fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  setsockopt(impl->fd.get(), SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  const auto deadline = Clock::now() + timeout;
  if (::connect(impl->fd.get(), remote->get(), remote->length) != 0) {
    if (errno != EINPROGRESS) {
      return Status(ErrorCode::TRANSFER_FAIL, prefix + "connect: " + ErrnoText(errno) +
                                                  " (is a tierkv store serving tcp there?)");
    }
    pollfd p{impl->fd.get(), POLLOUT, 0};
    int rc;
    do {
      rc = ::poll(&p, 1, MillisUntil(deadline));
    } while (rc < 0 && errno == EINTR);
    if (rc == 0) {
      return Status(ErrorCode::TRANSFER_FAIL,
                    prefix + "no connection within " + std::to_string(timeout.count()) + " ms");
    }
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(impl->fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      return Status(ErrorCode::TRANSFER_FAIL, prefix + "connect: " + ErrnoText(err) +
                                                  " (is a tierkv store serving tcp there?)");
    }
  }
  std::lock_guard<std::mutex> lock(impl->mu);
  // The server's challenge, then the hello that proves the token over its nonce.
  TokenDigest nonce{};
  bool token_required = false;
  if (options.tls_client != nullptr) {
    auto tls = TlsStream::Open(options.tls_client, impl->fd.get(), host_port->host);
    if (!tls.ok()) return Status(tls.code(), prefix + tls.status().message());
    impl->tls = std::move(tls).value();
  }
  if (Status st = ReadChallenge(impl->fd.get(), impl->tls.get(), deadline, &nonce, &token_required);
      !st.ok()) {
    return Status(st.code(), prefix + st.message() + " (is a tierkv store serving tcp there?)");
  }
  const std::string secret = options.tokens ? options.tokens->own() : std::string();
  if (token_required && secret.empty()) {
    return Status(ErrorCode::UNAUTHENTICATED,
                  prefix +
                      "the store requires the cluster token and this process has none "
                      "(config key cluster_token_file, or --token-file)");
  }
  const TokenDigest proof = secret.empty()
                                ? TokenDigest{}
                                : TokenMac(secret, {kTcpHelloLabel, AsView(nonce), segment_name});
  std::string hello_data(reinterpret_cast<const char*>(proof.data()), proof.size());
  hello_data += impl->segment_name;
  TokenDigest server_proof{};
  std::vector<Impl::Pending> hello(1);
  hello[0].op = UcxOp::kHello;
  hello[0].name = &hello_data;
  hello[0].total = 0;
  hello[0].dst = {MutPiece{server_proof.data(), server_proof.size()}};
  impl->Run(hello,
            std::chrono::duration_cast<std::chrono::milliseconds>(
                std::max(deadline - Clock::now(), Clock::duration(1))),
            {});
  // The refusal comes before the server closes the connection: it decides over the failure.
  if (hello[0].status.code() == ErrorCode::UNAUTHENTICATED) {
    return Status(ErrorCode::UNAUTHENTICATED,
                  prefix +
                      "the store refused this process's cluster token (another cluster's, "
                      "or a token it no longer accepts)");
  }
  if (!impl->failure.empty()) {
    return Status(ErrorCode::TRANSFER_FAIL,
                  prefix + impl->failure + " (is a tierkv store serving tcp there?)");
  }
  if (!hello[0].status.ok()) return hello[0].status;
  if (!secret.empty()) {
    // Mutual: a listener that does not hold the token must not receive this process's bytes.
    if (hello[0].total != kTcpProofBytes) {
      return Status(ErrorCode::UNAUTHENTICATED,
                    prefix +
                        "the server does not check the cluster token (a store started "
                        "without one, or not a member of this cluster); refused");
    }
    const TokenDigest expected = TokenMac(secret, {kTcpServerLabel, AsView(nonce), AsView(proof)});
    if (!DigestsEqual(expected, server_proof)) {
      return Status(ErrorCode::UNAUTHENTICATED,
                    prefix +
                        "the server's proof of the cluster token is wrong (another "
                        "cluster's store?); refused");
    }
  }
  impl->size = hello[0].value;
  impl->staging_capacity = uint64_t{hello[0].aux} * kUcxStagingUnit;
  return std::unique_ptr<TcpSegmentClient>(new TcpSegmentClient(std::move(impl)));
}

TcpSegmentClient::TcpSegmentClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TcpSegmentClient::~TcpSegmentClient() = default;

uint64_t TcpSegmentClient::size() const { return impl_->size; }
uint64_t TcpSegmentClient::staging_capacity() const { return impl_->staging_capacity; }
const std::string& TcpSegmentClient::address() const { return impl_->address; }
const std::string& TcpSegmentClient::segment_name() const { return impl_->segment_name; }

bool TcpSegmentClient::alive() const {
  if (!impl_->alive.load(std::memory_order_acquire)) return false;
  std::unique_lock<std::mutex> lock(impl_->mu, std::try_to_lock);
  if (!lock.owns_lock()) return true;  // a batch is running: it notices a failure itself
  char byte;
  const ssize_t n = recv(impl_->fd.get(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0) {
    impl_->Fail("the server closed the connection");
  } else if (n > 0 && impl_->tls != nullptr) {
    // A TLS record (an alert, say): the next batch reads it and fails if it must.
  } else if (n > 0) {
    impl_->Fail("protocol error: bytes from the server while no request was in flight");
  } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
    impl_->Fail("the connection failed: " + ErrnoText(errno));
  }
  return impl_->alive.load(std::memory_order_acquire);
}

std::vector<Status> TcpSegmentClient::ReadBatch(const std::vector<ReadOp>& ops,
                                                std::chrono::milliseconds idle,
                                                const OpDone& on_done) {
  std::vector<Impl::Pending> pendings;
  pendings.reserve(ops.size());
  std::lock_guard<std::mutex> lock(impl_->mu);
  for (size_t i = 0; i < ops.size(); ++i) {
    impl_->AddOp(pendings, UcxOp::kRead, i, ops[i].offset, ops[i].dst, impl_->size,
                 kTcpMaxRequestBytes);
  }
  return impl_->RunOps(pendings, ops.size(), idle, on_done);
}

std::vector<Status> TcpSegmentClient::WriteBatch(const std::vector<WriteOp>& ops) {
  std::vector<Impl::Pending> pendings;
  pendings.reserve(ops.size());
  std::lock_guard<std::mutex> lock(impl_->mu);
  for (size_t i = 0; i < ops.size(); ++i) {
    impl_->AddOp(pendings, UcxOp::kWrite, i, ops[i].offset, ops[i].src, impl_->size,
                 kTcpMaxRequestBytes);
  }
  return impl_->RunOps(pendings, ops.size());
}

std::vector<Status> TcpSegmentClient::StageBatch(const std::vector<StageOp>& ops,
                                                 double usable_ratio, const OpDone& on_done) {
  const uint64_t max_range =
      MaxStagedRange(usable_ratio, impl_->staging_capacity, kTcpMaxRequestBytes);
  std::vector<std::vector<uint8_t>> descriptors(ops.size());
  std::vector<Impl::Pending> pendings;
  pendings.reserve(ops.size());
  std::lock_guard<std::mutex> lock(impl_->mu);
  for (size_t i = 0; i < ops.size(); ++i) {
    Result<std::vector<uint8_t>> descriptor = StageDescriptorFor(ops[i], "tcp");
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
  return impl_->RunOps(pendings, ops.size(), {}, on_done);
}

}  // namespace tierkv::transport
