"""The hidet_rs package: numpy in and out on zoo models and ONNX models (checked against the
reference executor and ONNX Runtime), model inspection, errors, threads."""

import os
import pathlib
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import hidet_rs

from conftest import make_cnn

ROOT = pathlib.Path(__file__).resolve().parents[2]


def ort_run(model_bytes, feeds):
    session = ort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def assert_close(got, want, rtol=1e-4, atol=1e-5):
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


# --- zoo models against the reference executor -------------------------------------------


@pytest.mark.parametrize("name", ["tiny_mlp", "tiny_cnn", "tiny_bert"])
def test_zoo_model_matches_reference_executor(name):
    model = hidet_rs.zoo(name)
    compiled = model.compile(threads=2)
    rng = np.random.default_rng(3)
    feeds = {}
    for info in model.inputs:
        shape = [int(d) for d in info.shape]
        if info.dtype == "int64":
            # Token ids / segment ids / masks: small non-negative ids are valid for all three.
            feeds[info.name] = rng.integers(0, 2, size=shape, dtype=np.int64)
        else:
            feeds[info.name] = rng.standard_normal(shape).astype(info.dtype)
    got = compiled.run(feeds)
    want = model.run_reference(feeds)
    assert len(got) == len(model.outputs) == len(want)
    for g, w, info in zip(got, want, model.outputs):
        assert g.dtype == np.dtype(info.dtype)
        scale = max(float(np.abs(w).max()), 1e-30)
        assert float(np.abs(g - w).max()) <= 1e-4 * scale, info.name


@pytest.mark.parametrize("name", ["tiny_cnn", "tiny_mlp", "tiny_bert", "tiny_gpt2", "mobilenet_v2"])
def test_exported_zoo_model_matches_onnxruntime(tmp_path, name):
    """A zoo model written with save_onnx is a valid ONNX model (the checker's full check),
    and ONNX Runtime's outputs for it match hidet's compiled run of the zoo model."""
    model = hidet_rs.zoo(name)
    path = tmp_path / f"{name}.onnx"
    assert model.save_onnx(path) == path.stat().st_size
    onnx.checker.check_model(str(path), full_check=True)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == [i.name for i in model.inputs]
    assert [o.name for o in session.get_outputs()] == [o.name for o in model.outputs]
    rng = np.random.default_rng(11)
    feeds = {}
    for info in model.inputs:
        shape = [int(d) for d in info.shape]
        if "mask" in info.name:
            mask = np.ones(shape, dtype=np.int64)
            mask[..., -3:] = 0  # padding at the end of the sequence
            feeds[info.name] = mask
        elif info.dtype == "int64":
            # Token ids and segment ids: the tiny models' smallest table has 2 rows.
            feeds[info.name] = rng.integers(0, 2, size=shape, dtype=np.int64)
        else:
            feeds[info.name] = rng.standard_normal(shape).astype(info.dtype)
    want = session.run(None, feeds)
    got = model.compile(threads=2).run(feeds)
    for g, w, info in zip(got, want, model.outputs):
        scale = max(float(np.abs(w).max()), 1e-30)
        assert float(np.abs(g - w).max()) <= 1e-4 * scale, info.name


def test_save_onnx_errors(tmp_path):
    with pytest.raises(hidet_rs.HidetError, match="cannot write .*m.onnx.*No such file"):
        hidet_rs.zoo("tiny_mlp").save_onnx(tmp_path / "missing" / "m.onnx")


def test_zoo_listing_and_unknown_name():
    names = hidet_rs.zoo_models()
    assert "resnet50" in names and "tiny_mlp" in names
    with pytest.raises(hidet_rs.ModelError, match=r"unknown zoo model `nope`"):
        hidet_rs.zoo("nope")


# --- ONNX models against ONNX Runtime -----------------------------------------------------


def test_onnx_bytes_and_path_match_onnxruntime(cnn_bytes, cnn_path):
    x = np.random.default_rng(0).standard_normal((2, 3, 12, 12)).astype(np.float32)
    (want,) = ort_run(cnn_bytes, {"image": x})
    for source in (cnn_bytes, str(cnn_path), cnn_path):
        (got,) = hidet_rs.compile(source, threads=2).run({"image": x})
        assert_close(got, want)


def test_symbolic_batch_compiles_per_shape(cnn_bytes):
    compiled = hidet_rs.compile(cnn_bytes)
    rng = np.random.default_rng(1)
    for batch in (1, 4, 1):
        x = rng.standard_normal((batch, 3, 12, 12)).astype(np.float32)
        (got,) = compiled.run([x])
        (want,) = ort_run(cnn_bytes, {"image": x})
        assert_close(got, want)
    compiled.prepare([[3, 3, 12, 12]])
    report = compiled.report([[3, 3, 12, 12]])
    assert report["kernels"] >= 1
    assert report["host_steps"] == []


def test_two_inputs_named_positional_and_dict(two_inputs_bytes):
    compiled = hidet_rs.compile(two_inputs_bytes)
    a = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    b = np.array([1, -2, 3], dtype=np.int64)
    want = ort_run(two_inputs_bytes, {"a": a, "b": b})
    named = compiled.run({"b": b, "a": a})
    positional = compiled.run((a, b))
    as_dict = compiled.run_dict({"a": a, "b": b})
    assert list(as_dict) == ["s", "c"]
    for got in (named, positional, [as_dict["s"], as_dict["c"]]):
        assert_close(got[0], want[0])
        assert_close(got[1], want[1])


def test_non_contiguous_and_list_inputs(two_inputs_bytes):
    compiled = hidet_rs.compile(two_inputs_bytes)
    base = np.arange(32, dtype=np.float32).reshape(4, 8) / 10
    a = base[:3, ::2]  # a strided view
    assert not a.flags.c_contiguous
    b = [1, 2, 3]  # numpy.asarray gives int64
    want = ort_run(two_inputs_bytes, {"a": np.ascontiguousarray(a), "b": np.array(b)})
    got = compiled.run({"a": a, "b": np.asarray(b, dtype=np.int64)})
    assert_close(got[0], want[0])


def test_inputs_read_in_place_are_never_outputs_and_never_written(tmp_path):
    """C-contiguous inputs are read where they are; an output that is an input (Identity)
    is a copy, an unaligned input is gathered, and the inputs keep their values."""
    graph = onnx.helper.make_graph(
        [
            onnx.helper.make_node("Identity", ["x"], ["same"]),
            onnx.helper.make_node("Mul", ["x", "x"], ["square"]),
        ],
        "identity",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [5, 7])],
        [
            onnx.helper.make_tensor_value_info("same", onnx.TensorProto.FLOAT, [5, 7]),
            onnx.helper.make_tensor_value_info("square", onnx.TensorProto.FLOAT, [5, 7]),
        ],
    )
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    model.ir_version = 8
    compiled = hidet_rs.compile(model.SerializeToString(), threads=2)
    x = np.random.default_rng(2).standard_normal((5, 7)).astype(np.float32)
    kept = x.copy()
    raw = bytearray(x.nbytes + 1)
    unaligned = np.frombuffer(raw, dtype=np.float32, count=35, offset=1).reshape(5, 7)
    unaligned[...] = x
    assert not unaligned.flags.aligned
    for given in (x, unaligned):
        same, square = compiled.run([given])
        assert not np.shares_memory(same, given) and not np.shares_memory(square, given)
        np.testing.assert_array_equal(same, kept)
        np.testing.assert_array_equal(square, kept * kept)
        np.testing.assert_array_equal(given, kept)
        same[...] = 0
        np.testing.assert_array_equal(given, kept)


def test_outputs_are_fresh_writable_arrays(cnn_bytes):
    compiled = hidet_rs.compile(cnn_bytes)
    x = np.ones((1, 3, 12, 12), np.float32)
    (first,) = compiled.run([x])
    (second,) = compiled.run([x])
    assert first.flags.c_contiguous and first.flags.writeable
    first[...] = 0
    assert float(second.sum()) == pytest.approx(1.0, rel=1e-5)  # softmax rows sum to 1


def test_large_outputs_are_views_of_storage_reused_once_dropped():
    """Outputs of 8 MiB and more view storage the backend keeps for the next run once numpy
    drops them: no copy, each array its own memory while alive, the values right every run;
    an output that is a large input (Identity) is still a copy."""
    rows, cols = 1024, 2100  # 8.2 MiB of float32
    graph = onnx.helper.make_graph(
        [
            onnx.helper.make_node("Identity", ["x"], ["same"]),
            onnx.helper.make_node("Mul", ["x", "x"], ["square"]),
        ],
        "large",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [rows, cols])],
        [
            onnx.helper.make_tensor_value_info("same", onnx.TensorProto.FLOAT, [rows, cols]),
            onnx.helper.make_tensor_value_info("square", onnx.TensorProto.FLOAT, [rows, cols]),
        ],
    )
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    model.ir_version = 8
    compiled = hidet_rs.compile(model.SerializeToString(), threads=2)
    rng = np.random.default_rng(4)
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    y = rng.standard_normal((rows, cols)).astype(np.float32)
    same, first = compiled.run([x])
    assert not np.shares_memory(same, x)
    np.testing.assert_array_equal(first, x * x)
    assert first.flags.c_contiguous and first.flags.writeable and first.base is not None
    address = first.__array_interface__["data"][0]
    _, second = compiled.run([y])
    assert not np.shares_memory(first, second)
    np.testing.assert_array_equal(first, x * x)
    np.testing.assert_array_equal(second, y * y)
    first[...] = 0
    np.testing.assert_array_equal(second, y * y)
    del first
    _, third = compiled.run([x])
    assert third.__array_interface__["data"][0] == address, "the dropped output's storage"
    np.testing.assert_array_equal(third, x * x)
    np.testing.assert_array_equal(second, y * y)


# --- inspection ---------------------------------------------------------------------------


def test_inputs_and_outputs_with_symbolic_dims(two_inputs_bytes):
    model = hidet_rs.load(two_inputs_bytes)
    a, b = model.inputs
    assert (a.name, a.dtype, a.shape, a.kind) == ("a", "float32", ["n", 4], "tensor")
    assert (b.name, b.dtype, b.shape) == ("b", "int64", ["n"])
    assert [(o.name, o.dtype, o.shape) for o in model.outputs] == [
        ("s", "float32", ["n", 5]),
        ("c", "float32", ["n"]),
    ]
    compiled = model.compile()
    assert [i.name for i in compiled.inputs] == ["a", "b"]
    assert "TensorInfo(name=\"a\"" in repr(a)


def test_static_model_info():
    model = hidet_rs.zoo("tiny_mlp")
    (x,) = model.inputs
    assert (x.name, x.dtype, x.shape) == ("input", "float32", [3, 37])
    assert model.outputs[0].shape == [3, 11]


# --- errors -------------------------------------------------------------------------------


def test_missing_input(two_inputs_bytes):
    compiled = hidet_rs.compile(two_inputs_bytes)
    with pytest.raises(hidet_rs.InputError, match=r"^missing input `b`$"):
        compiled.run({"a": np.zeros((2, 4), np.float32)})


def test_unknown_input(two_inputs_bytes):
    compiled = hidet_rs.compile(two_inputs_bytes)
    feeds = {"a": np.zeros((2, 4), np.float32), "b": np.zeros(2, np.int64), "z": np.zeros(1)}
    with pytest.raises(hidet_rs.InputError, match=r"`z` is not an input of the model"):
        compiled.run(feeds)


def test_wrong_shape_and_dtype():
    compiled = hidet_rs.zoo("tiny_mlp").compile()
    with pytest.raises(hidet_rs.InputError, match=r"^input `input`: expected shape"):
        compiled.run([np.zeros((2, 37), np.float32)])
    with pytest.raises(hidet_rs.InputError, match=r"^input `input`: expected dtype f32, given f64$"):
        compiled.run([np.zeros((3, 37), np.float64)])
    with pytest.raises(hidet_rs.InputError, match=r"^the model takes 1 inputs \(`input`\), given 2$"):
        compiled.run([np.zeros((3, 37), np.float32)] * 2)
    with pytest.raises(hidet_rs.InputError, match="dict of name -> array"):
        compiled.run(np.zeros((3, 37), np.float32))


def test_symbolic_dims_must_agree(two_inputs_bytes):
    compiled = hidet_rs.compile(two_inputs_bytes)
    with pytest.raises(hidet_rs.InputError, match=r"`n`"):
        compiled.run({"a": np.zeros((2, 4), np.float32), "b": np.zeros(3, np.int64)})


def test_malformed_and_missing_files(tmp_path, cnn_bytes):
    with pytest.raises(hidet_rs.ModelError, match=r"^malformed ONNX protobuf"):
        hidet_rs.load(b"\x08\x07garbage that is not a protobuf \xff\xff\xff")
    truncated = tmp_path / "truncated.onnx"
    truncated.write_bytes(cnn_bytes[: len(cnn_bytes) // 2])
    with pytest.raises(hidet_rs.ModelError, match=r"^malformed ONNX protobuf"):
        hidet_rs.compile(truncated)
    with pytest.raises(hidet_rs.ModelError, match=r"^cannot read `.*nope\.onnx`"):
        hidet_rs.load(tmp_path / "nope.onnx")
    with pytest.raises(TypeError):
        hidet_rs.load(12)
    assert issubclass(hidet_rs.ModelError, hidet_rs.HidetError)
    assert issubclass(hidet_rs.InputError, hidet_rs.HidetError)


def test_unsupported_operator_is_named(tmp_path):
    from onnx import TensorProto, helper

    node = helper.make_node("NoSuchOp", ["x"], ["y"], domain="")
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(hidet_rs.ModelError, match=r"unsupported operators: .*NoSuchOp"):
        hidet_rs.load(model.SerializeToString())


def test_errors_carry_the_cli_messages(tmp_path):
    """The same failure through `hidet run` prints `error: <the exception's message>`."""
    binary = ROOT / "target" / "release" / "hidet"
    if not binary.exists():
        pytest.skip(f"{binary} is not built (cargo build --release -p hidet)")
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07garbage that is not a protobuf \xff\xff\xff")
    x = tmp_path / "x.npy"
    np.save(x, np.zeros((2, 37), np.float32))
    cases = [
        (str(bad), lambda: hidet_rs.load(bad)),
        (str(tmp_path / "nope.onnx"), lambda: hidet_rs.load(tmp_path / "nope.onnx")),
    ]
    for model_path, call in cases:
        with pytest.raises(hidet_rs.HidetError) as info:
            call()
        cli = subprocess.run(
            [str(binary), "run", model_path, "--input", f"input={x}", "--output-dir", str(tmp_path)],
            capture_output=True,
            text=True,
        )
        assert cli.returncode == 1
        assert cli.stderr.strip() == f"error: {info.value}"


def test_invalid_options():
    model = hidet_rs.zoo("tiny_mlp")
    with pytest.raises(hidet_rs.HidetError, match="tuning level"):
        model.compile(tuning=3)
    with pytest.raises(hidet_rs.HidetError, match="threads must be at least 1"):
        model.compile(threads=0)


# --- threads ------------------------------------------------------------------------------


def test_thread_counts_agree_and_default(cnn_bytes):
    x = np.random.default_rng(2).standard_normal((2, 3, 12, 12)).astype(np.float32)
    one = hidet_rs.compile(cnn_bytes, threads=1)
    two = hidet_rs.compile(cnn_bytes, threads=2)
    assert (one.threads, two.threads) == (1, 2)
    assert_close(one.run([x])[0], two.run([x])[0])
    assert hidet_rs.get_threads() is None
    try:
        hidet_rs.set_threads(1)
        assert hidet_rs.get_threads() == 1
        assert hidet_rs.compile(cnn_bytes).threads == 1
        assert hidet_rs.compile(cnn_bytes, threads=2).threads == 2
    finally:
        hidet_rs.set_threads(None)
    assert hidet_rs.compile(cnn_bytes).threads is None


def test_concurrent_runs_from_python_threads(cnn_bytes):
    compiled = hidet_rs.compile(cnn_bytes, threads=2)
    rng = np.random.default_rng(5)
    batches = [rng.standard_normal((2, 3, 12, 12)).astype(np.float32) for _ in range(8)]
    expected = [compiled.run([x])[0] for x in batches]

    def work(i):
        return [compiled.run([batches[(i + k) % 8]])[0] for k in range(8)]

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(work, range(4)))
    for i, outs in enumerate(results):
        for k, got in enumerate(outs):
            np.testing.assert_array_equal(got, expected[(i + k) % 8])


def test_gil_is_released_while_compiling(cnn_bytes):
    """Another Python thread keeps running while a model compiles (the GIL is released)."""
    ticks = []
    done = threading.Event()

    def ticker():
        while not done.is_set():
            ticks.append(1)
            done.wait(0.001)

    thread = threading.Thread(target=ticker)
    thread.start()
    try:
        # A fresh symbolic batch size: this compiles kernels (or loads them from the cache).
        compiled = hidet_rs.compile(make_cnn(batch="b").SerializeToString(), threads=1)
        compiled.prepare([[7, 3, 12, 12]])
    finally:
        done.set()
        thread.join()
    assert len(ticks) > 1


def test_tuning_level_1_runs_and_agrees(two_inputs_bytes):
    a = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
    b = np.array([4, 5], dtype=np.int64)
    tuned = hidet_rs.compile(two_inputs_bytes, tuning=1, threads=1)
    want = ort_run(two_inputs_bytes, {"a": a, "b": b})
    got = tuned.run({"a": a, "b": b})
    assert_close(got[0], want[0])


@pytest.mark.parametrize(
    "dtype, onnx_type",
    [
        ("float16", "FLOAT16"),
        ("float64", "DOUBLE"),
        ("int8", "INT8"),
        ("int32", "INT32"),
        ("uint8", "UINT8"),
        ("uint64", "UINT64"),
        ("bool", "BOOL"),
    ],
)
def test_dtypes_round_trip(dtype, onnx_type):
    """Each numpy dtype goes in and comes out as itself (through a kernel: Neg or Not, twice),
    and a 0-d array stays 0-d."""
    from onnx import TensorProto, helper

    elem = getattr(TensorProto, onnx_type)
    op = "Not" if dtype == "bool" else ("Identity" if dtype.startswith("uint") else "Neg")
    nodes = [helper.make_node(op, ["x"], ["y"]), helper.make_node(op, ["y"], ["z"])]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", elem, ["d"]), helper.make_tensor_value_info("s", elem, [])],
        [helper.make_tensor_value_info("z", elem, ["d"]), helper.make_tensor_value_info("s2", elem, [])],
    )
    graph.node.append(helper.make_node("Identity", ["s"], ["s2"]))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    compiled = hidet_rs.compile(model.SerializeToString())
    x = (np.arange(5) % 3).astype(dtype)
    s = np.array(1, dtype=dtype)
    z, s2 = compiled.run({"x": x, "s": s})
    assert z.dtype == np.dtype(dtype) and s2.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(z, x)
    assert s2.shape == () and s2 == s
    assert [i.dtype for i in compiled.inputs] == [dtype, dtype]


def test_cuda_sim_device_matches_the_reference_executor():
    # The CUDA kernels run in the GPU simulator (every block, with its race and
    # uninitialised-read checkers).
    model = hidet_rs.zoo("tiny_mlp")
    compiled = hidet_rs.compile(model, device="cuda-sim")
    rng = np.random.default_rng(5)
    feeds = {
        info.name: rng.standard_normal([int(d) for d in info.shape]).astype(info.dtype)
        for info in model.inputs
    }
    got = compiled.run(feeds)
    want = model.run_reference(feeds)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_unknown_devices_and_tuning_in_the_simulator_are_errors():
    model = hidet_rs.zoo("tiny_mlp")
    with pytest.raises(hidet_rs.HidetError, match="unknown device `tpu`"):
        hidet_rs.compile(model, device="tpu")
    with pytest.raises(hidet_rs.HidetError, match="the GPU simulator has no timing"):
        model.compile(device="cuda-sim", tuning=1)


# --- compiled models saved to a file ------------------------------------------------------

SAVED_RUNNER = """
import sys, numpy as np, hidet_rs
model = hidet_rs.load_compiled(sys.argv[1], threads=2)
x = np.load(sys.argv[2])
(y,) = model.run([x])
np.save(sys.argv[3], y)
"""


def test_save_and_load_in_a_fresh_process_without_a_compiler(tmp_path, cnn_bytes):
    compiled = hidet_rs.compile(cnn_bytes, threads=2)
    rng = np.random.default_rng(5)
    xs = {b: rng.standard_normal((b, 3, 12, 12)).astype(np.float32) for b in (1, 3)}
    for b in xs:
        compiled.prepare([[b, 3, 12, 12]])
    path = tmp_path / "cnn.hidet"
    assert compiled.save(path) == 2
    for b, x in xs.items():
        np.save(tmp_path / f"x{b}.npy", x)
        env = dict(os.environ, CC="/nonexistent", HIDET_CACHE_DIR=str(tmp_path / "empty"))
        subprocess.run(
            [
                sys.executable,
                "-c",
                SAVED_RUNNER,
                str(path),
                str(tmp_path / f"x{b}.npy"),
                str(tmp_path / f"y{b}.npy"),
            ],
            env=env,
            check=True,
        )
        got = np.load(tmp_path / f"y{b}.npy")
        (want,) = compiled.run([x])
        np.testing.assert_array_equal(got, want)
        (reference,) = ort_run(cnn_bytes, {"image": x})
        assert_close(got, reference)
    assert not (tmp_path / "empty").exists() or not any((tmp_path / "empty").iterdir())


def test_saved_model_errors(tmp_path, cnn_bytes):
    compiled = hidet_rs.compile(cnn_bytes)
    with pytest.raises(hidet_rs.HidetError, match="nothing is compiled yet"):
        compiled.save(tmp_path / "none.hidet")
    compiled.prepare([[2, 3, 12, 12]])
    path = tmp_path / "cnn.hidet"
    compiled.save(str(path))
    loaded = hidet_rs.load_compiled(path)
    assert [i.name for i in loaded.inputs] == ["image"]
    with pytest.raises(hidet_rs.InputError, match=r"expected shape \[2, 3, 12, 12\]"):
        loaded.run([np.zeros((5, 3, 12, 12), np.float32)])
    data = path.read_bytes()
    (tmp_path / "cut.hidet").write_bytes(data[: len(data) // 2])
    with pytest.raises(hidet_rs.ModelError, match="truncated or corrupted"):
        hidet_rs.load_compiled(tmp_path / "cut.hidet")
    (tmp_path / "x.onnx").write_bytes(cnn_bytes)
    with pytest.raises(hidet_rs.ModelError, match="not a compiled hidet model"):
        hidet_rs.load_compiled(tmp_path / "x.onnx")
