#!/usr/bin/env python3
"""Resident memory of a model compiled by hidet (the `hidet_rs` package) and by ONNX Runtime,
side by side: each runs in its own process, compiles or loads the model, runs it a few times
on seeded random inputs (symbolic dimensions set to 1 unless given with --dim), then reports
its resident size (steady: after the runs, the model still alive) and its peak.

    .venv/bin/python scripts/memory_footprint.py --model FILE.onnx [--dim seq=128] [--threads 2]
"""

import argparse
import json
import subprocess
import sys

CHILD = r"""
import json, sys
import numpy as np
peer, path, specs, threads = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), int(sys.argv[4])
rng = np.random.default_rng(0)

def status(key):
    text = open("/proc/self/status").read()
    return int(text.split(key + ":")[1].split()[0]) // 1024

feeds = {}
for name, shape, dtype in specs:
    if dtype == "float32":
        feeds[name] = rng.standard_normal(shape).astype(dtype)
    else:
        feeds[name] = rng.integers(0, 2, shape).astype(dtype)
if peer == "hidet":
    import hidet_rs
    model = hidet_rs.compile(path, threads=threads)
    run = lambda: model.run(feeds)
else:
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    session = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    run = lambda: session.run(None, feeds)
for _ in range(5):
    run()
print(json.dumps({"steady": status("VmRSS"), "peak": status("VmHWM")}))
"""


def input_specs(path, dims):
    """`(name, shape, dtype)` of every graph input that is not an initializer (read here, so
    the measured processes never hold the model twice)."""
    import onnx
    from onnx.helper import tensor_dtype_to_np_dtype

    graph = onnx.load(path, load_external_data=False).graph
    stored = {t.name for t in graph.initializer}
    specs = []
    for i in graph.input:
        if i.name in stored:
            continue
        t = i.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else dims.get(d.dim_param, 1)
                 for d in t.shape.dim]
        specs.append((i.name, shape, str(tensor_dtype_to_np_dtype(t.elem_type))))
    return specs


def measure(peer, model, dims, threads):
    specs = input_specs(model, dims)
    out = subprocess.run(
        [sys.executable, "-c", CHILD, peer, model, json.dumps(specs), str(threads)],
        check=True, capture_output=True, text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, action="append", help="an .onnx file (repeat)")
    parser.add_argument("--dim", action="append", default=[], help="NAME=SIZE of a symbolic dim")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    dims = {k: int(v) for k, v in (d.split("=", 1) for d in args.dim)}
    print("| model | hidet steady MiB | hidet peak MiB | ORT steady MiB | ORT peak MiB |")
    print("|---|---|---|---|---|")
    for model in args.model:
        h = measure("hidet", model, dims, args.threads)
        o = measure("ort", model, dims, args.threads)
        print(f"| {model} | {h['steady']} | {h['peak']} | {o['steady']} | {o['peak']} |")


if __name__ == "__main__":
    main()
