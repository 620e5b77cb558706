// Client::Create of the full library (CMake target tierkv::tierkv): an in-process master, or a
// remote one when master_server_address is set. The embedded-only library has its own
// (client/create_embedded.cc); a program links exactly one of the two.
#include "rpc/create_client.h"

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
  return RemoteBackend::Connect(config.master_server_address, Millis(5000), config.local_hostname,
                                config.protocol, *ucx);
}

Result<std::unique_ptr<Client>> Client::Create(const Config& config) {
  InitLogging();
  if (Status st = ClientImpl::CheckConfig(config); !st.ok()) return st;  // before connecting
  if (config.master_server_address.empty()) {
    auto client = ClientImpl::CreateEmbedded(config);
    if (!client.ok()) return client.status();
    return std::unique_ptr<Client>(std::move(client).value());
  }
  auto backend = ConnectRemoteBackend(config);
  if (!backend.ok()) return backend.status();
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
