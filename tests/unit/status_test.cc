// Status and Result<T>: the public error model.
#include "tierkv/status.h"

#include <gtest/gtest.h>

#include <string>

namespace tierkv {
namespace {

TEST(StatusTest, NamesCodesAndFormatsMessages) {
  EXPECT_TRUE(Status::Ok().ok());
  Status st(ErrorCode::OBJECT_NOT_FOUND, "key k");
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(ErrorCodeName(st.code()), "OBJECT_NOT_FOUND");
  EXPECT_EQ(st.ToString(), "OBJECT_NOT_FOUND (-704): key k");
  EXPECT_EQ(ErrorCodeName(static_cast<ErrorCode>(-12345)), "UNKNOWN");
}

TEST(ResultTest, HoldsAValueOrAFailedStatus) {
  Result<std::string> good(std::string("v"));
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(*good, "v");
  EXPECT_EQ(good->size(), 1u);
  Result<std::string> bad(ErrorCode::RPC_FAIL, "down");
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(bad.code(), ErrorCode::RPC_FAIL);
  // An OK status cannot make a failed Result look successful.
  Result<int> from_ok{Status::Ok()};
  EXPECT_FALSE(from_ok.ok());
  EXPECT_EQ(from_ok.code(), ErrorCode::INTERNAL_ERROR);
}

TEST(ResultDeathTest, ReadingTheValueOfAFailedResultAborts) {
  Result<std::string> bad(ErrorCode::RPC_FAIL, "the master is down");
  EXPECT_DEATH((void)bad.value(), "failed Result.*RPC_FAIL.*the master is down");
  EXPECT_DEATH((void)*bad, "failed Result");
  EXPECT_DEATH((void)bad->size(), "failed Result");
}

}  // namespace
}  // namespace tierkv
