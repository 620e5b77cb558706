#include "master_command.h"

#include <signal.h>
#include <spdlog/spdlog.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "common/cluster_token.h"
#include "common/host_port.h"
#include "common/key.h"
#include "exit_codes.h"
#include "metrics/ha_collector.h"
#include "metrics/metrics_registry.h"
#include "metrics/metrics_server.h"
#include "rpc/channel_security.h"
#include "rpc/etcd_client.h"
#include "rpc/leader_election.h"
#include "rpc/master_server.h"
#include "tierkv/config.h"
#include "tierkv/types.h"

namespace tierkv::cli {
namespace {

// Defaults: those of the config keys the flags stand for (tierkv/config.h).
struct MasterFlags {
  std::string host = "127.0.0.1";
  int port = 50051;
  int meta_port = 0;  // the metadata channel's; 0 = a free one, -1 = none
  uint64_t lease_ttl_ms = Config{}.default_kv_lease_ttl_ms;
  uint64_t soft_pin_ttl_ms = Config{}.default_kv_soft_pin_ttl_ms;
  double high_watermark = Config{}.eviction_high_watermark_ratio;
  double eviction_ratio = Config{}.eviction_ratio;
  std::string eviction_policy = Config{}.eviction_policy;
  int64_t client_ttl_ms = 10000;
  uint64_t put_timeout_ms = Config{}.put_start_discard_timeout_ms;
  int64_t tier_move_timeout_ms = 30000;
  uint32_t shards = Config{}.metadata_shards;
  int metrics_port = 9003;  // -1 = no metrics server
  std::string ha;           // etcd://host:port[;host:port...]: standby masters
  int64_t ha_lease_ttl_s = 2;
  std::string advertise;  // the address published in etcd; "" = host:port bound
  int64_t free_ack_wait_ms = 1000;
  int64_t index_linger_us = 1000;
  std::string root_fs_dir;        // told to clients (ClientDefaults)
  bool promote_on_hit = false;    // told to clients
  uint32_t promote_min_hits = 0;  // told to clients; 0 = theirs
  std::string token_file;         // the cluster token; "" = none (trust whoever connects)
  std::string accept_token_file;  // a second accepted token (rotation)
  std::string store_token_file;   // the stores' credential; "" = the cluster token's holders
  std::string tenants_file;       // tenants' credentials (JSON); "" = none
  std::string admin_token_file;   // whole-cluster calls when tenants are configured
  std::string tls_cert;           // TLS: certificate and key (PEM); "" = plaintext
  std::string tls_key;
  std::string tls_ca;  // given: clients must present a certificate it signed (mutual TLS)
  int64_t idle_timeout_ms = 60000;
  std::string etcd_user;  // with --ha: etcd's authentication
  std::string etcd_password_file;
  std::string etcd_ca;
};

// --tenants-file: {"tenants": {"NAME": {"token_file": PATH}, ...}}. INVALID_CONFIG naming the
// file and what is wrong.
Status LoadTenants(const std::string& path, MasterServerOptions* options) {
  auto bad = [&](const std::string& why) {
    return Status(ErrorCode::INVALID_CONFIG, "--tenants-file " + path + ": " + why);
  };
  std::ifstream in(path);
  if (!in) return bad("cannot be read");
  const nlohmann::json doc = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return bad("not a JSON object");
  for (const auto& [key, value] : doc.items()) {
    if (key != "tenants") return bad("unknown key '" + key + "' (only \"tenants\")");
  }
  if (!doc.contains("tenants") || !doc["tenants"].is_object() || doc["tenants"].empty()) {
    return bad("\"tenants\" must be an object naming at least one tenant");
  }
  for (const auto& [name, tenant] : doc["tenants"].items()) {
    if (!IsTenantName(name) || name == "default") {
      return bad("tenant '" + name +
                 "': a name of 1..64 characters of A-Z a-z 0-9 _ . - (not "
                 "\"default\")");
    }
    if (!tenant.is_object()) return bad("tenant '" + name + "' must be an object");
    for (const auto& [field, value] : tenant.items()) {
      if (field == "token_file") continue;
      if (field == "dram_quota" || field == "ssd_quota" || field == "dram_share") {
        return bad("tenant '" + name + "': '" + field +
                   "' is not supported: quotas inside shared segments are not built; dedicate "
                   "stores to the tenant instead (tierkv store --tenant " +
                   name + "): their capacity is its quota");
      }
      return bad("tenant '" + name + "': unknown key '" + field + "' (only \"token_file\")");
    }
    if (!tenant.contains("token_file") || !tenant["token_file"].is_string()) {
      return bad("tenant '" + name + "' needs \"token_file\"");
    }
    auto tokens = TokenSet::Load(tenant["token_file"].get<std::string>());
    if (!tokens.ok()) return bad("tenant '" + name + "': " + tokens.status().message());
    const std::string prefix = std::string(1, kKeyNamespaceMark) + name + kKeyNamespaceMark;
    options->tenants.push_back(TenantCredential{name, prefix, std::move(tokens).value()});
  }
  return Status::Ok();
}

// Loads the token and TLS files named by the flags into `options`; false (and the error
// printed, naming the flag) when one is refused.
bool LoadSecurity(const MasterFlags& flags, MasterServerOptions* options) {
  auto fail = [](const std::string& message) {
    std::cerr << "tierkv master: error: " << message << std::endl;
    return false;
  };
  if (!flags.accept_token_file.empty() && flags.token_file.empty()) {
    return fail("--accept-token-file needs --token-file (the token of the cluster)");
  }
  if (!flags.token_file.empty()) {
    auto tokens = TokenSet::Load(flags.token_file, flags.accept_token_file);
    if (!tokens.ok()) return fail("--token-file: " + tokens.status().message());
    options->tokens = std::move(tokens).value();
  }
  if (!flags.store_token_file.empty()) {
    if (flags.token_file.empty()) return fail("--store-token-file needs --token-file");
    auto stores = TokenSet::Load(flags.store_token_file);
    if (!stores.ok()) return fail("--store-token-file: " + stores.status().message());
    options->store_tokens = std::move(stores).value();
  }
  if (!flags.tenants_file.empty()) {
    if (Status st = LoadTenants(flags.tenants_file, options); !st.ok()) return fail(st.message());
    if (options->store_tokens == nullptr) {
      return fail("--tenants-file needs --store-token-file: stores report every tenant's keys");
    }
  }
  if (!flags.admin_token_file.empty()) {
    if (flags.token_file.empty()) return fail("--admin-token-file needs --token-file");
    auto admin = TokenSet::Load(flags.admin_token_file);
    if (!admin.ok()) return fail("--admin-token-file: " + admin.status().message());
    options->admin_tokens = std::move(admin).value();
  }
  if (flags.tls_cert.empty() != flags.tls_key.empty()) {
    return fail("--tls-cert and --tls-key go together");
  }
  if (!flags.tls_ca.empty() && flags.tls_cert.empty()) {
    return fail("--tls-ca (mutual TLS) needs --tls-cert and --tls-key");
  }
  const std::pair<const std::string*, std::string*> files[] = {
      {&flags.tls_cert, &options->tls_cert_pem},
      {&flags.tls_key, &options->tls_key_pem},
      {&flags.tls_ca, &options->tls_ca_pem}};
  const char* names[] = {"--tls-cert", "--tls-key", "--tls-ca"};
  for (size_t i = 0; i < 3; ++i) {
    if (files[i].first->empty()) continue;
    auto pem = ReadPemFile(*files[i].first, names[i]);
    if (!pem.ok()) return fail(pem.status().message());
    *files[i].second = std::move(pem).value();
  }
  return true;
}

// ValidateConfig's message with each config key replaced by the flag that set it.
std::string FlagsInMessage(std::string message) {
  static const std::pair<const char*, const char*> kFlags[] = {
      {"default_kv_lease_ttl_ms", "--lease-ttl-ms"},
      {"default_kv_soft_pin_ttl_ms", "--soft-pin-ttl-ms"},
      {"eviction_high_watermark_ratio", "--high-watermark"},
      {"eviction_ratio", "--eviction-ratio"},
      {"eviction_policy", "--eviction-policy"},
      {"put_start_discard_timeout_ms", "--put-timeout-ms"},
      {"metadata_shards", "--shards"}};
  for (const auto& [key, flag] : kFlags) {
    for (size_t at = message.find(key); at != std::string::npos; at = message.find(key, at)) {
      message.replace(at, std::strlen(key), flag);
      at += std::strlen(flag);
    }
  }
  return message;
}

int RunMaster(const MasterFlags& flags) {
  if (std::getenv("TIERKV_LOG_LEVEL") == nullptr) spdlog::set_level(spdlog::level::info);
  if (flags.metrics_port > 0 && flags.metrics_port == flags.port) {
    std::cerr << "tierkv master: error: --metrics-port " << flags.metrics_port
              << " is also the gRPC --port; pick another, 0 for a free one, or -1 for none"
              << std::endl;
    return kExitUsage;
  }
  // Block the stop signals before gRPC starts its threads (they inherit the mask), then wait
  // for one on this thread: no async handler, a clean shutdown.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGHUP);  // re-reads the token files
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a reader that went away must not kill the master
  if (!flags.advertise.empty()) {
    if (Status st = CheckHostPort(flags.advertise, "--advertise"); !st.ok()) {
      std::cerr << "tierkv master: error: " << st.message() << std::endl;
      return kExitUsage;
    }
  }

  // The master's flags are the config keys of an embedded master: one validation for both
  // (ValidateConfig), the error naming the flag.
  std::shared_ptr<HaCollector> ha_collector;
  Config as_config;
  as_config.default_kv_lease_ttl_ms = flags.lease_ttl_ms;
  as_config.default_kv_soft_pin_ttl_ms = flags.soft_pin_ttl_ms;
  as_config.eviction_high_watermark_ratio = flags.high_watermark;
  as_config.eviction_ratio = flags.eviction_ratio;
  as_config.eviction_policy = flags.eviction_policy;
  as_config.put_start_discard_timeout_ms = flags.put_timeout_ms;
  as_config.metadata_shards = flags.shards;
  if (Status st = ValidateConfig(as_config); !st.ok()) {
    std::cerr << "tierkv master: error: " << FlagsInMessage(st.message()) << std::endl;
    return kExitUsage;
  }
  MasterServerOptions options;
  options.host = flags.host;
  options.port = flags.port;
  options.meta_port = flags.meta_port;
  options.master = MasterOptionsFrom(as_config);
  options.client_ttl = Millis(flags.client_ttl_ms);
  // A segment a writer could not reach is avoided as long as a dead owner would stay listed.
  options.master.unreachable_hold = Millis(flags.client_ttl_ms);
  options.idle_timeout = Millis(flags.idle_timeout_ms);
  if (!LoadSecurity(flags, &options)) return kExitUsage;
  options.tier_move_timeout = Millis(flags.tier_move_timeout_ms);
  options.client_defaults.root_fs_dir = flags.root_fs_dir;
  options.client_defaults.promote_on_hit = flags.promote_on_hit;
  options.client_defaults.promote_min_hits = flags.promote_min_hits;
  if (flags.metrics_port >= 0) options.metrics = std::make_shared<MetricsRegistry>();

  options.master.free_ack_wait = Millis(flags.free_ack_wait_ms);
  options.master.index_linger = std::chrono::microseconds(flags.index_linger_us);
  options.master.confirm_index_updates = true;
  LeaderElectionOptions election_options;
  if (flags.ha.empty() &&
      (!flags.etcd_user.empty() || !flags.etcd_password_file.empty() || !flags.etcd_ca.empty())) {
    std::cerr << "tierkv master: error: --etcd-user, --etcd-password-file and --etcd-ca need --ha"
              << std::endl;
    return kExitUsage;
  }
  if (!flags.ha.empty()) {
    auto endpoints = ParseEtcdAddress(flags.ha);
    if (!endpoints.ok()) {
      std::cerr << "tierkv master: error: --ha: " << endpoints.status().message() << std::endl;
      return kExitUsage;
    }
    election_options.endpoints = std::move(endpoints).value();
    auto etcd = LoadEtcdCredentials(flags.etcd_user, flags.etcd_password_file, flags.etcd_ca,
                                    "--etcd-user/--etcd-password-file/--etcd-ca");
    if (!etcd.ok()) {
      std::cerr << "tierkv master: error: " << etcd.status().message() << std::endl;
      return kExitUsage;
    }
    election_options.credentials = std::move(etcd).value();
    election_options.lease_ttl_s = flags.ha_lease_ttl_s;
    options.standby = true;
  }
  Result<std::unique_ptr<MasterServer>> started = MasterServer::Start(options);
  if (!started.ok()) {
    std::cerr << "tierkv master: error: " << started.status().ToString() << std::endl;
    return started.code() == ErrorCode::INVALID_PARAMS ? kExitUsage : kExitFailed;
  }
  std::unique_ptr<MasterServer> server = std::move(started).value();
  // High availability: stand by, and serve while elected (a fresh term each time).
  std::unique_ptr<LeaderElection> election;
  if (!flags.ha.empty()) {
    election_options.address = flags.advertise.empty() ? server->address() : flags.advertise;
    MasterServer* s = server.get();
    ElectionCallbacks callbacks;
    callbacks.on_elected = [s](uint64_t epoch, std::shared_ptr<const TermLease> lease) {
      s->BeginTerm(epoch, std::move(lease));
    };
    callbacks.on_deposed = [s](const std::string&) { s->EndTerm(); };
    callbacks.on_leader = [s](const LeaderInfo& leader) {
      s->SetLeader(leader.address, leader.epoch);
    };
    auto elected = LeaderElection::Start(election_options, std::move(callbacks));
    if (!elected.ok()) {
      std::cerr << "tierkv master: error: --ha " << flags.ha << ": " << elected.status().ToString()
                << std::endl;
      server->Shutdown();
      return kExitFailed;
    }
    election = std::move(elected).value();
    if (options.metrics != nullptr) {
      LeaderElection* e = election.get();
      ha_collector = std::make_shared<HaCollector>([e] {
        HaFigures f;
        f.leading = e->leading();
        f.epoch = e->epoch();
        f.terms = e->terms();
        const LeaderInfo leader = e->leader();
        f.leader = leader.address;
        f.leader_epoch = leader.epoch;
        return f;
      });
      options.metrics->Add(ha_collector);
    }
  }
  // The metrics server stops first (declared after the master): no scrape outlives it.
  std::unique_ptr<MetricsServer> metrics;
  if (options.metrics != nullptr) {
    MetricsServerOptions metrics_options;
    metrics_options.host = flags.host;
    metrics_options.port = flags.metrics_port;
    // Mooncake's admin page, which SGLang's Mooncake backend reads to check the master: one
    // segment name per line.
    MasterServer* s = server.get();
    metrics_options.text_pages["/get_all_segments"] = [s] {
      std::string body;
      for (const std::string& name : s->SegmentNames()) body += name + "\n";
      return body;
    };
    Result<std::unique_ptr<MetricsServer>> serving =
        MetricsServer::Start(metrics_options, options.metrics);
    if (!serving.ok()) {
      std::cerr << "tierkv master: error: " << serving.status().ToString()
                << " (--metrics-port: another port, 0 for a free one, -1 for no metrics)"
                << std::endl;
      server->Shutdown();
      return serving.code() == ErrorCode::INVALID_PARAMS ? kExitUsage : kExitFailed;
    }
    metrics = std::move(serving).value();
  }
  // The first line is what scripts and MasterProcess wait for; the metrics line follows it.
  std::cout << "tierkv master listening on " << server->address() << std::endl;
  if (server->meta_port() != 0) {
    spdlog::info("tierkv master: metadata channel on port {}", server->meta_port());
  }
  if (metrics != nullptr)
    std::cout << "tierkv master metrics on " << metrics->address() << std::endl;
  spdlog::info(
      "tierkv master on {}: lease TTL {} ms, high watermark {}, eviction ratio {}, eviction "
      "policy {}, client TTL {} ms, put timeout {} ms, {} shards; metrics: {}{}",
      server->address(), flags.lease_ttl_ms, flags.high_watermark, flags.eviction_ratio,
      flags.eviction_policy, flags.client_ttl_ms, flags.put_timeout_ms, flags.shards,
      metrics != nullptr ? "http://" + metrics->address() + "/metrics and /health" : "off",
      flags.ha.empty() ? std::string()
                       : "; standing by for election in " + flags.ha + " (lease TTL " +
                             std::to_string(flags.ha_lease_ttl_s) + " s)");

  if (options.tokens == nullptr) {
    spdlog::warn(
        "tierkv master: no cluster token (--token-file): anyone who reaches {} is "
        "trusted",
        server->address());
  }

  int signal_number = 0;
  while (true) {
    while (sigwait(&stop_signals, &signal_number) != 0) {
    }
    if (signal_number != SIGHUP) break;
    if (Status st = ReloadAllTokenSets(); !st.ok()) {
      spdlog::error("tierkv master: SIGHUP: keeping the tokens it had: {}", st.message());
    } else {
      spdlog::info("tierkv master: SIGHUP: token files re-read");
    }
  }
  spdlog::info("tierkv master: {} received, shutting down",
               signal_number == SIGINT ? "SIGINT" : "SIGTERM");
  metrics.reset();
  if (ha_collector) options.metrics->Remove(ha_collector.get());
  election.reset();  // a leader resigns: a standby takes over at once
  server->Shutdown();
  spdlog::info("tierkv master: stopped");
  return 0;
}

}  // namespace

void AddMasterCommand(CLI::App& app, int* exit_code) {
  auto flags = std::make_shared<MasterFlags>();
  CLI::App* master = app.add_subcommand(
      "master",
      "Run the metadata service as its own process: a gRPC control plane for requesters and "
      "stores, with Prometheus metrics over HTTP. Prints 'tierkv master listening on "
      "HOST:PORT' on stdout once serving (then 'tierkv master metrics on HOST:PORT'); stops "
      "cleanly on SIGINT/SIGTERM");
  master
      ->add_option("--host", flags->host,
                   "Address to listen on. The default serves this host only; use 0.0.0.0 (or a "
                   "NIC's address) for other hosts; then give it a --token-file (and TLS): "
                   "without one, whoever reaches the port is trusted")
      ->capture_default_str();
  master->add_option("--port", flags->port, "gRPC port; 0 = a free port chosen by the kernel")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  master
      ->add_option("--meta-port", flags->meta_port,
                   "Port of the metadata channel on --host (the data path's batch calls in "
                   "length-prefixed frames beside gRPC; clients learn it when they register): 0 "
                   "= a free port chosen by the kernel, -1 = none (every call over gRPC). Not "
                   "started with TLS, which it does not have")
      ->check(CLI::Range(-1, 65535))
      ->capture_default_str();
  master
      ->add_option("--lease-ttl-ms", flags->lease_ttl_ms,
                   "Read lease granted by Exists/GetReplicas, in ms (leased objects are not "
                   "evicted or removed), 1..86400000")
      ->check(CLI::Range(uint64_t{1}, uint64_t{86'400'000}))
      ->capture_default_str();
  master
      ->add_option("--soft-pin-ttl-ms", flags->soft_pin_ttl_ms,
                   "How long a soft pin holds when the put names no TTL, in ms; 0 = until the "
                   "object is removed (config key default_kv_soft_pin_ttl_ms; Mooncake's "
                   "--default_kv_soft_pin_ttl)")
      ->check(CLI::Range(uint64_t{0}, uint64_t{365ull * 24 * 3600 * 1000}))
      ->capture_default_str();
  master
      ->add_option("--root-fs-dir", flags->root_fs_dir,
                   "Directory told to clients: one that enables an SSD tier and names no file "
                   "puts its tier file there (Mooncake's --root_fs_dir); \"\" = none")
      ->capture_default_str();
  master->add_flag("--promote-on-hit", flags->promote_on_hit,
                   "Tell clients to promote disk hits back to DRAM (their promote_on_hit; "
                   "Mooncake's --promotion_on_hit)");
  master
      ->add_option("--promote-min-hits", flags->promote_min_hits,
                   "With --promote-on-hit: disk hits before a promotion (clients' "
                   "promote_min_hits; Mooncake's --promotion_admission_threshold); 0 = theirs")
      ->check(CLI::Range(uint32_t{0}, uint32_t{1000000}))
      ->capture_default_str();
  master
      ->add_option("--high-watermark", flags->high_watermark,
                   "Segment usage ratio above which eviction starts, in (0, 1] and at least "
                   "--eviction-ratio (config key eviction_high_watermark_ratio)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  master
      ->add_option("--eviction-ratio", flags->eviction_ratio,
                   "Share of a segment freed below the watermark by one eviction pass, in (0, 1] "
                   "(config key eviction_ratio)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  master
      ->add_option("--eviction-policy", flags->eviction_policy,
                   "Which candidates eviction takes first: lru (least recently used) or reuse "
                   "(LRU with ages scaled by the reuse probability measured per class of object; "
                   "docs/architecture.md, \"Eviction\") (config key eviction_policy)")
      ->check(CLI::IsMember({"lru", "reuse"}))
      ->capture_default_str();
  master
      ->add_option("--client-ttl-ms", flags->client_ttl_ms,
                   "A client (store or requester) without a heartbeat for this long is expired: "
                   "its segments are unmounted and their replicas dropped. Clients heartbeat "
                   "every 1000 ms by default")
      ->check(CLI::Range(int64_t{1}, int64_t{86'400'000}))
      ->capture_default_str();
  master
      ->add_option("--put-timeout-ms", flags->put_timeout_ms,
                   "Pending puts (PutStart without PutEnd) older than this are reclaimed, in ms, "
                   "1..86400000 (config key put_start_discard_timeout_ms)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{86'400'000}))
      ->capture_default_str();
  master
      ->add_option("--tier-move-timeout-ms", flags->tier_move_timeout_ms,
                   "How long a demotion (or write-behind copy) waits for a store to write the "
                   "objects to its SSD tier; after that they count as not written (dropped, as "
                   "when the write fails)")
      ->check(CLI::Range(int64_t{1}, int64_t{86'400'000}))
      ->capture_default_str();
  master
      ->add_option("--shards", flags->shards,
                   "Metadata shards (lock striping), 1..4096 (config key metadata_shards)")
      ->check(CLI::Range(uint32_t{1}, uint32_t{4096}))
      ->capture_default_str();
  master
      ->add_option("--metrics-port", flags->metrics_port,
                   "HTTP port for Prometheus: /metrics (text format) and /health (200 'ok'), on "
                   "--host; 0 = a free port (printed as 'tierkv master metrics on HOST:PORT' "
                   "after the listening line); -1 = no metrics server")
      ->check(CLI::Range(-1, 65535))
      ->capture_default_str();
  master
      ->add_option("--ha", flags->ha,
                   "High availability: etcd://HOST:PORT[;HOST:PORT...] (etcd's gRPC endpoints). "
                   "Several masters started with the same --ha elect one leader through an etcd "
                   "lease; the others stand by (answering 'not the leader') and one takes over "
                   "when the leader stops or loses its lease. Requesters and stores given the "
                   "same etcd://... as master_server_address follow the leader. Default: none "
                   "(one master)")
      ->capture_default_str();
  master
      ->add_option("--ha-lease-ttl-s", flags->ha_lease_ttl_s,
                   "TTL of the leader's etcd lease, in seconds: a dead leader is replaced within "
                   "about this (etcd raises a TTL below its minimum, 1.5 x its election timeout)")
      ->check(CLI::Range(int64_t{1}, int64_t{3600}))
      ->capture_default_str();
  master
      ->add_option("--advertise", flags->advertise,
                   "With --ha: the HOST:PORT clients should use for this master (published in "
                   "etcd); default: the address it listens on (--host and the bound port)")
      ->capture_default_str();
  master
      ->add_option("--free-ack-wait-ms", flags->free_ack_wait_ms,
                   "How long a PutStart batch may wait for stores to acknowledge the frees of "
                   "its eviction (a freed range is reused only once its store knows) before "
                   "NO_AVAILABLE_HANDLE")
      ->check(CLI::Range(int64_t{0}, int64_t{60'000}))
      ->capture_default_str();
  master
      ->add_option("--index-linger-us", flags->index_linger_us,
                   "How long a store's index feed gathers commits and frees before sending "
                   "them (one stream message per linger instead of one per PutEnd under load; "
                   "0 = at once). Removes, upserts and puts waiting for freed space do not wait "
                   "for it")
      ->check(CLI::Range(int64_t{0}, int64_t{100'000}))
      ->capture_default_str();
  master
      ->add_option("--token-file", flags->token_file,
                   "The cluster token: a file of mode 0600 or stricter (e.g. from openssl rand "
                   "-hex 32). Every call must carry it (stores and clients: cluster_token_file); "
                   "without it the master trusts whoever reaches its port. SIGHUP re-reads it")
      ->capture_default_str();
  master
      ->add_option("--accept-token-file", flags->accept_token_file,
                   "A second token accepted too, while clients move to a new one (rotation; "
                   "docs/security.md)")
      ->capture_default_str();
  master
      ->add_option("--store-token-file", flags->store_token_file,
                   "The stores' credential (a file as --token-file): only a process presenting "
                   "it may mount a segment or report its contents; holders of --token-file only "
                   "make requests. Stores: --token-file STORE --accept-token-file CLUSTER")
      ->capture_default_str();
  master
      ->add_option("--tenants-file", flags->tenants_file,
                   "Tenants' credentials, JSON: {\"tenants\": {\"NAME\": {\"token_file\": "
                   "PATH}}}. A call with a tenant's token acts in that tenant's keys only "
                   "(tenant_id NAME); the cluster token then acts in the default tenant's, and "
                   "whole-cluster calls need --admin-token-file. Needs --store-token-file")
      ->capture_default_str();
  master
      ->add_option("--admin-token-file", flags->admin_token_file,
                   "With --tenants-file: the credential of cluster-wide calls (remove_all of "
                   "every tenant, stats of the whole cluster)")
      ->capture_default_str();
  master
      ->add_option("--tls-cert", flags->tls_cert,
                   "TLS for the control plane: the master's certificate (PEM), with --tls-key; "
                   "default: plaintext")
      ->capture_default_str();
  master->add_option("--tls-key", flags->tls_key, "The private key of --tls-cert (PEM)")
      ->capture_default_str();
  master
      ->add_option("--tls-ca", flags->tls_ca,
                   "Mutual TLS: every client must present a certificate signed by this CA (PEM; "
                   "clients: tls_cert_file, tls_key_file)")
      ->capture_default_str();
  master->add_option("--etcd-user", flags->etcd_user,
                     "With --ha: the etcd user to authenticate as (etcd's auth enabled)");
  master->add_option("--etcd-password-file", flags->etcd_password_file,
                     "With --etcd-user: a file (mode 0600 or stricter) holding its password");
  master->add_option("--etcd-ca", flags->etcd_ca,
                     "With --ha: TLS to etcd, trusting this CA (PEM); default: plaintext");
  master
      ->add_option("--idle-timeout-ms", flags->idle_timeout_ms,
                   "A gRPC connection with no call for this long is closed (clients heartbeat "
                   "every second); one that does not finish its handshake within 10 s too, in "
                   "ms, 1000..86400000")
      ->check(CLI::Range(int64_t{1000}, int64_t{86'400'000}))
      ->capture_default_str();
  master->callback([flags, exit_code] { *exit_code = RunMaster(*flags); });
}

}  // namespace tierkv::cli
