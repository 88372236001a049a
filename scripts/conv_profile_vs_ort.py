#!/usr/bin/env python3
"""Convolution times of hidet and ONNX Runtime on one model, grouped by size.

The two runtimes name their kernels differently (ONNX Runtime's fused NCHWc `Conv` nodes,
hidet's `kN_matmul_…` kernels), so this script pairs them by work: each convolution's
multiply-adds are computed from the model (ONNX shape inference), each hidet kernel's from
the GFLOP/s that `hidet bench --profile --json` reports, and the two sides are grouped by
MFLOP. For each group it prints both sums, the ratio hidet / ONNX Runtime and the
difference in milliseconds, largest difference first: where a model's gap is.

The runtimes alternate `--reps` times (ONNX Runtime's profiler as `ort_profile.py` runs it,
on seeded random inputs, then `hidet bench --profile` on its own), and each node or kernel
keeps the lowest of its per-repetition medians, so a slow phase of a noisy machine hits
neither side alone. Depthwise and pointwise convolutions of the same size share a group.

Usage:
  .venv/bin/python scripts/conv_profile_vs_ort.py MODEL.onnx [--threads 2] [--reps 3]
      [--runs 20] [--hidet-bin target/release/hidet]
"""

import argparse
import collections
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import shape_inference

from ort_profile import node_medians

ROOT = Path(__file__).resolve().parent.parent
FOLLOWERS = ("Relu", "Add", "Clip")


def conv_mflops(model_path):
    """MFLOP of each convolution, keyed by its output and the outputs of the element-wise
    nodes after it (ONNX Runtime names a fused node after its last output)."""
    model = shape_inference.infer_shapes(onnx.load(model_path))
    graph = model.graph
    dims = {}
    for vi in list(graph.value_info) + list(graph.output) + list(graph.input):
        dims[vi.name] = [d.dim_value for d in vi.type.tensor_type.shape.dim]
    weights = {i.name: list(i.dims) for i in graph.initializer}
    consumers = collections.defaultdict(list)
    for n in graph.node:
        for i in n.input:
            consumers[i].append(n)
    flops = {}
    for n in graph.node:
        if n.op_type != "Conv" or n.input[1] not in weights or n.output[0] not in dims:
            continue
        w, out = weights[n.input[1]], dims[n.output[0]]
        mflop = 2.0 * np.prod(out) * np.prod(w[1:]) / 1e6
        frontier = [n.output[0]]
        while frontier:
            name = frontier.pop()
            flops[name] = mflop
            frontier += [c.output[0] for c in consumers[name] if c.op_type in FOLLOWERS]
    return flops


def hidet_times(binary, model_path, threads, runs):
    cmd = [binary, "bench", model_path, "--threads", str(threads), "--runs", str(runs),
           "--profile", "--json"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{done.stderr}")
    report = json.loads(done.stdout.strip().splitlines()[-1])
    return {(e["step"], e["label"]): (e["median_ms"], e.get("gflops")) for e in report["profile"]}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--hidet-bin", default=str(ROOT / "target" / "release" / "hidet"))
    args = p.parse_args()
    if not os.path.isfile(args.model):
        sys.exit(f"no such model file: {args.model}")
    if args.reps < 1 or args.runs < 1:
        sys.exit("--reps and --runs must be at least 1")

    flops = conv_mflops(args.model)
    ort_best, hidet_best = {}, {}
    for _ in range(args.reps):
        for k, ms in node_medians(args.model, args.threads, 5, args.runs).items():
            ort_best[k] = min(ort_best.get(k, ms), ms)
        for k, (ms, gflops) in hidet_times(args.hidet_bin, args.model, args.threads, args.runs).items():
            if k not in hidet_best or ms < hidet_best[k][0]:
                hidet_best[k] = (ms, gflops)

    ort_groups = collections.defaultdict(lambda: [0.0, 0])
    ort_other = 0.0
    for (name, op), ms in ort_best.items():
        base = name[: -len("_nchwc")] if name.endswith("_nchwc") else name
        if op in ("Conv", "FusedConv") and base in flops:
            group = ort_groups[round(flops[base])]
            group[0] += ms
            group[1] += 1
        else:
            ort_other += ms
    hidet_groups = collections.defaultdict(lambda: [0.0, 0, set()])
    hidet_other = 0.0
    for (_, label), (ms, gflops) in hidet_best.items():
        if gflops:
            group = hidet_groups[round(gflops * ms)]  # GFLOP/s × ms = MFLOP
            group[0] += ms
            group[1] += 1
            group[2].add(label.split()[0].split("_", 1)[-1])
        else:
            hidet_other += ms

    print(f"{args.model}, {args.threads} threads, lowest of {args.reps} medians of {args.runs} runs")
    print(f"  convolutions: ONNX Runtime {sum(g[0] for g in ort_groups.values()):.2f} ms, "
          f"hidet {sum(g[0] for g in hidet_groups.values()):.2f} ms (kernels that reduce)")
    print(f"  everything else: ONNX Runtime {ort_other:.2f} ms, hidet {hidet_other:.2f} ms")
    rows, used = [], set()
    for mflop, (ort_ms, ort_n) in ort_groups.items():
        near = [m for m in hidet_groups if m not in used and abs(m - mflop) <= max(1, 0.01 * mflop)]
        if not near:
            rows.append((mflop, ort_ms, ort_n, 0.0, 0, "(no hidet kernel of this size)"))
            continue
        m = min(near, key=lambda m: abs(m - mflop))
        used.add(m)
        h_ms, h_n, kinds = hidet_groups[m]
        rows.append((mflop, ort_ms, ort_n, h_ms, h_n, ", ".join(sorted(kinds))))
    print(f"  {'MFLOP':>6}  {'ORT ms':>8} (n)  {'hidet ms':>8} (n)  ratio   diff ms  hidet kernels")
    for mflop, o, on, h, hn, kinds in sorted(rows, key=lambda r: -(r[3] - r[1])):
        ratio = f"{h / o:5.2f}" if o and h else "    -"
        print(f"  {mflop:6d}  {o:8.3f} ({on:2d})  {h:8.3f} ({hn:2d})  {ratio}  {h - o:+8.3f}  {kinds}")
    rest = [(m, g[0], g[1]) for m, g in hidet_groups.items() if m not in used]
    if rest:
        print("  hidet kernels of other sizes: " + ", ".join(f"{m} MFLOP {ms:.3f} ms ({n})" for m, ms, n in sorted(rest)))


if __name__ == "__main__":
    main()
