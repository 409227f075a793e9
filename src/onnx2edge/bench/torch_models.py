"""Small PyTorch models exported to ONNX the way today's exporters write them.

Converters meet models as exporters write them, not as a person would draw them: the
TorchScript exporter (``torch.onnx.export(..., dynamo=False)``) emits opset-17 graphs full of
Shape/Gather/Concat arithmetic, Erf-based GELU and ``Sigmoid·Mul`` SiLU; the dynamo exporter
(``dynamo=True``, opset 18 and later) traces through ATen decompositions and emits other
patterns for the same layers. Each builder here returns a small module with random (seeded)
weights and a batch-1 example input, covering one family of exported patterns:

=================  =================================================================
vit_block          patch embedding, LayerNormalization, multi-head self-attention
                   (MatMul/Softmax/Transpose/Reshape/Split), GELU (Erf), residuals
mobilenetv3_block  HardSwish/HardSigmoid, squeeze-excite, depthwise and grouped conv
shufflenet_unit    channel split, branch, Concat and the channel shuffle
silu_convnet       Conv + SiLU (EfficientNet style), global average pooling
resize_decoder     Resize: nearest x2, bilinear x2, bilinear with align_corners
where_masks        Where / masked_fill with a causal mask, input-dependent masks
lstm_classifier    Embedding (Gather) + bidirectional LSTM + Linear on token ids
gru_tagger         Embedding + GRU (linear_before_reset) + per-step Linear
sdpa_block         causal scaled_dot_product_attention, decomposed by both exporters
sdpa_gqa_block     the same with grouped-query heads; the dynamo exporter at opset 23
                   writes the ONNX Attention op
=================  =================================================================

``python -m onnx2edge.bench.torch_models OUT_DIR`` writes every model with every exporter
that can export it, plus a README.md naming the torch version; the committed fixtures in
tests/fixtures/torch/ are its output, so tests need no torch. This module needs torch.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import math
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812

__all__ = ["BUILDERS", "EXPORTERS", "Export", "export", "export_all"]

SEED = 0
# exporter name -> (torch.onnx.export dynamo flag, opset); the dynamo exporter needs >= 18
EXPORTERS: dict[str, tuple[bool, int]] = {"torchscript": (False, 17), "dynamo": (True, 18)}


# --------------------------------------------------------------------------------------------
# models
# --------------------------------------------------------------------------------------------
class ViTBlock(nn.Module):
    """Patch embedding + one pre-norm transformer encoder block (Dosovitskiy et al., 2021),
    attention written out as exporters see most hand-written ViTs: qkv Linear, reshape,
    split into q/k/v, q·kᵀ·scale, softmax, ·v, merge heads."""

    def __init__(self, dim: int = 64, heads: int = 4, patch: int = 8, mlp: int = 128) -> None:
        super().__init__()
        self.heads = heads
        self.patch = nn.Conv2d(3, dim, patch, stride=patch)
        self.cls = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, 17, dim) * 0.02)
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, mlp)
        self.fc2 = nn.Linear(mlp, dim)
        self.head = nn.Linear(dim, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch(x).flatten(2).transpose(1, 2)  # (B, 16, dim)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        b, n, c = x.shape
        qkv = self.qkv(self.norm1(x)).reshape(b, n, 3, self.heads, c // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(c // self.heads))
        att = att.softmax(dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, n, c))
        x = x + self.fc2(F.gelu(self.fc1(self.norm2(x))))
        return self.head(x[:, 0])


class SqueezeExcite(nn.Module):
    def __init__(self, ch: int, reduced: int) -> None:
        super().__init__()
        self.fc1 = nn.Conv2d(ch, reduced, 1)
        self.fc2 = nn.Conv2d(reduced, ch, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = F.adaptive_avg_pool2d(x, 1)
        return x * F.hardsigmoid(self.fc2(F.relu(self.fc1(s))))


class MobileNetV3Block(nn.Module):
    """Two inverted-residual blocks of MobileNetV3 (Howard et al., 2019): 1x1 expand, BN,
    HardSwish, depthwise 5x5 / 3x3 (stride 2 and 1), squeeze-excite with HardSigmoid, 1x1
    project; then a grouped 3x3 convolution (groups=4) and a classifier."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.Hardswish()
        )
        self.b1 = nn.Sequential(
            nn.Conv2d(16, 64, 1, bias=False), nn.BatchNorm2d(64), nn.Hardswish(),
            nn.Conv2d(64, 64, 5, 2, 2, groups=64, bias=False), nn.BatchNorm2d(64), nn.Hardswish(),
            SqueezeExcite(64, 16),
            nn.Conv2d(64, 24, 1, bias=False), nn.BatchNorm2d(24),
        )  # fmt: skip
        self.b2 = nn.Sequential(
            nn.Conv2d(24, 72, 1, bias=False), nn.BatchNorm2d(72), nn.ReLU(),
            nn.Conv2d(72, 72, 3, 1, 1, groups=72, bias=False), nn.BatchNorm2d(72), nn.ReLU(),
            SqueezeExcite(72, 24),
            nn.Conv2d(72, 24, 1, bias=False), nn.BatchNorm2d(24),
        )  # fmt: skip
        self.grouped = nn.Conv2d(24, 32, 3, 1, 1, groups=4)
        self.head = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.b1(self.stem(x))
        x = x + self.b2(x)
        x = F.hardswish(self.grouped(x))
        return self.head(x.mean((2, 3)))


def channel_shuffle(x: torch.Tensor, groups: int) -> torch.Tensor:
    """ShuffleNet's channel shuffle (Zhang et al., 2018): reshape, transpose, flatten."""
    b, c, h, w = x.shape
    return x.view(b, groups, c // groups, h, w).transpose(1, 2).contiguous().view(b, c, h, w)


class ShuffleNetUnit(nn.Module):
    """Two ShuffleNetV2 units (Ma et al., 2018): a stride-2 unit with two branches and a
    stride-1 unit that splits the channels (chunk), each followed by the channel shuffle."""

    def __init__(self, ch: int = 48) -> None:
        super().__init__()
        half = ch // 2

        def branch(cin: int, cout: int, stride: int) -> nn.Sequential:
            return nn.Sequential(
                nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
                nn.Conv2d(cout, cout, 3, stride, 1, groups=cout, bias=False), nn.BatchNorm2d(cout),
                nn.Conv2d(cout, cout, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
            )  # fmt: skip

        self.stem = nn.Conv2d(3, 24, 3, 1, 1)
        self.down_left = nn.Sequential(
            nn.Conv2d(24, 24, 3, 2, 1, groups=24, bias=False), nn.BatchNorm2d(24),
            nn.Conv2d(24, half, 1, bias=False), nn.BatchNorm2d(half), nn.ReLU(),
        )  # fmt: skip
        self.down_right = branch(24, half, 2)
        self.unit = branch(half, half, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.stem(x))
        x = channel_shuffle(torch.cat([self.down_left(x), self.down_right(x)], 1), 2)
        a, b = x.chunk(2, dim=1)
        return channel_shuffle(torch.cat([a, self.unit(b)], 1), 2)


class SiLUConvNet(nn.Module):
    """Conv + BN + SiLU stages (EfficientNet's activation), global average pool, linear."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, 2, 1), nn.BatchNorm2d(16), nn.SiLU(),
            nn.Conv2d(16, 32, 3, 2, 1), nn.BatchNorm2d(32), nn.SiLU(),
            nn.Conv2d(32, 32, 3, 1, 1, groups=32), nn.SiLU(),
        )  # fmt: skip
        self.head = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x)
        return self.head(F.adaptive_avg_pool2d(x, 1).flatten(1))


class ResizeDecoder(nn.Module):
    """A small decoder in the style of U-Net / FPN upsampling paths: nearest x2, bilinear x2
    (align_corners=False, torchvision's default) and bilinear to a size with align_corners."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(8, 8, 3, 1, 1)
        self.c2 = nn.Conv2d(8, 8, 3, 1, 1)
        self.c3 = nn.Conv2d(8, 4, 3, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.interpolate(F.relu(self.c1(x)), scale_factor=2, mode="nearest")
        x = F.interpolate(F.relu(self.c2(x)), scale_factor=2, mode="bilinear", align_corners=False)
        return F.interpolate(self.c3(x), size=(40, 40), mode="bilinear", align_corners=True)


class WhereMasks(nn.Module):
    """Masks as language models build them: a causal mask from torch.triu applied with
    masked_fill(-inf) before softmax, a padding mask from the input, and torch.where."""

    def __init__(self, seq: int = 8, dim: int = 16) -> None:
        super().__init__()
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, dim)
        self.register_buffer("causal", torch.triu(torch.ones(seq, seq, dtype=torch.bool), 1))
        self.register_buffer("not_first", torch.arange(seq) > 0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scores = self.q(x) @ self.k(x).transpose(-2, -1)
        scores = scores.masked_fill(self.causal, float("-inf"))
        # keys whose features sum below 0 count as padding; the first stays visible
        pad = (x.sum(-1) < 0) & self.not_first  # (B, seq)
        scores = scores.masked_fill(pad[:, None, :], -1e4)
        att = scores.softmax(-1)
        y = att @ x
        return torch.where(y > 0, y, 0.1 * y)


class LSTMClassifier(nn.Module):
    """Embedding + 2-layer bidirectional LSTM (batch_first) + linear head on the last step."""

    def __init__(self, vocab: int = 100, emb: int = 32, hidden: int = 48, classes: int = 5) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, emb)
        self.lstm = nn.LSTM(emb, hidden, num_layers=2, batch_first=True, bidirectional=True)
        self.head = nn.Linear(2 * hidden, classes)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(self.emb(ids))
        return self.head(out[:, -1])


class GRUTagger(nn.Module):
    """Embedding + GRU (batch_first) + a linear tag per step: a sequence-labelling model."""

    def __init__(self, vocab: int = 60, emb: int = 24, hidden: int = 32, tags: int = 7) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, emb)
        self.gru = nn.GRU(emb, hidden, batch_first=True)
        self.head = nn.Linear(hidden, tags)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        out, _ = self.gru(self.emb(ids))
        return self.head(out)


class SDPABlock(nn.Module):
    """Causal self-attention through F.scaled_dot_product_attention. With kv_heads < heads,
    query heads share key/value heads (grouped-query attention, as in Llama-style decoders)
    through SDPA's enable_gqa, which only the dynamo exporter converts."""

    def __init__(self, dim: int = 64, heads: int = 8, kv_heads: int = 8) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.hd = heads, kv_heads, dim // heads
        self.q = nn.Linear(dim, dim)
        self.kv = nn.Linear(dim, 2 * kv_heads * self.hd)
        self.o = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        q = self.q(x).view(b, n, self.heads, self.hd).transpose(1, 2)
        k, v = self.kv(x).view(b, n, 2, self.kv_heads, self.hd).permute(2, 0, 3, 1, 4).unbind(0)
        gqa = self.kv_heads != self.heads
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
        return self.o(y.transpose(1, 2).reshape(b, n, c))


def _image(c: int = 3, h: int = 32, w: int = 32) -> tuple[torch.Tensor, ...]:
    return (torch.randn(1, c, h, w),)


@dataclass(frozen=True)
class Builder:
    make: Callable[[], nn.Module]
    inputs: Callable[[], tuple[torch.Tensor, ...]]
    input_names: tuple[str, ...] = ("input",)
    exporters: tuple[str, ...] = ("torchscript", "dynamo")
    opset: dict[str, int] | None = None  # per-exporter opset override


BUILDERS: dict[str, Builder] = {
    "vit_block": Builder(ViTBlock, _image),
    "mobilenetv3_block": Builder(MobileNetV3Block, _image),
    "shufflenet_unit": Builder(ShuffleNetUnit, _image),
    "silu_convnet": Builder(SiLUConvNet, _image),
    "resize_decoder": Builder(ResizeDecoder, lambda: _image(8, 10, 10)),
    "where_masks": Builder(WhereMasks, lambda: (torch.randn(1, 8, 16),)),
    "lstm_classifier": Builder(
        LSTMClassifier, lambda: (torch.randint(0, 100, (1, 12)),), input_names=("ids",)
    ),
    "gru_tagger": Builder(GRUTagger, lambda: (torch.randint(0, 60, (1, 9)),), input_names=("ids",)),
    "sdpa_block": Builder(SDPABlock, lambda: (torch.randn(1, 10, 64),)),
    "sdpa_gqa_block": Builder(
        lambda: SDPABlock(kv_heads=2),
        lambda: (torch.randn(1, 10, 64),),
        exporters=("dynamo",),
        opset={"dynamo": 23},
    ),
}


# --------------------------------------------------------------------------------------------
# export
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Export:
    name: str
    exporter: str
    opset: int
    path: Path


def _randomise_batchnorm(model: nn.Module, gen: torch.Generator) -> None:
    """Fresh BatchNorm layers are the identity; give them statistics so folding them matters."""
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            n = m.num_features
            m.running_mean.copy_(torch.randn(n, generator=gen) * 0.1)
            m.running_var.copy_(torch.rand(n, generator=gen) * 0.5 + 0.75)
            m.weight.data.copy_(torch.rand(n, generator=gen) * 0.5 + 0.75)
            m.bias.data.copy_(torch.randn(n, generator=gen) * 0.1)


def build(name: str) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The seeded model (eval mode) and its example input."""
    b = BUILDERS[name]
    torch.manual_seed(SEED)
    model = b.make().eval()
    with torch.no_grad():
        _randomise_batchnorm(model, torch.Generator().manual_seed(SEED + 1))
    torch.manual_seed(SEED + 2)
    return model, b.inputs()


def export(name: str, exporter: str, out_dir: str | Path) -> Export:
    """Export one model with one exporter to OUT_DIR/<name>.<exporter>.onnx."""
    b = BUILDERS[name]
    dynamo, opset = EXPORTERS[exporter]
    opset = (b.opset or {}).get(exporter, opset)
    model, args = build(name)
    out = Path(out_dir) / f"{name}.{exporter}.onnx"
    out.parent.mkdir(parents=True, exist_ok=True)
    kw: dict = {"input_names": list(b.input_names), "output_names": ["output"]}
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)  # e.g. "torchvision is not installed"
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), torch.no_grad():
        warnings.simplefilter("ignore")
        if dynamo:
            prog = torch.onnx.export(model, args, dynamo=True, opset_version=opset, **kw)
            prog.save(str(out))
        else:
            torch.onnx.export(model, args, str(out), dynamo=False, opset_version=opset, **kw)
    _check_export(out, model, args, b.input_names)
    return Export(name, exporter, opset, out)


def _check_export(
    path: Path, model: nn.Module, args: tuple[torch.Tensor, ...], names: tuple[str, ...]
) -> None:
    """The file is self-contained and onnxruntime reproduces torch's output on the example
    input: a fixture must test the converter, not an exporter bug."""
    import onnx
    import onnxruntime as ort
    from onnx import external_data_helper

    m = onnx.load(str(path), load_external_data=False)
    if any(external_data_helper.uses_external_data(t) for t in m.graph.initializer):
        raise RuntimeError(f"{path}: the exporter wrote external data; keep fixtures small")
    with torch.no_grad():
        want = model(*args).numpy()
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = sess.run(None, {n: a.numpy() for n, a in zip(names, args, strict=True)})[0]
    err = float(np.abs(got - want).max())
    if err > 1e-4 * max(float(np.abs(want).max()), 1e-6):
        raise RuntimeError(f"{path}: onnxruntime differs from torch by {err:.3g}")


def export_all(out_dir: str | Path, names: list[str] | None = None) -> list[Export]:
    done = []
    for name in names or list(BUILDERS):
        for exporter in BUILDERS[name].exporters:
            done.append(export(name, exporter, out_dir))
            print(f"  {done[-1].path.name}", file=sys.stderr)
    _write_readme(Path(out_dir), done)
    return done


def _write_readme(out_dir: Path, done: list[Export]) -> None:
    import onnx

    rows = []
    for e in done:
        m = onnx.load(str(e.path))
        ops = sorted({n.op_type for n in m.graph.node})
        size = e.path.stat().st_size
        rows.append(
            f"| {e.path.name} | {e.exporter} | {e.opset} | {size // 1024} KiB | {', '.join(ops)} |"
        )
    text = (
        f"""# Models as PyTorch's exporters write them

Written by `python -m onnx2edge.bench.torch_models {out_dir.as_posix()}` with torch
{torch.__version__} (onnx {onnx.__version__}, numpy {np.__version__}); random weights
(`torch.manual_seed({SEED})`), batch 1. `torchscript` is `torch.onnx.export(..., dynamo=False)`,
`dynamo` is `torch.onnx.export(..., dynamo=True)`. tests/test_torch_exported.py verifies each
file through the C backend against onnxruntime, without torch.

| file | exporter | opset | size | ops |
|---|---|---:|---:|---|
"""
        + "\n".join(rows)
        + "\n"
    )
    (out_dir / "README.md").write_text(text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("names", nargs="*", help=f"models (default: all of {', '.join(BUILDERS)})")
    args = ap.parse_args(argv)
    export_all(args.out_dir, args.names or None)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
