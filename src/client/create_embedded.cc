// Client::Create of the embedded-only library (CMake target tierkv::embedded): the master runs
// in this process. The full library (tierkv::tierkv) has its own, which also reaches a remote
// master (rpc/create_client.cc); a program links exactly one of the two.
#include "client/client_impl.h"
#include "common/logging.h"
#include "tierkv/client.h"

namespace tierkv {

Result<std::unique_ptr<Client>> Client::Create(const Config& config) {
  InitLogging();
  if (Status st = ClientImpl::CheckConfig(config); !st.ok()) return st;
  if (!config.master_server_address.empty()) {
    return Status(ErrorCode::UNAVAILABLE_IN_CURRENT_MODE,
                  "master_server_address '" + config.master_server_address +
                      "': this program links tierkv::embedded, which runs the master in-process "
                      "only; link tierkv::tierkv for a remote master");
  }
  auto client = ClientImpl::CreateEmbedded(config);
  if (!client.ok()) return client.status();
  return std::unique_ptr<Client>(std::move(client).value());
}

}  // namespace tierkv
