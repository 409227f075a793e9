"""Sparse kernels for pruned weights (issue 14): fully connected layers (Gemm / MatMul with a
constant 2-D weight, any batch) and 1x1 convolutions (stride 1, no padding, group 1).

A layer goes sparse only when its constant weight has few enough nonzeros that the sparse
kernel measured faster than our dense one (BREAK_EVEN below); dense stays dense. The weights
are stored in CSR (runtime/o2e_sparse.h explains the kernels and the NaN/Inf handling), and
the original dense weight is not emitted, so the weight bytes shrink with the sparsity.

Gemm / MatMul (ops/matmul.py) ask `try_gemm` / `try_fc` before their dense paths read the
weight input (reading it registers the dense constant in the generated file); Conv takes the
sparse kernel as its first strategy (ops/conv.py `SPARSE`: `refuse_conv1x1` / `emit_conv1x1`
on the layer's ConvSpec, whose geometry resolved strides, pads and auto_pad).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .....semantics.attrs import gemm_attrs
from ...emitter import NodeContext, Tensor
from ...ops.common import apply_act_loop
from ..conv.conv_spec import ConvSpec, refuse_not_rearrangeable

HEADER = "o2e_sparse.h"

# Largest density (nonzeros / weights; for fc_batch1_bsr the share of stored 16x1 blocks) at
# which each sparse kernel pays, per ISA. Measured with tools/sparse_breakeven.py on
# 2026-11-24, "Intel Xeon @ 2.80GHz" (Ice Lake server, AVX-512); AVX2 = the same host with
# -march=x86-64-v3; one thread, thread CPU time, medians of >= 20 runs, the sparse build (only the kind under test sparse) and our dense
# build (--kernels sparse=off) of the same one-layer model timed in the same process; the 2-core
# machine was shared (load average 12-16), so +-20% noise. Layers: Relu then FC 1000 -> 500 at
# batch 1 (about half the inputs zero, as in an MLP; our dense batch-1 kernel skips them too) and
# at batch 64; 1x1 conv 256 -> 256 on 14x14; random unstructured masks (16x1 block masks for
# fc_batch1_bsr).
#   sparse / our dense at density           0.1    0.2    0.3    0.4    0.5
#   AVX-512 fc_batch1 (CSC, zero x skipped)  0.56   1.36   1.98   -      3.31
#   AVX-512 fc_batch1_bsr (BSC 16x1)         0.11   0.19   0.23   -      0.51
#   AVX-512 fc_batchN (spmm)                 -      0.54   0.62   0.84   -
#   AVX-512 conv1x1   (spmm)                 -      0.88   1.52   2.15   -
#   AVX2    fc_batch1                        0.81   1.50   2.32   2.66   -
#   AVX2    fc_batchN                        0.26   0.59   0.68   0.83   -
#   AVX2    conv1x1                          0.30   0.38   0.79   1.10   -
# Thresholds: the crossing interpolated linearly and rounded down; fc_batchN and fc_batch1_bsr
# still win at the densest point measured (0.4 / 0.5), their limits are the measured 0.4 and an
# extrapolated 0.7 (not measured on AVX2: the same value is used). Unstructured batch-1 layers
# need ~85% sparsity on AVX-512 (~88% on AVX2) to beat our dense kernel: it reads 4 bytes per
# weight of the nonzero inputs at memory speed, while each stored nonzero costs the CSC loop
# ~1.5 cycles (o2e_sparse.h lists the formats tried); 16x1 blocks win from far below 70%.
BREAK_EVEN_BY_ISA = {
    "avx512": {"fc_batch1_bsr": 0.70, "fc_batch1": 0.15, "fc_batchN": 0.40, "conv1x1": 0.20},
    "avx2": {"fc_batch1_bsr": 0.70, "fc_batch1": 0.12, "fc_batchN": 0.40, "conv1x1": 0.35},
}


# One model.c serves every ISA (its kernels are chosen by #if at compile time), so which layers
# go sparse cannot follow the converting host without making the generated files differ from one
# machine to the next (an AVX2 host wrote another manifest than the goldens): a layer goes sparse
# where the sparse kernel measured faster at both ISAs.
BREAK_EVEN = {k: min(t[k] for t in BREAK_EVEN_BY_ISA.values()) for k in BREAK_EVEN_BY_ISA["avx512"]}
# Below this many weights the dense kernel's overheads are negligible either way: stay dense.
MIN_WEIGHTS = 4096
# A 1x1 convolution multiplies each weight by every pixel: MobileNet v1's first pointwise layer
# (32 -> 64, 2048 weights, 112 x 112 pixels) ran 2x faster sparse at 90% (mb2 micro-benchmark).
MIN_WEIGHTS_CONV1X1 = 1024


def _csr(w: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """rowptr, col, val of W[M][K] (int32, int32, float32); NaN weights count as nonzero."""
    nzmask = w != 0
    rows, cols = np.nonzero(nzmask)
    rowptr = np.zeros(w.shape[0] + 1, np.int32)
    np.cumsum(np.count_nonzero(nzmask, axis=1), out=rowptr[1:])
    return rowptr, cols.astype(np.int32), w[rows, cols].astype(np.float32)


def density(w: np.ndarray) -> float:
    return float(np.count_nonzero(w)) / w.size if w.size else 1.0


def mode(kernels: Mapping[str, str]) -> str:
    """`convert --kernels sparse=...`: "auto" (default: the break-even rule), "off" (dense
    kernels only) or "force" (every eligible layer with any zero weight, in the format the
    break-even rule picks for it: 16x1 blocks or not; for tests and measurements). Recorded in
    the manifest (options.kernels, stats.sparse_mode)."""
    m = kernels.get("sparse", "auto")
    return m if m in ("auto", "off", "force") else "auto"


def block_density(w: np.ndarray, v: int = 16) -> float:
    """Fraction of the v x 1 output blocks of W[M][K] holding a nonzero (stored by BSR)."""
    nz = np.pad(w != 0, ((0, -w.shape[0] % v), (0, 0)))
    return float(nz.reshape(-1, v, w.shape[1]).any(axis=1).mean())


def sparse_applicable(w: np.ndarray | None, kind: str, m: str) -> bool:
    """True when a constant float32 weight (outputs x inputs) is sparse enough for `kind`
    under mode `m`."""
    least = MIN_WEIGHTS_CONV1X1 if kind == "conv1x1" else MIN_WEIGHTS
    if m == "off" or w is None or w.dtype != np.float32 or w.ndim != 2 or w.size < least:
        return False
    if kind == "fc_batch1_bsr":  # a format choice between two sparse kernels, even in "force"
        return block_density(w) <= BREAK_EVEN[kind]
    d = density(w)
    return d < 1.0 if m == "force" else d <= BREAK_EVEN[kind]


def _bsc(w: np.ndarray, v: int = 16) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """cptr, brow, bval (v floats per block, zero-padded rows) of the v x 1 blocks of W[M][K],
    stored by input column (o2e_bsc_fc skips zero inputs): column k's blocks are
    cptr[k] .. cptr[k + 1], row block brow[j] ascending."""
    wp = np.pad(w, ((0, -w.shape[0] % v), (0, 0)))
    blocks = wp.reshape(-1, v, w.shape[1])  # (row blocks, v, K)
    keep = (blocks != 0).any(axis=1).T  # (K, row blocks)
    cols, rb = np.nonzero(keep)
    cptr = np.zeros(w.shape[1] + 1, np.int32)
    np.cumsum(keep.sum(axis=1), out=cptr[1:])
    return cptr, rb.astype(np.int32), np.ascontiguousarray(blocks[rb, :, cols], np.float32)


def _csc(w: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """colptr, row (ascending per column), val of W[M][K]; NaN weights count as nonzero."""
    ptr, row, val = _csr(np.ascontiguousarray(w.T))
    return ptr, row, val


# Floats / ints per widest vector load (AVX-512): the kernels load `val`, `col` and a BSC
# block's 16 values one vector at a time, in loops the nonzero count bounds at run time. A layer
# with fewer stored entries than that (an all-zero layer has none: a global prune can leave one)
# would be a `const float[1]` array, and GCC's -Warray-bounds, which cannot see that the loop
# never runs, fails the -Werror build. The arrays are padded with never-read zeros instead.
MIN_STORED = 16


def _padded(a: np.ndarray, least: int = MIN_STORED) -> np.ndarray:
    """`a` with at least `least` entries along its first axis (zeros appended)."""
    if a.shape[0] >= least:
        return a
    return np.concatenate([a, np.zeros((least - a.shape[0], *a.shape[1:]), a.dtype)])


def _use(ctx: NodeContext) -> None:
    ctx.helper("o2e_sparse_include", f'#include "{HEADER}"\n')
    ctx.require_runtime(HEADER)


def _record(ctx: NodeContext, kind: str, w: np.ndarray, nnz: int, stored: int) -> None:
    fmt = {"fc_batch1_bsr": "BSC 16x1", "fc_batch1": "CSC"}.get(kind, "CSR")
    name = kind.replace("_bsr", "").replace("_", " ")
    ctx.kernel(f"sparse {name} ({fmt})")
    ctx.record_sparse(
        {
            "node": ctx.node.name,
            "kind": kind,
            "shape": list(w.shape),
            "density": round(nnz / w.size, 4),
            "dense_bytes": int(w.size * 4),
            "sparse_bytes": int(stored),
            "bytes_saved": int(w.size * 4 - stored),
        }
    )


def _weights(ctx: NodeContext, w: np.ndarray) -> tuple[str, str, str, int, int]:
    rowptr, col, val = _csr(w)
    nnz = int(val.size)
    col, val = _padded(col), _padded(val)
    stored = rowptr.nbytes + col.nbytes + val.nbytes
    return (
        ctx.weight("sp_rowptr", rowptr),
        ctx.weight("sp_col", col),
        ctx.weight("sp_val", val),
        nnz,
        stored,
    )


def _act_loop(ctx: NodeContext, y: str, n: int) -> str:
    loop = apply_act_loop(ctx, y, n)  # the activation table's expression (NaN kept by Relu)
    return "\n" + loop if loop else ""


def try_fc(
    ctx: NodeContext,
    x: Tensor,
    w: np.ndarray | None,
    y: Tensor,
    B: int,
    K: int,
    N: int,
    *,
    alpha: float = 1.0,
    beta: float = 1.0,
    with_bias: bool = True,
) -> str | None:
    """y[B][N] = alpha * x[B][K] . W^T + beta * C with W[N][K] constant, or None (stay dense)."""
    kind = "fc_batch1" if B == 1 else "fc_batchN"
    m = mode(ctx.kernel_options)
    if w is not None and B == 1 and sparse_applicable(np.asarray(w), "fc_batch1_bsr", m):
        kind = "fc_batch1_bsr"
    elif w is None or not sparse_applicable(np.asarray(w), kind, m):
        return None
    b = None
    if with_bias and ctx.has_input(2) and beta != 0.0:
        cc = ctx.const(2)
        if cc is None or cc.size not in (1, N) or cc.dtype != np.float32:
            return None
        b = np.broadcast_to(cc.reshape(-1) * np.float32(beta), (N,)).astype(np.float32)
    wv = (
        np.asarray(w, np.float32) * np.float32(alpha) if alpha != 1.0 else np.asarray(w, np.float32)
    )
    if kind == "fc_batch1_bsr":
        cptr, brow, bval = _bsc(wv)
        brow, bval = _padded(brow), _padded(bval, 1)  # one block: a full-width vector load
        npad = -(-N // 16) * 16
        # the bias padded to 16 * row blocks
        bias_sym = "NULL" if b is None else ctx.weight("sp_bias16", np.pad(b, (0, npad - N)))
        syms = [
            ctx.weight(n, a) for n, a in (("sp_cptr", cptr), ("sp_brow", brow), ("sp_bval", bval))
        ]
        _use(ctx)
        _record(ctx, kind, wv, int(np.count_nonzero(wv)), cptr.nbytes + brow.nbytes + bval.nbytes)
        return (
            f"o2e_bsc_fc({N}, {K}, {', '.join(syms)}, {x.sym}, {bias_sym}, {y.sym}, "
            f"{ctx.scratch(npad * 4)});" + _act_loop(ctx, y.sym, N)
        )
    if kind == "fc_batch1":
        cp, row, val = _csc(wv)
        nnz = int(val.size)
        row, val = _padded(row), _padded(val)
        syms = [ctx.weight(n, a) for n, a in (("sp_colptr", cp), ("sp_row", row), ("sp_val", val))]
        bias_sym = "NULL" if b is None else ctx.weight("sp_bias", b)
        _use(ctx)
        _record(ctx, kind, wv, nnz, cp.nbytes + row.nbytes + val.nbytes)
        return (
            f"o2e_csc_fc({N}, {K}, {', '.join(syms)}, {x.sym}, {bias_sym}, {y.sym});"
            + _act_loop(ctx, y.sym, N)
        )
    bias_sym = "NULL" if b is None else ctx.weight("sp_bias", b)
    rp, col, val, nnz, stored = _weights(ctx, wv)
    _use(ctx)
    _record(ctx, kind, wv, nnz, stored)
    tile = min(B, 64)
    xt = ctx.scratch(K * tile * 4) if B > 1 else "NULL"
    yt = ctx.scratch(N * tile * 4) if B > 1 else "NULL"
    return (
        f"o2e_sparse_fc({B}, {N}, {K}, {rp}, {col}, {val}, {x.sym}, {bias_sym}, {y.sym}, "
        f"{xt}, {yt});" + _act_loop(ctx, y.sym, B * N)
    )


def try_gemm(ctx: NodeContext) -> str | None:
    """A Gemm (transA = 0, 2-D input) whose constant B is sparse enough, or None."""
    ga = gemm_attrs(ctx.node, ctx.graph.opset)  # the schema's defaults (semantics/attrs.py)
    bw = ctx.const(1)
    if ga.trans_a or bw is None or ctx.x(0).rank != 2:
        return None
    return try_fc(
        ctx,
        ctx.x(0),
        bw if ga.trans_b else bw.T,
        ctx.y(0),
        *ctx.x(0).shape,
        bw.shape[0] if ga.trans_b else bw.shape[1],
        alpha=ga.alpha,
        beta=ga.beta,
    )


def refuse_conv1x1(spec: ConvSpec) -> str | None:
    """Why the sparse kernel does not take this Conv (ops/conv.py's SPARSE strategy): it
    needs a 1x1 convolution (stride 1, no padding after auto_pad, group 1, float32 NCHW)
    with constant weights and bias, no residual, and weights sparse enough to pay."""
    if (why := refuse_not_rearrangeable(spec, constant_bias=True)) is not None:
        return why
    if spec.residual or spec.group != 1 or spec.ks != [1, 1]:
        return "not a 1x1 convolution without groups and residual"
    if spec.st != [1, 1] or any(spec.pads):
        return "strided or padded"
    assert spec.weights is not None
    if not sparse_applicable(spec.weights.reshape(spec.M, -1), "conv1x1", mode(spec.kernels)):
        return "weights not sparse enough to pay (--kernels sparse=force to take them)"
    return None


def emit_conv1x1(ctx: NodeContext, spec: ConvSpec) -> str:
    """A layer refuse_conv1x1 accepted, in CSR."""
    assert spec.weights is not None
    N, C, H, W = spec.x.shape
    M = spec.M
    w2 = spec.weights.reshape(M, -1)
    b = spec.bias_values
    bias_sym = "NULL" if b is None else ctx.weight("sp_bias", b.reshape(-1).astype(np.float32))
    rp, col, val, nnz, stored = _weights(ctx, w2)
    _use(ctx)
    _record(ctx, "conv1x1", w2, nnz, stored)
    return (
        f"o2e_sparse_conv1x1({N}, {M}, {C}, {H * W}, {rp}, {col}, {val}, {spec.x.sym}, "
        f"{bias_sym}, {spec.y.sym});" + _act_loop(ctx, spec.y.sym, spec.y.size)
    )
