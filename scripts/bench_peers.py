#!/usr/bin/env python3
"""Benchmark hidet side by side with ONNX Runtime (and tract, when installed).

Every case runs on every engine in the same process run, interleaved: round r
runs case 1 on hidet, ONNX Runtime, tract, then case 2, ... so that machine
noise hits every engine alike, with a 0.3 s pause after each engine (ONNX Runtime's
threads spin on after a run and would slow whatever starts next). Each engine reports the
median latency of `--runs` runs per round (from round 2 on, more for a case whose round-1
time is short, so each measurement lasts `--min-seconds`, 0.5 s by default; tract times
itself); the table shows the median over rounds and the ratio hidet / ONNX Runtime
(< 1.0: hidet is faster), then `paired`, the median over rounds of each round's ratio
(the two engines ran seconds apart, in the same phase of a host whose speed drifts), and
`best`, the ratio of the fastest rounds.

Cases:
  - the five paper models, where `models/<name>/model.onnx` exists
    (see scripts/export_paper_models.py);
  - single operators, generated as small ONNX files under `target/bench-cases/`:
    matmul 1024^3 and 128x768x3072, conv 3x3 with 64 channels at 56^2 and 256
    channels at 14^2, softmax 12x128x128, layernorm 128x768.

It also measures the machine's FMA peak (`cargo run --release -p hidet-cpu
--example fma_peak`) and reports each compute-bound case's GFLOP/s against it.

tract runs when its CLI is on `PATH` (or given with `--tract`), built with its thread pool:
`cargo install tract-cli --locked --features multithread-mm` (about 15 minutes on 2 cores);
it runs the optimized model (`-O`) with `--threads` equal to hidet's and reports the mean of
its own `bench` (the ratio columns stay hidet / ONNX Runtime).

With `--tuned LEVEL`, a second hidet engine, `hidet-tuned`, runs every case with the
results of `hidet tune MODEL --level LEVEL` (tuned once before the rounds, into its own
cache under `target/bench-tune/`), beside `hidet` at level 0 (a cache under
`target/bench-level0/` that holds compiled kernels but never tuning results).

Usage:
  .venv/bin/python scripts/bench_peers.py [--threads 2] [--rounds 5] [--runs 20] [--min-seconds 0.5]
      [--only SUBSTR (repeatable)] [--no-models] [--no-ops] [--markdown] [--hidet-bin PATH]
      [--tuned LEVEL] [--tract PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
PAPER_MODELS = ["resnet50", "inception_v3", "mobilenet_v2", "bert_base", "gpt2"]


@dataclass
class Case:
    name: str
    model: Path
    inputs: dict[str, np.ndarray]
    flops: float | None = None
    times: dict[str, list[float]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    input_args: list[str] | None = None
    runs: int | None = None


def op_cases(out_dir: Path, rng: np.random.Generator) -> list[Case]:
    """Single-operator ONNX models with random weights, and their inputs."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    out_dir.mkdir(parents=True, exist_ok=True)

    def save(name: str, nodes, inputs, outputs, inits) -> Path:
        graph = helper.make_graph(nodes, name, inputs, outputs, inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        path = out_dir / f"{name}.onnx"
        onnx.save(model, path)
        return path

    def f32(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    def tensor(name: str, shape) -> object:
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape))

    cases = []
    for m, k, n in [(1024, 1024, 1024), (128, 768, 3072)]:
        name = f"matmul_{m}x{k}x{n}"
        w = numpy_helper.from_array((f32(k, n) / np.sqrt(k)).astype(np.float32), "w")
        path = save(name, [helper.make_node("MatMul", ["x", "w"], ["y"])],
                    [tensor("x", (m, k))], [tensor("y", (m, n))], [w])
        cases.append(Case(name, path, {"x": f32(m, k)}, flops=2.0 * m * n * k))
    for c, hw in [(64, 56), (256, 14)]:
        name = f"conv3x3_{c}c_{hw}x{hw}"
        w = numpy_helper.from_array((f32(c, c, 3, 3) / np.sqrt(9 * c)).astype(np.float32), "w")
        b = numpy_helper.from_array((f32(c) * 0.1).astype(np.float32), "b")
        node = helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1], kernel_shape=[3, 3])
        path = save(name, [node], [tensor("x", (1, c, hw, hw))], [tensor("y", (1, c, hw, hw))], [w, b])
        cases.append(Case(name, path, {"x": f32(1, c, hw, hw)}, flops=2.0 * c * c * 9 * hw * hw))
    name = "softmax_12x128x128"
    path = save(name, [helper.make_node("Softmax", ["x"], ["y"], axis=-1)],
                [tensor("x", (12, 128, 128))], [tensor("y", (12, 128, 128))], [])
    cases.append(Case(name, path, {"x": f32(12, 128, 128)}))
    name = "layernorm_128x768"
    scale = numpy_helper.from_array(f32(768), "scale")
    bias = numpy_helper.from_array(f32(768), "bias")
    node = helper.make_node("LayerNormalization", ["x", "scale", "bias"], ["y"], axis=-1, epsilon=1e-5)
    path = save(name, [node], [tensor("x", (128, 768))], [tensor("y", (128, 768))], [scale, bias])
    cases.append(Case(name, path, {"x": f32(128, 768)}))
    return cases


def model_cases() -> list[Case]:
    cases = []
    for name in PAPER_MODELS:
        folder = ROOT / "models" / name
        model = folder / "model.onnx"
        if not model.exists():
            print(f"note: {model} not found (scripts/export_paper_models.py makes it); skipped", file=sys.stderr)
            continue
        manifest = json.loads((folder / "manifest.json").read_text()) if (folder / "manifest.json").exists() else {}
        inputs = {}
        for entry in manifest.get("inputs", []):
            path = folder / entry["file"]
            if not path.exists():
                path = folder / "inputs" / entry["file"]
            inputs[entry["name"]] = np.load(path)
        if not inputs:
            for npy in sorted((folder / "inputs").glob("*.npy")):
                inputs[npy.stem] = np.load(npy)
        cases.append(Case(name, model, inputs))
    return cases


def default_hidet_bin() -> Path:
    for profile in ["release", "debug"]:
        p = ROOT / "target" / profile / "hidet"
        if p.exists():
            return p
    raise SystemExit("no hidet binary: run `cargo build --release -p hidet` (or pass --hidet-bin)")


def input_args(case: Case, input_dir: Path) -> list[str]:
    """`--input NAME=FILE.npy` for every input of `case`; the files are written on first use."""
    if case.input_args is None:
        case.input_args = []
        for i, (name, value) in enumerate(case.inputs.items()):
            path = input_dir / f"{case.name}.{i}.npy"
            np.save(path, value)
            case.input_args += ["--input", f"{name}={path}"]
    return case.input_args


def tune_hidet(bin_path: Path, case: Case, threads: int, level: int, input_dir: Path, cache: Path) -> None:
    """`hidet tune` the case into `cache` (tasks already tuned there are reused)."""
    args = [str(bin_path), "tune", str(case.model), "--threads", str(threads), "--level", str(level)]
    env = dict(os.environ, HIDET_CACHE_DIR=str(cache))
    proc = subprocess.run(args + input_args(case, input_dir), capture_output=True, text=True,
                          timeout=7200, env=env)
    if proc.returncode != 0:
        raise RuntimeError((proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["hidet tune failed"])


# Pause after each engine's measurement. ONNX Runtime's intra-op threads keep spinning for a
# while after `session.run` returns; an engine started within that time shares the cores with
# them (hidet's 0.1 ms softmax case measured 0.17 ms right after ONNX Runtime, 0.10 ms 50 ms
# later).
SETTLE_SECONDS = 0.3


def runs_for(case: Case, runs: int, min_seconds: float) -> int:
    """Runs per round for `case` from round 2: at least `runs`, and enough that every engine's
    measurement lasts `min_seconds` at the fastest engine's round-1 time (a 5 ms model timed
    20 times is a 0.1 s window, shorter than the host's slow phases)."""
    fastest = min((t[0] for t in case.times.values() if t), default=0.0)
    if fastest <= 0:
        return runs
    return max(runs, min(100_000, int(min_seconds * 1e3 / fastest) + 1))


def run_hidet(bin_path: Path, case: Case, threads: int, runs: int, warmup: int, input_dir: Path,
              cache: Path) -> float:
    args = [str(bin_path), "bench", str(case.model), "--threads", str(threads),
            "--runs", str(runs), "--warmup", str(warmup), "--json"]
    args += input_args(case, input_dir)
    env = dict(os.environ, HIDET_CACHE_DIR=str(cache))
    proc = subprocess.run(args, capture_output=True, text=True, timeout=3600, env=env)
    if proc.returncode != 0:
        raise RuntimeError((proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["hidet failed"])
    last = proc.stdout.strip().splitlines()[-1]
    return float(json.loads(last)["median_ms"])


def ort_session(case: Case, threads: int):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(str(case.model), opts, providers=["CPUExecutionProvider"])


def time_ort(session, case: Case, runs: int, warmup: int) -> float:
    feeds = dict(case.inputs)
    for _ in range(warmup):
        session.run(None, feeds)
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        session.run(None, feeds)
        samples.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(samples)


def run_tract(tract: str, case: Case, threads: int) -> float:
    """`tract --threads N -O MODEL -i SHAPE,TYPE … bench --allow-random-input`: the optimized
    model (`-O`) on tract's own thread pool (a `tract` built with `--features multithread-mm`;
    a build without it refuses `--threads`), timed by tract's `bench`, whose last line reads
    `Bench ran N times, X ms/i.` (ANSI colours stripped)."""
    dtypes = {np.dtype("float32"): "f32", np.dtype("int64"): "i64", np.dtype("int32"): "i32"}
    args = [tract, "--threads", str(threads), "-O", str(case.model)]
    for value in case.inputs.values():
        args += ["-i", ",".join([str(d) for d in value.shape] + [dtypes.get(value.dtype, "f32")])]
    args += ["bench", "--allow-random-input"]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=3600)
    text = re.sub(r"\x1b\[[0-9;]*m", "", proc.stdout + proc.stderr)
    found = re.findall(r"([0-9.]+) ms/i", text)
    if proc.returncode == 0 and found:
        return float(found[-1])
    raise RuntimeError(text.strip().splitlines()[-1:] or ["tract failed"])


def fma_peak(threads: int) -> float | None:
    proc = subprocess.run(["cargo", "run", "--quiet", "--release", "-p", "hidet-cpu", "--example", "fma_peak"],
                          cwd=ROOT, capture_output=True, text=True)
    key = "peak_gflops_2t" if threads >= 2 else "peak_gflops_1t"
    for line in proc.stdout.splitlines():
        if line.startswith(key):
            return float(line.split()[1])
    return None


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--min-seconds", type=float, default=0.5,
                   help="after round 1, more runs per round for cases faster than this")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--only", action="append", default=[], help="keep cases whose name contains this")
    p.add_argument("--no-models", action="store_true")
    p.add_argument("--no-ops", action="store_true")
    p.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    p.add_argument("--hidet-bin", type=Path)
    p.add_argument("--tract", default=shutil.which("tract"), help="tract CLI (default: on PATH)")
    p.add_argument("--tuned", type=int, choices=[0, 1, 2], metavar="LEVEL",
                   help="also run hidet tuned at this level (engine `hidet-tuned`)")
    args = p.parse_args(argv)

    rng = np.random.default_rng(0)
    work = ROOT / "target" / "bench-cases"
    work.mkdir(parents=True, exist_ok=True)
    cases = ([] if args.no_models else model_cases()) + ([] if args.no_ops else op_cases(work, rng))
    if args.only:
        cases = [c for c in cases if any(s in c.name for s in args.only)]
    if not cases:
        print("no cases", file=sys.stderr)
        return 2
    hidet = args.hidet_bin or default_hidet_bin()
    engines = (["hidet"] + (["hidet-tuned"] if args.tuned is not None else [])
               + ["onnxruntime"] + (["tract"] if args.tract else []))
    caches = {"hidet": ROOT / "target" / "bench-level0", "hidet-tuned": ROOT / "target" / "bench-tune"}
    if args.tuned is not None:
        for case in cases:
            started = time.perf_counter()
            try:
                tune_hidet(hidet, case, args.threads, args.tuned, work, caches["hidet-tuned"])
            except Exception as e:  # noqa: BLE001 - a failed tuning skips that engine only
                case.errors["hidet-tuned"] = str(e)
            print(f"tuned {case.name} at level {args.tuned} in {time.perf_counter() - started:.0f} s",
                  file=sys.stderr)
    sessions = {}
    for case in cases:
        try:
            sessions[case.name] = ort_session(case, args.threads)
        except Exception as e:  # noqa: BLE001 - report any ORT failure per case
            case.errors["onnxruntime"] = str(e).splitlines()[0]

    for r in range(args.rounds):
        for case in cases:
            for engine in engines:
                if engine in case.errors:
                    continue
                try:
                    runs = case.runs or args.runs
                    if engine in caches:
                        ms = run_hidet(hidet, case, args.threads, runs, args.warmup, work,
                                       caches[engine])
                    elif engine == "onnxruntime":
                        ms = time_ort(sessions[case.name], case, runs, args.warmup)
                    else:
                        ms = run_tract(args.tract, case, args.threads)
                    case.times.setdefault(engine, []).append(ms)
                except Exception as e:  # noqa: BLE001 - one failing engine must not stop the others
                    case.errors[engine] = str(e)
                time.sleep(SETTLE_SECONDS)
        if r == 0:
            for case in cases:
                case.runs = runs_for(case, args.runs, args.min_seconds)
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)

    peak = fma_peak(args.threads)
    rows = []
    for case in cases:
        med = {e: statistics.median(t) for e, t in case.times.items() if t}
        h, o = med.get("hidet"), med.get("onnxruntime")
        ratio = f"{h / o:.2f}" if h and o else "-"
        hs, os_ = case.times.get("hidet", []), case.times.get("onnxruntime", [])
        pairs = [a / b for a, b in zip(hs, os_)] if len(hs) == len(os_) else []
        paired = f"{statistics.median(pairs):.2f}" if pairs else "-"
        best = f"{min(hs) / min(os_):.2f}" if hs and os_ else "-"
        ht = med.get("hidet-tuned")
        tuned_ratio = [f"{ht / o:.2f}" if ht and o else "-"] if args.tuned is not None else []
        gflops = f"{case.flops / (h * 1e6):.1f}" if case.flops and h else "-"
        of_peak = f"{100 * case.flops / (h * 1e6) / peak:.0f}%" if case.flops and h and peak else "-"
        cells = [case.name] + [f"{med[e]:.3f}" if e in med else f"error: {case.errors.get(e, '?')[:60]}" for e in engines]
        rows.append(cells + [ratio, paired, best] + tuned_ratio + [gflops, of_peak])
    header = (["case"] + [f"{e} ms" for e in engines] + ["hidet/ORT", "paired", "best"]
              + (["tuned/ORT"] if args.tuned is not None else []) + ["hidet GFLOP/s", "of FMA peak"])
    if args.markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
        for row in rows:
            print("| " + " | ".join(row) + " |")
    else:
        widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
        for row in [header] + rows:
            print("  ".join(str(x).ljust(w) for x, w in zip(row, widths)))
    print(f"\nthreads {args.threads}, rounds {args.rounds}, runs/round {args.runs} or more "
          f"(each measurement >= {args.min_seconds} s from round 2), "
          f"FMA peak {peak if peak else 'n/a'} GFLOP/s ({args.threads} threads)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
