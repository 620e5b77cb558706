// LeaderElection: one master's part in electing the leader of a tierkv cluster through etcd
// (`tierkv master --ha etcd://host:port[;host:port...]`; docs/architecture.md, "Standby
// masters").
//
// Every master holds an etcd lease (TTL `lease_ttl_s`, kept alive every TTL/4) and a member key
// "<prefix>members/<address>" on it. The leader is whoever created "<prefix>leader" (value: its
// address) on its lease, in one transaction that succeeds only while the key is absent; the key's
// create_revision is the leader's epoch. The others stand by, polling the key every `poll`, and
// campaign when it is gone (the leader resigned, or its lease expired: it died or lost etcd).
//
// Fencing: the leader serves only while lease().Valid() — true from its election until the
// moment its etcd lease may have expired (the send time of the last keep-alive etcd answered,
// plus the TTL it granted, minus a margin), and false at once when a keep-alive fails, etcd says
// the lease is gone, or the leader key no longer names it. A leader that was stopped (SIGSTOP)
// past its lease comes back already invalid: it never answers as the leader again under that
// term. on_deposed runs when it steps down (then it stands by, and may be elected again later —
// a new term with a new epoch).
// Thread-safety: thread-safe; the callbacks run on the election's thread, one at a time.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "rpc/etcd_client.h"
#include "rpc/master_server.h"
#include "tierkv/status.h"

namespace tierkv {

struct LeaderElectionOptions {
  std::vector<std::string> endpoints;  // etcd host:port
  std::string prefix = kMasterPrefix;
  std::string address;      // this master's host:port: the leader key's value when it leads
  int64_t lease_ttl_s = 2;  // etcd raises a TTL below its minimum (1.5 x its election timeout)
  Millis poll{100};         // how often a standby looks at the leader key
  Millis etcd_timeout{1000};
  EtcdCredentials credentials;  // etcd's user/password and TLS; empty = none
};

struct ElectionCallbacks {
  std::function<void(uint64_t epoch, std::shared_ptr<const TermLease> lease)> on_elected;
  std::function<void(const std::string& why)> on_deposed;
  // A standby learned who leads now ("" when nobody does).
  std::function<void(const LeaderInfo& leader)> on_leader;
};

class LeaderElection {
 public:
  // Connects to etcd and starts campaigning on a thread of its own. INVALID_PARAMS for bad
  // options; RPC_FAIL when etcd does not grant a lease within a few tries.
  static Result<std::unique_ptr<LeaderElection>> Start(LeaderElectionOptions options,
                                                       ElectionCallbacks callbacks);
  // Stops; a leader resigns first (deletes the leader key, revokes its lease), so a standby takes
  // over at once instead of after the TTL.
  ~LeaderElection();
  LeaderElection(const LeaderElection&) = delete;
  LeaderElection& operator=(const LeaderElection&) = delete;

  bool leading() const;
  uint64_t epoch() const;     // of the current term while leading, else 0
  LeaderInfo leader() const;  // the leader last seen (this master while leading)
  uint64_t terms() const { return terms_.load(); }  // times elected so far

 private:
  class Lease;
  LeaderElection(LeaderElectionOptions options, ElectionCallbacks callbacks,
                 std::unique_ptr<EtcdClient> etcd);
  void Run();
  // One round: keep the lease alive (or get one), then campaign or check the leader key.
  void Step();
  void Depose(const std::string& why);
  bool NewLease();

  const LeaderElectionOptions options_;
  const ElectionCallbacks callbacks_;
  const std::unique_ptr<EtcdClient> etcd_;
  const std::string leader_key_;
  const std::string member_key_;
  std::shared_ptr<Lease> lease_;  // this master's etcd lease; only the election's thread
  int64_t lease_id_ = 0;          // only the election's thread
  SteadyTime next_keepalive_{};   // only the election's thread
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;   // guarded by mu_
  uint64_t epoch_ = 0;  // guarded by mu_; 0 while standing by
  LeaderInfo leader_;   // guarded by mu_
  std::atomic<uint64_t> terms_{0};
  std::thread thread_;
};

}  // namespace tierkv
