// Status and Result<T>: codes, messages, the helpers, and propagation through HC_TRY / HC_ASSIGN_OR_RETURN.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <variant>

#include "common/status.h"

namespace hetcomm {
namespace {

TEST(Status, DefaultIsOkWithoutMessage) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), Code::kOk);
  EXPECT_TRUE(s.message().empty());
  EXPECT_EQ(s.toString(), "ok");
  EXPECT_TRUE(okStatus().ok());
}

TEST(Status, HelpersSetCodeAndFormatMessage) {
  struct Case {
    Status st;
    Code code;
  };
  const Case cases[] = {
      {invalidArgument("count %d is bad", 7), Code::kInvalidArgument},
      {invalidUsage("count %d is bad", 7), Code::kInvalidUsage},
      {systemError("count %d is bad", 7), Code::kSystem},
      {remoteError("count %d is bad", 7), Code::kRemote},
      {timeoutError("count %d is bad", 7), Code::kTimeout},
      {internalError("count %d is bad", 7), Code::kInternal},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(codeName(c.code));
    EXPECT_FALSE(c.st.ok());
    EXPECT_EQ(c.st.code(), c.code);
    EXPECT_EQ(c.st.message(), "count 7 is bad");
    EXPECT_EQ(c.st.toString(), std::string(codeName(c.code)) + ": count 7 is bad");
  }
}

TEST(Status, HelperWithoutArgumentsTakesTheTextLiterally) {
  // No arguments: the text is not a format, so a '%' must survive as is.
  Status s = invalidArgument("50% done, %d left");
  EXPECT_EQ(s.message(), "50% done, %d left");
}

TEST(Status, MakeStatusFormats) {
  Status s = makeStatus(Code::kRemote, "rank %d said %s", 3, "bye");
  EXPECT_EQ(s.code(), Code::kRemote);
  EXPECT_EQ(s.message(), "rank 3 said bye");
}

TEST(Status, CodeNamesAreDistinctAndMatchTheCApiOrder) {
  // The C boundary maps Code to hetcommResult_t by value: the numbering is part of the contract.
  EXPECT_EQ(static_cast<int>(Code::kOk), 0);
  EXPECT_EQ(static_cast<int>(Code::kUnhandled), 1);
  EXPECT_EQ(static_cast<int>(Code::kSystem), 2);
  EXPECT_EQ(static_cast<int>(Code::kInternal), 3);
  EXPECT_EQ(static_cast<int>(Code::kInvalidArgument), 4);
  EXPECT_EQ(static_cast<int>(Code::kInvalidUsage), 5);
  EXPECT_EQ(static_cast<int>(Code::kRemote), 6);
  EXPECT_EQ(static_cast<int>(Code::kInProgress), 7);
  EXPECT_EQ(static_cast<int>(Code::kTimeout), 8);
  std::set<std::string> names;
  for (int c = 0; c <= 8; ++c) names.insert(codeName(static_cast<Code>(c)));
  EXPECT_EQ(names.size(), 9u);
  EXPECT_STREQ(codeName(Code::kTimeout), "timeout");
  EXPECT_STREQ(codeName(Code::kInvalidArgument), "invalid argument");
  EXPECT_STREQ(codeName(static_cast<Code>(200)), "unknown code");
}

TEST(Status, CopiesShareTheMessage) {
  Status a = remoteError("peer %d gone", 5);
  Status b = a;
  EXPECT_EQ(b.code(), Code::kRemote);
  EXPECT_EQ(b.message(), "peer 5 gone");
  EXPECT_EQ(a.message().data(), b.message().data());  // shared, not copied
}

TEST(Status, ErrnoStatusAppendsStrerror) {
  Status s = errnoStatus(ENOENT, "open %s", "/nonexistent");
  EXPECT_EQ(s.code(), Code::kSystem);
  EXPECT_EQ(s.message(), std::string("open /nonexistent: ") + std::strerror(ENOENT));
  Status t = errnoStatus(ECONNREFUSED, "connect");
  EXPECT_EQ(t.message(), std::string("connect: ") + std::strerror(ECONNREFUSED));
}

// ---- Result<T> ----

TEST(Result, HoldsValueOrError) {
  Result<int> v = 42;
  ASSERT_TRUE(v.has_value());
  EXPECT_TRUE(static_cast<bool>(v));
  EXPECT_EQ(*v, 42);
  EXPECT_EQ(v.value(), 42);
  EXPECT_TRUE(v.status().ok());

  Result<int> e = timeoutError("waited %d s", 3);
  ASSERT_FALSE(e.has_value());
  EXPECT_FALSE(static_cast<bool>(e));
  EXPECT_EQ(e.error().code(), Code::kTimeout);
  EXPECT_EQ(e.status().message(), "waited 3 s");

  Result<int> u = unexpected(invalidUsage("nope"));
  ASSERT_FALSE(u.has_value());
  EXPECT_EQ(u.error().code(), Code::kInvalidUsage);
}

TEST(Result, ValueAccessOnAnErrorThrows) {
  Result<int> e = internalError("broken");
  EXPECT_THROW((void)e.value(), std::bad_variant_access);
}

TEST(Result, MoveOnlyValue) {
  Result<std::unique_ptr<int>> r = std::make_unique<int>(9);
  ASSERT_TRUE(r);
  std::unique_ptr<int> p = std::move(r).value();
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(*p, 9);
}

TEST(Result, StringValueThroughArrow) {
  Result<std::string> r = std::string("hello");
  EXPECT_EQ(r->size(), 5u);
}

// ---- propagation ----

Status failsWith(Code code) { return code == Code::kOk ? okStatus() : Status(code, "inner failure"); }

Status tryTwice(Code first, Code second, int* reached) {
  *reached = 0;
  HC_TRY(failsWith(first));
  *reached = 1;
  HC_TRY(failsWith(second));
  *reached = 2;
  return okStatus();
}

TEST(Propagation, HcTryReturnsTheFirstFailureUnchanged) {
  int reached = -1;
  Status s = tryTwice(Code::kOk, Code::kOk, &reached);
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(reached, 2);

  s = tryTwice(Code::kRemote, Code::kOk, &reached);
  EXPECT_EQ(s.code(), Code::kRemote);
  EXPECT_EQ(s.message(), "inner failure");
  EXPECT_EQ(reached, 0);

  s = tryTwice(Code::kOk, Code::kTimeout, &reached);
  EXPECT_EQ(s.code(), Code::kTimeout);
  EXPECT_EQ(reached, 1);
}

Result<int> parsePositive(int v) {
  if (v <= 0) return invalidArgument("%d is not positive", v);
  return v;
}

Result<std::unique_ptr<int>> makeBox(int v) {
  if (v < 0) return invalidArgument("negative box");
  return std::make_unique<int>(v);
}

Status sumOf(int a, int b, int* out) {
  HC_ASSIGN_OR_RETURN(int x, parsePositive(a));
  HC_ASSIGN_OR_RETURN(int y, parsePositive(b));  // two on one scope: distinct temporaries
  *out = x + y;
  return okStatus();
}

Result<int> boxed(int v) {
  int result = 0;
  HC_ASSIGN_OR_RETURN(auto box, makeBox(v));
  result = *box;
  HC_ASSIGN_OR_RETURN(result, parsePositive(result + 1));  // assigning to an existing variable
  return result;
}

TEST(Propagation, AssignOrReturnAssignsOrPropagates) {
  int out = 0;
  EXPECT_TRUE(sumOf(2, 3, &out).ok());
  EXPECT_EQ(out, 5);

  out = -1;
  Status s = sumOf(2, -3, &out);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(s.message(), "-3 is not positive");
  EXPECT_EQ(out, -1);

  s = sumOf(0, 5, &out);
  EXPECT_EQ(s.message(), "0 is not positive");

  auto r = boxed(4);
  ASSERT_TRUE(r);
  EXPECT_EQ(*r, 5);
  auto e = boxed(-1);
  ASSERT_FALSE(e);
  EXPECT_EQ(e.error().message(), "negative box");
}

}  // namespace
}  // namespace hetcomm
