#include "ssd/ssd_tier.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "common/unique_fd.h"
#include "ssd/record_format.h"

namespace tierkv {
namespace {

Status ConfigError(const std::string& what) {
  return Status(ErrorCode::INVALID_CONFIG, "ssd tier: " + what);
}

Status Validate(const SsdTierOptions& o) {
  if (o.paths.empty()) return ConfigError("no paths: give at least one tier file path");
  std::set<std::string> seen;
  for (const std::string& p : o.paths) {
    if (p.empty()) return ConfigError("a tier file path is empty");
    if (!seen.insert(p).second) return ConfigError("path " + p + " is given twice");
  }
  if (o.region_size % kBlockSize != 0 || o.region_size < 2 * kBlockSize) {
    return ConfigError("region_size " + std::to_string(o.region_size) +
                       " must be a multiple of 4096 and at least 8192");
  }
  if (!o.block_devices && o.capacity_per_path < o.region_size) {
    return ConfigError("capacity_per_path " + std::to_string(o.capacity_per_path) +
                       " is smaller than one region (" + std::to_string(o.region_size) + " bytes)");
  }
  if (o.staging.capacity == 0) return ConfigError("staging capacity must be positive");
  if (o.staging.ttl.count() <= 0) return ConfigError("staging ttl must be positive");
  if (o.staging.wait.count() < 0) return ConfigError("staging wait must not be negative");
  if (o.staging.clock == nullptr) return ConfigError("staging clock is null");
  if (o.device.queue_depth == 0 || o.device.num_rings == 0) {
    return ConfigError("device queue_depth and num_rings must be positive");
  }
  return Status::Ok();
}

// A second, buffered fd on the very file `file` has open (not whatever its path names now).
Result<UniqueFd> OpenBufferedReadFd(const TierFile& file) {
  struct stat ours {};
  if (fstat(file.fd(), &ours) != 0) {
    return Status(ErrorCode::FILE_OPEN_FAIL,
                  "tier file " + file.path() + ": fstat: " + std::strerror(errno));
  }
  // /proc/self/fd/N reopens the inode itself; without /proc, reopen the path (not following
  // a link) and make sure it is still the same file.
  const std::string proc = "/proc/self/fd/" + std::to_string(file.fd());
  int fd = open(proc.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fd = open(file.path().c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    return Status(
        ErrorCode::FILE_OPEN_FAIL,
        "tier file " + file.path() + ": cannot open for page-cache reads: " + std::strerror(errno));
  }
  UniqueFd owned(fd);
  struct stat named {};
  if (fstat(fd, &named) != 0 || named.st_dev != ours.st_dev || named.st_ino != ours.st_ino) {
    return Status(ErrorCode::FILE_OPEN_FAIL,
                  "tier file " + file.path() +
                      ": the path no longer names the tier file; page-cache reads refused");
  }
  return owned;
}

// Zeroes the first block of every whole region of a raw device, so that no region header of an
// earlier run survives a fresh (non warm-restart) start.
Status ClearRegionHeaders(const TierFile& device, uint64_t region_size) {
  void* zero = nullptr;
  if (posix_memalign(&zero, kBlockSize, kBlockSize) != 0) {
    return Status(ErrorCode::INTERNAL_ERROR, "ssd tier: cannot allocate a block");
  }
  std::memset(zero, 0, kBlockSize);
  Status out;
  for (uint64_t at = 0; at + region_size <= device.capacity(); at += region_size) {
    if (pwrite(device.fd(), zero, kBlockSize, static_cast<off_t>(at)) !=
        static_cast<ssize_t>(kBlockSize)) {
      out = Status(ErrorCode::FILE_WRITE_FAIL,
                   "tier device " + device.path() + ": clearing the region header at offset " +
                       std::to_string(at) + ": " + std::strerror(errno));
      break;
    }
  }
  std::free(zero);
  if (out.ok() && fdatasync(device.fd()) != 0) {
    out = Status(ErrorCode::FILE_WRITE_FAIL,
                 "tier device " + device.path() + ": fdatasync: " + std::strerror(errno));
  }
  return out;
}

}  // namespace

struct SsdTier::Impl {
  SsdTierOptions options;
  // Declared in the order they are built; destroyed in reverse, so the log goes before the
  // devices it borrows, and the devices before the fds they borrow.
  std::vector<TierFile> files;
  std::vector<UniqueFd> read_fds;
  std::vector<std::unique_ptr<Device>> devices;
  std::vector<std::unique_ptr<Device>> read_devices;
  std::unique_ptr<RegionLog> log;
  std::unique_ptr<StagingArea> staging;
  std::atomic<uint64_t> staged_pieces{0}, staged_bytes{0}, stage_errors{0};
  std::atomic<uint64_t> direct_reads{0}, direct_bytes{0}, direct_errors{0};

  Result<std::unique_ptr<Device>> Wrap(Result<std::unique_ptr<Device>> device) const {
    if (!device.ok() || !options.TEST_wrap_device) return device;
    std::unique_ptr<Device> wrapped = options.TEST_wrap_device(std::move(device).value());
    if (wrapped == nullptr) return Status(ErrorCode::INTERNAL_ERROR, "TEST_wrap_device: null");
    return wrapped;
  }
};

Result<std::unique_ptr<SsdTier>> SsdTier::Open(const SsdTierOptions& options,
                                               RegionEvictedCallback on_region_evicted,
                                               std::vector<ScannedRecord>* surviving) {
  Status s = Validate(options);
  if (!s.ok()) return s;
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  const uint64_t file_capacity =
      options.capacity_per_path / options.region_size * options.region_size;  // whole regions only
  bool any_existing = false;
  std::vector<bool> created;
  for (const std::string& path : options.paths) {
    TierFileOptions fo;
    fo.capacity = file_capacity;
    fo.allow_buffered_fallback = options.allow_buffered_fallback;
    // Kept only once Open succeeds (below): a failed Open leaves no new file behind.
    fo.remove_on_close = true;
    struct stat st {};
    Result<TierFile> file = TierFile();
    if (options.block_devices) {
      file = TierFile::OpenBlockDevice(path);
      if (file.ok() && file->capacity() < options.region_size) {
        return ConfigError("tier device " + path + " has " + std::to_string(file->capacity()) +
                           " bytes, fewer than one region (" + std::to_string(options.region_size) +
                           " bytes)");
      }
      if (file.ok() && !options.warm_restart) {
        if (Status cleared = ClearRegionHeaders(*file, options.region_size); !cleared.ok()) {
          return cleared;
        }
      }
      any_existing = any_existing || options.warm_restart;
      created.push_back(false);
    } else if (options.warm_restart && lstat(path.c_str(), &st) == 0) {
      fo.remove_on_close = false;  // another run's data: never removed by a failed Open
      file = TierFile::OpenExisting(path, fo);
      any_existing = true;
      created.push_back(false);
    } else {
      file = TierFile::Create(path, fo);
      created.push_back(true);
    }
    if (!file.ok()) return file.status();
    impl->files.push_back(std::move(file).value());
  }
  std::vector<Device*> devices;
  std::vector<Device*> read_devices;
  for (const TierFile& file : impl->files) {
    auto device = impl->Wrap(OpenDevice(file, options.device));
    if (!device.ok()) return device.status();
    impl->devices.push_back(std::move(device).value());
    devices.push_back(impl->devices.back().get());
    if (!options.page_cache_reads) continue;
    if (!file.direct_io()) {
      read_devices.push_back(devices.back());  // already buffered: the same fd will do
      continue;
    }
    auto fd = OpenBufferedReadFd(file);
    if (!fd.ok()) return fd.status();
    impl->read_fds.push_back(std::move(fd).value());
    auto reader = impl->Wrap(
        OpenDevice(impl->read_fds.back().get(), file.capacity(), file.alignment(), options.device));
    if (!reader.ok()) return reader.status();
    impl->read_devices.push_back(std::move(reader).value());
    read_devices.push_back(impl->read_devices.back().get());
  }

  RegionLogOptions lo;
  lo.region_size = options.region_size;
  lo.eviction = options.eviction;
  lo.want_huge_pages = options.want_huge_pages;
  // One buffer being filled while each device writes one: striping over several drives needs
  // a write in flight on each (memory: (paths + 1) x offload_region_size).
  lo.write_buffers = static_cast<uint32_t>(std::max<size_t>(2, devices.size() + 1));
  Result<std::unique_ptr<RegionLog>> log = std::unique_ptr<RegionLog>();
  if (any_existing) {
    log = RegionLog::Recover(devices, lo, std::move(on_region_evicted), surviving, read_devices);
  } else {
    if (surviving != nullptr) surviving->clear();
    log = RegionLog::Create(devices, lo, std::move(on_region_evicted), read_devices);
  }
  if (!log.ok()) return log.status();
  impl->log = std::move(log).value();

  StagingOptions so = options.staging;
  so.want_huge_pages = so.want_huge_pages && options.want_huge_pages;
  auto staging = StagingArea::Create(so);
  if (!staging.ok()) return staging.status();
  impl->staging = std::move(staging).value();

  for (size_t i = 0; i < impl->files.size(); ++i) {
    if (created[i]) impl->files[i].set_remove_on_close(!options.warm_restart);
  }
  spdlog::info("ssd tier: {} {} of {} bytes, {} regions of {} bytes, {} reads, staging {} bytes{}",
               impl->files.size(), options.block_devices ? "block device(s)" : "file(s)",
               options.block_devices ? impl->files.front().capacity() : file_capacity,
               impl->log->num_regions(), options.region_size,
               options.page_cache_reads ? "page-cache" : "direct", impl->staging->capacity(),
               any_existing ? ", warm restart" : "");
  std::unique_ptr<SsdTier> tier(new SsdTier());
  tier->impl_ = std::move(impl);
  return tier;
}

SsdTier::~SsdTier() {
  if (impl_ == nullptr || impl_->log == nullptr || !impl_->options.warm_restart) return;
  // Records still in the open buffer would be lost to the next run.
  Status s = impl_->log->Flush();
  if (!s.ok()) spdlog::warn("ssd tier: flush at shutdown failed: {}", s.ToString());
}

Result<DiskLocation> SsdTier::Append(std::string_view key, const std::vector<ConstPiece>& value,
                                     std::optional<uint64_t> value_checksum) {
  return impl_->log->Append(key, value, value_checksum);
}

Status SsdTier::Flush() { return impl_->log->Flush(); }

bool SsdTier::Holds(const DiskLocation& location) { return impl_->log->Holds(location); }

Result<StageResult> SsdTier::Stage(const std::vector<StageRequest>& requests,
                                   const PieceReady& on_piece) {
  if (requests.empty()) return Status(ErrorCode::INVALID_PARAMS, "ssd tier: empty stage batch");
  const uint64_t budget = impl_->staging->capacity();
  StageResult result;
  result.pieces.resize(requests.size());
  std::vector<uint64_t> need(requests.size(), 0);
  uint64_t total = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    const StageRequest& r = requests[i];
    if (r.length == 0 || r.value_offset > r.location.size ||
        r.length > r.location.size - r.value_offset) {
      result.pieces[i].status = Status(
          ErrorCode::INVALID_PARAMS,
          "ssd tier: range [" + std::to_string(r.value_offset) + ", +" + std::to_string(r.length) +
              ") is empty or outside the value of " + std::to_string(r.location.size) + " bytes");
      continue;
    }
    // Checked piece by piece, so the sum cannot overflow.
    if (r.length > budget || StagingNeed(r.length) > budget - total) {
      return Status(ErrorCode::OBJECT_TOO_LARGE,
                    "ssd tier: the batch needs more than the staging capacity of " +
                        std::to_string(budget) + " bytes (at piece " + std::to_string(i) +
                        "); split it, StagingNeed(length) bytes per piece");
    }
    need[i] = StagingNeed(r.length);
    total += need[i];
  }
  std::optional<StagingArea::Reservation> reservation;
  if (total > 0) {
    auto reserved = impl_->staging->Reserve(total);
    if (!reserved.ok()) return reserved.status();
    reservation = *reserved;
    result.ticket = reserved->ticket;
  }
  // From here every piece is reported to on_piece exactly once.
  for (size_t i = 0; i < requests.size(); ++i) {
    if (need[i] == 0 && on_piece) on_piece(i, result.pieces[i]);
  }
  if (reservation) {
    std::vector<RangeRead> reads;
    std::vector<size_t> index;  // request of each read
    std::vector<const uint8_t*> values(requests.size(), nullptr);
    uint64_t cursor = 0;
    for (size_t i = 0; i < requests.size(); ++i) {
      if (need[i] == 0) continue;
      const StageRequest& r = requests[i];
      reads.push_back(RangeRead{r.location, r.key, r.value_offset, r.length,
                                reservation->data + cursor, &values[i]});
      index.push_back(i);
      cursor += need[i];  // a multiple of 4096: every piece starts aligned
    }
    std::atomic<uint64_t> bytes{0};
    // Each piece is filled in (and handed to on_piece) as soon as its read is checked.
    (void)impl_->log->ReadRanges(reads, [&](size_t k, const Status& status) {
      StagedPiece& piece = result.pieces[index[k]];
      piece.status = status;
      if (status.ok()) {
        piece.data = values[index[k]];
        piece.staging_offset = static_cast<uint64_t>(piece.data - impl_->staging->base());
        bytes.fetch_add(reads[k].length, std::memory_order_relaxed);
      }
      if (on_piece) on_piece(index[k], piece);
    });
    impl_->staged_bytes.fetch_add(bytes.load());
  }
  uint64_t failed = 0;
  for (const StagedPiece& piece : result.pieces) {
    if (!piece.status.ok()) ++failed;
  }
  impl_->staged_pieces.fetch_add(requests.size() - failed);
  impl_->stage_errors.fetch_add(failed);
  if (failed == requests.size() && result.ticket != 0) {
    // Nothing to copy out: give the budget back now rather than at the requester's Release.
    Status s = impl_->staging->Release(result.ticket);
    if (!s.ok()) spdlog::warn("ssd tier: releasing an all-failed stage: {}", s.ToString());
    result.ticket = 0;
  }
  return result;
}

bool SsdTier::DirectReadable(const DiskLocation& location, const std::vector<MutPiece>& dst) {
  uint64_t offset = 0;
  for (const MutPiece& p : dst) {
    if (offset >= location.size || p.size > location.size - offset ||
        !RegionLog::DirectReadable(location.size, offset, p.size, p.ptr)) {
      return false;
    }
    offset += p.size;
  }
  return offset == location.size;
}

std::vector<Status> SsdTier::ReadDirect(const std::vector<DirectRequest>& requests,
                                        const std::function<void(size_t, const Status&)>& on_done) {
  std::vector<Status> out(requests.size());
  std::vector<RangeRead> reads;
  std::vector<size_t> owner;                        // request of each read
  std::vector<size_t> pending(requests.size(), 0);  // pieces not yet read, per request
  for (size_t i = 0; i < requests.size(); ++i) {
    const DirectRequest& r = requests[i];
    if (!DirectReadable(r.location, r.dst)) {
      out[i] = Status(ErrorCode::INVALID_PARAMS,
                      "ssd tier: a direct read needs a value of at least " +
                          std::to_string(kAlignedValueMin) + " bytes, a multiple of 4096, and " +
                          "4096-aligned destination pieces adding up to it (value of " +
                          std::to_string(r.location.size) + " bytes)");
      if (on_done) on_done(i, out[i]);
      continue;
    }
    uint64_t offset = 0;
    for (const MutPiece& p : r.dst) {
      RangeRead read{r.location, r.key, offset, p.size, static_cast<uint8_t*>(p.ptr), nullptr};
      read.value_only = true;
      reads.push_back(read);
      owner.push_back(i);
      ++pending[i];
      offset += p.size;
    }
  }
  if (!reads.empty()) {
    std::mutex mu;  // pieces of one request may complete on different devices' threads
    (void)impl_->log->ReadRanges(reads, [&](size_t k, const Status& status) {
      const size_t i = owner[k];
      {
        std::lock_guard lock(mu);
        if (!status.ok() && out[i].ok()) out[i] = status;
        if (--pending[i] != 0) return;
      }
      // The last piece: out[i] is final, and no other thread touches it any more.
      if (on_done) on_done(i, out[i]);
    });
  }
  uint64_t failed = 0, bytes = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    if (out[i].ok()) {
      bytes += requests[i].location.size;
    } else {
      ++failed;
    }
  }
  impl_->direct_reads.fetch_add(requests.size() - failed);
  impl_->direct_bytes.fetch_add(bytes);
  impl_->direct_errors.fetch_add(failed);
  return out;
}

Status SsdTier::Release(uint64_t ticket) { return impl_->staging->Release(ticket); }

bool SsdTier::Held(uint64_t ticket) const { return impl_->staging->Held(ticket); }

size_t SsdTier::ReclaimExpired() { return impl_->staging->ReclaimExpired(); }

uint64_t SsdTier::staging_capacity() const { return impl_->staging->capacity(); }

uint64_t SsdTier::capacity() const {
  return uint64_t{impl_->log->num_regions()} * impl_->log->region_size();
}

SsdTierStats SsdTier::stats() const {
  SsdTierStats s;
  s.log = impl_->log->stats();
  s.staging = impl_->staging->stats();
  s.staged_pieces = impl_->staged_pieces.load();
  s.staged_bytes = impl_->staged_bytes.load();
  s.stage_errors = impl_->stage_errors.load();
  s.direct_reads = impl_->direct_reads.load();
  s.direct_bytes = impl_->direct_bytes.load();
  s.direct_errors = impl_->direct_errors.load();
  return s;
}

RegionLog& SsdTier::log() { return *impl_->log; }

}  // namespace tierkv
