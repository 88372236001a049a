#!/usr/bin/env python3
"""Tests of memory_footprint.py on a small model built with onnx.helper (a product by a
1 MiB weight with a symbolic batch), run through the real `hidet_rs` and ONNX Runtime.

  .venv/bin/python -m unittest scripts/test_memory_footprint.py -v
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SCRIPTS = Path(__file__).resolve().parent
sys.path.insert(0, str(SCRIPTS))

import memory_footprint  # noqa: E402


def dense(path: Path) -> None:
    """x [batch, 512] · w [512, 512] → y [batch, 512]."""
    rng = np.random.default_rng(5)
    w = numpy_helper.from_array(rng.standard_normal((512, 512)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "dense",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 512])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 512])],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)


class MemoryFootprintTest(unittest.TestCase):
    def test_input_specs_bind_symbolic_dimensions_and_skip_initializers(self):
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "dense.onnx"
            dense(path)
            specs = memory_footprint.input_specs(str(path), {"batch": 3})
            self.assertEqual(specs, [("x", [3, 512], "float32")])

    def test_both_peers_report_at_least_the_weight(self):
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "dense.onnx"
            dense(path)
            out = subprocess.run(
                [sys.executable, str(SCRIPTS / "memory_footprint.py"), "--model", str(path),
                 "--dim", "batch=2"],
                check=True, capture_output=True, text=True,
            ).stdout
            row = [line for line in out.splitlines() if "dense.onnx" in line][0]
            cells = [int(c) for c in row.strip("|").split("|")[1:]]
            self.assertEqual(len(cells), 4)
            for steady, peak in [(cells[0], cells[1]), (cells[2], cells[3])]:
                # A process holding a 1 MiB weight and an interpreter: more than 1 MiB, and
                # the peak is never below the steady size.
                self.assertGreater(steady, 1)
                self.assertGreaterEqual(peak, steady)

    def test_a_sweep_reports_each_value_for_both_peers(self):
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "dense.onnx"
            dense(path)
            out = subprocess.run(
                [sys.executable, str(SCRIPTS / "memory_footprint.py"), "--model", str(path),
                 "--sweep", "batch=1,4,2"],
                check=True, capture_output=True, text=True,
            ).stdout
            self.assertIn("| batch=1 MiB | batch=4 MiB | batch=2 MiB | peak MiB |", out)
            rows = [line for line in out.splitlines() if "dense.onnx" in line]
            self.assertEqual([r.split("|")[2].strip() for r in rows], ["hidet", "ORT"])
            for row in rows:
                cells = [int(c) for c in row.strip("|").split("|")[2:]]
                self.assertEqual(len(cells), 4)
                self.assertTrue(all(c > 1 for c in cells), row)
                self.assertGreaterEqual(cells[3], max(cells[:3]), row)


if __name__ == "__main__":
    unittest.main()
