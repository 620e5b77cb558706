// The transfer workload of the distributed benches (`tierkv bench remote`, `redis` and
// `disk-remote`): objects of one size laid out over two pre-faulted buffers (`src` holds the
// pattern, gets land in `dst`), put and read back in batches through a Client, every result
// code checked and the bytes verified outside the timed regions.
// Thread-safety: none of these classes are shared between threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "bench_util.h"
#include "tierkv/status.h"
#include "tierkv/types.h"

namespace tierkv {
class Client;
}  // namespace tierkv

namespace tierkv::bench {

// Seed of the source pattern; the raw TCP child fills its buffer with the same one.
// Destinations are poisoned with kPoison before a get; kSpotBytes are checked at each end of
// every object.
inline constexpr uint8_t kPoison = 0xA5;
inline constexpr size_t kSpotBytes = 64;
inline constexpr uint64_t kRemotePatternSeed = 0x7265'6d6f'7465ull;  // "remote"

// Objects of one size in a working set: at least one.
size_t ObjectsFor(uint64_t working_set_bytes, uint64_t object_bytes);
// The largest per-size working set (objects x size) over `object_sizes`.
uint64_t LargestWorkingSet(uint64_t working_set_bytes, const std::vector<uint64_t>& object_sizes);
// A segment (a store's, or an embedded client's) that holds `working_set` with room to spare:
// well below the eviction watermark, so nothing is evicted.
uint64_t SegmentBytesFor(uint64_t working_set);
// INVALID_PARAMS naming the flag for reps, batch, pieces, sizes or working set out of range.
Status ValidateTransferOptions(const CommonOptions& common, uint64_t working_set_bytes,
                               const std::vector<uint64_t>& object_sizes, size_t batch,
                               size_t pieces);

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

  // Every batch put (timed) with `config`; then every code must be 0. Returns the seconds.
  Result<double> Put(Client& client, const ReplicateConfig& config = {});
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

// One timed put and get of every object of `workload` through `client` (appending their GB/s
// to `put` and `get`), then RemoveAll.
Status ClientRep(Client& client, TransferWorkload& workload, int rep, std::vector<double>* put,
                 std::vector<double>* get);

}  // namespace tierkv::bench
