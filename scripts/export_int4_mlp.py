#!/usr/bin/env python3
"""Writes a stack of Llama-style MLP blocks whose weights are 4-bit `MatMulNBits`, the form
ONNX Runtime's int4 quantizer and its generative model builder write, at a real model's
sizes: for benchmarking products by block-quantized weights (`hidet bench` against ONNX
Runtime through scripts/bench_peers.py).

Each block: `x + down(silu(gate(x)) * up(x))`, the three products `MatMulNBits` of random
weights (4 bits, blocks of `--block-size` along the depth, uint8 zero points, random scales).
The input `x` is `[batch, seq, hidden]` with symbolic `batch` and `seq` (bind them with
`--dim`). Two files are written: `level0.onnx` (`accuracy_level` 0: ONNX Runtime computes
in float32, as hidet does) and `level4.onnx` (`accuracy_level` 4: ONNX Runtime quantizes the
activations to int8 per block, its fastest CPU path, 1e-2 off the float32 result).

    .venv/bin/python scripts/export_int4_mlp.py --out /tmp/int4_mlp
    # TinyLlama's sizes by default: hidden 2048, intermediate 5632, 4 blocks (139 M weights)
"""

import argparse
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

MS = "com.microsoft"


def pack4(q):
    """`[N, K]` 4-bit values as `[N, K/2]` bytes, even `k` in the low bits."""
    return (q[:, 0::2] | (q[:, 1::2] << 4)).astype(np.uint8)


def nbits(rng, name, k, n, block, level, inits):
    """A `MatMulNBits` node of `k × n` random 4-bit weights reading `name + '_in'`."""
    blocks = -(-k // block)
    q = rng.integers(0, 16, (n, blocks * block), dtype=np.uint8)
    zp = rng.integers(6, 10, (n, blocks + blocks % 2), dtype=np.uint8)
    # Scales that keep the activations' magnitude: 1/sqrt(k) over a value spread of ~4.6.
    scale = (rng.uniform(0.5, 1.5, (n * blocks,)) / (4.6 * np.sqrt(k))).astype(np.float32)
    inits += [
        numpy_helper.from_array(pack4(q).reshape(n, blocks, block // 2), f"{name}_q"),
        numpy_helper.from_array(scale, f"{name}_s"),
        numpy_helper.from_array(pack4(zp).reshape(-1), f"{name}_z"),
    ]
    return lambda x, y: helper.make_node(
        "MatMulNBits", [x, f"{name}_q", f"{name}_s", f"{name}_z"], [y], domain=MS,
        K=k, N=n, bits=4, block_size=block, accuracy_level=level, name=name)


def build(args, level):
    rng = np.random.default_rng(args.seed)
    inits, nodes = [], []
    x = "x"
    for layer in range(args.layers):
        p = f"l{layer}"
        gate = nbits(rng, f"{p}_gate", args.hidden, args.intermediate, args.block_size, level,
                     inits)
        up = nbits(rng, f"{p}_up", args.hidden, args.intermediate, args.block_size, level,
                   inits)
        down = nbits(rng, f"{p}_down", args.intermediate, args.hidden, args.block_size, level,
                     inits)
        nodes += [
            gate(x, f"{p}_g"),
            up(x, f"{p}_u"),
            helper.make_node("Sigmoid", [f"{p}_g"], [f"{p}_sg"]),
            helper.make_node("Mul", [f"{p}_g", f"{p}_sg"], [f"{p}_silu"]),
            helper.make_node("Mul", [f"{p}_silu", f"{p}_u"], [f"{p}_m"]),
            down(f"{p}_m", f"{p}_d"),
            helper.make_node("Add", [x, f"{p}_d"], [f"{p}_out"]),
        ]
        x = f"{p}_out"
    nodes.append(helper.make_node("Identity", [x], ["y"]))
    shape = ["batch", "seq", args.hidden]
    graph = helper.make_graph(
        nodes, "int4_mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], inits)
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])
    model.ir_version = 8
    return model


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="folder for level0.onnx and level4.onnx")
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--intermediate", type=int, default=5632)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--block-size", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for level in (0, 4):
        path = os.path.join(args.out, f"level{level}.onnx")
        onnx.save(build(args, level), path)
        print(f"wrote {path} ({os.path.getsize(path) / 2**20:.1f} MiB)")


if __name__ == "__main__":
    main()
