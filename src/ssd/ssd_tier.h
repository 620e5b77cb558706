// SsdTier: a store's SSD tier — tier files, devices, the region log and the staging area.
//
// What: Open() creates (or, with warm_restart, reopens and scans) one preallocated tier file
// per path, opens an io_uring/O_DIRECT device on each (pread/pwrite fallback, logged) and
// builds a RegionLog striped over them. Append() is the demotion write; Stage() is the
// owner's half of a staged load: it reserves staging space for a batch of value ranges, reads
// their aligned record ranges with batched device reads (several in flight) and returns where
// each range's bytes are. The requester copies them out, verifies them against the object
// checksum, and calls Release(). Expired tickets are reclaimed by ReclaimExpired().
// ReadDirect() is the in-process shortcut for block-aligned values and caller buffers: the
// device reads straight into the caller's memory.
//
// Reads: a piece that starts at value offset 0 is read from the record's start, so its
// header (magic, generation, key hash, sizes) and key bytes are checked; a piece that starts
// later (an object streamed through a small budget) is checked by the region's sealed
// generation before and after the read, and by the requester's checksum over the whole
// value. With page_cache_reads, reads go through the page cache (a second fd without
// O_DIRECT): faster on repeated reads, but the cached pages take the DRAM this tier exists
// to save. Off by default.
//
// Files: each tier file is made by TierFile::Create (replaces only a tier file of an earlier run,
// recognised by its label; O_CREAT|O_EXCL|O_NOFOLLOW, O_DIRECT, 0600, fallocate, label). With
// block_devices, each path is a raw block device instead (TierFile::OpenBlockDevice), never
// removed. Without warm_restart the files are removed by the destructor;
// with it the destructor flushes the open region and keeps them, and Open() reopens them
// (TierFile::OpenExisting: regular file, not a symlink, owned by this user, mode 0600, right
// size) and recovers the log, returning the surviving records; a path with no file yet gets
// a new one. A file Open() created is removed again if Open() fails; a reopened one is kept.
//
// Tickets: Stage() makes one reservation per call. When no piece succeeded it releases that
// reservation itself and returns ticket 0 (nothing to release; Release(0) is
// OBJECT_NOT_FOUND); otherwise the caller releases the ticket (or ReclaimExpired does).
//
// Errors: Open: INVALID_CONFIG naming the problem (no paths, an empty or repeated path, a
// bad region size, capacity smaller than one region, bad staging or device options),
// FILE_OPEN_FAIL (see TierFile), INTERNAL_ERROR (buffers, io_uring with engine kUring).
// Append/Flush: as RegionLog. Stage: whole-call errors as StagingArea::Reserve
// (OBJECT_TOO_LARGE when the batch needs more than the budget: the requester must split it;
// NO_AVAILABLE_HANDLE after waiting staging.wait), and INVALID_PARAMS for an empty batch;
// per-piece OBJECT_NOT_FOUND (region reused, or no record of this key there),
// CHECKSUM_MISMATCH (corrupt header/key), FILE_READ_FAIL (IO error; the next request works),
// INVALID_PARAMS (length 0, range outside the value, bad location), INVALID_KEY.
// Thread-safety: all methods are thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/disk_location.h"
#include "device/device.h"
#include "device/tier_file.h"
#include "ssd/region_log.h"
#include "ssd/staging_area.h"
#include "tierkv/status.h"

namespace tierkv {

struct SsdTierOptions {
  std::vector<std::string> paths;  // one tier file per path (several drives are striped)
  uint64_t capacity_per_path = 0;  // bytes per file, rounded down to whole regions
  uint64_t region_size = uint64_t{64} << 20;
  RegionEvictionPolicy eviction = RegionEvictionPolicy::kFifo;
  bool warm_restart = false;             // keep the files at shutdown and recover them at Open
  bool page_cache_reads = false;         // read through the page cache instead of O_DIRECT
  bool allow_buffered_fallback = false;  // a filesystem without O_DIRECT: buffered IO, warned
  // Every path is a raw block device (TierFile::OpenBlockDevice), used whole: capacity_per_path
  // does not apply. Without warm_restart, Open zeroes each region's first block (the log would
  // otherwise find an earlier run's regions at a later warm restart); nothing is ever unlinked.
  bool block_devices = false;
  DeviceOptions device;
  StagingOptions staging;
  // Region and staging buffers on 2 MiB pages (the staging buffer only if
  // staging.want_huge_pages is set too).
  bool want_huge_pages = true;
  // Test hook: applied to every device opened (the O_DIRECT one of each path, then the
  // page-cache read device when page_cache_reads), e.g. to wrap it in a FaultyDevice. Must
  // return a device of the same size and alignment.
  std::function<std::unique_ptr<Device>(std::unique_ptr<Device>)> TEST_wrap_device;
};

// One value range to stage: bytes [value_offset, value_offset + length) of the record of
// `key` at `location`. length > 0.
struct StageRequest {
  std::string key;
  DiskLocation location;
  uint64_t value_offset = 0;
  uint64_t length = 0;
};

struct StagedPiece {
  Status status;
  const uint8_t* data = nullptr;  // `length` bytes, valid while the ticket is held
  uint64_t staging_offset = 0;    // offset of `data` in the staging buffer
};

// Stage's per-piece callback: the request's index and its piece (status, and data when OK;
// the ticket is the one Stage returns). When Stage returns OK it was called exactly once per
// request, before Stage returned; when Stage fails as a whole it was called for none. May be
// called from several threads at once (one per device).
using PieceReady = std::function<void(size_t index, const StagedPiece& piece)>;

// One value to read straight into the caller's memory (a direct load, no staging copy).
struct DirectRequest {
  std::string_view key;
  DiskLocation location;
  std::vector<MutPiece> dst;  // in order, exactly location.size bytes in all
};

struct StageResult {
  uint64_t ticket = 0;              // 0 when no piece succeeded (nothing held)
  std::vector<StagedPiece> pieces;  // one per request, in order
};

struct SsdTierStats {
  RegionLogStats log;
  StagingStats staging;
  uint64_t staged_pieces = 0;
  uint64_t staged_bytes = 0;  // value bytes made available
  uint64_t stage_errors = 0;  // pieces that failed
  uint64_t direct_reads = 0;  // values read straight into a caller's memory
  uint64_t direct_bytes = 0;
  uint64_t direct_errors = 0;  // of them, failed
};

class SsdTier {
 public:
  // `on_region_evicted` is the RegionLog callback (runs under the log's mutex; it must not
  // call Append/Flush). `surviving` (may be null) receives what warm restart recovered.
  static Result<std::unique_ptr<SsdTier>> Open(const SsdTierOptions& options,
                                               RegionEvictedCallback on_region_evicted,
                                               std::vector<ScannedRecord>* surviving);
  ~SsdTier();
  SsdTier(const SsdTier&) = delete;
  SsdTier& operator=(const SsdTier&) = delete;

  // As RegionLog::Append (`value_checksum`: the value's xxh3-64 if the caller has it).
  Result<DiskLocation> Append(std::string_view key, const std::vector<ConstPiece>& value,
                              std::optional<uint64_t> value_checksum = std::nullopt);
  Status Flush();

  // `on_piece` (optional) hears of each piece as soon as its bytes are staged and checked
  // (see PieceReady), so the requester can copy it out while later pieces are still read.
  Result<StageResult> Stage(const std::vector<StageRequest>& requests,
                            const PieceReady& on_piece = nullptr);
  // Whether ReadDirect can serve a value of location.size bytes into `dst`: a block-aligned
  // value (at least kAlignedValueMin bytes) whose size is a multiple of 4096, and pieces whose
  // addresses and sizes are multiples of 4096 and add up to exactly location.size.
  static bool DirectReadable(const DiskLocation& location, const std::vector<MutPiece>& dst);
  // Reads each value straight into its pieces (O_DIRECT into the caller's memory; no staging
  // space, no ticket), all requests' reads in flight together (up to the device's queue
  // depth; the rest follow as slots free up). One Status per request: the
  // per-piece errors of Stage, and INVALID_PARAMS when !DirectReadable. The bytes are not
  // verified here: the caller checks them against the object checksum. On failure the
  // request's pieces hold unspecified bytes.
  // `on_done` (optional) hears of each request once, as soon as its last piece is read
  // (before ReadDirect returns; possibly from several threads at once, one per device; while
  // it runs that device submits nothing new, so keep it short: e.g. verify the bytes).
  std::vector<Status> ReadDirect(
      const std::vector<DirectRequest>& requests,
      const std::function<void(size_t, const Status&)>& on_done = nullptr);
  Status Release(uint64_t ticket);
  bool Held(uint64_t ticket) const;
  size_t ReclaimExpired();

  // Whether the record at `location` is still in the log (its region not reused since).
  bool Holds(const DiskLocation& location);

  uint64_t staging_capacity() const;
  uint64_t capacity() const;  // bytes of all regions
  SsdTierStats stats() const;
  RegionLog& log();

 private:
  SsdTier() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tierkv
