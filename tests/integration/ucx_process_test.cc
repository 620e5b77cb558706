// The cross-host UCX transport across processes: a server in a child process (this binary,
// re-executed with --serve-child so that the child starts UCX from scratch rather than inheriting
// the parent's UCX state through fork) is SIGKILLed or SIGSTOPped under a connected client.
// Every test stops every process it starts.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/unique_fd.h"
#include "memory/memory_segment.h"
#include "pattern_test_util.h"
#include "transport/ucx_segment_client.h"
#include "transport/ucx_segment_server.h"
#include "transport_test_util.h"

namespace tierkv::transport {
namespace {

using test_util::PatternByte;
using testing::Millis;
using testing::ReapedChild;
using SteadyClock = std::chrono::steady_clock;

constexpr uint64_t kChildSegmentSize = uint64_t{32} << 20;
constexpr const char* kChildSegmentName = "child-segment";
constexpr Millis kTimeout{5000};

// The descriptor on which the re-executed child reports "READY <address>\n" (or "ERROR ...").
constexpr int kReportFd = 3;

// Writes all of `text` to `fd`.
void Report(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

// In the re-executed child: serves a segment filled with PatternByte(i, 3) on 127.0.0.1, reports
// its address on kReportFd, and serves until stdin reaches EOF (or the parent dies).
int ServeChild() {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  auto segment =
      MemorySegment::Create(kChildSegmentName, kChildSegmentSize, PagePolicy::kSmallPages);
  if (!segment.ok()) {
    Report(kReportFd, "ERROR " + segment.status().ToString() + "\n");
    return 1;
  }
  std::shared_ptr<MemorySegment> shared = std::move(*segment);
  for (uint64_t i = 0; i < shared->size(); ++i) shared->base()[i] = PatternByte(i, 3);
  auto server = UcxSegmentServer::Start(shared, "127.0.0.1", 0);
  if (!server.ok()) {
    Report(kReportFd, "ERROR " + server.status().ToString() + "\n");
    return 1;
  }
  Report(kReportFd, "READY " + (*server)->address() + "\n");
  ::close(kReportFd);
  while (true) {
    char byte;
    const ssize_t n = ::read(STDIN_FILENO, &byte, 1);
    if (n == 0 || (n < 0 && errno != EINTR)) break;
  }
  (*server)->Stop();
  return 0;
}

// A server child (this binary with --serve-child), SIGKILLed and reaped on destruction unless
// reaped already.
class ServerChild {
 public:
  // Starts the child and waits for its address; nullptr (with a test failure) if it fails.
  static std::unique_ptr<ServerChild> Start() {
    int to_child[2];
    int from_child[2];
    if (::pipe2(to_child, O_CLOEXEC) != 0 || ::pipe2(from_child, O_CLOEXEC) != 0) {
      ADD_FAILURE() << "pipe: " << std::strerror(errno);
      return nullptr;
    }
    const pid_t pid = ::fork();
    if (pid == 0) {
      // Only async-signal-safe calls until exec.
      ::dup2(to_child[0], STDIN_FILENO);
      ::dup2(from_child[1], kReportFd);
      char self[] = "/proc/self/exe";
      char flag[] = "--serve-child";
      char* argv[] = {self, flag, nullptr};
      ::execv(self, argv);
      ::_exit(127);
    }
    ::close(to_child[0]);
    ::close(from_child[1]);
    auto child = std::unique_ptr<ServerChild>(
        new ServerChild(pid, UniqueFd(to_child[1]), UniqueFd(from_child[0])));
    if (pid < 0) {
      ADD_FAILURE() << "fork: " << std::strerror(errno);
      return nullptr;
    }
    // Read "READY <address>\n" within the timeout.
    std::string line;
    const auto deadline = SteadyClock::now() + Millis(10000);
    while (line.find('\n') == std::string::npos && SteadyClock::now() < deadline) {
      pollfd pfd{child->output_.get(), POLLIN, 0};
      if (::poll(&pfd, 1, 100) <= 0) continue;
      char chunk[256];
      const ssize_t n = ::read(child->output_.get(), chunk, sizeof(chunk));
      if (n <= 0) break;
      line.append(chunk, static_cast<size_t>(n));
    }
    if (line.rfind("READY ", 0) != 0 || line.find('\n') == std::string::npos) {
      ADD_FAILURE() << "the server child did not start: \"" << line << "\"";
      return nullptr;
    }
    child->address_ = line.substr(6, line.find('\n') - 6);
    return child;
  }
  ServerChild(const ServerChild&) = delete;
  ServerChild& operator=(const ServerChild&) = delete;

  pid_t pid() const { return process_.pid(); }
  const std::string& address() const { return address_; }
  void Kill() { process_.Kill(); }
  // SIGSTOPs the child and returns once it has stopped (a signal is delivered asynchronously).
  bool Pause() {
    if (::kill(pid(), SIGSTOP) != 0) return false;
    int status = 0;
    while (true) {
      const pid_t rc = ::waitpid(pid(), &status, WUNTRACED);
      if (rc < 0 && errno == EINTR) continue;
      return rc == pid() && WIFSTOPPED(status);
    }
  }
  void Resume() { ::kill(pid(), SIGCONT); }
  // Reaps the child; returns its wait status.
  int Wait() { return process_.Wait(); }

 private:
  ServerChild(pid_t pid, UniqueFd input, UniqueFd output)
      : input_(std::move(input)), output_(std::move(output)), process_(pid) {}

  UniqueFd input_;   // the child's stdin: closing it asks the child to stop
  UniqueFd output_;  // the child's report descriptor
  std::string address_;
  ReapedChild process_;  // last: killed and reaped before the descriptors close
};

bool MatchesChildPattern(const std::vector<uint8_t>& bytes, uint64_t offset) {
  for (uint64_t i = 0; i < bytes.size(); ++i) {
    if (bytes[i] != PatternByte(offset + i, 3)) return false;
  }
  return true;
}

TEST(UcxProcessTest, ReadsFromAnotherProcessAreByteExact) {
  auto child = ServerChild::Start();
  ASSERT_NE(child, nullptr);
  auto client = UcxSegmentClient::Connect(child->address(), kChildSegmentName, kTimeout);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  EXPECT_EQ((*client)->size(), kChildSegmentSize);
  std::vector<std::vector<uint8_t>> buffers;
  std::vector<UcxSegmentClient::ReadOp> reads;
  const std::vector<std::pair<uint64_t, uint64_t>> ranges = {
      {0, 2 << 20}, {(2 << 20) + 1, 256 << 10}, {12345, 777}, {kChildSegmentSize - 3, 3}};
  for (const auto& [offset, size] : ranges) buffers.emplace_back(size);
  for (size_t i = 0; i < ranges.size(); ++i) {
    reads.push_back({ranges[i].first, {{buffers[i].data(), buffers[i].size()}}});
  }
  std::vector<Status> read = (*client)->ReadBatch(reads);
  for (size_t i = 0; i < ranges.size(); ++i) {
    ASSERT_TRUE(read[i].ok()) << read[i].ToString();
    EXPECT_TRUE(MatchesChildPattern(buffers[i], ranges[i].first)) << "range " << i;
  }
  // Writes land in the child: read them back.
  std::vector<uint8_t> data(3 << 20);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 7 + 1);
  ASSERT_TRUE((*client)->WriteBatch({{4 << 20, {{data.data(), data.size()}}}})[0].ok());
  std::vector<uint8_t> back(data.size());
  ASSERT_TRUE((*client)->ReadBatch({{4 << 20, {{back.data(), back.size()}}}})[0].ok());
  EXPECT_EQ(back, data);
}

TEST(UcxProcessTest, AKilledServerFailsCallsCleanly) {
  auto child = ServerChild::Start();
  ASSERT_NE(child, nullptr);
  auto client = UcxSegmentClient::Connect(child->address(), kChildSegmentName, kTimeout);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  std::vector<uint8_t> buffer(2 << 20);
  ASSERT_TRUE((*client)->ReadBatch({{0, {{buffer.data(), buffer.size()}}}})[0].ok());
  child->Kill();

  const auto start = SteadyClock::now();
  std::vector<Status> read = (*client)->ReadBatch({{0, {{buffer.data(), buffer.size()}}}});
  ASSERT_FALSE(read[0].ok());
  EXPECT_EQ(read[0].code(), ErrorCode::TRANSFER_FAIL) << read[0].ToString();
  EXPECT_NE(read[0].message().find(child->address()), std::string::npos) << read[0].ToString();
  EXPECT_LT(SteadyClock::now() - start, Millis(5000)) << "should not wait for the io timeout";
  EXPECT_FALSE((*client)->alive());
  EXPECT_FALSE((*client)->WriteBatch({{0, {{buffer.data(), 8}}}})[0].ok());
}

TEST(UcxProcessTest, AServerKilledMidBatchFailsTheBatchNotTheProcess) {
  auto child = ServerChild::Start();
  ASSERT_NE(child, nullptr);
  auto client = UcxSegmentClient::Connect(child->address(), kChildSegmentName, kTimeout);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  constexpr uint64_t kChunk = 2 << 20;
  std::vector<uint8_t> pool(kChildSegmentSize);
  std::atomic<bool> failed{false};
  std::atomic<bool> started{false};
  std::thread reader([&] {
    const auto until = SteadyClock::now() + Millis(20000);
    while (!failed && SteadyClock::now() < until) {
      std::vector<UcxSegmentClient::ReadOp> reads;
      for (uint64_t slot = 0; slot < kChildSegmentSize / kChunk; ++slot) {
        reads.push_back({slot * kChunk, {{pool.data() + slot * kChunk, kChunk}}});
      }
      started = true;
      for (const Status& status : (*client)->ReadBatch(reads)) {
        if (!status.ok()) {
          EXPECT_EQ(status.code(), ErrorCode::TRANSFER_FAIL) << status.ToString();
          failed = true;
        }
      }
    }
  });
  while (!started) std::this_thread::sleep_for(Millis(1));
  std::this_thread::sleep_for(Millis(50));
  const auto killed = SteadyClock::now();
  child->Kill();
  reader.join();
  EXPECT_TRUE(failed.load());
  EXPECT_LT(SteadyClock::now() - killed, Millis(5000));
  EXPECT_FALSE((*client)->alive());
}

TEST(UcxProcessTest, AStoppedServerTimesOutWithinTheIoTimeout) {
  auto child = ServerChild::Start();
  ASSERT_NE(child, nullptr);
  UcxTransportOptions options;
  options.io_timeout = Millis(500);
  auto client = UcxSegmentClient::Connect(child->address(), kChildSegmentName, kTimeout, options);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  std::vector<uint8_t> buffer(2 << 20);
  ASSERT_TRUE((*client)->ReadBatch({{0, {{buffer.data(), buffer.size()}}}})[0].ok());

  ASSERT_TRUE(child->Pause());
  const auto start = SteadyClock::now();
  std::vector<Status> read = (*client)->ReadBatch({{0, {{buffer.data(), buffer.size()}}}});
  const auto elapsed = SteadyClock::now() - start;
  child->Resume();
  ASSERT_FALSE(read[0].ok());
  EXPECT_EQ(read[0].code(), ErrorCode::TRANSFER_FAIL) << read[0].ToString();
  EXPECT_NE(read[0].message().find("500 ms"), std::string::npos) << read[0].ToString();
  EXPECT_GE(elapsed, Millis(450));
  EXPECT_LT(elapsed, Millis(3000));
  EXPECT_FALSE((*client)->alive());
}

TEST(UcxProcessTest, ConnectTimesOutOnAStoppedServer) {
  auto child = ServerChild::Start();
  ASSERT_NE(child, nullptr);
  ASSERT_TRUE(child->Pause());
  const auto start = SteadyClock::now();
  auto client = UcxSegmentClient::Connect(child->address(), kChildSegmentName, Millis(400));
  const auto elapsed = SteadyClock::now() - start;
  child->Resume();
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), ErrorCode::TRANSFER_FAIL) << client.status().ToString();
  EXPECT_NE(client.status().message().find(child->address()), std::string::npos);
  EXPECT_LT(elapsed, Millis(3000));
}

}  // namespace
}  // namespace tierkv::transport

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--serve-child") == 0) {
    return tierkv::transport::ServeChild();
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
