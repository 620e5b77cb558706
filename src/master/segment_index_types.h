// The entries of a store's segment index and the batches that keep it current.
//
// A store that contributes a segment keeps, for that segment, an index of the objects the master
// made readable in it (its memory replicas) and of the records of its SSD tier the master
// attached as disk replicas (store/segment_index.h). The master feeds it (master/segment_feed.h):
// every commit, free and disk-replica change of the segment goes into an IndexBatch, in order,
// and the store applies each batch and acknowledges its sequence number. When a (new) master
// registers the store, the store reports its index and the master rebuilds those objects from
// it (docs/architecture.md, "Surviving the master"). Plain value types.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/disk_location.h"

namespace tierkv {

// What the master needs to serve an object again, and where it is on the segment: `offset` for
// a memory replica, `disk` for a disk replica in the segment owner's SSD tier.
struct IndexEntry {
  std::string key;
  uint64_t size = 0;
  uint64_t checksum = 0;  // xxh3-64 recorded at PutEnd
  uint64_t put_id = 0;    // the put that created the object (replicas of one put share it)
  std::string group_id;   // "" = ungrouped
  bool soft_pin = false;
  bool hard_pin = false;
  uint64_t offset = 0;  // memory replicas
  DiskLocation disk{};  // disk replicas
};

// A disk replica the master dropped: the record at `location` no longer backs `key`.
struct DiskDrop {
  std::string key;
  DiskLocation location;
};

// One step of a segment's index, applied in this order: `commits` (memory replicas made
// readable, by offset), `disk_attached` (by key), then `frees` (offsets whose memory replica is
// gone) and `disk_dropped` (exact key and location). The order is safe because a freed range is
// never reused before the batch carrying its free is acknowledged: no offset is freed and then
// committed again within one batch.
struct IndexBatch {
  uint64_t seq = 0;  // > 0; acknowledged by the store once applied
  // A large batch goes in several parts of one seq (each applied as it comes, in order); only
  // its last part (more == false) is acknowledged.
  bool more = false;
  std::vector<IndexEntry> commits;
  std::vector<IndexEntry> disk_attached;
  std::vector<uint64_t> frees;
  std::vector<DiskDrop> disk_dropped;
  bool empty() const {
    return commits.empty() && disk_attached.empty() && frees.empty() && disk_dropped.empty();
  }
  size_t events() const {
    return commits.size() + disk_attached.size() + frees.size() + disk_dropped.size();
  }
};

// A store's index as it reports it to a master: memory replicas (checked against their
// checksums first) and disk replicas (whose region still holds their generation).
struct IndexReport {
  std::vector<IndexEntry> memory;
  std::vector<IndexEntry> disk;
};

}  // namespace tierkv
