// SsdTier on real tier files in a scratch directory: file safety (mode 0600, symlinks, removal
// or keeping at shutdown), append and staged reads (whole, partial, streamed through a small
// budget), tickets (release, all-failed batches, TTL reclaim), warm restart (surviving
// records, torn and corrupt records skipped, refused files), striping over two paths, IO
// faults through TEST_wrap_device, page-cache reads, and configuration errors.
#include "ssd/ssd_tier.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/checksum.h"
#include "common/clock.h"
#include "device/faulty_device.h"
#include "device/io_buffer.h"
#include "device_test_util.h"
#include "pattern_test_util.h"
#include "ssd/record_format.h"

namespace tierkv {
namespace {

namespace fs = std::filesystem;

using test_util::Pattern;

constexpr uint64_t kSsdRegion = 256 * 1024;  // 63 blocks of records: 9 of 7 blocks

// Value size that makes a record with a key of `key_size` bytes fill exactly `blocks` blocks.
uint64_t FillBlocks(size_t key_size, uint64_t blocks) {
  return blocks * kBlockSize - kRecordHeaderSize - key_size;
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

struct Object {
  std::string key;
  std::string value;
  DiskLocation loc;
};

class SsdTierTest : public ::testing::Test {
 protected:
  void SetUp() override { scratch_.emplace(); }
  void TearDown() override { scratch_.reset(); }

  std::string File(const std::string& name) const { return scratch_->File(name); }

  // 4 regions of 256 KiB per path (plus a little, rounded away), a 256 KiB staging area.
  SsdTierOptions Options(std::vector<std::string> names = {"tier0"}) {
    SsdTierOptions o;
    for (const auto& n : names) o.paths.push_back(File(n));
    o.capacity_per_path = 4 * kSsdRegion + 5000;
    o.region_size = kSsdRegion;
    o.allow_buffered_fallback = scratch_->IsTmpfs();
    o.want_huge_pages = false;
    o.staging.capacity = 256 * 1024;
    o.staging.want_huge_pages = false;
    o.staging.wait = Millis(0);
    o.staging.ttl = Millis(1000);
    o.staging.clock = &clock_;
    return o;
  }

  std::unique_ptr<SsdTier> Open(const SsdTierOptions& o,
                                std::vector<ScannedRecord>* surviving = nullptr) {
    auto tier = SsdTier::Open(
        o,
        [this](uint32_t, uint64_t, std::vector<std::string> keys) {
          std::lock_guard lock(mu_);
          for (auto& k : keys) evicted_.push_back(std::move(k));
        },
        surviving);
    EXPECT_TRUE(tier.ok()) << tier.status().ToString();
    return tier.ok() ? std::move(tier).value() : nullptr;
  }

  static Object Put(SsdTier& tier, const std::string& key, const std::string& value) {
    auto loc = tier.Append(key, {ConstPiece{value.data(), value.size()}});
    EXPECT_TRUE(loc.ok()) << key << ": " << loc.status().ToString();
    return Object{key, value, loc.ok() ? *loc : DiskLocation{}};
  }

  // Stages [off, off + len) of one object and returns its bytes (the ticket is released).
  static Result<std::string> StageRange(SsdTier& tier, const std::string& key,
                                        const DiskLocation& loc, uint64_t off, uint64_t len) {
    auto staged = tier.Stage({StageRequest{key, loc, off, len}});
    if (!staged.ok()) return staged.status();
    const StagedPiece& piece = staged->pieces.at(0);
    if (!piece.status.ok()) {
      EXPECT_EQ(staged->ticket, 0u) << "an all-failed stage holds nothing";
      return piece.status;
    }
    std::string out(reinterpret_cast<const char*>(piece.data), len);
    EXPECT_TRUE(tier.Held(staged->ticket));
    EXPECT_TRUE(tier.Release(staged->ticket).ok());
    return out;
  }
  static Result<std::string> StageAll(SsdTier& tier, const Object& o) {
    return StageRange(tier, o.key, o.loc, 0, o.value.size());
  }

  std::optional<test_util::ScratchDir> scratch_;
  ManualClock clock_;
  std::mutex mu_;
  std::vector<std::string> evicted_;
};

TEST_F(SsdTierTest, OpenCreatesPrivateFilesAndRemovesThemAtDestruction) {
  const mode_t old_umask = umask(0);
  auto tier = Open(Options());
  umask(old_umask);
  ASSERT_NE(tier, nullptr);
  struct stat st {};
  ASSERT_EQ(lstat(File("tier0").c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  // Whole regions only, and the label.
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), 4 * kSsdRegion + TierFile::kLabelBytes);
  EXPECT_EQ(tier->capacity(), 4 * kSsdRegion);
  EXPECT_EQ(tier->log().num_regions(), 4u);
  EXPECT_EQ(tier->staging_capacity(), 256 * 1024u);
  auto o = Put(*tier, "k", Pattern(5000, 1));
  ASSERT_TRUE(tier->Flush().ok());
  tier.reset();
  EXPECT_FALSE(fs::exists(File("tier0")));
}

TEST_F(SsdTierTest, ASymlinkAtThePathIsNeverFollowedNorReplaced) {
  std::ofstream(File("victim")) << "precious bytes";
  ASSERT_EQ(chmod(File("victim").c_str(), 0644), 0);
  ASSERT_EQ(symlink(File("victim").c_str(), File("tier0").c_str()), 0);
  auto tier = SsdTier::Open(Options(), nullptr, nullptr);
  EXPECT_EQ(tier.code(), ErrorCode::FILE_OPEN_FAIL);
  EXPECT_NE(tier.status().message().find("symbolic link"), std::string::npos)
      << tier.status().message();
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(File("tier0"))));
  EXPECT_EQ(ReadText(File("victim")), "precious bytes");
  // Warm restart refuses to adopt a link as well; the target is untouched.
  SsdTierOptions warm = Options();
  warm.warm_restart = true;
  auto refused = SsdTier::Open(warm, nullptr, nullptr);
  EXPECT_EQ(refused.code(), ErrorCode::FILE_OPEN_FAIL);
  EXPECT_NE(refused.status().message().find(File("tier0")), std::string::npos)
      << refused.status().message();
  EXPECT_NE(refused.status().message().find("symbolic link"), std::string::npos)
      << refused.status().message();
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(File("tier0"))));
  EXPECT_EQ(ReadText(File("victim")), "precious bytes");
  struct stat st {};
  ASSERT_EQ(stat(File("victim").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0644u);
}

TEST_F(SsdTierTest, StagesWholeAndPartialRangesByteExact) {
  SsdTierOptions big = Options();
  big.staging.capacity = 1024 * 1024;
  auto tier = Open(big);
  ASSERT_NE(tier, nullptr);
  std::vector<Object> objs;
  for (uint32_t i = 0; i < 6; ++i) {
    objs.push_back(Put(*tier, "obj-" + std::to_string(i), Pattern(1000 + i * 7000, i)));
  }
  for (int pass = 0; pass < 2; ++pass) {  // from the open region, then from the file
    std::vector<StageRequest> reqs;
    std::vector<std::string> want;
    for (const Object& o : objs) {
      const uint64_t n = o.value.size();
      reqs.push_back({o.key, o.loc, 0, n});
      want.push_back(o.value);
      reqs.push_back({o.key, o.loc, n / 2, n - n / 2});
      want.push_back(o.value.substr(n / 2));
      reqs.push_back({o.key, o.loc, 3, std::min<uint64_t>(n - 3, 4096)});
      want.push_back(o.value.substr(3, 4096));
    }
    auto staged = tier->Stage(reqs);
    ASSERT_TRUE(staged.ok()) << staged.status().ToString();
    ASSERT_EQ(staged->pieces.size(), reqs.size());
    EXPECT_NE(staged->ticket, 0u);
    EXPECT_TRUE(tier->Held(staged->ticket));
    const uint8_t* base = staged->pieces[0].data - staged->pieces[0].staging_offset;
    for (size_t i = 0; i < reqs.size(); ++i) {
      const StagedPiece& p = staged->pieces[i];
      ASSERT_TRUE(p.status.ok()) << i << ": " << p.status.ToString();
      EXPECT_EQ(std::string(reinterpret_cast<const char*>(p.data), reqs[i].length), want[i]) << i;
      EXPECT_EQ(p.data, base + p.staging_offset) << "offsets are in one staging buffer";
      EXPECT_LE(p.staging_offset + reqs[i].length, tier->staging_capacity());
    }
    ASSERT_TRUE(tier->Release(staged->ticket).ok());
    EXPECT_FALSE(tier->Held(staged->ticket));
    EXPECT_EQ(tier->Release(staged->ticket).code(), ErrorCode::OBJECT_NOT_FOUND);
    ASSERT_TRUE(tier->Flush().ok());
  }
  const SsdTierStats st = tier->stats();
  EXPECT_EQ(st.staged_pieces, 36u);
  EXPECT_EQ(st.stage_errors, 0u);
  EXPECT_EQ(st.staging.bytes_in_use, 0u);
  EXPECT_EQ(st.staging.reservations, 2u);
  EXPECT_GT(st.staged_bytes, 0u);
}

TEST_F(SsdTierTest, StreamsALargeObjectThroughASmallBudget) {
  SsdTierOptions o = Options();
  o.staging.capacity = StagingNeed(12288);  // 5 blocks
  auto tier = Open(o);
  ASSERT_NE(tier, nullptr);
  const Object obj = Put(*tier, "big", Pattern(50000, 9));
  ASSERT_TRUE(tier->Flush().ok());
  // The whole object does not fit the budget: the requester must split.
  EXPECT_EQ(tier->Stage({{obj.key, obj.loc, 0, obj.value.size()}}).code(),
            ErrorCode::OBJECT_TOO_LARGE);
  EXPECT_EQ(tier->Stage({{obj.key, obj.loc, 0, 8192}, {obj.key, obj.loc, 8192, 8192}}).code(),
            ErrorCode::OBJECT_TOO_LARGE);
  std::string out;
  for (uint64_t off = 0; off < obj.value.size(); off += 12288) {
    const uint64_t len = std::min<uint64_t>(12288, obj.value.size() - off);
    auto piece = StageRange(*tier, obj.key, obj.loc, off, len);
    ASSERT_TRUE(piece.ok()) << off << ": " << piece.status().ToString();
    out += *piece;
  }
  EXPECT_EQ(out, obj.value);
  EXPECT_EQ(Checksum(out.data(), out.size()), Checksum(obj.value.data(), obj.value.size()));
}

TEST_F(SsdTierTest, StageErrorsAndTickets) {
  auto tier = Open(Options());
  ASSERT_NE(tier, nullptr);
  auto objs = std::vector<Object>{Put(*tier, "a", Pattern(9000, 1)), Put(*tier, "b", "bee")};
  ASSERT_TRUE(tier->Flush().ok());
  EXPECT_EQ(tier->Stage({}).code(), ErrorCode::INVALID_PARAMS);

  // Bad pieces fail alone; good neighbours are staged. The callback hears of every piece
  // once, with its final status and (when OK) its bytes already staged.
  std::mutex mu;
  std::vector<int> calls(4, 0);
  std::vector<ErrorCode> seen(4, ErrorCode::OK);
  std::string early;
  auto mixed = tier->Stage({{"a", objs[0].loc, 0, 0},
                            {"a", objs[0].loc, 100, 9000},
                            {"b", objs[1].loc, 0, 3},
                            {"a", objs[1].loc, 0, 3}},
                           [&](size_t i, const StagedPiece& piece) {
                             std::lock_guard lock(mu);
                             ++calls.at(i);
                             seen.at(i) = piece.status.code();
                             if (i == 2 && piece.status.ok()) {
                               early.assign(reinterpret_cast<const char*>(piece.data), 3);
                             }
                           });
  ASSERT_TRUE(mixed.ok()) << mixed.status().ToString();
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(calls[i], 1) << i;
    EXPECT_EQ(seen[i], mixed->pieces[i].status.code()) << i;
  }
  EXPECT_EQ(early, "bee");
  EXPECT_EQ(mixed->pieces[0].status.code(), ErrorCode::INVALID_PARAMS);
  EXPECT_EQ(mixed->pieces[1].status.code(), ErrorCode::INVALID_PARAMS);
  ASSERT_TRUE(mixed->pieces[2].status.ok()) << mixed->pieces[2].status.ToString();
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(mixed->pieces[2].data), 3), "bee");
  EXPECT_EQ(mixed->pieces[3].status.code(), ErrorCode::OBJECT_NOT_FOUND);  // not a's record
  EXPECT_EQ(mixed->pieces[0].data, nullptr);
  ASSERT_TRUE(tier->Release(mixed->ticket).ok());
  EXPECT_EQ(tier->stats().stage_errors, 3u);

  // When every piece fails nothing is held: ticket 0, the budget is back at once.
  auto none = tier->Stage({{"a", objs[1].loc, 0, 3}, {"zz", objs[0].loc, 0, 10}});
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->ticket, 0u);
  EXPECT_EQ(tier->stats().staging.bytes_in_use, 0u);
  EXPECT_EQ(tier->Release(0).code(), ErrorCode::OBJECT_NOT_FOUND);

  // A full budget fails the whole call (wait = 0 here); an expired ticket is reclaimed.
  std::vector<StageRequest> many(21, StageRequest{"a", objs[0].loc, 0, 4096});  // 21 x 12 KiB
  auto held = tier->Stage(many);
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  int whole_call_failure_calls = 0;
  EXPECT_EQ(tier->Stage({{"b", objs[1].loc, 0, 3}},
                        [&](size_t, const StagedPiece&) { ++whole_call_failure_calls; })
                .code(),
            ErrorCode::NO_AVAILABLE_HANDLE);
  EXPECT_EQ(whole_call_failure_calls, 0) << "a call that fails as a whole reports no piece";
  EXPECT_EQ(tier->ReclaimExpired(), 0u);
  clock_.Advance(Millis(1001));
  EXPECT_EQ(tier->ReclaimExpired(), 1u);
  EXPECT_FALSE(tier->Held(held->ticket));
  EXPECT_EQ(tier->Release(held->ticket).code(), ErrorCode::OBJECT_NOT_FOUND);
  auto after = StageRange(*tier, "b", objs[1].loc, 0, 3);
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_EQ(*after, "bee");
  EXPECT_EQ(tier->stats().staging.reclaimed, 1u);
}

TEST_F(SsdTierTest, StaleLocationsAfterEvictionAreNotFound) {
  auto tier = Open(Options());
  ASSERT_NE(tier, nullptr);
  std::vector<Object> objs;
  for (uint32_t i = 0; i < 40; ++i) {  // 7 blocks each, 9 per region: more than 4 regions
    const std::string key = "e" + std::to_string(i);
    objs.push_back(Put(*tier, key, Pattern(FillBlocks(key.size(), 7), i)));
  }
  ASSERT_TRUE(tier->Flush().ok());
  ASSERT_FALSE(evicted_.empty());
  EXPECT_EQ(evicted_[0], "e0");
  EXPECT_EQ(StageAll(*tier, objs[0]).code(), ErrorCode::OBJECT_NOT_FOUND);
  EXPECT_EQ(StageRange(*tier, objs[0].key, objs[0].loc, 100, 5000).code(),
            ErrorCode::OBJECT_NOT_FOUND);
  ASSERT_EQ(objs[39].loc.region, objs[0].loc.region);  // the new tenant of e0's region
  auto last = StageAll(*tier, objs[39]);
  ASSERT_TRUE(last.ok()) << last.status().ToString();
  EXPECT_EQ(*last, objs[39].value);
}

TEST_F(SsdTierTest, WarmRestartKeepsFilesAndStagesSurvivorsByteExact) {
  SsdTierOptions o = Options({"tier0", "tier1"});
  o.warm_restart = true;
  std::vector<ScannedRecord> surviving = {ScannedRecord{"junk", {}, 0}};
  std::map<std::string, std::string> values;
  {
    auto tier = Open(o, &surviving);  // no files yet: created, nothing recovered
    ASSERT_NE(tier, nullptr);
    EXPECT_TRUE(surviving.empty());
    for (uint32_t i = 0; i < 20; ++i) {
      const std::string key = "w" + std::to_string(i);
      values[key] = Pattern(100 + i * 1000, i);
      Put(*tier, key, values[key]);
    }
    values["w3"] = Pattern(777, 333);  // a newer version wins
    Put(*tier, "w3", values["w3"]);
    // No Flush: the destructor flushes the open region.
    EXPECT_TRUE(evicted_.empty());
  }
  EXPECT_TRUE(fs::exists(File("tier0")));
  EXPECT_TRUE(fs::exists(File("tier1")));
  {
    auto tier = Open(o, &surviving);
    ASSERT_NE(tier, nullptr);
    ASSERT_EQ(surviving.size(), values.size());
    for (const ScannedRecord& r : surviving) {
      ASSERT_EQ(values.count(r.key), 1u) << r.key;
      EXPECT_EQ(r.checksum, Checksum(values[r.key].data(), values[r.key].size()));
      auto v = StageAll(*tier, Object{r.key, values[r.key], r.location});
      ASSERT_TRUE(v.ok()) << r.key << ": " << v.status().ToString();
      EXPECT_EQ(*v, values[r.key]) << r.key;
    }
    // New appends go on, under new generations.
    Object n = Put(*tier, "new", Pattern(3000, 99));
    auto v = StageAll(*tier, n);
    ASSERT_TRUE(v.ok());
    EXPECT_EQ(*v, n.value);
  }
  // Without warm_restart the files go at destruction (and are recreated empty at Open).
  SsdTierOptions cold = o;
  cold.warm_restart = false;
  {
    auto tier = Open(cold, &surviving);
    ASSERT_NE(tier, nullptr);
    EXPECT_TRUE(surviving.empty());
  }
  EXPECT_FALSE(fs::exists(File("tier0")));
  EXPECT_FALSE(fs::exists(File("tier1")));
}

TEST_F(SsdTierTest, WarmRestartSkipsTornAndCorruptRecords) {
  SsdTierOptions o = Options();
  o.warm_restart = true;
  std::vector<Object> objs;
  {
    auto tier = Open(o);
    ASSERT_NE(tier, nullptr);
    for (uint32_t i = 0; i < 18; ++i) {  // 9 per region: regions 0 and 1
      const std::string key = "t" + std::to_string(i);
      objs.push_back(Put(*tier, key, Pattern(FillBlocks(key.size(), 7), i)));
    }
    ASSERT_EQ(objs[4].loc.region, 0u);
    ASSERT_EQ(objs[12].loc.region, 1u);
  }
  // Region 0: a value byte of t4 flipped (t4 is skipped; its header is intact, so the records
  // after it are found and checked on their own). Region 1: t12's header torn to zeroes (the
  // end of that region's log).
  const int fd = open(File("tier0").c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  const uint64_t r0 = objs[4].loc.region * kSsdRegion;
  const uint64_t r1 = objs[12].loc.region * kSsdRegion;
  uint8_t byte = 0;
  const off_t at = static_cast<off_t>(r0 + objs[4].loc.offset + 64 + 2 + 100);
  ASSERT_EQ(pread(fd, &byte, 1, at), 1);
  byte ^= 0xFF;
  ASSERT_EQ(pwrite(fd, &byte, 1, at), 1);
  const std::string zeroes(64, '\0');
  ASSERT_EQ(pwrite(fd, zeroes.data(), 64, static_cast<off_t>(r1 + objs[12].loc.offset)), 64);
  ASSERT_EQ(fsync(fd), 0);
  close(fd);

  std::vector<ScannedRecord> surviving;
  auto tier = Open(o, &surviving);
  ASSERT_NE(tier, nullptr);
  std::map<std::string, DiskLocation> got;
  for (const auto& r : surviving) got[r.key] = r.location;
  std::vector<std::string> want = {"t0", "t1", "t2", "t3",  "t5", "t6",
                                   "t7", "t8", "t9", "t10", "t11"};
  std::vector<std::string> keys;
  for (const auto& [k, loc] : got) keys.push_back(k);
  std::sort(want.begin(), want.end());
  EXPECT_EQ(keys, want);
  for (const Object& obj : objs) {
    if (got.count(obj.key) == 0) continue;
    auto v = StageAll(*tier, Object{obj.key, obj.value, got[obj.key]});
    ASSERT_TRUE(v.ok()) << obj.key << ": " << v.status().ToString();
    EXPECT_EQ(*v, obj.value);
  }
}

TEST_F(SsdTierTest, WarmRestartRefusesAChangedFile) {
  SsdTierOptions o = Options();
  o.warm_restart = true;
  { ASSERT_NE(Open(o), nullptr); }
  SsdTierOptions bigger = o;
  bigger.capacity_per_path = 8 * kSsdRegion;
  auto r = SsdTier::Open(bigger, nullptr, nullptr);
  EXPECT_EQ(r.code(), ErrorCode::FILE_OPEN_FAIL);
  EXPECT_NE(r.status().message().find(File("tier0")), std::string::npos);
  EXPECT_NE(r.status().message().find("expected " +
                                      std::to_string(8 * kSsdRegion + TierFile::kLabelBytes)),
            std::string::npos)
      << r.status().message();
  ASSERT_EQ(chmod(File("tier0").c_str(), 0640), 0);
  r = SsdTier::Open(o, nullptr, nullptr);
  EXPECT_EQ(r.code(), ErrorCode::FILE_OPEN_FAIL);
  EXPECT_NE(r.status().message().find("mode 0640"), std::string::npos) << r.status().message();
  EXPECT_TRUE(fs::exists(File("tier0"))) << "a refused file is left alone";
  // A failed Open removes the files it created itself (here: tier1), not the refused one.
  SsdTierOptions two = Options({"tier1", "tier0"});
  two.warm_restart = true;
  EXPECT_EQ(SsdTier::Open(two, nullptr, nullptr).code(), ErrorCode::FILE_OPEN_FAIL);
  EXPECT_FALSE(fs::exists(File("tier1")));
  EXPECT_TRUE(fs::exists(File("tier0")));
}

TEST_F(SsdTierTest, StripesRegionsOverTwoPaths) {
  auto tier = Open(Options({"a", "b"}));
  ASSERT_NE(tier, nullptr);
  EXPECT_EQ(tier->capacity(), 8 * kSsdRegion);
  EXPECT_EQ(tier->log().num_regions(), 8u);
  std::vector<Object> objs;
  for (uint32_t i = 0; i < 36; ++i) {  // 4 regions
    const std::string key = "s" + std::to_string(i);
    objs.push_back(Put(*tier, key, Pattern(FillBlocks(key.size(), 7), i)));
  }
  ASSERT_TRUE(tier->Flush().ok());
  for (uint32_t r = 0; r < 4; ++r) {
    EXPECT_EQ(tier->log().region_device(r), r % 2);
    EXPECT_EQ(tier->log().region_base(r), (r / 2) * kSsdRegion);
  }
  // Both files hold region headers.
  for (const std::string name : {"a", "b"}) {
    const int fd = open(File(name).c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    std::string head(48, '\0');
    ASSERT_EQ(pread(fd, head.data(), head.size(), static_cast<off_t>(kSsdRegion)), 48);
    close(fd);
    auto rh = DecodeRegionHeader(reinterpret_cast<const uint8_t*>(head.data()), head.size());
    ASSERT_TRUE(rh.ok()) << name << ": " << rh.status().ToString();
  }
  // One batch over both files.
  std::vector<StageRequest> reqs;
  for (uint32_t i = 0; i < 36; i += 4) reqs.push_back({objs[i].key, objs[i].loc, 10, 5000});
  auto staged = tier->Stage(reqs);
  ASSERT_TRUE(staged.ok()) << staged.status().ToString();
  for (size_t k = 0; k < reqs.size(); ++k) {
    ASSERT_TRUE(staged->pieces[k].status.ok()) << staged->pieces[k].status.ToString();
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(staged->pieces[k].data), 5000),
              objs[k * 4].value.substr(10, 5000));
  }
  ASSERT_TRUE(tier->Release(staged->ticket).ok());
}

// Wraps every opened device in a FaultyDevice the test can reach.
class FaultyTier {
 public:
  explicit FaultyTier(SsdTierOptions& o) {
    o.TEST_wrap_device = [this](std::unique_ptr<Device> d) -> std::unique_ptr<Device> {
      auto f = std::make_unique<FaultyDevice>(std::move(d));
      devices.push_back(f.get());
      return f;
    };
  }
  std::vector<FaultyDevice*> devices;  // in the order opened
};

TEST_F(SsdTierTest, IoFaultsFailTheAffectedCallAndTheNextSucceeds) {
  SsdTierOptions o = Options();
  FaultyTier faults(o);
  auto tier = Open(o);
  ASSERT_NE(tier, nullptr);
  ASSERT_EQ(faults.devices.size(), 1u);
  FaultyDevice* dev = faults.devices[0];
  const Object a = Put(*tier, "a", Pattern(20000, 1));
  ASSERT_TRUE(tier->Flush().ok());

  for (FaultKind kind : {FaultKind::kReadEio, FaultKind::kShortRead}) {
    ASSERT_TRUE(dev->AddFault(FaultRule::Once(kind)).ok());
    EXPECT_EQ(StageAll(*tier, a).code(), ErrorCode::FILE_READ_FAIL);
    auto ok = StageAll(*tier, a);
    ASSERT_TRUE(ok.ok()) << ok.status().ToString();
    EXPECT_EQ(*ok, a.value);
  }
  EXPECT_EQ(tier->stats().log.read_errors, 2u);

  // A failed flush loses that region's records (reported as evicted); the next flush works.
  for (FaultKind kind : {FaultKind::kWriteEio, FaultKind::kShortWrite}) {
    const Object lost = Put(*tier, "lost", Pattern(3000, 2));
    ASSERT_TRUE(dev->AddFault(FaultRule::Once(kind)).ok());
    EXPECT_EQ(tier->Flush().code(), ErrorCode::FILE_WRITE_FAIL);
    EXPECT_EQ(StageAll(*tier, lost).code(), ErrorCode::OBJECT_NOT_FOUND);
    const Object kept = Put(*tier, "kept", Pattern(3000, 3));
    ASSERT_TRUE(tier->Flush().ok());
    auto v = StageAll(*tier, kept);
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    EXPECT_EQ(*v, kept.value);
  }
  EXPECT_EQ(std::count(evicted_.begin(), evicted_.end(), "lost"), 2);

  // ENOSPC on a rollover: the full region is written in the background, so that Append
  // works and the next Flush reports the failure; the region's records are dropped.
  std::vector<Object> full;
  for (uint32_t i = 0; i < 9; ++i) {
    const std::string key = "f" + std::to_string(i);
    full.push_back(Put(*tier, key, Pattern(FillBlocks(key.size(), 7), i)));
  }
  ASSERT_TRUE(dev->AddFault(FaultRule::Once(FaultKind::kWriteEnospc)).ok());
  const std::string v = Pattern(FillBlocks(4, 7), 50);
  auto rolled = tier->Append("roll", {ConstPiece{v.data(), v.size()}});
  EXPECT_TRUE(rolled.ok()) << rolled.status().ToString();
  Status failed = tier->Flush();
  EXPECT_EQ(failed.code(), ErrorCode::FILE_WRITE_FAIL);
  EXPECT_NE(failed.message().find("No space"), std::string::npos);
  EXPECT_EQ(StageAll(*tier, full[0]).code(), ErrorCode::OBJECT_NOT_FOUND);
  EXPECT_EQ(std::count(evicted_.begin(), evicted_.end(), "f8"), 1);
  const Object next = Put(*tier, "next", Pattern(4000, 5));
  ASSERT_TRUE(tier->Flush().ok());
  auto got = StageAll(*tier, next);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, next.value);
  EXPECT_EQ(dev->counters().injected(), 5u);
}

// ReadDirect: block-aligned values straight into aligned caller pieces, from the open buffer
// and from the device; on_done once per request; the rest refused; IO faults fail just that
// request and the next read works.
TEST_F(SsdTierTest, ReadDirectFillsAlignedPiecesAndFailsCleanly) {
  SsdTierOptions o = Options();
  FaultyTier faults(o);
  auto tier = Open(o);
  ASSERT_NE(tier, nullptr);
  const Object a = Put(*tier, "a", Pattern(2 * 65536, 1));
  const Object b = Put(*tier, "b", Pattern(65536, 2));
  const Object small = Put(*tier, "small", Pattern(8192, 3));
  auto buffer = IoBuffer::Allocate(8 * 65536, /*want_huge_pages=*/false);
  ASSERT_TRUE(buffer.ok());
  uint8_t* mem = buffer->data();
  auto read = [&](std::vector<DirectRequest> requests, std::vector<int>* calls) {
    std::memset(mem, 0x5a, buffer->size());
    calls->assign(requests.size(), 0);
    std::mutex mu;
    auto out = tier->ReadDirect(requests, [&](size_t i, const Status&) {
      std::lock_guard lock(mu);
      ++(*calls)[i];
    });
    return out;
  };
  std::vector<int> calls;
  for (int pass = 0; pass < 2; ++pass) {  // open buffer, then device
    // a whole; b in two pieces, its second half first in memory; small and a misaligned
    // piece refused.
    auto out =
        read({DirectRequest{a.key, a.loc, {MutPiece{mem, a.value.size()}}},
              DirectRequest{
                  b.key,
                  b.loc,
                  {MutPiece{mem + 4 * 65536 + 32768, 32768}, MutPiece{mem + 4 * 65536, 32768}}},
              DirectRequest{small.key, small.loc, {MutPiece{mem + 6 * 65536, 8192}}},
              DirectRequest{
                  a.key, a.loc, {MutPiece{mem + 7 * 65536 + 512, 65536}, MutPiece{mem, 65536}}}},
             &calls);
    ASSERT_EQ(out.size(), 4u);
    EXPECT_TRUE(out[0].ok()) << out[0].ToString();
    EXPECT_TRUE(out[1].ok()) << out[1].ToString();
    EXPECT_EQ(out[2].code(), ErrorCode::INVALID_PARAMS);
    EXPECT_EQ(out[3].code(), ErrorCode::INVALID_PARAMS);
    EXPECT_EQ(calls, (std::vector<int>{1, 1, 1, 1})) << pass;
    EXPECT_EQ(std::string(reinterpret_cast<char*>(mem), a.value.size()), a.value);
    EXPECT_EQ(std::string(reinterpret_cast<char*>(mem) + 4 * 65536 + 32768, 32768),
              b.value.substr(0, 32768));
    EXPECT_EQ(std::string(reinterpret_cast<char*>(mem) + 4 * 65536, 32768), b.value.substr(32768));
    EXPECT_EQ(mem[6 * 65536], 0x5a) << "a refused request reads nothing";
    EXPECT_TRUE(SsdTier::DirectReadable(a.loc, {MutPiece{mem, a.value.size()}}));
    EXPECT_FALSE(SsdTier::DirectReadable(a.loc, {MutPiece{mem, 65536}}));  // too short
    EXPECT_FALSE(SsdTier::DirectReadable(small.loc, {MutPiece{mem, 8192}}));
    ASSERT_TRUE(tier->Flush().ok());
  }
  EXPECT_EQ(tier->stats().direct_reads, 4u);
  EXPECT_EQ(tier->stats().direct_bytes, 2 * (a.value.size() + b.value.size()));
  EXPECT_EQ(tier->stats().direct_errors, 4u);

  ASSERT_EQ(faults.devices.size(), 1u);
  for (FaultKind kind : {FaultKind::kReadEio, FaultKind::kShortRead}) {
    ASSERT_TRUE(faults.devices[0]->AddFault(FaultRule::Once(kind)).ok());
    auto failed = read({DirectRequest{a.key, a.loc, {MutPiece{mem, a.value.size()}}}}, &calls);
    EXPECT_EQ(failed[0].code(), ErrorCode::FILE_READ_FAIL);
    EXPECT_EQ(calls, std::vector<int>{1});
    auto next = read({DirectRequest{a.key, a.loc, {MutPiece{mem, a.value.size()}}}}, &calls);
    EXPECT_TRUE(next[0].ok()) << next[0].ToString();
    EXPECT_EQ(std::string(reinterpret_cast<char*>(mem), a.value.size()), a.value);
  }
}

TEST_F(SsdTierTest, PageCacheReadsGoThroughASecondBufferedDevice) {
  SsdTierOptions o = Options();
  o.page_cache_reads = true;
  FaultyTier faults(o);
  auto tier = Open(o);
  ASSERT_NE(tier, nullptr);
  const bool direct = !scratch_->IsTmpfs() || faults.devices.size() == 2;
  ASSERT_EQ(faults.devices.size(), direct ? 2u : 1u);
  FaultyDevice* writer = faults.devices[0];
  FaultyDevice* reader = faults.devices.back();
  std::vector<Object> objs;
  for (uint32_t i = 0; i < 9; ++i) {  // region 0
    const std::string key = "p" + std::to_string(i);
    objs.push_back(Put(*tier, key, Pattern(FillBlocks(key.size(), 7), i)));
  }
  ASSERT_TRUE(tier->Flush().ok());
  for (const Object& obj : objs) {
    auto v = StageAll(*tier, obj);
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    EXPECT_EQ(*v, obj.value);
  }
  if (direct) {
    EXPECT_EQ(reader->counters().reads, 9u);
    EXPECT_EQ(writer->counters().reads, 0u);
    EXPECT_EQ(reader->counters().writes, 0u);
  }
  // Region 0 is reused with same-sized records at the same offsets: the O_DIRECT write of the
  // new tenant must not leave the old bytes in the page cache.
  for (uint32_t i = 9; i < 36; ++i) {
    const std::string key = "p" + std::to_string(i);
    objs.push_back(Put(*tier, key, Pattern(FillBlocks(key.size(), 7), i)));
  }
  std::vector<Object> tenant;
  for (uint32_t i = 0; i < 9; ++i) {
    const std::string key = "p" + std::to_string(i);  // same keys, new bytes
    tenant.push_back(Put(*tier, key, Pattern(FillBlocks(key.size(), 7), 1000 + i)));
    ASSERT_EQ(tenant.back().loc.region, 0u);
    ASSERT_EQ(tenant.back().loc.offset, objs[i].loc.offset);
  }
  ASSERT_TRUE(tier->Flush().ok());
  for (const Object& obj : tenant) {
    auto v = StageAll(*tier, obj);
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    EXPECT_EQ(*v, obj.value);
  }
  EXPECT_EQ(StageAll(*tier, objs[0]).code(), ErrorCode::OBJECT_NOT_FOUND);
  // Faults on the read device fail reads only.
  ASSERT_TRUE(reader->AddFault(FaultRule::Once(FaultKind::kReadEio)).ok());
  EXPECT_EQ(StageAll(*tier, tenant[0]).code(), ErrorCode::FILE_READ_FAIL);
  EXPECT_TRUE(StageAll(*tier, tenant[0]).ok());
}

TEST_F(SsdTierTest, InvalidConfigNamesTheProblem) {
  struct Case {
    std::string name;
    std::function<void(SsdTierOptions&)> change;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"no paths", [](SsdTierOptions& o) { o.paths.clear(); }, "no paths"},
      {"empty path", [](SsdTierOptions& o) { o.paths.push_back(""); }, "path is empty"},
      {"twice", [](SsdTierOptions& o) { o.paths.push_back(o.paths[0]); }, "given twice"},
      {"region", [](SsdTierOptions& o) { o.region_size = kSsdRegion + 100; }, "region_size"},
      {"tiny region", [](SsdTierOptions& o) { o.region_size = 4096; }, "region_size"},
      {"capacity", [](SsdTierOptions& o) { o.capacity_per_path = kSsdRegion - 4096; },
       "smaller than one region"},
      {"staging", [](SsdTierOptions& o) { o.staging.capacity = 0; }, "staging capacity"},
      {"ttl", [](SsdTierOptions& o) { o.staging.ttl = Millis(0); }, "staging ttl"},
      {"wait", [](SsdTierOptions& o) { o.staging.wait = Millis(-5); }, "staging wait"},
      {"clock", [](SsdTierOptions& o) { o.staging.clock = nullptr; }, "clock"},
      {"queue", [](SsdTierOptions& o) { o.device.queue_depth = 0; }, "queue_depth"},
  };
  for (const Case& c : cases) {
    SsdTierOptions o = Options();
    c.change(o);
    auto r = SsdTier::Open(o, nullptr, nullptr);
    EXPECT_EQ(r.code(), ErrorCode::INVALID_CONFIG) << c.name << ": " << r.status().ToString();
    EXPECT_NE(r.status().message().find(c.message), std::string::npos)
        << c.name << ": " << r.status().message();
  }
  EXPECT_FALSE(fs::exists(File("tier0"))) << "nothing is created for a bad config";
}

}  // namespace
}  // namespace tierkv
