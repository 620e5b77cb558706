// KeyArena: the packed key bytes of one object-table shard. Records read back what was stored
// at every length class (empty, the 2-byte length's last, the 4-byte lengths past it, ones too
// long to share a block); freed slots are reused by keys of the same slot size only; Clear
// gives every block back.
#include "master/key_arena.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>

namespace tierkv {
namespace {

std::string Bytes(size_t n, uint64_t seed) {
  std::string s(n, '\0');
  std::mt19937_64 rng(seed);
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

TEST(KeyArenaTest, RecordsReadBackEveryLength) {
  KeyArena arena;
  std::map<const char*, std::string> stored;
  for (size_t n : {size_t{0}, size_t{1}, size_t{5}, size_t{6}, size_t{64}, size_t{4096},
                   size_t{8190}, size_t{65534}, size_t{65535}, size_t{70000}}) {
    const std::string key = Bytes(n, n);
    const char* record = arena.Store(key);
    ASSERT_NE(record, nullptr);
    EXPECT_EQ(KeyArena::KeyOf(record), key) << n;
    EXPECT_EQ(KeyArena::RecordBytes(record), (n < 65535 ? 2 : 6) + n) << n;
    stored.emplace(record, key);
  }
  // Nothing overwrote anything stored earlier.
  for (const auto& [record, key] : stored) EXPECT_EQ(KeyArena::KeyOf(record), key);
  EXPECT_GT(arena.bytes_reserved(), 0u);
  arena.Clear();
  EXPECT_EQ(arena.bytes_reserved(), 0u);
}

TEST(KeyArenaTest, AFreedSlotGoesToTheNextKeyOfItsSizeOnly) {
  KeyArena arena;
  const char* a = arena.Store(std::string(64, 'a'));
  const char* b = arena.Store(std::string(64, 'b'));
  arena.Free(a);
  // A key of another slot size does not take it.
  const char* c = arena.Store(std::string(10, 'c'));
  EXPECT_NE(c, a);
  // One of the same slot size (64 and 65 bytes both round to 68) does.
  const char* d = arena.Store(std::string(65, 'd'));
  EXPECT_EQ(d, a);
  EXPECT_EQ(KeyArena::KeyOf(d), std::string(65, 'd'));
  EXPECT_EQ(KeyArena::KeyOf(b), std::string(64, 'b'));
  EXPECT_EQ(KeyArena::KeyOf(c), std::string(10, 'c'));
  // Last freed, first reused; then carved anew.
  arena.Free(b);
  arena.Free(d);
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
      EXPECT_EQ(KeyArena::KeyOf(live[i].first), live[i].second);
      arena.Free(live[i].first);
      live[i] = std::move(live.back());
      live.pop_back();
    }
  }
  for (const auto& [record, key] : live) ASSERT_EQ(KeyArena::KeyOf(record), key);
  // Small keys share blocks: far fewer bytes reserved than a block per key.
  EXPECT_LT(arena.bytes_reserved(), size_t{64} << 20);
}

}  // namespace
}  // namespace tierkv
