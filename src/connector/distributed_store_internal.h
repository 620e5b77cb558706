// Private to the DistributedStore files (distributed_store*.cc): the local buffer, and the
// helpers the setup, bytes, query and tensor calls share. Not part of the public API.
#pragma once

#include <sys/mman.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "memory/offset_allocator.h"
#include "tierkv/client.h"
#include "tierkv/distributed_store.h"
#include "tierkv/status.h"
#include "tierkv/types.h"

namespace tierkv {

// The per-store bounce buffer (Mooncake's local buffer): one anonymous mapping, pre-faulted,
// carved by an OffsetAllocator; a Span of it owns the mapping, so a BufferHandle outlives
// Close(). Thread-safety: Allocate is thread-safe (the allocator's).
// The per-store bounce buffer (Mooncake's local buffer).
class LocalBuffer : public std::enable_shared_from_this<LocalBuffer> {
 public:
  struct Span {
    std::shared_ptr<LocalBuffer> owner;  // declared first: destroyed after `alloc` frees
    Allocation alloc;
    uint8_t* ptr = nullptr;
  };

  static Result<std::shared_ptr<LocalBuffer>> Create(uint64_t size) {
    auto buffer = std::shared_ptr<LocalBuffer>(new LocalBuffer(size));
    if (size == 0) return buffer;
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (p == MAP_FAILED) {
      return Status(ErrorCode::INTERNAL_ERROR, "cannot map a local buffer of " +
                                                   std::to_string(size) +
                                                   " bytes: " + std::strerror(errno));
    }
    buffer->base_ = static_cast<uint8_t*>(p);
    buffer->allocator_ = OffsetAllocator::Create(size, 64);
    return buffer;
  }
  ~LocalBuffer() {
    if (base_ != nullptr) munmap(base_, capacity_);
  }

  uint8_t* base() const { return base_; }
  uint64_t capacity() const { return capacity_; }

  // A span of `size` bytes, or BUFFER_OVERFLOW naming what is free.
  Result<Span> Allocate(uint64_t size) {
    std::optional<Allocation> a = allocator_ ? allocator_->Allocate(size) : std::nullopt;
    if (!a) {
      return Status(ErrorCode::BUFFER_OVERFLOW,
                    "the local buffer (local_buffer_size " + std::to_string(capacity_) + ", " +
                        std::to_string(allocator_ ? allocator_->used() : 0) +
                        " in use) cannot hold " + std::to_string(size) + " bytes");
    }
    Span span;
    span.owner = shared_from_this();
    span.ptr = base_ + a->offset();
    span.alloc = std::move(*a);
    return span;
  }

 private:
  explicit LocalBuffer(uint64_t size) : capacity_(size) {}
  const uint64_t capacity_;
  uint8_t* base_ = nullptr;
  std::shared_ptr<OffsetAllocator> allocator_;
};

namespace dstore {

using Span = LocalBuffer::Span;
inline constexpr int kOk = 0;

inline int Code(ErrorCode code) { return ToInt(code); }

// A BufferHandle over a local-buffer span.
class SpanHandle final : public BufferHandle {
 public:
  SpanHandle(Span span, size_t size) : span_(std::move(span)), size_(size) {}
  const uint8_t* data() const override { return span_.ptr; }
  size_t size() const override { return size_; }

 private:
  Span span_;
  size_t size_;
};

std::vector<std::vector<void*>> Ptrs(const std::vector<std::vector<uintptr_t>>& in);
std::vector<std::vector<size_t>> Sizes(const std::vector<std::vector<uint64_t>>& in);
// The first code that is not 0, or 0.
int FirstFailure(const std::vector<int>& codes);

// Maps Mooncake's ReplicateConfig onto the core's for a call of `keys` keys (INVALID_PARAMS
// naming what is inconsistent). `hostname` is the store's host, for prefer_alloc_in_same_node.
Result<ReplicateConfig> ToCore(const StoreReplicateConfig& c, size_t keys, Client& client,
                               const std::string& hostname);
// Puts (or upserts) objects from pieces through the client (registered memory). A put of a key
// that exists already counts as done (0), as in Mooncake's Python API.
std::vector<int> ClientPut(Client& client, const std::vector<std::string>& keys,
                           const std::vector<std::vector<void*>>& ptrs,
                           const std::vector<std::vector<size_t>>& sizes,
                           const ReplicateConfig& config, bool upsert);
// The subset of `config` for the keys at `keep` (group ids and parent keys follow their keys).
ReplicateConfig Subset(const ReplicateConfig& config, const std::vector<size_t>& keep);

// Objects staged in local-buffer spans, put in one batch: keys whose span could not be had
// already carry their code in `codes`.
struct Staged {
  std::vector<size_t> index;
  std::vector<std::string> keys;
  std::vector<std::vector<void*>> ptrs;
  std::vector<std::vector<size_t>> sizes;
  std::vector<Span> spans;
};
void PutStaged(Client& client, Staged& staged, const ReplicateConfig& config, bool upsert,
               std::vector<int>& codes);

}  // namespace dstore

// Opens a DistributedStore method: takes mu_ shared and returns `ret` (after recording why)
// when the store is not set up.
#define TIERKV_REQUIRE_CLIENT(call, ret)                                          \
  std::shared_lock lock(mu_);                                                     \
  if (!client_) {                                                                 \
    SetError(std::string(call) + ": the store is not set up (call setup first)"); \
    return ret;                                                                   \
  }

}  // namespace tierkv
