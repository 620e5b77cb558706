#include "memory/memory_segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "pattern_test_util.h"
#include "size_units.h"

namespace tierkv {
namespace {

using test_util::PatternByte;

constexpr uint64_t kHugePage = 2 * kMiB;

uint64_t SmallPage() { return static_cast<uint64_t>(sysconf(_SC_PAGESIZE)); }

int OpenFdCount() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int count = 0;
  while (readdir(dir) != nullptr) ++count;
  closedir(dir);
  return count;
}

void CheckPageKind(const MemorySegment& seg) {
  const std::string kind = seg.page_kind();
  ASSERT_TRUE(kind == "hugetlb" || kind == "thp" || kind == "4k") << kind;
  if (kind == "4k") {
    EXPECT_EQ(seg.page_size(), SmallPage());
  } else {
    EXPECT_EQ(seg.page_size(), kHugePage);
  }
  EXPECT_EQ(seg.size() % seg.page_size(), 0u);
}

class MemorySegmentPolicyTest : public ::testing::TestWithParam<PagePolicy> {};

TEST_P(MemorySegmentPolicyTest, WriteAndReadWholeRange) {
  auto seg = MemorySegment::Create("tierkv-test-rw", 8 * kMiB, GetParam());
  ASSERT_TRUE(seg.ok()) << seg.status().ToString();
  MemorySegment& s = **seg;
  ASSERT_NE(s.base(), nullptr);
  ASSERT_EQ(s.size(), 8 * kMiB);
  EXPECT_EQ(s.name(), "tierkv-test-rw");
  CheckPageKind(s);
  // A fresh memfd reads as zeros.
  for (uint64_t i = 0; i < s.size(); i += 4096) ASSERT_EQ(s.base()[i], 0) << i;
  for (uint64_t i = 0; i < s.size(); ++i) s.base()[i] = PatternByte(i, 7);
  for (uint64_t i = 0; i < s.size(); ++i) ASSERT_EQ(s.base()[i], PatternByte(i, 7)) << i;
}

TEST_P(MemorySegmentPolicyTest, SecondMappingOfFdSharesBytes) {
  auto seg = MemorySegment::Create("tierkv-test-share", 8 * kMiB, GetParam());
  ASSERT_TRUE(seg.ok()) << seg.status().ToString();
  MemorySegment& s = **seg;
  ASSERT_GE(s.fd(), 0);
  struct stat st {};
  ASSERT_EQ(fstat(s.fd(), &st), 0) << std::strerror(errno);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), s.size());
  EXPECT_NE(fcntl(s.fd(), F_GETFD) & FD_CLOEXEC, 0);

  for (uint64_t i = 0; i < s.size(); ++i) s.base()[i] = PatternByte(i, 3);
  // What a same-host requester does with the fd it was handed.
  void* other = mmap(nullptr, s.size(), PROT_READ | PROT_WRITE, MAP_SHARED, s.fd(), 0);
  ASSERT_NE(other, MAP_FAILED) << std::strerror(errno);
  auto* view = static_cast<uint8_t*>(other);
  EXPECT_NE(view, s.base());
  EXPECT_EQ(std::memcmp(view, s.base(), s.size()), 0);
  // And writes flow back.
  view[0] = 0xAB;
  view[s.size() - 1] = 0xCD;
  EXPECT_EQ(s.base()[0], 0xAB);
  EXPECT_EQ(s.base()[s.size() - 1], 0xCD);
  ASSERT_EQ(munmap(other, s.size()), 0);
}

TEST_P(MemorySegmentPolicyTest, EveryPageResidentAfterCreate) {
  auto seg = MemorySegment::Create("tierkv-test-resident", 8 * kMiB, GetParam());
  ASSERT_TRUE(seg.ok()) << seg.status().ToString();
  const uint64_t pages = (*seg)->size() / SmallPage();
  std::vector<unsigned char> vec(pages);
  ASSERT_EQ(mincore((*seg)->base(), (*seg)->size(), vec.data()), 0) << std::strerror(errno);
  for (uint64_t i = 0; i < pages; ++i) ASSERT_EQ(vec[i] & 1, 1) << "page " << i;
}

TEST_P(MemorySegmentPolicyTest, SizeRoundedUpToPageSize) {
  for (uint64_t request : {uint64_t{1}, SmallPage() - 1, SmallPage() + 1, 3 * kMiB + 5}) {
    auto seg = MemorySegment::Create("tierkv-test-round", request, GetParam());
    ASSERT_TRUE(seg.ok()) << seg.status().ToString();
    CheckPageKind(**seg);
    const uint64_t page = (*seg)->page_size();
    EXPECT_EQ((*seg)->size(), (request + page - 1) / page * page) << request;
    // The whole rounded range is usable.
    (*seg)->base()[(*seg)->size() - 1] = 1;
  }
}

TEST_P(MemorySegmentPolicyTest, ZeroSizeIsInvalid) {
  auto seg = MemorySegment::Create("tierkv-test-zero", 0, GetParam());
  ASSERT_FALSE(seg.ok());
  EXPECT_EQ(seg.code(), ErrorCode::INVALID_PARAMS);
}

TEST_P(MemorySegmentPolicyTest, AbsurdSizeIsInvalid) {
  auto seg =
      MemorySegment::Create("tierkv-test-huge", std::numeric_limits<uint64_t>::max(), GetParam());
  ASSERT_FALSE(seg.ok());
  EXPECT_EQ(seg.code(), ErrorCode::INVALID_PARAMS);
}

TEST_P(MemorySegmentPolicyTest, DestructorClosesFdAndNoLeaks) {
  const int before = OpenFdCount();
  ASSERT_GT(before, 0);
  for (int i = 0; i < 8; ++i) {
    auto seg = MemorySegment::Create("tierkv-test-leak", 4 * kMiB, GetParam());
    ASSERT_TRUE(seg.ok()) << seg.status().ToString();
    const int fd = (*seg)->fd();
    ASSERT_GE(fd, 0);
    seg = Result<std::unique_ptr<MemorySegment>>(ErrorCode::INTERNAL_ERROR, "drop");
    EXPECT_EQ(fcntl(fd, F_GETFD), -1);  // closed (nothing else opens fds meanwhile)
  }
  // The hugetlb attempt fails on hosts without reserved huge pages: its fd must not leak.
  EXPECT_EQ(OpenFdCount(), before);
}

TEST_P(MemorySegmentPolicyTest, MemfdNamedAfterSegment) {
  auto seg = MemorySegment::Create("tierkv-test-named", 4096, GetParam());
  ASSERT_TRUE(seg.ok()) << seg.status().ToString();
  char target[512] = {};
  const std::string link = "/proc/self/fd/" + std::to_string((*seg)->fd());
  ASSERT_GT(readlink(link.c_str(), target, sizeof(target) - 1), 0);
  EXPECT_NE(std::string(target).find("memfd:tierkv-test-named"), std::string::npos) << target;
}

TEST_P(MemorySegmentPolicyTest, OverlongNameStillWorks) {
  const std::string name(400, 'n');  // beyond the kernel's memfd name limit
  auto seg = MemorySegment::Create(name, 4096, GetParam());
  ASSERT_TRUE(seg.ok()) << seg.status().ToString();
  EXPECT_EQ((*seg)->name(), name);
}

// Forces a syscall failure with an fd limit of 0: INTERNAL_ERROR naming the call.
TEST_P(MemorySegmentPolicyTest, MemfdCreateFailureReported) {
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  rlimit none = saved;
  none.rlim_cur = 0;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &none), 0);
  auto seg = MemorySegment::Create("tierkv-test-emfile", 4096, GetParam());
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &saved), 0);
  ASSERT_FALSE(seg.ok());
  EXPECT_EQ(seg.code(), ErrorCode::INTERNAL_ERROR);
  EXPECT_NE(seg.status().message().find("memfd_create"), std::string::npos)
      << seg.status().message();
  EXPECT_NE(seg.status().message().find(std::strerror(EMFILE)), std::string::npos)
      << seg.status().message();
}

// ftruncate beyond RLIMIT_FSIZE fails with EFBIG: the memfd opened first must be closed.
TEST_P(MemorySegmentPolicyTest, FtruncateFailureReportedWithoutLeak) {
  const int before = OpenFdCount();
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &saved), 0);
  rlimit small = saved;
  small.rlim_cur = kMiB;
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  auto seg = MemorySegment::Create("tierkv-test-efbig", 8 * kMiB, GetParam());
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &saved), 0);
  std::signal(SIGXFSZ, old_handler);
  ASSERT_FALSE(seg.ok());
  EXPECT_EQ(seg.code(), ErrorCode::INTERNAL_ERROR);
  EXPECT_NE(seg.status().message().find("ftruncate"), std::string::npos) << seg.status().message();
  EXPECT_EQ(OpenFdCount(), before);
}

INSTANTIATE_TEST_SUITE_P(Policies, MemorySegmentPolicyTest,
                         ::testing::Values(PagePolicy::kHugeIfAvailable, PagePolicy::kSmallPages),
                         [](const ::testing::TestParamInfo<PagePolicy>& param_info) {
                           return param_info.param == PagePolicy::kHugeIfAvailable
                                      ? "HugeIfAvailable"
                                      : "SmallPages";
                         });

TEST(MemorySegmentTest, SmallPagesPolicyGivesSmallPages) {
  auto seg = MemorySegment::Create("tierkv-test-small", 8 * kMiB, PagePolicy::kSmallPages);
  ASSERT_TRUE(seg.ok()) << seg.status().ToString();
  EXPECT_STREQ((*seg)->page_kind(), "4k");
  EXPECT_EQ((*seg)->page_size(), SmallPage());
}

}  // namespace
}  // namespace tierkv
