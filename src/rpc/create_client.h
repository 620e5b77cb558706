// Building clients and stores whose master is a `tierkv master` process.
// Thread-safety: pure factories.
#pragma once

#include <memory>

#include "client/client_impl.h"
#include "rpc/remote_backend.h"
#include "tierkv/config.h"

namespace tierkv {

// Connects to config.master_server_address (within 5 s) as config.local_hostname, with the
// transports config.protocol asks for. Errors: INVALID_CONFIG (ValidateConfig, or no master
// address), the network transport's option errors (UcxOptionsFromConfig:
// UNAVAILABLE_IN_CURRENT_MODE for rdma without verbs devices or a missing NIC), RPC_FAIL (no
// master answered).
Result<std::shared_ptr<RemoteBackend>> ConnectRemoteBackend(const Config& config);

}  // namespace tierkv
