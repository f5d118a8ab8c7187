// reduce_test.cc: kernels::reduce, divideBy and the half-precision conversions against scalar references
// written independently of the kernels (wide-integer arithmetic, double arithmetic, and a nearest-value
// search over every 16-bit pattern for rounding), so a shared mistake cannot pass unnoticed.
//
// Every datatype x op runs at odd counts (vector bodies plus scalar or padded tails), out of place and in
// place into either input, from aligned and misaligned addresses, with guard elements after dst.
#include "kernels/reduce.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/datatype.h"

namespace hetcomm::kernels {
namespace {

constexpr size_t kCounts[] = {0, 1, 7, 33, 1023, (1u << 16) + 3};
constexpr DataType kAllTypes[] = {DataType::kInt8,    DataType::kUint8,   DataType::kInt32,   DataType::kUint32,
                                  DataType::kInt64,   DataType::kUint64,  DataType::kFloat16, DataType::kFloat32,
                                  DataType::kFloat64, DataType::kBfloat16};
constexpr RedOp kAllOps[] = {RedOp::kSum, RedOp::kProd, RedOp::kMax, RedOp::kMin, RedOp::kAvg};
constexpr DataType kFloatTypes[] = {DataType::kFloat16, DataType::kFloat32, DataType::kFloat64, DataType::kBfloat16};

// Where dst lives relative to the inputs.
enum class Alias { kOutOfPlace, kIntoA, kIntoB };
const char* aliasName(Alias m) {
  return m == Alias::kOutOfPlace ? "out-of-place" : (m == Alias::kIntoA ? "dst==a" : "dst==b");
}

// ---------------------------------------------------------------------------------------------------------
// Typed access to raw buffers.

// Calls f(T{}) with the C++ storage type of an integer datatype.
template <class F>
void visitInteger(DataType t, F&& f) {
  switch (t) {
    case DataType::kInt8:
      return f(int8_t{});
    case DataType::kUint8:
      return f(uint8_t{});
    case DataType::kInt32:
      return f(int32_t{});
    case DataType::kUint32:
      return f(uint32_t{});
    case DataType::kInt64:
      return f(int64_t{});
    case DataType::kUint64:
      return f(uint64_t{});
    default:
      FAIL() << "not an integer type: " << name(t);
  }
}

// memcpy that accepts the null data() of an empty vector (memcpy itself may not be passed null, even for 0 bytes).
void copyBytes(void* dst, const void* src, size_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, bytes);
}

// Float element i as an exact double (every float16, bfloat16 and float value is a double).
double loadFloat(const std::byte* buf, size_t i, DataType t) {
  switch (t) {
    case DataType::kFloat16: {
      uint16_t h;
      std::memcpy(&h, buf + 2 * i, 2);
      return halfToFloat(h);
    }
    case DataType::kBfloat16: {
      uint16_t h;
      std::memcpy(&h, buf + 2 * i, 2);
      return bfloat16ToFloat(h);
    }
    case DataType::kFloat32: {
      float f;
      std::memcpy(&f, buf + 4 * i, 4);
      return f;
    }
    default: {
      double d;
      std::memcpy(&d, buf + 8 * i, 8);
      return d;
    }
  }
}

// Stores v, which the caller chose representable in t (so the conversion is exact whatever its rounding).
void storeFloat(std::byte* buf, size_t i, DataType t, double v) {
  switch (t) {
    case DataType::kFloat16: {
      uint16_t h = floatToHalf(static_cast<float>(v));
      std::memcpy(buf + 2 * i, &h, 2);
      break;
    }
    case DataType::kBfloat16: {
      uint16_t h = floatToBfloat16(static_cast<float>(v));
      std::memcpy(buf + 2 * i, &h, 2);
      break;
    }
    case DataType::kFloat32: {
      float f = static_cast<float>(v);
      std::memcpy(buf + 4 * i, &f, 4);
      break;
    }
    default:
      std::memcpy(buf + 8 * i, &v, 8);
      break;
  }
}

// A buffer of `count` elements starting `offset` elements into its storage (offset 1 misaligns the data for
// every vector width), followed by guard elements that must survive the call.
class Buf {
 public:
  static constexpr size_t kGuard = 16;
  static constexpr std::byte kGuardByte{0xA5};

  Buf(DataType t, size_t count, size_t offset)
      : size_(sizeOf(t)), count_(count), offset_(offset), storage_((offset + count + kGuard) * size_, kGuardByte) {}
  std::byte* data() { return storage_.data() + offset_ * size_; }
  const std::byte* data() const { return storage_.data() + offset_ * size_; }
  size_t bytes() const { return count_ * size_; }
  bool guardIntact() const {
    const std::byte* g = data() + bytes();
    return std::all_of(g, g + kGuard * size_, [](std::byte x) { return x == kGuardByte; });
  }

 private:
  size_t size_, count_, offset_;
  std::vector<std::byte> storage_;
};

// Runs reduce with dst placed per `mode`; returns the buffer holding the result.
Buf runReduce(const Buf& a, const Buf& b, size_t count, DataType t, RedOp op, Alias mode, size_t offset) {
  Buf dst(t, count, offset);
  switch (mode) {
    case Alias::kOutOfPlace:
      reduce(dst.data(), a.data(), b.data(), count, t, op);
      break;
    case Alias::kIntoA:
      std::memcpy(dst.data(), a.data(), a.bytes());
      reduce(dst.data(), dst.data(), b.data(), count, t, op);
      break;
    case Alias::kIntoB:
      std::memcpy(dst.data(), b.data(), b.bytes());
      reduce(dst.data(), a.data(), dst.data(), count, t, op);
      break;
  }
  return dst;
}

// ---------------------------------------------------------------------------------------------------------
// References.

// Integer reference in 128-bit arithmetic (no overflow possible), then truncated to T: the two's complement
// wrap the kernels promise, computed a different way.
template <class T>
T integerReference(T a, T b, RedOp op) {
  using Wide = std::conditional_t<std::is_signed_v<T>, __int128, unsigned __int128>;
  Wide x = a, y = b, r = 0;
  switch (op) {
    case RedOp::kSum:
    case RedOp::kAvg:
      r = x + y;
      break;
    case RedOp::kProd:
      r = x * y;
      break;
    case RedOp::kMax:
      r = std::max(x, y);
      break;
    case RedOp::kMin:
      r = std::min(x, y);
      break;
  }
  return static_cast<T>(static_cast<unsigned __int128>(r));
}

double floatReference(double a, double b, RedOp op) {
  switch (op) {
    case RedOp::kSum:
    case RedOp::kAvg:
      return a + b;
    case RedOp::kProd:
      return a * b;
    case RedOp::kMax:
      return std::max(a, b);
    case RedOp::kMin:
      return std::min(a, b);
  }
  return 0;
}

// Every non-negative finite value of a 16-bit float format, indexed by bit pattern (patterns and values sort
// alike), plus one entry past the largest finite value holding the next power of two: its pattern is the
// format's infinity, where round-to-nearest sends everything from the midpoint up.
struct Format16 {
  std::vector<double> values;
  uint16_t infBits;
};
const Format16& halfFormat() {
  static const Format16 f = [] {
    Format16 r{{}, 0x7C00};
    for (uint32_t h = 0; h < 0x7C00; ++h) r.values.push_back(halfToFloat(static_cast<uint16_t>(h)));
    r.values.push_back(65536.0);
    return r;
  }();
  return f;
}
const Format16& bfloat16Format() {
  static const Format16 f = [] {
    Format16 r{{}, 0x7F80};
    for (uint32_t h = 0; h < 0x7F80; ++h) r.values.push_back(bfloat16ToFloat(static_cast<uint16_t>(h)));
    r.values.push_back(std::ldexp(1.0, 128));
    return r;
  }();
  return f;
}

// Round-to-nearest-even by search: the nearest representable value, the even pattern on a tie.
uint16_t roundReference(double x, const Format16& fmt) {
  uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  double a = std::fabs(x);
  if (std::isnan(x)) return 0x7FFF;  // callers compare NaN-ness only
  if (a >= fmt.values.back()) return sign | fmt.infBits;
  size_t hi = std::lower_bound(fmt.values.begin(), fmt.values.end(), a) - fmt.values.begin();
  if (fmt.values[hi] == a) return static_cast<uint16_t>(sign | hi);
  size_t lo = hi - 1;
  double dlo = a - fmt.values[lo], dhi = fmt.values[hi] - a;
  size_t pick = dlo < dhi ? lo : (dhi < dlo ? hi : (lo % 2 == 0 ? lo : hi));
  return static_cast<uint16_t>(sign | pick);
}

// Checks two float16/bfloat16 patterns are equal, treating any two NaNs as equal.
::testing::AssertionResult sameHalfBits(uint16_t got, uint16_t want, bool isHalf) {
  auto isNan = [&](uint16_t v) { return isHalf ? (v & 0x7FFF) > 0x7C00 : (v & 0x7FFF) > 0x7F80; };
  if (got == want || (isNan(got) && isNan(want))) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << std::hex << "got 0x" << got << ", want 0x" << want;
}

// ---------------------------------------------------------------------------------------------------------
// Every datatype x op: bit-exact against the references.

class ReduceExact : public ::testing::TestWithParam<std::tuple<DataType, RedOp>> {};

// Integers: random full-range inputs, so sums and products overflow (and must wrap) about half the time.
template <class T>
void checkInteger(RedOp op, std::mt19937_64& rng) {
  constexpr DataType t = std::is_same_v<T, int8_t>     ? DataType::kInt8
                         : std::is_same_v<T, uint8_t>  ? DataType::kUint8
                         : std::is_same_v<T, int32_t>  ? DataType::kInt32
                         : std::is_same_v<T, uint32_t> ? DataType::kUint32
                         : std::is_same_v<T, int64_t>  ? DataType::kInt64
                                                       : DataType::kUint64;
  for (size_t count : kCounts) {
    for (size_t offset : {0, 1}) {
      Buf a(t, count, offset), b(t, count, offset);
      std::vector<T> va(count), vb(count);
      for (size_t i = 0; i < count; ++i) {
        va[i] = static_cast<T>(rng());
        vb[i] = static_cast<T>(rng());
      }
      if (count >= 2) {  // the edges themselves, whatever the random draw
        va[0] = std::numeric_limits<T>::max(), vb[0] = 1;
        va[1] = std::numeric_limits<T>::min(), vb[1] = static_cast<T>(-1);
      }
      copyBytes(a.data(), va.data(), a.bytes());
      copyBytes(b.data(), vb.data(), b.bytes());
      for (Alias mode : {Alias::kOutOfPlace, Alias::kIntoA, Alias::kIntoB}) {
        SCOPED_TRACE(::testing::Message() << "count " << count << ", " << aliasName(mode) << ", offset " << offset);
        Buf dst = runReduce(a, b, count, t, op, mode, offset);
        std::vector<T> got(count);
        copyBytes(got.data(), dst.data(), dst.bytes());
        for (size_t i = 0; i < count; ++i) {
          T want = integerReference(va[i], vb[i], op);
          ASSERT_EQ(+got[i], +want) << "element " << i << ": op(" << +va[i] << ", " << +vb[i] << ")";
        }
        EXPECT_TRUE(dst.guardIntact());
      }
    }
  }
}

// Floats: small integers, so every sum, product, max and min is exactly representable even in bfloat16 (8
// significant bits: |x| <= 15 gives |x * y| <= 225); includes zeros, so products make -0 too.
void checkFloatExact(DataType t, RedOp op, std::mt19937_64& rng) {
  int range = (t == DataType::kFloat16 || t == DataType::kBfloat16) ? 15 : 2047;
  std::uniform_int_distribution<int> dist(-range, range);
  for (size_t count : kCounts) {
    for (size_t offset : {0, 1}) {
      Buf a(t, count, offset), b(t, count, offset);
      for (size_t i = 0; i < count; ++i) {
        storeFloat(a.data(), i, t, dist(rng));
        storeFloat(b.data(), i, t, dist(rng));
      }
      for (Alias mode : {Alias::kOutOfPlace, Alias::kIntoA, Alias::kIntoB}) {
        SCOPED_TRACE(::testing::Message() << "count " << count << ", " << aliasName(mode) << ", offset " << offset);
        Buf dst = runReduce(a, b, count, t, op, mode, offset);
        for (size_t i = 0; i < count; ++i) {
          double x = loadFloat(a.data(), i, t), y = loadFloat(b.data(), i, t);
          double want = floatReference(x, y, op), got = loadFloat(dst.data(), i, t);
          // Value and sign: each value has one encoding apart from the two zeros, so this is bit-exact.
          ASSERT_TRUE(got == want && std::signbit(got) == std::signbit(want))
              << "element " << i << ": op(" << x << ", " << y << ") = " << got << ", want " << want;
        }
        EXPECT_TRUE(dst.guardIntact());
      }
    }
  }
}

TEST_P(ReduceExact, MatchesReference) {
  const DataType t = std::get<0>(GetParam());
  const RedOp op = std::get<1>(GetParam());  // a name, not a binding: the lambda below captures it (clang 14)
  std::mt19937_64 rng(static_cast<uint64_t>(t) * 131 + static_cast<uint64_t>(op));
  if (isFloat(t)) {
    checkFloatExact(t, op, rng);
  } else {
    visitInteger(t, [&](auto tag) { checkInteger<decltype(tag)>(op, rng); });
  }
}

std::string paramName(const ::testing::TestParamInfo<std::tuple<DataType, RedOp>>& info) {
  return std::string(name(std::get<0>(info.param))) + "_" + name(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(AllTypesAllOps, ReduceExact,
                         ::testing::Combine(::testing::ValuesIn(kAllTypes), ::testing::ValuesIn(kAllOps)), paramName);

// ---------------------------------------------------------------------------------------------------------
// Random floats over a wide range of magnitudes (subnormal results included for float16): within half an
// ulp of the exact result, which is what correct rounding guarantees. For float16 and bfloat16 also the
// exact correctly rounded pattern, since widening to float makes that achievable (see reduce.cc).

class ReduceRandomFloat : public ::testing::TestWithParam<std::tuple<DataType, RedOp>> {};

TEST_P(ReduceRandomFloat, WithinHalfUlp) {
  auto [t, op] = GetParam();
  struct Spec {
    int minExp, maxExp;  // input magnitudes in [2^minExp, 2^(maxExp+1))
    double relTol;       // half an ulp, relative: 2^-p for p significant bits
    double absTol;       // half the smallest subnormal: the error bound once results underflow
  };
  Spec spec = t == DataType::kFloat16    ? Spec{-16, 6, 0x1p-11, 0x1p-25}
              : t == DataType::kBfloat16 ? Spec{-30, 30, 0x1p-8, 0x1p-134}
              : t == DataType::kFloat32  ? Spec{-60, 60, 0x1p-24, 0x1p-150}
                                         : Spec{-300, 300, 0x1p-53 * 1.01, 0};  // 1.01: long double reference
  std::mt19937_64 rng(static_cast<uint64_t>(t) * 7 + static_cast<uint64_t>(op));
  std::uniform_real_distribution<double> mant(1.0, 2.0);
  std::uniform_int_distribution<int> expo(spec.minExp, spec.maxExp);
  auto draw = [&] { return std::ldexp(mant(rng), expo(rng)) * (rng() % 2 ? -1 : 1); };

  const size_t count = 4099;
  Buf a(t, count, 0), b(t, count, 0);
  for (size_t i = 0; i < count; ++i) {
    storeFloat(a.data(), i, t, draw());  // rounds to t; the test uses the stored values, whatever they are
    storeFloat(b.data(), i, t, draw());
  }
  for (Alias mode : {Alias::kOutOfPlace, Alias::kIntoB}) {
    SCOPED_TRACE(aliasName(mode));
    Buf dst = runReduce(a, b, count, t, op, mode, 0);
    for (size_t i = 0; i < count; ++i) {
      long double x = loadFloat(a.data(), i, t), y = loadFloat(b.data(), i, t);
      long double exact = (op == RedOp::kSum || op == RedOp::kAvg) ? x + y
                          : op == RedOp::kProd                     ? x * y
                          : op == RedOp::kMax                      ? std::max(x, y)
                                                                   : std::min(x, y);
      double got = loadFloat(dst.data(), i, t);
      double err = static_cast<double>(std::fabs(static_cast<long double>(got) - exact));
      double tol = (op == RedOp::kMax || op == RedOp::kMin)
                       ? 0.0
                       : spec.relTol * static_cast<double>(std::fabs(exact)) + spec.absTol;
      ASSERT_LE(err, tol) << "element " << i << ": op(" << static_cast<double>(x) << ", " << static_cast<double>(y)
                          << ") = " << got << ", exact " << static_cast<double>(exact);
      if (t == DataType::kFloat16 || t == DataType::kBfloat16) {
        const Format16& fmt = t == DataType::kFloat16 ? halfFormat() : bfloat16Format();
        uint16_t bits;
        std::memcpy(&bits, dst.data() + 2 * i, 2);
        ASSERT_TRUE(sameHalfBits(bits, roundReference(static_cast<double>(exact), fmt), t == DataType::kFloat16))
            << "element " << i << ": not correctly rounded";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(FloatTypes, ReduceRandomFloat,
                         ::testing::Combine(::testing::ValuesIn(kFloatTypes), ::testing::ValuesIn(kAllOps)), paramName);

// ---------------------------------------------------------------------------------------------------------
// Special values.

// NaN in either input gives NaN for every op (Max/Min included); inf behaves as IEEE says.
TEST(ReduceSpecial, NanPropagatesThroughEveryOp) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  for (DataType t : kFloatTypes) {
    for (RedOp op : kAllOps) {
      SCOPED_TRACE(::testing::Message() << name(t) << " " << name(op));
      // Pairs as columns: (nan, 1) (1, nan) (nan, nan) (inf, 1) (-inf, 1) (inf, -inf)
      const double xs[] = {nan, 1, nan, inf, -inf, inf}, ys[] = {1, nan, nan, 1, 1, -inf};
      const size_t n = std::size(xs);
      Buf a(t, n, 0), b(t, n, 0);
      for (size_t i = 0; i < n; ++i) storeFloat(a.data(), i, t, xs[i]), storeFloat(b.data(), i, t, ys[i]);
      Buf dst = runReduce(a, b, n, t, op, Alias::kOutOfPlace, 0);
      for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(std::isnan(loadFloat(dst.data(), i, t))) << "pair " << i;
      for (size_t i = 3; i < n; ++i) {
        double want = floatReference(xs[i], ys[i], op), got = loadFloat(dst.data(), i, t);
        EXPECT_TRUE(got == want || (std::isnan(got) && std::isnan(want))) << "pair " << i << ": " << got;
      }
    }
  }
}

TEST(ReduceSpecial, IntegersWrapAround) {
  int8_t i8a[] = {127, -128, -128, 100}, i8b[] = {1, -1, -1, 2}, i8d[4];
  reduce(i8d, i8a, i8b, 2, DataType::kInt8, RedOp::kSum);
  EXPECT_EQ(i8d[0], -128);
  EXPECT_EQ(i8d[1], 127);
  reduce(i8d, i8a + 2, i8b + 2, 2, DataType::kInt8, RedOp::kProd);
  EXPECT_EQ(i8d[0], -128);  // -128 * -1 = 128 wraps to -128
  EXPECT_EQ(i8d[1], -56);   // 200 wraps to -56

  uint8_t u8a[] = {255, 16}, u8b[] = {1, 16}, u8d[2];
  reduce(u8d, u8a, u8b, 1, DataType::kUint8, RedOp::kSum);
  EXPECT_EQ(u8d[0], 0);
  reduce(u8d, u8a + 1, u8b + 1, 1, DataType::kUint8, RedOp::kProd);
  EXPECT_EQ(u8d[0], 0);  // 256

  int32_t i32a[] = {INT32_MAX, 65536}, i32b[] = {1, 65536}, i32d[2];
  reduce(i32d, i32a, i32b, 1, DataType::kInt32, RedOp::kSum);
  EXPECT_EQ(i32d[0], INT32_MIN);
  reduce(i32d, i32a + 1, i32b + 1, 1, DataType::kInt32, RedOp::kProd);
  EXPECT_EQ(i32d[0], 0);  // 2^32

  int64_t i64a[] = {INT64_MIN, INT64_MIN}, i64b[] = {-1, -1}, i64d[2];
  reduce(i64d, i64a, i64b, 1, DataType::kInt64, RedOp::kSum);
  EXPECT_EQ(i64d[0], INT64_MAX);
  reduce(i64d, i64a + 1, i64b + 1, 1, DataType::kInt64, RedOp::kProd);
  EXPECT_EQ(i64d[0], INT64_MIN);

  uint64_t u64a[] = {UINT64_MAX}, u64b[] = {UINT64_MAX}, u64d[1];
  reduce(u64d, u64a, u64b, 1, DataType::kUint64, RedOp::kProd);
  EXPECT_EQ(u64d[0], 1u);  // (2^64 - 1)^2 = 1 mod 2^64
}

// dst == a == b (doubling, squaring) has its own loop; it must agree with reduce(out, a, a), which the
// tests above check against the references.
TEST(ReduceSpecial, AllThreePointersEqual) {
  std::mt19937_64 rng(3);
  for (DataType t : kAllTypes) {
    for (RedOp op : kAllOps) {
      SCOPED_TRACE(::testing::Message() << name(t) << " " << name(op));
      const size_t count = 1023;
      Buf a(t, count, 1), self(t, count, 1), out(t, count, 1);
      for (size_t i = 0; i < a.bytes(); ++i) a.data()[i] = static_cast<std::byte>(rng());
      if (isFloat(t)) {  // random bytes would be NaN or huge too often to mean much
        for (size_t i = 0; i < count; ++i) storeFloat(a.data(), i, t, static_cast<double>(rng() % 64) - 32);
      }
      std::memcpy(self.data(), a.data(), a.bytes());
      reduce(self.data(), self.data(), self.data(), count, t, op);
      reduce(out.data(), a.data(), a.data(), count, t, op);
      EXPECT_EQ(std::memcmp(self.data(), out.data(), a.bytes()), 0);
      EXPECT_TRUE(self.guardIntact());
    }
  }
}

TEST(ReduceSpecial, ZeroCountTouchesNothing) {
  for (DataType t : kAllTypes) {
    for (RedOp op : kAllOps) reduce(nullptr, nullptr, nullptr, 0, t, op);
    divideBy(nullptr, 0, t, 3);
  }
}

TEST(ReduceDeathTest, InvalidTypeOrOpIsAnInvariantFailure) {
  float x = 1;
  EXPECT_DEATH(reduce(&x, &x, &x, 1, static_cast<DataType>(42), RedOp::kSum), "isValid");
  EXPECT_DEATH(reduce(&x, &x, &x, 1, DataType::kFloat32, static_cast<RedOp>(9)), "isValid");
  EXPECT_DEATH(divideBy(&x, 1, DataType::kFloat32, 0), "n >= 1");
}

// ---------------------------------------------------------------------------------------------------------
// divideBy: the last step of Avg.

TEST(DivideBy, SignedIntegersTruncateTowardZero) {
  int32_t v[] = {7, -7, -1, 1, -6, INT32_MIN, INT32_MAX};
  divideBy(v, std::size(v), DataType::kInt32, 2);
  EXPECT_EQ(std::vector<int32_t>(std::begin(v), std::end(v)),
            (std::vector<int32_t>{3, -3, 0, 0, -3, INT32_MIN / 2, INT32_MAX / 2}));

  int8_t w[] = {-128, -128, 127, -7, -5};
  divideBy(w, 2, DataType::kInt8, 128);  // a divisor outside int8's range
  divideBy(w + 2, 3, DataType::kInt8, 3);
  EXPECT_EQ(w[0], -1);
  EXPECT_EQ(w[1], -1);
  EXPECT_EQ(w[2], 42);
  EXPECT_EQ(w[3], -2);
  EXPECT_EQ(w[4], -1);

  int8_t big[] = {-128, 127};
  divideBy(big, 2, DataType::kInt8, 1000);
  EXPECT_EQ(big[0], 0);
  EXPECT_EQ(big[1], 0);

  int64_t x[] = {INT64_MIN, -10, 10};
  divideBy(x, 3, DataType::kInt64, 3);
  EXPECT_EQ(x[0], INT64_MIN / 3);
  EXPECT_EQ(x[1], -3);
  EXPECT_EQ(x[2], 3);

  uint8_t u[] = {255, 7};
  divideBy(u, 2, DataType::kUint8, 2);
  EXPECT_EQ(u[0], 127);
  EXPECT_EQ(u[1], 3);
  uint64_t u64[] = {UINT64_MAX};
  divideBy(u64, 1, DataType::kUint64, 7);
  EXPECT_EQ(u64[0], UINT64_MAX / 7);
}

// Every count and every datatype, against per-element references; floats are correctly rounded quotients.
TEST(DivideBy, EveryTypeEveryCount) {
  std::mt19937_64 rng(5);
  for (DataType t : kAllTypes) {
    for (size_t count : kCounts) {
      for (int n : {1, 3, 8}) {
        SCOPED_TRACE(::testing::Message() << name(t) << ", count " << count << ", n " << n);
        if (isFloat(t)) {
          Buf buf(t, count, 1);
          std::vector<double> before(count);
          for (size_t i = 0; i < count; ++i) {
            storeFloat(buf.data(), i, t, std::ldexp(static_cast<double>(rng() % 4096) - 2048.0, -6));
            before[i] = loadFloat(buf.data(), i, t);
          }
          divideBy(buf.data(), count, t, n);
          for (size_t i = 0; i < count; ++i) {
            double q = before[i] / n, got = loadFloat(buf.data(), i, t);
            double want = t == DataType::kFloat16    ? halfToFloat(roundReference(q, halfFormat()))
                          : t == DataType::kBfloat16 ? bfloat16ToFloat(roundReference(q, bfloat16Format()))
                          : t == DataType::kFloat32  ? static_cast<float>(before[i]) / static_cast<float>(n)
                                                     : q;
            ASSERT_EQ(got, want) << "element " << i << ": " << before[i] << " / " << n;
          }
          EXPECT_TRUE(buf.guardIntact());
        } else {
          visitInteger(t, [&](auto tag) {
            using T = decltype(tag);
            Buf buf(t, count, 1);
            std::vector<T> before(count), got(count);
            for (T& v : before) v = static_cast<T>(rng());
            copyBytes(buf.data(), before.data(), buf.bytes());
            divideBy(buf.data(), count, t, n);
            copyBytes(got.data(), buf.data(), buf.bytes());
            for (size_t i = 0; i < count; ++i) {
              // Reference: truncation toward zero spelled out on magnitudes.
              __int128 v = before[i], mag = v < 0 ? -v : v, q = mag / n;
              T want = static_cast<T>(v < 0 ? -q : q);
              ASSERT_EQ(+got[i], +want) << "element " << i << ": " << +before[i] << " / " << n;
            }
            EXPECT_TRUE(buf.guardIntact());
          });
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------------------
// Conversions.

// halfToFloat / bfloat16ToFloat against the formats' definitions, for every pattern.
TEST(Conversions, WideningMatchesTheDefinition) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    uint32_t s = h >> 15, e = (h >> 10) & 0x1F, m = h & 0x3FF;
    double sign = s ? -1.0 : 1.0;
    float got = halfToFloat(static_cast<uint16_t>(h));
    if (e == 0x1F) {
      ASSERT_EQ(std::isnan(got), m != 0) << std::hex << h;
      if (m == 0) {
        ASSERT_EQ(got, sign * INFINITY) << std::hex << h;
      }
    } else {
      double want = sign * (e == 0 ? std::ldexp(m, -24) : std::ldexp(1024.0 + m, static_cast<int>(e) - 25));
      ASSERT_EQ(got, want) << std::hex << h;
      ASSERT_EQ(std::signbit(got), s != 0) << std::hex << h;
    }
  }
  for (uint32_t h = 0; h < 0x10000; ++h) {
    uint32_t s = h >> 15, e = (h >> 7) & 0xFF, m = h & 0x7F;
    double sign = s ? -1.0 : 1.0;
    float got = bfloat16ToFloat(static_cast<uint16_t>(h));
    if (e == 0xFF) {
      ASSERT_EQ(std::isnan(got), m != 0) << std::hex << h;
    } else {
      double want = sign * (e == 0 ? std::ldexp(m, -133) : std::ldexp(128.0 + m, static_cast<int>(e) - 134));
      ASSERT_EQ(got, want) << std::hex << h;
    }
  }
}

TEST(Conversions, KnownValues) {
  EXPECT_EQ(floatToHalf(1.0f), 0x3C00);
  EXPECT_EQ(floatToHalf(-2.0f), 0xC000);
  EXPECT_EQ(floatToHalf(65504.0f), 0x7BFF);  // largest finite
  EXPECT_EQ(floatToHalf(0x1p-14f), 0x0400);  // smallest normal
  EXPECT_EQ(floatToHalf(0x1p-24f), 0x0001);  // smallest subnormal
  EXPECT_EQ(floatToHalf(0x3FFp-24f), 0x03FF);
  EXPECT_EQ(floatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(floatToHalf(INFINITY), 0x7C00);
  EXPECT_EQ(floatToHalf(-INFINITY), 0xFC00);
  EXPECT_EQ(floatToHalf(1e6f), 0x7C00);     // overflow
  EXPECT_EQ(floatToHalf(1e-10f), 0x0000);   // underflow
  EXPECT_EQ(floatToHalf(-1e-10f), 0x8000);  // keeps its sign
  EXPECT_EQ(floatToHalf(0x1p-149f), 0x0000);
  EXPECT_EQ(floatToBfloat16(1.0f), 0x3F80);
  EXPECT_EQ(floatToBfloat16(-2.0f), 0xC000);
  EXPECT_EQ(floatToBfloat16(std::numeric_limits<float>::max()), 0x7F80);  // rounds up to inf
  EXPECT_EQ(floatToBfloat16(0x1p-133f), 0x0001);                          // smallest subnormal
  EXPECT_EQ(floatToBfloat16(INFINITY), 0x7F80);
  EXPECT_EQ(floatToBfloat16(-0.0f), 0x8000);
}

TEST(Conversions, RoundToNearestEvenTies) {
  // float16 near 1: ulp 2^-10. Halfway below an even pattern stays, halfway above an odd one goes up.
  EXPECT_EQ(floatToHalf(1.0f + 0x1p-11f), 0x3C00);
  EXPECT_EQ(floatToHalf(1.0f + 0x3p-11f), 0x3C02);
  EXPECT_EQ(floatToHalf(std::nextafter(1.0f + 0x1p-11f, 2.0f)), 0x3C01);  // just past the tie
  EXPECT_EQ(floatToHalf(-(1.0f + 0x3p-11f)), 0xBC02);
  EXPECT_EQ(floatToHalf(65520.0f), 0x7C00);  // tie between 65504 (odd) and the would-be 65536: inf
  EXPECT_EQ(floatToHalf(std::nextafter(65520.0f, 0.0f)), 0x7BFF);
  // Subnormal ties: ulp 2^-24.
  EXPECT_EQ(floatToHalf(0x1p-25f), 0x0000);
  EXPECT_EQ(floatToHalf(0x3p-25f), 0x0002);
  EXPECT_EQ(floatToHalf(0x5p-25f), 0x0002);
  EXPECT_EQ(floatToHalf(std::nextafter(0x1p-25f, 1.0f)), 0x0001);
  EXPECT_EQ(floatToHalf(0x7FFp-25f), 0x0400);  // the largest subnormal's tie rounds up to the smallest normal
  // bfloat16 near 1: ulp 2^-7.
  EXPECT_EQ(floatToBfloat16(1.0f + 0x1p-8f), 0x3F80);
  EXPECT_EQ(floatToBfloat16(1.0f + 0x3p-8f), 0x3F82);
  EXPECT_EQ(floatToBfloat16(std::nextafter(1.0f + 0x1p-8f, 2.0f)), 0x3F81);
}

TEST(Conversions, RoundTripEveryPattern) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    auto bits = static_cast<uint16_t>(h);
    bool halfNan = (h & 0x7FFF) > 0x7C00, bfNan = (h & 0x7FFF) > 0x7F80;
    // NaNs come back quiet, payload kept: what F16C does, and what the other path must match.
    ASSERT_EQ(floatToHalf(halfToFloat(bits)), halfNan ? (bits | 0x0200) : bits) << std::hex << h;
    ASSERT_EQ(floatToBfloat16(bfloat16ToFloat(bits)), bfNan ? (bits | 0x0040) : bits) << std::hex << h;
  }
}

// Narrowing against the search reference: a sweep over all float patterns, and the midpoint between every
// pair of adjacent 16-bit values with its two float neighbours.
TEST(Conversions, NarrowingIsCorrectlyRounded) {
  auto check = [](float f) {
    ASSERT_TRUE(sameHalfBits(floatToHalf(f), roundReference(f, halfFormat()), true)) << std::hexfloat << f;
    ASSERT_TRUE(sameHalfBits(floatToBfloat16(f), roundReference(f, bfloat16Format()), false)) << std::hexfloat << f;
  };
  for (uint64_t u = 0; u < (1ull << 32); u += 9973) check(std::bit_cast<float>(static_cast<uint32_t>(u)));
  for (const Format16* fmt : {&halfFormat(), &bfloat16Format()}) {
    for (size_t i = 0; i + 1 < fmt->values.size(); ++i) {
      // Midpoints are exact in float: float16's are multiples of 2^-25, bfloat16's of 2^-134 (a float
      // subnormal), both far coarser than float's 2^-149.
      float mid = static_cast<float>((fmt->values[i] + fmt->values[i + 1]) / 2);
      if (!std::isfinite(mid)) continue;
      for (float f : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)}) {
        check(f);
        check(-f);
      }
    }
  }
}

// The F16C fast path inside reduce() and the bit-manipulation path in the scalar conversions must give the
// same bits: reduce every float16 pattern with -0 (x + -0 = x exactly, for every x, zeros included), and
// random pairs, including inf and NaN, through each op.
TEST(Conversions, ReducePathAgreesWithScalarConversions) {
  const size_t n = 0x10000;
  std::vector<uint16_t> all(n), negZero(n, 0x8000), got(n);
  for (size_t i = 0; i < n; ++i) all[i] = static_cast<uint16_t>(i);
  reduce(got.data(), all.data(), negZero.data(), n, DataType::kFloat16, RedOp::kSum);
  for (size_t i = 0; i < n; ++i) {
    bool nan = (i & 0x7FFF) > 0x7C00;
    ASSERT_EQ(got[i], nan ? (all[i] | 0x0200) : all[i]) << std::hex << i;
  }
  negZero.assign(n, 0x8000);
  reduce(got.data(), all.data(), negZero.data(), n, DataType::kBfloat16, RedOp::kSum);
  for (size_t i = 0; i < n; ++i) {
    bool nan = (i & 0x7FFF) > 0x7F80;
    ASSERT_EQ(got[i], nan ? (all[i] | 0x0040) : all[i]) << std::hex << i;
  }

  std::mt19937_64 rng(11);
  std::vector<uint16_t> a(n), b(n);
  for (size_t i = 0; i < n; ++i) a[i] = static_cast<uint16_t>(rng()), b[i] = static_cast<uint16_t>(rng());
  for (RedOp op : kAllOps) {
    SCOPED_TRACE(name(op));
    reduce(got.data(), a.data(), b.data(), n, DataType::kFloat16, op);
    for (size_t i = 0; i < n; ++i) {
      float x = halfToFloat(a[i]), y = halfToFloat(b[i]);
      float r = (op == RedOp::kSum || op == RedOp::kAvg) ? x + y
                : op == RedOp::kProd                     ? x * y
                : std::isnan(x) || std::isnan(y)         ? NAN
                : op == RedOp::kMax                      ? std::max(x, y)
                                                         : std::min(x, y);
      // Max/Min of +0 and -0 may return either zero; every other result has one answer.
      if ((op == RedOp::kMax || op == RedOp::kMin) && x == 0 && y == 0) continue;
      ASSERT_TRUE(sameHalfBits(got[i], floatToHalf(r), true)) << std::hex << a[i] << " op " << b[i];
    }
  }
}

TEST(DataTypeNames, NcclTestsSpelling) {
  const char* want[] = {"int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float", "double", "bfloat16"};
  for (int i = 0; i < kNumDataTypes; ++i) EXPECT_STREQ(name(static_cast<DataType>(i)), want[i]);
  const char* ops[] = {"sum", "prod", "max", "min", "avg"};
  for (int i = 0; i < kNumRedOps; ++i) EXPECT_STREQ(name(static_cast<RedOp>(i)), ops[i]);
  EXPECT_STREQ(name(static_cast<DataType>(kNumDataTypes)), "unknown");
  EXPECT_EQ(sizeOf(DataType::kBfloat16), 2u);
}

}  // namespace
}  // namespace hetcomm::kernels
