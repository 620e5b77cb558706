// Store: the store role — contributes a DRAM segment to a master's pool, serves its bytes to
// the processes that read and write replicas on it, and owns the SSD tier behind it.
//
// `tierkv store` is a Store on a remote master (rpc/remote_backend.h); an embedded client that
// contributes a segment (global_segment_size > 0) owns one too, on an in-process master or a
// remote one. What it does, in order (Create):
//   1. maps and pre-faults the segment (memory/memory_segment.h);
//   2. with enable_offload, opens the SSD tier (ssd/ssd_tier.h; warm restart scans it), and
//      reclaims its expired staging space every second;
//   3. when other processes reach the segment (SegmentHost::serves_other_processes), serves it
//      over shared memory (transport/shm_segment_server.h) and, on `data_host` — or on
//      127.0.0.1 when there is a tier but no data host, for this host's staged loads — over the
//      network (transport/network_segment.h: tcp, or UCX for rdma), whose staged loads from the
//      tier a TierStager reads;
//   4. mounts the segment on the host's master, under a name that carries those endpoints;
//   5. attaches the tier (the master demotes into it through a LocalTierMover) and registers
//      what warm restart found.
// The destructor detaches the tier, unmounts (the master drops the segment's replicas) and
// stops the servers. Thread-safety: the accessors are thread-safe; the object is immutable
// after Create.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/periodic_thread.h"
#include "master/segment_registry.h"
#include "memory/memory_segment.h"
#include "ssd/ssd_tier.h"
#include "store/segment_host.h"
#include "tierkv/config.h"
#include "tierkv/status.h"
#include "transfer/transfer_counters.h"

namespace tierkv {

namespace transport {
class ShmSegmentServer;
class NetworkSegmentServer;
}  // namespace transport
class LocalTierMover;
class TierStager;

struct StoreOptions {
  // Address the network transport listens on and advertises (a free port), when the host
  // serves other processes; "" = shared memory only (plus 127.0.0.1 for an SSD tier's staged
  // loads).
  std::string data_host;
  // Adjusts the SSD tier's options before it opens (tests: fault-injecting devices).
  std::function<void(SsdTierOptions&)> tier_hook;
  // The port the network transport listens on (0: a free one). When that port is taken, a free one
  // is used and a warning names both: requesters learn the address from the master, not from the
  // config.
  int data_port = 0;
  // Mooncake's naming (a client contributing a segment to a remote master): the segment is named
  // "<host>:<port>" after its data port — data_port when it can be bound there, else a free one
  // in 12300..14300, as Mooncake's handshake picks — and served on that port, so that
  // get_hostname() returns what Mooncake's does. Otherwise (or with no port free there)
  // "<host>:<pid>:<n>".
  bool name_by_data_port = false;
};

class Store {
 public:
  // Contributes a segment of config.global_segment_size to `host`'s master, with an SSD tier
  // when config.enable_offload (offload_* keys, TierOptionsFrom). Errors: INTERNAL_ERROR (the
  // segment could not be mapped or pre-faulted), the SSD tier's Open errors (INVALID_CONFIG,
  // FILE_OPEN_FAIL, ...), the servers' Start errors (TRANSFER_FAIL, INVALID_CONFIG,
  // UNAVAILABLE_IN_CURRENT_MODE for the network transport's options), the master's
  // MountSegment errors (RPC_FAIL for a remote one, or one that did not take the segment's
  // stream within 5 s).
  static Result<std::unique_ptr<Store>> Create(const Config& config,
                                               std::shared_ptr<SegmentHost> host,
                                               StoreOptions options = {});
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // The name the segment is mounted under ("<host>:<pid>:<n>", followed by "@<socket>" and
  // "#<data address>" when served to other processes).
  const std::string& mounted_name() const { return mounted_name_; }
  // The id the host gave the segment (a remote master's handle: stable across re-mounts).
  SegmentId segment_id() const { return segment_id_; }
  const std::shared_ptr<MemorySegment>& segment() const { return segment_; }
  // The SSD tier behind the segment; null without enable_offload.
  const std::shared_ptr<SsdTier>& tier() const { return tier_; }

  // For a store's metrics: same-host requesters mapping the segment now; the bytes requesters
  // moved through the network server (read from the segment or the tier, written into the
  // segment; empty without one); the master's tier-move requests answered.
  size_t shm_connections() const;
  std::vector<TransferCount> served_transfers() const;
  uint64_t tier_move_requests() const;
  // "host:port" of the network server, "" without one.
  std::string data_address() const;
  // Data-port handshakes refused for a missing or wrong cluster token.
  uint64_t data_unauthenticated() const;

 private:
  Store(std::shared_ptr<SegmentHost> host, std::shared_ptr<MemorySegment> segment);
  // Opens the SSD tier; its region-reuse callback tells the master once the segment is mounted.
  Status OpenTier(const Config& config, const StoreOptions& options,
                  std::vector<ScannedRecord>* surviving);
  Status Serve(const Config& config, const StoreOptions& options);
  // Registers what warm restart found, and logs the tier's shape.
  Status AttachTier(const Config& config, std::vector<ScannedRecord>& surviving);
  // One info line with the tier's counters (at shutdown).
  void LogTierCounters() const;

  const std::shared_ptr<SegmentHost> host_;
  const std::shared_ptr<MemorySegment> segment_;
  std::string mounted_name_;
  SegmentId segment_id_ = 0;
  // The segment's id once mounted (0 before), for the tier's region-reuse callback.
  std::shared_ptr<std::atomic<SegmentId>> mounted_id_ = std::make_shared<std::atomic<SegmentId>>(0);
  std::shared_ptr<SsdTier> tier_;
  std::shared_ptr<LocalTierMover> mover_;
  // Every second: the tier's staging space whose ticket outlived staging_ttl_ms (a requester or
  // a send that vanished without releasing it).
  std::unique_ptr<PeriodicThread> reclaim_;
  std::shared_ptr<TierStager> stager_;  // answers the UCX server's stage requests; outlives it
  std::unique_ptr<transport::ShmSegmentServer> shm_server_;
  std::unique_ptr<transport::NetworkSegmentServer> ucx_server_;  // tcp, or UCX for rdma
};

// The SSD tier options `config` asks for (enable_offload, offload_*, staging_*).
SsdTierOptions TierOptionsFrom(const Config& config);

}  // namespace tierkv
