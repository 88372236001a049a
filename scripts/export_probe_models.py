#!/usr/bin/env python3
"""Export the probe models: architectures outside the broad set (scripts/export_broad_models.py)
that exercise other layers: upsampling decoders, atrous segmentation, recurrent layers, 1-D audio
convolutions, sub-pixel convolution. Random seeded weights (torchvision `weights=None`), BatchNorm
statistics randomized, `torch.onnx.export` (TorchScript exporter, opset 17), static shapes, fp32.

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

Benchmark them against ONNX Runtime with
  .venv/bin/python scripts/bench_peers.py --model OUT_DIR/<file>.onnx ... --no-ops --markdown
"""
import sys
from pathlib import Path

import torch
import torch.nn as nn
import torchvision


def export(out: Path, name: str, model: nn.Module, args: tuple, input_names: list[str]) -> None:
    model.eval()
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.normal_(0, 0.1)
            m.running_var.uniform_(0.5, 1.5)
    with torch.no_grad():
        torch.onnx.export(model, args, str(out / f"{name}.onnx"), opset_version=17,
                          input_names=input_names, dynamo=False)
    print("ok", name, flush=True)


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
}


def main() -> int:
    if len(sys.argv) < 3 or any(n not in MODELS for n in sys.argv[2:]):
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    for name in sys.argv[2:]:
        torch.manual_seed(0)
        file, build, inputs = MODELS[name]
        if isinstance(inputs, dict):
            names, args = list(inputs), tuple(make() for make in inputs.values())
        else:
            names, args = ["x"], (torch.randn(*inputs),)
        export(out, file, build(), args, names)
    return 0


if __name__ == "__main__":
    sys.exit(main())
