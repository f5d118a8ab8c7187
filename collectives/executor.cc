#include "collectives/executor.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "common/log.h"
#include "kernels/reduce.h"

namespace hetcomm::coll {

using transport::Request;

Executor::Executor(std::shared_ptr<const Schedule> schedule, std::vector<std::byte*> buffers,
                   std::vector<transport::Connection*> conns, uint64_t opSeq) {
  reset(std::move(schedule), buffers, conns, opSeq);
}

void Executor::reset(std::shared_ptr<const Schedule> schedule, std::span<std::byte* const> buffers,
                     const std::vector<transport::Connection*>& conns, uint64_t opSeq) {
  sched_ = std::move(schedule);
  buffers_.assign(buffers.begin(), buffers.end());
  conns_ = conns;
  opSeq_ = opSeq;
  started_ = false;
  check_.verify = nullptr;
  check_.pending = false;
  inflight_.clear();
  ready_.clear();
  const auto& steps = sched_->steps;
  const size_t n = steps.size();
  depsLeft_.resize(n);
  dependentsStart_.assign(n + 1, 0);
  for (size_t i = 0; i < n; ++i) {
    depsLeft_[i] = steps[i].ndeps;
    for (int d = 0; d < steps[i].ndeps; ++d) ++dependentsStart_[steps[i].deps[d] + 1];
  }
  for (size_t i = 0; i < n; ++i) dependentsStart_[i + 1] += dependentsStart_[i];
  dependents_.resize(dependentsStart_[n]);
  fill_.assign(dependentsStart_.begin(), dependentsStart_.end() - 1);
  for (size_t i = 0; i < n; ++i)
    for (int d = 0; d < steps[i].ndeps; ++d) dependents_[fill_[steps[i].deps[d]]++] = static_cast<uint32_t>(i);
  reqs_.assign(n, transport::Request{});
  remaining_ = n;
  // Reverse order so the stack issues steps in schedule order.
  for (size_t i = n; i-- > 0;)
    if (depsLeft_[i] == 0) ready_.push_back(static_cast<uint32_t>(i));
}

void Executor::addConsistencyCheck(int sendTo, int recvFrom, std::span<const std::byte> descriptor,
                                   std::function<Status(std::span<const std::byte>)> verify) {
  check_.sendTo = sendTo;
  check_.recvFrom = recvFrom;
  check_.theirs.resize(descriptor.size());
  check_.mine.assign(descriptor.begin(), descriptor.end());
  check_.verify = std::move(verify);
  check_.sendReq = transport::Request{};
  check_.recvReq = transport::Request{};
}

uint64_t Executor::wireTag(uint32_t tag) const {
  if (sched_->p2pTags) return p2pWireTag(tag);
  return (opSeq_ << 32) | tag;
}

Status Executor::issue(uint32_t i) {
  const Step& s = sched_->steps[i];
  switch (s.op) {
    case Step::Op::kSend:
    case Step::Op::kRecv: {
      transport::Connection* c = conns_[s.peer];
      if (!c) return internalError("no connection to rank %d", s.peer);
      Status st = s.op == Step::Op::kRecv ? c->irecv(reqs_[i], {at(s.dst), s.dst.bytes}, wireTag(s.tag))
                  : s.path >= 0           ? c->isendOn(reqs_[i], {at(s.src), s.src.bytes}, wireTag(s.tag), s.path)
                                          : c->isend(reqs_[i], {at(s.src), s.src.bytes}, wireTag(s.tag));
      HC_TRY(st);
      inflight_.push_back(i);
      return okStatus();
    }
    case Step::Op::kReduce: {
      size_t count = s.dst.bytes / kernels::sizeOf(sched_->dtype);
      if (count) kernels::reduce(at(s.dst), at(s.src), at(s.src2), count, sched_->dtype, sched_->op);
      break;
    }
    case Step::Op::kCopy:
      if (s.dst.bytes && at(s.dst) != at(s.src)) std::memcpy(at(s.dst), at(s.src), s.dst.bytes);
      break;
    case Step::Op::kDivide: {
      size_t count = s.dst.bytes / kernels::sizeOf(sched_->dtype);
      if (count) kernels::divideBy(at(s.dst), count, sched_->dtype, sched_->nranks);
      break;
    }
  }
  complete(i);
  return okStatus();
}

void Executor::complete(uint32_t i) {
  --remaining_;
  for (uint32_t k = dependentsStart_[i]; k < dependentsStart_[i + 1]; ++k) {
    uint32_t d = dependents_[k];
    if (--depsLeft_[d] == 0) ready_.push_back(d);
  }
}

Result<bool> Executor::advance(bool* moved) {
  if (!started_) {
    started_ = true;
    if (check_.verify) {
      // Posted first, so on each connection the descriptor goes out ahead of the data.
      HC_TRY(conns_[check_.recvFrom]->irecv(check_.recvReq, check_.theirs, wireTag(kCheckTag)));
      HC_TRY(conns_[check_.sendTo]->isend(check_.sendReq, check_.mine, wireTag(kCheckTag)));
      check_.pending = true;
    }
  }
  bool progressed = true;
  while (progressed) {
    progressed = false;
    if (check_.pending) {
      for (Request* r : {&check_.recvReq, &check_.sendReq})
        if (r->failed()) return r->error;
      if (check_.recvReq.done() && check_.sendReq.done()) {
        check_.pending = false;
        if (moved) *moved = true;
        HC_TRY(check_.verify(check_.theirs));
      }
    }
    while (!ready_.empty()) {
      // Receives first: a receive posted before the send that provokes the peer's reply avoids an early arrival
      // (an extra copy on eager transports), and tells a transport that traffic flows both ways.
      auto recv = std::find_if(ready_.rbegin(), ready_.rend(),
                               [&](uint32_t i) { return sched_->steps[i].op == Step::Op::kRecv; });
      uint32_t i;
      if (recv != ready_.rend()) {
        i = *recv;
        ready_.erase(std::next(recv).base());
      } else {
        i = ready_.back();
        ready_.pop_back();
      }
      HC_TRY(issue(i));
      progressed = true;
      if (moved) *moved = true;
    }
    for (size_t j = 0; j < inflight_.size();) {
      Request& r = reqs_[inflight_[j]];
      if (r.done()) {
        uint32_t i = inflight_[j];
        inflight_[j] = inflight_.back();
        inflight_.pop_back();
        complete(i);
        progressed = true;
        if (moved) *moved = true;
      } else if (r.failed()) {
        return r.error;
      } else {
        ++j;
      }
    }
  }
  return remaining_ == 0 && !check_.pending;
}

}  // namespace hetcomm::coll

namespace hetcomm::coll {

std::string Executor::waitingOn() const {
  std::vector<int> recvFrom, sendTo;
  auto note = [](std::vector<int>& v, int p) {
    if (std::find(v.begin(), v.end(), p) == v.end()) v.push_back(p);
  };
  for (uint32_t i : inflight_) {
    const Step& s = sched_->steps[i];
    note(s.op == Step::Op::kRecv ? recvFrom : sendTo, s.peer);
  }
  if (check_.pending) {
    if (!check_.recvReq.finished()) note(recvFrom, check_.recvFrom);
    if (!check_.sendReq.finished()) note(sendTo, check_.sendTo);
  }
  auto list = [](const std::vector<int>& v) {
    std::string out;
    for (int p : v) out += (out.empty() ? "" : ", ") + std::to_string(p);
    return out;
  };
  std::string out;
  if (!recvFrom.empty()) out += "data from rank(s) " + list(recvFrom);
  if (!sendTo.empty()) out += std::string(out.empty() ? "" : "; ") + "sending to rank(s) " + list(sendTo);
  return out.empty() ? "nothing (local work)" : out;
}

}  // namespace hetcomm::coll
