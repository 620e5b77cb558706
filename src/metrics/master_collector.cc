#include "metrics/master_collector.h"

#include <prometheus/client_metric.h>
#include <prometheus/metric_type.h>

#include <map>
#include <string>
#include <utility>

#include "master/client_registry.h"
#include "master/master_service.h"
#include "metrics/families.h"

namespace tierkv {
namespace {

constexpr const char* kMasterMetricPrefix = "tierkv_master_";

prometheus::MetricFamily Family(const char* name, const char* help, prometheus::MetricType type) {
  return MakeFamily(kMasterMetricPrefix, name, help, type);
}
void Gauge(std::vector<prometheus::MetricFamily>& out, const char* name, const char* help,
           uint64_t value) {
  AddSample(out, kMasterMetricPrefix, name, help, prometheus::MetricType::Gauge, value);
}
void Counter(std::vector<prometheus::MetricFamily>& out, const char* name, const char* help,
             uint64_t value) {
  AddSample(out, kMasterMetricPrefix, name, help, prometheus::MetricType::Counter, value);
}

}  // namespace

std::string LabelValue(const std::string& text, size_t max) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < text.size() && i < max; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out.push_back(static_cast<char>(c));
    } else {
      out += "\\x";
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  if (text.size() > max) out += "...";
  return out;
}

MasterCollector::MasterCollector(MasterService& master, const ClientRegistry* clients)
    : master_(master), clients_(clients) {}

std::vector<prometheus::MetricFamily> MasterCollector::Collect() const {
  std::map<std::string, MasterStats> by_tenant;  // one walk of the table for both
  const MasterStats s = master_.Stats(&by_tenant);
  const std::vector<SegmentUsage> usage = master_.segments().Usage();
  std::vector<prometheus::MetricFamily> out;

  // Objects and replicas now.
  Gauge(out, "objects", "Objects in the metadata table, pending puts included", s.objects);
  Gauge(out, "pending_objects", "Objects whose put has started and not ended", s.pending_objects);
  Gauge(out, "groups", "Object groups (objects evicted and removed together)", s.groups);
  Gauge(out, "memory_replicas", "Replicas in DRAM segments", s.memory_replicas);
  Gauge(out, "disk_replicas", "Replicas in SSD tiers", s.disk_replicas);

  // Segments.
  Gauge(out, "segments", "Mounted segments", usage.size());
  prometheus::MetricFamily capacity =
      Family("segment_capacity_bytes", "Capacity of a mounted segment, in bytes",
             prometheus::MetricType::Gauge);
  prometheus::MetricFamily used =
      Family("segment_used_bytes", "Bytes of a mounted segment allocated to replicas",
             prometheus::MetricType::Gauge);
  for (const SegmentUsage& segment : usage) {
    const std::vector<prometheus::ClientMetric::Label> labels = {
        {"segment_id", std::to_string(segment.id)}, {"segment", LabelValue(segment.name)}};
    prometheus::ClientMetric c =
        SampleOf(prometheus::MetricType::Gauge, static_cast<double>(segment.capacity));
    c.label = labels;
    capacity.metric.push_back(std::move(c));
    prometheus::ClientMetric u =
        SampleOf(prometheus::MetricType::Gauge, static_cast<double>(segment.used));
    u.label = labels;
    used.metric.push_back(std::move(u));
  }
  out.push_back(std::move(capacity));
  out.push_back(std::move(used));

  // Reads and writes, per key.
  Counter(out, "gets_total", "Keys asked by GetReplicas (invalid keys included)", s.gets);
  Counter(out, "get_hits_total", "GetReplicas keys answered with replicas", s.get_hits);
  Counter(out, "get_misses_total", "GetReplicas keys absent or still pending", s.get_misses);
  Counter(out, "puts_total", "Puts ended (PutEnd OK)", s.puts);
  Counter(out, "removes_total", "Objects removed by Remove and RemoveAll", s.removes);
  Counter(out, "lease_grants_total", "Read leases granted or extended (Exists, GetReplicas)",
          s.lease_grants);
  Counter(out, "reclaimed_puts_total", "Pending puts reclaimed after the put timeout",
          s.reclaimed_puts);

  // Eviction and the SSD tier.
  Counter(out, "evicted_objects_total", "Objects evicted from DRAM segments", s.evicted_objects);
  Counter(out, "evicted_bytes_total", "Bytes freed in DRAM segments by eviction", s.evicted_bytes);
  Counter(out, "demoted_objects_total", "Objects moved to an SSD tier by eviction",
          s.demoted_objects);
  Counter(out, "demoted_bytes_total", "Bytes moved to an SSD tier by eviction", s.demoted_bytes);
  Counter(out, "demotion_failures_total", "Objects dropped because their SSD tier write failed",
          s.demotion_failures);
  Counter(out, "written_behind_total", "Objects copied to an SSD tier ahead of eviction",
          s.written_behind);
  Counter(out, "disk_replicas_dropped_total",
          "Disk replicas dropped because their SSD region was reused", s.disk_replicas_dropped);
  Counter(out, "promoted_objects_total", "Disk-only objects copied back to DRAM",
          s.promoted_objects);

  // Restart recovery (rebuilt from the stores' indexes) and the fenced frees.
  Counter(out, "recovered_replicas_total",
          "Memory and disk replicas rebuilt from the stores' index reports", s.recovered_replicas);
  Counter(out, "recovered_bytes_total", "Memory bytes of the replicas rebuilt from the stores",
          s.recovered_bytes);
  Counter(out, "recovery_rejected_total",
          "Reported index entries not adopted (conflicting or overlapping)", s.recovery_rejected);
  Counter(out, "lost_puts_total",
          "PutEnds of puts a previous master started (not recoverable: they failed)", s.lost_puts);
  uint64_t quarantined = 0;
  for (const SegmentUsage& segment : usage) quarantined += segment.quarantined;
  Gauge(out, "quarantined_bytes",
        "Freed bytes not reusable yet: their store has not acknowledged the free", quarantined);
  const std::vector<SegmentRecovery> recoveries = master_.Recoveries();
  prometheus::MetricFamily recovered =
      Family("segment_recovered_replicas",
             "Replicas rebuilt from a segment's index at its first link to this master, by tier",
             prometheus::MetricType::Gauge);
  prometheus::MetricFamily seconds =
      Family("segment_recovery_seconds", "How long a segment's index report took to adopt",
             prometheus::MetricType::Gauge);
  for (const SegmentRecovery& r : recoveries) {
    const std::vector<prometheus::ClientMetric::Label> labels = {
        {"segment_id", std::to_string(r.segment)}, {"segment", LabelValue(r.name)}};
    for (const auto& [tier, n] : {std::pair<const char*, uint64_t>{"memory", r.memory_replicas},
                                  std::pair<const char*, uint64_t>{"disk", r.disk_replicas}}) {
      prometheus::ClientMetric m = SampleOf(prometheus::MetricType::Gauge, static_cast<double>(n));
      m.label = labels;
      m.label.push_back({"tier", tier});
      recovered.metric.push_back(std::move(m));
    }
    prometheus::ClientMetric t = SampleOf(prometheus::MetricType::Gauge, r.seconds);
    t.label = labels;
    seconds.metric.push_back(std::move(t));
  }
  out.push_back(std::move(recovered));
  out.push_back(std::move(seconds));

  if (clients_ != nullptr) {
    Gauge(out, "clients", "Registered clients (requesters and stores)", clients_->size());
    Counter(out, "expired_clients_total", "Clients expired for missing their heartbeats",
            clients_->expired_total());
    AddTransferBytes(out, kMasterMetricPrefix,
                     "Bytes clients moved between their buffers and DRAM segments, per transport "
                     "and direction, as they report them with their heartbeats",
                     clients_->TransferTotals());
  }
  // Per tenant (the namespace of the keys; "default" for keys outside every namespace), and the
  // room of the segments dedicated to each (tierkv store --tenant).
  prometheus::MetricFamily tenant_objects =
      Family("tenant_objects", "Objects of a tenant (pending puts included)",
             prometheus::MetricType::Gauge);
  prometheus::MetricFamily tenant_memory =
      Family("tenant_memory_replicas", "A tenant's replicas in DRAM segments",
             prometheus::MetricType::Gauge);
  prometheus::MetricFamily tenant_disk = Family(
      "tenant_disk_replicas", "A tenant's replicas in SSD tiers", prometheus::MetricType::Gauge);
  auto label = [](const std::string& tenant) {
    return std::vector<prometheus::ClientMetric::Label>{
        {"tenant", tenant.empty() ? std::string("default") : LabelValue(tenant)}};
  };
  auto add = [](prometheus::MetricFamily& family, std::vector<prometheus::ClientMetric::Label> l,
                uint64_t value) {
    prometheus::ClientMetric sample =
        SampleOf(prometheus::MetricType::Gauge, static_cast<double>(value));
    sample.label = std::move(l);
    family.metric.push_back(std::move(sample));
  };
  for (const auto& [tenant, st] : by_tenant) {
    add(tenant_objects, label(tenant), st.objects);
    add(tenant_memory, label(tenant), st.memory_replicas);
    add(tenant_disk, label(tenant), st.disk_replicas);
  }
  out.push_back(std::move(tenant_objects));
  out.push_back(std::move(tenant_memory));
  out.push_back(std::move(tenant_disk));
  std::map<std::string, std::pair<uint64_t, uint64_t>> dedicated;  // tenant -> capacity, used
  for (const SegmentUsage& segment : usage) {
    auto seg = master_.segments().Find(segment.id);
    if (!seg || seg->options.tenant.empty()) continue;
    auto& [cap, use] = dedicated[seg->options.tenant];
    cap += segment.capacity;
    use += segment.used;
  }
  prometheus::MetricFamily tenant_capacity =
      Family("tenant_segment_capacity_bytes",
             "Capacity of the segments dedicated to a tenant (its DRAM quota)",
             prometheus::MetricType::Gauge);
  prometheus::MetricFamily tenant_used =
      Family("tenant_segment_used_bytes", "Bytes allocated in the segments dedicated to a tenant",
             prometheus::MetricType::Gauge);
  for (const auto& [tenant, room] : dedicated) {
    add(tenant_capacity, label(tenant), room.first);
    add(tenant_used, label(tenant), room.second);
  }
  out.push_back(std::move(tenant_capacity));
  out.push_back(std::move(tenant_used));
  return out;
}

}  // namespace tierkv
