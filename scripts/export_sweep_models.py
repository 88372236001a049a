#!/usr/bin/env python3
"""Export the sweep models: 37 further families beyond the broad set (export_broad_models.py)
and the probe models (export_probe_models.py), used to look for models hidet fails on or runs
slowly (BENCHMARKS.md, thirty-ninth session): torchvision detection, segmentation, optical flow
and vision transformers; transformers encoders, encoder-decoders and decoders built from small
configs; four with dynamic axes (names ending in _dyn); and two single-operator models
(TopK over a long vector, a 7x7 stride-2 stem convolution). Random seeded weights (torchvision
`weights=None`, transformers from configs; nothing is downloaded), `torch.onnx.export`
(TorchScript exporter), opset 17, fp32, eval mode; each export is checked against PyTorch with
ONNX Runtime.

  .venv-models/bin/python scripts/export_sweep_models.py OUT_DIR NAME [NAME ...]
  .venv-models/bin/python scripts/export_sweep_models.py --list
  .venv/bin/python scripts/bench_peers.py --model OUT_DIR/NAME.onnx --rounds 2 --no-ops --markdown
"""
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn

warnings.filterwarnings("ignore")
OUT = Path(".")  # set from the command line
SEED = 1234
torch.set_num_threads(1)


class First(nn.Module):
    """Calls the wrapped model with positional/keyword inputs and returns its first output(s)."""

    def __init__(self, m, names, n_out=1, kw=None):
        super().__init__()
        self.m, self.names, self.n_out, self.kw = m, names, n_out, kw or {}

    def forward(self, *args):
        out = self.m(**dict(zip(self.names, args)), **self.kw)
        if isinstance(out, torch.Tensor):
            return out
        if isinstance(out, dict) or hasattr(out, "to_tuple"):
            out = out.to_tuple()
        out = [o for o in out if isinstance(o, torch.Tensor)]
        return tuple(out[: self.n_out]) if self.n_out > 1 else out[0]


def rand_bn(model):
    g = torch.Generator().manual_seed(SEED)
    for m in model.modules():
        if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)):
            m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(m.running_var.shape, generator=g) + 0.5)


def ids(b, s, vocab=1000):
    return torch.randint(0, vocab, (b, s), generator=torch.Generator().manual_seed(SEED))


def img(b, c=3, h=224, w=224):
    return torch.randn(b, c, h, w, generator=torch.Generator().manual_seed(SEED))


def tv(fn, **kw):
    import torchvision
    import torchvision.models.optical_flow
    import torchvision.models.video
    for ns in (torchvision.models, torchvision.models.optical_flow, torchvision.models.video):
        if hasattr(ns, fn):
            return getattr(ns, fn)(weights=None, **kw)
    raise AttributeError(fn)


def tvd(fn, **kw):
    import torchvision
    return getattr(torchvision.models.detection, fn)(weights=None, weights_backbone=None, **kw)


def tvs(fn, **kw):
    import torchvision
    return getattr(torchvision.models.segmentation, fn)(weights=None, weights_backbone=None, **kw)


class Detector(nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, x):
        r = self.m(list(x.unbind(0)))[0]
        return r["boxes"], r["scores"], r["labels"]


class SegOut(nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, x):
        return self.m(x)["out"]


class Raft(nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, a, b):
        return self.m(a, b, num_flow_updates=3)[-1]


def hf(cls_name, cfg_name, **cfg):
    import transformers
    torch.manual_seed(SEED)
    config = getattr(transformers, cfg_name)(**cfg)
    try:
        config._attn_implementation = "eager"
    except Exception:
        pass
    return getattr(transformers, cls_name)(config)


TXT = dict(vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
           intermediate_size=256, max_position_embeddings=256)


def text_model(cls_name, cfg_name, b=1, s=64, mask=True, n_out=1, extra=None, **cfg):
    """(module, args, input_names) for an encoder/decoder taking input_ids (+ attention_mask)."""
    kw = dict(TXT)
    kw.update(cfg)
    kw = {k: v for k, v in kw.items() if v is not None}
    m = hf(cls_name, cfg_name, **kw)
    names = ["input_ids"] + (["attention_mask"] if mask else [])
    args = [ids(b, s, kw.get("vocab_size", 1000))]
    if mask:
        args.append(torch.ones(b, s, dtype=torch.int64))
    return First(m, names, n_out, kw=extra), tuple(args), names


def decoder(cls_name, cfg_name, b=1, s=64, **cfg):
    return text_model(cls_name, cfg_name, b, s, mask=True, extra={"use_cache": False}, **cfg)


MODELS = {}


def model(name):
    def reg(fn):
        MODELS[name] = fn
        return fn
    return reg


# ---------------- torchvision ----------------
@model("alexnet_b1")
def _():
    return tv("alexnet"), (img(1),), ["x"]


@model("inception_v3_b2")
def _():
    return tv("inception_v3", aux_logits=False, init_weights=True), (img(2, h=299, w=299),), ["x"]


@model("wide_resnet50_2_b2")
def _():
    return tv("wide_resnet50_2"), (img(2),), ["x"]


@model("swin_v2_t_b1")
def _():
    return tv("swin_v2_t"), (img(1, h=256, w=256),), ["x"]


@model("maxvit_t_b1")
def _():
    return tv("maxvit_t"), (img(1),), ["x"]


@model("s3d_b1")
def _():
    return tv("s3d"), (torch.randn(1, 3, 16, 112, 112),), ["x"]


@model("mvit_v2_s_b1")
def _():
    return tv("mvit_v2_s"), (torch.randn(1, 3, 16, 224, 224),), ["x"]


@model("lraspp_mbv3_b1")
def _():
    return SegOut(tvs("lraspp_mobilenet_v3_large")), (img(1, h=256, w=256),), ["x"]


@model("fcn_resnet50_b1")
def _():
    return SegOut(tvs("fcn_resnet50", aux_loss=False)), (img(1, h=160, w=160),), ["x"]


@model("ssdlite320_b1")
def _():
    m = tvd("ssdlite320_mobilenet_v3_large", score_thresh=0.0)
    return Detector(m), (torch.rand(1, 3, 320, 320),), ["x"]


def spread_head(m, std):
    """Random-weight detectors give near-uniform class scores (ties everywhere, NMS/TopK order
    decided by ulps); widen the classification head so scores are well separated."""
    g = torch.Generator().manual_seed(SEED + 1)
    head = m.head.classification_head
    for mod in head.modules():
        if isinstance(mod, nn.Conv2d):
            mod.weight.data = torch.randn(mod.weight.shape, generator=g) * std
    return m


@model("ssdlite320s_b1")
def _():
    m = spread_head(tvd("ssdlite320_mobilenet_v3_large", score_thresh=0.0), 0.3)
    return Detector(m), (torch.rand(1, 3, 320, 320),), ["x"]


@model("retinanet_b1")
def _():
    m = tvd("retinanet_resnet50_fpn", min_size=256, max_size=256, score_thresh=0.0)
    return Detector(m), (torch.rand(1, 3, 256, 256),), ["x"]


@model("fcos_b1")
def _():
    m = tvd("fcos_resnet50_fpn", min_size=256, max_size=256, score_thresh=0.0)
    return Detector(m), (torch.rand(1, 3, 256, 256),), ["x"]


@model("raft_small_b1")
def _():
    return Raft(tv("raft_small")), (torch.rand(1, 3, 128, 128) * 2 - 1, torch.rand(1, 3, 128, 128) * 2 - 1), ["img1", "img2"]


# ---------------- transformers encoders ----------------
@model("distilbert_b1")
def _():
    return text_model("DistilBertModel", "DistilBertConfig", vocab_size=1000, dim=128, n_layers=2, n_heads=4,
                      hidden_dim=256, max_position_embeddings=256)


@model("roberta_b1")
def _():
    return text_model("RobertaModel", "RobertaConfig", pad_token_id=1)


@model("electra_b1")
def _():
    return text_model("ElectraModel", "ElectraConfig", embedding_size=64)


@model("mobilebert_b1")
def _():
    return text_model("MobileBertModel", "MobileBertConfig", vocab_size=1000, hidden_size=128, num_hidden_layers=2,
                      num_attention_heads=4, intermediate_size=128, embedding_size=64, intra_bottleneck_size=64,
                      true_hidden_size=64, num_feedforward_networks=2)


@model("squeezebert_b1")
def _():
    return text_model("SqueezeBertModel", "SqueezeBertConfig", embedding_size=128, q_groups=4, k_groups=4,
                      v_groups=4, post_attention_groups=2, intermediate_groups=4, output_groups=4)


@model("convbert_b1")
def _():
    return text_model("ConvBertModel", "ConvBertConfig", embedding_size=128, head_ratio=2, conv_kernel_size=9,
                      num_groups=1)


@model("funnel_b1")
def _():
    return text_model("FunnelBaseModel", "FunnelConfig", vocab_size=1000, block_sizes=[1, 1, 1], d_model=128,
                      n_head=4, d_head=32, d_inner=256, num_decoder_layers=1,
                      num_hidden_layers=None, hidden_size=None, num_attention_heads=None, intermediate_size=None)


@model("xlmroberta_b1")
def _():
    return text_model("XLMRobertaModel", "XLMRobertaConfig", pad_token_id=1)


# ---------------- encoder-decoder ----------------
def seq2seq(cls_name, cfg_name, **cfg):
    import transformers  # noqa
    kw = dict(vocab_size=1000, d_model=128, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
              decoder_attention_heads=4, encoder_ffn_dim=256, decoder_ffn_dim=256, max_position_embeddings=256,
              pad_token_id=0, decoder_start_token_id=0)
    kw.update(cfg)
    m = hf(cls_name, cfg_name, **kw)
    names = ["input_ids", "attention_mask", "decoder_input_ids"]
    args = (ids(1, 64), torch.ones(1, 64, dtype=torch.int64), ids(1, 32))
    return First(m, names, 1, kw={"use_cache": False}), args, names


@model("marian_b1")
def _():
    return seq2seq("MarianModel", "MarianConfig")


@model("pegasus_b1")
def _():
    return seq2seq("PegasusModel", "PegasusConfig")


# ---------------- decoders ----------------
@model("opt_b1")
def _():
    return decoder("OPTModel", "OPTConfig", ffn_dim=256, word_embed_proj_dim=128)


@model("bloom_b1")
def _():
    return decoder("BloomModel", "BloomConfig", n_layer=2, n_head=4)


@model("gptneox_b1")
def _():
    return decoder("GPTNeoXModel", "GPTNeoXConfig", rotary_pct=0.25)


@model("phi_b1")
def _():
    return decoder("PhiModel", "PhiConfig", partial_rotary_factor=0.5)


@model("gemma_b1")
def _():
    return decoder("GemmaModel", "GemmaConfig", num_key_value_heads=1, head_dim=32)


@model("qwen2_b1")
def _():
    return decoder("Qwen2Model", "Qwen2Config", num_key_value_heads=2)


@model("mistral_b1")
def _():
    return decoder("MistralModel", "MistralConfig", num_key_value_heads=2, sliding_window=16)


@model("mpt_b1")
def _():
    return decoder("MptModel", "MptConfig", d_model=128, n_heads=4, n_layers=2, max_seq_len=256)


@model("codegen_b1")
def _():
    return decoder("CodeGenModel", "CodeGenConfig", n_embd=128, n_layer=2, n_head=4, rotary_dim=16, n_positions=256,
                   n_ctx=256)


# ---------------- vision transformers ----------------
VIT = dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256, image_size=224,
           patch_size=16)


def vis(cls_name, cfg_name, size=224, **cfg):
    kw = dict(VIT)
    kw.update(cfg)
    kw["image_size"] = size
    m = hf(cls_name, cfg_name, **kw)
    return First(m, ["pixel_values"]), (img(1, h=size, w=size),), ["pixel_values"]


@model("beit_b1")
def _():
    return vis("BeitModel", "BeitConfig", use_relative_position_bias=True, use_mean_pooling=True)


@model("deit_b1")
def _():
    return vis("DeiTModel", "DeiTConfig")


@model("dinov2_b1")
def _():
    return vis("Dinov2Model", "Dinov2Config", patch_size=14, layerscale_value=1.0)


@model("yolos_b1")
def _():
    kw = dict(VIT, image_size=[256, 256], num_detection_tokens=10)
    m = hf("YolosForObjectDetection", "YolosConfig", **kw)
    return First(m, ["pixel_values"], 2), (img(1, h=256, w=256),), ["pixel_values"]


@model("detr_b1")
def _():
    m = hf("DetrForObjectDetection", "DetrConfig", use_timm_backbone=False, use_pretrained_backbone=False,
           backbone_config={"model_type": "resnet", "depths": [1, 1, 1, 1], "hidden_sizes": [32, 64, 128, 256],
                            "embedding_size": 32, "out_features": ["stage4"]},
           backbone=None, d_model=128, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
           decoder_attention_heads=4, encoder_ffn_dim=256, decoder_ffn_dim=256, num_queries=20)
    return First(m, ["pixel_values"], 2), (torch.rand(1, 3, 256, 256),), ["pixel_values"]


@model("perceiver_b1")
def _():
    m = hf("PerceiverModel", "PerceiverConfig", num_latents=64, d_latents=128, d_model=128,
           num_blocks=1, num_self_attends_per_block=2, num_self_attention_heads=4, num_cross_attention_heads=4)
    return First(m, ["inputs"]), (torch.randn(1, 256, 128),), ["inputs"]


# ---------------- audio ----------------
AUD = dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256,
           conv_dim=(64, 64, 64, 64, 64, 64, 64), num_conv_pos_embeddings=32, num_conv_pos_embedding_groups=4)


@model("hubert_b1")
def _():
    m = hf("HubertModel", "HubertConfig", **AUD)
    return First(m, ["input_values"]), (torch.randn(1, 16000),), ["input_values"]


@model("sew_b1")
def _():
    m = hf("SEWModel", "SEWConfig", squeeze_factor=2, conv_stride=(5, 2, 2, 2, 2, 2, 2),
           conv_kernel=(10, 3, 3, 3, 3, 2, 2), **AUD)
    return First(m, ["input_values"]), (torch.randn(1, 16000),), ["input_values"]


# ---------------- dynamic axes ----------------
def dyn_text(base):
    m, args, names = MODELS[base]()
    axes = {n: {0: "batch", 1: "sequence"} for n in names}
    axes["out0"] = {0: "batch", 1: "sequence"}
    return m, args, names, {"dynamic_axes": axes, "output_names": ["out0"]}


@model("roberta_dyn")
def _():
    return dyn_text("roberta_b1")


@model("qwen2_dyn")
def _():
    return dyn_text("qwen2_b1")


@model("bloom_dyn")
def _():
    return dyn_text("bloom_b1")


@model("deit_dyn")
def _():
    m, args, names = MODELS["deit_b1"]()
    return m, args, names, {"dynamic_axes": {"pixel_values": {0: "batch"}, "out0": {0: "batch"}},
                            "output_names": ["out0"]}


def export(name):
    torch.manual_seed(SEED)
    t0 = time.time()
    r = MODELS[name]()
    m, args, names = r[:3]
    opts = r[3] if len(r) > 3 else {}
    m.eval()
    rand_bn(m)
    path = OUT / f"{name}.onnx"
    with torch.no_grad():
        ref = m(*args)
        torch.onnx.export(m, args, str(path), opset_version=17, input_names=names, dynamo=False,
                          do_constant_folding=True, **opts)
    ref = [ref] if isinstance(ref, torch.Tensor) else list(ref)
    import onnxruntime as ort
    s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = s.run(None, {n: a.numpy() for n, a in zip(names, args)})
    errs = []
    for g, t in zip(got, ref):
        t = t.numpy()
        if g.shape != t.shape:
            errs.append(f"shape {g.shape} vs {t.shape}")
        else:
            errs.append(float(np.abs(g - t).max() / max(np.abs(t).max(), 1e-12)) if t.size else 0.0)
    print(f"ok {name} {time.time() - t0:.1f}s inputs={[tuple(a.shape) for a in args]} "
          f"outputs={[tuple(g.shape) for g in got]} torch-vs-ort rel={errs}", flush=True)


def single_operator(name, node, inputs, outputs, initializers=()):
    """Writes OUT/<name>.onnx: one ONNX node."""
    import onnx
    from onnx import helper

    graph = helper.make_graph([node], name, inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(OUT / f"{name}.onnx"))
    print(f"ok {name}", flush=True)


def topk_long_vector():
    from onnx import TensorProto, helper

    n, k = 838656, 1000
    single_operator(
        "topk_838656_k1000",
        helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=-1, largest=1, sorted=1),
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n])],
        [helper.make_tensor_value_info("v", TensorProto.FLOAT, [k]),
         helper.make_tensor_value_info("i", TensorProto.INT64, [k])],
        [helper.make_tensor("k", TensorProto.INT64, [1], [k])],
    )


def stem_convolution():
    from onnx import TensorProto, helper, numpy_helper

    w = np.random.default_rng(0).standard_normal((32, 3, 7, 7)).astype(np.float32)
    single_operator(
        "conv7x7s2_c3_32_256",
        helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[7, 7], strides=[2, 2], pads=[3, 3, 3, 3]),
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 256, 256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 128, 128])],
        [numpy_helper.from_array(w, "w")],
    )


OPERATORS = {"topk_838656_k1000": topk_long_vector, "conv7x7s2_c3_32_256": stem_convolution}


if __name__ == "__main__":
    if sys.argv[1:] == ["--list"]:
        print("\n".join([*MODELS, *OPERATORS]))
        sys.exit(0)
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    OUT = Path(sys.argv[1])
    OUT.mkdir(parents=True, exist_ok=True)
    for n in sys.argv[2:]:
        if n in OPERATORS:
            OPERATORS[n]()
            continue
        if n not in MODELS:
            print(f"FAIL {n}: unknown name (see --list)", flush=True)
            continue
        try:
            export(n)
        except Exception as e:
            import traceback
            traceback.print_exc()
            print(f"FAIL {n}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", flush=True)
