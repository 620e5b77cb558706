#include "ssd/region_log.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <system_error>
#include <thread>
#include <utility>

#include "common/checksum.h"
#include "ssd/record_format.h"
#include "tierkv/types.h"

namespace tierkv {
namespace {

std::string Where(const DiskLocation& loc) {
  return "region " + std::to_string(loc.region) + " offset " + std::to_string(loc.offset) +
         " generation " + std::to_string(loc.generation);
}

// Copies `size` bytes of `src` over `dst` in order; the caller checked the total fits.
void Scatter(const uint8_t* src, uint64_t size, const std::vector<MutPiece>& dst) {
  for (const auto& p : dst) {
    if (size == 0) break;
    const uint64_t n = std::min<uint64_t>(size, p.size);
    if (n > 0) std::memcpy(p.ptr, src, n);
    src += n;
    size -= n;
  }
}

struct FreeDeleter {
  void operator()(uint8_t* p) const { std::free(p); }
};

}  // namespace

Result<std::vector<RegionLog::Place>> RegionLog::Layout(const std::vector<Device*>& devices,
                                                        uint64_t region_size) {
  if (devices.empty()) return Status(ErrorCode::INVALID_PARAMS, "region log: no devices");
  if (region_size % kBlockSize != 0 || region_size < 2 * kBlockSize) {
    return Status(ErrorCode::INVALID_PARAMS, "region log: region_size " +
                                                 std::to_string(region_size) +
                                                 " must be a multiple of 4096 and at least 8192");
  }
  std::vector<uint64_t> per_device;
  uint64_t rounds = 0;
  for (size_t d = 0; d < devices.size(); ++d) {
    if (devices[d] == nullptr) {
      return Status(ErrorCode::INVALID_PARAMS,
                    "region log: device " + std::to_string(d) + " is null");
    }
    if (kBlockSize % devices[d]->alignment() != 0) {
      return Status(ErrorCode::INVALID_PARAMS,
                    "region log: device " + std::to_string(d) + " alignment " +
                        std::to_string(devices[d]->alignment()) + " does not divide 4096");
    }
    per_device.push_back(devices[d]->size() / region_size);
    rounds = std::max(rounds, per_device.back());
  }
  // Round-robin striping; a device with fewer regions leaves the rotation when it is full.
  std::vector<Place> places;
  for (uint64_t k = 0; k < rounds; ++k) {
    for (size_t d = 0; d < devices.size(); ++d) {
      if (k < per_device[d]) places.push_back(Place{static_cast<uint32_t>(d), k * region_size});
    }
  }
  if (places.empty()) {
    return Status(ErrorCode::INVALID_PARAMS, "region log: no device holds one region of " +
                                                 std::to_string(region_size) + " bytes");
  }
  if (places.size() > std::numeric_limits<uint32_t>::max()) {
    return Status(ErrorCode::INVALID_PARAMS, "region log: too many regions");
  }
  return places;
}

Status RegionLog::CheckReadDevices(const std::vector<Device*>& devices,
                                   const std::vector<Device*>& read_devices) {
  if (read_devices.empty()) return Status::Ok();
  if (read_devices.size() != devices.size()) {
    return Status(ErrorCode::INVALID_PARAMS, "region log: " + std::to_string(read_devices.size()) +
                                                 " read devices for " +
                                                 std::to_string(devices.size()) + " devices");
  }
  for (size_t d = 0; d < devices.size(); ++d) {
    const Device* r = read_devices[d];
    if (r == nullptr || r->size() != devices[d]->size() || kBlockSize % r->alignment() != 0) {
      return Status(ErrorCode::INVALID_PARAMS,
                    "region log: read device " + std::to_string(d) +
                        " is null or differs from its device in size or alignment");
    }
  }
  return Status::Ok();
}

Result<std::unique_ptr<RegionLog>> RegionLog::Create(std::vector<Device*> devices,
                                                     const RegionLogOptions& options,
                                                     RegionEvictedCallback on_region_evicted,
                                                     std::vector<Device*> read_devices) {
  auto places = Layout(devices, options.region_size);
  if (!places.ok()) return places.status();
  Status s = CheckReadDevices(devices, read_devices);
  if (!s.ok()) return s;
  auto buffers = AllocateBuffers(options);
  if (!buffers.ok()) return buffers.status();
  std::unique_ptr<RegionLog> log(new RegionLog(std::move(devices), std::move(read_devices), *places,
                                               options, std::move(on_region_evicted),
                                               std::move(buffers).value()));
  s = log->Start();
  if (!s.ok()) return s;
  return log;
}

Result<std::vector<IoBuffer>> RegionLog::AllocateBuffers(const RegionLogOptions& options) {
  if (options.write_buffers == 0) {
    return Status(ErrorCode::INVALID_PARAMS, "region log: write_buffers must be at least 1");
  }
  std::vector<IoBuffer> buffers;
  for (uint32_t i = 0; i < options.write_buffers; ++i) {
    auto buffer = IoBuffer::Allocate(options.region_size, options.want_huge_pages);
    if (!buffer.ok()) return buffer.status();
    buffers.push_back(std::move(buffer).value());
  }
  return buffers;
}

Status RegionLog::Start() {
  if (!async()) return Status::Ok();
  // One writer per device (a region write is one large IO at queue depth 1), as many as the
  // buffers allow while one of them is being filled.
  const size_t writers = std::max<size_t>(1, std::min(devices_.size(), buffers_.size() - 1));
  try {
    for (size_t i = 0; i < writers; ++i) flushers_.emplace_back([this] { FlusherLoop(); });
  } catch (const std::system_error& e) {
    return Status(ErrorCode::INTERNAL_ERROR,
                  std::string("region log: cannot start a flusher thread: ") + e.what());
  }
  return Status::Ok();
}

RegionLog::~RegionLog() {
  if (flushers_.empty()) return;
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& t : flushers_) t.join();  // they write every region handed to them first
}

void RegionLog::FlusherLoop() {
  std::unique_lock lock(mu_);
  while (true) {
    work_cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, nothing left to write
    const uint32_t b = queue_.front();
    queue_.pop_front();
    const WriteBuffer& wb = buffers_[b];
    const auto r = static_cast<uint32_t>(wb.region);
    Device* device = devices_[regions_[r].device];
    const uint64_t base = regions_[r].base;
    const uint8_t* data = wb.mem.data();
    const uint64_t used = wb.used;
    // The buffer is only read from here on (readers copy from it under mu_), and no append
    // touches it until FinishWriteLocked frees it.
    lock.unlock();
    Status written = device->Write(base, data, used);
    lock.lock();
    Status s = FinishWriteLocked(r, written);
    if (!s.ok()) {
      if (unreported_failures_++ == 0) first_failure_ = std::move(s);
    }
    ++completed_;
    done_cv_.notify_all();
  }
}

RegionLog::RegionLog(std::vector<Device*> devices, std::vector<Device*> read_devices,
                     const std::vector<Place>& places, const RegionLogOptions& options,
                     RegionEvictedCallback cb, std::vector<IoBuffer> buffers)
    : devices_(std::move(devices)),
      read_devices_(read_devices.empty() ? devices_ : std::move(read_devices)),
      region_size_(options.region_size),
      policy_(options.eviction),
      on_region_evicted_(std::move(cb)),
      num_regions_(static_cast<uint32_t>(places.size())),
      regions_(std::make_unique<Region[]>(places.size())) {
  for (IoBuffer& b : buffers) buffers_.push_back(WriteBuffer{std::move(b)});
  for (uint32_t r = 0; r < num_regions_; ++r) {
    regions_[r].device = places[r].device;
    regions_[r].base = places[r].base;
  }
  // Popped from the back: region 0 first, so consecutive regions alternate devices.
  for (uint32_t r = num_regions_; r > 0; --r) free_.push_back(r - 1);
}

Result<DiskLocation> RegionLog::Append(std::string_view key, const std::vector<ConstPiece>& value,
                                       std::optional<uint64_t> value_checksum) {
  if (key.empty() || key.size() > kMaxKeyLength) {
    return Status(ErrorCode::INVALID_KEY,
                  "region log: key must be 1.." + std::to_string(kMaxKeyLength) + " bytes");
  }
  std::vector<ConstPiece> pieces;
  pieces.reserve(value.size());
  uint64_t value_size = 0;
  for (const auto& p : value) {
    if (p.size == 0) continue;  // also keeps null pointers of empty pieces away from memcpy
    if (p.ptr == nullptr) return Status(ErrorCode::INVALID_PARAMS, "region log: null value piece");
    if (value_size + p.size < value_size) {
      return Status(ErrorCode::INVALID_PARAMS, "region log: value size overflows");
    }
    value_size += p.size;
    pieces.push_back(p);
  }
  const uint64_t capacity = region_size_ - kFirstRecordOffset;
  if (value_size > capacity || RecordSpan(key.size(), value_size) > capacity) {
    return Status(ErrorCode::OBJECT_TOO_LARGE,
                  "region log: record of key " + std::to_string(key.size()) + " + value " +
                      std::to_string(value_size) + " bytes (+64 header, padded to 4096) exceeds " +
                      "the region capacity of " + std::to_string(capacity) +
                      " bytes (region_size - 4096)");
  }
  const uint64_t span = RecordSpan(key.size(), value_size);

  std::unique_lock lock(mu_);
  while (true) {
    if (open_ >= 0 && used_ + span > region_size_) {
      Status s = SealOpenRegionLocked();
      if (!s.ok()) return s;
    }
    if (open_ >= 0) break;
    if (!CanOpenLocked()) {
      // Every buffer (or every region) is busy with a write: wait for the oldest to finish.
      // Another Append may run meanwhile, so start over after the wait.
      if (completed_ == submitted_) {
        return Status(ErrorCode::INTERNAL_ERROR, "region log: no buffer or region to open");
      }
      counters_.buffer_waits.fetch_add(1);
      const uint64_t seen = completed_;
      done_cv_.wait(lock, [&] { return completed_ != seen; });
      continue;
    }
    Status s = OpenRegionLocked();
    if (!s.ok()) return s;
  }
  Region& reg = regions_[open_];
  uint8_t* rec = buffers_[reg.buffer].mem.data() + used_;
  const uint64_t value_at = RecordValueOffset(key.size(), value_size);
  std::memcpy(rec + kRecordHeaderSize, key.data(), key.size());
  // Zeroed padding: no stale bytes of an earlier region in the buffer reach the disk.
  std::memset(rec + kRecordHeaderSize + key.size(), 0, value_at - kRecordHeaderSize - key.size());
  const uint64_t body = value_at + value_size;
  // A known checksum saves a pass over the value (half of the copy's CPU time).
  const uint64_t copied_sum = GatherCopy(rec + value_at, pieces, !value_checksum.has_value());
  const uint64_t checksum = value_checksum.value_or(copied_sum);
  std::memset(rec + body, 0, span - body);
  RecordHeader h;
  h.key_size = static_cast<uint32_t>(key.size());
  h.value_size = value_size;
  h.value_checksum = checksum;
  h.generation = reg.generation;
  h.sequence = next_sequence_;
  h.key_hash = RecordKeyHash(key);
  EncodeRecordHeader(h, rec);

  DiskLocation loc{static_cast<uint32_t>(open_), reg.generation, used_, value_size};
  reg.keys.emplace_back(key);
  used_ += span;
  ++next_sequence_;
  counters_.appended_records.fetch_add(1);
  counters_.appended_bytes.fetch_add(value_size);
  return loc;
}

Status RegionLog::Flush() {
  std::unique_lock lock(mu_);
  Status s = SealOpenRegionLocked();
  if (!async()) return s;
  const uint64_t target = submitted_;
  done_cv_.wait(lock, [&] { return completed_ >= target; });
  if (unreported_failures_ == 0) return Status::Ok();
  std::string message = first_failure_.message();
  if (unreported_failures_ > 1) {
    message += " (and " + std::to_string(unreported_failures_ - 1) + " more failed region writes)";
  }
  unreported_failures_ = 0;
  first_failure_ = Status::Ok();
  return Status(ErrorCode::FILE_WRITE_FAIL, std::move(message));
}

bool RegionLog::CanOpenLocked() const {
  const bool idle_buffer = std::any_of(buffers_.begin(), buffers_.end(),
                                       [](const WriteBuffer& b) { return b.region < 0; });
  if (!idle_buffer) return false;
  if (!free_.empty()) return true;
  for (uint32_t i = 0; i < num_regions_; ++i) {
    if (regions_[i].state == State::kSealed) return true;
  }
  return false;
}

Status RegionLog::OpenRegionLocked() {
  int32_t b = -1;
  for (size_t i = 0; i < buffers_.size(); ++i) {
    if (buffers_[i].region < 0) {
      b = static_cast<int32_t>(i);
      break;
    }
  }
  if (b < 0) return Status(ErrorCode::INTERNAL_ERROR, "region log: no idle buffer");
  uint32_t r = 0;
  if (!free_.empty()) {
    r = free_.back();
    free_.pop_back();
  } else {
    // Every region is sealed or being written: evict the oldest sealed one.
    int64_t victim = -1;
    for (uint32_t i = 0; i < num_regions_; ++i) {
      const Region& c = regions_[i];
      if (c.state != State::kSealed) continue;
      if (victim < 0) {
        victim = i;
        continue;
      }
      const Region& v = regions_[victim];
      const bool older = policy_ == RegionEvictionPolicy::kFifo
                             ? c.generation < v.generation
                             : c.last_access.load() < v.last_access.load();
      if (older) victim = i;
    }
    if (victim < 0) return Status(ErrorCode::INTERNAL_ERROR, "region log: no region to reuse");
    r = static_cast<uint32_t>(victim);
    Region& v = regions_[r];
    // From here on readers of the old generation get OBJECT_NOT_FOUND; the new tenant's bytes
    // reach the device only at its flush (by the flusher, after this store), long after.
    v.sealed_generation.store(0);
    v.state = State::kFree;
    std::vector<std::string> keys = std::move(v.keys);
    v.keys.clear();
    counters_.evicted_regions.fetch_add(1);
    if (on_region_evicted_) on_region_evicted_(r, v.generation, std::move(keys));
  }
  Region& reg = regions_[r];
  reg.state = State::kOpen;
  reg.generation = ++last_generation_;
  reg.buffer = b;
  reg.keys.clear();
  WriteBuffer& wb = buffers_[b];
  wb.region = r;
  wb.used = 0;
  wb.records = 0;
  open_ = r;
  used_ = kFirstRecordOffset;
  next_sequence_ = 0;
  std::memset(wb.mem.data(), 0, kFirstRecordOffset);
  EncodeRegionHeader(RegionHeader{r, reg.generation, region_size_}, wb.mem.data());
  return Status::Ok();
}

Status RegionLog::SealOpenRegionLocked() {
  if (open_ < 0 || next_sequence_ == 0) return Status::Ok();
  const auto r = static_cast<uint32_t>(open_);
  Region& reg = regions_[r];
  WriteBuffer& wb = buffers_[reg.buffer];
  wb.used = used_;
  wb.records = next_sequence_;
  open_ = -1;
  if (async()) {
    reg.state = State::kFlushing;
    queue_.push_back(static_cast<uint32_t>(reg.buffer));
    ++submitted_;
    work_cv_.notify_one();
    return Status::Ok();
  }
  return FinishWriteLocked(r, devices_[reg.device]->Write(reg.base, wb.mem.data(), wb.used));
}

Status RegionLog::FinishWriteLocked(uint32_t r, const Status& s) {
  Region& reg = regions_[r];
  WriteBuffer& wb = buffers_[reg.buffer];
  const uint64_t records = wb.records;
  wb.region = -1;
  reg.buffer = -1;
  if (!s.ok()) {
    // The records never reached the disk: report them like an eviction and recycle the
    // region under a new generation, so their locations read OBJECT_NOT_FOUND.
    counters_.flush_errors.fetch_add(1);
    reg.state = State::kFree;
    std::vector<std::string> keys = std::move(reg.keys);
    reg.keys.clear();
    free_.push_back(r);
    if (on_region_evicted_) on_region_evicted_(r, reg.generation, std::move(keys));
    return Status(ErrorCode::FILE_WRITE_FAIL, "region log: flush of region " + std::to_string(r) +
                                                  " failed, its " + std::to_string(records) +
                                                  " records are dropped: " + s.message());
  }
  reg.state = State::kSealed;
  reg.last_access.store(clock_.fetch_add(1) + 1);
  reg.sealed_generation.store(reg.generation);
  counters_.flushes.fetch_add(1);
  return Status::Ok();
}

Status RegionLog::Stale(const DiskLocation& loc) {
  counters_.stale_reads.fetch_add(1);
  return Status(ErrorCode::OBJECT_NOT_FOUND, "region log: " + Where(loc) + " was reused");
}

namespace {

// The blocks a range needs, relative to the record start: [*begin, *begin + *len). A range at
// value offset 0 starts at the record (header and key are checked) unless it is value_only;
// a later one covers only its own value bytes.
void RangeBlocks(uint64_t key_size, uint64_t value_size, uint64_t value_offset, uint64_t length,
                 bool value_only, uint64_t* begin, uint64_t* len) {
  const uint64_t first = RecordValueOffset(key_size, value_size) + value_offset;
  *begin = value_offset == 0 && !value_only ? 0 : first & ~(kBlockSize - 1);
  *len = AlignUpToBlock(first + length) - *begin;
}

void RangeBlocks(const RangeRead& read, uint64_t* begin, uint64_t* len) {
  RangeBlocks(read.key.size(), read.loc.size, read.value_offset, read.length, read.value_only,
              begin, len);
}

// Where the range's first byte lands in its dst.
const uint8_t* RangeValue(const RangeRead& read, uint64_t begin) {
  return read.dst + (RecordValueOffset(read.key.size(), read.loc.size) + read.value_offset - begin);
}

}  // namespace

uint64_t RegionLog::RangeReadBytes(uint64_t key_size, uint64_t value_size, uint64_t value_offset,
                                   uint64_t length) {
  uint64_t begin = 0;
  uint64_t len = 0;
  RangeBlocks(key_size, value_size, value_offset, length, /*value_only=*/false, &begin, &len);
  return len;
}

bool RegionLog::DirectReadable(uint64_t value_size, uint64_t value_offset, uint64_t length,
                               const void* dst) {
  return RecordValueAligned(value_size) && value_offset % kBlockSize == 0 && length > 0 &&
         length % kBlockSize == 0 && reinterpret_cast<uintptr_t>(dst) % kBlockSize == 0;
}

bool RegionLog::Holds(const DiskLocation& loc) {
  if (loc.region >= num_regions_ || loc.generation == 0) return false;
  std::lock_guard lock(mu_);
  const Region& r = regions_[loc.region];
  return r.state != State::kFree && r.generation == loc.generation;
}

Status RegionLog::CheckLocation(const DiskLocation& loc, std::string_view key) const {
  if (key.empty() || key.size() > kMaxKeyLength) {
    return Status(ErrorCode::INVALID_KEY, "region log: bad key length");
  }
  if (loc.region >= num_regions_ || loc.generation == 0 || loc.offset % kBlockSize != 0 ||
      loc.offset < kFirstRecordOffset || loc.offset > region_size_ || loc.size > region_size_ ||
      RecordSpan(key.size(), loc.size) > region_size_ - loc.offset) {
    return Status(ErrorCode::INVALID_PARAMS, "region log: no such location: " + Where(loc));
  }
  return Status::Ok();
}

Status RegionLog::CheckRange(const RangeRead& read) const {
  const DiskLocation& loc = read.loc;
  Status s = CheckLocation(loc, read.key);
  if (!s.ok()) return s;
  if (read.value_offset > loc.size || read.length > loc.size - read.value_offset ||
      (read.length == 0 && read.value_offset != 0)) {
    return Status(ErrorCode::INVALID_PARAMS,
                  "region log: range [" + std::to_string(read.value_offset) + ", +" +
                      std::to_string(read.length) + ") is not inside the value of " +
                      std::to_string(loc.size) + " bytes at " + Where(loc));
  }
  if (read.dst == nullptr || reinterpret_cast<uintptr_t>(read.dst) % kBlockSize != 0) {
    return Status(ErrorCode::INVALID_PARAMS, "region log: range destination is null or not " +
                                                 std::to_string(kBlockSize) + "-aligned");
  }
  if (read.value_only && !DirectReadable(loc.size, read.value_offset, read.length, read.dst)) {
    return Status(ErrorCode::INVALID_PARAMS,
                  "region log: a value-only range needs a value of at least " +
                      std::to_string(kAlignedValueMin) + " bytes and an offset and length that " +
                      "are multiples of " + std::to_string(kBlockSize) + ": [" +
                      std::to_string(read.value_offset) + ", +" + std::to_string(read.length) +
                      ") of " + std::to_string(loc.size) + " bytes at " + Where(loc));
  }
  return Status::Ok();
}

Status RegionLog::CheckHeader(const RangeRead& read, const uint8_t* rec, uint64_t len,
                              bool verify_value, bool from_buffer) {
  const DiskLocation& loc = read.loc;
  auto h = DecodeRecordHeader(rec, len);
  if (!h.ok()) {
    // The open buffer holds only records this log wrote: a bad header there means the
    // location names no record. On the device it is corruption.
    if (from_buffer) {
      return Status(ErrorCode::OBJECT_NOT_FOUND, "region log: no record at " + Where(loc));
    }
    counters_.checksum_failures.fetch_add(1);
    return Status(ErrorCode::CHECKSUM_MISMATCH,
                  "region log: " + Where(loc) + ": " + h.status().message());
  }
  if (h->generation != loc.generation || h->key_size != read.key.size() ||
      h->value_size != loc.size || h->key_hash != RecordKeyHash(read.key)) {
    return Status(ErrorCode::OBJECT_NOT_FOUND,
                  "region log: no record of this key at " + Where(loc));
  }
  if (std::memcmp(rec + kRecordHeaderSize, read.key.data(), read.key.size()) != 0) {
    if (from_buffer) {
      return Status(ErrorCode::OBJECT_NOT_FOUND,
                    "region log: no record of this key at " + Where(loc));
    }
    counters_.checksum_failures.fetch_add(1);
    return Status(ErrorCode::CHECKSUM_MISMATCH,
                  "region log: " + Where(loc) + ": key bytes do not match the key hash");
  }
  // Staged reads skip this: the requester hashes the whole value once, against the object
  // checksum. Read() promises verified bytes, so it hashes here, in a write buffer too: a record
  // appended with the caller's checksum holds bytes the log never hashed.
  if (verify_value && read.value_offset == 0 && read.length == loc.size &&
      Checksum(rec + RecordValueOffset(read.key.size(), loc.size), loc.size) != h->value_checksum) {
    counters_.checksum_failures.fetch_add(1);
    return Status(ErrorCode::CHECKSUM_MISMATCH,
                  "region log: " + Where(loc) + ": value bytes do not match the checksum");
  }
  return Status::Ok();
}

Status RegionLog::ReadBufferedLocked(const RangeRead& read, uint64_t begin, uint64_t len,
                                     bool verify_value, bool* handled) {
  const DiskLocation& loc = read.loc;
  const Region& reg = regions_[loc.region];
  *handled = (reg.state == State::kOpen || reg.state == State::kFlushing) &&
             reg.generation == loc.generation;
  if (!*handled) return Status::Ok();
  const WriteBuffer& wb = buffers_[reg.buffer];
  const uint64_t used = reg.state == State::kOpen ? used_ : wb.used;
  // Same checks as a device read, on the bytes appended so far.
  if (loc.offset + kRecordHeaderSize > used) {
    return Status(ErrorCode::OBJECT_NOT_FOUND, "region log: no record at " + Where(loc));
  }
  const uint8_t* rec = wb.mem.data() + loc.offset;
  Status s = CheckHeader(read, rec, kRecordHeaderSize + read.key.size(), verify_value,
                         /*from_buffer=*/true);
  if (!s.ok()) return s;
  // The header matched, so the whole record (span <= used - offset) is in the buffer.
  if (read.value_only) {
    // Exactly the caller's bytes: dst may be the user's buffer, with no room around the range.
    std::memcpy(read.dst, rec + RecordValueOffset(read.key.size(), loc.size) + read.value_offset,
                read.length);
  } else {
    std::memcpy(read.dst, rec + begin, len);
  }
  if (read.value_out != nullptr) *read.value_out = RangeValue(read, begin);
  counters_.reads.fetch_add(1);
  return Status::Ok();
}

Status RegionLog::FinishRangeRead(const RangeRead& read, const Status& io, uint64_t begin,
                                  uint64_t len, bool verify_value) {
  Region& reg = regions_[read.loc.region];
  // Step 3: an unchanged sealed generation means no reuse (which zeroes it before any new
  // byte can be written) began before the read finished.
  if (reg.sealed_generation.load() != read.loc.generation) return Stale(read.loc);
  if (!io.ok()) {
    counters_.read_errors.fetch_add(1);
    return io;
  }
  if (read.value_offset == 0 && !read.value_only) {
    Status s = CheckHeader(read, read.dst, len, verify_value, /*from_buffer=*/false);
    if (!s.ok()) return s;
  }
  if (read.value_out != nullptr) *read.value_out = RangeValue(read, begin);
  reg.last_access.store(clock_.fetch_add(1) + 1);
  counters_.reads.fetch_add(1);
  return Status::Ok();
}

std::vector<Status> RegionLog::ReadRanges(const std::vector<RangeRead>& reads,
                                          const RangeReady& on_ready) {
  return ReadRangesImpl(reads, /*verify_value=*/false, on_ready);
}

std::vector<Status> RegionLog::ReadRangesImpl(const std::vector<RangeRead>& reads,
                                              bool verify_value, const RangeReady& on_ready) {
  std::vector<Status> out(reads.size());
  std::vector<uint64_t> begins(reads.size(), 0);
  std::vector<uint64_t> lens(reads.size(), 0);
  std::vector<std::vector<size_t>> per_device(devices_.size());  // indices into reads
  std::vector<size_t> not_sealed;
  auto ready = [&](size_t i) {
    if (on_ready) on_ready(i, out[i]);
  };
  for (size_t i = 0; i < reads.size(); ++i) {
    out[i] = CheckRange(reads[i]);
    if (!out[i].ok()) {
      ready(i);
      continue;
    }
    RangeBlocks(reads[i], &begins[i], &lens[i]);
    const Region& reg = regions_[reads[i].loc.region];
    // Step 1 of the reuse protocol: only a region sealed under this generation goes to disk.
    if (reg.sealed_generation.load() == reads[i].loc.generation) {
      per_device[reg.device].push_back(i);
    } else {
      not_sealed.push_back(i);
    }
  }
  if (!not_sealed.empty()) {
    std::vector<size_t> served;  // reported after the mutex is released
    {
      std::lock_guard lock(mu_);  // once for the whole batch
      for (size_t i : not_sealed) {
        bool handled = false;
        out[i] = ReadBufferedLocked(reads[i], begins[i], lens[i], verify_value, &handled);
        if (handled) {
          served.push_back(i);
          continue;
        }
        const Region& reg = regions_[reads[i].loc.region];
        if (reg.sealed_generation.load() == reads[i].loc.generation) {
          per_device[reg.device].push_back(i);  // sealed between the two checks
        } else {
          out[i] = Stale(reads[i].loc);
          served.push_back(i);
        }
      }
    }
    for (size_t i : served) ready(i);
  }

  // The checks after a range's IO; sets out[i] and reports it.
  auto finish = [&](size_t i, const Status& io) {
    out[i] = FinishRangeRead(reads[i], io, begins[i], lens[i], verify_value);
    ready(i);
  };
  // One batch per device, the devices in parallel, so every drive has reads in flight; each
  // range is checked and reported as its own read completes.
  auto run = [&](size_t d) {
    std::vector<IoRequest> requests;
    requests.reserve(per_device[d].size());
    for (size_t i : per_device[d]) {
      const Region& reg = regions_[reads[i].loc.region];
      requests.push_back(
          IoRequest{reg.base + reads[i].loc.offset + begins[i], reads[i].dst, lens[i]});
    }
    (void)read_devices_[d]->ReadBatch(
        requests, [&, d](size_t k, const Status& io) { finish(per_device[d][k], io); });
  };
  std::vector<size_t> busy;
  for (size_t d = 0; d < devices_.size(); ++d) {
    if (!per_device[d].empty()) busy.push_back(d);
  }
  std::vector<std::thread> helpers;
  for (size_t k = 1; k < busy.size(); ++k) {
    try {
      helpers.emplace_back(run, busy[k]);
    } catch (const std::system_error&) {
      run(busy[k]);  // no thread to spare: this device's batch runs on this thread
    }
  }
  if (!busy.empty()) run(busy[0]);
  for (auto& t : helpers) t.join();
  return out;
}

Status RegionLog::Read(const DiskLocation& loc, std::string_view key,
                       const std::vector<MutPiece>& dst) {
  Status s = CheckLocation(loc, key);
  if (!s.ok()) return s;
  uint64_t total = 0;
  for (const auto& p : dst) {
    if (p.size > 0 && p.ptr == nullptr) {
      return Status(ErrorCode::INVALID_PARAMS, "region log: null destination piece");
    }
    total += std::min<uint64_t>(p.size, loc.size);  // bounded: cannot overflow in practice
  }
  if (total < loc.size) {
    return Status(ErrorCode::BUFFER_OVERFLOW, "region log: destination holds " +
                                                  std::to_string(total) + " of " +
                                                  std::to_string(loc.size) + " bytes");
  }
  const uint64_t bytes = RangeReadBytes(key.size(), loc.size, 0, loc.size);
  std::unique_ptr<uint8_t, FreeDeleter> bounce(
      static_cast<uint8_t*>(std::aligned_alloc(kBlockSize, bytes)));
  if (!bounce) return Status(ErrorCode::INTERNAL_ERROR, "region log: out of memory for a read");
  const uint8_t* value = nullptr;
  const RangeRead read{loc, key, 0, loc.size, bounce.get(), &value};
  s = std::move(ReadRangesImpl({read}, /*verify_value=*/true, nullptr)[0]);
  // The caller's pieces are written only once every check passed.
  if (s.ok()) Scatter(value, loc.size, dst);
  return s;
}

RegionLogStats RegionLog::stats() const {
  RegionLogStats s;
  s.appended_records = counters_.appended_records.load();
  s.appended_bytes = counters_.appended_bytes.load();
  s.flushes = counters_.flushes.load();
  s.flush_errors = counters_.flush_errors.load();
  s.evicted_regions = counters_.evicted_regions.load();
  s.reads = counters_.reads.load();
  s.read_errors = counters_.read_errors.load();
  s.checksum_failures = counters_.checksum_failures.load();
  s.stale_reads = counters_.stale_reads.load();
  s.buffer_waits = counters_.buffer_waits.load();
  return s;
}

}  // namespace tierkv
