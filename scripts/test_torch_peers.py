#!/usr/bin/env python3
"""Tests of scripts/gpu/torch_peers.py (input synthesis, error and report helpers) and, where
torch is installed (.venv-models), of scripts/gpu/onnx_to_torch.py against ONNX Runtime.

  .venv/bin/python -m unittest scripts/test_torch_peers.py -v
  .venv-models/bin/python -m unittest scripts/test_torch_peers.py -v   # with the torch tests
"""

from __future__ import annotations

import importlib.util
import sys
import unittest
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent / "gpu"))
import torch_peers  # noqa: E402

HAS_TORCH = importlib.util.find_spec("torch") is not None
HAS_ORT = importlib.util.find_spec("onnxruntime") is not None


def embedding_model() -> onnx.ModelProto:
    """ids i64[2, 7] → Cast → Gather(table[13, 4]); pos i64[2, 7] → Gather(table2[50, 4]);
    mask i64[2, 7]; x f32[2, 7, 4]. Output: gathered + gathered2 + x, scaled by mask."""
    rng = np.random.default_rng(5)
    table = numpy_helper.from_array(rng.standard_normal((13, 4)).astype(np.float32), "table")
    table2 = numpy_helper.from_array(rng.standard_normal((50, 4)).astype(np.float32), "table2")
    nodes = [
        helper.make_node("Cast", ["ids"], ["ids32"], to=TensorProto.INT32),
        helper.make_node("Gather", ["table", "ids32"], ["e1"]),
        helper.make_node("Gather", ["table2", "pos"], ["e2"]),
        helper.make_node("Add", ["e1", "e2"], ["e"]),
        helper.make_node("Add", ["e", "x"], ["s"]),
        helper.make_node("Cast", ["mask"], ["maskf"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["maskf", "axes"], ["mask3"]),
        helper.make_node("Mul", ["s", "mask3"], ["y"]),
    ]
    axes = numpy_helper.from_array(np.array([2], dtype=np.int64), "axes")
    graph = helper.make_graph(
        nodes,
        "emb",
        [
            helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 7]),
            helper.make_tensor_value_info("pos", TensorProto.INT64, [2, 7]),
            helper.make_tensor_value_info("mask", TensorProto.INT64, [2, 7]),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 7, 4]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 7, 4])],
        [table, table2, axes],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def conv_model() -> onnx.ModelProto:
    """A small CNN with asymmetric padding, grouped conv, pools, Clip, Concat, Flatten, Gemm,
    Softmax: every converter path a vision model takes."""
    rng = np.random.default_rng(9)

    def init(name, shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)

    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[0, 1, 1, 0], strides=[2, 2]),
        helper.make_node("Clip", ["c1", "lo", "hi"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1], group=2),
        helper.make_node("MaxPool", ["c2"], ["p1"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("AveragePool", ["c2"], ["p2"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Concat", ["p1", "p2"], ["cat"], axis=1),
        helper.make_node("GlobalAveragePool", ["cat"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "wf", "bf"], ["logits"], transB=1),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=1),
    ]
    inits = [
        init("w1", (6, 3, 3, 3)), init("b1", (6,)), init("w2", (6, 3, 3, 3)),
        init("wf", (5, 12)), init("bf", (5,)),
        numpy_helper.from_array(np.array(-0.5, dtype=np.float32), "lo"),
        numpy_helper.from_array(np.array(0.7, dtype=np.float32), "hi"),
    ]
    graph = helper.make_graph(
        nodes,
        "cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 11, 13])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [2, 5])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


class SynthesizeInputs(unittest.TestCase):
    def test_ids_masks_and_floats(self):
        feeds = torch_peers.synthesize_inputs(embedding_model())
        self.assertEqual(list(feeds), ["ids", "pos", "mask", "x"])
        # Through Cast to the 13-row table; directly into the 50-row one.
        self.assertTrue(0 <= feeds["ids"].min() and feeds["ids"].max() < 13)
        self.assertTrue(feeds["pos"].max() < 50 and feeds["pos"].max() >= 13)
        np.testing.assert_array_equal(feeds["mask"], np.ones((2, 7), dtype=np.int64))
        self.assertEqual(feeds["x"].dtype, np.float32)
        self.assertGreater(float(np.abs(feeds["x"]).min()), 0.0)
        again = torch_peers.synthesize_inputs(embedding_model())
        for k in feeds:
            np.testing.assert_array_equal(feeds[k], again[k])

    def test_symbolic_shapes_are_refused(self):
        model = embedding_model()
        model.graph.input[3].type.tensor_type.shape.dim[0].dim_param = "batch"
        with self.assertRaisesRegex(ValueError, "input `x`: symbolic shape"):
            torch_peers.synthesize_inputs(model)


class Helpers(unittest.TestCase):
    def test_max_relative_error(self):
        want = [np.array([1.0, -4.0], dtype=np.float32), np.array([[2.0]], dtype=np.float32)]
        got = [np.array([1.0, -3.0], dtype=np.float32), np.array([[2.5]], dtype=np.float32)]
        self.assertAlmostEqual(torch_peers.max_relative_error(got, want), 0.25)
        with self.assertRaisesRegex(ValueError, "shapes differ"):
            torch_peers.max_relative_error([np.zeros(3)], [np.zeros(2)])

    def test_last_json_line_and_table(self):
        text = 'latency …\n{"median_ms": 1.5, "max_rel_diff": 2e-7}\n'
        self.assertEqual(torch_peers.last_json_line(text)["median_ms"], 1.5)
        with self.assertRaises(ValueError):
            torch_peers.last_json_line("no json here")
        table = torch_peers.format_table(
            [{"model": "m", "error": 3e-7, "hidet_graphs_ms": 1.25, "default_ms": "no time left"}]
        )
        self.assertIn("| m | 3.00e-07 | - | 1.250 | - | - | no time left | - |", table)


@unittest.skipUnless(HAS_TORCH and HAS_ORT, "needs torch and onnxruntime (.venv-models)")
class OnnxToTorch(unittest.TestCase):
    def check(self, model):
        import onnxruntime as ort
        import torch
        from onnx_to_torch import convert

        feeds = torch_peers.synthesize_inputs(model)
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        want = session.run(None, feeds)
        module = convert(model).eval()
        with torch.inference_mode():
            got = module(*[torch.from_numpy(feeds[i.name]) for i in session.get_inputs()])
        self.assertLess(torch_peers.max_relative_error([g.numpy() for g in got], want), 1e-5)
        compiled = torch.compile(module)
        with torch.inference_mode():
            again = compiled(*[torch.from_numpy(feeds[i.name]) for i in session.get_inputs()])
        self.assertLess(torch_peers.max_relative_error([g.numpy() for g in again], want), 1e-5)

    def test_embedding_graph(self):
        self.check(embedding_model())

    def test_vision_graph(self):
        self.check(conv_model())

    def test_unknown_operator_is_named(self):
        from onnx_to_torch import convert

        model = conv_model()
        model.graph.node[1].op_type = "HardSwish"
        del model.graph.node[1].input[1:]
        with self.assertRaisesRegex(NotImplementedError, "HardSwish"):
            convert(model)


if __name__ == "__main__":
    unittest.main()
