"""hetcomm's torch.distributed backend against gloo, in one job: allreduce busbw and DDP step time.

    hetcomm-run -np 2 python3 perf/compare/torch_bench.py [--sizes 1M,16M,64M] [--iters 10] [--rounds 3]
    hetcomm-run --cluster clusters/mixed-4x2.json python3 perf/compare/torch_bench.py ...

The default group is hetcomm; a gloo group spans the same ranks. Each round measures both backends, in an order
that alternates by round, and the table gives the median over rounds of the slowest rank's figure:
  allreduce  float32 sum of SIZE bytes, blocking dist.all_reduce: time per call, and busbw = 2 (n-1)/n * SIZE / t
             (nccl-tests' definition);
  DDP        one training step of an MLP (--width, --layers) under DistributedDataParallel: forward, backward
             (bucketed allreduces overlapped with it), SGD step.
The ratio columns are gloo's time over hetcomm's (above 1: hetcomm is faster). --json FILE writes every figure.
"""
import argparse
import json
import statistics
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import hetcomm.torch  # noqa: F401


def parse_size(s):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    s = s.strip().upper()
    return int(float(s[:-1]) * units[s[-1]]) if s[-1] in units else int(s)


parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--sizes", default="1M,16M,64M", help="allreduce sizes in bytes (K, M suffixes)")
parser.add_argument("--iters", type=int, default=10, help="timed allreduces per size and round")
parser.add_argument("--ddp-steps", type=int, default=10, help="timed DDP steps per round")
parser.add_argument("--width", type=int, default=1024, help="DDP model: hidden width")
parser.add_argument("--layers", type=int, default=4, help="DDP model: hidden layers")
parser.add_argument("--batch", type=int, default=16)
parser.add_argument("--rounds", type=int, default=3)
parser.add_argument("--json", default="", help="write every figure here (rank 0)")
args = parser.parse_args()

dist.init_process_group("hetcomm", timeout=timedelta(seconds=600))
rank, world = dist.get_rank(), dist.get_world_size()
groups = {"hetcomm": dist.group.WORLD, "gloo": dist.new_group(backend="gloo")}
torch.set_num_threads(1)  # ranks share the cores; one thread each keeps them from fighting
sizes = [parse_size(s) for s in args.sizes.split(",")]


def slowest(seconds):
    """The slowest rank's figure (a collective is as slow as its slowest rank)."""
    t = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=groups["gloo"])
    return t.item()


def time_allreduce(group, size):
    t = torch.ones(size // 4)
    dist.all_reduce(t, group=group)  # warm-up: connections, plans, pages
    dist.barrier(group=group)
    start = time.perf_counter()
    for _ in range(args.iters):
        dist.all_reduce(t, group=group)
    return slowest((time.perf_counter() - start) / args.iters)


def time_ddp(group):
    torch.manual_seed(0)
    layers = [nn.Linear(256, args.width), nn.GELU()]
    for _ in range(args.layers - 1):
        layers += [nn.Linear(args.width, args.width), nn.GELU()]
    net = DDP(nn.Sequential(*layers, nn.Linear(args.width, 10)), process_group=group)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    x, y = torch.randn(args.batch, 256), torch.randint(0, 10, (args.batch,))

    def step():
        opt.zero_grad()
        nn.functional.cross_entropy(net(x), y).backward()
        opt.step()

    step()  # warm-up
    dist.barrier(group=group)
    start = time.perf_counter()
    for _ in range(args.ddp_steps):
        step()
    params = sum(p.numel() for p in net.parameters())
    return slowest((time.perf_counter() - start) / args.ddp_steps), params


samples = {name: {"allreduce": {s: [] for s in sizes}, "ddp": []} for name in groups}
params = 0
for rnd in range(args.rounds):
    order = list(groups) if rnd % 2 == 0 else list(reversed(groups))
    for name in order:
        for s in sizes:
            samples[name]["allreduce"][s].append(time_allreduce(groups[name], s))
        t, params = time_ddp(groups[name])
        samples[name]["ddp"].append(t)

if rank == 0:
    algo = {s: dist.group.WORLD.algorithm_for(s // 4) for s in sizes}
    med = statistics.median
    print(f"# torch_bench: {world} ranks, median of {args.rounds} rounds (slowest rank); ratio = gloo time / hetcomm time")
    print(f"# {'size(B)':>10} {'hetcomm(ms)':>12} {'gloo(ms)':>10} {'hc busbw':>9} {'gloo busbw':>10} {'ratio':>6}  algorithm")
    bus = 2 * (world - 1) / world
    for s in sizes:
        h, g = med(samples["hetcomm"]["allreduce"][s]), med(samples["gloo"]["allreduce"][s])
        print(f"  {s:>10} {h * 1e3:>12.2f} {g * 1e3:>10.2f} {bus * s / h / 1e9:>9.3f} {bus * s / g / 1e9:>10.3f}"
              f" {g / h:>6.2f}  {algo[s]}")
    h, g = med(samples["hetcomm"]["ddp"]), med(samples["gloo"]["ddp"])
    print(f"# DDP step ({params / 1e6:.2f}M parameters, batch {args.batch}): hetcomm {h * 1e3:.1f} ms, "
          f"gloo {g * 1e3:.1f} ms, ratio {g / h:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"ranks": world, "rounds": args.rounds, "params": params, "algorithm": algo,
                       "allreduce_s": {n: {str(s): v for s, v in samples[n]["allreduce"].items()} for n in samples},
                       "ddp_step_s": {n: samples[n]["ddp"] for n in samples}}, f, indent=1)
dist.destroy_process_group()
