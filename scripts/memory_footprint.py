#!/usr/bin/env python3
"""Resident memory of a model compiled by hidet (the `hidet_rs` package) and by ONNX Runtime,
side by side: each runs in its own process, compiles or loads the model, runs it a few times
on seeded random inputs (symbolic dimensions set to 1 unless given with --dim), then reports
its resident size (steady: after the runs, the model still alive) and its peak.

    .venv/bin/python scripts/memory_footprint.py --model FILE.onnx [--dim seq=128] [--threads 2]

With `--sweep NAME=V1,V2,...` each process runs the model with the symbolic dimension NAME at
each value in turn (a server seeing new batch sizes or sequence lengths) and reports its
resident size after each: what every new input shape adds.

    .venv/bin/python scripts/memory_footprint.py --model FILE.onnx --sweep batch=1,2,3,5,7,9
"""

import argparse
import json
import subprocess
import sys

CHILD = r"""
import json, sys
import numpy as np
peer, path, spec_sets, threads = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), int(sys.argv[4])
rng = np.random.default_rng(0)

def status(key):
    text = open("/proc/self/status").read()
    return int(text.split(key + ":")[1].split()[0]) // 1024

def feeds_of(specs):
    feeds = {}
    for name, shape, dtype in specs:
        if dtype == "float32":
            feeds[name] = rng.standard_normal(shape).astype(dtype)
        else:
            feeds[name] = rng.integers(0, 2, shape).astype(dtype)
    return feeds

if peer == "hidet":
    import hidet_rs
    model = hidet_rs.compile(path, threads=threads)
    run = lambda feeds: model.run(feeds)
else:
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    session = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    run = lambda feeds: session.run(None, feeds)
steady = []
for specs in spec_sets:
    feeds = feeds_of(specs)
    for _ in range(5):
        run(feeds)
    steady.append(status("VmRSS"))
print(json.dumps({"steady": steady, "peak": status("VmHWM")}))
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


def measure(peer, model, dim_sets, threads):
    """`{"steady": [MiB after running each of dim_sets, in order], "peak": MiB}` of one
    process running `model` on `peer` ("hidet" or "ort")."""
    spec_sets = [input_specs(model, dims) for dims in dim_sets]
    out = subprocess.run(
        [sys.executable, "-c", CHILD, peer, model, json.dumps(spec_sets), str(threads)],
        check=True, capture_output=True, text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, action="append", help="an .onnx file (repeat)")
    parser.add_argument("--dim", action="append", default=[], help="NAME=SIZE of a symbolic dim")
    parser.add_argument("--sweep", help="NAME=V1,V2,...: run at each value of a symbolic dim")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    dims = {k: int(v) for k, v in (d.split("=", 1) for d in args.dim)}
    if args.sweep:
        name, values = args.sweep.split("=", 1)
        values = [int(v) for v in values.split(",")]
        print("| model | peer | " + " | ".join(f"{name}={v} MiB" for v in values) + " | peak MiB |")
        print("|---|---|" + "---|" * (len(values) + 1))
        for model in args.model:
            for peer, label in (("hidet", "hidet"), ("ort", "ORT")):
                m = measure(peer, model, [{**dims, name: v} for v in values], args.threads)
                print(f"| {model} | {label} | " + " | ".join(map(str, m["steady"])) + f" | {m['peak']} |")
        return
    print("| model | hidet steady MiB | hidet peak MiB | ORT steady MiB | ORT peak MiB |")
    print("|---|---|---|---|---|")
    for model in args.model:
        h = measure("hidet", model, [dims], args.threads)
        o = measure("ort", model, [dims], args.threads)
        print(f"| {model} | {h['steady'][0]} | {h['peak']} | {o['steady'][0]} | {o['peak']} |")


if __name__ == "__main__":
    main()
