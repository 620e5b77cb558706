// The client side of the master's metadata channel (rpc/meta_protocol.h): a pool of
// connections to one master's metadata port, one call at a time on each. RemoteMaster sends the
// data path's batch calls through it when the master offers a channel, and every other call over
// gRPC. A call's outcome is a grpc::Status, so RemoteMaster's retry and leader rules apply
// unchanged: UNAVAILABLE when the master cannot be reached or the connection breaks,
// DEADLINE_EXCEEDED at the deadline, UNAUTHENTICATED for a refused token, INVALID_ARGUMENT for a
// call the master refused as malformed, INTERNAL for a malformed answer (the connection is
// dropped then).
//
// Connections: dialled on demand (the master's challenge, the hello proving the token, the
// master's proof checked back), reused while healthy. A pooled connection is dropped before use
// when the master has closed it (it is readable) or it has been idle for half the master's idle
// timeout, so a call is never sent on a connection the master is about to close. Close() shuts
// every connection down (a call in progress fails at once) and refuses new calls: the client
// moved to another master. Thread-safety: thread-safe.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "common/cluster_token.h"
#include "common/unique_fd.h"
#include "rpc/meta_protocol.h"

namespace google::protobuf {
class MessageLite;
}  // namespace google::protobuf

namespace tierkv {

class MetaChannel {
 public:
  // `address` "host:port" of the master's metadata port; `tokens` null: no token.
  MetaChannel(std::string address, std::shared_ptr<const TokenSet> tokens);
  ~MetaChannel();
  MetaChannel(const MetaChannel&) = delete;
  MetaChannel& operator=(const MetaChannel&) = delete;

  grpc::Status Call(MetaMethod method, const google::protobuf::MessageLite& request,
                    google::protobuf::MessageLite* response,
                    std::chrono::system_clock::time_point deadline);
  void Close();

  const std::string& address() const { return address_; }
  uint64_t calls() const { return calls_.load(std::memory_order_relaxed); }  // answered

 private:
  struct Connection {
    UniqueFd fd;
    std::chrono::steady_clock::time_point idle_since;
    std::chrono::milliseconds keep{0};  // reused while idle less than this
  };
  // A healthy pooled connection, or a new one. Errors as grpc::Status (see above).
  grpc::Status Take(std::chrono::steady_clock::time_point deadline,
                    std::unique_ptr<Connection>* out);
  grpc::Status Dial(std::chrono::steady_clock::time_point deadline,
                    std::unique_ptr<Connection>* out);
  void Give(std::unique_ptr<Connection> connection);
  void Drop(std::unique_ptr<Connection> connection);
  grpc::Status Failure(grpc::StatusCode code, const std::string& what) const;

  const std::string address_;
  const std::shared_ptr<const TokenSet> tokens_;
  std::atomic<uint64_t> calls_{0};
  std::mutex mu_;
  std::vector<std::unique_ptr<Connection>> idle_;  // guarded by mu_
  std::set<int> busy_;                             // descriptors in use; guarded by mu_
  bool closed_ = false;                            // guarded by mu_
};

}  // namespace tierkv
