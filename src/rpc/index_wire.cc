#include "rpc/index_wire.h"

namespace tierkv::wire {
namespace {

constexpr uint32_t kSoftPin = 1;
constexpr uint32_t kHardPin = 2;

void EncodeLocation(const DiskLocation& in, rpc::DiskLocation* out) {
  out->set_region(in.region);
  out->set_generation(in.generation);
  out->set_offset(in.offset);
  out->set_size(in.size);
}

DiskLocation DecodeLocation(const rpc::DiskLocation& in) {
  return DiskLocation{in.region(), in.generation(), in.offset(), in.size()};
}

}  // namespace

void EncodeIndexEntry(const IndexEntry& in, rpc::IndexEntry* out) {
  out->set_key(in.key);
  out->set_size(in.size);
  out->set_checksum(in.checksum);
  out->set_put_id(in.put_id);
  if (!in.group_id.empty()) out->set_group_id(in.group_id);
  const uint32_t flags = (in.soft_pin ? kSoftPin : 0) | (in.hard_pin ? kHardPin : 0);
  if (flags != 0) out->set_flags(flags);
  if (in.offset != 0) out->set_offset(in.offset);
  if (in.disk.generation != 0) EncodeLocation(in.disk, out->mutable_disk());
}

bool DecodeIndexEntry(const rpc::IndexEntry& in, IndexEntry* out) {
  if (in.key().empty() || in.size() == 0) return false;
  out->key = in.key();
  out->size = in.size();
  out->checksum = in.checksum();
  out->put_id = in.put_id();
  out->group_id = in.group_id();
  out->soft_pin = (in.flags() & kSoftPin) != 0;
  out->hard_pin = (in.flags() & kHardPin) != 0;
  out->offset = in.offset();
  out->disk = in.has_disk() ? DecodeLocation(in.disk()) : DiskLocation{};
  return true;
}

void EncodeIndexBatch(const IndexBatch& in, rpc::IndexBatch* out) {
  out->set_seq(in.seq);
  out->set_more(in.more);
  out->mutable_commits()->Reserve(static_cast<int>(in.commits.size()));
  for (const IndexEntry& e : in.commits) EncodeIndexEntry(e, out->add_commits());
  for (const IndexEntry& e : in.disk_attached) EncodeIndexEntry(e, out->add_disk_attached());
  out->mutable_frees()->Add(in.frees.begin(), in.frees.end());
  for (const DiskDrop& d : in.disk_dropped) {
    rpc::DiskDrop* o = out->add_disk_dropped();
    o->set_key(d.key);
    EncodeLocation(d.location, o->mutable_location());
  }
}

IndexBatch DecodeIndexBatch(const rpc::IndexBatch& in) {
  IndexBatch out;
  out.seq = in.seq();
  out.more = in.more();
  out.commits.reserve(static_cast<size_t>(in.commits_size()));
  IndexEntry e;
  for (const rpc::IndexEntry& m : in.commits()) {
    if (DecodeIndexEntry(m, &e)) out.commits.push_back(std::move(e));
  }
  for (const rpc::IndexEntry& m : in.disk_attached()) {
    if (DecodeIndexEntry(m, &e) && e.disk.generation != 0)
      out.disk_attached.push_back(std::move(e));
  }
  out.frees.assign(in.frees().begin(), in.frees().end());
  for (const rpc::DiskDrop& d : in.disk_dropped()) {
    out.disk_dropped.push_back(DiskDrop{d.key(), DecodeLocation(d.location())});
  }
  return out;
}

void DecodeIndexReport(const rpc::IndexReport& in, std::vector<IndexEntry>* memory,
                       std::vector<IndexEntry>* disk) {
  IndexEntry e;
  memory->reserve(memory->size() + static_cast<size_t>(in.memory_size()));
  for (const rpc::IndexEntry& m : in.memory()) {
    if (DecodeIndexEntry(m, &e)) memory->push_back(std::move(e));
  }
  for (const rpc::IndexEntry& m : in.disk()) {
    if (DecodeIndexEntry(m, &e) && e.disk.generation != 0) disk->push_back(std::move(e));
  }
}

}  // namespace tierkv::wire
