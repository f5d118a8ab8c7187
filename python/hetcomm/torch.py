"""Registers hetcomm as a torch.distributed backend.

    import torch.distributed as dist
    import hetcomm.torch  # noqa: F401  (registers "hetcomm")
    dist.init_process_group("hetcomm")  # under torchrun, mpirun, Slurm or hetcomm-run

CPU tensors only for now. Every operation returns a Work that completes asynchronously; a failure (a collective
mismatch, a dead peer, a timeout) raises RuntimeError with hetcomm's message from wait(), on every rank.
Sends and receives match in the order they are posted per pair of ranks (tags are not used).
"""
from datetime import timedelta

import torch.distributed as dist

from hetcomm._torch_backend import ProcessGroupHetcomm

__all__ = ["ProcessGroupHetcomm", "BACKEND"]

BACKEND = "hetcomm"


def _create(store, rank, size, timeout):
    if not isinstance(timeout, timedelta):
        timeout = timedelta(seconds=float(timeout))
    return ProcessGroupHetcomm(store, rank, size, timeout)


if "HETCOMM" not in dist.Backend._plugins:
    dist.Backend.register_backend(BACKEND, _create)
