"""Helpers shared by the MPS op modules and the emitter registry (`EMITTERS`, `@emitter`).

Op modules import this module and `..core` only, never each other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from ....ir import Node
from ....semantics.activations import mps_neuron
from ....semantics.fused import activation_of
from ..core import (
    Img,
    Layer,
    NeuronSpec,
    Refuse,
    swift_float,
    swift_string,
)

if TYPE_CHECKING:
    from ..lower import Lowering


def _static(lw: Lowering, name: str) -> tuple[int, int, int]:
    try:
        return lw.out_dims(name)
    except ValueError as e:
        raise Refuse(f"tensor '{name}' has no static shape; give --input-shape") from e


Emitter = Callable[["Lowering", Node], None]


EMITTERS: dict[str, Emitter] = {}


# Ops with no MPSNNGraph node: what would make the model convertible.
NO_NODE = {
    "Gather": "MPSNNGraph has no gather node: move the lookup out of the model (pre/post-processing)",
    "Transpose": "MPSNNGraph has no general transpose node: fold the permutation into the neighbouring weights or remove it",
    "LSTM": "MPSNNGraph has no recurrent nodes: run the LSTM with MPSRNNMatrixInferenceLayer or Core ML",
    "GRU": "MPSNNGraph has no recurrent nodes: run the GRU with MPSRNNMatrixInferenceLayer or Core ML",
    "RNN": "MPSNNGraph has no recurrent nodes: run it with MPSRNNMatrixInferenceLayer or Core ML",
    "LayerNormalization": "MPSNNGraph has no layer normalization node: use MPSGraph or Core ML for this model",
    "Where": "MPSNNGraph has no select node",
    "TopK": "MPSNNGraph has no top-k node: take the top k on the CPU after the graph",
    "NonMaxSuppression": "MPSNNGraph has no NMS node: run NMS on the CPU after the graph",
    "Cast": "MPSNNGraph images are floating point only: remove the Cast",
    "Erf": (
        "MPSNNGraph has no erf neuron (only GELU's x * 0.5 * (1 + erf(x / sqrt 2)) maps, "
        "to the geLU neuron)"
    ),
    "Min": "MPSNNGraph has no element-wise min node",
    "Max": "MPSNNGraph has no element-wise max node",
    "DepthToSpace": "MPSNNGraph has no depth-to-space node",
    "SpaceToDepth": "MPSNNGraph has no space-to-depth node",
}


HEAVY_OPS = {
    "Conv", "ConvTranspose", "Gemm", "MatMul", "MaxPool", "AveragePool", "GlobalAveragePool",
    "GlobalMaxPool",
}  # fmt: skip


MATMUL_OF_ACTIVATIONS = (
    "MatMul of two run-time tensors (attention-style); MPSNNGraph multiplies activations only "
    "by constant weights: use MPSGraph or Core ML for this model"
)


def emitter(*ops: str) -> Callable[[Emitter], Emitter]:
    def deco(fn: Emitter) -> Emitter:
        for op in ops:
            EMITTERS[op] = fn
        return fn

    return deco


def _padding(
    lw: Lowering,
    node: Node,
    pads: list[int],
    out: tuple[int, int, int],
    edge: str,
    zero_pad: bool = False,
) -> str:
    top, left, bottom, right = pads[0], pads[1], pads[2], pads[3]
    extra = ", countsPadding: true" if zero_pad else ""
    return (
        f"ONNXPadding(top: {top}, left: {left}, bottom: {bottom}, right: {right}, "
        f"height: {out[1]}, width: {out[2]}, edgeMode: .{edge}{extra})"
    )


def _fused_neuron(node: Node, comment: list[str]) -> NeuronSpec | None:
    """The neuron of an o2e.<Op>Act node (the shared fuse_activation pass, run with MPS's
    options by backend.py: only activations with an MPSCNNNeuronType, so the table's `mps`
    column always has one here), noted in the layer's comment; None for a plain node."""
    act = activation_of(node)
    if act is None:
        return None
    spec = mps_neuron(act)
    assert spec is not None, f"{act.op} fused although MPS has no neuron for it"
    comment.append(f"+ {act.op} (fused as fusedNeuronDescriptor .{spec[0]})")
    return spec


def _conv_weights_source(
    lw: Lowering,
    node: Node,
    label: str,
    comment: list[str],
    kind: str,
    w: np.ndarray,
    b: np.ndarray,
    desc: str,
    spec: NeuronSpec | None,
    layout: str,
    float32_only: bool = False,
) -> str:
    """`float32_only`: the kernel takes float32 weights only (MPSCNNConvolutionTranspose,
    MPSCNNConvolution.h), so `--fp16` does not apply to this layer."""
    dtype = np.dtype(np.float32) if float32_only else lw.blob.weight_dtype
    woff, went = lw.blob.add(w, dtype=dtype)
    boff, bent = lw.blob.add(b.astype(np.float32))
    went["layout"] = layout
    lw.blob.layer(
        label,
        [node.name] + [c.split("'")[1] for c in comment[1:] if "'" in c],
        kind,
        {"weights": went, "bias": bent},
    )
    neuron = lw.neuron_expr(spec) if spec else "nil"
    return (
        f"ConvolutionWeights(\n        parameters, label: {swift_string(label)},\n"
        f"        descriptor: {desc},\n"
        f"        weightsOffset: {woff}, biasOffset: {boff},\n        neuron: {neuron}"
        + (", weightsDataType: .float32)" if float32_only and lw.blob.fp16 else ")")
    )


def _neuron_layer(lw: Lowering, node: Node, x: Img, spec: NeuronSpec, out: str) -> None:
    var = lw.fresh(node.name or node.outputs[0])
    t, a, b, c = spec
    simple = {
        "reLU": f"MPSCNNNeuronReLUNode(source: {x.var}, a: {swift_float(a)})",
        "reLUN": f"MPSCNNNeuronReLUNNode(source: {x.var}, a: {swift_float(a)}, b: {swift_float(b)})",
        "sigmoid": f"MPSCNNNeuronSigmoidNode(source: {x.var})",
        "tanH": f"MPSCNNNeuronTanHNode(source: {x.var}, a: {swift_float(a)}, b: {swift_float(b)})",
    }
    expr = (
        simple.get(t)
        or f"MPSCNNNeuronNode(\n    source: {x.var},\n    descriptor: {lw.neuron_expr(spec)})"
    )
    lw.emit(
        var,
        [f"ONNX node '{node.name}' ({node.op_type})"],
        [f"let {var} = {expr}"],
        out,
        Img(f"{var}.resultImage", x.c, x.h, x.w, x.flat_of),
    )


def _channel_affine(
    lw: Lowering,
    node: Node,
    x: Img,
    scale: np.ndarray,
    shift: np.ndarray,
    comment: list[str],
    kind: str,
) -> None:
    """y = scale[c] * x + shift[c] as a 1x1 depthwise convolution (weights = scale)."""
    y, spec = node.outputs[0], _fused_neuron(node, comment)
    var = lw.fresh(node.name or node.outputs[0])
    desc = (
        f"convolutionDescriptor(\n            depthwise: true, kernel: (1, 1), "
        f"channels: ({x.c}, {x.c}), stride: (1, 1), dilation: (1, 1))"
    )
    src = _conv_weights_source(
        lw, node, var, comment, kind, scale.reshape(x.c, 1, 1), shift, desc, spec, "OHW"
    )
    lines = [
        f"let {var} = MPSCNNConvolutionNode(\n    source: {x.var},\n    weights: {src})",
        f"{var}.paddingPolicy = ONNXPadding(top: 0, left: 0, bottom: 0, right: 0, height: {x.h}, width: {x.w}, edgeMode: .zero)",
    ]
    lw.emit(var, comment, lines, y, Img(f"{var}.resultImage", x.c, x.h, x.w, x.flat_of))


def _selection_conv(
    lw: Lowering, node: Node, x: Img, rows: list[int], n_out: int, base: str, why: str
) -> str:
    """A 1x1 convolution whose output channel j copies input channel rows[j] (weight 1, the
    others 0; rows[j] = -1 leaves channel j at 0). MPSNNGraph has no channel-slice node; with
    finite inputs the sums are exact (x * 1 + 0 * others), an Inf/NaN in a channel not
    selected also reaches the result through 0 * x. Returns the node variable."""
    w = np.zeros((n_out, 1, 1, x.c))
    for j, r in enumerate(rows):
        if r >= 0:
            w[j, 0, 0, r] = 1.0
    var = lw.fresh(base)
    desc = (
        f"convolutionDescriptor(\n            depthwise: false, kernel: (1, 1), "
        f"channels: ({x.c}, {n_out}), stride: (1, 1), dilation: (1, 1), groups: 1)"
    )
    comment = [f"ONNX node '{node.name}' ({node.op_type}: {why}, a 1x1 selection convolution)"]
    src = _conv_weights_source(
        lw, node, var, comment, "channel selection", w, np.zeros(n_out), desc, None, "OHWI"
    )
    lines = [
        f"let {var} = MPSCNNConvolutionNode(\n    source: {x.var},\n    weights: {src})",
        f"{var}.paddingPolicy = ONNXPadding(top: 0, left: 0, bottom: 0, right: 0, height: {x.h}, width: {x.w}, edgeMode: .zero)",
    ]
    lw.layers.append(Layer(var, comment, lines))
    return var


def _crop(
    lw: Lowering, node: Node, x: Img, start: tuple[int, int], step: tuple[int, int],
    out_hw: tuple[int, int], base: str,
) -> str:  # fmt: skip
    """Rows/columns start + k * step of `x` as a 1x1 max pooling (one value per window, so
    exact) with stride = step; the ONNXPadding policy puts window 0 at `start` (negative pads)."""
    var = lw.fresh(base)
    lines = [
        f"let {var} = MPSCNNPoolingMaxNode(\n    source: {x.var}, kernelWidth: 1, kernelHeight: 1, "
        f"strideInPixelsX: {step[1]}, strideInPixelsY: {step[0]})",
        f"{var}.paddingPolicy = ONNXPadding(top: {-start[0]}, left: {-start[1]}, bottom: 0, "
        f"right: 0, height: {out_hw[0]}, width: {out_hw[1]}, edgeMode: .clamp)",
    ]
    comment = [
        f"ONNX node '{node.name}' ({node.op_type} of rows {start[0]}::{step[0]}, columns "
        f"{start[1]}::{step[1]}: a 1x1 max pooling, stride = step, window 0 at the start)"
    ]
    lw.layers.append(Layer(var, comment, lines))
    return var


def _scalar(lw: Lowering, name: str) -> float | None:
    v = lw.g.const(name)
    return float(v.reshape(-1)[0]) if v is not None and v.size == 1 else None
