"""The one place that emits matrix multiplications, so the GEMM engine can be swapped.

The engine is `runtime/o2e_gemm.h` (packed AVX-512 / AVX2 / portable micro-kernels, chosen at
compile time; optional pthreads with -DO2E_THREADS=n, up to convert --max-threads). Constant A operands (conv weights,
fully-connected weights) are packed at conversion time by `gemm_pack.pack_a`, and constant B
operands (a MatMul's weight times a matrix of rows) by `gemm_pack.pack_b`, so generated code
never repacks them. Bias, residual and Relu / Clip / LeakyRelu / HardSigmoid / HardSwish are
applied in the GEMM epilogue while each tile is still in registers; Sigmoid, Tanh, SiLU/Swish,
GELU and Mish (o2e_vmath.h) to each tile right after its store, while it is in L1; other fused
activations get one pass afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .....semantics.activations import (
    ACTIVATIONS,
    GEMM_GELU,
    GEMM_HARD_SIGMOID,
    GEMM_HARD_SWISH,
    GEMM_MISH,
    GEMM_SIGMOID,
    GEMM_SWISH,
    GEMM_TANH,
    GEMM_VM_FIRST,
    Activation,
    clip_bounds,
)
from ...emitter import NodeContext, c_literal
from ...gemm_pack import PB, blocking_guard, pack_a, packed_a_size, sgemm_workspace_bytes
from ...ops.common import act_expr

HEADER = "o2e_gemm.h"
_GUARD = f'#include "{HEADER}"\n' + blocking_guard()


def plan_threads(ctx: NodeContext) -> int:
    """Thread slots a workspace holds: convert --max-threads, or one for a microcontroller
    build (convert --device, ../device.py, whose #error guard stops a threaded build)."""
    return ctx.max_threads


def gemm_workspace(
    ctx: NodeContext, M: int, N: int, K: int, conv: bool = False, threads: int | None = None
) -> int:
    """Arena bytes for one o2e_sgemm* call, for the kernels and threads of the planned build
    (`threads`: a caller that gives each thread its own call says 1)."""
    n = plan_threads(ctx) if threads is None else threads
    return sgemm_workspace_bytes(M, N, K, n, conv=conv, variants=ctx.device.variants)


# o2e_gemm.h's names of the kinds past LeakyRelu: the generated code names them (the writer
# includes o2e_vmath.h, before o2e_gemm.h, when it sees one of the kinds that call it)
_KIND_NAMES = {
    GEMM_SIGMOID: "O2E_ACT_SIGMOID",
    GEMM_TANH: "O2E_ACT_TANH",
    GEMM_HARD_SIGMOID: "O2E_ACT_HARD_SIGMOID",
    GEMM_HARD_SWISH: "O2E_ACT_HARD_SWISH",
    GEMM_SWISH: "O2E_ACT_SWISH",
    GEMM_GELU: "O2E_ACT_GELU",
    GEMM_MISH: "O2E_ACT_MISH",
}


def act_struct(act: Activation | None, vmath: bool = True) -> tuple[str, bool]:
    """The o2e_act initialiser (kind from the activation table's `gemm_kind`), and whether
    the activation still needs a separate loop (no epilogue kind; or a kind calling
    o2e_vmath.h when the kernel applies only the register kinds: `vmath` False)."""
    kind = None if act is None else ACTIVATIONS[act.op].gemm_kind
    if act is None or kind is None or (kind >= GEMM_VM_FIRST and not vmath):
        return "(o2e_act){0, 0.0f, 0.0f}", act is not None
    lo, hi = clip_bounds(act.alpha, act.beta) if act.op == "Clip" else (act.alpha, act.beta)
    a, b = c_literal(lo, np.float32), c_literal(hi, np.float32)
    return f"(o2e_act){{{_KIND_NAMES.get(kind, kind)}, {a}, {b}}}", False


def _use_engine(ctx: NodeContext) -> None:
    ctx.helper("o2e_gemm_include", _GUARD)
    ctx.require_runtime(HEADER)


def post_act(act: Activation | None, post: bool, M: int, N: int, C: str, ldc: int) -> str:
    if not post:
        return ""
    return (
        f"\n  for (int i = 0; i < {M}; ++i) for (int j = 0; j < {N}; ++j) "
        f"{{ float *p = {C} + (size_t)i * {ldc} + j; const float v = *p; *p = {act_expr(act, 'v')}; }}"
    )


@dataclass(frozen=True, kw_only=True)
class GemmCall:
    """One call of the GEMM engine: C[M][N] = act(A[M][K]·B[K][N] + bias_m[M] + bias_n[N] + R).

    Each matrix is a C expression with its row stride; `a` is A in memory (gemm_call, row
    stride `lda`) or the symbol of A packed at conversion (gemm_packed_call, no stride)."""

    m: int
    n: int
    k: int
    a: str
    b: str
    ldb: int
    c: str
    ldc: int
    lda: int = 0  # gemm_call only
    bias_m: str | None = None  # per row of C
    bias_n: str | None = None  # per column of C
    act: Activation | None = None
    residual: str | None = None  # R, added before the activation
    ldr: int = 0  # R's row stride
    b_packed: bool = False  # gemm_call: `b` is B packed at conversion (gemm_pack.pack_b)


def gemm_call(ctx: NodeContext, g: GemmCall) -> str:
    """`g` with A read from memory (and B packed at conversion when `g.b_packed`)."""
    if g.lda < g.k:
        raise ValueError(f"gemm_call: lda {g.lda} < K {g.k} (A[M][K] needs its row stride)")
    _use_engine(ctx)
    ctx.kernel(f"sgemm{' gemv' if g.n == 1 else ''}{', B packed' if g.b_packed else ''}")
    ws = ctx.scratch(gemm_workspace(ctx, g.m, g.n, g.k), "void")
    st, post = act_struct(g.act)
    fn, b = ("o2e_sgemm_bpacked", g.b) if g.b_packed else ("o2e_sgemm", f"{g.b}, {g.ldb}")
    return (
        f"{fn}({g.m}, {g.n}, {g.k}, {g.a}, {g.lda}, {b}, {g.c}, {g.ldc}, 0, "
        f"{g.bias_m or 'NULL'}, {g.bias_n or 'NULL'}, {g.residual or 'NULL'}, {g.ldr}, {st}, "
        f"{ws});" + post_act(g.act, post, g.m, g.n, g.c, g.ldc)
    )


def packs_b(m: int, n: int) -> bool:
    """Whether a product with a constant B of n columns, over m rows of A, should take B packed
    at conversion (o2e_sgemm_bpacked): the run time then never copies B into panels (4-8 % of
    a ViT / MiniLM projection at AVX-512, 2-4 % at AVX2: o2e_gemm.h's O2E_GEMM_PB). Not for
    one row (the GEMV paths) nor for N <= 12 (AVX-512's small-N path reads B by rows), nor
    where padding N to whole strips would add more than a quarter to B."""
    return m > 1 and n > 12 and -(-n // PB) * PB - n <= n // 4


def packed_weights(ctx: NodeContext, hint: str, mats: np.ndarray) -> tuple[str, int]:
    """Pack G constant (M, K) matrices; returns the C symbol and the per-matrix stride."""
    g, m, k = mats.shape
    size = packed_a_size(m, k)
    if g == 1:
        packed = pack_a(mats[0])
    else:
        packed = (
            np.concatenate([pack_a(mats[i]) for i in range(g)]) if g else np.zeros(0, np.float32)
        )
    return ctx.weight(hint, packed.astype(np.float32, copy=False)), size


def gemm_packed_call(ctx: NodeContext, g: GemmCall) -> str:
    """`g` with A packed at conversion time (`g.a` the packed symbol, packed_weights)."""
    _use_engine(ctx)
    ws = ctx.scratch(gemm_workspace(ctx, g.m, g.n, g.k), "void")
    st, post = act_struct(g.act)
    return (
        f"o2e_sgemm_packed({g.m}, {g.n}, {g.k}, {g.a}, {g.b}, {g.ldb}, {g.c}, {g.ldc}, 0, "
        f"{g.bias_m or 'NULL'}, {g.bias_n or 'NULL'}, {g.residual or 'NULL'}, {g.ldr}, {st}, "
        f"{ws});" + post_act(g.act, post, g.m, g.n, g.c, g.ldc)
    )
