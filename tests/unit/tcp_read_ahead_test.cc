// The TCP transport's batching of small frames: the requester sends many requests per sendmsg
// and reads replies ahead (a reply header with the data before it), the store reads requests
// ahead (many headers per recv, the next header with a write's data). Frames that straddle
// the 4 KiB read-ahead buffers, refusals among good requests, and a requester that does not
// read its replies until the store has paused its input with requests still buffered.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "memory/memory_segment.h"
#include "net_test_util.h"
#include "pattern_test_util.h"
#include "size_units.h"
#include "transport/socket_address.h"
#include "transport/tcp_protocol.h"
#include "transport/tcp_segment_client.h"
#include "transport/tcp_segment_server.h"

namespace tierkv::transport {
namespace read_ahead_test {

using test_util::Pattern;
constexpr char kSegmentName[] = "read-ahead-seg";

struct Served {
  std::shared_ptr<MemorySegment> segment;
  std::unique_ptr<TcpSegmentServer> server;
  int port = 0;
};

Served Serve(uint64_t bytes) {
  Served s;
  auto segment = MemorySegment::Create(kSegmentName, bytes, PagePolicy::kSmallPages);
  EXPECT_TRUE(segment.ok()) << segment.status().ToString();
  if (!segment.ok()) return s;
  s.segment = std::move(segment).value();
  auto server = TcpSegmentServer::Start(s.segment, "127.0.0.1", 0, {}, nullptr);
  EXPECT_TRUE(server.ok()) << server.status().ToString();
  if (!server.ok()) return s;
  s.server = std::move(server).value();
  Result<HostPort> hp = ParseHostPort(s.server->address(), false);
  EXPECT_TRUE(hp.ok());
  s.port = hp.ok() ? hp->port : 0;
  return s;
}

// Sizes around the 40-byte header and the 4 KiB read-ahead buffers, and around 256 KiB (the
// largest read whose data takes the next header along).
const std::vector<size_t> kSizes = {1,    39,    40,   41,       4015,       4055,           4056,
                                    4057, 4096,  8191, 65536,    256 * 1024, 256 * 1024 + 1, 2,
                                    3,    70000, 5,    kMiB + 13};

TEST(TcpReadAheadTest, ManySmallAndOddFramesInOneBatchAreByteExact) {
  Served s = Serve(8 * kMiB);
  ASSERT_NE(s.server, nullptr);
  auto connected =
      TcpSegmentClient::Connect(s.server->address(), kSegmentName, std::chrono::milliseconds(5000));
  ASSERT_TRUE(connected.ok()) << connected.status().ToString();
  auto client = std::move(connected).value();
  for (int round = 0; round < 3; ++round) {
    std::vector<std::string> values;
    values.reserve(kSizes.size());
    std::vector<NetworkSegmentClient::WriteOp> writes;
    std::vector<NetworkSegmentClient::ReadOp> reads;
    std::vector<std::string> backs(kSizes.size());
    uint64_t at = 0;
    for (size_t i = 0; i < kSizes.size(); ++i) {
      values.push_back(Pattern(kSizes[i], static_cast<uint32_t>(round * 100 + i)));
      backs[i].assign(kSizes[i], '\0');
      // Uneven pieces: 1, 2 or 3 of them.
      NetworkSegmentClient::WriteOp w{at, {}};
      NetworkSegmentClient::ReadOp r{at, {}};
      const size_t pieces = std::min<size_t>(1 + (i + round) % 3, kSizes[i]);
      size_t done = 0;
      for (size_t k = 0; k < pieces; ++k) {
        const size_t len = k + 1 == pieces ? kSizes[i] - done : kSizes[i] / (pieces + 1);
        w.src.push_back(ConstPiece{values[i].data() + done, len});
        r.dst.push_back(MutPiece{backs[i].data() + done, len});
        done += len;
      }
      writes.push_back(w);
      reads.push_back(r);
      at += kSizes[i] + static_cast<uint64_t>(round) * 7 + 1;  // unaligned offsets too
    }
    // A refused request between good ones: its reply is read ahead with theirs.
    std::string refused(100, 'x');
    writes.insert(writes.begin() + 5, {8 * kMiB - 10, {ConstPiece{refused.data(), 100}}});
    reads.insert(reads.begin() + 7, {8 * kMiB - 10, {MutPiece{refused.data(), 100}}});
    std::vector<Status> wrote = client->WriteBatch(writes);
    std::vector<Status> read = client->ReadBatch(reads);
    ASSERT_EQ(wrote.size(), kSizes.size() + 1);
    ASSERT_EQ(read.size(), kSizes.size() + 1);
    EXPECT_EQ(wrote[5].code(), ErrorCode::INVALID_PARAMS);
    EXPECT_EQ(read[7].code(), ErrorCode::INVALID_PARAMS);
    for (size_t i = 0; i < wrote.size(); ++i) {
      if (i != 5) {
        EXPECT_TRUE(wrote[i].ok()) << i << ": " << wrote[i].ToString();
      }
    }
    for (size_t i = 0; i < read.size(); ++i) {
      if (i != 7) {
        EXPECT_TRUE(read[i].ok()) << i << ": " << read[i].ToString();
      }
    }
    for (size_t i = 0; i < kSizes.size(); ++i) {
      ASSERT_EQ(backs[i], values[i]) << "round " << round << ", size " << kSizes[i];
    }
  }
  EXPECT_EQ(s.server->rejected(), 0u);
}

// Reads exactly `n` bytes within `timeout`; false if they did not come.
bool ReadExactly(int fd, void* out, size_t n, std::chrono::milliseconds timeout) {
  auto* at = static_cast<uint8_t*>(out);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (n > 0) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) continue;
    const ssize_t got = recv(fd, at, n, 0);
    if (got <= 0) return false;
    at += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

// More reads than the store queues replies for (512), sent at once and not read for a while:
// A write of 20 bytes and 600 reads of 1 MiB are 24,060 bytes of requests: five full 4 KiB
// read-aheads and 3,580 bytes more. The store reads them all in one turn of its loop, queueing
// replies until 512 wait (none has left: they go out between turns), which is at byte 20,500,
// inside the sixth read-ahead: it pauses its input with its socket empty and requests still in
// its buffer, which only its own bookkeeping can resume (epoll sees no bytes). Every reply must
// come, in order, with the right bytes.
TEST(TcpReadAheadTest, RequestsReadAheadWhileInputIsPausedAreAllAnswered) {
  constexpr uint64_t kRead = kMiB;
  constexpr int kRequests = 600;
  Served s = Serve(4 * kMiB);
  ASSERT_NE(s.server, nullptr);
  const std::string bytes = Pattern(kRead, 77);
  std::memcpy(s.segment->base() + 4096, bytes.data(), kRead);
  const int fd = test_util::ConnectLoopback(s.port, /*receive_buffer=*/16 * 1024);
  ASSERT_GE(fd, 0);
  // The challenge, then a hello without a token.
  uint8_t challenge[kTcpHeaderSize + kTcpProofBytes];
  ASSERT_TRUE(ReadExactly(fd, challenge, sizeof(challenge), std::chrono::milliseconds(2000)));
  const std::string name = kSegmentName;
  std::string hello(kTcpProofBytes, '\0');
  hello += name;
  const TcpHeader hello_header = EncodeTcpRequest(
      {.op = UcxOp::kHello, .id = 1, .data_length = static_cast<uint32_t>(hello.size())});
  std::string frame(reinterpret_cast<const char*>(hello_header.data()), hello_header.size());
  frame += hello;
  ASSERT_EQ(send(fd, frame.data(), frame.size(), MSG_NOSIGNAL), static_cast<ssize_t>(frame.size()));
  uint8_t reply_bytes[kTcpHeaderSize];
  ASSERT_TRUE(ReadExactly(fd, reply_bytes, sizeof(reply_bytes), std::chrono::milliseconds(2000)));
  Result<TcpReply> welcome = DecodeTcpReply(reply_bytes);
  ASSERT_TRUE(welcome.ok() && welcome->status == 0);
  // All the requests in one go: a 20-byte write first (60 bytes with its header, so that the
  // 512th reply's request ends inside the sixth read-ahead, not at its edge), then the reads.
  std::string requests;
  const TcpHeader write =
      EncodeTcpRequest({.op = UcxOp::kWrite, .id = 99, .length = 20, .data_length = 20});
  requests.append(reinterpret_cast<const char*>(write.data()), write.size());
  requests.append(20, 'w');
  for (int i = 0; i < kRequests; ++i) {
    const TcpHeader h = EncodeTcpRequest({.op = UcxOp::kRead,
                                          .id = static_cast<uint64_t>(100 + i),
                                          .offset = 4096,
                                          .length = kRead});
    requests.append(reinterpret_cast<const char*>(h.data()), h.size());
  }
  size_t sent = 0;
  while (sent < requests.size()) {
    const ssize_t n = send(fd, requests.data() + sent, requests.size() - sent, MSG_NOSIGNAL);
    ASSERT_GT(n, 0);
    sent += static_cast<size_t>(n);
  }
  // Let the store fill its socket and pause before reading anything.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_TRUE(ReadExactly(fd, reply_bytes, sizeof(reply_bytes), std::chrono::milliseconds(5000)));
  Result<TcpReply> first = DecodeTcpReply(reply_bytes);
  ASSERT_TRUE(first.ok() && first->id == 99 && first->status == 0 && first->value == 20);
  std::string data(kRead, '\0');
  for (int i = 0; i < kRequests; ++i) {
    ASSERT_TRUE(ReadExactly(fd, reply_bytes, sizeof(reply_bytes), std::chrono::milliseconds(5000)))
        << "no reply " << i << " of " << kRequests;
    Result<TcpReply> reply = DecodeTcpReply(reply_bytes);
    ASSERT_TRUE(reply.ok()) << reply.status().ToString();
    ASSERT_EQ(reply->id, static_cast<uint64_t>(100 + i));
    ASSERT_EQ(reply->status, 0);
    ASSERT_EQ(reply->data_length, kRead);
    ASSERT_TRUE(ReadExactly(fd, data.data(), kRead, std::chrono::milliseconds(5000)));
    ASSERT_EQ(data, bytes) << "reply " << i;
  }
  close(fd);
  EXPECT_EQ(s.server->rejected(), 0u);
}

}  // namespace read_ahead_test
}  // namespace tierkv::transport
