// RegionLog's warm restart (ssd/region_log.h, Scan and Recover): the scan of every region of
// used devices for valid records (docs/disk-format.md, "Warm restart") and the adoption of
// what it finds. The append, flush and read paths are in region_log.cc.
#include <absl/container/flat_hash_map.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/checksum.h"
#include "ssd/record_format.h"
#include "ssd/region_log.h"
#include "tierkv/types.h"

namespace tierkv {

Result<RegionLog::ScanResult> RegionLog::ScanAll(const std::vector<Device*>& devices,
                                                 const RegionLogOptions& options) {
  auto places = Layout(devices, options.region_size);
  if (!places.ok()) return places.status();
  const uint64_t region_size = options.region_size;
  auto buffer = IoBuffer::Allocate(region_size, options.want_huge_pages);
  if (!buffer.ok()) return buffer.status();
  uint8_t* buf = buffer->data();

  ScanResult result;
  result.places = std::move(places).value();
  result.regions.resize(result.places.size());
  for (uint32_t r = 0; r < result.places.size(); ++r) {
    const Place& p = result.places[r];
    Status s = devices[p.device]->Read(p.base, buf, region_size);
    if (!s.ok()) {
      spdlog::warn("region log scan: region {} unreadable, skipped: {}", r, s.ToString());
      continue;
    }
    auto rh = DecodeRegionHeader(buf, kBlockSize);
    if (rh.ok()) result.max_generation = std::max(result.max_generation, rh->generation);
    if (!rh.ok() && rh.status().message().find("format version") != std::string::npos) {
      // A tier file of an older (or newer) tierkv: its records are laid out differently.
      spdlog::warn(
          "region log scan: region {} skipped, its objects are not recovered: {} (this "
          "build reads version {})",
          r, rh.status().message(), kDiskFormatVersion);
    }
    // Every checksum-valid record header at a block boundary bounds the generations a new
    // tenant must not reuse: leftover records past its own would otherwise look like its own.
    for (uint64_t off = kFirstRecordOffset; off + kRecordHeaderSize <= region_size;
         off += kBlockSize) {
      auto h = DecodeRecordHeader(buf + off, kRecordHeaderSize);
      if (h.ok()) result.max_generation = std::max(result.max_generation, h->generation);
    }
    if (!rh.ok() || rh->region_index != r || rh->region_size != region_size ||
        rh->generation == 0) {
      continue;  // never written, or not a region of this layout
    }
    RegionScan& region = result.regions[r];
    region.generation = rh->generation;
    uint64_t off = kFirstRecordOffset;
    uint64_t sequence = 0;  // of the record expected at `off`
    uint64_t skipped = 0;
    while (off + kRecordHeaderSize <= region_size) {
      const uint8_t* rec = buf + off;
      auto h = DecodeRecordHeader(rec, region_size - off);
      // A bad header is the end of the region's log (zeroes or a torn write); one of another
      // generation is a previous tenant's record past this tenant's last one; one out of
      // sequence is not the record appended here.
      if (!h.ok() || h->generation != rh->generation || h->sequence != sequence ||
          h->key_size > kMaxKeyLength || h->value_size > region_size) {
        break;
      }
      const uint64_t span = RecordSpan(h->key_size, h->value_size);
      if (span > region_size - off) break;
      std::string key(reinterpret_cast<const char*>(rec + kRecordHeaderSize), h->key_size);
      const uint8_t* value = rec + RecordValueOffset(h->key_size, h->value_size);
      if (RecordKeyHash(key) != h->key_hash ||
          Checksum(value, h->value_size) != h->value_checksum) {
        // Torn (part of the region's write missing) or bytes that changed before they were
        // written: this record is lost. Its header is intact (its checksum covers the sizes),
        // so the next record's place is known, and that record is checked on its own.
        ++skipped;
      } else {
        region.records.push_back(ScannedRecord{std::move(key),
                                               DiskLocation{r, rh->generation, off, h->value_size},
                                               h->value_checksum});
      }
      off += span;
      ++sequence;
    }
    if (skipped > 0) {
      spdlog::warn(
          "region log scan: region {}: {} record(s) whose key or value does not match its "
          "checksum skipped, {} kept",
          r, skipped, region.records.size());
    }
  }
  return result;
}

std::vector<ScannedRecord> RegionLog::NewestPerKey(const std::vector<RegionScan>& regions) {
  std::vector<ScannedRecord> out;
  absl::flat_hash_map<std::string, size_t> index;  // key -> position in out
  for (const RegionScan& region : regions) {
    for (const ScannedRecord& found : region.records) {
      auto [it, inserted] = index.try_emplace(found.key, out.size());
      if (inserted) {
        out.push_back(found);
        continue;
      }
      ScannedRecord& old = out[it->second];
      if (std::pair(found.location.generation, found.location.offset) >
          std::pair(old.location.generation, old.location.offset)) {
        old = found;
      }
    }
  }
  return out;
}

Result<std::vector<ScannedRecord>> RegionLog::Scan(const std::vector<Device*>& devices,
                                                   const RegionLogOptions& options) {
  auto scanned = ScanAll(devices, options);
  if (!scanned.ok()) return scanned.status();
  return NewestPerKey(scanned->regions);
}

Result<std::unique_ptr<RegionLog>> RegionLog::Recover(std::vector<Device*> devices,
                                                      const RegionLogOptions& options,
                                                      RegionEvictedCallback on_region_evicted,
                                                      std::vector<ScannedRecord>* surviving,
                                                      std::vector<Device*> read_devices) {
  auto places = Layout(devices, options.region_size);
  if (!places.ok()) return places.status();
  Status s = CheckReadDevices(devices, read_devices);
  if (!s.ok()) return s;
  auto scanned = ScanAll(devices, options);
  if (!scanned.ok()) return scanned.status();
  auto buffers = AllocateBuffers(options);
  if (!buffers.ok()) return buffers.status();
  std::unique_ptr<RegionLog> log(
      new RegionLog(std::move(devices), std::move(read_devices), scanned->places, options,
                    std::move(on_region_evicted), std::move(buffers).value()));
  if (surviving != nullptr) *surviving = NewestPerKey(scanned->regions);
  log->Adopt(scanned->regions, scanned->max_generation);
  s = log->Start();
  if (!s.ok()) return s;
  return log;
}

void RegionLog::Adopt(std::vector<RegionScan>& regions, uint64_t max_generation) {
  std::lock_guard lock(mu_);
  std::vector<uint32_t> sealed;
  free_.clear();
  for (uint32_t r = num_regions_; r > 0; --r) {
    const uint32_t i = r - 1;
    if (regions[i].generation == 0 || regions[i].records.empty()) {
      free_.push_back(i);  // popped from the back: lowest index first
      continue;
    }
    Region& reg = regions_[i];
    reg.state = State::kSealed;
    reg.generation = regions[i].generation;
    reg.keys.clear();
    reg.keys.reserve(regions[i].records.size());
    for (ScannedRecord& rec : regions[i].records) reg.keys.push_back(std::move(rec.key));
    sealed.push_back(i);
  }
  // LRU starts in generation order too: the oldest recovered region has the oldest tick.
  std::sort(sealed.begin(), sealed.end(), [this](uint32_t a, uint32_t b) {
    return std::pair(regions_[a].generation, a) < std::pair(regions_[b].generation, b);
  });
  for (uint32_t i : sealed) {
    Region& reg = regions_[i];
    reg.last_access.store(clock_.fetch_add(1) + 1);
    reg.sealed_generation.store(reg.generation);
  }
  last_generation_ = max_generation;
}

}  // namespace tierkv
