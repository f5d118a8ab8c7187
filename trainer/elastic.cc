#include "trainer/elastic.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <vector>

namespace hetcomm::trainer {

namespace {

std::atomic<bool> gElastic{false};
std::mutex gMu;
std::vector<hetcommComm_t>& tracked() {
  static std::vector<hetcommComm_t> comms;
  return comms;
}

}  // namespace

void setElastic(bool on) { gElastic = on; }
bool elastic() { return gElastic; }

void trackComm(hetcommComm_t comm) {
  std::lock_guard<std::mutex> lock(gMu);
  if (comm) tracked().push_back(comm);
}

void forgetComm(hetcommComm_t comm) {
  std::lock_guard<std::mutex> lock(gMu);
  auto& v = tracked();
  v.erase(std::remove(v.begin(), v.end(), comm), v.end());
}

void revokeTracked() {
  std::lock_guard<std::mutex> lock(gMu);
  for (hetcommComm_t c : tracked()) hetcommCommRevoke(c, 0);
}

}  // namespace hetcomm::trainer
