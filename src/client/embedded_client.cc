#include "client/embedded_client.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <unordered_set>

#include "common/key.h"

namespace tierkv {
namespace {

MasterOptions MasterOptionsFrom(const Config& c) {
  MasterOptions o;
  o.lease_ttl = Millis(c.default_kv_lease_ttl_ms);
  o.high_watermark = c.eviction_high_watermark_ratio;
  o.eviction_ratio = c.eviction_ratio;
  o.put_timeout = Millis(c.put_start_discard_timeout_ms);
  o.shards = c.metadata_shards;
  return o;
}

std::string SegmentName(const Config& c) {
  static std::atomic<int> counter{0};
  std::string host = c.local_hostname;
  if (host.empty()) {
    char buf[256] = {};
    host = gethostname(buf, sizeof(buf) - 1) == 0 ? buf : "localhost";
  }
  return host + ":" + std::to_string(getpid()) + ":" + std::to_string(counter++);
}

template <typename Piece>
uint64_t TotalSize(const std::vector<Piece>& pieces, bool& overflow) {
  uint64_t total = 0;
  overflow = false;
  for (const auto& p : pieces) {
    if (total + p.size < total) overflow = true;
    total += p.size;
  }
  return total;
}

// Pairs ptrs[i][k] with sizes[i][k]. A key whose lists are missing or differ in
// length gets INVALID_PARAMS in `shape` (and no pieces).
template <typename Piece, typename Ptr>
std::vector<std::vector<Piece>> ToPieces(size_t n, const std::vector<std::vector<Ptr>>& ptrs,
                                         const std::vector<std::vector<size_t>>& sizes,
                                         std::vector<int>& shape) {
  std::vector<std::vector<Piece>> pieces(n);
  shape.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    if (i >= ptrs.size() || i >= sizes.size() || ptrs[i].size() != sizes[i].size()) {
      shape[i] = ToInt(ErrorCode::INVALID_PARAMS);
      continue;
    }
    for (size_t k = 0; k < ptrs[i].size(); ++k) pieces[i].push_back(Piece{ptrs[i][k], sizes[i][k]});
  }
  return pieces;
}

}  // namespace

Result<std::unique_ptr<EmbeddedClient>> EmbeddedClient::Create(
    const Config& config, std::shared_ptr<InProcessMaster> master) {
  if (Status st = ValidateConfig(config); !st.ok()) return st;
  if (config.mode != Mode::kEmbedded) {
    return Status(ErrorCode::UNAVAILABLE_IN_CURRENT_MODE, "EmbeddedClient needs mode 'embedded'");
  }
  if (!master) {
    // Maintenance every 1/4 of the shorter timeout, at least every second.
    const auto period = Millis(std::clamp<uint64_t>(
        std::min(config.put_start_discard_timeout_ms, config.default_kv_lease_ttl_ms) / 4, 10,
        1000));
    master = std::make_shared<InProcessMaster>(MasterOptionsFrom(config), period);
  }
  std::unique_ptr<EmbeddedClient> client(new EmbeddedClient(config, master));
  auto segment = MemorySegment::Create(
      SegmentName(config), config.global_segment_size,
      config.use_huge_pages ? PagePolicy::kHugeIfAvailable : PagePolicy::kSmallPages);
  if (!segment.ok()) return segment.status();
  client->segment_ = std::move(segment).value();
  auto id = master->Attach(client->segment_);
  if (!id.ok()) return id.status();
  client->segment_id_ = *id;
  spdlog::info("embedded client: segment {} of {} bytes ({} pages), {} transfer threads",
               client->segment_->name(), client->segment_->size(), client->segment_->page_kind(),
               client->pool_.threads());
  return client;
}

EmbeddedClient::EmbeddedClient(Config config, std::shared_ptr<InProcessMaster> master)
    : config_(std::move(config)),
      master_(std::move(master)),
      pool_(DefaultTransferThreads(config_.transfer_threads)) {}

EmbeddedClient::~EmbeddedClient() {
  if (segment_id_ != 0) {
    if (Status st = master_->Detach(segment_id_); !st.ok()) {
      spdlog::warn("unmounting segment {}: {}", segment_id_, st.ToString());
    }
  }
}

Status EmbeddedClient::RegisterBuffer(void* ptr, size_t size) {
  return buffers_.Register(ptr, size);
}
Status EmbeddedClient::UnregisterBuffer(void* ptr) { return buffers_.Unregister(ptr); }

template <typename Piece>
std::vector<int> EmbeddedClient::CheckBatch(const std::vector<std::string>& keys,
                                            const std::vector<std::vector<Piece>>& pieces,
                                            bool check_registered) const {
  std::vector<int> codes(keys.size(), 0);
  std::unordered_set<std::string_view> seen;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (Status st = ValidateKey(keys[i]); !st.ok()) {
      codes[i] = ToInt(st.code());
      continue;
    }
    if (!seen.insert(keys[i]).second) {
      codes[i] = ToInt(ErrorCode::DUPLICATE_KEY);
      continue;
    }
    bool overflow = false;
    if (pieces[i].empty() || TotalSize(pieces[i], overflow) == 0 || overflow) {
      codes[i] = ToInt(ErrorCode::INVALID_PARAMS);
      continue;
    }
    for (const auto& p : pieces[i]) {
      if (p.size > 0 && p.ptr == nullptr) {
        codes[i] = ToInt(ErrorCode::INVALID_PARAMS);
        break;
      }
      if (check_registered && p.size > 0 && !buffers_.Contains(p.ptr, p.size)) {
        codes[i] = ToInt(ErrorCode::BUFFER_NOT_REGISTERED);
        break;
      }
    }
  }
  return codes;
}

std::vector<int> EmbeddedClient::PutImpl(const std::vector<std::string>& keys,
                                         const std::vector<std::vector<ConstPiece>>& pieces,
                                         const ReplicateConfig& config, bool check_registered) {
  const size_t n = keys.size();
  if (!config.group_ids.empty() && config.group_ids.size() != n) {
    spdlog::warn("put: group_ids has {} entries for {} keys", config.group_ids.size(), n);
    return std::vector<int>(n, ToInt(ErrorCode::INVALID_PARAMS));
  }
  std::vector<int> codes = CheckBatch(keys, pieces, check_registered);
  // The keys that passed the client-side checks go to the master.
  std::vector<size_t> idx;
  std::vector<std::string> sub_keys;
  std::vector<uint64_t> sub_sizes;
  ReplicateConfig sub_config = config;
  sub_config.group_ids.clear();
  for (size_t i = 0; i < n; ++i) {
    if (codes[i] != 0) continue;
    bool overflow = false;
    idx.push_back(i);
    sub_keys.push_back(keys[i]);
    sub_sizes.push_back(TotalSize(pieces[i], overflow));
    if (!config.group_ids.empty()) sub_config.group_ids.push_back(config.group_ids[i]);
  }
  if (sub_keys.empty()) return codes;
  auto started = master_->master().PutStart(sub_keys, sub_sizes, sub_config);

  std::vector<uint64_t> checksums(sub_keys.size(), 0);
  std::vector<int> copy_codes(sub_keys.size(), 0);
  pool_.ParallelFor(sub_keys.size(), [&](size_t j) {
    if (!started[j].ok()) return;
    const auto& replicas = started[j]->replicas;
    for (size_t r = 0; r < replicas.size(); ++r) {
      auto seg = master_->Find(replicas[r].segment);
      if (!seg || replicas[r].offset + replicas[r].size > seg->size()) {
        copy_codes[j] = ToInt(ErrorCode::TRANSFER_FAIL);
        return;
      }
      // The checksum is taken from the user's bytes while writing the first replica.
      const uint64_t sum = GatherCopy(seg->base() + replicas[r].offset, pieces[idx[j]], r == 0);
      if (r == 0) checksums[j] = sum;
    }
  });

  std::vector<std::string> end_keys, revoke_keys;
  std::vector<uint64_t> end_ids, end_sums, revoke_ids;
  std::vector<size_t> end_pos;
  for (size_t j = 0; j < sub_keys.size(); ++j) {
    const size_t i = idx[j];
    if (!started[j].ok()) {
      codes[i] = ToInt(started[j].code());
      if (started[j].code() != ErrorCode::OBJECT_ALREADY_EXISTS) {
        spdlog::debug("put {}: {}", keys[i], started[j].status().ToString());
      }
    } else if (copy_codes[j] != 0) {
      codes[i] = copy_codes[j];
      revoke_keys.push_back(sub_keys[j]);
      revoke_ids.push_back(started[j]->put_id);
    } else {
      end_keys.push_back(sub_keys[j]);
      end_ids.push_back(started[j]->put_id);
      end_sums.push_back(checksums[j]);
      end_pos.push_back(i);
    }
  }
  if (!revoke_keys.empty()) master_->master().PutRevoke(revoke_keys, revoke_ids);
  if (!end_keys.empty()) {
    auto ended = master_->master().PutEnd(end_keys, end_ids, end_sums);
    for (size_t k = 0; k < ended.size(); ++k) codes[end_pos[k]] = ToInt(ended[k].code());
  }
  return codes;
}

std::vector<int64_t> EmbeddedClient::GetImpl(const std::vector<std::string>& keys,
                                             const std::vector<std::vector<MutPiece>>& pieces,
                                             bool check_registered, bool exact) {
  const size_t n = keys.size();
  const std::vector<int> checked = CheckBatch(keys, pieces, check_registered);
  std::vector<int64_t> results(checked.begin(), checked.end());
  std::vector<size_t> idx;
  std::vector<std::string> sub_keys;
  for (size_t i = 0; i < n; ++i) {
    if (results[i] != 0) continue;
    idx.push_back(i);
    sub_keys.push_back(keys[i]);
  }
  if (sub_keys.empty()) return results;
  auto replicas = master_->master().GetReplicas(sub_keys);
  const Clock* clock = master_->master().options().clock;
  const bool verify = config_.verify_checksum;

  pool_.ParallelFor(sub_keys.size(), [&](size_t j) {
    const size_t i = idx[j];
    if (!replicas[j].ok()) {
      results[i] = ToInt(replicas[j].code());
      return;
    }
    const ObjectReplicas& obj = *replicas[j];
    bool overflow = false;
    const uint64_t capacity = TotalSize(pieces[i], overflow);
    if (capacity < obj.size) {
      results[i] = ToInt(ErrorCode::BUFFER_OVERFLOW);
      return;
    }
    if (exact && capacity != obj.size) {
      results[i] = ToInt(ErrorCode::INVALID_PARAMS);
      return;
    }
    // Fill exactly obj.size bytes: trim the destination pieces to the object.
    std::vector<MutPiece> dst;
    uint64_t left = obj.size;
    for (const auto& p : pieces[i]) {
      if (left == 0) break;
      dst.push_back(MutPiece{p.ptr, std::min<uint64_t>(p.size, left)});
      left -= dst.back().size;
    }
    int64_t code = ToInt(ErrorCode::TRANSFER_FAIL);
    for (const auto& rep : obj.replicas) {
      auto seg = master_->Find(rep.segment);  // keeps the memory mapped while copying
      if (rep.tier != ReplicaTier::kMemory || !seg || rep.offset + obj.size > seg->size()) continue;
      const uint64_t sum = ScatterCopy(seg->base() + rep.offset, dst, verify);
      if (verify && sum != obj.checksum) {
        spdlog::error("checksum mismatch reading {} from segment {} at offset {}", keys[i],
                      seg->name(), rep.offset);
        code = ToInt(ErrorCode::CHECKSUM_MISMATCH);
        continue;  // another replica may be intact
      }
      code = static_cast<int64_t>(obj.size);
      break;
    }
    if (code >= 0 && clock->Now() > obj.lease_deadline) {
      // The lease ran out mid-copy: the space may have been reused; discard.
      code = ToInt(ErrorCode::LEASE_EXPIRED);
    }
    if (code < 0) {
      for (const auto& p : dst) std::memset(p.ptr, 0, p.size);  // never leave wrong bytes
    }
    results[i] = code;
  });
  return results;
}

int EmbeddedClient::Put(const std::string& key, const void* data, size_t size,
                        const ReplicateConfig& config) {
  return PutImpl({key}, {{ConstPiece{data, size}}}, config, /*check_registered=*/false)[0];
}

int64_t EmbeddedClient::Get(const std::string& key, void* buf, size_t capacity) {
  return GetImpl({key}, {{MutPiece{buf, capacity}}}, /*check_registered=*/false,
                 /*exact=*/false)[0];
}

std::vector<int> EmbeddedClient::BatchPutFromMultiBuffers(
    const std::vector<std::string>& keys, const std::vector<std::vector<void*>>& ptrs,
    const std::vector<std::vector<size_t>>& sizes, const ReplicateConfig& config) {
  const size_t n = keys.size();
  std::vector<int> shape;
  const auto pieces = ToPieces<ConstPiece>(n, ptrs, sizes, shape);
  auto codes = PutImpl(keys, pieces, config, config_.require_registered_buffers);
  for (size_t i = 0; i < n; ++i) {
    if (shape[i] != 0) codes[i] = shape[i];
  }
  return codes;
}

std::vector<int64_t> EmbeddedClient::BatchGetIntoMultiBuffers(
    const std::vector<std::string>& keys, const std::vector<std::vector<void*>>& ptrs,
    const std::vector<std::vector<size_t>>& sizes) {
  const size_t n = keys.size();
  std::vector<int> shape;
  const auto pieces = ToPieces<MutPiece>(n, ptrs, sizes, shape);
  auto results = GetImpl(keys, pieces, config_.require_registered_buffers, /*exact=*/true);
  for (size_t i = 0; i < n; ++i) {
    if (shape[i] != 0) results[i] = shape[i];
  }
  return results;
}

std::vector<int> EmbeddedClient::BatchIsExist(const std::vector<std::string>& keys) {
  return master_->master().Exists(keys);
}

std::vector<Result<std::vector<ReplicaDesc>>> EmbeddedClient::BatchGetReplicaDesc(
    const std::vector<std::string>& keys) {
  auto replicas = master_->master().GetReplicas(keys);
  std::vector<Result<std::vector<ReplicaDesc>>> out;
  out.reserve(keys.size());
  for (auto& r : replicas) {
    if (!r.ok()) {
      out.emplace_back(r.status());
      continue;
    }
    std::vector<ReplicaDesc> descs;
    for (const auto& loc : r->replicas) {
      auto seg = master_->master().segments().Find(loc.segment);
      descs.push_back(
          ReplicaDesc{loc.tier, seg ? seg->name : std::string("<unmounted>"), loc.offset, r->size});
    }
    out.emplace_back(std::move(descs));
  }
  return out;
}

int EmbeddedClient::Remove(const std::string& key, bool force) {
  return ToInt(master_->master().Remove(key, force).code());
}

int64_t EmbeddedClient::RemoveAll(bool force) {
  return static_cast<int64_t>(master_->master().RemoveAll(force));
}

}  // namespace tierkv
