// The requester's side of the cross-host transport: a connection to one UcxSegmentServer, naming
// one segment, over which batches of byte ranges are read and written (docs/ucx-transport.md).
// The cross-host sibling of ShmSegmentMapper (src/transport/shm_segment_client.h): where that one
// maps the segment, this one moves bytes with UCX active messages (tcp, or RDMA where the
// hardware exists), straight between the caller's buffers and the wire.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/disk_location.h"
#include "tierkv/status.h"
#include "transfer/copy.h"
#include "transport/network_segment.h"
#include "transport/ucx_options.h"

namespace tierkv::transport {

// Thread-safety: every method may be called from any thread. Calls run one at a time: a mutex
// serialises the connection's UCX worker, so a batch in progress holds the connection and
// concurrent batches wait for it (their requests are not interleaved). Threads that need
// parallel transfers use one client each. alive() never waits for a batch.
//
// Failure: once the server hangs up, errors, breaks the protocol, or leaves a call without any
// reply for options.io_timeout, the connection is closed for good: alive() turns false and every
// later call fails with TRANSFER_FAIL naming the first cause. Reconnect with a new client.
class UcxSegmentClient final : public NetworkSegmentClient {
 public:
  // Connects to the server at `address` ("host:port", "[ipv6]:port") and asks for
  // `segment_name`; `timeout` bounds the connection and the handshake. Errors: INVALID_PARAMS
  // (malformed address, empty name or one over 4096 bytes, timeout not positive);
  // INVALID_CONFIG and UNAVAILABLE_IN_CURRENT_MODE from the options (e.g. "rdma" on a host
  // without verbs devices); TRANSFER_FAIL (host does not resolve, nobody listens, the connection
  // broke, or no reply within `timeout`; naming the address and UCX's reason); the server's own
  // code when it refuses (SEGMENT_NOT_FOUND: it serves another segment).
  static Result<std::unique_ptr<UcxSegmentClient>> Connect(const std::string& address,
                                                           const std::string& segment_name,
                                                           std::chrono::milliseconds timeout,
                                                           const UcxTransportOptions& options = {});
  ~UcxSegmentClient()
      override;  // closes the connection (waits up to a second for the server to see it)
  UcxSegmentClient(const UcxSegmentClient&) = delete;
  UcxSegmentClient& operator=(const UcxSegmentClient&) = delete;

  // The segment's size in bytes, from the handshake.
  uint64_t size() const override;
  // The server's staging buffer in bytes (0: it has no SSD tier), from the handshake.
  uint64_t staging_capacity() const override;
  const std::string& address() const override;
  const std::string& segment_name() const override;

  // Reads (writes) every op, keeping many requests in flight; returns one status per op, in
  // order. Errors per op: INVALID_PARAMS (a range outside the segment, a null piece with a
  // size; checked here and again by the server, which never touches bytes outside the segment);
  // TRANSFER_FAIL (the connection failed before or during the op; see above). An op that failed
  // may have transferred part of its bytes. An empty range succeeds without a message.
  using NetworkSegmentClient::ReadBatch;
  std::vector<Status> ReadBatch(const std::vector<ReadOp>& ops, std::chrono::milliseconds idle,
                                const OpDone& on_done) override;
  std::vector<Status> WriteBatch(const std::vector<WriteOp>& ops) override;

  // Loads every op from the server's SSD tier (the requester's half of a staged load), many
  // requests in flight: each op is cut into value ranges whose staging need fits usable_ratio x
  // the server's staging capacity (an object larger than that streams through it in ranges),
  // and the server sends each range from its staging buffer as soon as it is read. The bytes
  // are NOT verified here: the caller checks the object's checksum. Errors per op: as
  // ReadBatch, plus the server's per-range code (OBJECT_NOT_FOUND: the region was reused;
  // CHECKSUM_MISMATCH: a corrupt record header; FILE_READ_FAIL; NO_AVAILABLE_HANDLE: no staging
  // space in time; UNAVAILABLE_IN_CURRENT_MODE: the server has no SSD tier), OBJECT_TOO_LARGE
  // when the staging budget holds no range, INVALID_KEY for an empty or over-long key.
  using NetworkSegmentClient::StageBatch;
  std::vector<Status> StageBatch(const std::vector<StageOp>& ops, double usable_ratio,
                                 const OpDone& on_done) override;

  // False once the connection failed or closed (see above); never true again. When no call is
  // running it first progresses the connection once, so a server that hung up is noticed here.
  bool alive() const override;

 private:
  struct Impl;
  explicit UcxSegmentClient(std::unique_ptr<Impl> impl);

  std::unique_ptr<Impl> impl_;
};

}  // namespace tierkv::transport
