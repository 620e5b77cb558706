// TcpSegmentServer's event loop, private to src/transport/: its connections and their
// frames, replies, admission and TLS. tcp_server_frames.cc reads and acts on requests;
// tcp_segment_server.cc turns the loop and starts and stops the server.
#pragma once

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/errno_text.h"
#include "common/unique_fd.h"
#include "transport/stage_inbox.h"
#include "transport/stage_source.h"
#include "transport/tcp_protocol.h"
#include "transport/tcp_segment_server.h"
#include "transport/tls_stream.h"
#include "transport/ucx_worker.h"

namespace tierkv::transport {

struct TcpSegmentServer::Loop {
  using Clock = std::chrono::steady_clock;

  // While a connection waits for its hello, the loop wakes at least this often.
  static constexpr int kTcpHousekeepingMs = 50;
  // A connection with this many replies queued (a requester that sends faster than it reads) is
  // not read from until they drain.
  static constexpr size_t kMaxQueuedReplies = 512;
  // Bytes read from one connection per event before the loop turns to the others.
  static constexpr size_t kReadBudget = size_t{4} << 20;
  // Read-ahead past a frame: a batch of requests (40-byte headers) in one recv, and the next
  // header read with a write's data.
  static constexpr size_t kReadAheadBytes = 4096;
  // After accept fails for lack of descriptors, the listener rests this long.
  static constexpr std::chrono::milliseconds kTcpAcceptBackoff{100};
  // Connections dropped to make room for new ones per wake-up of the listener, at most.
  static constexpr int kMaxDropsPerAccept = 256;
  // Protocol violations logged per second; the rest are counted in one line.
  static constexpr int kRejectLogsPerSecond = 10;

  static const char* OpName(UcxOp op) {
    switch (op) {
      case UcxOp::kHello:
        return "hello";
      case UcxOp::kRead:
        return "read";
      case UcxOp::kWrite:
        return "write";
      case UcxOp::kStage:
        return "stage";
      case UcxOp::kChallenge:
        return "challenge";
    }
    return "?";
  }

  struct Out {
    TcpHeader header{};
    const uint8_t* data = nullptr;
    size_t length = 0;
    size_t sent = 0;                   // of header + data
    std::shared_ptr<const void> hold;  // stage replies: keeps their staging space
    uint64_t counts = 0;               // read bytes counted once sent (stage replies)
  };
  enum class Phase { kHeader, kName, kDescriptor, kWrite, kDiscard };
  struct Connection {
    UniqueFd fd;
    uint64_t serial = 0;
    std::string peer;
    Clock::time_point accepted;
    bool established = false;
    std::unique_ptr<TlsStream> tls;  // TLS on the data plane, else null
    TokenDigest nonce{};             // the challenge's
    TokenDigest server_proof{};      // the hello's reply data
    Phase phase = Phase::kHeader;
    uint8_t header[kTcpHeaderSize] = {};
    size_t have = 0;             // bytes of the current header or data phase received
    TcpRequest request;          // the request being received
    std::vector<uint8_t> small;  // hello name, stage descriptor
    uint8_t* target = nullptr;   // write: where its data goes
    std::deque<Out> out;
    uint8_t rx[kReadAheadBytes];  // bytes read past the frame at hand: [rx_begin, rx_end)
    size_t rx_begin = 0;
    size_t rx_end = 0;
    bool want_out = false;      // EPOLLOUT registered
    bool input_paused = false;  // EPOLLIN dropped (too many replies queued)
  };
  struct StageJob {
    uint64_t serial = 0;  // the connection's
    uint64_t id = 0;
    uint64_t length = 0;
    StagedRange staged;
  };
  using Inbox = StageInbox<StageJob>;  // stage_inbox.h

  TcpSegmentServer* owner = nullptr;
  std::shared_ptr<MemorySegment> segment;
  std::shared_ptr<StageSource> stages;  // null: stage requests are refused
  std::shared_ptr<Inbox> inbox = std::make_shared<Inbox>();
  UcxTransportOptions options;
  std::string address;
  UniqueFd listener;
  UniqueFd epoll;
  UniqueFd wake;
  std::atomic<bool> stopping{false};
  uint64_t next_serial = 1;
  size_t max_connections = kMaxConnections;  // TcpSegmentServer::MaxConnections at Start
  std::unordered_map<int, std::unique_ptr<Connection>> by_fd;
  std::unordered_map<uint64_t, Connection*> by_serial;
  std::vector<uint8_t> discard = std::vector<uint8_t>(64 * 1024);
  Clock::time_point accept_paused_until{};  // out of descriptors: accepts rest until then
  // Rejection log budget.
  Clock::time_point log_window;
  int logged_in_window = 0;
  uint64_t suppressed = 0;

  ~Loop() { inbox->Close(); }

  bool InBounds(uint64_t offset, uint64_t length) const {
    return offset <= segment->size() && length <= segment->size() - offset;
  }

  void Update(Connection& c) {
    epoll_event ev{};
    ev.events = (c.input_paused ? 0u : static_cast<uint32_t>(EPOLLIN | EPOLLRDHUP)) |
                (c.want_out ? static_cast<uint32_t>(EPOLLOUT) : 0u);
    ev.data.fd = c.fd.get();
    epoll_ctl(epoll.get(), EPOLL_CTL_MOD, c.fd.get(), &ev);
  }

  void Close(Connection& c, const std::string& reason, bool broke_protocol) {
    if (broke_protocol) {
      owner->rejected_.fetch_add(1, std::memory_order_relaxed);
      const auto now = Clock::now();
      if (now - log_window >= std::chrono::seconds(1)) {
        if (suppressed != 0) {
          spdlog::warn("tcp segment server {}: {} more connections closed for protocol errors",
                       address, suppressed);
        }
        log_window = now;
        logged_in_window = 0;
        suppressed = 0;
      }
      if (logged_in_window < kRejectLogsPerSecond) {
        ++logged_in_window;
        spdlog::warn("tcp segment server {}: closing the connection of {}: {}", address, c.peer,
                     reason);
      } else {
        ++suppressed;
      }
    } else {
      spdlog::debug("tcp segment server {}: closing the connection of {}: {}", address, c.peer,
                    reason);
    }
    epoll_ctl(epoll.get(), EPOLL_CTL_DEL, c.fd.get(), nullptr);
    by_serial.erase(c.serial);
    const int fd = c.fd.get();
    by_fd.erase(fd);  // closes the socket, drops queued replies (and their staging holds)
    owner->open_.store(by_fd.size(), std::memory_order_relaxed);
  }

  void Reply(Connection& c, UcxOp op, uint64_t id, ErrorCode status, uint64_t value,
             const uint8_t* data = nullptr, size_t length = 0,
             std::shared_ptr<const void> hold = nullptr, uint32_t aux = 0) {
    TcpReply reply;
    reply.op = op;
    reply.id = id;
    reply.status = ToInt(status);
    reply.aux = aux;
    reply.value = value;
    reply.data_length = static_cast<uint32_t>(length);
    Out out;
    out.header = EncodeTcpReply(reply);
    out.data = data;
    out.length = length;
    out.hold = std::move(hold);
    if (op == UcxOp::kStage && status == ErrorCode::OK) out.counts = length;
    c.out.push_back(std::move(out));
  }

  // Sends what is queued; false when the connection was closed.
  bool Flush(Connection& c) {
    while (!c.out.empty()) {
      iovec iov[64];
      int count = 0;
      for (auto it = c.out.begin(); it != c.out.end() && count + 2 <= 64; ++it) {
        size_t skip = it->sent;
        if (skip < kTcpHeaderSize) {
          iov[count++] = {it->header.data() + skip, kTcpHeaderSize - skip};
          skip = 0;
        } else {
          skip -= kTcpHeaderSize;
        }
        if (it->length > skip) {
          iov[count++] = {const_cast<uint8_t*>(it->data) + skip, it->length - skip};
        }
      }
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = static_cast<size_t>(count);
      const ssize_t n =
          c.tls ? c.tls->Write(iov, count) : sendmsg(c.fd.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
          // TLS waiting for the peer's bytes (its handshake): the next read resumes it.
          if (c.tls && !c.tls->wants_write()) return true;
          if (!c.want_out) {
            c.want_out = true;
            Update(c);
          }
          return true;
        }
        Close(c, c.tls ? c.tls->error() : "sending: " + ErrnoText(errno), c.tls != nullptr);
        return false;
      }
      size_t done = static_cast<size_t>(n);
      while (done > 0 && !c.out.empty()) {
        Out& front = c.out.front();
        const size_t left = kTcpHeaderSize + front.length - front.sent;
        if (done < left) {
          front.sent += done;
          done = 0;
        } else {
          done -= left;
          if (front.counts != 0) {
            owner->read_bytes_.fetch_add(front.counts, std::memory_order_relaxed);
          }
          c.out.pop_front();
        }
      }
    }
    if (c.want_out || c.input_paused) {
      c.want_out = false;
      c.input_paused = false;
      Update(c);
    }
    return true;
  }

  // Receives into [dst, dst + want); the bytes received, 0 for "nothing now", -1 closed.
  ssize_t Receive(Connection& c, void* dst, size_t want);

  // A whole header arrived: check it and set up the data phase (or answer at once).
  bool OnHeader(Connection& c);

  // The data of the current request arrived in full.
  bool OnData(Connection& c);

  // Receives the rest of a frame, [dst, dst + want), and what follows it into `c.rx` (one
  // recvmsg); the bytes that went to `dst`, 0 for "nothing now", -1 closed.
  ssize_t ReceiveWithReadAhead(Connection& c, void* dst, size_t want);

  // Reads what the peer sent (up to kReadBudget from the socket; bytes read ahead before are
  // taken first) and acts on whole frames.
  void OnReadable(Connection& c);

  Connection* OldestWithoutHello() {
    Connection* oldest = nullptr;
    for (auto& [fd, c] : by_fd) {
      if (!c->established && (oldest == nullptr || c->accepted < oldest->accepted)) {
        oldest = c.get();
      }
    }
    return oldest;
  }

  // Accepts again once a pause for lack of descriptors is over.
  void MaybeResumeAccepts() {
    if (accept_paused_until == Clock::time_point{} || Clock::now() < accept_paused_until) return;
    accept_paused_until = Clock::time_point{};
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = listener.get();
    epoll_ctl(epoll.get(), EPOLL_CTL_MOD, listener.get(), &ev);
  }

  void Accept() {
    int drops = 0;
    while (true) {
      sockaddr_storage peer{};
      socklen_t length = sizeof(peer);
      const int fd = accept4(listener.get(), reinterpret_cast<sockaddr*>(&peer), &length,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR) continue;
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          // Out of descriptors: the oldest connection still without its hello makes room and
          // the accept is tried again at once (a flood of silent connections cannot lock
          // requesters out); with none to drop, or after many drops in one go, the listener
          // rests a while (a readable listener would spin the loop; the peer stays in the
          // backlog).
          const int err = errno;
          Connection* oldest = drops < kMaxDropsPerAccept ? OldestWithoutHello() : nullptr;
          if (oldest != nullptr) {
            ++drops;
            Close(*oldest, "dropped without its hello: out of file descriptors", true);
            continue;
          }
          spdlog::warn("tcp segment server {}: accept: {}; pausing accepts for {} ms", address,
                       ErrnoText(err), kTcpAcceptBackoff.count());
          accept_paused_until = Clock::now() + kTcpAcceptBackoff;
          epoll_event ev{};
          ev.events = 0;
          ev.data.fd = listener.get();
          epoll_ctl(epoll.get(), EPOLL_CTL_MOD, listener.get(), &ev);
          return;
        }
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
          spdlog::warn("tcp segment server {}: accept: {}", address, ErrnoText(errno));
        }
        return;
      }
      UniqueFd owned(fd);
      if (by_fd.size() >= max_connections) {
        // Full: the oldest connection still without its hello makes room (a flood of silent
        // connections cannot lock requesters out); with none, the new one is refused.
        Connection* oldest = OldestWithoutHello();
        if (oldest == nullptr) {
          spdlog::warn("tcp segment server {}: refusing {}: {} connections open", address,
                       DescribeAddress(peer), by_fd.size());
          continue;  // closed
        }
        Close(*oldest,
              "dropped without its hello: " + std::to_string(max_connections) + " connections open",
              true);
      }
      const int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
      auto c = std::make_unique<Connection>();
      c->fd = std::move(owned);
      c->serial = next_serial++;
      c->peer = DescribeAddress(peer);
      c->accepted = Clock::now();
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLRDHUP;
      ev.data.fd = fd;
      if (epoll_ctl(epoll.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
        spdlog::warn("tcp segment server {}: epoll_ctl: {}", address, ErrnoText(errno));
        continue;
      }
      if (options.tls_server != nullptr) {
        auto tls = TlsStream::Open(options.tls_server, fd);
        if (!tls.ok()) {
          spdlog::warn("tcp segment server {}: {}", address, tls.status().ToString());
          continue;  // the connection (and its socket) goes with `c`
        }
        c->tls = std::move(tls).value();
      }
      // The server speaks first: the challenge the requester's hello must prove the token over.
      c->nonce = RandomNonce();
      Reply(*c, UcxOp::kChallenge, 0, ErrorCode::OK, 0, c->nonce.data(), c->nonce.size(), nullptr,
            options.tokens != nullptr ? 1 : 0);
      Connection& added = *c;
      by_serial[c->serial] = c.get();
      by_fd[fd] = std::move(c);
      owner->open_.store(by_fd.size(), std::memory_order_relaxed);
      Flush(added);
    }
  }

  void CheckHandshakes() {
    const auto now = Clock::now();
    std::vector<Connection*> late;
    for (auto& [fd, c] : by_fd) {
      if (!c->established && now - c->accepted > options.io_timeout) late.push_back(c.get());
    }
    for (Connection* c : late) {
      Close(*c, "no hello within " + std::to_string(options.io_timeout.count()) + " ms", true);
    }
  }

  bool Handshaking() const {
    return std::any_of(by_fd.begin(), by_fd.end(),
                       [](const auto& entry) { return !entry.second->established; });
  }

  // On the loop: queue the replies of staged pieces (their connections may have gone).
  void TakeStaged() {
    std::vector<Connection*> touched;
    for (StageJob& job : inbox->Take()) {
      auto it = by_serial.find(job.serial);
      if (it == by_serial.end()) continue;  // the hold goes with the job
      Connection& c = *it->second;
      if (!job.staged.status.ok()) {
        Reply(c, UcxOp::kStage, job.id, job.staged.status.code(), 0);
      } else {
        Reply(c, UcxOp::kStage, job.id, ErrorCode::OK, job.length, job.staged.data, job.length,
              std::move(job.staged.hold));
      }
      touched.push_back(&c);
    }
    std::sort(touched.begin(), touched.end());
    touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
    for (Connection* c : touched) {  // each once: a close here frees only itself
      const uint64_t serial = c->serial;
      Flush(*c);
      NoteBuffered(serial);  // input resumed with requests read ahead
    }
  }

  // Connections with bytes already read that epoll does not see: read ahead (`rx`), or
  // decrypted inside a TLS stream. Served on the next turn of the loop unless input is paused.
  std::vector<uint64_t> buffered_ready;
  void NoteBuffered(uint64_t serial) {
    auto it = by_serial.find(serial);
    if (it == by_serial.end() || it->second->input_paused) return;
    const Connection& c = *it->second;
    if ((c.tls && c.tls->Pending()) || c.rx_begin < c.rx_end) buffered_ready.push_back(serial);
  }
  void ServeBuffered() {
    std::vector<uint64_t> ready = std::exchange(buffered_ready, {});
    for (uint64_t serial : ready) {
      auto it = by_serial.find(serial);
      if (it == by_serial.end()) continue;
      Connection& c = *it->second;
      OnReadable(c);
      if (by_serial.count(serial) == 0) continue;
      Flush(c);
      NoteBuffered(serial);
    }
  }

  void Run() {
    std::vector<epoll_event> events(64);
    while (!stopping.load(std::memory_order_acquire)) {
      ServeBuffered();
      const int timeout = !buffered_ready.empty() ? 0
                          : Handshaking() || accept_paused_until != Clock::time_point{}
                              ? kTcpHousekeepingMs
                              : -1;
      const int n =
          epoll_wait(epoll.get(), events.data(), static_cast<int>(events.size()), timeout);
      if (n < 0 && errno != EINTR) {
        spdlog::error("tcp segment server {}: epoll_wait: {}", address, ErrnoText(errno));
        break;
      }
      for (int i = 0; i < n; ++i) {
        const int fd = events[i].data.fd;
        if (fd == listener.get()) {
          Accept();
          continue;
        }
        if (fd == wake.get()) {
          uint64_t count = 0;
          while (::read(wake.get(), &count, sizeof(count)) < 0 && errno == EINTR) {
          }
          TakeStaged();
          continue;
        }
        auto it = by_fd.find(fd);
        if (it == by_fd.end()) continue;
        Connection& c = *it->second;
        const uint64_t serial = c.serial;
        if ((events[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0 &&
            !c.input_paused) {
          OnReadable(c);
          if (by_serial.count(serial) == 0) continue;
        }
        if ((events[i].events & (EPOLLHUP | EPOLLERR)) != 0 && c.input_paused) {
          Close(c, "hung up", false);
          continue;
        }
        Flush(c);  // replies the reads queued, or room to send more
        NoteBuffered(serial);
      }
      CheckHandshakes();
      MaybeResumeAccepts();
    }
    // Shutdown: no more connections; what the source has queued fails at once, and what it
    // is reading comes back to a closed inbox (its staging space is released there).
    listener.Reset();
    if (stages != nullptr) {
      stages->FailQueued(Status(ErrorCode::TRANSFER_FAIL, "the segment server is stopping"));
    }
    inbox->Close();
    by_serial.clear();
    by_fd.clear();
    owner->open_.store(0, std::memory_order_relaxed);
  }
};

}  // namespace tierkv::transport
