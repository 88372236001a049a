#!/usr/bin/env python3
"""Writes one-convolution ONNX models (convolution + bias + ReLU, batch 1, random weights)
of the 3×3, 1×7 and 7×1 shapes of ResNet-50 and Inception-V3, to compare convolution
algorithms kernel by kernel (for example two builds with scripts/ab_binaries.py).

Usage:
  .venv/bin/python scripts/conv_cases.py OUT_DIR
  .venv/bin/python scripts/ab_binaries.py BASE_HIDET NEW_HIDET OUT_DIR/*.onnx --rounds 6
"""

import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# name: (input channels, output channels, input height = width, window (rows, columns),
# padding (rows, columns), on both sides)
CASES = {
    "resnet_56": (64, 64, 56, (3, 3), (1, 1)),
    "resnet_28": (128, 128, 28, (3, 3), (1, 1)),
    "resnet_14": (256, 256, 14, (3, 3), (1, 1)),
    "inception_149": (32, 32, 149, (3, 3), (0, 0)),
    "inception_147": (32, 64, 147, (3, 3), (1, 1)),
    "inception_73": (80, 192, 73, (3, 3), (0, 0)),
    "inception_35a": (64, 96, 35, (3, 3), (1, 1)),
    "inception_35b": (96, 96, 35, (3, 3), (1, 1)),
    "inception_17_1x7_128": (128, 128, 17, (1, 7), (0, 3)),
    "inception_17_7x1_128": (128, 128, 17, (7, 1), (3, 0)),
    "inception_17_1x7_192": (192, 192, 17, (1, 7), (0, 3)),
    "inception_17_7x1_192": (192, 192, 17, (7, 1), (3, 0)),
}


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    rng = np.random.default_rng(0)
    for name, (c, oc, hw, (kh, kw), (ph, pw)) in CASES.items():
        w = (rng.standard_normal((oc, c, kh, kw)) * 0.05).astype(np.float32)
        b = (rng.standard_normal(oc) * 0.1).astype(np.float32)
        oh, ow = hw + 2 * ph - kh + 1, hw + 2 * pw - kw + 1
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, hw, hw])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, oc, oh, ow])
        pads = [ph, pw, ph, pw]
        conv = helper.make_node("Conv", ["x", "w", "b"], ["t"], kernel_shape=[kh, kw], pads=pads)
        relu = helper.make_node("Relu", ["t"], ["y"])
        inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")]
        graph = helper.make_graph([conv, relu], name, [x], [y], inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        path = os.path.join(out_dir, f"{name}.onnx")
        onnx.save(model, path)
        print(path)


if __name__ == "__main__":
    main()
