"""The one place that emits matrix multiplications, so the GEMM engine can be swapped."""

from __future__ import annotations

import numpy as np

from ....passes.fuse_activation import Activation
from ..emitter import NodeContext, Tensor, c_literal
from .common import act_expr

# Simple portable kernel: C = act(A·B + bias). Row-major; k-outer so the inner loop streams
# rows of B and C, which compilers vectorise.
SIMPLE_GEMM = r"""
typedef struct { int kind; float a, b; } o2e_act;  /* 0 none, 1 relu, 2 clip(a,b), 3 leaky(a) */

static float o2e_apply_act(float v, o2e_act act)
{
  switch (act.kind) {
  case 1: return v > 0.0f ? v : 0.0f;
  case 2: return v < act.a ? act.a : (v > act.b ? act.b : v);
  case 3: return v >= 0.0f ? v : v * act.a;
  default: return v;
  }
}

static void o2e_gemm(int M, int N, int K, const float *A, int lda, const float *B, int ldb, float *C, int ldc,
                     const float *bias_m, const float *bias_n, o2e_act act)
{
  for (int i = 0; i < M; ++i) {
    float *c = C + (size_t)i * ldc;
    const float bm = bias_m ? bias_m[i] : 0.0f;
    for (int j = 0; j < N; ++j) c[j] = bm + (bias_n ? bias_n[j] : 0.0f);
    for (int k = 0; k < K; ++k) {
      const float a = A[(size_t)i * lda + k];
      const float *b = B + (size_t)k * ldb;
      for (int j = 0; j < N; ++j) c[j] += a * b[j];
    }
    if (act.kind)
      for (int j = 0; j < N; ++j) c[j] = o2e_apply_act(c[j], act);
  }
}
"""

_KINDS = {"Relu": 1, "Clip": 2, "LeakyRelu": 3}


def act_struct(act: Activation | None) -> tuple[str, bool]:
    """The o2e_act initialiser, and whether the activation still needs a separate loop."""
    if act is None:
        return "(o2e_act){0, 0.0f, 0.0f}", False
    if act.op in _KINDS:
        a = c_literal(max(act.alpha, -3.4e38) if act.op == "Clip" else act.alpha, np.float32)
        b = c_literal(min(act.beta, 3.4e38), np.float32)
        return f"(o2e_act){{{_KINDS[act.op]}, {a}, {b}}}", False
    return "(o2e_act){0, 0.0f, 0.0f}", True


def gemm_call(
    ctx: NodeContext,
    M: int,
    N: int,
    K: int,
    A: str,
    lda: int,
    B: str,
    ldb: int,
    C: str,
    ldc: int,
    *,
    bias_m: str | None = None,
    bias_n: str | None = None,
    act: Activation | None = None,
    a_const: Tensor | None = None,
    b_const: bool = False,
    group: int = 1,
) -> str:
    """C statement(s) computing C[M][N] = act(A[M][K]·B[K][N] + bias_m[M] + bias_n[N])."""
    ctx.helper("o2e_gemm", SIMPLE_GEMM)
    st, post = act_struct(act)
    call = (
        f"o2e_gemm({M}, {N}, {K}, {A}, {lda}, {B}, {ldb}, {C}, {ldc}, "
        f"{bias_m or 'NULL'}, {bias_n or 'NULL'}, {st});"
    )
    if post:
        call += (
            f"\n  for (int i = 0; i < {M}; ++i) for (int j = 0; j < {N}; ++j) "
            f"{{ float *p = {C} + (size_t)i * {ldc} + j; const float v = *p; *p = {act_expr(act, 'v')}; }}"
        )
    return call
