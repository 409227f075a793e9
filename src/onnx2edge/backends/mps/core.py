"""The MPS lowering's shared vocabulary: refusals, images, layers, the lowered result, Swift
literals. A leaf module (cpu.py and the op modules import it; it imports neither).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ...ir import Node
from ...semantics.records import reduced_axes
from ..refusal import Refusal
from .params import ParamBlob

if TYPE_CHECKING:
    from .lower import Lowering


class Refuse(Exception):
    """This node has no MPSNNGraph equivalent here; the message says what would."""


@dataclass
class Img:
    """An ONNX tensor held in an MPSImage: `var` is the Swift MPSNNImageNode expression."""

    var: str
    c: int
    h: int
    w: int
    # A [1, C*H*W] ONNX view (Flatten/Reshape) of a C x H x W image, in ONNX's CHW order.
    flat_of: tuple[int, int, int] | None = None


@dataclass
class Layer:
    var: str
    comment: list[str]
    lines: list[str]


@dataclass
class GPUSegment:
    """One MPSNNGraph of a segmented plan: segments run in the order of `index` (even: Swift on
    the CPU, odd: a GPU graph), each reading only what earlier ones produced."""

    index: int
    layers: list[Layer] = field(default_factory=list)
    env: dict[str, Img] = field(default_factory=dict)  # tensor -> image node of this graph
    # Source images made from earlier segments' tensors (onnx name, swift var, image); the
    # first graph's image graph inputs and CPU-head uploads are `Lowered.inputs` / `uploads`.
    sources: list[tuple[str, str, Img]] = field(default_factory=list)
    # Tensors a later segment reads (the CPU, or a later graph): exported result images.
    exports: dict[str, Img] = field(default_factory=dict)
    outputs: list[tuple[str, Img]] = field(default_factory=list)  # ONNX outputs it computes
    cpu_reads: list[str] = field(default_factory=list)  # exports the CPU reads (copied out)


@dataclass
class Lowered:
    layers: list[Layer]
    inputs: list[tuple[str, str, Img]]  # (onnx name, swift var, image)
    outputs: list[tuple[str, Img]]  # ONNX graph outputs, in order
    blob: ParamBlob
    refusals: list[Refusal] = field(default_factory=list)
    # The CPU tail (cpu.py): graph inputs that are not images (onnx name, swift var, shape),
    # GPU images it reads back (onnx name, swift var, image), its Swift statements, the
    # ONNX outputs it produces (onnx name -> swift var), and where each node runs.
    cpu_inputs: list[tuple[str, str, list[int]]] = field(default_factory=list)
    gpu_reads: list[tuple[str, str, Img]] = field(default_factory=list)
    cpu_lines: list[str] = field(default_factory=list)
    # The CPU head: statements run before the graph (constants, non-image inputs and nodes
    # that only need them) and its image-shaped results the graph reads as source images.
    head_lines: list[str] = field(default_factory=list)
    uploads: list[tuple[str, str, Img]] = field(default_factory=list)
    head_vars: dict[str, str] = field(default_factory=dict)  # uploaded tensor -> CPUTensor var
    cpu_outputs: dict[str, str] = field(default_factory=dict)
    placement: list[tuple[str, str, str]] = field(default_factory=list)
    # The segmented plan, set when there is more than one GPU graph (else the fields above
    # describe head -> graph -> tail): the GPU graphs in order and each CPU segment's Swift
    # statements by segment index (0 = before the first graph, 2k = after graph 2k-1).
    gpu_segments: list[GPUSegment] = field(default_factory=list)
    cpu_segments: dict[int, list[str]] = field(default_factory=dict)
    # A CPU-computed tensor a graph reads as a source image -> its CPUTensor var.
    source_values: dict[str, str] = field(default_factory=dict)

    @property
    def output(self) -> tuple[str, Img]:
        return self.outputs[0]


SWIFT_KEYWORDS = {
    "associatedtype", "class", "deinit", "enum", "extension", "fileprivate", "func", "import",
    "init", "inout", "internal", "let", "open", "operator", "private", "protocol", "public",
    "rethrows", "static", "struct", "subscript", "typealias", "var", "break", "case", "continue",
    "default", "defer", "do", "else", "fallthrough", "for", "guard", "if", "in", "repeat",
    "return", "switch", "where", "while", "as", "catch", "false", "is", "nil", "super", "self",
    "Self", "throw", "throws", "true", "try", "device", "graph", "parameters", "nodes", "queue",
}  # fmt: skip


def swift_ident(name: str, *, upper: bool = False) -> str:
    """A Swift identifier from an ONNX name: non-word characters become '_'."""
    s = re.sub(r"[^0-9A-Za-z_]+", "_", name).strip("_") or "node"
    if upper:
        s = "".join(p[:1].upper() + p[1:] for p in s.split("_") if p) or "Model"
    if s[0].isdigit():
        s = ("M" if upper else "n") + s
    if s in SWIFT_KEYWORDS:
        s += "_"
    return s


def swift_float(v: float) -> str:
    v = float(v)
    if np.isinf(v):
        return "Float.greatestFiniteMagnitude" if v > 0 else "-Float.greatestFiniteMagnitude"
    return repr(float(np.float32(v)))


def swift_string(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _ints(v: Sequence[int] | None, n: int, default: int) -> list[int]:
    return [int(x) for x in v] if v is not None else [default] * n


# Activations MPS can run as a neuron (MPSCNNNeuronType.h); value: (type, a, b, c) or a
# function of the node returning it. Fusable into a convolution's fusedNeuronDescriptor.
NeuronSpec = tuple[str, float, float, float]


def image_dims(shape: tuple[int, ...]) -> tuple[int, int, int]:
    """ONNX NCHW (batch 1) or [1, K] -> (featureChannels, height, width) of an MPSImage."""
    if len(shape) == 4 and shape[0] == 1:
        return int(shape[1]), int(shape[2]), int(shape[3])
    if len(shape) == 2 and shape[0] == 1:
        return int(shape[1]), 1, 1
    raise Refuse(
        f"tensor shape {list(shape)} is neither [1, C, H, W] nor [1, K]; an MPSImage holds one "
        "width x height x channels image per batch item: fix the batch to 1 (--input-shape)"
    )


def _reduce_axes(lw: Lowering, node: Node, rank: int) -> list[int] | None:
    """The reduced axes (non-negative, sorted; [] with noop_with_empty_axes), as
    semantics.records.reduced_axes reads them; axes computed at run time refuse."""
    axes = reduced_axes(node, lw.g, rank)
    if axes is None:
        lw.const(node, 1, "axes")  # raises the refusal naming the computed input
    return axes
