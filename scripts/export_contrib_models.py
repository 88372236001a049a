#!/usr/bin/env python3
"""Export models that use ONNX Runtime's contrib operators (domain com.microsoft, and ORT's
SimplifiedLayerNormalization registered in the ONNX domain), the way users get them: files
rewritten by ONNX Runtime's transformers optimizer, and LLMs written by the onnxruntime-genai
model builder. Random seeded weights from small configs (nothing is downloaded), fp32 (and int4
MatMulNBits), CPU.

Step 1, `python -m onnxruntime.transformers.optimizer` (fp32, CPU, no --use_gpu) on a
`torch.onnx.export` (TorchScript exporter, opset 17) of a transformers model. Fusion needs the
source exported with sdpa attention and dynamic axes (an eager, static DistilBERT gets no
Attention or EmbedLayerNormalization); ViT, BART and GPT-2 without past get no attention fusion
with this ORT/transformers pair. The optimizer inserts a Cast to int32 in front of
EmbedLayerNormalization and the mask, so graph inputs stay int64. Masks have padding zeros at
the end; token types are 0 then 1.
  bert_base_ortopt            BertModel(BertConfig()) (BERT-base: 12 layers, 768), eager, static
                              1x128, optimizer `bert` defaults (opt_level 1): Attention 12
                              (mask_index int32[B] from ReduceSum, 4 inputs), Gelu 12,
                              SkipLayerNormalization 24
  bert_base_ortopt_maskindex  the same with --use_mask_index (the same graph as the default)
  bert_base_ortopt_o2         the same with --opt_level 2: no Attention; BiasGelu 12,
                              SkipLayerNormalization 25 (a skip input is a constant [1,128,768])
  bert_small_ortopt           BertModel (hidden 256, 2 layers, 4 heads, vocabulary 1000), sdpa,
                              dynamic axes, 1x64: EmbedLayerNormalization 1 (8 inputs, outputs
                              the mask index int32[B]), Attention 2, BiasGelu 2,
                              SkipLayerNormalization 4
  bert_small_ortopt_rawmask   + --use_raw_attention_mask: Attention's mask is int32[B,S] (0/1),
                              EmbedLayerNormalization has 7 inputs (no mask)
  bert_small_ortopt_mha       + --use_multi_head_attention: MultiHeadAttention 2 (separate q, k,
                              v, bias [3H], key_padding_mask int32[B]) instead of Attention
  bert_small_ortopt_fastgelu  + --enable_gelu_approximation: FastGelu 2 instead of BiasGelu
  distilbert_ortopt           DistilBertModel (dim 128, 2 layers, 4 heads), sdpa, dynamic, 1x64:
                              EmbedLayerNormalization 1 (9 inputs: empty segment ids and segment
                              embedding, position ids), Attention 2, BiasGelu 2,
                              SkipLayerNormalization 4
  distilbert_static_ortopt    the same DistilBERT, eager and static 1x64: nothing fused but
                              Gelu 2, SkipLayerNormalization 4
  gpt2_ortopt                 GPT2Model(GPT2Config()) (GPT-2 small), eager, static 1x128, no
                              past, `gpt2`: FastGelu 12, SkipLayerNormalization 24 (no attention)
  gpt2_small_ortopt           GPT2Model (256, 2 layers), sdpa, dynamic, 1x32, no past:
                              FastGelu 2, SkipLayerNormalization 4
  vit_ortopt                  ViTModel (192, 3 layers, 224x224, no pooler), sdpa, dynamic batch,
                              `vit`: BiasGelu 3, SkipLayerNormalization 6 (no attention)
  bartenc_ortopt              BART encoder (d_model 128, 2 layers), sdpa, dynamic, 1x32, `bart`:
                              BiasGelu 2, SkipLayerNormalization 4 (no attention)
  t5enc_ortopt                T5EncoderModel (d_model 128, 2 layers, ReLU), eager, static 1x32,
                              `t5` (opt_level 2): SkipSimplifiedLayerNormalization 3,
                              SimplifiedLayerNormalization 2 (domain "")
SkipLayerNormalization has 4 inputs, or 5 where a MatMul bias was folded in, and 1 output or 4
(out, -, -, input_skip_bias_sum: GPT-2, ViT, BART). Files written by the optimizer import other
domains too (ai.onnx.ml, com.microsoft.nchwc, ...) but use only com.microsoft and "".

Step 2, the onnxruntime-genai model builder (`-e cpu`, `-p fp32` and `-p int4`) on a tiny random
decoder (hidden 256, FFN 512, 2 layers, 4 query heads over 2 key/value heads, head 64,
vocabulary 1000, 256 positions, random biases and norm weights: the builder drops all-zero
biases), for ARCH llama, qwen2, qwen3, phi3, gemma, gemma2 (sliding window 4), phi (phi-2 style,
partial rotary 0.5). Folders genai_<ARCH>_<fp32|int4>_<prefill|decode>:
  prefill   input_ids 1x7, attention_mask ones 1x7, empty past [1,2,0,64] (gemma2's sliding
            layer: a zero past [1,2,4,64], its cache capacity must be >= the window)
  decode    input_ids 1x1, attention_mask ones 1x6; the past is the `present` of an ONNX Runtime
            prefill run (the file as written) over 5 other tokens
Inputs input_ids, attention_mask (int64), past_key_values.<i>.key/value; outputs logits
[B,S,1000] and present.<i>.key/value; opsets ai.onnx 22 + com.microsoft 1, weights in
model.onnx.data. Contrib operators (prefill and decode are the same graph):
  llama, qwen2, phi3, gemma   GroupQueryAttention 2, SkipSimplifiedLayerNormalization 4,
                              SimplifiedLayerNormalization 1
  qwen3, gemma2               the same with SimplifiedLayerNormalization 5 (qwen3: q/k norms,
                              with q, k, v given to GQA separately; gemma2: post-attention and
                              post-FFN norms; GQA softcap 50, scale 0.0625, layer 0
                              local_window_size 4 with sliding_window_cache=1)
  phi                         GroupQueryAttention 2 (rotary caches [256,16]: partial rotary),
                              SkipLayerNormalization 2, plus standard LayerNormalization and Gelu
  int4 adds MatMulNBits (11; phi 9): bits 4, block_size 32, accuracy_level 4, 3 inputs (no zero
  points: symmetric); the embedding stays a float Gather.
GroupQueryAttention computes RoPE itself (do_rotary=1, cos/sin cache initializers) and gets all
12 input slots (key/value empty for packed QKV; seqlens_k int32[B] = sum(mask) - 1; a scalar
total_sequence_length).

int4 references: accuracy_level 4 lets ONNX Runtime quantize MatMulNBits' activations to int8,
about 1e-2 from the exact product. The model is kept as the builder wrote it, but
`ort_outputs/` holds ONNX Runtime's outputs with accuracy_level set to 0 on every MatMulNBits
(the float product of the dequantized weights), the reference an exact implementation should
match; `ort_outputs_level4/` holds the outputs of the file as written. The manifest says so
(`reference`, `outputs_level4`, `level0_vs_level4_max_rel_diff`).

Each folder OUT/<name>/ (default OUT: <repo>/models/contrib, git-ignored) holds:
  model.onnx (+ model.onnx.data)   the optimized or built model
  inputs/<input name>.npy          deterministic inputs
  ort_outputs/<output name>.npy    ONNX Runtime (CPU) outputs with every graph optimization
                                   disabled (ORT_DISABLE_ALL: the files are already optimized);
                                   names sanitized: [^A-Za-z0-9._-] -> '_'
  manifest.json                    inputs, outputs, files, how the model was made, the reference,
                                   operator histograms, versions, timings
  ops.json                         every distinct contrib-node signature: attributes, each input
                                   and output with its runtime dtype and shape, where it comes
                                   from, and its value when small
  build.log                        the optimizer's or builder's command and output
A folder is written as OUT/<name>.partial and renamed when complete; one that exists is not
redone (pass --force), so an interrupted run resumes.

Environments. Step 1 needs .venv-models (scripts/requirements-models.txt; transformers 4.x).
Step 2 needs onnxruntime-genai, which also needs onnx_ir and transformers >= 5: a separate
environment on top of .venv-models (nothing is installed into .venv-models; the .pth file makes
its packages visible, --system-site-packages only adds the base interpreter's):
  .venv-models/bin/python -m venv --system-site-packages .venv-genai
  .venv-models/bin/python -c 'import site; print(site.getsitepackages()[0])' \\
      > .venv-genai/lib/python3.11/site-packages/models_venv.pth
  .venv-genai/bin/pip install onnxruntime-genai onnx_ir 'transformers>=5'
Without onnxruntime_genai the genai_* models are skipped with a one-line message.

  .venv-models/bin/python scripts/export_contrib_models.py [--only NAME ...] [--out-dir DIR]
      [--force] [--seed N] [--list] [--signatures]
  .venv-genai/bin/python scripts/export_contrib_models.py --only genai_llama_int4_decode ...

Check hidet on them (hidet run against ort_outputs/):
  .venv/bin/python scripts/compare_with_ort.py models/contrib/<name> [...] [--hidet-bin PATH]
Benchmark against ONNX Runtime (bench_peers makes its own inputs; genai files need the sizes):
  .venv/bin/python scripts/bench_peers.py --model models/contrib/<name>/model.onnx --markdown
  genai prefill: add --dim batch_size=1 --dim sequence_length=128 --dim past_sequence_length=0
      --dim total_sequence_length=128 --dim kv_cache_dim=64
  genai decode:  the same with --dim sequence_length=1 --dim past_sequence_length=127
  gemma2 also needs --dim past_sliding_length=4 (its sliding layer's window-sized cache).
bench_peers runs the files as written, so for int4 its ONNX Runtime side uses accuracy_level 4.
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

try:
    import numpy as np
except ImportError:  # reported with set-up instructions by main()
    np = None  # type: ignore[assignment]

REPO = Path(__file__).resolve().parent.parent
OPSET = 17
SEED = 20251206
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
STANDARD_DOMAINS = {"", "ai.onnx"}
GENAI_INSTALL = (
    ".venv-models/bin/python -m venv --system-site-packages .venv-genai && "
    ".venv-models/bin/python -c 'import site; print(site.getsitepackages()[0])' > "
    ".venv-genai/lib/python{v}/site-packages/models_venv.pth && "
    ".venv-genai/bin/pip install onnxruntime-genai onnx_ir 'transformers>=5'"
)


def sanitize(name: str) -> str:
    """The file stem of a tensor name: every char outside [A-Za-z0-9._-] becomes '_'."""
    return _UNSAFE.sub("_", name)


def _seed_of(seed: int, key: str) -> int:
    """A seed for `key` that stays the same whatever else is exported."""
    return seed + zlib.crc32(key.encode()) % 100_000


def _ids(rng: np.random.Generator, seq: int, vocab: int) -> np.ndarray:
    return rng.integers(0, vocab, size=(1, seq), dtype=np.int64)


def _mask(seq: int, padded: int) -> np.ndarray:
    """Ones with `padded` zeros at the end (right padding)."""
    m = np.ones((1, seq), dtype=np.int64)
    if padded:
        m[:, -padded:] = 0
    return m


# ---------------------------------------------------------------------------------------------
# Step 1: torch exports for ONNX Runtime's transformers optimizer


@dataclass
class Source:
    """A transformers module ready for torch.onnx.export, with its reference inputs.

    `trace` are the example inputs of the export (neutral values for the sdpa exports: zeros as
    ids, ones as the mask), `inputs` what the folder stores and ONNX Runtime runs.
    """

    module: Any
    inputs: dict[str, np.ndarray]
    output_names: list[str]
    num_heads: int
    hidden: int
    dynamic_axes: dict[str, dict[int, str]] | None = None
    trace: dict[str, np.ndarray] | None = None
    about: str = ""


TEXT_AXES = {
    "input_ids": {0: "batch", 1: "seq"},
    "attention_mask": {0: "batch", 1: "seq"},
    "token_type_ids": {0: "batch", 1: "seq"},
    "last_hidden_state": {0: "batch", 1: "seq"},
    "pooler_output": {0: "batch"},
}


def _keyword_module(inner: Any, keys: list[str], n_out: int, **fixed: Any) -> Any:
    """A module whose forward(*tensors) calls `inner(**dict(zip(keys, tensors)), **fixed,
    return_dict=False)` and returns its first `n_out` outputs."""
    import torch

    class Keyword(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *args: torch.Tensor) -> tuple:
            return tuple(self.inner(**dict(zip(keys, args)), **fixed, return_dict=False)[:n_out])

    return Keyword().eval()


def _config(cls: str, attn: str, **kwargs: Any) -> Any:
    import transformers

    cfg = getattr(transformers, cls)(**kwargs)
    cfg._attn_implementation = attn
    return cfg


def _neutral(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Zeros for ids and token types, ones for the mask, in the shapes of `inputs`."""
    return {k: (np.ones_like(v) if k == "attention_mask" else np.zeros_like(v)) for k, v in inputs.items()}


def _bert_inputs(rng: np.random.Generator, seq: int, vocab: int) -> dict[str, np.ndarray]:
    types = np.zeros((1, seq), dtype=np.int64)
    types[:, seq // 2 :] = 1
    return {"input_ids": _ids(rng, seq, vocab), "attention_mask": _mask(seq, 5), "token_type_ids": types}


def _src_bert_base(seed: int) -> Source:
    import torch
    from transformers import BertModel

    torch.manual_seed(seed)
    model = BertModel(_config("BertConfig", "eager")).eval()
    inputs = _bert_inputs(np.random.default_rng(seed + 1), 128, 30522)
    return Source(_keyword_module(model, list(inputs), 2), inputs, ["last_hidden_state", "pooler_output"], 12, 768,
                  about="BertModel(BertConfig()), eager attention, static 1x128")


def _src_bert_small(seed: int) -> Source:
    import torch
    from transformers import BertModel

    torch.manual_seed(seed)
    cfg = _config("BertConfig", "sdpa", vocab_size=1000, hidden_size=256, num_hidden_layers=2,
                  num_attention_heads=4, intermediate_size=512, max_position_embeddings=128)
    inputs = _bert_inputs(np.random.default_rng(seed + 1), 64, 1000)
    return Source(_keyword_module(BertModel(cfg).eval(), list(inputs), 2), inputs,
                  ["last_hidden_state", "pooler_output"], 4, 256, TEXT_AXES, _neutral(inputs),
                  "BertModel hidden 256, 2 layers, 4 heads, FFN 512, vocabulary 1000; sdpa, dynamic axes")


def _distilbert(seed: int, attn: str) -> tuple[Any, dict[str, np.ndarray]]:
    import torch
    from transformers import DistilBertModel

    torch.manual_seed(seed)
    cfg = _config("DistilBertConfig", attn, vocab_size=1000, dim=128, n_layers=2, n_heads=4, hidden_dim=256,
                  max_position_embeddings=128)
    rng = np.random.default_rng(seed + 1)
    inputs = {"input_ids": _ids(rng, 64, 1000), "attention_mask": _mask(64, 5)}
    return _keyword_module(DistilBertModel(cfg).eval(), list(inputs), 1), inputs


def _src_distilbert(seed: int) -> Source:
    module, inputs = _distilbert(seed, "sdpa")
    return Source(module, inputs, ["last_hidden_state"], 4, 128, TEXT_AXES, _neutral(inputs),
                  "DistilBertModel dim 128, 2 layers, 4 heads, FFN 256, vocabulary 1000; sdpa, dynamic axes")


def _src_distilbert_static(seed: int) -> Source:
    module, inputs = _distilbert(seed, "eager")
    trace = {"input_ids": inputs["input_ids"], "attention_mask": np.ones_like(inputs["attention_mask"])}
    return Source(module, inputs, ["last_hidden_state"], 4, 128, trace=trace,
                  about="the same DistilBertModel, eager attention, static 1x64")


def _src_gpt2(seed: int) -> Source:
    import torch
    from transformers import GPT2Model

    torch.manual_seed(seed)
    model = GPT2Model(_config("GPT2Config", "eager")).eval()
    inputs = {"input_ids": _ids(np.random.default_rng(seed + 1), 128, 50257)}
    return Source(_keyword_module(model, ["input_ids"], 1, use_cache=False), inputs, ["last_hidden_state"], 12, 768,
                  about="GPT2Model(GPT2Config()), eager attention, static 1x128, no past")


def _src_gpt2_small(seed: int) -> Source:
    import torch
    from transformers import GPT2Model

    torch.manual_seed(seed)
    cfg = _config("GPT2Config", "sdpa", vocab_size=1000, n_embd=256, n_layer=2, n_head=4, n_positions=128)
    rng = np.random.default_rng(seed + 1)
    inputs = {"input_ids": _ids(rng, 32, 1000), "attention_mask": _mask(32, 3)}
    module = _keyword_module(GPT2Model(cfg).eval(), list(inputs), 1, use_cache=False)
    return Source(module, inputs, ["last_hidden_state"], 4, 256, TEXT_AXES, _neutral(inputs),
                  "GPT2Model 256, 2 layers, 4 heads, vocabulary 1000, 128 positions; sdpa, dynamic axes, no past")


def _src_vit(seed: int) -> Source:
    import torch
    from transformers import ViTModel

    torch.manual_seed(seed)
    cfg = _config("ViTConfig", "sdpa", hidden_size=192, num_hidden_layers=3, num_attention_heads=3,
                  intermediate_size=768, image_size=224, patch_size=16)
    model = ViTModel(cfg, add_pooling_layer=False).eval()
    x = np.random.default_rng(seed + 1).standard_normal((1, 3, 224, 224)).astype(np.float32)
    axes = {"pixel_values": {0: "batch"}, "last_hidden_state": {0: "batch"}}
    return Source(_keyword_module(model, ["pixel_values"], 1), {"pixel_values": x}, ["last_hidden_state"], 3, 192,
                  axes, about="ViTModel 192, 3 layers, 3 heads, FFN 768, 224x224, patch 16, no pooler; sdpa, "
                  "dynamic batch")


def _src_bartenc(seed: int) -> Source:
    import torch
    from transformers import BartModel

    torch.manual_seed(seed)
    cfg = _config("BartConfig", "sdpa", vocab_size=1000, d_model=128, encoder_layers=2, decoder_layers=2,
                  encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=256, decoder_ffn_dim=256,
                  max_position_embeddings=128)
    rng = np.random.default_rng(seed + 1)
    inputs = {"input_ids": _ids(rng, 32, 1000), "attention_mask": _mask(32, 4)}
    module = _keyword_module(BartModel(cfg).get_encoder().eval(), list(inputs), 1)
    return Source(module, inputs, ["last_hidden_state"], 4, 128, TEXT_AXES, _neutral(inputs),
                  "BartModel(...).get_encoder(): d_model 128, 2 layers, 4 heads, FFN 256; sdpa, dynamic axes")


def _src_t5enc(seed: int) -> Source:
    import torch
    from transformers import T5EncoderModel

    torch.manual_seed(seed)
    cfg = _config("T5Config", "eager", vocab_size=1000, d_model=128, d_kv=32, d_ff=256, num_layers=2, num_heads=4,
                  feed_forward_proj="relu")
    rng = np.random.default_rng(seed + 1)
    inputs = {"input_ids": _ids(rng, 32, 1000), "attention_mask": _mask(32, 4)}
    module = _keyword_module(T5EncoderModel(cfg).eval(), list(inputs), 1)
    return Source(module, inputs, ["last_hidden_state"], 4, 128, trace=_neutral(inputs),
                  about="T5EncoderModel d_model 128, 2 layers, 4 heads, FFN 256 ReLU; eager, static 1x32")


SOURCES: dict[str, Callable[[int], Source]] = {
    "bert_base": _src_bert_base,
    "bert_small": _src_bert_small,
    "distilbert": _src_distilbert,
    "distilbert_static": _src_distilbert_static,
    "gpt2": _src_gpt2,
    "gpt2_small": _src_gpt2_small,
    "vit": _src_vit,
    "bartenc": _src_bartenc,
    "t5enc": _src_t5enc,
}


# ---------------------------------------------------------------------------------------------
# Step 2: tiny decoders for the onnxruntime-genai model builder

GENAI_VOCAB = 1000
GENAI_COMMON = dict(
    vocab_size=GENAI_VOCAB, hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, max_position_embeddings=256, bos_token_id=1, eos_token_id=2, pad_token_id=0,
    tie_word_embeddings=False,
)
# arch -> (config class, model class, config arguments beside GENAI_COMMON)
GENAI_ARCHS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", {}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {}),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {"head_dim": 64}),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", {"original_max_position_embeddings": 256}),
    "gemma": ("GemmaConfig", "GemmaForCausalLM", {"head_dim": 64}),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", {"head_dim": 64, "sliding_window": 4}),
    "phi": ("PhiConfig", "PhiForCausalLM", {"partial_rotary_factor": 0.5}),
}
# phase -> (new tokens, past tokens)
GENAI_PHASES = {"prefill": (7, 0), "decode": (1, 5)}


def _save_tokenizer(path: Path) -> None:
    """A WordLevel tokenizer over the vocabulary (the builder copies the tokenizer files)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3}
    vocab.update({f"w{i}": i for i in range(4, GENAI_VOCAB)})
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                   pad_token="<pad>")
    fast.save_pretrained(str(path))


def _save_hf(arch: str, seed: int, path: Path) -> None:
    """A random transformers checkpoint of `arch`: weights ~N(0, 0.05), and biases and norm
    weights moved off their initial values (the builder drops all-zero biases)."""
    import torch
    import transformers

    cfg_cls, model_cls, extra = GENAI_ARCHS[arch]
    torch.manual_seed(seed)
    model = getattr(transformers, model_cls)(getattr(transformers, cfg_cls)(**{**GENAI_COMMON, **extra})).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0, 0.05)
            else:
                p.add_(torch.randn_like(p) * 0.05)
    model.save_pretrained(str(path))
    _save_tokenizer(path)


def _genai_inputs(model_path: Path, decoder: dict, seq: int, past: int, seed: int) -> dict[str, np.ndarray]:
    """Inputs of a genai model for `seq` new tokens after `past` cached ones. The past is empty
    (window-sized zeros for a sliding-window-cache layer) when `past` is 0, else the `present` of
    an ONNX Runtime run of the model over `past` other tokens."""
    import onnx

    model = onnx.load(str(model_path), load_external_data=False)
    window = (decoder.get("sliding_window") or {}).get("window_size")
    total = past + seq
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for v in model.graph.input:
        t = v.type.tensor_type
        dtype = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type)
        dims = [d.dim_param if d.HasField("dim_param") else d.dim_value for d in t.shape.dim]
        if v.name == "input_ids":
            feeds[v.name] = _ids(rng, seq, GENAI_VOCAB).astype(dtype)
        elif v.name == "attention_mask":
            feeds[v.name] = np.ones((1, total), dtype=dtype)
        elif v.name == "position_ids":
            feeds[v.name] = np.arange(past, total, dtype=dtype).reshape(1, seq)
        elif v.name.startswith("past_key_values"):
            capacity = window if dims[2] == "past_sliding_length" else 0
            head = dims[3] if isinstance(dims[3], int) and dims[3] else decoder["head_size"]
            feeds[v.name] = np.zeros((1, dims[1], capacity, head), dtype=dtype)
        else:
            raise ValueError(f"unexpected genai input {v.name} {dims}")
    if past:
        prefill = _genai_inputs(model_path, decoder, past, 0, seed + 1)
        present = _run_ort(model_path, prefill)
        for k in feeds:
            if k.startswith("past_key_values"):
                feeds[k] = present[k.replace("past_key_values", "present")]
    return feeds


# ---------------------------------------------------------------------------------------------
# The set


@dataclass(frozen=True)
class Case:
    """One model folder: step 1 (`source` + optimizer flags) or step 2 (`arch`, `precision`, `phase`)."""

    name: str
    contrib: str
    source: str = ""
    model_type: str = ""
    flags: tuple[str, ...] = ()
    arch: str = ""
    precision: str = ""
    phase: str = ""

    @property
    def genai(self) -> bool:
        return bool(self.arch)


_GENAI_CONTRIB = {
    "llama": "GroupQueryAttention 2, SkipSimplifiedLayerNormalization 4, SimplifiedLayerNormalization 1",
    "qwen3": "GroupQueryAttention 2 (separate q, k, v), SkipSimplifiedLayerNormalization 4, "
             "SimplifiedLayerNormalization 5 (q/k norms)",
    "gemma2": "GroupQueryAttention 2 (softcap 50; layer 0 local_window_size 4, sliding_window_cache 1), "
              "SkipSimplifiedLayerNormalization 4, SimplifiedLayerNormalization 5",
    "phi": "GroupQueryAttention 2 (partial rotary: caches [256,16]), SkipLayerNormalization 2",
}
_GENAI_CONTRIB["qwen2"] = _GENAI_CONTRIB["phi3"] = _GENAI_CONTRIB["gemma"] = _GENAI_CONTRIB["llama"]

CASES: dict[str, Case] = {
    c.name: c
    for c in [
        Case("bert_base_ortopt", "Attention 12, Gelu 12, SkipLayerNormalization 24", "bert_base", "bert"),
        Case("bert_base_ortopt_maskindex", "Attention 12, Gelu 12, SkipLayerNormalization 24", "bert_base", "bert",
             ("--use_mask_index",)),
        Case("bert_base_ortopt_o2", "BiasGelu 12, SkipLayerNormalization 25", "bert_base", "bert",
             ("--opt_level", "2")),
        Case("bert_small_ortopt", "EmbedLayerNormalization 1, Attention 2, BiasGelu 2, SkipLayerNormalization 4",
             "bert_small", "bert"),
        Case("bert_small_ortopt_rawmask", "EmbedLayerNormalization 1, Attention 2 (raw 2-D mask), BiasGelu 2, "
             "SkipLayerNormalization 4", "bert_small", "bert", ("--use_raw_attention_mask",)),
        Case("bert_small_ortopt_mha", "EmbedLayerNormalization 1, MultiHeadAttention 2, BiasGelu 2, "
             "SkipLayerNormalization 4", "bert_small", "bert", ("--use_multi_head_attention",)),
        Case("bert_small_ortopt_fastgelu", "EmbedLayerNormalization 1, Attention 2, FastGelu 2, "
             "SkipLayerNormalization 4", "bert_small", "bert", ("--enable_gelu_approximation",)),
        Case("distilbert_ortopt", "EmbedLayerNormalization 1, Attention 2, BiasGelu 2, SkipLayerNormalization 4",
             "distilbert", "bert"),
        Case("distilbert_static_ortopt", "Gelu 2, SkipLayerNormalization 4", "distilbert_static", "bert"),
        Case("gpt2_ortopt", "FastGelu 12, SkipLayerNormalization 24", "gpt2", "gpt2"),
        Case("gpt2_small_ortopt", "FastGelu 2, SkipLayerNormalization 4", "gpt2_small", "gpt2"),
        Case("vit_ortopt", "BiasGelu 3, SkipLayerNormalization 6", "vit", "vit"),
        Case("bartenc_ortopt", "BiasGelu 2, SkipLayerNormalization 4", "bartenc", "bart"),
        Case("t5enc_ortopt", "SkipSimplifiedLayerNormalization 3, SimplifiedLayerNormalization 2 (domain \"\")",
             "t5enc", "t5"),
    ]
    + [
        Case(f"genai_{arch}_{precision}_{phase}",
             _GENAI_CONTRIB[arch] + (f", MatMulNBits {9 if arch == 'phi' else 11}" if precision == "int4" else ""),
             arch=arch, precision=precision, phase=phase)
        for arch in GENAI_ARCHS
        for precision in ("fp32", "int4")
        for phase in GENAI_PHASES
    ]
}


# ---------------------------------------------------------------------------------------------
# ONNX Runtime references and descriptions


def _session(model: Path | bytes) -> Any:
    """A CPU session with every graph optimization disabled: the files are already optimized."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.log_severity_level = 3
    return ort.InferenceSession(model if isinstance(model, bytes) else str(model), opts,
                                providers=["CPUExecutionProvider"])


def _run_ort(model: Path | bytes, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    sess = _session(model)
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, inputs)))


def _accuracy_level_0(model_path: Path) -> tuple[bytes, int]:
    """The model with accuracy_level 0 on every MatMulNBits (serialized, weights inline), and
    how many nodes were changed."""
    import onnx

    model = onnx.load(str(model_path))
    changed = 0
    for node in model.graph.node:
        if node.op_type == "MatMulNBits":
            keep = [a for a in node.attribute if a.name != "accuracy_level"]
            del node.attribute[:]
            node.attribute.extend(keep + [onnx.helper.make_attribute("accuracy_level", 0)])
            changed += 1
    return model.SerializeToString(), changed


def _max_rel_diff(a: np.ndarray, ref: np.ndarray) -> float:
    """max |a - ref| / max |ref| (the absolute difference when ref is all zeros)."""
    r = ref.astype(np.float64)
    if not r.size:
        return 0.0
    err = float(np.max(np.abs(a.astype(np.float64) - r)))
    scale = float(np.max(np.abs(r)))
    return err / scale if scale > 0 else err


def _is_contrib(node: Any) -> bool:
    import onnx

    return node.domain not in STANDARD_DOMAINS or not onnx.defs.has(node.op_type)


def _op_key(node: Any) -> str:
    if node.domain in STANDARD_DOMAINS and _is_contrib(node):
        return f"ai.onnx(non-standard)::{node.op_type}"
    return f"{node.domain or 'ai.onnx'}::{node.op_type}"


def op_histogram(model: Any, contrib_only: bool = False) -> dict[str, int]:
    """`domain::op_type` -> count over the top-level graph, most frequent first. ORT's ops in
    domain "" (SimplifiedLayerNormalization) are `ai.onnx(non-standard)::...`."""
    hist = collections.Counter(_op_key(n) for n in model.graph.node if not contrib_only or _is_contrib(n))
    return dict(sorted(hist.items(), key=lambda kv: (-kv[1], kv[0])))


def _attr_value(attr: Any) -> Any:
    import onnx

    v = onnx.helper.get_attribute_value(attr)
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, onnx.TensorProto):
        return f"tensor{list(v.dims)}"
    if isinstance(v, list):
        return [x.decode() if isinstance(x, bytes) else x for x in v]
    return v


def _runtime_values(model_path: Path, inputs: dict[str, np.ndarray], wanted: set[str]) -> dict[str, tuple]:
    """name -> (dtype, shape, value) of the tensors in `wanted` as ONNX Runtime computes them:
    they are added as graph outputs (typed by symbolic shape inference where it can) and the
    model is run once. Small initializers are included with their value."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(model_path))
    have = {o.name for o in model.graph.output}
    known = {i.name for i in model.graph.input} | {t.name for t in model.graph.initializer}
    typed = {v.name: v for v in model.graph.value_info}
    try:
        from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

        inferred = SymbolicShapeInference.infer_shapes(model, auto_merge=True, guess_output_rank=True)
        typed.update({v.name: v for v in inferred.graph.value_info})
    except Exception:  # noqa: BLE001 - the tensors it cannot type are left out
        pass
    for name in sorted(wanted - have - known):
        if name in typed and typed[name].type.tensor_type.elem_type:
            v = onnx.ValueInfoProto()
            v.CopyFrom(typed[name])
            v.type.tensor_type.ClearField("shape")
            model.graph.output.append(v)
    out: dict[str, tuple] = {}
    try:
        for name, a in _run_ort(model.SerializeToString(), inputs).items():
            out[name] = (str(a.dtype), list(a.shape), a)
    except Exception as e:  # noqa: BLE001 - described without runtime types
        print(f"    (runtime types unavailable: {_first_line(e)})", flush=True)
    for name, a in inputs.items():
        out[name] = (str(a.dtype), list(a.shape), a)
    for t in model.graph.initializer:
        if t.name in wanted:
            a = numpy_helper.to_array(t)
            out[t.name] = (str(a.dtype), list(a.shape), a if a.size <= 8 else None)
    return out


def describe_contrib(model_path: Path, inputs: dict[str, np.ndarray]) -> dict:
    """ops.json: opsets, contrib and standard histograms, and every distinct contrib-node
    signature (attributes; each input and output's runtime dtype and shape, where it comes from,
    and its value when it has at most 8 elements)."""
    import onnx

    model = onnx.load(str(model_path), load_external_data=False)
    nodes = [n for n in model.graph.node if _is_contrib(n)]
    wanted = {x for n in nodes for x in list(n.input) + list(n.output) if x}
    values = _runtime_values(model_path, inputs, wanted) if nodes else {}
    producers = {o: n.op_type for n in model.graph.node for o in n.output}
    graph_inputs = {i.name for i in model.graph.input}
    inits = {t.name for t in model.graph.initializer}

    def io(x: str) -> str:
        if not x:
            return "<empty>"
        dtype, shape, value = values.get(x, ("?", "?", None))
        where = "graph-input" if x in graph_inputs else "initializer" if x in inits else f"from {producers.get(x, '?')}"
        text = f"{dtype}{shape} ({where})"
        if value is not None and x not in graph_inputs and getattr(value, "size", 99) <= 8:
            text += f" value={np.asarray(value).tolist()}"
        return text

    signatures: dict[str, dict] = {}
    for n in nodes:
        attrs = {a.name: _attr_value(a) for a in n.attribute}
        ins, outs = [io(x) for x in n.input], [io(x) for x in n.output]
        key = json.dumps([n.domain, n.op_type, attrs, ins, outs], sort_keys=True, default=str)
        sig = signatures.setdefault(key, {"op": _op_key(n), "attrs": attrs, "n_inputs": len(n.input), "inputs": ins,
                                          "outputs": outs, "count": 0, "example_node": n.name})
        sig["count"] += 1
    return {
        "opset_import": {o.domain or "ai.onnx": o.version for o in model.opset_import},
        "contrib_histogram": op_histogram(model, contrib_only=True),
        "op_histogram": op_histogram(model),
        "signatures": list(signatures.values()),
    }


def print_signatures(folder: Path) -> None:
    """The contrib-op signatures of a folder's ops.json, one block per op and attributes."""
    ops = json.loads((folder / "ops.json").read_text())
    print(f"## {folder.name}: {ops['contrib_histogram']}")
    for s in ops["signatures"]:
        print(f"  {s['op']} x{s['count']} attrs={s['attrs']}")
        print(f"     in[{s['n_inputs']}]: " + " | ".join(s["inputs"]))
        print("     out: " + " | ".join(s["outputs"]))


# ---------------------------------------------------------------------------------------------
# Writing folders


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0][:300] if text else ''}"


def _versions() -> dict[str, str]:
    out = {}
    for mod in ("torch", "transformers", "onnx", "onnxruntime", "onnxruntime_genai", "numpy"):
        try:
            out[mod] = __import__(mod).__version__
        except Exception:  # noqa: BLE001 - not installed (or not importable)
            pass
    return out


def _external_files(model_path: Path) -> set[str]:
    """The external data files a model refers to (relative locations)."""
    import onnx

    model = onnx.load(str(model_path), load_external_data=False)
    tensors = list(model.graph.initializer) + [
        a.t for n in model.graph.node for a in n.attribute if a.type == onnx.AttributeProto.TENSOR
    ]
    return {e.value for t in tensors if t.data_location == onnx.TensorProto.EXTERNAL
            for e in t.external_data if e.key == "location"}


def _save_npys(folder: Path, arrays: dict[str, np.ndarray]) -> list[dict]:
    folder.mkdir(parents=True, exist_ok=True)
    entries = []
    for name, a in arrays.items():
        f = sanitize(name) + ".npy"
        np.save(folder / f, a)
        entry: dict[str, Any] = {"name": name, "file": f, "dtype": str(a.dtype), "shape": list(a.shape)}
        if a.dtype.kind == "f" and a.size:
            entry["max_abs"] = float(np.max(np.abs(a)))
        entries.append(entry)
    return entries


def _run_logged(cmd: list[str], log: Path, cwd: Path) -> None:
    """Run `cmd` in `cwd`, its command line and output into `log`; raise when it fails."""
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd)
    log.write_text(" ".join(cmd) + "\n" + r.stdout + r.stderr)
    if r.returncode:
        tail = [ln for ln in (r.stdout + r.stderr).strip().splitlines() if ln.strip()][-3:]
        raise RuntimeError(f"{cmd[2]} exited with {r.returncode}: {' / '.join(tail)[:400]}")
    print(f"    {cmd[2]} done in {time.perf_counter() - t0:.1f} s", flush=True)


@dataclass
class Context:
    """What one run shares between folders: the scratch directory, raw exports and builds."""

    out: Path
    seed: int
    scratch: Path
    sources: dict[str, tuple[Source, Path]] = field(default_factory=dict)
    builds: dict[tuple[str, str], Path] = field(default_factory=dict)


def _raw_export(ctx: Context, key: str) -> tuple[Source, Path]:
    """The torch export of source `key` (once per run)."""
    if key not in ctx.sources:
        import torch

        src = SOURCES[key](_seed_of(ctx.seed, key))
        path = ctx.scratch / f"{key}_raw.onnx"
        kwargs: dict[str, Any] = {"input_names": list(src.inputs), "output_names": src.output_names,
                                  "opset_version": OPSET, "do_constant_folding": True}
        if src.dynamic_axes:
            kwargs["dynamic_axes"] = {k: v for k, v in src.dynamic_axes.items()
                                      if k in src.inputs or k in src.output_names}
        if "dynamo" in inspect.signature(torch.onnx.export).parameters:
            kwargs["dynamo"] = False
        trace = src.trace if src.trace is not None else src.inputs
        print(f"    exporting {key}: {src.about} ...", flush=True)
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # TracerWarnings, the TorchScript exporter's deprecation
            torch.onnx.export(src.module, tuple(torch.from_numpy(a) for a in trace.values()), str(path), **kwargs)
        ctx.sources[key] = (src, path)
    return ctx.sources[key]


def make_ortopt(case: Case, ctx: Context, folder: Path) -> dict:
    """Step 1 into `folder`: export, optimize, reference. Returns the manifest's specific part."""
    src, raw = _raw_export(ctx, case.source)
    model_path = folder / "model.onnx"
    cmd = [sys.executable, "-m", "onnxruntime.transformers.optimizer", "--input", str(raw), "--output",
           str(model_path), "--model_type", case.model_type, "--num_heads", str(src.num_heads), "--hidden_size",
           str(src.hidden), *case.flags]
    print(f"    optimizing: {' '.join(['--model_type', case.model_type, *case.flags])}", flush=True)
    _run_logged(cmd, folder / "build.log", ctx.scratch)
    return {
        "step": "onnxruntime.transformers.optimizer",
        "source": f"{src.about}; torch.onnx.export (TorchScript exporter, opset {OPSET})",
        "optimizer_args": ["--model_type", case.model_type, "--num_heads", str(src.num_heads), "--hidden_size",
                           str(src.hidden), *case.flags],
        "inputs_values": src.inputs,
    }


def _genai_build(ctx: Context, arch: str, precision: str) -> Path:
    """The builder's output folder for `arch` at `precision` (once per run)."""
    key = (arch, precision)
    if key not in ctx.builds:
        hf = ctx.scratch / f"hf_{arch}"
        if not (hf / "config.json").exists():
            print(f"    saving a random {arch} checkpoint ...", flush=True)
            _save_hf(arch, _seed_of(ctx.seed, arch), hf)
        out = ctx.scratch / f"genai_{arch}_{precision}"
        out.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(hf), "-o", str(out), "-p",
               precision, "-e", "cpu", "-c", str(ctx.scratch / "hf_cache")]
        print(f"    building: -p {precision} -e cpu", flush=True)
        _run_logged(cmd, out / "build.log", ctx.scratch)
        if not (out / "model.onnx").exists():
            raise RuntimeError(f"the builder wrote no model.onnx in {out}")
        ctx.builds[key] = out
    return ctx.builds[key]


def make_genai(case: Case, ctx: Context, folder: Path) -> dict:
    """Step 2 into `folder`: build (or reuse), copy, make the inputs. Returns the manifest's
    specific part."""
    build = _genai_build(ctx, case.arch, case.precision)
    for f in ["model.onnx", "build.log", *_external_files(build / "model.onnx")]:
        shutil.copyfile(build / f, folder / f)
    decoder = json.loads((build / "genai_config.json").read_text())["model"]["decoder"]
    seq, past = GENAI_PHASES[case.phase]
    inputs = _genai_inputs(folder / "model.onnx", decoder, seq, past, _seed_of(ctx.seed, case.name))
    cfg_cls, _, extra = GENAI_ARCHS[case.arch]
    return {
        "step": "onnxruntime_genai.models.builder",
        "source": f"transformers {cfg_cls}({', '.join(f'{k}={v}' for k, v in {**GENAI_COMMON, **extra}.items())}), "
                  "random weights",
        "builder_args": ["-p", case.precision, "-e", "cpu"],
        "case": f"batch 1, {seq} new token{'s' if seq > 1 else ''}, past {past}"
                + (f" (the present of an ONNX Runtime prefill run over {past} tokens)" if past else ""),
        "genai_decoder_config": decoder,
        "inputs_values": inputs,
    }


def export_case(case: Case, ctx: Context, force: bool) -> tuple[str, dict | None]:
    """Bring OUT/<name> up to date: ("exists", None) or ("exported", manifest)."""
    final = ctx.out / case.name
    if (final / "manifest.json").exists() and not force:
        return "exists", None
    folder = ctx.out / f"{case.name}.partial"
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    t0 = time.perf_counter()
    made = make_genai(case, ctx, folder) if case.genai else make_ortopt(case, ctx, folder)
    build_s = time.perf_counter() - t0
    inputs = made.pop("inputs_values")
    model_path = folder / "model.onnx"

    t0 = time.perf_counter()
    import onnxruntime

    manifest: dict[str, Any] = {"name": case.name, "contrib_ops": case.contrib, **made}
    manifest["inputs"] = _save_npys(folder / "inputs", inputs)
    ref = _run_ort(model_path, inputs)
    reference = (f"onnxruntime {onnxruntime.__version__} CPUExecutionProvider, graph optimizations disabled "
                 "(ORT_DISABLE_ALL)")
    ops = describe_contrib(model_path, inputs)
    if ops["contrib_histogram"].get("com.microsoft::MatMulNBits"):
        exact, changed = _accuracy_level_0(model_path)
        level0 = _run_ort(exact, inputs)
        manifest["outputs_level4"] = _save_npys(folder / "ort_outputs_level4", ref)
        manifest["level0_vs_level4_max_rel_diff"] = {k: _max_rel_diff(ref[k], level0[k]) for k in ref}
        reference += (f"; ort_outputs/ with accuracy_level 0 set on all {changed} MatMulNBits (the exact float "
                      "product; the model file keeps the builder's accuracy_level 4), ort_outputs_level4/ from the "
                      "file as written")
        ref = level0
    manifest["outputs"] = _save_npys(folder / "ort_outputs", ref)
    manifest["reference"] = reference
    manifest.update({
        "opset_import": ops["opset_import"],
        "contrib_histogram": ops["contrib_histogram"],
        "op_histogram": ops["op_histogram"],
        "file_bytes": model_path.stat().st_size + sum((folder / f).stat().st_size
                                                       for f in _external_files(model_path)),
        "seed": ctx.seed,
        "timings_s": {"build": round(build_s, 2), "reference": round(time.perf_counter() - t0, 2)},
        "versions": _versions(),
    })
    (folder / "ops.json").write_text(json.dumps(ops, indent=2, default=str) + "\n")
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2, default=str) + "\n")
    if final.exists():
        old = ctx.out / f"{case.name}.old"
        if old.exists():
            shutil.rmtree(old)
        os.replace(final, old)
        os.replace(folder, final)
        shutil.rmtree(old)
    else:
        os.replace(folder, final)
    return "exported", manifest


def _summary(m: dict) -> str:
    parts = [f"{m['file_bytes'] / 2**20:.1f} MiB", f"contrib {m['contrib_histogram']}"]
    parts.append("outputs " + ", ".join(f"{o['name']} {o['dtype']}{o['shape']}" for o in m["outputs"]))
    if "level0_vs_level4_max_rel_diff" in m:
        parts.append(f"accuracy_level 4 vs 0 max rel diff {max(m['level0_vs_level4_max_rel_diff'].values()):.1e}")
    return "; ".join(parts)


def _genai_missing() -> str | None:
    """Why step 2 cannot run in this interpreter, or None when it can."""
    from importlib.metadata import PackageNotFoundError, version

    missing = [m for m in ("onnxruntime_genai", "onnx_ir") if importlib.util.find_spec(m) is None]
    try:
        if int(version("transformers").split(".")[0]) < 5:
            missing.append("transformers>=5")
    except (PackageNotFoundError, ValueError):
        missing.append("transformers>=5")
    return ", ".join(missing) if missing else None


def main(argv: list[str]) -> int:
    """Export the selected folders; exit status 0 unless one failed (2 on a usage error)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out-dir", type=Path, default=REPO / "models" / "contrib", help="output folder")
    p.add_argument("--only", action="append", choices=list(CASES), metavar="NAME",
                   help="export only this model (repeatable); --list shows the names")
    p.add_argument("--force", action="store_true", help="redo folders that exist")
    p.add_argument("--seed", type=int, default=SEED)
    p.add_argument("--list", action="store_true", help="list the models and their contrib operators, then exit")
    p.add_argument("--signatures", action="store_true",
                   help="print the contrib-op signatures (ops.json) of the selected folders that exist, then exit")
    args = p.parse_args(argv)

    names = args.only or list(CASES)
    if args.list:
        for n in names:
            print(f"{n:<28} {CASES[n].contrib}")
        return 0
    if args.signatures:
        shown = [n for n in names if (args.out_dir / n / "ops.json").exists()]
        for n in shown:
            print_signatures(args.out_dir / n)
        if not shown:
            print(f"no exported folder with ops.json in {args.out_dir}")
        return 0

    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    required = ("numpy", "torch", "transformers", "onnx", "onnxruntime")
    missing = [m for m in required if importlib.util.find_spec(m) is None]
    if missing:
        print(f"error: {sys.executable} lacks {', '.join(missing)}; set up the models environment with\n"
              "  python3 -m venv .venv-models\n"
              "  .venv-models/bin/pip install -r scripts/requirements-models.txt\n"
              "and run this script with .venv-models/bin/python", file=sys.stderr)
        return 2

    cases = [CASES[n] for n in names]
    skipped: list[str] = []
    genai_missing = _genai_missing()
    if genai_missing and any(c.genai for c in cases):
        skipped = [c.name for c in cases if c.genai]
        cases = [c for c in cases if not c.genai]
        v = f"{sys.version_info.major}.{sys.version_info.minor}"
        print(f"skipping the {len(skipped)} genai_* model(s): {sys.executable} lacks {genai_missing}; "
              f"from the repository root: {GENAI_INSTALL.format(v=v)}", flush=True)
    elif not genai_missing and any(not c.genai for c in cases):
        print("note: the step-1 (ortopt) models were checked with transformers 4.x (.venv-models); "
              "this environment has transformers 5", flush=True)

    args.out_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    outcomes: dict[str, str] = {}
    with tempfile.TemporaryDirectory(dir=args.out_dir, prefix=".scratch-") as scratch:
        ctx = Context(args.out_dir, args.seed, Path(scratch))
        for k, case in enumerate(cases, 1):
            print(f"[{case.name}] {k}/{len(cases)}", flush=True)
            t0 = time.perf_counter()
            try:
                status, m = export_case(case, ctx, args.force)
            except Exception as e:  # noqa: BLE001 - skip this folder, go on with the rest
                partial = args.out_dir / f"{case.name}.partial"
                if partial.exists():
                    shutil.rmtree(partial)
                outcomes[case.name] = f"FAILED: {_first_line(e)}"
                print(f"[{case.name}] FAILED: {_first_line(e)}", flush=True)
                if os.environ.get("HIDET_EXPORT_TRACEBACK"):
                    traceback.print_exc()
                continue
            outcomes[case.name] = status
            if m is None:
                print(f"[{case.name}] exists, not redone (--force redoes it)", flush=True)
            else:
                print(f"[{case.name}] done in {time.perf_counter() - t0:.1f} s: {_summary(m)}", flush=True)

    failed = {n: s for n, s in outcomes.items() if s.startswith("FAILED")}
    print(f"\n{len(outcomes) - len(failed)} folder(s) ready in {args.out_dir} "
          f"({sum(s == 'exported' for s in outcomes.values())} exported now), {len(failed)} failed, "
          f"{len(skipped)} skipped (no onnxruntime_genai), {time.perf_counter() - started:.0f} s")
    for n, s in failed.items():
        print(f"  {n}: {s}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
