// The processes and requesters of a distributed bench run (`tierkv bench remote`, `redis` and
// `disk-remote`): a `tierkv master` and a `tierkv store` as child processes on 127.0.0.1, and
// requesters of that master over shm and tcp. Every process started is stopped at the end, also
// on errors. Thread-safety: none of these classes are shared between threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bench_util.h"
#include "tierkv/config.h"
#include "tierkv/status.h"

namespace tierkv {
class Client;
class MasterProcess;
}  // namespace tierkv

namespace tierkv::bench {

// `base` (from --config / $TIERKV_CONFIG_PATH / defaults) turned into a requester of the
// master at `master_address` over `protocol`: mode standalone-store, no segment of its own.
Config RequesterConfig(Config base, const std::string& master_address, const std::string& protocol);

// One small put, get and remove through `client`, so that timed reps do not pay for mapping
// the store's segment or setting up the first RPCs. INTERNAL_ERROR naming the step.
Status WarmUpRequester(Client& client);

// The requesters of a run: `shm` always; `tcp` when Client::Create accepts protocol tcp (else
// null, and `tcp_status` says why). Both have `src` and `dst` registered and are warmed up.
struct Requesters {
  std::unique_ptr<Client> shm;
  std::unique_ptr<Client> tcp;
  std::string tcp_status;
};
Result<Requesters> ConnectRequesters(const Config& base, const std::string& master_address,
                                     const AlignedBuffer& src, const AlignedBuffer& dst);

// A `tierkv master` and one `tierkv store` (this executable, fork+exec) on 127.0.0.1, free
// ports, their logs at warn unless TIERKV_LOG_LEVEL says otherwise. The destructor kills
// whatever still runs; Stop() stops them cleanly (store first).
class LocalCluster {
 public:
  // `store_args`: more `tierkv store` flags (e.g. {"--config", path} for an SSD tier).
  static Result<std::unique_ptr<LocalCluster>> Start(
      uint64_t segment_bytes, bool small_pages, const std::vector<std::string>& store_args = {},
      const std::vector<std::string>& master_args = {});
  ~LocalCluster();
  LocalCluster(const LocalCluster&) = delete;
  LocalCluster& operator=(const LocalCluster&) = delete;

  std::string master_address() const;
  uint64_t segment_bytes() const { return segment_bytes_; }
  // SIGTERM to the store, then the master; INTERNAL_ERROR if either does not exit 0.
  Status Stop();

 private:
  LocalCluster() = default;
  std::unique_ptr<MasterProcess> master_;
  std::unique_ptr<MasterProcess> store_;
  uint64_t segment_bytes_ = 0;
};

// A LocalCluster with its requesters (ConnectRequesters). The clients are declared after the
// processes, so they go first on every return.
struct RemoteRun {
  std::unique_ptr<LocalCluster> cluster;
  Requesters clients;

  // `token_file` non-empty: master, store and requesters hold that cluster token.
  // `store_args`: more `tierkv store` flags (e.g. the data port's TLS certificate).
  static Result<RemoteRun> Start(const Config& base, uint64_t segment_bytes, bool small_pages,
                                 const AlignedBuffer& src, const AlignedBuffer& dst,
                                 const std::string& token_file = "",
                                 const std::vector<std::string>& store_args = {});
  // Unregisters src and dst, closes the requesters, then stops the cluster (LocalCluster::Stop).
  Status Stop(const AlignedBuffer& src, const AlignedBuffer& dst);
};

}  // namespace tierkv::bench
