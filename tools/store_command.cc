#include "store_command.h"

#include <signal.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <iostream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "common/cluster_token.h"
#include "exit_codes.h"
#include "metrics/auth_collector.h"
#include "metrics/metrics_registry.h"
#include "metrics/metrics_server.h"
#include "metrics/store_collector.h"
#include "rpc/create_client.h"
#include "store/store.h"
#include "tierkv/config.h"
#include "transport/shm_segment_server.h"

namespace tierkv::cli {
namespace {

struct StoreFlags {
  std::string master;
  std::string segment_size;  // "" = global_segment_size of the config (default 1 GiB)
  std::string token_file;
  std::string accept_token_file;
  std::string tls_ca;
  std::string tls_cert;
  std::string tls_key;
  std::string data_tls_cert;
  std::string data_tls_key;
  std::string tenant;
  std::string config_path;
  std::string hostname;
  bool small_pages = false;
  std::string metrics_host = "127.0.0.1";
  std::string data_host = "127.0.0.1";
  int metrics_port = 9004;
};

int RunStore(const StoreFlags& flags) {
  if (std::getenv("TIERKV_LOG_LEVEL") == nullptr) spdlog::set_level(spdlog::level::info);
  // Block the stop signals before any thread starts (they inherit the mask), then wait for
  // one on this thread.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGHUP);  // re-reads the token files
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a requester that went away must not kill the store

  Result<Config> loaded = LoadConfig(flags.config_path);
  if (!loaded.ok()) {
    std::cerr << "tierkv store: error: " << loaded.status().ToString() << std::endl;
    return kExitUsage;
  }
  Config config = std::move(loaded).value();
  config.mode = Mode::kEmbedded;  // the store contributes its segment
  // A flag wins over the config's key, and says so when they differ.
  auto flag_wins = [](const char* flag, const std::string& value, const char* key,
                      std::string* field) {
    if (value.empty()) return;
    if (!field->empty() && *field != value) {
      spdlog::info("tierkv store: {} {} overrides the config's {} {}", flag, value, key, *field);
    }
    *field = value;
  };
  flag_wins("--master", flags.master, "master_server_address", &config.master_server_address);
  flag_wins("--hostname", flags.hostname, "local_hostname", &config.local_hostname);
  flag_wins("--token-file", flags.token_file, "cluster_token_file", &config.cluster_token_file);
  flag_wins("--accept-token-file", flags.accept_token_file, "cluster_accept_token_file",
            &config.cluster_accept_token_file);
  flag_wins("--tls-ca", flags.tls_ca, "tls_ca_file", &config.tls_ca_file);
  flag_wins("--tls-cert", flags.tls_cert, "tls_cert_file", &config.tls_cert_file);
  flag_wins("--tls-key", flags.tls_key, "tls_key_file", &config.tls_key_file);
  flag_wins("--data-tls-cert", flags.data_tls_cert, "data_tls_cert_file",
            &config.data_tls_cert_file);
  flag_wins("--data-tls-key", flags.data_tls_key, "data_tls_key_file", &config.data_tls_key_file);
  flag_wins("--tenant", flags.tenant, "segment_tenant", &config.segment_tenant);
  if (config.master_server_address.empty()) {
    std::cerr << "tierkv store: error: no master: pass --master HOST:PORT (or "
                 "master_server_address in the config)"
              << std::endl;
    return kExitUsage;
  }
  if (!flags.segment_size.empty()) {
    Result<uint64_t> size = ParseSize(flags.segment_size);
    if (!size.ok() || *size == 0) {
      std::cerr << "tierkv store: error: --segment-size '" << flags.segment_size
                << "': " << (size.ok() ? "must be > 0" : size.status().ToString()) << std::endl;
      return kExitUsage;
    }
    if (!flags.config_path.empty() && *size != config.global_segment_size) {
      spdlog::info("tierkv store: --segment-size {} overrides the config's global_segment_size {}",
                   *size, config.global_segment_size);
    }
    config.global_segment_size = *size;
  }
  if (config.global_segment_size == 0) {
    std::cerr << "tierkv store: error: global_segment_size is 0: a store contributes a segment "
                 "(--segment-size)"
              << std::endl;
    return kExitUsage;
  }
  if (Status st = ValidateConfig(config); !st.ok()) {
    std::cerr << "tierkv store: error: " << st.ToString() << std::endl;
    return kExitUsage;
  }
  if (flags.small_pages) config.use_huge_pages = false;

  // Sockets of stores that were killed (SIGKILL, OOM) pile up in the per-user IPC directory.
  if (auto removed = transport::RemoveDeadProcessSockets(); !removed.ok()) {
    spdlog::warn("tierkv store: {}", removed.status().ToString());
  }
  // Every port is taken before the store registers: a metrics port in use fails here, before
  // the master has seen a segment.
  std::shared_ptr<MetricsRegistry> registry;
  std::unique_ptr<MetricsServer> metrics;
  // What a dummy client (Mooncake's setup_dummy) attaches with: the store's master, protocol
  // and segment, as JSON on /client_info; filled once the segment is served.
  auto client_info = std::make_shared<std::pair<std::mutex, std::string>>();
  if (flags.metrics_port >= 0) {
    registry = std::make_shared<MetricsRegistry>();
    MetricsServerOptions options;
    options.host = flags.metrics_host;
    options.port = flags.metrics_port;
    options.text_pages["/client_info"] = [client_info] {
      std::lock_guard lock(client_info->first);
      return client_info->second;
    };
    auto serving = MetricsServer::Start(options, registry);
    if (!serving.ok()) {
      std::cerr << "tierkv store: error: metrics on " << flags.metrics_host << ":"
                << flags.metrics_port << ": " << serving.status().ToString() << std::endl;
      return serving.code() == ErrorCode::INVALID_PARAMS ? kExitUsage : kExitFailed;
    }
    metrics = std::move(serving).value();
  }

  auto backend = ConnectRemoteBackend(config);
  if (!backend.ok()) {
    std::cerr << "tierkv store: error: " << backend.status().ToString() << std::endl;
    return backend.code() == ErrorCode::INVALID_CONFIG ? kExitUsage : kExitFailed;
  }
  // Fault-test hooks of restart recovery (tests/integration/failover_test.cc), never set in
  // production: TIERKV_TEST_LINK_REOPEN_DELAY_MS, TIERKV_TEST_REPORT_CHUNK_DELAY_MS,
  // TIERKV_TEST_WIPE_SEGMENT_BEFORE_REPORT=1.
  SegmentLinkOptions::TestHooks hooks;
  if (const char* v = std::getenv("TIERKV_TEST_LINK_REOPEN_DELAY_MS")) {
    hooks.reopen_delay = Millis(std::atoll(v));
  }
  if (const char* v = std::getenv("TIERKV_TEST_REPORT_CHUNK_DELAY_MS")) {
    hooks.report_chunk_delay = Millis(std::atoll(v));
  }
  if (const char* v = std::getenv("TIERKV_TEST_WIPE_SEGMENT_BEFORE_REPORT")) {
    hooks.wipe_before_report = std::string(v) == "1";
  }
  (*backend)->TEST_SetLinkHooks(hooks);
  StoreOptions store_options;
  store_options.data_host = flags.data_host;
  auto created = Store::Create(config, *backend, store_options);
  if (!created.ok()) {
    std::cerr << "tierkv store: error: " << created.status().ToString() << std::endl;
    return created.code() == ErrorCode::INVALID_CONFIG ? kExitUsage : kExitFailed;
  }
  std::unique_ptr<Store> store = std::move(created).value();
  std::shared_ptr<StoreCollector> collector;
  std::shared_ptr<AuthCollector> auth_collector;
  if (registry != nullptr) {
    const Store* s = store.get();
    RemoteBackend* b = backend->get();
    collector = std::make_shared<StoreCollector>([s, b, size = config.global_segment_size] {
      StoreFigures f;
      f.segment = s->mounted_name();
      f.segment_bytes = size;
      f.shm_connections = s->shm_connections();
      f.master_connected = b->remote_master().connected();
      f.registrations = b->remote_master().registrations();
      f.transfers = s->served_transfers();
      f.segment_linked = b->OwnLinkConnected(s->segment_id());
      if (auto index = b->OwnIndex(s->segment_id())) {
        const SegmentIndexStats is = index->stats();
        f.index_memory_entries = is.memory_entries;
        f.index_disk_entries = is.disk_entries;
        f.index_batches = is.batches;
        f.index_reports = is.reports;
      }
      if (const auto& tier = s->tier()) {
        f.has_tier = true;
        f.tier_capacity = tier->capacity();
        f.staging_capacity = tier->staging_capacity();
        f.tier_move_requests = s->tier_move_requests();
        f.tier = tier->stats();
      }
      return f;
    });
    registry->Add(collector);
    auth_collector = std::make_shared<AuthCollector>("tierkv_store_", [s = store.get()] {
      return AuthFigures{0, s->data_unauthenticated()};
    });
    registry->Add(auth_collector);
  }
  {
    nlohmann::json info = {{"master", config.master_server_address},
                           {"protocol", config.protocol},
                           {"segment", store->mounted_name()}};
    std::lock_guard lock(client_info->first);
    client_info->second = info.dump() + "\n";
  }
  // The first line is what scripts and MasterProcess wait for; the metrics line follows it.
  std::cout << "tierkv store serving segment " << store->mounted_name() << " ("
            << config.global_segment_size << " bytes) on master " << config.master_server_address
            << std::endl;
  if (metrics != nullptr)
    std::cout << "tierkv store metrics on " << metrics->address() << std::endl;

  if (config.cluster_token_file.empty()) {
    spdlog::warn(
        "tierkv store: no cluster token (--token-file): anyone who reaches its data "
        "port{} is trusted",
        store->data_address().empty() ? "" : " at " + store->data_address());
  }

  int signal_number = 0;
  while (true) {
    while (sigwait(&stop_signals, &signal_number) != 0) {
    }
    if (signal_number != SIGHUP) break;
    if (Status st = ReloadAllTokenSets(); !st.ok()) {
      spdlog::error("tierkv store: SIGHUP: keeping the tokens it had: {}", st.message());
    } else {
      spdlog::info("tierkv store: SIGHUP: token files re-read");
    }
  }
  spdlog::info("tierkv store: {} received, unmounting and stopping",
               signal_number == SIGINT ? "SIGINT" : "SIGTERM");
  metrics.reset();  // stops scrapes before the collector's store goes
  if (registry) {
    registry->Remove(collector.get());
    registry->Remove(auth_collector.get());
  }
  store.reset();
  spdlog::info("tierkv store: stopped");
  return 0;
}

}  // namespace

void AddStoreCommand(CLI::App& app, int* exit_code) {
  auto flags = std::make_shared<StoreFlags>();
  CLI::App* store = app.add_subcommand(
      "store",
      "Run a standalone store: contribute a DRAM segment to a tierkv master's pool and serve it "
      "to requesters on this host (shared memory) and over the network (TCP on --data-host); "
      "with enable_offload in the config, an SSD tier behind it. Prints 'tierkv store serving "
      "segment NAME "
      "...' on stdout once serving; stops cleanly on SIGINT/SIGTERM (the segment is unmounted)");
  store
      ->add_option("--master", flags->master,
                   "The master's HOST:PORT, or etcd://HOST:PORT[;HOST:PORT...] to follow the "
                   "leader of masters started with --ha (default: master_server_address of the "
                   "config)")
      ->capture_default_str();
  store->add_option("--segment-size", flags->segment_size,
                    "DRAM contributed (e.g. 4GiB); default: global_segment_size of the config "
                    "(1GiB without one). Given with a config that sets another size, the flag "
                    "wins and a line says so");
  store->add_option("--config", flags->config_path,
                    "JSON config (tierkv::LoadConfig; default: $TIERKV_CONFIG_PATH, else "
                    "built-in defaults). mode and global_segment_size are set by this command; a "
                    "missing or unreadable file is INVALID_CONFIG, exit status 2");
  store
      ->add_option("--hostname", flags->hostname,
                   "Host name this store registers with (default: local_hostname of the config, "
                   "$TIERKV_LOCAL_HOSTNAME, else gethostname())")
      ->capture_default_str();
  store
      ->add_option("--data-host", flags->data_host,
                   "Address the network transport (tierkv's TCP, or UCX with protocol rdma) "
                   "listens on and advertises, on a free port; the default serves this host "
                   "only: use a NIC's address for other hosts. \"\" = shared memory only")
      ->capture_default_str();
  store
      ->add_option("--metrics-host", flags->metrics_host,
                   "Address the Prometheus endpoint (/metrics, /health) listens on")
      ->capture_default_str();
  store
      ->add_option("--metrics-port", flags->metrics_port,
                   "Port of /metrics and /health; 0 = a free port, -1 = no metrics server")
      ->check(CLI::Range(-1, 65535))
      ->capture_default_str();
  store
      ->add_option("--token-file", flags->token_file,
                   "The cluster token (a file of mode 0600 or stricter; config key "
                   "cluster_token_file): presented to the master, and required from every "
                   "requester on the data port. SIGHUP re-reads it")
      ->capture_default_str();
  store
      ->add_option("--accept-token-file", flags->accept_token_file,
                   "A second token accepted from requesters during a rotation (config key "
                   "cluster_accept_token_file)")
      ->capture_default_str();
  store->add_option("--tls-ca", flags->tls_ca,
                    "TLS to the master: the CA of its certificate (config key tls_ca_file)");
  store->add_option("--tls-cert", flags->tls_cert,
                    "This store's client certificate for a master with mutual TLS (tls_cert_file)");
  store->add_option("--tls-key", flags->tls_key, "The key of --tls-cert (tls_key_file)");
  store->add_option("--data-tls-cert", flags->data_tls_cert,
                    "TLS on the data port (tierkv's TCP transport): this store's certificate, "
                    "naming --data-host (config key data_tls_cert_file); requesters need "
                    "data_tls_ca_file. Default: plaintext");
  store->add_option("--tenant", flags->tenant,
                    "Dedicate the segment to this tenant (config key segment_tenant): its objects "
                    "go only to its dedicated segments, nobody else's come here. Give the store "
                    "that tenant's token to accept (--accept-token-file) so only its requesters "
                    "reach the data port. Default: shared");
  store->add_option("--data-tls-key", flags->data_tls_key,
                    "The key of --data-tls-cert (data_tls_key_file)");
  store->add_flag("--small-pages", flags->small_pages,
                  "Use 4 KiB pages for the segment (default: 2 MiB pages when available)");
  store->callback([flags, exit_code] { *exit_code = RunStore(*flags); });
}

}  // namespace tierkv::cli
