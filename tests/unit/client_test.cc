// Client API tests in embedded mode: batches with mixed good and bad keys,
// scatter-gather, checksums, buffer registration, replica descriptions.
#include "tierkv/client.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>

#include "client/client_impl.h"
#include "pattern_test_util.h"
#include "status_test_util.h"

namespace tierkv {
namespace {

using test_util::PatternBytes;

Config SmallConfig(uint64_t segment = 64ull << 20) {
  Config c;
  c.global_segment_size = segment;
  c.use_huge_pages = false;
  c.transfer_threads = 2;
  return c;
}

class ClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto c = ClientImpl::CreateEmbedded(SmallConfig());
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    client_ = std::move(c).value();
    src_ = PatternBytes(kBuf, 1);
    dst_.assign(kBuf + kGuard, 0xEE);
    ASSERT_TRUE(client_->RegisterBuffer(src_.data(), src_.size()).ok());
    ASSERT_TRUE(client_->RegisterBuffer(dst_.data(), kBuf).ok());  // guard stays unregistered
  }
  static constexpr size_t kBuf = 4 << 20;
  static constexpr size_t kGuard = 4096;
  std::unique_ptr<ClientImpl> client_;
  std::vector<uint8_t> src_, dst_;
};

TEST_F(ClientTest, PutGetRoundTrip) {
  ASSERT_EQ(client_->Put("k1", src_.data(), 1000), kOk);
  std::vector<uint8_t> out(2000, 0);
  EXPECT_EQ(client_->Get("k1", out.data(), out.size()), 1000);
  EXPECT_EQ(0, std::memcmp(out.data(), src_.data(), 1000));
  EXPECT_EQ(out[1000], 0);  // nothing past the object
}

TEST_F(ClientTest, PutExistingKeyReportsAlreadyExists) {
  ASSERT_EQ(client_->Put("k", src_.data(), 100), kOk);
  EXPECT_EQ(client_->Put("k", src_.data() + 1, 100), Code(ErrorCode::OBJECT_ALREADY_EXISTS));
  std::vector<uint8_t> out(100);
  EXPECT_EQ(client_->Get("k", out.data(), out.size()), 100);
  EXPECT_EQ(0, std::memcmp(out.data(), src_.data(), 100));  // the first writer won
}

TEST_F(ClientTest, ScatterGatherWithDifferentSplits) {
  uint8_t* s = src_.data();
  // Object = 3 uneven pieces; read back into 4 other pieces.
  std::vector<std::vector<void*>> ptrs{{s, s + 1000, s + 70000}};
  std::vector<std::vector<size_t>> sizes{{1000, 50000, 12345}};
  ASSERT_EQ(client_->BatchPutFromMultiBuffers({"obj"}, ptrs, sizes)[0], kOk);
  const size_t total = 1000 + 50000 + 12345;
  uint8_t* d = dst_.data();
  std::vector<std::vector<void*>> dptrs{{d + 300000, d, d + 100000, d + 200000}};
  std::vector<std::vector<size_t>> dsizes{{7, 30000, 30000, total - 60007}};
  ASSERT_EQ(client_->BatchGetIntoMultiBuffers({"obj"}, dptrs, dsizes)[0],
            static_cast<int64_t>(total));
  std::vector<uint8_t> expect;
  expect.insert(expect.end(), s, s + 1000);
  expect.insert(expect.end(), s + 1000, s + 51000);
  expect.insert(expect.end(), s + 70000, s + 70000 + 12345);
  std::vector<uint8_t> got;
  got.insert(got.end(), d + 300000, d + 300007);
  got.insert(got.end(), d, d + 30000);
  got.insert(got.end(), d + 100000, d + 130000);
  got.insert(got.end(), d + 200000, d + 200000 + (total - 60007));
  EXPECT_EQ(got, expect);
}

TEST_F(ClientTest, MixedBatchBadKeysDoNotFailNeighbours) {
  uint8_t* s = src_.data();
  std::vector<uint8_t> unregistered(1024, 7);
  const std::string too_long(kMaxKeyLength + 1, 'x');
  std::vector<std::string> keys{
      "good0", "",      too_long, std::string("\xff\xfe", 2), "good1",   "zero", "nullptr",
      "unreg", "good0", "good2",  std::string("a\0b", 3),     "mismatch"};
  std::vector<std::vector<void*>> ptrs{{s},        {s},        {s},       {s},
                                       {s + 4096}, {s},        {nullptr}, {unregistered.data()},
                                       {s},        {s + 8192}, {s},       {s, s}};
  std::vector<std::vector<size_t>> sizes{{1000}, {10},   {10}, {10},   {2000}, {0},
                                         {10},   {1024}, {10}, {3000}, {10},   {10}};
  auto codes = client_->BatchPutFromMultiBuffers(keys, ptrs, sizes);
  ASSERT_EQ(codes.size(), keys.size());
  EXPECT_EQ(codes[0], kOk);
  EXPECT_EQ(codes[1], Code(ErrorCode::INVALID_KEY));
  EXPECT_EQ(codes[2], Code(ErrorCode::INVALID_KEY));
  EXPECT_EQ(codes[3], Code(ErrorCode::INVALID_KEY));
  EXPECT_EQ(codes[4], kOk);
  EXPECT_EQ(codes[5], Code(ErrorCode::INVALID_PARAMS));
  EXPECT_EQ(codes[6], Code(ErrorCode::INVALID_PARAMS));
  EXPECT_EQ(codes[7], Code(ErrorCode::BUFFER_NOT_REGISTERED));
  EXPECT_EQ(codes[8], Code(ErrorCode::DUPLICATE_KEY));
  EXPECT_EQ(codes[9], kOk);
  EXPECT_EQ(codes[10], Code(ErrorCode::INVALID_KEY));     // NUL inside
  EXPECT_EQ(codes[11], Code(ErrorCode::INVALID_PARAMS));  // 2 ptrs, 1 size

  auto exist = client_->BatchIsExist({"good0", "good1", "good2", "zero", "unreg", ""});
  EXPECT_EQ(exist, (std::vector<int>{1, 1, 1, 0, 0, Code(ErrorCode::INVALID_KEY)}));
  std::vector<uint8_t> out(3000);
  EXPECT_EQ(client_->Get("good2", out.data(), out.size()), 3000);
  EXPECT_EQ(0, std::memcmp(out.data(), s + 8192, 3000));
}

TEST_F(ClientTest, GetSizeMismatchWritesNothingPastBuffer) {
  ASSERT_EQ(client_->Put("obj", src_.data(), 10000), kOk);
  uint8_t* d = dst_.data();
  // Destination smaller than the object: BUFFER_OVERFLOW, guard untouched.
  auto r = client_->BatchGetIntoMultiBuffers({"obj"}, {{d + kBuf - 5000}}, {{5000}});
  EXPECT_EQ(r[0], Code(ErrorCode::BUFFER_OVERFLOW));
  for (size_t i = kBuf; i < kBuf + kGuard; ++i) ASSERT_EQ(dst_[i], 0xEE) << i;
  for (size_t i = kBuf - 5000; i < kBuf; ++i) ASSERT_EQ(dst_[i], 0xEE) << i;
  // Larger than the object is a layout mismatch for multi-buffer gets.
  r = client_->BatchGetIntoMultiBuffers({"obj"}, {{d}}, {{20000}});
  EXPECT_EQ(r[0], Code(ErrorCode::INVALID_PARAMS));
  // Single get with a small buffer.
  std::vector<uint8_t> small(100, 0xEE);
  EXPECT_EQ(client_->Get("obj", small.data(), small.size()), Code(ErrorCode::BUFFER_OVERFLOW));
  EXPECT_EQ(small, std::vector<uint8_t>(100, 0xEE));
}

TEST_F(ClientTest, GetBadInputPerKey) {
  ASSERT_EQ(client_->Put("a", src_.data(), 4096), kOk);
  ASSERT_EQ(client_->Put("b", src_.data() + 4096, 4096), kOk);
  ASSERT_EQ(client_->Put("c", src_.data() + 4096, 4096), kOk);
  std::vector<uint8_t> unregistered(4096);
  uint8_t* d = dst_.data();
  auto r = client_->BatchGetIntoMultiBuffers(
      {"a", "missing", "b", "a", "c", ""},
      {{d}, {d + 8192}, {unregistered.data()}, {d + 16384}, {d + 4096}, {d + 32768}},
      {{4096}, {4096}, {4096}, {4096}, {4096}, {4096}});
  EXPECT_EQ(r[0], 4096);
  EXPECT_EQ(r[1], Code(ErrorCode::OBJECT_NOT_FOUND));
  EXPECT_EQ(r[2], Code(ErrorCode::BUFFER_NOT_REGISTERED));
  EXPECT_EQ(r[3], Code(ErrorCode::DUPLICATE_KEY));
  EXPECT_EQ(r[4], 4096);
  EXPECT_EQ(r[5], Code(ErrorCode::INVALID_KEY));
  EXPECT_EQ(0, std::memcmp(d, src_.data(), 4096));
  EXPECT_EQ(0, std::memcmp(d + 4096, src_.data() + 4096, 4096));
}

TEST_F(ClientTest, PutLargerThanAnySegment) {
  std::vector<uint8_t> big(65ull << 20);
  ASSERT_TRUE(client_->RegisterBuffer(big.data(), big.size()).ok());
  auto codes = client_->BatchPutFromMultiBuffers({"big", "small"}, {{big.data()}, {big.data()}},
                                                 {{big.size()}, {100}});
  EXPECT_EQ(codes[0], Code(ErrorCode::OBJECT_TOO_LARGE));
  EXPECT_EQ(codes[1], kOk);
}

TEST_F(ClientTest, FlippedByteIsChecksumMismatchNeverData) {
  ASSERT_EQ(client_->Put("obj", src_.data(), 100000), kOk);
  auto desc = client_->BatchGetReplicaDesc({"obj"});
  ASSERT_TRUE(desc[0].ok());
  ASSERT_EQ(desc[0]->size(), 1u);
  EXPECT_EQ((*desc[0])[0].tier, ReplicaTier::kMemory);
  EXPECT_EQ((*desc[0])[0].segment_name, client_->store()->segment()->name());
  uint8_t* stored = client_->store()->segment()->base() + (*desc[0])[0].offset;
  stored[54321] ^= 0x01;
  std::vector<uint8_t> out(100000, 0xAA);
  EXPECT_EQ(client_->Get("obj", out.data(), out.size()), Code(ErrorCode::CHECKSUM_MISMATCH));
  EXPECT_EQ(out, std::vector<uint8_t>(100000, 0));  // the corrupt bytes were wiped
  stored[54321] ^= 0x01;
  EXPECT_EQ(client_->Get("obj", out.data(), out.size()), 100000);
}

TEST(ClientChecksum, VerificationOffReturnsStoredBytes) {
  Config c = SmallConfig();
  c.verify_checksum = false;
  auto client = ClientImpl::CreateEmbedded(c);
  ASSERT_TRUE(client.ok());
  auto data = PatternBytes(5000, 3);
  ASSERT_EQ((*client)->Put("k", data.data(), data.size()), kOk);
  auto desc = (*client)->BatchGetReplicaDesc({"k"});
  (*client)->store()->segment()->base()[(*desc[0])[0].offset] ^= 0xFF;
  std::vector<uint8_t> out(5000);
  EXPECT_EQ((*client)->Get("k", out.data(), out.size()), 5000);  // documented trade-off
  EXPECT_NE(out[0], data[0]);
}

TEST(ClientReplicas, CorruptReplicaFallsBackToIntactOne) {
  auto master = std::make_shared<InProcessMaster>(MasterOptions{}, Millis(0));
  auto a = ClientImpl::CreateEmbedded(SmallConfig(), master);
  auto b = ClientImpl::CreateEmbedded(SmallConfig(), master);
  ASSERT_TRUE(a.ok() && b.ok());
  auto data = PatternBytes(70000, 9);
  ReplicateConfig rc;
  rc.replica_num = 2;
  ASSERT_EQ((*a)->Put("k", data.data(), data.size(), rc), kOk);
  auto desc = (*b)->BatchGetReplicaDesc({"k"});
  ASSERT_TRUE(desc[0].ok());
  ASSERT_EQ(desc[0]->size(), 2u);
  EXPECT_NE((*desc[0])[0].segment_name, (*desc[0])[1].segment_name);
  // Corrupt whichever replica is listed first.
  ClientImpl* first =
      (*desc[0])[0].segment_name == (*a)->store()->segment()->name() ? a->get() : b->get();
  first->store()->segment()->base()[(*desc[0])[0].offset + 10] ^= 0x10;
  std::vector<uint8_t> out(70000);
  EXPECT_EQ((*b)->Get("k", out.data(), out.size()), 70000);
  EXPECT_EQ(out, data);
}

TEST(ClientReplicas, DestroyedContributorDropsItsReplicas) {
  auto master = std::make_shared<InProcessMaster>(MasterOptions{}, Millis(0));
  auto a = ClientImpl::CreateEmbedded(SmallConfig(), master);
  auto b = ClientImpl::CreateEmbedded(SmallConfig(), master);
  ASSERT_TRUE(a.ok() && b.ok());
  auto data = PatternBytes(1000, 4);
  ReplicateConfig on_a;
  on_a.preferred_segment = (*a)->store()->segment()->name();
  ASSERT_EQ((*b)->Put("only-a", data.data(), data.size(), on_a), kOk);
  ReplicateConfig two;
  two.replica_num = 2;
  ASSERT_EQ((*b)->Put("both", data.data(), data.size(), two), kOk);
  a->reset();
  std::vector<uint8_t> out(1000);
  EXPECT_EQ((*b)->Get("only-a", out.data(), out.size()), Code(ErrorCode::OBJECT_NOT_FOUND));
  EXPECT_EQ((*b)->Get("both", out.data(), out.size()), 1000);
  EXPECT_EQ(out, data);
}

TEST(ClientLease, TransferOutlivingLeaseIsLeaseExpired) {
  MasterOptions opts;
  opts.lease_ttl = Millis(0);  // every transfer outlives a zero lease
  auto master = std::make_shared<InProcessMaster>(opts, Millis(0));
  auto client = ClientImpl::CreateEmbedded(SmallConfig(), master);
  ASSERT_TRUE(client.ok());
  auto data = PatternBytes(300000, 5);
  ASSERT_EQ((*client)->Put("k", data.data(), data.size()), kOk);
  std::vector<uint8_t> out(data.size(), 0x55);
  EXPECT_EQ((*client)->Get("k", out.data(), out.size()), Code(ErrorCode::LEASE_EXPIRED));
  EXPECT_EQ(out, std::vector<uint8_t>(data.size(), 0));
}

TEST_F(ClientTest, RegisterBufferRules) {
  std::vector<uint8_t> buf(8192);
  EXPECT_TRUE(client_->RegisterBuffer(buf.data(), 4096).ok());
  EXPECT_EQ(client_->RegisterBuffer(buf.data() + 100, 100).code(), ErrorCode::INVALID_PARAMS);
  EXPECT_EQ(client_->RegisterBuffer(buf.data() + 4095, 10).code(), ErrorCode::INVALID_PARAMS);
  EXPECT_TRUE(client_->RegisterBuffer(buf.data() + 4096, 4096).ok());
  EXPECT_EQ(client_->RegisterBuffer(nullptr, 10).code(), ErrorCode::INVALID_PARAMS);
  EXPECT_EQ(client_->RegisterBuffer(buf.data(), 0).code(), ErrorCode::INVALID_PARAMS);
  EXPECT_EQ(client_->UnregisterBuffer(buf.data() + 1).code(), ErrorCode::INVALID_PARAMS);
  EXPECT_TRUE(client_->UnregisterBuffer(buf.data()).ok());
  // A batch spanning two adjacent registrations is not inside one buffer.
  EXPECT_EQ(client_->BatchPutFromMultiBuffers({"x"}, {{buf.data() + 4000}}, {{200}})[0],
            Code(ErrorCode::BUFFER_NOT_REGISTERED));
}

TEST(ClientRegistration, NotRequiredWhenConfiguredOff) {
  Config c = SmallConfig();
  c.require_registered_buffers = false;
  auto client = ClientImpl::CreateEmbedded(c);
  ASSERT_TRUE(client.ok());
  std::vector<uint8_t> data(100, 1), out(100);
  EXPECT_EQ((*client)->BatchPutFromMultiBuffers({"k"}, {{data.data()}}, {{100}})[0], kOk);
  EXPECT_EQ((*client)->BatchGetIntoMultiBuffers({"k"}, {{out.data()}}, {{100}})[0], 100);
  EXPECT_EQ(out, data);
}

TEST_F(ClientTest, RemoveAndRemoveAll) {
  for (int i = 0; i < 5; ++i) {
    ASSERT_EQ(client_->Put("r" + std::to_string(i), src_.data(), 100), kOk);
  }
  EXPECT_EQ(client_->Remove("r0"), kOk);
  EXPECT_EQ(client_->Remove("r0"), Code(ErrorCode::OBJECT_NOT_FOUND));
  // BatchIsExist leased r1: plain remove refuses, forced works.
  EXPECT_EQ(client_->BatchIsExist({"r1"})[0], 1);
  EXPECT_EQ(client_->Remove("r1"), Code(ErrorCode::OBJECT_HAS_LEASE));
  EXPECT_EQ(client_->Remove("r1", true), kOk);
  EXPECT_EQ(client_->RemoveAll(), 3);
  EXPECT_EQ(client_->BatchIsExist({"r2", "r3", "r4"}), (std::vector<int>{0, 0, 0}));
}

TEST_F(ClientTest, BatchShapeMismatch) {
  auto codes = client_->BatchPutFromMultiBuffers({"a", "b"}, {{src_.data()}}, {{10}});
  EXPECT_EQ(codes[0], kOk);
  EXPECT_EQ(codes[1], Code(ErrorCode::INVALID_PARAMS));
  ReplicateConfig rc;
  rc.group_ids = {"g"};  // one group id for two keys
  codes = client_->BatchPutFromMultiBuffers({"c", "d"}, {{src_.data()}, {src_.data()}},
                                            {{10}, {10}}, rc);
  EXPECT_EQ(codes,
            (std::vector<int>{Code(ErrorCode::INVALID_PARAMS), Code(ErrorCode::INVALID_PARAMS)}));
}

TEST_F(ClientTest, LargeBatchOfTinyAndOddObjects) {
  // 5000 keys of 1..64 bytes in one batch, non-ASCII keys included.
  constexpr int kKeys = 5000;
  std::vector<std::string> keys;
  std::vector<std::vector<void*>> ptrs, dptrs;
  std::vector<std::vector<size_t>> sizes;
  size_t off = 0;
  for (int i = 0; i < kKeys; ++i) {
    keys.push_back((i % 3 ? "k\xc3\xa9-" : "k-") + std::to_string(i));
    const size_t size = 1 + static_cast<size_t>(i % 64);
    ptrs.push_back({src_.data() + off});
    dptrs.push_back({dst_.data() + off});
    sizes.push_back({size});
    off += size;
  }
  auto codes = client_->BatchPutFromMultiBuffers(keys, ptrs, sizes);
  for (int i = 0; i < kKeys; ++i) ASSERT_EQ(codes[i], kOk) << keys[i];
  auto got = client_->BatchGetIntoMultiBuffers(keys, dptrs, sizes);
  for (int i = 0; i < kKeys; ++i) ASSERT_EQ(got[i], static_cast<int64_t>(sizes[i][0])) << keys[i];
  EXPECT_EQ(0, std::memcmp(src_.data(), dst_.data(), off));
  auto exist = client_->BatchIsExist(keys);
  EXPECT_EQ(std::count(exist.begin(), exist.end(), 1), kKeys);
}

TEST(ClientCreate, RejectsWhatItCannotRunAndBadConfig) {
  // A requester that contributes no segment has nothing to put an SSD tier behind: refused
  // before any connection is tried.
  Config c = SmallConfig();
  c.mode = Mode::kStandaloneStore;
  c.global_segment_size = 0;
  c.master_server_address = "127.0.0.1:1";
  c.enable_offload = true;
  c.offload_paths = {"/tmp/tierkv-never-created.tier"};
  auto r = Client::Create(c);
  EXPECT_EQ(r.code(), ErrorCode::INVALID_CONFIG) << r.status().ToString();
  EXPECT_NE(r.status().message().find("enable_offload"), std::string::npos);
  Config requester = SmallConfig();
  requester.mode = Mode::kStandaloneStore;
  requester.global_segment_size = 0;  // and no master_server_address
  EXPECT_EQ(Client::Create(requester).code(), ErrorCode::INVALID_CONFIG);
  Config bad = SmallConfig();
  bad.global_segment_size = 0;
  EXPECT_EQ(Client::Create(bad).code(), ErrorCode::INVALID_CONFIG);
  Config offload = SmallConfig();
  offload.enable_offload = true;  // without offload_paths
  EXPECT_EQ(Client::Create(offload).code(), ErrorCode::INVALID_CONFIG);
  auto ok = Client::Create(SmallConfig());
  EXPECT_TRUE(ok.ok()) << ok.status().ToString();
}

}  // namespace
}  // namespace tierkv
