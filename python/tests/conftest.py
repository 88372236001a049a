"""Small ONNX models made with onnx.helper (seeded weights), shared by the tests."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper


def _init(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def make_cnn(batch="batch"):
    """Conv(3x3, pad 1)+bias -> Relu -> MaxPool 2x2 -> Conv 1x1 -> GlobalAveragePool ->
    Flatten -> Gemm -> Softmax, input `image` f32[batch, 3, 12, 12], output `probs`."""
    rng = np.random.default_rng(7)
    w1 = rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3
    b1 = rng.standard_normal(8).astype(np.float32) * 0.1
    w2 = rng.standard_normal((16, 8, 1, 1)).astype(np.float32) * 0.3
    wf = rng.standard_normal((10, 16)).astype(np.float32) * 0.3
    bf = rng.standard_normal(10).astype(np.float32) * 0.1
    nodes = [
        helper.make_node("Conv", ["image", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2"], ["c2"]),
        helper.make_node("GlobalAveragePool", ["c2"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "wf", "bf"], ["logits"], transB=1),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "cnn",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [batch, 3, 12, 12])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [batch, 10])],
        [_init("w1", w1), _init("b1", b1), _init("w2", w2), _init("wf", wf), _init("bf", bf)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def make_two_inputs():
    """`a` f32[n, 4] and `b` i64[n]: outputs `s` = Relu(a @ W) f32[n, 5] and `c` = Cast(b)
    f32[n]."""
    w = np.arange(20, dtype=np.float32).reshape(4, 5) / 10 - 1
    nodes = [
        helper.make_node("MatMul", ["a", "w"], ["m"]),
        helper.make_node("Relu", ["m"], ["s"]),
        helper.make_node("Cast", ["b"], ["c"], to=TensorProto.FLOAT),
    ]
    graph = helper.make_graph(
        nodes,
        "two_inputs",
        [
            helper.make_tensor_value_info("a", TensorProto.FLOAT, ["n", 4]),
            helper.make_tensor_value_info("b", TensorProto.INT64, ["n"]),
        ],
        [
            helper.make_tensor_value_info("s", TensorProto.FLOAT, ["n", 5]),
            helper.make_tensor_value_info("c", TensorProto.FLOAT, ["n"]),
        ],
        [_init("w", w)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


@pytest.fixture(scope="session")
def cnn_bytes():
    return make_cnn().SerializeToString()


@pytest.fixture(scope="session")
def cnn_path(tmp_path_factory, cnn_bytes):
    path = tmp_path_factory.mktemp("models") / "cnn.onnx"
    path.write_bytes(cnn_bytes)
    return path


@pytest.fixture(scope="session")
def two_inputs_bytes():
    return make_two_inputs().SerializeToString()
