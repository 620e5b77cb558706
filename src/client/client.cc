#include "tierkv/client.h"

#include "client/embedded_client.h"
#include "common/logging.h"

namespace tierkv {

Result<std::unique_ptr<Client>> Client::Create(const Config& config) {
  InitLogging();
  if (Status st = ValidateConfig(config); !st.ok()) return st;
  if (!config.master_server_address.empty()) {
    auto client = EmbeddedClient::CreateRemote(config);
    if (!client.ok()) return client.status();
    return std::unique_ptr<Client>(std::move(client).value());
  }
  if (config.mode != Mode::kEmbedded) {
    return Status(ErrorCode::INVALID_CONFIG,
                  "mode 'standalone-store' needs master_server_address (the `tierkv master` "
                  "the stores registered with)");
  }
  auto client = EmbeddedClient::Create(config);
  if (!client.ok()) return client.status();
  return std::unique_ptr<Client>(std::move(client).value());
}

}  // namespace tierkv
