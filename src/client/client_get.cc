// ClientImpl, the get path: GetReplicas, then each key's memory replicas in order (mapped ones
// by memcpy fused with the checksum, others through the backend's transport), then its disk
// replicas (the staged loader for tiers in this process, the owner's server for others). A key
// is reported only once its bytes are verified; a failed key's destination is zeroed.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <functional>

#include "client/batch_pieces.h"
#include "client/batch_segments.h"
#include "client/client_impl.h"
#include "common/optimistic_read.h"

namespace tierkv {
namespace {

// Copies the memory replica at `offset` of a mapped segment into `dst`: the object's size, or
// TRANSFER_FAIL (its owner was gone by the end of the copy: the bytes may be a dead store's
// leftovers) or CHECKSUM_MISMATCH (with `verify`; logged). The owner is asked after the copy:
// alive then, it was alive through it (death is final). `ask_owner` false: the caller asks after
// every copy of its batch instead (BatchSegments::AliveAfterCopies), and only a mismatch asks
// here (a dead owner's bytes are TRANSFER_FAIL, not corrupt). The copy may race a put that
// reuses the space once the lease has run out: the caller checks the lease after it and
// discards.
int64_t CopyMappedReplica(const SegmentAccess& seg, uint64_t offset,
                          const std::vector<MutPiece>& dst, const ObjectReplicas& obj,
                          const std::string& key, bool verify, bool ask_owner = true) {
  uint64_t sum = 0;
  {
    [[maybe_unused]] OptimisticReadScope racing_put_is_discarded;
    sum = ScatterCopy(seg.base() + offset, dst, verify);
  }
  const bool mismatch = verify && sum != obj.checksum;
  if ((ask_owner || mismatch) && !seg.alive()) return ToInt(ErrorCode::TRANSFER_FAIL);
  if (mismatch) {
    spdlog::error("checksum mismatch reading {} from segment {} at offset {}", key, seg.name(),
                  offset);
    return ToInt(ErrorCode::CHECKSUM_MISMATCH);
  }
  return static_cast<int64_t>(obj.size);
}

// How long a round of network reads waits for a silent store (a partition drops its replies):
// when a key of the round has another replica after the one being read (remote_from = its
// index + 2), a third of the shortest such lease left, so that failing over still fits in the
// lease; otherwise 0, the transport's io_timeout. The wait is for no reply at all: a slow link
// that keeps delivering is not cut short.
std::chrono::milliseconds FailoverIdle(const std::vector<Result<ObjectReplicas>>& replicas,
                                       const std::vector<size_t>& remote_from,
                                       const std::vector<size_t>& owner, const Clock& clock) {
  const SteadyTime now = clock.Now();
  bool any = false;
  SteadyTime::duration shortest = SteadyTime::duration::max();
  for (size_t j : owner) {
    const ObjectReplicas& obj = *replicas[j];
    if (remote_from[j] < 2 || remote_from[j] - 1 >= obj.replicas.size()) continue;
    any = true;
    shortest = std::min(shortest, obj.lease_deadline - now);
  }
  if (!any) return std::chrono::milliseconds(0);
  const auto third = std::chrono::duration_cast<std::chrono::milliseconds>(shortest / 3);
  return std::max(third, std::chrono::milliseconds(100));
}

// Runs a network batch, `transfer(on_done)`, checking its ops' bytes on `pool`: with
// `on_arrival`, each op the transport reports done is checked while later ones are still on the
// wire; every op that succeeded unreported (a transport that reports at the end) is checked
// after. Returns the batch's statuses; intact[k] = op k succeeded and check(k) held.
std::vector<Status> TransferChecked(
    TransferPool& pool, size_t n, bool on_arrival, const std::function<bool(size_t)>& check,
    std::vector<uint8_t>& intact,
    const std::function<std::vector<Status>(const ClientBackend::OpDone&)>& transfer) {
  intact.assign(n, 0);
  std::vector<uint8_t> checked(n, 0);
  auto run_check = [&](size_t k) {
    intact[k] = check(k) ? 1 : 0;
    checked[k] = 1;
  };
  std::vector<Status> done;
  {
    TransferPool::Stream checking(pool, n, run_check);
    ClientBackend::OpDone on_done;
    if (on_arrival) on_done = [&checking](size_t k) { checking.Push(k); };
    done = transfer(on_done);
  }  // every pushed check has run
  std::vector<size_t> left;
  for (size_t k = 0; k < n; ++k) {
    if (!done[k].ok()) {
      intact[k] = 0;
    } else if (!checked[k]) {
      left.push_back(k);
    }
  }
  pool.ParallelFor(left.size(), [&](size_t i) { run_check(left[i]); });
  return done;
}

}  // namespace

std::vector<int64_t> ClientImpl::GetImpl(const std::vector<std::string>& keys,
                                         const std::vector<std::vector<MutPiece>>& given,
                                         bool check_registered, bool exact,
                                         const GetAllocator* allocate) {
  const size_t n = keys.size();
  const std::vector<int> checked = CheckBatch(keys, given, check_registered, buffers_);
  std::vector<int64_t> results(checked.begin(), checked.end());
  std::vector<size_t> idx;
  std::vector<std::string> sub_keys;
  for (size_t i = 0; i < n; ++i) {
    if (results[i] != 0) continue;
    idx.push_back(i);
    sub_keys.push_back(keys[i]);
  }
  if (sub_keys.empty()) return results;
  auto replicas = master_.GetReplicas(sub_keys);
  // BatchGetAllocated: each destination sized by the version just looked up (a key left
  // without one fails below with BUFFER_OVERFLOW: capacity 0).
  std::vector<std::vector<MutPiece>> allocated;
  if (allocate != nullptr) {
    allocated.resize(n);
    for (size_t j = 0; j < sub_keys.size(); ++j) {
      if (!replicas[j].ok()) continue;
      void* ptr = (*allocate)(idx[j], replicas[j]->size);
      if (ptr != nullptr) allocated[idx[j]].push_back(MutPiece{ptr, replicas[j]->size});
    }
  }
  const std::vector<std::vector<MutPiece>>& pieces = allocate != nullptr ? allocated : given;
  const Clock* clock = master_.clock();
  const bool verify = config_.verify_checksum;
  std::vector<std::vector<MutPiece>> dsts(sub_keys.size());
  std::vector<uint8_t> wants_disk(sub_keys.size(), 0);  // memory failed, a disk replica exists
  std::vector<size_t> remote_from(sub_keys.size(), 0);  // 1 + replica to read over the network
  std::vector<size_t> copied_from(sub_keys.size(), 0);  // 1 + mapped replica copied, owner unasked
  // Each segment of the batch's memory replicas looked up once, here, not once per key.
  BatchSegments segments(*backend_);
  for (const auto& r : replicas) {
    if (!r.ok()) continue;
    for (const ReplicaLocation& rep : r->replicas) {
      if (rep.tier != ReplicaTier::kDisk) segments.Find(rep.segment);  // as the copies below
    }
  }

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
    std::vector<MutPiece>& dst = dsts[j];
    uint64_t left = obj.size;
    for (const auto& p : pieces[i]) {
      if (left == 0) break;
      dst.push_back(MutPiece{p.ptr, std::min<uint64_t>(p.size, left)});
      left -= dst.back().size;
    }
    int64_t code = ToInt(ErrorCode::TRANSFER_FAIL);
    bool has_disk = false;
    for (size_t k = 0; k < obj.replicas.size(); ++k) {
      const ReplicaLocation& rep = obj.replicas[k];
      if (rep.tier == ReplicaTier::kDisk) {
        has_disk = true;
        continue;
      }
      // Keeps the memory mapped while copying; never a dead owner's (asked after the copies).
      const std::shared_ptr<SegmentAccess>& seg = segments.Found(rep.segment);
      if (!seg || rep.offset + obj.size > seg->size()) continue;
      if (!seg->mapped()) {
        remote_from[j] = k + 1;  // read over the network after this pass, from replica k on
        return;
      }
      const int64_t copied =
          CopyMappedReplica(*seg, rep.offset, dst, obj, keys[i], verify, /*ask_owner=*/false);
      if (copied < 0) {
        // Another replica may be intact; a corrupt one is reported if none is.
        if (copied == ToInt(ErrorCode::CHECKSUM_MISMATCH)) code = copied;
        continue;
      }
      code = copied;
      copied_from[j] = k + 1;
      break;
    }
    if (code >= 0 && clock->Now() > obj.lease_deadline) {
      // The lease ran out mid-copy: the space may have been reused; discard.
      code = ToInt(ErrorCode::LEASE_EXPIRED);
      copied_from[j] = 0;
    }
    if (code < 0 && has_disk) {
      wants_disk[j] = 1;  // the staged load fills (or zeroes) the destination
      return;
    }
    if (code < 0) {
      ZeroPieces(dst);  // never leave wrong bytes
    }
    results[i] = code;
  });

  // The owners of the segments copied from, asked once each now that every copy has ended. A
  // key whose owner died before its copy ended reads its next replicas (then the disk) below.
  for (size_t j = 0; j < sub_keys.size(); ++j) {
    if (copied_from[j] == 0) continue;
    const ObjectReplicas& obj = *replicas[j];
    const SegmentId from = obj.replicas[copied_from[j] - 1].segment;
    if (segments.AliveAfterCopies(from)) {
      backend_->transfers().AddRead(segments.Found(from)->transport(), obj.size);
      continue;
    }
    results[idx[j]] = 0;
    remote_from[j] = copied_from[j] + 1;
  }

  ReadRemoteReplicas(keys, replicas, dsts, remote_from, idx, results, wants_disk);

  ReadDiskReplicas(keys, replicas, dsts, idx, wants_disk, results);
  return results;
}

void ClientImpl::ReadDiskReplicas(const std::vector<std::string>& keys,
                                  const std::vector<Result<ObjectReplicas>>& replicas,
                                  std::vector<std::vector<MutPiece>>& dsts,
                                  const std::vector<size_t>& idx,
                                  const std::vector<uint8_t>& wants_disk,
                                  std::vector<int64_t>& results) {
  size_t memory_hits = 0;
  uint64_t memory_bytes = 0;
  std::vector<DiskRead> reads;
  std::vector<size_t> slot;  // reads[r] is sub-key slot[r]
  for (size_t j = 0; j < replicas.size(); ++j) {
    if (wants_disk[j]) {
      DiskRead r;
      r.key = &keys[idx[j]];
      r.checksum = replicas[j]->checksum;
      r.dst = std::move(dsts[j]);
      reads.push_back(std::move(r));
      slot.push_back(j);
    } else if (results[idx[j]] > 0) {
      ++memory_hits;
      memory_bytes += static_cast<uint64_t>(results[idx[j]]);
    }
  }
  if (!reads.empty() || tier_log_) {
    // Disk replicas in order; a failed read falls back to the object's next disk replica.
    std::vector<size_t> next_replica(reads.size(), 0);
    std::vector<size_t> pending(reads.size());
    for (size_t r = 0; r < reads.size(); ++r) pending[r] = r;
    std::vector<int64_t> final_code(reads.size(), ToInt(ErrorCode::OBJECT_NOT_FOUND));
    while (!pending.empty()) {
      std::vector<DiskRead> round;
      std::vector<SegmentId> round_segments;  // of round[k]'s disk replica
      std::vector<size_t> owner;
      for (size_t r : pending) {
        const auto& reps = replicas[slot[r]]->replicas;
        size_t& next = next_replica[r];
        while (next < reps.size() && reps[next].tier != ReplicaTier::kDisk) ++next;
        if (next == reps.size()) continue;
        DiskRead d;
        d.tier = backend_->FindTier(reps[next].segment);
        d.key = reads[r].key;
        d.location = reps[next].disk;
        d.checksum = reads[r].checksum;
        d.dst = reads[r].dst;
        round_segments.push_back(reps[next].segment);
        ++next;
        round.push_back(std::move(d));
        owner.push_back(r);
      }
      if (round.empty()) break;
      LoadDisk(round, round_segments);
      pending.clear();
      for (size_t k = 0; k < round.size(); ++k) {
        final_code[owner[k]] = round[k].result;
        if (round[k].result < 0) pending.push_back(owner[k]);
      }
    }
    size_t disk_hits = 0, failed = 0;
    uint64_t disk_bytes = 0;
    std::vector<size_t> hits;
    for (size_t r = 0; r < reads.size(); ++r) {
      results[idx[slot[r]]] = final_code[r];
      if (final_code[r] >= 0) {
        ++disk_hits;
        disk_bytes += static_cast<uint64_t>(final_code[r]);
        hits.push_back(r);
      } else {
        ++failed;
        ZeroPieces(reads[r].dst);
      }
    }
    if (config_.promote_on_hit && !hits.empty()) Promote(reads, hits);
    if (tier_log_) {
      spdlog::info(
          "tier: get batch of {} keys: {} from memory ({} bytes), {} from disk ({} "
          "bytes), {} disk reads failed",
          keys.size(), memory_hits, memory_bytes, disk_hits, disk_bytes, failed);
    }
  }
}

void ClientImpl::ReadRemoteReplicas(const std::vector<std::string>& keys,
                                    const std::vector<Result<ObjectReplicas>>& replicas,
                                    const std::vector<std::vector<MutPiece>>& dsts,
                                    std::vector<size_t>& remote_from,
                                    const std::vector<size_t>& idx, std::vector<int64_t>& results,
                                    std::vector<uint8_t>& wants_disk) {
  const Clock* clock = master_.clock();
  const bool verify = config_.verify_checksum;
  // Rounds: each pending key reads its next memory replica (network or mapped); a failed or
  // corrupt read moves on to the next one.
  for (;;) {
    std::vector<RemoteRead> ops;
    std::vector<size_t> owner;
    for (size_t j = 0; j < remote_from.size(); ++j) {
      if (remote_from[j] == 0) continue;
      const ObjectReplicas& obj = *replicas[j];
      size_t k = remote_from[j] - 1;
      remote_from[j] = 0;
      for (; k < obj.replicas.size(); ++k) {
        const ReplicaLocation& rep = obj.replicas[k];
        if (rep.tier != ReplicaTier::kMemory) continue;
        auto seg = backend_->FindSegment(rep.segment);
        if (!seg || rep.offset + obj.size > seg->size()) continue;
        if (seg->mapped()) {
          const std::string& key = keys[idx[j]];
          if (CopyMappedReplica(*seg, rep.offset, dsts[j], obj, key, verify) < 0) continue;
          if (clock->Now() > obj.lease_deadline) break;  // LEASE_EXPIRED below
          results[idx[j]] = static_cast<int64_t>(obj.size);
          backend_->transfers().AddRead(seg->transport(), obj.size);
          k = obj.replicas.size() + 1;  // done
          break;
        }
        ops.push_back(RemoteRead{std::move(seg), rep.offset, dsts[j]});
        owner.push_back(j);
        remote_from[j] = k + 2;  // if this read fails, go on after it
        break;
      }
      if (k == obj.replicas.size() + 1 || remote_from[j] != 0) continue;
      // No replica left in memory: the disk, or a failure with zeroed bytes.
      const bool has_disk = std::any_of(obj.replicas.begin(), obj.replicas.end(),
                                        [](const auto& r) { return r.tier == ReplicaTier::kDisk; });
      if (has_disk) {
        wants_disk[j] = 1;
        continue;
      }
      const bool expired = k < obj.replicas.size();
      results[idx[j]] = ToInt(expired ? ErrorCode::LEASE_EXPIRED : ErrorCode::TRANSFER_FAIL);
      ZeroPieces(dsts[j]);
    }
    if (ops.empty()) return;
    // The checksums of what arrived, on the transfer pool's threads (a pass over the bytes):
    // each op's as soon as its last byte is in, while later ones are still on the wire.
    std::vector<uint8_t> intact;
    const std::vector<Status> done = TransferChecked(
        pool_, ops.size(), verify,
        [&](size_t k) {
          return !verify || HashPieces(dsts[owner[k]]) == replicas[owner[k]]->checksum;
        },
        intact,
        [&](const ClientBackend::OpDone& on_done) {
          return backend_->ReadRemote(ops, FailoverIdle(replicas, remote_from, owner, *clock),
                                      on_done);
        });
    for (size_t k = 0; k < ops.size(); ++k) {
      const size_t j = owner[k];
      const ObjectReplicas& obj = *replicas[j];
      bool ok = intact[k] != 0;
      if (done[k].ok() && !ok) {
        spdlog::error("checksum mismatch reading {} bytes from segment {} at offset {}", obj.size,
                      ops[k].segment->name(), ops[k].offset);
      }
      if (ok && clock->Now() > obj.lease_deadline) {
        results[idx[j]] = ToInt(ErrorCode::LEASE_EXPIRED);  // the space may have been reused
        ZeroPieces(dsts[j]);
        remote_from[j] = 0;
        continue;
      }
      if (ok) {
        results[idx[j]] = static_cast<int64_t>(obj.size);
        backend_->transfers().AddRead(ops[k].segment->transport(), obj.size);
        remote_from[j] = 0;
      }
      // else remote_from[j] names the next replica to try in the next round
    }
  }
}

void ClientImpl::LoadDisk(std::vector<DiskRead>& round, const std::vector<SegmentId>& segments) {
  // Tiers in this process: the staged loader. Others: through their owners' servers.
  std::vector<DiskRead> local;
  std::vector<size_t> local_at, remote_at;
  std::vector<RemoteStage> ops;
  for (size_t k = 0; k < round.size(); ++k) {
    if (round[k].tier) {
      local.push_back(round[k]);
      local_at.push_back(k);
    } else {
      remote_at.push_back(k);
      ops.push_back(RemoteStage{segments[k], *round[k].key, round[k].location, round[k].dst});
    }
  }
  if (!local.empty()) {
    loader_.Load(local);
    for (size_t j = 0; j < local.size(); ++j) round[local_at[j]].result = local[j].result;
  }
  if (ops.empty()) return;
  // Disk bytes are always verified, whatever verify_checksum says (as the staged loader does):
  // each op's on the pool's threads as soon as its last byte is in.
  std::vector<uint8_t> intact;
  const std::vector<Status> done = TransferChecked(
      pool_, ops.size(), /*on_arrival=*/true,
      [&](size_t j) {
        const DiskRead& r = round[remote_at[j]];
        return HashPieces(r.dst) == r.checksum;
      },
      intact,
      [&](const ClientBackend::OpDone& on_done) {
        return backend_->StageRemote(ops, config_.staging_usable_ratio, on_done);
      });
  pool_.ParallelFor(ops.size(), [&](size_t j) {
    DiskRead& r = round[remote_at[j]];
    if (!done[j].ok()) {
      spdlog::warn("staged load of {} from segment {} failed: {}", *r.key, ops[j].segment,
                   done[j].ToString());
      r.result = ToInt(done[j].code());
    } else if (!intact[j]) {
      spdlog::error(
          "checksum mismatch loading {} from the SSD tier of segment {} (region {} "
          "offset {})",
          *r.key, ops[j].segment, r.location.region, r.location.offset);
      r.result = ToInt(ErrorCode::CHECKSUM_MISMATCH);
    } else {
      r.result = static_cast<int64_t>(r.location.size);
      return;
    }
    ZeroPieces(r.dst);  // never leave wrong bytes
  });
  for (size_t j = 0; j < ops.size(); ++j) {
    const DiskRead& r = round[remote_at[j]];
    if (r.result >= 0)
      backend_->transfers().AddRead(backend_->StageTransport(ops[j].segment), r.location.size);
  }
}

void ClientImpl::Promote(const std::vector<DiskRead>& reads, const std::vector<size_t>& hits) {
  std::vector<std::string> keys;
  for (size_t r : hits) keys.push_back(*reads[r].key);
  auto started = master_.PromoteStart(keys, config_.promote_min_hits);
  std::vector<std::string> end_keys;
  std::vector<uint64_t> ids;
  std::vector<bool> ok;
  for (size_t k = 0; k < started.size(); ++k) {
    if (!started[k].ok()) continue;  // not admitted yet, or no free DRAM
    const ReplicaLocation& loc = started[k]->replicas.front();
    auto seg = backend_->FindSegment(loc.segment);
    const bool fits = seg && seg->alive() && loc.offset + loc.size <= seg->size();
    bool written = fits;
    if (fits) {
      // The caller's buffer holds the verified bytes: copy them into the new range.
      std::vector<ConstPiece> src;
      for (const auto& p : reads[hits[k]].dst) src.push_back(ConstPiece{p.ptr, p.size});
      if (seg->mapped()) {
        GatherCopy(seg->base() + loc.offset, src, /*hash=*/false);
      } else {
        written =
            backend_->WriteRemote({RemoteWrite{seg, loc.segment, loc.offset, std::move(src)}})[0]
                .ok();
      }
    }
    end_keys.push_back(keys[k]);
    ids.push_back(started[k]->put_id);
    ok.push_back(written);
  }
  if (!end_keys.empty()) master_.PromoteEnd(end_keys, ids, ok);
}

int64_t ClientImpl::Get(const std::string& key, void* buf, size_t capacity) {
  return GetImpl({key}, {{MutPiece{buf, capacity}}}, /*check_registered=*/false,
                 /*exact=*/false)[0];
}

std::vector<int64_t> ClientImpl::BatchGetInto(const std::vector<std::string>& keys,
                                              const std::vector<void*>& bufs,
                                              const std::vector<size_t>& capacities) {
  const size_t n = keys.size();
  std::vector<std::vector<MutPiece>> pieces(n);
  std::vector<bool> bad(n, false);
  for (size_t i = 0; i < n; ++i) {
    if (i >= bufs.size() || i >= capacities.size()) {
      bad[i] = true;
      continue;
    }
    pieces[i].push_back(MutPiece{bufs[i], capacities[i]});
  }
  auto results = GetImpl(keys, pieces, config_.require_registered_buffers, /*exact=*/false);
  for (size_t i = 0; i < n; ++i) {
    if (bad[i]) results[i] = ToInt(ErrorCode::INVALID_PARAMS);
  }
  return results;
}

std::vector<int64_t> ClientImpl::BatchGetAllocated(
    const std::vector<std::string>& keys,
    const std::function<void*(size_t index, uint64_t size)>& allocate) {
  // One placeholder piece per key passes CheckBatch's shape checks (keys and duplicates are
  // what it checks here); the real destinations come from `allocate`.
  static uint8_t placeholder;
  const std::vector<std::vector<MutPiece>> pieces(keys.size(), {MutPiece{&placeholder, 1}});
  return GetImpl(keys, pieces, /*check_registered=*/false, /*exact=*/false, &allocate);
}

std::vector<int64_t> ClientImpl::BatchGetIntoMultiBuffers(
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

}  // namespace tierkv
