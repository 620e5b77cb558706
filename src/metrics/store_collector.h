// StoreCollector: a `tierkv store`'s figures as Prometheus metrics (tierkv_store_*), read when
// scraped from a callback the store provides. docs/metrics.md lists every metric.
//
// Same-host requesters copy the store's bytes through their own mapping of its segment, so
// the store never sees those transfers: its transfer bytes are those of its network transport;
// requesters report theirs, shm included, to the master (tierkv_master_transfer_bytes_total).
// What the store's objects use of its segment is the master's tierkv_master_segment_used_bytes.
// Thread-safety: thread-safe if the callback is.
#pragma once

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ssd/ssd_tier.h"
#include "transfer/transfer_counters.h"

namespace tierkv {

struct StoreFigures {
  std::string segment;            // the mounted name
  uint64_t segment_bytes = 0;     // capacity contributed
  uint64_t shm_connections = 0;   // requesters holding a mapping (open handshake connections)
  bool master_connected = false;  // the last heartbeat was answered
  uint64_t registrations = 0;     // times registered with a master (1 + re-registrations)
  std::vector<TransferCount> transfers;  // bytes moved by the store's network transport
  // The segment's index (restart recovery) and its stream to the master.
  bool segment_linked = false;
  uint64_t index_memory_entries = 0;
  uint64_t index_disk_entries = 0;
  uint64_t index_batches = 0;
  uint64_t index_reports = 0;
  // The SSD tier (enable_offload); the tierkv_store_ssd_* metrics only when it has one.
  bool has_tier = false;
  uint64_t tier_capacity = 0;
  uint64_t staging_capacity = 0;
  uint64_t tier_move_requests = 0;  // demotion / write-behind requests the master sent
  SsdTierStats tier;
};

class StoreCollector final : public prometheus::Collectable {
 public:
  explicit StoreCollector(std::function<StoreFigures()> figures) : figures_(std::move(figures)) {}
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const std::function<StoreFigures()> figures_;
};

}  // namespace tierkv
