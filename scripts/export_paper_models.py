#!/usr/bin/env python3
"""Export the five models of the Hidet paper to ONNX, with inputs and ONNX Runtime outputs.

Models (batch 1, fp32, random weights, nothing downloaded):
  resnet50, inception_v3, mobilenet_v2   torchvision, 224x224 (inception: 299x299)
  bert_base                              transformers BertModel(BertConfig()), sequence length 128
  gpt2                                   transformers GPT2Model(GPT2Config()), sequence length 128

For each model NAME this writes, under the output directory (default: <repo>/models):
  NAME/model.onnx                         torch.onnx.export, TorchScript exporter, opset 17
  NAME/inputs/<input name>.npy            deterministic inputs
  NAME/ort_outputs/<output name>.npy      ONNX Runtime (CPU) outputs for those inputs;
                                          output names sanitized: [^A-Za-z0-9._-] -> '_'
  NAME/manifest.json                      inputs, outputs, files, versions, sizes, timings,
                                          operator histogram

Every step is skipped when its files exist (delete them or pass --force to redo),
and files are written to a temporary name and renamed, so an interrupted run
resumes cleanly. Needs the .venv-models environment (scripts/requirements-models.txt):

  python3 -m venv .venv-models
  .venv-models/bin/pip install -r scripts/requirements-models.txt
  .venv-models/bin/python scripts/export_paper_models.py [--only NAME ...] [--ops-doc FILE]
"""

from __future__ import annotations

import argparse
import collections
import inspect
import json
import os
import re
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

try:
    import numpy as np
except ImportError:  # reported with set-up instructions by main()
    np = None

REPO_ROOT = Path(__file__).resolve().parent.parent
OPSET = 17
SEQ_LEN = 128
SEED = 20230325  # ASPLOS'23; any fixed value works, it only has to stay fixed.

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def sanitize(name: str) -> str:
    """The file stem of a tensor name: every char outside [A-Za-z0-9._-] becomes '_'."""
    return _UNSAFE.sub("_", name)


@dataclass
class Exportable:
    """A module ready for torch.onnx.export, with its named example inputs."""

    module: torch.nn.Module
    inputs: dict[str, np.ndarray]  # ordered as the module's forward() arguments
    output_names: list[str]


def _seed_all(seed: int) -> None:
    import torch

    torch.manual_seed(seed)
    np.random.seed(seed % (2**32))


def _calibrate_batchnorm(module: torch.nn.Module, size: int, seed: int) -> None:
    """Give every BatchNorm random affine parameters and running statistics measured on random images.

    torchvision initializes BN to weight 1, bias 0, mean 0, var 1: inference-mode
    BN is then the identity (hiding errors in BN folding) and, with randomly
    initialized convolutions, activations grow layer by layer (Inception-V3's
    logits reach ~1e13). Measuring the statistics, as training would, keeps
    activations at a realistic scale.
    """
    import torch

    gen = torch.Generator().manual_seed(seed)
    bns = [m for m in module.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    with torch.no_grad():
        for m in bns:
            m.weight.copy_(torch.rand(m.num_features, generator=gen) + 0.5)
            m.bias.copy_(torch.randn(m.num_features, generator=gen) * 0.1)
            m.reset_running_stats()
            m.momentum = None  # cumulative average over the calibration batches
        module.train()
        for _ in range(2):
            module(torch.randn(4, 3, size, size, generator=gen))
        for m in bns:
            m.momentum = 0.1
    module.eval()


def _image_input(seed: int, size: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"input": rng.standard_normal((1, 3, size, size)).astype(np.float32)}


def _torchvision(name: str, size: int, **kwargs) -> Callable[[int], Exportable]:
    def build(seed: int) -> Exportable:
        import torchvision

        _seed_all(seed)
        model = getattr(torchvision.models, name)(weights=None, **kwargs)
        _calibrate_batchnorm(model, size, seed + 1)
        return Exportable(model.eval(), _image_input(seed + 2, size), ["output"])

    return build


def _token_ids(rng: np.random.Generator, vocab: int) -> np.ndarray:
    return rng.integers(0, vocab, size=(1, SEQ_LEN), dtype=np.int64)


def _bert(seed: int) -> Exportable:
    import torch
    from transformers import BertConfig, BertModel

    class Bert(torch.nn.Module):
        def __init__(self, inner: torch.nn.Module):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask, token_type_ids):
            out = self.inner(
                input_ids=input_ids,
                attention_mask=attention_mask,
                token_type_ids=token_type_ids,
                return_dict=True,
            )
            return out.last_hidden_state, out.pooler_output

    _seed_all(seed)
    config = BertConfig(attn_implementation="eager")
    model = Bert(BertModel(config)).eval()
    rng = np.random.default_rng(seed + 2)
    mask = np.ones((1, SEQ_LEN), dtype=np.int64)
    mask[:, -5:] = 0  # padding at the end
    token_type = np.zeros((1, SEQ_LEN), dtype=np.int64)
    token_type[:, SEQ_LEN // 2 :] = 1  # second segment
    inputs = {
        "input_ids": _token_ids(rng, config.vocab_size),
        "attention_mask": mask,
        "token_type_ids": token_type,
    }
    return Exportable(model, inputs, ["last_hidden_state", "pooler_output"])


def _gpt2(seed: int) -> Exportable:
    import torch
    from transformers import GPT2Config, GPT2Model

    class Gpt2(torch.nn.Module):
        def __init__(self, inner: torch.nn.Module):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids):
            out = self.inner(input_ids=input_ids, use_cache=False, return_dict=True)
            return out.last_hidden_state

    _seed_all(seed)
    config = GPT2Config(attn_implementation="eager")
    model = Gpt2(GPT2Model(config)).eval()
    rng = np.random.default_rng(seed + 2)
    inputs = {"input_ids": _token_ids(rng, config.vocab_size)}
    return Exportable(model, inputs, ["last_hidden_state"])


MODELS: dict[str, Callable[[int], Exportable]] = {
    "resnet50": _torchvision("resnet50", 224),
    "inception_v3": _torchvision("inception_v3", 299, aux_logits=False, init_weights=True),
    "mobilenet_v2": _torchvision("mobilenet_v2", 224),
    "bert_base": _bert,
    "gpt2": _gpt2,
}


def _atomic_path(path: Path) -> Path:
    return path.with_name(path.name + ".partial")


def _save_npy(path: Path, array: np.ndarray) -> None:
    tmp = _atomic_path(path)
    with open(tmp, "wb") as f:
        np.save(f, array)
    os.replace(tmp, path)


def _torch_export(ex: Exportable, path: Path) -> None:
    import torch

    kwargs = {
        "input_names": list(ex.inputs),
        "output_names": ex.output_names,
        "opset_version": OPSET,
        "do_constant_folding": True,
    }
    if "dynamo" in inspect.signature(torch.onnx.export).parameters:
        kwargs["dynamo"] = False
    args = tuple(torch.from_numpy(a) for a in ex.inputs.values())
    tmp = _atomic_path(path)
    with torch.no_grad(), warnings.catch_warnings():
        # The TorchScript exporter is chosen on purpose (the paper's models were exported with it).
        warnings.filterwarnings("ignore", category=DeprecationWarning, message=".*TorchScript-based ONNX export.*")
        torch.onnx.export(ex.module, args, str(tmp), **kwargs)
    os.replace(tmp, path)


def _torch_outputs(ex: Exportable) -> list[np.ndarray]:
    import torch

    with torch.no_grad():
        out = ex.module(*(torch.from_numpy(a) for a in ex.inputs.values()))
    if not isinstance(out, (tuple, list)):
        out = (out,)
    return [o.numpy() for o in out]


def op_histogram(model) -> collections.Counter:
    """(domain, op_type) -> count over the graph and every nested subgraph."""
    import onnx

    hist: collections.Counter = collections.Counter()
    stack = [model.graph]
    while stack:
        graph = stack.pop()
        for node in graph.node:
            hist[(node.domain or "ai.onnx", node.op_type)] += 1
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    stack.append(attr.g)
                elif attr.type == onnx.AttributeProto.GRAPHS:
                    stack.extend(attr.graphs)
    return hist


def _attr_text(attr, with_values: bool = True) -> str:
    """`name=value` of an attribute; tensors as their type, plus the values of small ones."""
    import onnx
    import onnx.numpy_helper

    v = onnx.helper.get_attribute_value(attr)
    if isinstance(v, bytes):
        v = v.decode("utf-8", "replace")
    elif isinstance(v, onnx.TensorProto):
        arr = onnx.numpy_helper.to_array(v)
        small = with_values and arr.size <= 4
        v = f"tensor<{arr.dtype}{list(arr.shape)}>" + (f"={arr.tolist()}" if small else "")
    elif isinstance(v, onnx.GraphProto):
        v = "<graph>"
    elif isinstance(v, list) and v and isinstance(v[0], onnx.GraphProto):
        v = "<graphs>"
    return f"{attr.name}={v}"


def op_variants(model) -> dict[str, collections.Counter]:
    """domain::op_type -> Counter of "(input dtypes) attributes" over the top-level graph.

    Input dtypes come from ONNX shape inference; '?' marks an unknown one and '-'
    an omitted optional input. Constant nodes are summarized by their value's type.
    """
    import onnx

    inferred = onnx.shape_inference.infer_shapes(model)
    g = inferred.graph
    dtypes: dict[str, str] = {}
    for v in list(g.input) + list(g.value_info) + list(g.output):
        if v.type.tensor_type.elem_type:
            dtypes[v.name] = onnx.helper.tensor_dtype_to_np_dtype(v.type.tensor_type.elem_type).name
    for init in g.initializer:
        dtypes[init.name] = onnx.helper.tensor_dtype_to_np_dtype(init.data_type).name
    out: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for node in g.node:
        ins = ",".join((dtypes.get(i, "?") if i else "-") for i in node.input)
        with_values = node.op_type != "Constant"
        attrs = " ".join(_attr_text(a, with_values) for a in sorted(node.attribute, key=lambda a: a.name))
        out[f"{node.domain or 'ai.onnx'}::{node.op_type}"][f"({ins}) {attrs}".strip()] += 1
    return out


def _opsets(model) -> dict[str, int]:
    return {(o.domain or "ai.onnx"): o.version for o in model.opset_import}


def _describe_values(values) -> list[dict]:
    import onnx

    out = []
    for v in values:
        t = v.type.tensor_type
        dims = [d.dim_param if d.HasField("dim_param") else d.dim_value for d in t.shape.dim]
        out.append(
            {
                "name": v.name,
                "file": sanitize(v.name) + ".npy",
                "dtype": onnx.helper.tensor_dtype_to_np_dtype(t.elem_type).name,
                "shape": dims,
            }
        )
    return out


def _parameter_stats(model) -> tuple[int, int]:
    import onnx

    count = 0
    nbytes = 0
    for init in model.graph.initializer:
        n = int(np.prod(init.dims, dtype=np.int64))
        count += n
        nbytes += n * onnx.helper.tensor_dtype_to_np_dtype(init.data_type).itemsize
    return count, nbytes


def _run_ort(model_path: Path, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    sess = ort.InferenceSession(str(model_path), opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, inputs)))


def _stats(a: np.ndarray) -> dict:
    a64 = a.astype(np.float64)
    finite = np.isfinite(a64)
    return {
        "non_finite": int(a64.size - np.count_nonzero(finite)),
        "max_abs": float(np.max(np.abs(a64[finite]))) if np.any(finite) else None,
        "mean_abs": float(np.mean(np.abs(a64[finite]))) if np.any(finite) else None,
        "std": float(np.std(a64[finite])) if np.any(finite) else None,
    }


def _max_rel_err(got: np.ndarray, ref: np.ndarray) -> float:
    ref64 = ref.astype(np.float64)
    scale = float(np.max(np.abs(ref64))) if ref64.size else 0.0
    err = float(np.max(np.abs(got.astype(np.float64) - ref64))) if ref64.size else 0.0
    return err / scale if scale > 0 else err


def export_one(name: str, out_dir: Path, seed: int, force: bool) -> dict:
    """Bring models/NAME up to date; returns its manifest (also written to manifest.json)."""
    import onnx

    mdir = out_dir / name
    model_path = mdir / "model.onnx"
    in_dir = mdir / "inputs"
    ort_dir = mdir / "ort_outputs"
    manifest_path = mdir / "manifest.json"
    for d in (mdir, in_dir, ort_dir):
        d.mkdir(parents=True, exist_ok=True)

    manifest: dict = {}
    if manifest_path.exists() and not force:
        manifest = json.loads(manifest_path.read_text())
    timings = manifest.setdefault("timings_s", {})

    ex: Exportable | None = None

    def exportable() -> Exportable:
        nonlocal ex
        if ex is None:
            t0 = time.perf_counter()
            ex = MODELS[name](seed)
            timings["build"] = round(time.perf_counter() - t0, 2)
        return ex

    if force or not model_path.exists():
        print(f"[{name}] exporting with torch.onnx.export (opset {OPSET}) ...", flush=True)
        e = exportable()
        t0 = time.perf_counter()
        _torch_export(e, model_path)
        timings["export"] = round(time.perf_counter() - t0, 2)
    else:
        print(f"[{name}] {model_path} exists, not re-exported", flush=True)

    model = onnx.load(str(model_path), load_external_data=False)
    graph_inputs = _describe_values(
        [v for v in model.graph.input if v.name not in {i.name for i in model.graph.initializer}]
    )
    graph_outputs = _describe_values(model.graph.output)
    for v in graph_inputs:
        if sanitize(v["name"]) != v["name"]:
            raise SystemExit(f"[{name}] input name {v['name']!r} is not a safe file name")

    inputs: dict[str, np.ndarray] = {}
    missing_inputs = [v for v in graph_inputs if force or not (in_dir / v["file"]).exists()]
    if missing_inputs:
        e = exportable()
        for v in graph_inputs:
            if v["name"] not in e.inputs:
                raise SystemExit(f"[{name}] graph input {v['name']!r} has no generated value")
            _save_npy(in_dir / v["file"], e.inputs[v["name"]])
    for v in graph_inputs:
        inputs[v["name"]] = np.load(in_dir / v["file"])

    missing_outputs = [v for v in graph_outputs if force or not (ort_dir / v["file"]).exists()]
    if missing_outputs or missing_inputs:
        print(f"[{name}] running ONNX Runtime ...", flush=True)
        t0 = time.perf_counter()
        ort_out = _run_ort(model_path, inputs)
        timings["ort_run"] = round(time.perf_counter() - t0, 2)
        for v in graph_outputs:
            _save_npy(ort_dir / v["file"], ort_out[v["name"]])
        manifest["ort_output_stats"] = {v["name"]: _stats(ort_out[v["name"]]) for v in graph_outputs}
        if ex is not None:
            # The module is at hand only on a fresh export: check the export itself.
            torch_out = _torch_outputs(ex)
            manifest["torch_vs_ort_max_rel_err"] = {
                v["name"]: _max_rel_err(ort_out[v["name"]], t) for v, t in zip(graph_outputs, torch_out)
            }

    hist = op_histogram(model)
    variants = op_variants(onnx.load(str(model_path)))
    params, param_bytes = _parameter_stats(model)
    manifest.update(
        {
            "name": name,
            "model": "model.onnx",
            "opset_import": _opsets(model),
            "producer": f"{model.producer_name} {model.producer_version}",
            "file_bytes": model_path.stat().st_size,
            "parameters": params,
            "parameter_bytes": param_bytes,
            "nodes": sum(hist.values()),
            "inputs": graph_inputs,
            "outputs": graph_outputs,
            "op_histogram": {f"{d}::{op}": n for (d, op), n in sorted(hist.items())},
            "op_variants": {op: dict(c.most_common()) for op, c in sorted(variants.items())},
            "seed": seed,
        }
    )
    if ex is not None:
        manifest["versions"] = _versions()
    tmp = _atomic_path(manifest_path)
    tmp.write_text(json.dumps(manifest, indent=2) + "\n")
    os.replace(tmp, manifest_path)
    return manifest


def _importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def _versions() -> dict[str, str]:
    out = {}
    for mod in ("torch", "torchvision", "transformers", "onnx", "onnxruntime", "numpy"):
        try:
            out[mod] = __import__(mod).__version__
        except ImportError:
            pass
    return out


def _print_model(m: dict) -> None:
    mib = m["file_bytes"] / 2**20
    print(
        f"[{m['name']}] {mib:.1f} MiB, {m['parameters']:,} parameters, {m['nodes']} nodes, opsets {m['opset_import']}"
    )
    for v in m["inputs"]:
        print(f"    input  {v['name']}: {v['dtype']}{v['shape']}")
    for v in m["outputs"]:
        print(f"    output {v['name']}: {v['dtype']}{v['shape']}")
    if "ort_output_stats" in m:
        print(f"    ORT output stats: {m['ort_output_stats']}")
    if "torch_vs_ort_max_rel_err" in m:
        print(f"    torch vs ORT max rel err: {m['torch_vs_ort_max_rel_err']}")
    print(f"    timings (s): {m.get('timings_s', {})}")
    for op, n in sorted(m["op_histogram"].items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"    {n:6d}  {op}")


def combined_markdown(manifests: list[dict]) -> str:
    """A Markdown report: per-model sizes and the combined operator histogram."""
    names = [m["name"] for m in manifests]
    lines = [
        "| model | file | parameters | nodes | inputs | outputs | export s | ORT run s |",
        "|---|---:|---:|---:|---|---|---:|---:|",
    ]
    for m in manifests:
        ins = ", ".join(f"`{v['name']}` {v['dtype']}{v['shape']}" for v in m["inputs"])
        outs = ", ".join(f"`{v['name']}` {v['dtype']}{v['shape']}" for v in m["outputs"])
        t = m.get("timings_s", {})
        lines.append(
            f"| {m['name']} | {m['file_bytes'] / 2**20:.1f} MiB | {m['parameters']:,} | "
            f"{m['nodes']} | {ins} | {outs} | {t.get('export', '?')} | {t.get('ort_run', '?')} |"
        )
    opsets = sorted({f"{d} {v}" for m in manifests for d, v in m["opset_import"].items()})
    lines += ["", f"Opset imports: {', '.join(opsets)}.", ""]
    total: collections.Counter = collections.Counter()
    for m in manifests:
        total.update(m["op_histogram"])
    header = "| operator (domain::op_type) | total | " + " | ".join(names) + " |"
    lines += [header, "|---|---:|" + "---:|" * len(names)]
    for op, n in sorted(total.items(), key=lambda kv: (-kv[1], kv[0])):
        per = " | ".join(str(m["op_histogram"].get(op, "")) for m in manifests)
        lines.append(f"| {op} | {n} | {per} |")
    lines.append(f"| **all** | {sum(total.values())} | " + " | ".join(str(m["nodes"]) for m in manifests) + " |")
    lines += ["", "Distinct uses per operator: `(input dtypes) attributes`, count, models.", ""]
    for op, _ in sorted(total.items(), key=lambda kv: (-kv[1], kv[0])):
        uses: dict[str, list] = {}
        for m in manifests:
            for sig, n in m.get("op_variants", {}).get(op, {}).items():
                entry = uses.setdefault(sig, [0, []])
                entry[0] += n
                entry[1].append(m["name"])
        lines.append(f"- **{op}**")
        for sig, (n, models) in sorted(uses.items(), key=lambda kv: -kv[1][0]):
            lines.append(f"  - `{sig}` ×{n} ({', '.join(models)})")
    return "\n".join(lines) + "\n"


BEGIN_MARK = "<!-- BEGIN generated by scripts/export_paper_models.py --ops-doc -->"
END_MARK = "<!-- END generated -->"


def write_between_markers(path: Path, text: str) -> None:
    """Replace the text between BEGIN_MARK and END_MARK in `path`; other text is kept.

    A file that does not exist or lacks the markers gets them appended.
    """
    block = f"{BEGIN_MARK}\n{text}{END_MARK}\n"
    old = path.read_text() if path.exists() else ""
    start, end = old.find(BEGIN_MARK), old.find(END_MARK)
    if start >= 0 and end > start:
        new = old[:start] + block + old[end + len(END_MARK) :].lstrip("\n")
    else:
        new = old + ("\n" if old and not old.endswith("\n") else "") + block
    path.write_text(new)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out-dir", type=Path, default=REPO_ROOT / "models")
    p.add_argument(
        "--only",
        action="append",
        choices=sorted(MODELS),
        metavar="NAME",
        help=f"export only this model (repeatable); one of {', '.join(MODELS)}",
    )
    p.add_argument("--force", action="store_true", help="redo every step even if its files exist")
    p.add_argument("--seed", type=int, default=SEED)
    p.add_argument(
        "--ops-doc", type=Path, help="also write the Markdown table of sizes and the combined operator histogram here"
    )
    args = p.parse_args(argv)

    # Every model is built from a config; nothing may come from a model hub.
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    missing = [
        m for m in ("numpy", "torch", "torchvision", "transformers", "onnx", "onnxruntime") if not _importable(m)
    ]
    if missing:
        print(
            f"error: {sys.executable} lacks {', '.join(missing)}; set up the models environment with\n"
            "  python3 -m venv .venv-models\n"
            "  .venv-models/bin/pip install -r scripts/requirements-models.txt\n"
            "and run this script with .venv-models/bin/python",
            file=sys.stderr,
        )
        return 2

    names = args.only or list(MODELS)
    manifests = []
    for name in names:
        t0 = time.perf_counter()
        m = export_one(name, args.out_dir, args.seed, args.force)
        print(f"[{name}] done in {time.perf_counter() - t0:.1f} s")
        _print_model(m)
        manifests.append(m)
    report = combined_markdown(manifests)
    print()
    print(report)
    if args.ops_doc:
        write_between_markers(args.ops_doc, report)
        print(f"wrote {args.ops_doc}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
