// Serves a store's DRAM segment to requesters on other hosts over UCX (tcp, or RDMA where the
// hardware exists): each requester connects to host:port, names the segment, and then reads and
// writes byte ranges of it with active messages (src/transport/ucx_protocol.h encodes them;
// docs/ucx-transport.md describes the protocol and the error rules). The cross-host sibling of
// ShmSegmentServer (src/transport/shm_segment_server.h).
//
// One thread runs the UCX worker: it accepts connections, answers requests, and moves the bytes
// straight between the segment and the wire (zero-copy sends from the segment; rendezvous
// receives straight into it). Every request is checked against the segment's size before the
// segment is touched; a peer that sends a message it cannot parse is disconnected and logged,
// and never disturbs another peer. A peer has options.io_timeout to complete its handshake.
//
// Staged loads: given a StageSource (the store's SSD tier, transport/stage_source.h), the server
// also answers stage requests (a range of a disk record, docs/ucx-transport.md): it hands each
// to the source, which reads it off this thread, and the progress thread sends each range
// straight from the staging buffer as soon as it is staged, keeping its hold (the staging
// space) until the send completes or the peer is gone. The hello reply tells the requester the
// staging capacity so it can split its loads. Without a source, stage requests are refused with
// UNAVAILABLE_IN_CURRENT_MODE.
//
// Thread-safety: Start, address, open_endpoints and Stop may be called from any thread; Stop is
// idempotent. Owns: the listener, every endpoint, the UCX context and worker, and a reference to
// the segment. The bytes are synchronised by the master's allocation protocol, not by this class.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/unique_fd.h"
#include "memory/memory_segment.h"
#include "tierkv/status.h"
#include "transport/network_segment.h"
#include "transport/stage_source.h"
#include "transport/ucx_options.h"

namespace tierkv::transport {

class UcxSegmentServer final : public NetworkSegmentServer {
 public:
  // Serves `segment` on `host`:`port` (port 0: a free port; address() says which). `host` is a
  // name or a numeric IPv4/IPv6 address to listen on ("0.0.0.0": every interface). Errors:
  // INVALID_PARAMS (no segment, empty host, port outside 0..65535); INVALID_CONFIG and
  // UNAVAILABLE_IN_CURRENT_MODE from the options (SelectUcxTransports, UcxWorker::Create);
  // TRANSFER_FAIL (the host does not resolve, or UCX cannot listen there: port taken, address
  // not on this host; naming the address and UCX's reason); INTERNAL_ERROR (eventfd, thread).
  static Result<std::unique_ptr<UcxSegmentServer>> Start(
      std::shared_ptr<MemorySegment> segment, const std::string& host, int port,
      const UcxTransportOptions& options = {}, std::shared_ptr<StageSource> stages = nullptr);
  ~UcxSegmentServer() override;  // Stop()
  UcxSegmentServer(const UcxSegmentServer&) = delete;
  UcxSegmentServer& operator=(const UcxSegmentServer&) = delete;

  // "host:port" as requesters pass it to UcxSegmentClient::Connect: the host given to Start
  // (IPv6 in brackets) and the port actually bound.
  std::string address() const override { return address_; }

  // Endpoints currently open (handshaking or established). For tests and metrics.
  size_t open_endpoints() const override { return open_endpoints_.load(std::memory_order_relaxed); }
  // Bytes requesters read from the segment or the SSD tier (replies sent) and wrote into the
  // segment, since Start.
  uint64_t read_bytes() const override { return read_bytes_.load(std::memory_order_relaxed); }
  uint64_t written_bytes() const override { return written_bytes_.load(std::memory_order_relaxed); }
  // "tcp" or "rdma".
  const std::string& protocol() const override { return protocol_; }

  // Stops serving: closes the listener and every endpoint (requesters' calls fail with
  // TRANSFER_FAIL and their alive() turns false), waits up to a second for transfers in flight
  // to be cancelled, joins the thread and releases UCX. Idempotent.
  void Stop() override;

 private:
  struct Loop;
  UcxSegmentServer(std::string address, std::unique_ptr<Loop> loop, UniqueFd wake);
  void Run();  // the progress loop, on thread_

  const std::string address_;
  std::unique_ptr<Loop> loop_;  // used by thread_ only; destroyed by Stop after the join
  UniqueFd wake_;               // eventfd; Stop writes it to end the loop
  std::atomic<size_t> open_endpoints_{0};
  std::atomic<uint64_t> read_bytes_{0};
  std::atomic<uint64_t> written_bytes_{0};
  std::string protocol_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;

  std::mutex stop_mu_;
  bool stopped_ = false;  // guarded by stop_mu_
};

}  // namespace tierkv::transport
