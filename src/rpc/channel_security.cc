#include "rpc/channel_security.h"

#include <grpcpp/support/client_interceptor.h>

#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

namespace tierkv {
namespace {

// Adds the cluster token to the initial metadata of every call on the channel.
class TokenInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit TokenInterceptor(std::string token) : token_(std::move(token)) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->insert({kTokenMetadataKey, token_});
    }
    methods->Proceed();
  }

 private:
  const std::string token_;  // lives as long as the call
};

class TokenInterceptorFactory final : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit TokenInterceptorFactory(std::shared_ptr<const TokenSet> tokens)
      : tokens_(std::move(tokens)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo* /*info*/) override {
    return new TokenInterceptor(tokens_->own());
  }

 private:
  const std::shared_ptr<const TokenSet> tokens_;
};

}  // namespace

Result<ControlPlaneSecurity> ControlPlaneSecurityFrom(const Config& config,
                                                      std::shared_ptr<const TokenSet> tokens) {
  ControlPlaneSecurity out;
  if (tokens != nullptr) {
    out.tokens = std::move(tokens);
  } else if (!config.cluster_token_file.empty()) {
    auto loaded = TokenSet::Load(config.cluster_token_file, config.cluster_accept_token_file);
    if (!loaded.ok()) return loaded.status();
    out.tokens = std::move(loaded).value();
  }
  if (config.tls_ca_file.empty() &&
      (!config.tls_cert_file.empty() || !config.tls_key_file.empty())) {
    return Status(ErrorCode::INVALID_CONFIG,
                  "config key 'tls_cert_file'/'tls_key_file': a client certificate needs "
                  "tls_ca_file (the CA that signed the master's certificate)");
  }
  if (config.tls_cert_file.empty() != config.tls_key_file.empty()) {
    return Status(ErrorCode::INVALID_CONFIG,
                  "config keys 'tls_cert_file' and 'tls_key_file' go together");
  }
  auto etcd = LoadEtcdCredentials(config.etcd_user, config.etcd_password_file, config.etcd_ca_file,
                                  "config keys 'etcd_user', 'etcd_password_file', 'etcd_ca_file'");
  if (!etcd.ok()) return etcd.status();
  out.etcd = std::move(etcd).value();
  if (!config.tls_ca_file.empty()) {
    auto ca = ReadPemFile(config.tls_ca_file, "config key 'tls_ca_file'");
    if (!ca.ok()) return ca.status();
    out.tls_ca_pem = std::move(ca).value();
  }
  if (!config.tls_cert_file.empty()) {
    auto cert = ReadPemFile(config.tls_cert_file, "config key 'tls_cert_file'");
    if (!cert.ok()) return cert.status();
    auto key = ReadPemFile(config.tls_key_file, "config key 'tls_key_file'");
    if (!key.ok()) return key.status();
    out.tls_cert_pem = std::move(cert).value();
    out.tls_key_pem = std::move(key).value();
  }
  return out;
}

std::shared_ptr<grpc::Channel> MasterChannel(const std::string& address,
                                             const ControlPlaneSecurity& security,
                                             const grpc::ChannelArguments& args) {
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  if (security.tls_ca_pem.empty()) {
    credentials = grpc::InsecureChannelCredentials();
  } else {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = security.tls_ca_pem;
    ssl.pem_cert_chain = security.tls_cert_pem;
    ssl.pem_private_key = security.tls_key_pem;
    credentials = grpc::SslCredentials(ssl);
  }
  if (security.tokens == nullptr) return grpc::CreateCustomChannel(address, credentials, args);
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> creators;
  creators.push_back(std::make_unique<TokenInterceptorFactory>(security.tokens));
  return grpc::experimental::CreateCustomChannelWithInterceptors(address, credentials, args,
                                                                 std::move(creators));
}

}  // namespace tierkv
