#include "tierkv/client.h"

#include "client/embedded_client.h"
#include "common/logging.h"

namespace tierkv {

Result<std::unique_ptr<Client>> Client::Create(const Config& config) {
  InitLogging();
  if (Status st = ValidateConfig(config); !st.ok()) return st;
  if (config.mode != Mode::kEmbedded || !config.master_server_address.empty()) {
    // Remote masters and standalone stores come with the distributed issue.
    return Status(ErrorCode::UNAVAILABLE_IN_CURRENT_MODE,
                  "this build runs only mode 'embedded' with an in-process master "
                  "(master_server_address empty); got mode '" +
                      std::string(ModeName(config.mode)) + "', master_server_address '" +
                      config.master_server_address + "'");
  }
  auto client = EmbeddedClient::Create(config);
  if (!client.ok()) return client.status();
  return std::unique_ptr<Client>(std::move(client).value());
}

}  // namespace tierkv
