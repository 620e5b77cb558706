#include "master/key_arena.h"

#include <sanitizer/asan_interface.h>  // no-op macros unless built with ASan

#include <algorithm>
#include <new>

namespace tierkv {

char* KeyArena::Carve(uint32_t slot) {
  // A long key (past half the smallest block) gets a block of its own: any shorter one fits in
  // a fresh block of any size.
  if (slot > kFirstBlockBytes / 2) {
    char* own = static_cast<char*>(::operator new(slot, kBlockAlignment));
    blocks_.emplace_back(own, slot);
    reserved_ += slot;
    return own;
  }
  if (static_cast<size_t>(end_ - next_) < slot) {
    // The current block's tail (shorter than this slot) stays unused. Blocks double from
    // kFirstBlockBytes (a small shard stays small) to kBlockBytes.
    const size_t bytes = std::clamp(reserved_, kFirstBlockBytes, kBlockBytes);
    next_ = static_cast<char*>(::operator new(bytes, kBlockAlignment));
    blocks_.emplace_back(next_, bytes);
    reserved_ += bytes;
    end_ = next_ + bytes;
  }
  char* at = next_;
  next_ += slot;
  return at;
}

const char* KeyArena::Store(std::string_view key) {
  const uint32_t slot = SlotBytes(key.size());
  char* record = nullptr;
  if (auto f = free_.find(slot); f != free_.end()) {
    record = f->second;
    ASAN_UNPOISON_MEMORY_REGION(record, slot);
    char* after;
    std::memcpy(&after, record, sizeof after);
    if (after == nullptr) {
      free_.erase(f);
    } else {
      f->second = after;
    }
  } else {
    record = Carve(slot);
  }
  if (!key.empty()) std::memcpy(record, key.data(), key.size());
  return record;
}

void KeyArena::Free(const char* bytes, size_t length) {
  char* slot_start = const_cast<char*>(bytes);  // the arena's own memory
  const uint32_t slot = SlotBytes(length);
  char*& head = free_[slot];  // null when new
  std::memcpy(slot_start, &head, sizeof head);
  head = slot_start;
  // A key read after its entry was erased is a use after free: ASan builds report it.
  ASAN_POISON_MEMORY_REGION(slot_start, slot);
}

void KeyArena::Clear() {
  for (const auto& [block, bytes] : blocks_) {
    ASAN_UNPOISON_MEMORY_REGION(block, bytes);
    ::operator delete(block, kBlockAlignment);
  }
  blocks_.clear();
  blocks_.shrink_to_fit();
  free_.clear();
  next_ = end_ = nullptr;
  reserved_ = 0;
}

}  // namespace tierkv
