#!/usr/bin/env python3
"""Per-node times of ONNX Runtime on a model, to set beside `hidet bench MODEL --profile`.

Runs the model with ONNX Runtime's built-in profiler (`SessionOptions.enable_profiling`),
intra-op threads as given, and prints the total, the time per operator type and the
slowest nodes: the median over the timed runs of each node's kernel time.

Usage:
  .venv/bin/python scripts/ort_profile.py MODEL.onnx [--threads 2] [--runs 20]
      [--warmup 5] [--top 25]

Missing inputs get seeded random data: floats in [0, 1), integers in [0, --int-high)
(token ids, for example), dynamic dimensions set to 1. The profiler adds a little
overhead per node; compare shares and ratios, not absolute totals, with other tools.
"""

import argparse
import collections
import json
import os
import sys
import tempfile

import numpy as np
import onnxruntime as ort

NUMPY_OF_ORT = {
    "tensor(float)": np.float32,
    "tensor(double)": np.float64,
    "tensor(float16)": np.float16,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
    "tensor(int8)": np.int8,
    "tensor(uint8)": np.uint8,
    "tensor(bool)": np.bool_,
}


def random_feeds(session, int_high, seed):
    rng = np.random.default_rng(seed)
    feeds = {}
    for i in session.get_inputs():
        shape = [d if isinstance(d, int) and d > 0 else 1 for d in i.shape]
        dtype = NUMPY_OF_ORT.get(i.type)
        if dtype is None:
            sys.exit(f"input {i.name!r} has type {i.type}, which this script cannot generate")
        if np.issubdtype(dtype, np.floating):
            feeds[i.name] = rng.random(shape).astype(dtype)
        elif dtype == np.bool_:
            feeds[i.name] = rng.random(shape) < 0.5
        else:
            feeds[i.name] = rng.integers(0, int_high, shape).astype(dtype)
    return feeds


def node_medians(model, threads, warmup, runs, int_high=2, seed=0):
    """`{(node, op type): median ms}` of every node's kernel time over `runs` runs after
    `warmup` (ONNX Runtime's profiler, `threads` intra-op threads, inputs from
    `random_feeds`), in execution order."""
    with tempfile.TemporaryDirectory() as tmp:
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.enable_profiling = True
        so.profile_file_prefix = os.path.join(tmp, "ort")
        session = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
        feeds = random_feeds(session, int_high, seed)
        for _ in range(warmup + runs):
            session.run(None, feeds)
        with open(session.end_profiling()) as f:
            events = json.load(f)
    times = collections.defaultdict(list)
    for e in events:
        name = e.get("name", "")
        if e.get("cat") == "Node" and name.endswith("_kernel_time"):
            times[(name[: -len("_kernel_time")], e["args"].get("op_name", "?"))].append(e["dur"])
    return {key: float(np.median(d[warmup:] or d)) / 1000.0 for key, d in times.items()}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--int-high", type=int, default=2,
                   help="integer inputs are drawn from [0, INT_HIGH) (default 2: valid ids for any table)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    if args.runs < 1 or args.warmup < 0:
        sys.exit("--runs must be at least 1 and --warmup at least 0")
    if not os.path.isfile(args.model):
        sys.exit(f"no such model file: {args.model}")

    medians = node_medians(args.model, args.threads, args.warmup, args.runs, args.int_high, args.seed)
    rows = [(ms, op, node) for (node, op), ms in medians.items()]
    rows.sort(reverse=True)
    total = sum(r[0] for r in rows)
    print(f"{args.model}: {len(rows)} nodes, {total:.3f} ms in nodes "
          f"(sum of per-node medians over {args.runs} runs, {args.threads} threads)")
    by_op = collections.defaultdict(float)
    for ms, op, _ in rows:
        by_op[op] += ms
    for op, ms in sorted(by_op.items(), key=lambda x: -x[1]):
        print(f"  {op:24s} {ms:9.3f} ms  {100 * ms / total if total else 0:5.1f}%")
    print(f"  {'ms':>9s}  op                       node")
    for ms, op, node in rows[: args.top]:
        print(f"  {ms:9.3f}  {op:24s} {node}")


if __name__ == "__main__":
    main()
