"""DDP training with backend="hetcomm" gives the losses gloo gives, step for step, in the same job.

    hetcomm-run -np 2 python3 tests/integration/torch_ddp_check.py [--steps 8]

Two copies of a small MLP start from the same seed; one trains under DDP on the default (hetcomm) group, the other
on a gloo group over the same ranks, each rank on its own shard of the same synthetic data. With two ranks a sum
of two gradients does not depend on the order, so the losses must be equal; with more, the backends may add in
different orders and the losses must agree to float32 rounding. Exits 1 on a mismatch.
"""
import argparse
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import hetcomm.torch  # noqa: F401

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=8)
args = parser.parse_args()

hetcomm.torch.set_launch_environment()  # under mpirun or srun: torchrun's variables from theirs
dist.init_process_group("hetcomm", timeout=timedelta(seconds=60))
rank, world = dist.get_rank(), dist.get_world_size()
gloo = dist.new_group(backend="gloo")
torch.set_num_threads(1)


def model():
    torch.manual_seed(1234)  # the same start on every rank and for both backends
    return nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 4))


def train(group):
    net = DDP(model(), process_group=group, bucket_cap_mb=0.01)  # several buckets: overlapped allreduces
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    gen = torch.Generator().manual_seed(99 + rank)
    losses = []
    for _ in range(args.steps):
        x = torch.randn(16, 32, generator=gen)
        y = torch.randint(0, 4, (16,), generator=gen)
        opt.zero_grad()
        loss = nn.functional.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    # The replicas stayed in step: every rank holds the same parameters.
    flat = torch.cat([p.detach().flatten() for p in net.parameters()])
    everyone = [torch.zeros_like(flat) for _ in range(world)]
    dist.all_gather(everyone, flat, group=group)
    same = all(torch.equal(everyone[0], e) for e in everyone)
    return losses, same


hc_losses, hc_same = train(dist.group.WORLD)
gl_losses, gl_same = train(gloo)
exact = world == 2
ok = hc_same and gl_same
for step, (a, b) in enumerate(zip(hc_losses, gl_losses)):
    equal = a == b if exact else abs(a - b) <= 1e-5 * max(1.0, abs(b))
    if not equal:
        ok = False
        print(f"rank {rank}: step {step}: hetcomm loss {a!r} != gloo loss {b!r}", flush=True)
print(f"rank {rank}: losses hetcomm {['%.6f' % v for v in hc_losses]}", flush=True)
print(f"rank {rank}: {'DDP losses match gloo' if ok else 'MISMATCH'} over {args.steps} steps"
      f" ({'exact' if exact else 'to 1e-5'}; replicas identical: hetcomm {hc_same}, gloo {gl_same})", flush=True)
dist.destroy_process_group()
# os._exit, not sys.exit: torch 1.13's gloo worker threads may still free a finished work's tensors while the
# interpreter finalizes, and a thread that then asks for the GIL is unwound through a noexcept frame: "terminate
# called without an active exception" (SIGABRT) after every check passed, about one run in ten here.
sys.stdout.flush()
sys.stderr.flush()
os._exit(0 if ok else 1)
