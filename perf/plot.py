#!/usr/bin/python3
"""plot.py: pictures of hetcomm's measurements (Debian's python3-matplotlib).

  perf/plot.py RUN.json [RUN.json ...] -o busbw.png [--bound bound.json | --bound-gbs 1.2] [--labels a,b]
      busbw against size, one line per run: the JSON the perf tools write with -J FILE (all_reduce_perf,
      all_gather_perf, ...). --placement in plots the in-place columns instead. The collective's bound is drawn
      as a horizontal line where known: a hetcomm-topo --bound-json FILE (its entry for the runs' collective) or
      --bound-gbs.
  perf/plot.py --train LOG.jsonl [LOG.jsonl ...] -o train.png [--labels a,b]
      hetcomm-train --log-json files: loss (and validation loss) and tokens/s against the step, one line per run.

Labels default to each file's name. Exits 2 with a message on a file it cannot read or use.
"""
import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")  # files only: no display needed
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

# perf tool -> the key of its entry in hetcomm-topo's --bound-json
BOUND_KEYS = {"all_reduce_perf": "allreduce", "all_gather_perf": "allgather", "reduce_scatter_perf": "reducescatter",
              "broadcast_perf": "broadcast", "reduce_perf": "reduce", "alltoall_perf": "alltoall"}


def die(msg):
    print(f"plot.py: {msg}", file=sys.stderr)
    sys.exit(2)


def size_label(b, _pos=None):
    for unit, n in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if b >= n:
            v = b / n
            return f"{v:g}{unit}"
    return f"{b:g}"


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except OSError as e:
        die(f"{path}: {e}")
    except ValueError as e:
        die(f"{path}: not one JSON document ({e}); a hetcomm-train --log-json file needs --train")


def load_jsonl(path):
    rows = []
    try:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                if line.strip():
                    try:
                        rows.append(json.loads(line))
                    except ValueError as e:
                        die(f"{path}:{n}: not a JSON object per line (hetcomm-train --log-json): {e}")
    except OSError as e:
        die(f"{path}: {e}")
    if not rows or "step" not in rows[0]:
        die(f"{path}: no steps (expected hetcomm-train --log-json output)")
    return rows


def labels_for(files, given):
    if not given:
        return [os.path.splitext(os.path.basename(f))[0] for f in files]
    labels = given.split(",")
    if len(labels) != len(files):
        die(f"--labels: {len(labels)} labels for {len(files)} files")
    return labels


def plot_busbw(args):
    runs = [load_json(f) for f in args.files]
    for f, r in zip(args.files, runs):
        if not isinstance(r, dict) or "rows" not in r or "tool" not in r:
            die(f"{f}: not a perf tool's -J output (no 'tool' and 'rows')")
    tools = {r["tool"] for r in runs}
    fig, ax = plt.subplots(figsize=(8, 5))
    key = "out_of_place" if args.placement == "out" else "in_place"
    for r, label in zip(runs, labels_for(args.files, args.labels)):
        rows = [row for row in r["rows"] if row["size"] > 0]
        ax.plot([row["size"] for row in rows], [row[key]["busbw_gbs"] for row in rows], marker="o", markersize=3,
                label=f"{label} ({r['ranks']} ranks)")
    bound, where = None, ""
    if args.bound_gbs is not None:
        bound, where = args.bound_gbs, "given"
    elif args.bound:
        b = load_json(args.bound)
        keys = {BOUND_KEYS.get(t) for t in tools}
        if len(keys) != 1 or None in keys or next(iter(keys)) not in b:
            die(f"--bound {args.bound}: no single entry for {sorted(tools)} in it")
        bound, where = b[next(iter(keys))]["busbw"], os.path.basename(args.bound)
    if bound is not None:
        ax.axhline(bound, color="black", linestyle="--", linewidth=1, label=f"bound {bound:.3g} GB/s ({where})")
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(size_label))
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel(f"busbw (GB/s, {args.placement}-of-place)" if args.placement == "out" else "busbw (GB/s, in place)")
    ax.set_title(", ".join(sorted(tools)))
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.output, dpi=args.dpi)


def plot_train(args):
    logs = [load_jsonl(f) for f in args.files]
    fig, (loss_ax, tok_ax) = plt.subplots(1, 2, figsize=(11, 4.5))
    for rows, label in zip(logs, labels_for(args.files, args.labels)):
        steps = [r["step"] for r in rows]
        line, = loss_ax.plot(steps, [r["loss"] for r in rows], label=f"{label} train")
        val = [(r["step"], r["val_loss"]) for r in rows if "val_loss" in r]
        if val:
            loss_ax.plot(*zip(*val), linestyle="--", marker="o", markersize=3, color=line.get_color(),
                         label=f"{label} validation")
        tok_ax.plot(steps, [r.get("tokens_per_s", float("nan")) for r in rows], label=label)
    loss_ax.set_xlabel("step")
    loss_ax.set_ylabel("loss (nats)")
    loss_ax.grid(True, alpha=0.3)
    loss_ax.legend()
    tok_ax.set_xlabel("step")
    tok_ax.set_ylabel("tokens/s")
    tok_ax.grid(True, alpha=0.3)
    tok_ax.legend()
    fig.tight_layout()
    fig.savefig(args.output, dpi=args.dpi)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("files", nargs="+", help="perf tool -J files, or hetcomm-train --log-json files with --train")
    p.add_argument("-o", "--output", required=True, help="the PNG to write")
    p.add_argument("--train", action="store_true", help="the files are hetcomm-train --log-json logs")
    p.add_argument("--labels", help="comma-separated, one per file")
    p.add_argument("--bound", help="hetcomm-topo --bound-json file: draw the collective's bound")
    p.add_argument("--bound-gbs", type=float, help="draw this busbw bound (GB/s)")
    p.add_argument("--placement", choices=["out", "in"], default="out")
    p.add_argument("--dpi", type=int, default=110)
    args = p.parse_args()
    (plot_train if args.train else plot_busbw)(args)
    print(f"plot.py: wrote {args.output}")


if __name__ == "__main__":
    main()
