"""Every torch.distributed operation of the hetcomm backend, on every dtype, against gloo in the same job.

Run under any launcher that sets torchrun's variables (hetcomm-run, torchrun), on 2 or more ranks:
    hetcomm-run -np 3 python3 tests/integration/torch_ops_check.py

The default group is hetcomm; a gloo group over the same ranks runs the same calls. Inputs are small integers, so
every result is exact in every dtype and hetcomm's must equal gloo's bit for bit. Where gloo lacks the operation
or the dtype (reduce_scatter, AVG, bfloat16, bool), the expected result is computed from every rank's inputs,
which each rank can rebuild. Prints one line per check that failed and exits 1 if any did.
"""
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

import hetcomm.torch  # noqa: F401  (registers the backend)

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.int32,
          torch.int64, torch.bool]
FLOATS = {torch.float32, torch.float64, torch.float16, torch.bfloat16}

failures = []
checks = 0


def check(name, got, want):
    global checks
    checks += 1
    if isinstance(got, (list, tuple)):
        for i, (g, w) in enumerate(zip(got, want)):
            check(f"{name}[{i}]", g, w)
        return
    if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got, want):
        failures.append(name)
        print(f"rank {rank}: FAIL {name}: got {got.flatten()[:8].tolist()} want {want.flatten()[:8].tolist()}",
              flush=True)


def data(r, n, dtype, salt=0):
    """Rank r's input: small values, distinct per rank, exact in every dtype (bool: a pattern of 0s and 1s)."""
    v = (torch.arange(n, dtype=torch.int64) * 3 + r * 5 + salt) % 7 + (1 if dtype != torch.bool else 0)
    if dtype == torch.bool:
        return ((torch.arange(n) + r) % 3 == 0)
    return v.to(dtype)


def reference(op, tensors):
    """The reduction of the ranks' tensors, computed in a wide type and cast back."""
    dtype = tensors[0].dtype
    wide = [t.to(torch.float64 if dtype in FLOATS else torch.int64) for t in tensors]
    out = wide[0].clone()
    for t in wide[1:]:
        if op == dist.ReduceOp.SUM:
            out = out + t if dtype != torch.bool else torch.maximum(out, t)
        elif op == dist.ReduceOp.PRODUCT:
            out = out * t if dtype != torch.bool else torch.minimum(out, t)
        elif op == dist.ReduceOp.MIN:
            out = torch.minimum(out, t)
        elif op == dist.ReduceOp.MAX:
            out = torch.maximum(out, t)
        elif op == dist.ReduceOp.AVG:
            out = out + t
    if op == dist.ReduceOp.AVG:
        out = out / len(tensors) if dtype in FLOATS else torch.div(out, len(tensors), rounding_mode="trunc")
    return out.to(dtype)


def gloo_or_reference(gloo_call, ref):
    """gloo's result where gloo supports the call, else the reference."""
    try:
        return gloo_call()
    except RuntimeError:
        return ref()


def ops_for(dtype):
    ops = [dist.ReduceOp.SUM, dist.ReduceOp.PRODUCT, dist.ReduceOp.MIN, dist.ReduceOp.MAX]
    if dtype != torch.bool:
        ops.append(dist.ReduceOp.AVG)
    return ops


hetcomm.torch.set_launch_environment()  # under mpirun or srun: torchrun's variables from theirs
dist.init_process_group("hetcomm", timeout=timedelta(seconds=60))
rank, world = dist.get_rank(), dist.get_world_size()
gloo = dist.new_group(backend="gloo")
N = 37  # not a multiple of anything: uneven chunks inside the algorithms

for dtype in DTYPES:
    d = str(dtype).replace("torch.", "")
    everyone = [data(r, N, dtype) for r in range(world)]
    mine = everyone[rank]

    for op in ops_for(dtype):
        t = mine.clone()
        dist.all_reduce(t, op=op)
        # gloo has no AVG; PRODUCT of small ints can overflow int8/uint8 the same way in both (two's complement)
        want = gloo_or_reference(
            lambda: (lambda g: (dist.all_reduce(g, op=op, group=gloo), g)[1])(mine.clone())
            if op != dist.ReduceOp.AVG else reference(op, everyone), lambda: reference(op, everyone))
        if op == dist.ReduceOp.AVG and dtype in FLOATS:
            # the average of small ints is not exact in half precision: compare after rounding both ways
            ok = torch.allclose(t.double(), reference(op, everyone).double(), rtol=1e-2, atol=1e-2)
            if not ok:
                check(f"all_reduce {d} AVG", t, reference(op, everyone))
            continue
        check(f"all_reduce {d} {op}", t, want)

    # async, on a non-contiguous view (every other column of a 2-D tensor)
    base = torch.stack([mine, mine]).t().contiguous()  # N x 2
    view = base[:, 0]
    assert not view.is_contiguous()
    work = dist.all_reduce(view, op=dist.ReduceOp.MAX, async_op=True)
    work.wait()
    check(f"all_reduce {d} MAX non-contiguous", view.contiguous(), reference(dist.ReduceOp.MAX, everyone))
    check(f"all_reduce {d} MAX non-contiguous leaves the rest", base[:, 1], mine)

    root = world - 1
    t = mine.clone()
    dist.broadcast(t, src=root)
    check(f"broadcast {d}", t, everyone[root])

    if dtype != torch.bool:
        t = mine.clone()
        dist.reduce(t, dst=1 % world, op=dist.ReduceOp.SUM)
        if rank == 1 % world:
            check(f"reduce {d}", t, reference(dist.ReduceOp.SUM, everyone))

    outs = [torch.zeros(N, dtype=dtype) for _ in range(world)]
    dist.all_gather(outs, mine)
    g_outs = [torch.zeros(N, dtype=dtype) for _ in range(world)]
    want = gloo_or_reference(lambda: (dist.all_gather(g_outs, mine, group=gloo), g_outs)[1], lambda: everyone)
    check(f"all_gather {d}", outs, want)

    flat = torch.zeros(world * N, dtype=dtype)
    dist.all_gather_into_tensor(flat, mine)
    check(f"all_gather_into_tensor {d}", flat, torch.cat(everyone))

    # reduce_scatter: rank r's input list holds block b = data(r, N, salt=b); rank b gets the sum of block b
    if dtype != torch.bool:
        blocks = [[data(r, N, dtype, salt=b) for b in range(world)] for r in range(world)]
        out = torch.zeros(N, dtype=dtype)
        dist.reduce_scatter(out, blocks[rank], op=dist.ReduceOp.SUM)
        want = reference(dist.ReduceOp.SUM, [blocks[r][rank] for r in range(world)])
        check(f"reduce_scatter {d}", out, want)
        out = torch.zeros(N, dtype=dtype)
        dist.reduce_scatter_tensor(out, torch.cat(blocks[rank]), op=dist.ReduceOp.MIN)
        check(f"reduce_scatter_tensor {d} MIN", out,
              reference(dist.ReduceOp.MIN, [blocks[r][rank] for r in range(world)]))

    # all_to_all_single, even: rank r sends block p of its input to rank p
    ins = [data(r, world * 4, dtype) for r in range(world)]
    out = torch.zeros(world * 4, dtype=dtype)
    dist.all_to_all_single(out, mine if False else ins[rank])
    want = torch.cat([ins[p][rank * 4:(rank + 1) * 4] for p in range(world)])
    g_out = torch.zeros(world * 4, dtype=dtype)
    want = gloo_or_reference(lambda: (dist.all_to_all_single(g_out, ins[rank], group=gloo), g_out)[1], lambda: want)
    check(f"all_to_all_single {d}", out, want)

    # all_to_all_single with split sizes: rank r sends (r + p) % 3 + 1 rows of 2 to rank p (a zero for some pairs)
    def rows(src, dst):
        return (src + 2 * dst) % 3

    ins = [data(r, sum(rows(r, p) for p in range(world)) * 2, dtype, salt=r).reshape(-1, 2) for r in range(world)]
    in_splits = [rows(rank, p) for p in range(world)]
    out_splits = [rows(p, rank) for p in range(world)]
    out = torch.zeros(sum(out_splits), 2, dtype=dtype)
    dist.all_to_all_single(out, ins[rank], out_splits, in_splits)

    def sent(src, dst):
        start = sum(rows(src, q) for q in range(dst))
        return ins[src][start:start + rows(src, dst)]

    check(f"all_to_all_single splits {d}", out, torch.cat([sent(p, rank) for p in range(world)]))

    # all_to_all (lists), uneven per peer
    outs = [torch.zeros(p + 1, dtype=dtype) for p in range(world)]
    ins_l = [data(rank, rank + 1, dtype, salt=p) for p in range(world)]
    dist.all_to_all(outs, ins_l)
    check(f"all_to_all {d}", outs, [data(p, p + 1, dtype, salt=rank) for p in range(world)])

    # send/recv around the ring, both directions posted before any wait (isend then irecv, as with gloo)
    right, left = (rank + 1) % world, (rank - 1) % world
    got = torch.zeros(N, dtype=dtype)
    reqs = [dist.isend(mine, right), dist.irecv(got, left)]
    for r in reqs:
        r.wait()
    check(f"isend/irecv ring {d}", got, everyone[left])

# Large point-to-point both ways at once (rendezvous sizes): no rank may wait for the other's receive.
big = torch.full((1 << 20,), float(rank))
got = torch.zeros(1 << 20)
peer = rank ^ 1
if peer < world:
    reqs = [dist.isend(big, peer), dist.irecv(got, peer)]
    for r in reqs:
        r.wait()
    check("isend/irecv 4 MiB both ways", got, torch.full((1 << 20,), float(peer)))

# Work objects: is_completed, wait, and the future DDP uses.
t = torch.ones(1 << 16)
work = dist.all_reduce(t, async_op=True)
fut = work.get_future()
fut.wait()
if not work.is_completed() or not torch.equal(t, torch.full((1 << 16,), float(world))):
    failures.append("work/future")
    print(f"rank {rank}: FAIL work/future: completed={work.is_completed()}", flush=True)

dist.barrier()

# Refused clearly: a GPU-less build cannot be asked for CUDA, so check the other refusals.
for name, call in [
    ("int16 dtype", lambda: dist.all_reduce(torch.ones(4, dtype=torch.int16))),
    ("BAND op", lambda: dist.all_reduce(torch.ones(4, dtype=torch.int32), op=dist.ReduceOp.BAND)),
    ("sparse tensor", lambda: dist.all_reduce(torch.ones(4).to_sparse())),
]:
    try:
        call()
        failures.append(f"refuse {name}")
        print(f"rank {rank}: FAIL {name} was not refused", flush=True)
    except RuntimeError as e:
        if "hetcomm" not in str(e):
            failures.append(f"refuse {name}")
            print(f"rank {rank}: FAIL {name}: message does not name hetcomm: {e}", flush=True)

# The group still works after refusals (they had no effect).
t = torch.ones(3)
dist.all_reduce(t)
check("all_reduce after refusals", t, torch.full((3,), float(world)))

dist.destroy_process_group()
print(f"rank {rank}: {'FAILED ' + str(len(failures)) if failures else 'all checks passed'} ({checks} checks)", flush=True)
sys.stderr.flush()
os._exit(1 if failures else 0)  # past torch 1.13's gloo threads at finalization: see torch_ddp_check.py
