"""`bench --suite modern`: today's edge networks, defined compactly in PyTorch (torchvision / timm /
ultralytics / Hugging Face layouts, written out here so neither timm nor torchvision is needed),
random seeded weights, exported with ``torch.onnx.export(..., dynamo=False)`` at opset 17 the way
users export them, cached as ONNX files (never committed).

Each network follows its published configuration (channels, depths, kernel sizes, expansion
ratios, activations, squeeze-excitation, normalisation); where the original has options the
builder says which one it takes. Weights: torch's default initialisation under
``torch.manual_seed(0)``; BatchNorm statistics and affine parameters are randomised (fresh ones
are the identity, which would let a BN-folding bug pass), LayerNorm affine parameters too, and
layer-scale parameters are drawn around 1 (timm's 1e-6 would switch the residual branches off).

Needs torch (the suite's export step only: the cached ONNX files run without it).
"""

from __future__ import annotations

import contextlib
import io
import logging
import math
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812

SEED = 0
OPSET = 17
# bump when a definition changes: the cache key holds it, so old exports are not reused
DEFS_VERSION = 1


def cache_dir(override: str | Path | None = None) -> Path:
    """Where exported networks are kept: --cache-dir, $ONNX2EDGE_CACHE/modern, or
    ~/.cache/onnx2edge/modern."""
    if override:
        return Path(override)
    base = os.environ.get("ONNX2EDGE_CACHE") or Path.home() / ".cache" / "onnx2edge"
    return Path(base) / "modern"


def _div(v: float, d: int = 8) -> int:
    """torchvision's _make_divisible: round channels to a multiple of d, never below 90 %."""
    n = max(d, int(v + d / 2) // d * d)
    return n + d if n < 0.9 * v else n


def _cbn(
    cin: int,
    cout: int,
    k: int,
    s: int = 1,
    g: int = 1,
    act: type[nn.Module] | None = nn.ReLU,
    d: int = 1,
) -> nn.Sequential:
    """Conv (no bias) + BatchNorm + activation, 'same' padding."""
    layers: list[nn.Module] = [
        nn.Conv2d(cin, cout, k, s, (k - 1) // 2 * d, dilation=d, groups=g, bias=False),
        nn.BatchNorm2d(cout),
    ]
    if act is not None:
        layers.append(act())
    return nn.Sequential(*layers)


class SE(nn.Module):
    """Squeeze-and-excitation: global pool, 1x1 conv, act, 1x1 conv, gate, multiply."""

    def __init__(self, ch: int, sq: int, act: type[nn.Module], gate: type[nn.Module]) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Conv2d(ch, sq, 1), nn.Conv2d(sq, ch, 1)
        self.act, self.gate = act(), gate()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gate(self.fc2(self.act(self.fc1(F.adaptive_avg_pool2d(x, 1)))))


# ---- MobileNetV3 (Howard et al. 2019; torchvision's configuration) and LR-ASPP --------------
_RE, _HS = nn.ReLU, nn.Hardswish
# in, kernel, expanded, out, SE, activation, stride
_V3_LARGE = [
    (16, 3, 16, 16, 0, _RE, 1), (16, 3, 64, 24, 0, _RE, 2), (24, 3, 72, 24, 0, _RE, 1),
    (24, 5, 72, 40, 1, _RE, 2), (40, 5, 120, 40, 1, _RE, 1), (40, 5, 120, 40, 1, _RE, 1),
    (40, 3, 240, 80, 0, _HS, 2), (80, 3, 200, 80, 0, _HS, 1), (80, 3, 184, 80, 0, _HS, 1),
    (80, 3, 184, 80, 0, _HS, 1), (80, 3, 480, 112, 1, _HS, 1), (112, 3, 672, 112, 1, _HS, 1),
    (112, 5, 672, 160, 1, _HS, 2), (160, 5, 960, 160, 1, _HS, 1), (160, 5, 960, 160, 1, _HS, 1),
]  # fmt: skip
_V3_SMALL = [
    (16, 3, 16, 16, 1, _RE, 2), (16, 3, 72, 24, 0, _RE, 2), (24, 3, 88, 24, 0, _RE, 1),
    (24, 5, 96, 40, 1, _HS, 2), (40, 5, 240, 40, 1, _HS, 1), (40, 5, 240, 40, 1, _HS, 1),
    (40, 5, 120, 48, 1, _HS, 1), (48, 5, 144, 48, 1, _HS, 1), (48, 5, 288, 96, 1, _HS, 2),
    (96, 5, 576, 96, 1, _HS, 1), (96, 5, 576, 96, 1, _HS, 1),
]  # fmt: skip


class V3Block(nn.Module):
    def __init__(self, cin, k, exp, cout, se, act, stride, dil=1) -> None:  # noqa: ANN001
        super().__init__()
        layers: list[nn.Module] = []
        if exp != cin:
            layers.append(_cbn(cin, exp, 1, act=act))
        layers.append(_cbn(exp, exp, k, 1 if dil > 1 else stride, exp, act, dil))
        if se:
            layers.append(SE(exp, _div(exp // 4), nn.ReLU, nn.Hardsigmoid))
        layers.append(_cbn(exp, cout, 1, act=None))
        self.body = nn.Sequential(*layers)
        self.res = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.body(x)
        return x + y if self.res else y


def _v3_features(cfg: list, dilated: bool = False) -> nn.Sequential:
    """Stem + blocks + last 1x1 conv (6x the last block's width). dilated: the last stride-2
    stage runs at stride 1 with dilation 2 (torchvision's LR-ASPP backbone)."""
    layers: list[nn.Module] = [_cbn(3, 16, 3, 2, act=_HS)]
    for i, c in enumerate(cfg):
        dil = 2 if dilated and i >= len(cfg) - 3 else 1
        layers.append(V3Block(*c, dil=dil))
    layers.append(_cbn(cfg[-1][3], 6 * cfg[-1][3], 1, act=_HS))
    return nn.Sequential(*layers)


class MobileNetV3(nn.Module):
    def __init__(self, cfg: list, hidden: int) -> None:
        super().__init__()
        self.features = _v3_features(cfg)
        last = 6 * cfg[-1][3]
        self.head = nn.Sequential(
            nn.Flatten(), nn.Linear(last, hidden), nn.Hardswish(), nn.Linear(hidden, 1000)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(F.adaptive_avg_pool2d(self.features(x), 1))


class LRASPP(nn.Module):
    """torchvision's lraspp_mobilenet_v3_large: dilated backbone, low-level features at stride
    8 (40 channels), high at stride 16 (960); 21 classes; output at the input size."""

    def __init__(self, classes: int = 21) -> None:
        super().__init__()
        self.features = _v3_features(_V3_LARGE, dilated=True)
        self.low_at = 7  # stem + 6 blocks: the last 40-channel block (stride 8)
        self.cbr = _cbn(960, 128, 1)
        self.scale = nn.Conv2d(960, 128, 1)
        self.low_cls, self.high_cls = nn.Conv2d(40, classes, 1), nn.Conv2d(128, classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        size = x.shape[-2:]
        low = self.features[: self.low_at](x)
        high = self.features[self.low_at :](low)
        h = self.cbr(high) * torch.sigmoid(self.scale(F.adaptive_avg_pool2d(high, 1)))
        h = F.interpolate(h, size=low.shape[-2:], mode="bilinear", align_corners=False)
        y = self.low_cls(low) + self.high_cls(h)
        return F.interpolate(y, size=size, mode="bilinear", align_corners=False)


# ---- EfficientNet (Tan & Le 2019; torchvision's B0 / B1) -------------------------------------
# expand, kernel, stride, in, out, layers (B0)
_EFF = [(1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2), (6, 3, 2, 40, 80, 3),
        (6, 5, 1, 80, 112, 3), (6, 5, 2, 112, 192, 4), (6, 3, 1, 192, 320, 1)]  # fmt: skip


class MBConv(nn.Module):
    def __init__(self, cin: int, cout: int, expand: int, k: int, stride: int) -> None:
        super().__init__()
        exp = cin * expand
        layers: list[nn.Module] = []
        if expand != 1:
            layers.append(_cbn(cin, exp, 1, act=nn.SiLU))
        layers += [
            _cbn(exp, exp, k, stride, exp, nn.SiLU),
            SE(exp, max(1, cin // 4), nn.SiLU, nn.Sigmoid),
            _cbn(exp, cout, 1, act=None),
        ]
        self.body = nn.Sequential(*layers)
        self.res = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.body(x)
        return x + y if self.res else y


class EfficientNet(nn.Module):
    def __init__(self, depth: float) -> None:
        super().__init__()
        layers: list[nn.Module] = [_cbn(3, 32, 3, 2, act=nn.SiLU)]
        for e, k, s, cin, cout, n in _EFF:
            for i in range(math.ceil(n * depth)):
                layers.append(MBConv(cin if i == 0 else cout, cout, e, k, s if i == 0 else 1))
        layers.append(_cbn(320, 1280, 1, act=nn.SiLU))
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(1280, 1000)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.features(x), 1), 1))


# ---- ConvNeXt-atto (Liu et al. 2022; timm convnext_atto: dims 40-320, depths 2-2-6-2) ---------
class LayerNorm2d(nn.LayerNorm):
    """timm's LayerNorm2d: LayerNorm over channels of an NCHW tensor, by permuting."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.permute(0, 2, 3, 1)
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps).permute(
            0, 3, 1, 2
        )


class ConvNeXtBlock(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.dw = nn.Conv2d(d, d, 7, padding=3, groups=d)
        self.norm = nn.LayerNorm(d, eps=1e-6)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.gamma = nn.Parameter(torch.ones(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.norm(self.dw(x).permute(0, 2, 3, 1))
        y = self.fc2(F.gelu(self.fc1(y))) * self.gamma
        return x + y.permute(0, 3, 1, 2)


class ConvNeXt(nn.Module):
    def __init__(self, dims=(40, 80, 160, 320), depths=(2, 2, 6, 2)) -> None:  # noqa: ANN001
        super().__init__()
        layers: list[nn.Module] = [nn.Conv2d(3, dims[0], 4, 4), LayerNorm2d(dims[0], eps=1e-6)]
        for i, (d, n) in enumerate(zip(dims, depths, strict=True)):
            if i:
                layers += [LayerNorm2d(dims[i - 1], eps=1e-6), nn.Conv2d(dims[i - 1], d, 2, 2)]
            layers += [ConvNeXtBlock(d) for _ in range(n)]
        self.features = nn.Sequential(*layers)
        self.norm = nn.LayerNorm(dims[-1], eps=1e-6)
        self.fc = nn.Linear(dims[-1], 1000)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.norm(self.features(x).mean((2, 3))))


# ---- transformer pieces (ViT / BERT / Whisper / MobileViT) -----------------------------------
class Attention(nn.Module):
    """Multi-head self-attention as timm and Hugging Face write it: one qkv Linear (or three),
    heads split by reshape/permute, softmax(q·kᵀ·scale)·v, heads merged, output Linear."""

    def __init__(self, d: int, heads: int, qkv_bias: bool = True) -> None:
        super().__init__()
        self.h = heads
        self.qkv = nn.Linear(d, 3 * d, bias=qkv_bias)
        self.proj = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.h, c // self.h).permute(2, 0, 3, 1, 4)
        att = (q @ k.transpose(-2, -1)) * (c // self.h) ** -0.5
        return self.proj((att.softmax(-1) @ v).transpose(1, 2).reshape(b, n, c))


class PreNormBlock(nn.Module):
    """x + attn(LN(x)); x + MLP(LN(x)) with GELU (erf): ViT, Whisper, MobileViT."""

    def __init__(self, d: int, heads: int, mlp: int, eps: float = 1e-5, act=nn.GELU) -> None:  # noqa: ANN001
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(d, eps=eps), nn.LayerNorm(d, eps=eps)
        self.attn = Attention(d, heads)
        self.mlp = nn.Sequential(nn.Linear(d, mlp), act(), nn.Linear(mlp, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.n1(x))
        return x + self.mlp(self.n2(x))


class ViT(nn.Module):
    """timm vit_tiny_patch16_224: 192 wide, 12 blocks, 3 heads, MLP 768, class token."""

    def __init__(self, d: int = 192, depth: int = 12, heads: int = 3, patch: int = 16) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, d, patch, patch)
        self.cls = nn.Parameter(torch.randn(1, 1, d) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, (224 // patch) ** 2 + 1, d) * 0.02)
        self.blocks = nn.Sequential(*[PreNormBlock(d, heads, 4 * d, 1e-6) for _ in range(depth)])
        self.norm = nn.LayerNorm(d, eps=1e-6)
        self.head = nn.Linear(d, 1000)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.pos
        return self.head(self.norm(self.blocks(x))[:, 0])


class BertEncoder(nn.Module):
    """MiniLM-L6-H384 (all-MiniLM-L6-v2's layout): BERT embeddings (word + position + token
    type, LayerNorm), 6 post-norm layers, 12 heads, FFN 1536, GELU (erf); input_ids [1, 128];
    out: the last hidden state [1, 128, 384]. No attention mask input (a full sequence)."""

    def __init__(self, d=384, layers=6, heads=12, ffn=1536, vocab=30522, seq=128) -> None:  # noqa: ANN001
        super().__init__()
        self.word = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(1, seq, d) * 0.02)
        self.typ = nn.Parameter(torch.randn(1, 1, d) * 0.02)
        self.norm = nn.LayerNorm(d, eps=1e-12)
        self.att = nn.ModuleList(Attention(d, heads) for _ in range(layers))
        self.n1 = nn.ModuleList(nn.LayerNorm(d, eps=1e-12) for _ in range(layers))
        self.ffn = nn.ModuleList(
            nn.Sequential(nn.Linear(d, ffn), nn.GELU(), nn.Linear(ffn, d)) for _ in range(layers)
        )
        self.n2 = nn.ModuleList(nn.LayerNorm(d, eps=1e-12) for _ in range(layers))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.norm(self.word(ids) + self.pos + self.typ)
        for att, n1, ffn, n2 in zip(self.att, self.n1, self.ffn, self.n2, strict=True):
            x = n1(x + att(x))
            x = n2(x + ffn(x))
        return x


class WhisperEncoder(nn.Module):
    """Whisper-tiny's audio encoder: Conv1d(80→384, 3) GELU, Conv1d(384→384, 3, stride 2) GELU,
    sinusoidal positions, 4 pre-norm blocks (6 heads, MLP 1536), final LayerNorm. Input: the
    full 30 s log-mel window, [1, 80, 3000] → [1, 1500, 384]."""

    def __init__(self, mels=80, d=384, layers=4, heads=6, frames=3000) -> None:  # noqa: ANN001
        super().__init__()
        self.c1 = nn.Conv1d(mels, d, 3, padding=1)
        self.c2 = nn.Conv1d(d, d, 3, 2, padding=1)
        n = frames // 2
        inc = math.log(10000) / (d // 2 - 1)
        t = torch.arange(n)[:, None] * torch.exp(-inc * torch.arange(d // 2))[None]
        self.register_buffer("pos", torch.cat([t.sin(), t.cos()], 1)[None])
        self.blocks = nn.Sequential(*[PreNormBlock(d, heads, 4 * d) for _ in range(layers)])
        self.norm = nn.LayerNorm(d)

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        x = F.gelu(self.c2(F.gelu(self.c1(mel)))).permute(0, 2, 1) + self.pos
        return self.norm(self.blocks(x))


# ---- RegNetX-200MF (Radosavovic et al. 2020; torchvision regnet_x_200mf) ---------------------
class XBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, gw: int = 8) -> None:
        super().__init__()
        self.body = nn.Sequential(
            _cbn(cin, cout, 1),
            _cbn(cout, cout, 3, stride, cout // gw),
            _cbn(cout, cout, 1, act=None),
        )
        self.short = _cbn(cin, cout, 1, stride, act=None) if stride != 1 or cin != cout else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.body(x) + (x if self.short is None else self.short(x)))


class RegNetX(nn.Module):
    def __init__(self, widths=(24, 56, 152, 368), depths=(1, 1, 4, 7)) -> None:  # noqa: ANN001
        super().__init__()
        layers: list[nn.Module] = [_cbn(3, 32, 3, 2)]
        cin = 32
        for w, n in zip(widths, depths, strict=True):
            for i in range(n):
                layers.append(XBlock(cin, w, 2 if i == 0 else 1))
                cin = w
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, 1000)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.features(x), 1), 1))


# ---- DenseNet-121 (Huang et al. 2017; torchvision: each layer concatenates all before it) ---
class DenseLayer(nn.Module):
    def __init__(self, cin: int, growth: int = 32, bn_size: int = 4) -> None:
        super().__init__()
        self.f = nn.Sequential(
            nn.BatchNorm2d(cin), nn.ReLU(), nn.Conv2d(cin, bn_size * growth, 1, bias=False),
            nn.BatchNorm2d(bn_size * growth), nn.ReLU(),
            nn.Conv2d(bn_size * growth, growth, 3, padding=1, bias=False),
        )  # fmt: skip

    def forward(self, feats: list[torch.Tensor]) -> torch.Tensor:
        return self.f(torch.cat(feats, 1))


class DenseNet(nn.Module):
    def __init__(self, blocks=(6, 12, 24, 16), growth: int = 32) -> None:  # noqa: ANN001
        super().__init__()
        self.stem = nn.Sequential(_cbn(3, 64, 7, 2), nn.MaxPool2d(3, 2, 1))
        self.blocks, self.trans = nn.ModuleList(), nn.ModuleList()
        c = 64
        for i, n in enumerate(blocks):
            self.blocks.append(nn.ModuleList(DenseLayer(c + j * growth) for j in range(n)))
            c += n * growth
            if i < len(blocks) - 1:
                self.trans.append(
                    nn.Sequential(
                        nn.BatchNorm2d(c),
                        nn.ReLU(),
                        nn.Conv2d(c, c // 2, 1, bias=False),
                        nn.AvgPool2d(2, 2),
                    )  # fmt: skip
                )
                c //= 2
        self.norm = nn.BatchNorm2d(c)
        self.fc = nn.Linear(c, 1000)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for i, block in enumerate(self.blocks):
            feats = [x]
            for layer in block:
                feats.append(layer(feats))
            x = torch.cat(feats, 1)
            if i < len(self.trans):
                x = self.trans[i](x)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(F.relu(self.norm(x)), 1), 1))


# ---- ShuffleNetV2 0.5x (Ma et al. 2018; torchvision shufflenet_v2_x0_5) ----------------------
def _shuffle(x: torch.Tensor) -> torch.Tensor:
    b, c, h, w = x.shape
    return x.view(b, 2, c // 2, h, w).transpose(1, 2).reshape(b, c, h, w)


class ShuffleUnit(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        bf = cout // 2
        self.stride = stride
        if stride > 1:
            self.b1 = nn.Sequential(_cbn(cin, cin, 3, stride, cin, None), _cbn(cin, bf, 1))
        src = cin if stride > 1 else bf
        self.b2 = nn.Sequential(
            _cbn(src, bf, 1), _cbn(bf, bf, 3, stride, bf, None), _cbn(bf, bf, 1)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride == 1:
            a, b = x.chunk(2, 1)
            return _shuffle(torch.cat([a, self.b2(b)], 1))
        return _shuffle(torch.cat([self.b1(x), self.b2(x)], 1))


class ShuffleNetV2(nn.Module):
    def __init__(self, outs=(24, 48, 96, 192, 1024), repeats=(4, 8, 4)) -> None:  # noqa: ANN001
        super().__init__()
        layers: list[nn.Module] = [_cbn(3, outs[0], 3, 2), nn.MaxPool2d(3, 2, 1)]
        cin = outs[0]
        for cout, n in zip(outs[1:4], repeats, strict=True):
            layers += [ShuffleUnit(cin if i == 0 else cout, cout, 2 if i == 0 else 1) for i in range(n)]  # fmt: skip
            cin = cout
        layers.append(_cbn(cin, outs[4], 1))
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(outs[4], 1000)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.features(x).mean((2, 3)))


# ---- MobileViT-XS (Mehta & Rastegari 2022; apple/ml-cvnets mobilevit_xs, 256x256) ----------
class MV2(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int = 4) -> None:
        super().__init__()
        e = cin * expand
        self.body = nn.Sequential(
            _cbn(cin, e, 1, act=nn.SiLU), _cbn(e, e, 3, stride, e, nn.SiLU), _cbn(e, cout, 1, act=None)
        )  # fmt: skip
        self.res = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.body(x)
        return x + y if self.res else y


class MobileViTBlock(nn.Module):
    """Local 3x3 + 1x1 convs, unfold into 2x2 patches, transformer over the patches (4 heads,
    MLP 2x, SiLU), fold, 1x1 back, concatenate with the input, 3x3 fuse."""

    def __init__(self, c: int, d: int, depth: int, p: int = 2) -> None:
        super().__init__()
        self.p = p
        self.local = nn.Sequential(_cbn(c, c, 3, act=nn.SiLU), nn.Conv2d(c, d, 1, bias=False))
        self.tr = nn.Sequential(*[PreNormBlock(d, 4, 2 * d, act=nn.SiLU) for _ in range(depth)])
        self.norm = nn.LayerNorm(d)
        self.proj = _cbn(d, c, 1, act=nn.SiLU)
        self.fuse = _cbn(2 * c, c, 3, act=nn.SiLU)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.local(x)
        b, d, h, w = y.shape
        p = self.p
        y = y.reshape(b, d, h // p, p, w // p, p).permute(0, 3, 5, 2, 4, 1)
        y = self.norm(self.tr(y.reshape(b * p * p, (h // p) * (w // p), d)))
        y = y.reshape(b, p, p, h // p, w // p, d).permute(0, 5, 3, 1, 4, 2).reshape(b, d, h, w)
        return self.fuse(torch.cat([x, self.proj(y)], 1))


class MobileViT(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            _cbn(3, 16, 3, 2, act=nn.SiLU),
            MV2(16, 32, 1),
            MV2(32, 48, 2), MV2(48, 48, 1), MV2(48, 48, 1),
            MV2(48, 64, 2), MobileViTBlock(64, 96, 2),
            MV2(64, 80, 2), MobileViTBlock(80, 120, 4),
            MV2(80, 96, 2), MobileViTBlock(96, 144, 3),
            _cbn(96, 384, 1, act=nn.SiLU),
        )  # fmt: skip
        self.fc = nn.Linear(384, 1000)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.features(x).mean((2, 3)))


# ---- YOLOv8n (ultralytics yolov8.yaml, scale n: depth 0.33, width 0.25), 640x640 ------------
def _conv(cin: int, cout: int, k: int = 1, s: int = 1) -> nn.Sequential:
    return _cbn(cin, cout, k, s, act=nn.SiLU)


class C2f(nn.Module):
    def __init__(self, cin: int, cout: int, n: int, shortcut: bool) -> None:
        super().__init__()
        c = cout // 2
        self.cv1, self.cv2 = _conv(cin, 2 * c), _conv((2 + n) * c, cout)
        self.m = nn.ModuleList(nn.Sequential(_conv(c, c, 3), _conv(c, c, 3)) for _ in range(n))
        self.shortcut = shortcut

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = list(self.cv1(x).chunk(2, 1))
        for m in self.m:
            y.append(y[-1] + m(y[-1]) if self.shortcut else m(y[-1]))
        return self.cv2(torch.cat(y, 1))


class SPPF(nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.cv1, self.cv2 = _conv(cin, cin // 2), _conv(cin * 2, cout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = [self.cv1(x)]
        for _ in range(3):
            y.append(F.max_pool2d(y[-1], 5, 1, 2))
        return self.cv2(torch.cat(y, 1))


class YOLOv8n(nn.Module):
    """Backbone (C2f, SPPF), PAN neck, decoupled anchor-free head with the export-time decode
    (DFL softmax over 16 bins, distances to boxes, sigmoid scores): out [1, 84, 8400]."""

    def __init__(self, nc: int = 80, size: int = 640) -> None:
        super().__init__()
        self.b = nn.ModuleList([
            _conv(3, 16, 3, 2), _conv(16, 32, 3, 2), C2f(32, 32, 1, True), _conv(32, 64, 3, 2),
            C2f(64, 64, 2, True), _conv(64, 128, 3, 2), C2f(128, 128, 2, True),
            _conv(128, 256, 3, 2), C2f(256, 256, 1, True), SPPF(256, 256),
        ])  # fmt: skip
        self.up1, self.up2 = C2f(384, 128, 1, False), C2f(192, 64, 1, False)
        self.down1, self.pan1 = _conv(64, 64, 3, 2), C2f(192, 128, 1, False)
        self.down2, self.pan2 = _conv(128, 128, 3, 2), C2f(384, 256, 1, False)
        self.nc, self.reg = nc, 16
        self.box = nn.ModuleList(
            nn.Sequential(_conv(c, 64, 3), _conv(64, 64, 3), nn.Conv2d(64, 64, 1))
            for c in (64, 128, 256)
        )
        self.cls = nn.ModuleList(
            nn.Sequential(_conv(c, 80, 3), _conv(80, 80, 3), nn.Conv2d(80, nc, 1))
            for c in (64, 128, 256)
        )
        anchors, strides = [], []
        for s in (8, 16, 32):
            n = size // s
            yy, xx = torch.meshgrid(torch.arange(n) + 0.5, torch.arange(n) + 0.5, indexing="ij")
            anchors.append(torch.stack([xx.flatten(), yy.flatten()], 0))
            strides.append(torch.full((1, n * n), float(s)))
        self.register_buffer("anchors", torch.cat(anchors, 1)[None])
        self.register_buffer("strides", torch.cat(strides, 1)[None])
        self.register_buffer("bins", torch.arange(16, dtype=torch.float32).view(1, 16, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f = []
        for m in self.b:
            x = m(x)
            f.append(x)
        p3, p4, p5 = f[4], f[6], f[9]
        u1 = self.up1(torch.cat([F.interpolate(p5, scale_factor=2.0, mode="nearest"), p4], 1))
        o3 = self.up2(torch.cat([F.interpolate(u1, scale_factor=2.0, mode="nearest"), p3], 1))
        o4 = self.pan1(torch.cat([self.down1(o3), u1], 1))
        o5 = self.pan2(torch.cat([self.down2(o4), p5], 1))
        outs = [
            torch.cat([bx(o), cl(o)], 1).flatten(2)
            for o, bx, cl in zip((o3, o4, o5), self.box, self.cls, strict=True)
        ]
        y = torch.cat(outs, 2)  # [1, 144, 8400]
        box, cls = y[:, :64], y[:, 64:]
        b, _, a = box.shape
        dist = (box.view(b, 4, 16, a).transpose(2, 1).softmax(1) * self.bins).sum(1)
        dist = dist.view(b, 4, a)
        lt, rb = dist.chunk(2, 1)
        x1y1, x2y2 = self.anchors - lt, self.anchors + rb
        boxes = torch.cat([(x1y1 + x2y2) / 2, x2y2 - x1y1], 1) * self.strides
        return torch.cat([boxes, cls.sigmoid()], 1)


# ---- registry -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Net:
    make: Callable[[], nn.Module]
    inputs: Callable[[], tuple[torch.Tensor, ...]]
    description: str
    input_names: tuple[str, ...] = ("input",)


def _image(size: int) -> Callable[[], tuple[torch.Tensor, ...]]:
    return lambda: (torch.randn(1, 3, size, size),)


NETS: dict[str, Net] = {
    "mobilenetv3_small": Net(
        lambda: MobileNetV3(_V3_SMALL, 1024), _image(224), "MobileNetV3-small 1.0, 224x224"
    ),
    "mobilenetv3_large": Net(
        lambda: MobileNetV3(_V3_LARGE, 1280), _image(224), "MobileNetV3-large 1.0, 224x224"
    ),
    "efficientnet_b0": Net(lambda: EfficientNet(1.0), _image(224), "EfficientNet-B0, 224x224"),
    "efficientnet_b1": Net(lambda: EfficientNet(1.1), _image(240), "EfficientNet-B1, 240x240"),
    "lraspp_mobilenetv3": Net(
        LRASPP, _image(224), "LR-ASPP MobileNetV3-large (dilated), 21 classes, 224x224 in and out"
    ),
    "convnext_atto": Net(ConvNeXt, _image(224), "ConvNeXt-atto (timm), 224x224"),
    "vit_tiny": Net(ViT, _image(224), "ViT-tiny/16 (timm), 224x224, 197 tokens"),
    "regnetx_200mf": Net(RegNetX, _image(224), "RegNetX-200MF, 224x224"),
    "densenet121": Net(DenseNet, _image(224), "DenseNet-121, 224x224"),
    "shufflenetv2_x0_5": Net(ShuffleNetV2, _image(224), "ShuffleNetV2 0.5x, 224x224"),
    "mobilevit_xs": Net(MobileViT, _image(256), "MobileViT-XS, 256x256"),
    "yolov8n": Net(YOLOv8n, _image(640), "YOLOv8n-style detector with decode, 640x640"),
    "minilm_l6": Net(
        BertEncoder,
        lambda: (torch.randint(0, 30522, (1, 128)),),
        "MiniLM-L6-H384 encoder (BERT layout), sequence 128",
        ("input_ids",),
    ),
    "whisper_tiny_encoder": Net(
        WhisperEncoder,
        lambda: (torch.randn(1, 80, 3000),),
        "Whisper-tiny audio encoder, 80x3000 log-mel (30 s) -> 1500x384",
        ("mel",),
    ),
}


def _randomise_norms(model: nn.Module, gen: torch.Generator) -> None:
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            n = m.num_features
            m.running_mean.copy_(torch.randn(n, generator=gen) * 0.1)
            m.running_var.copy_(torch.rand(n, generator=gen) * 0.5 + 0.75)
            m.weight.data.copy_(torch.rand(n, generator=gen) * 0.5 + 0.75)
            m.bias.data.copy_(torch.randn(n, generator=gen) * 0.1)
        elif isinstance(m, nn.LayerNorm) and m.weight is not None:
            m.weight.data.copy_(torch.rand(m.weight.shape, generator=gen) * 0.5 + 0.75)
            m.bias.data.copy_(torch.randn(m.bias.shape, generator=gen) * 0.1)
        elif isinstance(m, ConvNeXtBlock):
            m.gamma.data.copy_(torch.rand(m.gamma.shape, generator=gen) * 0.5 + 0.5)


def build(name: str) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    net = NETS[name]
    torch.manual_seed(SEED)
    model = net.make().eval()
    with torch.no_grad():
        _randomise_norms(model, torch.Generator().manual_seed(SEED + 1))
    torch.manual_seed(SEED + 2)
    return model, net.inputs()


def export(name: str, out: str | Path) -> Path:
    """Export NETS[name] to `out` (TorchScript exporter, opset 17, IR 8, batch 1, static)."""
    import onnx

    model, args = build(name)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".part")
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model,
            args,
            str(tmp),
            dynamo=False,
            opset_version=OPSET,
            input_names=list(NETS[name].input_names),
            output_names=["output"],
            do_constant_folding=True,
        )
    m = onnx.load(str(tmp))
    m.ir_version = min(m.ir_version, 8)  # onnxruntime 1.31 refuses newer IR versions
    m.graph.name = name
    onnx.save(m, str(tmp))
    os.replace(tmp, out)
    return out


def cached(name: str, directory: str | Path | None = None, log: Callable[[str], None] | None = None) -> Path:  # fmt: skip
    """The exported file of `name`, exporting it on first use."""
    if name not in NETS:
        raise KeyError(name)
    path = cache_dir(directory) / (
        f"{name}.v{DEFS_VERSION}.opset{OPSET}.torch{torch.__version__.split('+')[0]}.onnx"
    )
    if not path.is_file():
        if log:
            log(f"exporting {name} with torch {torch.__version__} to {path}")
        export(name, path)
    return path
