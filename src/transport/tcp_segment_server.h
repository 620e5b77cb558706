// Serves a store's DRAM segment (and SSD tier) to requesters over tierkv's own TCP transport:
// each requester opens one TCP connection to host:port, names the segment in a hello, and then
// reads and writes byte ranges of it, and stages ranges of its SSD tier, with the frames of
// src/transport/tcp_protocol.h (docs/tcp-transport.md). The sibling of UcxSegmentServer (rdma).
//
// Robustness (the reason this exists, docs/security.md): every byte a peer sends is parsed by
// this class (DecodeTcpRequest) before anything acts on it; a peer that sends anything the
// protocol does not allow (a wrong magic, an unknown op, lengths out of bounds, a request before
// its hello) is disconnected and logged (at most 10 lines a second, then a count), and never
// disturbs another peer. A peer has options.io_timeout to complete its hello; at most
// MaxConnections() are open (when full, a new connection makes room by closing the oldest one
// still without its hello, or is closed itself when every one has said hello): kMaxConnections,
// or fewer when the process's descriptor limit would not leave the rest of the process (its gRPC
// channel, shared-memory peers, files) kReservedDescriptors. Writes land straight
// in the segment (after the bounds check), reads go out straight from it (writev), staged pieces
// straight from the staging buffer: no copy in this process.
//
// Threads: one event loop (epoll, non-blocking sockets) does all network IO. Staged loads: given
// a StageSource (the store's SSD tier, transport/stage_source.h), stage requests are handed to
// it (it reads them off this thread, with its own batching policy: the store's TierStager), and
// the loop sends each range straight from the staging buffer as soon as it is staged, keeping
// its hold (the staging space) until the reply has left or its connection closed.
//
// Thread-safety: Start, the accessors and Stop may be called from any thread; Stop is
// idempotent. Owns the listening socket, every connection, the threads, and a reference to the
// segment and tier. The bytes are synchronised by the master's allocation protocol.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "memory/memory_segment.h"
#include "tierkv/status.h"
#include "transport/network_segment.h"
#include "transport/stage_source.h"
#include "transport/ucx_options.h"

namespace tierkv::transport {

class TcpSegmentServer final : public NetworkSegmentServer {
 public:
  static constexpr size_t kMaxConnections = 4096;
  // Descriptors kept for the rest of the process: at least this, or a quarter of the limit.
  static constexpr size_t kReservedDescriptors = 64;
  // The connection budget under `descriptor_limit` (RLIMIT_NOFILE's soft limit): kMaxConnections,
  // or the limit less max(kReservedDescriptors, a quarter of it), but at least 8. A flood of
  // connections then meets this budget before the process runs out of descriptors, which other
  // libraries (gRPC) do not all survive.
  static size_t MaxConnections(uint64_t descriptor_limit);

  // Serves `segment` on `host`:`port` (0: a free port; address() says which), only there: the
  // listening socket is bound to that one address. Errors: INVALID_PARAMS (no segment, empty
  // host, port outside 0..65535); INVALID_CONFIG (a non-positive options.io_timeout);
  // TRANSFER_FAIL (the host does not resolve, or it cannot listen there: port taken, address not
  // on this host; naming the address and the errno); INTERNAL_ERROR (epoll, eventfd, thread).
  static Result<std::unique_ptr<TcpSegmentServer>> Start(
      std::shared_ptr<MemorySegment> segment, const std::string& host, int port,
      const UcxTransportOptions& options = {}, std::shared_ptr<StageSource> stages = nullptr);
  ~TcpSegmentServer() override;  // Stop()
  TcpSegmentServer(const TcpSegmentServer&) = delete;
  TcpSegmentServer& operator=(const TcpSegmentServer&) = delete;

  std::string address() const override { return address_; }
  size_t open_endpoints() const override { return open_.load(std::memory_order_relaxed); }
  uint64_t read_bytes() const override { return read_bytes_.load(std::memory_order_relaxed); }
  uint64_t written_bytes() const override { return written_bytes_.load(std::memory_order_relaxed); }
  const std::string& protocol() const override { return protocol_; }
  // Protocol violations seen since Start (each closed its connection). For tests and metrics.
  uint64_t rejected() const { return rejected_.load(std::memory_order_relaxed); }
  // Hellos refused for a missing or wrong proof of the cluster token (also in rejected()).
  uint64_t unauthenticated() const override {
    return unauthenticated_.load(std::memory_order_relaxed);
  }
  void Stop() override;

  struct Loop;

 private:
  TcpSegmentServer() = default;

  std::string address_;
  const std::string protocol_ = "tcp";
  std::unique_ptr<Loop> loop_;
  std::atomic<size_t> open_{0};
  std::atomic<uint64_t> read_bytes_{0};
  std::atomic<uint64_t> written_bytes_{0};
  std::atomic<uint64_t> rejected_{0};
  std::atomic<uint64_t> unauthenticated_{0};
  std::thread thread_;
  std::mutex stop_mu_;
  bool stopped_ = false;  // guarded by stop_mu_
};

}  // namespace tierkv::transport
