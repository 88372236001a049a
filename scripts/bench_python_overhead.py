#!/usr/bin/env python3
"""What a Python call adds to a compiled model's run: the same model, threads and inputs
timed through the `hidet` CLI (the Rust `run`, timed per run by `hidet bench`) and through
`hidet_rs` (`CompiledModel.run` with a list and with a dict, timed per call), side by side,
alternating for several rounds; medians in microseconds.

Usage (after ./scripts/setup_python.sh and `cargo build --release -p hidet`):

    .venv/bin/python scripts/bench_python_overhead.py [--model zoo:tiny_mlp] [--runs 20000]
        [--rounds 3] [--markdown]
"""

import argparse
import json
import pathlib
import statistics
import subprocess
import sys
import time

import numpy as np

import hidet_rs

ROOT = pathlib.Path(__file__).resolve().parent.parent


def rust_median_us(hidet: pathlib.Path, model: str, runs: int) -> float:
    """Median per-run latency of `hidet bench` on one thread, in microseconds."""
    out = subprocess.run(
        [str(hidet), "bench", model, "--threads", "1", "--runs", str(runs), "--json"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    report = json.loads(out.strip().splitlines()[-1])
    return report["median_ms"] * 1000.0


def python_median_us(call, runs: int) -> float:
    """Median latency of `call()` over `runs` calls, in microseconds."""
    for _ in range(100):
        call()
    times = []
    for _ in range(runs):
        start = time.perf_counter_ns()
        call()
        times.append(time.perf_counter_ns() - start)
    return statistics.median(times) / 1000.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="zoo:tiny_mlp", help="zoo:NAME")
    parser.add_argument("--runs", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--hidet", type=pathlib.Path, default=ROOT / "target/release/hidet")
    parser.add_argument("--markdown", action="store_true", help="print a BENCHMARKS.md row")
    args = parser.parse_args()
    if not args.model.startswith("zoo:"):
        parser.error("--model must be zoo:NAME (the CLI and the package build the same model)")
    if not args.hidet.exists():
        parser.error(f"{args.hidet} not found: cargo build --release -p hidet")

    model = hidet_rs.zoo(args.model[len("zoo:"):])
    compiled = model.compile(threads=1)
    rng = np.random.default_rng(0)
    positional = [
        rng.standard_normal([int(d) for d in info.shape]).astype(info.dtype)
        for info in model.inputs
    ]
    named = {info.name: x for info, x in zip(model.inputs, positional)}

    rust, as_list, as_dict = [], [], []
    for _ in range(args.rounds):
        rust.append(rust_median_us(args.hidet, args.model, args.runs))
        as_list.append(python_median_us(lambda: compiled.run(positional), args.runs))
        as_dict.append(python_median_us(lambda: compiled.run(named), args.runs))
    r, lst, dct = (statistics.median(v) for v in (rust, as_list, as_dict))
    if args.markdown:
        print(
            f"| {args.model} | 1 | {r:.1f} | {lst:.1f} (+{lst - r:.1f}) | {dct:.1f} (+{dct - r:.1f}) |"
        )
    else:
        print(f"{args.model}, 1 thread, median of {args.runs} calls, median of {args.rounds} rounds")
        print(f"  Rust run (hidet bench):    {r:7.2f} us")
        print(f"  Python run(list):          {lst:7.2f} us  (+{lst - r:.2f} us)")
        print(f"  Python run(dict):          {dct:7.2f} us  (+{dct - r:.2f} us)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
