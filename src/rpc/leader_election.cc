#include "rpc/leader_election.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <utility>

namespace tierkv {
namespace {

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Taken off the time etcd can be trusted to keep the lease: clock rates differ a little.
constexpr Millis kLeaseMargin{100};

}  // namespace

// The fencing of one term: valid until the etcd lease may have expired, or the term ended.
class LeaderElection::Lease final : public TermLease {
 public:
  bool Valid() const override { return !dead_.load() && NowNs() < valid_until_ns_.load(); }
  void Extend(SteadyTime sent, int64_t ttl_s) {
    const auto until = sent + std::chrono::seconds(ttl_s) - kLeaseMargin;
    valid_until_ns_.store(
        std::chrono::duration_cast<std::chrono::nanoseconds>(until.time_since_epoch()).count());
  }
  void Kill() { dead_.store(true); }

 private:
  std::atomic<int64_t> valid_until_ns_{0};
  std::atomic<bool> dead_{false};
};

Result<std::unique_ptr<LeaderElection>> LeaderElection::Start(LeaderElectionOptions options,
                                                              ElectionCallbacks callbacks) {
  if (options.endpoints.empty()) return Status(ErrorCode::INVALID_PARAMS, "no etcd endpoint");
  if (options.address.empty()) {
    return Status(ErrorCode::INVALID_PARAMS, "the master's own address is empty");
  }
  if (options.lease_ttl_s < 1) {
    return Status(ErrorCode::INVALID_PARAMS, "--ha-lease-ttl-s must be >= 1");
  }
  auto etcd = EtcdClient::Create(options.endpoints, options.etcd_timeout, options.credentials);
  if (!etcd.ok()) return etcd.status();
  std::unique_ptr<LeaderElection> election(
      new LeaderElection(std::move(options), std::move(callbacks), std::move(etcd).value()));
  // etcd grants leases to anyone; reading the leader key shows whether it lets this master in
  // (its authentication on, and no or wrong credentials): then the start fails, not the loop.
  if (auto leader = election->etcd_->Leader(election->options_.prefix);
      !leader.ok() && leader.code() == ErrorCode::UNAUTHENTICATED) {
    return leader.status();
  }
  // The first lease now, so that a wrong etcd address fails the start instead of looping.
  for (int attempt = 0; attempt < 5 && !election->NewLease(); ++attempt) {
    std::this_thread::sleep_for(Millis(200));
  }
  if (election->lease_id_ == 0) {
    return Status(ErrorCode::RPC_FAIL,
                  "no lease from " + election->etcd_->Describe() + " (is etcd running there?)");
  }
  election->thread_ = std::thread([e = election.get()] { e->Run(); });
  return election;
}

LeaderElection::LeaderElection(LeaderElectionOptions options, ElectionCallbacks callbacks,
                               std::unique_ptr<EtcdClient> etcd)
    : options_(std::move(options)),
      callbacks_(std::move(callbacks)),
      etcd_(std::move(etcd)),
      leader_key_(options_.prefix + "leader"),
      member_key_(options_.prefix + "members/" + options_.address) {}

LeaderElection::~LeaderElection() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (leading()) Depose("the master is stopping");
  if (lease_id_ != 0) (void)etcd_->LeaseRevoke(lease_id_);  // drops the member key too
}

bool LeaderElection::leading() const {
  std::lock_guard lock(mu_);
  return epoch_ != 0;
}

uint64_t LeaderElection::epoch() const {
  std::lock_guard lock(mu_);
  return epoch_;
}

LeaderInfo LeaderElection::leader() const {
  std::lock_guard lock(mu_);
  return leader_;
}

bool LeaderElection::NewLease() {
  const SteadyTime sent = std::chrono::steady_clock::now();
  auto granted = etcd_->LeaseGrant(options_.lease_ttl_s);
  if (!granted.ok()) {
    spdlog::warn("leader election: {}", granted.status().ToString());
    return false;
  }
  lease_id_ = granted->first;
  lease_ = std::make_shared<Lease>();
  lease_->Extend(sent, granted->second);
  next_keepalive_ = sent + std::max<Millis>(Millis(granted->second * 1000 / 4), Millis(100));
  if (Status st = etcd_->Put(member_key_, options_.address, lease_id_); !st.ok()) {
    spdlog::warn("leader election: registering {}: {}", member_key_, st.ToString());
  }
  return true;
}

void LeaderElection::Depose(const std::string& why) {
  const int64_t old = lease_id_;
  {
    std::lock_guard lock(mu_);
    if (epoch_ == 0) return;
    epoch_ = 0;
    leader_ = LeaderInfo{};
  }
  if (lease_) lease_->Kill();  // stops serving at once, before anything below can block
  spdlog::warn("leader election: {} steps down: {}", options_.address, why);
  if (callbacks_.on_deposed) callbacks_.on_deposed(why);
  // Best effort: let a standby take over now rather than at the lease's expiry. A new lease
  // (and a new epoch, should this master win again) comes with the next round.
  (void)etcd_->DeleteIfValue(leader_key_, options_.address);
  if (old != 0) (void)etcd_->LeaseRevoke(old);
  lease_id_ = 0;
  lease_.reset();
}

void LeaderElection::Step() {
  const SteadyTime now = std::chrono::steady_clock::now();
  if (lease_id_ == 0 && !NewLease()) return;
  if (now >= next_keepalive_) {
    auto ttl = etcd_->LeaseKeepAlive(lease_id_);
    if (!ttl.ok() || *ttl <= 0) {
      const std::string why = !ttl.ok() ? "keep-alive failed: " + ttl.status().ToString()
                                        : std::string("etcd says its lease has expired");
      if (leading()) {
        Depose(why);
      } else {
        spdlog::warn("leader election: {}; taking a new lease", why);
        lease_id_ = 0;
      }
      return;
    }
    lease_->Extend(now, *ttl);
    next_keepalive_ = now + std::max<Millis>(Millis(*ttl * 1000 / 4), Millis(100));
  }
  if (leading()) {
    auto kv = etcd_->Get(leader_key_);
    if (kv.ok() &&
        (!kv->has_value() || (*kv)->value != options_.address || (*kv)->lease != lease_id_)) {
      Depose("the leader key no longer names this master");
    }
    return;
  }
  if (!lease_->Valid()) {  // standing by on a lease that ran out: take a new one first
    lease_id_ = 0;
    return;
  }
  auto campaign = etcd_->PutIfAbsent(leader_key_, options_.address, lease_id_);
  if (!campaign.ok()) {
    spdlog::debug("leader election: {}", campaign.status().ToString());
    return;
  }
  const auto& [created, kv] = *campaign;
  if (created) {
    const uint64_t epoch = static_cast<uint64_t>(kv.create_revision);
    {
      std::lock_guard lock(mu_);
      epoch_ = epoch;
      leader_ = LeaderInfo{options_.address, epoch};
    }
    terms_.fetch_add(1);
    spdlog::info("leader election: {} leads (epoch {})", options_.address, epoch);
    if (callbacks_.on_elected) callbacks_.on_elected(epoch, lease_);
    return;
  }
  const LeaderInfo seen{kv.value, static_cast<uint64_t>(kv.create_revision)};
  bool changed;
  {
    std::lock_guard lock(mu_);
    changed = seen.address != leader_.address || seen.epoch != leader_.epoch;
    leader_ = seen;
  }
  if (changed) {
    spdlog::info("leader election: {} stands by; the leader is {} (epoch {})", options_.address,
                 seen.address.empty() ? "nobody" : seen.address, seen.epoch);
    if (callbacks_.on_leader) callbacks_.on_leader(seen);
  }
}

void LeaderElection::Run() {
  std::unique_lock lock(mu_);
  while (!stop_) {
    lock.unlock();
    Step();
    lock.lock();
    cv_.wait_for(lock, options_.poll, [this] { return stop_; });
  }
}

}  // namespace tierkv
