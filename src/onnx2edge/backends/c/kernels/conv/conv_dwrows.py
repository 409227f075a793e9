"""Depthwise 2-D convolution over a ring of padded input rows (issue 9: MobileNets).

The plane kernel (conv_depthwise.py) copies a whole channel into zero-bordered phase planes,
computes a "wide" output over them and compacts its rows into y: for the 56x56 .. 112x112
maps of MobileNet's depthwise layers that is two extra passes over the channel (the zero fill
and the compaction) and a working set (planes + wide output: 100 KB for 112x112) that spills
L1. Here each input row is copied once, as it is first needed, into a ring of kh row slots
(zero-bordered, and for a column stride of 2 split into its even / odd columns, so every tap
is a unit-stride read); each output row is then computed straight into y from the kh slots
its window covers (rows above / below the input read a zero row). The working set is
(kh + 1) padded rows: a few KB, in L1, and y is written once.

The output is computed R rows at a time (issue 34), one vector loop over the columns: AVX-512
(16 lanes, the last block masked), AVX2 (8, masked store), NEON (4 per vector, the tail
through a small buffer), and the portable loop. Each input vector loaded feeds the
accumulators of every one of the R rows whose window holds it (3x3 stride 1, R = 8: 30
loads for 72 multiply-adds instead of 72), and the R chains run side by side. Every lane still
computes b + w00·t00 + w01·t01 + ... as a chain of fused multiply-adds in row-major tap
order, like the plane kernel. Rows of 7 .. 15 outputs leave lanes of an AVX-512 vector empty
but measured faster than the plane kernel's flat loop (its split and compaction passes):
MobileNetV3-small's 14x14 5x5 layers 0.73-0.81 of it, its 7x7 ones 0.78. Narrower maps keep
the plane kernel.
"""

from __future__ import annotations

from .....semantics.activations import (
    GEMM_CLIP,
    GEMM_HARD_SIGMOID,
    GEMM_HARD_SWISH,
    GEMM_NONE,
    GEMM_RELU,
    Activation,
)
from ...emitter import NodeContext
from ...headers import include
from ...ops.common import act_tail, act_tail_fn
from ..pool import pool2d
from . import se_pool
from .conv_depthwise import KIND_TAGS, register_params
from .conv_spec import ConvSpec, ConvStrategy, register

# Output rows shorter than this keep the plane kernel (conv_depthwise.py): its flat loop runs
# across rows. From 7 (half an AVX-512 vector) the rows with R rows a step measured faster.
MIN_OW = 7
MAX_K = 7  # taps are unrolled: kh·kw of them
# Output rows computed a step (o2e_dwrows.h's O2E_DWR_MAXR): each loaded input vector feeds up
# to this many rows' accumulators. Where there are 32 vector registers (AVX-512, NEON) 8 rows
# beat 4 on 5x5 / 7x7 filters (fewer loads a multiply-add); AVX2's 16 registers keep 4.
MAX_R = 8
NARROW_R = 4


def rows_per_step(OH: int, cap: int) -> int:
    """The rows a step for a map of OH rows and at most cap a step: as many as fit, evened out
    over the steps (OH = 28, cap 8: 4 steps of 7, not 8 + 8 + 8 + a 4-row step that
    recomputes 4 rows)."""
    steps = -(-OH // min(cap, OH))
    return -(-OH // steps)


def ring_rows(OH: int, kh: int, sh: int) -> int:
    """Row buffers of a scratch slot: the input rows of the widest step, then the zero row."""
    return (rows_per_step(OH, MAX_R) - 1) * sh + kh + 1


_SLACK = 16  # floats past each row buffer's last needed column: one AVX-512 vector


def _rup16(n: int) -> int:
    return (n + 15) // 16 * 16


def row_floats(OW: int, kw: int, sw: int) -> int:
    """Floats of one phase of a padded row buffer: the columns the taps read plus slack for
    the whole-vector loads of the last block; a multiple of 16 (64-byte aligned slots)."""
    return _rup16(OW + (kw - 1) // sw + _SLACK)


# The activation kinds o2e_dwrows.h applies in registers, by their macro there.
_KIND_C = {
    GEMM_NONE: "O2E_DWR_NONE",
    GEMM_RELU: "O2E_DWR_RELU",
    GEMM_CLIP: "O2E_DWR_CLIP",
    GEMM_HARD_SIGMOID: "O2E_DWR_HSIG",
    GEMM_HARD_SWISH: "O2E_DWR_HSWISH",
}


def _kernel(
    ctx: NodeContext,
    kh: int,
    kw: int,
    sh: int,
    sw: int,
    kind: int,
    tail: Activation | None,
    rows: tuple[int, int],
    pool: bool = False,
) -> str:
    """The row-ring depthwise kernel for one filter geometry and fused activation; its name.

    kind: the activation table's epilogue kind, one of KIND_TAGS' (lo, hi: its parameters);
    tail: any other activation (SiLU, HardSwish, ...), applied by the kernel to the planes it
    wrote, after them (common.act_tail says why there), not as a pass over y; per row, a
    28-wide row left 12 columns to the loop's scalar remainder."""
    if pool:  # the header's tail takes no pool: the wrapper runs act + means after it
        suffix, tail_stmt = act_tail(ctx, tail, pool)
        tail_fn = "NULL"
    else:
        (suffix, tail_fn), tail_stmt = act_tail_fn(ctx, tail), ""
    r_wide, r_narrow = rows
    name = f"o2e_dwrows{kh}x{kw}_s{sh}x{sw}_r{r_wide}x{r_narrow}{KIND_TAGS[kind]}{suffix}"
    include(ctx, "o2e_intrinsics.h")
    include(ctx, "o2e_dwrows.h")
    # literals: the taps unroll, over both choices of rows a step (o2e_dwrows.h picks one)
    args = f"{kh}, {kw}, {sh}, {sw}, {_KIND_C[kind]}, {r_wide}, {r_narrow}"
    after = (
        "\n  { const o2e_win2d_args *a = (const o2e_win2d_args *)arg;"
        f" const size_t OH = (size_t)a->OH, OW = (size_t)a->OW; {tail_stmt} }}"
        if tail_stmt
        else ""
    )
    return ctx.helper(
        name,
        # noinline: inlined into the model's run function (one call site on one thread) its
        # unrolled taps shared the register allocation of the whole network and spilled
        f"""
static __attribute__((noinline)) void {name}(void *arg, int i0, int i1)
{{
  o2e_dwrows({args}, (const o2e_win2d_args *)arg, i0, i1, {tail_fn});{after}
}}
""",
    )


def refuse(spec: ConvSpec) -> str | None:
    if spec.nsp != 2 or not spec.depthwise:
        return "not a 2-D depthwise convolution (one filter per channel)"
    kh, kw = spec.ks
    if spec.dl != [1, 1]:
        return "dilated (the plane kernel takes it)"
    if spec.st[0] not in (1, 2) or spec.st[1] not in (1, 2):
        return "stride other than 1 or 2"
    if kh > MAX_K or kw > MAX_K:
        return f"kernel larger than {MAX_K}x{MAX_K}"
    if spec.y.shape[3] < MIN_OW:
        return f"output rows narrower than {MIN_OW} (the plane kernel fills whole vectors)"
    if spec.pads[0] >= kh or spec.pads[1] >= kw:
        return "padding as wide as the kernel"
    return None


def emit(ctx: NodeContext, spec: ConvSpec) -> str:
    x, w, y, N, C = spec.x, spec.w, spec.y, spec.N, spec.C
    H, W = x.shape[2:]
    OH, OW = y.shape[2:]
    kh, kw = spec.ks
    sh, sw = spec.st
    # the activations the kernel applies in registers; any other at the end of each call
    kind, lo, hi, post = register_params(spec.act)
    pool = se_pool.pool_target(ctx, spec)
    rows = rows_per_step(OH, MAX_R), rows_per_step(OH, NARROW_R)
    name = _kernel(ctx, kh, kw, sh, sw, kind, post, rows, pool is not None)
    ctx.kernel("depthwise rows")
    RW = row_floats(OW, kw, sw)
    fields = {
        "x": x.sym,
        "w": w.sym,
        "bias": spec.bias or "NULL",
        "y": y.sym,
        "C": str(C),
        "H": str(H),
        "W": str(W),
        "OH": str(OH),
        "OW": str(OW),
        "pt": str(spec.pads[0]),
        "pl": str(spec.pads[1]),
        "HQ": "0",
        "WQ": str(RW),
        "lo": lo,
        "hi": hi,
        "pool": se_pool.claim(ctx, pool),
    }
    n = N * C
    work = n * (H * W + OH * OW * (kh * kw + 1))
    lines = [pool2d.call_planes(ctx, name, n, work, ring_rows(OH, kh, sh) * sw * RW, fields)]
    return "\n".join(lines)


# The residual add runs as a pass after the kernel; activations other than Relu / Clip at the end
# of each kernel call, over its planes (common.act_tail).
STRATEGY = register(ConvStrategy("dw_rows", refuse, emit, fuses_residual=False), rank=30)
