#!/usr/bin/env python3
"""Tests of float64_reference.py.

Run with the project venv (numpy, onnx):
  .venv/bin/python -m unittest scripts/test_float64_reference.py -v

A small float32 ONNX model touching every kind of float32 the rewrite must
convert (initializers, a Constant, a ConstantOfShape value, a Cast to float,
the graph input and output) is evaluated in float64 and checked against the
same computation written directly in float64 numpy; the report is checked on
outputs with a known error.
"""

from __future__ import annotations

import io
import json
import math
import sys
import tempfile
import unittest
from contextlib import redirect_stdout
from pathlib import Path

import numpy as np

SCRIPTS = Path(__file__).resolve().parent
sys.path.insert(0, str(SCRIPTS))
import float64_reference


def _numpy_f64(x: np.ndarray, w: np.ndarray, c: float, ids: np.ndarray) -> np.ndarray:
    """(erf(x @ w) * c + 0.25) + float(ids), computed in float64."""
    erf = np.vectorize(math.erf)
    return erf(x.astype(np.float64) @ w.astype(np.float64)) * c + 0.25 + ids.astype(np.float64)[:, None]


def _build(root: Path, rng: np.random.Generator):
    import onnx
    from onnx import TensorProto, helper

    w = rng.standard_normal((13, 7)).astype(np.float32)
    c = np.float32(1.0 / 3.0)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["mm"]),
        helper.make_node("Erf", ["mm"], ["e"]),
        helper.make_node("Constant", [], ["c"], value=helper.make_tensor("cv", TensorProto.FLOAT, [], [c])),
        helper.make_node("Mul", ["e", "c"], ["ec"]),
        helper.make_node("Shape", ["mm"], ["shape"]),
        helper.make_node(
            "ConstantOfShape", ["shape"], ["q"], value=helper.make_tensor("qv", TensorProto.FLOAT, [1], [0.25])
        ),
        helper.make_node("Add", ["ec", "q"], ["s"]),
        helper.make_node("Cast", ["ids"], ["idf"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["idf", "one"], ["idc"]),
        helper.make_node("Add", ["s", "idc"], ["out:0"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 13]),
            helper.make_tensor_value_info("ids", TensorProto.INT64, [5]),
        ],
        [helper.make_tensor_value_info("out:0", TensorProto.FLOAT, [5, 7])],
        [
            helper.make_tensor("w", TensorProto.FLOAT, w.shape, w.flatten()),
            helper.make_tensor("one", TensorProto.INT64, [1], [1]),
        ],
        value_info=[helper.make_tensor_value_info("mm", TensorProto.FLOAT, [5, 7])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    d = root / "tiny"
    (d / "inputs").mkdir(parents=True)
    (d / "ort_outputs").mkdir()
    onnx.save(model, d / "model.onnx")
    x = rng.standard_normal((5, 13)).astype(np.float32)
    ids = rng.integers(0, 1000, size=5).astype(np.int64)
    np.save(d / "inputs" / "x.npy", x)
    np.save(d / "inputs" / "ids.npy", ids)
    expected = _numpy_f64(x, w, float(c), ids)
    np.save(d / "ort_outputs" / "out_0.npy", expected.astype(np.float32))
    manifest = {
        "inputs": [{"name": "x", "file": "x.npy"}, {"name": "ids", "file": "ids.npy"}],
        "outputs": [{"name": "out:0", "file": "out_0.npy"}],
    }
    (d / "manifest.json").write_text(json.dumps(manifest))
    return d, expected


class Float64ReferenceTest(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.root = Path(self._tmp.name)
        self.model_dir, self.expected = _build(self.root, np.random.default_rng(11))

    def tearDown(self):
        self._tmp.cleanup()

    def test_evaluation_is_float64_and_matches_numpy(self):
        got = float64_reference.evaluate_float64(self.model_dir)["out_0.npy"]
        self.assertEqual(got.dtype, np.float64)
        # Values near 1000 carry ~6e-5 of float32 rounding; float64 keeps ~1e-13.
        np.testing.assert_allclose(got, self.expected, rtol=0, atol=1e-12)
        f32_err = float64_reference.rel_err(np.load(self.model_dir / "ort_outputs" / "out_0.npy"), got)
        self.assertGreater(f32_err, 0.0)

    def test_report_measures_given_outputs_and_saves(self):
        perturbed = self.expected + 1e-4 * np.max(np.abs(self.expected))
        (self.root / "keep" / "tiny").mkdir(parents=True)
        np.save(self.root / "keep" / "tiny" / "out_0.npy", perturbed.astype(np.float32))
        buf = io.StringIO()
        with redirect_stdout(buf):
            status = float64_reference.main(
                [str(self.model_dir), "--outputs", f"mine={self.root / 'keep'}", "--save"]
            )
        self.assertEqual(status, 0, buf.getvalue())
        line = next(ln for ln in buf.getvalue().splitlines() if "out:0" in ln)
        mine = float(line.split("mine ")[1].split()[0])
        self.assertAlmostEqual(mine, 1e-4, delta=1e-6)
        saved = np.load(self.model_dir / "f64_outputs" / "out_0.npy")
        np.testing.assert_allclose(saved, self.expected, rtol=0, atol=1e-12)

    def test_missing_outputs_and_bad_arguments_fail(self):
        with redirect_stdout(io.StringIO()):
            self.assertEqual(float64_reference.main([str(self.model_dir), "--outputs", f"x={self.root}"]), 1)
            self.assertEqual(float64_reference.main([str(self.model_dir), "--outputs", "nolabel"]), 2)

    def test_subgraphs_are_refused(self):
        from onnx import TensorProto, helper

        branch = helper.make_graph(
            [helper.make_node("Identity", ["x"], ["y"])],
            "b",
            [],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
        )
        node = helper.make_node("If", ["cond"], ["out"], then_branch=branch, else_branch=branch)
        graph = helper.make_graph(
            [node],
            "g",
            [
                helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
                helper.make_tensor_value_info("x", TensorProto.FLOAT, [1]),
            ],
            [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1])],
        )
        with self.assertRaises(float64_reference.ConversionError):
            float64_reference.to_float64(helper.make_model(graph))


if __name__ == "__main__":
    unittest.main()
