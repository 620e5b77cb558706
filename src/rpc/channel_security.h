// How a process talks to the master's control plane securely (docs/security.md): the cluster
// token in every call's metadata (`tierkv-cluster-token`), and TLS when a CA is given — with a
// client certificate for mutual TLS. MasterChannel opens a channel with both; the master's side
// is MasterServerOptions (rpc/master_server.h). Thread-safety: value types and pure functions;
// the token is read from the TokenSet at each call, so a reload (SIGHUP) takes effect at once.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "common/cluster_token.h"
#include "common/pem_file.h"
#include "rpc/etcd_client.h"
#include "tierkv/config.h"
#include "tierkv/status.h"

namespace tierkv {

// The gRPC metadata key that carries the cluster token.
inline constexpr char kTokenMetadataKey[] = "tierkv-cluster-token";

struct ControlPlaneSecurity {
  std::shared_ptr<const TokenSet> tokens;  // null = no token sent
  // PEM contents (not paths). ca "" = plaintext; cert and key: the client's certificate for a
  // master that requires one (mutual TLS), "" = none.
  std::string tls_ca_pem;
  std::string tls_cert_pem;
  std::string tls_key_pem;
  // etcd's credentials, for a master address "etcd://..." (the leader lookup).
  EtcdCredentials etcd;
};

// From the config keys cluster_token_file, cluster_accept_token_file, tls_ca_file,
// tls_cert_file, tls_key_file and etcd_user, etcd_password_file, etcd_ca_file (`tokens`: use this
// TokenSet instead of loading one).
Result<ControlPlaneSecurity> ControlPlaneSecurityFrom(const Config& config,
                                                      std::shared_ptr<const TokenSet> tokens = {});

// A channel to the master at `address` with `security` (TLS or plaintext, the token on every
// call).
std::shared_ptr<grpc::Channel> MasterChannel(const std::string& address,
                                             const ControlPlaneSecurity& security,
                                             const grpc::ChannelArguments& args);

}  // namespace tierkv
