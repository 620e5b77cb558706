// The same-host shared-memory transport across processes: a forked child serves a segment (and is
// SIGKILLed), and peers of another uid are refused. Every test stops every process it starts.
#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/fsuid.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <memory>
#include <string>

#include "memory/memory_segment.h"
#include "pattern_test_util.h"
#include "transport/ipc_path.h"
#include "transport/shm_protocol.h"
#include "transport/shm_segment_client.h"
#include "transport/shm_segment_server.h"
#include "transport_test_util.h"

namespace tierkv::transport {
namespace {

using test_util::PatternByte;
using testing::Millis;
using testing::ReapedChild;
using testing::WaitUntil;

constexpr uint64_t kChildSegmentSize = uint64_t{4} << 20;
constexpr const char* kChildSegmentName = "child-segment";
constexpr const char* kSocketName = "child.sock";
constexpr Millis kTimeout{2000};

// In the forked child: makes a segment filled with PatternByte(i, 3), serves it as kSocketName,
// writes 'R' (or 'E') to `ready_fd`, then serves until `control_fd` reads EOF, and exits.
[[noreturn]] void ServeInChild(int ready_fd, int control_fd) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  auto segment =
      MemorySegment::Create(kChildSegmentName, kChildSegmentSize, PagePolicy::kSmallPages);
  if (!segment.ok()) {
    (void)!::write(ready_fd, "E", 1);
    ::_exit(1);
  }
  std::shared_ptr<MemorySegment> shared = std::move(*segment);
  for (uint64_t i = 0; i < shared->size(); ++i) shared->base()[i] = PatternByte(i, 3);
  auto server = ShmSegmentServer::Start(kSocketName, shared);
  if (!server.ok()) {
    (void)!::write(ready_fd, "E", 1);
    ::_exit(1);
  }
  (void)!::write(ready_fd, "R", 1);
  char byte;
  ssize_t n;
  do {
    n = ::read(control_fd, &byte, 1);
  } while (n > 0 || (n < 0 && errno == EINTR));
  (*server)->Stop();
  ::_exit(0);
}

class ShmProcessTest : public ::testing::Test {
 protected:
  // Forks a serving child; false (with a failure recorded) if it did not come up.
  bool StartChild() {
    int ready[2];
    int control[2];
    if (::pipe2(ready, O_CLOEXEC) != 0 || ::pipe2(control, O_CLOEXEC) != 0) {
      ADD_FAILURE() << "pipe2: " << std::strerror(errno);
      return false;
    }
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(ready[0]);
      ::close(control[1]);
      ServeInChild(ready[1], control[0]);
    }
    ::close(ready[1]);
    ::close(control[0]);
    ready_.Reset(ready[0]);
    control_.Reset(control[1]);
    if (pid < 0) {
      ADD_FAILURE() << "fork: " << std::strerror(errno);
      return false;
    }
    child_ = std::make_unique<ReapedChild>(pid);
    pollfd pfd{ready_.get(), POLLIN, 0};
    char byte = 0;
    if (::poll(&pfd, 1, 10000) != 1 || ::read(ready_.get(), &byte, 1) != 1 || byte != 'R') {
      ADD_FAILURE() << "the child did not start serving";
      return false;
    }
    return true;
  }

  testing::ScratchIpcDir scratch_;
  UniqueFd ready_;
  UniqueFd control_;  // closing it asks the child to stop cleanly
  std::unique_ptr<ReapedChild> child_;
};

TEST_F(ShmProcessTest, ParentMapsTheChildsSegmentAndSurvivesItsSigkill) {
  ASSERT_TRUE(StartChild());
  ShmSegmentMapper mapper;
  auto mapped = mapper.Map(IpcPath(kSocketName), kChildSegmentName, kTimeout);
  ASSERT_TRUE(mapped.ok()) << mapped.status().ToString();
  std::shared_ptr<MappedSegment> seg = *mapped;
  ASSERT_EQ(seg->size(), kChildSegmentSize);
  for (uint64_t i = 0; i < seg->size(); ++i) ASSERT_EQ(seg->base()[i], PatternByte(i, 3)) << i;
  EXPECT_TRUE(seg->alive());

  ASSERT_EQ(::kill(child_->pid(), SIGKILL), 0);
  const auto killed_at = std::chrono::steady_clock::now();
  EXPECT_TRUE(WaitUntil([&] { return !seg->alive(); }, Millis(1000)));
  EXPECT_LT(std::chrono::steady_clock::now() - killed_at, Millis(1000));
  const int status = child_->Wait();
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  EXPECT_TRUE(WaitUntil([&] { return mapper.watched_connections() == 0; }));

  // The owner is gone; the memory stays mapped here, readable and writable.
  for (uint64_t i = 0; i < seg->size(); i += 997) ASSERT_EQ(seg->base()[i], PatternByte(i, 3)) << i;
  seg->base()[0] = 42;
  EXPECT_EQ(seg->base()[0], 42);

  // The dead child left its socket file; a new server replaces it, and a map now fails cleanly
  // or reaches the new server (never the dead one).
  auto fresh = mapper.Map(IpcPath(kSocketName), kChildSegmentName, Millis(500));
  EXPECT_EQ(fresh.code(), ErrorCode::TRANSFER_FAIL) << fresh.status().ToString();
  auto replacement =
      MemorySegment::Create("replacement", kChildSegmentSize, PagePolicy::kSmallPages);
  ASSERT_TRUE(replacement.ok());
  auto server = ShmSegmentServer::Start(kSocketName, std::move(*replacement));
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  auto remapped = mapper.Map(IpcPath(kSocketName), "replacement", kTimeout);
  EXPECT_TRUE(remapped.ok()) << remapped.status().ToString();
}

TEST_F(ShmProcessTest, ACleanStopIsSeenAsWell) {
  ASSERT_TRUE(StartChild());
  ShmSegmentMapper mapper;
  auto mapped = mapper.Map(IpcPath(kSocketName), kChildSegmentName, kTimeout);
  ASSERT_TRUE(mapped.ok()) << mapped.status().ToString();
  control_.Reset();  // the child stops its server and exits
  EXPECT_TRUE(WaitUntil([&] { return !(*mapped)->alive(); }, Millis(1000)));
  const int status = child_->Wait();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ((*mapped)->base()[1], PatternByte(1, 3));
}

// Exit codes of the child in AnotherUidIsRefused.
constexpr int kChildOk = 0;
constexpr int kCannotDropPrivileges = 2;
constexpr int kServerAnswered = 10;  // the server replied to a peer of another uid
constexpr int kClientAccepted = 11;  // Map accepted a server of another uid
constexpr int kReachedSocket = 12;   // a plain uid-65534 process reached the 0700 directory

TEST_F(ShmProcessTest, AnotherUidIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to act as another uid";
  auto segment =
      MemorySegment::Create(kChildSegmentName, kChildSegmentSize, PagePolicy::kSmallPages);
  ASSERT_TRUE(segment.ok());
  auto server = ShmSegmentServer::Start(kSocketName, std::move(*segment));
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const std::string path = (*server)->path();

  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    // euid 65534 (what SO_PEERCRED reports) while the filesystem uid stays 0, so that the
    // private directory and the 0600 socket do not stop the peer before the server sees it.
    if (::setgroups(0, nullptr) != 0 || ::setresgid(65534, 65534, 65534) != 0 ||
        ::setresuid(65534, 65534, 0) != 0) {
      ::_exit(kCannotDropPrivileges);
    }
    ::setfsuid(0);
    if (::setfsuid(static_cast<uid_t>(-1)) != 0) ::_exit(kCannotDropPrivileges);
    UniqueFd raw = testing::RawConnect(path);
    if (!raw.valid()) ::_exit(kCannotDropPrivileges);
    // The send may already fail (EPIPE) if the server closed first: refused either way.
    (void)testing::SendBytes(raw.get(), EncodeShmRequest(kChildSegmentName));
    testing::Received received = testing::ReadUntilEof(raw.get(), Millis(3000));
    if (!received.eof || !received.bytes.empty() || received.fds != 0) ::_exit(kServerAnswered);
    // The client refuses a server of another uid (root's, here) on its own.
    ShmSegmentMapper mapper;
    auto mapped = mapper.Map(path, kChildSegmentName, kTimeout);
    if (mapped.ok() || mapped.status().message().find("runs as uid 0") == std::string::npos) {
      ::_exit(kClientAccepted);
    }
    // And a plain process of that uid cannot even reach the socket.
    ::setfsuid(65534);
    if (testing::RawConnect(path).valid()) ::_exit(kReachedSocket);
    ::_exit(kChildOk);
  }
  ReapedChild child(pid);
  const int status = child.Wait();
  ASSERT_TRUE(WIFEXITED(status)) << status;
  if (WEXITSTATUS(status) == kCannotDropPrivileges) {
    GTEST_SKIP() << "cannot act as uid 65534 with filesystem uid 0 here";
  }
  EXPECT_EQ(WEXITSTATUS(status), kChildOk)
      << "10: the server answered; 11: the client accepted; 12: the socket was reachable";

  // The server goes on serving its own uid.
  EXPECT_TRUE(WaitUntil([&] { return (*server)->open_connections() == 0; }));
  ShmSegmentMapper mapper;
  auto mapped = mapper.Map(path, kChildSegmentName, kTimeout);
  EXPECT_TRUE(mapped.ok()) << mapped.status().ToString();
}

}  // namespace
}  // namespace tierkv::transport
