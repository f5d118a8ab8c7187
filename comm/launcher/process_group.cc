#include "comm/launcher/process_group.h"

#include <fcntl.h>
#include <linux/close_range.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstring>
#include <string_view>
#include <thread>
#include <vector>

#include "comm/cpu_sharing.h"
#include "comm/launcher/output_prefixer.h"
#include "common/deadline.h"
#include "common/log.h"
#include "common/strings.h"

namespace hetcomm::comm {
namespace {

// The launcher's signal state before blockJobSignals(), restored in every rank before exec.
sigset_t gOriginalMask;
struct sigaction gOriginalSigpipe;

sigset_t jobSignals() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) sigaddset(&set, sig);
  return set;
}

// SIGKILL takes effect as soon as a process leaves the kernel, so this only bounds the wait for a process stuck in
// an uninterruptible sleep, or for a pipe held by something that left its rank's process group (setsid).
constexpr double kGiveUpAfterKillSec = 2.0;
// After a rank exits with an error, how long to look for a rank that died by a signal at about the same time: a
// survivor that noticed a dead peer often exits before the launcher reaps the dead one, and the dead one is the
// cause to name.
constexpr auto kBlameWindow = std::chrono::milliseconds(300);
constexpr size_t kReadChunkBytes = 64 * 1024;

std::string signalName(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : format("signal %d", sig);
}

const char* plural(int n) { return n == 1 ? "" : "s"; }

// Writes all of data, waiting in poll() if someone made fd non-blocking and it is full. False when the reader is
// gone (EPIPE: `hetcomm-run ... | head`); the caller then drops that output rather than stopping the job.
bool writeAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n >= 0) {
      data.remove_prefix(static_cast<size_t>(n));
    } else if (errno == EAGAIN) {
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, -1);
    } else if (errno != EINTR) {
      return false;
    }
  }
  return true;
}

// One of the launcher's own outputs. Lines are written whole, one write() each where the kernel allows, and only
// from the loop's thread, so two ranks' lines never interleave mid-line.
struct Sink {
  int fd;
  bool broken = false;
  void write(std::string_view data) {
    if (!broken && !data.empty() && !writeAll(fd, data)) broken = true;
  }
};

struct Stream {
  int fd = -1;  // read end of the rank's pipe, non-blocking; -1 once closed
  Sink* sink = nullptr;
  OutputPrefixer prefixer{""};
};

struct Rank {
  int index = 0;
  pid_t pid = -1;  // also its process group id; -1 until spawned
  bool reaped = false;
  Stream out, err;

  bool outputOpen() const { return out.fd >= 0 || err.fd >= 0; }
  bool running() const { return pid > 0 && !reaped; }
  // Whether its process group may still have members: the rank itself, or something it started that still holds
  // its pipes. A group with members keeps its id from being reused, so signalling it cannot hit a stranger.
  bool mayHaveGroup() const { return pid > 0 && (!reaped || outputOpen()); }
};

// What the child of fork reports through its exec pipe when it cannot start the rank: the step that failed and
// errno. Exec closes the pipe unwritten.
struct ChildFailure {
  enum Step : int { kNetns, kAffinity, kExec } step;
  int err;
};

[[noreturn]] void childFailed(int fd, ChildFailure::Step step) {
  const ChildFailure f{step, errno};
  ssize_t ignored = write(fd, &f, sizeof(f));
  (void)ignored;
  _exit(127);
}

// Runs between fork and exec, so only async-signal-safe calls: the store's thread may have held a lock (malloc's,
// stdio's) at the moment of fork, and it never releases it in the child.
[[noreturn]] void execRank(const char* path, char* const* argv, char* const* envp, int stdinFd, int outFd, int errFd,
                           int execErrFd, pid_t launcher, int netnsFd, const cpu_set_t* cpus) {
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  // The launcher may have died between fork and prctl; then nothing would ever kill this rank.
  if (getppid() != launcher) _exit(127);
  // An emulated host (hetcomm-run --cluster): its network namespace, and, as `ip netns exec` does, a private
  // mount namespace with /sys mounted again, so that sysfs (where topology discovery reads NICs) shows the
  // namespace's interfaces rather than the root namespace's.
  if (netnsFd >= 0) {
    bool ok = setns(netnsFd, CLONE_NEWNET) == 0 && unshare(CLONE_NEWNS) == 0 &&
              mount("", "/", nullptr, MS_SLAVE | MS_REC, nullptr) == 0;
    if (ok) {
      umount2("/sys", MNT_DETACH);
      ok = mount("sysfs", "/sys", "sysfs", 0, nullptr) == 0;
    }
    if (!ok) childFailed(execErrFd, ChildFailure::kNetns);
  }
  // Its CPUs (hetcomm-run --bind-to), before exec so that every thread the program starts inherits them.
  if (cpus != nullptr && sched_setaffinity(0, sizeof(cpu_set_t), cpus) != 0)
    childFailed(execErrFd, ChildFailure::kAffinity);
  if (dup2(stdinFd, STDIN_FILENO) >= 0 && dup2(outFd, STDOUT_FILENO) >= 0 && dup2(errFd, STDERR_FILENO) >= 0) {
    sigaction(SIGPIPE, &gOriginalSigpipe, nullptr);
    sigprocmask(SIG_SETMASK, &gOriginalMask, nullptr);
    // Nothing else of the launcher's (the store's sockets, other ranks' pipes) leaks into the rank, as with
    // Python's subprocess close_fds. execErrFd is already close-on-exec, so success closes it too.
    close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
    execve(path, argv, envp);
  }
  childFailed(execErrFd, ChildFailure::kExec);
}

class Job {
 public:
  explicit Job(const JobSpec& spec);
  ~Job();
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  int run();

 private:
  int spawn(Rank& rank);
  void drainSignals();
  void reapChildren();
  void onRankExit(Rank& rank, int status);
  void onLauncherSignal(int sig);
  void beginStop(int sig);
  void signalGroups(int sig);
  void killAll();
  bool readStream(Stream& stream);
  void closeStream(Stream& stream);
  void onDeadlines();
  int runningCount() const;
  bool finished() const;
  void say(const char* fmt, ...) __attribute__((format(printf, 2, 3)));

  const JobSpec& spec_;
  std::vector<Rank> ranks_;
  std::vector<char*> argv_;               // execve's view of spec_.argv
  std::vector<std::vector<char*>> envp_;  // and of spec_.envs, per rank
  Sink stdout_{STDOUT_FILENO};
  Sink stderr_{STDERR_FILENO};
  int signalFd_ = -1;
  int devNull_ = -1;
  bool stopping_ = false;  // ranks were told to stop; their exits no longer count as failures
  bool killed_ = false;    // SIGKILL sent
  bool gaveUp_ = false;    // stopped waiting for ranks that survived SIGKILL
  int exitCode_ = 0;
  bool succeeded_ = false;  // a rank exited 0
  int firstFailure_ = 0;    // --elastic: the exit code of the first rank that failed
  int stopSignal_ = SIGTERM;
  Deadline killAt_ = Deadline::never();       // stopping: when the stop signal turns into SIGKILL
  Deadline lingerUntil_ = Deadline::never();  // every rank exited; how long what they left running may hold pipes
  Deadline giveUpAt_ = Deadline::never();     // after SIGKILL: when the loop stops waiting for pipes and ranks
  std::string scratch_;                       // formatted output, reused across reads
  std::vector<char> buffer_ = std::vector<char>(kReadChunkBytes);
};

Job::Job(const JobSpec& spec) : spec_(spec) {
  for (const std::string& arg : spec_.argv) argv_.push_back(const_cast<char*>(arg.c_str()));
  argv_.push_back(nullptr);
  ranks_.resize(spec_.envs.size());
  envp_.resize(spec_.envs.size());
  for (size_t i = 0; i < ranks_.size(); ++i) {
    Rank& rank = ranks_[i];
    rank.index = static_cast<int>(i);
    std::string prefix = spec_.prefixOutput ? format("[%zu] ", i) : std::string();
    rank.out.sink = &stdout_;
    rank.out.prefixer = OutputPrefixer(prefix);
    rank.err.sink = &stderr_;
    rank.err.prefixer = OutputPrefixer(prefix);
    for (const std::string& kv : spec_.envs[i]) envp_[i].push_back(const_cast<char*>(kv.c_str()));
    envp_[i].push_back(nullptr);
  }
}

Job::~Job() {
  for (Rank& rank : ranks_) {
    if (rank.out.fd >= 0) close(rank.out.fd);
    if (rank.err.fd >= 0) close(rank.err.fd);
  }
  if (signalFd_ >= 0) close(signalFd_);
  if (devNull_ >= 0) close(devNull_);
}

void Job::say(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string line = "hetcomm-run: " + vformat(fmt, ap) + "\n";
  va_end(ap);
  stderr_.write(line);
}

int Job::run() {
  sigset_t signals = jobSignals();
  signalFd_ = signalfd(-1, &signals, SFD_NONBLOCK | SFD_CLOEXEC);
  devNull_ = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (signalFd_ < 0 || devNull_ < 0) {
    say("cannot set up the job: %s", strerror(errno));
    return 1;
  }
  for (Rank& rank : ranks_) {
    if (int code = spawn(rank); code != 0) {
      exitCode_ = code;
      beginStop(SIGTERM);
      break;
    }
  }

  std::vector<pollfd> fds;
  std::vector<Stream*> streams;  // streams[i] is polled in fds[i + 1]
  while (!finished()) {
    fds.assign(1, pollfd{signalFd_, POLLIN, 0});
    streams.clear();
    for (Rank& rank : ranks_) {
      for (Stream* stream : {&rank.out, &rank.err}) {
        if (stream->fd < 0) continue;
        fds.push_back(pollfd{stream->fd, POLLIN, 0});
        streams.push_back(stream);
      }
    }
    // No deadline while the job runs normally: then only a rank's output or exit, or a signal, can change anything.
    Deadline next = Deadline::earlier(Deadline::earlier(killAt_, giveUpAt_), lingerUntil_);
    int n = poll(fds.data(), fds.size(), next.msLeft());
    if (n < 0 && errno != EINTR) {
      say("poll failed: %s; killing every rank", strerror(errno));
      signalGroups(SIGKILL);
      return 1;
    }
    // Output first, so that a rank's last words come out before the launcher's news of its exit.
    for (size_t i = 0; n > 0 && i < streams.size(); ++i) {
      if (fds[i + 1].revents != 0) readStream(*streams[i]);
    }
    if (n > 0 && fds[0].revents != 0) drainSignals();
    onDeadlines();
    // Every rank is gone but something one started in the background still holds its pipe: that gets the grace
    // period to finish, then is stopped like a rank, so the job leaves nothing behind.
    if (!stopping_ && lingerUntil_.isNever() && runningCount() == 0 && !finished()) {
      lingerUntil_ = Deadline::afterSec(spec_.graceSec);
    }
  }
  if (spec_.elastic && exitCode_ == 0 && !succeeded_) exitCode_ = firstFailure_;
  return exitCode_;
}

// Returns 0, or the launcher's exit code when the rank could not be started (its reason already printed).
int Job::spawn(Rank& rank) {
  int pipes[3][2];  // stdout, stderr, exec error
  for (int p = 0; p < 3; ++p) {
    if (pipe2(pipes[p], O_CLOEXEC) != 0) {
      say("cannot create a pipe for rank %d: %s", rank.index, strerror(errno));
      for (int q = 0; q < p; ++q) {
        close(pipes[q][0]);
        close(pipes[q][1]);
      }
      return 1;
    }
  }
  int* outPipe = pipes[0];
  int* errPipe = pipes[1];
  int* execPipe = pipes[2];
  // Like mpirun, only rank 0 gets the launcher's stdin, and not from a terminal: ranks run in background process
  // groups, so reading the terminal would stop them with SIGTTIN.
  int stdinFd = (rank.index == 0 && !isatty(STDIN_FILENO)) ? STDIN_FILENO : devNull_;
  pid_t launcher = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    execRank(spec_.path.c_str(), argv_.data(), envp_[rank.index].data(), stdinFd, outPipe[1], errPipe[1], execPipe[1],
             launcher, spec_.netnsFds.empty() ? -1 : spec_.netnsFds[rank.index],
             spec_.cpuSets.empty() ? nullptr : &spec_.cpuSets[rank.index]);
  }
  int forkErr = errno;
  close(outPipe[1]);
  close(errPipe[1]);
  close(execPipe[1]);
  if (pid < 0) {
    say("cannot start rank %d: fork: %s", rank.index, strerror(forkErr));
    close(outPipe[0]);
    close(errPipe[0]);
    close(execPipe[0]);
    return 1;
  }
  // The child does this too; whichever runs first, the group exists before anything signals it.
  setpgid(pid, pid);
  rank.pid = pid;
  rank.out.fd = outPipe[0];
  rank.err.fd = errPipe[0];
  fcntl(rank.out.fd, F_SETFL, O_NONBLOCK);
  fcntl(rank.err.fd, F_SETFL, O_NONBLOCK);

  // exec closes execPipe (end of file: it started) or the child writes why it could not.
  ChildFailure failure{};
  ssize_t got;
  do {
    got = read(execPipe[0], &failure, sizeof(failure));
  } while (got < 0 && errno == EINTR);
  close(execPipe[0]);
  if (got == static_cast<ssize_t>(sizeof(failure))) {
    switch (failure.step) {
      case ChildFailure::kNetns:
        say("cannot start rank %d: entering its emulated host's network namespace: %s", rank.index,
            strerror(failure.err));
        break;
      case ChildFailure::kAffinity:
        say("cannot start rank %d: binding it to CPUs %s (--bind-to): %s", rank.index,
            cpuList(spec_.cpuSets[rank.index]).c_str(), strerror(failure.err));
        break;
      case ChildFailure::kExec:
        say("cannot execute '%s' for rank %d: %s", spec_.argv[0].c_str(), rank.index, strerror(failure.err));
        break;
    }
    return failure.step == ChildFailure::kExec && failure.err == ENOENT ? 127 : 126;
  }
  HC_INFO(Boot, "hetcomm-run: rank %d is pid %d", rank.index, static_cast<int>(pid));
  return 0;
}

void Job::drainSignals() {
  signalfd_siginfo info;
  bool child = false;
  while (read(signalFd_, &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
    if (info.ssi_signo == SIGCHLD) {
      child = true;
    } else {
      onLauncherSignal(static_cast<int>(info.ssi_signo));
    }
  }
  // SIGCHLDs coalesce while pending, so one may stand for several exits: reap until none is left.
  if (child) reapChildren();
}

void Job::reapChildren() {
  for (;;) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0) return;
    for (Rank& rank : ranks_) {
      if (rank.pid != pid) continue;
      rank.reaped = true;
      onRankExit(rank, status);
      break;
    }
  }
}

// "exited with code 3" or "was killed by signal SIGKILL".
std::string describeEnd(int status) {
  if (WIFEXITED(status)) return format("exited with code %d", WEXITSTATUS(status));
  return format("was killed by signal %s%s", signalName(WTERMSIG(status)).c_str(),
                WCOREDUMP(status) ? " (core dumped)" : "");
}
int exitCodeOf(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }

void Job::onRankExit(Rank& rank, int status) {
  HC_INFO(Boot, "hetcomm-run: rank %d (pid %d) ended with wait status 0x%x", rank.index, static_cast<int>(rank.pid),
          static_cast<unsigned>(status));
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) succeeded_ = true;
  if ((WIFEXITED(status) && WEXITSTATUS(status) == 0) || stopping_) return;
  if (spec_.elastic) {
    // The others go on without it (they shrink their communicators); the job's status is theirs.
    while (readStream(rank.out)) {
    }
    while (readStream(rank.err)) {
    }
    if (firstFailure_ == 0) firstFailure_ = exitCodeOf(status);
    const int others = runningCount();
    say("rank %d %s; --elastic: the other %d rank%s go%s on", rank.index, describeEnd(status).c_str(), others,
        plural(others), others == 1 ? "es" : "");
    return;
  }

  // The first rank to fail is not always the cause: when it exited with an error, look a moment longer for a rank
  // killed by a signal (the peer it lost), and name that one first.
  Rank* cause = &rank;
  int causeStatus = status;
  std::vector<std::pair<Rank*, int>> alsoEnded;
  if (WIFEXITED(status)) {
    const auto until = std::chrono::steady_clock::now() + kBlameWindow;
    while (std::chrono::steady_clock::now() < until && WIFEXITED(causeStatus)) {
      int other = 0;
      const pid_t pid = waitpid(-1, &other, WNOHANG);
      if (pid <= 0) {
        if (pid < 0) break;  // no children left
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        continue;
      }
      for (Rank& r : ranks_) {
        if (r.pid != pid) continue;
        r.reaped = true;
        HC_INFO(Boot, "hetcomm-run: rank %d (pid %d) ended with wait status 0x%x", r.index, static_cast<int>(r.pid),
                static_cast<unsigned>(other));
        if (WIFSIGNALED(other)) {
          alsoEnded.emplace_back(cause, causeStatus);
          cause = &r;
          causeStatus = other;
        } else if (!(WIFEXITED(other) && WEXITSTATUS(other) == 0)) {
          alsoEnded.emplace_back(&r, other);
        }
      }
    }
  }
  // Everything the ranks wrote is in their pipes now; print it before saying they failed, since it likely says why.
  for (Rank* r : {cause, &rank}) {
    while (readStream(r->out)) {
    }
    while (readStream(r->err)) {
    }
  }
  exitCode_ = exitCodeOf(causeStatus);
  std::string also;
  for (const auto& [r, st] : alsoEnded) also += format("; rank %d %s", r->index, describeEnd(st).c_str());
  if (int others = runningCount(); others > 0) {
    say("rank %d %s%s; stopping the other %d rank%s", cause->index, describeEnd(causeStatus).c_str(), also.c_str(),
        others, plural(others));
  } else {
    say("rank %d %s%s", cause->index, describeEnd(causeStatus).c_str(), also.c_str());
  }
  beginStop(SIGTERM);
}

void Job::onLauncherSignal(int sig) {
  if (!stopping_) {
    exitCode_ = 128 + sig;
    int running = runningCount();
    say("received %s; forwarding it to %d rank%s", signalName(sig).c_str(), running, plural(running));
    beginStop(sig);
  } else if (!killed_) {
    // A second Ctrl-C means "now", as with mpirun.
    say("received %s while stopping; sending SIGKILL", signalName(sig).c_str());
    killAll();
  }
}

void Job::killAll() {
  signalGroups(SIGKILL);
  killed_ = true;
  killAt_ = Deadline::never();
  giveUpAt_ = Deadline::afterSec(kGiveUpAfterKillSec);
}

void Job::beginStop(int sig) {
  stopping_ = true;
  stopSignal_ = sig;
  signalGroups(sig);
  // A stopped rank (SIGSTOP, a debugger's stop, Ctrl-Z) acts on the signal only once it runs again: continue it,
  // as a shell's kill does, rather than wait out the grace period for it.
  if (sig != SIGKILL) signalGroups(SIGCONT);
  killAt_ = Deadline::afterSec(spec_.graceSec);
  lingerUntil_ = Deadline::never();  // the stop sequence bounds the wait from here on
}

void Job::signalGroups(int sig) {
  for (const Rank& rank : ranks_) {
    if (!rank.mayHaveGroup()) continue;
    // ESRCH: the group is already empty.
    if (killpg(rank.pid, sig) != 0 && errno != ESRCH) {
      say("cannot send %s to rank %d: %s", signalName(sig).c_str(), rank.index, strerror(errno));
    }
  }
}

// Reads one chunk and forwards the whole lines in it. True when it read data (there may be more).
bool Job::readStream(Stream& stream) {
  if (stream.fd < 0) return false;
  ssize_t n = read(stream.fd, buffer_.data(), buffer_.size());
  if (n > 0) {
    scratch_.clear();
    stream.prefixer.feed(std::string_view(buffer_.data(), static_cast<size_t>(n)), scratch_);
    stream.sink->write(scratch_);
    return true;
  }
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return false;
  closeStream(stream);  // end of file, or a read error that will not go away
  return false;
}

void Job::closeStream(Stream& stream) {
  scratch_.clear();
  stream.prefixer.finish(scratch_);
  stream.sink->write(scratch_);
  close(stream.fd);
  stream.fd = -1;
}

void Job::onDeadlines() {
  if (killAt_.expired()) {
    int alive = 0;
    for (const Rank& rank : ranks_) alive += rank.mayHaveGroup() ? 1 : 0;
    if (alive > 0) {
      say("sending SIGKILL to %d rank%s still running %g s after %s", alive, plural(alive), spec_.graceSec,
          signalName(stopSignal_).c_str());
    }
    killAll();
  }
  if (lingerUntil_.expired()) {
    for (const Rank& rank : ranks_) {
      if (rank.outputOpen()) {
        say("rank %d has exited, but a process it started still holds its output after %g s; stopping it", rank.index,
            spec_.graceSec);
      }
    }
    beginStop(SIGTERM);
  }
  if (giveUpAt_.expired()) {
    // Only a process that left its rank's group (setsid) can still hold a pipe now; killpg cannot reach it.
    for (Rank& rank : ranks_) {
      if (rank.running()) {
        say("rank %d (pid %d) survived SIGKILL for %g s; giving up on it", rank.index, static_cast<int>(rank.pid),
            kGiveUpAfterKillSec);
      } else if (rank.outputOpen()) {
        say("rank %d's output is still held by a process outside its group; no longer reading it", rank.index);
      }
      if (rank.out.fd >= 0) closeStream(rank.out);
      if (rank.err.fd >= 0) closeStream(rank.err);
    }
    gaveUp_ = true;
  }
}

int Job::runningCount() const {
  int n = 0;
  for (const Rank& rank : ranks_) n += rank.running() ? 1 : 0;
  return n;
}

bool Job::finished() const {
  if (gaveUp_) return true;
  for (const Rank& rank : ranks_) {
    if (rank.running() || rank.outputOpen()) return false;
  }
  return true;
}

// 0 when path can be executed, else the errno execve would most likely give.
int checkExecutable(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return errno;
  if (S_ISDIR(st.st_mode)) return EISDIR;
  if (access(path.c_str(), X_OK) != 0) return errno;
  return 0;
}

}  // namespace

void blockJobSignals() {
  sigset_t signals = jobSignals();
  sigprocmask(SIG_BLOCK, &signals, &gOriginalMask);
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  sigaction(SIGPIPE, &ignore, &gOriginalSigpipe);
}

std::string resolveProgram(const std::string& program, int* err) {
  *err = ENOENT;
  if (program.empty()) return "";
  if (program.find('/') != std::string::npos) {
    *err = checkExecutable(program);
    return *err == 0 ? program : "";
  }
  // As execvp: the first match wins; a match that cannot be executed is reported only if nothing better follows.
  const char* pathEnv = getenv("PATH");
  bool sawOther = false;
  for (const std::string& dir : split(pathEnv ? pathEnv : "/bin:/usr/bin", ':')) {
    std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + program;
    int e = checkExecutable(candidate);
    if (e == 0) {
      *err = 0;
      return candidate;
    }
    if (e != ENOENT && e != ENOTDIR && !sawOther) {
      sawOther = true;
      *err = e;
    }
  }
  return "";
}

int runJob(const JobSpec& spec) { return Job(spec).run(); }

}  // namespace hetcomm::comm
