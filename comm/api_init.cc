// api_init.cc: communicator creation through the C API: options from a config, unique ids (and the store server
// behind them), init by rank, from a launcher's environment, or all ranks in one process.
#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>
#include <unordered_set>

#include "comm/api_internal.h"
#include "comm/bootstrap/store.h"
#include "comm/launch_env.h"
#include "comm/unique_id.h"
#include "transports/tcp/tcp_transport.h"

namespace hetcomm::comm::api {

namespace {
Result<bool> blockingFrom(const hetcommConfig_t* config) {
  if (!config || config->blocking == HETCOMM_CONFIG_UNDEF_INT) return true;
  if (config->blocking != 0 && config->blocking != 1)
    return invalidArgument("config blocking must be 0 or 1, not %d", config->blocking);
  return config->blocking == 1;
}

// The addresses other hosts reach this one's store at: HETCOMM_MASTER_ADDR, else the selected interfaces'. Under
// a launcher that serves the store itself (HETCOMM_STORE=external), HETCOMM_MASTER_ADDR is the launcher's, not this
// process's: a unique id made there (a torch process group's, say) names the interface.
Result<std::string> localStoreAddress() {
  if (param::env("HETCOMM_STORE").value_or("") != "external")
    if (auto a = param::env("HETCOMM_MASTER_ADDR")) return *a;
  HC_ASSIGN_OR_RETURN(auto ifaces, transport::tcp::selectInterfaces(param::env("HETCOMM_SOCKET_IFNAME").value_or("")));
  // Every interface's address, as many as the id holds: hosts that share no fabric with this one reach it over
  // the one they do share (StoreClient::connect tries them in turn). Loopback only when nothing else is up: on
  // another host it would name that host.
  std::string list;
  for (const auto& i : ifaces) {
    if (i.loopback) continue;
    if (list.size() + 1 + i.addr.size() > kMaxStoreAddressChars) break;
    list += (list.empty() ? "" : ",") + i.addr;
  }
  return list.empty() ? ifaces[0].addr : list;
}

std::mutex gServersMu;
std::vector<std::unique_ptr<StoreServer>>* gServers = new std::vector<std::unique_ptr<StoreServer>>();  // kept

std::unordered_set<uint16_t>* gServedPorts = new std::unordered_set<uint16_t>();  // kept

Status keepServer(std::unique_ptr<StoreServer> s) {
  std::lock_guard<std::mutex> lock(gServersMu);
  gServedPorts->insert(s->port());
  gServers->push_back(std::move(s));
  return okStatus();
}

bool servesStore(uint16_t port) {
  std::lock_guard<std::mutex> lock(gServersMu);
  return gServedPorts->count(port) > 0;
}

std::atomic<uint64_t> gEnvInits{0};

}  // namespace

Result<CommOptions> optionsFrom(const hetcommConfig_t* config) {
  CommOptions o;
  o.timeoutSec = static_cast<double>(timeoutParam());
  if (o.timeoutSec <= 0)
    return invalidArgument("HETCOMM_TIMEOUT=%g must be a positive number of seconds", o.timeoutSec);
  if (!config) return o;
  if (config->magic != HETCOMM_CONFIG_MAGIC || config->size != sizeof(hetcommConfig_t))
    return invalidArgument("config was not initialised with HETCOMM_CONFIG_INITIALIZER");
  if (config->timeoutSec != HETCOMM_CONFIG_UNDEF_INT) {
    if (config->timeoutSec <= 0) return invalidArgument("config timeoutSec %d must be positive", config->timeoutSec);
    o.timeoutSec = config->timeoutSec;
  }
  if (config->commName) o.name = config->commName;
  return o;
}

Result<CommOptions> childOptions(const Communicator& parent, const hetcommConfig_t* config) {
  if (!config) return parent.options();
  return optionsFrom(config);
}

hetcommComm_t publishComm(std::unique_ptr<Communicator> comm) {
  Communicator* raw = comm.release();
  registerComm(raw);
  return reinterpret_cast<hetcommComm_t>(raw);
}

Status initRank(hetcommComm_t* out, int nranks, const UniqueIdContent& id, uint64_t commId, int rank,
                const hetcommConfig_t* config) {
  if (!out) return invalidArgument("comm (the output pointer) is NULL");
  if (nranks < 1) return invalidArgument("nranks %d must be at least 1", nranks);
  HC_TRY(checkRank(rank, nranks, "rank"));
  HC_ASSIGN_OR_RETURN(CommOptions options, optionsFrom(config));
  HC_ASSIGN_OR_RETURN(bool blocking, blockingFrom(config));
  auto c = std::make_unique<Communicator>(rank, nranks, options);
  c->setHostsStore(servesStore(id.port));
  if (!blocking) {
    Communicator* raw = c.get();
    *out = publishComm(std::move(c));
    raw->initThread = std::thread([raw, id, commId] {
      Status st = raw->init(id, commId);
      raw->initError = st;
      raw->setState(st.ok() ? Communicator::kReady : Communicator::kInitFailed);
    });
    return Status(Code::kInProgress, "initializing");
  }
  Status st = c->init(id, commId);
  if (!st.ok()) {
    (void)c->destroy();  // the init's error is the one to report
    return st;
  }
  *out = publishComm(std::move(c));
  return okStatus();
}

Status getUniqueId(hetcommUniqueId* id) {
  if (!id) return invalidArgument("uniqueId is NULL");
  UniqueIdContent c;
  HC_TRY(crypto::randomBytes(c.secret));
  HC_TRY(crypto::randomBytes({reinterpret_cast<uint8_t*>(&c.commId), sizeof(c.commId)}));
  HC_ASSIGN_OR_RETURN(c.addr, localStoreAddress());
  HC_ASSIGN_OR_RETURN(auto server, StoreServer::start("", 0, c.secret));
  c.port = server->port();
  HC_TRY(keepServer(std::move(server)));
  return encodeUniqueId(c, id);
}

Status initFromEnv(hetcommComm_t* out) {
  if (!out) return invalidArgument("comm (the output pointer) is NULL");
  HC_ASSIGN_OR_RETURN(LaunchEnv e, readLaunchEnv());
  log::ScopedRank scope(e.rank);
  HC_INFO(Init, "launched by %s: rank %d of %d, store at %s:%u%s", e.launcher.c_str(), e.rank, e.nranks,
          e.masterAddr.c_str(), e.masterPort,
          e.secretDerived ? " (secret derived from the job identity; set HETCOMM_SECRET for a real one)" : "");
  UniqueIdContent id{e.masterAddr, e.masterPort, e.secret, 0};
  if (!e.externalStore && e.rank == 0) {
    // Port 0: a lone rank's store, on loopback only.
    auto server = StoreServer::start(e.masterPort == 0 ? "127.0.0.1" : "", e.masterPort, e.secret);
    if (!server) return server.error();
    id.port = (*server)->port();
    HC_TRY(keepServer(std::move(*server)));
  }
  // Every rank derives the same id for its n-th communicator made from the environment.
  uint64_t n = ++gEnvInits;
  crypto::Mac m = crypto::prove(e.secret, crypto::Nonce{}, "env-comm", n);
  uint64_t commId;
  std::memcpy(&commId, m.data(), sizeof(commId));
  return initRank(out, e.nranks, id, commId, e.rank, nullptr);
}

Status initAll(hetcommComm_t* comms, int ndev) {
  if (!comms) return invalidArgument("comms is NULL");
  if (ndev < 1) return invalidArgument("ndev %d must be at least 1", ndev);
  hetcommUniqueId uid;
  HC_TRY(getUniqueId(&uid));
  HC_ASSIGN_OR_RETURN(UniqueIdContent id, decodeUniqueId(uid));
  std::vector<Status> results(ndev);
  std::vector<std::thread> threads;
  for (int r = 0; r < ndev; ++r)
    threads.emplace_back([&, r] { results[r] = initRank(&comms[r], ndev, id, id.commId, r, nullptr); });
  for (auto& t : threads) t.join();
  for (int r = 0; r < ndev; ++r) {
    if (results[r].ok()) continue;
    for (int k = 0; k < ndev; ++k)
      if (results[k].ok()) {
        auto* c = reinterpret_cast<Communicator*>(comms[k]);
        unregisterComm(c);
        (void)c->destroy();  // results[r] is the error to report
        delete c;
        comms[k] = nullptr;
      }
    return results[r];
  }
  return okStatus();
}

}  // namespace hetcomm::comm::api
