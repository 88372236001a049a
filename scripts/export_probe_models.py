#!/usr/bin/env python3
"""Export the probe models: architectures outside the broad set (scripts/export_broad_models.py)
that exercise other layers: upsampling decoders, atrous segmentation, recurrent layers, 1-D audio
convolutions, sub-pixel convolution. Random seeded weights (torchvision `weights=None`), BatchNorm
statistics randomized, `torch.onnx.export` (TorchScript exporter, opset 17), static shapes (but
`decode_dyn`), fp32.

  .venv-models/bin/python scripts/export_probe_models.py OUT_DIR NAME...

NAME (file written as OUT_DIR/<file>.onnx):
  googlenet   googlenet_b1          torchvision GoogLeNet (Inception v1), 1x3x224x224
  mnasnet     mnasnet0_5_b4         torchvision MNASNet 0.5, 4x3x224x224
  deeplab     deeplabv3_mbv3_b1     DeepLabV3 with a MobileNetV3-Large backbone (atrous pyramid,
                                    bilinear Resize), 1x3x256x256
  unet        unetish_b2            a small U-Net-style decoder: GroupNorm, SiLU, ConvTranspose,
                                    nearest Resize, skip Concat, 2x3x96x96
  rnn         lstm_gru_b3           2-layer bidirectional LSTM then GRU then Linear, 3x50x40
  audio       audio1d_b2            wav2vec2-style Conv1d feature extractor + LayerNorm + Linear,
                                    2x1x16000
  espcn       espcn_b1              ESPCN super-resolution (PixelShuffle), 1x1x120x160
  vgg         vgg11_b1              torchvision VGG-11 with BatchNorm, 1x3x224x224
  effv2       efficientnet_v2_s_b1  torchvision EfficientNet-V2-S, 1x3x224x224
  decode      kv_decoder_b4         one decode step of a Llama-style decoder with a KV cache (4
                                    layers, hidden 512, 8 query / 2 KV heads, RMSNorm, RoPE,
                                    SwiGLU, vocabulary 8000): ids 4x1, past keys and values
                                    4x4x2x127x64 each; outputs logits and the grown cache
  decode_dyn  kv_decoder_dyn        the same decoder with dynamic axes (batch, new tokens, cache
                                    length) and position_ids: one export for a whole generation
                                    loop (scripts/bench_decode_loop.py)
  wav2vec2    wav2vec2_b1           transformers Wav2Vec2Model (GroupNorm conv feature extractor,
                                    grouped positional Conv1d with weight norm, 4 layers, hidden
                                    256, 4 heads), input_values 1x16000
  segformer   segformer_b1          transformers SegformerForSemanticSegmentation, MiT-b0 sizes
                                    (efficient attention with strided-conv key reduction, Mix-FFN
                                    depthwise conv, bilinear Resize decoder), 1x3x256x256
  mobilevit   mobilevit_xxs_b1      transformers MobileViTModel, xx-small sizes (unfold/fold patch
                                    reshapes around transformer blocks), 1x3x256x256
  deberta     debertav2_b1          transformers DebertaV2Model (disentangled relative-position
                                    attention with log buckets and gathers, 3 layers, hidden 256),
                                    input_ids and attention_mask 1x64
  bart        bart_b1               transformers BartModel encoder-decoder (2+2 layers, hidden 256,
                                    causal and cross attention), input_ids 1x64,
                                    decoder_input_ids 1x32
  clip        clip_vision_b1        transformers CLIPVisionModel (quick_gelu, pre-LayerNorm, class
                                    token, 4 layers, hidden 256, patch 16), 1x3x224x224
  yolo        yolo_ish_b1           a YOLOv8-style detector written here: Conv-BN-SiLU, C2f blocks
                                    (Split/Concat), SPPF (3 chained 5x5 stride-1 MaxPools), nearest
                                    Upsample FPN/PAN with Concat, decoupled heads, DFL softmax
                                    decode, 1x3x320x320
  albert      albert_b1             transformers AlbertModel (one layer's weights shared by 4
                                    layers, factorized 128-wide embedding, gelu_new), input_ids
                                    and attention_mask 1x128
  r3d         r3d_18_b1             torchvision r3d_18 video ResNet (Conv3d, BatchNorm3d,
                                    AdaptiveAvgPool3d), 1x3x8x64x64
  convnextv2  convnextv2_atto_b1    transformers ConvNextV2Model, atto sizes (7x7 depthwise conv,
                                    channels-last LayerNorm, GRN global response norm),
                                    1x3x224x224
  swin        swin_b1               transformers SwinModel, small sizes (shifted windows by Roll,
                                    window partition reshapes, relative-position bias gather,
                                    patch merging), 1x3x224x224
  gpt2        gpt2_b1               transformers GPT2Model (Conv1D projections, gelu_new, causal
                                    mask by Where, 4 layers, hidden 256), input_ids 1x128
  levit       levit_b1              transformers LevitModel, 128S-like sizes (Hardswish, Linear +
                                    BatchNorm1d, attention biases by gather, subsampling
                                    attention), 1x3x224x224
  conformer   w2v2_conformer_b1     transformers Wav2Vec2ConformerModel with rotary positions
                                    (GLU, depthwise Conv1d, BatchNorm1d, SiLU), input_values 1x16000
  stn         stn_b1                a spatial transformer written here: localization convs and
                                    Linear predict an affine theta, an affine grid (MatMul) and
                                    GridSample (bilinear), then a conv classifier and TopK, 1x3x96x96
  roi         roi_head_b1           a two-stage-detector head written here: conv features,
                                    RoiAlign over fixed boxes, box MLP, Softmax, ArgMax, 1x3x128x128
  retention   retention_b1          a RetNet-style block written here: decay mask from CumSum and
                                    Exp, Einsum attention, GroupNorm heads, 1x96x128
  t5          t5_b1                 transformers T5Model encoder-decoder (bucketed relative
                                    position bias with Log, RMS LayerNorm, ReLU FFN, 2+2 layers,
                                    d_model 256), input_ids 1x64, decoder_input_ids 1x32
  melspec     melspec_b1            a log-mel front end written here (reflect Pad, STFT with a Hann
                                    window, power, mel MatMul, Log) then two Conv1d+GELU and a
                                    Linear, 1x16000
  nms         nms_b1                detection post-processing written here: conv head, box decode,
                                    NonMaxSuppression over 3 classes (data-dependent output count),
                                    Gather of the kept boxes, 1x3x128x128
  dpt         dpt_b1                transformers DPTForDepthEstimation, small ViT (reassemble stages
                                    with ConvTranspose and strided Conv, residual fusion blocks,
                                    align_corners bilinear x2 Resize), 1x3x224x224
  falcon      falcon_b1             transformers FalconModel (multi-query attention: one key/value
                                    head for 4 query heads, rotary, parallel attention), 2 layers,
                                    hidden 128, input_ids 1x64
  fasterrcnn  fasterrcnn_mbv3_320_thr0_b1
                                    torchvision Faster R-CNN, MobileNetV3-Large 320 FPN, every box
                                    kept (score threshold 0): data-dependent NMS, TopK, RoiAlign
                                    and box-head products, 1x3x320x320 in [0, 1)
  maskrcnn    maskrcnn_r50_256_b1   torchvision Mask R-CNN, ResNet-50 FPN at 256x256 (mask pasting
                                    in a Loop whose carried value grows), 1x3x256x256 in [0, 1)

Benchmark them against ONNX Runtime with
  .venv/bin/python scripts/bench_peers.py --model OUT_DIR/<file>.onnx ... --no-ops --markdown
"""
import sys
from pathlib import Path

import torch
import torch.nn as nn
import torchvision


def export(out: Path, name: str, model: nn.Module, args: tuple, input_names: list[str],
           **options) -> None:
    """Writes OUT/<name>.onnx; `options` go to `torch.onnx.export` (output names, dynamic axes)."""
    model.eval()
    for m in model.modules():
        if isinstance(m, (nn.BatchNorm2d, nn.BatchNorm3d)):
            m.running_mean.normal_(0, 0.1)
            m.running_var.uniform_(0.5, 1.5)
    with torch.no_grad():
        torch.onnx.export(model, args, str(out / f"{name}.onnx"), opset_version=17,
                          input_names=input_names, dynamo=False, **options)
    print("ok", name, flush=True)


class Detector(nn.Module):
    """A torchvision detector on one image of a batch tensor: its boxes, scores, labels (and
    masks, for Mask R-CNN). Data-dependent shapes: NMS, TopK, RoiAlign over selected boxes."""

    def __init__(self, model: nn.Module, masks: bool = False) -> None:
        super().__init__()
        self.model, self.masks = model, masks

    def forward(self, x: torch.Tensor):
        out = self.model(list(x))[0]
        heads = ["boxes", "scores", "labels"] + (["masks"] if self.masks else [])
        return tuple(out[h] for h in heads)


class RmsNorm(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(1 + 0.1 * torch.randn(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


class DecoderBlock(nn.Module):
    def __init__(self, hidden: int, heads: int, kv_heads: int, ffn: int) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.dim = heads, kv_heads, hidden // heads
        self.n1, self.n2 = RmsNorm(hidden), RmsNorm(hidden)
        self.q = nn.Linear(hidden, heads * self.dim, bias=False)
        self.k = nn.Linear(hidden, kv_heads * self.dim, bias=False)
        self.v = nn.Linear(hidden, kv_heads * self.dim, bias=False)
        self.o = nn.Linear(heads * self.dim, hidden, bias=False)
        self.gate = nn.Linear(hidden, ffn, bias=False)
        self.up = nn.Linear(hidden, ffn, bias=False)
        self.down = nn.Linear(ffn, hidden, bias=False)

    @staticmethod
    def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos + rotated * sin

    def forward(self, x, cos, sin, past_k, past_v):
        b, t, _ = x.shape
        h = self.n1(x)
        q = self.q(h).view(b, t, self.heads, self.dim).transpose(1, 2)
        k = self.k(h).view(b, t, self.kv_heads, self.dim).transpose(1, 2)
        v = self.v(h).view(b, t, self.kv_heads, self.dim).transpose(1, 2)
        q, k = self.rope(q, cos, sin), self.rope(k, cos, sin)
        k = torch.cat([past_k, k], dim=2)
        v = torch.cat([past_v, v], dim=2)
        rep = self.heads // self.kv_heads
        kr = k.repeat_interleave(rep, dim=1)
        vr = v.repeat_interleave(rep, dim=1)
        att = torch.softmax(q @ kr.transpose(-1, -2) / self.dim ** 0.5, dim=-1)
        y = (att @ vr).transpose(1, 2).reshape(b, t, self.heads * self.dim)
        x = x + self.o(y)
        h = self.n2(x)
        x = x + self.down(nn.functional.silu(self.gate(h)) * self.up(h))
        return x, k, v


class KvDecoder(nn.Module):
    """One decode step: the token at position `past` attends to the cached keys and values."""

    def __init__(self, layers=4, hidden=512, heads=8, kv_heads=2, ffn=1408, vocab=8000, past=127):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.blocks = nn.ModuleList(DecoderBlock(hidden, heads, kv_heads, ffn) for _ in range(layers))
        self.norm = RmsNorm(hidden)
        self.head = nn.Linear(hidden, vocab, bias=False)
        dim = hidden // heads
        freqs = 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim))
        angles = past * freqs
        self.register_buffer("cos", torch.cat([angles.cos(), angles.cos()]))
        self.register_buffer("sin", torch.cat([angles.sin(), angles.sin()]))

    def forward(self, ids, past_keys, past_values):
        x = self.embed(ids)
        keys, values = [], []
        for i, block in enumerate(self.blocks):
            x, k, v = block(x, self.cos, self.sin, past_keys[i], past_values[i])
            keys.append(k)
            values.append(v)
        return self.head(self.norm(x)), torch.stack(keys), torch.stack(values)


class DynKvDecoder(KvDecoder):
    """`KvDecoder` for any batch, new-token count and cache length: RoPE angles gathered from a
    table by `position_ids`, so one export serves every step of a generation loop."""

    def __init__(self, hidden=512, heads=8, max_pos=2048, **sizes):
        super().__init__(hidden=hidden, heads=heads, **sizes)
        dim = hidden // heads
        freqs = 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim))
        angles = torch.arange(max_pos).float()[:, None] * freqs[None]
        self.register_buffer("cos", torch.cat([angles.cos(), angles.cos()], -1))
        self.register_buffer("sin", torch.cat([angles.sin(), angles.sin()], -1))

    def forward(self, ids, position_ids, past_keys, past_values):
        x = self.embed(ids)
        cos, sin = self.cos[position_ids][:, None], self.sin[position_ids][:, None]
        keys, values = [], []
        for i, block in enumerate(self.blocks):
            x, k, v = block(x, cos, sin, past_keys[i], past_values[i])
            keys.append(k)
            values.append(v)
        return self.head(self.norm(x)), torch.stack(keys), torch.stack(values)


DYN_DECODER_AXES = {
    "ids": {0: "batch", 1: "seq"}, "position_ids": {0: "batch", 1: "seq"},
    "past_keys": {1: "batch", 3: "past"}, "past_values": {1: "batch", 3: "past"},
    "logits": {0: "batch", 1: "seq"}, "keys": {1: "batch", 3: "total"},
    "values": {1: "batch", 3: "total"},
}


class UNetish(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.d1 = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.GroupNorm(8, 32), nn.SiLU())
        self.d2 = nn.Sequential(nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.GroupNorm(8, 64), nn.SiLU())
        self.mid = nn.Sequential(nn.Conv2d(64, 64, 3, padding=1), nn.GroupNorm(8, 64), nn.SiLU())
        self.up = nn.ConvTranspose2d(64, 32, 4, stride=2, padding=1)
        self.out = nn.Conv2d(64, 3, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.d1(x)
        b = self.d2(a)
        b = self.mid(b) + b
        u = self.up(b)
        u2 = nn.functional.interpolate(b, scale_factor=2, mode="nearest")[:, :32]
        return self.out(torch.cat([a, u + u2], 1))


class Recurrent(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(40, 96, num_layers=2, batch_first=True, bidirectional=True)
        self.gru = nn.GRU(192, 64, batch_first=True)
        self.fc = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, _ = self.lstm(x)
        y, _ = self.gru(y)
        return self.fc(y)


class Audio1d(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        c = 1
        for o, k, s in [(64, 10, 5), (64, 3, 2), (64, 3, 2), (64, 3, 2), (64, 2, 2)]:
            layers += [nn.Conv1d(c, o, k, s, bias=False), nn.GELU()]
            c = o
        self.features = nn.Sequential(*layers)
        self.norm = nn.LayerNorm(64)
        self.proj = nn.Linear(64, 128)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(self.norm(self.features(x).transpose(1, 2)))


class Espcn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(1, 64, 5, padding=2)
        self.c2 = nn.Conv2d(64, 32, 3, padding=1)
        self.c3 = nn.Conv2d(32, 9, 3, padding=1)
        self.shuffle = nn.PixelShuffle(3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.shuffle(self.c3(torch.tanh(self.c2(torch.tanh(self.c1(x))))))


class HfWrap(nn.Module):
    """Calls a transformers model with keyword inputs (in the order of the exported inputs) and
    returns its first output (`last_hidden_state` or `logits`)."""

    def __init__(self, model: nn.Module, keys: list[str]) -> None:
        super().__init__()
        self.model, self.keys = model, keys

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        return self.model(**dict(zip(self.keys, args)), return_dict=False)[0]


def hf(model_class: str, config_class: str, keys: list[str], **config) -> nn.Module:
    import transformers
    cfg = getattr(transformers, config_class)(**config)
    cfg._attn_implementation = "eager"
    return HfWrap(getattr(transformers, model_class)(cfg), keys)


def conv_bn_silu(c_in: int, c_out: int, k: int = 1, s: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(c_in, c_out, k, s, k // 2, bias=False), nn.BatchNorm2d(c_out), nn.SiLU())


class YoloBottleneck(nn.Module):
    def __init__(self, c: int, shortcut: bool) -> None:
        super().__init__()
        self.a, self.b, self.shortcut = conv_bn_silu(c, c, 3), conv_bn_silu(c, c, 3), shortcut

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.b(self.a(x))
        return x + y if self.shortcut else y


class C2f(nn.Module):
    """Split the 1x1 projection in two halves, run bottlenecks on the second, concat every stage."""

    def __init__(self, c_in: int, c_out: int, n: int, shortcut: bool = True) -> None:
        super().__init__()
        self.half = c_out // 2
        self.pre = conv_bn_silu(c_in, 2 * self.half)
        self.blocks = nn.ModuleList(YoloBottleneck(self.half, shortcut) for _ in range(n))
        self.post = conv_bn_silu((2 + n) * self.half, c_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        parts = list(self.pre(x).split(self.half, dim=1))
        for block in self.blocks:
            parts.append(block(parts[-1]))
        return self.post(torch.cat(parts, 1))


class Sppf(nn.Module):
    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__()
        self.pre = conv_bn_silu(c_in, c_in // 2)
        self.pool = nn.MaxPool2d(5, 1, 2)
        self.post = conv_bn_silu(c_in * 2, c_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.pre(x)
        b = self.pool(a)
        c = self.pool(b)
        return self.post(torch.cat([a, b, c, self.pool(c)], 1))


class YoloIsh(nn.Module):
    def __init__(self, classes: int = 80, bins: int = 16) -> None:
        super().__init__()
        self.classes, self.bins = classes, bins
        self.stem = nn.Sequential(conv_bn_silu(3, 16, 3, 2), conv_bn_silu(16, 32, 3, 2), C2f(32, 32, 1))
        self.s3 = nn.Sequential(conv_bn_silu(32, 64, 3, 2), C2f(64, 64, 2))
        self.s4 = nn.Sequential(conv_bn_silu(64, 128, 3, 2), C2f(128, 128, 2))
        self.s5 = nn.Sequential(conv_bn_silu(128, 256, 3, 2), C2f(256, 256, 1), Sppf(256, 256))
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.top4 = C2f(256 + 128, 128, 1, False)
        self.top3 = C2f(128 + 64, 64, 1, False)
        self.down3 = conv_bn_silu(64, 64, 3, 2)
        self.bot4 = C2f(64 + 128, 128, 1, False)
        self.down4 = conv_bn_silu(128, 128, 3, 2)
        self.bot5 = C2f(128 + 256, 256, 1, False)
        self.box = nn.ModuleList(nn.Sequential(conv_bn_silu(c, 64, 3), conv_bn_silu(64, 64, 3),
                                               nn.Conv2d(64, 4 * bins, 1)) for c in (64, 128, 256))
        self.cls = nn.ModuleList(nn.Sequential(conv_bn_silu(c, 80, 3), conv_bn_silu(80, 80, 3),
                                               nn.Conv2d(80, classes, 1)) for c in (64, 128, 256))
        self.register_buffer("bin_values", torch.arange(bins, dtype=torch.float32))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p3 = self.s3(self.stem(x))
        p4 = self.s4(p3)
        p5 = self.s5(p4)
        t4 = self.top4(torch.cat([self.up(p5), p4], 1))
        n3 = self.top3(torch.cat([self.up(t4), p3], 1))
        n4 = self.bot4(torch.cat([self.down3(n3), t4], 1))
        n5 = self.bot5(torch.cat([self.down4(n4), p5], 1))
        levels = []
        for i, f in enumerate((n3, n4, n5)):
            levels.append(torch.cat([self.box[i](f), self.cls[i](f)], 1).flatten(2))
        out = torch.cat(levels, 2)
        box, cls = out.split([4 * self.bins, self.classes], 1)
        n = box.shape[-1]
        dist = box.view(1, 4, self.bins, n).transpose(2, 3).softmax(-1) @ self.bin_values
        return torch.cat([dist, cls.sigmoid()], 1)



class Stn(nn.Module):
    def __init__(self, size: int = 96) -> None:
        super().__init__()
        self.loc = nn.Sequential(nn.Conv2d(3, 16, 5, 2, 2), nn.ReLU(), nn.MaxPool2d(2),
                                 nn.Conv2d(16, 32, 3, 2, 1), nn.ReLU(), nn.AdaptiveAvgPool2d(4), nn.Flatten(),
                                 nn.Linear(512, 64), nn.ReLU(), nn.Linear(64, 6))
        with torch.no_grad():
            self.loc[-1].weight.mul_(0.1)
            self.loc[-1].bias.copy_(torch.tensor([0.9, 0.1, 0.05, -0.1, 0.8, -0.05]))
        self.cls = nn.Sequential(nn.Conv2d(3, 32, 3, 2, 1), nn.ReLU(), nn.Conv2d(32, 64, 3, 2, 1), nn.ReLU(),
                                 nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 100))
        # the affine grid's base points (x, y, 1) at pixel centres of a 96x96 image (opset 17 has
        # no AffineGrid: the exporter refuses `affine_grid`, so it is a MatMul here)
        lin = (torch.arange(size, dtype=torch.float32) * 2 + 1) / size - 1
        ys, xs = torch.meshgrid(lin, lin, indexing="ij")
        self.register_buffer("base", torch.stack([xs, ys, torch.ones_like(xs)], -1).view(1, size * size, 3))

    def forward(self, x: torch.Tensor):
        theta = self.loc(x).view(-1, 2, 3)
        grid = (self.base @ theta.transpose(1, 2)).view(x.shape[0], x.shape[2], x.shape[3], 2)
        warped = nn.functional.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
        logits = self.cls(warped)
        values, indices = logits.softmax(-1).topk(5, dim=-1)
        return warped, values, indices


class RoiHead(nn.Module):
    def __init__(self, boxes: int = 32, classes: int = 21) -> None:
        super().__init__()
        self.backbone = nn.Sequential(conv_bn_silu(3, 32, 3, 2), conv_bn_silu(32, 64, 3, 2),
                                      conv_bn_silu(64, 128, 3, 2))
        g = torch.Generator().manual_seed(1)
        xy = torch.rand(boxes, 2, generator=g) * 96
        wh = 8 + torch.rand(boxes, 2, generator=g) * 40
        self.register_buffer("boxes", torch.cat([torch.zeros(boxes, 1), xy, (xy + wh).clamp(max=127)], 1))
        self.mlp = nn.Sequential(nn.Flatten(), nn.Linear(128 * 7 * 7, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU())
        self.cls = nn.Linear(256, classes)
        self.reg = nn.Linear(256, 4 * classes)

    def forward(self, x: torch.Tensor):
        import torchvision.ops
        f = self.backbone(x)
        pooled = torchvision.ops.roi_align(f, self.boxes, (7, 7), spatial_scale=1 / 8, sampling_ratio=2,
                                           aligned=False)
        h = self.mlp(pooled)
        scores = self.cls(h).softmax(-1)
        return scores, scores.argmax(-1), self.reg(h)


class Retention(nn.Module):
    """Multi-scale retention: per head, a causal decay gamma^(n-m) built from CumSum and Exp."""

    def __init__(self, dim: int = 128, heads: int = 4, seq: int = 96) -> None:
        super().__init__()
        self.heads, self.dim, self.seq = heads, dim // heads, seq
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.gate = nn.Linear(dim, dim, bias=False)
        self.out = nn.Linear(dim, dim, bias=False)
        self.norm = nn.GroupNorm(heads, dim)
        self.ffn = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))
        self.register_buffer("log_gamma", torch.log(1 - 2.0 ** (-5 - torch.arange(heads, dtype=torch.float32))))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, self.dim).permute(2, 0, 3, 1, 4)
        pos = torch.cumsum(torch.ones(n, device=x.device), 0) - 1
        diff = pos[:, None] - pos[None, :]
        decay = torch.exp(self.log_gamma[:, None, None] * diff.clamp(min=0))
        decay = decay * (diff >= 0).float()
        decay = decay / decay.sum(-1, keepdim=True).sqrt()
        scores = torch.einsum("bhnd,bhmd->bhnm", q, k) * self.dim ** -0.5 * decay
        y = torch.einsum("bhnm,bhmd->bhnd", scores, v).transpose(1, 2).reshape(b * n, c)
        y = self.norm(y).view(b, n, c) * nn.functional.silu(self.gate(x))
        x = x + self.out(y)
        return x + self.ffn(x)


class MelSpec(nn.Module):
    def __init__(self, n_fft: int = 400, hop: int = 160, mels: int = 64) -> None:
        super().__init__()
        self.n_fft, self.hop = n_fft, hop
        self.register_buffer("window", torch.hann_window(n_fft))
        # a triangular filter bank on a linear frequency axis (not the mel scale: any fixed
        # non-negative matrix exercises the same operators)
        bins = n_fft // 2 + 1
        centers = torch.linspace(0, bins - 1, mels + 2)
        f = torch.arange(bins, dtype=torch.float32)[None, :]
        lo, mid, hi = centers[:-2, None], centers[1:-1, None], centers[2:, None]
        self.register_buffer("fbank", torch.clamp(torch.minimum((f - lo) / (mid - lo), (hi - f) / (hi - mid)), min=0))
        self.conv1 = nn.Conv1d(mels, 128, 3, padding=1)
        self.conv2 = nn.Conv1d(128, 128, 3, stride=2, padding=1)
        self.proj = nn.Linear(128, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        spec = torch.stft(x, self.n_fft, self.hop, window=self.window, center=True, pad_mode="reflect",
                          return_complex=False)
        power = spec.pow(2).sum(-1)
        logmel = torch.log(torch.clamp(self.fbank @ power, min=1e-10))
        h = nn.functional.gelu(self.conv2(nn.functional.gelu(self.conv1(logmel))))
        return self.proj(h.transpose(1, 2))


class NmsHead(nn.Module):
    def __init__(self, classes: int = 3) -> None:
        super().__init__()
        self.body = nn.Sequential(conv_bn_silu(3, 32, 3, 2), conv_bn_silu(32, 64, 3, 2), conv_bn_silu(64, 64, 3, 2))
        self.out = nn.Conv2d(64, 4 + classes, 1)
        ys, xs = torch.meshgrid(torch.arange(16.0), torch.arange(16.0), indexing="ij")
        self.register_buffer("centers", torch.stack([xs, ys], -1).view(1, 256, 2) * 8 + 4)

    def forward(self, x: torch.Tensor):
        import torchvision.ops
        p = self.out(self.body(x)).flatten(2).transpose(1, 2)  # 1 x 256 x (4 + classes)
        xy = self.centers + 4 * torch.tanh(p[..., :2])
        wh = 16 * torch.exp(torch.clamp(p[..., 2:4], max=2.0))
        boxes = torch.cat([xy - wh / 2, xy + wh / 2], -1)[0]
        scores = p[0, :, 4:].sigmoid()
        best, label = scores.max(-1)
        keep = torchvision.ops.batched_nms(boxes, best, label, 0.5)
        return boxes[keep], best[keep], label[keep]

MODELS = {
    "googlenet": ("googlenet_b1", lambda: torchvision.models.googlenet(
        weights=None, aux_logits=False, init_weights=True), (1, 3, 224, 224)),
    "mnasnet": ("mnasnet0_5_b4", lambda: torchvision.models.mnasnet0_5(weights=None), (4, 3, 224, 224)),
    "deeplab": ("deeplabv3_mbv3_b1", lambda: torchvision.models.segmentation.deeplabv3_mobilenet_v3_large(
        weights=None, weights_backbone=None, aux_loss=False), (1, 3, 256, 256)),
    "unet": ("unetish_b2", UNetish, (2, 3, 96, 96)),
    "rnn": ("lstm_gru_b3", Recurrent, (3, 50, 40)),
    "audio": ("audio1d_b2", Audio1d, (2, 1, 16000)),
    "espcn": ("espcn_b1", Espcn, (1, 1, 120, 160)),
    "vgg": ("vgg11_b1", lambda: torchvision.models.vgg11_bn(weights=None), (1, 3, 224, 224)),
    "effv2": ("efficientnet_v2_s_b1", lambda: torchvision.models.efficientnet_v2_s(weights=None), (1, 3, 224, 224)),
    "decode": ("kv_decoder_b4", KvDecoder, {
        "ids": lambda: torch.randint(0, 8000, (4, 1)),
        "past_keys": lambda: torch.randn(4, 4, 2, 127, 64),
        "past_values": lambda: torch.randn(4, 4, 2, 127, 64),
    }),
    "decode_dyn": ("kv_decoder_dyn", DynKvDecoder, {
        "ids": lambda: torch.randint(0, 8000, (1, 1)),
        "position_ids": lambda: torch.full((1, 1), 16),
        "past_keys": lambda: torch.randn(4, 1, 2, 16, 64),
        "past_values": lambda: torch.randn(4, 1, 2, 16, 64),
    }, {"output_names": ["logits", "keys", "values"], "dynamic_axes": DYN_DECODER_AXES}),
    "wav2vec2": ("wav2vec2_b1", lambda: hf(
        "Wav2Vec2Model", "Wav2Vec2Config", ["input_values"], hidden_size=256, num_hidden_layers=4,
        num_attention_heads=4, intermediate_size=1024, conv_dim=(128,) * 7, feat_extract_norm="group",
        num_conv_pos_embeddings=64, num_conv_pos_embedding_groups=16, mask_time_prob=0.0),
        {"input_values": lambda: torch.randn(1, 16000)}),
    "segformer": ("segformer_b1", lambda: hf(
        "SegformerForSemanticSegmentation", "SegformerConfig", ["pixel_values"], depths=[2, 2, 2, 2],
        hidden_sizes=[32, 64, 160, 256], num_attention_heads=[1, 2, 5, 8], sr_ratios=[8, 4, 2, 1],
        decoder_hidden_size=128, num_labels=19), {"pixel_values": lambda: torch.randn(1, 3, 256, 256)}),
    "mobilevit": ("mobilevit_xxs_b1", lambda: hf(
        "MobileViTModel", "MobileViTConfig", ["pixel_values"], image_size=256, hidden_sizes=[64, 80, 96],
        neck_hidden_sizes=[16, 16, 24, 48, 64, 80, 320], expand_ratio=2.0),
        {"pixel_values": lambda: torch.randn(1, 3, 256, 256)}),
    "deberta": ("debertav2_b1", lambda: hf(
        "DebertaV2Model", "DebertaV2Config", ["input_ids", "attention_mask"], vocab_size=1000,
        hidden_size=256, num_hidden_layers=3, num_attention_heads=4, intermediate_size=512,
        max_position_embeddings=128, relative_attention=True, position_buckets=32,
        pos_att_type=["p2c", "c2p"], norm_rel_ebd="layer_norm", share_att_key=True,
        position_biased_input=False), {
        "input_ids": lambda: torch.randint(0, 1000, (1, 64)),
        "attention_mask": lambda: torch.ones(1, 64, dtype=torch.int64),
    }),
    "bart": ("bart_b1", lambda: hf(
        "BartModel", "BartConfig", ["input_ids", "decoder_input_ids"], vocab_size=1000, d_model=256,
        encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
        encoder_ffn_dim=512, decoder_ffn_dim=512, max_position_embeddings=128, use_cache=False), {
        "input_ids": lambda: torch.randint(0, 1000, (1, 64)),
        "decoder_input_ids": lambda: torch.randint(0, 1000, (1, 32)),
    }),
    "clip": ("clip_vision_b1", lambda: hf(
        "CLIPVisionModel", "CLIPVisionConfig", ["pixel_values"], hidden_size=256, intermediate_size=1024,
        num_hidden_layers=4, num_attention_heads=4, image_size=224, patch_size=16,
        hidden_act="quick_gelu"), {"pixel_values": lambda: torch.randn(1, 3, 224, 224)}),
    "yolo": ("yolo_ish_b1", YoloIsh, (1, 3, 320, 320)),
    "albert": ("albert_b1", lambda: hf(
        "AlbertModel", "AlbertConfig", ["input_ids", "attention_mask"], vocab_size=1000,
        embedding_size=128, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
        intermediate_size=1024, max_position_embeddings=128), {
        "input_ids": lambda: torch.randint(0, 1000, (1, 128)),
        "attention_mask": lambda: torch.ones(1, 128, dtype=torch.int64),
    }),
    "r3d": ("r3d_18_b1", lambda: torchvision.models.video.r3d_18(weights=None), (1, 3, 8, 64, 64)),
    "convnextv2": ("convnextv2_atto_b1", lambda: hf(
        "ConvNextV2Model", "ConvNextV2Config", ["pixel_values"], depths=[2, 2, 6, 2],
        hidden_sizes=[40, 80, 160, 320]), {"pixel_values": lambda: torch.randn(1, 3, 224, 224)}),
    "swin": ("swin_b1", lambda: hf(
        "SwinModel", "SwinConfig", ["pixel_values"], image_size=224, patch_size=4, embed_dim=48,
        depths=[2, 2, 2], num_heads=[3, 6, 12], window_size=7),
        {"pixel_values": lambda: torch.randn(1, 3, 224, 224)}),
    "gpt2": ("gpt2_b1", lambda: hf(
        "GPT2Model", "GPT2Config", ["input_ids"], vocab_size=1000, n_positions=128, n_embd=256,
        n_layer=4, n_head=4, use_cache=False), {"input_ids": lambda: torch.randint(0, 1000, (1, 128))}),
    "levit": ("levit_b1", lambda: hf(
        "LevitModel", "LevitConfig", ["pixel_values"], image_size=224, hidden_sizes=[128, 256, 384],
        num_attention_heads=[4, 6, 8], depths=[2, 3, 4], key_dim=[16, 16, 16]),
        {"pixel_values": lambda: torch.randn(1, 3, 224, 224)}),
    "conformer": ("w2v2_conformer_b1", lambda: hf(
        "Wav2Vec2ConformerModel", "Wav2Vec2ConformerConfig", ["input_values"], hidden_size=256,
        num_hidden_layers=3, num_attention_heads=4, intermediate_size=1024, conv_dim=(128,) * 7,
        feat_extract_norm="layer", position_embeddings_type="rotary", conv_depthwise_kernel_size=15,
        mask_time_prob=0.0), {"input_values": lambda: torch.randn(1, 16000)}),
    "stn": ("stn_b1", Stn, (1, 3, 96, 96)),
    "roi": ("roi_head_b1", RoiHead, (1, 3, 128, 128)),
    "retention": ("retention_b1", Retention, (1, 96, 128)),
    "t5": ("t5_b1", lambda: hf(
        "T5Model", "T5Config", ["input_ids", "decoder_input_ids"], vocab_size=1000, d_model=256, d_kv=64,
        d_ff=512, num_layers=2, num_decoder_layers=2, num_heads=4, relative_attention_num_buckets=32,
        use_cache=False), {
        "input_ids": lambda: torch.randint(0, 1000, (1, 64)),
        "decoder_input_ids": lambda: torch.randint(0, 1000, (1, 32)),
    }),
    "melspec": ("melspec_b1", MelSpec, (1, 16000)),
    "nms": ("nms_b1", NmsHead, (1, 3, 128, 128)),
    "falcon": ("falcon_b1", lambda: hf(
        "FalconModel", "FalconConfig", ["input_ids"], vocab_size=1000, hidden_size=128,
        num_hidden_layers=2, num_attention_heads=4, multi_query=True, parallel_attn=True,
        alibi=False, use_cache=False), {"input_ids": lambda: torch.randint(0, 1000, (1, 64))}),
    # Every box kept (score threshold 0) so random weights still give detections to compare.
    "fasterrcnn": ("fasterrcnn_mbv3_320_thr0_b1", lambda: Detector(
        torchvision.models.detection.fasterrcnn_mobilenet_v3_large_320_fpn(
            weights=None, weights_backbone=None, box_score_thresh=0.0)),
        {"image": lambda: torch.rand(1, 3, 320, 320)},
        {"output_names": ["boxes", "scores", "labels"]}),
    "maskrcnn": ("maskrcnn_r50_256_b1", lambda: Detector(
        torchvision.models.detection.maskrcnn_resnet50_fpn(
            weights=None, weights_backbone=None, min_size=256, max_size=256,
            rpn_pre_nms_top_n_test=200, rpn_post_nms_top_n_test=100, box_detections_per_img=20),
        masks=True), {"image": lambda: torch.rand(1, 3, 256, 256)},
        {"output_names": ["boxes", "scores", "labels", "masks"]}),
    "dpt": ("dpt_b1", lambda: hf(
        "DPTForDepthEstimation", "DPTConfig", ["pixel_values"], hidden_size=192, num_hidden_layers=4,
        num_attention_heads=3, intermediate_size=768, image_size=224, patch_size=16,
        backbone_out_indices=[0, 1, 2, 3], neck_hidden_sizes=[48, 96, 192, 384], fusion_hidden_size=64,
        head_in_index=-1), {"pixel_values": lambda: torch.randn(1, 3, 224, 224)}),
}


def main() -> int:
    if len(sys.argv) < 3 or any(n not in MODELS for n in sys.argv[2:]):
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    for name in sys.argv[2:]:
        torch.manual_seed(0)
        file, build, inputs, *options = MODELS[name]
        if isinstance(inputs, dict):
            names, args = list(inputs), tuple(make() for make in inputs.values())
        else:
            names, args = ["x"], (torch.randn(*inputs),)
        export(out, file, build(), args, names, **(options[0] if options else {}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
