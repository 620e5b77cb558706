// Redis at its best, for `tierkv bench redis`: two ways of reading GETs that do not go through
// hiredis's buffer, measured in the same run as the hiredis readers; the bench compares tierkv
// against the fastest of them.
//  - A raw RESP client: pipelined GETs written as one buffer per pipeline, each reply's header
//    parsed from a small staging buffer and its value received straight into the destination
//    slot (recv into the slot: the same one copy a raw TCP stream makes). Verified bytes.
//  - redis-benchmark (the server's own tool, Debian's redis-tools): `-t set,get -d <size>` with
//    `connections` clients, plain and pipelined; it reads one key over and over and does not
//    keep or check the values, so it is Redis's ceiling rather than a like-for-like reader.
// Thread-safety: RawRespReader is used by one thread; the functions share nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tierkv/status.h"
#include "workload.h"

namespace tierkv::bench {

class RawRespReader {
 public:
  // Connects to 127.0.0.1:port (60 s receive and send timeouts: a stuck server fails the run).
  static Result<RawRespReader> Connect(int port);
  RawRespReader(RawRespReader&& other) noexcept;
  RawRespReader& operator=(RawRespReader&& other) noexcept;
  RawRespReader(const RawRespReader&) = delete;
  RawRespReader& operator=(const RawRespReader&) = delete;
  ~RawRespReader();

  // GETs objects [first, end) of `workload` in pipelines of `batch`, each value into its dst
  // slot; INTERNAL_ERROR naming the key for a reply that is not a string of the object's size.
  Status GetObjects(const TransferWorkload& workload, size_t first, size_t end, size_t batch);

 private:
  explicit RawRespReader(int fd);
  // The next line (without CRLF) from the staging buffer, receiving more as needed.
  Result<std::string> ReadLine();
  // Moves the unread bytes to the front of the staging buffer and receives more after them.
  Status Refill();
  // `size` bytes into `dst`: what the staging buffer holds first, the rest received directly.
  Status ReadValue(uint8_t* dst, size_t size);

  int fd_ = -1;
  std::vector<char> staging_;
  size_t begin_ = 0, end_ = 0;  // unread bytes of staging_
  std::string request_;         // the pipeline being written
};

struct RedisBenchmarkRun {
  bool available = false;  // redis-benchmark on PATH
  double gbps = 0;         // GET values per second x value size, the best of the runs
  std::string detail;      // which run gave it, or why none ran
};

// `redis-benchmark -t set,get -d <object_bytes> -c <connections> -n <requests>`, plain and with
// `-P <pipeline>`; the best GET figure. INTERNAL_ERROR when the tool runs and fails.
Result<RedisBenchmarkRun> RunRedisBenchmarkTool(int port, uint64_t object_bytes, size_t requests,
                                                size_t connections, size_t pipeline,
                                                const std::string& work_dir);

}  // namespace tierkv::bench
