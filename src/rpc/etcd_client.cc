#include "rpc/etcd_client.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <utility>

#include "common/cluster_token.h"
#include "common/host_port.h"
#include "common/pem_file.h"
#include "etcd/rpc.grpc.pb.h"

namespace tierkv {
namespace {

// The first key after every key that starts with `prefix` (etcd's range_end for a prefix).
std::string PrefixEnd(std::string prefix) {
  for (size_t i = prefix.size(); i > 0; --i) {
    if (static_cast<unsigned char>(prefix[i - 1]) < 0xff) {
      prefix[i - 1] = static_cast<char>(prefix[i - 1] + 1);
      prefix.resize(i);
      return prefix;
    }
  }
  return std::string(1, '\0');  // every key
}

EtcdKeyValue FromProto(const mvccpb::KeyValue& kv) {
  return EtcdKeyValue{kv.key(), kv.value(), kv.create_revision(), kv.mod_revision(), kv.lease()};
}

}  // namespace

struct EtcdClient::Stubs {
  std::string endpoint;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<etcdserverpb::KV::Stub> kv;
  std::unique_ptr<etcdserverpb::Lease::Stub> lease;
  std::unique_ptr<etcdserverpb::Auth::Stub> auth;
};

// etcd's metadata key for its auth token (clientv3's rpctypes.TokenFieldNameGRPC).
constexpr char kEtcdTokenKey[] = "token";

// etcd's answer to a call whose auth token is missing, wrong or expired.
bool AuthTokenRefused(const grpc::Status& status) {
  return status.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
         status.error_message().find("invalid auth token") != std::string::npos ||
         status.error_message().find("user name is empty") != std::string::npos;
}

bool IsEtcdAddress(const std::string& address) { return address.rfind("etcd://", 0) == 0; }

Result<std::vector<std::string>> ParseEtcdAddress(const std::string& address) {
  if (!IsEtcdAddress(address)) {
    return Status(ErrorCode::INVALID_PARAMS,
                  "'" + address + "' is not an etcd address (etcd://host:port[;host:port...])");
  }
  std::vector<std::string> out;
  const std::string rest = address.substr(7);
  size_t from = 0;
  while (from <= rest.size()) {
    size_t to = rest.find_first_of(";,", from);
    if (to == std::string::npos) to = rest.size();
    std::string endpoint = rest.substr(from, to - from);
    if (!endpoint.empty() && endpoint.back() == '/') endpoint.pop_back();
    if (!endpoint.empty()) {
      const size_t colon = endpoint.rfind(':');
      if (colon == std::string::npos || colon == 0 || colon + 1 == endpoint.size()) {
        return Status(ErrorCode::INVALID_PARAMS,
                      "etcd endpoint '" + endpoint + "' in '" + address + "' has no host:port");
      }
      if (Status st = CheckHostPort(endpoint, "etcd endpoint in '" + address + "'"); !st.ok()) {
        return st;
      }
      out.push_back(std::move(endpoint));
    }
    from = to + 1;
  }
  if (out.empty()) {
    return Status(ErrorCode::INVALID_PARAMS, "'" + address + "' names no etcd endpoint");
  }
  return out;
}

Result<EtcdCredentials> LoadEtcdCredentials(const std::string& user,
                                            const std::string& password_file,
                                            const std::string& ca_file, const std::string& what) {
  EtcdCredentials out;
  if (user.empty() != password_file.empty()) {
    return Status(ErrorCode::INVALID_CONFIG, what +
                                                 ": the etcd user and its password file go "
                                                 "together");
  }
  if (!user.empty()) {
    auto password = ReadSecretFile(password_file, 1);
    if (!password.ok()) return Status(password.code(), what + ": " + password.status().message());
    out.user = user;
    out.password = std::move(password).value();
  }
  if (!ca_file.empty()) {
    auto ca = ReadPemFile(ca_file, what.c_str());
    if (!ca.ok()) return ca.status();
    out.ca_pem = std::move(ca).value();
  }
  return out;
}

EtcdClient::EtcdClient(std::vector<std::string> endpoints, Millis timeout,
                       EtcdCredentials credentials)
    : endpoints_(std::move(endpoints)), timeout_(timeout), credentials_(std::move(credentials)) {}

EtcdClient::~EtcdClient() = default;

Result<std::unique_ptr<EtcdClient>> EtcdClient::Create(std::vector<std::string> endpoints,
                                                       Millis timeout,
                                                       EtcdCredentials credentials) {
  if (endpoints.empty()) return Status(ErrorCode::INVALID_PARAMS, "no etcd endpoint");
  if (timeout.count() <= 0) return Status(ErrorCode::INVALID_PARAMS, "etcd timeout must be > 0");
  std::unique_ptr<EtcdClient> client(
      new EtcdClient(std::move(endpoints), timeout, std::move(credentials)));
  std::shared_ptr<grpc::ChannelCredentials> channel_credentials =
      grpc::InsecureChannelCredentials();
  if (!client->credentials_.ca_pem.empty()) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = client->credentials_.ca_pem;
    channel_credentials = grpc::SslCredentials(ssl);
  }
  grpc::ChannelArguments args;
  // Reconnect quickly to an etcd that restarts (gRPC's default backoff grows to 120 s). The
  // minimum backoff stays gRPC's: it is also the timeout of a connection attempt, and 100 ms
  // aborts every attempt on a loaded machine ("handshaker shutdown") for good.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  for (const std::string& endpoint : client->endpoints_) {
    auto stubs = std::make_unique<Stubs>();
    stubs->endpoint = endpoint;
    stubs->channel = grpc::CreateCustomChannel(endpoint, channel_credentials, args);
    stubs->kv = etcdserverpb::KV::NewStub(stubs->channel);
    stubs->lease = etcdserverpb::Lease::NewStub(stubs->channel);
    stubs->auth = etcdserverpb::Auth::NewStub(stubs->channel);
    client->stubs_.push_back(std::move(stubs));
  }
  return client;
}

std::string EtcdClient::Describe() const {
  std::string out = "etcd://";
  for (size_t i = 0; i < endpoints_.size(); ++i) out += (i ? ";" : "") + endpoints_[i];
  return out;
}

template <typename Call>
Status EtcdClient::Try(const char* what, Call&& call) {
  size_t start;
  {
    std::lock_guard lock(mu_);
    start = current_;
  }
  std::string reasons;
  bool refused = false;  // etcd refused the credentials (not a network failure)
  for (size_t k = 0; k < stubs_.size(); ++k) {
    const size_t i = (start + k) % stubs_.size();
    grpc::Status status;
    // With credentials: the current auth token, and one fresh one if etcd refuses it.
    for (int attempt = 0; attempt < 2; ++attempt) {
      std::string token;
      if (!credentials_.user.empty()) {
        {
          std::lock_guard lock(mu_);
          token = auth_token_;
        }
        if (token.empty() || attempt == 1) {
          std::string why;
          token = Authenticate(*stubs_[i], &why);
          if (token.empty()) {
            status = grpc::Status(grpc::StatusCode::UNAUTHENTICATED, why);
            break;
          }
          std::lock_guard lock(mu_);
          auth_token_ = token;
        }
      }
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + timeout_);
      if (!token.empty()) context.AddMetadata(kEtcdTokenKey, token);
      status = call(*stubs_[i], context);
      if (status.ok() || credentials_.user.empty() || !AuthTokenRefused(status)) break;
    }
    if (status.ok()) {
      std::lock_guard lock(mu_);
      current_ = i;
      return Status::Ok();
    }
    refused |= status.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
               AuthTokenRefused(status) ||
               status.error_message().find("permission denied") != std::string::npos;
    reasons += (reasons.empty() ? "" : "; ") + stubs_[i]->endpoint + ": " +
               std::to_string(static_cast<int>(status.error_code())) + " " + status.error_message();
  }
  return Status(refused ? ErrorCode::UNAUTHENTICATED : ErrorCode::RPC_FAIL,
                std::string("etcd ") + what + " at " + Describe() + " failed (timeout " +
                    std::to_string(timeout_.count()) + " ms per endpoint): " + reasons);
}

std::string EtcdClient::Authenticate(Stubs& stubs, std::string* why) {
  etcdserverpb::AuthenticateRequest request;
  request.set_name(credentials_.user);
  request.set_password(credentials_.password);
  etcdserverpb::AuthenticateResponse response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + timeout_);
  const grpc::Status status = stubs.auth->Authenticate(&context, request, &response);
  if (!status.ok()) {
    *why = "authenticating as etcd user '" + credentials_.user + "': " + status.error_message();
    return "";
  }
  if (response.token().empty()) {
    *why = "etcd user '" + credentials_.user + "': etcd's authentication is not enabled";
  }
  return response.token();
}

Status EtcdClient::EnableAuth(const std::string& root_password) {
  etcdserverpb::AuthUserAddRequest add;
  add.set_name("root");
  add.set_password(root_password);
  etcdserverpb::AuthUserAddResponse added;
  if (Status st =
          Try("UserAdd",
              [&](Stubs& s, grpc::ClientContext& c) { return s.auth->UserAdd(&c, add, &added); });
      !st.ok()) {
    return st;
  }
  etcdserverpb::AuthUserGrantRoleRequest grant;
  grant.set_user("root");
  grant.set_role("root");
  etcdserverpb::AuthUserGrantRoleResponse granted;
  if (Status st = Try("UserGrantRole",
                      [&](Stubs& s, grpc::ClientContext& c) {
                        return s.auth->UserGrantRole(&c, grant, &granted);
                      });
      !st.ok()) {
    return st;
  }
  etcdserverpb::AuthEnableRequest enable;
  etcdserverpb::AuthEnableResponse enabled;
  return Try("AuthEnable", [&](Stubs& s, grpc::ClientContext& c) {
    return s.auth->AuthEnable(&c, enable, &enabled);
  });
}

Result<std::optional<EtcdKeyValue>> EtcdClient::Get(const std::string& key) {
  etcdserverpb::RangeRequest request;
  request.set_key(key);
  etcdserverpb::RangeResponse response;
  Status st = Try("Range", [&](Stubs& s, grpc::ClientContext& c) {
    return s.kv->Range(&c, request, &response);
  });
  if (!st.ok()) return st;
  if (response.kvs_size() == 0) return std::optional<EtcdKeyValue>();
  return std::optional<EtcdKeyValue>(FromProto(response.kvs(0)));
}

Result<std::vector<EtcdKeyValue>> EtcdClient::GetPrefix(const std::string& prefix) {
  etcdserverpb::RangeRequest request;
  request.set_key(prefix);
  request.set_range_end(PrefixEnd(prefix));
  etcdserverpb::RangeResponse response;
  Status st = Try("Range", [&](Stubs& s, grpc::ClientContext& c) {
    return s.kv->Range(&c, request, &response);
  });
  if (!st.ok()) return st;
  std::vector<EtcdKeyValue> out;
  for (const mvccpb::KeyValue& kv : response.kvs()) out.push_back(FromProto(kv));
  return out;
}

Status EtcdClient::Put(const std::string& key, const std::string& value, int64_t lease) {
  etcdserverpb::PutRequest request;
  request.set_key(key);
  request.set_value(value);
  request.set_lease(lease);
  etcdserverpb::PutResponse response;
  return Try("Put",
             [&](Stubs& s, grpc::ClientContext& c) { return s.kv->Put(&c, request, &response); });
}

Result<std::pair<bool, EtcdKeyValue>> EtcdClient::PutIfAbsent(const std::string& key,
                                                              const std::string& value,
                                                              int64_t lease) {
  etcdserverpb::TxnRequest request;
  etcdserverpb::Compare* absent = request.add_compare();
  absent->set_result(etcdserverpb::Compare::EQUAL);
  absent->set_target(etcdserverpb::Compare::CREATE);
  absent->set_key(key);
  absent->set_create_revision(0);
  etcdserverpb::PutRequest* put = request.add_success()->mutable_request_put();
  put->set_key(key);
  put->set_value(value);
  put->set_lease(lease);
  request.add_failure()->mutable_request_range()->set_key(key);
  etcdserverpb::TxnResponse response;
  Status st = Try(
      "Txn", [&](Stubs& s, grpc::ClientContext& c) { return s.kv->Txn(&c, request, &response); });
  if (!st.ok()) return st;
  if (response.succeeded()) {
    const int64_t revision = response.header().revision();
    return std::make_pair(true, EtcdKeyValue{key, value, revision, revision, lease});
  }
  if (response.responses_size() == 1 && response.responses(0).has_response_range() &&
      response.responses(0).response_range().kvs_size() == 1) {
    return std::make_pair(false, FromProto(response.responses(0).response_range().kvs(0)));
  }
  // Deleted between the compare and the range (its lease expired): nobody holds it now.
  return std::make_pair(false, EtcdKeyValue{key, "", 0, 0, 0});
}

Result<bool> EtcdClient::DeleteIfValue(const std::string& key, const std::string& value) {
  etcdserverpb::TxnRequest request;
  etcdserverpb::Compare* same = request.add_compare();
  same->set_result(etcdserverpb::Compare::EQUAL);
  same->set_target(etcdserverpb::Compare::VALUE);
  same->set_key(key);
  same->set_value(value);
  request.add_success()->mutable_request_delete_range()->set_key(key);
  etcdserverpb::TxnResponse response;
  Status st = Try(
      "Txn", [&](Stubs& s, grpc::ClientContext& c) { return s.kv->Txn(&c, request, &response); });
  if (!st.ok()) return st;
  return response.succeeded();
}

Result<std::pair<int64_t, int64_t>> EtcdClient::LeaseGrant(int64_t ttl_s) {
  etcdserverpb::LeaseGrantRequest request;
  request.set_ttl(ttl_s);
  etcdserverpb::LeaseGrantResponse response;
  Status st = Try("LeaseGrant", [&](Stubs& s, grpc::ClientContext& c) {
    return s.lease->LeaseGrant(&c, request, &response);
  });
  if (!st.ok()) return st;
  if (!response.error().empty() || response.id() == 0) {
    return Status(ErrorCode::RPC_FAIL,
                  "etcd LeaseGrant at " + Describe() + ": " +
                      (response.error().empty() ? "no lease id" : response.error()));
  }
  return std::make_pair(response.id(), response.ttl());
}

Status EtcdClient::LeaseRevoke(int64_t id) {
  etcdserverpb::LeaseRevokeRequest request;
  request.set_id(id);
  etcdserverpb::LeaseRevokeResponse response;
  return Try("LeaseRevoke", [&](Stubs& s, grpc::ClientContext& c) {
    return s.lease->LeaseRevoke(&c, request, &response);
  });
}

Result<int64_t> EtcdClient::LeaseKeepAlive(int64_t id) {
  // One short stream per keep-alive: a round trip every TTL/4 costs nothing next to the TTL, and
  // a stream per call needs no thread to watch a long-lived one.
  etcdserverpb::LeaseKeepAliveResponse response;
  bool answered = false;
  Status st = Try("LeaseKeepAlive", [&](Stubs& s, grpc::ClientContext& c) {
    auto stream = s.lease->LeaseKeepAlive(&c);
    etcdserverpb::LeaseKeepAliveRequest request;
    request.set_id(id);
    answered = stream->Write(request) && stream->Read(&response);
    // etcd keeps the stream open for more keep-alives: end it rather than wait for it.
    c.TryCancel();
    grpc::Status finished = stream->Finish();
    if (answered) return grpc::Status::OK;
    return finished.ok() ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "the stream closed")
                         : finished;
  });
  if (!st.ok()) return st;
  return response.ttl();
}

Result<std::optional<LeaderInfo>> EtcdClient::Leader(const std::string& prefix) {
  auto kv = Get(prefix + "leader");
  if (!kv.ok()) return kv.status();
  if (!kv->has_value() || (*kv)->value.empty()) return std::optional<LeaderInfo>();
  return std::optional<LeaderInfo>(
      LeaderInfo{(*kv)->value, static_cast<uint64_t>((*kv)->create_revision)});
}

}  // namespace tierkv
