#include "metrics/store_collector.h"

#include <utility>

#include "metrics/families.h"
#include "metrics/master_collector.h"

namespace tierkv {

std::vector<prometheus::MetricFamily> StoreCollector::Collect() const {
  constexpr const char* kStoreMetricPrefix = "tierkv_store_";
  const StoreFigures f = figures_();
  std::vector<prometheus::MetricFamily> out;
  prometheus::MetricFamily capacity =
      MakeFamily(kStoreMetricPrefix, "segment_capacity_bytes",
                 "DRAM this store contributes, in bytes", prometheus::MetricType::Gauge);
  prometheus::ClientMetric sample =
      SampleOf(prometheus::MetricType::Gauge, static_cast<double>(f.segment_bytes));
  sample.label = {{"segment", LabelValue(f.segment)}};
  capacity.metric.push_back(std::move(sample));
  out.push_back(std::move(capacity));
  AddSample(out, kStoreMetricPrefix, "shm_connections",
            "Same-host requesters holding a mapping of the segment (open connections)",
            prometheus::MetricType::Gauge, f.shm_connections);
  AddSample(out, kStoreMetricPrefix, "master_connected",
            "1 if the master answered the last heartbeat", prometheus::MetricType::Gauge,
            f.master_connected ? 1 : 0);
  AddSample(out, kStoreMetricPrefix, "registrations_total",
            "Times this store registered with a master (re-registrations follow master restarts)",
            prometheus::MetricType::Counter, f.registrations);
  AddSample(out, kStoreMetricPrefix, "segment_linked",
            "1 while the segment's stream to the master is up (its index fed, placeable)",
            prometheus::MetricType::Gauge, f.segment_linked ? 1 : 0);
  prometheus::MetricFamily entries = MakeFamily(
      kStoreMetricPrefix, "index_entries",
      "Objects in the store's index of its segment (what a new master recovers), by tier",
      prometheus::MetricType::Gauge);
  for (const auto& [tier, n] : {std::pair<const char*, uint64_t>{"memory", f.index_memory_entries},
                                std::pair<const char*, uint64_t>{"disk", f.index_disk_entries}}) {
    prometheus::ClientMetric m = SampleOf(prometheus::MetricType::Gauge, static_cast<double>(n));
    m.label = {{"tier", tier}};
    entries.metric.push_back(std::move(m));
  }
  out.push_back(std::move(entries));
  AddSample(out, kStoreMetricPrefix, "index_batches_total",
            "Index batches the master fed and the store applied", prometheus::MetricType::Counter,
            f.index_batches);
  AddSample(out, kStoreMetricPrefix, "index_reports_total",
            "Times the store reported its index to a master (each stream's start)",
            prometheus::MetricType::Counter, f.index_reports);
  AddTransferBytes(out, kStoreMetricPrefix,
                   "Bytes requesters moved over the network transport: read from the segment, "
                   "written into it",
                   f.transfers);
  if (!f.has_tier) return out;
  using prometheus::MetricType;
  const auto add = [&out](const char* name, const char* help, MetricType type, uint64_t value) {
    AddSample(out, "tierkv_store_ssd_", name, help, type, value);
  };
  const SsdTierStats& t = f.tier;
  add("capacity_bytes", "Bytes of the SSD tier's regions", MetricType::Gauge, f.tier_capacity);
  add("staging_capacity_bytes", "Bytes of the staging buffer staged loads go through",
      MetricType::Gauge, f.staging_capacity);
  add("staging_bytes_in_use", "Staging bytes reserved by loads in progress", MetricType::Gauge,
      t.staging.bytes_in_use);
  add("tier_move_requests_total",
      "Demotion and write-behind requests the master sent to this store", MetricType::Counter,
      f.tier_move_requests);
  add("appended_records_total", "Objects written to the tier (demoted or written behind)",
      MetricType::Counter, t.log.appended_records);
  add("appended_bytes_total", "Value bytes written to the tier", MetricType::Counter,
      t.log.appended_bytes);
  add("region_writes_total", "Regions written to the device", MetricType::Counter, t.log.flushes);
  add("region_write_errors_total", "Region writes that failed (IO errors)", MetricType::Counter,
      t.log.flush_errors);
  add("region_evictions_total", "Regions reused (their objects' disk replicas dropped)",
      MetricType::Counter, t.log.evicted_regions);
  add("reads_total", "Record ranges read successfully", MetricType::Counter, t.log.reads);
  add("read_errors_total", "Device reads that failed (IO errors)", MetricType::Counter,
      t.log.read_errors);
  add("checksum_failures_total", "Records whose header or key did not check out",
      MetricType::Counter, t.log.checksum_failures);
  add("stale_reads_total", "Reads of a region reused since (answered OBJECT_NOT_FOUND)",
      MetricType::Counter, t.log.stale_reads);
  add("staged_pieces_total", "Ranges staged for requesters", MetricType::Counter, t.staged_pieces);
  add("staged_bytes_total", "Value bytes staged for requesters", MetricType::Counter,
      t.staged_bytes);
  add("stage_errors_total", "Staged ranges that failed", MetricType::Counter, t.stage_errors);
  add("direct_reads_total", "Objects read straight into a caller's buffer (no staging)",
      MetricType::Counter, t.direct_reads);
  add("direct_bytes_total", "Value bytes read straight into callers' buffers", MetricType::Counter,
      t.direct_bytes);
  add("direct_errors_total", "Direct reads that failed", MetricType::Counter, t.direct_errors);
  add("staging_reclaimed_total", "Staging tickets reclaimed after their TTL", MetricType::Counter,
      t.staging.reclaimed);
  add("staging_timeouts_total", "Loads refused for lack of staging space in time",
      MetricType::Counter, t.staging.timeouts);
  return out;
}

}  // namespace tierkv
