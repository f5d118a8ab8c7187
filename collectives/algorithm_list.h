// algorithm_list.h: the algorithms algorithms.cc puts in its table, one file each.
#pragma once

#include "collectives/algorithm.h"

namespace hetcomm::coll {

const Algorithm& ringAllReduce();
const Algorithm& hierAllReduce();
const Algorithm& recursiveDoublingAllReduce();
const Algorithm& hostSlotsAllReduce();
const Algorithm& ringReduceScatter();
const Algorithm& hierReduceScatter();
const Algorithm& ringAllGather();
const Algorithm& hierAllGather();
const Algorithm& chainBroadcast();
const Algorithm& hierBroadcast();
const Algorithm& chainReduce();
const Algorithm& hierReduce();
const Algorithm& synthAllReduce();
const Algorithm& synthReduceScatter();
const Algorithm& synthAllGather();
const Algorithm& synthBroadcast();
const Algorithm& synthReduce();
const Algorithm& pairwiseAlltoAll();
const Algorithm& directSendRecv();

// Shared by the planners: a copy step unless source and destination are the same bytes of the same buffer.
inline void copyUnlessSame(Schedule& s, Slice dst, Slice src, bool inPlace, std::vector<uint32_t>* out = nullptr) {
  bool same = inPlace && dst.offset == src.offset &&
              ((dst.buf == Buf::kRecv && src.buf == Buf::kSend) || (dst.buf == Buf::kSend && src.buf == Buf::kRecv));
  if (same || dst.bytes == 0) return;
  uint32_t id = s.copy(dst, src);
  if (out) out->push_back(id);
}

}  // namespace hetcomm::coll
