// The cluster token (src/common/cluster_token.h): token files are refused unless private
// (mode 0600 or stricter), regular and of a sane length, with a message that names the file and
// never the content; TokenSet accepts its tokens only, in constant time, reloads, and keeps what
// it had when a reload fails. Also CheckHostPort (src/common/host_port.h): strict ports.
#include "common/cluster_token.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "common/host_port.h"

namespace tierkv {
namespace {

class TokenFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char templ[] = "/tmp/tierkv-token-test-XXXXXX";
    ASSERT_NE(mkdtemp(templ), nullptr);
    dir_ = templ;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& content, mode_t mode) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << content;
    chmod(path.c_str(), mode);
    return path;
  }
  std::string dir_;
};

TEST_F(TokenFileTest, APrivateFileIsReadAndTrailingWhitespaceDropped) {
  const std::string path = Write("t", "s3cret-token-0123456789\n", 0600);
  auto secret = ReadTokenFile(path);
  ASSERT_TRUE(secret.ok()) << secret.status().ToString();
  EXPECT_EQ(*secret, "s3cret-token-0123456789");
  EXPECT_TRUE(ReadTokenFile(Write("r", "s3cret-token-0123456789", 0400)).ok());
}

TEST_F(TokenFileTest, WhatIsRefusedNamesTheFileAndTheModeButNeverTheToken) {
  const std::string secret = "s3cret-token-0123456789";
  for (mode_t mode : {0644, 0640, 0604, 0660, 0666}) {
    const std::string path = Write("m" + std::to_string(mode), secret, mode);
    auto read = ReadTokenFile(path);
    ASSERT_FALSE(read.ok()) << mode;
    EXPECT_EQ(read.code(), ErrorCode::INVALID_CONFIG);
    EXPECT_NE(read.status().message().find(path), std::string::npos);
    char octal[8];
    std::snprintf(octal, sizeof(octal), "%04o", static_cast<unsigned>(mode));
    EXPECT_NE(read.status().message().find(octal), std::string::npos) << read.status().message();
    EXPECT_NE(read.status().message().find("chmod 600"), std::string::npos);
    EXPECT_EQ(read.status().message().find(secret), std::string::npos);
  }
  EXPECT_FALSE(ReadTokenFile(dir_ + "/missing").ok());
  EXPECT_FALSE(ReadTokenFile(Write("short", "tooshort", 0600)).ok());
  EXPECT_FALSE(ReadTokenFile(Write("empty", "\n", 0600)).ok());
  EXPECT_FALSE(ReadTokenFile(Write("long", std::string(5000, 'x'), 0600)).ok());
  EXPECT_FALSE(ReadTokenFile(dir_).ok());  // a directory
  const std::string target = Write("target", secret, 0600);
  const std::string link = dir_ + "/link";
  ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);
  auto linked = ReadTokenFile(link);
  ASSERT_FALSE(linked.ok());
  EXPECT_NE(linked.status().message().find("symbolic link"), std::string::npos);
}

TEST_F(TokenFileTest, ATokenSetAcceptsItsTokensAndReloads) {
  const std::string own = Write("own", "token-one-0123456789", 0600);
  const std::string next = Write("next", "token-two-0123456789", 0600);
  auto set = TokenSet::Load(own, next);
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_EQ((*set)->own(), "token-one-0123456789");
  EXPECT_TRUE((*set)->Accepts("token-one-0123456789"));
  EXPECT_TRUE((*set)->Accepts("token-two-0123456789"));
  EXPECT_FALSE((*set)->Accepts("token-one-012345678"));
  EXPECT_FALSE((*set)->Accepts(""));
  const TokenDigest mac = TokenMac("token-two-0123456789", {"label", "nonce"});
  EXPECT_EQ((*set)->MatchMac(mac, {"label", "nonce"}), "token-two-0123456789");
  EXPECT_EQ((*set)->MatchMac(mac, {"label", "other"}), "");
  // Parts are length-prefixed: a different split is a different MAC.
  EXPECT_FALSE(DigestsEqual(TokenMac("k-0123456789abcdef", {"ab", "c"}),
                            TokenMac("k-0123456789abcdef", {"a", "bc"})));

  // Rotation done: the files change and SIGHUP's reload takes the new ones.
  Write("own", "token-two-0123456789", 0600);
  Write("next", "token-two-0123456789", 0600);
  ASSERT_TRUE(ReloadAllTokenSets().ok());
  EXPECT_EQ((*set)->own(), "token-two-0123456789");
  EXPECT_FALSE((*set)->Accepts("token-one-0123456789"));
  // A reload that fails (a file made public) keeps what it had and says why.
  chmod(own.c_str(), 0644);
  Status st = (*set)->Reload();
  EXPECT_EQ(st.code(), ErrorCode::INVALID_CONFIG);
  EXPECT_TRUE((*set)->Accepts("token-two-0123456789"));
}

TEST(HostPortTest, PortsAreParsedStrictly) {
  EXPECT_TRUE(CheckHostPort("127.0.0.1:50051", "--master").ok());
  EXPECT_TRUE(CheckHostPort("localhost:1", "--master").ok());
  EXPECT_TRUE(CheckHostPort("[::1]:65535", "--master").ok());
  for (const char* bad :
       {"127.0.0.1:99999", "127.0.0.1:0", "127.0.0.1:", "127.0.0.1", ":50051", "127.0.0.1:5x",
        "127.0.0.1:-1", "::1:50051", "127.0.0.1:123456", "127.0.0.1: 80"}) {
    Status st = CheckHostPort(bad, "--master");
    EXPECT_EQ(st.code(), ErrorCode::INVALID_PARAMS) << bad;
    EXPECT_NE(st.message().find("--master"), std::string::npos) << st.message();
  }
}

}  // namespace
}  // namespace tierkv
