#include "master_command.h"

#include <signal.h>
#include <spdlog/spdlog.h>

#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>

#include "rpc/master_server.h"

namespace tierkv::cli {
namespace {

constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;

struct MasterFlags {
  std::string host = "127.0.0.1";
  int port = 50051;
  int64_t lease_ttl_ms = 10000;
  double high_watermark = 0.90;
  double eviction_ratio = 0.05;
  int64_t client_ttl_ms = 10000;
  int64_t put_timeout_ms = 30000;
  uint32_t shards = 64;
  int metrics_port = 9003;
};

int RunMaster(const MasterFlags& flags) {
  if (std::getenv("TIERKV_LOG_LEVEL") == nullptr) spdlog::set_level(spdlog::level::info);
  // Block the stop signals before gRPC starts its threads (they inherit the mask), then wait
  // for one on this thread: no async handler, a clean shutdown.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a reader that went away must not kill the master

  MasterServerOptions options;
  options.host = flags.host;
  options.port = flags.port;
  options.master.lease_ttl = Millis(flags.lease_ttl_ms);
  options.master.high_watermark = flags.high_watermark;
  options.master.eviction_ratio = flags.eviction_ratio;
  options.master.put_timeout = Millis(flags.put_timeout_ms);
  options.master.shards = flags.shards;
  options.client_ttl = Millis(flags.client_ttl_ms);

  Result<std::unique_ptr<MasterServer>> started = MasterServer::Start(options);
  if (!started.ok()) {
    std::cerr << "tierkv master: error: " << started.status().ToString() << std::endl;
    return started.code() == ErrorCode::INVALID_PARAMS ? kExitUsage : kExitFailed;
  }
  std::unique_ptr<MasterServer> server = std::move(started).value();
  std::cout << "tierkv master listening on " << server->address() << std::endl;
  spdlog::info(
      "tierkv master on {}: lease TTL {} ms, high watermark {}, eviction ratio {}, client TTL {} "
      "ms, put timeout {} ms, {} shards (metrics port {} reserved, not served yet)",
      server->address(), flags.lease_ttl_ms, flags.high_watermark, flags.eviction_ratio,
      flags.client_ttl_ms, flags.put_timeout_ms, flags.shards, flags.metrics_port);

  int signal_number = 0;
  while (sigwait(&stop_signals, &signal_number) != 0) {
  }
  spdlog::info("tierkv master: {} received, shutting down",
               signal_number == SIGINT ? "SIGINT" : "SIGTERM");
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
      "stores. Prints 'tierkv master listening on HOST:PORT' on stdout once serving; stops "
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
      ->check(CLI::Range(int64_t{1}, int64_t{86'400'000}))
      ->capture_default_str();
  master
      ->add_option("--high-watermark", flags->high_watermark,
                   "Segment usage ratio above which eviction starts")
      ->check(CLI::Range(0.01, 1.0))
      ->capture_default_str();
  master
      ->add_option("--eviction-ratio", flags->eviction_ratio,
                   "Share of a segment freed below the watermark by one eviction pass")
      ->check(CLI::Range(0.0, 1.0))
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
                   "Pending puts (PutStart without PutEnd) older than this are reclaimed")
      ->check(CLI::Range(int64_t{1}, int64_t{86'400'000}))
      ->capture_default_str();
  master->add_option("--shards", flags->shards, "Metadata shards (lock striping)")
      ->check(CLI::Range(1, 65536))
      ->capture_default_str();
  master
      ->add_option("--metrics-port", flags->metrics_port,
                   "Reserved for Prometheus /metrics and /health (a later step); accepted but "
                   "not served yet")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  master->callback([flags, exit_code] { *exit_code = RunMaster(*flags); });
}

}  // namespace tierkv::cli
