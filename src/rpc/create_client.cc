// Client::Create of the full library (CMake target tierkv::tierkv): an in-process master, or a
// remote one when master_server_address is set. The embedded-only library has its own
// (client/create_embedded.cc); a program links exactly one of the two.
#include "rpc/create_client.h"

#include <unistd.h>

#include <atomic>
#include <string>

#include "common/host_name.h"
#include "common/logging.h"
#include "tierkv/client.h"
#include "transport/ucx_options.h"

namespace tierkv {

Result<std::shared_ptr<RemoteBackend>> ConnectRemoteBackend(const Config& config) {
  if (Status st = ValidateConfig(config); !st.ok()) return st;
  if (config.master_server_address.empty()) {
    return Status(ErrorCode::INVALID_CONFIG, "master_server_address is empty: no remote master");
  }
  // The network transport's settings, checked now so a bad protocol/NIC fails here.
  auto ucx = transport::UcxOptionsFromConfig(config);
  if (!ucx.ok()) return ucx.status();
  // One TokenSet for both planes: a reload (SIGHUP) reaches both.
  auto security = ControlPlaneSecurityFrom(config, ucx->tokens);
  if (!security.ok()) return security.status();
  auto backend = RemoteBackend::Connect(config.master_server_address, Millis(5000),
                                        config.local_hostname, config.protocol, *ucx,
                                        std::move(security).value(), config.master_meta_channel);
  if (backend.ok()) (*backend)->set_segment_tenant(config.segment_tenant);
  return backend;
}

namespace {

// The master's defaults (tierkv master --root-fs-dir, --promote-on-hit, --promote-min-hits)
// where `config` leaves them open: an SSD tier enabled with no file goes to root_fs_dir; the
// master's promotion on hit turns the client's on (a client cannot turn a cluster's off).
Status ApplyMasterDefaults(const ClientDefaults& defaults, Config& config) {
  if (config.enable_offload && config.offload_paths.empty()) {
    if (defaults.root_fs_dir.empty()) {
      return Status(ErrorCode::INVALID_CONFIG,
                    "config key 'offload_paths': enable_offload needs a tier file path, and the "
                    "master gives no directory (tierkv master --root-fs-dir)");
    }
    static std::atomic<int> n{0};
    config.offload_paths = {defaults.root_fs_dir + "/tierkv-" + std::to_string(getpid()) + "-" +
                            std::to_string(n.fetch_add(1)) + ".tier"};
  }
  if (defaults.promote_on_hit && !config.promote_on_hit) {
    config.promote_on_hit = true;
    if (defaults.promote_min_hits > 0) config.promote_min_hits = defaults.promote_min_hits;
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<Client>> Client::Create(const Config& given) {
  InitLogging();
  // An SSD tier with no file may take the remote master's directory: checked once that is known.
  const bool tier_from_master =
      !given.master_server_address.empty() && given.enable_offload && given.offload_paths.empty();
  Config checked = given;
  if (tier_from_master) checked.enable_offload = false;
  if (Status st = ClientImpl::CheckConfig(checked); !st.ok()) return st;  // before connecting
  if (given.master_server_address.empty()) {
    auto client = ClientImpl::CreateEmbedded(given);
    if (!client.ok()) return client.status();
    return std::unique_ptr<Client>(std::move(client).value());
  }
  auto backend = ConnectRemoteBackend(checked);
  if (!backend.ok()) return backend.status();
  Config config = given;
  if (Status st = ApplyMasterDefaults((*backend)->remote_master().client_defaults(), config);
      !st.ok()) {
    return st;
  }
  if (Status st = ClientImpl::CheckConfig(config); !st.ok()) return st;
  // A rank contributing a segment to a remote master serves it to every requester the master
  // may send there: shared memory on this host, and the network transport on local_hostname's
  // host (its port when it names one, as Mooncake's local_hostname "host:port" does).
  StoreOptions store_options;
  if (config.mode == Mode::kEmbedded) {
    const HostAndPort local = SplitLocalHostname(config.local_hostname);
    store_options.data_host = local.host.empty() ? std::string("127.0.0.1") : local.host;
    store_options.data_port = local.port;
    store_options.name_by_data_port = true;  // "<host>:<port>", as Mooncake names segments
  }
  auto client = ClientImpl::Create(config, std::move(backend).value(), std::move(store_options));
  if (!client.ok()) return client.status();
  return std::unique_ptr<Client>(std::move(client).value());
}

}  // namespace tierkv
