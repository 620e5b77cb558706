// DistributedStore: the bytes calls (through the local buffer), the zero-copy calls over
// registered memory, and get_into_ranges (include/tierkv/distributed_store.h).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <utility>

#include "connector/distributed_store_internal.h"

namespace tierkv {

using dstore::Code;
using dstore::kOk;

// ---- bytes through the local buffer -------------------------------------------------------

namespace {

std::vector<int> PutBytesImpl(Client& client, LocalBuffer& local,
                              const std::vector<std::string>& keys,
                              const std::vector<std::vector<std::span<const uint8_t>>>& values,
                              const ReplicateConfig& config, bool upsert) {
  std::vector<int> codes(keys.size(), kOk);
  dstore::Staged staged;
  for (size_t i = 0; i < keys.size(); ++i) {
    uint64_t total = 0;
    for (const auto& part : values[i]) total += part.size();
    if (total == 0) {
      codes[i] = Code(ErrorCode::INVALID_PARAMS);  // objects are never empty
      continue;
    }
    auto span = local.Allocate(total);
    if (!span.ok()) {
      spdlog::warn("put of {}: {}", keys[i], span.status().message());
      codes[i] = Code(span.code());
      continue;
    }
    uint8_t* at = span->ptr;
    for (const auto& part : values[i]) {
      if (!part.empty()) std::memcpy(at, part.data(), part.size());
      at += part.size();
    }
    staged.index.push_back(i);
    staged.keys.push_back(keys[i]);
    staged.ptrs.push_back({span->ptr});
    staged.sizes.push_back({static_cast<size_t>(total)});
    staged.spans.push_back(std::move(*span));
  }
  dstore::PutStaged(client, staged, config, upsert, codes);
  return codes;
}

// Reads objects into local-buffer spans, each sized by the client once it knows the size of
// the version it reads (one master call: an upsert in between cannot make a span too small).
std::vector<Result<std::shared_ptr<const BufferHandle>>> GetBuffers(
    Client& client, LocalBuffer& local, const std::vector<std::string>& keys) {
  std::vector<std::optional<dstore::Span>> spans(keys.size());
  std::vector<Status> alloc_failed(keys.size());
  const std::vector<int64_t> got =
      client.BatchGetAllocated(keys, [&](size_t i, uint64_t size) -> void* {
        auto span = local.Allocate(size);
        if (!span.ok()) {
          spdlog::warn("get of {}: {}", keys[i], span.status().message());
          alloc_failed[i] = span.status();
          return nullptr;
        }
        void* ptr = span->ptr;
        spans[i] = std::move(*span);
        return ptr;
      });
  std::vector<Result<std::shared_ptr<const BufferHandle>>> out;
  out.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    if (got[i] >= 0 && spans[i]) {
      out.emplace_back(std::shared_ptr<const BufferHandle>(
          std::make_shared<dstore::SpanHandle>(std::move(*spans[i]), static_cast<size_t>(got[i]))));
    } else if (!alloc_failed[i].ok()) {
      out.emplace_back(alloc_failed[i]);
    } else {
      out.emplace_back(
          static_cast<ErrorCode>(got[i] < 0 ? got[i] : ToInt(ErrorCode::INTERNAL_ERROR)),
          "reading " + keys[i]);
    }
  }
  return out;
}

}  // namespace

int DistributedStore::Put(const std::string& key, std::span<const uint8_t> value,
                          const StoreReplicateConfig& config) {
  return PutParts(key, {value}, config);
}

int DistributedStore::PutParts(const std::string& key,
                               const std::vector<std::span<const uint8_t>>& parts,
                               const StoreReplicateConfig& config) {
  return WriteParts("put", key, parts, config, /*upsert=*/false);
}

int DistributedStore::PutBatch(const std::vector<std::string>& keys,
                               const std::vector<std::span<const uint8_t>>& values,
                               const StoreReplicateConfig& config) {
  return WriteBatch("put_batch", keys, values, config, /*upsert=*/false);
}

int DistributedStore::Upsert(const std::string& key, std::span<const uint8_t> value,
                             const StoreReplicateConfig& config) {
  return UpsertParts(key, {value}, config);
}

int DistributedStore::UpsertParts(const std::string& key,
                                  const std::vector<std::span<const uint8_t>>& parts,
                                  const StoreReplicateConfig& config) {
  return WriteParts("upsert", key, parts, config, /*upsert=*/true);
}

int DistributedStore::UpsertBatch(const std::vector<std::string>& keys,
                                  const std::vector<std::span<const uint8_t>>& values,
                                  const StoreReplicateConfig& config) {
  return WriteBatch("upsert_batch", keys, values, config, /*upsert=*/true);
}

int DistributedStore::WriteParts(const char* call, const std::string& key,
                                 const std::vector<std::span<const uint8_t>>& parts,
                                 const StoreReplicateConfig& config, bool upsert) {
  TIERKV_REQUIRE_CLIENT(call, Code(ErrorCode::INVALID_PARAMS));
  auto core = dstore::ToCore(config, 1, *client_, hostname_);
  if (!core.ok()) {
    SetError(std::string(call) + ": " + core.status().message());
    return Code(core.code());
  }
  return PutBytesImpl(*client_, *local_, {key}, {parts}, *core, upsert)[0];
}

int DistributedStore::WriteBatch(const char* call, const std::vector<std::string>& keys,
                                 const std::vector<std::span<const uint8_t>>& values,
                                 const StoreReplicateConfig& config, bool upsert) {
  TIERKV_REQUIRE_CLIENT(call, Code(ErrorCode::INVALID_PARAMS));
  if (keys.size() != values.size()) {
    SetError(std::string(call) + ": " + std::to_string(keys.size()) + " keys but " +
             std::to_string(values.size()) + " values");
    return Code(ErrorCode::INVALID_PARAMS);
  }
  auto core = dstore::ToCore(config, keys.size(), *client_, hostname_);
  if (!core.ok()) {
    SetError(std::string(call) + ": " + core.status().message());
    return Code(core.code());
  }
  std::vector<std::vector<std::span<const uint8_t>>> parts;
  parts.reserve(values.size());
  for (const auto& v : values) parts.push_back({v});
  return dstore::FirstFailure(PutBytesImpl(*client_, *local_, keys, parts, *core, upsert));
}

Result<std::shared_ptr<const BufferHandle>> DistributedStore::GetBuffer(const std::string& key) {
  return std::move(BatchGetBuffer({key})[0]);
}

std::vector<Result<std::shared_ptr<const BufferHandle>>> DistributedStore::BatchGetBuffer(
    const std::vector<std::string>& keys) {
  using Out = std::vector<Result<std::shared_ptr<const BufferHandle>>>;
  TIERKV_REQUIRE_CLIENT("get",
                        Out(keys.size(), Status(ErrorCode::INVALID_PARAMS, "store not set up")));
  return GetBuffers(*client_, *local_, keys);
}

// ---- zero-copy ----------------------------------------------------------------------------

int DistributedStore::PutFrom(const std::string& key, uintptr_t ptr, uint64_t size,
                              const StoreReplicateConfig& config) {
  return BatchPutFromMultiBuffers({key}, {{ptr}}, {{size}}, config)[0];
}

namespace {

// One buffer per key, as the multi-buffer calls take them (a missing entry: no buffer, which
// fails that key's shape check).
std::pair<std::vector<std::vector<uintptr_t>>, std::vector<std::vector<uint64_t>>> OneBufferEach(
    size_t keys, const std::vector<uintptr_t>& ptrs, const std::vector<uint64_t>& sizes) {
  std::pair<std::vector<std::vector<uintptr_t>>, std::vector<std::vector<uint64_t>>> out;
  for (size_t i = 0; i < keys; ++i) {
    out.first.push_back(i < ptrs.size() ? std::vector<uintptr_t>{ptrs[i]}
                                        : std::vector<uintptr_t>{});
    out.second.push_back(i < sizes.size() ? std::vector<uint64_t>{sizes[i]}
                                          : std::vector<uint64_t>{});
  }
  return out;
}

}  // namespace

std::vector<int> DistributedStore::BatchPutFrom(const std::vector<std::string>& keys,
                                                const std::vector<uintptr_t>& ptrs,
                                                const std::vector<uint64_t>& sizes,
                                                const StoreReplicateConfig& config) {
  // Lists of another length than keys fail every key (as Mooncake's batch_put_from does).
  if (ptrs.size() != keys.size() || sizes.size() != keys.size()) {
    SetError("batch_put_from: " + std::to_string(keys.size()) + " keys, " +
             std::to_string(ptrs.size()) + " buffers, " + std::to_string(sizes.size()) + " sizes");
    return std::vector<int>(keys.size(), Code(ErrorCode::INVALID_PARAMS));
  }
  auto [p, s] = OneBufferEach(keys.size(), ptrs, sizes);
  return BatchPutFromMultiBuffers(keys, p, s, config);
}

int DistributedStore::UpsertFrom(const std::string& key, uintptr_t ptr, uint64_t size,
                                 const StoreReplicateConfig& config) {
  return BatchUpsertFromMultiBuffers({key}, {{ptr}}, {{size}}, config)[0];
}

std::vector<int> DistributedStore::BatchUpsertFrom(const std::vector<std::string>& keys,
                                                   const std::vector<uintptr_t>& ptrs,
                                                   const std::vector<uint64_t>& sizes,
                                                   const StoreReplicateConfig& config) {
  // Lists of another length than keys fail every key (as Mooncake's batch_put_from does).
  if (ptrs.size() != keys.size() || sizes.size() != keys.size()) {
    SetError("batch_upsert_from: " + std::to_string(keys.size()) + " keys, " +
             std::to_string(ptrs.size()) + " buffers, " + std::to_string(sizes.size()) + " sizes");
    return std::vector<int>(keys.size(), Code(ErrorCode::INVALID_PARAMS));
  }
  auto [p, s] = OneBufferEach(keys.size(), ptrs, sizes);
  return BatchUpsertFromMultiBuffers(keys, p, s, config);
}

namespace {

// Lists of the wrong length fail every key (the shapes do not say which key a piece is for).
bool ShapesMatch(size_t keys, size_t ptrs, size_t sizes) { return ptrs == keys && sizes == keys; }

}  // namespace

std::vector<int> DistributedStore::BatchPutFromMultiBuffers(
    const std::vector<std::string>& keys, const std::vector<std::vector<uintptr_t>>& ptrs,
    const std::vector<std::vector<uint64_t>>& sizes, const StoreReplicateConfig& config) {
  return WriteFromBuffers("batch_put_from", keys, ptrs, sizes, config, /*upsert=*/false);
}

std::vector<int> DistributedStore::BatchUpsertFromMultiBuffers(
    const std::vector<std::string>& keys, const std::vector<std::vector<uintptr_t>>& ptrs,
    const std::vector<std::vector<uint64_t>>& sizes, const StoreReplicateConfig& config) {
  return WriteFromBuffers("batch_upsert_from", keys, ptrs, sizes, config, /*upsert=*/true);
}

std::vector<int> DistributedStore::WriteFromBuffers(const char* call,
                                                    const std::vector<std::string>& keys,
                                                    const std::vector<std::vector<uintptr_t>>& ptrs,
                                                    const std::vector<std::vector<uint64_t>>& sizes,
                                                    const StoreReplicateConfig& config,
                                                    bool upsert) {
  TIERKV_REQUIRE_CLIENT(call, std::vector<int>(keys.size(), Code(ErrorCode::INVALID_PARAMS)));
  if (!ShapesMatch(keys.size(), ptrs.size(), sizes.size())) {
    SetError(std::string(call) + ": lists of different lengths");
    return std::vector<int>(keys.size(), Code(ErrorCode::INVALID_PARAMS));
  }
  auto core = dstore::ToCore(config, keys.size(), *client_, hostname_);
  if (!core.ok()) {
    SetError(std::string(call) + ": " + core.status().message());
    return std::vector<int>(keys.size(), Code(core.code()));
  }
  return dstore::ClientPut(*client_, keys, dstore::Ptrs(ptrs), dstore::Sizes(sizes), *core, upsert);
}

int64_t DistributedStore::GetInto(const std::string& key, uintptr_t ptr, uint64_t capacity) {
  return BatchGetInto({key}, {ptr}, {capacity})[0];
}

std::vector<int64_t> DistributedStore::BatchGetInto(const std::vector<std::string>& keys,
                                                    const std::vector<uintptr_t>& ptrs,
                                                    const std::vector<uint64_t>& capacities) {
  TIERKV_REQUIRE_CLIENT("batch_get_into",
                        std::vector<int64_t>(keys.size(), Code(ErrorCode::INVALID_PARAMS)));
  if (!ShapesMatch(keys.size(), ptrs.size(), capacities.size())) {
    SetError("batch_get_into: lists of different lengths");
    return std::vector<int64_t>(keys.size(), Code(ErrorCode::INVALID_PARAMS));
  }
  std::vector<void*> bufs;
  for (uintptr_t p : ptrs) bufs.push_back(reinterpret_cast<void*>(p));
  return client_->BatchGetInto(keys, bufs,
                               std::vector<size_t>(capacities.begin(), capacities.end()));
}

std::vector<int64_t> DistributedStore::BatchGetIntoMultiBuffers(
    const std::vector<std::string>& keys, const std::vector<std::vector<uintptr_t>>& ptrs,
    const std::vector<std::vector<uint64_t>>& sizes) {
  TIERKV_REQUIRE_CLIENT("batch_get_into_multi_buffers",
                        std::vector<int64_t>(keys.size(), Code(ErrorCode::INVALID_PARAMS)));
  if (!ShapesMatch(keys.size(), ptrs.size(), sizes.size())) {
    SetError("batch_get_into_multi_buffers: lists of different lengths");
    return std::vector<int64_t>(keys.size(), Code(ErrorCode::INVALID_PARAMS));
  }
  return client_->BatchGetIntoMultiBuffers(keys, dstore::Ptrs(ptrs), dstore::Sizes(sizes));
}

std::vector<std::vector<std::vector<int64_t>>> DistributedStore::GetIntoRanges(
    const std::vector<uintptr_t>& buffer_ptrs, const std::vector<std::vector<std::string>>& keys,
    const std::vector<std::vector<std::vector<uint64_t>>>& dst_offsets,
    const std::vector<std::vector<std::vector<uint64_t>>>& src_offsets,
    const std::vector<std::vector<std::vector<uint64_t>>>& sizes) {
  // Results shaped like `sizes` where it can be, else like `keys`.
  std::vector<std::vector<std::vector<int64_t>>> out(buffer_ptrs.size());
  auto fill_all = [&](int code) {
    for (size_t i = 0; i < buffer_ptrs.size(); ++i) {
      const size_t nk = i < keys.size() ? keys[i].size() : 0;
      out[i].assign(nk, {});
      for (size_t j = 0; j < nk; ++j) {
        const size_t nf = i < sizes.size() && j < sizes[i].size() ? sizes[i][j].size() : 1;
        out[i][j].assign(nf, code);
      }
    }
    return out;
  };
  TIERKV_REQUIRE_CLIENT("get_into_ranges", fill_all(Code(ErrorCode::INVALID_PARAMS)));
  const size_t nb = buffer_ptrs.size();
  if (keys.size() != nb || dst_offsets.size() != nb || src_offsets.size() != nb ||
      sizes.size() != nb) {
    SetError("get_into_ranges: the five lists must have one entry per buffer");
    return fill_all(Code(ErrorCode::INVALID_PARAMS));
  }
  // Every distinct key once, through the local buffer.
  std::vector<std::string> unique;
  std::map<std::string, size_t> slot;
  for (const auto& per_buffer : keys) {
    for (const auto& k : per_buffer) {
      if (slot.emplace(k, unique.size()).second) unique.push_back(k);
    }
  }
  auto objects = GetBuffers(*client_, *local_, unique);
  for (size_t i = 0; i < nb; ++i) {
    const size_t nk = keys[i].size();
    out[i].assign(nk, {});
    const auto reg = RegisteredRange(buffer_ptrs[i], 0);
    const uint64_t room = reg ? reg->second - (buffer_ptrs[i] - reg->first) : 0;
    const bool shape_ok =
        dst_offsets[i].size() == nk && src_offsets[i].size() == nk && sizes[i].size() == nk;
    for (size_t j = 0; j < nk; ++j) {
      const bool frag_ok = shape_ok && dst_offsets[i][j].size() == sizes[i][j].size() &&
                           src_offsets[i][j].size() == sizes[i][j].size();
      // One result per destination range; lists that disagree give one INVALID_PARAMS per entry
      // of the longest (never an empty list for a key that failed).
      size_t nf = 1;
      if (frag_ok) {
        nf = sizes[i][j].size();
      } else if (shape_ok) {
        nf = std::max(
            {dst_offsets[i][j].size(), src_offsets[i][j].size(), sizes[i][j].size(), size_t{1}});
      }
      out[i][j].assign(nf, Code(ErrorCode::INVALID_PARAMS));
      if (!frag_ok || !reg) continue;
      const auto& obj = objects[slot[keys[i][j]]];
      for (size_t k = 0; k < nf; ++k) {
        const uint64_t dst = dst_offsets[i][j][k], src = src_offsets[i][j][k], len = sizes[i][j][k];
        if (!obj.ok()) {
          out[i][j][k] = Code(obj.code());
        } else if (dst > room || len > room - dst) {
          out[i][j][k] = Code(ErrorCode::BUFFER_OVERFLOW);
        } else if (src > (*obj)->size() || len > (*obj)->size() - src) {
          out[i][j][k] = Code(ErrorCode::INVALID_READ);
        } else {
          if (len > 0) {
            std::memcpy(reinterpret_cast<void*>(buffer_ptrs[i] + dst), (*obj)->data() + src, len);
          }
          out[i][j][k] = static_cast<int64_t>(len);
        }
      }
    }
  }
  return out;
}

}  // namespace tierkv
