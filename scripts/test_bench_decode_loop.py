#!/usr/bin/env python3
"""Tests of bench_decode_loop.py on a tiny decoder built with onnx.helper (one attention layer
over a key/value cache with a symbolic length), run through the real `hidet_rs` package.

  .venv/bin/python -m unittest scripts/test_bench_decode_loop.py -v
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
VOCAB, DIM = 37, 24


def tiny_decoder(path: Path) -> None:
    """ids, position_ids [b, 1]; past_keys/values [1, b, 1, past, DIM] → logits [b, 1, VOCAB]
    and the grown keys and values: one head attending over the cache and the new token."""
    rng = np.random.default_rng(3)
    w = lambda *shape: numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32) * 0.3)
    inits = []
    for name, shape in [("emb", (VOCAB, DIM)), ("pos", (256, DIM)), ("wq", (DIM, DIM)),
                        ("wk", (DIM, DIM)), ("wv", (DIM, DIM)), ("wo", (DIM, VOCAB))]:
        t = w(*shape)
        t.name = name
        inits.append(t)
    inits.append(numpy_helper.from_array(np.array([1, -1, 1, 1, DIM], np.int64), "cache_shape"))
    inits.append(numpy_helper.from_array(np.array([-1, 1, 1, DIM], np.int64), "head_shape"))
    inits.append(numpy_helper.from_array(np.array([0], np.int64), "axis0"))
    n = helper.make_node
    nodes = [
        n("Gather", ["emb", "ids"], ["e"]),
        n("Gather", ["pos", "position_ids"], ["p"]),
        n("Add", ["e", "p"], ["x"]),                                   # [b, 1, D]
        n("MatMul", ["x", "wq"], ["q0"]),
        n("Reshape", ["q0", "head_shape"], ["q"]),                     # [b, 1, 1, D]
        n("MatMul", ["x", "wk"], ["k0"]),
        n("Reshape", ["k0", "cache_shape"], ["k"]),                    # [1, b, 1, 1, D]
        n("MatMul", ["x", "wv"], ["v0"]),
        n("Reshape", ["v0", "cache_shape"], ["v"]),
        n("Concat", ["past_keys", "k"], ["keys"], axis=3),
        n("Concat", ["past_values", "v"], ["values"], axis=3),
        n("Squeeze", ["keys", "axis0"], ["k_all"]),                   # [b, 1, T, D]
        n("Squeeze", ["values", "axis0"], ["v_all"]),
        n("Transpose", ["k_all"], ["k_t"], perm=[0, 1, 3, 2]),
        n("MatMul", ["q", "k_t"], ["scores"]),                        # [b, 1, 1, T]
        n("Softmax", ["scores"], ["att"], axis=-1),
        n("MatMul", ["att", "v_all"], ["ctx"]),                       # [b, 1, 1, D]
        n("Reshape", ["ctx", "x_shape"], ["ctx2"]),
        n("MatMul", ["ctx2", "wo"], ["logits"]),
    ]
    inits.append(numpy_helper.from_array(np.array([-1, 1, DIM], np.int64), "x_shape"))
    cache = lambda name: helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, "batch", 1, "past", DIM])
    graph = helper.make_graph(
        nodes, "tiny_decoder",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", 1]),
         helper.make_tensor_value_info("position_ids", TensorProto.INT64, ["batch", 1]),
         cache("past_keys"), cache("past_values")],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 1, VOCAB]),
         helper.make_tensor_value_info("keys", TensorProto.FLOAT, [1, "batch", 1, "total", DIM]),
         helper.make_tensor_value_info("values", TensorProto.FLOAT, [1, "batch", 1, "total", DIM])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


class DecodeLoopTest(unittest.TestCase):
    def test_a_generation_loop_matches_onnx_runtime_at_every_step(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            model = Path(tmp) / "tiny_decoder.onnx"
            tiny_decoder(model)
            run = subprocess.run(
                [sys.executable, str(SCRIPTS / "bench_decode_loop.py"), str(model), "--steps", "4",
                 "--past", "3", "--batch", "2", "--fresh-cache"],
                capture_output=True, text=True, timeout=600)
            self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
            rows = [line for line in run.stdout.splitlines() if line.startswith("| first") or line.startswith("| again")]
            self.assertEqual(len(rows), 2, run.stdout)
            for row in rows:
                worst = float(row.strip("| ").split("|")[-1])
                self.assertLessEqual(worst, 1e-3, row)
            self.assertIn("cache 3 -> 7, 4 steps", run.stdout)


if __name__ == "__main__":
    unittest.main()
