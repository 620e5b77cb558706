// A segment that is registered but whose data port fails every write (a one-way partition, a
// fake or broken store) must not fail puts: the requester places the keys again without it,
// within the same call, and tells the master, which then keeps every requester's puts off it
// for a while (issue 25, "only stores register segments"; issue 26's one-way partition).
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "distributed_test_util.h"
#include "rpc/remote_master.h"
#include "transport/tcp_protocol.h"

namespace tierkv {
namespace {

using dist_test::GetKey;
using dist_test::PutKey;
using dist_test::Requester;
using dist_test::RequesterConfig;

// A data port that completes the TCP transport's handshake (a challenge, then OK to any hello,
// claiming `size` bytes) and hangs up on the first request after it: every write to it fails.
class BrokenDataPort {
 public:
  explicit BrokenDataPort(uint64_t size) : size_(size) {
    listener_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    socklen_t length = sizeof(addr);
    getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &length);
    port_ = ntohs(addr.sin_port);
    listen(listener_, 16);
    thread_ = std::thread([this] { Serve(); });
  }
  ~BrokenDataPort() {
    stop_ = true;
    shutdown(listener_, SHUT_RDWR);
    thread_.join();
    close(listener_);
  }
  int port() const { return port_; }
  int connections() const { return connections_.load(); }

 private:
  static bool ReadAll(int fd, void* data, size_t size) {
    size_t have = 0;
    while (have < size) {
      const ssize_t n = recv(fd, static_cast<char*>(data) + have, size - have, 0);
      if (n <= 0) return false;
      have += static_cast<size_t>(n);
    }
    return true;
  }
  void Serve() {
    while (!stop_) {
      const int fd = accept(listener_, nullptr, nullptr);
      if (fd < 0) continue;
      connections_.fetch_add(1);
      transport::TcpReply challenge;
      challenge.op = transport::UcxOp::kChallenge;
      challenge.data_length = transport::kTcpProofBytes;
      const transport::TcpHeader h = transport::EncodeTcpReply(challenge);
      const std::string nonce(transport::kTcpProofBytes, '\x5a');
      (void)send(fd, h.data(), h.size(), MSG_NOSIGNAL);
      (void)send(fd, nonce.data(), nonce.size(), MSG_NOSIGNAL);
      uint8_t header[transport::kTcpHeaderSize];
      if (ReadAll(fd, header, sizeof(header))) {
        auto hello = transport::DecodeTcpRequest(header);
        std::vector<char> data(hello.ok() ? hello->data_length : 0);
        if (hello.ok() && ReadAll(fd, data.data(), data.size())) {
          transport::TcpReply ok;
          ok.op = transport::UcxOp::kHello;
          ok.id = hello->id;
          ok.value = size_;
          const transport::TcpHeader r = transport::EncodeTcpReply(ok);
          (void)send(fd, r.data(), r.size(), MSG_NOSIGNAL);
          (void)ReadAll(fd, header, 1);  // the first byte of a request: hang up
        }
      }
      close(fd);
    }
  }
  const uint64_t size_;
  int listener_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> connections_{0};
  std::thread thread_;
};

TEST(UnreachableSegmentTest, PutsRouteAroundASegmentWhoseWritesFail) {
  auto master = dist_test::StartMaster();
  ASSERT_NE(master, nullptr);
  auto store = dist_test::StartStore(*master, "64MiB");
  ASSERT_NE(store, nullptr);
  // A "store" that registers a far bigger segment (placement prefers the freest) whose data
  // port breaks every write.
  BrokenDataPort broken(uint64_t{8} << 30);
  auto fake = RemoteMaster::Connect(master->address(), Millis(5000));
  ASSERT_TRUE(fake.ok()) << fake.status().ToString();
  auto mounted = (*fake)->MountSegment(
      "fakehost:1:0@/nonexistent.sock#127.0.0.1:" + std::to_string(broken.port()),
      uint64_t{8} << 30);
  ASSERT_TRUE(mounted.ok()) << mounted.status().ToString();

  Config config = RequesterConfig(*master, "tcp");
  auto requester = Requester(config);
  ASSERT_NE(requester, nullptr);
  // The first put is placed on the fake segment, fails there, and is placed again elsewhere.
  ASSERT_EQ(PutKey(*requester, "first", 1), 0);
  EXPECT_GE(broken.connections(), 1);
  EXPECT_EQ(GetKey(*requester, "first", 1), static_cast<int64_t>(dist_test::kObject));
  // The master now keeps puts off it: another requester's puts never try it.
  const int tried = broken.connections();
  auto other = Requester(config);
  ASSERT_NE(other, nullptr);
  for (int i = 0; i < 10; ++i) {
    ASSERT_EQ(PutKey(*other, "next-" + std::to_string(i), 10 + i), 0) << i;
  }
  EXPECT_EQ(broken.connections(), tried);
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(GetKey(*requester, "next-" + std::to_string(i), 10 + i),
              static_cast<int64_t>(dist_test::kObject));
  }
}

}  // namespace
}  // namespace tierkv
