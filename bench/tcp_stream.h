// The raw TCP baseline of the remote benches: a forked child process that streams the source
// pattern to this process over one loopback TCP connection (tierkv bench remote, its
// --contributing mode, and bench disk-remote). It must be started before this process uses gRPC (a
// child forked after that could not use gRPC; this one never does, but the rule keeps it simple:
// fork first). The child dies with this process (PR_SET_PDEATHSIG); the destructor kills and reaps
// it.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "tierkv/status.h"
#include "workload.h"

namespace tierkv::bench {

// Writes all of [data, data+size); false on an error or a closed peer.
bool WriteAll(int fd, const void* data, size_t size);
// Reads exactly `size` bytes; false on an error or EOF first.
bool ReadAll(int fd, void* data, size_t size);

class TcpStream {
 public:
  // The child allocates `buffer_bytes` of the pattern of `seed` (the seed the caller's
  // TransferBuffers were filled with, so its bytes check) and connects.
  static Result<std::unique_ptr<TcpStream>> Start(uint64_t buffer_bytes,
                                                  uint64_t seed = kRemotePatternSeed);
  ~TcpStream();
  TcpStream(const TcpStream&) = delete;
  TcpStream& operator=(const TcpStream&) = delete;

  // kBulk: TCP at its best, the baseline of the targets: the whole working set as one stream
  // of kBulkWriteBytes writes, received with one loop into the (contiguous) dst slots.
  // kPerObject: one send() loop and one receive loop per object (what an object-at-a-time
  // exchange gets; slower for small objects, reported beside the best).
  enum class Mode { kBulk, kPerObject };
  static constexpr uint64_t kBulkWriteBytes = 4ull << 20;

  // The child sends the workload's objects, in order, into their dst slots. Poisoned before,
  // checked after; returns the seconds from request to the last byte.
  Result<double> Receive(TransferWorkload& workload, int rep, Mode mode);
  // Asks the child to exit and reaps it; INTERNAL_ERROR unless it exits 0.
  Status Stop();

 private:
  TcpStream() = default;
  pid_t pid_ = -1;
  int fd_ = -1;
};

}  // namespace tierkv::bench
