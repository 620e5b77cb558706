// Value types of the master's calls (MasterApi, MasterService, RemoteMaster): replica
// locations, put and read answers, disk records, stats. Plain value types.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/disk_location.h"
#include "master/segment_registry.h"
#include "tierkv/types.h"

namespace tierkv {

struct ReplicaLocation {
  SegmentId segment = 0;
  ReplicaTier tier = ReplicaTier::kMemory;
  uint64_t offset = 0;  // memory replicas: offset in the segment
  uint64_t size = 0;    // object size (the allocation may be larger)
  DiskLocation disk{};  // disk replicas: the record in the segment owner's SSD tier
};

// A record found in an SSD tier at warm restart, to be registered as a disk replica.
struct DiskRecord {
  std::string key;
  DiskLocation location;
  uint64_t checksum = 0;
};

struct PutStartResult {
  uint64_t put_id = 0;
  std::vector<ReplicaLocation> replicas;
};

struct ObjectReplicas {
  uint64_t size = 0;
  uint64_t checksum = 0;
  std::vector<ReplicaLocation> replicas;
  SteadyTime lease_deadline{};  // reads finishing later fail with LEASE_EXPIRED
};

struct MasterStats {
  uint64_t objects = 0;
  uint64_t pending_objects = 0;
  uint64_t groups = 0;
  uint64_t evicted_objects = 0;
  uint64_t evicted_bytes = 0;
  uint64_t reclaimed_puts = 0;
  uint64_t lease_grants = 0;
  uint64_t demoted_objects = 0;  // moved to disk by eviction
  uint64_t demoted_bytes = 0;
  uint64_t demotion_failures = 0;      // objects dropped because their tier write failed
  uint64_t written_behind = 0;         // copied to disk ahead of eviction
  uint64_t disk_replicas_dropped = 0;  // their SSD region was reused
  uint64_t memory_replicas = 0;
  uint64_t disk_replicas = 0;
  uint64_t promoted_objects = 0;
  // Per-key read and write counts since the master started.
  uint64_t gets = 0;        // keys asked by GetReplicas (invalid keys included)
  uint64_t get_hits = 0;    // ... answered with replicas
  uint64_t get_misses = 0;  // ... absent, or pending (OBJECT_NOT_FOUND, REPLICA_IS_NOT_READY)
  uint64_t puts = 0;        // puts ended (PutEnd OK); promotions are not puts
  uint64_t removes = 0;     // objects removed by Remove and RemoveAll
  // Restart recovery (rebuilt from the stores' indexes) and what a previous master lost.
  uint64_t recovered_replicas = 0;  // memory and disk replicas adopted from stores' reports
  uint64_t recovered_bytes = 0;     // ... their memory bytes
  uint64_t recovery_rejected = 0;   // reported entries not adopted (conflicts, overlaps)
  uint64_t lost_puts = 0;  // PutEnds of puts a previous master started (not recovered: failed)
};

// Restart recovery of one segment: what its owner's index gave back at the segment's first
// stream (MasterService::OpenIndexLink), and how long it took.
struct SegmentRecovery {
  SegmentId segment = 0;
  std::string name;
  uint64_t links = 0;            // index streams linked so far (the first one adopts)
  uint64_t reported = 0;         // entries reported at the first link
  uint64_t memory_replicas = 0;  // adopted
  uint64_t disk_replicas = 0;    // adopted
  uint64_t bytes = 0;            // memory bytes adopted
  uint64_t rejected = 0;         // reported, not adopted
  double seconds = 0;            // first link: open to finish
  bool done = false;             // the first link finished (the segment is placeable)
};

// What a master tells its clients to use where their own config leaves it open
// (RegisterClientResponse.defaults; rpc/create_client.cc applies them).
struct ClientDefaults {
  std::string root_fs_dir;  // SSD tier directory for clients that enable one with no path
  bool promote_on_hit = false;
  uint32_t promote_min_hits = 0;  // 0 = the client's own promote_min_hits
};

}  // namespace tierkv
