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
from ...semantics.activations import ACTIVATIONS, as_activation, clip_params, mps_neuron
from ...semantics.attrs import epsilon
from ...semantics.batchnorm import bn_affine
from ...semantics.conv_geometry import conv_geometry, conv_transpose_geometry, pool_geometry
from .cpu import CPU_EMITTERS, CPURefuse
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
    outputs: list[tuple[str, Img]]  # ONNX graph outputs, in order
    blob: ParamBlob
    refusals: list[str] = field(default_factory=list)
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


class Lowering:
    def __init__(self, graph: Graph, *, fp16: bool, cpu: bool = True) -> None:
        self.g = graph
        self.cpu = cpu
        self.cpu_env: dict[str, str] = {}
        self.cpu_lines: list[str] = []
        self.head_lines: list[str] = []
        self.head: set[str] = set()  # tensors the CPU computes before the graph
        self.uploads: list[tuple[str, str, Img]] = []
        self.phase = self.cpu_lines
        self.cpu_inputs: list[tuple[str, str, list[int]]] = []
        self.gpu_reads: dict[str, tuple[str, Img]] = {}
        self.input_vars: dict[str, str] = {}
        self.cpu_origin: dict[str, str] = {}  # tensor -> the CPU node (or input) making it
        self.placement: list[tuple[str, str, str]] = []
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
        if op in ACTIVATIONS:  # the activation table's `mps` column (semantics/activations.py)
            if op == "Clip":
                self.clip_bounds(node)  # refuses a bound computed at run time, naming it
            act = as_activation(self.g, node)
            return None if act is None else mps_neuron(act)
        if op == "Abs":
            return ("absolute", 0, 0, 0)
        if op == "Neg":
            return ("linear", -1, 0, 0)
        # MPSCNNNeuronType.h: exponential / logarithm use base e when c == -1.
        if op == "Exp":
            return ("exponential", 1, 0, -1)
        if op == "Log":
            return ("logarithm", 1, 0, -1)
        if op == "Pow":
            p = self.g.const(node.inputs[1])
            if p is not None and p.size == 1:
                return ("power", 1, 0, float(p.reshape(-1)[0]))
            return None
        return None

    def clip_bounds(self, node: Node) -> tuple[float, float]:
        """A Clip's constant (min, max) as the activation table reads them; refuses a bound
        computed at run time."""
        for i in (1, 2):
            self.opt_const(node, i)  # raises Refuse naming the run-time bound
        bounds = clip_params(node, self.g)
        assert bounds is not None
        return bounds

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
            if bn_affine(self.g, nxt) is not None:
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
        """A BN the fold_batchnorm pass left (its producer's weights were not float32 or were
        shared) folded into these float64 weights: the shared formula (semantics/batchnorm)."""
        affine = bn_affine(self.g, bn)
        assert affine is not None  # fuse_after takes only a BN with an affine form
        scale, shift = affine
        shape = [1] * w.ndim
        shape[axis] = -1
        return (w * scale.reshape(shape)), b * scale + shift

    # -- the CPU tail -----------------------------------------------------------------------
    def cpu_in(self, name: str) -> str:
        """The Swift CPUTensor expression for ONNX tensor `name` on the CPU."""
        if name in self.cpu_env:
            return self.cpu_env[name]
        shape = [int(d) for d in self.g.shape_of(name)]
        v = self.g.const(name)
        if v is not None:
            if v.dtype.kind not in "fiub":
                raise CPURefuse(f"constant '{name}' of type {v.dtype}")
            off, ent = self.blob.add(v.astype(np.float32))
            var = self.fresh("const_" + name)
            self.blob.layer(var, [], "CPU constant", {"values": ent})
            self.head_lines.append(
                f"let {var} = CPUTensor(parameters.floats(offset: {off}, count: {v.size}), "
                f"{[int(d) for d in v.shape]})"
            )
        elif name in self.input_vars:
            var = self.fresh("input_" + name)
            self.head_lines.append(f"let {var} = CPUTensor(inputs[{swift_string(name)}]!, {shape})")
        elif name in self.env:
            img = self.env[name]
            var = self.fresh("gpu_" + name)
            self.gpu_reads[name] = (var, img)
            self.cpu_lines.append(
                f"let {var} = CPUTensor(gpuResults[{swift_string(name)}]!, {shape})"
            )
        else:
            raise CPURefuse(f"input '{name}' is not available on the CPU")
        self.cpu_env[name] = var
        return var

    def cpu_out(self, node: Node, name: str, expr: str) -> None:
        var = self.fresh("cpu_" + name)
        where = "head, before the graph" if self.phase is self.head_lines else "tail"
        self.phase.append(f"// ONNX node '{node.name}' ({node.op_type}), on the CPU ({where})")
        self.phase.append(f"let {var} = {expr}")
        self.cpu_env[name] = var

    def on_cpu(self, node: Node, why: str) -> str | None:
        """Emit `node` in the CPU tail; returns None or why it cannot run there either."""
        fn = CPU_EMITTERS.get(node.op_type) if node.domain in ("", "ai.onnx") else None
        if fn is None:
            return f"{why}; the CPU tail has no {node.op_type} either"
        for o in node.outputs:
            t = self.g.type_of(o) if o else None
            if t is not None and t.dtype != np.float32:
                return f"{why}; the CPU tail computes float32 tensors only (output is {t.dtype})"
        ins = [i for i in node.inputs if i and self.g.const(i) is None]
        head = all(i in self.head or i in self.input_vars for i in ins)
        self.phase = self.head_lines if head else self.cpu_lines
        mark = (
            len(self.cpu_lines), dict(self.cpu_env), len(self.blob.data), len(self.blob.layers),
            len(self.head_lines),
        )  # fmt: skip
        try:
            fn(self, node)
        except (CPURefuse, Refuse, ValueError) as e:
            del self.cpu_lines[mark[0] :]
            del self.head_lines[mark[4] :]
            self.cpu_env = mark[1]
            del self.blob.data[mark[2] :]
            del self.blob.layers[mark[3] :]
            return f"{why}; on the CPU: {e}"
        self.placement.append((self.label(node), "cpu", why))
        for o in node.outputs:
            if o:
                self.cpu_origin[o] = self.label(node)
                if head:
                    self.head.add(o)
        return None

    def upload(self, name: str) -> None:
        """Make head tensor `name` a source image of the graph (raises Refuse if not one)."""
        if name in self.env:
            return
        c, h, w = image_dims(self.g.shape_of(name))
        var = self.fresh("head_" + name)
        img = Img(var, c, h, w)
        self.env[name] = img
        self.uploads.append((name, var, img))

    # -- driver -----------------------------------------------------------------------------
    def snapshot(self) -> tuple:
        return (
            len(self.layers),
            set(self.absorbed),
            dict(self.env),
            set(self.used_names),
            len(self.blob.data),
            len(self.blob.layers),
            len(self.uploads),
        )

    def restore(self, mark: tuple) -> None:
        """Undo a GPU emitter that refused half-way (it may have absorbed a following node)."""
        del self.layers[mark[0] :]
        self.absorbed, self.env, self.used_names = set(mark[1]), dict(mark[2]), set(mark[3])
        del self.blob.data[mark[4] :]
        del self.blob.layers[mark[5] :]
        del self.uploads[mark[6] :]

    def run(self, check_only: bool) -> Lowered:
        refusals: list[str] = []
        inputs: list[tuple[str, str, Img]] = []
        for name in self.g.inputs:
            try:
                c, h, w = self.out_dims(name)
            except Refuse as e:
                t = self.g.type_of(name)
                if self.cpu and t is not None and t.is_static and t.dtype == np.float32:
                    var = self.fresh(name)
                    self.input_vars[name] = var
                    shape = [int(d) for d in t.shape]  # type: ignore[union-attr]
                    self.cpu_inputs.append((name, var, shape))
                    self.cpu_origin[name] = f"graph input '{name}' (not an image)"
                    self.head.add(name)
                    self.placement.append((f"graph input '{name}'", "cpu", str(e)))
                    continue
                refusals.append(f"graph input '{name}': {e}")
                self.poisoned.add(name)
                continue
            var = self.fresh(name)
            img = Img(var, c, h, w)
            self.env[name] = img
            self.input_vars[name] = var
            inputs.append((name, var, img))
        heavy = 0  # convolutions, fully connected layers and pooling on the GPU
        for node in self.g.nodes:
            if id(node) in self.absorbed:
                continue
            emitter = EMITTERS.get(node.op_type) if node.domain in ("", "ai.onnx") else None
            ins = [i for i in node.inputs if i]
            # Downstream of a refused node only ops with no MPS node (and no CPU code) at all
            # are reported (their refusal does not depend on the inputs); the rest would only
            # echo it.
            if any(i in self.poisoned for i in ins):
                self.poisoned.update(o for o in node.outputs if o)
                if node.op_type == "MatMul" and self.g.const(node.inputs[1]) is None:
                    if not self.cpu:
                        refusals.append(f"{self.label(node)}: {MATMUL_OF_ACTIVATIONS}")
                elif emitter is None and (not self.cpu or node.op_type not in CPU_EMITTERS):
                    why = NO_NODE.get(node.op_type, "MPSNNGraph has no node for this op")
                    if self.cpu:
                        why += f"; the CPU tail has no {node.op_type} either"
                    refusals.append(f"{self.label(node)}: {why}")
                continue
            on_cpu = [i for i in ins if i in self.cpu_origin and i not in self.head]
            if on_cpu:
                # The GPU graph runs before the CPU tail: nothing after a tail node goes back
                # to it (the head runs before the graph and feeds it source images).
                why = (
                    f"reads '{on_cpu[0]}', computed on the CPU by {self.cpu_origin[on_cpu[0]]}, "
                    "and the GPU graph runs before the CPU tail"
                )
            else:
                mark = self.snapshot()
                try:
                    for i in ins:
                        if i in self.head:
                            self.upload(i)
                    if emitter is None:
                        raise Refuse(
                            NO_NODE.get(node.op_type, "MPSNNGraph has no node for this op")
                        )
                    emitter(self, node)
                    self.placement.append((self.label(node), "gpu", ""))
                    heavy += node.op_type in HEAVY_OPS
                    continue
                except Refuse as e:
                    self.restore(mark)
                    why = str(e)
            problem = self.on_cpu(node, why) if self.cpu else why
            if problem is not None:
                refusals.append(f"{self.label(node)}: {problem}")
                self.poisoned.update(o for o in node.outputs if o)
        if not heavy and not refusals:
            # Element-wise nodes alone would only move data to the GPU and back.
            refusals.append(
                "no node runs on the GPU: MPSNNGraph needs at least one image node; "
                "this model is not a convolutional network over [1, C, H, W] images"
            )
        outputs: list[tuple[str, Img]] = []
        cpu_outputs: dict[str, str] = {}
        for out_name in self.g.outputs:
            if out_name in self.cpu_origin and out_name in self.cpu_env:
                cpu_outputs[out_name] = self.cpu_env[out_name]
                continue
            if not refusals and out_name not in self.env:
                refusals.append(f"graph output '{out_name}' is not produced by a convertible node")
            if not refusals and out_name in self.g.inputs:
                refusals.append(
                    f"graph output '{out_name}' is a graph input; there is nothing to run"
                )
            outputs.append((out_name, self.env.get(out_name, Img("", 0, 0, 0))))
        if not refusals and len({img.var for _, img in outputs}) != len(outputs):
            refusals.append(
                "two graph outputs are the same image (an Identity/Reshape between them); "
                "MPSNNGraph returns each result image once"
            )
        if refusals and not check_only:
            raise Refuse("; ".join(refusals))
        reads = [(n, v, img) for n, (v, img) in self.gpu_reads.items()]
        return Lowered(
            self.layers,
            inputs,
            outputs,
            self.blob,
            refusals,
            self.cpu_inputs,
            reads,
            self.cpu_lines,
            self.head_lines,
            self.uploads,
            {n: self.cpu_env[n] for n, _, _ in self.uploads},
            cpu_outputs,
            self.placement,
        )


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
    comment = [f"ONNX node '{node.name}' (Conv)"]
    y, spec, bn = lw.fuse_after(node.outputs[0], comment, bn=True)
    if bn is not None:
        w, b = lw.bn_fold(bn, w, b, axis=0)
    oc, oh, ow = _static(lw, y)
    geo = conv_geometry(node, (1, x.c, x.h, x.w), w.shape, (1, oc, oh, ow), lw.g.opset)
    group, s, d, pads = geo.group, list(geo.strides), list(geo.dilations), list(geo.pads)
    depthwise = group > 1 and group == x.c and ig == 1
    if depthwise and o != x.c:
        raise Refuse(
            f"depthwise convolution with channel multiplier {o // x.c}; "
            "MPSCNNDepthWiseConvolutionDescriptor supports multiplier 1 only"
        )
    if group > 1 and not depthwise and ((x.c // group) % 4 or (o // group) % 4):
        # MPSCNNConvolutionDescriptor.groups needs a multiple of 4 channels per group: run it
        # as one dense convolution whose weights are zero outside each group's block (the
        # same sums, `group` times the arithmetic; an Inf/NaN input then also reaches the
        # other groups' outputs through 0 * x).
        dense = np.zeros((o, x.c, kh, kw))
        ci, co = x.c // group, o // group
        for gi in range(group):
            dense[gi * co : (gi + 1) * co, gi * ci : (gi + 1) * ci] = w[gi * co : (gi + 1) * co]
        comment.append(
            f"(groups={group} with {ci} input / {co} output channels per group, not multiples "
            "of 4: a dense convolution with block-diagonal weights)"
        )
        w, group = dense, 1
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
    geo = conv_transpose_geometry(node, (1, x.c, x.h, x.w), w.shape, None, lw.g.opset)
    if geo.group != 1:
        raise Refuse("grouped ConvTranspose is not supported by this backend; use group=1")
    if not geo.unit_dilation:
        raise Refuse("dilated ConvTranspose has no MPSCNNConvolutionTranspose equivalent")
    b = lw.opt_const(node, 2)
    ci, o, kh, kw = w.shape
    b = np.zeros(o) if b is None else b.astype(np.float64)
    s = list(geo.strides)
    comment = [f"ONNX node '{node.name}' (ConvTranspose)"]
    y, spec, bn = lw.fuse_after(node.outputs[0], comment, bn=True)
    if bn is not None:
        w, b = lw.bn_fold(bn, w, b, axis=1)
    oc, oh, ow = _static(lw, y)
    # pads as ONNX resolves them (attributes, auto_pad or output_shape) for this output size
    pads = list(
        conv_transpose_geometry(node, (1, x.c, x.h, x.w), w.shape, (1, oc, oh, ow), lw.g.opset).pads
    )
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
        geo = pool_geometry(node, (1, x.c, x.h, x.w), (1, oc, oh, ow), lw.g.opset)
        if not geo.unit_dilation:
            raise Refuse("dilated pooling is not supported by this backend")
        s, pads = list(geo.strides), list(geo.pads)
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
    for i, n in enumerate(("scale", "B", "mean", "var"), 1):
        lw.const(node, i, n)  # refuses a parameter computed at run time, naming it
    affine = bn_affine(lw.g, node)
    if affine is None:
        raise Refuse("BatchNormalization in training mode (extra outputs) has no MPS node")
    scale, shift = affine
    comment = [
        f"ONNX node '{node.name}' (BatchNormalization, as a 1x1 depthwise convolution: scale and shift)"
    ]
    _channel_affine(lw, node, x, scale, shift, comment, "batch normalization")


@emitter("InstanceNormalization")
def _instancenorm(lw: Lowering, node: Node) -> None:
    x = lw.img(node.inputs[0])
    gamma = lw.const(node, 1, "scale").astype(np.float32)
    beta = lw.const(node, 2, "B").astype(np.float32)
    var = lw.fresh(node.name or node.outputs[0])
    goff, gent = lw.blob.add(gamma)
    boff, bent = lw.blob.add(beta)
    lw.blob.layer(var, [node.name], "instance normalization", {"gamma": gent, "beta": bent})
    eps = swift_float(epsilon(node, lw.g.opset))
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
    if _channel_shuffle(lw, node, x, tuple(shape)):
        return
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
    if (
        h * w == 1
        and len(shape) >= 2
        and shape[0] == 1
        and shape[1] == c
        and all(d == 1 for d in shape[2:])
    ):
        # [1, C, 1, 1] <-> [1, C] <-> [1, C, 1]: the same C values in the same order.
        lw.env[node.outputs[0]] = Img(x.var, c, 1, 1)
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
    var = lw.fresh(node.name or node.outputs[0])
    oc, oh, ow = _static(lw, node.outputs[0])
    if any(s.c % 4 for s in srcs[:-1]):
        # MPSNNConcatenationNode starts each input at a multiple of 4 channels (MPSImage
        # slices), which would leave gaps: place each input at its ONNX channel offset with a
        # 1x1 selection convolution (C_i -> C) and add the placed images.
        placed: list[str] = []
        at = 0
        for s in srcs:
            rows = [-1] * oc
            rows[at : at + s.c] = range(s.c)
            at += s.c
            sel = _selection_conv(
                lw, node, s, rows, oc, f"{var}_place{len(placed)}", f"input at channel {at - s.c}"
            )
            placed.append(f"{sel}.resultImage")
        total = placed[0]
        for i, p in enumerate(placed[1:], 1):
            add = var if i == len(placed) - 1 else lw.fresh(f"{var}_sum{i}")
            line = f"let {add} = MPSNNAdditionNode(leftSource: {total}, rightSource: {p})"
            if add != var:
                lw.layers.append(Layer(add, [f"ONNX node '{node.name}' (Concat), sum"], [line]))
            total = f"{add}.resultImage"
        lw.emit(
            var,
            [f"ONNX node '{node.name}' (Concat of inputs that are not multiples of 4 channels)"],
            [line],
            node.outputs[0],
            Img(f"{var}.resultImage", oc, oh, ow),
        )
        return
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
            rows = _nearest_sources(x.h, oh, ctm, nearest_mode)
            cols = _nearest_sources(x.w, ow, ctm, nearest_mode)
            if rows is not None and cols is not None:
                # Every output pixel reads source (start + k * step): a strided 1x1 crop.
                crop = _crop(lw, node, x, (rows[0], cols[0]), (rows[1], cols[1]), (oh, ow), var)
                lw.env[node.outputs[0]] = Img(f"{crop}.resultImage", oc, oh, ow)
                return
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


def lower(
    graph: Graph, *, fp16: bool = False, check_only: bool = False, cpu: bool = True
) -> Lowered:
    """`cpu=False` (--gpu-only) refuses every node MPSNNGraph cannot run instead of placing it
    in the CPU tail."""
    return Lowering(graph, fp16=fp16, cpu=cpu).run(check_only)


# MPSNNGraphNodes.h MPSNNUnaryReductionNode subclasses (iOS 12.1): rows reduce along x
# (result width 1), columns along y (height 1), feature channels per pixel (1 channel);
# MPSNNReductionSpatialMeanNode reduces width and height at once (mean only).
_REDUCE_OPS = {"ReduceMean": "Mean", "ReduceMax": "Max", "ReduceMin": "Min", "ReduceSum": "Sum"}


def _reduce_axes(lw: Lowering, node: Node, rank: int) -> list[int] | None:
    """The reduced axes (non-negative, sorted); None means all axes."""
    axes_attr = node.attr("axes")
    takes_input = lw.g.opset >= (13 if node.op_type == "ReduceSum" else 18)
    if takes_input and len(node.inputs) > 1 and node.inputs[1]:
        axes = [int(a) for a in lw.const(node, 1, "axes").reshape(-1)]
    elif not takes_input and axes_attr is not None:
        axes = [int(a) for a in axes_attr]
    else:
        axes = []
    if not axes:
        return None if not node.attr("noop_with_empty_axes", 0) else []
    return sorted({a + rank if a < 0 else a for a in axes})


@emitter(*_REDUCE_OPS)
def _reduce(lw: Lowering, node: Node) -> None:
    x = lw.img(node.inputs[0])
    if x.flat_of:
        raise Refuse("reduction of a flattened tensor")
    rank = len(lw.g.shape_of(node.inputs[0]))
    axes = _reduce_axes(lw, node, rank)
    if axes is None:
        axes = list(range(rank))
    if rank == 2:  # [1, K]: K feature channels of a 1x1 image
        axes = [{0: 0, 1: 1}[a] for a in axes]
    axes = [a for a in axes if a != 0]  # batch is 1
    op = _REDUCE_OPS[node.op_type]
    if not axes:
        lw.env[node.outputs[0]] = x
        return
    # Axes of size 1 reduce nothing (but ReduceMean over them is still the identity).
    sizes = {1: x.c, 2: x.h, 3: x.w}
    real = [a for a in axes if sizes[a] > 1]
    steps: list[tuple[str, tuple[int, int, int]]] = []
    c, h, w = x.c, x.h, x.w
    if 1 in real:
        if set(real) != {1}:
            raise Refuse(
                f"reduction over axes {axes}: MPS reduces feature channels or width/height, "
                "not both in one node"
            )
        steps.append((f"MPSNNReductionFeatureChannels{op}Node", (1, h, w)))
    elif set(real) == {2, 3} and op == "Mean":
        steps.append(("MPSNNReductionSpatialMeanNode", (c, 1, 1)))
    else:
        if 3 in real:
            steps.append((f"MPSNNReductionRow{op}Node", (c, h, 1)))
            w = 1
        if 2 in real:
            steps.append((f"MPSNNReductionColumn{op}Node", (c, 1, w)))
    out_shape = tuple(lw.g.shape_of(node.outputs[0]))
    oc, oh, ow = steps[-1][1] if steps else (x.c, x.h, x.w)
    keep = node.attr("keepdims", 1)
    if not keep and out_shape != (1, oc) and int(np.prod(out_shape)) != oc * oh * ow:
        raise Refuse(f"reduction to shape {list(out_shape)}")
    if not keep and (oh * ow > 1 and out_shape != (1, oc, oh, ow)):
        raise Refuse(f"reduction to shape {list(out_shape)} (keepdims=0 leaves a non-image tensor)")
    if not steps:
        lw.env[node.outputs[0]] = x
        return
    src = x.var
    comment = [f"ONNX node '{node.name}' ({node.op_type} over axes {axes})"]
    lines = []
    var = ""
    for i, (cls, _dims) in enumerate(steps):
        var = lw.fresh((node.name or node.outputs[0]) + ("" if i == len(steps) - 1 else "_rows"))
        lines.append(f"let {var} = {cls}(source: {src})")
        src = f"{var}.resultImage"
        if i < len(steps) - 1:
            lw.layers.append(Layer(var, comment, lines))
            comment, lines = [f"ONNX node '{node.name}' (second step: columns)"], []
    lw.emit(var, comment, lines, node.outputs[0], Img(src, oc, oh, ow))


@emitter("Mish")
def _mish(lw: Lowering, node: Node) -> None:
    # No Mish neuron: x * tanh(softplus(x)) from MPSCNNNeuronType.h's softPlus (a log(1 +
    # exp(b x)), a = b = 1) and tanH (a tanh(b x), a = b = 1) and a multiplication node.
    x = lw.img(node.inputs[0])
    base = node.name or node.outputs[0]
    sp, th, var = lw.fresh(base + "_softplus"), lw.fresh(base + "_tanh"), lw.fresh(base)
    lw.layers.append(
        Layer(
            sp,
            [f"ONNX node '{node.name}' (Mish = x * tanh(softplus(x))), softplus"],
            [f"let {sp} = MPSCNNNeuronSoftPlusNode(source: {x.var}, a: 1.0, b: 1.0)"],
        )
    )
    lw.layers.append(
        Layer(
            th,
            [f"ONNX node '{node.name}' (Mish), tanh"],
            [f"let {th} = MPSCNNNeuronTanHNode(source: {sp}.resultImage, a: 1.0, b: 1.0)"],
        )
    )
    lw.emit(
        var,
        [f"ONNX node '{node.name}' (Mish), product"],
        [
            f"let {var} = MPSNNMultiplicationNode("
            f"leftSource: {x.var}, rightSource: {th}.resultImage)"
        ],
        node.outputs[0],
        Img(f"{var}.resultImage", x.c, x.h, x.w, x.flat_of),
    )


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


def _gpu_slice(
    lw: Lowering, node: Node, x: Img, starts: list[int], steps: list[int], out: str
) -> None:
    oc, oh, ow = _static(lw, out)
    if len(starts) != 4 or x.flat_of:
        raise Refuse("slice of a tensor that is not a [1, C, H, W] image")
    if starts[0] != 0 or steps[0] != 1:
        raise Refuse("slice along the batch axis")
    if steps[2] < 1 or steps[3] < 1:
        raise Refuse("slice backwards along height/width (negative step)")
    cur = x
    base = node.name or out
    if (oc, steps[1], starts[1]) != (x.c, 1, 0):
        rows = [starts[1] + k * steps[1] for k in range(oc)]
        why = f"channels {rows[:3]}..."
        var = _selection_conv(lw, node, cur, rows, oc, base + "_channels", why)
        cur = Img(f"{var}.resultImage", oc, x.h, x.w)
    if (oh, ow) != (x.h, x.w) or steps[2:] != [1, 1]:
        var = _crop(lw, node, cur, (starts[2], starts[3]), (steps[2], steps[3]), (oh, ow), base)
        cur = Img(f"{var}.resultImage", oc, oh, ow)
    lw.env[out] = cur


@emitter("Slice")
def _slice(lw: Lowering, node: Node) -> None:
    from .cpu import slice_params

    x = lw.img(node.inputs[0])
    try:
        starts, steps = slice_params(lw, node)
    except CPURefuse as e:
        raise Refuse(str(e)) from e
    _gpu_slice(lw, node, x, starts, steps, node.outputs[0])


@emitter("Split")
def _split(lw: Lowering, node: Node) -> None:
    x = lw.img(node.inputs[0])
    rank = len(lw.g.shape_of(node.inputs[0]))
    axis = int(node.attr("axis", 0))
    axis = axis + rank if axis < 0 else axis
    if rank != 4:
        raise Refuse(f"split of a rank-{rank} tensor")
    at = 0
    for o in node.outputs:
        if not o:
            continue
        size = int(lw.g.shape_of(o)[axis])
        starts = [0, 0, 0, 0]
        starts[axis] = at
        at += size
        _gpu_slice(lw, node, x, starts, [1, 1, 1, 1], o)


def _scalar(lw: Lowering, name: str) -> float | None:
    v = lw.g.const(name)
    return float(v.reshape(-1)[0]) if v is not None and v.size == 1 else None


@emitter("Erf")
def _erf_gelu(lw: Lowering, node: Node) -> None:
    """GELU as exporters decompose it before opset 20, x * 0.5 * (1 + erf(x / sqrt(2))), as
    one MPSCNNNeuronType.geLU neuron (MPSCNNNeuronType.h, iOS 13). The Div (or Mul by
    1/sqrt(2)) before the Erf was already emitted as a linear neuron; it is left unused."""
    producers = [n for n in lw.g.nodes if node.inputs[0] in n.outputs]
    scaled = producers[0] if producers else None
    ok_scale = scaled is not None and (
        scaled.op_type == "Div" and _scalar(lw, scaled.inputs[1]) is not None
        and abs(_scalar(lw, scaled.inputs[1]) - 2**0.5) < 1e-4  # type: ignore[operator]
        or scaled.op_type == "Mul" and _scalar(lw, scaled.inputs[1]) is not None
        and abs(_scalar(lw, scaled.inputs[1]) - 2**-0.5) < 1e-4  # type: ignore[operator]
    )  # fmt: skip
    if not ok_scale:
        raise Refuse(NO_NODE["Erf"])
    x_name = scaled.inputs[0]  # type: ignore[union-attr]
    add = lw.sole_consumer(node.outputs[0])
    if add is None or add.op_type != "Add" or _scalar(lw, add.inputs[1]) != 1.0:
        raise Refuse(NO_NODE["Erf"])
    chain, t, have_x, half = [add], add.outputs[0], False, False
    for _ in range(2):
        m = lw.sole_consumer(t)
        if m is None or m.op_type != "Mul":
            break
        other = m.inputs[1] if m.inputs[0] == t else m.inputs[0]
        if other == x_name and not have_x:
            have_x = True
        elif _scalar(lw, other) == 0.5 and not half:
            half = True
        else:
            break
        chain.append(m)
        t = m.outputs[0]
    # x * 0.5 might also come first: Mul(x, 0.5) feeding the last Mul.
    if not (have_x and half):
        raise Refuse(NO_NODE["Erf"])
    x = lw.img(x_name)
    for n in chain:
        lw.absorbed.add(id(n))
    names = ", ".join(f"'{n.name}'" for n in chain)
    var = lw.fresh(node.name or node.outputs[0])
    lw.emit(
        var,
        [
            f"ONNX nodes '{scaled.name}', '{node.name}', {names} (GELU: x * 0.5 * (1 + erf(x / "  # type: ignore[union-attr]
            "sqrt 2)), one geLU neuron)"
        ],  # fmt: skip
        [f"let {var} = MPSCNNNeuronGeLUNode(source: {x.var})"],
        t,
        Img(f"{var}.resultImage", x.c, x.h, x.w, x.flat_of),
    )


def _channel_shuffle(lw: Lowering, node: Node, x: Img, shape: tuple[int, ...]) -> bool:
    """Reshape [1, C, H, W] -> [1, g1, g2, ..., H, W], a Transpose of the channel-group axes
    only, and a Reshape back to [1, C, H, W] (ShuffleNet's channel shuffle) permute channels:
    one 1x1 selection convolution. Absorbs the Transpose and the second Reshape."""
    if x.flat_of or node.op_type != "Reshape" or len(shape) < 5 or shape[0] != 1:
        return False
    if tuple(shape[-2:]) != (x.h, x.w) or int(np.prod(shape[1:-2])) != x.c:
        return False
    tr = lw.sole_consumer(node.outputs[0])
    if tr is None or tr.op_type != "Transpose":
        return False
    perm = list(tr.attr("perm") or [])
    k = len(shape)
    if len(perm) != k or perm[0] != 0 or perm[-2:] != [k - 2, k - 1]:
        return False
    back = lw.sole_consumer(tr.outputs[0])
    if back is None or back.op_type not in ("Reshape", "Flatten"):
        return False
    if tuple(lw.g.shape_of(back.outputs[0])) != (1, x.c, x.h, x.w):
        return False
    groups = list(shape[1:-2])
    rows = np.arange(x.c).reshape(groups).transpose([p - 1 for p in perm[1:-2]]).reshape(-1)
    lw.absorbed.update({id(tr), id(back)})
    var = _selection_conv(
        lw, node, x, [int(r) for r in rows], x.c, node.name or node.outputs[0],
        f"with '{tr.name}' and '{back.name}', a channel shuffle",
    )  # fmt: skip
    lw.env[back.outputs[0]] = Img(f"{var}.resultImage", x.c, x.h, x.w)
    return True


def _nearest_sources(n: int, on: int, ctm: str, mode: str) -> tuple[int, int] | None:
    """(start, step) when ONNX's nearest Resize of an axis of n pixels to `on` reads source
    pixels start + k * step (step >= 1: a downscale by an integer factor), else None."""
    import math

    if on < 1 or on > n:
        return None
    scale = on / n
    idx = []
    for d in range(on):
        if ctm == "align_corners":
            src = d * (n - 1) / (on - 1) if on > 1 else 0.0
        elif ctm == "asymmetric":
            src = d / scale
        elif ctm == "pytorch_half_pixel":
            src = (d + 0.5) / scale - 0.5 if on > 1 else 0.0
        elif ctm == "half_pixel":
            src = (d + 0.5) / scale - 0.5
        else:
            return None
        if mode == "floor":
            i = math.floor(src)
        elif mode == "ceil":
            i = math.ceil(src)
        elif mode == "round_prefer_ceil":
            i = math.floor(src + 0.5)
        else:  # round_prefer_floor
            i = math.ceil(src - 0.5)
        idx.append(min(max(i, 0), n - 1))
    step = idx[1] - idx[0] if on > 1 else 1
    if step < 1 or any(b - a != step for a, b in zip(idx, idx[1:], strict=False)):
        return None
    return idx[0], step
