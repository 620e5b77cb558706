// RegionLog: the append-only log of fixed-size regions that holds the SSD tier's bytes.
//
// What: the tier is split into regions of `region_size` bytes laid out over one or more
// Devices (round-robin: region r is on device r % n at offset (r / n) * region_size when the
// devices are equally sized; a smaller device drops out of the rotation once full). Append()
// copies a record (header, key, value; format in docs/disk-format.md) into the single open
// region's aligned DRAM buffer; when the next record does not fit, the region is sealed: its
// used part (header block plus records) goes to the device in one Write, and another region
// is opened — a free one, else the oldest (FIFO) or least recently read (LRU) sealed region
// is evicted. Before an evicted region is reused, on_region_evicted(region, generation,
// keys) reports the keys it held, so their owner can drop those disk replicas.
//
// Write buffers (RegionLogOptions::write_buffers, default 2): with N >= 2 the log owns N
// region buffers and min(N - 1, devices) flusher threads. A full (or Flush()ed) region is
// handed to the flushers ("flushing": written from its buffer without holding the append
// mutex) and the next region opens in an idle buffer, so Append copies while earlier regions
// are written — on several devices at once when there are several (consecutive regions
// alternate devices; the SSD tier gives the log devices + 1 buffers). Append
// waits (condition variable) only when every buffer is busy, or when no region is free or
// sealed (all are open or flushing). A flushing region is readable from its buffer (same
// checks as the open region) and is not a reuse candidate; it becomes sealed (sealed
// generation set) only after its write succeeded. With N = 1 the write runs inline under the
// append mutex, as in earlier versions. Memory: N x region_size (2 MiB pages when wanted).
//
// Generations: every (re)open of a region takes the next value of one log-wide counter, so a
// region's generation grows at each reuse and, across regions, a larger generation is a
// newer region (Scan uses this for duplicate keys). A DiskLocation carries the generation;
// a location whose region was reused since is OBJECT_NOT_FOUND, never the new tenant's bytes.
//
// Reads racing a reuse: each region has an atomic "sealed generation" (0 unless sealed).
// Eviction zeroes it, under the append mutex, before the region is reopened; the new
// tenant's bytes reach the device only later, at its flush. A reader checks the sealed
// generation before the IO, checks the generation inside the record header it read, and
// checks the sealed generation again after the IO: if it still equals the location's, no
// reuse began before the read finished, so the bytes are the old tenant's (and the value
// checksum confirms them). Any mismatch is OBJECT_NOT_FOUND. Reads of the open region, or of
// a flushing one, copy from its buffer under the append mutex; a region's sealed generation
// is set only after its write succeeded.
//
// Staged reads: ReadRanges() reads a batch of value ranges straight into caller-provided
// aligned buffers (the staging area), with one Device::ReadBatch per device so many reads are
// in flight; an optional callback hears of each range as soon as its read is done and checked.
// A range starting at value offset 0 is read from the record's start and its
// header and key are checked as Read() does, but the value is not hashed (the requester
// verifies the object checksum over the whole value); a later range reads only the aligned
// blocks covering it. Both follow the sealed-generation protocol above.
//
// Errors: Append: INVALID_KEY (empty, > kMaxKeyLength), INVALID_PARAMS (null piece, size
// overflow), OBJECT_TOO_LARGE (record > region_size - kBlockSize). A failed region write
// loses that region's records: they are reported through on_region_evicted (before the region
// is reused), their locations read OBJECT_NOT_FOUND, and the region goes back to the free
// list. With write_buffers >= 2 the write is asynchronous: Append never reports it (nor waits
// for it, beyond a free buffer); Flush() waits for every write in flight and returns
// FILE_WRITE_FAIL if any region write failed since the previous Flush (each failure is
// reported by one Flush). With write_buffers = 1 the call whose write failed reports
// FILE_WRITE_FAIL: an Append that rolled over is then not appended; the next works. Read:
// OBJECT_NOT_FOUND (region reused, or the location does not name a record of this key),
// CHECKSUM_MISMATCH (corrupt header, key or value), FILE_READ_FAIL (IO error; the next read works),
// BUFFER_OVERFLOW (dst smaller than the value), INVALID_PARAMS (location outside the tier).
// ReadRanges: per range, the same codes (no value checksum), INVALID_KEY, and INVALID_PARAMS for a
// range outside the value or a null/unaligned dst.
//
// Warm restart: Recover() opens a log over used devices, adopting the regions that hold
// valid records as sealed (see docs/disk-format.md, "Warm restart"); Create() starts empty.
// Scan and Recover are in region_log_recovery.cc, the rest in region_log.cc.
//
// Ownership: the devices and read devices are borrowed and must outlive the log. The
// destructor waits for the region writes in flight (a failure is still reported through the
// callback) and drops the open region's records (call Flush() first to keep them).
// Thread-safety: all methods are thread-safe. Appends, flushes and evictions are serialized
// by one mutex (with write_buffers = 1 the region write runs under it; otherwise the flusher
// writes without it); reads of sealed regions take no lock. The callback runs under that
// mutex, never concurrently with itself, on an appending thread (eviction) or the flusher
// (failed write): it must not call Append/Flush on this log.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/disk_location.h"
#include "device/device.h"
#include "device/io_buffer.h"
#include "tierkv/status.h"
#include "transfer/copy.h"

namespace tierkv {

enum class RegionEvictionPolicy {
  kFifo,  // reuse the region sealed longest ago
  kLru,   // reuse the region read (or sealed) longest ago
};

using RegionEvictedCallback =
    std::function<void(uint32_t region, uint64_t generation, std::vector<std::string> keys)>;

struct RegionLogOptions {
  uint64_t region_size = uint64_t{64} << 20;  // a multiple of kBlockSize, >= 2 blocks
  RegionEvictionPolicy eviction = RegionEvictionPolicy::kFifo;
  // Back the open-region buffer with 2 MiB pages (faster O_DIRECT writes); tests turn it off
  // to keep small regions small.
  bool want_huge_pages = true;
  // Region buffers (each region_size bytes): >= 2 writes full regions in the background while
  // appends fill the next one; 1 writes them inline under the append mutex. 0 is
  // INVALID_PARAMS.
  uint32_t write_buffers = 2;
};

struct RegionLogStats {
  uint64_t appended_records = 0;
  uint64_t appended_bytes = 0;  // value bytes
  uint64_t flushes = 0;         // successful region writes
  uint64_t flush_errors = 0;
  uint64_t evicted_regions = 0;
  uint64_t reads = 0;  // Read() calls and ReadRanges() ranges that returned OK
  uint64_t read_errors = 0;
  uint64_t checksum_failures = 0;
  uint64_t stale_reads = 0;   // OBJECT_NOT_FOUND because the region was reused
  uint64_t buffer_waits = 0;  // appends that waited for a region write to free a buffer
};

// ReadRanges' per-range callback: the range's index and final status (the same as in the
// returned vector), as soon as that range is settled, so its bytes can be used while later
// ranges are still being read. Called exactly once per range, before ReadRanges returns,
// possibly from several threads at once (one per device), never under the log's mutex.
using RangeReady = std::function<void(size_t index, const Status& status)>;

// One valid record found by Scan.
struct ScannedRecord {
  std::string key;
  DiskLocation location;
  uint64_t checksum = 0;  // xxh3-64 of the value
};

// One value range for ReadRanges: bytes [value_offset, value_offset + length) of the value
// of the record of `key` at `loc`.
struct RangeRead {
  DiskLocation loc;
  std::string_view key;
  uint64_t value_offset = 0;
  // > 0; 0 is accepted only with value_offset 0 (checks the header and key, reads no value).
  uint64_t length = 0;
  // kBlockSize-aligned, at least RegionLog::RangeReadBytes(key.size(), loc.size,
  // value_offset, length) bytes (<= StagingNeed(length), see ssd/staging_area.h). Holds the
  // aligned blocks read: for value_offset 0 the record header and key come first. With
  // value_only: exactly `length` bytes, the range itself.
  uint8_t* dst = nullptr;
  // If not null, receives the address in dst of the first requested value byte (on success).
  const uint8_t** value_out = nullptr;
  // Read only the range, straight into dst (a direct load into the caller's buffer): needs
  // DirectReadable(loc.size, value_offset, length, dst), else INVALID_PARAMS. The record
  // header is not read: reuse is caught by the region's sealed generation before and after
  // the read, and wrong bytes by the caller's checksum over the value.
  bool value_only = false;
};

class RegionLog {
 public:
  // INVALID_PARAMS for no/null devices, a bad region size, a device alignment that does not
  // divide kBlockSize, or devices too small for one region; INTERNAL_ERROR if the buffer
  // cannot be allocated. `read_devices`, when not empty, holds one device per device (same
  // file, same size, e.g. opened without O_DIRECT) that serves the reads of sealed regions;
  // writes and recovery scans always use `devices`. INVALID_PARAMS if it does not match.
  static Result<std::unique_ptr<RegionLog>> Create(std::vector<Device*> devices,
                                                   const RegionLogOptions& options,
                                                   RegionEvictedCallback on_region_evicted,
                                                   std::vector<Device*> read_devices = {});
  ~RegionLog();
  RegionLog(const RegionLog&) = delete;
  RegionLog& operator=(const RegionLog&) = delete;

  // Appends key -> concatenation of `value` pieces; see the class comment for errors.
  // `value_checksum`: the value's xxh3-64 when the caller already has it (demotion passes the
  // one recorded at PutEnd); the value is then copied without hashing it again, and the record
  // carries that checksum, so bytes that changed since it was taken fail every read and are
  // skipped by warm restart (Scan) instead of being certified anew. Without it the log hashes
  // the value as it copies.
  Result<DiskLocation> Append(std::string_view key, const std::vector<ConstPiece>& value,
                              std::optional<uint64_t> value_checksum = std::nullopt);
  // Writes out and seals the open region if it holds any record (the next Append opens
  // another region), then waits for every region write in flight. FILE_WRITE_FAIL if one of
  // them, or any background write since the previous Flush, failed (see the class comment).
  Status Flush();
  // Copies the value at `loc`, which must have been appended under `key`, into `dst`
  // (total size >= loc.size; bytes past loc.size are left alone).
  Status Read(const DiskLocation& loc, std::string_view key, const std::vector<MutPiece>& dst);
  // Staged reads (see the class comment): one Status per range, in order; a failed range
  // never fails its neighbours. On failure the range's dst bytes are unspecified.
  std::vector<Status> ReadRanges(const std::vector<RangeRead>& reads,
                                 const RangeReady& on_ready = nullptr);
  // Bytes of dst a RangeRead needs: the blocks covering the range, from the record start
  // when value_offset is 0. At most StagingNeed(length) for keys of up to kMaxKeyLength.
  static uint64_t RangeReadBytes(uint64_t key_size, uint64_t value_size, uint64_t value_offset,
                                 uint64_t length);
  // Whether a value_only RangeRead of [value_offset, +length) of a value of value_size bytes
  // into dst is possible: a block-aligned value (RecordValueAligned), and an offset, length
  // and dst address that are multiples of kBlockSize.
  static bool DirectReadable(uint64_t value_size, uint64_t value_offset, uint64_t length,
                             const void* dst);

  // Whether `loc`'s region is written (open or sealed) at loc.generation: false once it was
  // reused (or never held that generation). Takes the log's mutex.
  bool Holds(const DiskLocation& loc);

  uint32_t num_regions() const { return num_regions_; }
  uint64_t region_size() const { return region_size_; }
  // Device index and byte offset of a region (for tests and diagnostics).
  uint32_t region_device(uint32_t region) const { return regions_[region].device; }
  uint64_t region_base(uint32_t region) const { return regions_[region].base; }
  RegionLogStats stats() const;

  // Reads every region of `devices` (laid out as Create would with `options`), and returns
  // the valid records: a region counts only with a valid header; its scan stops at the first
  // record whose header is missing, torn, corrupt, of another generation or out of sequence,
  // and skips (with a warning) a record whose header is intact but whose key or value does not
  // match its checksums (a torn write, or bytes that changed before they were appended with
  // their caller's checksum). For a key found more than once, the newest (highest
  // generation, then offset) wins. A region that cannot be read is skipped with a warning.
  // INVALID_PARAMS as for Create.
  static Result<std::vector<ScannedRecord>> Scan(const std::vector<Device*>& devices,
                                                 const RegionLogOptions& options);

  // Warm restart: opens a log over devices written by an earlier RegionLog with the same
  // layout (devices in the same order, same region_size) and adopts what Scan finds.
  // Every region holding at least one valid record starts sealed (readable, with the keys of
  // its valid records in append order — including keys superseded by a newer region, as a
  // live region's list would — and evicted by FIFO/LRU oldest generation first); every other
  // region (never written, corrupt or mismatched header, torn first record, unreadable)
  // starts free and is used first. The generation counter starts above every generation
  // found in a checksum-valid region or record header anywhere on the devices, so a new
  // tenant's generation never matches leftover bytes. If `surviving` is not null it receives
  // the records Scan would return (newest wins per key); their locations Read byte-exact.
  // Errors as for Create.
  // `read_devices` as for Create (the scan itself reads `devices`).
  static Result<std::unique_ptr<RegionLog>> Recover(std::vector<Device*> devices,
                                                    const RegionLogOptions& options,
                                                    RegionEvictedCallback on_region_evicted,
                                                    std::vector<ScannedRecord>* surviving,
                                                    std::vector<Device*> read_devices = {});

 private:
  enum class State : uint8_t { kFree, kOpen, kFlushing, kSealed };
  struct Place {
    uint32_t device = 0;
    uint64_t base = 0;
  };
  struct Region {
    uint32_t device = 0;
    uint64_t base = 0;
    // Generation of the region's bytes on the device while it is sealed; 0 otherwise.
    std::atomic<uint64_t> sealed_generation{0};
    std::atomic<uint64_t> last_access{0};  // LRU clock tick of the last seal or read
    // Guarded by mu_.
    State state = State::kFree;
    uint64_t generation = 0;
    int32_t buffer = -1;  // write buffer holding its bytes while open or flushing
    std::vector<std::string> keys;
  };
  // One region buffer. Guarded by mu_; while flushing, its bytes are only read (by the
  // flusher's write, and by readers under mu_).
  struct WriteBuffer {
    IoBuffer mem;
    int64_t region = -1;   // the open or flushing region it holds; -1 when idle
    uint64_t used = 0;     // bytes to write (set when the region is sealed)
    uint64_t records = 0;  // records in it (set when the region is sealed)
  };
  // What a scan found in one region.
  struct RegionScan {
    uint64_t generation = 0;             // of its valid header; 0 when the header is not valid
    std::vector<ScannedRecord> records;  // valid records, in append order
  };
  struct ScanResult {
    std::vector<Place> places;
    std::vector<RegionScan> regions;  // one per place
    uint64_t max_generation = 0;      // over every checksum-valid region or record header
  };
  struct Counters {
    std::atomic<uint64_t> appended_records{0}, appended_bytes{0}, flushes{0}, flush_errors{0},
        evicted_regions{0}, reads{0}, read_errors{0}, checksum_failures{0}, stale_reads{0},
        buffer_waits{0};
  };

  RegionLog(std::vector<Device*> devices, std::vector<Device*> read_devices,
            const std::vector<Place>& places, const RegionLogOptions& options,
            RegionEvictedCallback cb, std::vector<IoBuffer> buffers);
  // The region buffers of `options` (INVALID_PARAMS for 0, INTERNAL_ERROR if out of memory).
  static Result<std::vector<IoBuffer>> AllocateBuffers(const RegionLogOptions& options);
  // Starts the flushers when write_buffers >= 2 (INTERNAL_ERROR if a thread cannot start).
  Status Start();
  bool async() const { return buffers_.size() > 1; }
  void FlusherLoop();
  // INVALID_PARAMS unless `read_devices` is empty or matches `devices` one to one.
  static Status CheckReadDevices(const std::vector<Device*>& devices,
                                 const std::vector<Device*>& read_devices);
  static Result<std::vector<Place>> Layout(const std::vector<Device*>& devices,
                                           uint64_t region_size);
  static Result<ScanResult> ScanAll(const std::vector<Device*>& devices,
                                    const RegionLogOptions& options);
  // Newest record per key (highest generation, then offset) over all regions.
  static std::vector<ScannedRecord> NewestPerKey(const std::vector<RegionScan>& regions);
  // Recover: start with the scanned regions that hold records sealed, the others free.
  void Adopt(std::vector<RegionScan>& regions, uint64_t max_generation);

  // All under mu_.
  // Whether OpenRegionLocked can succeed now: an idle buffer and a free or sealed region.
  bool CanOpenLocked() const;
  Status OpenRegionLocked();
  // Seals the open region if it has records: hands it to the flusher (async) or writes it.
  Status SealOpenRegionLocked();
  // Ends the write of region r: sealed on success; on failure its records are dropped (the
  // callback reports them) and FILE_WRITE_FAIL is returned. Frees its buffer.
  Status FinishWriteLocked(uint32_t r, const Status& written);
  // ReadRanges, plus (verify_value) the value checksum of value_offset-0 ranges covering the
  // whole value, as Read() promises.
  std::vector<Status> ReadRangesImpl(const std::vector<RangeRead>& reads, bool verify_value,
                                     const RangeReady& on_ready);
  // The checks after one range's device read `io` (generation, IO status, header and key).
  Status FinishRangeRead(const RangeRead& read, const Status& io, uint64_t begin, uint64_t len,
                         bool verify_value);
  // INVALID_KEY / INVALID_PARAMS for a key or location that names nothing readable.
  Status CheckLocation(const DiskLocation& loc, std::string_view key) const;
  // CheckLocation, plus INVALID_PARAMS for a range outside the value or a bad dst.
  Status CheckRange(const RangeRead& read) const;
  // Copies the range from a write buffer if `read.loc` names the open or a flushing region
  // (same checks as a device read). Under mu_. Sets *handled when the location was one of
  // theirs.
  Status ReadBufferedLocked(const RangeRead& read, uint64_t begin, uint64_t len, bool verify_value,
                            bool* handled);
  // Checks the record header (and key) at the start of `rec` against the range.
  Status CheckHeader(const RangeRead& read, const uint8_t* rec, uint64_t len, bool verify_value,
                     bool from_buffer);
  Status Stale(const DiskLocation& loc);

  const std::vector<Device*> devices_;
  const std::vector<Device*> read_devices_;  // serve sealed reads; devices_ when not given
  const uint64_t region_size_;
  const RegionEvictionPolicy policy_;
  const RegionEvictedCallback on_region_evicted_;
  const uint32_t num_regions_;
  std::unique_ptr<Region[]> regions_;  // fixed after construction

  std::atomic<uint64_t> clock_{0};  // LRU ticks
  mutable Counters counters_;

  std::mutex mu_;  // serializes appends, flushes, evictions
  std::vector<WriteBuffer> buffers_;
  std::deque<uint32_t> queue_;        // buffers waiting for a flusher, in seal order
  uint64_t submitted_ = 0;            // regions handed to the flushers
  uint64_t completed_ = 0;            // of them, written (or failed)
  uint64_t unreported_failures_ = 0;  // failed background writes since the last Flush
  Status first_failure_;              // the first of them
  bool stop_ = false;
  std::condition_variable work_cv_;  // flushers: queue_ or stop_ changed
  std::condition_variable done_cv_;  // a write finished (a buffer or a region may be free)
  std::vector<uint32_t> free_;       // free regions, popped from the back (lowest first)
  int64_t open_ = -1;                // open region index, or -1
  uint64_t used_ = 0;                // bytes of the open region in use (a block multiple)
  uint64_t next_sequence_ = 0;       // of the next record in the open region
  uint64_t last_generation_ = 0;     // log-wide generation counter

  std::vector<std::thread> flushers_;  // last: started after everything else is built
};

}  // namespace tierkv
