"""An int8 depthwise layer computed by the 1x1 layer that alone reads it (runtime/o2e_qdwpw.h):
MobileNetV2's depthwise 3x3 and projection 1x1 (issue 34).

The depthwise layer (o2e_qdwc) works in tiles of 16-channel pixels and transposed them back to
NCHW bytes, which the 1x1 layer transposed again into its GEMM panels. Folded, the depthwise
node emits nothing (its output is never written) and the 1x1 node runs both: the depthwise
tiles straight into the panels, then the product over them. The bytes are the two layers' own.

Taken for batch 1, a QLinearConv depthwise layer (not on a microcontroller: those run
o2e_qdwn) whose output only input 0 of one QLinearConv reads, a pointwise one (1x1, stride 1,
no padding, one group), neither in a channel-blocked chain; the two phases split across
threads each by the kernels' rule (../par_split.py) as the two layers did.
"""

from __future__ import annotations

from .....ir import Graph, Node
from .....passes.qdq_int8 import int8_plan
from .....semantics.conv_geometry import ConvGeometry, conv_geometry
from .....semantics.fused import base_op
from ...emitter import NodeContext
from ..gemm.gemm import _use_engine, plan_threads
from ..par_split import pays
from . import qdw_kernels as qdw


def _geometry(graph: Graph, node: Node) -> ConvGeometry | None:
    ts = [graph.type_of(n) for n in (node.inputs[0], node.outputs[0])]
    w = graph.const(node.inputs[3]) if len(node.inputs) > 3 and node.inputs[3] else None
    if w is None or any(t is None or not t.is_static for t in ts):
        return None
    xs, ys = (tuple(t.static_shape) for t in ts)  # type: ignore[union-attr]
    if len(xs) != 4 or xs[0] != 1:
        return None
    return conv_geometry(node, xs, w.shape, ys, graph.opset)


def _pointwise_reader(graph: Graph, dw: Node) -> Node | None:
    """The pointwise int8 layer that alone reads depthwise layer `dw`'s output, or None."""
    if base_op(dw) != "QLinearConv" or not dw.outputs or dw.outputs[0] in graph.outputs:
        return None
    plan = int8_plan(graph, dw)
    if plan is None or plan.kind != "depthwise" or _geometry(graph, dw) is None:
        return None
    readers = graph.consumers(dw.outputs[0])
    if len(readers) != 1 or base_op(readers[0]) != "QLinearConv":
        return None
    pw = readers[0]
    if [i for i, t in enumerate(pw.inputs) if t == dw.outputs[0]] != [0]:
        return None
    p2, g = int8_plan(graph, pw), _geometry(graph, pw)
    if p2 is None or p2.kind != "gemm" or p2.groups != 1 or g is None:
        return None
    if g.kernel != (1, 1) or g.strides != (1, 1) or any(g.pads) or g.group != 1:
        return None
    return pw


def _splits(ctx: NodeContext, dw: Node, pw: Node) -> tuple[bool, bool]:
    """Whether the depthwise phase and the 1x1 phase split across threads: the rule each
    layer followed on its own (qdw_kernels.depthwise, qgemm_kernels._conv)."""
    if ctx.max_threads <= 1:
        return False, False
    gd = _geometry(ctx.graph, dw)
    assert gd is not None
    _, C, H, W = ctx.tensor(dw.inputs[0]).shape
    OH, OW = ctx.tensor(dw.outputs[0]).shape[2:]
    kh, kw = gd.kernel
    M, P = ctx.tensor(pw.outputs[0]).shape[1], OH * OW
    dws = pays(C * (H * W + P * kh * kw), -(-C // qdw.CB), qdw.PAR_MIN_DW)
    units = 1 if 32 < P <= 64 else -(-P // 32)  # O2E_QDWPW_UNITS
    pws = pays(M * C * P, units, qdw.PAR_MIN_MACS)
    return dws, pws


def _usable(ctx: NodeContext, dw: Node, pw: Node) -> bool:
    if ctx.device.is_mcu or ctx.device.int8 == "mve":
        return False
    return ctx.layout_role_of(dw.name) is None and ctx.layout_role_of(pw.name) is None


def folded(ctx: NodeContext) -> bool:
    """This depthwise node is computed by the 1x1 layer reading it (it emits nothing)."""
    pw = _pointwise_reader(ctx.graph, ctx.node)
    return pw is not None and _usable(ctx, ctx.node, pw)


def depthwise_of(ctx: NodeContext) -> Node | None:
    """The depthwise node this 1x1 node computes first (its input 0 is that node's output)."""
    dw = ctx.graph.producer(ctx.node.inputs[0])
    if dw is None or _pointwise_reader(ctx.graph, dw) is not ctx.node:
        return None
    return dw if _usable(ctx, dw, ctx.node) else None


def band_rows(ow: int) -> int:
    """O2E_QDWPW_BAND: output rows of a band of the depthwise phase, whole panels (a multiple
    of 16 pixels) of at least 256 pixels; its tile holds one band."""
    low = ow & -ow
    rows16 = 16 // min(low, 16)
    return rows16 * max(1, -(-256 // (rows16 * ow)))


def emit(ctx: NodeContext, dw: Node, pw_consts: tuple[str, str, str, str], pflip: str) -> str:
    """Both layers' code: o2e_qdwpw over the depthwise node's input into this node's output."""
    graph = ctx.graph
    plan = int8_plan(graph, dw)
    g = _geometry(graph, dw)
    assert plan is not None and g is not None
    x, y = ctx.tensor(dw.inputs[0]), ctx.y(0)
    ctx.also_reads(x.name)
    _, C, H, W = x.shape
    OH, OW = ctx.tensor(dw.outputs[0]).shape[2:]
    M = y.shape[1]
    (kh, kw), st, dl, pads = g.kernel, list(g.strides), list(g.dilations), list(g.pads)
    hp = (OH - 1) * st[0] + (kh - 1) * dl[0] + 1
    wp = (OW - 1) * st[1] + (kw - 1) * dl[1] + 1
    qdw.use_runtime(ctx)
    ctx.helper("o2e_qdwpw_include", '#include "o2e_qdwpw.h"')
    ctx.require_runtime("o2e_qdwpw.h")
    ctx.kernel("int8 gemm 1x1 over the depthwise layer before it (panels)")
    w, off, bias, sc = qdw.depthwise_consts(ctx, plan, (kh, kw), dl, wp, "dw_")
    xz = plan.x_zp + (128 if plan.x_signed else 0)
    flip = "0x80" if plan.x_signed else "0"
    geo = f"{kh}, {kw}, {st[0]}, {st[1]}, {pads[0]}, {pads[1]}, {dl[0]}, {dl[1]}"
    P = OH * OW
    tile_bytes = -(-min(band_rows(OW) * OW, P) // 16) * 16 * qdw.CB
    pbytes = qdw.slot_bytes(hp * wp * qdw.CB)
    slot = qdw.slot_bytes(pbytes + tile_bytes)
    dws, pws = _splits(ctx, dw, ctx.node)
    threads = plan_threads(ctx) if dws else 1
    ws = ctx.scratch(slot * threads, "uint8_t")
    # 128 bytes per panel step: the AVX2 build's int16 panels (qgemm_kernels._panel_bytes)
    panels = ctx.scratch(-(-P // 16) * -(-C // 4) * 128, "uint8_t")
    if dws or pws:
        _use_engine(ctx)  # o2e_parallel_for (runtime/o2e_gemm.h)
    dims = f"{C}, {H}, {W}, {OH}, {OW}, {geo}"
    dunits = qdw.units_wrapper(
        ctx,
        "o2e_qdpd_" + dims.replace(", ", "_"),
        "o2e_qdwpw_args",
        f"o2e_qdwpw_dw_k_(a, u0, u1, {dims})",
    )
    pdims = f"{M}, {P}, {C}"
    punits = qdw.units_wrapper(
        ctx,
        "o2e_qdpp_" + pdims.replace(", ", "_"),
        "o2e_qdwpw_args",
        f"o2e_qdwpw_pw_k_(a, u0, u1, {pdims})",
    )
    A, b2, rowsum, sc2 = pw_consts
    p2 = int8_plan(graph, ctx.node)
    assert p2 is not None
    dpar = qdw.PAR if dws else "0"
    ppar = qdw.PAR if pws else "0"
    thread = "o2e_parallel_thread" if dws else "0"
    return (
        f"o2e_qdwpw({dims}, (const uint8_t *){x.sym}, {flip}, {xz}, {w}, {off}, {bias}, {sc}, "
        f"{plan.y_zp}, {plan.lo}, {plan.hi}, {ws}, {slot}, {pbytes}, {panels}, {M}, {A}, "
        f"{pflip}, {b2}, {rowsum}, {sc2}, {p2.y_zp}, {p2.lo}, {p2.hi}, (uint8_t *){y.sym}, "
        f"{dpar}, {ppar}, {thread}, {dunits}, {punits});"
    )
