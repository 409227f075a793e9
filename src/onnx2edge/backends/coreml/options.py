"""The conversion options Core ML users set with coremltools (issue 27), parsed into plain
values: each parser takes the option's text and returns a canonical form or raises
Onnx2EdgeError with one line.

--precision fp16|fp32               compute_precision (ML Program) / float16 weights (NN)
--minimum-deployment-target iOS15   ct.target: the specification version written
--metadata author=..,license=..     MLModel author / license / version / short description
--classifier-labels FILE            ct.ClassifierConfig / NeuralNetworkClassifier
--image-input NAME[:scale=..,bias=..,bgr]   ct.ImageType / NN preprocessing scaler
--flexible-shape NAME=1x3x[224,320]x[224,320]   enumerated input shapes (ct.EnumeratedShapes)
--flexible-shape NAME=1x3x[224..512]x[224..]     size ranges (ct.RangeDim; `LO..` unbounded)
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from pathlib import Path

from ...errors import Onnx2EdgeError

PRECISIONS = ("fp16", "fp32")
META_KEYS = ("author", "license", "version", "description")


def precision(value: str | None, fp16_switch: bool, fmt: str) -> str:
    """fp16 is coremltools' ML Program default; a NeuralNetwork keeps float32 weights unless
    asked (its fp16 weights are a storage format: Core ML computes in float16 on the GPU
    and ANE either way)."""
    if value is not None and value not in PRECISIONS:
        raise Onnx2EdgeError(f"--precision {value}: use fp16 or fp32")
    if value is None:
        return "fp16" if fp16_switch or fmt == "mlprogram" else "fp32"
    if fp16_switch and value != "fp16":
        raise Onnx2EdgeError("--fp16 contradicts --precision fp32; give one of them")
    return value


def deployment_target(value: str | None, fmt: str) -> str | None:
    """The canonical target name (a member of ct.target, e.g. iOS15, macOS12)."""
    if value is None:
        return None
    from ._ct import coremltools

    ct = coremltools()
    names = {n.lower(): n for n in ct.target.__members__}  # aliases too: macOS12 = iOS15
    name = names.get(value.lower().replace(".", "_"))
    if name is None:
        raise Onnx2EdgeError(
            f"--minimum-deployment-target {value}: unknown (one of {', '.join(names.values())})"
        )
    if fmt == "mlprogram" and ct.target[name].value < ct.target.iOS15.value:
        raise Onnx2EdgeError(
            f"--minimum-deployment-target {name}: an ML Program needs iOS15 / macOS12 or "
            "later (use --format neuralnetwork for older systems)"
        )
    return name


def spec_version(name: str) -> int:
    from ._ct import coremltools

    return int(coremltools().target[name].value)


def metadata(value: str | None) -> dict[str, str]:
    """`author=A,license=MIT,version=1.2` -> {key: value}; a value may contain commas when
    the next part does not look like `key=`."""
    if not value:
        return {}
    out: dict[str, str] = {}
    for part in re.split(r",(?=\s*\w+\s*=)", value):
        key, eq, val = part.partition("=")
        key = key.strip()
        if not eq or key not in META_KEYS:
            raise Onnx2EdgeError(
                f"--metadata '{part}': use KEY=VALUE with KEY one of {', '.join(META_KEYS)}"
            )
        out[key] = val.strip()
    return out


def labels(value: str | None) -> list[str]:
    if not value:
        return []
    path = Path(value)
    if not path.is_file():
        raise Onnx2EdgeError(f"--classifier-labels {value}: no such file")
    out = [line.strip() for line in path.read_text().splitlines() if line.strip()]
    if len(out) < 2:
        raise Onnx2EdgeError(f"--classifier-labels {value}: needs one label per line, two or more")
    if len(set(out)) != len(out):
        raise Onnx2EdgeError(f"--classifier-labels {value}: labels repeat")
    return out


@dataclass(frozen=True)
class ImageInput:
    name: str
    scale: float = 1.0
    bias: tuple[float, ...] = (0.0,)  # per channel in the model's channel order, or one
    bgr: bool = False

    def channel_bias(self, channels: int) -> list[float]:
        if len(self.bias) == 1:
            return [self.bias[0]] * channels
        if len(self.bias) != channels:
            raise Onnx2EdgeError(
                f"--image-input {self.name}: {len(self.bias)} biases for {channels} channels"
            )
        return list(self.bias)

    def canonical(self) -> str:
        bias = "/".join(f"{b:g}" for b in self.bias)
        return f"{self.name}:scale={self.scale:g},bias={bias}" + (",bgr" if self.bgr else "")


def image_input(value: str | None) -> ImageInput | None:
    """`NAME[:scale=S,bias=B|B0/B1/B2,bgr]`: the input is an image whose pixels p give the
    model's input S * p + B (B per channel in the model's channel order)."""
    if not value:
        return None
    name, _, rest = value.partition(":")
    if not name:
        raise Onnx2EdgeError(f"--image-input {value}: give the input's NAME first")
    scale, bias, bgr = 1.0, (0.0,), False
    for part in filter(None, (p.strip() for p in rest.split(","))):
        key, eq, val = part.partition("=")
        try:
            if key == "scale" and eq:
                scale = _number(val)
            elif key == "bias" and eq:
                bias = tuple(_number(v) for v in val.split("/"))
            elif key in ("bgr", "rgb") and not eq:
                bgr = key == "bgr"
            else:
                raise ValueError(part)
        except ValueError:
            raise Onnx2EdgeError(
                f"--image-input {value}: '{part}' (use scale=S, bias=B or B0/B1/B2, bgr)"
            ) from None
    return ImageInput(name, scale, bias, bgr)


def _number(text: str) -> float:
    """A float, or a fraction such as 1/255."""
    num, slash, den = (
        text.partition("/") if text.count("/") == 1 and "e" not in text else (text, "", "")
    )
    return float(num) / float(den) if slash else float(text)


@dataclass(frozen=True)
class FlexibleShape:
    """Either `shapes` (every enumerated combination, in order) or `lower` / `upper` (per
    dimension; an upper bound of -1 is unbounded, Core ML's convention)."""

    name: str
    shapes: tuple[tuple[int, ...], ...] = ()
    lower: tuple[int, ...] = ()
    upper: tuple[int, ...] = ()

    @property
    def is_range(self) -> bool:
        return bool(self.lower)

    def contains(self, shape: tuple[int, ...]) -> bool:
        if not self.is_range:
            return shape in self.shapes
        return len(shape) == len(self.lower) and all(
            lo <= d and (hi == -1 or d <= hi)
            for d, lo, hi in zip(shape, self.lower, self.upper, strict=True)
        )


_FLEX_USAGE = "use NAME=1x3x[224,320]x[224,320] (enumerated) or NAME=1x3x[224..512]x[224..512]"


def flexible_shape(value: str | None) -> FlexibleShape | None:
    """`NAME=1x3x[224,320]x[224,320]` -> every combination of the listed sizes;
    `NAME=1x3x[224..512]x[224..]` -> a range per dimension (`LO..` unbounded). Core ML
    holds one kind per input, so lists and ranges do not mix."""
    if not value:
        return None
    name, eq, dims = value.partition("=")
    if not eq or not name.strip():
        raise Onnx2EdgeError(f"--flexible-shape {value}: {_FLEX_USAGE}")
    choices: list[list[int]] = []
    lower: list[int] = []
    upper: list[int] = []
    for d in re.findall(r"\[[^\]]*\]|[^x\[\]]+", dims):
        lo, dots, hi = d.strip("[]").partition("..")
        try:
            if dots:
                lower.append(int(lo))
                upper.append(int(hi) if hi.strip() else -1)
                vals = [int(lo)]
            else:
                vals = [int(v) for v in d.strip("[]").split(",")]
                lower.append(vals[0])
                upper.append(vals[0])
        except ValueError:
            raise Onnx2EdgeError(f"--flexible-shape {value}: '{d}' is not a size") from None
        if min(vals) < 1 or (dots and upper[-1] != -1 and upper[-1] <= lower[-1]):
            raise Onnx2EdgeError(f"--flexible-shape {value}: '{d}' is not a size")
        if dots:
            vals = []  # a range: no enumerated choice
        elif len(vals) > 1:
            lower[-1] = upper[-1] = 0  # an enumerated list: no range
        choices.append(vals)
    has_range = any(not c for c in choices)
    has_list = any(len(c) > 1 for c in choices)
    if has_range and has_list:
        raise Onnx2EdgeError(
            f"--flexible-shape {value}: Core ML takes either enumerated sizes or ranges "
            "for one input, not both"
        )
    if has_range:
        return FlexibleShape(name.strip(), lower=tuple(lower), upper=tuple(upper))
    shapes = tuple(tuple(s) for s in itertools.product(*choices))
    if len(shapes) < 2:
        raise Onnx2EdgeError(f"--flexible-shape {value}: lists only one shape")
    return FlexibleShape(name.strip(), shapes=shapes)


def compress(value: str, fmt: str) -> str:
    """`linear8` (int8 weights, per-channel symmetric), `palettize:N` (an N-bit lookup
    table per weight tensor, uniformly spaced: deterministic, no extra dependency) or
    `palettize-kmeans:N` (k-means table, needs scikit-learn), applied with
    coremltools.optimize.coreml to the ML Program."""
    if fmt != "mlprogram":
        raise Onnx2EdgeError(f"--compress {value}: only with --format mlprogram")
    if value == "linear8":
        return value
    kind, _, bits = value.partition(":")
    if kind in ("palettize", "palettize-kmeans") and bits in ("1", "2", "3", "4", "6", "8"):
        if kind == "palettize-kmeans":
            try:
                import sklearn  # noqa: F401
            except ImportError:
                raise Onnx2EdgeError(
                    f"--compress {value}: k-means palettization needs scikit-learn "
                    "(pip install scikit-learn), or use palettize:N"
                ) from None
        return value
    raise Onnx2EdgeError(
        f"--compress {value}: use linear8, palettize:N or palettize-kmeans:N (N = 1, 2, 3, 4, 6, 8)"
    )
