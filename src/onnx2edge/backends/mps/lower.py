"""ONNX IR -> MPSNNGraph nodes, as Swift statements plus a parameter blob.

The graph walk; the emitters, one per ONNX op in the `EMITTERS` table, live in `ops/` (one
module per op family) and the shared vocabulary in `core.py`. An emitter either appends `Layer`s (Swift
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

import numpy as np

from ...ir import Graph, Node
from ...semantics.activations import ACTIVATIONS, as_activation, clip_params, mps_neuron
from ...semantics.fused import base_op, is_fused
from .core import (
    Img,
    Layer,
    Lowered,
    NeuronSpec,
    Refuse,
    image_dims,
    swift_float,
    swift_ident,
    swift_string,
)
from .cpu import CPU_EMITTERS, CPURefuse, cpu_fused
from .ops import EMITTERS, HEAVY_OPS, MATMUL_OF_ACTIVATIONS, NO_NODE
from .params import ParamBlob


def _onnx_or_fused(node: Node) -> bool:
    return node.domain in ("", "ai.onnx") or is_fused(node)


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
        op = f"{node.domain}.{node.op_type}" if is_fused(node) else node.op_type
        return f"node '{node.name or node.outputs[0]}' (op {op}, opset {self.g.opset})"

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
        fn = CPU_EMITTERS.get(base_op(node)) if _onnx_or_fused(node) else None
        if fn is None:
            return f"{why}; the CPU tail has no {base_op(node)} either"
        if is_fused(node):
            fn = cpu_fused  # the one place a fusion MPS took is undone: the tail runs it in two
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
            op = base_op(node)  # an o2e.<Op>Act node is lowered by its base op's emitter
            emitter = EMITTERS.get(op) if _onnx_or_fused(node) else None
            ins = [i for i in node.inputs if i]
            # Downstream of a refused node only ops with no MPS node (and no CPU code) at all
            # are reported (their refusal does not depend on the inputs); the rest would only
            # echo it.
            if any(i in self.poisoned for i in ins):
                self.poisoned.update(o for o in node.outputs if o)
                if op == "MatMul" and self.g.const(node.inputs[1]) is None:
                    if not self.cpu:
                        refusals.append(f"{self.label(node)}: {MATMUL_OF_ACTIVATIONS}")
                elif emitter is None and (not self.cpu or op not in CPU_EMITTERS):
                    why = NO_NODE.get(op, "MPSNNGraph has no node for this op")
                    if self.cpu:
                        why += f"; the CPU tail has no {op} either"
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
                        raise Refuse(NO_NODE.get(op, "MPSNNGraph has no node for this op"))
                    emitter(self, node)
                    self.placement.append((self.label(node), "gpu", ""))
                    heavy += op in HEAVY_OPS
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


def lower(
    graph: Graph, *, fp16: bool = False, check_only: bool = False, cpu: bool = True
) -> Lowered:
    """`cpu=False` (--gpu-only) refuses every node MPSNNGraph cannot run instead of placing it
    in the CPU tail."""
    return Lowering(graph, fp16=fp16, cpu=cpu).run(check_only)
