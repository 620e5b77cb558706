#include "master/object_map.h"

#include <algorithm>
#include <new>
#include <stdexcept>
#include <string>

#include "common/prefault.h"

namespace tierkv {

ObjectMap::ObjectMap() : index_(0, IndexHash{this}, IndexEq{this}) {}

ObjectMap::~ObjectMap() { clear(); }

uint32_t ObjectMap::NextLive(uint32_t from) const {
  for (uint32_t n = from; n < used_; ++n) {
    if (entry(n).first.holds()) return n;
  }
  return kNone;
}

void ObjectMap::EnsureChunk(uint32_t k) {
  // Chunks come in order: chunk k is needed only once every entry below it is used.
  if (k == chunks_.size()) {
    chunks_.push_back(static_cast<ObjectEntry*>(::operator new(ChunkBytes(k))));
  }
}

uint32_t ObjectMap::Allocate() {
  if (!free_.empty()) {
    const uint32_t n = free_.back();
    free_.pop_back();
    return n;
  }
  if (used_ == kNone - 1) throw std::length_error("object table shard full (2^32 - 2 entries)");
  const uint32_t k = ChunkOf(used_);
  EnsureChunk(k);
  new (&chunks_[k][used_ - ChunkStart(k)]) ObjectEntry();
  return used_++;
}

void ObjectMap::PrefaultEntries(size_t n) {
  const uint64_t end = std::min<uint64_t>(uint64_t{used_} + n, kNone - 1);
  for (uint64_t from = used_; from < end;) {
    const auto k = ChunkOf(static_cast<uint32_t>(from));
    EnsureChunk(k);
    const uint64_t chunk_end = std::min(end, ChunkStart(k + 1));
    PrefaultForWrite(&chunks_[k][from - ChunkStart(k)], (chunk_end - from) * sizeof(ObjectEntry),
                     /*huge_pages=*/false);
    from = chunk_end;
  }
}

std::pair<ObjectMap::iterator, bool> ObjectMap::emplace(std::string_view key, uint64_t hash,
                                                        ObjectMeta meta) {
  if (key.size() > StoredKey::kMaxLength) {
    throw std::length_error("object key of " + std::to_string(key.size()) + " bytes (at most " +
                            std::to_string(StoredKey::kMaxLength) + ")");
  }
  const HashedKey hk{key, hash};
  bool inserted = false;
  uint32_t number = kNone;
  auto i = index_.lazy_emplace(hk, [&](const auto& construct) {
    number = Allocate();
    ObjectEntry& e = entry(number);
    e.first = StoredKey(hash, keys_.Store(key), key.size());
    e.second = std::move(meta);
    construct(number);
    inserted = true;
  });
  return {iterator(this, inserted ? number : *i), inserted};
}

void ObjectMap::erase(iterator it) {
  const uint32_t n = it.number();
  ObjectEntry& e = entry(n);
  index_.erase(EntryAt{n, e.first.hash()});
  keys_.Free(e.first.data(), e.first.size());
  e.first = StoredKey{};
  e.second = ObjectMeta{};
  if (index_.empty()) {
    clear();  // the last one: give the entries' memory back
    return;
  }
  free_.push_back(n);
}

void ObjectMap::clear() {
  index_.clear();
  for (uint32_t n = 0; n < used_; ++n) entry(n).~ObjectEntry();
  for (uint32_t k = 0; k < chunks_.size(); ++k) ::operator delete(chunks_[k]);
  chunks_.clear();
  chunks_.shrink_to_fit();
  free_.clear();
  free_.shrink_to_fit();
  keys_.Clear();
  used_ = 0;
}

void ObjectMap::PrefetchEntry(uint64_t hash, EntryReads reads) const {
  auto i = index_.find(SlotProbe{hash});
  if (i == index_.end()) return;
  // The key's hash and address and the metadata the lookup reads (ObjectMeta's field order).
  const ObjectEntry& e = entry(*i);
  const char* p = reinterpret_cast<const char*>(&e);
  const char* end = reads == EntryReads::kLease
                        ? e.second.lease_fields_end()
                        : reinterpret_cast<const char*>(&e.second.replicas + 1);
  for (; p < end; p += 64) __builtin_prefetch(p, 1);
  __builtin_prefetch(end - 1, 1);
}

void ObjectMap::PrefetchKey(uint64_t hash) const {
  auto i = index_.find(HashOnly{hash});
  if (i == index_.end()) return;
  const StoredKey& key = entry(*i).first;
  const char* p = key.data();
  const size_t len = key.size();
  for (size_t off = 0; off < len && off < 256; off += 64) __builtin_prefetch(p + off);
  if (len > 0) __builtin_prefetch(p + len - 1);
}

}  // namespace tierkv
