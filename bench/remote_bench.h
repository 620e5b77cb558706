// `tierkv bench remote`: the distributed data path — a requester in this process, a
// `tierkv master` and a `tierkv store` as child processes on 127.0.0.1 — against the
// baselines of its transports, measured in the same run.
//
// Per object size (256 KiB and 2 MiB by default) a working set of distinct objects is put
// with BatchPutFromMultiBuffers and read back with BatchGetIntoMultiBuffers (registered,
// pre-faulted buffers, `batch` keys per call), once per transport:
//  - shm (the store's segment mapped through the shared-memory transport): against a
//    single-thread memcpy of the same bytes between the same buffers;
//  - tcp (the store's segment over the UCX transport on 127.0.0.1): against a raw loopback
//    TCP stream of the same bytes from a forked child process to this one. When
//    Client::Create refuses a tcp requester, the tcp figures are reported as null with the
//    refusal's text (never a number).
// Every result code is checked and the bytes verified outside the timed regions. Every
// process started is stopped at the end, also on errors. Output: see docs/benchmarks.md.
//
// The pieces shared with `tierkv bench redis` (the workload over two buffers, the child
// processes) are declared here too. Thread-safety: none of these classes are shared between
// threads.
#pragma once

#include <sys/types.h>

#include <cstddef>
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

struct RemoteBenchOptions {
  CommonOptions common;
  // Bytes of distinct objects per object size; keep it well above L3 (32 MiB).
  uint64_t working_set_bytes = 512 * kMiB;
  std::vector<uint64_t> object_sizes = {256 * kKiB, 2 * kMiB};
  size_t batch = 32;         // keys per batch call
  size_t pieces = 4;         // buffers per object (scatter on put, gather on get)
  bool small_pages = false;  // the store's segment on 4 KiB pages (`tierkv store --small-pages`)
};

// Targets, printed as PASS/FAIL in the human summary (never the exit code).
inline constexpr double kShmGetRatioTarget = 0.85;
inline constexpr double kTcpGetRatioTarget = 0.8;

// Runs the bench and prints its results (JSON lines on stdout with --json, a table
// otherwise). Fails on bad options (INVALID_PARAMS), a process or client that cannot start,
// any failed key or a wrong byte; the message names the key.
Status RunRemoteBench(const RemoteBenchOptions& options);

// ---- Shared with `tierkv bench redis` ------------------------------------------------------

// Seed of the source pattern; the raw TCP child fills its buffer with the same one.
inline constexpr uint64_t kRemotePatternSeed = 0x7265'6d6f'7465ull;  // "remote"

// Objects of one size in a working set: at least one.
size_t ObjectsFor(uint64_t working_set_bytes, uint64_t object_bytes);
// The largest per-size working set (objects x size) over `object_sizes`.
uint64_t LargestWorkingSet(uint64_t working_set_bytes, const std::vector<uint64_t>& object_sizes);
// A store segment that holds `working_set` with room to spare: well below the eviction
// watermark, so nothing is evicted.
uint64_t StoreSegmentBytes(uint64_t working_set);
// INVALID_PARAMS naming the flag for reps, batch, pieces, sizes or working set out of range.
Status ValidateTransferOptions(const CommonOptions& common, uint64_t working_set_bytes,
                               const std::vector<uint64_t>& object_sizes, size_t batch,
                               size_t pieces);

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

// Objects i = 0..objects-1 of one size, object i at offset i x object_bytes of `src` (the
// pattern) and `dst` (where gets land), in `pieces` pieces each, keys in batches of `batch`.
class TransferWorkload {
 public:
  TransferWorkload(std::string name, uint64_t object_bytes, size_t objects, size_t batch,
                   size_t pieces, const AlignedBuffer& src, const AlignedBuffer& dst);

  uint64_t object_bytes() const { return object_bytes_; }
  size_t objects() const { return objects_; }
  uint64_t total_bytes() const { return objects_ * object_bytes_; }
  const std::string& key(size_t i) const { return keys_[i]; }
  uint8_t* dst_object(size_t i) const { return dst_.data() + i * object_bytes_; }
  const uint8_t* src_object(size_t i) const { return src_.data() + i * object_bytes_; }

  // Every batch put (timed); then every code must be 0. Returns the seconds.
  Result<double> Put(Client& client);
  // Poisons dst, every batch get (timed); then every code must be the object size and the
  // bytes right (CheckBytes). Returns the seconds.
  Result<double> Get(Client& client, int rep);
  // Poisons dst, the same bytes copied src -> dst with TimedMemcpy, checked. The seconds.
  Result<double> Memcpy(int rep);
  // RemoveAll(force) on `client`; it must remove exactly objects().
  Status RemoveAll(Client& client);

  // Overwrites what CheckBytes looks at (both 64-byte ends of every object, all of one
  // object per batch, chosen by `rep`), so stale bytes never pass for a transfer.
  void Poison(int rep);
  // dst against src where Poison wrote; `what` names the copy in the error.
  Status CheckBytes(int rep, const std::string& what) const;

 private:
  struct Batch {
    std::vector<std::string> keys;
    std::vector<size_t> objects;
    std::vector<std::vector<void*>> src_ptrs;
    std::vector<std::vector<void*>> dst_ptrs;
    std::vector<std::vector<size_t>> piece_sizes;
  };
  size_t FullCheckObject(size_t b, int rep) const;

  std::string name_;
  uint64_t object_bytes_;
  size_t objects_;
  const AlignedBuffer& src_;
  const AlignedBuffer& dst_;
  std::vector<std::string> keys_;
  std::vector<Batch> batches_;
  std::vector<CopyPiece> copies_;
};

// A `tierkv master` and one `tierkv store` (this executable, fork+exec) on 127.0.0.1, free
// ports, their logs at warn unless TIERKV_LOG_LEVEL says otherwise. The destructor kills
// whatever still runs; Stop() stops them cleanly (store first).
class LocalCluster {
 public:
  // `store_args`: more `tierkv store` flags (e.g. {"--config", path} for an SSD tier).
  static Result<std::unique_ptr<LocalCluster>> Start(
      uint64_t segment_bytes, bool small_pages, const std::vector<std::string>& store_args = {});
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

  static Result<RemoteRun> Start(const Config& base, uint64_t segment_bytes, bool small_pages,
                                 const AlignedBuffer& src, const AlignedBuffer& dst);
  // Unregisters src and dst, closes the requesters, then stops the cluster (LocalCluster::Stop).
  Status Stop(const AlignedBuffer& src, const AlignedBuffer& dst);
};

// One timed put and get of every object of `workload` through `client` (appending their GB/s
// to `put` and `get`), then RemoveAll.
Status ClientRep(Client& client, TransferWorkload& workload, int rep, std::vector<double>* put,
                 std::vector<double>* get);

}  // namespace tierkv::bench
