#!/usr/bin/env python3
"""Measure float32 outputs against a float64 evaluation of the same ONNX model.

  float64_reference.py MODEL_DIR... [--outputs LABEL=DIR]... [--save]

MODEL_DIR is a folder of scripts/export_paper_models.py (model.onnx, inputs/,
ort_outputs/, manifest.json). The model is rewritten to float64 (every float32
initializer, Constant / ConstantOfShape value, graph input and output, and
Cast or `dtype` target) and evaluated by onnx's Python reference evaluator
(`onnx.reference`, numpy; independent of ONNX Runtime and of hidet). For every
output it prints the max rel err (max |x - f64| / max |f64|) of ONNX Runtime's
float32 output and of each `--outputs LABEL=DIR`, whose files are read from
DIR/<model folder name>/<output file> (the layout `compare_with_ort.py --keep
DIR` writes). Errors of the same size as ONNX Runtime's are float32
accumulation-order differences, not bugs.

`--save` writes the float64 outputs to MODEL_DIR/f64_outputs/. Exit status:
0 when every model was evaluated, 1 otherwise, 2 on a usage error. Needs numpy
and onnx (the project .venv).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

SCRIPTS = Path(__file__).resolve().parent
sys.path.insert(0, str(SCRIPTS))
from compare_with_ort import _names  # noqa: E402  (the model-folder layout, one definition)


class ConversionError(Exception):
    """The model uses something the float64 rewrite does not handle."""


def to_float64(model):
    """A copy of `model` computing in float64 wherever it computed in float32.

    Raises ConversionError for subgraphs (If/Loop/Scan bodies are not rewritten).
    """
    import onnx
    from onnx import TensorProto, numpy_helper

    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph

    def f64_tensor(t):
        return numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float64), t.name)

    for t in g.initializer:
        if t.data_type == TensorProto.FLOAT:
            t.CopyFrom(f64_tensor(t))
    for vi in list(g.input) + list(g.output):
        if vi.type.tensor_type.elem_type == TensorProto.FLOAT:
            vi.type.tensor_type.elem_type = TensorProto.DOUBLE
    del g.value_info[:]  # float32 annotations of intermediates would be stale
    for n in g.node:
        for a in n.attribute:
            if a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
                raise ConversionError(f"node {n.name or n.op_type} ({n.op_type}) has a subgraph")
            if a.type == onnx.AttributeProto.TENSOR and a.t.data_type == TensorProto.FLOAT:
                a.t.CopyFrom(f64_tensor(a.t))
            if a.name in ("to", "dtype") and a.type == onnx.AttributeProto.INT and a.i == TensorProto.FLOAT:
                a.i = TensorProto.DOUBLE
    return m


def evaluate_float64(model_dir: Path) -> dict[str, np.ndarray]:
    """The float64 outputs of MODEL_DIR's model on its inputs, keyed by output file name.

    Raises ConversionError when an output that ONNX Runtime gives as float32
    does not come out as float64 (a float32 computation the rewrite missed).
    """
    import onnx
    from onnx.reference import ReferenceEvaluator

    ins, outs = _names(model_dir)
    model = to_float64(onnx.load(str(model_dir / "model.onnx")))
    feeds = {}
    for name, path in ins:
        x = np.load(path)
        feeds[name] = x.astype(np.float64) if x.dtype == np.float32 else x
    values = ReferenceEvaluator(model).run(None, feeds)
    names = [o.name for o in model.graph.output]
    by_name = dict(zip(names, values))
    result = {}
    for name, ort_path in outs:
        v = np.asarray(by_name[name])
        if np.load(ort_path).dtype == np.float32 and v.dtype != np.float64:
            raise ConversionError(f"output {name} came out as {v.dtype}, not float64")
        result[ort_path.name] = v
    return result


def rel_err(got: np.ndarray, ref: np.ndarray) -> float:
    """max |got - ref| / max |ref| over the finite values of ref (ref's shape is required)."""
    if got.shape != ref.shape:
        raise ValueError(f"shape {list(got.shape)} != float64 shape {list(ref.shape)}")
    r = ref.astype(np.float64)
    fin = np.isfinite(r)
    diff = np.abs(got.astype(np.float64)[fin] - r[fin])
    if diff.size == 0:
        return 0.0
    scale = float(np.max(np.abs(r[fin])))
    err = float(np.max(diff))
    return err / scale if scale > 0 else err


def report_model(model_dir: Path, outputs: list[tuple[str, Path]], save: bool) -> bool:
    t0 = time.perf_counter()
    try:
        f64 = evaluate_float64(model_dir)
    except (ConversionError, OSError, ValueError, KeyError) as e:
        print(f"  FAIL  {model_dir.name}: {e}")
        return False
    print(f"  float64 evaluation: {time.perf_counter() - t0:.1f} s")
    if save:
        (model_dir / "f64_outputs").mkdir(exist_ok=True)
    ok = True
    for name, ort_path in _names(model_dir)[1]:
        ref = f64[ort_path.name]
        if save:
            np.save(model_dir / "f64_outputs" / ort_path.name, ref)
        cols = [f"ort {rel_err(np.load(ort_path), ref):.3e}"]
        for label, d in outputs:
            p = d / model_dir.name / ort_path.name
            try:
                cols.append(f"{label} {rel_err(np.load(p), ref):.3e}")
            except (OSError, ValueError) as e:
                cols.append(f"{label} ({e})")
                ok = False
        print(f"  {name}: max rel err vs float64: " + "  ".join(cols))
    return ok


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model_dirs", nargs="+", type=Path, metavar="MODEL_DIR")
    p.add_argument(
        "--outputs",
        action="append",
        default=[],
        metavar="LABEL=DIR",
        help="also measure DIR/<model folder name>/<output file> (repeatable)",
    )
    p.add_argument("--save", action="store_true", help="write the float64 outputs to MODEL_DIR/f64_outputs/")
    args = p.parse_args(argv)
    outputs = []
    for spec in args.outputs:
        label, sep, d = spec.partition("=")
        if not sep or not label or not d:
            print(f"error: --outputs takes LABEL=DIR, got {spec!r}", file=sys.stderr)
            return 2
        outputs.append((label, Path(d)))
    ok = True
    for model_dir in args.model_dirs:
        print(f"== {model_dir}", flush=True)
        ok &= report_model(model_dir, outputs, args.save)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
