#include "stat_command.h"

#include <cstdint>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "common/clock.h"
#include "common/host_port.h"
#include "exit_codes.h"
#include "metrics/master_collector.h"
#include "rpc/channel_security.h"
#include "rpc/etcd_client.h"
#include "rpc/remote_master.h"

namespace tierkv::cli {
namespace {

struct StatFlags {
  std::string token_file;
  std::string tls_ca;
  std::string tls_cert;
  std::string tls_key;
  std::string etcd_user;
  std::string etcd_password_file;
  std::string etcd_ca;
  std::string master;
  bool json = false;
  int64_t timeout_ms = 5000;
};

std::string Bytes(uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double value = static_cast<double>(bytes);
  size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < std::size(kUnits)) {
    value /= 1024.0;
    ++unit;
  }
  char buf[32];
  if (unit == 0) {
    std::snprintf(buf, sizeof(buf), "%llu B", static_cast<unsigned long long>(bytes));
  } else {
    std::snprintf(buf, sizeof(buf), "%.1f %s", value, kUnits[unit]);
  }
  return buf;
}

std::string Percent(double ratio) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%.1f%%", 100.0 * ratio);
  return buf;
}

// "0.012": a duration in seconds, to the millisecond.
std::string Seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3f", s);
  return buf;
}

// hits / (hits + misses); nullopt before the first get.
std::optional<double> HitRate(const MasterStats& s) {
  const uint64_t asked = s.get_hits + s.get_misses;
  if (asked == 0) return std::nullopt;
  return static_cast<double>(s.get_hits) / static_cast<double>(asked);
}

double UsedRatio(const SegmentUsage& segment) {
  return segment.capacity == 0
             ? 0.0
             : static_cast<double>(segment.used) / static_cast<double>(segment.capacity);
}

// The HA lines: which master leads, and the others (etcd's member keys).
void PrintHaText(const MasterProcessStats& p) {
  if (!p.ha) return;
  std::cout << "leader: " << (p.leader.empty() ? std::string("none") : p.leader) << " (epoch "
            << p.leader_epoch << ")" << (p.leading ? "" : "; this master is a standby") << "\n";
  std::cout << "standbys:";
  bool any = false;
  for (const std::string& m : p.masters) {
    if (m == p.leader) continue;
    std::cout << " " << m;
    any = true;
  }
  std::cout << (any ? "" : (p.masters.empty() ? " (not listed: ask etcd://...)" : " none")) << "\n";
}

void PrintText(const std::string& address, const MasterProcessStats& p) {
  const MasterStats& s = p.master;
  std::cout << "tierkv master " << address;
  if (!p.answered_by.empty() && p.answered_by != address) std::cout << " -> " << p.answered_by;
  std::cout << "\n";
  PrintHaText(p);
  if (!p.leading) return;  // a standby holds nothing
  std::cout << "metadata channel: "
            << (p.meta_port == 0 ? std::string("none (every call over gRPC)")
                                 : "port " + std::to_string(p.meta_port))
            << "\n";
  std::cout << "segments: " << p.segments << "\n";
  uint64_t used = 0;
  uint64_t capacity = 0;
  for (const SegmentUsage& segment : p.segment_usage) {
    std::cout << "  [" << segment.id << "] " << LabelValue(segment.name) << ": "
              << Bytes(segment.used) << " / " << Bytes(segment.capacity) << " ("
              << Percent(UsedRatio(segment)) << ")\n";
    used += segment.used;
    capacity += segment.capacity;
  }
  if (p.segment_usage.size() > 1) {
    std::cout << "  total: " << Bytes(used) << " / " << Bytes(capacity) << " ("
              << Percent(capacity == 0 ? 0.0
                                       : static_cast<double>(used) / static_cast<double>(capacity))
              << ")\n";
  }
  std::cout << "objects: " << s.objects << " (" << s.pending_objects << " pending, " << s.groups
            << " groups)\n";
  std::cout << "replicas: " << s.memory_replicas << " in memory, " << s.disk_replicas
            << " on disk\n";
  const std::optional<double> rate = HitRate(s);
  std::cout << "gets: " << s.gets << " keys, " << s.get_hits << " hits, " << s.get_misses
            << " misses, hit rate " << (rate ? Percent(*rate) : std::string("n/a")) << "\n";
  std::cout << "puts: " << s.puts << ", removes: " << s.removes
            << ", lease grants: " << s.lease_grants << ", reclaimed puts: " << s.reclaimed_puts
            << "\n";
  std::cout << "evictions: " << s.evicted_objects << " objects, " << Bytes(s.evicted_bytes) << "\n";
  std::cout << "demotions: " << s.demoted_objects << " objects, " << Bytes(s.demoted_bytes) << ", "
            << s.demotion_failures << " failures; written behind: " << s.written_behind
            << ", promoted: " << s.promoted_objects
            << ", disk replicas dropped: " << s.disk_replicas_dropped << "\n";
  std::cout << "recovery: " << s.recovered_replicas << " replicas (" << Bytes(s.recovered_bytes)
            << ") rebuilt from the stores' indexes, " << s.recovery_rejected
            << " reported entries not adopted; lost puts: " << s.lost_puts
            << "; quarantined: " << Bytes(p.quarantined_bytes) << "\n";
  for (const SegmentRecovery& r : p.recoveries) {
    std::cout << "  [" << r.segment << "] " << LabelValue(r.name) << ": "
              << (r.done ? "" : "recovering, ") << r.memory_replicas << " memory + "
              << r.disk_replicas << " disk replicas (" << Bytes(r.bytes) << ") of " << r.reported
              << " reported, " << r.rejected << " not adopted, in " << Seconds(r.seconds) << " s; "
              << r.links << " link(s)\n";
  }
  std::cout << "clients: " << p.clients << " (" << p.expired_clients << " expired since start)\n";
  std::cout << "transfers (as clients report them):";
  bool any = false;
  for (const TransferCount& t : p.transfers) {
    if (t.read_bytes == 0 && t.written_bytes == 0) continue;
    std::cout << (any ? ";" : "") << " " << t.transport << " " << Bytes(t.read_bytes) << " read, "
              << Bytes(t.written_bytes) << " written";
    any = true;
  }
  std::cout << (any ? "" : " none") << "\n";
}

void PrintJson(const std::string& address, const MasterProcessStats& p) {
  const MasterStats& s = p.master;
  nlohmann::json segments = nlohmann::json::array();
  for (const SegmentUsage& segment : p.segment_usage) {
    segments.push_back({{"id", segment.id},
                        {"name", segment.name},
                        {"capacity", segment.capacity},
                        {"used", segment.used},
                        {"used_ratio", UsedRatio(segment)}});
  }
  nlohmann::json transfers = nlohmann::json::object();
  for (const TransferCount& t : p.transfers) {
    transfers[t.transport] = {{"read_bytes", t.read_bytes}, {"written_bytes", t.written_bytes}};
  }
  nlohmann::json recoveries = nlohmann::json::array();
  for (const SegmentRecovery& r : p.recoveries) {
    recoveries.push_back({{"segment", r.segment},
                          {"name", r.name},
                          {"done", r.done},
                          {"links", r.links},
                          {"reported", r.reported},
                          {"memory_replicas", r.memory_replicas},
                          {"disk_replicas", r.disk_replicas},
                          {"bytes", r.bytes},
                          {"rejected", r.rejected},
                          {"seconds", r.seconds}});
  }
  nlohmann::json standbys = nlohmann::json::array();
  for (const std::string& m : p.masters) {
    if (m != p.leader) standbys.push_back(m);
  }
  const std::optional<double> rate = HitRate(s);
  nlohmann::json out = {
      {"master", address},
      {"answered_by", p.answered_by},
      {"ha", p.ha},
      {"leading", p.leading},
      {"leader", p.leader},
      {"leader_epoch", p.leader_epoch},
      {"standbys", standbys},
      {"recovered_replicas", s.recovered_replicas},
      {"recovered_bytes", s.recovered_bytes},
      {"recovery_rejected", s.recovery_rejected},
      {"lost_puts", s.lost_puts},
      {"quarantined_bytes", p.quarantined_bytes},
      {"recoveries", recoveries},
      {"incarnation", p.incarnation},
      {"meta_port", p.meta_port},
      {"segments", segments},
      {"objects", s.objects},
      {"pending_objects", s.pending_objects},
      {"groups", s.groups},
      {"memory_replicas", s.memory_replicas},
      {"disk_replicas", s.disk_replicas},
      {"gets", s.gets},
      {"get_hits", s.get_hits},
      {"get_misses", s.get_misses},
      {"hit_rate", rate ? nlohmann::json(*rate) : nlohmann::json(nullptr)},
      {"puts", s.puts},
      {"removes", s.removes},
      {"lease_grants", s.lease_grants},
      {"reclaimed_puts", s.reclaimed_puts},
      {"evicted_objects", s.evicted_objects},
      {"evicted_bytes", s.evicted_bytes},
      {"demoted_objects", s.demoted_objects},
      {"demoted_bytes", s.demoted_bytes},
      {"demotion_failures", s.demotion_failures},
      {"written_behind", s.written_behind},
      {"promoted_objects", s.promoted_objects},
      {"disk_replicas_dropped", s.disk_replicas_dropped},
      {"clients", p.clients},
      {"expired_clients", p.expired_clients},
      {"transfers", transfers},
  };
  // Segment names are client bytes: invalid UTF-8 becomes U+FFFD instead of an exception.
  std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << std::endl;
}

int RunStat(const StatFlags& flags) {
  if (flags.master.rfind("etcd://", 0) != 0) {
    if (Status st = CheckHostPort(flags.master, "--master"); !st.ok()) {
      std::cerr << "tierkv stat: error: " << st.message() << std::endl;
      return kExitUsage;
    }
  }
  Config config;
  config.cluster_token_file = flags.token_file;
  config.tls_ca_file = flags.tls_ca;
  config.tls_cert_file = flags.tls_cert;
  config.tls_key_file = flags.tls_key;
  config.etcd_user = flags.etcd_user;
  config.etcd_password_file = flags.etcd_password_file;
  config.etcd_ca_file = flags.etcd_ca;
  auto security = ControlPlaneSecurityFrom(config);
  if (!security.ok()) {
    std::cerr << "tierkv stat: error: " << security.status().message() << std::endl;
    return kExitUsage;
  }
  Result<MasterProcessStats> stats =
      RemoteMaster::QueryStats(flags.master, Millis(flags.timeout_ms), *security);
  if (!stats.ok()) {
    std::cerr << "tierkv stat: error: " << stats.status().ToString() << std::endl;
    return stats.code() == ErrorCode::INVALID_PARAMS ? kExitUsage : kExitFailed;
  }
  if (flags.json) {
    PrintJson(flags.master, *stats);
  } else {
    PrintText(flags.master, *stats);
    std::cout << std::flush;
  }
  return 0;
}

}  // namespace

void AddStatCommand(CLI::App& app, int* exit_code) {
  auto flags = std::make_shared<StatFlags>();
  CLI::App* stat = app.add_subcommand(
      "stat",
      "Show what a running `tierkv master` holds: segment usage, objects, memory and disk "
      "replicas, hit rate, evictions, demotions, restart recovery per store, lost puts, clients, "
      "transfer bytes per transport, and with etcd the leader and the standbys (one Stats RPC; "
      "not a client)");
  stat->add_option("--master", flags->master,
                   "The master's gRPC address, HOST:PORT, or etcd://HOST:PORT[;HOST:PORT...] for "
                   "the leader of masters started with --ha")
      ->required();
  stat->add_flag("--json", flags->json, "One JSON object on stdout instead of the summary");
  stat->add_option("--token-file", flags->token_file,
                   "The cluster token (a file of mode 0600 or stricter), for a master started "
                   "with --token-file");
  stat->add_option("--tls-ca", flags->tls_ca, "TLS: the CA of the master's certificate (PEM)");
  stat->add_option("--tls-cert", flags->tls_cert,
                   "Mutual TLS: this client's certificate (PEM), with --tls-key");
  stat->add_option("--tls-key", flags->tls_key, "The key of --tls-cert (PEM)");
  stat->add_option("--etcd-user", flags->etcd_user,
                   "With --master etcd://...: the etcd user (etcd's auth enabled)");
  stat->add_option("--etcd-password-file", flags->etcd_password_file,
                   "A file (mode 0600 or stricter) holding --etcd-user's password");
  stat->add_option("--etcd-ca", flags->etcd_ca, "TLS to etcd, trusting this CA (PEM)");
  stat->add_option("--timeout-ms", flags->timeout_ms,
                   "Give up (exit status 1) when the master has not answered within this long")
      ->check(CLI::Range(int64_t{1}, int64_t{3'600'000}))
      ->capture_default_str();
  stat->callback([flags, exit_code] { *exit_code = RunStat(*flags); });
}

}  // namespace tierkv::cli
