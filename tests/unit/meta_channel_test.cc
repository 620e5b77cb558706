// The master's metadata channel (rpc/meta_protocol.h, meta_server.h, meta_client.h): the frame
// codecs, the data path's calls through it from a RemoteMaster, the token handshake, and what
// the server does with bad input — against an in-process MasterServer on 127.0.0.1.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/byte_io.h"
#include "common/cluster_token.h"
#include "common/unique_fd.h"
#include "rpc/master_server.h"
#include "rpc/meta_client.h"
#include "rpc/meta_protocol.h"
#include "rpc/remote_master.h"
#include "rpc/wire.h"
#include "tierkv/master.pb.h"

namespace tierkv {
namespace {

using namespace std::chrono_literals;

const std::string kSecret = "meta-channel-test-secret-0123456789";

// ---- codecs --------------------------------------------------------------------------------

TEST(MetaProtocolTest, EveryFrameRoundTrips) {
  MetaChallenge challenge;
  challenge.token_required = true;
  challenge.idle_timeout_ms = 60000;
  challenge.nonce = RandomNonce();
  auto c = DecodeMetaChallenge(EncodeMetaChallenge(challenge));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->token_required);
  EXPECT_EQ(c->idle_timeout_ms, 60000u);
  EXPECT_EQ(c->nonce, challenge.nonce);

  const TokenDigest proof = RandomNonce();
  auto h = DecodeMetaHello(EncodeMetaHello(proof));
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(*h, proof);

  auto w = DecodeMetaWelcome(EncodeMetaWelcome({ToInt(ErrorCode::UNAUTHENTICATED), proof}));
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->status, ToInt(ErrorCode::UNAUTHENTICATED));
  EXPECT_EQ(w->proof, proof);

  auto call = DecodeMetaCallHeader(EncodeMetaCallHeader({1234, MetaMethod::kGetReplicas}));
  ASSERT_TRUE(call.ok());
  EXPECT_EQ(call->length, 1234u);
  EXPECT_EQ(call->method, MetaMethod::kGetReplicas);

  auto answer = DecodeMetaAnswerHeader(EncodeMetaAnswerHeader({7, 5, -600}));
  ASSERT_TRUE(answer.ok());
  EXPECT_EQ(answer->length, 7u);
  EXPECT_EQ(answer->method, 5u);
  EXPECT_EQ(answer->status, -600);
}

TEST(MetaProtocolTest, TheDecodersRefuseWhatIsNotTheirs) {
  MetaChallengeBytes challenge = EncodeMetaChallenge({});
  challenge[0] = 'X';
  EXPECT_NE(DecodeMetaChallenge(challenge).status().message().find("magic"), std::string::npos);
  challenge = EncodeMetaChallenge({});
  StoreAt<uint16_t>(challenge.data(), 4, 2);
  EXPECT_NE(DecodeMetaChallenge(challenge).status().message().find("version 2"), std::string::npos);
  challenge = EncodeMetaChallenge({});
  StoreAt<uint16_t>(challenge.data(), 6, 4);
  EXPECT_FALSE(DecodeMetaChallenge(challenge).ok());  // unknown flag

  MetaHelloBytes hello = EncodeMetaHello({});
  StoreAt<uint16_t>(hello.data(), 6, 1);
  EXPECT_FALSE(DecodeMetaHello(hello).ok());

  MetaCallHeaderBytes call = EncodeMetaCallHeader({kMetaMaxMessageBytes + 1, MetaMethod::kExists});
  EXPECT_NE(DecodeMetaCallHeader(call).status().message().find("over the limit"),
            std::string::npos);
  call = EncodeMetaCallHeader({10, MetaMethod::kExists});
  StoreAt<uint16_t>(call.data(), 4, 0);
  EXPECT_NE(DecodeMetaCallHeader(call).status().message().find("unknown method 0"),
            std::string::npos);
  StoreAt<uint16_t>(call.data(), 4, kMetaMaxMethod + 1);
  EXPECT_FALSE(DecodeMetaCallHeader(call).ok());
  call = EncodeMetaCallHeader({10, MetaMethod::kExists});
  StoreAt<uint16_t>(call.data(), 6, 1);
  EXPECT_FALSE(DecodeMetaCallHeader(call).ok());

  MetaAnswerHeaderBytes answer = EncodeMetaAnswerHeader({kMetaMaxMessageBytes + 1, 1, 0});
  EXPECT_FALSE(DecodeMetaAnswerHeader(answer).ok());
}

// ---- a master and its clients ----------------------------------------------------------------

class MetaChannelTest : public ::testing::Test {
 protected:
  void Start(std::shared_ptr<const TokenSet> tokens = nullptr, Millis idle = Millis(60000),
             int meta_port = 0) {
    MasterServerOptions o;
    o.port = 0;
    o.meta_port = meta_port;
    o.tokens = std::move(tokens);
    o.idle_timeout = idle;
    auto server = MasterServer::Start(o);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(server).value();
  }
  std::unique_ptr<RemoteMaster> Connect(bool meta = true,
                                        std::shared_ptr<const TokenSet> tokens = nullptr) {
    RemoteMasterOptions o;
    o.heartbeat_interval = Millis(100);
    o.rpc_timeout = Millis(5000);
    o.meta_channel = meta;
    o.security.tokens = std::move(tokens);
    auto m = RemoteMaster::Connect(server_->address(), Millis(5000), o);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    return m.ok() ? std::move(m).value() : nullptr;
  }
  // Puts, checks, reads and removes `n` keys through `m`; every answer must be right.
  void Exercise(RemoteMaster& m, const std::string& prefix, size_t n) {
    std::vector<std::string> keys;
    for (size_t i = 0; i < n; ++i) keys.push_back(prefix + std::to_string(i));
    const std::vector<uint64_t> sizes(n, 4096);
    auto started = m.PutStart(keys, sizes, {});
    std::vector<uint64_t> ids;
    for (size_t i = 0; i < n; ++i) {
      ASSERT_TRUE(started[i].ok()) << keys[i] << ": " << started[i].status().ToString();
      ids.push_back(started[i]->put_id);
    }
    for (const Status& st : m.PutEnd(keys, ids, std::vector<uint64_t>(n, 42))) {
      ASSERT_TRUE(st.ok()) << st.ToString();
    }
    std::vector<std::string> asked = keys;
    asked.push_back(prefix + "missing");
    const std::vector<int> exists = m.Exists(asked);
    ASSERT_EQ(exists.size(), n + 1);
    for (size_t i = 0; i < n; ++i) EXPECT_EQ(exists[i], 1) << keys[i];
    EXPECT_EQ(exists[n], 0);
    auto replicas = m.GetReplicas(asked);
    ASSERT_EQ(replicas.size(), n + 1);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_TRUE(replicas[i].ok()) << keys[i] << ": " << replicas[i].status().ToString();
      EXPECT_EQ(replicas[i]->size, 4096u);
      EXPECT_EQ(replicas[i]->checksum, 42u);
    }
    EXPECT_EQ(replicas[n].code(), ErrorCode::OBJECT_NOT_FOUND);
    for (const Status& st : m.BatchRemove(keys, /*force=*/true)) {
      EXPECT_TRUE(st.ok()) << st.ToString();
    }
    EXPECT_EQ(m.Exists(keys), std::vector<int>(n, 0));
  }

  std::unique_ptr<MasterServer> server_;
};

TEST_F(MetaChannelTest, TheDataPathGoesOverTheChannelAndGetsTheSameAnswersAsGrpc) {
  Start();
  ASSERT_NE(server_->meta_port(), 0);
  auto owner = Connect();
  ASSERT_NE(owner, nullptr);
  ASSERT_TRUE(owner->MountSegment("seg", 64 << 20).ok());
  auto fast = Connect();
  ASSERT_NE(fast, nullptr);
  EXPECT_EQ(fast->meta_address(), "127.0.0.1:" + std::to_string(server_->meta_port()));
  const uint64_t before = server_->meta_calls();
  Exercise(*fast, "fast-", 50);
  // PutStart, PutEnd, Exists, GetReplicas, Remove, Exists.
  EXPECT_EQ(server_->meta_calls() - before, 6u);
  EXPECT_EQ(fast->meta_calls(), 6u);

  auto slow = Connect(/*meta=*/false);
  ASSERT_NE(slow, nullptr);
  EXPECT_EQ(slow->meta_address(), "");
  const uint64_t grpc_before = server_->meta_calls();
  Exercise(*slow, "slow-", 50);
  EXPECT_EQ(server_->meta_calls(), grpc_before);  // every call over gRPC
}

TEST_F(MetaChannelTest, AMasterWithoutTheChannelServesEveryCallOverGrpc) {
  Start(nullptr, Millis(60000), /*meta_port=*/-1);
  EXPECT_EQ(server_->meta_port(), 0);
  auto owner = Connect();
  ASSERT_NE(owner, nullptr);
  ASSERT_TRUE(owner->MountSegment("seg", 64 << 20).ok());
  EXPECT_EQ(owner->meta_address(), "");
  Exercise(*owner, "k-", 10);
  EXPECT_EQ(server_->meta_calls(), 0u);
}

TEST_F(MetaChannelTest, AConnectionTheMasterClosedForIdlenessIsNotReused) {
  Start(nullptr, Millis(300));
  auto owner = Connect();
  ASSERT_NE(owner, nullptr);
  ASSERT_TRUE(owner->MountSegment("seg", 64 << 20).ok());
  Exercise(*owner, "a-", 5);
  std::this_thread::sleep_for(700ms);  // the master closed the idle connection
  Exercise(*owner, "b-", 5);           // a PutStart (not retried) on a fresh connection
}

TEST_F(MetaChannelTest, WithATokenTheChannelWorksForItsHoldersOnly) {
  auto tokens = TokenSet::FromSecrets({kSecret});
  Start(tokens);
  auto owner = Connect(true, tokens);
  ASSERT_NE(owner, nullptr);
  ASSERT_TRUE(owner->MountSegment("seg", 64 << 20).ok());
  Exercise(*owner, "t-", 10);
  EXPECT_GE(server_->meta_calls(), 6u);

  // A client of another cluster, straight at the channel: refused at its hello, counted.
  MetaChannel stranger("127.0.0.1:" + std::to_string(server_->meta_port()),
                       TokenSet::FromSecrets({"another-clusters-secret-0123456789"}));
  rpc::ExistsRequest request;
  rpc::ExistsResponse response;
  const uint64_t refused = server_->unauthenticated();
  grpc::Status st = stranger.Call(MetaMethod::kExists, request, &response,
                                  std::chrono::system_clock::now() + std::chrono::seconds(5));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED) << st.error_message();
  EXPECT_NE(st.error_message().find("refused this process's cluster token"), std::string::npos);
  EXPECT_EQ(server_->unauthenticated(), refused + 1);

  // And one with no token at all is told what it lacks, without a connection attempt's hello.
  MetaChannel tokenless("127.0.0.1:" + std::to_string(server_->meta_port()), nullptr);
  st = tokenless.Call(MetaMethod::kExists, request, &response,
                      std::chrono::system_clock::now() + std::chrono::seconds(5));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_NE(st.error_message().find("has none"), std::string::npos);
}

// A raw connection to the channel, through the handshake (no token).
UniqueFd Handshaken(int port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in at{};
  at.sin_family = AF_INET;
  at.sin_port = htons(static_cast<uint16_t>(port));
  at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&at), sizeof(at)), 0);
  timeval tv{5, 0};
  setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  MetaChallengeBytes challenge;
  EXPECT_EQ(::recv(fd.get(), challenge.data(), challenge.size(), MSG_WAITALL),
            static_cast<ssize_t>(challenge.size()));
  EXPECT_TRUE(DecodeMetaChallenge(challenge).ok());
  const MetaHelloBytes hello = EncodeMetaHello({});
  EXPECT_EQ(::send(fd.get(), hello.data(), hello.size(), 0), static_cast<ssize_t>(hello.size()));
  MetaWelcomeBytes welcome;
  EXPECT_EQ(::recv(fd.get(), welcome.data(), welcome.size(), MSG_WAITALL),
            static_cast<ssize_t>(welcome.size()));
  auto w = DecodeMetaWelcome(welcome);
  EXPECT_TRUE(w.ok() && w->status == 0);
  return fd;
}

// Sends a call and reads its answer: (status, text or message bytes).
std::pair<int32_t, std::string> RawCall(int fd, uint16_t method, const std::string& body) {
  MetaCallHeaderBytes header{};
  StoreAt<uint32_t>(header.data(), 0, static_cast<uint32_t>(body.size()));
  StoreAt<uint16_t>(header.data(), 4, method);
  std::string frame(reinterpret_cast<const char*>(header.data()), header.size());
  frame += body;
  EXPECT_EQ(::send(fd, frame.data(), frame.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(frame.size()));
  MetaAnswerHeaderBytes answer;
  if (::recv(fd, answer.data(), answer.size(), MSG_WAITALL) !=
      static_cast<ssize_t>(answer.size())) {
    return {1, "no answer"};
  }
  auto decoded = DecodeMetaAnswerHeader(answer);
  EXPECT_TRUE(decoded.ok());
  std::string text(decoded->length, '\0');
  if (!text.empty()) {
    EXPECT_EQ(::recv(fd, text.data(), text.size(), MSG_WAITALL), static_cast<ssize_t>(text.size()));
  }
  return {decoded->status, text};
}

TEST_F(MetaChannelTest, BadInputIsAnsweredWithAnErrorNeverACrash) {
  Start();
  UniqueFd fd = Handshaken(server_->meta_port());
  // Bytes that are no ExistsRequest: refused, and the connection carries on.
  auto [status, text] = RawCall(fd.get(), static_cast<uint16_t>(MetaMethod::kExists),
                                std::string("\xff\xff\xff\xff\x0f", 5));
  EXPECT_EQ(status, ToInt(ErrorCode::INVALID_PARAMS));
  EXPECT_NE(text.find("malformed"), std::string::npos) << text;
  rpc::ExistsRequest good;
  wire::EncodeKeys({"k"}, good.mutable_keys());
  std::string bytes;
  ASSERT_TRUE(good.SerializeToString(&bytes));
  auto [ok_status, answer] = RawCall(fd.get(), static_cast<uint16_t>(MetaMethod::kExists), bytes);
  EXPECT_EQ(ok_status, 0) << answer;
  rpc::ExistsResponse parsed;
  ASSERT_TRUE(parsed.ParseFromString(answer));
  ASSERT_EQ(parsed.results_size(), 1);
  EXPECT_EQ(parsed.results(0), 0);

  // An unknown method loses the framing: refused, then closed.
  auto [bad_status, why] = RawCall(fd.get(), 77, "");
  EXPECT_EQ(bad_status, ToInt(ErrorCode::INVALID_PARAMS));
  EXPECT_NE(why.find("unknown method 77"), std::string::npos) << why;
  char byte;
  EXPECT_EQ(::recv(fd.get(), &byte, 1, 0), 0);  // closed by the master

  // A hello that is not one: closed without a welcome.
  UniqueFd other(::socket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in at{};
  at.sin_family = AF_INET;
  at.sin_port = htons(static_cast<uint16_t>(server_->meta_port()));
  at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(other.get(), reinterpret_cast<sockaddr*>(&at), sizeof(at)), 0);
  MetaChallengeBytes challenge;
  ASSERT_EQ(::recv(other.get(), challenge.data(), challenge.size(), MSG_WAITALL),
            static_cast<ssize_t>(challenge.size()));
  const std::string junk(kMetaHelloSize, 'j');
  ASSERT_EQ(::send(other.get(), junk.data(), junk.size(), 0), static_cast<ssize_t>(junk.size()));
  EXPECT_EQ(::recv(other.get(), &byte, 1, 0), 0);

  // The master still serves.
  auto owner = Connect();
  ASSERT_NE(owner, nullptr);
  ASSERT_TRUE(owner->MountSegment("seg", 64 << 20).ok());
  Exercise(*owner, "after-", 3);
}

TEST_F(MetaChannelTest, AClientFollowsARestartedMastersNewChannel) {
  Start();
  const int port = server_->port();
  auto owner = Connect();
  ASSERT_NE(owner, nullptr);
  ASSERT_TRUE(owner->MountSegment("seg", 64 << 20).ok());
  Exercise(*owner, "before-", 3);
  server_->Shutdown();
  server_.reset();
  MasterServerOptions o;
  o.port = port;
  auto restarted = MasterServer::Start(o);
  ASSERT_TRUE(restarted.ok()) << restarted.status().ToString();
  server_ = std::move(restarted).value();
  // Exists is retried until the client registered again (and re-mounted its segment).
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (owner->registrations() < 2 && std::chrono::steady_clock::now() < deadline) {
    (void)owner->Exists({"x"});
    std::this_thread::sleep_for(50ms);
  }
  ASSERT_GE(owner->registrations(), 2u);
  EXPECT_EQ(owner->meta_address(), "127.0.0.1:" + std::to_string(server_->meta_port()));
  // Re-mounting is the heartbeat's; wait for the segment before putting.
  const auto mounted = std::chrono::steady_clock::now() + 10s;
  while (server_->SegmentNames().empty() && std::chrono::steady_clock::now() < mounted) {
    std::this_thread::sleep_for(20ms);
  }
  Exercise(*owner, "after-", 3);
  EXPECT_GT(server_->meta_calls(), 0u);
}

}  // namespace
}  // namespace tierkv
