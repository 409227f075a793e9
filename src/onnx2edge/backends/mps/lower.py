"""ONNX IR -> MPSNNGraph nodes, as Swift statements plus a parameter blob.

One emitter per ONNX op (the `EMITTERS` table). An emitter either appends `Layer`s (Swift
statements building one graph node, commented with the ONNX node(s) they come from) or raises
`Refuse` with what would make the node convertible; `lower(graph, check_only=True)` collects
every refusal so `unsupported()` can list them all at once.

Facts used here, from Apple's MPS headers (MPSCNNConvolution.h, MPSNNGraphNodes.h,
MPSCNNPooling.h, MPSNeuralNetworkTypes.h):
- MPSImage keeps feature channels in slices of 4; graph nodes see NCHW as width x height x C
  (batch 1).
- Convolution weights are OHWI; depthwise weights are [C][kH][kW] (channel multiplier 1);
  grouped convolution needs a multiple of 4 channels per group.
- A fully connected layer convolves a W x H x C image with Weights[No][W][H][C] (width
  before height); ONNX flattens C, H, W, so its Gemm weights are re-ordered.
- Convolution transpose applies its weights as-is over the zero-stuffed source; ONNX's
  ConvTranspose is that with the kernel rotated 180 degrees and in/out swapped.
- The window of destination pixel x starts at x * stride + offset.x - (kernelWidth >> 1);
  the generated ONNXPadding policy sets offset so that this equals x * stride - padLeft.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ...ir import Graph, Node
from .params import ParamBlob


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
class Lowered:
    layers: list[Layer]
    inputs: list[tuple[str, str, Img]]  # (onnx name, swift var, image)
    output: tuple[str, Img]
    blob: ParamBlob
    refusals: list[str] = field(default_factory=list)


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


class Lowering:
    def __init__(self, graph: Graph, *, fp16: bool) -> None:
        self.g = graph
        self.blob = ParamBlob(fp16=fp16)
        self.env: dict[str, Img] = {}
        self.layers: list[Layer] = []
        self.absorbed: set[int] = set()  # ids of nodes folded into an earlier layer
        self.used_names: set[str] = set()
        self.poisoned: set[str] = set()

    # -- helpers ----------------------------------------------------------------------------
    def label(self, node: Node) -> str:
        return f"node '{node.name or node.outputs[0]}' (op {node.op_type}, opset {self.g.opset})"

    def fresh(self, base: str) -> str:
        name = swift_ident(base)
        if name in self.used_names:
            i = 2
            while f"{name}_{i}" in self.used_names:
                i += 1
            name = f"{name}_{i}"
        self.used_names.add(name)
        return name

    def img(self, name: str) -> Img:
        if name not in self.env:
            raise Refuse(f"input '{name}' is not an image this backend produced")
        return self.env[name]

    def const(self, node: Node, index: int, what: str) -> np.ndarray:
        if index >= len(node.inputs) or not node.inputs[index]:
            raise Refuse(f"{what} is missing")
        v = self.g.const(node.inputs[index])
        if v is None:
            raise Refuse(
                f"{what} ('{node.inputs[index]}') is computed at run time; MPSNNGraph takes "
                "weights only from data sources: make it a constant initializer"
            )
        return v

    def opt_const(self, node: Node, index: int) -> np.ndarray | None:
        if index >= len(node.inputs) or not node.inputs[index]:
            return None
        v = self.g.const(node.inputs[index])
        if v is None:
            raise Refuse(f"input '{node.inputs[index]}' must be a constant")
        return v

    def out_dims(self, name: str) -> tuple[int, int, int]:
        return image_dims(self.g.shape_of(name))

    def sole_consumer(self, tensor: str) -> Node | None:
        """The one node reading `tensor`, when nothing else (nor a graph output) does."""
        if tensor in self.g.outputs:
            return None
        users = self.g.consumers(tensor)
        if len(users) != 1 or list(users[0].inputs).count(tensor) != 1:
            return None
        return users[0]

    def emit(self, var: str, comment: list[str], lines: list[str], out: str, img: Img) -> None:
        self.layers.append(Layer(var, comment, lines))
        self.env[out] = img

    def neuron_spec(self, node: Node) -> NeuronSpec | None:
        """The MPSCNNNeuronType for an activation node, or None if it is not one."""
        op = node.op_type
        if op == "Relu":
            return ("reLU", 0, 0, 0)
        if op == "LeakyRelu":
            return ("reLU", node.attr("alpha", 0.01), 0, 0)
        if op == "Sigmoid":
            return ("sigmoid", 0, 0, 0)
        if op == "Tanh":
            return ("tanH", 1, 1, 0)
        if op == "Elu":
            return ("ELU", node.attr("alpha", 1.0), 0, 0)
        if op == "HardSigmoid":
            return ("hardSigmoid", node.attr("alpha", 0.2), node.attr("beta", 0.5), 0)
        if op == "Softplus":
            return ("softPlus", 1, 1, 0)
        if op == "Softsign":
            return ("softSign", 0, 0, 0)
        if op == "Abs":
            return ("absolute", 0, 0, 0)
        if op == "Neg":
            return ("linear", -1, 0, 0)
        # MPSCNNNeuronType.h: exponential / logarithm use base e when c == -1.
        if op == "Exp":
            return ("exponential", 1, 0, -1)
        if op == "Log":
            return ("logarithm", 1, 0, -1)
        if op == "Gelu" and node.attr("approximate", "none") == "none":
            return ("geLU", 0, 0, 0)
        if op == "Pow":
            p = self.g.const(node.inputs[1])
            if p is not None and p.size == 1:
                return ("power", 1, 0, float(p.reshape(-1)[0]))
            return None
        if op == "Clip":
            lo, hi = self.clip_bounds(node)
            if lo == 0 and np.isfinite(hi):
                return ("reLUN", 0, hi, 0)  # min(max(x, 0), b)
            if lo == 0 and not np.isfinite(hi):
                return ("reLU", 0, 0, 0)
            return None
        return None

    def clip_bounds(self, node: Node) -> tuple[float, float]:
        if self.g.opset < 11:
            return float(node.attr("min", -np.inf)), float(node.attr("max", np.inf))
        lo = self.opt_const(node, 1)
        hi = self.opt_const(node, 2)
        return (
            float(lo.reshape(-1)[0]) if lo is not None else -np.inf,
            float(hi.reshape(-1)[0]) if hi is not None else np.inf,
        )

    def neuron_expr(self, spec: NeuronSpec) -> str:
        t, a, b, c = spec
        return (
            f"MPSNNNeuronDescriptor.cnnNeuronDescriptor(with: .{t}, a: {swift_float(a)}, "
            f"b: {swift_float(b)}, c: {swift_float(c)})"
        )

    def fuse_after(
        self, tensor: str, comment: list[str], *, bn: bool
    ) -> tuple[str, NeuronSpec | None, Node | None]:
        """Look past `tensor` for a BatchNormalization (if `bn`) then an activation to absorb.

        Returns the tensor the fused layer produces, the neuron to fuse, and the BN node.
        """
        bn_node = None
        nxt = self.sole_consumer(tensor)
        if (
            bn
            and nxt is not None
            and nxt.op_type == "BatchNormalization"
            and len([o for o in nxt.outputs if o]) == 1
        ):
            if all(self.g.const(i) is not None for i in nxt.inputs[1:5]):
                bn_node = nxt
                self.absorbed.add(id(nxt))
                comment.append(f"+ '{nxt.name}' (BatchNormalization, folded into the weights)")
                tensor = nxt.outputs[0]
                nxt = self.sole_consumer(tensor)
        spec = None
        if nxt is not None and nxt.op_type != "PRelu":
            try:
                spec = self.neuron_spec(nxt)
            except Refuse:
                spec = None
            if spec is not None:
                self.absorbed.add(id(nxt))
                comment.append(
                    f"+ '{nxt.name}' ({nxt.op_type}, fused as fusedNeuronDescriptor .{spec[0]})"
                )
                tensor = nxt.outputs[0]
        return tensor, spec, bn_node

    def bn_fold(
        self, bn: Node, w: np.ndarray, b: np.ndarray, axis: int
    ) -> tuple[np.ndarray, np.ndarray]:
        gamma, beta, mean, var = (self.g.const(i).astype(np.float64) for i in bn.inputs[1:5])  # type: ignore[union-attr]
        scale = gamma / np.sqrt(var + bn.attr("epsilon", 1e-5))
        shape = [1] * w.ndim
        shape[axis] = -1
        return (w * scale.reshape(shape)), (b - mean) * scale + beta

    # -- driver -----------------------------------------------------------------------------
    def run(self, check_only: bool) -> Lowered:
        refusals: list[str] = []
        inputs: list[tuple[str, str, Img]] = []
        for name in self.g.inputs:
            try:
                c, h, w = self.out_dims(name)
            except Refuse as e:
                refusals.append(f"graph input '{name}': {e}")
                self.poisoned.add(name)
                continue
            var = self.fresh(name)
            img = Img(var, c, h, w)
            self.env[name] = img
            inputs.append((name, var, img))
        if len(self.g.outputs) != 1:
            refusals.append(
                f"graph has {len(self.g.outputs)} outputs ({', '.join(self.g.outputs)}); the generated "
                "MPSNNGraph has one result image: split the model or keep one output"
            )
        for node in self.g.nodes:
            if id(node) in self.absorbed:
                continue
            emitter = EMITTERS.get(node.op_type) if node.domain in ("", "ai.onnx") else None
            # Downstream of a refused node only ops with no MPS node at all are reported
            # (their refusal does not depend on the inputs); the rest would only echo it.
            if emitter is not None and any(i in self.poisoned for i in node.inputs if i):
                self.poisoned.update(o for o in node.outputs if o)
                if node.op_type == "MatMul" and self.g.const(node.inputs[1]) is None:
                    refusals.append(f"{self.label(node)}: {MATMUL_OF_ACTIVATIONS}")
                continue
            try:
                if emitter is None:
                    raise Refuse(NO_NODE.get(node.op_type, "MPSNNGraph has no node for this op"))
                emitter(self, node)
            except Refuse as e:
                refusals.append(f"{self.label(node)}: {e}")
                self.poisoned.update(o for o in node.outputs if o)
        out_name = self.g.outputs[0] if self.g.outputs else ""
        if not refusals and out_name not in self.env:
            refusals.append(f"graph output '{out_name}' is not produced by a convertible node")
        if not refusals and out_name in self.g.inputs:
            refusals.append(f"graph output '{out_name}' is a graph input; there is nothing to run")
        if refusals and not check_only:
            raise Refuse("; ".join(refusals))
        out = (out_name, self.env.get(out_name, Img("", 0, 0, 0)))
        return Lowered(self.layers, inputs, out, self.blob, refusals)


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


def _static(lw: Lowering, name: str) -> tuple[int, int, int]:
    try:
        return lw.out_dims(name)
    except ValueError as e:
        raise Refuse(f"tensor '{name}' has no static shape; give --input-shape") from e


# ----------------------------------------------------------------------------------------
# Emitters
# ----------------------------------------------------------------------------------------

Emitter = Callable[[Lowering, Node], None]
EMITTERS: dict[str, Emitter] = {}

# Ops with no MPSNNGraph node: what would make the model convertible.
NO_NODE = {
    "Gather": "MPSNNGraph has no gather node: move the lookup out of the model (pre/post-processing)",
    "Transpose": "MPSNNGraph has no general transpose node: fold the permutation into the neighbouring weights or remove it",
    "Slice": "MPSNNGraph has no slice node: split the model at this point or slice on the CPU",
    "Split": "MPSNNGraph has no split node: split the model at this point",
    "LSTM": "MPSNNGraph has no recurrent nodes: run the LSTM with MPSRNNMatrixInferenceLayer or Core ML",
    "GRU": "MPSNNGraph has no recurrent nodes: run the GRU with MPSRNNMatrixInferenceLayer or Core ML",
    "RNN": "MPSNNGraph has no recurrent nodes: run it with MPSRNNMatrixInferenceLayer or Core ML",
    "LayerNormalization": "MPSNNGraph has no layer normalization node: use MPSGraph or Core ML for this model",
    "Where": "MPSNNGraph has no select node",
    "TopK": "MPSNNGraph has no top-k node: take the top k on the CPU after the graph",
    "NonMaxSuppression": "MPSNNGraph has no NMS node: run NMS on the CPU after the graph",
    "Cast": "MPSNNGraph images are floating point only: remove the Cast",
    "Erf": "MPSNNGraph has no erf neuron: use Gelu (opset 20) or a tanh approximation",
    "Min": "MPSNNGraph has no element-wise min node",
    "Max": "MPSNNGraph has no element-wise max node",
    "DepthToSpace": "MPSNNGraph has no depth-to-space node",
    "SpaceToDepth": "MPSNNGraph has no space-to-depth node",
}


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


def _auto_pads(
    node: Node,
    in_hw: tuple[int, int],
    out_hw: tuple[int, int],
    k: list[int],
    s: list[int],
    d: list[int],
) -> list[int]:
    auto = node.attr("auto_pad", "NOTSET")
    if isinstance(auto, bytes):
        auto = auto.decode()
    if auto in ("NOTSET", ""):
        return _ints(node.attr("pads"), 4, 0)
    if auto == "VALID":
        return [0, 0, 0, 0]
    pads = [0, 0, 0, 0]
    for i in range(2):
        total = max((out_hw[i] - 1) * s[i] + (k[i] - 1) * d[i] + 1 - in_hw[i], 0)
        small = total // 2
        pads[i], pads[i + 2] = (
            (small, total - small) if auto == "SAME_UPPER" else (total - small, small)
        )
    return pads


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
) -> str:
    woff, went = lw.blob.add(w, dtype=lw.blob.weight_dtype)
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
        f"        weightsOffset: {woff}, biasOffset: {boff},\n        neuron: {neuron})"
    )


@emitter("Conv")
def _conv(lw: Lowering, node: Node) -> None:
    x = lw.img(node.inputs[0])
    if x.flat_of:
        raise Refuse("input is a flattened tensor; convolutions need an image")
    w = lw.const(node, 1, "weight").astype(np.float64)
    if w.ndim != 4:
        raise Refuse(f"{w.ndim - 2}-D convolution; MPSCNNConvolution is 2-D only")
    b = lw.opt_const(node, 2)
    b = np.zeros(w.shape[0]) if b is None else b.astype(np.float64)
    o, ig, kh, kw = w.shape
    group = int(node.attr("group", 1))
    s = _ints(node.attr("strides"), 2, 1)
    d = _ints(node.attr("dilations"), 2, 1)
    comment = [f"ONNX node '{node.name}' (Conv)"]
    y, spec, bn = lw.fuse_after(node.outputs[0], comment, bn=True)
    if bn is not None:
        w, b = lw.bn_fold(bn, w, b, axis=0)
    oc, oh, ow = _static(lw, y)
    pads = _auto_pads(node, (x.h, x.w), (oh, ow), [kh, kw], s, d)
    depthwise = group > 1 and group == x.c and ig == 1
    if depthwise and o != x.c:
        raise Refuse(
            f"depthwise convolution with channel multiplier {o // x.c}; "
            "MPSCNNDepthWiseConvolutionDescriptor supports multiplier 1 only"
        )
    if group > 1 and not depthwise and ((x.c // group) % 4 or (o // group) % 4):
        raise Refuse(
            f"grouped convolution with {x.c // group} input / {o // group} output channels per group; "
            "MPSCNNConvolutionDescriptor.groups needs a multiple of 4 channels per group"
        )
    var = lw.fresh(node.name or node.outputs[0])
    if depthwise:
        weights = w[:, 0, :, :]  # [C][kH][kW]
        groups_arg, layout = "", "OHW"
    else:
        weights = w.transpose(0, 2, 3, 1)  # OIHW -> OHWI
        groups_arg, layout = f", groups: {group}", "OHWI"
    desc = (
        f"convolutionDescriptor(\n            depthwise: {str(depthwise).lower()}, kernel: ({kw}, {kh}), channels: ({x.c}, {o}), "
        f"stride: ({s[1]}, {s[0]}), dilation: ({d[1]}, {d[0]}){groups_arg})"
    )
    src = _conv_weights_source(
        lw, node, var, comment, "convolution", weights, b, desc, spec, layout
    )
    lines = [
        f"let {var} = MPSCNNConvolutionNode(\n    source: {x.var},\n    weights: {src})",
        f"{var}.paddingPolicy = {_padding(lw, node, pads, (oc, oh, ow), 'zero')}",
    ]
    lw.emit(var, comment, lines, y, Img(f"{var}.resultImage", oc, oh, ow))


@emitter("ConvTranspose")
def _conv_transpose(lw: Lowering, node: Node) -> None:
    x = lw.img(node.inputs[0])
    w = lw.const(node, 1, "weight").astype(np.float64)
    if w.ndim != 4:
        raise Refuse(
            f"{w.ndim - 2}-D transposed convolution; MPSCNNConvolutionTranspose is 2-D only"
        )
    if int(node.attr("group", 1)) != 1:
        raise Refuse("grouped ConvTranspose is not supported by this backend; use group=1")
    if _ints(node.attr("dilations"), 2, 1) != [1, 1]:
        raise Refuse("dilated ConvTranspose has no MPSCNNConvolutionTranspose equivalent")
    b = lw.opt_const(node, 2)
    ci, o, kh, kw = w.shape
    b = np.zeros(o) if b is None else b.astype(np.float64)
    s = _ints(node.attr("strides"), 2, 1)
    comment = [f"ONNX node '{node.name}' (ConvTranspose)"]
    y, spec, bn = lw.fuse_after(node.outputs[0], comment, bn=True)
    if bn is not None:
        w, b = lw.bn_fold(bn, w, b, axis=1)
    oc, oh, ow = _static(lw, y)
    # Output size = (in - 1) * s + k - padBegin - padEnd + output_padding: recover the
    # leading pads from the attributes (or auto_pad), the trailing ones from the shape.
    auto = node.attr("auto_pad", "NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    pads = _ints(node.attr("pads"), 4, 0)
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        for i, (n_in, n_out, k) in enumerate(((x.h, oh, kh), (x.w, ow, kw))):
            total = max((n_in - 1) * s[i] + k - n_out, 0)
            first = total // 2 if auto == "SAME_UPPER" else total - total // 2
            pads[i], pads[i + 2] = first, total - first
    # MPS applies the weights as-is over the zero-stuffed source (MPSCNNConvolution.h): rotate
    # ONNX's kernel by 180 degrees and swap in/out: [I][O][kH][kW] -> OHWI flipped.
    weights = w.transpose(1, 2, 3, 0)[:, ::-1, ::-1, :]
    var = lw.fresh(node.name or node.outputs[0])
    desc = (
        f"convolutionDescriptor(\n            depthwise: false, kernel: ({kw}, {kh}), "
        f"channels: ({ci}, {o}), stride: ({s[1]}, {s[0]}), dilation: (1, 1), groups: 1)"
    )
    src = _conv_weights_source(
        lw,
        node,
        var,
        comment,
        "convolution transpose",
        weights,
        b,
        desc,
        spec,
        "OHWI (rotated 180)",
    )
    lines = [
        f"let {var} = MPSCNNConvolutionTransposeNode(\n    source: {x.var}, convolutionGradientState: nil,\n    weights: {src})",
        f"{var}.paddingPolicy = {_padding(lw, node, pads, (oc, oh, ow), 'zero')}",
    ]
    lw.emit(var, comment, lines, y, Img(f"{var}.resultImage", oc, oh, ow))


@emitter("MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool")
def _pool(lw: Lowering, node: Node) -> None:
    x = lw.img(node.inputs[0])
    if x.flat_of:
        raise Refuse("input is a flattened tensor; pooling needs an image")
    if node.op_type == "MaxPool" and len([o for o in node.outputs if o]) > 1:
        raise Refuse("MaxPool indices output has no MPS equivalent; drop the second output")
    oc, oh, ow = _static(lw, node.outputs[0])
    glob = node.op_type.startswith("Global")
    if glob:
        k, s, pads = [x.h, x.w], [1, 1], [0, 0, 0, 0]
    else:
        k = _ints(node.attr("kernel_shape"), 2, 1)
        if len(k) != 2:
            raise Refuse(f"{len(k)}-D pooling; MPS pooling is 2-D only")
        s = _ints(node.attr("strides"), 2, 1)
        if _ints(node.attr("dilations"), 2, 1) != [1, 1]:
            raise Refuse("dilated pooling is not supported by this backend")
        pads = _auto_pads(node, (x.h, x.w), (oh, ow), k, s, [1, 1])
    is_max = "Max" in node.op_type
    cls = "MPSCNNPoolingMaxNode" if is_max else "MPSCNNPoolingAverageNode"
    counts_pad = not is_max and not glob and bool(node.attr("count_include_pad", 0)) and any(pads)
    if counts_pad and (pads[0] != pads[2] or pads[1] != pads[3]):
        raise Refuse(
            "count_include_pad with asymmetric pads: MPSCNNPoolingAverage.zeroPadSize is symmetric"
        )
    var = lw.fresh(node.name or node.outputs[0])
    # Max pooling ignores the padding (ONNX pads with -inf): .clamp reads edge pixels, which
    # are inside the window anyway. Average pooling with .clamp divides by the pixels inside
    # the source (count_include_pad=0) or, with zeroPadSize = pads, inside source + pads.
    lines = [
        f"let {var} = {cls}(\n    source: {x.var}, kernelWidth: {k[1]}, kernelHeight: {k[0]}, "
        f"strideInPixelsX: {s[1]}, strideInPixelsY: {s[0]})",
        f"{var}.paddingPolicy = {_padding(lw, node, pads, (oc, oh, ow), 'clamp', counts_pad)}",
    ]
    lw.emit(
        var,
        [f"ONNX node '{node.name}' ({node.op_type})"],
        lines,
        node.outputs[0],
        Img(f"{var}.resultImage", oc, oh, ow),
    )


def _fully_connected(lw: Lowering, node: Node, x: Img, w: np.ndarray, b: np.ndarray) -> None:
    """`w` is [N, K] with K = C*H*W in ONNX (CHW) order."""
    n, k = w.shape
    comment = [f"ONNX node '{node.name}' ({node.op_type}, fully connected)"]
    y, spec, bn = lw.fuse_after(node.outputs[0], comment, bn=True)
    if bn is not None:
        w, b = lw.bn_fold(bn, w, b, axis=0)
    c, h, wd = x.flat_of or (x.c, x.h, x.w)
    if c * h * wd != k:
        raise Refuse(f"weight has {k} inputs, the source image {c}x{h}x{wd}")
    # MPSCNNFullyConnected: Weights[No][SrcW][SrcH][Ni]; ONNX flattened C, H, W.
    weights = w.reshape(n, c, h, wd).transpose(0, 3, 2, 1)
    var = lw.fresh(node.name or node.outputs[0])
    desc = (
        f"convolutionDescriptor(\n            depthwise: false, kernel: ({wd}, {h}), "
        f"channels: ({c}, {n}), stride: (1, 1), dilation: (1, 1), groups: 1)"
    )
    src = _conv_weights_source(
        lw, node, var, comment, "fully connected", weights, b, desc, spec, "OWHI"
    )
    lines = [f"let {var} = MPSCNNFullyConnectedNode(\n    source: {x.var},\n    weights: {src})"]
    lw.emit(var, comment, lines, y, Img(f"{var}.resultImage", n, 1, 1))


@emitter("Gemm")
def _gemm(lw: Lowering, node: Node) -> None:
    x = lw.img(node.inputs[0])
    if node.attr("transA", 0):
        raise Refuse("transA=1 transposes the activation; MPSCNNFullyConnected needs transA=0")
    bmat = lw.const(node, 1, "B").astype(np.float64)
    w = bmat if node.attr("transB", 0) else bmat.T
    w = w * float(node.attr("alpha", 1.0))
    c = lw.opt_const(node, 2)
    bias = (
        np.zeros(w.shape[0])
        if c is None
        else np.broadcast_to(c.astype(np.float64).reshape(-1), (w.shape[0],))
    )
    _fully_connected(lw, node, x, w, bias * float(node.attr("beta", 1.0)))


@emitter("MatMul")
def _matmul(lw: Lowering, node: Node) -> None:
    if lw.g.const(node.inputs[1]) is None:
        raise Refuse(MATMUL_OF_ACTIVATIONS)
    x = lw.img(node.inputs[0])
    shape = lw.g.shape_of(node.inputs[0])
    if len(shape) != 2:
        raise Refuse(
            f"MatMul on a rank-{len(shape)} tensor; only [1, K] x [K, N] maps to MPSCNNFullyConnected"
        )
    b = lw.const(node, 1, "B").astype(np.float64)
    _fully_connected(lw, node, x, b.T, np.zeros(b.shape[1]))


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


@emitter(
    "Relu",
    "LeakyRelu",
    "Sigmoid",
    "Tanh",
    "Elu",
    "HardSigmoid",
    "Softplus",
    "Softsign",
    "Abs",
    "Neg",
    "Exp",
    "Log",
    "Gelu",
    "Pow",
    "Clip",
)
def _activation(lw: Lowering, node: Node) -> None:
    x = lw.img(node.inputs[0])
    spec = lw.neuron_spec(node)
    if spec is None:
        if node.op_type == "Clip":
            raise Refuse(
                "Clip with a lower bound other than 0 has no MPS neuron (ReLUN clamps to [0, b])"
            )
        if node.op_type == "Pow":
            raise Refuse(
                "Pow needs a constant scalar exponent (MPSCNNNeuronPower computes (a*x + b)^c)"
            )
        raise Refuse(
            "Gelu with approximate='tanh' has no MPS neuron (MPSCNNNeuronGeLU is the erf form)"
        )
    _neuron_layer(lw, node, x, spec, node.outputs[0])


@emitter("PRelu")
def _prelu(lw: Lowering, node: Node) -> None:
    x = lw.img(node.inputs[0])
    slope = lw.const(node, 1, "slope").astype(np.float32).reshape(-1)
    if slope.size not in (1, x.c):
        raise Refuse(f"slope of {slope.size} values; MPSCNNNeuronPReLU takes one per channel")
    slope = np.broadcast_to(slope, (x.c,))
    var = lw.fresh(node.name or node.outputs[0])
    off, ent = lw.blob.add(slope)
    lw.blob.layer(var, [node.name], "prelu", {"slope": ent})
    lines = [
        f"let {var} = MPSCNNNeuronPReLUNode(source: {x.var}, aData: parameters.data(offset: {off}, count: {x.c}))"
    ]
    lw.emit(
        var,
        [f"ONNX node '{node.name}' (PRelu)"],
        lines,
        node.outputs[0],
        Img(f"{var}.resultImage", x.c, x.h, x.w),
    )


@emitter("HardSwish")
def _hardswish(lw: Lowering, node: Node) -> None:
    # No HardSwish neuron: x * HardSigmoid(x; a = 1/6, b = 1/2), composed from two nodes.
    x = lw.img(node.inputs[0])
    gate = lw.fresh((node.name or node.outputs[0]) + "_gate")
    var = lw.fresh(node.name or node.outputs[0])
    lines = [
        f"let {gate} = MPSCNNNeuronHardSigmoidNode(source: {x.var}, a: {swift_float(1 / 6)}, b: 0.5)",
        f"let {var} = MPSNNMultiplicationNode(leftSource: {x.var}, rightSource: {gate}.resultImage)",
    ]
    lw.layers.append(
        Layer(gate, [f"ONNX node '{node.name}' (HardSwish = x * HardSigmoid(x)), gate"], lines[:1])
    )
    lw.emit(
        var,
        [f"ONNX node '{node.name}' (HardSwish), product"],
        lines[1:],
        node.outputs[0],
        Img(f"{var}.resultImage", x.c, x.h, x.w),
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
    y, spec, _ = lw.fuse_after(node.outputs[0], comment, bn=False)
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


@emitter("BatchNormalization")
def _batchnorm(lw: Lowering, node: Node) -> None:
    x = lw.img(node.inputs[0])
    if x.flat_of:
        raise Refuse("BatchNormalization of a flattened tensor")
    gamma, beta, mean, var = (
        lw.const(node, i, n).astype(np.float64)
        for i, n in enumerate(("scale", "B", "mean", "var"), 1)
    )
    scale = gamma / np.sqrt(var + node.attr("epsilon", 1e-5))
    comment = [
        f"ONNX node '{node.name}' (BatchNormalization, as a 1x1 depthwise convolution: scale and shift)"
    ]
    _channel_affine(lw, node, x, scale, beta - mean * scale, comment, "batch normalization")


@emitter("InstanceNormalization")
def _instancenorm(lw: Lowering, node: Node) -> None:
    x = lw.img(node.inputs[0])
    gamma = lw.const(node, 1, "scale").astype(np.float32)
    beta = lw.const(node, 2, "B").astype(np.float32)
    var = lw.fresh(node.name or node.outputs[0])
    goff, gent = lw.blob.add(gamma)
    boff, bent = lw.blob.add(beta)
    lw.blob.layer(var, [node.name], "instance normalization", {"gamma": gent, "beta": bent})
    eps = swift_float(node.attr("epsilon", 1e-5))
    lines = [
        f"let {var} = MPSCNNInstanceNormalizationNode(\n    source: {x.var},\n    dataSource: InstanceNormalizationParameters(\n"
        f"        parameters, label: {swift_string(var)}, channels: {x.c}, gammaOffset: {goff}, betaOffset: {boff}, epsilon: {eps}))"
    ]
    lw.emit(
        var,
        [f"ONNX node '{node.name}' (InstanceNormalization)"],
        lines,
        node.outputs[0],
        Img(f"{var}.resultImage", x.c, x.h, x.w),
    )


@emitter("LRN")
def _lrn(lw: Lowering, node: Node) -> None:
    x = lw.img(node.inputs[0])
    var = lw.fresh(node.name or node.outputs[0])
    # ONNX: x / (bias + alpha / size * sum(x^2))^beta -- MPSCNNCrossChannelNormalization's
    # formula with delta = bias.
    lines = [
        f"let {var} = MPSCNNCrossChannelNormalizationNode(source: {x.var}, kernelSize: {int(node.attr('size'))})",
        f"{var}.alpha = {swift_float(node.attr('alpha', 1e-4))}",
        f"{var}.beta = {swift_float(node.attr('beta', 0.75))}",
        f"{var}.delta = {swift_float(node.attr('bias', 1.0))}",
    ]
    lw.emit(
        var,
        [f"ONNX node '{node.name}' (LRN)"],
        lines,
        node.outputs[0],
        Img(f"{var}.resultImage", x.c, x.h, x.w),
    )


@emitter("Softmax", "LogSoftmax")
def _softmax(lw: Lowering, node: Node) -> None:
    x = lw.img(node.inputs[0])
    rank = len(lw.g.shape_of(node.inputs[0]))
    axis = int(node.attr("axis", -1 if lw.g.opset >= 13 else 1))
    axis = axis + rank if axis < 0 else axis
    spatial = x.h * x.w > 1
    over_channels = axis == 1 and (lw.g.opset >= 13 or not spatial or rank == 2)
    if x.flat_of and x.flat_of[1] * x.flat_of[2] > 1 or not over_channels:
        raise Refuse(
            f"softmax over axis {axis} of a rank-{rank} tensor; MPSCNNSoftMax normalizes over feature channels only"
        )
    cls = "MPSCNNSoftMaxNode" if node.op_type == "Softmax" else "MPSCNNLogSoftMaxNode"
    var = lw.fresh(node.name or node.outputs[0])
    lw.emit(
        var,
        [f"ONNX node '{node.name}' ({node.op_type})"],
        [f"let {var} = {cls}(source: {x.var})"],
        node.outputs[0],
        Img(f"{var}.resultImage", x.c, x.h, x.w, x.flat_of),
    )


@emitter("Flatten", "Reshape", "Squeeze", "Unsqueeze", "Identity", "Dropout")
def _reshape(lw: Lowering, node: Node) -> None:
    x = lw.img(node.inputs[0])
    if node.op_type in ("Identity", "Dropout"):
        lw.env[node.outputs[0]] = x
        return
    shape = lw.g.shape_of(node.outputs[0])
    c, h, w = x.flat_of or (x.c, x.h, x.w)
    if tuple(shape) in ((1, c * h * w), (1, c * h * w, 1, 1)) and (len(shape) == 2 or h * w == 1):
        # Flatten to [1, K]: free when H = W = 1; otherwise a view in ONNX's CHW order, which
        # a following fully connected layer reorders into its weights.
        lw.env[node.outputs[0]] = (
            Img(x.var, c * h * w, 1, 1) if h * w == 1 else Img(x.var, c * h * w, 1, 1, (c, h, w))
        )
        return
    if tuple(shape) == (1, c, h, w):
        lw.env[node.outputs[0]] = Img(x.var, c, h, w)
        return
    raise Refuse(
        f"reshape {[1, c, h, w]} -> {list(shape)} moves data between channels and pixels; "
        "MPSNNReshapeNode orders elements differently from ONNX's row-major order"
    )


def _broadcast_dims(lw: Lowering, name: str) -> tuple[int, ...]:
    s = lw.g.shape_of(name)
    return tuple([1] * (4 - len(s)) + list(s)) if len(s) <= 4 else s


@emitter("Add", "Sub", "Mul", "Div")
def _binary(lw: Lowering, node: Node) -> None:
    op = node.op_type
    a_name, b_name = node.inputs[0], node.inputs[1]
    ca, cb = lw.g.const(a_name), lw.g.const(b_name)
    if ca is not None and cb is not None:
        raise Refuse("both inputs are constants (run fold_constants)")
    if ca is not None or cb is not None:
        _binary_const(lw, node, op, ca, cb)
        return
    a, b = lw.img(a_name), lw.img(b_name)
    if a.flat_of or b.flat_of:
        raise Refuse("arithmetic on a flattened tensor")
    cls = {
        "Add": "MPSNNAdditionNode",
        "Sub": "MPSNNSubtractionNode",
        "Mul": "MPSNNMultiplicationNode",
        "Div": "MPSNNDivisionNode",
    }[op]
    extra: list[str] = []
    big, small = a, b
    if (a.c, a.h, a.w) != (b.c, b.h, b.w):
        # MPSNNBinaryArithmeticNode broadcasts its secondary source with strides of 0.
        if a.h * a.w == 1 and b.h * b.w > 1 or a.c == 1 and b.c > 1:
            big, small = b, a
            if op == "Div":
                raise Refuse("Div broadcasting its left operand has no MPS arithmetic equivalent")
            if op == "Sub":  # a - b = (-b) - (-a)
                extra += ["primaryScale = -1", "secondaryScale = -1"]
        if (small.h, small.w) == (1, 1) and (big.h, big.w) != (1, 1):
            extra += ["secondaryStrideInPixelsX = 0", "secondaryStrideInPixelsY = 0"]
        elif (small.h, small.w) != (big.h, big.w):
            raise Refuse(
                f"broadcast of {small.h}x{small.w} over {big.h}x{big.w} pixels; MPS broadcasts 1x1 only"
            )
        if small.c == 1 and big.c > 1:
            extra.append("secondaryStrideInFeatureChannels = 0")
        elif small.c != big.c:
            raise Refuse(f"{small.c} vs {big.c} channels cannot broadcast")
    var = lw.fresh(node.name or node.outputs[0])
    lines = [f"let {var} = {cls}(leftSource: {big.var}, rightSource: {small.var})"] + [
        f"{var}.{e}" for e in extra
    ]
    oc, oh, ow = big.c, big.h, big.w
    lw.emit(
        var,
        [f"ONNX node '{node.name}' ({op})"],
        lines,
        node.outputs[0],
        Img(f"{var}.resultImage", oc, oh, ow),
    )


def _binary_const(
    lw: Lowering, node: Node, op: str, ca: np.ndarray | None, cb: np.ndarray | None
) -> None:
    const_left = ca is not None
    k = (ca if const_left else cb).astype(np.float64)  # type: ignore[union-attr]
    x = lw.img(node.inputs[1] if const_left else node.inputs[0])
    if op == "Div" and const_left:
        raise Refuse("constant / tensor: MPS has no reciprocal with a constant numerator here")
    if k.size == 1:
        v = float(k.reshape(-1)[0])
        a, b = {
            "Add": (1.0, v),
            "Sub": (-1.0, v) if const_left else (1.0, -v),
            "Mul": (v, 0.0),
            "Div": (1.0 / v, 0.0),
        }[op]
        _neuron_layer(lw, node, x, ("linear", a, b, 0), node.outputs[0])
        return
    kshape = k.shape
    per_channel = k.size == x.c and (
        len(kshape) == 1 and x.h * x.w == 1 or len(kshape) >= 3 and kshape[-1] == kshape[-2] == 1
    )
    if not per_channel:
        raise Refuse(
            f"constant operand of shape {list(kshape)}; MPSNNGraph has no constant tensors, only "
            "scalars (a linear neuron) and one value per channel (a 1x1 depthwise convolution) map"
        )
    v = k.reshape(-1)
    ones = np.ones(x.c)
    scale, shift = {
        "Add": (ones, v),
        "Sub": (-ones, v) if const_left else (ones, -v),
        "Mul": (v, np.zeros(x.c)),
        "Div": (1.0 / v, np.zeros(x.c)),
    }[op]
    comment = [
        f"ONNX node '{node.name}' ({op} by a per-channel constant, as a 1x1 depthwise convolution)"
    ]
    _channel_affine(lw, node, x, scale, shift, comment, "per-channel affine")


@emitter("Concat")
def _concat(lw: Lowering, node: Node) -> None:
    srcs = [lw.img(i) for i in node.inputs]
    rank = len(lw.g.shape_of(node.outputs[0]))
    axis = int(node.attr("axis"))
    axis = axis + rank if axis < 0 else axis
    if axis != 1 or any(s.flat_of for s in srcs):
        raise Refuse(
            f"concatenation on axis {axis}; MPSNNConcatenationNode joins feature channels only"
        )
    for name, s in zip(node.inputs[:-1], srcs[:-1], strict=True):
        if s.c % 4:
            raise Refuse(
                f"input '{name}' has {s.c} channels; MPSNNConcatenationNode starts each input at a "
                "multiple of 4 channels (MPSImage slices), which would leave a gap: pad that "
                "input's producer to a multiple of 4 output channels"
            )
    var = lw.fresh(node.name or node.outputs[0])
    oc, oh, ow = _static(lw, node.outputs[0])
    sources = ", ".join(s.var for s in srcs)
    lw.emit(
        var,
        [f"ONNX node '{node.name}' (Concat on channels)"],
        [f"let {var} = MPSNNConcatenationNode(sources: [{sources}])"],
        node.outputs[0],
        Img(f"{var}.resultImage", oc, oh, ow),
    )


@emitter("Pad")
def _pad(lw: Lowering, node: Node) -> None:
    x = lw.img(node.inputs[0])
    mode = node.attr("mode", "constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if lw.g.opset >= 11:
        pads = lw.const(node, 1, "pads").astype(np.int64).tolist()
        cv = lw.opt_const(node, 2)
        value = float(cv.reshape(-1)[0]) if cv is not None and cv.size else 0.0
        if len(node.inputs) > 3 and node.inputs[3]:
            raise Refuse("Pad with an axes input is not supported; pad all axes")
    else:
        pads = list(node.attr("pads"))
        value = float(node.attr("value", 0.0))
    if len(pads) != 8 or pads[0] or pads[1] or pads[4] or pads[5]:
        raise Refuse(
            f"pads {pads} touch the batch or channel axis; MPSNNPadNode pads width and height here"
        )
    if min(pads) < 0:
        raise Refuse("negative pads (cropping) are not supported")
    edge = {
        "constant": "zero" if value == 0 else "constant",
        "reflect": "mirror",
        "edge": "clamp",
    }.get(mode)
    if edge is None:
        raise Refuse(f"pad mode '{mode}' has no MPSImageEdgeMode")
    var = lw.fresh(node.name or node.outputs[0])
    top, left, bottom, right = pads[2], pads[3], pads[6], pads[7]
    lines = [
        f"let {var} = MPSNNPadNode(\n    source: {x.var},\n    paddingSizeBefore: MPSImageCoordinate(x: {left}, y: {top}, channel: 0),\n"
        f"    paddingSizeAfter: MPSImageCoordinate(x: {right}, y: {bottom}, channel: 0), edgeMode: .{edge})"
    ]
    if edge == "constant":
        lines.append(f"{var}.fillValue = {swift_float(value)}")
    comment = [f"ONNX node '{node.name}' (Pad, mode '{mode}' = MPSImageEdgeMode .{edge})"]
    lw.emit(
        var,
        comment,
        lines,
        node.outputs[0],
        Img(f"{var}.resultImage", x.c, x.h + top + bottom, x.w + left + right),
    )


@emitter("Resize", "Upsample")
def _resize(lw: Lowering, node: Node) -> None:
    x = lw.img(node.inputs[0])
    oc, oh, ow = _static(lw, node.outputs[0])
    mode = node.attr("mode", "nearest")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    ctm = node.attr(
        "coordinate_transformation_mode", "half_pixel" if node.op_type == "Resize" else "asymmetric"
    )
    ctm = ctm.decode() if isinstance(ctm, bytes) else ctm
    if node.op_type == "Resize" and lw.g.opset < 11:
        ctm = "asymmetric"
    nearest_mode = node.attr(
        "nearest_mode",
        "round_prefer_floor" if node.op_type == "Resize" and lw.g.opset >= 11 else "floor",
    )
    nearest_mode = nearest_mode.decode() if isinstance(nearest_mode, bytes) else nearest_mode
    if node.attr("antialias", 0):
        raise Refuse("antialiased Resize has no MPS equivalent")
    var = lw.fresh(node.name or node.outputs[0])
    integer = oh % x.h == 0 and ow % x.w == 0
    sy, sx = oh // x.h, ow // x.w
    comment = [f"ONNX node '{node.name}' ({node.op_type}, {mode}, {ctm})"]
    if mode == "nearest":
        # With an integer scale, half_pixel + round and asymmetric + floor both pick source
        # pixel x / s, which is what MPSCNNUpsamplingNearest repeats.
        ok = integer and (
            (ctm in ("half_pixel", "pytorch_half_pixel") and nearest_mode.startswith("round"))
            or (ctm == "asymmetric" and nearest_mode == "floor")
        )
        if not ok:
            raise Refuse(
                f"nearest resize {x.h}x{x.w} -> {oh}x{ow} with {ctm}/{nearest_mode}; MPSCNNUpsamplingNearest repeats pixels by integer factors"
            )
        line = f"let {var} = MPSCNNUpsamplingNearestNode(source: {x.var}, integerScaleFactorX: {sx}, integerScaleFactorY: {sy})"
    elif mode in ("linear", "bilinear"):
        if ctm == "align_corners" and integer:
            line = f"let {var} = MPSCNNUpsamplingBilinearNode(\n    source: {x.var}, integerScaleFactorX: {sx}, integerScaleFactorY: {sy}, alignCorners: true)"
        elif ctm == "half_pixel" or ctm == "pytorch_half_pixel" and oh > 1 and ow > 1:
            # MPSImageBilinearScale samples at pixel centres: ONNX's half_pixel mapping.
            line = f"let {var} = MPSNNBilinearScaleNode(source: {x.var}, outputSize: MTLSize(width: {ow}, height: {oh}, depth: 1))"
        else:
            raise Refuse(
                f"linear resize with coordinate_transformation_mode '{ctm}'; MPS offers half_pixel (MPSNNBilinearScaleNode) and align_corners (integer scales)"
            )
    else:
        raise Refuse(f"resize mode '{mode}' has no MPSNNGraph node (nearest and linear map)")
    lw.emit(var, comment, [line], node.outputs[0], Img(f"{var}.resultImage", oc, oh, ow))


def lower(graph: Graph, *, fp16: bool = False, check_only: bool = False) -> Lowered:
    return Lowering(graph, fp16=fp16).run(check_only)
