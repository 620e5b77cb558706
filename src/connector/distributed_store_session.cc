// DistributedStore: layer-wise get sessions (Mooncake's batch_get_session_start,
// batch_get_into_multi_buffer_ranges, batch_get_session_end in store_py.cpp / real_client.cpp,
// kvcache-ai/Mooncake 3b5a59413). Mooncake caches each object's replica and lease at the start
// and transfers every range from the replica while the lease lasts (LEASE_EXPIRED after it).
// tierkv reads the whole object once at the start instead — the checksum covers the whole
// object, so a range read straight from a replica could not be checked — and serves the ranges
// from the local buffer: no master call, no lease to run out, never a byte that was not checked.
#include <cstring>

#include "connector/distributed_store_internal.h"

namespace tierkv {

using dstore::Code;

std::vector<int> DistributedStore::BatchGetSessionStart(const std::vector<std::string>& keys) {
  std::vector<int> out(keys.size(), 0);
  if (keys.empty()) return out;
  auto objects = BatchGetBuffer(keys);
  std::lock_guard lock(session_mu_);
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i >= objects.size() || !objects[i].ok()) {
      out[i] = i < objects.size() ? Code(objects[i].code()) : Code(ErrorCode::INVALID_PARAMS);
      sessions_.erase(keys[i]);
      continue;
    }
    sessions_[keys[i]] = std::move(objects[i]).value();
  }
  return out;
}

std::vector<int64_t> DistributedStore::BatchGetIntoMultiBufferRanges(
    const std::vector<std::string>& keys, const std::vector<std::vector<uintptr_t>>& ptrs,
    const std::vector<std::vector<uint64_t>>& sizes,
    const std::vector<std::vector<uint64_t>>& src_offsets) {
  std::vector<int64_t> out(keys.size(), Code(ErrorCode::INVALID_PARAMS));
  if (ptrs.size() != keys.size() || sizes.size() != keys.size() ||
      src_offsets.size() != keys.size()) {
    SetError("batch_get_into_multi_buffer_ranges: the four lists must have one entry per key");
    return out;
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    std::shared_ptr<const BufferHandle> object;
    {
      std::lock_guard lock(session_mu_);
      auto it = sessions_.find(keys[i]);
      if (it != sessions_.end()) object = it->second;
    }
    if (!object) {
      SetError("batch_get_into_multi_buffer_ranges: no session for " + keys[i] +
               " (batch_get_session_start first)");
      continue;
    }
    const size_t n = ptrs[i].size();
    if (sizes[i].size() != n || src_offsets[i].size() != n) continue;
    int64_t total = 0;
    bool ok = true;
    for (size_t j = 0; j < n && ok; ++j) {
      const uint64_t src = src_offsets[i][j], len = sizes[i][j];
      if (src > object->size() || len > object->size() - src) {
        SetError("batch_get_into_multi_buffer_ranges: " + keys[i] + " range [" +
                 std::to_string(src) + ", +" + std::to_string(len) + ") past its " +
                 std::to_string(object->size()) + " bytes");
        ok = false;
      } else if (len > 0 && !RegisteredRange(ptrs[i][j], len)) {
        out[i] = Code(ErrorCode::BUFFER_NOT_REGISTERED);
        SetError("batch_get_into_multi_buffer_ranges: " + keys[i] +
                 ": a destination is not in a registered buffer");
        ok = false;
      }
      total += static_cast<int64_t>(len);
    }
    if (!ok) continue;
    for (size_t j = 0; j < n; ++j) {
      if (sizes[i][j] == 0) continue;
      std::memcpy(reinterpret_cast<void*>(ptrs[i][j]), object->data() + src_offsets[i][j],
                  sizes[i][j]);
    }
    out[i] = total;
  }
  return out;
}

int DistributedStore::BatchGetSessionEnd(const std::vector<std::string>& keys) {
  std::lock_guard lock(session_mu_);
  for (const auto& key : keys) sessions_.erase(key);
  return 0;
}

}  // namespace tierkv
