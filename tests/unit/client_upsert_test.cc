// Client::Upsert / BatchUpsertFromMultiBuffers / BatchGetInto / BatchRemove / RemoveByRegex in
// embedded mode: new versions replace old ones, a reader holding a lease on the old version
// still finds its bytes untouched, and the old space is freed after the lease.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "client/client_impl.h"
#include "master/master_service.h"
#include "status_test_util.h"

namespace tierkv {
namespace {

Config UpsertConfig() {
  Config c;
  c.global_segment_size = 8ull << 20;
  c.use_huge_pages = false;
  c.transfer_threads = 2;
  return c;
}

TEST(ClientUpsert, ReplacesTheValueAndKeepsLeasedOldBytes) {
  MasterOptions opts;
  opts.lease_ttl = Millis(300);
  auto master = std::make_shared<InProcessMaster>(opts, Millis(20));
  auto made = ClientImpl::CreateEmbedded(UpsertConfig(), master);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  ClientImpl& client = **made;
  std::vector<uint8_t> v1(64 << 10, 0x11), v2(80 << 10, 0x22);
  ASSERT_EQ(client.Upsert("k", v1.data(), v1.size()), kOk);  // a missing key: a plain put
  EXPECT_EQ(client.Put("k", v2.data(), v2.size()), Code(ErrorCode::OBJECT_ALREADY_EXISTS));

  // A reader's lease on version 1, and where its bytes are.
  auto leased = master->master().GetReplicas({"k"});
  ASSERT_TRUE(leased[0].ok());
  const uint64_t old_offset = leased[0]->replicas[0].offset;
  const uint64_t used_one =
      master->master().segments().Find(client.store()->segment_id())->allocator->used();

  ASSERT_EQ(client.Upsert("k", v2.data(), v2.size()), kOk);
  std::vector<uint8_t> out(128 << 10, 0);
  EXPECT_EQ(client.Get("k", out.data(), out.size()), static_cast<int64_t>(v2.size()));
  EXPECT_EQ(0, std::memcmp(out.data(), v2.data(), v2.size()));
  // The leased reader's range still holds version 1 (nothing was written in place).
  const uint8_t* old_bytes = client.store()->segment()->base() + old_offset;
  EXPECT_EQ(0, std::memcmp(old_bytes, v1.data(), v1.size()));
  auto used = [&] {
    return master->master().segments().Find(client.store()->segment_id())->allocator->used();
  };
  EXPECT_GT(used(), used_one);  // both versions allocated while the lease lasts
  // After the lease (300 ms) the maintenance thread (every 20 ms) frees the old version.
  for (int i = 0; i < 200 && used() > used_one + (16 << 10); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_LE(used(), used_one + (16 << 10));  // only version 2 (80 KiB vs 64 KiB) is left
}

TEST(ClientUpsert, BatchCallsWithMixedKeys) {
  auto made = ClientImpl::CreateEmbedded(UpsertConfig());
  ASSERT_TRUE(made.ok());
  ClientImpl& client = **made;
  std::vector<uint8_t> src(1 << 20), dst(1 << 20, 0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 7);
  ASSERT_TRUE(client.RegisterBuffer(src.data(), src.size()).ok());
  ASSERT_TRUE(client.RegisterBuffer(dst.data(), dst.size()).ok());
  ASSERT_EQ(client.Put("a", src.data(), 1000), kOk);
  std::vector<uint8_t> unregistered(100);
  auto codes = client.BatchUpsertFromMultiBuffers(
      {"a", "b", "", "c"},
      {{src.data() + 10, src.data() + 500}, {src.data()}, {src.data()}, {unregistered.data()}},
      {{400, 600}, {300}, {10}, {100}});
  EXPECT_EQ(codes, (std::vector<int>{kOk, kOk, Code(ErrorCode::INVALID_KEY),
                                     Code(ErrorCode::BUFFER_NOT_REGISTERED)}));
  auto got =
      client.BatchGetInto({"a", "b", "missing", "a"},
                          {dst.data(), dst.data() + 2000, dst.data() + 4000, dst.data() + 6000},
                          {1000, 299, 100, 1000});
  EXPECT_EQ(got[0], 1000);
  EXPECT_EQ(0, std::memcmp(dst.data(), src.data() + 10, 400));
  EXPECT_EQ(0, std::memcmp(dst.data() + 400, src.data() + 500, 600));
  EXPECT_EQ(got[1], Code(ErrorCode::BUFFER_OVERFLOW));  // 300 bytes do not fit 299
  EXPECT_EQ(dst[2000], 0);                              // and nothing was written
  EXPECT_EQ(got[2], Code(ErrorCode::OBJECT_NOT_FOUND));
  EXPECT_EQ(got[3], Code(ErrorCode::DUPLICATE_KEY));
  EXPECT_EQ(client.BatchGetInto({"a", "b"}, {dst.data()}, {1000})[1],
            Code(ErrorCode::INVALID_PARAMS));  // lists shorter than the keys

  EXPECT_EQ(
      client.BatchRemove({"a", "missing", ""}, /*force=*/true),
      (std::vector<int>{kOk, Code(ErrorCode::OBJECT_NOT_FOUND), Code(ErrorCode::INVALID_KEY)}));
  ASSERT_EQ(client.Put("sess-1", src.data(), 10), kOk);
  ASSERT_EQ(client.Put("sess-2", src.data(), 10), kOk);
  EXPECT_EQ(client.RemoveByRegex("^sess-"), 2);
  EXPECT_EQ(client.RemoveByRegex("(["), Code(ErrorCode::INVALID_PARAMS));
}

TEST(ClientUpsert, BatchGetAllocatedSizesEachDestinationByTheVersionRead) {
  auto made = ClientImpl::CreateEmbedded(UpsertConfig());
  ASSERT_TRUE(made.ok());
  ClientImpl& client = **made;
  std::vector<uint8_t> a(1000, 0xAA), b(3000, 0xBB);
  ASSERT_EQ(client.Put("a", a.data(), a.size()), kOk);
  ASSERT_EQ(client.Put("b", b.data(), b.size()), kOk);
  std::vector<std::vector<uint8_t>> dst(5);
  std::vector<uint64_t> asked(5, 0);
  auto got = client.BatchGetAllocated({"a", "missing", "b", "", "a"}, [&](size_t i, uint64_t n) {
    asked[i] = n;
    if (i == 2) return static_cast<void*>(nullptr);  // no room for b
    dst[i].assign(n, 0);
    return static_cast<void*>(dst[i].data());
  });
  EXPECT_EQ(got, (std::vector<int64_t>{
                     1000, Code(ErrorCode::OBJECT_NOT_FOUND), Code(ErrorCode::BUFFER_OVERFLOW),
                     Code(ErrorCode::INVALID_KEY), Code(ErrorCode::DUPLICATE_KEY)}));
  EXPECT_EQ(asked, (std::vector<uint64_t>{1000, 0, 3000, 0, 0}));  // only keys looked up
  EXPECT_EQ(dst[0], a);
}

}  // namespace
}  // namespace tierkv
