// hetcomm-run: starts N ranks of a program on this host, like torchrun or mpirun.
//
//   hetcomm-run -np 4 [-x NAME[=VALUE]]... [--no-prefix] [--grace SEC] [--bind-to none|core] [--] program [args...]
//   hetcomm-run --cluster clusters/mixed-4x2.json [--ranks-per-host K] [...] program [args...]
//
// With --cluster, the ranks run on an emulated cluster (scripts/emulate-cluster.sh up): hosts take their ranks in
// file order, each as many as the cluster file gives it (its "ranks", else "ranksPerHost"; --ranks-per-host K
// for every host), each rank inside its host's network namespace, with HETCOMM_HOSTID and HETCOMM_TOPO_FILE
// saying where it is.
//
// The launcher hosts the job's rendezvous store itself and tells each rank where it is through HETCOMM_* variables
// (HETCOMM_STORE=external), so no rank has to be special. It merges the ranks' output as "[rank] " lines, forwards
// SIGINT, SIGTERM and SIGHUP to them, and stops the whole job as soon as one rank fails: a distributed job with a
// dead rank can only hang. This file decides what to run; comm/launcher/process_group.cc runs it.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "comm/bootstrap/store.h"
#include "comm/cpu_sharing.h"
#include "comm/launcher/emulated_cluster.h"
#include "comm/launcher/process_group.h"
#include "common/crypto.h"
#include "common/strings.h"
#include "topology/hwloc_discovery.h"

extern char** environ;

namespace hetcomm::comm {
namespace {

// Exit status for a command line the launcher does not understand, as most Unix tools.
constexpr int kUsageExit = 2;

// Set per rank by the launcher; the bootstrap's env launch reads them. -x may not override them: a rank with the
// wrong identity would hang the rendezvous instead of failing.
// torchrun's names are set too (rank 0's host and a port of their own), so torch.distributed's env:// rendezvous
// works under hetcomm-run; hetcomm itself reads its own names first.
constexpr const char* kOwnedVariables[] = {
    "HETCOMM_RANK",
    "HETCOMM_WORLD_SIZE",
    "HETCOMM_LOCAL_RANK",
    "HETCOMM_LOCAL_WORLD_SIZE",
    "HETCOMM_MASTER_ADDR",
    "HETCOMM_MASTER_PORT",
    "HETCOMM_SECRET",
    "HETCOMM_STORE",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
};

struct LaunchOptions {
  int nranks = 0;
  std::string cluster;               // --cluster: a cluster file whose emulation is up
  int ranksPerHost = 0;              // --ranks-per-host (0: the cluster file's)
  std::vector<std::string> exports;  // -x arguments as given
  bool noPrefix = false;
  double graceSec = 3;
  bool elastic = false;
  std::string bindTo = "none";  // --bind-to: none or core
  bool reportBindings = false;
  std::vector<std::string> program;  // the program and its arguments
};

bool isOwned(std::string_view name) {
  for (const char* owned : kOwnedVariables) {
    if (name == owned) return true;
  }
  return false;
}

bool isValidName(std::string_view name) {
  if (name.empty() || (name[0] >= '0' && name[0] <= '9')) return false;
  for (char c : name) {
    if (!(c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'))) return false;
  }
  return true;
}

constexpr const char* kUsage = "hetcomm-run -np N [options] [--] program [args...]";

// CLI11's usage line would read "hetcomm-run [OPTIONS]": it never sees the program, which parseCommandLine splits
// off first.
class UsageFormatter : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App*, std::string) const override { return std::string("Usage: ") + kUsage + "\n"; }
};

// Returns an exit status to stop with, or -1 to go on.
int parseCommandLine(int argc, char** argv, LaunchOptions& opts) {
  CLI::App app(
      "Starts N ranks of program on this host with the HETCOMM_* environment a communicator bootstraps from, and\n"
      "hosts their rendezvous store.\n",
      "hetcomm-run");
  app.formatter(std::make_shared<UsageFormatter>());
  app.add_option("-n,--np,--nproc-per-node", opts.nranks,
                 "Number of ranks to start (also -np); with --cluster, hosts x ranks per host when omitted")
      ->check(CLI::Range(1, 65536));
  app.add_option("--cluster", opts.cluster,
                 "Run on an emulated cluster (scripts/emulate-cluster.sh up FILE): each rank in its host's network "
                 "namespace");
  app.add_option("--ranks-per-host", opts.ranksPerHost,
                 "With --cluster: ranks on every host (default: each host's own count in the file)")
      ->check(CLI::Range(1, 4096));
  app.add_option("-x", opts.exports, "Export NAME=VALUE, or NAME from this environment, to every rank (repeatable)")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_flag("--no-prefix", opts.noPrefix, "Pass the ranks' output lines through without the \"[rank] \" prefix");
  app.add_option("--grace", opts.graceSec, "Seconds between SIGTERM and SIGKILL when stopping ranks")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 86400.0));
  app.add_flag("--elastic", opts.elastic,
               "A rank that fails does not stop the others (they go on with hetcommCommShrink, as hetcomm-train "
               "--elastic does); exit 0 when any rank exits 0");
  app.add_option("--bind-to", opts.bindTo,
                 "none: ranks run wherever the kernel puts them (torchrun's way); core: rank i runs on core i of the "
                 "cores this launcher may use, round robin when ranks outnumber cores (mpirun's --bind-to core)")
      ->capture_default_str()
      ->check(CLI::IsMember({"none", "core"}));
  app.add_flag("--report-bindings", opts.reportBindings, "Say which CPUs each rank is bound to");
  app.footer(
      "Each rank gets HETCOMM_RANK, HETCOMM_WORLD_SIZE, HETCOMM_LOCAL_RANK, HETCOMM_LOCAL_WORLD_SIZE,\n"
      "HETCOMM_MASTER_ADDR, HETCOMM_MASTER_PORT, HETCOMM_SECRET and HETCOMM_STORE=external, and torchrun's\n"
      "RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR (rank 0's host) and MASTER_PORT.\n"
      "When a rank fails the others are stopped (unless --elastic) and hetcomm-run exits with its code (128 + signal\n"
      "if killed).");

  // The launcher's options end where the program starts: at "--" or at the first word that is neither an option
  // nor an option's value. CLI11 sees only what comes before, so the program's own "-n" or "--help" stay its own.
  // CLI11 also has no single-dash long names, so mpirun's "-np" becomes "--np" here.
  std::vector<std::string> ours;
  int i = 1;
  for (; i < argc; ++i) {
    std::string word = argv[i];
    if (word == "--") {
      ++i;
      break;
    }
    if (word.size() < 2 || word[0] != '-') break;
    if (word == "-np") word = "--np";
    bool valueAttached = word.find('=') != std::string::npos || (word[1] != '-' && word.size() > 2);
    const CLI::Option* option = app.get_option_no_throw(word);
    ours.push_back(std::move(word));
    if (!valueAttached && option != nullptr && option->get_expected_min() > 0 && i + 1 < argc) {
      ours.push_back(argv[++i]);
    }
  }
  opts.program.assign(argv + i, argv + argc);

  std::reverse(ours.begin(), ours.end());  // CLI11 consumes the vector from its back
  try {
    app.parse(ours);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "hetcomm-run: %s\nRun 'hetcomm-run --help' for usage.\n", e.what());
    return kUsageExit;
  }
  if (opts.nranks == 0 && opts.cluster.empty()) {
    std::fprintf(stderr, "hetcomm-run: -np is required (or --cluster)\nUsage: %s\n", kUsage);
    return kUsageExit;
  }
  if (opts.ranksPerHost && opts.cluster.empty()) {
    std::fprintf(stderr, "hetcomm-run: --ranks-per-host needs --cluster\n");
    return kUsageExit;
  }
  if (opts.program.empty()) {
    std::fprintf(stderr, "hetcomm-run: no program given\nUsage: %s\n", kUsage);
    return kUsageExit;
  }
  return -1;
}

// The environment every rank shares: the launcher's own, with -x applied and the launcher's variables left out
// (each rank gets its own values in rankEnvironment). Returns false after saying what is wrong with an -x.
bool sharedEnvironment(const std::vector<std::string>& exports, std::vector<std::string>& env) {
  std::vector<std::string> assignments;
  for (const std::string& x : exports) {
    size_t eq = x.find('=');
    std::string name = x.substr(0, eq);
    if (!isValidName(name)) {
      std::fprintf(stderr, "hetcomm-run: -x '%s': expected NAME=VALUE or NAME\n", x.c_str());
      return false;
    }
    if (isOwned(name)) {
      std::fprintf(stderr, "hetcomm-run: -x %s: hetcomm-run sets it for each rank\n", name.c_str());
      return false;
    }
    if (eq != std::string::npos) {
      assignments.push_back(x);
    } else if (const char* value = getenv(name.c_str())) {
      assignments.push_back(name + "=" + value);
    } else {
      std::fprintf(stderr, "hetcomm-run: warning: -x %s: not set in this environment; not exported\n", name.c_str());
    }
  }
  auto overridden = [&](std::string_view name) {
    if (isOwned(name)) return true;
    for (const std::string& a : assignments) {
      if (std::string_view(a).substr(0, a.find('=')) == name) return true;
    }
    return false;
  };
  for (char** e = environ; *e != nullptr; ++e) {
    std::string_view kv(*e);
    if (!overridden(kv.substr(0, kv.find('=')))) env.emplace_back(kv);
  }
  // A later -x of the same name wins, as with a shell's export.
  for (size_t a = 0; a < assignments.size(); ++a) {
    std::string_view name = std::string_view(assignments[a]).substr(0, assignments[a].find('='));
    bool later = false;
    for (size_t b = a + 1; b < assignments.size() && !later; ++b) {
      later = std::string_view(assignments[b]).substr(0, assignments[b].find('=')) == name;
    }
    if (!later) env.push_back(assignments[a]);
  }
  return true;
}

// Where a rank runs: on this host (every rank local), or on a host of an emulated cluster.
struct Placement {
  int localRank = 0, localSize = 1;
  std::string storeAddr = "127.0.0.1";
  std::string hostId, topoFile;  // emulated only
};

// What torch.distributed's env:// rendezvous needs: rank 0's host and a port for the store its rank 0 serves.
struct TorchRendezvous {
  std::string masterAddr;
  uint16_t masterPort = 0;
};

std::vector<std::string> rankEnvironment(const std::vector<std::string>& shared, int rank, int nranks,
                                         const Placement& at, uint16_t storePort, const std::string& secretHex,
                                         const TorchRendezvous& torch) {
  std::vector<std::string> env = shared;
  env.push_back(format("HETCOMM_RANK=%d", rank));
  env.push_back(format("HETCOMM_WORLD_SIZE=%d", nranks));
  env.push_back(format("HETCOMM_LOCAL_RANK=%d", at.localRank));
  env.push_back(format("HETCOMM_LOCAL_WORLD_SIZE=%d", at.localSize));
  env.push_back("HETCOMM_MASTER_ADDR=" + at.storeAddr);
  if (!at.hostId.empty()) {
    env.push_back("HETCOMM_HOSTID=" + at.hostId);
    env.push_back("HETCOMM_TOPO_FILE=" + at.topoFile);
  }
  env.push_back(format("HETCOMM_MASTER_PORT=%u", static_cast<unsigned>(storePort)));
  env.push_back("HETCOMM_SECRET=" + secretHex);
  env.push_back("HETCOMM_STORE=external");
  env.push_back(format("RANK=%d", rank));
  env.push_back(format("WORLD_SIZE=%d", nranks));
  env.push_back(format("LOCAL_RANK=%d", at.localRank));
  env.push_back(format("LOCAL_WORLD_SIZE=%d", at.localSize));
  env.push_back("MASTER_ADDR=" + torch.masterAddr);
  env.push_back(format("MASTER_PORT=%u", static_cast<unsigned>(torch.masterPort)));
  return env;
}

// Rank 0's host as every host of the job reaches it: its address on the first of its fabrics that every host
// with ranks shares (hosts on separate fabrics reach each other on that one only); with no such fabric, its first
// address (torch's rendezvous then needs routing between the fabrics).
std::string rendezvousAddress(const EmulatedCluster& c, const std::vector<int>& hostOfRank, int nranks) {
  const EmulatedHost& first = c.hosts[hostOfRank[0]];
  for (const EmulatedHost::Nic& n : first.nics) {
    bool everywhere = true;
    for (int r = 0; r < nranks && everywhere; ++r) {
      const auto& nics = c.hosts[hostOfRank[r]].nics;
      everywhere =
          std::any_of(nics.begin(), nics.end(), [&](const EmulatedHost::Nic& m) { return m.fabric == n.fabric; });
    }
    if (everywhere) return n.addr;
  }
  return first.nics.front().addr;
}

// A TCP port nothing on this host listens on now, for rank 0's torch store (as torchrun --standalone picks one).
// An emulated host is a fresh network namespace: a port free here is free there.
Result<uint16_t> freePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errnoStatus(errno, "socket");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  Status st = okStatus();
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    st = errnoStatus(errno, "finding a free port for MASTER_PORT");
  ::close(fd);
  if (!st.ok()) return st;
  return ntohs(a.sin_port);
}

// --bind-to core: rank i on the i-th core (all its hardware threads) this launcher may run on, round robin. Ranks
// that outnumber the cores then share them evenly and stay put: left to itself the scheduler often gathers
// oversubscribed ranks that wake each other on one core (measured: 4 ranks on 2 cores, issue 18).
bool coreBindings(int nranks, bool report, std::vector<cpu_set_t>& sets) {
  auto cores = topo::allowedCores("");
  if (!cores) {
    std::fprintf(stderr, "hetcomm-run: --bind-to core: %s\n", std::string(cores.error().message()).c_str());
    return false;
  }
  for (int rank = 0; rank < nranks; ++rank) {
    const size_t core = static_cast<size_t>(rank) % cores->size();
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int cpu : (*cores)[core]) CPU_SET(cpu, &set);
    sets.push_back(set);
    if (report)
      std::fprintf(stderr, "hetcomm-run: rank %d bound to core %zu (CPUs %s)\n", rank, core, cpuList(set).c_str());
  }
  return true;
}

// fds 0-2 closed by whoever started us would be reused by the first pipes, and a rank's output would land in them.
void ensureStandardFds() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (fcntl(fd, F_GETFD) < 0 && errno == EBADF) {
      int null = open("/dev/null", O_RDWR);  // takes the lowest free number: fd
      if (null > 2) close(null);
    }
  }
}

int launch(int argc, char** argv) {
  ensureStandardFds();
  blockJobSignals();  // before the store's thread exists, which inherits the mask

  LaunchOptions opts;
  if (int code = parseCommandLine(argc, argv, opts); code >= 0) return code;

  JobSpec spec;
  int err = 0;
  spec.path = resolveProgram(opts.program[0], &err);
  if (spec.path.empty()) {
    bool bare = opts.program[0].find('/') == std::string::npos;
    std::fprintf(stderr, "hetcomm-run: cannot execute '%s': %s\n", opts.program[0].c_str(),
                 err == ENOENT && bare ? "command not found in PATH" : std::strerror(err));
    return err == ENOENT ? 127 : 126;
  }
  spec.argv = opts.program;
  spec.prefixOutput = !opts.noPrefix;
  spec.graceSec = opts.graceSec;
  spec.elastic = opts.elastic;
  std::vector<std::string> shared;
  if (!sharedEnvironment(opts.exports, shared)) return kUsageExit;

  crypto::Secret secret;
  if (Status st = crypto::randomBytes(secret); !st.ok()) {
    std::fprintf(stderr, "hetcomm-run: cannot make the job secret: %s\n", st.toString().c_str());
    return 1;
  }
  // Where each rank runs; an emulated cluster's ranks reach the store through their host's fabric.
  std::vector<Placement> placement;
  std::string bindAddr = "127.0.0.1";     // loopback: every rank is on this host, and nothing else should see the port
  std::string torchMaster = "127.0.0.1";  // rank 0's host, for torch's rendezvous
  if (!opts.cluster.empty()) {
    auto cluster = loadEmulatedCluster(opts.cluster);
    if (!cluster) {
      std::fprintf(stderr, "hetcomm-run: %s\n", std::string(cluster.error().message()).c_str());
      return kUsageExit;
    }
    // Rank r runs on the host whose share of ranks (its own count, or --ranks-per-host for every host) holds r,
    // hosts filled in file order.
    std::vector<int> hostOfRank, localOfRank, perHost;
    for (const EmulatedHost& h : cluster->hosts) perHost.push_back(opts.ranksPerHost ? opts.ranksPerHost : h.ranks);
    for (size_t h = 0; h < perHost.size(); ++h)
      for (int k = 0; k < perHost[h]; ++k) {
        hostOfRank.push_back(static_cast<int>(h));
        localOfRank.push_back(k);
      }
    const int capacity = static_cast<int>(hostOfRank.size());
    if (opts.nranks == 0) opts.nranks = capacity;
    if (opts.nranks > capacity) {
      std::fprintf(stderr, "hetcomm-run: -np %d does not fit cluster %s: its %zu hosts hold %d ranks\n", opts.nranks,
                   cluster->name.c_str(), cluster->hosts.size(), capacity);
      return kUsageExit;
    }
    for (int rank = 0; rank < opts.nranks; ++rank) {
      const int host = hostOfRank[rank];
      const EmulatedHost& h = cluster->hosts[host];
      const int used = static_cast<int>(std::count(hostOfRank.begin(), hostOfRank.begin() + opts.nranks, host));
      Placement at{localOfRank[rank], used, h.storeAddr, h.name, cluster->topoFile};
      placement.push_back(at);
      int fd = open(("/run/netns/" + h.netns).c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) {
        std::fprintf(stderr, "hetcomm-run: network namespace %s of host %s: %s (is the cluster up?)\n", h.netns.c_str(),
                     h.name.c_str(), std::strerror(errno));
        return 1;
      }
      spec.netnsFds.push_back(fd);
    }
    bindAddr = "0.0.0.0";  // the emulator's bridges carry the store's addresses, one per fabric
    torchMaster = rendezvousAddress(*cluster, hostOfRank, opts.nranks);
  } else {
    for (int rank = 0; rank < opts.nranks; ++rank) {
      Placement at;
      at.localRank = rank;
      at.localSize = opts.nranks;
      placement.push_back(at);
    }
  }
  auto store = StoreServer::start(bindAddr, 0, secret);
  if (!store.has_value()) {
    std::fprintf(stderr, "hetcomm-run: cannot start the rendezvous store: %s\n", store.error().toString().c_str());
    return 1;
  }
  std::string secretHex = toHex(secret.data(), secret.size());
  auto torchPort = freePort();
  if (!torchPort) {
    std::fprintf(stderr, "hetcomm-run: %s\n", torchPort.error().toString().c_str());
    return 1;
  }
  const TorchRendezvous torch{torchMaster, *torchPort};
  if (opts.bindTo == "core" && !coreBindings(opts.nranks, opts.reportBindings, spec.cpuSets)) return 1;
  for (int rank = 0; rank < opts.nranks; ++rank) {
    spec.envs.push_back(
        rankEnvironment(shared, rank, opts.nranks, placement[rank], (*store)->port(), secretHex, torch));
  }
  return runJob(spec);
}

}  // namespace
}  // namespace hetcomm::comm

int main(int argc, char** argv) { return hetcomm::comm::launch(argc, argv); }
