#include "master_command.h"

#include <signal.h>
#include <spdlog/spdlog.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <utility>

#include "metrics/metrics_registry.h"
#include "metrics/metrics_server.h"
#include "rpc/master_server.h"
#include "tierkv/config.h"

namespace tierkv::cli {
namespace {

constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;

// Defaults: those of the config keys the flags stand for (tierkv/config.h).
struct MasterFlags {
  std::string host = "127.0.0.1";
  int port = 50051;
  uint64_t lease_ttl_ms = Config{}.default_kv_lease_ttl_ms;
  double high_watermark = Config{}.eviction_high_watermark_ratio;
  double eviction_ratio = Config{}.eviction_ratio;
  std::string eviction_policy = Config{}.eviction_policy;
  int64_t client_ttl_ms = 10000;
  uint64_t put_timeout_ms = Config{}.put_start_discard_timeout_ms;
  int64_t tier_move_timeout_ms = 30000;
  uint32_t shards = Config{}.metadata_shards;
  int metrics_port = 9003;  // -1 = no metrics server
};

// ValidateConfig's message with each config key replaced by the flag that set it.
std::string FlagsInMessage(std::string message) {
  static const std::pair<const char*, const char*> kFlags[] = {
      {"default_kv_lease_ttl_ms", "--lease-ttl-ms"},
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
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a reader that went away must not kill the master

  // The master's flags are the config keys of an embedded master: one validation for both
  // (ValidateConfig), the error naming the flag.
  Config as_config;
  as_config.default_kv_lease_ttl_ms = flags.lease_ttl_ms;
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
  options.master = MasterOptionsFrom(as_config);
  options.client_ttl = Millis(flags.client_ttl_ms);
  options.tier_move_timeout = Millis(flags.tier_move_timeout_ms);
  if (flags.metrics_port >= 0) options.metrics = std::make_shared<MetricsRegistry>();

  Result<std::unique_ptr<MasterServer>> started = MasterServer::Start(options);
  if (!started.ok()) {
    std::cerr << "tierkv master: error: " << started.status().ToString() << std::endl;
    return started.code() == ErrorCode::INVALID_PARAMS ? kExitUsage : kExitFailed;
  }
  std::unique_ptr<MasterServer> server = std::move(started).value();
  // The metrics server stops first (declared after the master): no scrape outlives it.
  std::unique_ptr<MetricsServer> metrics;
  if (options.metrics != nullptr) {
    MetricsServerOptions metrics_options;
    metrics_options.host = flags.host;
    metrics_options.port = flags.metrics_port;
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
  if (metrics != nullptr)
    std::cout << "tierkv master metrics on " << metrics->address() << std::endl;
  spdlog::info(
      "tierkv master on {}: lease TTL {} ms, high watermark {}, eviction ratio {}, eviction "
      "policy {}, client TTL {} ms, put timeout {} ms, {} shards; metrics: {}",
      server->address(), flags.lease_ttl_ms, flags.high_watermark, flags.eviction_ratio,
      flags.eviction_policy, flags.client_ttl_ms, flags.put_timeout_ms, flags.shards,
      metrics != nullptr ? "http://" + metrics->address() + "/metrics and /health" : "off");

  int signal_number = 0;
  while (sigwait(&stop_signals, &signal_number) != 0) {
  }
  spdlog::info("tierkv master: {} received, shutting down",
               signal_number == SIGINT ? "SIGINT" : "SIGTERM");
  metrics.reset();
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
                   "NIC's address) for other hosts. The control plane has no authentication yet: "
                   "expose it on trusted networks only")
      ->capture_default_str();
  master->add_option("--port", flags->port, "gRPC port; 0 = a free port chosen by the kernel")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  master
      ->add_option("--lease-ttl-ms", flags->lease_ttl_ms,
                   "Read lease granted by Exists/GetReplicas, in ms (leased objects are not "
                   "evicted or removed)")
      ->capture_default_str();
  master
      ->add_option("--high-watermark", flags->high_watermark,
                   "Segment usage ratio above which eviction starts, in (0, 1] and at least "
                   "--eviction-ratio (config key eviction_high_watermark_ratio)")
      ->capture_default_str();
  master
      ->add_option("--eviction-ratio", flags->eviction_ratio,
                   "Share of a segment freed below the watermark by one eviction pass, in (0, 1] "
                   "(config key eviction_ratio)")
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
                   "Pending puts (PutStart without PutEnd) older than this are reclaimed; > 0 "
                   "(config key put_start_discard_timeout_ms)")
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
      ->capture_default_str();
  master
      ->add_option("--metrics-port", flags->metrics_port,
                   "HTTP port for Prometheus: /metrics (text format) and /health (200 'ok'), on "
                   "--host; 0 = a free port (printed as 'tierkv master metrics on HOST:PORT' "
                   "after the listening line); -1 = no metrics server")
      ->check(CLI::Range(-1, 65535))
      ->capture_default_str();
  master->callback([flags, exit_code] { *exit_code = RunMaster(*flags); });
}

}  // namespace tierkv::cli
