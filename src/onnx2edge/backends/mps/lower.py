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
from ...passes.specialise import bind_fix
from ...semantics.activations import ACTIVATIONS, as_activation, clip_params, mps_neuron
from ...semantics.fused import base_op, is_fused
from ..refusal import Refusal
from .core import (
    GPUSegment,
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


def _c_fix(graph: Graph, nodes: list[Node]) -> str | None:
    """Converting for the C backend, when it emits every op of `nodes` (Refusal.fix)."""
    from ..base import BACKENDS

    c = BACKENDS.get("c")
    if c is None or not nodes:  # a graph folded to nothing: nothing to convert elsewhere
        return None
    ops = c().supported_ops

    def key(n: Node) -> tuple[str, str]:  # an o2e.<Op>Act node is its base op for C too
        return ("" if n.domain in ("", "ai.onnx") or is_fused(n) else n.domain, base_op(n))

    if any(key(n) not in ops for n in nodes):
        return None
    which = "every op" if len(nodes) > 1 else f"{base_op(nodes[0])}"
    return f"onnx2edge convert MODEL --target c -o OUT/ (the C backend emits {which})"


def _onnx_or_fused(node: Node) -> bool:
    return node.domain in ("", "ai.onnx") or is_fused(node)


CPU_INPUTS_ONLY = "reads only tensors the CPU computed: a GPU graph would copy them there and back"
SEG_MARK = "\x00segment {}\x00"  # where-comment of a CPU statement, fixed once the plan is known


class Lowering:
    """The graph walk. Placement is a segmented plan: segment 0 runs Swift on the CPU before
    the first GPU graph, odd segments are MPSNNGraphs, even ones Swift between and after
    them. A node goes to the earliest segment of its kind after every segment producing one
    of its inputs (a graph reads a tensor of an earlier graph as a source image, passed on as
    the MPSImage; a CPU tensor is uploaded; the CPU reads a graph's exported result)."""

    def __init__(self, graph: Graph, *, fp16: bool, cpu: bool = True) -> None:
        self.g = graph
        self.cpu = cpu
        self.cpu_env: dict[str, str] = {}
        self.cpu_segs: dict[int, list[str]] = {0: []}
        self.head_lines = self.cpu_segs[0]
        self.phase = self.head_lines
        self.cpu_inputs: list[tuple[str, str, list[int]]] = []
        self.input_vars: dict[str, str] = {}
        self.cpu_origin: dict[str, str] = {}  # tensor -> the CPU node (or input) making it
        self.seg_of: dict[str, int] = {}  # tensor -> the segment computing it (-1: graph input)
        self.placement: list[tuple[str, str, str]] = []
        self.blob = ParamBlob(fp16=fp16)
        self.gpu_segs: dict[int, GPUSegment] = {1: GPUSegment(1)}
        self.seg = self.gpu_segs[1]
        self.env: dict[str, Img] = self.seg.env
        self.layers: list[Layer] = self.seg.layers
        self.uploads: list[tuple[str, str, Img]] = []  # the first graph's CPU-head sources
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
        """The image node of `name` in the graph being built: its own, or a source image made
        from what an earlier segment computed (a graph input, a CPU tensor, an earlier graph's
        result); refuses a tensor only a later segment computes."""
        if name in self.env:
            return self.env[name]
        s = self.seg_of.get(name)
        g = self.seg.index
        if s is None or s >= g:
            raise Refuse(f"input '{name}' is not an image this backend produced")
        src = self.gpu_segs[1].env.get(name) if s == -1 else None
        if (
            src is not None or s > 0 and s % 2 == 1
        ):  # an image graph input or an earlier graph's result
            src = src or self.gpu_segs[s].env[name]
            if s > 0:
                self.gpu_segs[s].exports.setdefault(name, src)
            img = Img(self.fresh(f"graph{g // 2 + 1}_{name}"), src.c, src.h, src.w, src.flat_of)
            self.seg.sources.append((name, img.var, img))
            self.env[name] = img
            return img
        self.upload(name)
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

    # -- the CPU segments -------------------------------------------------------------------
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
        elif self.seg_of.get(name, 0) % 2 == 1:
            s = self.seg_of[name]
            img = self.gpu_segs[s].env[name]
            var = self.fresh("gpu_" + name)
            self.gpu_segs[s].exports.setdefault(name, img)
            # Declared right after its graph, so every later CPU segment may read it.
            self.cpu_segs.setdefault(s + 1, []).append(
                f"let {var} = CPUTensor(gpuResults[{swift_string(name)}]!, {shape})"
            )
        else:
            raise CPURefuse(f"input '{name}' is not available on the CPU")
        self.cpu_env[name] = var
        return var

    def cpu_out(self, node: Node, name: str, expr: str) -> None:
        var = self.fresh("cpu_" + name)
        seg = next(k for k, lines in self.cpu_segs.items() if lines is self.phase)
        self.phase.append(
            f"// ONNX node '{node.name}' ({node.op_type}), on the CPU ({SEG_MARK.format(seg)})"
        )
        self.phase.append(f"let {var} = {expr}")
        self.cpu_env[name] = var

    def cpu_segment(self, ins: list[str]) -> int:
        """The earliest CPU segment after every segment computing one of `ins`."""
        c = 0
        for i in ins:
            s = self.seg_of.get(i, -1)
            c = max(c, s + 1 if s % 2 == 1 else s)
        return c

    def gpu_segment(self, ins: list[str]) -> int:
        """The earliest graph after every CPU segment computing one of `ins`."""
        g = 1
        for i in ins:
            s = self.seg_of.get(i, -1)
            g = max(g, s + 1 if s >= 0 and s % 2 == 0 else s)
        return g

    def on_cpu(self, node: Node, why: str) -> str | None:
        """Emit `node` as Swift on the CPU; returns None or why it cannot run there either."""
        fn = CPU_EMITTERS.get(base_op(node)) if _onnx_or_fused(node) else None
        if fn is None:
            return f"{why}; the CPU has no Swift {base_op(node)} either"
        if is_fused(node):
            fn = cpu_fused  # the one place a fusion MPS took is undone: the CPU runs it in two
        for o in node.outputs:
            t = self.g.type_of(o) if o else None
            if t is not None and t.dtype.kind not in "fiub":
                return f"{why}; the CPU side computes numeric tensors only (output is {t.dtype})"
        ins = [i for i in node.inputs if i and self.g.const(i) is None]
        seg = self.cpu_segment(ins)
        self.phase = self.cpu_segs.setdefault(seg, [])
        mark = (
            {k: len(v) for k, v in self.cpu_segs.items()}, dict(self.cpu_env),
            len(self.blob.data), len(self.blob.layers), set(self.used_names),
            {k: dict(v.exports) for k, v in self.gpu_segs.items()},
        )  # fmt: skip
        try:
            fn(self, node)
        except (CPURefuse, Refuse, ValueError) as e:
            for k in list(self.cpu_segs):
                if k in mark[0]:
                    del self.cpu_segs[k][mark[0][k] :]
                elif k:
                    del self.cpu_segs[k]
            self.cpu_env = mark[1]
            del self.blob.data[mark[2] :]
            del self.blob.layers[mark[3] :]
            self.used_names = mark[4]
            for k, v in self.gpu_segs.items():
                v.exports = mark[5][k]
            return f"{why}; on the CPU: {e}"
        self.placement.append((self.label(node), "cpu", why))
        for o in node.outputs:
            if o:
                self.cpu_origin[o] = self.label(node)
                self.seg_of[o] = seg
        return None

    def upload(self, name: str) -> None:
        """Make CPU tensor `name` a source image of the graph being built (raises Refuse if it
        is not image-shaped)."""
        if name in self.env:
            return
        c, h, w = image_dims(self.g.shape_of(name))
        if self.seg.index == 1:
            var = self.fresh("head_" + name)
            img = Img(var, c, h, w)
            self.uploads.append((name, var, img))
        else:
            var = self.fresh(f"graph{self.seg.index // 2 + 1}_{name}")
            img = Img(var, c, h, w)
            self.seg.sources.append((name, var, img))
        self.env[name] = img

    # -- driver -----------------------------------------------------------------------------
    def enter(self, index: int) -> None:
        """Build graph `index` from now on (a new one when it does not exist yet)."""
        self.seg = self.gpu_segs.setdefault(index, GPUSegment(index))
        self.env, self.layers = self.seg.env, self.seg.layers

    def snapshot(self) -> tuple:
        return (
            len(self.layers),
            set(self.absorbed),
            dict(self.env),
            set(self.used_names),
            len(self.blob.data),
            len(self.blob.layers),
            len(self.uploads),
            len(self.seg.sources),
            {k: dict(v.exports) for k, v in self.gpu_segs.items()},
        )

    def restore(self, mark: tuple) -> None:
        """Undo a GPU emitter that refused half-way (it may have absorbed a following node)."""
        del self.layers[mark[0] :]
        self.absorbed, self.used_names = set(mark[1]), set(mark[3])
        self.env.clear()
        self.env.update(mark[2])
        del self.blob.data[mark[4] :]
        del self.blob.layers[mark[5] :]
        del self.uploads[mark[6] :]
        del self.seg.sources[mark[7] :]
        for k, v in self.gpu_segs.items():
            v.exports = mark[8].get(k, {})

    def on_gpu(self, node: Node, g: int) -> str | None:
        """Lower `node` into graph `g`; returns None or why MPSNNGraph cannot run it there."""
        op = base_op(node)
        emitter = EMITTERS.get(op) if _onnx_or_fused(node) else None
        fresh_graph = g not in self.gpu_segs
        self.enter(g)
        mark = self.snapshot()
        try:
            if emitter is None:
                raise Refuse(NO_NODE.get(op, "MPSNNGraph has no node for this op"))
            emitter(self, node)
        except Refuse as e:
            self.restore(mark)
            if fresh_graph and not self.layers:
                del self.gpu_segs[g]
            self.enter(1)
            return str(e)
        for t in self.env:
            self.seg_of.setdefault(t, g)
        self.placement.append((self.label(node), "gpu", ""))
        return None

    def run(self, check_only: bool) -> Lowered:
        refusals: list[Refusal] = []
        inputs: list[tuple[str, str, Img]] = []
        for name in self.g.inputs:
            self.seg_of[name] = -1
            try:
                c, h, w = self.out_dims(name)
            except Refuse as e:
                t = self.g.type_of(name)
                if self.cpu and t is not None and t.is_static and t.dtype.kind in "fiub":
                    var = self.fresh(name)
                    self.input_vars[name] = var
                    shape = [int(d) for d in t.shape]  # type: ignore[union-attr]
                    self.cpu_inputs.append((name, var, shape))
                    self.cpu_origin[name] = f"graph input '{name}' (not an image)"
                    self.placement.append((f"graph input '{name}'", "cpu", str(e)))
                    continue
                fix = bind_fix(self.g, name)  # an input that only decides a shape
                refusals.append(Refusal.graph(f"graph input '{name}': {e}", fix))
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
            if (dynamic := Refusal.dynamic(self.g, node)) is not None:
                # neither an MPSImage nor the CPU tail's arrays take a shape known only at
                # run time (whatever its inputs)
                refusals.append(dynamic)
                self.poisoned.update(o for o in node.outputs if o)
                continue
            # Downstream of a refused node only ops with no MPS node (and no CPU code) at all
            # are reported (their refusal does not depend on the inputs); the rest would only
            # echo it.
            if any(i in self.poisoned for i in ins):
                self.poisoned.update(o for o in node.outputs if o)
                if op == "MatMul" and self.g.const(node.inputs[1]) is None:
                    if not self.cpu:
                        refusals.append(Refusal.of(node, self.g.opset, MATMUL_OF_ACTIVATIONS))
                elif emitter is None and (not self.cpu or op not in CPU_EMITTERS):
                    why = NO_NODE.get(op, "MPSNNGraph has no node for this op")
                    if self.cpu:
                        why += f"; the CPU has no Swift {op} either"
                    refusals.append(Refusal.of(node, self.g.opset, why, _c_fix(self.g, [node])))
                continue
            live = [i for i in ins if self.g.const(i) is None]
            g = self.gpu_segment(live)
            # A node that is not a convolution / pooling and reads only what the CPU computed
            # stays on the CPU: in a graph it would only copy them to the GPU and back (and
            # an Identity-like node there would make a source image a result).
            on_gpu_side = [
                i for i in live if self.seg_of.get(i) == g or i in self.gpu_segs[1].env and g == 1
            ]
            problem: str | None
            if self.cpu and op not in HEAVY_OPS and live and not on_gpu_side:
                reason = (
                    CPU_INPUTS_ONLY
                    if emitter is not None
                    else NO_NODE.get(op, "MPSNNGraph has no node for this op")
                )
                for i in live:  # the GPU's own refusal, when an input is no image
                    try:
                        self.out_dims(i)
                    except (Refuse, TypeError, ValueError) as e:
                        reason = str(e)
                        break
                problem = self.on_cpu(node, reason)
                if problem is not None and emitter is not None:
                    why = self.on_gpu(node, g)
                    problem = None if why is None else problem.replace(reason, why)
            else:
                why = self.on_gpu(node, g)
                problem = None
                if why is None:
                    heavy += op in HEAVY_OPS
                else:
                    problem = self.on_cpu(node, why) if self.cpu else why
            self.enter(1)
            if problem is not None:
                # an op with no MPS node and no Swift CPU code: the C backend may take it
                fix = _c_fix(self.g, [node]) if emitter is None and op not in CPU_EMITTERS else None
                refusals.append(Refusal.of(node, self.g.opset, problem, fix))
                self.poisoned.update(o for o in node.outputs if o)
        if not heavy and not refusals:
            # Element-wise nodes alone would only move data to the GPU and back.
            refusals.append(
                Refusal.graph(
                    "no node runs on the GPU: MPSNNGraph needs at least one image node; "
                    "this model is not a convolutional network over [1, C, H, W] images",
                    _c_fix(self.g, self.g.nodes),
                )
            )
        graphs = [self.gpu_segs[k] for k in sorted(self.gpu_segs) if self.gpu_segs[k].layers]
        outputs: list[tuple[str, Img]] = []
        cpu_outputs: dict[str, str] = {}
        for out_name in self.g.outputs:
            if out_name in self.cpu_origin and out_name in self.cpu_env:
                cpu_outputs[out_name] = self.cpu_env[out_name]
                continue
            s = max(self.seg_of.get(out_name, -1), 1)
            img = self.gpu_segs[s].env.get(out_name) if s in self.gpu_segs else None
            if not refusals and img is None:
                refusals.append(
                    Refusal.graph(
                        f"graph output '{out_name}' is not produced by a convertible node"
                    )
                )
            if not refusals and out_name in self.g.inputs:
                refusals.append(
                    Refusal.graph(
                        f"graph output '{out_name}' is a graph input; there is nothing to run"
                    )
                )
            if img is not None:
                self.gpu_segs[s].outputs.append((out_name, img))
            outputs.append((out_name, img or Img("", 0, 0, 0)))
        if not refusals and len({img.var for _, img in outputs}) != len(outputs):
            refusals.append(
                Refusal.graph(
                    "two graph outputs are the same image (an Identity/Reshape between them); "
                    "MPSNNGraph returns each result image once"
                )
            )
        for seg in graphs:
            own = {v for _, v, _ in seg.sources} | {v for _, v, _ in self.uploads}
            for name, img in seg.exports.items():
                if not refusals and img.var in own:
                    refusals.append(
                        Refusal.graph(
                            f"tensor '{name}' of GPU graph {seg.index // 2 + 1} is one of its "
                            "source images (an Identity/Reshape of it): MPSNNGraph returns "
                            "computed images only"
                        )
                    )
        if refusals and not check_only:
            raise Refuse("; ".join(map(str, refusals)))
        last = max(self.cpu_segs)
        for k, lines in self.cpu_segs.items():
            if k == 0:
                where = "head, before the graph" if len(graphs) <= 1 else "before the first graph"
            elif len(graphs) <= 1 or k == last and k > 2 * len(graphs) - 1:
                where = "tail"
            else:
                where = f"between GPU graphs {k // 2} and {k // 2 + 1}"
            lines[:] = [ln.replace(SEG_MARK.format(k), where) for ln in lines]
        for seg in graphs:
            seg.cpu_reads = [n for n in seg.exports if n in self.cpu_env]
        first = self.gpu_segs[1]
        reads = [(n, self.cpu_env.get(n, ""), img) for n, img in first.exports.items()]
        multi = len(graphs) > 1
        source_values = {n: self.cpu_env[n] for n, _, _ in self.uploads}
        for seg in graphs[1:]:
            for n, _, _ in seg.sources:
                if n in self.cpu_env and self.seg_of.get(n, -1) % 2 == 0:
                    source_values[n] = self.cpu_env[n]
        return Lowered(
            first.layers,
            inputs,
            outputs,
            self.blob,
            refusals,
            self.cpu_inputs,
            reads,
            [] if multi else [ln for k in sorted(self.cpu_segs) if k for ln in self.cpu_segs[k]],
            self.head_lines,
            self.uploads,
            {n: self.cpu_env[n] for n, _, _ in self.uploads},
            cpu_outputs,
            self.placement,
            graphs if multi else [],
            dict(sorted(self.cpu_segs.items())) if multi else {},
            source_values,
        )


def lower(
    graph: Graph, *, fp16: bool = False, check_only: bool = False, cpu: bool = True
) -> Lowered:
    """`cpu=False` (--gpu-only) refuses every node MPSNNGraph cannot run instead of placing it
    in the CPU tail."""
    return Lowering(graph, fp16=fp16, cpu=cpu).run(check_only)
