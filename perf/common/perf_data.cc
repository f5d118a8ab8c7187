// perf_data.cc: generator, closed-form expected values and the check. See perf_data.h for the exactness argument.
#include "perf/common/perf_data.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <type_traits>

namespace hetcomm::perf {

// ---- datatypes and ops ----

size_t typeSize(hetcommDataType_t type) {
  switch (type) {
    case hetcommInt8:
    case hetcommUint8:
      return 1;
    case hetcommFloat16:
    case hetcommBfloat16:
      return 2;
    case hetcommInt32:
    case hetcommUint32:
    case hetcommFloat32:
      return 4;
    case hetcommInt64:
    case hetcommUint64:
    case hetcommFloat64:
      return 8;
    default:
      return 0;
  }
}

const char* typeName(hetcommDataType_t type) {
  switch (type) {
    case hetcommInt8:
      return "int8";
    case hetcommUint8:
      return "uint8";
    case hetcommInt32:
      return "int32";
    case hetcommUint32:
      return "uint32";
    case hetcommInt64:
      return "int64";
    case hetcommUint64:
      return "uint64";
    case hetcommFloat16:
      return "half";
    case hetcommFloat32:
      return "float";
    case hetcommFloat64:
      return "double";
    case hetcommBfloat16:
      return "bfloat16";
    default:
      return "?";
  }
}

const char* opName(hetcommRedOp_t op) {
  switch (op) {
    case hetcommSum:
      return "sum";
    case hetcommProd:
      return "prod";
    case hetcommMax:
      return "max";
    case hetcommMin:
      return "min";
    case hetcommAvg:
      return "avg";
    default:
      return "?";
  }
}

// ---- half / bfloat16 ----

uint16_t floatToHalf(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const auto sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return sign | 0x7e00u;   // NaN stays NaN (quiet)
  if (ax >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 rounds to infinity (65504 is the largest half)
  if (ax >= 0x38800000u) {                       // normal half: |f| >= 2^-14
    uint32_t v = ax - 0x38000000u;               // rebias the exponent from 127 to 15
    v += 0x0fffu + ((v >> 13) & 1u);             // round to nearest even on the 13 dropped bits (may carry up)
    return sign | static_cast<uint16_t>(v >> 13);
  }
  // Subnormal half (or zero): units of 2^-24. Scaling by 2^24 is exact; nearbyint rounds to nearest even in the
  // default rounding mode, and 1024 units becomes the smallest normal, 0x0400, by itself.
  const auto units = static_cast<uint32_t>(std::nearbyint(std::fabs(f) * 16777216.0f));
  return sign | static_cast<uint16_t>(units);
}

float halfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));  // inf, NaN
  if (exp == 0) {                                                                   // zero, subnormal
    const float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
}

uint16_t floatToBfloat16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);  // quiet NaN
  x += 0x7fffu + ((x >> 16) & 1u);  // round to nearest even; a carry into the exponent is right (up to inf)
  return static_cast<uint16_t>(x >> 16);
}

float bfloat16ToFloat(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

// ---- generator ----

namespace {

// splitmix64's finaliser: a cheap, well-mixed hash.
inline uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// One hash per element index, shared by all ranks: each rank derives its value from it and its own rank, which
// is what makes the reduction over ranks computable in closed form.
inline uint64_t elementHash(uint64_t seed, size_t index) { return mix64(mix64(seed) + index); }

bool isUnsigned(hetcommDataType_t t) { return t == hetcommUint8 || t == hetcommUint32 || t == hetcommUint64; }

// sum / avg: v(r) = ((r + h) mod 5) - c, plus a bonus d in [0, 7] on one rank (h mod n) so that the total varies
// from element to element; c = 1 for signed and float types (-1..3), 0 for unsigned ones (0..4).
constexpr int kPeriod = 5;
constexpr uint64_t kMaxBonus = 7;
inline int64_t smallOffset(const DataSpec& s) { return isUnsigned(s.type) ? 0 : 1; }
inline int64_t smallValue(uint64_t h, int rank, int64_t c) {
  return static_cast<int64_t>((static_cast<uint64_t>(rank) + h % kPeriod) % kPeriod) - c;
}
inline int bonusRank(const DataSpec& s, uint64_t h) {
  return static_cast<int>((h >> 8) % static_cast<uint64_t>(s.nranks));
}
inline int64_t bonus(uint64_t h) { return static_cast<int64_t>((h >> 40) % (kMaxBonus + 1)); }

// min / max: one rank (h mod n) holds the extreme e, in [-8, 8] (unsigned: [4, 20]); every other rank holds a value
// 1..4 beyond it on the other side. The result then depends on the element and on which rank holds it.
inline int winnerRank(const DataSpec& s, uint64_t h) { return static_cast<int>(h % static_cast<uint64_t>(s.nranks)); }
inline int64_t extremeValue(const DataSpec& s, uint64_t h) {
  return static_cast<int64_t>((h >> 8) % 17) - (isUnsigned(s.type) ? -4 : 8);
}

// prod: exactly k ranks (a window starting at rank (n - a) mod n) hold magnitude 2, the others 1; exactly s ranks
// (another window) are negative, for signed and float types. k <= 6 and s <= 3 keep every partial product exact.
constexpr int kMaxTwos = 6;
constexpr int kMaxNegatives = 3;
struct ProdPattern {
  uint64_t magShift, twos, signShift, negatives;
};
inline ProdPattern prodPattern(const DataSpec& s, uint64_t h) {
  const auto n = static_cast<uint64_t>(s.nranks);
  const uint64_t maxTwos = std::min<uint64_t>(n, kMaxTwos);
  const uint64_t maxNeg = isUnsigned(s.type) ? 0 : std::min<uint64_t>(n, kMaxNegatives);
  return {h % n, (h >> 16) % (maxTwos + 1), (h >> 32) % n, (h >> 48) % (maxNeg + 1)};
}

// Data movement: a hashed value per (rank, index) over a range the type represents exactly.
int64_t movedValue(const DataSpec& s, int rank, size_t index) {
  const uint64_t h = mix64(elementHash(s.seed, index) ^ (0x632be59bd9b4e019ull * (static_cast<uint64_t>(rank) + 1)));
  switch (s.type) {
    case hetcommInt8:
    case hetcommUint8:
      return static_cast<int8_t>(h);
    case hetcommInt32:
    case hetcommUint32:
      return static_cast<int32_t>(h);
    case hetcommInt64:
    case hetcommUint64:
      return static_cast<int64_t>(h);
    case hetcommFloat16:
      return static_cast<int64_t>(h % 4096) - 2048;  // integers |v| <= 2048 are exact
    case hetcommBfloat16:
      return static_cast<int64_t>(h % 512) - 256;  // integers |v| <= 256 are exact
    case hetcommFloat32:
      return static_cast<int64_t>(h % (1ull << 25)) - (1ll << 24);
    case hetcommFloat64:
      return static_cast<int64_t>(h % (1ull << 53)) - (1ll << 52);
    default:
      return 0;
  }
}

}  // namespace

int64_t inputValue(const DataSpec& s, int rank, size_t index) {
  if (!s.reduces) return movedValue(s, rank, index);
  const uint64_t h = elementHash(s.seed, index);
  switch (s.op) {
    case hetcommProd: {
      const ProdPattern p = prodPattern(s, h);
      const auto n = static_cast<uint64_t>(s.nranks);
      const auto r = static_cast<uint64_t>(rank);
      const int64_t mag = (r + p.magShift) % n < p.twos ? 2 : 1;
      return (r + p.signShift) % n < p.negatives ? -mag : mag;
    }
    case hetcommMin:
    case hetcommMax: {
      const int64_t e = extremeValue(s, h);
      if (rank == winnerRank(s, h)) return e;
      const auto gap = static_cast<int64_t>(mix64(h ^ static_cast<uint64_t>(rank)) % 4) + 1;
      return s.op == hetcommMax ? e - gap : e + gap;
    }
    default:
      return smallValue(h, rank, smallOffset(s)) + (rank == bonusRank(s, h) ? bonus(h) : 0);
  }
}

int64_t reducedValue(const DataSpec& s, size_t index) {
  const uint64_t h = elementHash(s.seed, index);
  const int n = s.nranks;
  switch (s.op) {
    case hetcommProd: {
      const ProdPattern p = prodPattern(s, h);
      const int64_t mag = int64_t{1} << p.twos;
      return p.negatives % 2 ? -mag : mag;
    }
    case hetcommMin:
    case hetcommMax:
      return extremeValue(s, h);
    default: {  // sum, avg: whole cycles of 5 ranks add 10 - 5c; ranks 5q .. n-1 add the first n mod 5 values
      const int64_t c = smallOffset(s);
      int64_t total = static_cast<int64_t>(n / kPeriod) * (kPeriod * (kPeriod - 1) / 2 - kPeriod * c) + bonus(h);
      for (int j = 0; j < n % kPeriod; ++j) total += smallValue(h, j, c);
      return total;
    }
  }
}

// ---- typed fill and check ----

namespace {

struct Half {
  uint16_t bits;
};
struct Bf16 {
  uint16_t bits;
};

template <class T>
constexpr bool kIsFloat = std::is_same_v<T, Half> || std::is_same_v<T, Bf16> || std::is_floating_point_v<T>;

template <class T>
T fromInt(int64_t v) {
  if constexpr (std::is_same_v<T, Half>) {
    return Half{floatToHalf(static_cast<float>(v))};
  } else if constexpr (std::is_same_v<T, Bf16>) {
    return Bf16{floatToBfloat16(static_cast<float>(v))};
  } else if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(v);
  } else {
    return static_cast<T>(static_cast<uint64_t>(v));  // two's complement truncation
  }
}

template <class T>
double toDouble(T v) {
  if constexpr (std::is_same_v<T, Half>) {
    return halfToFloat(v.bits);
  } else if constexpr (std::is_same_v<T, Bf16>) {
    return bfloat16ToFloat(v.bits);
  } else {
    return static_cast<double>(v);
  }
}

// Mantissa bits and smallest normal exponent of the float types, for ulp().
template <class T>
struct FloatFormat;
template <>
struct FloatFormat<Half> {
  static constexpr int kMantBits = 10, kMinExp = -14;
};
template <>
struct FloatFormat<Bf16> {
  static constexpr int kMantBits = 7, kMinExp = -126;
};
template <>
struct FloatFormat<float> {
  static constexpr int kMantBits = 23, kMinExp = -126;
};
template <>
struct FloatFormat<double> {
  static constexpr int kMantBits = 52, kMinExp = -1022;
};

template <class T>
double ulp(double x) {
  int e = FloatFormat<T>::kMinExp + 1;
  if (x != 0) std::frexp(x, &e);  // |x| = m 2^e, m in [0.5, 1)
  return std::ldexp(1.0, std::max(e - 1, FloatFormat<T>::kMinExp) - FloatFormat<T>::kMantBits);
}

// avg on a float type: the library divides the exact sum once (half and bfloat16 through float), so 2 ulp would
// do; the 1e-2 relative bound for 16-bit types and the floor (n eps, 1 eps for 16-bit types; far below the 1/n a
// lost contribution costs) also admit implementations that pre-divide, whose error does not shrink near zero.
template <class T>
bool avgClose(double got, double exact, int nranks) {
  constexpr bool kNarrow = FloatFormat<T>::kMantBits < 12;
  const double eps = std::ldexp(1.0, -FloatFormat<T>::kMantBits);
  double tol = 2 * ulp<T>(exact);
  if (kNarrow) tol = std::max(tol, 1e-2 * std::fabs(exact));
  tol = std::max(tol, kNarrow ? eps : eps * nranks);
  return std::fabs(got - exact) <= tol;  // false for NaN
}

template <class T>
void fillT(const DataSpec& s, int rank, T* buf, size_t count) {
  for (size_t i = 0; i < count; ++i) buf[i] = fromInt<T>(inputValue(s, rank, i));
}

template <class T>
int64_t countWrongT(const DataSpec& s, const T* buf, size_t count, SourceFn source, const Layout& layout) {
  int64_t wrong = 0;
  for (size_t k = 0; k < count; ++k) {
    const Source src = source(k, layout);
    if (src.rank != kAllRanks) {  // moved data: the exact input of another rank
      const int64_t want = inputValue(s, src.rank, src.index);
      if constexpr (kIsFloat<T>) {
        wrong += toDouble(buf[k]) != static_cast<double>(want);
      } else {
        wrong += buf[k] != fromInt<T>(want);
      }
      continue;
    }
    const int64_t total = reducedValue(s, src.index);
    if constexpr (kIsFloat<T>) {
      if (s.op == hetcommAvg) {
        wrong += !avgClose<T>(toDouble(buf[k]), static_cast<double>(total) / s.nranks, s.nranks);
      } else {
        wrong += toDouble(buf[k]) != static_cast<double>(total);  // +0 == -0; NaN counts wrong
      }
    } else {
      T want = fromInt<T>(total);  // the wrapped total, whatever the order of the additions
      if (s.op == hetcommAvg) {    // then truncate toward zero, in the type's signedness
        if constexpr (std::is_signed_v<T>) {
          want = static_cast<T>(static_cast<int64_t>(want) / s.nranks);
        } else {
          want = static_cast<T>(static_cast<uint64_t>(want) / static_cast<uint64_t>(s.nranks));
        }
      }
      wrong += buf[k] != want;
    }
  }
  return wrong;
}

template <class F>
decltype(auto) withType(hetcommDataType_t type, F&& f) {
  switch (type) {
    case hetcommInt8:
      return f(static_cast<int8_t*>(nullptr));
    case hetcommUint8:
      return f(static_cast<uint8_t*>(nullptr));
    case hetcommInt32:
      return f(static_cast<int32_t*>(nullptr));
    case hetcommUint32:
      return f(static_cast<uint32_t*>(nullptr));
    case hetcommInt64:
      return f(static_cast<int64_t*>(nullptr));
    case hetcommUint64:
      return f(static_cast<uint64_t*>(nullptr));
    case hetcommFloat16:
      return f(static_cast<Half*>(nullptr));
    case hetcommFloat32:
      return f(static_cast<float*>(nullptr));
    case hetcommFloat64:
      return f(static_cast<double*>(nullptr));
    case hetcommBfloat16:
      return f(static_cast<Bf16*>(nullptr));
    default:
      return f(static_cast<uint8_t*>(nullptr));  // unreachable: callers pass a valid type
  }
}

}  // namespace

void fillInput(const DataSpec& spec, int rank, void* buf, size_t count) {
  withType(spec.type, [&]<class T>(T*) { fillT(spec, rank, static_cast<T*>(buf), count); });
}

void fillGarbage(hetcommDataType_t type, void* buf, size_t count) { std::memset(buf, 0xA5, count * typeSize(type)); }

int64_t countWrong(const DataSpec& spec, const void* buf, size_t count, SourceFn source, const Layout& layout) {
  return withType(spec.type,
                  [&]<class T>(T*) { return countWrongT(spec, static_cast<const T*>(buf), count, source, layout); });
}

}  // namespace hetcomm::perf
