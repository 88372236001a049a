#!/usr/bin/env python3
"""hidet against PyTorch, one row per model: the device check's model table (issue 30, item 6).

For each zoo model NAME (default: the five paper models), on one device (`--device cuda` on
the lent GPU machine, `--device cpu` anywhere, to try the script):

1. `hidet export zoo:NAME` writes the model (seeded weights) as ONNX, and seeded inputs are
   written as .npy (token ids within the smallest table they index, masks of ones).
2. `hidet run zoo:NAME --device D` computes hidet's outputs; `hidet bench zoo:NAME --device D
   --check --json` gives hidet's median latency with CUDA graphs and its largest relative
   difference from hidet's reference executor (on the CPU), and a second bench the latency
   without CUDA graphs (HIDET_CUDA_GRAPHS=0).
3. In a subprocess per (model, mode), the ONNX file becomes a torch module of plain torch
   calls (scripts/gpu/onnx_to_torch.py), fp32 with TF32 off, and runs eager, then under
   `torch.compile` (modes `default` and `max-autotune-no-cudagraphs`). Each reports its
   median latency, its compile time and its largest relative error against hidet's outputs
   (max |hidet - torch| / max |torch| over each output, the largest over outputs).

Latency is measured the way `hidet bench` measures it: wall clock from host inputs to host
outputs (copies included), median of `--runs` runs after warm-up. torch.compile rows run
while `--compile-budget` seconds remain (compiling with max-autotune takes minutes); a row
that does not fit says so. Exits 1 when an error is above `--tolerance` (1e-3) or a step
failed.

Needs: python3 with torch (with CUDA for --device cuda), numpy and onnx (the GPU machine has
them).

    python3 scripts/gpu/torch_peers.py --hidet .gpu/bin/hidet --device cuda
    python3 scripts/gpu/torch_peers.py --hidet target/release/hidet --device cpu \\
        --models tiny_cnn,tiny_bert --compile-modes default
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

PAPER_MODELS = ["resnet50", "inception_v3", "mobilenet_v2", "bert_base", "gpt2"]
COMPILE_MODES = ["default", "max-autotune-no-cudagraphs"]
SEED = 20230325

# Operators that pass an index tensor through unchanged in value (for finding the table an
# integer input indexes).
_PASS_THROUGH = {"Cast", "Reshape", "Unsqueeze", "Squeeze", "Flatten", "Identity"}


def synthesize_inputs(model, seed: int = SEED) -> dict[str, np.ndarray]:
    """Seeded inputs for every graph input of `model` (an onnx.ModelProto, fixed shapes):
    integer inputs that index a Gather table (directly or through a value-preserving
    operator) get ids in [0, rows) of the smallest such table; inputs named like a mask get
    ones; other integers [0, 10); floats standard normal."""
    rng = np.random.default_rng(seed)
    graph = model.graph
    initializers = {t.name: t for t in graph.initializer}
    consumers: dict[str, list] = {}
    for node in graph.node:
        for slot, name in enumerate(node.input):
            consumers.setdefault(name, []).append((node, slot))

    def table_rows(name: str, depth: int = 0) -> int | None:
        rows = []
        for node, slot in consumers.get(name, []):
            if node.op_type == "Gather" and slot == 1 and node.input[0] in initializers:
                axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
                rows.append(int(initializers[node.input[0]].dims[axis]))
            elif node.op_type in _PASS_THROUGH and slot == 0 and depth < 8:
                found = table_rows(node.output[0], depth + 1)
                if found is not None:
                    rows.append(found)
        return min(rows) if rows else None

    dtypes = {1: np.float32, 6: np.int32, 7: np.int64, 9: np.bool_, 11: np.float64}
    feeds = {}
    for value in graph.input:
        if value.name in initializers:
            continue
        tensor_type = value.type.tensor_type
        dtype = dtypes.get(tensor_type.elem_type)
        if dtype is None:
            raise ValueError(f"input `{value.name}`: element type {tensor_type.elem_type} not supported here")
        shape = [d.dim_value for d in tensor_type.shape.dim]
        if any(d.dim_param or d.dim_value <= 0 for d in tensor_type.shape.dim):
            raise ValueError(f"input `{value.name}`: symbolic shape {shape}; export a static model")
        if "mask" in value.name.lower():
            feeds[value.name] = np.ones(shape, dtype=dtype)
        elif np.issubdtype(dtype, np.integer):
            rows = table_rows(value.name) or 10
            feeds[value.name] = rng.integers(0, rows, size=shape).astype(dtype)
        elif dtype == np.bool_:
            feeds[value.name] = rng.random(shape) < 0.5
        else:
            feeds[value.name] = rng.standard_normal(shape).astype(dtype)
    return feeds


def max_relative_error(got: list[np.ndarray], want: list[np.ndarray]) -> float:
    """The largest over outputs of max |got - want| / max |want| (shapes must agree)."""
    worst = 0.0
    for g, w in zip(got, want, strict=True):
        if g.shape != w.shape:
            raise ValueError(f"output shapes differ: {g.shape} vs {w.shape}")
        g64, w64 = g.astype(np.float64), w.astype(np.float64)
        scale = max(float(np.abs(w64).max(initial=0.0)), 1e-30)
        worst = max(worst, float(np.abs(g64 - w64).max(initial=0.0)) / scale)
    return worst


def last_json_line(text: str) -> dict:
    """The last line of `text` that parses as a JSON object (`hidet bench --json` prints its
    report as the last line)."""
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                continue
    raise ValueError("no JSON line in the output")


def format_table(rows: list[dict], device: str = "cuda") -> str:
    """The markdown table of the rows (missing cells as their reason or `-`)."""
    head = [
        "model",
        "max rel. err vs torch",
        "max rel. diff vs hidet reference",
        "hidet, CUDA graphs (ms)" if device == "cuda" else "hidet (ms)",
        "hidet, stream (ms)",
        "torch eager (ms)",
        "torch.compile default (ms)",
        "torch.compile max-autotune-no-cudagraphs (ms)",
    ]
    keys = [
        "error",
        "reference_diff",
        "hidet_graphs_ms",
        "hidet_stream_ms",
        "eager_ms",
        "default_ms",
        "max-autotune-no-cudagraphs_ms",
    ]

    def cell(value) -> str:
        if value is None:
            return "-"
        if isinstance(value, float):
            return f"{value:.2e}" if value < 1e-2 else f"{value:.3f}"
        return str(value)

    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        lines.append("| " + " | ".join([row["model"]] + [cell(row.get(k)) for k in keys]) + " |")
    return "\n".join(lines)


# --- the worker: one model, one mode, in its own process -----------------------------------


def worker(args) -> dict:
    import onnx
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from onnx_to_torch import convert

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    work = Path(args.work)
    model = onnx.load(str(work / f"{args.worker}.onnx"))
    names = [v.name for v in model.graph.input if v.name not in {t.name for t in model.graph.initializer}]
    outputs = [v.name for v in model.graph.output]
    module = convert(model).to(args.device).eval()
    del model
    host = [torch.from_numpy(np.load(work / f"{args.worker}_inputs" / f"{n}.npy")) for n in names]
    if args.mode != "eager":
        module = torch.compile(module, mode=None if args.mode == "default" else args.mode)

    def sync():
        if args.device == "cuda":
            torch.cuda.synchronize()

    def run():
        with torch.inference_mode():
            out = module(*[x.to(args.device) for x in host])
            out = out if isinstance(out, (list, tuple)) else [out]
            return [o.cpu().numpy() for o in out]

    start = time.perf_counter()
    got = run()
    compile_s = time.perf_counter() - start
    for _ in range(3):
        run()
    times = []
    for _ in range(args.runs):
        sync()
        t = time.perf_counter()
        run()
        times.append((time.perf_counter() - t) * 1e3)
    hidet_dir = work / f"{args.worker}_hidet"
    error = None
    if all((hidet_dir / f"{_sanitize(o)}.npy").exists() for o in outputs):
        hidet_out = [np.load(hidet_dir / f"{_sanitize(o)}.npy") for o in outputs]
        error = max_relative_error(hidet_out, got)
    return {"median_ms": float(np.median(times)), "first_run_s": compile_s, "error": error}


def _sanitize(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)


# --- the driver ------------------------------------------------------------------------------


def _hidet(args, *cli: str, graphs: bool = True, timeout: float = 300) -> str:
    env = dict(os.environ, HIDET_CUDA_GRAPHS="1" if graphs else "0")
    done = subprocess.run(
        [args.hidet, *cli], env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"hidet {' '.join(cli[:2])}: {done.stderr.strip()[:300]}")
    return done.stdout


def _torch_row(args, name: str, mode: str, timeout: float) -> dict:
    cmd = [
        sys.executable, __file__, "--worker", name, "--mode", mode, "--work", str(args.work),
        "--device", args.device, "--runs", str(args.runs),
    ]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, check=False)
    except subprocess.TimeoutExpired:
        return {"failed": f"over {timeout:.0f} s"}
    if done.returncode != 0:
        return {"failed": done.stderr.strip().splitlines()[-1][:200] if done.stderr.strip() else "failed"}
    return last_json_line(done.stdout)


def drive(args) -> int:
    import onnx

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    models = [m for m in args.models.split(",") if m]
    modes = [m for m in args.compile_modes.split(",") if m]
    rows, status = [], 0
    for name in models:
        row = {"model": name}
        rows.append(row)
        for stale in (f"{name}_hidet", f"{name}_inputs"):
            shutil.rmtree(work / stale, ignore_errors=True)
        try:
            _hidet(args, "export", f"zoo:{name}", "-o", str(work / f"{name}.onnx"))
            feeds = synthesize_inputs(onnx.load(str(work / f"{name}.onnx"), load_external_data=False))
            (work / f"{name}_inputs").mkdir(exist_ok=True)
            flags = []
            for key, value in feeds.items():
                path = work / f"{name}_inputs" / f"{key}.npy"
                np.save(path, value)
                flags += ["--input", f"{key}={path}"]
            device = ["--device", args.device]
            _hidet(args, "run", f"zoo:{name}", *flags, *device, "--output-dir", str(work / f"{name}_hidet"))
            bench = ["bench", f"zoo:{name}", *flags, *device, "--runs", str(args.runs), "--json"]
            report = last_json_line(_hidet(args, *bench, "--check"))
            row["hidet_graphs_ms"], row["reference_diff"] = report["median_ms"], report["max_rel_diff"]
            if args.device == "cuda":
                row["hidet_stream_ms"] = last_json_line(_hidet(args, *bench, graphs=False))["median_ms"]
        except (RuntimeError, ValueError, subprocess.TimeoutExpired) as e:
            row["error"] = f"hidet failed: {e}"
            print(f"{name}: {row['error']}", file=sys.stderr)
            status = 1
            if not (work / f"{name}_inputs").is_dir():
                continue
        # PyTorch's rows are measured even when hidet failed (then without an error column).
        eager = _torch_row(args, name, "eager", timeout=120)
        if "failed" in eager:
            row["error"] = row.get("error") or f"torch failed: {eager['failed']}"
            status = 1
        else:
            row["eager_ms"] = eager["median_ms"]
            if eager["error"] is not None:
                row["error"] = eager["error"]
                if eager["error"] > args.tolerance:
                    status = 1
        print(f"{name}: {json.dumps(row)}", flush=True)
    deadline = time.monotonic() + args.compile_budget
    for mode in modes:
        for row in rows:
            if "eager_ms" not in row:
                continue
            left = deadline - time.monotonic()
            if left < 20:
                row[f"{mode}_ms"] = "no time left"
                continue
            result = _torch_row(args, row["model"], mode, timeout=left)
            row[f"{mode}_ms"] = result.get("median_ms", result.get("failed"))
            if "first_run_s" in result:
                row[f"{mode}_compile_s"] = round(result["first_run_s"], 1)
            print(f"{row['model']} torch.compile {mode}: {json.dumps(result)}", flush=True)
    print()
    print(format_table(rows, args.device))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return status


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hidet", default="target/release/hidet", help="the hidet binary")
    p.add_argument("--models", default=",".join(PAPER_MODELS), help="comma-separated zoo names")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--work", default="/tmp/hidet_torch_peers", help="scratch folder")
    p.add_argument("--runs", type=int, default=30, help="timed runs per row (median)")
    p.add_argument("--compile-modes", default=",".join(COMPILE_MODES), help="torch.compile modes, comma-separated")
    p.add_argument("--compile-budget", type=float, default=300, help="seconds for all torch.compile rows")
    p.add_argument("--tolerance", type=float, default=1e-3, help="largest relative error allowed")
    p.add_argument("--json", help="write the rows to this file")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--mode", default="eager", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args)))
        return 0
    return drive(args)


if __name__ == "__main__":
    sys.exit(main())
