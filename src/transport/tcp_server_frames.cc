// TcpSegmentServer::Loop, the reading side: requests received (read ahead past the frame at
// hand), checked and acted on.
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/errno_text.h"
#include "transport/tcp_server_loop.h"

namespace tierkv::transport {

ssize_t TcpSegmentServer::Loop::Receive(Connection& c, void* dst, size_t want) {
  while (true) {
    const ssize_t n = c.tls ? c.tls->Read(dst, want) : recv(c.fd.get(), dst, want, MSG_DONTWAIT);
    if (n > 0) return n;
    if (n == 0) {
      Close(c,
            c.phase == Phase::kHeader && c.have == 0
                ? "hung up"
                : "hung up in the middle of a frame (truncated)",
            c.phase != Phase::kHeader || c.have != 0);
      return -1;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    if (c.tls) {
      Close(c, c.tls->error(), true);  // a TLS failure: a peer that does not speak it
    } else {
      Close(c, "receiving: " + ErrnoText(errno), false);
    }
    return -1;
  }
}

bool TcpSegmentServer::Loop::OnHeader(Connection& c) {
  Result<TcpRequest> decoded = DecodeTcpRequest(c.header);
  if (!decoded.ok()) {
    Close(c, decoded.status().message(), true);
    return false;
  }
  const TcpRequest& r = *decoded;
  c.request = r;
  c.have = 0;
  if (r.op == UcxOp::kHello) {
    if (c.established) {
      Close(c, "a second hello", true);
      return false;
    }
    c.small.resize(r.data_length);
    c.phase = Phase::kName;
    return true;
  }
  if (!c.established) {
    Close(c, std::string("a ") + OpName(r.op) + " before the hello", true);
    return false;
  }
  switch (r.op) {
    case UcxOp::kRead:
      if (!InBounds(r.offset, r.length)) {
        Reply(c, r.op, r.id, ErrorCode::INVALID_PARAMS, 0);
      } else {
        owner->read_bytes_.fetch_add(r.length, std::memory_order_relaxed);
        Reply(c, r.op, r.id, ErrorCode::OK, r.length, segment->base() + r.offset, r.length);
      }
      c.phase = Phase::kHeader;
      return true;
    case UcxOp::kWrite:
      if (InBounds(r.offset, r.length)) {
        c.target = segment->base() + r.offset;
        c.phase = Phase::kWrite;
      } else {
        c.phase = Phase::kDiscard;  // read and dropped, then refused
      }
      return true;
    case UcxOp::kStage:
      c.small.resize(r.data_length);
      c.phase = Phase::kDescriptor;
      return true;
    case UcxOp::kHello:
    case UcxOp::kChallenge:  // refused by DecodeTcpRequest
      break;
  }
  return true;
}

bool TcpSegmentServer::Loop::OnData(Connection& c) {
  const TcpRequest& r = c.request;
  c.phase = Phase::kHeader;
  c.have = 0;
  switch (r.op) {
    case UcxOp::kHello: {
      const std::string_view proof(reinterpret_cast<const char*>(c.small.data()), kTcpProofBytes);
      const std::string name(c.small.begin() + kTcpProofBytes, c.small.end());
      std::string secret;
      if (options.tokens != nullptr) {
        TokenDigest mac{};
        std::memcpy(mac.data(), proof.data(), mac.size());
        secret = options.tokens->MatchMac(mac, {kTcpHelloLabel, AsView(c.nonce), name});
        if (secret.empty()) {
          // Answered, then closed: the requester learns why; nothing of the segment is named.
          owner->unauthenticated_.fetch_add(1, std::memory_order_relaxed);
          Reply(c, r.op, r.id, ErrorCode::UNAUTHENTICATED, 0);
          if (Flush(c)) Close(c, "no valid proof of the cluster token", true);
          return false;
        }
      }
      if (name != segment->name()) {
        spdlog::info("tcp segment server {}: {} asked for segment '{}', this server has '{}'",
                     address, c.peer, name, segment->name());
        Reply(c, r.op, r.id, ErrorCode::SEGMENT_NOT_FOUND, 0);
        return true;
      }
      c.established = true;
      const uint32_t aux = stages == nullptr
                               ? 0
                               : static_cast<uint32_t>(std::min<uint64_t>(
                                     stages->staging_capacity() / kUcxStagingUnit, UINT32_MAX));
      if (secret.empty()) {
        Reply(c, r.op, r.id, ErrorCode::OK, segment->size(), nullptr, 0, nullptr, aux);
      } else {
        c.server_proof = TokenMac(secret, {kTcpServerLabel, AsView(c.nonce), proof});
        Reply(c, r.op, r.id, ErrorCode::OK, segment->size(), c.server_proof.data(),
              c.server_proof.size(), nullptr, aux);
      }
      return true;
    }
    case UcxOp::kWrite:
      owner->written_bytes_.fetch_add(r.length, std::memory_order_relaxed);
      Reply(c, r.op, r.id, ErrorCode::OK, r.length);
      return true;
    case UcxOp::kRead:
    case UcxOp::kChallenge:  // refused by DecodeTcpRequest
      return true;
    case UcxOp::kStage: {
      Result<UcxStageDescriptor> d = DecodeUcxStageDescriptor(c.small.data(), c.small.size());
      if (!d.ok()) {
        Close(c, d.status().message(), true);
        return false;
      }
      if (stages == nullptr) {
        Reply(c, r.op, r.id, ErrorCode::UNAVAILABLE_IN_CURRENT_MODE, 0);
        return true;
      }
      if (r.offset > d->object_size || r.length > d->object_size - r.offset) {
        Reply(c, r.op, r.id, ErrorCode::INVALID_PARAMS, 0);
        return true;
      }
      StageRange range;
      range.key = std::move(d->key);
      range.location = DiskLocation{d->region, d->generation, d->record_offset, d->object_size};
      range.value_offset = r.offset;
      range.length = r.length;
      StageDone done = [inbox = inbox, serial = c.serial, id = r.id,
                        length = r.length](StagedRange staged) {
        inbox->Push(StageJob{serial, id, length, std::move(staged)});
      };
      stages->Submit(std::move(range), std::move(done));
      return true;
    }
  }
  return true;
}

ssize_t TcpSegmentServer::Loop::ReceiveWithReadAhead(Connection& c, void* dst, size_t want) {
  if (c.tls) return Receive(c, dst, want);
  iovec iov[2] = {{dst, want}, {c.rx, sizeof(c.rx)}};
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = 2;
  while (true) {
    const ssize_t n = recvmsg(c.fd.get(), &msg, MSG_DONTWAIT);
    if (n > 0) {
      const size_t to_dst = std::min(static_cast<size_t>(n), want);
      c.rx_begin = 0;
      c.rx_end = static_cast<size_t>(n) - to_dst;
      return static_cast<ssize_t>(to_dst);
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
    return Receive(c, dst, want);  // closed or failed: Receive says so and closes
  }
}

void TcpSegmentServer::Loop::OnReadable(Connection& c) {
  size_t budget = kReadBudget;
  while (true) {
    if (c.phase == Phase::kHeader && c.out.size() >= kMaxQueuedReplies) {
      if (!c.input_paused) {
        c.input_paused = true;
        c.want_out = true;
        Update(c);
      }
      return;
    }
    void* dst = nullptr;
    size_t want = 0;
    switch (c.phase) {
      case Phase::kHeader:
        dst = c.header + c.have;
        want = kTcpHeaderSize - c.have;
        break;
      case Phase::kName:
      case Phase::kDescriptor:
        dst = c.small.data() + c.have;
        want = c.small.size() - c.have;
        break;
      case Phase::kWrite:
        dst = c.target + c.have;
        want = c.request.length - c.have;
        break;
      case Phase::kDiscard:
        dst = discard.data();
        want = std::min<size_t>(discard.size(), c.request.length - c.have);
        break;
    }
    ssize_t n;
    if (c.rx_begin < c.rx_end) {
      n = static_cast<ssize_t>(std::min(want, c.rx_end - c.rx_begin));
      std::memcpy(dst, c.rx + c.rx_begin, static_cast<size_t>(n));
      c.rx_begin += static_cast<size_t>(n);
    } else if (budget == 0) {
      return;  // the socket's bytes wait for the next event
    } else if (c.phase == Phase::kHeader) {
      // A header, and the requests or data behind it.
      n = Receive(c, c.rx, std::min(sizeof(c.rx), budget));
      if (n <= 0) return;  // nothing now, or closed
      budget -= static_cast<size_t>(n);
      c.rx_begin = 0;
      c.rx_end = static_cast<size_t>(n);
      continue;
    } else {
      const bool whole = want <= budget;
      n = whole ? ReceiveWithReadAhead(c, dst, want) : Receive(c, dst, std::min(want, budget));
      if (n <= 0) return;  // nothing now, or closed
      budget -= std::min(budget, static_cast<size_t>(n) + (c.rx_end - c.rx_begin));
    }
    c.have += static_cast<size_t>(n);
    if (c.phase == Phase::kHeader) {
      // A wrong magic is refused as soon as its bytes are in, not after 40 bytes.
      if (std::memcmp(c.header, kTcpMagic, std::min(c.have, sizeof(kTcpMagic))) != 0) {
        Close(c, "tcp request: wrong magic (not TKVT)", true);
        return;
      }
      if (c.have < kTcpHeaderSize) continue;
      if (!OnHeader(c)) return;
      if (c.phase == Phase::kHeader) continue;  // answered at once (a read)
      continue;
    }
    const size_t total = (c.phase == Phase::kName || c.phase == Phase::kDescriptor)
                             ? c.small.size()
                             : c.request.length;
    if (c.have < total) continue;
    if (c.phase == Phase::kDiscard) {
      c.phase = Phase::kHeader;
      c.have = 0;
      Reply(c, c.request.op, c.request.id, ErrorCode::INVALID_PARAMS, 0);
      continue;
    }
    if (!OnData(c)) return;
  }
}

}  // namespace tierkv::transport
