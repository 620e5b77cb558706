// The requester's side of tierkv's TCP transport: one TCP connection to a TcpSegmentServer,
// naming one segment, over which batches of byte ranges are read, written and staged
// (src/transport/tcp_protocol.h, docs/tcp-transport.md). Bytes move straight between the
// caller's buffers and the socket (readv/writev on the pieces): no copy in this process.
//
// Thread-safety: every method may be called from any thread; calls run one at a time (a mutex
// holds the connection for a batch). alive() never waits for a batch.
//
// Failure: once the server hangs up, breaks the protocol, or leaves a call without any progress
// for options.io_timeout, the connection is closed for good: alive() turns false and every
// later call fails with TRANSFER_FAIL naming the first cause. Reconnect with a new client.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "tierkv/status.h"
#include "transport/network_segment.h"
#include "transport/ucx_options.h"

namespace tierkv::transport {

class TcpSegmentClient final : public NetworkSegmentClient {
 public:
  // Connects to `address` ("host:port", "[ipv6]:port") and asks for `segment_name`; `timeout`
  // bounds the connection and the hello. Errors: INVALID_PARAMS (malformed address, empty name
  // or one over 4096 bytes, timeout not positive); TRANSFER_FAIL (the host does not resolve,
  // nobody listens, the connection broke, no reply within `timeout`, a malformed reply; naming
  // the address and the reason); the server's own code when it refuses (SEGMENT_NOT_FOUND: it
  // serves another segment).
  static Result<std::unique_ptr<TcpSegmentClient>> Connect(const std::string& address,
                                                           const std::string& segment_name,
                                                           std::chrono::milliseconds timeout,
                                                           const UcxTransportOptions& options = {});
  ~TcpSegmentClient() override;
  TcpSegmentClient(const TcpSegmentClient&) = delete;
  TcpSegmentClient& operator=(const TcpSegmentClient&) = delete;

  uint64_t size() const override;
  uint64_t staging_capacity() const override;
  const std::string& address() const override;
  const std::string& segment_name() const override;
  using NetworkSegmentClient::ReadBatch;
  std::vector<Status> ReadBatch(const std::vector<ReadOp>& ops, std::chrono::milliseconds idle,
                                const OpDone& on_done) override;
  std::vector<Status> WriteBatch(const std::vector<WriteOp>& ops) override;
  using NetworkSegmentClient::StageBatch;
  std::vector<Status> StageBatch(const std::vector<StageOp>& ops, double usable_ratio,
                                 const OpDone& on_done) override;
  // When no call is running, it first looks at the socket, so a server that hung up is noticed.
  bool alive() const override;

  struct Impl;

 private:
  explicit TcpSegmentClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tierkv::transport
