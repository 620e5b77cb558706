// The network data plane, whatever carries it: a store serves its segment (and SSD tier) to
// requesters on other hosts through a NetworkSegmentServer, and a requester reaches it through a
// NetworkSegmentClient. Two implementations, chosen by the protocol:
//   "tcp"   TcpSegmentServer / TcpSegmentClient: tierkv's own TCP transport
//           (docs/tcp-transport.md);
//   "rdma"  UcxSegmentServer / UcxSegmentClient: UCX over verbs (docs/ucx-transport.md).
// Why not UCX for tcp as well (docs/security.md, "The data port"): UCX 1.13's tcp transport and
// its socket connection manager listen on every interface they use and abort the process on
// malformed bytes from anyone who connects, before any tierkv code sees them.
//
// Thread-safety: as the implementations (every method may be called from any thread).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/disk_location.h"
#include "memory/memory_segment.h"
#include "tierkv/status.h"
#include "transfer/copy.h"
#include "transport/stage_source.h"
#include "transport/ucx_options.h"

namespace tierkv::transport {

// A store's side. Owns its listener, every connection, and a reference to the segment.
class NetworkSegmentServer {
 public:
  virtual ~NetworkSegmentServer() = default;
  // "host:port" as requesters pass it to ConnectNetworkSegment.
  virtual std::string address() const = 0;
  // Connections currently open (handshaking or established).
  virtual size_t open_endpoints() const = 0;
  // Bytes requesters read (segment or SSD tier) and wrote, since Start.
  virtual uint64_t read_bytes() const = 0;
  virtual uint64_t written_bytes() const = 0;
  // "tcp" or "rdma".
  virtual const std::string& protocol() const = 0;
  // Handshakes refused for a missing or wrong proof of the cluster token.
  virtual uint64_t unauthenticated() const { return 0; }
  // Stops serving: closes the listener and every connection, joins. Idempotent.
  virtual void Stop() = 0;
};

// A requester's connection to one server, naming one segment. Calls run one at a time; threads
// that need parallel transfers use one client each. Once the connection fails (the server hung
// up, broke the protocol, or left a call without any reply for options.io_timeout) it is closed
// for good: alive() turns false and every later call fails with TRANSFER_FAIL naming the cause.
class NetworkSegmentClient {
 public:
  // A range [offset, offset + total) of the segment, total = the sum of the pieces' sizes: read
  // into `dst`, or written from `src`, piece after piece. The caller owns the buffers; they must
  // stay valid until the batch returns.
  struct ReadOp {
    uint64_t offset = 0;
    std::vector<MutPiece> dst;
  };
  struct WriteOp {
    uint64_t offset = 0;
    std::vector<ConstPiece> src;
  };
  // A staged load: the whole value of the record of `key` at `location` in the server's SSD
  // tier, into `dst` (exactly location.size bytes).
  struct StageOp {
    std::string key;
    DiskLocation location;
    std::vector<MutPiece> dst;
  };

  virtual ~NetworkSegmentClient() = default;
  // The segment's size and the server's staging capacity (0: no SSD tier), from the handshake.
  virtual uint64_t size() const = 0;
  virtual uint64_t staging_capacity() const = 0;
  virtual const std::string& address() const = 0;
  virtual const std::string& segment_name() const = 0;
  // One status per op, in order; many requests in flight. Errors per op: INVALID_PARAMS (a
  // range outside the segment, a null piece with a size; checked here and again by the server);
  // TRANSFER_FAIL (the connection failed before or during the op). An op that failed may have
  // moved part of its bytes. An empty range succeeds without a message. `idle` (0: the
  // transport's io_timeout, and never more than it): how long the batch waits for the server
  // without any reply before it fails and the connection is closed — shorter when the caller
  // has another replica to fail over to within its lease.
  //
  // `on_done` (may be empty): called with an op's index once all its bytes are in and it will be
  // returned OK — on the calling thread, from inside the batch, as soon as the transport knows
  // (tcp: on the op's last byte; rdma: when the batch ends), so the caller can start checking
  // an op while later ones are still on the wire. It must be quick and must not call back into
  // this client. Never called for an op that fails.
  using OpDone = std::function<void(size_t op)>;
  virtual std::vector<Status> ReadBatch(const std::vector<ReadOp>& ops,
                                        std::chrono::milliseconds idle, const OpDone& on_done) = 0;
  std::vector<Status> ReadBatch(const std::vector<ReadOp>& ops, std::chrono::milliseconds idle) {
    return ReadBatch(ops, idle, {});
  }
  std::vector<Status> ReadBatch(const std::vector<ReadOp>& ops) { return ReadBatch(ops, {}, {}); }
  virtual std::vector<Status> WriteBatch(const std::vector<WriteOp>& ops) = 0;
  // Loads every op from the server's SSD tier, each cut into ranges whose staging need fits
  // usable_ratio x the server's staging capacity. The bytes are NOT verified here (the caller
  // checks the object's checksum). Errors per op: as ReadBatch, plus the server's per-range code
  // (OBJECT_NOT_FOUND, CHECKSUM_MISMATCH, FILE_READ_FAIL, NO_AVAILABLE_HANDLE,
  // UNAVAILABLE_IN_CURRENT_MODE: no SSD tier), OBJECT_TOO_LARGE when the staging budget holds
  // no range, INVALID_KEY for an empty or over-long key. `on_done`: as ReadBatch's.
  virtual std::vector<Status> StageBatch(const std::vector<StageOp>& ops, double usable_ratio,
                                         const OpDone& on_done) = 0;
  std::vector<Status> StageBatch(const std::vector<StageOp>& ops, double usable_ratio) {
    return StageBatch(ops, usable_ratio, {});
  }
  // False once the connection failed or closed; never true again.
  virtual bool alive() const = 0;
};

// Serves `segment` (and the staged loads of `stages`, may be null) on `host`:`port` (0: a free
// port) over options.protocol: TcpSegmentServer for "tcp", UcxSegmentServer for "rdma". Errors:
// as the implementation's Start; INVALID_CONFIG for another protocol.
Result<std::unique_ptr<NetworkSegmentServer>> StartNetworkSegmentServer(
    std::shared_ptr<MemorySegment> segment, const std::string& host, int port,
    const UcxTransportOptions& options, std::shared_ptr<StageSource> stages = nullptr);

// Connects to the server at `address` for `segment_name` over options.protocol (as above).
Result<std::unique_ptr<NetworkSegmentClient>> ConnectNetworkSegment(
    const std::string& address, const std::string& segment_name, std::chrono::milliseconds timeout,
    const UcxTransportOptions& options);

}  // namespace tierkv::transport
