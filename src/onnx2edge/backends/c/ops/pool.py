"""MaxPool / AveragePool / LpPool and the global pools, as lists of kernel strategies
(pool_spec.py `PoolSpec`; strategy.py `Strategy`, `select`) in the order they are preferred:
pool_rows.py's separable row kernels, pool2d.py's phase planes, else the generic N-d loop here;
for the global pools the channel-blocked sum (conv_nchwc.py), pool2d.py's vectorised sum, else
the loop here."""

from __future__ import annotations

import numpy as np

from ....ir import Graph, Node
from ....semantics.pooling import pool_attrs
from ..emitter import NodeContext
from ..kernels.conv import conv_nchwc
from ..kernels.pool import pool2d, pool_rows
from ..kernels.pool.pool_spec import PoolSpec, PoolStrategy
from ..strategy import AUTO, select
from . import register_op
from .dtypes import compute_ctype, is_float, load_expr, store_expr

FLOAT = ("float", "double")


def _pool_check(node: Node, graph: Graph) -> str | None:
    """MaxPool takes every float type and int8 / uint8 (opset 12); the averages float types only."""
    t = graph.type_of(node.inputs[0])
    if t is None:
        return None
    ok = is_float(t.dtype) or (node.op_type == "MaxPool" and t.dtype.name in ("int8", "uint8"))
    if not ok or t.dtype.name.startswith(("float8", "float4")):
        return f"{node.op_type} on {t.dtype.name} is not supported"
    return None


def _pool_types(ctx: NodeContext) -> tuple[str, str, str]:
    """(compute C type, libm suffix, element loader) for the pooled tensor: float16 / bfloat16 are
    pooled in float, as numpy does (ops/dtypes.py)."""
    x = ctx.x(0)
    ct = compute_ctype(x.dtype)
    return ct, "" if ct == "double" else "f", lambda ref: load_expr(ctx, x.dtype, ref)


def _take_any(spec: PoolSpec) -> str | None:
    return None


def _emit_loop(ctx: NodeContext, spec: PoolSpec) -> str:
    """Any pool, any rank and type: the reference loop."""
    x, y = spec.x, spec.y
    op = ctx.node.op_type
    ct, F, load = _pool_types(ctx)
    flt = ct in FLOAT
    nsp = x.rank - 2
    N, C = x.shape[:2]
    geo = spec.geom
    ks, st, dl, pads = list(geo.kernel), list(geo.strides), list(geo.dilations), list(geo.pads)
    in_sp, out_sp = x.shape[2:], y.shape[2:]
    pa = pool_attrs(ctx.node, ctx.graph.opset)  # count_include_pad (AveragePool), p (LpPool)
    include_pad, p = int(pa.count_include_pad), pa.p
    want_idx = op == "MaxPool" and ctx.has_output(1)
    lines = [
        f"for (int nc = 0; nc < {N * C}; ++nc) {{",
        f"  const {x.ctype} *xc = {x.sym} + (size_t)nc * {int(np.prod(in_sp))};",
    ]
    for d in range(nsp):
        lines.append(f"  for (int o{d} = 0; o{d} < {out_sp[d]}; ++o{d})")
    lines.append("  {")
    init = "-INFINITY" if op == "MaxPool" and flt else "0"
    lines.append(f"    {ct} acc = {init}; int cnt = 0; long best = -1;")
    lines.append("    (void)cnt; (void)best;")
    for d in range(nsp):
        lines.append(f"    for (int k{d} = 0; k{d} < {ks[d]}; ++k{d})")
    lines.append("    {")
    conds, off = [], "0"
    for d in range(nsp):
        lines.append(f"      const int i{d} = o{d} * {st[d]} - {pads[d]} + k{d} * {dl[d]};")
        conds.append(f"i{d} >= 0 && i{d} < {in_sp[d]}")
        off = f"({off} * {in_sp[d]} + i{d})"
    # positions in the padded region (inside pads) count for count_include_pad
    inpad = " && ".join(
        f"i{d} >= -{pads[d]} && i{d} < {in_sp[d] + pads[d + nsp]}" for d in range(nsp)
    )
    lines.append(f"      if ({' && '.join(conds)}) {{")
    lines.append(f"        const {ct} v = {load(f'xc[{off}]')};")
    if op == "MaxPool":
        # the first maximum wins; storage_order 1 numbers the indices column-major (MaxPool spec)
        idx = off
        if pa.storage_order:
            idx = f"i{nsp - 1}"
            for d in reversed(range(nsp - 1)):
                idx = f"({idx} * {in_sp[d]} + i{d})"
        lines.append(f"        if (best < 0 || v > acc) {{ acc = v; best = {idx}; }}")
    elif op == "AveragePool":
        lines.append("        acc += v; ++cnt;")
    else:
        lines.append(f"        acc += {f'fabs{F}(v)' if p == 1 else f'pow{F}(fabs{F}(v), {p})'};")
    lines.append("      }")
    if op == "AveragePool" and include_pad:
        lines.append(f"      else if ({inpad}) ++cnt;")
    lines.append("    }")
    yoff = "0"
    for d in range(nsp):
        yoff = f"({yoff} * {out_sp[d]} + o{d})"
    res = {
        "MaxPool": "acc",
        "AveragePool": "(cnt ? acc / cnt : 0)",
        "LpPool": "acc" if p == 1 else f"pow{F}(acc, ({ct})1 / {p})",
    }[op]
    lines.append(
        f"    {y.sym}[(size_t)nc * {int(np.prod(out_sp))} + {yoff}] = {store_expr(ctx, y.dtype, res, src=ct)};"
    )
    if want_idx:
        lines.append(
            f"    {ctx.y(1).sym}[(size_t)nc * {int(np.prod(out_sp))} + {yoff}] = (int64_t)nc * {int(np.prod(in_sp))} + best;"
        )
    lines.append("  }")
    lines.append("}")
    return "\n".join(lines)


def _emit_global_loop(ctx: NodeContext, spec: PoolSpec) -> str:
    """Any global pool, any type: the reference loop."""
    x, y = spec.x, spec.y
    ct, F, load = _pool_types(ctx)
    NC = x.shape[0] * x.shape[1]
    S = int(np.prod(x.shape[2:]))
    op = ctx.node.op_type
    if op == "GlobalAveragePool":
        body, res = "acc += v;", f"acc / {S}"
    elif op == "GlobalMaxPool":  # NaN propagates from the first element, as in the reference
        body, res = "if (i == 0 || v > acc) acc = v;", "acc"
    else:
        p = pool_attrs(ctx.node, ctx.graph.opset).p
        body, res = f"acc += pow{F}(fabs{F}(v), {p});", f"pow{F}(acc, ({ct})1 / {p})"
    init = "-INFINITY" if op == "GlobalMaxPool" and ct in FLOAT else "0"
    return f"""for (int nc = 0; nc < {NC}; ++nc) {{
  const {x.ctype} *xc = {x.sym} + (size_t)nc * {S};
  {ct} acc = {init};
  for (int i = 0; i < {S}; ++i) {{ const {ct} v = {load("xc[i]")}; {body} }}
  {y.sym}[nc] = {store_expr(ctx, y.dtype, res, src=ct)};
}}"""


def _refuse_blocked_gap(spec: PoolSpec) -> str | None:
    return None if spec.layout is not None and spec.layout.x else "input not channel-blocked"


def _emit_blocked_gap(ctx: NodeContext, spec: PoolSpec) -> str:
    code = conv_nchwc.global_avgpool(ctx)
    assert code is not None, "conv_nchwc.global_avgpool refused a blocked input"
    return code


def _refuse_unfused_gap(spec: PoolSpec) -> str | None:
    return None if spec.pooled_by else "no depthwise layer wrote the means"


def _emit_fused_gap(ctx: NodeContext, spec: PoolSpec) -> str:
    ctx.kernel("means written by the depthwise layer")
    return "/* the means were written by the depthwise layer that feeds this pool (se_pool.py) */"


# Preference order: the first strategy that does not refuse a node writes it. The loops take
# any node, so they cannot be switched off.
STRATEGIES: tuple[PoolStrategy, ...] = (
    PoolStrategy("pool_rows", pool_rows.refuse, pool_rows.emit),  # float32 2-D, by rows
    PoolStrategy("pool_planes", pool2d.refuse_planes, pool2d.emit_planes),  # float32 2-D
    PoolStrategy("pool_loop", _take_any, _emit_loop, settings=(AUTO,)),
)
GLOBAL_STRATEGIES: tuple[PoolStrategy, ...] = (
    # squeeze-and-excitation: the depthwise layer already wrote the means (kernels/conv/se_pool.py,
    # decided when that layer was emitted, so not an option here)
    PoolStrategy("gap_fused", _refuse_unfused_gap, _emit_fused_gap, settings=(AUTO,)),
    # a blocked input (nchwc_plan.py) must be read blocked: `--kernels nchwc=off` plans none
    PoolStrategy("gap_nchwc", _refuse_blocked_gap, _emit_blocked_gap, settings=(AUTO,)),
    PoolStrategy("gap_sum", pool2d.refuse_global_sum, pool2d.emit_global_sum),
    PoolStrategy("global_pool_loop", _take_any, _emit_global_loop, settings=(AUTO,)),
)


@register_op("MaxPool", "AveragePool", "LpPool", check=_pool_check)
def pool(ctx: NodeContext) -> str:
    spec = PoolSpec.of(ctx)
    return select(ctx, STRATEGIES, spec).emit(ctx, spec)


@register_op("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool", check=_pool_check)
def global_pool(ctx: NodeContext) -> str:
    spec = PoolSpec.of(ctx)
    return select(ctx, GLOBAL_STRATEGIES, spec).emit(ctx, spec)
