#include "collectives/schedule.h"

#include <vector>

#include "common/log.h"
#include "common/strings.h"

namespace hetcomm::coll {

void Step::dependOn(uint32_t step) {
  for (int i = 0; i < ndeps; ++i)
    if (deps[i] == step) return;
  HC_CHECK(ndeps < kMaxDeps);
  deps[ndeps++] = step;
}

uint32_t Schedule::send(int peer, uint32_t tag, Slice src) {
  Step s{Step::Op::kSend};
  s.peer = peer;
  s.tag = tag;
  s.src = src;
  return add(s);
}

uint32_t Schedule::recv(int peer, uint32_t tag, Slice dst) {
  Step s{Step::Op::kRecv};
  s.peer = peer;
  s.tag = tag;
  s.dst = dst;
  return add(s);
}

uint32_t Schedule::reduce(Slice dst, Slice a, Slice b) {
  Step s{Step::Op::kReduce};
  s.dst = dst;
  s.src = a;
  s.src2 = b;
  return add(s);
}

uint32_t Schedule::copy(Slice dst, Slice src) {
  Step s{Step::Op::kCopy};
  s.dst = dst;
  s.src = src;
  return add(s);
}

uint32_t Schedule::divide(Slice dst) {
  Step s{Step::Op::kDivide};
  s.dst = dst;
  return add(s);
}

// Kahn's algorithm: a step is released once every step it depends on is; whatever is never released waits on a
// cycle (or on a step that does not exist), and the executor would hang on it.
std::string Schedule::dependencyCycle() const {
  const size_t n = steps.size();
  std::vector<uint32_t> left(n), order;
  std::vector<std::vector<uint32_t>> dependents(n);
  for (size_t i = 0; i < n; ++i) {
    left[i] = steps[i].ndeps;
    for (int d = 0; d < steps[i].ndeps; ++d) {
      const uint32_t on = steps[i].deps[d];
      if (on >= n) return format("step %zu depends on step %u, which does not exist", i, on);
      if (on == i) return format("step %zu depends on itself", i);
      dependents[on].push_back(static_cast<uint32_t>(i));
    }
    if (left[i] == 0) order.push_back(static_cast<uint32_t>(i));
  }
  for (size_t k = 0; k < order.size(); ++k)
    for (uint32_t d : dependents[order[k]])
      if (--left[d] == 0) order.push_back(d);
  if (order.size() == n) return {};
  size_t stuck = 0;
  while (left[stuck] == 0) ++stuck;
  return format("step %zu is in a dependency cycle (or waits on one): %zu of %zu steps can never run", stuck,
                n - order.size(), n);
}

std::string Schedule::validate(size_t sendBytes, size_t recvBytes) const {
  auto fits = [&](const Slice& sl) {
    if (sl.buf >= Buf::kExtra0) return true;  // sized by the caller
    size_t cap = sl.buf == Buf::kSend ? sendBytes : sl.buf == Buf::kRecv ? recvBytes : scratchBytes;
    return sl.offset <= cap && sl.bytes <= cap - sl.offset;
  };
  if (std::string cycle = dependencyCycle(); !cycle.empty()) return cycle;
  for (size_t i = 0; i < steps.size(); ++i) {
    const Step& s = steps[i];
    switch (s.op) {
      case Step::Op::kSend:
        if (!fits(s.src)) return format("step %zu: send slice out of bounds", i);
        break;
      case Step::Op::kRecv:
        if (!fits(s.dst)) return format("step %zu: recv slice out of bounds", i);
        if (s.dst.buf == Buf::kSend) return format("step %zu: recv into the send buffer", i);
        break;
      case Step::Op::kReduce:
        if (!fits(s.src) || !fits(s.src2) || !fits(s.dst)) return format("step %zu: reduce slice out of bounds", i);
        if (s.src.bytes != s.dst.bytes || s.src2.bytes != s.dst.bytes)
          return format("step %zu: reduce sizes differ", i);
        break;
      case Step::Op::kCopy:
        if (!fits(s.src) || !fits(s.dst) || s.src.bytes != s.dst.bytes) return format("step %zu: bad copy", i);
        break;
      case Step::Op::kDivide:
        if (!fits(s.dst)) return format("step %zu: divide slice out of bounds", i);
        break;
    }
    if ((s.op == Step::Op::kSend || s.op == Step::Op::kRecv) && s.peer < 0) return format("step %zu: no peer", i);
  }
  return {};
}

}  // namespace hetcomm::coll
