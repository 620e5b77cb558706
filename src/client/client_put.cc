// ClientImpl, the put path: checks, PutStart, copies into every replica (mapped segments by
// memcpy fused with the checksum, others through the backend's transport), then PutEnd, or
// PutRevoke for the keys whose copy failed.
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "client/batch_pieces.h"
#include "client/batch_segments.h"
#include "client/client_impl.h"

namespace tierkv {

void ClientImpl::WriteRemoteReplicas(const std::vector<std::vector<RemoteWrite>>& remote,
                                     std::vector<int>& codes,
                                     std::vector<std::vector<SegmentId>>& failed) {
  std::vector<RemoteWrite> ops;
  std::vector<size_t> owner;
  for (size_t j = 0; j < remote.size(); ++j) {
    if (codes[j] != 0) continue;
    for (const RemoteWrite& w : remote[j]) {
      ops.push_back(w);
      owner.push_back(j);
    }
  }
  if (ops.empty()) return;
  const std::vector<Status> done = backend_->WriteRemote(ops);
  for (size_t k = 0; k < ops.size(); ++k) {
    if (done[k].ok()) {
      uint64_t bytes = 0;
      for (const ConstPiece& p : ops[k].src) bytes += p.size;
      backend_->transfers().AddWritten(ops[k].segment->transport(), bytes);
    }
    if (!done[k].ok()) {
      if (codes[owner[k]] == 0) {
        spdlog::debug("put: replica on segment {} failed: {}", ops[k].segment->name(),
                      done[k].ToString());
        codes[owner[k]] = ToInt(ErrorCode::TRANSFER_FAIL);
      }
      failed[owner[k]].push_back(ops[k].id);
    }
  }
}

std::vector<Result<PutStartResult>> ClientImpl::StartReachable(const std::vector<std::string>& keys,
                                                               const std::vector<uint64_t>& sizes,
                                                               const ReplicateConfig& config,
                                                               bool upsert,
                                                               BatchSegments& segments) {
  auto start = [&](const std::vector<std::string>& k, const std::vector<uint64_t>& s,
                   const ReplicateConfig& c) {
    return upsert ? master_.UpsertStart(k, s, c) : master_.PutStart(k, s, c);
  };
  auto started = start(keys, sizes, config);
  ReplicateConfig retry = config;
  // Each round excludes at least one more segment; a few rounds cover any real pool (a
  // segment found unreachable stays so for the batch, and FindSegment caches it).
  for (int round = 0; round < 4; ++round) {
    std::vector<size_t> redo;
    for (size_t j = 0; j < keys.size(); ++j) {
      if (!started[j].ok()) continue;
      for (const ReplicaLocation& rep : started[j]->replicas) {
        if (segments.Find(rep.segment)) continue;
        auto& ex = retry.excluded_segments;
        if (std::find(ex.begin(), ex.end(), rep.segment) == ex.end()) ex.push_back(rep.segment);
        redo.push_back(j);
        break;
      }
    }
    if (redo.empty()) break;
    std::vector<std::string> redo_keys;
    std::vector<uint64_t> redo_sizes, redo_ids;
    ReplicateConfig redo_config = retry;
    redo_config.group_ids.clear();
    redo_config.parent_keys.clear();
    for (size_t j : redo) {
      redo_keys.push_back(keys[j]);
      redo_sizes.push_back(sizes[j]);
      redo_ids.push_back(started[j]->put_id);
      if (!config.group_ids.empty()) redo_config.group_ids.push_back(config.group_ids[j]);
      if (!config.parent_keys.empty()) redo_config.parent_keys.push_back(config.parent_keys[j]);
    }
    spdlog::debug(
        "put: {} key(s) placed on segments this client cannot reach; placing again "
        "without {} segment(s)",
        redo.size(), retry.excluded_segments.size());
    master_.PutRevoke(redo_keys, redo_ids);
    auto again = start(redo_keys, redo_sizes, redo_config);
    for (size_t r = 0; r < redo.size(); ++r) started[redo[r]] = std::move(again[r]);
  }
  // After the last round: the segments of placements not checked above.
  for (const auto& s : started) {
    if (!s.ok()) continue;
    for (const ReplicaLocation& rep : s->replicas) segments.Find(rep.segment);
  }
  return started;
}

std::vector<int> ClientImpl::PutImpl(const std::vector<std::string>& keys,
                                     const std::vector<std::vector<ConstPiece>>& pieces,
                                     const ReplicateConfig& config, bool check_registered,
                                     bool upsert, bool retried) {
  const size_t n = keys.size();
  if (!config.group_ids.empty() && config.group_ids.size() != n) {
    spdlog::warn("put: group_ids has {} entries for {} keys", config.group_ids.size(), n);
    return std::vector<int>(n, ToInt(ErrorCode::INVALID_PARAMS));
  }
  std::vector<int> codes = CheckBatch(keys, pieces, check_registered, buffers_);
  // The keys that passed the client-side checks go to the master.
  std::vector<size_t> idx;
  std::vector<std::string> sub_keys;
  std::vector<uint64_t> sub_sizes;
  ReplicateConfig sub_config = config;
  sub_config.group_ids.clear();
  if (sub_config.preferred_segment.empty())
    sub_config.preferred_segment = config_.preferred_segment;
  for (size_t i = 0; i < n; ++i) {
    if (codes[i] != 0) continue;
    bool overflow = false;
    idx.push_back(i);
    sub_keys.push_back(keys[i]);
    sub_sizes.push_back(TotalSize(pieces[i], overflow));
    if (!config.group_ids.empty()) sub_config.group_ids.push_back(config.group_ids[i]);
  }
  if (sub_keys.empty()) return codes;
  BatchSegments segments(*backend_);
  auto started = StartReachable(sub_keys, sub_sizes, sub_config, upsert, segments);

  std::vector<uint64_t> checksums(sub_keys.size(), 0);
  std::vector<int> copy_codes(sub_keys.size(), 0);
  // Replicas on segments not mapped here go through the backend's transport afterwards.
  std::vector<std::vector<RemoteWrite>> remote(sub_keys.size());
  pool_.ParallelFor(sub_keys.size(), [&](size_t j) {
    if (!started[j].ok()) return;
    const auto& replicas = started[j]->replicas;
    bool hashed = false;
    for (size_t r = 0; r < replicas.size(); ++r) {
      // No segment of an owner found dead; a mapped one's owner is asked again after the copies.
      const std::shared_ptr<SegmentAccess>& seg = segments.Found(replicas[r].segment);
      if (!seg || replicas[r].offset + replicas[r].size > seg->size()) {
        copy_codes[j] = ToInt(ErrorCode::TRANSFER_FAIL);
        return;
      }
      if (!seg->mapped()) {
        remote[j].push_back(
            RemoteWrite{seg, replicas[r].segment, replicas[r].offset, pieces[idx[j]]});
        continue;
      }
      // The checksum is taken from the user's bytes while writing the first mapped replica.
      const uint64_t sum = GatherCopy(seg->base() + replicas[r].offset, pieces[idx[j]], !hashed);
      if (!hashed) checksums[j] = sum;
      hashed = true;
    }
    if (!hashed) checksums[j] = HashPieces(pieces[idx[j]]);
  });
  // An owner that died before or during a copy into its mapped segment: that put is lost.
  for (size_t j = 0; j < sub_keys.size(); ++j) {
    if (!started[j].ok() || copy_codes[j] != 0) continue;
    for (const ReplicaLocation& rep : started[j]->replicas) {
      const SegmentAccess& seg = *segments.Found(rep.segment);
      if (!seg.mapped()) continue;
      if (!segments.AliveAfterCopies(rep.segment)) {
        copy_codes[j] = ToInt(ErrorCode::TRANSFER_FAIL);
        break;
      }
      backend_->transfers().AddWritten(seg.transport(), rep.size);
    }
  }
  std::vector<std::vector<SegmentId>> failed(sub_keys.size());
  WriteRemoteReplicas(remote, copy_codes, failed);

  std::vector<std::string> end_keys, revoke_keys;
  std::vector<uint64_t> end_ids, end_sums, revoke_ids;
  std::vector<size_t> end_pos;
  // A key whose write failed on a segment that accepted the placement (registered, maybe
  // reachable by others, not by this client now) is placed again, once, without the segments
  // that failed; the master avoids them for every client for a while (PutRevoke's report).
  std::vector<SegmentId> unreachable;
  std::vector<size_t> retry;
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
      for (SegmentId id : failed[j]) {
        if (std::find(unreachable.begin(), unreachable.end(), id) == unreachable.end()) {
          unreachable.push_back(id);
        }
      }
      if (!failed[j].empty() && !retried) retry.push_back(i);
    } else {
      end_keys.push_back(sub_keys[j]);
      end_ids.push_back(started[j]->put_id);
      end_sums.push_back(checksums[j]);
      end_pos.push_back(i);
    }
  }
  if (!revoke_keys.empty()) master_.PutRevoke(revoke_keys, revoke_ids, unreachable);
  if (!end_keys.empty()) {
    auto ended = master_.PutEnd(end_keys, end_ids, end_sums);
    for (size_t k = 0; k < ended.size(); ++k) codes[end_pos[k]] = ToInt(ended[k].code());
  }
  if (!retry.empty()) {
    spdlog::info("put: {} key(s) failed to reach segment(s) {}; placing them again elsewhere",
                 retry.size(), fmt::join(unreachable, ", "));
    std::vector<std::string> again_keys;
    std::vector<std::vector<ConstPiece>> again_pieces;
    ReplicateConfig again = config;
    again.group_ids.clear();
    again.parent_keys.clear();
    for (SegmentId id : unreachable) again.excluded_segments.push_back(id);
    for (size_t i : retry) {
      again_keys.push_back(keys[i]);
      again_pieces.push_back(pieces[i]);
      if (!config.group_ids.empty()) again.group_ids.push_back(config.group_ids[i]);
      if (!config.parent_keys.empty()) again.parent_keys.push_back(config.parent_keys[i]);
    }
    const std::vector<int> again_codes =
        PutImpl(again_keys, again_pieces, again, /*check_registered=*/false, upsert,
                /*retried=*/true);
    for (size_t r = 0; r < retry.size(); ++r) codes[retry[r]] = again_codes[r];
  }
  return codes;
}

int ClientImpl::Put(const std::string& key, const void* data, size_t size,
                    const ReplicateConfig& config) {
  return PutImpl({key}, {{ConstPiece{data, size}}}, config, /*check_registered=*/false)[0];
}

int ClientImpl::Upsert(const std::string& key, const void* data, size_t size,
                       const ReplicateConfig& config) {
  return PutImpl({key}, {{ConstPiece{data, size}}}, config, /*check_registered=*/false,
                 /*upsert=*/true)[0];
}

std::vector<int> ClientImpl::BatchPutFromMultiBuffers(const std::vector<std::string>& keys,
                                                      const std::vector<std::vector<void*>>& ptrs,
                                                      const std::vector<std::vector<size_t>>& sizes,
                                                      const ReplicateConfig& config) {
  return MultiBufferPut(keys, ptrs, sizes, config, /*upsert=*/false);
}

std::vector<int> ClientImpl::BatchUpsertFromMultiBuffers(
    const std::vector<std::string>& keys, const std::vector<std::vector<void*>>& ptrs,
    const std::vector<std::vector<size_t>>& sizes, const ReplicateConfig& config) {
  return MultiBufferPut(keys, ptrs, sizes, config, /*upsert=*/true);
}

std::vector<int> ClientImpl::MultiBufferPut(const std::vector<std::string>& keys,
                                            const std::vector<std::vector<void*>>& ptrs,
                                            const std::vector<std::vector<size_t>>& sizes,
                                            const ReplicateConfig& config, bool upsert) {
  const size_t n = keys.size();
  std::vector<int> shape;
  const auto pieces = ToPieces<ConstPiece>(n, ptrs, sizes, shape);
  auto codes = PutImpl(keys, pieces, config, config_.require_registered_buffers, upsert);
  for (size_t i = 0; i < n; ++i) {
    if (shape[i] != 0) codes[i] = shape[i];
  }
  return codes;
}

}  // namespace tierkv
