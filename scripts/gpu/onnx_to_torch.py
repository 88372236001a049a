"""An ONNX graph as a torch.fx GraphModule of plain torch calls (the PyTorch peer of the device
check, scripts/gpu/torch_peers.py).

Each ONNX node becomes the torch call a hand-written PyTorch model would make (`F.conv2d`,
`F.linear`, `F.embedding`, `F.layer_norm`, `torch.matmul`, ...), and the generated Python is
straight-line code, so eager mode pays no interpretation overhead. Inputs that ONNX passes as
tensors but that are constants of the model (Reshape's shape, Split's sizes, Unsqueeze's axes,
Clip's bounds, Trilu's k) become Python values in the generated code, which `torch.compile`
traces without graph breaks. (onnx2torch keeps them as tensors, and dynamo fails on its
Reshape; that is why this exists.)

Covers the operators of hidet's zoo models and a few more; any other operator is a
NotImplementedError naming it. Every initializer is a buffer of the module (moved by `.to()`).
"""

from __future__ import annotations

import math
import operator

import numpy as np
import torch
import torch.nn.functional as F
from onnx import helper, numpy_helper

_DTYPES = {
    1: torch.float32,
    2: torch.uint8,
    3: torch.int8,
    5: torch.int16,
    6: torch.int32,
    7: torch.int64,
    9: torch.bool,
    10: torch.float16,
    11: torch.float64,
    16: torch.bfloat16,
}


def _flatten(x, axis: int):
    return x.reshape(math.prod(x.shape[:axis]), -1)


def _reshape(x, shape: tuple):
    # ONNX Reshape (allowzero = 0): a 0 copies the input's dimension.
    return x.reshape([x.shape[i] if d == 0 else d for i, d in enumerate(shape)])


def _global_average(x):
    return x.mean(dim=tuple(range(2, x.dim())), keepdim=True)


def _layer_norm(x, weight, bias, axis: int, epsilon: float):
    return F.layer_norm(x, tuple(x.shape[axis:]), weight, bias, epsilon)


def _gather(data, indices, axis: int):
    return data[(slice(None),) * axis + (indices,)]


def _unsqueeze(x, axes: tuple):
    rank = x.dim() + len(axes)
    for a in sorted(a % rank for a in axes):
        x = x.unsqueeze(a)
    return x


def _squeeze(x, axes):
    if axes is None:
        return x.squeeze()
    for a in sorted((a % x.dim() for a in axes), reverse=True):
        x = x.squeeze(a)
    return x


def _gemm(a, b, c, alpha: float, beta: float, trans_a: bool, trans_b: bool):
    a = a.t() if trans_a else a
    b = b.t() if trans_b else b
    y = a @ b
    if alpha != 1.0:
        y = y * alpha
    if c is not None:
        y = y + (c if beta == 1.0 else c * beta)
    return y


def _pads_symmetric(pads, spatial: int):
    begin, end = pads[:spatial], pads[spatial:]
    return tuple(begin) if list(begin) == list(end) else None


def _torch_pad(pads, spatial: int):
    """ONNX [b1, b2, ..., e1, e2, ...] → F.pad's (last-dim first) pairs."""
    out = []
    for i in reversed(range(spatial)):
        out += [pads[i], pads[i + spatial]]
    return tuple(out)


class _Builder:
    def __init__(self, model):
        self.graph = torch.fx.Graph()
        self.root = torch.nn.Module()
        self.constants = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
        self.env: dict[str, torch.fx.Node] = {}
        self.buffers = 0

    # values ---------------------------------------------------------------------------------

    def tensor(self, name: str):
        """The fx node of value `name` (an initializer becomes a buffer on first use)."""
        if not name:
            return None
        if name not in self.env:
            if name not in self.constants:
                raise ValueError(f"value `{name}` is used before it is defined")
            buffer = f"c{self.buffers}"
            self.buffers += 1
            self.root.register_buffer(buffer, torch.from_numpy(np.array(self.constants[name])))
            self.env[name] = self.graph.get_attr(buffer)
        return self.env[name]

    def const(self, node, slot: int):
        """Input `slot` of `node` as a numpy array: it must be a constant of the model."""
        if slot >= len(node.input) or not node.input[slot]:
            return None
        name = node.input[slot]
        if name not in self.constants:
            raise NotImplementedError(f"{node.op_type} `{node.name}`: input `{name}` must be a constant")
        return self.constants[name]

    def call(self, fn, *args, **kwargs):
        return self.graph.call_function(fn, args, kwargs)

    # nodes ----------------------------------------------------------------------------------

    def node(self, node):
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        op = node.op_type
        if op == "Constant":
            value = attrs.get("value")
            if value is None:
                raise NotImplementedError(f"Constant `{node.name}`: only `value` tensors")
            self.constants[node.output[0]] = numpy_helper.to_array(value)
            return
        handler = getattr(self, f"op_{op}", None)
        if handler is None:
            unary = _UNARY.get(op)
            binary = _BINARY.get(op)
            if unary is not None:
                outs = self.call(unary, self.tensor(node.input[0]))
            elif binary is not None:
                outs = self.call(binary, self.tensor(node.input[0]), self.tensor(node.input[1]))
            else:
                raise NotImplementedError(f"operator {op} (node `{node.name}`) has no torch translation")
        else:
            outs = handler(node, attrs)
        if isinstance(outs, (list, tuple)):
            for name, out in zip(node.output, outs):
                if name:
                    self.env[name] = out
        else:
            self.env[node.output[0]] = outs

    def op_Conv(self, node, a):
        x, w, b = (self.tensor(i) for i in (list(node.input) + [""])[:3])
        kernel = self.constants[node.input[1]].shape[2:] if node.input[1] in self.constants else None
        spatial = len(a.get("kernel_shape", kernel))
        if a.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
            raise NotImplementedError(f"Conv `{node.name}`: auto_pad")
        pads = a.get("pads", [0] * 2 * spatial)
        padding = _pads_symmetric(pads, spatial)
        if padding is None:
            x = self.call(F.pad, x, _torch_pad(pads, spatial))
            padding = (0,) * spatial
        conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[spatial]
        return self.call(
            conv, x, w, b,
            stride=tuple(a.get("strides", [1] * spatial)),
            padding=padding,
            dilation=tuple(a.get("dilations", [1] * spatial)),
            groups=a.get("group", 1),
        )

    def _pool(self, node, a, kind):
        x = self.tensor(node.input[0])
        kernel = tuple(a["kernel_shape"])
        spatial = len(kernel)
        pads = a.get("pads", [0] * 2 * spatial)
        padding = _pads_symmetric(pads, spatial)
        if padding is None:
            raise NotImplementedError(f"{node.op_type} `{node.name}`: asymmetric pads")
        common = dict(stride=tuple(a.get("strides", [1] * spatial)), padding=padding, ceil_mode=bool(a.get("ceil_mode", 0)))
        if kind == "max":
            fn = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}[spatial]
            return self.call(fn, x, kernel, dilation=tuple(a.get("dilations", [1] * spatial)), **common)
        fn = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}[spatial]
        return self.call(fn, x, kernel, count_include_pad=bool(a.get("count_include_pad", 0)), **common)

    def op_MaxPool(self, node, a):
        if len(node.output) > 1 and node.output[1]:
            raise NotImplementedError(f"MaxPool `{node.name}`: indices output")
        return self._pool(node, a, "max")

    def op_AveragePool(self, node, a):
        return self._pool(node, a, "avg")

    def op_GlobalAveragePool(self, node, a):
        return self.call(_global_average, self.tensor(node.input[0]))

    def op_Flatten(self, node, a):
        return self.call(_flatten, self.tensor(node.input[0]), a.get("axis", 1))

    def op_Gemm(self, node, a):
        x, w = self.tensor(node.input[0]), self.tensor(node.input[1])
        c = self.tensor(node.input[2]) if len(node.input) > 2 else None
        alpha, beta = a.get("alpha", 1.0), a.get("beta", 1.0)
        ta, tb = bool(a.get("transA", 0)), bool(a.get("transB", 0))
        if not ta and tb and alpha == 1.0 and beta == 1.0:
            return self.call(F.linear, x, w, c)
        return self.call(_gemm, x, w, c, alpha, beta, ta, tb)

    def op_Clip(self, node, a):
        lo, hi = self.const(node, 1), self.const(node, 2)
        lo = float(lo) if lo is not None else a.get("min")
        hi = float(hi) if hi is not None else a.get("max")
        return self.call(torch.clamp, self.tensor(node.input[0]), lo, hi)

    def op_Pow(self, node, a):
        exponent = self.const(node, 1) if node.input[1] in self.constants else None
        if exponent is not None and exponent.size == 1:
            return self.call(torch.pow, self.tensor(node.input[0]), float(exponent))
        return self.call(torch.pow, self.tensor(node.input[0]), self.tensor(node.input[1]))

    def op_Reshape(self, node, a):
        if a.get("allowzero", 0):
            raise NotImplementedError(f"Reshape `{node.name}`: allowzero")
        shape = tuple(int(d) for d in self.const(node, 1))
        return self.call(_reshape, self.tensor(node.input[0]), shape)

    def op_Transpose(self, node, a):
        x = self.tensor(node.input[0])
        perm = a.get("perm")
        if perm is None:
            raise NotImplementedError(f"Transpose `{node.name}`: default perm")
        return self.call(torch.permute, x, tuple(perm))

    def op_LayerNormalization(self, node, a):
        if len([o for o in node.output if o]) > 1:
            raise NotImplementedError(f"LayerNormalization `{node.name}`: mean/inv-std outputs")
        x, w = self.tensor(node.input[0]), self.tensor(node.input[1])
        b = self.tensor(node.input[2]) if len(node.input) > 2 else None
        return self.call(_layer_norm, x, w, b, a.get("axis", -1), a.get("epsilon", 1e-5))

    def op_Softmax(self, node, a):
        return self.call(torch.softmax, self.tensor(node.input[0]), a.get("axis", -1))

    def op_Gather(self, node, a):
        data, indices = self.tensor(node.input[0]), self.tensor(node.input[1])
        axis = a.get("axis", 0)
        table = self.constants.get(node.input[0])
        if axis == 0 and table is not None and table.ndim == 2:
            return self.call(F.embedding, indices, data)
        return self.call(_gather, data, indices, axis)

    def op_Cast(self, node, a):
        return self.call(torch.Tensor.to, self.tensor(node.input[0]), _DTYPES[a["to"]])

    def op_Identity(self, node, a):
        return self.tensor(node.input[0])

    def op_Unsqueeze(self, node, a):
        axes = self.const(node, 1) if len(node.input) > 1 else a["axes"]
        return self.call(_unsqueeze, self.tensor(node.input[0]), tuple(int(x) for x in axes))

    def op_Squeeze(self, node, a):
        axes = self.const(node, 1) if len(node.input) > 1 else a.get("axes")
        axes = None if axes is None else tuple(int(x) for x in axes)
        return self.call(_squeeze, self.tensor(node.input[0]), axes)

    def op_Split(self, node, a):
        x = self.tensor(node.input[0])
        axis = a.get("axis", 0)
        sizes = self.const(node, 1) if len(node.input) > 1 else a.get("split")
        if sizes is None:
            raise NotImplementedError(f"Split `{node.name}`: equal parts (give split sizes)")
        parts = self.call(torch.split, x, [int(s) for s in sizes], axis)
        return [self.call(operator.getitem, parts, i) for i in range(len(node.output))]

    def op_Where(self, node, a):
        return self.call(torch.where, *(self.tensor(i) for i in node.input))

    def op_Trilu(self, node, a):
        k = self.const(node, 1)
        k = 0 if k is None else int(k)
        fn = torch.triu if a.get("upper", 1) else torch.tril
        return self.call(fn, self.tensor(node.input[0]), k)

    def op_Concat(self, node, a):
        return self.call(torch.cat, [self.tensor(i) for i in node.input], a["axis"])

    def op_ReduceMean(self, node, a):
        axes = self.const(node, 1) if len(node.input) > 1 else a.get("axes")
        if axes is None:
            raise NotImplementedError(f"ReduceMean `{node.name}`: all axes")
        return self.call(torch.mean, self.tensor(node.input[0]), tuple(int(x) for x in axes), keepdim=bool(a.get("keepdims", 1)))


_UNARY = {
    "Relu": F.relu,
    "Sigmoid": torch.sigmoid,
    "Tanh": torch.tanh,
    "Erf": torch.erf,
    "Sqrt": torch.sqrt,
    "Exp": torch.exp,
    "Neg": torch.neg,
    "Abs": torch.abs,
    "Reciprocal": torch.reciprocal,
    "Not": torch.logical_not,
}
_BINARY = {
    "Add": torch.add,
    "Sub": torch.sub,
    "Mul": torch.mul,
    "Div": torch.div,
    "MatMul": torch.matmul,
    "Equal": torch.eq,
    "Less": torch.lt,
    "Greater": torch.gt,
}


def convert(model) -> torch.fx.GraphModule:
    """`model` (an onnx.ModelProto, default domain) as a GraphModule taking the graph inputs
    (initializers excluded) in order and returning a tuple of the graph outputs."""
    b = _Builder(model)
    for value in model.graph.input:
        if value.name not in b.constants:
            b.env[value.name] = b.graph.placeholder(f"in{len(b.env)}")
    for node in model.graph.node:
        if node.domain not in ("", "ai.onnx"):
            raise NotImplementedError(f"operator {node.domain}.{node.op_type}")
        b.node(node)
    b.graph.output(tuple(b.tensor(o.name) for o in model.graph.output))
    return torch.fx.GraphModule(b.root, b.graph)
