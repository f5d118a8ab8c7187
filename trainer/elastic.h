// elastic.h: hetcomm-train --elastic, the part every layer of the trainer sees. When a run gives up (a peer was
// lost, or any other error), die() revokes every communicator the run made (so no rank, here or on a peer, keeps
// waiting on them) and throws RankLost instead of exiting; hetcomm_train.cc catches it, shrinks the world to the
// ranks that are left, and starts the run again from the newest checkpoint.
#pragma once

#include <hetcomm/hetcomm.h>

#include <string>

namespace hetcomm::trainer {

struct RankLost {
  std::string message;  // the error this rank gave up on
};

void setElastic(bool on);
bool elastic();

// The communicators of the run: the world and its splits. Forget one before destroying it.
void trackComm(hetcommComm_t comm);
void forgetComm(hetcommComm_t comm);
// hetcommCommRevoke on every tracked communicator.
void revokeTracked();

}  // namespace hetcomm::trainer
