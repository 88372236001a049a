"""ONNX Runtime's contrib operators (com.microsoft, and the few it registers in the default
domain), which hidet expands into standard operators when it builds the graph: each case is a
small model made with onnx.helper, run by hidet (CPU and the GPU simulator) and by ONNX Runtime,
whose own kernels are the reference. Shapes are deliberately not multiples of any tile size."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import hidet_rs

MS = "com.microsoft"
RNG = np.random.default_rng(20261206)
DEVICES = ["cpu", "cuda-sim"]


def f32(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def elem_type(array):
    return helper.np_dtype_to_tensor_dtype(array.dtype)


def build(nodes, feeds, outputs, initializers=None, opset=17):
    """A model of `nodes` whose graph inputs are `feeds` (name -> array) and whose outputs are
    the values named `outputs` (shapes left for inference)."""
    initializers = initializers or {}
    graph = helper.make_graph(
        nodes,
        "contrib",
        [helper.make_tensor_value_info(n, elem_type(a), a.shape) for n, a in feeds.items()],
        [helper.make_empty_tensor_value_info(n) for n in outputs],
        [numpy_helper.from_array(a, n) for n, a in initializers.items()],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(MS, 1)]
    )
    model.ir_version = 8
    return model.SerializeToString()


def ort_outputs(model, feeds, outputs):
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    return session.run(outputs, feeds)


def check(nodes, feeds, outputs, initializers=None, opset=17, devices=DEVICES, rtol=1e-4,
          want=None):
    """hidet's outputs of the model against ONNX Runtime's (or `want`, ONNX Runtime's outputs
    of an equivalent model, where it lacks a CPU kernel for this form)."""
    model = build(nodes, feeds, outputs, initializers, opset)
    if want is None:
        want = ort_outputs(model, feeds, outputs)
    for device in devices:
        got = hidet_rs.compile(model, threads=2, device=device).run(feeds)
        assert len(got) == len(want)
        for name, g, w in zip(outputs, got, want):
            assert g.shape == w.shape, (device, name, g.shape, w.shape)
            assert g.dtype == w.dtype, (device, name, g.dtype, w.dtype)
            if w.dtype.kind == "f":
                scale = max(float(np.abs(w).max()), 1e-6)
                err = float(np.abs(g.astype(np.float64) - w).max()) / scale
                assert err <= rtol, f"{device} {name}: max relative error {err:.2e}"
            else:
                np.testing.assert_array_equal(g, w, err_msg=f"{device} {name}")


# --- activations and fused operators -----------------------------------------------------


@pytest.mark.parametrize(
    "op, extra, attrs",
    [
        ("Gelu", [], {}),
        ("BiasGelu", ["b"], {}),
        ("FastGelu", [], {}),
        ("FastGelu", ["b"], {}),
        ("QuickGelu", [], {}),
        ("QuickGelu", [], {"alpha": 1.3}),
    ],
)
def test_activations(op, extra, attrs):
    feeds = {"x": f32(2, 5, 24, scale=2.0), "b": f32(24), "skip": f32(2, 5, 24)}
    feeds = {k: v for k, v in feeds.items() if k == "x" or k in extra}
    node = helper.make_node(op, ["x", *extra], ["y"], domain=MS, **attrs)
    check([node], feeds, ["y"])


def test_bias_add_against_numpy():
    # ONNX Runtime has no CPU kernel for BiasAdd (a diffusion UNet's GPU fusion).
    x, b, skip = f32(2, 9, 40), f32(40), f32(2, 9, 40)
    node = helper.make_node("BiasAdd", ["x", "b", "skip"], ["y"], domain=MS)
    model = build([node], {"x": x, "b": b, "skip": skip}, ["y"])
    for device in DEVICES:
        (got,) = hidet_rs.compile(model, threads=2, device=device).run({"x": x, "b": b,
                                                                           "skip": skip})
        np.testing.assert_allclose(got, x + b + skip, rtol=1e-6, atol=1e-6)


def test_fused_conv_with_sum_and_activations():
    w, b = f32(6, 3, 3, 3, scale=0.3), f32(6)
    feeds = {"x": f32(2, 3, 9, 11), "z": f32(2, 6, 5, 6)}
    nodes = [
        helper.make_node(
            "FusedConv", ["x", "w", "b", "z"], ["y"], domain=MS, activation="Relu",
            kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
        ),
        helper.make_node(
            "FusedConv", ["x", "w"], ["y2"], domain=MS, activation="LeakyRelu",
            activation_params=[0.2], pads=[1, 1, 1, 1],
        ),
        helper.make_node(
            "FusedConv", ["x", "w", "b"], ["y3"], domain=MS, activation="Clip",
            activation_params=[-0.5, 0.7],
        ),
    ]
    check(nodes, feeds, ["y", "y2", "y3"], {"w": w, "b": b})


def test_fused_gemm_and_matmul():
    feeds = {"a": f32(7, 13), "p": f32(3, 13, 7), "q": f32(3, 5, 13)}
    nodes = [
        helper.make_node(
            "FusedGemm", ["a", "w", "c"], ["g"], domain=MS, transB=1, alpha=0.5, beta=2.0,
            activation="HardSigmoid", activation_alpha=0.3, activation_beta=0.4,
        ),
        helper.make_node("FusedMatMul", ["p", "q"], ["m"], domain=MS, transA=1, transB=1,
                         alpha=0.25),
        helper.make_node("FusedMatMul", ["a", "w"], ["m2"], domain=MS, transB=1),
    ]
    check(nodes, feeds, ["g", "m", "m2"], {"w": f32(9, 13), "c": f32(9)})


# --- normalizations ------------------------------------------------------------------------


def test_skip_layer_normalization_with_bias_and_sum():
    feeds = {"x": f32(2, 7, 40), "skip": f32(2, 7, 40)}
    init = {"gamma": f32(40), "beta": f32(40), "bias": f32(40)}
    nodes = [
        helper.make_node(
            "SkipLayerNormalization", ["x", "skip", "gamma", "beta", "bias"],
            ["y", "", "", "sum"], domain=MS, epsilon=1e-5,
        ),
        helper.make_node("SkipLayerNormalization", ["x", "skip", "gamma"], ["y2"], domain=MS),
    ]
    check(nodes, feeds, ["y", "sum", "y2"], init)


def test_simplified_layer_normalizations():
    feeds = {"x": f32(3, 5, 36, scale=3.0), "skip": f32(3, 5, 36)}
    init = {"gamma": f32(36), "bias": f32(36)}
    nodes = [
        helper.make_node(
            "SkipSimplifiedLayerNormalization", ["x", "skip", "gamma", "bias"],
            ["y", "", "", "sum"], domain=MS, epsilon=1e-6,
        ),
        helper.make_node(
            "SimplifiedLayerNormalization", ["sum", "gamma"], ["z", "inv"], axis=-1,
            epsilon=1e-5, stash_type=1,
        ),
    ]
    check(nodes, feeds, ["y", "sum", "z", "inv"], init)


def test_layer_normalization_before_opset_17():
    feeds = {"x": f32(4, 6, 30)}
    node = helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], axis=-1,
                            epsilon=1e-5)
    check([node], feeds, ["y"], {"g": f32(30), "b": f32(30)}, opset=13)


@pytest.mark.parametrize("with_segments", [True, False])
def test_embed_layer_normalization(with_segments):
    ids = RNG.integers(0, 50, (2, 7)).astype(np.int32)
    mask = np.ones((2, 7), np.int32)
    mask[1, 4:] = 0
    feeds = {"ids": ids, "mask": mask}
    init = {"word": f32(50, 32), "pos": f32(16, 32), "gamma": f32(32), "beta": f32(32)}
    if with_segments:
        feeds["seg"] = RNG.integers(0, 2, (2, 7)).astype(np.int32)
        init["segtab"] = f32(2, 32)
        inputs = ["ids", "seg", "word", "pos", "segtab", "gamma", "beta", "mask"]
        outputs = ["y", "mask_index", "sum"]
    else:
        inputs = ["ids", "", "word", "pos", "", "gamma", "beta", "mask"]
        outputs = ["y", "mask_index"]
    node = helper.make_node("EmbedLayerNormalization", inputs, outputs, domain=MS,
                            epsilon=1e-5)
    check([node], feeds, outputs, init)


# --- attention -----------------------------------------------------------------------------


def attention_mask(kind, batch, seq, total):
    if kind == "lengths":
        return np.array([total, total - 3][:batch], np.int32)
    if kind == "raw":
        m = np.ones((batch, total), np.int32)
        m[-1, total - 2:] = 0
        return m
    m = np.ones((batch, seq, total), np.int32)
    m[0, :, 1] = 0
    return m


@pytest.mark.parametrize(
    "mask, unidirectional, past",
    [(None, 0, 0), ("lengths", 0, 0), ("raw", 0, 0), ("3d", 1, 0), (None, 1, 3),
     ("raw", 1, 3)],
)
def test_attention(mask, unidirectional, past):
    batch, seq, hidden, heads = 2, 7, 36, 3
    feeds = {"x": f32(batch, seq, hidden)}
    inputs = ["x", "w", "b", "", ""]
    if mask:
        feeds["mask"] = attention_mask(mask, batch, seq, past + seq)
        inputs[3] = "mask"
    outputs = ["y"]
    if past:
        feeds["past"] = f32(2, batch, heads, past, hidden // heads)
        inputs[4] = "past"
        outputs.append("present")
    node = helper.make_node("Attention", inputs, outputs, domain=MS, num_heads=heads,
                            unidirectional=unidirectional)
    init = {"w": f32(hidden, 3 * hidden, scale=0.3), "b": f32(3 * hidden)}
    check([node], feeds, outputs, init)


def test_attention_with_bias_input_and_sizes():
    batch, seq, hidden, heads = 1, 5, 24, 2
    feeds = {"x": f32(batch, seq, hidden), "ab": f32(1, heads, seq, seq)}
    node = helper.make_node(
        "Attention", ["x", "w", "b", "", "", "ab"], ["y"], domain=MS, num_heads=heads,
        qkv_hidden_sizes=[16, 16, 20], scale=0.3,
    )
    init = {"w": f32(hidden, 52, scale=0.3), "b": f32(52)}
    check([node], feeds, ["y"], init)


@pytest.mark.parametrize("layout", ["separate", "bias_mask", "packed_qkv", "bnsh_kv", "past"])
def test_multi_head_attention(layout):
    batch, seq, kv_seq, heads, h = 2, 6, 9, 4, 8
    d = heads * h
    outputs = ["y"]
    attrs = {"num_heads": heads}
    if layout == "packed_qkv":
        feeds = {"q": f32(batch, seq, heads, 3, h)}
        inputs = ["q"]
    elif layout == "bnsh_kv":
        feeds = {"q": f32(batch, seq, d), "k": f32(batch, heads, kv_seq, h),
                 "v": f32(batch, heads, kv_seq, h)}
        inputs = ["q", "k", "v"]
    else:
        feeds = {"q": f32(batch, seq, d), "k": f32(batch, kv_seq, d), "v": f32(batch, kv_seq, d)}
        inputs = ["q", "k", "v"]
    if layout == "bias_mask":
        feeds["bias"] = f32(3 * d)
        mask = np.ones((batch, kv_seq), np.int32)
        mask[1, 6:] = 0
        feeds["mask"] = mask
        inputs += ["bias", "mask"]
    if layout == "past":
        feeds["k"], feeds["v"] = f32(batch, seq, d), f32(batch, seq, d)
        feeds["pk"], feeds["pv"] = f32(batch, heads, 3, h), f32(batch, heads, 3, h)
        inputs += ["", "", "", "pk", "pv"]
        outputs += ["present_k", "present_v"]
        attrs["unidirectional"] = 1
    node = helper.make_node("MultiHeadAttention", inputs, outputs, domain=MS, **attrs)
    want = None
    if layout == "packed_qkv":
        # ONNX Runtime's CPU kernel lacks this layout: its reference is the unpacked one.
        q, k, v = (feeds["q"][:, :, :, i].reshape(batch, seq, d) for i in range(3))
        same = helper.make_node("MultiHeadAttention", ["q", "k", "v"], outputs, domain=MS,
                                **attrs)
        want = ort_outputs(build([same], {"q": q, "k": k, "v": v}, outputs),
                           {"q": q, "k": k, "v": v}, outputs)
    check([node], feeds, outputs, want=want)


@pytest.mark.parametrize(
    "case", ["prompt", "prompt_rotary", "decode", "decode_rotary_interleaved", "window_softcap",
             "packed"],
)
def test_group_query_attention(case):
    heads, kv_heads, h = 6, 2, 16
    attrs = {"num_heads": heads, "kv_num_heads": kv_heads}
    if case.startswith("prompt") or case == "packed":
        batch, seq, past = 1, 7, 0
    elif case == "window_softcap":
        batch, seq, past = 1, 9, 0
        attrs.update(local_window_size=3, softcap=2.0)
    else:
        batch, seq, past = 2, 1, 5
    total = past + seq
    feeds = {
        "q": f32(batch, seq, heads * h),
        "k": f32(batch, seq, kv_heads * h),
        "v": f32(batch, seq, kv_heads * h),
        "pk": f32(batch, kv_heads, past, h),
        "pv": f32(batch, kv_heads, past, h),
        "seqlens_k": np.full(batch, total - 1, np.int32),
        "total": np.array([total], np.int32),
    }
    inputs = ["q", "k", "v", "pk", "pv", "seqlens_k", "total"]
    if case == "packed":
        feeds["q"] = f32(batch, seq, (heads + 2 * kv_heads) * h)
        inputs[1:3] = ["", ""]
        del feeds["k"], feeds["v"]
    if "rotary" in case:
        angles = np.arange(32)[:, None] / (100.0 ** (np.arange(h // 2) / (h // 2)))
        feeds["cos"] = np.cos(angles).astype(np.float32)
        feeds["sin"] = np.sin(angles).astype(np.float32)
        inputs += ["cos", "sin"]
        attrs["do_rotary"] = 1
        attrs["rotary_interleaved"] = int("interleaved" in case)
    node = helper.make_node("GroupQueryAttention", inputs, ["y", "present_k", "present_v"],
                            domain=MS, **attrs)
    check([node], feeds, ["y", "present_k", "present_v"])


@pytest.mark.parametrize("case", ["3d", "3d_interleaved", "4d", "offset", "partial"])
def test_rotary_embedding(case):
    batch, seq, heads, h = 2, 5, 3, 8
    max_pos = 20
    rot = 4 if case == "partial" else h
    angles = np.arange(max_pos)[:, None] / (50.0 ** (np.arange(rot // 2) / (rot // 2)))
    feeds = {
        "x": f32(batch, heads, seq, h) if case == "4d" else f32(batch, seq, heads * h),
        "pos": RNG.integers(0, max_pos - seq, (batch, seq)).astype(np.int64),
        "cos": np.cos(angles).astype(np.float32),
        "sin": np.sin(angles).astype(np.float32),
    }
    attrs = {"interleaved": int(case == "3d_interleaved")}
    if case == "offset":
        feeds["pos"] = np.array([4], np.int64)
    if case != "4d":
        attrs["num_heads"] = heads
    if case == "partial":
        attrs["rotary_embedding_dim"] = rot
    node = helper.make_node("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], domain=MS,
                            **attrs)
    check([node], feeds, ["y"])


# --- quantized products --------------------------------------------------------------------


def pack_nbits(q, bits):
    """Rows of `bits`-bit values packed low bits first, a row per leading index."""
    per_byte = 8 // bits
    rows = q.reshape(q.shape[0], -1, per_byte).astype(np.uint8)
    packed = np.zeros(rows.shape[:2], np.uint8)
    for i in range(per_byte):
        packed |= rows[:, :, i] << (i * bits)
    return packed


@pytest.mark.parametrize("bits, zero_points, bias", [(4, False, False), (4, True, True),
                                                     (8, True, False), (2, False, True)])
def test_matmul_nbits(bits, zero_points, bias):
    k, n, block = 40, 24, 16
    blocks = -(-k // block)
    q = RNG.integers(0, 1 << bits, (n, blocks * block))
    packed = pack_nbits(q, bits).reshape(n, blocks, block * bits // 8)
    init = {"w": packed, "scales": f32(n * blocks, scale=0.1)}
    inputs = ["a", "w", "scales", "", "", ""]
    if zero_points:
        zp = RNG.integers(0, 1 << bits, (n, -(-blocks * bits // 8) * (8 // bits)))
        init["zp"] = pack_nbits(zp, bits).reshape(-1)
        inputs[3] = "zp"
    if bias:
        init["bias"] = f32(n)
        inputs[5] = "bias"
    while inputs[-1] == "":
        inputs.pop()
    node = helper.make_node("MatMulNBits", inputs, ["y"], domain=MS, K=k, N=n, bits=bits,
                            block_size=block, accuracy_level=0)
    check([node], {"a": f32(2, 3, k)}, ["y"], init)


@pytest.mark.parametrize("form", ["rows", "float_zero_points", "identity_g_idx", "act_order",
                                  "one_token"])
def test_matmul_nbits_4bit_forms(form):
    """4-bit weights, read as stored on the CPU (`hidet::Int4Linear`): more rows than one
    chunk of the kernel, a depth that is not a multiple of the block, columns past a panel,
    float zero points, a `g_idx` that is the identity (read as stored) and one that is not
    (GPTQ's act-order: decoded when the graph is built)."""
    k, n, block = 100, 37, 32
    blocks = -(-k // block)
    q = RNG.integers(0, 16, (n, blocks * block))
    init = {"w": pack_nbits(q, 4).reshape(n, blocks, block // 2),
            "scales": f32(n * blocks, scale=0.1)}
    inputs = ["a", "w", "scales", "", ""]
    if form == "float_zero_points":
        init["zp"] = RNG.uniform(0, 15, n * blocks).astype(np.float32)
        inputs[3] = "zp"
    if form in ("identity_g_idx", "act_order"):
        g_idx = np.arange(k, dtype=np.int32) // block
        if form == "act_order":
            g_idx = RNG.permutation(g_idx).astype(np.int32)
        init["g_idx"] = g_idx
        inputs[4] = "g_idx"
    while inputs[-1] == "":
        inputs.pop()
    node = helper.make_node("MatMulNBits", inputs, ["y"], domain=MS, K=k, N=n, bits=4,
                            block_size=block, accuracy_level=0)
    rows = (1, 1) if form == "one_token" else (2, 35)
    check([node], {"a": f32(*rows, k)}, ["y"], init)


@pytest.mark.parametrize("dtype, zero_points", [(TensorProto.INT4, False),
                                               (TensorProto.UINT4, True)])
def test_qdq_int4_blocked_product(dtype, zero_points):
    """The QDQ form of 4-bit weights (ONNX Runtime's quantizer with QDQ output, opset 21):
    `MatMul(A, DequantizeLinear(x int4/uint4 [K, N], scale [K/bs, N], zero?; axis 0,
    block_size))`, read as stored on the CPU."""
    k, n, block = 72, 29, 16
    blocks = -(-k // block)
    lo, hi = (-8, 8) if dtype == TensorProto.INT4 else (0, 16)
    values = RNG.integers(lo, hi, (k, n))
    x = helper.make_tensor("x", dtype, [k, n], values.flatten().tolist())
    inits = [x, numpy_helper.from_array(np.abs(f32(blocks, n, scale=0.1)) + 0.01, "scale")]
    inputs = ["x", "scale"]
    if zero_points:
        zp = RNG.integers(lo, hi, (blocks, n))
        inits.append(helper.make_tensor("zero", dtype, [blocks, n], zp.flatten().tolist()))
        inputs.append("zero")
    nodes = [
        helper.make_node("DequantizeLinear", inputs, ["w"], axis=0, block_size=block),
        helper.make_node("MatMul", ["a", "w"], ["y"]),
    ]
    feeds = {"a": f32(2, 5, k)}
    graph = helper.make_graph(
        nodes, "qdq_int4",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 5, k])],
        [helper.make_empty_tensor_value_info("y")], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    model = model.SerializeToString()
    want = ort_outputs(model, feeds, ["y"])
    for device in DEVICES:
        got = hidet_rs.compile(model, threads=2, device=device).run(feeds)
        err = float(np.abs(got[0].astype(np.float64) - want[0]).max()) / np.abs(want[0]).max()
        assert err <= 1e-5, f"{device}: max relative error {err:.2e}"


def test_matmul_nbits_model_saved_dense(tmp_path):
    """A model with `MatMulNBits` written by `save_onnx` holds the weights dense in standard
    operators (hidet keeps them as blocks in its own operator): ONNX Runtime runs the file and
    agrees with the original model."""
    k, n, block = 48, 20, 16
    q = RNG.integers(0, 16, (n, k))
    init = {"w": pack_nbits(q, 4).reshape(n, k // block, block // 2),
            "scales": f32(n * (k // block), scale=0.1)}
    node = helper.make_node("MatMulNBits", ["a", "w", "scales"], ["y"], domain=MS, K=k, N=n,
                            bits=4, block_size=block, accuracy_level=0)
    feeds = {"a": f32(3, k)}
    model = build([node], feeds, ["y"], init)
    path = tmp_path / "dense.onnx"
    hidet_rs.load(model).save_onnx(path)
    saved = onnx.load(str(path))
    assert {nd.domain for nd in saved.graph.node} == {""}, [nd.op_type for nd in saved.graph.node]
    got = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
    want = ort_outputs(model, feeds, ["y"])
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)


def test_integer_products_to_float():
    k, n = 19, 11
    feeds = {
        "a": RNG.integers(0, 256, (5, k)).astype(np.uint8),
        "x": f32(3, 4, k),
    }
    init = {
        # Weights in [-64, 64): ONNX Runtime's AVX2 uint8 x int8 kernel adds products in
        # pairs with 16-bit saturation (255·127·2 overflows), so on a host without AVX-512
        # VNNI its output is wrong for full-range weights; hidet's is exact either way.
        "b": RNG.integers(-64, 64, (k, n)).astype(np.int8),
        "a_scale": np.array(0.02, np.float32),
        "b_scale": np.abs(f32(n, scale=0.01)) + 0.001,
        "a_zero": np.array(131, np.uint8),
        "bias": f32(n),
    }
    nodes = [
        helper.make_node("MatMulIntegerToFloat",
                         ["a", "b", "a_scale", "b_scale", "a_zero", "", "bias"], ["y"],
                         domain=MS),
        helper.make_node("DynamicQuantizeMatMul", ["x", "b", "b_scale", "", "bias"], ["z"],
                         domain=MS),
    ]
    check(nodes, feeds, ["y", "z"], init, rtol=2e-3)


def test_unsupported_contrib_forms_are_named():
    node = helper.make_node("Attention", ["x", "w"], ["y"], domain=MS, num_heads=2,
                            do_rotary=1)
    model = build([node], {"x": f32(1, 3, 8)}, ["y"], {"w": f32(8, 24)})
    with pytest.raises(hidet_rs.HidetError, match="Attention with do_rotary = 1"):
        hidet_rs.compile(model)


# --- operators of ONNX opsets 23-28 --------------------------------------------------------


def test_opset_24_convolution_network():
    feeds = {"x": f32(2, 3, 11, 9)}
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Swish", ["c"], ["s"], alpha=1.3),
        helper.make_node("Flatten", ["s"], ["f"]),
        helper.make_node("Reshape", ["f", "shape"], ["y"]),
    ]
    init = {"w": f32(4, 3, 3, 3, scale=0.3), "shape": np.array([2, 4, -1], np.int64)}
    check(nodes, feeds, ["y"], init, opset=24)


@pytest.mark.parametrize("axis", [-1, 1])
def test_rms_normalization(axis):
    feeds = {"x": f32(3, 4, 10, scale=2.0)}
    scale = f32(10) if axis == -1 else f32(4, 10)
    node = helper.make_node("RMSNormalization", ["x", "scale"], ["y"], axis=axis, epsilon=1e-5)
    check([node], feeds, ["y"], {"scale": scale}, opset=23)


@pytest.mark.parametrize("case", ["3d_ids", "4d_interleaved", "tables", "partial"])
def test_onnx_rotary_embedding(case):
    batch, seq, heads, h = 2, 5, 3, 8
    rot = 4 if case == "partial" else h
    angles = np.arange(16)[:, None] / (50.0 ** (np.arange(rot // 2) / (rot // 2)))
    cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    pos = RNG.integers(0, 16 - seq, (batch, seq)).astype(np.int64)
    x = f32(batch, heads, seq, h) if case == "4d_interleaved" else f32(batch, seq, heads * h)
    attrs = {"interleaved": int(case == "4d_interleaved")}
    if case != "4d_interleaved":
        attrs["num_heads"] = heads
    if case == "partial":
        attrs["rotary_embedding_dim"] = rot
    if case == "tables":
        feeds = {"x": x, "cos": cos[pos], "sin": sin[pos]}
        inputs = ["x", "cos", "sin"]
    else:
        feeds = {"x": x, "cos": cos, "sin": sin, "pos": pos}
        inputs = ["x", "cos", "sin", "pos"]
    node = helper.make_node("RotaryEmbedding", inputs, ["y"], **attrs)
    check([node], feeds, ["y"], opset=23)


@pytest.mark.parametrize(
    "case", ["3d_causal", "4d_gqa_bool_mask", "past_causal", "float_mask_softcap",
             "gqa_head_mask", "nonpad"],
)
def test_onnx_attention(case):
    batch, seq, heads, kv_heads, h = 2, 5, 4, 2, 8
    attrs, opset = {}, 23
    outputs = ["y"]
    if case == "3d_causal":
        feeds = {"q": f32(batch, seq, heads * h), "k": f32(batch, seq, heads * h),
                 "v": f32(batch, seq, heads * h)}
        inputs = ["q", "k", "v"]
        attrs = {"q_num_heads": heads, "kv_num_heads": heads, "is_causal": 1}
    else:
        feeds = {"q": f32(batch, heads, seq, h), "k": f32(batch, kv_heads, 7, h),
                 "v": f32(batch, kv_heads, 7, h)}
        inputs = ["q", "k", "v"]
    if case == "4d_gqa_bool_mask":
        mask = np.ones((batch, 1, seq, 7), bool)
        mask[1, :, :, 5:] = False
        feeds["mask"] = mask
        inputs.append("mask")
    if case == "past_causal":
        feeds["k"], feeds["v"] = f32(batch, kv_heads, seq, h), f32(batch, kv_heads, seq, h)
        feeds["pk"], feeds["pv"] = f32(batch, kv_heads, 3, h), f32(batch, kv_heads, 3, h)
        inputs += ["", "pk", "pv"]
        outputs += ["present_k", "present_v"]
        attrs = {"is_causal": 1}
    if case == "float_mask_softcap":
        feeds["mask"] = f32(seq, 7)
        inputs.append("mask")
        attrs = {"softcap": 3.0, "scale": 0.2}
    if case == "gqa_head_mask":
        feeds["mask"] = f32(1, heads, seq, 7)
        inputs.append("mask")
    if case == "nonpad":
        feeds["lengths"] = np.array([7, 6], np.int64)
        inputs += ["", "", "", "lengths"]
        attrs = {"is_causal": 1}
        opset = 24
    node = helper.make_node("Attention", inputs, outputs, **attrs)
    check([node], feeds, outputs, opset=opset)


def test_quantized_attention():
    batch, seq, hidden, heads = 2, 5, 16, 2
    feeds = {
        "x": RNG.integers(0, 256, (batch, seq, hidden)).astype(np.uint8),
        "mask": np.array([5, 3], np.int32),
    }
    init = {
        # In [-64, 64): see test_integer_products_to_float (ONNX Runtime saturates on AVX2).
        "w": RNG.integers(-64, 64, (hidden, 3 * hidden)).astype(np.int8),
        "b": f32(3 * hidden),
        "xs": np.array(0.01, np.float32),
        "ws": np.array(0.003, np.float32),
        "xz": np.array(121, np.uint8),
        "wz": np.array(0, np.int8),
    }
    node = helper.make_node("QAttention", ["x", "w", "b", "xs", "ws", "mask", "xz", "wz"], ["y"],
                            domain=MS, num_heads=heads)
    check([node], feeds, ["y"], init, rtol=1e-3)


def test_quantized_embed_layer_normalization():
    def quantized(shape):
        return RNG.integers(0, 256, shape).astype(np.uint8)

    ids = RNG.integers(0, 30, (2, 7)).astype(np.int32)
    mask = np.ones((2, 7), np.int32)
    mask[0, 5:] = 0
    feeds = {"ids": ids, "seg": RNG.integers(0, 2, (2, 7)).astype(np.int32), "mask": mask}
    names = ["word", "pos", "segtab", "gamma", "beta"]
    shapes = [(30, 16), (9, 16), (2, 16), (16,), (16,)]
    init = {n: quantized(s) for n, s in zip(names, shapes)}
    init.update({f"{n}_s": np.array(0.02 + 0.01 * i, np.float32) for i, n in enumerate(names)})
    init.update({f"{n}_z": np.array(100 + i, np.uint8) for i, n in enumerate(names)})
    inputs = ["ids", "seg", *names, "mask", *[f"{n}_s" for n in names],
              *[f"{n}_z" for n in names]]
    node = helper.make_node("QEmbedLayerNormalization", inputs, ["y", "mask_index"], domain=MS,
                            epsilon=1e-5)
    check([node], feeds, ["y", "mask_index"], init)


@pytest.mark.parametrize("mode, indices, axis", [("linear", True, -2), ("linear", False, -2),
                                                 ("circular", True, 2), ("linear", True, 1)])
def test_tensor_scatter(mode, indices, axis):
    batch, heads, slots, h = 2, 3, 9, 5
    past = f32(batch, heads, slots, h)
    if axis == 1:
        past = f32(batch, slots, heads, h)
        update = f32(batch, 4, heads, h)
    else:
        update = f32(batch, heads, 4, h)
    feeds = {"past": past, "update": update}
    inputs = ["past", "update"]
    if indices:
        feeds["at"] = np.array([3, 7] if mode == "circular" else [0, 5], np.int64)
        inputs.append("at")
    node = helper.make_node("TensorScatter", inputs, ["y"], mode=mode, axis=axis)
    check([node], feeds, ["y"], opset=24)


@pytest.mark.parametrize("rotary", [False, True])
def test_group_query_attention_generates_a_padded_batch(rotary):
    """A prefill of two right-padded rows, then two decode steps, each engine fed its own
    presents: a row's new keys go right after its own past, so the outputs stay ONNX
    Runtime's at every step."""
    heads, kv_heads, h = 4, 2, 16
    attrs = {"num_heads": heads, "kv_num_heads": kv_heads}
    inputs = ["q", "k", "v", "pk", "pv", "seqlens_k", "total"]
    extra_init = []
    if rotary:
        angles = np.arange(32)[:, None] / (100.0 ** (np.arange(h // 2) / (h // 2)))
        extra_init = [numpy_helper.from_array(np.cos(angles).astype(np.float32), "cos"),
                      numpy_helper.from_array(np.sin(angles).astype(np.float32), "sin")]
        inputs += ["cos", "sin"]
        attrs["do_rotary"] = 1
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        [helper.make_node("GroupQueryAttention", inputs, ["y", "present_k", "present_v"],
                          domain=MS, **attrs)],
        "gqa",
        [helper.make_tensor_value_info("q", f, [2, "S", heads * h]),
         helper.make_tensor_value_info("k", f, [2, "S", kv_heads * h]),
         helper.make_tensor_value_info("v", f, [2, "S", kv_heads * h]),
         helper.make_tensor_value_info("pk", f, [2, kv_heads, "P", h]),
         helper.make_tensor_value_info("pv", f, [2, kv_heads, "P", h]),
         helper.make_tensor_value_info("seqlens_k", TensorProto.INT32, [2]),
         helper.make_tensor_value_info("total", TensorProto.INT32, [1])],
        [helper.make_empty_tensor_value_info(n) for n in ["y", "present_k", "present_v"]],
        extra_init,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])
    model.ir_version = 8
    model = model.SerializeToString()
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    compiled = hidet_rs.compile(model, threads=2)
    lengths = np.array([5, 3])
    past = {name: np.zeros((2, kv_heads, 0, h), np.float32) for name in ("pk", "pv")}
    theirs, ours = dict(past), dict(past)
    for step, seq in enumerate([5, 1, 1]):
        total = 5 + step
        feeds = {"q": f32(2, seq, heads * h), "k": f32(2, seq, kv_heads * h),
                 "v": f32(2, seq, kv_heads * h),
                 "seqlens_k": (lengths + step - 1).astype(np.int32),
                 "total": np.array([total], np.int32)}
        want = session.run(None, {**feeds, **theirs})
        got = compiled.run({**feeds, **ours})
        valid_rows = slice(None) if step else slice(0, 3)
        err = np.abs(got[0][:, valid_rows] - want[0][:, valid_rows]).max()
        assert err <= 1e-4 * np.abs(want[0]).max(), f"step {step}: {err}"
        theirs = {"pk": want[1], "pv": want[2]}
        ours = {"pk": got[1], "pv": got[2]}
        for b, n in enumerate(lengths + step):
            np.testing.assert_allclose(got[1][b, :, :n], want[1][b, :, :n], rtol=1e-5, atol=1e-6)
