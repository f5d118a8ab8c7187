"""The hetcomm backend's failures reach Python as clear exceptions, on every rank, and never hang.

    python3 tests/integration/torch_fault_check.py MODE [--ranks 3]

MODE:
  mismatch  rank 0 calls all_reduce on 8 elements, the others on 16: every rank raises, saying so.
  kill      rank 1 is killed (SIGKILL) while the others run all_reduce in a loop: every survivor raises, well
            before the group's timeout (60 s), naming the dead rank.
  timeout   rank 1 sleeps through a collective; the group's timeout is 3 s: the others raise, saying it timed out.

The ranks are started here, with torchrun's variables (no launcher in between, so no launcher stops the
survivors). Each rank prints what it raised; this checks every expected rank raised a RuntimeError whose message
comes from hetcomm, and that it did so within the deadline. Exits 1 otherwise.
"""
import argparse
import os
import signal
import socket
import subprocess
import sys
import time

MARK = "RAISED: "


def rank_main(mode, rank):
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    import hetcomm.torch  # noqa: F401

    timeout = timedelta(seconds=3 if mode == "timeout" else 60)
    dist.init_process_group("hetcomm", timeout=timeout)
    dist.all_reduce(torch.ones(4))  # everyone connected and working
    start = time.monotonic()
    try:
        if mode == "mismatch":
            dist.all_reduce(torch.ones(8 if rank == 0 else 16))
        elif mode == "kill":
            if rank == 1:
                time.sleep(0.5)  # the others are inside their allreduces by now
                os.kill(os.getpid(), signal.SIGKILL)
            for _ in range(100000):
                dist.all_reduce(torch.ones(1 << 16))
        elif mode == "timeout":
            if rank == 1:
                time.sleep(60)  # stopped by the driver
            dist.all_reduce(torch.ones(4))
        print(f"rank {rank}: no exception", flush=True)
        return 3
    except RuntimeError as e:
        print(f"{MARK}rank {rank} after {time.monotonic() - start:.2f} s: {e}", flush=True)
    try:
        dist.destroy_process_group()
    except RuntimeError as e:
        print(f"rank {rank}: destroy_process_group raised: {e}", flush=True)
        return 4
    return 0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def drive(mode, ranks):
    port = free_port()
    procs = []
    for r in range(ranks):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(ranks), LOCAL_RANK=str(r), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port))
        for k in [k for k in env if k.startswith("HETCOMM_") and k not in ("HETCOMM_TRANSPORT", "HETCOMM_DEBUG")]:
            del env[k]  # a launcher's variables would take precedence over torchrun's
        procs.append(subprocess.Popen([sys.executable, __file__, mode, "--rank", str(r)], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    expected = [r for r in range(ranks) if not (mode in ("kill", "timeout") and r == 1)]
    deadline = time.monotonic() + (30 if mode != "timeout" else 20)
    outputs = {}
    ok = True
    for r in expected:
        try:
            out, _ = procs[r].communicate(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            procs[r].kill()
            out, _ = procs[r].communicate()
            print(f"torch_fault_check {mode}: rank {r} hung (killed at the deadline)")
            ok = False
        outputs[r] = out
        raised = [line for line in out.splitlines() if line.startswith(MARK)]
        if procs[r].returncode != 0 or not raised or "hetcomm" not in raised[0]:
            print(f"torch_fault_check {mode}: rank {r} exited {procs[r].returncode} without the expected exception")
            ok = False
        # A mismatch is caught by the descriptor check, or first by a message of the wrong size: either says so.
        wants = {"mismatch": ["collective mismatch", "different counts"], "kill": ["rank 1"],
                 "timeout": ["timed out"]}[mode]
        if raised and not any(w in raised[0] for w in wants):
            print(f"torch_fault_check {mode}: rank {r}'s message says none of {wants}")
            ok = False
        for line in raised:
            print(f"  {line[len(MARK):]}")
    for p in procs:  # the sleeper, and anything left
        if p.poll() is None:
            p.kill()
        p.wait()
    if not ok:
        for r, out in outputs.items():
            print(f"--- rank {r} output ---\n{out}")
    print(f"torch_fault_check {mode}: {'ok' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["mismatch", "kill", "timeout"])
    parser.add_argument("--ranks", type=int, default=3)
    parser.add_argument("--rank", type=int, default=-1, help=argparse.SUPPRESS)
    a = parser.parse_args()
    sys.exit(rank_main(a.mode, a.rank) if a.rank >= 0 else drive(a.mode, a.ranks))
