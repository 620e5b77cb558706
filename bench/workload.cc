#include "workload.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "tierkv/client.h"

namespace tierkv::bench {
namespace {

constexpr uint64_t kSegmentMargin = 64 * kMiB;  // on top of 2x the working set

// The untimed check of one batch op: every batch call returned one code per key, and `judge`
// finds every code right (it returns "" for a right code, else what is wrong with it).
template <typename Batch, typename Code, typename Judge>
FailureLog CheckCodes(const char* op, const std::vector<Batch>& batches,
                      const std::vector<std::vector<Code>>& codes, Judge judge) {
  FailureLog failures;
  for (size_t b = 0; b < batches.size(); ++b) {
    const Batch& batch = batches[b];
    if (codes[b].size() != batch.keys.size()) {
      failures.Add(std::string("batch ") + op + " returned " + std::to_string(codes[b].size()) +
                   " results for " + std::to_string(batch.keys.size()) + " keys");
      continue;
    }
    for (size_t k = 0; k < batch.keys.size(); ++k) {
      std::string wrong = judge(codes[b][k]);
      if (!wrong.empty()) failures.Add(op + std::string(" of ") + batch.keys[k] + wrong);
    }
  }
  return failures;
}

}  // namespace

size_t ObjectsFor(uint64_t working_set_bytes, uint64_t object_bytes) {
  return std::max<size_t>(1, working_set_bytes / object_bytes);
}

uint64_t LargestWorkingSet(uint64_t working_set_bytes, const std::vector<uint64_t>& object_sizes) {
  uint64_t largest = 0;
  for (uint64_t size : object_sizes) {
    largest = std::max<uint64_t>(largest, ObjectsFor(working_set_bytes, size) * size);
  }
  return largest;
}

uint64_t SegmentBytesFor(uint64_t working_set) { return 2 * working_set + kSegmentMargin; }

Status ValidateTransferOptions(const CommonOptions& common, uint64_t working_set_bytes,
                               const std::vector<uint64_t>& object_sizes, size_t batch,
                               size_t pieces) {
  auto bad = [](std::string m) { return Status(ErrorCode::INVALID_PARAMS, std::move(m)); };
  if (common.reps < 1) return bad("--reps must be >= 1");
  if (batch < 1) return bad("--batch must be >= 1");
  if (pieces < 1) return bad("--pieces must be >= 1");
  if (object_sizes.empty()) return bad("--sizes is empty");
  for (uint64_t size : object_sizes) {
    if (size < pieces || size < 2 * kSpotBytes) {
      return bad("object size " + std::to_string(size) + " is too small (minimum " +
                 std::to_string(std::max<uint64_t>(pieces, 2 * kSpotBytes)) + " bytes)");
    }
    if (size > (uint64_t{1} << 31) - 1) {
      return bad("object size " + FormatBytes(size) + " is above 2 GiB - 1");
    }
  }
  if (working_set_bytes == 0) return bad("--working-set must be > 0");
  return Status::Ok();
}

Status ClientRep(Client& client, TransferWorkload& workload, int rep, std::vector<double>* put,
                 std::vector<double>* get) {
  Result<double> put_seconds = workload.Put(client);
  if (!put_seconds.ok()) return put_seconds.status();
  Result<double> get_seconds = workload.Get(client, rep);
  if (!get_seconds.ok()) return get_seconds.status();
  put->push_back(Gbps(workload.total_bytes(), *put_seconds));
  get->push_back(Gbps(workload.total_bytes(), *get_seconds));
  return workload.RemoveAll(client);
}

TransferWorkload::TransferWorkload(std::string name, uint64_t object_bytes, size_t objects,
                                   size_t batch, size_t pieces, const AlignedBuffer& src,
                                   const AlignedBuffer& dst)
    : name_(std::move(name)), object_bytes_(object_bytes), objects_(objects), src_(src), dst_(dst) {
  const std::vector<size_t> piece_sizes = PieceSizes(object_bytes, pieces);
  for (size_t i = 0; i < objects_; ++i) {
    keys_.push_back("bench-" + name_ + "@size:" + std::to_string(object_bytes) + "@" +
                    HexHash64(i));
  }
  for (size_t first = 0; first < objects_; first += batch) {
    Batch b;
    for (size_t i = first; i < std::min(objects_, first + batch); ++i) {
      b.keys.push_back(keys_[i]);
      b.objects.push_back(i);
      std::vector<void*> src_ptrs, dst_ptrs;
      size_t offset = i * object_bytes_;
      for (size_t piece : piece_sizes) {
        src_ptrs.push_back(src_.data() + offset);
        dst_ptrs.push_back(dst_.data() + offset);
        copies_.push_back({src_.data() + offset, dst_.data() + offset, piece});
        offset += piece;
      }
      b.src_ptrs.push_back(std::move(src_ptrs));
      b.dst_ptrs.push_back(std::move(dst_ptrs));
      b.piece_sizes.push_back(piece_sizes);
    }
    batches_.push_back(std::move(b));
  }
}

Result<double> TransferWorkload::Put(Client& client, const ReplicateConfig& config) {
  std::vector<std::vector<int>> codes(batches_.size());
  Stopwatch watch;
  for (size_t b = 0; b < batches_.size(); ++b) {
    const Batch& batch = batches_[b];
    codes[b] =
        client.BatchPutFromMultiBuffers(batch.keys, batch.src_ptrs, batch.piece_sizes, config);
  }
  const double seconds = watch.Seconds();
  const FailureLog failures = CheckCodes("put", batches_, codes, [](int code) {
    return code != 0 ? ": " + CodeString(code) : std::string();
  });
  if (!failures.empty())
    return failures.ToStatus(name_ + " " + FormatBytes(object_bytes_) + " put");
  return seconds;
}

Result<double> TransferWorkload::Get(Client& client, int rep) {
  Poison(rep);
  std::vector<std::vector<int64_t>> codes(batches_.size());
  Stopwatch watch;
  for (size_t b = 0; b < batches_.size(); ++b) {
    const Batch& batch = batches_[b];
    codes[b] = client.BatchGetIntoMultiBuffers(batch.keys, batch.dst_ptrs, batch.piece_sizes);
  }
  const double seconds = watch.Seconds();
  const FailureLog failures = CheckCodes("get", batches_, codes, [&](int64_t code) {
    if (code < 0) return ": " + CodeString(code);
    if (static_cast<uint64_t>(code) != object_bytes_) {
      return " returned " + std::to_string(code) + " bytes, expected " +
             std::to_string(object_bytes_);
    }
    return std::string();
  });
  const std::string context = name_ + " " + FormatBytes(object_bytes_) + " get";
  if (!failures.empty()) return failures.ToStatus(context);
  if (Status s = CheckBytes(rep, context); !s.ok()) return s;
  return seconds;
}

Result<double> TransferWorkload::Memcpy(int rep) {
  Poison(rep);
  const double seconds = TimedMemcpy(copies_);
  if (Status s = CheckBytes(rep, "memcpy baseline"); !s.ok()) return s;
  return seconds;
}

Status TransferWorkload::RemoveAll(Client& client) {
  const int64_t removed = client.RemoveAll(/*force=*/true);
  if (removed < 0) return Failed("RemoveAll failed: " + CodeString(removed));
  if (static_cast<uint64_t>(removed) != objects_) {
    return Failed("RemoveAll removed " + std::to_string(removed) + " objects, expected " +
                  std::to_string(objects_));
  }
  return Status::Ok();
}

size_t TransferWorkload::FullCheckObject(size_t b, int rep) const {
  const Batch& batch = batches_[b];
  return batch.objects[(b + static_cast<size_t>(rep)) % batch.objects.size()];
}

void TransferWorkload::Poison(int rep) {
  for (size_t i = 0; i < objects_; ++i) {
    std::memset(dst_object(i), kPoison, kSpotBytes);
    std::memset(dst_object(i) + object_bytes_ - kSpotBytes, kPoison, kSpotBytes);
  }
  for (size_t b = 0; b < batches_.size(); ++b) {
    std::memset(dst_object(FullCheckObject(b, rep)), kPoison, object_bytes_);
  }
}

Status TransferWorkload::CheckBytes(int rep, const std::string& what) const {
  FailureLog failures;
  auto differs = [&](size_t offset, size_t bytes) {
    return std::memcmp(dst_.data() + offset, src_.data() + offset, bytes) != 0;
  };
  for (size_t i = 0; i < objects_; ++i) {
    const size_t base = i * object_bytes_;
    if (differs(base, kSpotBytes)) failures.Add(keys_[i] + ": wrong bytes at its start");
    if (differs(base + object_bytes_ - kSpotBytes, kSpotBytes)) {
      failures.Add(keys_[i] + ": wrong bytes at its end");
    }
  }
  for (size_t b = 0; b < batches_.size(); ++b) {
    const size_t i = FullCheckObject(b, rep);
    const uint8_t* got = dst_object(i);
    const uint8_t* want = src_object(i);
    if (std::memcmp(got, want, object_bytes_) != 0) {
      size_t at = 0;
      while (at < object_bytes_ && got[at] == want[at]) ++at;
      failures.Add(keys_[i] + ": wrong byte at offset " + std::to_string(at));
    }
  }
  return failures.ToStatus(what);
}

}  // namespace tierkv::bench
