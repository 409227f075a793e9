"""Which tensors the C backend keeps channel-blocked (NCHW16c) between layers (issue 9).

On MobileNets' narrow maps (14x14, 7x7) the packed GEMM's pixel strips are part empty and
the depthwise kernels have short rows: onnxruntime keeps those activations in channel blocks
([C/16][H][W][16]) from layer to layer. Here the same: a chain of depthwise 3x3 / 5x5 / 7x7
and 1x1 convolutions (fused activation / residual included) and squeeze-and-excitation blocks
(issue 34: a GlobalAveragePool reading the depthwise layer's blocks mid-chain, its gating Mul
x * s a member `gate`, folded into the 1x1 layer reading its product where that pays:
fold_gates) keeps its intermediate tensors blocked (channel counts that are not multiples
of BLOCK padded to whole blocks where pad_pays), and kernels/conv/conv_nchwc.py writes every
node of the chain. No reorder node is needed at the chain's edges: a 1x1 layer reads either layout (it
broadcasts one input scalar at a time) and writes either (blocked: whole vectors; NCHW: a
transposing store), so chains start and end at 1x1 layers; a depthwise layer only runs
inside a chain (blocked in and out). A chain may also end at a GlobalAveragePool that reads
the blocked tensor (MobileNets' 7x7 head): its [N][C][1][1] output is the same in both
layouts, so the last 1x1 layer stores whole vectors instead of transposing.

BLOCK is fixed at conversion, not per ISA: one generated model.c compiles for AVX-512 (one
zmm per block), AVX2 (two ymm), NEON (four q) and portable C.

The plan is a pure function of the graph and the `--kernels` options (`nchwc=off` empties
it), computed once per model (the layout_plan phase, phases.py) and read by ConvSpec.of: a tensor is
blocked when its producer and every consumer are chain members reading it as data (input 0,
or the residual input 3), and it is not a graph output. Members are then checked against
the layouts they got (a depthwise layer needs both sides blocked, a residual must be in its
output's layout, a 1x1 layer with neither side blocked gains nothing) until nothing changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np
import onnx

from ...ir import Graph, Node
from ...semantics.activations import ACTIVATIONS
from ...semantics.conv_geometry import conv_geometry
from ...semantics.fused import activation_of, base_op, has_residual

NAME = "nchwc"  # the strategy's name in --kernels and stats.layer_kernels
BLOCK = 16  # channels per block (O2E_NC_BLOCK in runtime/o2e_nchwc.h)
# Largest output map a chain takes. Measured per node against main (tools/ab_nodes.py, native,
# AVX-512 host): 14x14 / 7x7 1x1 layers 0.82-0.92x, depthwise 0.3-0.8x; with 28x28 too,
# MobileNet v1 conv4_1 dw / 1x1 0.76x / 0.93x and v2 block4 dw 0.70x, 1x1 0.82-0.84x.
MAX_P = 784
# A tensor of up to MAX_P_DW pixels is blocked too when a depthwise layer writes or reads it:
# MobileNet v1's 56x56 stage (tools/ab_nodes.py, native): conv3_1/dw 0.268 -> 0.193 ms,
# conv3_2/dw (stride 2, 56 -> 28) 0.138 -> 0.084, conv2_2/sep entering at 56x56 0.385 -> 0.445
# (the input's reorder), conv3_1/sep level. Plain 1x1 -> 1x1 tensors over MAX_P (ResNet50's
# 56x56 stage) stay NCHW: there the packed GEMM is as fast and shared with the other kernels.
MAX_P_DW = 3136
# Channel counts that are not multiples of BLOCK are padded to whole blocks (a blocked
# tensor's padding lanes are never read into a real channel: o2e_nchwc.h). One rule, pad_pays,
# says where: a layer whose padded work (up(c) / c) times the blocked kernel's measured time
# at whole blocks relative to the NCHW kernel's (BLOCKED_COST) stays within the NCHW time.
# The padding a layer computes: a depthwise layer's channels, a 1x1 layer's output channels
# (an input's padding is not read: its tiles stop at the real input channels; an NCHW input's
# is zeros in the reorder). Measured per node against main (tools/ab_nodes.py, native):
# depthwise 0.3-0.8x, 1x1 0.82-0.92x (MAX_P's note); EfficientNet-B0's 144 -> 24 leaving
# layer (+33 %) 1.45x main's time.
BLOCKED_COST = {"depthwise": 0.8, "pointwise": 0.9}
MIN_DENSITY = 0.5  # pruned 1x1 weights below this are left to the sparse kernels


@dataclass(frozen=True)
class BlockedRole:
    """A chain member's layouts: whether its input 0, output and residual input are blocked."""

    kind: str  # "pointwise", "depthwise", "gap" (a GlobalAveragePool reading blocks) or
    # "gate" (an SE block's Mul x * s, s of [N][C][1][1]: x and its product blocked)
    x: bool
    y: bool
    residual: bool = False  # the node adds a residual (input 3)
    r: bool = False  # ... which is blocked
    # an SE gate folded into the 1x1 layer reading its product (fold_gates): the gate emits
    # nothing (folded) and the 1x1 layer scales its weights by s and reads x (gate: the names
    # of x and s)
    folded: bool = False
    gate: tuple[str, str] | None = None


@dataclass(frozen=True)
class LayoutPlan:
    roles: Mapping[str, BlockedRole]  # node name -> its layouts (chain members only)
    blocked: frozenset[str]  # tensors stored as NCHW16c

    def role(self, node: Node) -> BlockedRole | None:
        return self.roles.get(node.name)

    def stored_nbytes(self, name: str, shape: tuple[int, ...], nbytes: int) -> int:
        """A tensor's buffer size: a blocked one's channels padded to whole blocks."""
        if name not in self.blocked or shape[1] % BLOCK == 0:
            return nbytes
        return nbytes // shape[1] * padded(shape[1])


EMPTY = LayoutPlan({}, frozenset())


def _kind(node: Node, graph: Graph) -> str | None:
    """'pointwise' / 'depthwise' / 'gap' when the node could run blocked whatever its
    neighbours."""
    if node.op_type == "GlobalAveragePool" and node.domain in ("", "ai.onnx"):
        return "gap" if _blockable_input(node, graph) else None
    if node.op_type == "Mul" and node.domain in ("", "ai.onnx"):
        return "gate" if gate_data(node, graph) is not None else None
    if base_op(node) != "Conv" or node.domain not in ("", "ai.onnx", "o2e"):
        return None
    if len(node.inputs) < 2 or not node.inputs[0]:
        return None
    ts = [graph.type_of(n) for n in (node.inputs[0], node.inputs[1], node.outputs[0])]
    if any(t is None or not t.is_static or len(t.static_shape) != 4 for t in ts):
        return None
    xs, ws, ys = (t.static_shape for t in ts)  # type: ignore[union-attr]
    w = graph.const(node.inputs[1])
    if w is None or w.dtype != np.float32 or ts[0].dtype != np.float32:  # type: ignore[union-attr]
        return None
    if len(node.inputs) > 2 and node.inputs[2] and graph.const(node.inputs[2]) is None:
        return None  # the bias is repacked at conversion time
    act = activation_of(node)
    if act is not None and ACTIVATIONS[act.op].gemm_kind is None:
        return None  # only the activations of the GEMM epilogue (o2e_act kinds)
    g = conv_geometry(node, xs, ws, ys, graph.opset)
    C, M = g.in_channels, g.out_channels
    if ys[2] * ys[3] > MAX_P_DW or any(d != 1 for d in g.dilations):
        return None
    if g.kernel == (1, 1) and g.group == 1 and g.strides == (1, 1) and not any(g.pads):
        if not pad_pays(M, "pointwise"):
            return None
        if np.count_nonzero(w) < MIN_DENSITY * w.size:
            return None
        return "pointwise"
    k = g.kernel[0]
    if not pad_pays(C, "depthwise"):
        return None
    if (
        g.kernel in ((3, 3), (5, 5), (7, 7))
        and g.group == C == M
        and g.strides in ((1, 1), (2, 2))
        and max(g.pads) <= k // 2
        and not has_residual(node)
    ):
        return "depthwise"
    return None


def padded(c: int) -> int:
    """c channels stored blocked: whole blocks."""
    return -(-c // BLOCK) * BLOCK


def pad_pays(c: int, kind: str) -> bool:
    """A `kind` layer computing c channels padded to whole blocks is faster blocked than NCHW
    (BLOCKED_COST); always at whole blocks."""
    return padded(c) * BLOCKED_COST[kind] <= c


def gate_data(node: Node, graph: Graph) -> int | None:
    """The data input's index when the Mul is an SE gate, x [N][C][H][W] * s [N or 1][C][1][1]
    (float32, at most MAX_P_DW pixels), else None."""
    if len(node.inputs) != 2 or not all(node.inputs) or node.inputs[0] == node.inputs[1]:
        return None
    ts = [graph.type_of(n) for n in (*node.inputs, node.outputs[0])]
    if any(t is None or not t.is_static or t.dtype != np.float32 for t in ts):
        return None
    a, b, y = (tuple(t.static_shape) for t in ts)  # type: ignore[union-attr]
    for d, (x, s) in enumerate(((a, b), (b, a))):
        if len(x) != 4 or x != y or x[2] * x[3] > MAX_P_DW or x[2] * x[3] == 1:
            continue
        if len(s) == 4 and s[0] in (1, x[0]) and s[1] == x[1] and s[2:] == (1, 1):
            return d
    return None


def _blockable_input(node: Node, graph: Graph) -> bool:
    """Input 0 is a static float32 NCHW tensor (its producer decides whether it is blocked)."""
    t = graph.type_of(node.inputs[0]) if node.inputs and node.inputs[0] else None
    if t is None or not t.is_static or t.dtype != np.float32:
        return False
    return len(t.static_shape) == 4


def plan_layout(graph: Graph, kernels: Mapping[str, str]) -> LayoutPlan:
    """The chains of `graph` that run blocked (pure: reads the graph only)."""
    if kernels.get(NAME) == "off":
        return EMPTY
    # subgraphs may read outer tensors: their readers are not visible here, so do not block
    if any(_has_subgraph(a.value) for n in graph.nodes for a in n.attrs.values()):
        return EMPTY
    kinds = {n.name: k for n in graph.nodes if (k := _kind(n, graph)) is not None}
    outputs = set(graph.outputs)
    while True:
        blocked = frozenset(
            t
            for n in graph.nodes
            if n.name in kinds and kinds[n.name] != "gap"  # its output: 1x1 maps, NCHW
            for t in n.outputs[:1]
            if t not in outputs
            and graph.consumers(t)
            and all(_reads_as_data(c, t, graph) and c.name in kinds for c in graph.consumers(t))
            and (_pixels(graph, t) <= MAX_P or _next_to_depthwise(n, t, graph, kinds))
        )
        roles = {}
        for n in graph.nodes:
            if n.name not in kinds:
                continue
            res = has_residual(n)
            d = gate_data(n, graph) if kinds[n.name] == "gate" else 0
            roles[n.name] = BlockedRole(
                kinds[n.name],
                n.inputs[d or 0] in blocked,
                n.outputs[0] in blocked,
                res,
                res and n.inputs[3] in blocked,
            )
        drop = {name for name, r in roles.items() if not _consistent(r)}
        if not drop:
            return LayoutPlan(fold_gates(graph, roles), blocked)
        kinds = {k: v for k, v in kinds.items() if k not in drop}


def fold_gates(graph: Graph, roles: Mapping[str, BlockedRole]) -> dict[str, BlockedRole]:
    """`roles` with each SE gate x * s whose product only a blocked 1x1 layer reads as its
    input folded into that layer: it computes w[m][k] s[k] per image (o2e_nchwc.h) and reads
    x, so the gated tensor is never written. Taken where the weights are no larger than the
    tensor (M <= P: scaling them costs no more than the gate's pass over x; EfficientNet's
    14x14 projections, not its 7x7 ones)."""
    out = dict(roles)
    for n in graph.nodes:
        role = roles.get(n.name)
        if role is None or role.kind != "gate":
            continue
        readers = graph.consumers(n.outputs[0])
        if len(readers) != 1:
            continue
        conv = readers[0]
        cr = roles.get(conv.name)
        if cr is None or cr.kind != "pointwise" or not cr.x or cr.gate is not None:
            continue
        if [i for i, t in enumerate(conv.inputs) if t == n.outputs[0]] != [0]:
            continue
        m = graph.type_of(conv.outputs[0]).static_shape[1]  # type: ignore[union-attr]
        if padded(m) > _pixels(graph, n.outputs[0]):
            continue
        d = gate_data(n, graph)
        assert d is not None
        out[n.name] = replace(role, folded=True)
        out[conv.name] = replace(cr, gate=(n.inputs[d], n.inputs[1 - d]))
    return out


def _pixels(graph: Graph, t: str) -> int:
    shape = graph.type_of(t).static_shape  # type: ignore[union-attr]  # _kind checked it
    return shape[2] * shape[3]


def _next_to_depthwise(producer: Node, t: str, graph: Graph, kinds: Mapping[str, str]) -> bool:
    """A depthwise chain member writes or reads `t`."""
    readers = graph.consumers(t)
    near = ("depthwise", "gate")  # a gate sits between a depthwise layer and its 1x1 one
    return kinds[producer.name] in near or any(kinds.get(c.name) in near for c in readers)


def _reads_as_data(node: Node, t: str, graph: Graph) -> bool:
    """`t` is only the node's input 0 or its residual (input 3), never a weight or bias (a
    gate: its data input, never the gates)."""
    idx = [i for i, n in enumerate(node.inputs) if n == t]
    if node.op_type == "Mul":
        return idx == [gate_data(node, graph)]
    return all(i == 0 or (i == 3 and has_residual(node)) for i in idx)


def _consistent(role: BlockedRole) -> bool:
    if role.kind in ("depthwise", "gate"):
        return role.x and role.y
    if role.kind == "gap":
        return role.x  # an NCHW input: pool2d's kernel
    if role.residual and role.r != role.y:
        return False  # the kernel adds the residual in its output's layout
    return role.x or role.y  # neither side blocked: the NCHW kernels take it


def _has_subgraph(value: object) -> bool:
    if isinstance(value, onnx.GraphProto):
        return True
    return isinstance(value, list) and any(isinstance(v, onnx.GraphProto) for v in value)
