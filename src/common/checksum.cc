#include "common/checksum.h"

// The dispatch entry points pick AVX2/AVX-512 at run time: ~3x the SSE2
// baseline the shared library uses for plain XXH3_64bits.
#include <xxh_x86dispatch.h>

#include <cstdlib>

namespace tierkv {

uint64_t Checksum(const void* data, size_t size) { return XXH3_64bits(data, size); }

ChecksumStream::ChecksumStream() : state_(XXH3_createState()) {
  if (state_ == nullptr) std::abort();  // out of memory for a few hundred bytes
  XXH3_64bits_reset(static_cast<XXH3_state_t*>(state_));
}

ChecksumStream::~ChecksumStream() { XXH3_freeState(static_cast<XXH3_state_t*>(state_)); }

void ChecksumStream::Update(const void* data, size_t size) {
  XXH3_64bits_update(static_cast<XXH3_state_t*>(state_), data, size);
}

uint64_t ChecksumStream::Digest() const {
  return XXH3_64bits_digest(static_cast<const XXH3_state_t*>(state_));
}

}  // namespace tierkv
