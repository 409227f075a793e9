"""The int8 GEMM / convolution kernels behind QLinearConv, QLinearMatMul and o2e.QGemm
(runtime/o2e_qgemm.h): weight packing and the call sites. A helper module (it registers no op)
so quant.py and qint8.py can both reach it without importing each other."""

from __future__ import annotations

import numpy as np

from .....passes.qdq_int8 import Int8Plan, int8_plan
from .....semantics.conv_geometry import conv_geometry
from ...emitter import NodeContext
from ..gemm.gemm import plan_threads
from . import qdw_kernels as qdw
from . import qdwpw
from .qdw_kernels import PAR, PAR_THREAD, depthwise, slot_bytes, split, units_wrapper, use_runtime

HEADER = "o2e_qgemm.h"
MR, NR = 8, 16  # O2E_QMR / O2E_QNR


def _use(ctx: NodeContext) -> None:
    ctx.helper("o2e_qgemm_include", f'#include "{HEADER}"')
    ctx.require_runtime(HEADER)


def pack_weights(w: np.ndarray) -> np.ndarray:
    """int8 [M, K] -> [ceil(M/8), ceil(K/4), 8, 4], zero padded (o2e_qkernel's A layout)."""
    M, K = w.shape
    m8, k4 = -(-M // MR), -(-K // 4)
    a = np.zeros((m8 * MR, k4 * 4), np.int8)
    a[:M, :K] = w
    return np.ascontiguousarray(a.reshape(m8, MR, k4, 4).transpose(0, 2, 1, 3))


def pack_weights16(w: np.ndarray) -> np.ndarray:
    """int8 [M, K] -> [ceil(M/4) * 4, K16] rows of K rounded up to 16, zero padded
    (o2e_qgemm16's layout: MVE's VMLADAV reads 16 consecutive k of a row)."""
    M, K = w.shape
    a = np.zeros((-(-M // 4) * 4, -(-K // 16) * 16), np.int8)
    a[:M, :K] = w
    return a


def _panel_bytes(ctx: NodeContext, K: int, P: int) -> int:
    """O2E_QPANEL_BYTES at its largest: 128 bytes per 16-column step, the int16 panels of the
    AVX2 and Arm DSP builds (the others use the first half); the C is one file for every
    -march, and every --device microcontroller has the DSP extension."""
    del ctx  # one size for every build
    return -(-P // NR) * -(-K // 4) * 128


def _mve(ctx: NodeContext) -> bool:
    """A --device cortex-m55 conversion: o2e_qgemm16 on weights packed for Helium."""
    return ctx.device.int8 == "mve"


def _chunk_bytes(ctx: NodeContext, K: int, P: int) -> int:
    """o2e_qgemm_rows' scratch: the panels of 32 columns (fewer when P is smaller, on a
    --device conversion, whose planned arena is what a run touches), 64 where P is wider than
    32 (an AVX-512 VNNI build packs up to 64 columns at once: O2E_QWIDE, whose real column
    count is at most P); o2e_qgemm16's: up to 16 columns of K rounded up to 16 bytes."""
    if _mve(ctx):
        return min(P, 16) * -(-K // 16) * 16
    if ctx.device.is_mcu:
        return _panel_bytes(ctx, K, min(P, 2 * NR))
    return _panel_bytes(ctx, K, 4 * NR if P > 2 * NR else 2 * NR)


def _split(ctx: NodeContext, macs: int, units: int) -> bool:
    """Whether a product splits across threads (o2e_qgemm.h's *_mt kernels; not Helium's
    o2e_qgemm16, which microcontrollers run on one thread anyway)."""
    return not _mve(ctx) and split(ctx, macs, units, qdw.PAR_MIN_MACS)


def _slots(ctx: NodeContext, nbytes: int) -> tuple[str, int]:
    """Scratch of one slot of nbytes per planned thread: its symbol and the slot's size."""
    slot = slot_bytes(nbytes)
    return ctx.scratch(slot * plan_threads(ctx), "uint8_t"), slot


class _Panels(str):
    """Panel scratch: the C symbol, and its per-thread slot size when the product splits
    across threads (0: one call on the calling thread)."""

    slot: int = 0


def _pk(ctx: NodeContext, K: int, pe: int, macs: int, units: int) -> _Panels:
    """The panel scratch of a product over pe columns: one slot per thread when it splits."""
    if _split(ctx, macs, units):
        sym, slot = _slots(ctx, _chunk_bytes(ctx, K, pe))
        out = _Panels(sym)
        out.slot = slot
        return out
    return _Panels(ctx.scratch(_chunk_bytes(ctx, K, pe), "uint8_t"))


def _rows_units(ctx: NodeContext, M: int, P: int, K: int, ym: int) -> str:
    """o2e_qgemm_rows_mt's unit function for these dimensions (yp 1)."""
    dims = f"{M}, {P}, {K}, {ym}, 1"
    return units_wrapper(
        ctx,
        "o2e_qgu_" + dims.replace(", ", "_"),
        "o2e_qgemm_par_args",
        f"o2e_qgemm_units_k_(a, u0, u1, {dims}, 0, 0)",
    )


def _planes_units(ctx: NodeContext, M: int, OH: int, OW: int, wp: int, K: int) -> str:
    dims = f"{M}, {OH}, {OW}, {wp}, {K}"
    return units_wrapper(
        ctx,
        "o2e_qpu_" + dims.replace(", ", "_"),
        "o2e_qgemm_par_args",
        f"o2e_qplanes_units_k_(a, u0, u1, {dims})",
    )


def _groups_units(ctx: NodeContext, Mg: int, OH: int, OW: int, wp: int, K: int) -> str:
    dims = f"{Mg}, {OH}, {OW}, {wp}, {K}"
    return units_wrapper(
        ctx,
        "o2e_qgg_" + dims.replace(", ", "_"),
        "o2e_qgroups_args",
        f"o2e_qgroups_k_(a, u0, u1, {dims})",
    )


def _units(M: int, P: int) -> int:
    """Work units of o2e_qgemm_par_ at most: chunks of 32 columns times 8-row tiles."""
    return -(-P // (2 * NR)) * -(-M // MR)


def _rows_fn(ctx: NodeContext) -> str:
    return "o2e_qgemm16_rows" if _mve(ctx) else "o2e_qgemm_rows"


def _packed(ctx: NodeContext, plan: Int8Plan) -> np.ndarray:
    """The weights packed group after group (one group: the plain packing), flat."""
    pack = pack_weights16 if _mve(ctx) else pack_weights
    mg = plan.w.shape[0] // plan.groups
    return np.concatenate(
        [pack(plan.w[g * mg : (g + 1) * mg]).reshape(-1) for g in range(plan.groups)]
    )


def _consts(ctx: NodeContext, plan: Int8Plan) -> tuple[str, str, str, str]:
    """Packed weights, corrected bias, row sums and scales as C symbols."""
    rowsum = plan.w.astype(np.int64).sum(axis=1)
    off = plan.x_zp + (128 if plan.x_signed else 0)
    bias = (plan.bias.astype(np.int64) - off * rowsum).astype(np.int64)
    bias = ((bias + 2**31) % 2**32 - 2**31).astype(np.int32)  # int32 wrap, as the kernels add
    return (
        ctx.weight(
            "qA",
            _packed(ctx, plan)
            if plan.groups > 1
            else pack_weights16(plan.w)
            if _mve(ctx)
            else pack_weights(plan.w),
        ),  # fmt: skip
        ctx.weight("qbias", bias),
        ctx.weight("qrowsum", rowsum.astype(np.int32)),
        ctx.weight("qscale", plan.scale),
    )


def _clamp_args(plan: Int8Plan) -> str:
    return f"{plan.y_zp}, {plan.lo}, {plan.hi}"


def _flip(plan: Int8Plan) -> str:
    return "0x80" if plan.x_signed else "0"


def _conv(ctx: NodeContext, plan: Int8Plan) -> str:

    x, y = ctx.x(0), ctx.y(0)
    N, C, H, W = x.shape
    M, OH, OW = y.shape[1:]
    g = conv_geometry(ctx.node, x.shape, ctx.const(3).shape, y.shape, ctx.graph.opset)
    (kh, kw), st, dl, pads = g.kernel, list(g.strides), list(g.dilations), list(g.pads)
    P = OH * OW
    xp, yp = f"(const uint8_t *){x.sym}", f"(uint8_t *){y.sym}"
    if plan.kind == "depthwise":
        if qdwpw.folded(ctx):
            # the 1x1 layer reading it computes it into its panels (qdwpw.py)
            ctx.kernel("int8 depthwise (in the 1x1 layer reading it)")
            ctx.leaves_unwritten()
            return f"/* {ctx.node.name}: computed by the 1x1 layer reading it */"
        # across channels in blocks of 16 (runtime/o2e_qdw.h)
        return depthwise(ctx, plan, (kh, kw), st, dl, pads)
    if plan.groups > 1:
        return _grouped(ctx, plan, (kh, kw), st, dl, pads)
    K = plan.w.shape[1]
    A, bias, rowsum, sc = _consts(ctx, plan)
    pointwise = kh == kw == 1 and st == [1, 1] and not any(pads)
    padv = plan.x_zp & 0xFF
    lines = [
        f"for (size_t n = 0; n < {N}; ++n) {{",
        f"  const uint8_t *xn = {xp} + n * {C * H * W};",
    ]
    if st == [1, 1] and not pointwise:
        # stride 1: padded planes read at K offsets, no column matrix (o2e_qpad)
        ctx.kernel("int8 padded-plane gemm")
        wp, hp = OW + (kw - 1) * dl[1], OH + (kh - 1) * dl[0] + 1
        pe = OH * wp
        c_, ky, kx = np.meshgrid(np.arange(C), np.arange(kh), np.arange(kw), indexing="ij")
        off = (c_ * hp * wp + ky * dl[0] * wp + kx * dl[1]).reshape(-1).astype(np.int32)
        offs = ctx.weight("qrowoff", off)
        padded = ctx.scratch(C * hp * wp, "uint8_t")
        pk = _pk(ctx, K, pe, M * K * OH * OW, _units(M, pe))
        yext = ctx.scratch(M * pe, "uint8_t")
        lines += [
            f"  o2e_qpad(xn, {C}, {H}, {W}, {hp}, {wp}, {pads[0]}, {pads[1]}, (uint8_t){padv}, "
            f"{padded});",
            *_planes_product(
                ctx,
                plan,
                (M, OH, OW, wp, K),
                (A, bias, rowsum, sc),
                (padded, offs, pk, yext, f"{yp} + n * {M * P}"),
            ),
            "}",
        ]
        return "\n".join(lines)
    subsample = kh == kw == 1 and not any(pads) and not pointwise
    if not pointwise and not subsample:
        # strided: phase planes read at K offsets, no column matrix (o2e_qphase)
        return _phase_conv(ctx, plan, (A, bias, rowsum, sc), lines, (kh, kw), st, dl, pads)
    dw = qdwpw.depthwise_of(ctx) if pointwise else None
    if dw is not None:
        return qdwpw.emit(ctx, dw, (A, bias, rowsum, sc), _flip(plan))
    ctx.kernel("int8 gemm 1x1" if pointwise else "int8 subsample gemm")
    mt = _split(ctx, N * M * K * P, _units(M, P))
    if mt:
        pk, slot = _slots(ctx, _chunk_bytes(ctx, K, P))
    else:
        pk, slot = ctx.scratch(_chunk_bytes(ctx, K, P), "uint8_t"), 0
    src = "xn"
    if subsample:
        # strided 1x1 (ResNet shortcuts): a plain subsample (runtime/o2e_qdw.h)
        col = ctx.scratch(K * P, "uint8_t")
        use_runtime(ctx)
        lines.append(f"  o2e_qsubsample(xn, {C}, {H}, {W}, {OH}, {OW}, {st[0]}, {st[1]}, {col});")
        src = col
    if mt:
        lines += [
            f"  o2e_qgemm_rows_mt({M}, {P}, {K}, {A}, {src}, {P}, 0, {_flip(plan)}, {pk}, {slot}, "
            f"{bias}, {rowsum}, {sc}, {_clamp_args(plan)}, {yp} + n * {M * P}, {P}, 1, "
            f"{PAR_THREAD}, {_rows_units(ctx, M, P, K, P)});",
            "}",
        ]
        return "\n".join(lines)
    lines += [
        f"  {_rows_fn(ctx)}({M}, {P}, {K}, {A}, {src}, {P}, 0, {_flip(plan)}, {pk}, {bias}, "
        f"{rowsum}, {sc}, {_clamp_args(plan)}, {yp} + n * {M * P}, {P}, 1);",
        "}",
    ]
    return "\n".join(lines)


def _grouped(
    ctx: NodeContext,
    plan: Int8Plan,
    kernel: tuple[int, int],
    st: list[int],
    dl: list[int],
    pads: list[int],
) -> str:
    """A grouped convolution (RegNet's 3x3 of 8-channel groups): the input padded / split
    into phase planes once, then each group's product over its channels' planes with its own
    rows of the packed weights, bias and scales (the planes' row offsets are the same for
    every group, relative to its first channel)."""
    x, y = ctx.x(0), ctx.y(0)
    N, C, H, W = x.shape
    M, OH, OW = y.shape[1:]
    G, (kh, kw) = plan.groups, kernel
    Cg, Mg, K = C // G, M // G, plan.w.shape[1]
    P = OH * OW
    A, bias, rowsum, sc = _consts(ctx, plan)
    gsz = _packed(ctx, plan).size // G
    consts = (f"{A} + g * {gsz}", f"{bias} + g * {Mg}", f"{rowsum} + g * {Mg}", f"{sc} + g * {Mg}")
    xp, yp = f"(const uint8_t *){x.sym}", f"(uint8_t *){y.sym}"
    padv = plan.x_zp & 0xFF
    yg = f"{yp} + n * {M * P} + g * {Mg * P}"
    lines = [
        f"for (size_t n = 0; n < {N}; ++n) {{",
        f"  const uint8_t *xn = {xp} + n * {C * H * W};",
    ]
    loop = f"  for (size_t g = 0; g < {G}; ++g) {{"
    pointwise = kh == kw == 1 and st == [1, 1] and not any(pads)
    mt = _split(ctx, N * M * K * P, G)
    if pointwise and mt:
        ctx.kernel("int8 grouped gemm 1x1")
        ws, slot = _slots(ctx, _chunk_bytes(ctx, K, P))
        return "\n".join(
            [
                *lines,
                f"  o2e_qgroups_mt({G}, {Mg}, {OH}, {OW}, 0, {K}, {A}, {gsz}, xn, {Cg * P}, NULL, "
                f"{_flip(plan)}, {ws}, {slot}, 0, {bias}, {rowsum}, {sc}, {_clamp_args(plan)}, "
                f"{yp} + n * {M * P}, {PAR_THREAD}, {_groups_units(ctx, Mg, OH, OW, 0, K)});",
                "}",
            ]
        )
    if pointwise:
        ctx.kernel("int8 grouped gemm 1x1")
        pk = ctx.scratch(_chunk_bytes(ctx, K, P), "uint8_t")
        body = [
            f"    {_rows_fn(ctx)}({Mg}, {P}, {K}, {consts[0]}, xn + g * {Cg * P}, {P}, 0, "
            f"{_flip(plan)}, {pk}, {consts[1]}, {consts[2]}, {consts[3]}, {_clamp_args(plan)}, "
            f"{yg}, {P}, 1);"
        ]
        return "\n".join([*lines, loop, *body, "  }", "}"])
    if st == [1, 1]:
        ctx.kernel("int8 grouped padded-plane gemm")
        wq, hq = OW + (kw - 1) * dl[1], OH + (kh - 1) * dl[0] + 1
        planes = ctx.scratch(C * hq * wq, "uint8_t")
        offs = ctx.weight("qrowoff", phase_offsets(Cg, kernel, [1, 1], dl, hq, wq))
        lines.append(
            f"  o2e_qpad(xn, {C}, {H}, {W}, {hq}, {wq}, {pads[0]}, {pads[1]}, (uint8_t){padv}, "
            f"{planes});"
        )
        gplane = hq * wq * Cg
    else:
        ctx.kernel("int8 grouped phase-plane gemm")
        wq = OW + (kw - 1) * dl[1] // st[1]
        hq = OH + (kh - 1) * dl[0] // st[0] + 1
        planes = ctx.scratch(C * st[0] * st[1] * hq * wq, "uint8_t")
        offs = ctx.weight("qrowoff", phase_offsets(Cg, kernel, st, dl, hq, wq))
        lines.append(
            f"  o2e_qphase(xn, {C}, {H}, {W}, {st[0]}, {st[1]}, {pads[0]}, {pads[1]}, {hq}, "
            f"{wq}, (uint8_t){padv}, {planes});"
        )
        gplane = st[0] * st[1] * hq * wq * Cg
    pe = OH * wq
    if mt:
        # groups across threads, each with its own panels and extended output (o2e_qgroups_mt)
        pkb = slot_bytes(_chunk_bytes(ctx, K, pe))
        ws, slot = _slots(ctx, pkb + Mg * pe)
        lines.append(
            f"  o2e_qgroups_mt({G}, {Mg}, {OH}, {OW}, {wq}, {K}, {A}, {gsz}, {planes}, {gplane}, "
            f"{offs}, {_flip(plan)}, {ws}, {slot}, {pkb}, {bias}, {rowsum}, {sc}, "
            f"{_clamp_args(plan)}, {yp} + n * {M * P}, {PAR_THREAD}, "
            f"{_groups_units(ctx, Mg, OH, OW, wq, K)});"
        )
        return "\n".join([*lines, "}"])
    pk = ctx.scratch(_chunk_bytes(ctx, K, pe), "uint8_t")
    yext = ctx.scratch(Mg * pe, "uint8_t")
    body = _planes_product(
        ctx, plan, (Mg, OH, OW, wq, K), consts, (f"{planes} + g * {gplane}", offs, pk, yext, yg)
    )
    return "\n".join([*lines, loop, *("  " + b for b in body), "  }", "}"])


def phase_offsets(
    C: int, kernel: tuple[int, int], st: list[int], dl: list[int], hq: int, wq: int
) -> np.ndarray:
    """Offset of row (c, ky, kx) of the implicit matrix in o2e_qphase's planes: plane
    (c, ky * dh % sh, kx * dw % sw), row ky * dh // sh, column kx * dw // sw."""
    c_, ky, kx = np.meshgrid(
        np.arange(C), np.arange(kernel[0]), np.arange(kernel[1]), indexing="ij"
    )
    ry, rx = ky * dl[0], kx * dl[1]
    plane = (c_ * st[0] + ry % st[0]) * st[1] + rx % st[1]
    return (plane * hq * wq + (ry // st[0]) * wq + rx // st[1]).reshape(-1).astype(np.int32)


def _phase_conv(
    ctx: NodeContext,
    plan: Int8Plan,
    consts: tuple[str, str, str, str],
    lines: list[str],
    kernel: tuple[int, int],
    st: list[int],
    dl: list[int],
    pads: list[int],
) -> str:
    x, y = ctx.x(0), ctx.y(0)
    C, H, W = x.shape[1:]
    M, OH, OW = y.shape[1:]
    K = plan.w.shape[1]
    A, bias, rowsum, sc = consts
    ctx.kernel("int8 phase-plane gemm")
    wq = OW + (kernel[1] - 1) * dl[1] // st[1]
    hq = OH + (kernel[0] - 1) * dl[0] // st[0] + 1
    pe = OH * wq
    offs = ctx.weight("qrowoff", phase_offsets(C, kernel, st, dl, hq, wq))
    planes = ctx.scratch(C * st[0] * st[1] * hq * wq, "uint8_t")
    pk = _pk(ctx, K, pe, M * K * OH * OW, _units(M, pe))
    yext = ctx.scratch(M * pe, "uint8_t")
    padv = plan.x_zp & 0xFF
    lines += [
        f"  o2e_qphase(xn, {C}, {H}, {W}, {st[0]}, {st[1]}, {pads[0]}, {pads[1]}, {hq}, {wq}, "
        f"(uint8_t){padv}, {planes});",
        *_planes_product(
            ctx,
            plan,
            (M, OH, OW, wq, K),
            consts,
            (planes, offs, pk, yext, f"(uint8_t *){y.sym} + n * {M * OH * OW}"),
        ),
        "}",
    ]
    return "\n".join(lines)


def _planes_product(
    ctx: NodeContext,
    plan: Int8Plan,
    dims: tuple[int, int, int, int, int],
    consts: tuple[str, str, str, str],
    bufs: tuple[str, str, str, str, str],
) -> list[str]:
    """The product over o2e_qpad's / o2e_qphase's planes (bufs: planes, row offsets, panel
    scratch, extended output, y): o2e_qconv_planes (only the real columns where AVX-512 VBMI
    allows, else the extended ones and o2e_qcompact), on Helium o2e_qgemm16_rows and
    o2e_qcompact."""
    M, OH, OW, wp, K = dims
    A, bias, rowsum, sc = consts
    src, offs, pk, yext, y = bufs
    if getattr(pk, "slot", 0):
        return [
            f"  o2e_qconv_planes_mt({M}, {OH}, {OW}, {wp}, {K}, {A}, {src}, {offs}, "
            f"{_flip(plan)}, {pk}, {pk.slot}, {bias}, {rowsum}, {sc}, {_clamp_args(plan)}, "
            f"{yext}, {y}, {PAR_THREAD}, {_planes_units(ctx, M, OH, OW, wp, K)});"
        ]
    if _rows_fn(ctx) == "o2e_qgemm_rows":
        return [
            f"  o2e_qconv_planes({M}, {OH}, {OW}, {wp}, {K}, {A}, {src}, {offs}, {_flip(plan)}, "
            f"{pk}, {bias}, {rowsum}, {sc}, {_clamp_args(plan)}, {yext}, {y});"
        ]
    pe = OH * wp
    return [
        f"  {_rows_fn(ctx)}({M}, {pe}, {K}, {A}, {src}, 0, {offs}, {_flip(plan)}, {pk}, "
        f"{bias}, {rowsum}, {sc}, {_clamp_args(plan)}, {yext}, {pe}, 1);",
        f"  o2e_qcompact({yext}, {M}, {OH}, {OW}, {wp}, {y});",
    ]


def _matmul(ctx: NodeContext, plan: Int8Plan) -> str:
    a, y = ctx.x(0), ctx.y(0)
    K, N = plan.w.shape[1], plan.w.shape[0]
    R = a.size // K
    A, bias, rowsum, sc = _consts(ctx, plan)
    if R == 1 and ctx.device.int8 == "dsp":
        # batch 1 on a microcontroller: a matrix-vector product, the vector widened once
        ctx.kernel("int8 gemv (batch 1)")
        xs = ctx.scratch(-(-K // 4) * 8, "uint8_t")
        return (
            f"o2e_qgemv({N}, {K}, {A}, (const uint8_t *){a.sym}, {_flip(plan)}, {xs}, {bias}, "
            f"{sc}, {_clamp_args(plan)}, (uint8_t *){y.sym}, 1);"
        )
    if _mve(ctx):
        ctx.kernel("int8 gemm (matmul, Helium layout)")
        pk = ctx.scratch(_chunk_bytes(ctx, K, R), "uint8_t")
        return (
            f"o2e_qgemm16({N}, {R}, {K}, {A}, (const uint8_t *){a.sym}, 1, 0, {K}, "
            f"{_flip(plan)}, {pk}, {bias}, {rowsum}, {sc}, {_clamp_args(plan)}, "
            f"(uint8_t *){y.sym}, 1, {N});"
        )
    pk = ctx.scratch(_panel_bytes(ctx, K, R), "uint8_t")
    ctx.kernel("int8 gemm (matmul)")
    # split by parts of the N output rows (the packed columns are shared, read only)
    mt = _split(ctx, N * K * R, -(-N // MR))
    return (
        f"o2e_qpack_cols((const uint8_t *){a.sym}, {R}, {K}, {_flip(plan)}, {pk});\n"
        f"o2e_qgemm{'_mt' if mt else ''}({N}, {R}, {K}, {A}, {pk}, {bias}, {rowsum}, {sc}, "
        f"{_clamp_args(plan)}, (uint8_t *){y.sym}, 1, {N}{', ' + PAR if mt else ''});"
    )


def try_int8(ctx: NodeContext) -> str | None:
    """The int8 kernels' code for this node, or None when they cannot run it."""
    plan = int8_plan(ctx.graph, ctx.node)
    if plan is None:
        return None
    _use(ctx)
    return _conv(ctx, plan) if ctx.op == "QLinearConv" else _matmul(ctx, plan)
