// Object checksums: xxh3-64 over the object's bytes, streamed over its pieces.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace tierkv {

uint64_t Checksum(const void* data, size_t size);

// Streaming xxh3-64: Update() over the pieces in order gives the same value
// as Checksum() over their concatenation. Not thread-safe.
class ChecksumStream {
 public:
  ChecksumStream();
  ~ChecksumStream();
  ChecksumStream(const ChecksumStream&) = delete;
  ChecksumStream& operator=(const ChecksumStream&) = delete;
  void Update(const void* data, size_t size);
  uint64_t Digest() const;

 private:
  void* state_;  // XXH3_state_t, kept out of the header.
};

}  // namespace tierkv
