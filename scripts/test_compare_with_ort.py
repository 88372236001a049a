#!/usr/bin/env python3
"""Tests of compare_with_ort.py against stand-in `hidet` executables.

Run with the project venv (numpy, onnx, onnxruntime):
  .venv/bin/python -m unittest scripts/test_compare_with_ort.py -v

A small ONNX model with two outputs (one of them with a name that needs
sanitizing) is built with onnx.helper; its reference outputs come from ONNX
Runtime. Stand-ins for `hidet run` implement the CLI contract of issue 3 with
ONNX Runtime, either faithfully, with a perturbation of a chosen size, with
a missing or mis-shaped output, or by failing with an error message; each
case checks compare_with_ort.py's verdict and exit status.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import tempfile
import textwrap
import unittest
from pathlib import Path

import numpy as np

SCRIPTS = Path(__file__).resolve().parent
sys.path.insert(0, str(SCRIPTS))
import compare_with_ort

FAKE_HIDET = textwrap.dedent(
    """\
    #!{python}
    import re, sys
    from pathlib import Path
    import numpy as np
    import onnxruntime as ort

    MODE = {mode!r}
    args = sys.argv[1:]
    if MODE == "error":
        print("error: unsupported operators: Foo (opset 17) x3", file=sys.stderr)
        sys.exit(3)
    assert args[0] == "run", args
    model, feeds, out_dir, i = args[1], {{}}, None, 2
    while i < len(args):
        if args[i] == "--input":
            name, path = args[i + 1].split("=", 1)
            feeds[name] = np.load(path)
            i += 2
        elif args[i] == "--output-dir":
            out_dir = Path(args[i + 1])
            i += 2
        else:
            i += 1
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    for name, value in zip(names, sess.run(names, feeds)):
        if MODE.startswith("scale:"):
            value = value + float(MODE[6:]) * np.max(np.abs(value))
        if MODE == "missing" and name != names[0]:
            continue
        if MODE == "reshape":
            value = value.reshape(-1)
        np.save(out_dir / (re.sub(r"[^A-Za-z0-9._-]", "_", name) + ".npy"), value)
    """
)


def _build_model_dir(root: Path) -> Path:
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    rng = np.random.default_rng(7)
    w = rng.standard_normal((13, 7)).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["mm"]),
        helper.make_node("Tanh", ["mm"], ["out:0"]),
        helper.make_node("ReduceSum", ["mm"], ["sum/1"], keepdims=0),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 13])],
        [
            helper.make_tensor_value_info("out:0", TensorProto.FLOAT, [5, 7]),
            helper.make_tensor_value_info("sum/1", TensorProto.FLOAT, []),
        ],
        [helper.make_tensor("w", TensorProto.FLOAT, w.shape, w.flatten())],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    d = root / "tiny"
    (d / "inputs").mkdir(parents=True)
    (d / "ort_outputs").mkdir()
    onnx.save(model, d / "model.onnx")
    x = (rng.standard_normal((5, 13)) + 0.5).astype(np.float32)
    np.save(d / "inputs" / "x.npy", x)
    sess = ort.InferenceSession(str(d / "model.onnx"), providers=["CPUExecutionProvider"])
    for name, value in zip(["out:0", "sum/1"], sess.run(["out:0", "sum/1"], {"x": x})):
        np.save(d / "ort_outputs" / (compare_with_ort.sanitize(name) + ".npy"), value)
    manifest = {
        "inputs": [{"name": "x", "file": "x.npy"}],
        "outputs": [{"name": n, "file": compare_with_ort.sanitize(n) + ".npy"} for n in ["out:0", "sum/1"]],
    }
    (d / "manifest.json").write_text(json.dumps(manifest))
    return d


class CompareWithOrtTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.root = Path(cls.tmp.name)
        cls.model_dir = _build_model_dir(cls.root)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def _fake(self, mode: str) -> Path:
        path = self.root / f"hidet-{mode.replace(':', '_')}"
        path.write_text(FAKE_HIDET.format(python=sys.executable, mode=mode))
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
        return path

    def _run(self, mode: str, *extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [
                sys.executable,
                str(SCRIPTS / "compare_with_ort.py"),
                str(self.model_dir),
                "--hidet-bin",
                str(self._fake(mode)),
                *extra,
            ],
            check=False,
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ},
        )

    def test_exact_outputs_pass(self):
        r = self._run("exact")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("PASS  out:0", r.stdout)
        self.assertIn("PASS  sum/1", r.stdout)
        self.assertIn("1 passed, 0 failed", r.stdout)

    def test_error_within_tolerance_passes_and_beyond_fails(self):
        r = self._run("scale:5e-4")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertRegex(r.stdout, r"max rel err (4\.99\d|5\.00\d)e-04")
        r = self._run("scale:5e-3")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("FAIL  out:0", r.stdout)
        r = self._run("scale:5e-3", "--rtol", "1e-2")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_hidet_error_text_is_reported(self):
        r = self._run("error")
        self.assertEqual(r.returncode, 1)
        self.assertIn("hidet exited with status 3", r.stdout)
        self.assertIn("unsupported operators: Foo (opset 17) x3", r.stdout)

    def test_missing_and_misshaped_outputs_fail(self):
        r = self._run("missing")
        self.assertEqual(r.returncode, 1)
        self.assertIn("hidet wrote no sum_1.npy", r.stdout)
        r = self._run("reshape")
        self.assertEqual(r.returncode, 1)
        self.assertIn("shape [35] != expected [5, 7]", r.stdout)

    def test_absent_model_folder_fails(self):
        r = subprocess.run(
            [
                sys.executable,
                str(SCRIPTS / "compare_with_ort.py"),
                str(self.root / "nope"),
                "--hidet-bin",
                str(self._fake("exact")),
            ],
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
        )
        self.assertEqual(r.returncode, 1)
        self.assertIn("does not exist", r.stdout)


class CompareArraysTest(unittest.TestCase):
    def test_relative_error_against_float64_loop(self):
        rng = np.random.default_rng(11)
        ref = (rng.standard_normal((3, 37)) * 4 + 1).astype(np.float32)
        got = ref + (rng.standard_normal(ref.shape) * 1e-3).astype(np.float32)
        max_abs = 0.0
        max_ref = 0.0
        for a, b in zip(got.ravel().tolist(), ref.ravel().tolist()):
            max_abs = max(max_abs, abs(a - b))
            max_ref = max(max_ref, abs(b))
        ok, detail = compare_with_ort.compare_arrays(got, ref, rtol=max_abs / max_ref * 1.01)
        self.assertTrue(ok, detail)
        self.assertIn(f"max rel err {max_abs / max_ref:.3e}", detail)
        ok, _ = compare_with_ort.compare_arrays(got, ref, rtol=max_abs / max_ref * 0.99)
        self.assertFalse(ok)

    def test_nan_where_reference_is_finite_fails(self):
        ref = np.linspace(-2, 3, 17, dtype=np.float32)
        got = ref.copy()
        got[4] = np.nan
        ok, detail = compare_with_ort.compare_arrays(got, ref, rtol=1e-3)
        self.assertFalse(ok)
        self.assertIn("non-finite", detail)

    def test_integer_outputs_compare_exactly(self):
        ref = np.arange(1, 12, dtype=np.int64)
        got = ref.copy()
        self.assertTrue(compare_with_ort.compare_arrays(got, ref, rtol=1e-3)[0])
        got[3] += 1
        ok, detail = compare_with_ort.compare_arrays(got, ref, rtol=1e-3)
        self.assertFalse(ok)
        self.assertIn("1 of 11 elements differ", detail)


if __name__ == "__main__":
    unittest.main()
