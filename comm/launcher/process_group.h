// process_group.h: the ranks hetcomm-run starts on this host and the loop that supervises them until the job ends.
//
// Each rank runs in a process group of its own (so a signal reaches the rank and everything it started), dies with
// the launcher (PR_SET_PDEATHSIG), and writes stdout and stderr into pipes that the loop turns into "[rank] " lines.
// The loop sleeps in poll() on those pipes and on a signalfd (SIGCHLD and the launcher's own SIGINT, SIGTERM,
// SIGHUP); its only timeouts are the stop deadlines, so it never spins and never waits without a bound once the job
// is ending. Option parsing, the environment and the rendezvous store are hetcomm_run.cc's business, not this file's.
#pragma once

#include <sched.h>

#include <string>
#include <vector>

namespace hetcomm::comm {

// What to run, fully decided by the caller.
struct JobSpec {
  std::string path;                            // executable to exec, from resolveProgram()
  std::vector<std::string> argv;               // argv[0] is the program as the user wrote it
  std::vector<std::vector<std::string>> envs;  // one "NAME=VALUE" list per rank; envs.size() is the rank count
  bool prefixOutput = true;                    // "[rank] " before each line; false passes lines unchanged
  double graceSec = 3;                         // between SIGTERM (or the forwarded signal) and SIGKILL
  bool elastic = false;                        // a rank that fails does not stop the others
  std::vector<int> netnsFds;                   // empty, or per rank a network namespace to enter before exec
  std::vector<cpu_set_t> cpuSets;              // empty, or per rank the CPUs it may run on (--bind-to)
};

// Blocks the signals runJob() receives through its signalfd and ignores SIGPIPE (a closed stdout must not kill
// the launcher while ranks still run). Call first thing in main, before any thread exists: threads inherit the
// mask, and a thread with SIGTERM unblocked would take the default action, killing the launcher without stopping
// the ranks. Ranks get the original mask and SIGPIPE disposition back before exec.
void blockJobSignals();

// Finds program the way execvp would (a PATH search when it has no '/') and checks that it can be executed.
// Returns the path, or "" with *err set to an errno value: ENOENT (not found), EACCES, EISDIR...
std::string resolveProgram(const std::string& program, int* err);

// Starts every rank, forwards output and signals, stops the job when a rank fails, and returns once every rank has
// exited and its output is drained. The result is hetcomm-run's exit status: 0 when every rank exited 0; the first
// failing rank's exit code (128 + signal when killed); 128 + signal when the launcher itself was signalled;
// 126 or 127 when the program could not be executed. Elastic: a failing rank is reported and the others go on;
// 0 when any rank exited 0, else the first failing rank's code.
int runJob(const JobSpec& spec);

}  // namespace hetcomm::comm
