"""Direct convolution with output channels in the vector lanes, for layers with many taps per
output on maps at least 12 pixels wide: Inception-v3's 1x7 / 7x1 (17x17) and 5x5 (35x35)
layers, NIN's 5x5, AlexNet's grouped layers, ResNet's 3x3 / 2 downsampling layers.

There the implicit GEMM (conv_gemm.py) loses a fifth of its time to packing B - the column matrix
has kh·kw copies of every input - and its 48-column strips fit a 289-pixel map badly. Here
nothing is packed: 32 output channels x P <= 10 (PX512) consecutive output pixels of a row are 2·P
accumulators that stay in AVX-512 registers for the whole C x kh x kw loop; each tap loads
the 32 weights of that (c, i, j) as two vectors and broadcasts P input values read in place
from a zero-bordered copy of the input, for 2·P FMAs:

    y[m .. m+32][oh][ow + p] = b + Σ_c Σ_i Σ_j w[m .. m+32][c][i][j] · xpad[c][oh + i][ow + p + j]

Weights are rearranged at conversion time to [m / 32][c][i][j][32] (zero-padded past M), so
a tile reads them as one sequential stream. The finished tile is transposed into the NCHW
output by a scalar loop (bias and activation applied there), which costs a few % at the
K = C·kh·kw >= 500 this path is chosen for. Work units are (32-channel block, output row),
split across threads by `o2e_parallel_for`; results do not depend on the split. Builds
with AVX2 + FMA (16 ymm registers) run each tile as 16 lanes x <= 6 pixels at a time (two
halves of the pixels, two halves of the lanes); builds with neither run the same loops in plain
C (vectorised over the 32 lanes by the compiler).
Winograd (3x3) and the few-channel direct kernel (conv_direct.py) are tried first.

A k x 1 filter (stride 1) runs as 1 x k on the transposed input copy (_transposed): a 1 x k tile
broadcasts each input pixel once for the k taps of its row, a k x 1 tile P fresh ones per tap
(AVX-512, P = 9: 77 loads per 126 FMAs instead of 29). Six chained 192 -> 192 layers on 17x17
(Inception-v3 Mixed_6, tools/ab_nodes.py, native, minima): 7x1 1.23 -> 1.08 ms, the 1x7 layers
1.04 as before; AVX2 unchanged (its broadcasts are pinned per tap either way).

A row is cut into balanced tiles (13 pixels as 7 + 6, not 12 + 1: a 1-pixel tile is two FMA
chains waiting on each other). Groups run one after the other.

Measured (AVX-512, 1 thread, ms, this path vs the implicit GEMM): Inception-v3 1x7 192 -> 192
on 17x17 0.72 vs 0.93, 7x1 0.72 vs 0.92, 5x5 48 -> 64 on 35x35 0.91 vs 1.20; NIN 5x5 96 -> 256
on 27x27 4.45 vs 4.59; AlexNet's grouped conv2 / conv4 / conv5 2.16 / 1.08 / 0.72 vs 2.48 /
1.26 / 0.91. On maps narrower than one 12-pixel tile it lost (NIN's 3x3 on 6x6: 1.84 vs 1.74;
Inception-v3's 1x3 on 8x8: 0.41 vs 0.33), hence MIN_OW.
"""

from __future__ import annotations

import numpy as np

from ...emitter import NodeContext
from ...headers import include
from ...ops.common import act_expr
from ..gemm.gemm import _use_engine, plan_threads
from ..pool import pool2d
from .conv_spec import ConvSpec, ConvStrategy, refuse_not_rearrangeable, register

LANES = 32  # output channels per tile: two AVX-512 vectors
PX = 12  # tile scratch and the widest tile of the AVX2 / portable paths (2 x 6 pixels)
# AVX-512 tiles hold at most PX512 pixels (a row is cut into balanced tiles of <= this). GCC keeps
# each broadcast input for all the taps of a kernel row that use it (taps j and j + sw read one
# pixel apart), so besides the 2·P accumulators and 2 weight vectors a tile holds up to
# P + ceil(kw / sw) - 1 broadcasts. Compiled alone per width (objdump, stack moves per tile
# copy, -O3 -march=native): 3x3 / 2 at P = 12, 11, 10, 9: 160, 117, 44, 36 (the last two only
# the final stores); 5x5 / 1: 350, 198, 46, 36. Inception-v3's 5x5 48 -> 64 on 35x35 (3 tiles
# of <= 12 -> 4 of <= 10) then took 0.64-0.69x the time (tools/ab_nodes.py, three interleaved
# runs); rows already cut into tiles of <= 10 (ResNet50's 28 and 14, Inception-v3's 17) keep
# their tiles.
PX512 = 10
PX_AVX2 = 6  # AVX2: 16 lanes x 6 pixels = 12 ymm accumulators, each lane half in turn
MIN_K = 500  # below this the transposing store is no longer a small part of a tile
MIN_M = 64
# Strided layers read phase planes of the input (stride 2: 4 per channel; kernels/pool/pool2d.py
# phase_split), so every tap is again a run of consecutive pixels: ResNet50's 3x3 / 2 layers
# 1.58 -> 1.19 ms (128 ch) and 1.46 -> 1.11 ms (256 ch), Inception-v3's Mixed_6a 3.16 -> 2.74 ms.
# RGB stems (3 input channels, 7x7 / 2: 147 taps) ran 1.3-2x slower than the GEMM: MIN_K.
MAX_STRIDE = 4
MAX_PLANES_BYTES = 8 << 20  # the phase planes live in the arena while the layer runs
PREFETCH_L2 = 1 << 20  # see emit: prefetch the next block's weights where the working set fits
MIN_OW = PX  # narrower maps: one short tile per row; Inception-v3 8x8 1x3 layers ran 25 % slower than the GEMM


def _transposed(spec: ConvSpec) -> bool:
    """k x 1 filters (stride 1) whose transposed rows still fill a tile: Inception-v3's 7x1."""
    kh, kw = spec.ks
    return kw == 1 and kh > 1 and spec.st == [1, 1] and spec.y.shape[2] >= MIN_OW


def refuse(spec: ConvSpec) -> str | None:
    if (why := refuse_not_rearrangeable(spec)) is not None:
        return why
    kh, kw = spec.ks
    st, y = spec.st, spec.y
    C, M = spec.cg, spec.mg
    if spec.nsp != 2:
        return "not a 2-D convolution"
    HQ, WQ = pool2d.phase_geometry(y.shape[2], y.shape[3], kh, kw, st[0], st[1], 1, 1)
    if C * st[0] * st[1] * HQ * WQ * 4 > MAX_PLANES_BYTES:  # the input copy lives in the arena
        return "input phase planes too large for the arena"
    ok = (
        spec.dl == [1, 1]
        and kh * kw > 1
        and max(st) <= MAX_STRIDE
        and C * kh * kw >= MIN_K
        and M >= MIN_M
        and y.shape[3] >= MIN_OW
        and not spec.residual
    )
    return None if ok else f"needs >= {MIN_M} outputs, >= {MIN_K} taps, a wide map, no residual"


def emit(ctx: NodeContext, spec: ConvSpec) -> str:
    """Groups (AlexNet's conv2, conv4, conv5) run one after the other, each as its own layer."""
    x, w, y, ks, st, pads = spec.x, spec.w, spec.y, spec.ks, spec.st, spec.pads
    bias, group = spec.bias, spec.group
    N, Ctot, H, W = x.shape
    Mtot = w.shape[0]
    C, M = Ctot // group, Mtot // group
    OH, OW = y.shape[2:]
    kh, kw = ks
    pt, pl = pads[0], pads[1]
    sh, sw = st
    Hp, Wp = pool2d.phase_geometry(OH, OW, kh, kw, sh, sw, 1, 1)  # each phase plane
    blocks = -(-M // LANES)
    wc = np.zeros((group, blocks * LANES, C, kh, kw), np.float32)
    wc[:, :M] = ctx.const(1).reshape(group, M, C, kh, kw)
    # [g][M / 32][c][i][j][32]: one tile's weights in the order it reads them
    wsym = ctx.weight(
        "lanes",
        np.ascontiguousarray(
            wc.reshape(group, blocks, LANES, C, kh, kw).transpose(0, 1, 3, 4, 5, 2)
        ),
    )
    gstride = blocks * LANES * C * kh * kw
    act = spec.act
    # A k x 1 filter runs as the 1 x k filter it is on the transposed map (the copy of the input
    # is transposed, the weights' tap order is the same): then the tile's broadcasts serve the k
    # taps of a row in turn (P + k - 1 loads per 2·P·k FMAs) instead of P fresh ones per tap.
    # Outputs are stored transposed back by the tile's scalar store loop, which exists anyway.
    tr = _transposed(spec)
    ys = (1, OW) if tr else (OW, 1)  # y strides of the tile's rows and of its pixels
    if tr:
        kh, kw, Hp, Wp, OH, OW = kw, kh, Wp, Hp, OW, OH
    include(ctx, "o2e_intrinsics.h")
    include(ctx, "o2e_lanes.h")
    tile = f"o2e_lanes_tile{kh}x{kw}_s{sh}x{sw}"
    geom = f"{kh}, {kw}, {sh}, {sw}"  # literals: the taps unroll (one copy per filter size)
    ctx.helper(
        tile,
        f"""
static void {tile}_h(const o2e_lanes_args *a, int mb, int oh, int ow0, int P, int h, float *t)
{{
  o2e_lanes_half({geom}, a, mb, oh, ow0, P, h, t);
}}

static void {tile}(const o2e_lanes_args *a, int mb, int oh, int ow0, int P, float *t)
{{
  o2e_lanes_tile({geom}, a, mb, oh, ow0, P, t, {tile}_h);
}}
""",
    )
    pad = "o2e_lanes_pad_transposed" if tr else pool2d.phase_split(ctx, sh, sw)
    ctx.kernel("direct conv (output channels in lanes)")
    xp = ctx.scratch(C * sh * sw * Hp * Wp * 4)
    threads = plan_threads(ctx)  # tile scratch per thread (gemm.MAX_THREADS, or one: --device)
    tiles = ctx.scratch(threads * PX * LANES * 4)
    units = blocks * OH
    threaded = units > 1 and M * OH * OW * C * kh * kw >= pool2d.PAR_MIN_WORK
    name = f"o2e_lanes_rows_{ctx.step}"
    ntiles = -(-OW // PX512)
    nt = f"O2E_LANES_NT({ntiles}, {-(-OW // PX_AVX2)})"
    # While block mb runs, its tiles' store loops pull the next block's weights into L2 (pfk
    # cache lines per output channel stored), where two blocks and the input copy fit in
    # PREFETCH_L2 bytes. Not in the tile loop: a prefetch there cost GCC the broadcasts it keeps
    # in registers (5x5 tile: 70 -> 214 broadcasts per 500 FMAs).
    span = C * kh * kw * LANES  # floats of one block's weights
    pfk = -(-span // (16 * OH * ntiles * LANES))
    prefetch = (2 * span + C * sh * sw * Hp * Wp) * 4 <= PREFETCH_L2
    chunk = LANES * pfk * 16  # floats prefetched per tile
    if threaded:
        _use_engine(ctx)  # o2e_parallel_for / o2e_parallel_thread, declared before the row function
    fn = "NULL"  # the store loop's activation: the table's expression
    if act is not None:
        fn = ctx.helper(
            f"{name}_act",
            f"\nstatic inline float {name}_act(float v) {{ return {act_expr(act, 'v')}; }}\n",
        )
    rows = f"{OH}, {OW}, {M}, {nt}, {ys[0]}, {ys[1]}, {blocks}, {int(prefetch)}, {span}, {chunk}, {pfk}"
    thread = "o2e_parallel_thread()" if threaded else "0"
    ctx.helper(
        name,
        f"""
static void {name}(void *arg, int u0, int u1)
{{
  const o2e_lanes_args *a = (const o2e_lanes_args *)arg;
  float *t = a->t + (size_t){PX * LANES} * (size_t)({thread});
  o2e_lanes_rows((o2e_lanes_geom){{{rows}}}, a, t, u0, u1, {tile}, {fn});
}}
""",
    )
    run = f"o2e_parallel_for({units}, {name}, &a);" if threaded else f"{name}(&a, 0, {units});"
    b = f"{bias} + (size_t)g * {M}" if bias else "NULL"
    return "\n".join(
        [
            f"for (int n = 0; n < {N}; ++n)",
            f"for (int g = 0; g < {group}; ++g) {{",
            f"  memset({xp}, 0, {C * sh * sw * Hp * Wp * 4});",
            f"  for (int c = 0; c < {C}; ++c) {pad}({x.sym} + ((size_t)n * {group} + g) * {C * H * W} + (size_t)c * {H * W}, "
            f"{H}, {W}, {pt}, {pl}, {Hp}, {Wp}, {xp} + (size_t)c * {sh * sw * Hp * Wp});",
            f"  o2e_lanes_args a = {{{xp}, {wsym} + (size_t)g * {gstride}, {tiles}, {C}, {Hp}, {Wp}, {kh}, {kw}, {OH}, "
            f"{OW}, {y.sym} + ((size_t)n * {group} + g) * {M * OH * OW}, {b}}};",
            f"  {run}",
            "}",
        ]
    )


STRATEGY = register(ConvStrategy("lanes", refuse, emit), rank=90)
