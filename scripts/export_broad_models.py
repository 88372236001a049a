#!/usr/bin/env python3
"""Export a broad set of models, the kind users bring, to ONNX: batch 1 and 8, static and dynamic axes.

Every model is built with random seeded weights (torchvision `weights=None`, transformers from a
config; nothing is downloaded) and exported with `torch.onnx.export` (TorchScript exporter,
opset 17), fp32. Files, under the output directory (default: <repo>/models/broad, git-ignored):

  <name>_b<batch>.onnx        static shapes, traced at that batch (text: sequence 128)
  <name>_b<batch>_dyn.onnx    dynamic axes: `batch` (and `sequence` for text inputs and outputs),
                              traced at the same batch; benchmarked at that batch
  <name>_b<batch>[_dyn].json  sidecar: inputs (dtype, declared shape, the concrete shape the file
                              is meant to run at, how to generate values: `random` normals,
                              `ids` in [0, high), `ones`, `zeros`), outputs, the export's own error
                              (torch vs ONNX Runtime), for dynamic exports an ONNX Runtime run at
                              another batch (and sequence) to prove the axes are really free,
                              operator histogram, sizes, timings, versions

The set (`--list` prints it):
  vision (torchvision, 224x224 images; BatchNorm statistics measured on random images):
    resnet18, resnext50_32x4d, regnet_y_400mf, densenet121, mobilenet_v2, mobilenet_v3_small,
    efficientnet_b0, shufflenet_v2_x1_0, squeezenet1_1, convnext_tiny, vit_b_16, swin_t
  text (transformers, sequence 128):
    bert_small         BertModel, 4 layers, hidden 512, 8 heads (BERT-Small); ids, mask, token types
    t5_small_encoder   T5EncoderModel with t5-small's config (6 layers, d_model 512)
    gpt2               GPT2Model with GPT2Config() (GPT-2 small, 12 layers, 768), no LM head
    llama_gqa          LlamaForCausalLM: 4 layers, hidden 512, 8 query heads over 2 key/value heads
                       (grouped-query attention), RMSNorm, RoPE, SwiGLU, vocabulary 32000 (LM head)
  audio:
    whisper_encoder    WhisperModel(config).encoder: 4 layers, d_model 384, 6 heads (whisper-tiny's
                       encoder) over 80 mel bins x 1000 frames (10 s; positions 500); batch axis only
  int8 (ONNX Runtime static quantization, QDQ format, MinMax calibration on 4 random batches,
  after `quant_pre_process`):
    resnet18_qdq, mobilenet_v3_small_qdq   (from the fp32 export of the same batch and axes)
    resnet18_qop       the same static quantization in the QOperator format (QLinearConv, ...)
    bert_small_dynq    ONNX Runtime's dynamic quantization (`quantize_dynamic`, int8 weights:
                       DynamicQuantizeLinear + MatMulInteger)

A model whose export fails is skipped with its reason printed; the others go on. A file that
exists is not redone (pass --force), and files are renamed into place only when complete, so an
interrupted run resumes. Needs the .venv-models environment (scripts/requirements-models.txt):

  python3 -m venv .venv-models
  .venv-models/bin/pip install -r scripts/requirements-models.txt
  .venv-models/bin/python scripts/export_broad_models.py [--only NAME ...] [--batches 1,8]
      [--no-dynamic] [--out DIR] [--seq-len 128] [--force] [--list]
"""

from __future__ import annotations

import argparse
import collections
import gc
import inspect
import json
import os
import sys
import tempfile
import time
import traceback
import warnings
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

try:
    import numpy as np
except ImportError:  # reported with set-up instructions by main()
    np = None  # type: ignore[assignment]

REPO_ROOT = Path(__file__).resolve().parent.parent
OPSET = 17
SEQ_LEN = 128
IMAGE = 224
SEED = 20240527
# A dynamic export is also run by ONNX Runtime at this batch (and sequence), which differ from
# every exported one, so an axis the tracer baked into a constant fails there.
ALT_BATCH = 3
ALT_SEQ = 64
CALIBRATION_BATCHES = 4


@dataclass(frozen=True)
class InputSpec:
    """One graph input: its dtype, its axes (an int, or `batch`/`sequence`), how to fill it.

    `kind` is `random` (standard normals), `ids` (integers in [0, high)), `ones` or `zeros`.
    """

    name: str
    dtype: str
    axes: tuple[int | str, ...]
    kind: str = "random"
    high: int | None = None

    def shape(self, batch: int, seq: int) -> tuple[int, ...]:
        """The concrete shape at `batch` and `seq`."""
        sizes = {"batch": batch, "sequence": seq}
        return tuple(sizes[a] if isinstance(a, str) else a for a in self.axes)

    def value(self, batch: int, seq: int, rng: np.random.Generator) -> np.ndarray:
        """A value of the concrete shape, filled as `kind` says."""
        shape = self.shape(batch, seq)
        if self.kind == "ids":
            assert self.high is not None
            return rng.integers(0, self.high, size=shape, dtype=np.int64).astype(self.dtype)
        if self.kind == "ones":
            return np.ones(shape, dtype=self.dtype)
        if self.kind == "zeros":
            return np.zeros(shape, dtype=self.dtype)
        return rng.standard_normal(shape).astype(self.dtype)


@dataclass(frozen=True)
class OutputSpec:
    """One graph output and its axes (ints, or `batch`/`sequence`, or None for any size)."""

    name: str
    axes: tuple[int | str | None, ...]


@dataclass(frozen=True)
class ModelSpec:
    """A model of the set: how to build its module (from a seed) and what its inputs are.

    `build(seed)` returns the module in eval mode; its forward takes the inputs positionally, in
    `inputs` order, and returns the outputs in `outputs` order. A spec with `quantize_from` has no
    module: it is the int8 QDQ quantization of that model's fp32 export.
    """

    name: str
    family: str
    description: str
    inputs: tuple[InputSpec, ...] = ()
    outputs: tuple[OutputSpec, ...] = ()
    build: Callable[[int], Any] | None = None
    quantize_from: str | None = None
    # How `quantize_from` is quantized: "qdq" or "qoperator" (static), or "dynamic".
    quant_format: str = "qdq"

    def dynamic_axes(self) -> dict[str, dict[int, str]]:
        """torch.onnx.export's `dynamic_axes`: every named axis of every input and output."""
        out: dict[str, dict[int, str]] = {}
        for v in list(self.inputs) + list(self.outputs):
            named = {i: a for i, a in enumerate(v.axes) if isinstance(a, str)}
            if named:
                out[v.name] = named
        return out


def _seed_all(seed: int) -> None:
    import torch

    torch.manual_seed(seed)
    np.random.seed(seed % (2**32))


def _calibrate_batchnorm(module: torch.nn.Module, size: int, seed: int) -> None:
    """Give every BatchNorm random affine parameters and running statistics measured on random images.

    As in export_paper_models.py: torchvision's BN initialization (identity) would hide BN-folding
    errors and let activations grow layer by layer; measured statistics keep a realistic scale.
    A model without BatchNorm is left as it is.
    """
    import torch

    bns = [m for m in module.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not bns:
        module.eval()
        return
    gen = torch.Generator().manual_seed(seed)
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


def _randomize_zero_weights(module: torch.nn.Module, seed: int) -> list[str]:
    """Give every all-zero weight of a Linear or convolution random normals (std 1/sqrt(fan in)).

    torchvision zero-initializes some layers (ViT's classification head): its output would be
    all zeros, which any wrong compilation matches. Returns the names of the layers changed.
    """
    import torch

    gen = torch.Generator().manual_seed(seed)
    changed = []
    with torch.no_grad():
        for name, m in module.named_modules():
            if isinstance(m, (torch.nn.Linear, torch.nn.modules.conv._ConvNd)) and not m.weight.any():
                fan_in = m.weight[0].numel()
                m.weight.copy_(torch.randn(m.weight.shape, generator=gen) / fan_in**0.5)
                if m.bias is not None:
                    m.bias.copy_(torch.randn(m.bias.shape, generator=gen) * 0.1)
                changed.append(name)
    return changed


def _vision(name: str, description: str, **kwargs: Any) -> ModelSpec:
    """A torchvision classifier at 224x224: input `input` [batch, 3, 224, 224], output `output`."""

    def build(seed: int) -> torch.nn.Module:
        import torchvision

        _seed_all(seed)
        model = torchvision.models.get_model(name, weights=None, **kwargs)
        _randomize_zero_weights(model, seed + 3)
        _calibrate_batchnorm(model, IMAGE, seed + 1)
        return model.eval()

    return ModelSpec(
        name=name,
        family="vision",
        description=description,
        inputs=(InputSpec("input", "float32", ("batch", 3, IMAGE, IMAGE)),),
        outputs=(OutputSpec("output", ("batch", None)),),
        build=build,
    )


def _wrapped(inner: Any, call: Callable[..., tuple]) -> torch.nn.Module:
    """A module whose forward is `call(inner, *inputs)` (so the exporter sees plain tensors)."""
    import torch

    class Wrapper(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *args: torch.Tensor) -> tuple:
            return call(self.inner, *args)

    return Wrapper().eval()


BERT_VOCAB = 30522
T5_VOCAB = 32128
GPT2_VOCAB = 50257
LLAMA_VOCAB = 32000
WHISPER_MELS = 80
WHISPER_POSITIONS = 500  # frames = 2 x positions (the encoder's second convolution has stride 2)


def _bert_small(seed: int) -> torch.nn.Module:
    from transformers import BertConfig, BertModel

    _seed_all(seed)
    config = BertConfig(
        vocab_size=BERT_VOCAB,
        hidden_size=512,
        num_hidden_layers=4,
        num_attention_heads=8,
        intermediate_size=2048,
        attn_implementation="eager",
    )

    def call(m: Any, ids: Any, mask: Any, types: Any) -> tuple:
        out = m(input_ids=ids, attention_mask=mask, token_type_ids=types, return_dict=True)
        return out.last_hidden_state, out.pooler_output

    return _wrapped(BertModel(config).eval(), call)


def _t5_small_encoder(seed: int) -> torch.nn.Module:
    from transformers import T5Config, T5EncoderModel

    _seed_all(seed)
    config = T5Config(
        vocab_size=T5_VOCAB,
        d_model=512,
        d_kv=64,
        d_ff=2048,
        num_layers=6,
        num_heads=8,
        feed_forward_proj="relu",
        attn_implementation="eager",
    )

    def call(m: Any, ids: Any, mask: Any) -> tuple:
        return (m(input_ids=ids, attention_mask=mask, return_dict=True).last_hidden_state,)

    return _wrapped(T5EncoderModel(config).eval(), call)


def _gpt2(seed: int) -> torch.nn.Module:
    from transformers import GPT2Config, GPT2Model

    _seed_all(seed)
    config = GPT2Config(attn_implementation="eager")

    def call(m: Any, ids: Any) -> tuple:
        return (m(input_ids=ids, use_cache=False, return_dict=True).last_hidden_state,)

    return _wrapped(GPT2Model(config).eval(), call)


def _llama_gqa(seed: int) -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    _seed_all(seed)
    config = LlamaConfig(
        vocab_size=LLAMA_VOCAB,
        hidden_size=512,
        intermediate_size=1408,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        attn_implementation="eager",
    )

    def call(m: Any, ids: Any, mask: Any) -> tuple:
        return (m(input_ids=ids, attention_mask=mask, use_cache=False, return_dict=True).logits,)

    return _wrapped(LlamaForCausalLM(config).eval(), call)


def _whisper_encoder(seed: int) -> torch.nn.Module:
    from transformers import WhisperConfig, WhisperModel

    _seed_all(seed)
    config = WhisperConfig(
        num_mel_bins=WHISPER_MELS,
        d_model=384,
        encoder_layers=4,
        encoder_attention_heads=6,
        encoder_ffn_dim=1536,
        decoder_layers=1,
        decoder_attention_heads=6,
        decoder_ffn_dim=1536,
        max_source_positions=WHISPER_POSITIONS,
        attn_implementation="eager",
    )
    encoder = WhisperModel(config).get_encoder().eval()

    def call(m: Any, features: Any) -> tuple:
        return (m(input_features=features, return_dict=True).last_hidden_state,)

    return _wrapped(encoder, call)


def _ids(name: str, vocab: int) -> InputSpec:
    return InputSpec(name, "int64", ("batch", "sequence"), kind="ids", high=vocab)


def _text_out(name: str) -> OutputSpec:
    return OutputSpec(name, ("batch", "sequence", None))


def _mask(name: str = "attention_mask") -> InputSpec:
    return InputSpec(name, "int64", ("batch", "sequence"), kind="ones")


MODELS: dict[str, ModelSpec] = {
    s.name: s
    for s in [
        _vision("resnet18", "ResNet-18"),
        _vision("resnext50_32x4d", "ResNeXt-50 32x4d (grouped 3x3 convolutions)"),
        _vision("regnet_y_400mf", "RegNetY-400MF (grouped convolutions, squeeze-excitation)"),
        _vision("densenet121", "DenseNet-121 (concatenations feeding BatchNorm)"),
        _vision("mobilenet_v2", "MobileNet-V2 (depthwise)"),
        _vision("mobilenet_v3_small", "MobileNet-V3 small (depthwise, hard-swish, SE)"),
        _vision("efficientnet_b0", "EfficientNet-B0 (depthwise, SiLU, SE)"),
        _vision("shufflenet_v2_x1_0", "ShuffleNet-V2 1.0 (channel shuffle, split)"),
        _vision("squeezenet1_1", "SqueezeNet 1.1 (fire modules, concatenations)"),
        _vision("convnext_tiny", "ConvNeXt-T (depthwise 7x7, channels-last LayerNorm)"),
        _vision("vit_b_16", "ViT-B/16 (patch embedding, 12 encoder layers)"),
        _vision("swin_t", "Swin-T (shifted-window attention)"),
        ModelSpec(
            "bert_small",
            "text",
            "BERT-Small: BertModel, 4 layers, hidden 512, 8 heads, FFN 2048",
            inputs=(_ids("input_ids", BERT_VOCAB), _mask(),
                    InputSpec("token_type_ids", "int64", ("batch", "sequence"), kind="zeros")),
            outputs=(_text_out("last_hidden_state"), OutputSpec("pooler_output", ("batch", None))),
            build=_bert_small,
        ),
        ModelSpec(
            "t5_small_encoder",
            "text",
            "T5EncoderModel, t5-small config: 6 layers, d_model 512, 8 heads, relative positions",
            inputs=(_ids("input_ids", T5_VOCAB), _mask()),
            outputs=(_text_out("last_hidden_state"),),
            build=_t5_small_encoder,
        ),
        ModelSpec(
            "gpt2",
            "text",
            "GPT2Model, GPT-2 small: 12 layers, 768, 12 heads (no LM head)",
            inputs=(_ids("input_ids", GPT2_VOCAB),),
            outputs=(_text_out("last_hidden_state"),),
            build=_gpt2,
        ),
        ModelSpec(
            "llama_gqa",
            "text",
            "LlamaForCausalLM: 4 layers, hidden 512, 8 heads / 2 KV heads (GQA), RMSNorm, RoPE, SwiGLU 1408, "
            "vocabulary 32000",
            inputs=(_ids("input_ids", LLAMA_VOCAB), _mask()),
            outputs=(_text_out("logits"),),
            build=_llama_gqa,
        ),
        ModelSpec(
            "whisper_encoder",
            "audio",
            f"WhisperModel encoder, whisper-tiny's: 4 layers, d_model 384, 6 heads; "
            f"{WHISPER_MELS} mel bins x {2 * WHISPER_POSITIONS} frames",
            inputs=(InputSpec("input_features", "float32", ("batch", WHISPER_MELS, 2 * WHISPER_POSITIONS)),),
            outputs=(OutputSpec("last_hidden_state", ("batch", WHISPER_POSITIONS, None)),),
            build=_whisper_encoder,
        ),
        ModelSpec("resnet18_qdq", "int8", "ResNet-18, int8 QDQ (static quantization)", quantize_from="resnet18"),
        ModelSpec(
            "mobilenet_v3_small_qdq",
            "int8",
            "MobileNet-V3 small, int8 QDQ (static quantization)",
            quantize_from="mobilenet_v3_small",
        ),
        ModelSpec(
            "resnet18_qop",
            "int8",
            "ResNet-18, int8 QOperator (static quantization: QLinearConv, QLinearAdd, QGemm, ...)",
            quantize_from="resnet18",
            quant_format="qoperator",
        ),
        ModelSpec(
            "bert_small_dynq",
            "int8",
            "BERT-Small, int8 dynamic quantization (DynamicQuantizeLinear + MatMulInteger)",
            quantize_from="bert_small",
            quant_format="dynamic",
        ),
    ]
}


def file_stem(name: str, batch: int, dynamic: bool) -> str:
    """The file stem of one export: `<name>_b<batch>` plus `_dyn` for dynamic axes."""
    return f"{name}_b{batch}" + ("_dyn" if dynamic else "")


def _inputs_of(spec: ModelSpec) -> tuple[InputSpec, ...]:
    """The inputs of `spec` (a QDQ spec has its fp32 model's)."""
    return MODELS[spec.quantize_from].inputs if spec.quantize_from else spec.inputs


def make_inputs(spec: ModelSpec, batch: int, seq: int, seed: int) -> dict[str, np.ndarray]:
    """Deterministic values for every input of `spec` at `batch` and `seq`, in forward() order."""
    rng = np.random.default_rng(seed)
    return {i.name: i.value(batch, seq, rng) for i in _inputs_of(spec)}


def _atomic_path(path: Path) -> Path:
    return path.with_name(path.name + ".partial")


def _write_json(path: Path, obj: dict) -> None:
    tmp = _atomic_path(path)
    tmp.write_text(json.dumps(obj, indent=2) + "\n")
    os.replace(tmp, path)


def _torch_export(spec: ModelSpec, module: torch.nn.Module, inputs: dict[str, np.ndarray], dynamic: bool,
                  path: Path) -> None:
    """Write `module` traced on `inputs` to `path` (atomically), with dynamic axes when asked."""
    import torch

    kwargs: dict[str, Any] = {
        "input_names": [i.name for i in spec.inputs],
        "output_names": [o.name for o in spec.outputs],
        "opset_version": OPSET,
        "do_constant_folding": True,
    }
    if dynamic:
        kwargs["dynamic_axes"] = spec.dynamic_axes()
    if "dynamo" in inspect.signature(torch.onnx.export).parameters:
        kwargs["dynamo"] = False
    args = tuple(torch.from_numpy(a) for a in inputs.values())
    tmp = _atomic_path(path)
    # Under no_grad, nn.MultiheadAttention (ViT) takes its fused fast path,
    # aten::_native_multi_head_attention, which the TorchScript exporter cannot export.
    mha = getattr(torch.backends, "mha", None)
    fastpath = mha.get_fastpath_enabled() if mha else None
    if mha:
        mha.set_fastpath_enabled(False)
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # TracerWarnings and the TorchScript exporter's deprecation
            torch.onnx.export(module, args, str(tmp), **kwargs)
    finally:
        if mha:
            mha.set_fastpath_enabled(fastpath)
    os.replace(tmp, path)


def _torch_outputs(module: torch.nn.Module, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    import torch

    with torch.no_grad():
        out = module(*(torch.from_numpy(a) for a in inputs.values()))
    if not isinstance(out, (tuple, list)):
        out = (out,)
    return [o.numpy() for o in out]


def _ort_session(path: Path) -> Any:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def _stats(a: np.ndarray) -> dict[str, float]:
    """max |a| and the standard deviation of `a`: a constant output (std 0) checks nothing."""
    a64 = a.astype(np.float64)
    return {"max_abs": float(np.max(np.abs(a64))) if a64.size else 0.0, "std": float(np.std(a64)) if a64.size else 0.0}


def _max_rel_err(got: np.ndarray, ref: np.ndarray) -> float:
    """max |got - ref| / max |ref| (the absolute error when ref is all zeros)."""
    ref64 = ref.astype(np.float64)
    if ref64.size == 0:
        return 0.0
    scale = float(np.max(np.abs(ref64)))
    err = float(np.max(np.abs(got.astype(np.float64) - ref64)))
    return err / scale if scale > 0 else err


def op_histogram(model: Any) -> dict[str, int]:
    """`domain::op_type` -> count over the top-level graph, most frequent first."""
    hist: collections.Counter = collections.Counter()
    for node in model.graph.node:
        hist[f"{node.domain or 'ai.onnx'}::{node.op_type}"] += 1
    return dict(sorted(hist.items(), key=lambda kv: (-kv[1], kv[0])))


def _describe_values(values: Any) -> list[dict]:
    import onnx

    out = []
    for v in values:
        t = v.type.tensor_type
        dims = [d.dim_param if d.HasField("dim_param") else d.dim_value for d in t.shape.dim]
        out.append({"name": v.name, "dtype": onnx.helper.tensor_dtype_to_np_dtype(t.elem_type).name, "shape": dims})
    return out


def _parameters(model: Any) -> int:
    return int(sum(int(np.prod(init.dims, dtype=np.int64)) for init in model.graph.initializer))


def _versions() -> dict[str, str]:
    out = {}
    for mod in ("torch", "torchvision", "transformers", "onnx", "onnxruntime", "numpy"):
        try:
            out[mod] = __import__(mod).__version__
        except ImportError:
            pass
    return out


def _check_dynamic(spec: ModelSpec, path: Path, seq: int, seed: int) -> dict:
    """Run ONNX Runtime on a dynamic export at ALT_BATCH (and ALT_SEQ) and check the output axes.

    Returns {"batch", "sequence", "ok", "error"?}: ok when every named output axis has the
    size it was given.
    """
    alt_seq = ALT_SEQ if seq != ALT_SEQ else ALT_SEQ // 2
    result: dict[str, Any] = {"batch": ALT_BATCH, "sequence": alt_seq, "ok": False}
    try:
        feeds = make_inputs(spec, ALT_BATCH, alt_seq, seed)
        sess = _ort_session(path)
        outs = sess.run(None, feeds)
        outputs = MODELS[spec.quantize_from].outputs if spec.quantize_from else spec.outputs
        sizes = {"batch": ALT_BATCH, "sequence": alt_seq}
        for o, got in zip(outputs, outs):
            for axis, want in enumerate(o.axes):
                expect = sizes.get(want) if isinstance(want, str) else want
                if expect is not None and got.shape[axis] != expect:
                    result["error"] = f"output {o.name} has shape {list(got.shape)}, axis {axis} should be {expect}"
                    return result
        result["ok"] = True
    except Exception as e:  # noqa: BLE001 - recorded, the export is kept
        result["error"] = str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
    return result


def _describe_file(path: Path, manifest: dict) -> None:
    """Add the file's size, parameters, inputs, outputs and operator histogram to `manifest`."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    inits = {i.name for i in model.graph.initializer}
    hist = op_histogram(model)
    manifest.update(
        {
            "file_bytes": path.stat().st_size,
            "parameters": _parameters(model),
            "nodes": sum(hist.values()),
            "opset_import": {(o.domain or "ai.onnx"): o.version for o in model.opset_import},
            "declared_inputs": _describe_values([v for v in model.graph.input if v.name not in inits]),
            "declared_outputs": _describe_values(model.graph.output),
            "op_histogram": hist,
        }
    )


def _input_manifest(spec: ModelSpec, batch: int, seq: int) -> list[dict]:
    return [
        {
            "name": i.name,
            "dtype": i.dtype,
            "axes": list(i.axes),
            "shape": list(i.shape(batch, seq)),
            "kind": i.kind,
            **({"high": i.high} if i.high is not None else {}),
        }
        for i in _inputs_of(spec)
    ]


@dataclass
class Outcome:
    """What happened to one file: `exported`, `exists`, or `failed` with the reason."""

    stem: str
    status: str
    seconds: float = 0.0
    reason: str = ""
    notes: list[str] = field(default_factory=list)


def export_fp32(spec: ModelSpec, module: torch.nn.Module, batch: int, dynamic: bool, seq: int, seed: int,
                out: Path) -> dict:
    """Export one fp32 variant and write its sidecar; returns the sidecar's content."""
    import onnxruntime  # noqa: F401 - fail early when missing

    stem = file_stem(spec.name, batch, dynamic)
    path = out / f"{stem}.onnx"
    inputs = make_inputs(spec, batch, seq, seed + 2)
    t0 = time.perf_counter()
    _torch_export(spec, module, inputs, dynamic, path)
    export_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    sess = _ort_session(path)
    ort_out = sess.run(None, inputs)
    ort_s = time.perf_counter() - t0
    want = _torch_outputs(module, inputs)
    errs = {o.name: _max_rel_err(got, ref) for o, got, ref in zip(spec.outputs, ort_out, want)}
    stats = {o.name: _stats(got) for o, got in zip(spec.outputs, ort_out)}
    manifest: dict[str, Any] = {
        "name": spec.name,
        "family": spec.family,
        "description": spec.description,
        "batch": batch,
        "sequence": seq if any("sequence" in i.axes for i in spec.inputs) else None,
        "dynamic": dynamic,
        "dims": {"batch": batch, "sequence": seq},
        "inputs": _input_manifest(spec, batch, seq),
        "torch_vs_ort_max_rel_err": errs,
        "ort_output_stats": stats,
        "timings_s": {"export": round(export_s, 2), "ort_first_run": round(ort_s, 2)},
        "seed": seed,
        "opset": OPSET,
        "versions": _versions(),
    }
    if dynamic:
        manifest["dynamic_check"] = _check_dynamic(spec, path, seq, seed + 3)
    _describe_file(path, manifest)
    _write_json(out / f"{stem}.json", manifest)
    return manifest


class _RandomReader:
    """A CalibrationDataReader over CALIBRATION_BATCHES random batches of the model's inputs."""

    def __init__(self, spec: ModelSpec, batch: int, seq: int, seed: int) -> None:
        self.batches = [make_inputs(spec, batch, seq, seed + k) for k in range(CALIBRATION_BATCHES)]

    def get_next(self) -> dict[str, np.ndarray] | None:
        return self.batches.pop(0) if self.batches else None

    def rewind(self) -> None:  # not used by MinMax calibration
        pass


@contextmanager
def _working_directory(path: Path) -> Iterator[None]:
    """Run the body with `path` as the working directory, then return to the previous one."""
    previous = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(previous)


def export_qdq(spec: ModelSpec, batch: int, dynamic: bool, seq: int, seed: int, out: Path) -> dict:
    """Quantize the fp32 export of `spec.quantize_from` at this batch and axes into int8.

    `quant_pre_process` (ONNX Runtime's recommended preparation: shape inference and basic
    optimizations) first, falling back to the raw fp32 file if it fails; then `quantize_dynamic`
    (int8 weights) for `quant_format == "dynamic"`, else `quantize_static` in the QDQ or
    QOperator format with the defaults otherwise (int8 activations and weights, per tensor,
    MinMax calibration). Returns the sidecar's content.
    """
    from onnxruntime.quantization import QuantFormat, quantize_static

    out = out.resolve()
    base = out / f"{file_stem(spec.quantize_from, batch, dynamic)}.onnx"
    stem = file_stem(spec.name, batch, dynamic)
    path = out / f"{stem}.onnx"
    notes: list[str] = []
    prepared = out / f"{stem}.prep.onnx.partial"
    t0 = time.perf_counter()
    # ONNX Runtime's quantization tools write scratch files (sym_shape_infer_temp.onnx, external
    # data named by UUID) into the working directory: run them in a temporary one.
    with tempfile.TemporaryDirectory() as scratch, _working_directory(Path(scratch)):
        try:
            from onnxruntime.quantization.shape_inference import quant_pre_process

            quant_pre_process(str(base), str(prepared))
            source = prepared
        except Exception as e:  # noqa: BLE001 - quantize the raw export instead
            notes.append(f"quant_pre_process failed ({str(e).splitlines()[0][:200]}); quantized the raw export")
            source = base
        tmp = _atomic_path(path)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if spec.quant_format == "dynamic":
                from onnxruntime.quantization import QuantType, quantize_dynamic

                quantize_dynamic(str(source), str(tmp), weight_type=QuantType.QInt8)
            else:
                quantize_static(
                    str(source),
                    str(tmp),
                    _RandomReader(spec, batch, seq, seed + 10),
                    quant_format=QuantFormat.QOperator if spec.quant_format == "qoperator" else QuantFormat.QDQ,
                )
    os.replace(tmp, path)
    if prepared.exists():
        prepared.unlink()
    quant_s = time.perf_counter() - t0
    inputs = make_inputs(spec, batch, seq, seed + 2)
    fp32_out = _ort_session(base).run(None, inputs)
    int8_out = _ort_session(path).run(None, inputs)
    base_spec = MODELS[spec.quantize_from]
    stats = {o.name: _stats(got) for o, got in zip(base_spec.outputs, int8_out)}
    manifest: dict[str, Any] = {
        "name": spec.name,
        "family": spec.family,
        "description": spec.description,
        "quantized_from": base.name,
        "quantization": (
            "onnxruntime.quantization.quantize_dynamic, weight_type QInt8"
            if spec.quant_format == "dynamic"
            else f"onnxruntime.quantization.quantize_static, QuantFormat.{'QOperator' if spec.quant_format == 'qoperator' else 'QDQ'}, "
            f"defaults (QInt8 activations and weights, per tensor, MinMax) on {CALIBRATION_BATCHES} random batches"
        ),
        "batch": batch,
        "sequence": None,
        "dynamic": dynamic,
        "dims": {"batch": batch, "sequence": seq},
        "inputs": _input_manifest(spec, batch, seq),
        "int8_vs_fp32_max_rel_err": {
            o.name: _max_rel_err(got, ref) for o, got, ref in zip(base_spec.outputs, int8_out, fp32_out)
        },
        "ort_output_stats": stats,
        "timings_s": {"quantize": round(quant_s, 2)},
        "notes": notes,
        "seed": seed,
        "versions": _versions(),
    }
    if dynamic:
        manifest["dynamic_check"] = _check_dynamic(spec, path, seq, seed + 3)
    _describe_file(path, manifest)
    _write_json(out / f"{stem}.json", manifest)
    return manifest


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    line = text.splitlines()[0] if text else ""
    return f"{type(e).__name__}: {line[:300]}"


def _summary(m: dict) -> str:
    """One line about an export: size, nodes, its error against torch (or fp32), the dynamic check."""
    parts = [f"{m['file_bytes'] / 2**20:.1f} MiB", f"{m['nodes']} nodes"]
    for key, label in (("torch_vs_ort_max_rel_err", "ORT vs torch"), ("int8_vs_fp32_max_rel_err", "int8 vs fp32")):
        if key in m:
            parts.append(f"{label} max rel err {max(m[key].values()):.1e}")
    constant = [n for n, st in m.get("ort_output_stats", {}).items() if st["std"] == 0]
    if constant:
        parts.append(f"WARNING: constant output {', '.join(constant)}")
    dc = m.get("dynamic_check")
    if dc:
        parts.append(f"ORT at batch {dc['batch']}: " + ("ok" if dc["ok"] else f"FAILED ({dc.get('error')})"))
    return ", ".join(parts)


def run_model(spec: ModelSpec, batches: list[int], dynamics: list[bool], seq: int, seed: int, out: Path,
              force: bool, log: Callable[[str], None]) -> list[Outcome]:
    """Bring every variant of `spec` up to date; never raises for a failed export.

    The module is built once (same weights for every batch and for static and dynamic axes)
    and only when some variant is missing.
    """
    outcomes: list[Outcome] = []
    module: Any = None
    build_error: str | None = None
    model_seed = seed + zlib.crc32(spec.name.encode()) % 100_000 * 100  # stable per name
    for batch in batches:
        for dynamic in dynamics:
            stem = file_stem(spec.name, batch, dynamic)
            path = out / f"{stem}.onnx"
            if path.exists() and (out / f"{stem}.json").exists() and not force:
                outcomes.append(Outcome(stem, "exists"))
                log(f"[{stem}] exists, not redone")
                continue
            t0 = time.perf_counter()
            try:
                if spec.quantize_from:
                    base_stem = file_stem(spec.quantize_from, batch, dynamic)
                    if not (out / f"{base_stem}.onnx").exists():
                        raise RuntimeError(f"its fp32 model {base_stem}.onnx was not exported")
                    log(f"[{stem}] quantizing {base_stem}.onnx ({spec.quant_format}) ...")
                    m = export_qdq(spec, batch, dynamic, seq, model_seed, out)
                else:
                    if build_error:
                        raise RuntimeError(build_error)
                    if module is None:
                        log(f"[{spec.name}] building ({spec.description}) ...")
                        try:
                            module = spec.build(model_seed)
                        except Exception as e:
                            build_error = f"building the module failed: {_first_line(e)}"
                            raise RuntimeError(build_error) from e
                    log(f"[{stem}] exporting (opset {OPSET}{', dynamic axes' if dynamic else ''}) ...")
                    m = export_fp32(spec, module, batch, dynamic, seq, model_seed, out)
                o = Outcome(stem, "exported", time.perf_counter() - t0)
                dc = m.get("dynamic_check")
                if dc and not dc["ok"]:
                    o.notes.append(f"dynamic check failed: {dc.get('error')}")
                outcomes.append(o)
                log(f"[{stem}] done in {o.seconds:.1f} s: {_summary(m)}")
            except Exception as e:  # noqa: BLE001 - skip this variant, go on with the rest
                for partial in out.glob(f"{stem}*.partial"):
                    partial.unlink()
                reason = _first_line(e)
                outcomes.append(Outcome(stem, "failed", time.perf_counter() - t0, reason))
                log(f"[{stem}] SKIPPED: {reason}")
                if os.environ.get("HIDET_EXPORT_TRACEBACK"):
                    traceback.print_exc()
    del module
    gc.collect()
    return outcomes


def _importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def _parse_batches(text: str) -> list[int]:
    try:
        batches = sorted({int(b) for b in text.split(",") if b.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"--batches takes comma-separated integers, not {text!r}") from None
    if not batches or min(batches) < 1:
        raise argparse.ArgumentTypeError("--batches needs positive batch sizes")
    return batches


def main(argv: list[str]) -> int:
    """Export the selected models; exit status 0 unless nothing could be exported (or a usage error)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", action="append", choices=list(MODELS), metavar="NAME",
                   help="export only this model (repeatable); --list shows the names")
    p.add_argument("--batches", type=_parse_batches, default=[1, 8], help="comma-separated batch sizes (default 1,8)")
    p.add_argument("--no-dynamic", action="store_true", help="static-shape exports only")
    p.add_argument("--out", type=Path, default=REPO_ROOT / "models" / "broad", help="output folder")
    p.add_argument("--seq-len", type=int, default=SEQ_LEN, help="sequence length of text models (default 128)")
    p.add_argument("--seed", type=int, default=SEED)
    p.add_argument("--force", action="store_true", help="redo files that exist")
    p.add_argument("--list", action="store_true", help="list the models and exit")
    args = p.parse_args(argv)

    if args.list:
        for s in MODELS.values():
            print(f"{s.name:<22} {s.family:<7} {s.description}")
        return 0
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    missing = [m for m in ("numpy", "torch", "torchvision", "transformers", "onnx", "onnxruntime") if not _importable(m)]
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
    # A QDQ model needs its fp32 export: export that first (even when not asked for by --only).
    order: list[str] = []
    for n in names:
        base = MODELS[n].quantize_from
        if base and base not in order:
            order.append(base)
        if n not in order:
            order.append(n)
    args.out.mkdir(parents=True, exist_ok=True)
    dynamics = [False] if args.no_dynamic else [False, True]
    started = time.perf_counter()

    def log(msg: str) -> None:
        print(f"{time.perf_counter() - started:7.1f}s {msg}", flush=True)

    outcomes: list[Outcome] = []
    for k, name in enumerate(order, 1):
        log(f"== {k}/{len(order)} {name}")
        outcomes += run_model(MODELS[name], args.batches, dynamics, args.seq_len, args.seed, args.out, args.force, log)

    done = [o for o in outcomes if o.status != "failed"]
    failed = [o for o in outcomes if o.status == "failed"]
    print(f"\n{len(done)} files ready in {args.out} ({sum(o.status == 'exported' for o in outcomes)} exported now), "
          f"{len(failed)} failed, {time.perf_counter() - started:.0f} s")
    for o in outcomes:
        if o.notes:
            print(f"  note {o.stem}: {'; '.join(o.notes)}")
    for o in failed:
        print(f"  FAILED {o.stem}: {o.reason}")
    return 0 if done or not outcomes else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
