// The Device contract over every implementation (typed suite), the io_uring/pread engines on
// real files (errors, fallback, splitting), and fault injection through FaultyDevice.
#include "device/device.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "device/faulty_device.h"
#include "device/io_buffer.h"
#include "device/memory_device.h"
#include "device/posix_device.h"
#include "device/tier_file.h"
#include "device/uring_device.h"
#include "device_test_util.h"
#include "size_units.h"

namespace tierkv {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kCapacity = 8 * kMiB;

using test_util::ScratchDir;

TierFile MakeTierFile(const ScratchDir& dir, const std::string& name, uint64_t capacity) {
  TierFileOptions options;
  options.capacity = capacity;
  options.allow_buffered_fallback = dir.IsTmpfs();  // old kernels: tmpfs lacks O_DIRECT
  Result<TierFile> file = TierFile::Create(dir.File(name), options);
  EXPECT_TRUE(file.ok()) << file.status().ToString();
  return file.ok() ? std::move(file).value() : TierFile();
}

IoBuffer MakeBuffer(uint64_t size) {
  Result<IoBuffer> buffer = IoBuffer::Allocate(size);
  EXPECT_TRUE(buffer.ok()) << buffer.status().ToString();
  return buffer.ok() ? std::move(buffer).value() : IoBuffer();
}

// A pattern that differs per seed and per 8-byte word, so misplaced blocks show up.
void Fill(uint8_t* data, uint64_t len, uint64_t seed) {
  for (uint64_t i = 0; i < len; i += 8) {
    const uint64_t word = (seed * 0x9E3779B97F4A7C15ull) ^ (i * 0xBF58476D1CE4E5B9ull);
    std::memcpy(data + i, &word, 8);
  }
}

bool Matches(const uint8_t* data, uint64_t len, uint64_t seed) {
  std::vector<uint8_t> want(len);
  Fill(want.data(), len, seed);
  return std::memcmp(want.data(), data, len) == 0;
}

// ---- The contract, typed over the implementations ----

struct MemoryImpl {
  static std::unique_ptr<Device> Make(const ScratchDir&, TierFile*) {
    Result<std::unique_ptr<MemoryDevice>> device = MemoryDevice::Create(kCapacity);
    EXPECT_TRUE(device.ok()) << device.status().ToString();
    return device.ok() ? std::move(device).value() : nullptr;
  }
};

struct PosixImpl {
  static std::unique_ptr<Device> Make(const ScratchDir& dir, TierFile* file) {
    *file = MakeTierFile(dir, "tier", kCapacity);
    DeviceOptions options;
    options.engine = DeviceEngine::kPosix;
    Result<std::unique_ptr<Device>> device = OpenDevice(*file, options);
    EXPECT_TRUE(device.ok()) << device.status().ToString();
    return device.ok() ? std::move(device).value() : nullptr;
  }
};

struct UringImpl {
  static std::unique_ptr<Device> Make(const ScratchDir& dir, TierFile* file) {
    *file = MakeTierFile(dir, "tier", kCapacity);
    DeviceOptions options;
    options.engine = DeviceEngine::kUring;
    options.queue_depth = 8;  // smaller than the batches below: exercises refilling
    Result<std::unique_ptr<Device>> device = OpenDevice(*file, options);
    EXPECT_TRUE(device.ok()) << device.status().ToString();
    return device.ok() ? std::move(device).value() : nullptr;
  }
};

// A FaultyDevice without rules must be transparent.
struct FaultyUringImpl {
  static std::unique_ptr<Device> Make(const ScratchDir& dir, TierFile* file) {
    std::unique_ptr<Device> inner = UringImpl::Make(dir, file);
    return inner ? std::make_unique<FaultyDevice>(std::move(inner)) : nullptr;
  }
};

template <typename Impl>
class DeviceContractTest : public ::testing::Test {
 protected:
  void SetUp() override {
    device_ = Impl::Make(dir_, &file_);
    ASSERT_NE(device_, nullptr);
    ASSERT_EQ(device_->size(), kCapacity);
    ASSERT_EQ(device_->alignment(), 4096u);
  }

  ScratchDir dir_;
  TierFile file_;  // outlives device_ (declared first, destroyed last)
  std::unique_ptr<Device> device_;
};

using Implementations = ::testing::Types<MemoryImpl, PosixImpl, UringImpl, FaultyUringImpl>;
class ImplNames {
 public:
  template <typename T>
  static std::string GetName(int) {
    if (std::is_same_v<T, MemoryImpl>) return "Memory";
    if (std::is_same_v<T, PosixImpl>) return "Posix";
    if (std::is_same_v<T, UringImpl>) return "Uring";
    return "FaultyUring";
  }
};
TYPED_TEST_SUITE(DeviceContractTest, Implementations, ImplNames);

TYPED_TEST(DeviceContractTest, WriteThenReadBackAtSeveralOffsets) {
  Device& device = *this->device_;
  struct Span {
    uint64_t offset;
    uint64_t len;
  };
  const std::vector<Span> spans = {{0, 4 * kKiB},
                                   {4 * kKiB, 8 * kKiB},
                                   {kMiB - 4 * kKiB, 128 * kKiB},
                                   {3 * kMiB, kMiB},
                                   {kCapacity - 64 * kKiB, 64 * kKiB}};
  IoBuffer out = MakeBuffer(2 * kMiB);
  IoBuffer in = MakeBuffer(2 * kMiB);
  for (size_t i = 0; i < spans.size(); ++i) {
    Fill(out.data(), spans[i].len, i + 1);
    ASSERT_TRUE(device.Write(spans[i].offset, out.data(), spans[i].len).ok()) << i;
  }
  for (size_t i = 0; i < spans.size(); ++i) {
    std::memset(in.data(), 0, spans[i].len);
    Status status = device.Read(spans[i].offset, in.data(), spans[i].len);
    ASSERT_TRUE(status.ok()) << status.ToString();
    EXPECT_TRUE(Matches(in.data(), spans[i].len, i + 1)) << "span " << i;
  }
}

TYPED_TEST(DeviceContractTest, BatchesKeepManyRequestsInFlight) {
  Device& device = *this->device_;
  constexpr uint64_t kRequests = 200;  // far more than the queue depth
  constexpr uint64_t kLen = 16 * kKiB;
  IoBuffer out = MakeBuffer(kRequests * kLen);
  IoBuffer in = MakeBuffer(kRequests * kLen);
  std::vector<IoRequest> writes;
  std::vector<IoRequest> reads;
  for (uint64_t i = 0; i < kRequests; ++i) {
    // Interleaved placement: request i goes to slot (i * 7) % kRequests.
    const uint64_t offset = ((i * 7) % kRequests) * kLen;
    Fill(out.data() + i * kLen, kLen, 1000 + i);
    writes.push_back(IoRequest{offset, out.data() + i * kLen, kLen});
    // Read back in reverse order.
    reads.insert(reads.begin(), IoRequest{offset, in.data() + i * kLen, kLen});
  }
  for (const Status& status : device.WriteBatch(writes))
    ASSERT_TRUE(status.ok()) << status.ToString();
  std::vector<Status> results = device.ReadBatch(reads);
  ASSERT_EQ(results.size(), kRequests);
  for (const Status& status : results) ASSERT_TRUE(status.ok()) << status.ToString();
  for (uint64_t i = 0; i < kRequests; ++i) {
    EXPECT_TRUE(Matches(in.data() + i * kLen, kLen, 1000 + i)) << "request " << i;
  }
  EXPECT_TRUE(device.ReadBatch({}).empty());
}

// The completion callback hears of every request exactly once, with the status the batch
// returns, and a request's bytes are already in place when it is reported.
TYPED_TEST(DeviceContractTest, BatchCallbackReportsEachRequestOnceWithItsBytes) {
  Device& device = *this->device_;
  constexpr uint64_t kRequests = 80;  // more than the io_uring queue depth
  constexpr uint64_t kLen = 16 * kKiB;
  IoBuffer out = MakeBuffer(kRequests * kLen);
  IoBuffer in = MakeBuffer(kRequests * kLen);
  std::vector<IoRequest> writes;
  std::vector<IoRequest> reads;
  for (uint64_t i = 0; i < kRequests; ++i) {
    Fill(out.data() + i * kLen, kLen, 500 + i);
    writes.push_back(IoRequest{i * kLen, out.data() + i * kLen, kLen});
    reads.push_back(IoRequest{i * kLen, in.data() + i * kLen, kLen});
  }
  // Two requests that break the contract are reported too (before any IO).
  reads.push_back(IoRequest{100, in.data(), kLen});
  reads.push_back(IoRequest{0, in.data(), 0});
  std::vector<int> write_calls(writes.size(), 0);
  std::vector<Status> written = device.WriteBatch(writes, [&](size_t i, const Status& s) {
    ASSERT_LT(i, writes.size());
    ++write_calls[i];
    EXPECT_TRUE(s.ok()) << s.ToString();
  });
  for (size_t i = 0; i < writes.size(); ++i) {
    ASSERT_TRUE(written[i].ok()) << written[i].ToString();
    EXPECT_EQ(write_calls[i], 1) << i;
  }
  std::vector<int> calls(reads.size(), 0);
  std::vector<ErrorCode> seen(reads.size(), ErrorCode::OK);
  std::vector<bool> bytes_ok(reads.size(), false);
  std::vector<Status> results = device.ReadBatch(reads, [&](size_t i, const Status& s) {
    ASSERT_LT(i, reads.size());
    ++calls[i];
    seen[i] = s.code();
    if (s.ok() && i < kRequests) bytes_ok[i] = Matches(in.data() + i * kLen, kLen, 500 + i);
  });
  ASSERT_EQ(results.size(), reads.size());
  for (size_t i = 0; i < reads.size(); ++i) {
    EXPECT_EQ(calls[i], 1) << i;
    EXPECT_EQ(seen[i], results[i].code()) << i;
    if (i < kRequests) {
      EXPECT_TRUE(results[i].ok()) << i << ": " << results[i].ToString();
      EXPECT_TRUE(bytes_ok[i]) << "request " << i << " reported before its bytes were in place";
    } else {
      EXPECT_EQ(results[i].code(), ErrorCode::INVALID_PARAMS) << i;
    }
  }
}

TYPED_TEST(DeviceContractTest, RejectsUnalignedRequestsBeforeAnyIo) {
  Device& device = *this->device_;
  IoBuffer buf = MakeBuffer(64 * kKiB);
  Fill(buf.data(), 16 * kKiB, 7);
  ASSERT_TRUE(device.Write(0, buf.data(), 16 * kKiB).ok());

  // Writes that would change bytes if they reached the device.
  std::memset(buf.data(), 0xAB, 64 * kKiB);
  EXPECT_EQ(device.Write(512, buf.data(), 4 * kKiB).code(), ErrorCode::INVALID_PARAMS);
  EXPECT_EQ(device.Write(0, buf.data(), 1000).code(), ErrorCode::INVALID_PARAMS);
  EXPECT_EQ(device.Write(0, buf.data() + 512, 4 * kKiB).code(), ErrorCode::INVALID_PARAMS);
  EXPECT_EQ(device.Write(0, buf.data(), 0).code(), ErrorCode::INVALID_PARAMS);
  EXPECT_EQ(device.Write(0, nullptr, 4 * kKiB).code(), ErrorCode::INVALID_PARAMS);
  std::vector<Status> batch = device.WriteBatch({IoRequest{0, buf.data() + 8, 4 * kKiB}});
  ASSERT_EQ(batch.size(), 1u);
  EXPECT_EQ(batch[0].code(), ErrorCode::INVALID_PARAMS);
  EXPECT_NE(batch[0].message().find("aligned"), std::string::npos) << batch[0].message();

  // Reads into a buffer that would change if they reached the device.
  EXPECT_EQ(device.Read(4096 + 1, buf.data(), 4 * kKiB).code(), ErrorCode::INVALID_PARAMS);
  EXPECT_EQ(device.Read(0, buf.data(), 4097).code(), ErrorCode::INVALID_PARAMS);
  EXPECT_EQ(device.Read(0, buf.data() + 4095, 4 * kKiB).code(), ErrorCode::INVALID_PARAMS);
  for (uint64_t i = 0; i < 64 * kKiB; ++i) ASSERT_EQ(buf.data()[i], 0xAB) << i;

  ASSERT_TRUE(device.Read(0, buf.data(), 16 * kKiB).ok());
  EXPECT_TRUE(Matches(buf.data(), 16 * kKiB, 7));
}

TYPED_TEST(DeviceContractTest, RejectsOutOfRangeRequests) {
  Device& device = *this->device_;
  IoBuffer buf = MakeBuffer(64 * kKiB);
  const uint64_t size = device.size();
  EXPECT_EQ(device.Read(size, buf.data(), 4 * kKiB).code(), ErrorCode::INVALID_PARAMS);
  EXPECT_EQ(device.Read(size - 4 * kKiB, buf.data(), 8 * kKiB).code(), ErrorCode::INVALID_PARAMS);
  EXPECT_EQ(device.Write(size, buf.data(), 4 * kKiB).code(), ErrorCode::INVALID_PARAMS);
  // offset + len overflows 64 bits.
  const uint64_t huge = ~uint64_t{0} & ~uint64_t{4095};
  Status status = device.Write(huge, buf.data(), 8 * kKiB);
  EXPECT_EQ(status.code(), ErrorCode::INVALID_PARAMS);
  EXPECT_NE(status.message().find("outside"), std::string::npos) << status.message();
  // The last block is in range.
  Fill(buf.data(), 4 * kKiB, 3);
  ASSERT_TRUE(device.Write(size - 4 * kKiB, buf.data(), 4 * kKiB).ok());
  std::memset(buf.data(), 0, 4 * kKiB);
  ASSERT_TRUE(device.Read(size - 4 * kKiB, buf.data(), 4 * kKiB).ok());
  EXPECT_TRUE(Matches(buf.data(), 4 * kKiB, 3));
}

TYPED_TEST(DeviceContractTest, BadRequestInBatchFailsOnlyItself) {
  Device& device = *this->device_;
  IoBuffer out = MakeBuffer(64 * kKiB);
  IoBuffer in = MakeBuffer(64 * kKiB);
  Fill(out.data(), 64 * kKiB, 11);
  std::vector<Status> written = device.WriteBatch(
      {IoRequest{0, out.data(), 16 * kKiB}, IoRequest{kCapacity, out.data(), 4 * kKiB},
       IoRequest{16 * kKiB, out.data() + 16 * kKiB, 48 * kKiB}});
  ASSERT_EQ(written.size(), 3u);
  EXPECT_TRUE(written[0].ok());
  EXPECT_EQ(written[1].code(), ErrorCode::INVALID_PARAMS);
  EXPECT_TRUE(written[2].ok());
  std::vector<Status> read =
      device.ReadBatch({IoRequest{0, in.data(), 64 * kKiB}, IoRequest{100, in.data(), 4 * kKiB}});
  EXPECT_TRUE(read[0].ok());
  EXPECT_EQ(read[1].code(), ErrorCode::INVALID_PARAMS);
  EXPECT_TRUE(Matches(in.data(), 64 * kKiB, 11));
}

TYPED_TEST(DeviceContractTest, ConcurrentCallersOnDisjointRanges) {
  Device& device = *this->device_;
  constexpr int kThreads = 6;  // more than the 4 default rings: some callers must wait
  constexpr uint64_t kRegion = kCapacity / kThreads / 4096 * 4096;
  constexpr uint64_t kLen = 32 * kKiB;
  std::vector<std::thread> threads;
  std::vector<int> failures(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Result<IoBuffer> out = IoBuffer::Allocate(kRegion);
      Result<IoBuffer> in = IoBuffer::Allocate(kRegion);
      if (!out.ok() || !in.ok()) {
        ++failures[t];
        return;
      }
      for (int round = 0; round < 3; ++round) {
        std::vector<IoRequest> writes;
        std::vector<IoRequest> reads;
        const uint64_t seed = static_cast<uint64_t>(t * 100 + round);
        Fill(out->data(), kRegion / kLen * kLen, seed);
        for (uint64_t off = 0; off + kLen <= kRegion; off += kLen) {
          writes.push_back(IoRequest{t * kRegion + off, out->data() + off, kLen});
          reads.push_back(IoRequest{t * kRegion + off, in->data() + off, kLen});
        }
        for (const Status& s : device.WriteBatch(writes)) failures[t] += s.ok() ? 0 : 1;
        for (const Status& s : device.ReadBatch(reads)) failures[t] += s.ok() ? 0 : 1;
        if (!Matches(in->data(), kRegion / kLen * kLen, seed)) ++failures[t];
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(failures[t], 0) << "thread " << t;
}

// ---- io_uring and pread/pwrite engines on real files ----

class DeviceEngineTest : public ::testing::TestWithParam<DeviceEngine> {
 protected:
  std::unique_ptr<Device> Open(int fd, uint64_t size) {
    DeviceOptions options;
    options.engine = GetParam();
    Result<std::unique_ptr<Device>> device = OpenDevice(fd, size, 4096, options);
    EXPECT_TRUE(device.ok()) << device.status().ToString();
    return device.ok() ? std::move(device).value() : nullptr;
  }

  ScratchDir dir_;
};

INSTANTIATE_TEST_SUITE_P(Engines, DeviceEngineTest,
                         ::testing::Values(DeviceEngine::kUring, DeviceEngine::kPosix),
                         [](const ::testing::TestParamInfo<DeviceEngine>& param) {
                           return param.param == DeviceEngine::kUring ? std::string("Uring")
                                                                      : std::string("Posix");
                         });

TEST_P(DeviceEngineTest, ShortReadIsAnErrorAndTheDeviceKeepsWorking) {
  TierFile file = MakeTierFile(dir_, "tier", kMiB);
  ASSERT_GE(file.fd(), 0);
  // The device claims twice the file's size: reads past the end of the file come back empty.
  std::unique_ptr<Device> device = Open(file.fd(), 2 * kMiB);
  ASSERT_NE(device, nullptr);
  IoBuffer buf = MakeBuffer(64 * kKiB);
  Fill(buf.data(), 64 * kKiB, 5);
  ASSERT_TRUE(device->Write(0, buf.data(), 64 * kKiB).ok());

  Status status = device->Read(kMiB + 512 * kKiB, buf.data(), 64 * kKiB);
  EXPECT_EQ(status.code(), ErrorCode::FILE_READ_FAIL);
  EXPECT_NE(status.message().find("short read at offset 1572864: transferred 0 of 65536"),
            std::string::npos)
      << status.message();
  // A batch straddling the end (of the file: its data, then its 4 KiB label): only the request
  // past it fails.
  std::vector<Status> batch =
      device->ReadBatch({IoRequest{0, buf.data(), 32 * kKiB},
                         IoRequest{kMiB + TierFile::kLabelBytes, buf.data() + 32 * kKiB, 4096}});
  EXPECT_TRUE(batch[0].ok()) << batch[0].ToString();
  EXPECT_EQ(batch[1].code(), ErrorCode::FILE_READ_FAIL);

  std::memset(buf.data(), 0, 64 * kKiB);
  ASSERT_TRUE(device->Read(0, buf.data(), 64 * kKiB).ok());
  EXPECT_TRUE(Matches(buf.data(), 64 * kKiB, 5));
}

TEST_P(DeviceEngineTest, WriteErrorNamesErrnoAndTheDeviceKeepsWorking) {
  TierFile file = MakeTierFile(dir_, "tier", kMiB);
  ASSERT_GE(file.fd(), 0);
  // A read-only descriptor: every write fails with EBADF, reads work.
  const int ro = open(file.path().c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(ro, 0);
  std::unique_ptr<Device> device = Open(ro, kMiB);
  ASSERT_NE(device, nullptr);
  IoBuffer buf = MakeBuffer(64 * kKiB);
  Status status = device->Write(8192, buf.data(), 4096);
  EXPECT_EQ(status.code(), ErrorCode::FILE_WRITE_FAIL);
  EXPECT_NE(status.message().find("write of 4096 bytes at offset 8192 failed: " +
                                  std::string(std::strerror(EBADF))),
            std::string::npos)
      << status.message();
  std::vector<Status> batch =
      device->WriteBatch({IoRequest{0, buf.data(), 4096}, IoRequest{4096, buf.data(), 4096}});
  EXPECT_EQ(batch[0].code(), ErrorCode::FILE_WRITE_FAIL);
  EXPECT_EQ(batch[1].code(), ErrorCode::FILE_WRITE_FAIL);
  EXPECT_TRUE(device->Read(0, buf.data(), 64 * kKiB).ok());
  device.reset();
  close(ro);
}

TEST(UringDeviceTest, SplitsLargeRequestsIntoPieces) {
  ScratchDir dir;
  TierFile file = MakeTierFile(dir, "tier", 4 * kMiB);
  ASSERT_GE(file.fd(), 0);
  UringDeviceOptions options;
  options.queue_depth = 4;
  options.num_rings = 1;
  options.TEST_max_piece = 8 * kKiB;  // 1 MiB request = 128 pieces through a depth-4 queue
  Result<std::unique_ptr<UringDevice>> device =
      UringDevice::Open(file.fd(), file.capacity(), file.alignment(), options);
  ASSERT_TRUE(device.ok()) << device.status().ToString();
  IoBuffer out = MakeBuffer(4 * kMiB);
  IoBuffer in = MakeBuffer(4 * kMiB);
  Fill(out.data(), 2 * kMiB + 4096, 77);
  std::vector<Status> written = (*device)->WriteBatch(
      {IoRequest{0, out.data(), kMiB}, IoRequest{2 * kMiB, out.data() + kMiB, kMiB + 4096}});
  for (const Status& s : written) ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_TRUE((*device)->Read(0, in.data(), kMiB).ok());
  ASSERT_TRUE((*device)->Read(2 * kMiB, in.data() + kMiB, kMiB + 4096).ok());
  EXPECT_TRUE(Matches(in.data(), 2 * kMiB + 4096, 77));

  // A split request is reported once, after its last piece: its bytes are all there.
  std::memset(in.data(), 0, 4 * kMiB);
  std::vector<int> calls(2, 0);
  std::vector<bool> whole(2, false);
  std::vector<Status> read = (*device)->ReadBatch(
      {IoRequest{0, in.data(), kMiB}, IoRequest{2 * kMiB, in.data() + kMiB, kMiB + 4096}},
      [&](size_t i, const Status& s) {
        ++calls[i];
        whole[i] = s.ok() && std::memcmp(in.data() + i * kMiB, out.data() + i * kMiB,
                                         i == 0 ? kMiB : kMiB + 4096) == 0;
      });
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_TRUE(read[i].ok()) << read[i].ToString();
    EXPECT_EQ(calls[i], 1) << i;
    EXPECT_TRUE(whole[i]) << "request " << i << " reported before all its pieces were read";
  }
}

// max_inflight_bytes: a batch never has more bytes in flight than the bound, except a single
// request bigger than the bound (which still goes, alone). With room for exactly one request,
// requests complete strictly in order.
TEST(UringDeviceTest, BoundsTheBytesInFlight) {
  ScratchDir dir;
  TierFile file = MakeTierFile(dir, "tier", 4 * kMiB);
  ASSERT_GE(file.fd(), 0);
  UringDeviceOptions options;
  options.queue_depth = 8;
  options.num_rings = 1;
  options.max_inflight_bytes = 32 * kKiB;
  Result<std::unique_ptr<UringDevice>> device =
      UringDevice::Open(file.fd(), file.capacity(), file.alignment(), options);
  ASSERT_TRUE(device.ok()) << device.status().ToString();
  IoBuffer out = MakeBuffer(2 * kMiB);
  IoBuffer in = MakeBuffer(2 * kMiB);
  Fill(out.data(), 2 * kMiB, 5);
  {  // written through another device, so this one's peak counts only the reads below
    auto writer = UringDevice::Open(file.fd(), file.capacity(), file.alignment(), options);
    ASSERT_TRUE(writer.ok());
    ASSERT_TRUE((*writer)->Write(0, out.data(), 2 * kMiB).ok());
  }
  std::vector<IoRequest> requests;
  for (uint64_t i = 0; i < 16; ++i) {
    requests.push_back(IoRequest{i * 32 * kKiB, in.data() + i * 32 * kKiB, 32 * kKiB});
  }
  // Without the bound, 8 of these (256 KiB) would be queued at once.
  std::vector<Status> small = (*device)->ReadBatch(requests);
  for (const Status& s : small) EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ((*device)->TEST_peak_inflight_bytes(), 32 * kKiB);
  requests.push_back(IoRequest{kMiB, in.data() + kMiB, kMiB});  // 32x the bound
  std::vector<size_t> order;
  std::vector<Status> read =
      (*device)->ReadBatch(requests, [&](size_t i, const Status&) { order.push_back(i); });
  for (const Status& s : read) EXPECT_TRUE(s.ok()) << s.ToString();
  std::vector<size_t> expected(requests.size());
  for (size_t i = 0; i < expected.size(); ++i) expected[i] = i;
  EXPECT_EQ(order, expected) << "more than one request was in flight";
  EXPECT_EQ((*device)->TEST_peak_inflight_bytes(), kMiB);  // the big one, alone
  EXPECT_EQ(std::memcmp(in.data(), out.data(), 16 * 32 * kKiB), 0);
  EXPECT_EQ(std::memcmp(in.data() + kMiB, out.data() + kMiB, kMiB), 0);
}

TEST(UringDeviceTest, RejectsBadOptions) {
  UringDeviceOptions options;
  options.queue_depth = 0;
  EXPECT_EQ(UringDevice::Open(0, kMiB, 4096, options).code(), ErrorCode::INVALID_PARAMS);
  options.queue_depth = 32;
  options.num_rings = 0;
  EXPECT_EQ(UringDevice::Open(0, kMiB, 4096, options).code(), ErrorCode::INVALID_PARAMS);
  options.num_rings = 1;
  EXPECT_EQ(UringDevice::Open(-1, kMiB, 4096, options).code(), ErrorCode::INVALID_PARAMS);
  EXPECT_EQ(UringDevice::Open(0, kMiB, 3000, options).code(), ErrorCode::INVALID_PARAMS);
  EXPECT_EQ(UringDevice::Open(0, kMiB + 1, 4096, options).code(), ErrorCode::INVALID_PARAMS);
  EXPECT_EQ(PosixDevice::Open(0, 0, 4096).code(), ErrorCode::INVALID_PARAMS);
  EXPECT_EQ(MemoryDevice::Create(4096, 6).code(), ErrorCode::INVALID_PARAMS);
}

TEST(OpenDeviceTest, FallsBackToPosixWhenIoUringIsUnavailable) {
  ScratchDir dir;
  TierFile file = MakeTierFile(dir, "tier", kMiB);
  ASSERT_GE(file.fd(), 0);
  DeviceOptions options;
  options.TEST_fail_uring_setup = true;

  options.engine = DeviceEngine::kUring;  // no fallback asked for: the setup error
  Result<std::unique_ptr<Device>> strict = OpenDevice(file, options);
  EXPECT_EQ(strict.code(), ErrorCode::INTERNAL_ERROR);
  EXPECT_NE(strict.status().message().find("io_uring_queue_init"), std::string::npos)
      << strict.status().message();

  options.engine = DeviceEngine::kAuto;
  Result<std::unique_ptr<Device>> fallback = OpenDevice(file, options);
  ASSERT_TRUE(fallback.ok()) << fallback.status().ToString();
  EXPECT_NE(dynamic_cast<PosixDevice*>(fallback->get()), nullptr);
  IoBuffer buf = MakeBuffer(4096);
  Fill(buf.data(), 4096, 9);
  ASSERT_TRUE((*fallback)->Write(4096, buf.data(), 4096).ok());

  options.TEST_fail_uring_setup = false;
  Result<std::unique_ptr<Device>> uring = OpenDevice(file, options);
  ASSERT_TRUE(uring.ok()) << uring.status().ToString();
  EXPECT_NE(dynamic_cast<UringDevice*>(uring->get()), nullptr);
  std::memset(buf.data(), 0, 4096);
  ASSERT_TRUE((*uring)->Read(4096, buf.data(), 4096).ok());
  EXPECT_TRUE(Matches(buf.data(), 4096, 9));

  // Bad arguments are not a reason to fall back.
  options.queue_depth = 0;
  EXPECT_EQ(OpenDevice(file, options).code(), ErrorCode::INVALID_PARAMS);
}

// ---- Fault injection ----

class FaultyDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    file_ = MakeTierFile(dir_, "tier", kMiB);
    ASSERT_GE(file_.fd(), 0);
    DeviceOptions options;
    options.engine = DeviceEngine::kUring;
    Result<std::unique_ptr<Device>> inner = OpenDevice(file_, options);
    ASSERT_TRUE(inner.ok()) << inner.status().ToString();
    device_ = std::make_unique<FaultyDevice>(std::move(inner).value());
    out_ = MakeBuffer(256 * kKiB);
    in_ = MakeBuffer(256 * kKiB);
    Fill(out_.data(), 256 * kKiB, 21);
    ASSERT_TRUE(device_->inner()->Write(0, out_.data(), 256 * kKiB).ok());
  }

  // A read of [offset, offset + len) that must succeed with the original bytes.
  void ExpectGoodRead(uint64_t offset, uint64_t len) {
    std::memset(in_.data(), 0, len);
    Status status = device_->Read(offset, in_.data(), len);
    ASSERT_TRUE(status.ok()) << status.ToString();
    EXPECT_EQ(std::memcmp(in_.data(), out_.data() + offset, len), 0);
  }

  ScratchDir dir_;
  TierFile file_;
  std::unique_ptr<FaultyDevice> device_;
  IoBuffer out_;
  IoBuffer in_;
};

TEST_F(FaultyDeviceTest, ReadEioFailsOneReadThenReadsWork) {
  ASSERT_TRUE(device_->AddFault(FaultRule::Once(FaultKind::kReadEio)).ok());
  // Writes do not consume a read fault.
  ASSERT_TRUE(device_->Write(0, out_.data(), 4096).ok());
  Status status = device_->Read(8192, in_.data(), 4096);
  EXPECT_EQ(status.code(), ErrorCode::FILE_READ_FAIL);
  EXPECT_NE(status.message().find(std::strerror(EIO)), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("offset 8192"), std::string::npos) << status.message();
  ExpectGoodRead(8192, 4096);
  FaultCounters counters = device_->counters();
  EXPECT_EQ(counters.read_eio, 1u);
  EXPECT_EQ(counters.injected(), 1u);
  EXPECT_EQ(counters.reads, 2u);
  EXPECT_EQ(counters.writes, 1u);
}

TEST_F(FaultyDeviceTest, WriteEioFailsOneWriteThenWritesWork) {
  ASSERT_TRUE(device_->AddFault(FaultRule::Once(FaultKind::kWriteEio)).ok());
  ExpectGoodRead(0, 4096);  // reads do not consume a write fault
  Fill(in_.data(), 4096, 99);
  Status status = device_->Write(0, in_.data(), 4096);
  EXPECT_EQ(status.code(), ErrorCode::FILE_WRITE_FAIL);
  EXPECT_NE(status.message().find(std::strerror(EIO)), std::string::npos) << status.message();
  ExpectGoodRead(0, 4096);  // the failed write changed nothing
  ASSERT_TRUE(device_->Write(0, out_.data(), 4096).ok());
  EXPECT_EQ(device_->counters().write_eio, 1u);
}

TEST_F(FaultyDeviceTest, WriteEnospcIsAWriteFailure) {
  ASSERT_TRUE(device_->AddFault(FaultRule::Once(FaultKind::kWriteEnospc)).ok());
  Status status = device_->Write(4096, out_.data() + 4096, 4096);
  EXPECT_EQ(status.code(), ErrorCode::FILE_WRITE_FAIL);
  EXPECT_NE(status.message().find(std::strerror(ENOSPC)), std::string::npos) << status.message();
  EXPECT_TRUE(device_->Write(4096, out_.data() + 4096, 4096).ok());
  EXPECT_EQ(device_->counters().write_enospc, 1u);
}

TEST_F(FaultyDeviceTest, ShortReadReportsByteCounts) {
  ASSERT_TRUE(device_->AddFault(FaultRule::Once(FaultKind::kShortRead)).ok());
  Status status = device_->Read(16384, in_.data(), 16384);
  EXPECT_EQ(status.code(), ErrorCode::FILE_READ_FAIL);
  EXPECT_NE(status.message().find("short read at offset 16384: transferred 8192 of 16384"),
            std::string::npos)
      << status.message();
  ExpectGoodRead(16384, 16384);
  EXPECT_EQ(device_->counters().short_read, 1u);
}

TEST_F(FaultyDeviceTest, ShortWriteWritesOnlyThePrefix) {
  ASSERT_TRUE(device_->AddFault(FaultRule::Once(FaultKind::kShortWrite)).ok());
  IoBuffer fresh = MakeBuffer(16384);
  Fill(fresh.data(), 16384, 555);
  Status status = device_->Write(0, fresh.data(), 16384);
  EXPECT_EQ(status.code(), ErrorCode::FILE_WRITE_FAIL);
  EXPECT_NE(status.message().find("short write at offset 0: transferred 8192 of 16384"),
            std::string::npos)
      << status.message();
  ASSERT_TRUE(device_->Read(0, in_.data(), 16384).ok());
  EXPECT_EQ(std::memcmp(in_.data(), fresh.data(), 8192), 0);               // the prefix landed
  EXPECT_EQ(std::memcmp(in_.data() + 8192, out_.data() + 8192, 8192), 0);  // the rest did not
  EXPECT_TRUE(device_->Write(0, fresh.data(), 16384).ok());
  EXPECT_EQ(device_->counters().short_write, 1u);
}

TEST_F(FaultyDeviceTest, EveryNthFaultIsDeterministic) {
  ASSERT_TRUE(device_->AddFault(FaultRule::EveryNth(FaultKind::kReadEio, 3)).ok());
  std::vector<bool> failed;
  for (int i = 0; i < 9; ++i) failed.push_back(!device_->Read(0, in_.data(), 4096).ok());
  EXPECT_EQ(failed,
            (std::vector<bool>{false, false, true, false, false, true, false, false, true}));
  EXPECT_EQ(device_->counters().read_eio, 3u);
  device_->ClearFaults();
  for (int i = 0; i < 3; ++i) ExpectGoodRead(0, 4096);
  EXPECT_EQ(device_->counters().read_eio, 3u);
}

TEST_F(FaultyDeviceTest, OffsetRangeFaultsOnlyOverlappingRequests) {
  ASSERT_TRUE(device_->AddFault(FaultRule::InRange(FaultKind::kReadEio, 40960, 45056)).ok());
  EXPECT_EQ(device_->Read(40960, in_.data(), 4096).code(), ErrorCode::FILE_READ_FAIL);
  EXPECT_EQ(device_->Read(32768, in_.data(), 16384).code(), ErrorCode::FILE_READ_FAIL);
  ExpectGoodRead(36864, 4096);  // ends where the range starts
  ExpectGoodRead(45056, 4096);  // starts where it ends
  EXPECT_EQ(device_->Read(40960, in_.data(), 4096).code(), ErrorCode::FILE_READ_FAIL);
  EXPECT_EQ(device_->counters().read_eio, 3u);
}

TEST_F(FaultyDeviceTest, BatchWithOneFaultyRequestFailsOnlyThatOne) {
  ASSERT_TRUE(
      device_->AddFault(FaultRule::InRange(FaultKind::kReadEio, 5 * 16384, 6 * 16384)).ok());
  std::vector<IoRequest> reads;
  for (uint64_t i = 0; i < 16; ++i) {
    reads.push_back(IoRequest{i * 16384, in_.data() + i * 16384, 16384});
  }
  std::memset(in_.data(), 0, 256 * kKiB);
  std::vector<Status> results = device_->ReadBatch(reads);
  ASSERT_EQ(results.size(), 16u);
  for (uint64_t i = 0; i < 16; ++i) {
    if (i == 5) {
      EXPECT_EQ(results[i].code(), ErrorCode::FILE_READ_FAIL);
    } else {
      ASSERT_TRUE(results[i].ok()) << i << ": " << results[i].ToString();
      EXPECT_EQ(std::memcmp(in_.data() + i * 16384, out_.data() + i * 16384, 16384), 0) << i;
    }
  }
  // Writes: one ENOSPC in the middle of a batch.
  device_->ClearFaults();
  ASSERT_TRUE(device_->AddFault(FaultRule::EveryNth(FaultKind::kWriteEnospc, 4)).ok());
  std::vector<IoRequest> writes;
  for (uint64_t i = 0; i < 6; ++i) {
    writes.push_back(IoRequest{i * 16384, out_.data() + i * 16384, 16384});
  }
  results = device_->WriteBatch(writes);
  for (uint64_t i = 0; i < 6; ++i) {
    EXPECT_EQ(results[i].ok(), i != 3) << i << ": " << results[i].ToString();
  }
  EXPECT_EQ(results[3].code(), ErrorCode::FILE_WRITE_FAIL);
}

TEST_F(FaultyDeviceTest, BatchCallbackReportsInjectedFaults) {
  ASSERT_TRUE(
      device_->AddFault(FaultRule::InRange(FaultKind::kReadEio, 2 * 16384, 3 * 16384)).ok());
  ASSERT_TRUE(
      device_->AddFault(FaultRule::InRange(FaultKind::kShortRead, 6 * 16384, 7 * 16384)).ok());
  std::vector<IoRequest> reads;
  for (uint64_t i = 0; i < 8; ++i) {
    reads.push_back(IoRequest{i * 16384, in_.data() + i * 16384, 16384});
  }
  std::vector<int> calls(reads.size(), 0);
  std::vector<ErrorCode> seen(reads.size(), ErrorCode::OK);
  std::vector<Status> results = device_->ReadBatch(reads, [&](size_t i, const Status& s) {
    ++calls[i];
    seen[i] = s.code();
  });
  for (size_t i = 0; i < reads.size(); ++i) {
    EXPECT_EQ(calls[i], 1) << i;
    EXPECT_EQ(seen[i], results[i].code()) << i;
    EXPECT_EQ(results[i].ok(), i != 2 && i != 6) << i << ": " << results[i].ToString();
  }
}

TEST_F(FaultyDeviceTest, InvalidRequestsNeitherCountNorConsumeFaults) {
  ASSERT_TRUE(device_->AddFault(FaultRule::Once(FaultKind::kReadEio)).ok());
  EXPECT_EQ(device_->Read(1, in_.data(), 4096).code(), ErrorCode::INVALID_PARAMS);
  EXPECT_EQ(device_->counters().reads, 0u);
  EXPECT_EQ(device_->Read(0, in_.data(), 4096).code(), ErrorCode::FILE_READ_FAIL);
  EXPECT_EQ(device_->AddFault(FaultRule::EveryNth(FaultKind::kReadEio, 0)).code(),
            ErrorCode::INVALID_PARAMS);
  EXPECT_EQ(device_->AddFault(FaultRule::InRange(FaultKind::kReadEio, 10, 10)).code(),
            ErrorCode::INVALID_PARAMS);
}

TEST(FaultyMemoryDeviceTest, WrapsAnyDevice) {
  Result<std::unique_ptr<MemoryDevice>> memory = MemoryDevice::Create(64 * kKiB, 512);
  ASSERT_TRUE(memory.ok());
  FaultyDevice device(std::move(memory).value());
  EXPECT_EQ(device.alignment(), 512u);
  EXPECT_EQ(device.size(), 64 * kKiB);
  ASSERT_TRUE(device.AddFault(FaultRule::Once(FaultKind::kShortRead)).ok());
  IoBuffer buf = MakeBuffer(4096);
  // 1024 bytes: half is 512, one aligned block.
  EXPECT_NE(device.Read(0, buf.data(), 1024).message().find("transferred 512 of 1024"),
            std::string::npos);
  EXPECT_TRUE(device.Read(0, buf.data(), 1024).ok());
}

}  // namespace
}  // namespace tierkv
