// What remote_master.cc and remote_master_calls.cc share (not part of any API): the endpoint of
// the master a RemoteMaster talks to, and Call(), the retry and leader-following loop around
// every call to it. Included by those two files only.
#pragma once

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include "rpc/meta_client.h"
#include "rpc/remote_master.h"
#include "tierkv/master.grpc.pb.h"

namespace tierkv {
namespace remote_master_internal {

// What a failed call becomes: UNAUTHENTICATED (a token problem: retrying cannot help) or RPC_FAIL.
ErrorCode CodeOf(const grpc::Status& status);
// The gRPC code's name and the message, for errors and logs.
std::string Describe(const grpc::Status& status);
std::chrono::system_clock::time_point DeadlineIn(Millis timeout);

}  // namespace remote_master_internal

struct RemoteMaster::Endpoint {
  std::string address;  // host:port
  uint64_t epoch = 0;   // the leader's epoch etcd named; 0 without etcd
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<rpc::Master::Stub> stub;
  // Calls in flight, cancelled when the client moves to another leader: a call must not wait
  // for its deadline on a master that was stopped and replaced.
  mutable std::mutex mu;
  mutable std::set<grpc::ClientContext*> calls;  // guarded by mu
  mutable bool retired = false;                  // guarded by mu
  bool Enter(grpc::ClientContext* context) const {
    std::lock_guard lock(mu);
    if (retired) return false;
    calls.insert(context);
    return true;
  }
  void Leave(grpc::ClientContext* context) const {
    std::lock_guard lock(mu);
    calls.erase(context);
  }
  bool Retired() const {
    std::lock_guard lock(mu);
    return retired;
  }
  void Retire() const {
    std::shared_ptr<MetaChannel> open;
    {
      std::lock_guard lock(mu);
      retired = true;
      for (grpc::ClientContext* context : calls) context->TryCancel();
      open = meta;
    }
    if (open) open->Close();
  }
  // The master's metadata channel, as its last registration answer offered it (null: none).
  mutable std::shared_ptr<MetaChannel> meta;  // guarded by mu
  std::shared_ptr<MetaChannel> Meta() const {
    std::lock_guard lock(mu);
    return meta;
  }
  void UseMeta(std::shared_ptr<MetaChannel> offered) const {
    std::shared_ptr<MetaChannel> old;
    {
      std::lock_guard lock(mu);
      if (retired) {
        old = std::move(offered);
      } else {
        old = std::exchange(meta, std::move(offered));
      }
    }
    if (old) old->Close();
  }
  // A data-path call: over the metadata channel when the master offers one, else over gRPC.
  template <typename Request, typename Response>
  grpc::Status Unary(MetaMethod method,
                     grpc::Status (rpc::Master::Stub::*grpc_call)(grpc::ClientContext*,
                                                                  const Request&, Response*),
                     grpc::ClientContext* context, const Request& request,
                     Response* response) const {
    if (std::shared_ptr<MetaChannel> fast = Meta()) {
      return fast->Call(method, request, response, context->deadline());
    }
    return (stub.get()->*grpc_call)(context, request, response);
  }
};

template <typename Response, typename Rpc>
grpc::Status RemoteMaster::Call(const char* name, bool idempotent, Response* response, Rpc&& rpc) {
  const auto deadline = remote_master_internal::DeadlineIn(options_.rpc_timeout);
  while (true) {
    const std::shared_ptr<const Endpoint> ep = endpoint();
    grpc::ClientContext context;
    context.set_deadline(deadline);
    response->Clear();
    grpc::Status status;
    if (ep->Enter(&context)) {
      status = rpc(*ep, &context);
      ep->Leave(&context);
    } else {
      status = grpc::Status(grpc::StatusCode::CANCELLED, "moved to another leader");
    }
    // Cancelled because the client moved to a new leader: as if the old one were unreachable.
    if (status.error_code() == grpc::StatusCode::CANCELLED && ep->Retired()) {
      status = grpc::Status(grpc::StatusCode::UNAVAILABLE,
                            "the call was cancelled: " + ep->address + " no longer leads");
    }
    if (status.ok()) {
      const rpc::CallStatus& call = response->status();
      if (!Stale(*ep, call.not_leader(), call.leader_epoch())) return status;
      status = grpc::Status(
          grpc::StatusCode::UNAVAILABLE,
          "the tierkv master at " + ep->address +
              (call.not_leader() ? std::string(" is not the leader")
                                 : " answered for epoch " + std::to_string(call.leader_epoch()) +
                                       ", not the leader's " + std::to_string(ep->epoch)));
      response->Clear();
    }
    const bool retry = idempotent && status.error_code() == grpc::StatusCode::UNAVAILABLE;
    if (!retry || !AwaitMaster(ep, deadline)) {
      if (status.error_code() == grpc::StatusCode::UNAVAILABLE) Kick();
      spdlog::debug("{} to {}: {}", name, ep->address, remote_master_internal::Describe(status));
      return status;
    }
  }
}

}  // namespace tierkv
