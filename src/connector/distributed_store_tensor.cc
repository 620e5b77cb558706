// DistributedStore: tensor objects — a header then the payload (docs/python.md,
// "Tensor objects"; include/tierkv/distributed_store.h).
#include <spdlog/spdlog.h>

#include <cstring>
#include <functional>

#include "connector/distributed_store_internal.h"

namespace tierkv {

using dstore::Code;
using dstore::kOk;

// ---- tensors ------------------------------------------------------------------------------

namespace {

Status CheckTensor(const TensorView& t) {
  if (TensorElementSize(t.info.dtype) == 0) {
    return Status(ErrorCode::INVALID_PARAMS,
                  "unsupported tensor dtype code " + std::to_string(t.info.dtype));
  }
  if (t.info.shape.size() > kMaxTensorDims) {
    return Status(ErrorCode::INVALID_PARAMS, "tensors of more than 8 dimensions are not stored");
  }
  const uint64_t payload = TensorPayloadBytes(t.info);
  if (payload != t.nbytes || (payload > 0 && t.data == nullptr)) {
    return Status(ErrorCode::INVALID_PARAMS, "tensor data of " + std::to_string(t.nbytes) +
                                                 " bytes for a shape of " +
                                                 std::to_string(payload) + " bytes");
  }
  return Status::Ok();
}

// Stages tensor objects (header + payload pieces) and puts them in one batch.
std::vector<int> PutTensorObjects(Client& client, LocalBuffer& local,
                                  const std::vector<std::string>& keys,
                                  const std::vector<TensorInfo>& infos,
                                  const std::vector<std::vector<std::span<const uint8_t>>>& pieces,
                                  const ReplicateConfig& config, bool upsert) {
  std::vector<int> codes(keys.size(), kOk);
  dstore::Staged staged;
  for (size_t i = 0; i < keys.size(); ++i) {
    const uint64_t payload = TensorPayloadBytes(infos[i]);
    auto span = local.Allocate(kTensorHeaderBytes + payload);
    if (!span.ok()) {
      spdlog::warn("tensor put of {}: {}", keys[i], span.status().message());
      codes[i] = Code(span.code());
      continue;
    }
    if (Status st = EncodeTensorHeader(infos[i], span->ptr); !st.ok()) {
      codes[i] = Code(st.code());
      continue;
    }
    uint8_t* at = span->ptr + kTensorHeaderBytes;
    for (const auto& p : pieces[i]) {
      if (!p.empty()) std::memcpy(at, p.data(), p.size());
      at += p.size();
    }
    staged.index.push_back(i);
    staged.keys.push_back(keys[i]);
    staged.ptrs.push_back({span->ptr});
    staged.sizes.push_back({static_cast<size_t>(kTensorHeaderBytes + payload)});
    staged.spans.push_back(std::move(*span));
  }
  dstore::PutStaged(client, staged, config, upsert, codes);
  return codes;
}

Result<StoredTensor> ToStoredTensor(Result<std::shared_ptr<const BufferHandle>> bytes) {
  if (!bytes.ok()) return bytes.status();
  auto info = DecodeTensorHeader((*bytes)->data(), (*bytes)->size());
  if (!info.ok()) return info.status();
  StoredTensor t;
  t.info = std::move(*info);
  t.payload_offset = kTensorHeaderBytes;
  t.payload_bytes = (*bytes)->size() - kTensorHeaderBytes;
  t.bytes = std::move(*bytes);
  return t;
}

}  // namespace

std::vector<int> DistributedStore::BatchPutTensor(const std::vector<std::string>& keys,
                                                  const std::vector<TensorView>& tensors,
                                                  const StoreReplicateConfig& config) {
  return BatchPutTensorImpl(keys, tensors, config, /*upsert=*/false);
}

std::vector<int> DistributedStore::BatchUpsertTensor(const std::vector<std::string>& keys,
                                                     const std::vector<TensorView>& tensors,
                                                     const StoreReplicateConfig& config) {
  return BatchPutTensorImpl(keys, tensors, config, /*upsert=*/true);
}

std::vector<int> DistributedStore::BatchPutTensorImpl(const std::vector<std::string>& keys,
                                                      const std::vector<TensorView>& tensors,
                                                      const StoreReplicateConfig& config,
                                                      bool upsert) {
  TIERKV_REQUIRE_CLIENT("put_tensor",
                        std::vector<int>(keys.size(), Code(ErrorCode::INVALID_PARAMS)));
  if (keys.size() != tensors.size()) {
    SetError("batch_put_tensor: " + std::to_string(keys.size()) + " keys but " +
             std::to_string(tensors.size()) + " tensors");
    return std::vector<int>(keys.size(), Code(ErrorCode::INVALID_PARAMS));
  }
  auto core = dstore::ToCore(config, keys.size(), *client_, hostname_);
  if (!core.ok()) {
    SetError("put_tensor: " + core.status().message());
    return std::vector<int>(keys.size(), Code(core.code()));
  }
  std::vector<int> codes(keys.size(), kOk);
  std::vector<size_t> keep;
  std::vector<std::string> ok_keys;
  std::vector<TensorInfo> infos;
  std::vector<std::vector<std::span<const uint8_t>>> pieces;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (Status st = CheckTensor(tensors[i]); !st.ok()) {
      spdlog::warn("put_tensor {}: {}", keys[i], st.message());
      codes[i] = Code(st.code());
      continue;
    }
    keep.push_back(i);
    ok_keys.push_back(keys[i]);
    infos.push_back(tensors[i].info);
    pieces.push_back({std::span(static_cast<const uint8_t*>(tensors[i].data), tensors[i].nbytes)});
  }
  const auto done = PutTensorObjects(*client_, *local_, ok_keys, infos, pieces,
                                     dstore::Subset(*core, keep), upsert);
  for (size_t j = 0; j < keep.size(); ++j) codes[keep[j]] = done[j];
  return codes;
}

int DistributedStore::PutTensor(const std::string& key, const TensorView& tensor,
                                const StoreReplicateConfig& config) {
  return BatchPutTensor({key}, {tensor}, config)[0];
}

int DistributedStore::UpsertTensor(const std::string& key, const TensorView& tensor,
                                   const StoreReplicateConfig& config) {
  return BatchUpsertTensor({key}, {tensor}, config)[0];
}

Result<StoredTensor> DistributedStore::GetTensor(const std::string& key) {
  return std::move(BatchGetTensor({key})[0]);
}

std::vector<Result<StoredTensor>> DistributedStore::BatchGetTensor(
    const std::vector<std::string>& keys) {
  std::vector<Result<StoredTensor>> out;
  for (auto& bytes : BatchGetBuffer(keys)) out.push_back(ToStoredTensor(std::move(bytes)));
  return out;
}

Result<TensorInfo> DistributedStore::GetTensorInto(const std::string& key, uintptr_t ptr,
                                                   uint64_t capacity) {
  return std::move(BatchGetTensorInto({key}, {ptr}, {capacity})[0]);
}

std::vector<Result<TensorInfo>> DistributedStore::BatchGetTensorInto(
    const std::vector<std::string>& keys, const std::vector<uintptr_t>& ptrs,
    const std::vector<uint64_t>& capacities) {
  const std::vector<int64_t> got = BatchGetInto(keys, ptrs, capacities);
  std::vector<Result<TensorInfo>> out;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (got[i] < 0) {
      out.emplace_back(static_cast<ErrorCode>(got[i]), "reading tensor " + keys[i]);
      continue;
    }
    out.push_back(
        DecodeTensorHeader(reinterpret_cast<const void*>(ptrs[i]), static_cast<size_t>(got[i])));
  }
  return out;
}

int64_t DistributedStore::GetTensorIntoTensor(const std::string& key, const TensorInfo& dst_info,
                                              uintptr_t dst, uint64_t dst_bytes) {
  auto t = GetTensor(key);
  if (!t.ok()) return Code(t.code());
  if (t->info.dtype != dst_info.dtype || t->info.shape != dst_info.shape ||
      t->payload_bytes != dst_bytes) {
    SetError("get_tensor_into " + key +
             ": the destination's dtype or shape differs from the "
             "stored tensor's (nothing written)");
    return Code(ErrorCode::INVALID_PARAMS);
  }
  if (dst_bytes > 0) {
    std::memcpy(reinterpret_cast<void*>(dst), t->bytes->data() + t->payload_offset, dst_bytes);
  }
  return static_cast<int64_t>(dst_bytes);
}

namespace {
// put_tensor_from and upsert_tensor_from: a laid-out tensor object in registered memory.
template <typename Write>
int WriteTensorFrom(const char* call, const std::string& key, uintptr_t ptr, uint64_t size,
                    bool registered, const std::function<void(const std::string&)>& error,
                    Write&& write) {
  if (!registered) {
    error(std::string(call) + " " + key + ": [ptr, ptr+size) is not in a registered buffer");
    return Code(ErrorCode::BUFFER_NOT_REGISTERED);
  }
  if (auto info = DecodeTensorHeader(reinterpret_cast<const void*>(ptr), size); !info.ok()) {
    error(std::string(call) + " " + key + ": " + info.status().message());
    return Code(info.code());
  }
  return write();
}
}  // namespace

int DistributedStore::PutTensorFrom(const std::string& key, uintptr_t ptr, uint64_t size,
                                    const StoreReplicateConfig& config) {
  return WriteTensorFrom(
      "put_tensor_from", key, ptr, size, RegisteredRange(ptr, size).has_value(),
      [this](const std::string& m) { SetError(m); },
      [&] { return PutFrom(key, ptr, size, config); });
}

int DistributedStore::UpsertTensorFrom(const std::string& key, uintptr_t ptr, uint64_t size,
                                       const StoreReplicateConfig& config) {
  return WriteTensorFrom(
      "upsert_tensor_from", key, ptr, size, RegisteredRange(ptr, size).has_value(),
      [this](const std::string& m) { SetError(m); },
      [&] { return UpsertFrom(key, ptr, size, config); });
}

std::string DistributedStore::TpKey(const std::string& key, int tp_rank, int tp_size) {
  return tp_size > 1 ? key + "_tp_" + std::to_string(tp_rank) : key;
}

int DistributedStore::PutTensorWithTp(const std::string& key, const TensorView& tensor, int tp_size,
                                      int split_dim, const StoreReplicateConfig& config) {
  if (tp_size <= 1) return PutTensor(key, tensor, config);
  TIERKV_REQUIRE_CLIENT("put_tensor_with_tp", Code(ErrorCode::INVALID_PARAMS));
  auto fail = [&](const std::string& why) {
    SetError("put_tensor_with_tp " + key + ": " + why);
    return Code(ErrorCode::INVALID_PARAMS);
  };
  if (Status st = CheckTensor(tensor); !st.ok()) return fail(st.message());
  const int ndim = static_cast<int>(tensor.info.shape.size());
  const int dim = split_dim < 0 ? split_dim + ndim : split_dim;
  if (dim < 0 || dim >= ndim)
    return fail("split_dim " + std::to_string(split_dim) + " out of range");
  const int64_t extent = tensor.info.shape[dim];
  if (extent % tp_size != 0) {
    return fail("dimension " + std::to_string(dim) + " of size " + std::to_string(extent) +
                " does not split into " + std::to_string(tp_size) + " equal shards");
  }
  auto core = dstore::ToCore(config, static_cast<size_t>(tp_size), *client_, hostname_);
  if (!core.ok()) return fail(core.status().message());
  // Shard r along `dim` of a C-order tensor: for each of the `outer` leading index tuples, one
  // contiguous run of chunk x inner elements.
  uint64_t outer = 1, inner = TensorElementSize(tensor.info.dtype);
  for (int d = 0; d < dim; ++d) outer *= static_cast<uint64_t>(tensor.info.shape[d]);
  for (int d = dim + 1; d < ndim; ++d) inner *= static_cast<uint64_t>(tensor.info.shape[d]);
  const uint64_t chunk = static_cast<uint64_t>(extent / tp_size);
  const auto* base = static_cast<const uint8_t*>(tensor.data);
  std::vector<std::string> keys;
  std::vector<TensorInfo> infos;
  std::vector<std::vector<std::span<const uint8_t>>> pieces;
  for (int r = 0; r < tp_size; ++r) {
    keys.push_back(TpKey(key, r, tp_size));
    TensorInfo info = tensor.info;
    info.shape[dim] = static_cast<int64_t>(chunk);
    infos.push_back(std::move(info));
    auto& p = pieces.emplace_back();
    for (uint64_t o = 0; o < outer; ++o) {
      const uint64_t offset = (o * static_cast<uint64_t>(extent) + r * chunk) * inner;
      p.emplace_back(base + offset, chunk * inner);
    }
  }
  return dstore::FirstFailure(
      PutTensorObjects(*client_, *local_, keys, infos, pieces, *core, false));
}

}  // namespace tierkv
