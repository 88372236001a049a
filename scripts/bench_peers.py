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

The broad set (`--broad [DIR]`: every `DIR/*.onnx`, default `models/broad/`, written by
scripts/export_broad_models.py) and arbitrary models (`--model PATH`, repeatable) replace the
paper models and operator cases. Their inputs are generated from each model's declared inputs
(or from the exporter's sidecar `<stem>.json` when present): random normals for floats, token
ids in [0, rows of the embedding table the input indexes) for integer inputs read by a Gather,
ones for masks, zeros for token types, 0..n-1 for position ids; a symbolic dimension takes
`--dim NAME=N`, else the batch of a `_b<N>` file name (or `--batch`) on axis 0 and names that say
batch, else `--seq-len` (128). Before the timed rounds each such model is probed once: ONNX
Runtime runs it, `hidet run` runs it and the outputs are compared (max abs and max rel error,
rel = abs / max |ONNX Runtime|; `ok` within `--rtol`, `--qdq-rtol` for models with
QuantizeLinear), and `hidet bench --profile --runs 1` lists the host steps at those shapes. Runs
per round come from the probe times: at least `--runs` and enough for `--min-seconds` on the
faster engine, but no more than fit in `--max-seconds` on the slower one (at least one). A model
hidet cannot compile or run is a row with the first line of its error. The table (model, batch,
static/dynamic, medians, ratio, paired ratio, host steps, check) ends with geomeans of the ratio
(all, per batch and axes kind), the rows above 1.5x, and hidet's dynamic/static time per model.

Usage:
  .venv/bin/python scripts/bench_peers.py [--threads 2] [--rounds 5] [--runs 20] [--min-seconds 0.5]
      [--only SUBSTR (repeatable)] [--no-models] [--no-ops] [--markdown] [--hidet-bin PATH]
      [--tuned LEVEL] [--tract PATH]
  .venv/bin/python scripts/bench_peers.py --broad [DIR] | --model PATH ... [--only SUBSTR]
      [--rounds 3] [--max-seconds 5] [--rtol 1e-3] [--qdq-rtol 0.1] [--no-check] [--dim NAME=N]
      [--batch N] [--seq-len 128] [--save FILE.json] [--markdown]
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
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
    # Broad-set and --model cases only (see BroadInfo); None for the paper models and operators.
    broad: BroadInfo | None = None
    warmup: int | None = None


@dataclass
class BroadInfo:
    """What a broad-set case is and what its probe found (filled by `probe_case`)."""

    model: str
    batch: int | None
    dynamic: bool
    qdq: bool
    # Probe results: one-run times (ms), the comparison with ONNX Runtime, host steps.
    ort_probe_ms: float | None = None
    hidet_probe_ms: float | None = None
    max_abs: float | None = None
    max_rel: float | None = None
    check: str = "-"
    host_ops: dict[str, int] | None = None
    hidet_error: str | None = None
    # The probe's three slowest steps of hidet's launch list: (label, ms, GFLOP/s or None).
    top_steps: list[tuple[str, float, float | None]] = field(default_factory=list)


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
        raise RuntimeError(hidet_error(proc))
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


# ---------------------------------------------------------------------------------------------
# The broad set (scripts/export_broad_models.py) and arbitrary models (--model PATH)
# ---------------------------------------------------------------------------------------------

_STEM = re.compile(r"^(?P<model>.+)_b(?P<batch>\d+)(?P<dyn>_dyn)?$")
# Ops a token-id input may pass through (unchanged values) on its way to the embedding Gather.
_ID_PASSTHROUGH = {"Cast", "Reshape", "Unsqueeze", "Squeeze", "Flatten", "Identity", "Expand"}
_ONNX_DTYPES = {1: "float32", 2: "uint8", 3: "int8", 5: "int16", 6: "int32", 7: "int64", 9: "bool",
                10: "float16", 11: "float64", 12: "uint32", 13: "uint64"}


def parse_stem(stem: str) -> tuple[str, int | None, bool]:
    """(model, batch, dynamic) from an export name `<model>_b<batch>[_dyn]`; (stem, None, False) otherwise."""
    m = _STEM.match(stem)
    if not m:
        return stem, None, False
    return m["model"], int(m["batch"]), bool(m["dyn"])


def _gather_rows(graph, name: str) -> int | None:
    """Rows of the constant table that a Gather indexes with `name` (through value-preserving ops).

    Returns None when no such Gather is found: the input is not a token id.
    """
    consts: dict[str, list[int]] = {i.name: list(i.dims) for i in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.output:
            for a in node.attribute:
                if a.name == "value":
                    consts[node.output[0]] = list(a.t.dims)
    consumers: dict[str, list] = collections.defaultdict(list)
    for node in graph.node:
        for i in node.input:
            consumers[i].append(node)
    frontier, seen = [name], set()
    while frontier:
        v = frontier.pop()
        if v in seen:
            continue
        seen.add(v)
        for node in consumers.get(v, []):
            if node.op_type == "Gather" and len(node.input) > 1 and node.input[1] == v:
                dims = consts.get(node.input[0])
                axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
                if dims:
                    return dims[axis]
            elif node.op_type in _ID_PASSTHROUGH and node.input and node.input[0] == v:
                frontier.extend(node.output)
    return None


def _dim_size(param: str, axis: int, batch: int, seq_len: int, dims: dict[str, int]) -> int:
    """The concrete size of a symbolic dimension: `--dim`, else batch on axis 0 or a name saying
    batch, else the sequence length."""
    if param in dims:
        return dims[param]
    low = param.lower()
    if axis == 0 or "batch" in low or low in {"n", "b", "bs"}:
        return batch
    return seq_len


def synth_inputs(graph, path: Path, batch: int, seq_len: int, dims: dict[str, int], seed: int
                 ) -> tuple[dict[str, np.ndarray], list[str]]:
    """Inputs for every graph input of `graph` (the model at `path`), and one line per input
    saying how they were made.

    The exporter's sidecar `<stem>.json` (shape, kind, id range) wins when present; otherwise
    the declared type decides (see the module docs). Deterministic for a given `seed`.
    """
    sidecar_path = path.with_suffix(".json")
    sidecar = json.loads(sidecar_path.read_text()) if sidecar_path.exists() else {}
    hints = {i["name"]: i for i in sidecar.get("inputs", [])}
    inits = {i.name for i in graph.initializer}
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    how: list[str] = []
    for v in graph.input:
        if v.name in inits:
            continue
        t = v.type.tensor_type
        dtype = np.dtype(_ONNX_DTYPES.get(t.elem_type, "float32"))
        hint = hints.get(v.name)
        if hint:
            shape = tuple(hint["shape"])
        else:
            shape = tuple(
                d.dim_value if d.HasField("dim_value") and d.dim_value > 0
                else _dim_size(d.dim_param, axis, batch, seq_len, dims)
                for axis, d in enumerate(t.shape.dim)
            )
        low = v.name.lower()
        kind, high = (hint["kind"], hint.get("high")) if hint else (None, None)
        if kind is None:
            if dtype == np.bool_ or "mask" in low:
                kind = "ones"
            elif np.issubdtype(dtype, np.floating):
                kind = "random"
            elif (rows := _gather_rows(graph, v.name)) is not None:
                kind, high = "ids", rows
            elif "position" in low and shape:
                kind = "positions"
            else:
                kind = "zeros"
        if kind == "ids":
            value = rng.integers(0, high, size=shape).astype(dtype)
        elif kind == "ones":
            value = np.ones(shape, dtype=dtype)
        elif kind == "zeros":
            value = np.zeros(shape, dtype=dtype)
        elif kind == "positions":
            value = np.broadcast_to(np.arange(shape[-1]), shape).astype(dtype).copy()
        else:
            value = rng.standard_normal(shape).astype(dtype)
        out[v.name] = value
        how.append(f"{v.name}: {dtype}{list(shape)} {kind}" + (f" in [0, {high})" if kind == "ids" else ""))
    return out, how


def broad_cases(paths: list[Path], batch: int, seq_len: int, dims: dict[str, int]) -> list[Case]:
    """One case per ONNX file, with generated inputs; sorted by model, batch, static first."""
    import onnx

    cases = []
    for path in paths:
        model_name, file_batch, dynamic = parse_stem(path.stem)
        b = file_batch if file_batch is not None else batch
        seed = sum(path.stem.encode()) * 7919
        qdq = False
        try:
            g = onnx.load(str(path), load_external_data=False).graph
            if file_batch is None:
                inits = {i.name for i in g.initializer}
                dynamic = any(d.dim_param or not d.HasField("dim_value")
                              for v in g.input if v.name not in inits for d in v.type.tensor_type.shape.dim)
            qdq = any(
                n.op_type in ("QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear") for n in g.node
            )
            inputs, how = synth_inputs(g, path, b, seq_len, dims, seed)
            del g
        except Exception as e:  # noqa: BLE001 - an unreadable model is a row, not a crash
            inputs, how = {}, []
            err = f"inputs: {str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__}"
        else:
            err = None
        case = Case(path.stem, path, inputs, broad=BroadInfo(model_name, b, dynamic, qdq))
        if err:
            case.errors["hidet"] = case.errors["onnxruntime"] = err
        print(f"case {path.stem}: " + "; ".join(how), file=sys.stderr)
        cases.append(case)
    cases.sort(key=lambda c: (c.broad.model, c.broad.batch or 0, c.broad.dynamic))
    return cases


def hidet_error(proc: subprocess.CompletedProcess) -> str:
    """The first line of a failed hidet command's error: its `error:` line, a panic's message, or
    the last line it printed."""
    lines = [ln.strip() for ln in (proc.stderr or "").splitlines() if ln.strip()]
    for i, ln in enumerate(lines):
        if ln.startswith("error"):
            return ln
        if "panicked at" in ln:
            return "panic: " + (lines[i + 1] if i + 1 < len(lines) else ln)
    if proc.returncode < 0:
        return f"killed by signal {-proc.returncode}"
    out = [ln.strip() for ln in (proc.stdout or "").splitlines() if ln.strip()]
    return (lines or out or [f"exit status {proc.returncode}"])[-1]


def _run_hidet_cmd(args: list[str], cache: Path, timeout: float) -> subprocess.CompletedProcess:
    """Runs a hidet command; a timeout becomes a failed process whose stderr says so."""
    env = dict(os.environ, HIDET_CACHE_DIR=str(cache))
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(args, 124, "", f"error: timed out after {timeout:.0f} s")


def compare_outputs(got_dir: Path, want: dict[str, np.ndarray]) -> tuple[float, float, str | None]:
    """(max abs err, max rel err, problem) of hidet's `.npy` outputs in `got_dir` against `want`.

    rel err = max |got - want| / max |want| per output, the largest over outputs; a missing
    output, a shape difference or non-finite values where the other has finite ones is a problem.
    """
    worst_abs, worst_rel = 0.0, 0.0
    for name, ref in want.items():
        f = got_dir / (re.sub(r"[^A-Za-z0-9._-]", "_", name) + ".npy")
        if not f.exists():
            return worst_abs, worst_rel, f"hidet wrote no output {name}"
        got = np.load(f)
        if got.shape != ref.shape:
            return worst_abs, worst_rel, f"output {name}: shape {list(got.shape)} vs ORT {list(ref.shape)}"
        g, r = got.astype(np.float64), ref.astype(np.float64)
        if not np.array_equal(np.isfinite(g), np.isfinite(r)):
            return worst_abs, worst_rel, f"output {name}: non-finite values differ"
        fin = np.isfinite(r)
        if not fin.any():
            continue
        err = float(np.max(np.abs(g[fin] - r[fin])))
        scale = float(np.max(np.abs(r[fin])))
        worst_abs = max(worst_abs, err)
        worst_rel = max(worst_rel, err / scale if scale > 0 else err)
    return worst_abs, worst_rel, None


def probe_case(case: Case, hidet: Path, threads: int, work: Path, cache: Path, check: bool,
               rtol: float, qdq_rtol: float, timeout: float) -> None:
    """Run the case once on each engine before the timed rounds and fill `case.broad`.

    ONNX Runtime: two runs (outputs, and the second run's time). hidet: `hidet run` (outputs,
    compared with ONNX Runtime's unless `check` is false), then `hidet bench --profile --runs 1
    --json` (its time and the host steps of the launch list: labels `host OP NODE`). A hidet
    failure is recorded in `case.errors["hidet"]` (first line) and never raised.
    """
    info = case.broad
    want: dict[str, np.ndarray] = {}
    if "onnxruntime" not in case.errors:
        try:
            session = ort_session(case, threads)
            names = [o.name for o in session.get_outputs()]
            want = dict(zip(names, session.run(names, case.inputs)))
            t0 = time.perf_counter()
            session.run(names, case.inputs)
            info.ort_probe_ms = (time.perf_counter() - t0) * 1e3
            del session
        except Exception as e:  # noqa: BLE001 - an ORT failure is this case's row
            case.errors["onnxruntime"] = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    if "hidet" in case.errors:
        info.hidet_error = case.errors["hidet"]
        return
    tol = qdq_rtol if info.qdq else rtol
    if check:
        with tempfile.TemporaryDirectory(prefix=f"bench-{case.name}-", dir=work) as out_dir:
            args = [str(hidet), "run", str(case.model), "--threads", str(threads), "--output-dir", out_dir]
            proc = _run_hidet_cmd(args + input_args(case, work), cache, timeout)
            if proc.returncode != 0:
                info.hidet_error = case.errors["hidet"] = hidet_error(proc)
                info.check = "hidet failed"
                return
            if want:
                info.max_abs, info.max_rel, problem = compare_outputs(Path(out_dir), want)
                if problem:
                    info.check = f"MISMATCH: {problem}"
                else:
                    verdict = "ok" if info.max_rel <= tol else "MISMATCH"
                    info.check = f"{verdict} rel {info.max_rel:.1e} abs {info.max_abs:.1e}"
            else:
                info.check = "no ORT outputs"
    args = [str(hidet), "bench", str(case.model), "--threads", str(threads), "--runs", "1", "--warmup", "0",
            "--profile", "--json"]
    proc = _run_hidet_cmd(args + input_args(case, work), cache, timeout)
    if proc.returncode != 0:
        info.hidet_error = case.errors["hidet"] = hidet_error(proc)
        return
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    info.hidet_probe_ms = float(report["median_ms"])
    ops: collections.Counter = collections.Counter()
    for row in report.get("profile", []):
        label = row.get("label", "")
        if label.startswith("host "):
            ops[label.split()[1]] += 1
    info.host_ops = dict(ops.most_common())
    slowest = sorted(report.get("profile", []), key=lambda row: -float(row.get("median_ms") or 0.0))[:3]
    info.top_steps = [(row.get("label", "?"), float(row.get("median_ms") or 0.0), row.get("gflops"))
                      for row in slowest]


def broad_runs(case: Case, runs: int, warmup: int, min_seconds: float, max_seconds: float) -> tuple[int, int]:
    """(runs, warmup) per round for a probed case: at least `runs` and enough that the faster
    engine's measurement lasts `min_seconds`, at most what fits in `max_seconds` at the slower
    engine's time (never fewer than one run); one warmup run where `warmup` would not fit."""
    times = [t for t in (case.broad.ort_probe_ms, case.broad.hidet_probe_ms) if t and t > 0]
    if not times:
        return runs, warmup
    fastest, slowest = min(times), max(times)
    n = max(runs, math.ceil(min_seconds * 1e3 / fastest))
    n = min(n, 100_000, max(1, int(max_seconds * 1e3 / slowest)))
    w = warmup if warmup * slowest <= max_seconds * 1e3 else min(warmup, 1)
    return n, w


def _geomean(xs: list[float]) -> float | None:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def _host_cell(info: BroadInfo) -> str:
    if info.host_ops is None:
        return "-"
    n = sum(info.host_ops.values())
    if not n:
        return "0"
    return f"{n}: " + ", ".join(f"{op}×{k}" for op, k in info.host_ops.items())


def broad_report(cases: list[Case], markdown: bool, engines: list[str]) -> tuple[str, list[dict]]:
    """The broad table and its summary (geomeans, rows above 1.5x, dynamic vs static), as text,
    and one JSON-able record per case."""
    header = ["model", "batch", "shapes"] + [f"{e} ms" for e in engines] + ["hidet/ORT", "paired", "host steps",
                                                                             "check vs ORT"]
    rows, records, ratios = [], [], []
    groups: dict[str, list[float]] = collections.defaultdict(list)
    by_key: dict[tuple[str, int | None, bool], Case] = {}
    for case in cases:
        info = case.broad
        med = {e: statistics.median(t) for e, t in case.times.items() if t}
        h, o = med.get("hidet"), med.get("onnxruntime")
        ratio = h / o if h and o else None
        hs, os_ = case.times.get("hidet", []), case.times.get("onnxruntime", [])
        pairs = [a / b for a, b in zip(hs, os_)] if hs and len(hs) == len(os_) else []
        shapes = "dynamic" if info.dynamic else "static"
        if ratio:
            ratios.append(ratio)
            groups[f"batch {info.batch} {shapes}"].append(ratio)
        by_key[(info.model, info.batch, info.dynamic)] = case

        def cell(e: str) -> str:
            if e in med:
                return f"{med[e]:.2f}"
            return "error: " + case.errors.get(e, "?").replace("|", "/")[:160]

        rows.append([info.model, str(info.batch or "-"), shapes] + [cell(e) for e in engines]
                    + [f"{ratio:.2f}" if ratio else "-", f"{statistics.median(pairs):.2f}" if pairs else "-",
                       _host_cell(info), info.check])
        records.append({"case": case.name, "model": info.model, "batch": info.batch, "dynamic": info.dynamic,
                        "times_ms": case.times, "median_ms": med, "ratio": ratio,
                        "paired": statistics.median(pairs) if pairs else None, "host_ops": info.host_ops,
                        "max_abs": info.max_abs, "max_rel": info.max_rel, "check": info.check,
                        "errors": case.errors, "runs": case.runs, "warmup": case.warmup,
                        "probe_ms": {"hidet": info.hidet_probe_ms, "onnxruntime": info.ort_probe_ms},
                        "top_steps": info.top_steps})
    lines = []
    if markdown:
        lines.append("| " + " | ".join(header) + " |")
        lines.append("|" + "---|" * len(header))
        lines += ["| " + " | ".join(r) + " |" for r in rows]
    else:
        widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
        lines += ["  ".join(str(x).ljust(w) for x, w in zip(r, widths)) for r in [header] + rows]
    lines.append("")
    g = _geomean(ratios)
    lines.append(f"geomean hidet/ORT over {len(ratios)} of {len(cases)} rows: " + (f"{g:.2f}" if g else "-"))
    for name, xs in sorted(groups.items()):
        lines.append(f"  {name}: {_geomean(xs):.2f} over {len(xs)} rows")
    above = [(c.name, statistics.median(c.times['hidet']) / statistics.median(c.times['onnxruntime']))
             for c in cases if c.times.get("hidet") and c.times.get("onnxruntime")]
    above = sorted([a for a in above if a[1] > 1.5], key=lambda a: -a[1])
    lines.append(f"rows above 1.5x: {len(above)}" + (": " + ", ".join(f"{n} {r:.1f}x" for n, r in above)
                                                     if above else ""))
    named = {c.name: c for c in cases}
    for n, _ in above:
        steps = named[n].broad.top_steps
        if steps:
            lines.append(f"  {n} slowest steps (probe, profiled): " + "; ".join(
                f"{label} {ms:.1f} ms" + (f" {g:.1f} GFLOP/s" if g else "") for label, ms, g in steps))
    failed = [c.name for c in cases if "hidet" in c.errors]
    lines.append(f"hidet failures: {len(failed)}" + (": " + ", ".join(failed) if failed else ""))
    with_host = [c.name for c in cases if c.broad.host_ops]
    lines.append(f"rows with host steps: {len(with_host)}" + (": " + ", ".join(with_host) if with_host else ""))
    dyn = []
    for (model, batch, dynamic), case in sorted(by_key.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0)):
        static = by_key.get((model, batch, False))
        if not dynamic or static is None:
            continue
        ratios_by_engine = {}
        for e in ("hidet", "onnxruntime"):
            pairs = [a / b for a, b in zip(case.times.get(e, []), static.times.get(e, []))]
            ratios_by_engine[e] = f"{statistics.median(pairs):.2f}" if pairs else "-"
        if ratios_by_engine["hidet"] != "-":
            dyn.append(f"{model} b{batch} {ratios_by_engine['hidet']} ({ratios_by_engine['onnxruntime']})")
    if dyn:
        lines.append("dynamic/static time at the same shape, median over rounds, hidet (ONNX Runtime's, a noise "
                     "gauge): " + ", ".join(dyn))
    return "\n".join(lines), records


def _parse_dim(text: str) -> tuple[str, int]:
    name, _, value = text.partition("=")
    if not name or not value.isdigit():
        raise argparse.ArgumentTypeError(f"--dim takes NAME=N, not {text!r}")
    return name, int(value)


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
    broad = p.add_argument_group("broad set and arbitrary models (replace the paper models and operators)")
    broad.add_argument("--broad", nargs="?", type=Path, const=ROOT / "models" / "broad", metavar="DIR",
                       help="every DIR/*.onnx (default models/broad, from scripts/export_broad_models.py)")
    broad.add_argument("--model", action="append", type=Path, default=[], metavar="PATH",
                       help="an ONNX file to benchmark (repeatable)")
    broad.add_argument("--dim", action="append", type=_parse_dim, default=[], metavar="NAME=N",
                       help="size of a symbolic dimension (repeatable)")
    broad.add_argument("--batch", type=int, default=1, help="batch of files whose name has no _b<N> (default 1)")
    broad.add_argument("--seq-len", type=int, default=128, help="other symbolic dimensions (default 128)")
    broad.add_argument("--max-seconds", type=float, default=5.0,
                       help="at most this long per measurement on the slower engine (at least one run)")
    broad.add_argument("--rtol", type=float, default=1e-3, help="max rel error vs ONNX Runtime for `ok`")
    # QDQ models amplify rounding: a float sum that lands on the other side of a rounding
    # boundary in one of many QuantizeLinear nodes moves the output by whole quantization steps.
    # ONNX Runtime and onnx's own reference evaluator differ by 8.2% of the largest output on
    # mobilenet_v3_small_qdq_b1 (1.7% on resnet18_qdq_b1); a wrong scale or zero point is off by
    # far more.
    broad.add_argument("--qdq-rtol", type=float, default=0.1,
                       help="max rel error for models with QuantizeLinear/DequantizeLinear (default 0.1)")
    broad.add_argument("--no-check", action="store_true", help="skip `hidet run` and the comparison")
    broad.add_argument("--timeout", type=float, default=3600, help="seconds per hidet command")
    broad.add_argument("--save", type=Path, metavar="FILE", help="also write the results as JSON")
    args = p.parse_args(argv)

    rng = np.random.default_rng(0)
    work = ROOT / "target" / "bench-cases"
    work.mkdir(parents=True, exist_ok=True)
    if args.broad or args.model:
        paths = sorted(args.broad.glob("*.onnx")) if args.broad else []
        if args.broad and not paths:
            print(f"no .onnx files in {args.broad} (scripts/export_broad_models.py writes them)", file=sys.stderr)
        paths += args.model
        if args.only:
            paths = [q for q in paths if any(s in q.stem for s in args.only)]
        cases = broad_cases(paths, args.batch, args.seq_len, dict(args.dim))
    else:
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
        if case.broad is not None:
            continue  # a session per round (the broad set's sessions would not all fit in memory)
        try:
            sessions[case.name] = ort_session(case, args.threads)
        except Exception as e:  # noqa: BLE001 - report any ORT failure per case
            case.errors["onnxruntime"] = str(e).splitlines()[0]
    for k, case in enumerate(c for c in cases if c.broad is not None):
        started = time.perf_counter()
        probe_case(case, hidet, args.threads, work, caches["hidet"], not args.no_check, args.rtol,
                   args.qdq_rtol, args.timeout)
        case.runs, case.warmup = broad_runs(case, args.runs, args.warmup, args.min_seconds, args.max_seconds)
        info = case.broad
        ort_text = f"{info.ort_probe_ms:.2f} ms" if info.ort_probe_ms else case.errors.get("onnxruntime")
        hidet_text = f"{info.hidet_probe_ms:.2f} ms" if info.hidet_probe_ms else info.hidet_error
        print(f"probe {case.name} ({time.perf_counter() - started:.0f} s): ORT {ort_text}, hidet {hidet_text}, "
              f"host steps {_host_cell(info)}, check {info.check}; {case.runs} runs, {case.warmup} warmup per round",
              file=sys.stderr)

    for r in range(args.rounds):
        for case in cases:
            for engine in engines:
                if engine in case.errors:
                    continue
                try:
                    runs = case.runs or args.runs
                    warmup = case.warmup if case.warmup is not None else args.warmup
                    if engine in caches:
                        ms = run_hidet(hidet, case, args.threads, runs, warmup, work,
                                       caches[engine])
                    elif engine == "onnxruntime" and case.broad is not None:
                        session = ort_session(case, args.threads)
                        ms = time_ort(session, case, runs, warmup)
                        del session
                    elif engine == "onnxruntime":
                        ms = time_ort(sessions[case.name], case, runs, args.warmup)
                    else:
                        ms = run_tract(args.tract, case, args.threads)
                    case.times.setdefault(engine, []).append(ms)
                except Exception as e:  # noqa: BLE001 - one failing engine must not stop the others
                    case.errors[engine] = str(e)
                time.sleep(SETTLE_SECONDS)
            if case.broad is not None:
                got = ", ".join(f"{e} {case.times[e][-1]:.2f} ms" for e in engines if len(case.times.get(e, [])) > r)
                print(f"round {r + 1} {case.name}: {got or 'no times'}", file=sys.stderr)
        if r == 0:
            for case in cases:
                if case.broad is None:
                    case.runs = runs_for(case, args.runs, args.min_seconds)
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)

    broad_cases_ = [c for c in cases if c.broad is not None]
    if broad_cases_:
        text, records = broad_report(broad_cases_, args.markdown, engines)
        print(text)
        print(f"\nthreads {args.threads}, rounds {args.rounds}, runs/round >= {args.runs} and measurements "
              f">= {args.min_seconds} s on the faster engine, <= {args.max_seconds} s on the slower (>= 1 run); "
              f"check tolerance {args.rtol:g} (QDQ {args.qdq_rtol:g})")
        if args.save:
            args.save.write_text(json.dumps({"argv": argv, "threads": args.threads, "rounds": args.rounds,
                                             "engines": engines, "cases": records}, indent=2) + "\n")
            print(f"wrote {args.save}", file=sys.stderr)
    cases = [c for c in cases if c.broad is None]
    if not cases:
        return 0

    peak = fma_peak(args.threads) if any(c.flops for c in cases) else None
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
