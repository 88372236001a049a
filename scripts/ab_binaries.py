#!/usr/bin/env python3
"""A/B of two hidet binaries on the same models, interleaved, kernel by kernel.

Runs `BINARY bench MODEL --threads T --runs R --profile --json` for each binary in turn,
ROUNDS times (ABBA order), and reports for each binary the minimum over the rounds of the
whole-model median and the sum over kernels of each kernel's minimum (over rounds) median,
and the median (with quartiles) of the per-round ratios new/base. On a noisy host whose
speed drifts between phases, the paired ratios compare runs made seconds apart, and the
minimum of interleaved medians compares the quiet phases; ONNX Runtime is not involved (see
scripts/bench_peers.py for that).

Usage:
  .venv/bin/python scripts/ab_binaries.py BASE_BINARY NEW_BINARY MODEL.onnx [MODEL.onnx ...]
      [--rounds 4] [--runs 20] [--threads 2] [--kernels] [--threshold 0.05]

Build the base in a separate worktree and target directory, for example:
  git worktree add /tmp/base <commit> && (cd /tmp/base && CARGO_TARGET_DIR=/tmp/base-target \\
      cargo build --release -p hidet)
  .venv/bin/python scripts/ab_binaries.py /tmp/base-target/release/hidet \\
      target/release/hidet models/resnet50/model.onnx --kernels

With --kernels, the kernels whose ratio differs from 1 by more than --threshold are listed,
matched by their position in the launch list (a change that adds or removes kernels shifts
the pairs after it: read the labels).
"""

import argparse
import json
import statistics
import subprocess
import sys


def bench(binary, model, args):
    cmd = [binary, "bench", model, "--threads", str(args.threads), "--runs", str(args.runs),
           "--profile", "--json"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{done.stderr}")
    report = json.loads(done.stdout.strip().splitlines()[-1])
    kernels = {e["step"]: (e["median_ms"], e["label"]) for e in report["profile"]}
    return report["median_ms"], kernels


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("base")
    p.add_argument("new")
    p.add_argument("models", nargs="+")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--kernels", action="store_true", help="list the kernels that changed")
    p.add_argument("--threshold", type=float, default=0.05)
    args = p.parse_args()
    if args.rounds < 1 or args.runs < 1:
        sys.exit("--rounds and --runs must be at least 1")
    binaries = {"base": args.base, "new": args.new}
    for model in args.models:
        totals = {k: [] for k in binaries}
        kernels = {k: {} for k in binaries}
        for r in range(args.rounds):
            # ABBA order: a drift in the machine's speed hits both sides alike.
            order = list(binaries.items())
            if r % 2:
                order.reverse()
            for side, binary in order:
                total, per_kernel = bench(binary, model, args)
                totals[side].append(total)
                for step, (ms, label) in per_kernel.items():
                    old = kernels[side].get(step, (float("inf"), label))[0]
                    kernels[side][step] = (min(ms, old), label)
        best = {k: min(v) for k, v in totals.items()}
        sums = {k: sum(ms for ms, _ in v.values()) for k, v in kernels.items()}
        print(f"{model}: whole model min of medians base {best['base']:.2f} ms, new {best['new']:.2f} ms "
              f"(ratio {best['new'] / best['base']:.3f}); sum of per-kernel mins base {sums['base']:.2f}, "
              f"new {sums['new']:.2f} (ratio {sums['new'] / sums['base']:.3f})")
        paired = sorted(n / b for b, n in zip(totals["base"], totals["new"]))
        q = lambda f: paired[min(len(paired) - 1, int(f * len(paired)))]
        print(f"  paired ratios new/base over {len(paired)} rounds: median {statistics.median(paired):.3f} "
              f"(quartiles {q(0.25):.3f} .. {q(0.75):.3f})")
        if args.kernels:
            for step in sorted(set(kernels["base"]) | set(kernels["new"])):
                a, la = kernels["base"].get(step, (None, ""))
                b, lb = kernels["new"].get(step, (None, ""))
                if a is None or b is None or abs(b / a - 1) > args.threshold:
                    fa = f"{a:8.3f}" if a is not None else "       -"
                    fb = f"{b:8.3f}" if b is not None else "       -"
                    ratio = f"{b / a:5.2f}" if a and b else "    -"
                    print(f"  {step:4d} {fa} {fb} {ratio}  {la[:50]:50s} {lb[:50]}")

if __name__ == "__main__":
    main()
