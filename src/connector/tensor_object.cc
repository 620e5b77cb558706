// The tensor object format (include/tierkv/distributed_store.h, docs/python.md "Tensor
// objects"): a fixed 128-byte little-endian header, then the C-order payload.
//
//   0  u32 magic "TKVT"     4  u16 version (1)    6  u16 header bytes (128)
//   8  i32 dtype (Mooncake's TensorDtype numbering)  12 u32 ndim (<= 8)
//   16 u64 payload bytes    24 i64 shape[8] (unused dims 0)   88..127 zero
#include <cstring>
#include <string>

#include "tierkv/distributed_store.h"

namespace tierkv {
namespace {

constexpr uint32_t kMagic = 0x54564b54;  // "TKVT" little-endian
constexpr uint16_t kVersion = 1;

template <typename T>
void Store(uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof(T));  // x86-64 and aarch64 Linux are little-endian
}
template <typename T>
T Load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

Status Bad(const std::string& why) { return Status(ErrorCode::INVALID_PARAMS, why); }

}  // namespace

size_t TensorElementSize(int32_t dtype) {
  // FLOAT32 FLOAT64 INT8 UINT8 INT16 UINT16 INT32 UINT32 INT64 UINT64 BOOL FLOAT16 BFLOAT16
  // FLOAT8_E4M3 FLOAT8_E5M2
  static constexpr size_t kSizes[] = {4, 8, 1, 1, 2, 2, 4, 4, 8, 8, 1, 2, 2, 1, 1};
  if (dtype < 0 || static_cast<size_t>(dtype) >= sizeof(kSizes) / sizeof(kSizes[0])) return 0;
  return kSizes[dtype];
}

uint64_t TensorPayloadBytes(const TensorInfo& info) {
  constexpr uint64_t kBad = UINT64_MAX;  // never the size of a real payload
  const size_t elem = TensorElementSize(info.dtype);
  if (elem == 0) return kBad;
  uint64_t total = elem;
  for (int64_t d : info.shape) {
    if (d < 0 || __builtin_mul_overflow(total, static_cast<uint64_t>(d), &total)) return kBad;
  }
  return total;
}

Status EncodeTensorHeader(const TensorInfo& info, void* out) {
  if (TensorElementSize(info.dtype) == 0) {
    return Bad("unknown tensor dtype code " + std::to_string(info.dtype));
  }
  if (info.shape.size() > kMaxTensorDims) {
    return Bad("a tensor object holds at most " + std::to_string(kMaxTensorDims) +
               " dimensions, got " + std::to_string(info.shape.size()));
  }
  for (int64_t d : info.shape) {
    if (d < 0) return Bad("negative tensor dimension " + std::to_string(d));
  }
  if (TensorPayloadBytes(info) == UINT64_MAX) return Bad("tensor shape overflows 64 bits");
  auto* p = static_cast<uint8_t*>(out);
  std::memset(p, 0, kTensorHeaderBytes);
  Store<uint32_t>(p, kMagic);
  Store<uint16_t>(p + 4, kVersion);
  Store<uint16_t>(p + 6, static_cast<uint16_t>(kTensorHeaderBytes));
  Store<int32_t>(p + 8, info.dtype);
  Store<uint32_t>(p + 12, static_cast<uint32_t>(info.shape.size()));
  Store<uint64_t>(p + 16, TensorPayloadBytes(info));
  for (size_t i = 0; i < info.shape.size(); ++i) Store<int64_t>(p + 24 + 8 * i, info.shape[i]);
  return Status::Ok();
}

Result<TensorInfo> DecodeTensorHeader(const void* data, size_t size) {
  if (size < kTensorHeaderBytes) {
    return Bad("not a tensor object: " + std::to_string(size) + " bytes, less than its header");
  }
  const auto* p = static_cast<const uint8_t*>(data);
  if (Load<uint32_t>(p) != kMagic) return Bad("not a tensor object (bad magic)");
  if (Load<uint16_t>(p + 4) != kVersion || Load<uint16_t>(p + 6) != kTensorHeaderBytes) {
    return Bad("tensor object of unknown version " + std::to_string(Load<uint16_t>(p + 4)));
  }
  TensorInfo info;
  info.dtype = Load<int32_t>(p + 8);
  const uint32_t ndim = Load<uint32_t>(p + 12);
  if (TensorElementSize(info.dtype) == 0 || ndim > kMaxTensorDims) {
    return Bad("tensor object with a bad dtype (" + std::to_string(info.dtype) + ") or ndim (" +
               std::to_string(ndim) + ")");
  }
  for (uint32_t i = 0; i < ndim; ++i) {
    const int64_t d = Load<int64_t>(p + 24 + 8 * i);
    if (d < 0) return Bad("tensor object with a negative dimension");
    info.shape.push_back(d);
  }
  const uint64_t payload = Load<uint64_t>(p + 16);
  if (payload != TensorPayloadBytes(info) || size - kTensorHeaderBytes != payload) {
    return Bad("tensor object of " + std::to_string(size) + " bytes does not match its header (" +
               std::to_string(payload) + " payload bytes)");
  }
  return info;
}

}  // namespace tierkv
