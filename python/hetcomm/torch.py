"""Registers hetcomm as a torch.distributed backend.

    import torch.distributed as dist
    import hetcomm.torch  # registers "hetcomm"
    hetcomm.torch.set_launch_environment()  # only under mpirun or srun: torchrun's variables from theirs
    dist.init_process_group("hetcomm")      # under torchrun, hetcomm-run, mpirun or srun

CPU tensors only for now. Every operation returns a Work that completes asynchronously; a failure (a collective
mismatch, a dead peer, a timeout) raises RuntimeError with hetcomm's message from wait(), on every rank.
Sends and receives match in the order they are posted per pair of ranks (tags are not used).
"""
import os
import zlib
from datetime import timedelta

import torch.distributed as dist

from hetcomm._torch_backend import ProcessGroupHetcomm

__all__ = ["ProcessGroupHetcomm", "BACKEND", "set_launch_environment"]

BACKEND = "hetcomm"


def _create(store, rank, size, timeout):
    if not isinstance(timeout, timedelta):
        timeout = timedelta(seconds=float(timeout))
    return ProcessGroupHetcomm(store, rank, size, timeout)


def set_launch_environment(master_port=None):
    """Sets torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT) from
    Open MPI's or Slurm's where they are missing, so that init_process_group's env:// rendezvous works under
    mpirun and srun as under torchrun and hetcomm-run (which set them). Returns the launcher's name.

    MASTER_ADDR: HETCOMM_MASTER_ADDR, else the first host of the Slurm job, else 127.0.0.1 (one host).
    MASTER_PORT: master_port, else HETCOMM_TORCH_PORT, else a port derived from the job's id (29500-30499).
    """
    env = os.environ
    if "RANK" in env and "WORLD_SIZE" in env:
        return "torchrun"
    if "OMPI_COMM_WORLD_RANK" in env:
        launcher, job = "Open MPI", env.get("OMPI_MCA_ess_base_jobid", env.get("OMPI_MCA_orte_hnp_uri", ""))
        names = ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                 "OMPI_COMM_WORLD_LOCAL_SIZE")
    elif "SLURM_PROCID" in env:
        launcher, job = "Slurm", env.get("SLURM_JOB_ID", "") + "." + env.get("SLURM_STEP_ID", "")
        names = ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE")
    else:
        raise RuntimeError("hetcomm.torch.set_launch_environment: no launcher variables found (torchrun's RANK and "
                           "WORLD_SIZE, Open MPI's OMPI_COMM_WORLD_*, or Slurm's SLURM_*)")
    for torch_name, theirs in zip(("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"), names):
        if theirs in env:
            env.setdefault(torch_name, env[theirs].split("(")[0].split(",")[0])
    if "MASTER_ADDR" not in env:
        env["MASTER_ADDR"] = env.get("HETCOMM_MASTER_ADDR") or _first_slurm_host() or "127.0.0.1"
    if "MASTER_PORT" not in env:
        port = master_port or env.get("HETCOMM_TORCH_PORT") or 29500 + zlib.crc32(job.encode()) % 1000
        env["MASTER_PORT"] = str(port)
    return launcher


def _first_slurm_host():
    nodes = os.environ.get("SLURM_JOB_NODELIST") or os.environ.get("SLURM_NODELIST")
    if not nodes:
        return None
    import subprocess
    try:
        out = subprocess.run(["scontrol", "show", "hostnames", nodes], capture_output=True, text=True, check=True)
        return out.stdout.split()[0]
    except (OSError, subprocess.CalledProcessError, IndexError):
        return None


if "HETCOMM" not in dist.Backend._plugins:
    dist.Backend.register_backend(BACKEND, _create)
