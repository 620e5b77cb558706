// KeyArena: the packed key bytes of one object-table shard. Keys read back what was stored at
// every length (empty, shorter than a free-list link, ones too long to share a block); 64-byte
// keys each sit in one cache line; freed slots are reused by keys of the same slot size only;
// Clear gives every block back.
#include "master/key_arena.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <string_view>

namespace tierkv {
namespace {

std::string Bytes(size_t n, uint64_t seed) {
  std::string s(n, '\0');
  std::mt19937_64 rng(seed);
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

std::string_view View(const char* bytes, size_t n) { return std::string_view(bytes, n); }

TEST(KeyArenaTest, KeysReadBackEveryLength) {
  KeyArena arena;
  std::map<const char*, std::string> stored;
  for (size_t n : {size_t{0}, size_t{1}, size_t{5}, size_t{8}, size_t{64}, size_t{4096},
                   size_t{8190}, size_t{65535}, size_t{70000}}) {
    const std::string key = Bytes(n, n);
    const char* bytes = arena.Store(key);
    ASSERT_NE(bytes, nullptr);
    EXPECT_EQ(View(bytes, n), key) << n;
    EXPECT_TRUE(stored.emplace(bytes, key).second) << "two keys at one address";
  }
  // Nothing overwrote anything stored earlier.
  for (const auto& [bytes, key] : stored) EXPECT_EQ(View(bytes, key.size()), key);
  EXPECT_GT(arena.bytes_reserved(), 0u);
  arena.Clear();
  EXPECT_EQ(arena.bytes_reserved(), 0u);
}

TEST(KeyArenaTest, SixtyFourByteKeysEachTakeOneCacheLine) {
  KeyArena arena;
  for (int i = 0; i < 10000; ++i) {
    const char* bytes = arena.Store(Bytes(64, i));
    ASSERT_EQ(reinterpret_cast<uintptr_t>(bytes) % 64, 0u) << "key " << i;
  }
  // 64 bytes each: no more blocks than that takes, the last one partly used.
  EXPECT_LT(arena.bytes_reserved(), size_t{10000} * 64 + KeyArena::kBlockBytes);
}

TEST(KeyArenaTest, AFreedSlotGoesToTheNextKeyOfItsSizeOnly) {
  KeyArena arena;
  const char* a = arena.Store(std::string(64, 'a'));
  const char* b = arena.Store(std::string(64, 'b'));
  arena.Free(a, 64);
  // A key of another slot size does not take it.
  const char* c = arena.Store(std::string(10, 'c'));
  EXPECT_NE(c, a);
  // One of the same slot size (62 and 64 bytes both round to 64) does.
  const char* d = arena.Store(std::string(62, 'd'));
  EXPECT_EQ(d, a);
  EXPECT_EQ(View(d, 62), std::string(62, 'd'));
  EXPECT_EQ(View(b, 64), std::string(64, 'b'));
  EXPECT_EQ(View(c, 10), std::string(10, 'c'));
  // Last freed, first reused; then carved anew.
  arena.Free(b, 64);
  arena.Free(d, 62);
  EXPECT_EQ(arena.Store(std::string(64, 'e')), d);
  EXPECT_EQ(arena.Store(std::string(64, 'f')), b);
  const char* g = arena.Store(std::string(64, 'g'));
  EXPECT_NE(g, b);
  EXPECT_NE(g, d);
}

TEST(KeyArenaTest, MatchesAModelOverRandomStoresAndFrees) {
  KeyArena arena;
  std::mt19937_64 rng(7);
  std::vector<std::pair<const char*, std::string>> live;
  for (int step = 0; step < 50000; ++step) {
    if (live.empty() || rng() % 3 != 0) {
      const size_t n = rng() % 4 == 0 ? rng() % 9000 : 40 + rng() % 40;
      std::string key = Bytes(n, rng());
      live.emplace_back(arena.Store(key), std::move(key));
    } else {
      const size_t i = rng() % live.size();
      EXPECT_EQ(View(live[i].first, live[i].second.size()), live[i].second);
      arena.Free(live[i].first, live[i].second.size());
      live[i] = std::move(live.back());
      live.pop_back();
    }
  }
  for (const auto& [bytes, key] : live) ASSERT_EQ(View(bytes, key.size()), key);
  // Small keys share blocks: far fewer bytes reserved than a block per key.
  EXPECT_LT(arena.bytes_reserved(), size_t{64} << 20);
}

}  // namespace
}  // namespace tierkv
