#!/usr/bin/env python3
"""Run `hidet run` on exported models and compare its outputs with ONNX Runtime's.

  compare_with_ort.py MODEL_DIR... [--hidet-bin PATH] [--rtol 1e-3] [--reference]
                      [--threads N] [--timeout SECONDS] [--keep DIR]

MODEL_DIR is a folder written by scripts/export_paper_models.py:
  model.onnx, inputs/<input name>.npy, ort_outputs/<sanitized output name>.npy
(manifest.json, when present, supplies the original tensor names for printing).

For each model this runs
  hidet run MODEL_DIR/model.onnx --input NAME=MODEL_DIR/inputs/NAME.npy ... --output-dir TMP
and, for every ONNX Runtime output, loads TMP/<same file name> and prints
  max abs err      max |hidet - ort|
  max rel err      max abs err / max |ort|   (the error relative to the output's scale)
  PASS / FAIL      max rel err <= rtol, same shape, no NaN/Inf that ORT does not have
A model whose run fails prints hidet's error text. Exit status: 0 if every model
passes, 1 if any fails, 2 on a usage error. Needs only numpy.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
ERROR_TAIL_CHARS = 4000
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def sanitize(name: str) -> str:
    """The file stem hidet and the exporter use for a tensor name: [^A-Za-z0-9._-] -> '_'."""
    return _UNSAFE.sub("_", name)


@dataclass
class OutputResult:
    name: str
    ok: bool
    detail: str


@dataclass
class ModelResult:
    model_dir: Path
    ok: bool = False
    error: str | None = None
    seconds: float = 0.0
    outputs: list[OutputResult] = field(default_factory=list)


def default_hidet_bin() -> Path | None:
    """The first of target/release/hidet, target/debug/hidet that exists (CARGO_TARGET_DIR honoured)."""
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO_ROOT / "target"))
    for profile in ("release", "debug"):
        p = target / profile / "hidet"
        if p.is_file() and os.access(p, os.X_OK):
            return p
    return None


def _names(model_dir: Path) -> tuple[list[tuple[str, Path]], list[tuple[str, Path]]]:
    """(input name, file) and (output name, ORT file) pairs of a model folder."""
    manifest = model_dir / "manifest.json"
    if manifest.is_file():
        m = json.loads(manifest.read_text())
        ins = [(v["name"], model_dir / "inputs" / v["file"]) for v in m["inputs"]]
        outs = [(v["name"], model_dir / "ort_outputs" / v["file"]) for v in m["outputs"]]
    else:
        ins = [(p.stem, p) for p in sorted((model_dir / "inputs").glob("*.npy"))]
        outs = [(p.stem, p) for p in sorted((model_dir / "ort_outputs").glob("*.npy"))]
    return ins, outs


def compare_arrays(got: np.ndarray, ref: np.ndarray, rtol: float) -> tuple[bool, str]:
    """Whether `got` matches `ref` within `rtol` relative to max |ref|, and a one-line account."""
    if got.shape != ref.shape:
        return False, f"shape {list(got.shape)} != expected {list(ref.shape)}"
    dtype_note = "" if got.dtype == ref.dtype else f" (dtype {got.dtype}, expected {ref.dtype})"
    if ref.dtype.kind in "biu" and got.dtype.kind in "biu":
        diff = int(np.count_nonzero(got.astype(np.int64) != ref.astype(np.int64)))
        return diff == 0 and not dtype_note, f"{diff} of {ref.size} elements differ{dtype_note}"
    g = got.astype(np.float64)
    r = ref.astype(np.float64)
    bad_g, bad_r = ~np.isfinite(g), ~np.isfinite(r)
    if np.any(bad_g != bad_r) or np.any(g[bad_g] != r[bad_r]):
        return False, f"{int(np.count_nonzero(bad_g))} non-finite values where ORT has {int(np.count_nonzero(bad_r))}"
    fin = ~bad_r
    if not np.any(fin):
        return not dtype_note, f"all {ref.size} values non-finite and equal{dtype_note}"
    abs_err = float(np.max(np.abs(g[fin] - r[fin])))
    scale = float(np.max(np.abs(r[fin])))
    rel_err = abs_err / scale if scale > 0 else abs_err
    ok = rel_err <= rtol and not dtype_note
    return ok, f"max abs err {abs_err:.3e}  max rel err {rel_err:.3e}  (max |ref| {scale:.3e}){dtype_note}"


def run_model(model_dir: Path, hidet: list[str], args: argparse.Namespace) -> ModelResult:
    res = ModelResult(model_dir)
    model = model_dir / "model.onnx"
    if not model.is_file():
        res.error = f"{model} does not exist (run scripts/export_paper_models.py)"
        return res
    ins, outs = _names(model_dir)
    missing = [str(p) for _, p in ins + outs if not p.is_file()]
    if not ins or not outs or missing:
        res.error = "incomplete model folder: " + (", ".join(missing) or "no inputs/ or ort_outputs/ files")
        return res

    out_dir = Path(tempfile.mkdtemp(prefix=f"hidet-{model_dir.name}-"))
    try:
        cmd = hidet + ["run", str(model)]
        for name, path in ins:
            cmd += ["--input", f"{name}={path}"]
        cmd += ["--output-dir", str(out_dir)]
        if args.reference:
            cmd.append("--reference")
        if args.threads is not None:
            cmd += ["--threads", str(args.threads)]
        print("  $ " + " ".join(cmd), flush=True)
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=args.timeout)
        except subprocess.TimeoutExpired:
            res.error = f"hidet did not finish within {args.timeout} s"
            return res
        except OSError as e:
            res.error = f"cannot start {cmd[0]}: {e}"
            return res
        finally:
            res.seconds = time.perf_counter() - t0
        if proc.returncode != 0:
            text = (proc.stderr.strip() or proc.stdout.strip() or "(no output)")[-ERROR_TAIL_CHARS:]
            res.error = f"hidet exited with status {proc.returncode}:\n" + _indent(text, "    | ")
            return res

        all_ok = True
        for name, ref_path in outs:
            got_path = out_dir / ref_path.name
            if not got_path.is_file():
                r = OutputResult(name, False, f"hidet wrote no {got_path.name}")
            else:
                try:
                    ok, detail = compare_arrays(np.load(got_path), np.load(ref_path), args.rtol)
                except (ValueError, OSError) as e:
                    ok, detail = False, f"cannot read {got_path.name}: {e}"
                r = OutputResult(name, ok, detail)
            all_ok &= r.ok
            res.outputs.append(r)
        res.ok = all_ok
        return res
    finally:
        if args.keep:
            dest = args.keep / model_dir.name
            shutil.rmtree(dest, ignore_errors=True)
            shutil.copytree(out_dir, dest)
        shutil.rmtree(out_dir, ignore_errors=True)


def _indent(text: str, prefix: str) -> str:
    return "\n".join(prefix + line for line in text.splitlines())


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model_dirs", nargs="+", type=Path, metavar="MODEL_DIR")
    p.add_argument(
        "--hidet-bin", type=Path, help="the hidet executable (default: target/release/hidet, then target/debug/hidet)"
    )
    p.add_argument(
        "--rtol", type=float, default=1e-3, help="tolerance on max |hidet - ort| / max |ort| per output (default 1e-3)"
    )
    p.add_argument("--reference", action="store_true", help="pass --reference to hidet run")
    p.add_argument("--threads", type=int, help="pass --threads N to hidet run")
    p.add_argument("--timeout", type=float, default=3600, help="seconds allowed per model (default 3600)")
    p.add_argument("--keep", type=Path, help="copy hidet's outputs to KEEP/<model folder name>/")
    args = p.parse_args(argv)

    hidet_bin = args.hidet_bin or default_hidet_bin()
    if hidet_bin is None:
        print(
            "error: no hidet binary; build it with `cargo build --release -p hidet` or pass --hidet-bin PATH",
            file=sys.stderr,
        )
        return 2
    if not (hidet_bin.is_file() and os.access(hidet_bin, os.X_OK)):
        print(f"error: {hidet_bin} is not an executable file", file=sys.stderr)
        return 2

    results = []
    for model_dir in args.model_dirs:
        print(f"== {model_dir}", flush=True)
        r = run_model(model_dir, [str(hidet_bin)], args)
        if r.error:
            print(f"  FAIL  {r.error}")
        for o in r.outputs:
            print(f"  {'PASS' if o.ok else 'FAIL'}  {o.name}: {o.detail}")
        print(f"  {'PASS' if r.ok else 'FAIL'}  {model_dir.name} ({r.seconds:.1f} s, rtol {args.rtol:g})", flush=True)
        results.append(r)

    passed = sum(r.ok for r in results)
    print(f"\n{passed} passed, {len(results) - passed} failed")
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
