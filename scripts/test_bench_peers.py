#!/usr/bin/env python3
"""Tests of bench_peers.py's broad-set mode (`--model`, `--broad`) against stand-in `hidet` executables.

Run with the project venv (numpy, onnx, onnxruntime):
  .venv/bin/python -m unittest scripts/test_bench_peers.py -v

A tiny ONNX model (token ids through a Reshape into an embedding Gather, a mask, a float input)
is built with onnx.helper. Stand-ins for `hidet run` and `hidet bench --json [--profile]`
compute with ONNX Runtime (faithfully, or perturbed), or fail with an error message; the
tests check the generated inputs, the probe's check and host steps, and that a failing model
is a row of the table rather than a crash.
"""

from __future__ import annotations

import contextlib
import io
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
import bench_peers  # noqa: E402

FAKE_HIDET = textwrap.dedent(
    """\
    #!{python}
    import json, re, sys
    from pathlib import Path
    import numpy as np
    import onnxruntime as ort

    MODE = {mode!r}
    args = sys.argv[1:]
    if MODE == "error":
        print("compiling ...", file=sys.stderr)
        print("error: node `n7` (Foo): no kernel for this\\n  more detail", file=sys.stderr)
        sys.exit(1)
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
    outs = sess.run(names, feeds)
    if args[0] == "run":
        for name, value in zip(names, outs):
            if MODE.startswith("scale:"):
                value = value + float(MODE[6:]) * np.max(np.abs(value))
            np.save(out_dir / (re.sub(r"[^A-Za-z0-9._-]", "_", name) + ".npy"), value)
    else:
        assert args[0] == "bench" and "--json" in args, args
        report = {{"median_ms": 2.5}}
        if "--profile" in args:
            report["profile"] = [
                {{"step": 0, "label": "host Gather /emb/Gather", "median_ms": 1.0, "gflops": None}},
                {{"step": 1, "label": "k1_mul Mul_0", "median_ms": 0.5, "gflops": None}},
                {{"step": 2, "label": "host Gather /emb2/Gather", "median_ms": 1.0, "gflops": None}},
            ]
        print("latency ...")
        print(json.dumps(report))
    """
)


def build_model(path: Path) -> None:
    """input_ids [batch, sequence] -> Reshape -> Gather(emb 77x4); times the mask; plus x [batch, 4]."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    inits = [
        numpy_helper.from_array(rng.standard_normal((77, 4)).astype(np.float32), "emb"),
        numpy_helper.from_array(np.array([0, -1], np.int64), "shape"),
        numpy_helper.from_array(np.array([-1], np.int64), "axes"),
    ]
    nodes = [
        helper.make_node("Reshape", ["input_ids", "shape"], ["ids2"]),
        helper.make_node("Gather", ["emb", "ids2"], ["e"]),
        helper.make_node("Cast", ["attention_mask"], ["m"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["m", "axes"], ["m3"]),
        helper.make_node("Mul", ["e", "m3"], ["y"]),
        helper.make_node("Relu", ["x"], ["z"]),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "sequence"]),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4]),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "sequence", 4]),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, ["batch", 4]),
        ],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))


class BroadBench(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = tempfile.TemporaryDirectory()
        self.root = Path(self.tmp.name)
        self.model = self.root / "tiny_b3_dyn.onnx"
        build_model(self.model)

    def tearDown(self) -> None:
        self.tmp.cleanup()

    def fake(self, mode: str) -> Path:
        path = self.root / f"hidet-{mode.replace(':', '_')}"
        path.write_text(FAKE_HIDET.format(python=sys.executable, mode=mode))
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
        return path

    def bench(self, mode: str, *extra: str) -> tuple[str, dict]:
        """Runs bench_peers.main on the tiny model; returns stdout and the saved JSON."""
        save = self.root / "out.json"
        argv = ["--model", str(self.model), "--hidet-bin", str(self.fake(mode)), "--tract", "",
                "--rounds", "1", "--runs", "2", "--warmup", "0", "--min-seconds", "0", "--seq-len", "5",
                "--save", str(save), "--markdown", *extra]
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            self.assertEqual(bench_peers.main(argv), 0, err.getvalue())
        return out.getvalue(), json.loads(save.read_text())

    def test_inputs_from_declared_types(self) -> None:
        with contextlib.redirect_stderr(io.StringIO()):
            (case,) = bench_peers.broad_cases([self.model], batch=1, seq_len=5, dims={})
        self.assertEqual(case.broad.batch, 3)
        self.assertTrue(case.broad.dynamic)
        ids, mask, x = case.inputs["input_ids"], case.inputs["attention_mask"], case.inputs["x"]
        self.assertEqual(ids.shape, (3, 5))
        self.assertEqual(ids.dtype, np.int64)
        self.assertTrue(0 <= ids.min() and ids.max() < 77, ids)
        self.assertTrue((mask == 1).all())
        self.assertEqual(x.shape, (3, 4))
        self.assertEqual(x.dtype, np.float32)

    def test_dim_flag_overrides(self) -> None:
        with contextlib.redirect_stderr(io.StringIO()):
            (case,) = bench_peers.broad_cases([self.model], batch=1, seq_len=5, dims={"sequence": 9})
        self.assertEqual(case.inputs["input_ids"].shape, (3, 9))

    def test_sidecar_wins(self) -> None:
        sidecar = {"inputs": [{"name": "input_ids", "shape": [3, 6], "kind": "ids", "high": 2}]}
        self.model.with_suffix(".json").write_text(json.dumps(sidecar))
        with contextlib.redirect_stderr(io.StringIO()):
            (case,) = bench_peers.broad_cases([self.model], batch=1, seq_len=5, dims={})
        self.assertEqual(case.inputs["input_ids"].shape, (3, 6))
        self.assertLess(case.inputs["input_ids"].max(), 2)

    def test_faithful_engine_passes_with_host_steps(self) -> None:
        out, saved = self.bench("ok")
        (rec,) = saved["cases"]
        self.assertTrue(rec["check"].startswith("ok"), rec)
        self.assertEqual(rec["host_ops"], {"Gather": 2})
        self.assertEqual(rec["median_ms"]["hidet"], 2.5)
        self.assertIn("| tiny | 3 | dynamic |", out)
        self.assertIn("2: Gather×2", out)
        self.assertIn("geomean hidet/ORT over 1 of 1 rows", out)

    def test_perturbed_outputs_mismatch(self) -> None:
        _, saved = self.bench("scale:0.01")
        (rec,) = saved["cases"]
        self.assertTrue(rec["check"].startswith("MISMATCH"), rec)
        self.assertAlmostEqual(rec["max_rel"], 0.01, delta=2e-3)

    def test_failing_hidet_is_a_row(self) -> None:
        out, saved = self.bench("error")
        (rec,) = saved["cases"]
        self.assertEqual(rec["errors"]["hidet"], "error: node `n7` (Foo): no kernel for this")
        self.assertIn("error: node `n7` (Foo): no kernel for this", out)
        self.assertIn("hidet failures: 1: tiny_b3_dyn", out)
        self.assertIn("onnxruntime", rec["median_ms"])

    def test_runs_fit_the_time_budget(self) -> None:
        case = bench_peers.Case("c", self.model, {}, broad=bench_peers.BroadInfo("c", 1, False, False))
        case.broad.ort_probe_ms, case.broad.hidet_probe_ms = 10.0, 4000.0
        self.assertEqual(bench_peers.broad_runs(case, 20, 3, 0.5, 5.0), (1, 1))
        case.broad.hidet_probe_ms = 20.0
        self.assertEqual(bench_peers.broad_runs(case, 20, 3, 0.5, 5.0), (50, 3))

    def test_parse_stem(self) -> None:
        self.assertEqual(bench_peers.parse_stem("vit_b_16_b8_dyn"), ("vit_b_16", 8, True))
        self.assertEqual(bench_peers.parse_stem("resnet18_qdq_b1"), ("resnet18_qdq", 1, False))
        self.assertEqual(bench_peers.parse_stem("model"), ("model", None, False))

    def test_hidet_error_lines(self) -> None:
        panic = subprocess.CompletedProcess([], 101, "", "thread 'main' panicked at src/x.rs:1:2:\nindex out of range\n")
        self.assertEqual(bench_peers.hidet_error(panic), "panic: index out of range")
        killed = subprocess.CompletedProcess([], -9, "", "")
        self.assertEqual(bench_peers.hidet_error(killed), "killed by signal 9")


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    unittest.main()
