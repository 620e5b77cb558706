// EtcdClient: the few etcd v3 calls tierkv makes, over etcd's own gRPC API (proto/etcd/rpc.proto:
// an interface description of etcd's KV and Lease services) — no consensus of tierkv's own. The
// masters' election (rpc/leader_election.h) and the clients' leader lookup use it.
//
// Addresses: "etcd://host:port[;host:port...]" (Mooncake's form) names the etcd endpoints; a
// call tries them in turn, starting from the last one that answered, each within `timeout`.
// Keys of a tierkv cluster live under kMasterPrefix: "<prefix>leader" holds the leader's
// "host:port" (attached to the leader's lease; its create_revision is the leader's epoch) and
// "<prefix>members/<host:port>" one key per running master.
// Errors: RPC_FAIL naming the endpoints and etcd's (or gRPC's) reason; INVALID_PARAMS for a
// malformed address. Thread-safety: thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "tierkv/status.h"

namespace grpc {
class Channel;
}  // namespace grpc

namespace tierkv {

inline constexpr char kMasterPrefix[] = "/tierkv/master/";

// True for "etcd://...".
bool IsEtcdAddress(const std::string& address);
// The host:port endpoints of "etcd://host:port[;host:port...]". INVALID_PARAMS for another
// scheme, no endpoint, or an endpoint without a port.
Result<std::vector<std::string>> ParseEtcdAddress(const std::string& address);

// How to reach an etcd that requires authentication (etcd's user/password auth) and TLS.
struct EtcdCredentials {
  std::string user;      // "" = no authentication
  std::string password;  // the secret itself (read from a file by the caller)
  std::string ca_pem;    // "" = plaintext; else TLS, trusting this CA
  bool empty() const { return user.empty() && ca_pem.empty(); }
};
// From the user and a password file (mode 0600 or stricter: the token file's rules,
// common/cluster_token.h) and a CA file; `what` names the flags or keys in errors.
Result<EtcdCredentials> LoadEtcdCredentials(const std::string& user,
                                            const std::string& password_file,
                                            const std::string& ca_file, const std::string& what);

struct EtcdKeyValue {
  std::string key;
  std::string value;
  int64_t create_revision = 0;
  int64_t mod_revision = 0;
  int64_t lease = 0;
};

// The leader a cluster's etcd names (its "<prefix>leader" key).
struct LeaderInfo {
  std::string address;  // host:port of its gRPC service
  uint64_t epoch = 0;   // the key's create_revision: larger for every later leader
};

class EtcdClient {
 public:
  // With `credentials.user`, every call carries an etcd auth token got by Authenticate (again
  // when etcd says it expired); a wrong user or password is UNAUTHENTICATED.
  static Result<std::unique_ptr<EtcdClient>> Create(std::vector<std::string> endpoints,
                                                    Millis timeout = Millis(1000),
                                                    EtcdCredentials credentials = {});
  ~EtcdClient();
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  // The key, or nullopt if absent.
  Result<std::optional<EtcdKeyValue>> Get(const std::string& key);
  // Every key starting with `prefix`, in key order.
  Result<std::vector<EtcdKeyValue>> GetPrefix(const std::string& prefix);
  // Sets `key` (attached to `lease`, 0 = none).
  Status Put(const std::string& key, const std::string& value, int64_t lease);
  // Creates `key` = `value` attached to `lease` unless it exists (one transaction). Returns
  // whether it was created, and the key as it is now (its create_revision: the new one, or the
  // existing key's).
  Result<std::pair<bool, EtcdKeyValue>> PutIfAbsent(const std::string& key,
                                                    const std::string& value, int64_t lease);
  // Deletes `key` if its value is `value` (one transaction); whether it did.
  Result<bool> DeleteIfValue(const std::string& key, const std::string& value);

  // A lease of `ttl_s` seconds (etcd may raise it to its minimum): (id, granted TTL).
  Result<std::pair<int64_t, int64_t>> LeaseGrant(int64_t ttl_s);
  Status LeaseRevoke(int64_t id);
  // One keep-alive: the TTL the lease has again, in seconds (<= 0: the lease is gone).
  Result<int64_t> LeaseKeepAlive(int64_t id);

  // Turns etcd's authentication on: user "root" with `root_password` and the root role, then
  // AuthEnable (what `etcdctl user add root; etcdctl auth enable` do). For deployments and the
  // tests; etcd refuses it when authentication is on already.
  Status EnableAuth(const std::string& root_password);

  // The cluster's leader ("<prefix>leader"), or nullopt when none is elected.
  Result<std::optional<LeaderInfo>> Leader(const std::string& prefix = kMasterPrefix);

  const std::vector<std::string>& endpoints() const { return endpoints_; }
  std::string Describe() const;  // "etcd://a;b" for messages

 private:
  struct Stubs;
  EtcdClient(std::vector<std::string> endpoints, Millis timeout, EtcdCredentials credentials);
  // An auth token from `stubs`' endpoint (Authenticate); "" and `why` set on failure.
  std::string Authenticate(Stubs& stubs, std::string* why);
  // Runs `call(stubs)` on each endpoint in turn until one answers (gRPC status OK): its status,
  // or the last failure.
  template <typename Call>
  Status Try(const char* what, Call&& call);

  const std::vector<std::string> endpoints_;
  const Millis timeout_;
  const EtcdCredentials credentials_;
  std::vector<std::unique_ptr<Stubs>> stubs_;  // one per endpoint, fixed after Create
  std::mutex mu_;
  size_t current_ = 0;      // the endpoint that answered last; guarded by mu_
  std::string auth_token_;  // etcd's, with credentials_.user; guarded by mu_
};

}  // namespace tierkv
