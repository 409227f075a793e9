"""Winograd convolution for 3x3, stride-1 Conv (Lavin & Gray, "Fast Algorithms for
Convolutional Neural Networks", 2016): y = Aᵀ·[(G·g·Gᵀ) ⊙ (Bᵀ·d·B)]·A per output tile.

F(m x m, 3x3) computes an m x m output tile from an (m + 2) x (m + 2) input tile with
(m + 2)² multiplications instead of 9·m², so over all channels a 3x3 convolution becomes
(m + 2)² independent matrix products, one per position of the transformed tile:

    U[k] = (G·g·Gᵀ)[k]         [Cout][Cin]    filter transform, at conversion time (float64)
    V[k] = (Bᵀ·d·B)[k]         [Cin][tiles]   input transform, generated straight-line C
    M[k] = U[k] · V[k]         [Cout][tiles]  (m + 2)² packed SGEMMs (kernels/gemm/gemm.py)
    y    = Aᵀ·M·A + bias (+ residual, activation)  output transform, generated C

F(4x4, 3x3) needs 36 / (9·16) = 1/4 of the multiplications of a direct convolution, F(2x2, 3x3)
16 / 36. The transformed weights are (m + 2)² / 9 times larger than the original ones (4x for
F(4x4, 3x3)): they are the price of the speed. Two bits per original weight (nonzero, sign)
are kept too, for the tiles whose input holds NaN / Inf, computed directly as onnxruntime
does (DIRECT below).

Accuracy. The matrices come from the Toom-Cook construction on interpolation points
(finite points + infinity). The classic F(4, 3) points 0, ±1, ±2 lose about 5 bits in float32;
0, ±1, -1/2, 2 lose about 3 (3x smaller error on random layers, the best pair among ±1/2, ±2,
±1/4, ±4, ±3/2, ±2/3 in a search; cf. Barabasz et al., "Error analysis and improving the
accuracy of Winograd convolution for deep neural networks", 2020). Bᵀ and Aᵀ are normalised
by powers of two (exact in floating point) so their entries are small integers; the fractions
live in G, applied once at conversion time in float64.

Run-time layout (NCHW; one image, a block of tile rows at a time so V and M stay in cache):
  - the input transform splits each channel by phase (plane a·n + j holds the padded input at
    rows ≡ a mod m, columns m·tw + j), so input (i, j) of every tile of the block is one
    contiguous run, and transforms all the block's tiles in one loop that vectorises over tiles
    whatever the map width; V[k] rows are channels;
  - the output transform reads M[k][o][t] for one output channel, writes the m² planes of the
    output tiles, then interleaves them into y's rows, adding the residual and activation;
    outputs of edge tiles past OH / OW are simply not stored.
The GEMM engine's fused epilogue is not used: bias, residual and activation apply to y, after
the output transform.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from .....ir import Graph, Node
from .....semantics.activations import Activation
from .....semantics.fused import base_op
from ...emitter import NodeContext, Tensor
from ...headers import include
from ...ops.common import act_expr
from ..gemm.gemm import _use_engine, act_struct, gemm_workspace, packed_weights, plan_threads
from .conv_spec import AUTO, OFF, ConvSpec, ConvStrategy, register

# Interpolation points per output tile size m (infinity is always the last point).
POINTS: dict[int, tuple[Fraction, ...]] = {
    2: (Fraction(0), Fraction(1), Fraction(-1)),
    4: (Fraction(0), Fraction(1), Fraction(-1), Fraction(-1, 2), Fraction(2)),
}
# Below these sizes im2col + GEMM is as fast or faster. Measured on single layers (1 thread,
# AVX-512): Winograd wins from 8 input and output channels (8 -> 8 at 56x56: 1.5x), loses with 3
# input channels (RGB stems, 2x slower); MIN_TILES: see tile_size.
MIN_CHANNELS = 8
MIN_TILES = 16
# F(4x4) needs more tiles than that: at 16 (13x13 .. 16x16 maps) its GEMMs' N is one AVX-512
# vector, the micro-kernel runs 16 x 1 (one FMA per load of the weights: 2/3 of SqueezeNet's
# fire9 time), and its weights are 36/16 of F(2x2)'s. Measured in-model (tools/ab_nodes.py,
# 1 thread, F(2x2) / F(4x4) time): SqueezeNet fire9 (64 -> 256, 13x13) 0.91-0.92 native, 1.04-1.07
# x86-64-v3; GoogLeNet 4a-4e (14x14) 0.88-0.95 native, 0.94-1.05 x86-64-v3; ResNet50 res4 (14x14)
# 0.96-1.04 both; AlexNet conv3 (256 -> 384, 13x13) 0.96 native. F(2x2) is also 3-4x more
# accurate. From 17x17 (25 tiles) F(4x4) wins again, and with many input channels it keeps the
# 16-tile maps: VGG16 conv5 (512 -> 512, 14x14) ran 1.06-1.13x slower as F(2x2) (native,
# in-model); F4_MIN_C lies between the 256 and 512 measured (not tuned further).
MIN_TILES_F4 = 25
F4_MIN_C = 384
# F(4x4, 3x3) rounds ~8x worse than a direct convolution (F(2x2): ~1.4x). An error made early in
# Inception-v3 (45 weighted layers after Conv2d_2a/2b) is amplified ~100x by the time it reaches
# the logits. Measured there (native, logits vs onnxruntime, whose own optimised-vs-unoptimised
# runs differ by 1.2e-4): F(4x4) everywhere 2.6e-4 (beyond verify's 2x-spread allowance);
# F(2x2) where >= 45 layers follow (Conv2d_2a/2b) 1.5e-4, 1.9 ms slower; >= 40 (also Conv2d_4a,
# Mixed_5b) 1.0e-4, 4.6 ms slower. VGG (<= 15 layers after), GoogLeNet (<= 19) and ResNet50
# (up to 51, but its residual paths do not amplify: 3.7e-5 with F(4x4) everywhere) keep F(4x4)
# nearly everywhere. Convolutions with at least this many weighted layers after them use F(2x2).
DEEP = 45
WEIGHTED = ("Conv", "ConvTranspose", "Gemm", "MatMul")
# V and M of one block of tile rows are kept under this many bytes (they are re-read by the
# GEMMs and the output transform while still in the L2 / L3 cache).
BLOCK_BYTES = 2 << 20
# Tiles are transformed in chunks of VEC (a constant trip count gcc vectorises without a
# run-time profitability check); scratch rows are padded to a multiple of it.
VEC = 16
# Name in `convert --kernels`: winograd=off disables it, winograd=2 or 4 forces that tile size
# wherever the kernel applies.
STRATEGY_NAME = "winograd"
# With at least this many blocks (images x tile-row blocks) a convolution shares whole blocks
# between threads; with fewer it shares the (m + 2)^2 products of each block.
BLOCK_PARALLEL_MIN = 2

# Non-finite inputs. The transforms mix a whole (m + 2)² input tile into every output of its tile,
# so one Inf made all m² outputs NaN (Inf - Inf), where onnxruntime's direct convolution gives
# +-Inf / NaN only where the 3x3 window reads it, and finite values elsewhere. A tile whose input
# holds NaN / Inf (any channel) has a non-finite transformed tile, so its m² outputs, summed, are
# not finite (every column of Bᵀ and Aᵀ has a nonzero: a non-finite value reaches at least one
# output, and a sum with a non-finite term is not finite); the output transform checks that sum
# per tile (m² adds per tile and output channel, vectorised) and recomputes such tiles directly
# (o2e_winograd_f{m}_direct). The 3x3 weights are not stored again for that (they cost 9/36 of F(4x4)'s
# weights, 9/16 of F(2x2)'s: SqueezeNet's weight bytes +21%): a finite input is multiplied by
# the weight recovered from U = G·g·Gᵀ (g = L·U·Lᵀ with L an exact left inverse of G, ~1 ulp of
# the weights' scale: the finite outputs match onnxruntime's to float rounding), and a
# non-finite one by the weight's sign, 0 for a zero weight (0 * Inf = NaN, +-1 * Inf = +-Inf, as
# the exact product): two bits per weight (nonzero, negative), 1/16 of the float32 weights. A
# finite input whose transforms overflow is recomputed the same way.
# The transforms, the direct tiles and the drivers are C in runtime/o2e_winograd.h: one
# specialised function per tile size m, for the Bᵀ and Aᵀ of matrices(m).
HEADER = "o2e_winograd.h"


def weight_bits(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(nonzero, negative) bits of the 3x3 weights [M][C][3][3], 8 per byte, lowest bit first."""
    flat = np.asarray(w, np.float32).reshape(-1)
    nz = flat != 0
    return (
        np.packbits(nz, bitorder="little"),
        np.packbits(nz & np.signbit(flat), bitorder="little"),
    )


def _rup64(n: int) -> int:
    return (n + 63) // 64 * 64


# --------------------------------------------------------------------------------------------
# transform matrices (exact, at conversion time)
# --------------------------------------------------------------------------------------------
def _poly_mul(a: list[Fraction], b: list[Fraction]) -> list[Fraction]:
    out = [Fraction(0)] * (len(a) + len(b) - 1)
    for i, x in enumerate(a):
        for j, y in enumerate(b):
            out[i + j] += x * y
    return out


def _pow2_scale(values: list[Fraction]) -> Fraction:
    """The power of two that makes `values` integers (1 when a denominator is not a power of 2)."""
    den = max((v.denominator for v in values), default=1)
    return Fraction(den) if den & (den - 1) == 0 else Fraction(1)


def matrices(
    m: int, r: int = 3
) -> tuple[list[list[Fraction]], list[list[Fraction]], list[list[Fraction]]]:
    """Exact (Aᵀ, G, Bᵀ) of F(m, r) for the points in POINTS[m].

    Toom-Cook: the linear convolution s = u * g (u of length m) is evaluated at the n - 1
    finite points a_j and at infinity, multiplied point-wise and interpolated back (Lagrange
    basis M_j(x) / M_j(a_j), M_j = Π_{l≠j}(x − a_l), plus the leading coefficient times
    Π(x − a_l)). Correlation, what Conv computes, is its transpose: Aᵀ = Vandermonde of the
    points for m coefficients, G = Vandermonde for r coefficients scaled by 1 / M_j(a_j),
    Bᵀ rows = coefficients of M_j and of Π(x − a_l).
    """
    pts = POINTS[m]
    n = m + r - 1
    assert len(pts) == n - 1
    at = [[a**i for a in pts] + [Fraction(int(i == m - 1))] for i in range(m)]
    g: list[list[Fraction]] = []
    bt: list[list[Fraction]] = []
    full = [Fraction(1)]
    for a in pts:
        full = _poly_mul(full, [-a, Fraction(1)])
    for j, a in enumerate(pts):
        mj, f = [Fraction(1)], Fraction(1)
        for k, b in enumerate(pts):
            if k != j:
                mj = _poly_mul(mj, [-b, Fraction(1)])
                f *= a - b
        g.append([a**k / f for k in range(r)])
        bt.append([*mj, Fraction(0)])
    g.append([Fraction(int(k == r - 1)) for k in range(r)])
    bt.append(full)
    # power-of-two normalisation: integer Bᵀ rows and Aᵀ columns, G absorbs the factors
    for j in range(n):
        s = _pow2_scale(bt[j])
        bt[j] = [v * s for v in bt[j]]
        t = _pow2_scale([at[i][j] for i in range(m)])
        for i in range(m):
            at[i][j] *= t
        g[j] = [v / (s * t) for v in g[j]]
    return at, g, bt


def _f64(mat: list[list[Fraction]]) -> np.ndarray:
    return np.array([[float(v) for v in row] for row in mat], dtype=np.float64)


def transform_weights(w: np.ndarray, m: int) -> np.ndarray:
    """U[k][o][c] = (G·w[o][c]·Gᵀ) flattened over the (m + 2)² positions, computed in float64."""
    _, g, _ = matrices(m)
    gm = _f64(g)
    u = np.einsum("ik,ockl,jl->ijoc", gm, w.astype(np.float64), gm, optimize=True)
    n = m + 2
    return u.reshape(n * n, w.shape[0], w.shape[1]).astype(np.float32)


# --------------------------------------------------------------------------------------------
# the conv hook
# --------------------------------------------------------------------------------------------
def tile_size(spec: ConvSpec) -> int:
    """The output tile size m to use for this Conv, 0 when Winograd does not apply or pay."""
    forced = spec.setting(STRATEGY_NAME)
    if forced == OFF or not spec.rearrangeable:
        return 0
    if spec.ks != [3, 3] or spec.st != [1, 1] or spec.dl != [1, 1] or spec.group != 1:
        return 0
    if spec.optimize == "size":  # transformed weights: 36/9 (F(4x4)), 16/9 (F(2x2)) of the 3x3 ones
        return 0
    C, M = spec.C, spec.M
    OH, OW = spec.y.shape[2:]
    if forced in ("2", "4"):
        return int(forced)
    if C < MIN_CHANNELS or M < MIN_CHANNELS:
        return 0
    # the GEMMs need enough tiles (their N) to run near full speed: F(4x4) from 17x17 outputs
    # (MIN_TILES_F4; 13x13 with >= F4_MIN_C inputs), F(2x2) down to 7x7, where F(4x4) would
    # leave only 2x2 tiles per GEMM;
    # F(2x2) also where many layers follow, which would amplify F(4x4)'s larger rounding errors
    assert spec.graph is not None and spec.node is not None
    sizes = (2,) if layers_after(spec.graph, spec.node) >= DEEP else (4, 2)
    for m in sizes:
        few = MIN_TILES_F4 if m == 4 and C < F4_MIN_C else MIN_TILES
        if -(-OH // m) * -(-OW // m) >= few:
            return m
    return 0


def layers_after(graph: Graph, node: Node) -> int:
    """Weighted layers (Conv, Gemm, MatMul, ConvTranspose) on the longest path from `node`'s
    output to a graph output: how many layers can amplify an error made in this one."""
    depth: dict[str, int] = {}  # weighted layers from a node's input to an output
    for n in reversed(graph.nodes):  # topological order reversed: consumers first
        below = max((depth[c.name] for o in n.outputs if o for c in graph.consumers(o)), default=0)
        if n.name == node.name:
            return below
        # by base op: after fusion a Conv is an o2e.ConvAct / ConvAddAct
        depth[n.name] = below + (base_op(n) in WEIGHTED)
    return 0


def refuse(spec: ConvSpec) -> str | None:
    if tile_size(spec) == 0:
        return "not 3x3 stride 1 on float32 constant weights, or too few channels / tiles"
    return None


@dataclass(frozen=True)
class Plan:
    """Sizes of one Winograd Conv: tiles, blocking and scratch (all in floats)."""

    m: int
    C: int
    M: int
    TH: int
    TW: int

    @property
    def n(self) -> int:
        return self.m + 2

    @property
    def rows(self) -> int:
        return rows_per_block(self.C, self.M, self.TH, self.TW, self.n)

    def strides(self, nth: int) -> tuple[int, int, int, int]:
        """(tiles, row length ld, stride of the V[k], stride of the M[k]) of a block of nth tile rows."""
        nt = nth * self.TW
        ld = _ld(nt)
        return nt, ld, _odd(self.C * ld), _odd(self.M * ld)

    def scratch(self) -> tuple[int, int, int, int]:
        """Floats of: the input phase planes (later the output tile planes), one padded input row,
        V, M; for the largest block."""
        m, n, TW = self.m, self.n, self.TW
        _, ld, vs, ms = self.strides(self.rows)
        planes = max(m * n * _odd(ld + TW + VEC), m * m * _odd(ld))
        return planes, m * _ld(TW) + m, n * n * vs, n * n * ms


def emit(ctx: NodeContext, spec: ConvSpec) -> str:
    """The Conv as (m + 2)² packed GEMMs between generated input and output transforms."""
    x, w, y, pads, bias = spec.x, spec.w, spec.y, spec.pads, spec.bias
    m = tile_size(spec)
    N, C, H, W = x.shape
    M = w.shape[0]
    OH, OW = y.shape[2:]
    plan = Plan(m, C, M, -(-OH // m), -(-OW // m))
    n, TW, rows = plan.n, plan.TW, plan.rows
    pt, pl = pads[0], pads[1]
    ctx.kernel(f"winograd F({m}x{m},3x3)")
    packed, stride = packed_weights(ctx, f"winograd{m}", transform_weights(ctx.const(1), m))
    act = spec.act
    st_act, post = act_struct(act)
    res = None
    if spec.residual:
        ctx.kernel("residual add in the Winograd output transform")
        res = ctx.x(3).sym
    # for the tiles with a non-finite input (DIRECT): the weights' nonzero and sign bits
    nz, neg = (
        ctx.weight(h, b)
        for h, b in zip(("wino_nz", "wino_neg"), weight_bits(ctx.const(1)), strict=True)
    )
    full, rem = divmod(plan.TH, rows)
    nblocks = full + (1 if rem else 0)
    sizes = plan.scratch()
    nt_max = plan.strides(rows)[0]
    ws_per = _rup64(gemm_workspace(ctx, M, nt_max, C, threads=1))  # one thread's
    # the GEMM engine (o2e_sgemm_packed_local, o2e_parallel_for) comes before the kernels
    _use_engine(ctx)
    include(ctx, HEADER)
    head = (
        f"/* Winograd F({m}x{m},3x3): {plan.TH}x{TW} tiles, {rows} tile row(s) per block, {n * n} GEMMs "
        f"{M}x(tiles)x{C} per block */"
    )
    units = N * nblocks
    if units >= BLOCK_PARALLEL_MIN:
        # Whole blocks per thread (input transform, GEMMs, output transform), each thread in
        # its own scratch: everything runs in parallel, not only the products.
        slots = [ctx.scratch(f * 4 * plan_threads(ctx)) for f in sizes]
        ws = ctx.scratch(ws_per * plan_threads(ctx), "char")
        name = f"o2e_winograd_blocks_{ctx.step}"
        geo = [plan.strides(rows), plan.strides(rem or rows)]
        fields = [m, N, C, H, W, pt, pl, M, OH, OW, plan.TH, TW, rows, nblocks]
        pairs = [f"{{{geo[0][i]}, {geo[1][i]}}}" for i in range(4)]
        record = ", ".join(map(str, fields)) + ", " + ", ".join(pairs)
        record += f", {stride}, {', '.join(map(str, sizes))}, {ws_per}, {st_act.removeprefix('(o2e_act)')}, {int(res is not None)}"
        ctx.helper(
            name,
            f"""
/* the Winograd blocks of node {ctx.node.name!r} (runtime/o2e_winograd.h) */
static void {name}(void *arg, int u0, int u1)
{{
  static const o2e_wino_plan p = {{{record}}};
  o2e_winograd_blocks((const o2e_wino_block_args *)arg, &p, u0, u1);
}}
""",
        )
        lines = [
            head,
            f"{{ o2e_wino_block_args a = {{{x.sym}, {packed}, {bias or 'NULL'}, {res or 'NULL'}, {y.sym}, "
            f"{slots[0]}, {slots[1]}, {slots[2]}, {slots[3]}, {ws}, {nz}, {neg}}};",
            f"  o2e_parallel_for({units}, {name}, &a); }}",
        ]
    else:
        # Too few blocks to share: the (m + 2)^2 products of each block are the parallel work
        # (each on one thread; on small maps every one of them is too small to split).
        # (the transforms too: input channels, then output channels, across threads)
        e, rb = (ctx.scratch(f * 4 * plan_threads(ctx)) for f in sizes[:2])
        v, mm = (ctx.scratch(f * 4) for f in sizes[2:])
        ws = ctx.scratch(ws_per * plan_threads(ctx), "char")
        par_in, par_out = f"o2e_winograd_f{m}_in_par", f"o2e_winograd_f{m}_out_par"

        def block(row0: str, nth: int) -> str:
            nt, ld, vs, ms = plan.strides(nth)
            r = f"{res} + (size_t)b * {M * OH * OW}" if res else "NULL"
            tr = (
                f"o2e_wino_tr_args ta = {{{x.sym} + (size_t)b * {C * H * W}, {C}, {H}, {W}, {pt}, {pl}, {row0}, "
                f"{nth}, {TW}, {ld}, {vs}, {ms}, {e}, {sizes[0]}, {rb}, {sizes[1]}, {v}, {mm}, {M}, {OH}, {OW}, "
                f"{bias or 'NULL'}, {r}, {y.sym} + (size_t)b * {M * OH * OW}, {st_act}, {packed}, "
                f"{stride}, {nz}, {neg}}};"
            )
            return "\n".join(
                [
                    f"  {{ {tr}",
                    f"    o2e_parallel_for({C}, {par_in}, &ta);",
                    f"    {{ o2e_wino_gemm_args ga = {{{packed}, {stride}, {v}, {vs}, {mm}, {ms}, {M}, {nt}, {C}, {ld}, "
                    f"{ws}, {ws_per}}};",
                    f"      o2e_parallel_for({n * n}, o2e_wino_gemms, &ga); }}",
                    f"    o2e_parallel_for({M}, {par_out}, &ta); }}",
                ]
            )

        blocks = [block("tb", rows)] + ([block(str(full * rows), rem)] if rem else [])
        lines = [
            head,
            f"for (int b = 0; b < {N}; ++b) {{",
            f"for (int tb = 0; tb < {full * rows}; tb += {rows}) {{"
            if full > 1
            else "{ const int tb = 0;",
            blocks[0],
            "}",
        ]
        if rem:
            lines += ["{", blocks[1], "}"]
        lines.append("}")
    if post:
        lines.append(_post_act(act, y))
    return "\n".join(lines)


def rows_per_block(C: int, M: int, TH: int, TW: int, n: int) -> int:
    """Tile rows transformed and multiplied together.

    Every block re-reads all (n·n)·M·C transformed weights; V and M (n·n·(C + M) floats per
    tile) are written and read once whatever the blocking, from the cache if a block's share
    stays under BLOCK_BYTES, else from memory. Fewest bytes from memory wins; ties go to the
    smaller block (better cache locality)."""
    w_bytes = n * n * M * C * 4
    vm_tile = n * n * (C + M) * 4

    def cost(rows: int) -> int:
        spill = 2 * vm_tile * TH * TW if vm_tile * rows * TW > BLOCK_BYTES else 0
        return -(-TH // rows) * w_bytes + spill

    return min(range(1, TH + 1), key=lambda r: (cost(r), r))


def _ld(nt: int) -> int:
    """Row length of the scratch matrices for nt tiles: whole VEC chunks, and not a multiple of
    1 KiB (rows that far apart share cache sets, which the GEMM's packing of B walks down)."""
    ld = -(-nt // VEC) * VEC
    return ld + VEC if ld % 256 == 0 else ld


def _odd(size: int) -> int:
    """`size` rounded up to an odd number of VEC chunks: (n + 2)² rows that far apart, written or
    read together by the transforms, then fall in different cache sets (a multiple of 4 KiB
    would put them all in one set of the L1 cache)."""
    s = -(-size // VEC) * VEC
    return s + VEC if s // VEC % 2 == 0 else s


def _post_act(act: Activation | None, y: Tensor) -> str:
    """Activations the output transform does not apply (Sigmoid, Tanh, ...): one pass over y."""
    return f"for (size_t i = 0; i < {y.size}; ++i) {{ const float v = {y.sym}[i]; {y.sym}[i] = {act_expr(act, 'v')}; }}"


# convert --kernels winograd=2|4 forces the tile size where Winograd applies at all
STRATEGY = register(
    ConvStrategy(STRATEGY_NAME, refuse, emit, settings=(AUTO, OFF, "2", "4")), rank=50
)
