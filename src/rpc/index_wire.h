// Conversions between the segment index's types (master/segment_index_types.h) and their
// messages in proto/tierkv/master.proto (IndexEntry, IndexBatch, IndexReport). Decoders trust
// nothing: a malformed entry (no key, a disk entry without a location) is dropped, never
// invented. Thread-safety: free functions over values.
#pragma once

#include <vector>

#include "master/segment_index_types.h"
#include "tierkv/master.pb.h"

namespace tierkv::wire {

void EncodeIndexEntry(const IndexEntry& in, rpc::IndexEntry* out);
// False for an entry without a key or size.
bool DecodeIndexEntry(const rpc::IndexEntry& in, IndexEntry* out);
void EncodeIndexBatch(const IndexBatch& in, rpc::IndexBatch* out);
IndexBatch DecodeIndexBatch(const rpc::IndexBatch& in);
// Appends the valid entries of `in` to `memory` and `disk`.
void DecodeIndexReport(const rpc::IndexReport& in, std::vector<IndexEntry>* memory,
                       std::vector<IndexEntry>* disk);

}  // namespace tierkv::wire
