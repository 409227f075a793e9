"""A float32 Gemm or MatMul node as its kernel strategies see it (`MatMulSpec`), what a
strategy is (`MatMulStrategy`: strategy.py's generic `Strategy` over the record).

A strategy is one way to compute the product: sparse layouts for pruned weights, the batch-1
fully connected layer that skips zero inputs, the packed GEMV, one GEMM, a loop of GEMMs. Each
says why it does not take a node (`refuse`, pure: no code or weights registered; None when it
does) and writes the C for one it takes (`emit`). strategy.py's `select` takes the first of ops/matmul.py's
`STRATEGIES` that does not refuse; `convert --kernels NAME=off` switches one off (the same
option, manifest entry `options.kernels` and per-layer record `stats.layer_kernels` as Conv's;
a name both lists hold, `sparse`, is one switch for both).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from .....semantics.activations import Activation
from .....semantics.attrs import gemm_attrs
from .....semantics.fused import has_residual
from .....semantics.numeric import gemm_dims
from ...emitter import NodeContext, Tensor
from ...ops.common import fused_act
from ...strategy import AUTO, OFF, Strategy, choose


@dataclass(frozen=True)
class MatMulSpec:
    """One Gemm / MatMul: Y[M][N] = alpha * op(A) . op(B) (+ beta * C), over `batch` for
    MatMul; A's and B's shapes padded to rank 2 as numpy.matmul reads them."""

    op: str  # the base op: "Gemm" or "MatMul"
    a: Tensor
    b: Tensor
    y: Tensor
    M: int
    N: int
    K: int
    a_shape: tuple[int, ...]  # MatMul: A's shape, a vector as [1, K]
    b_shape: tuple[int, ...]  # MatMul: B's shape, a vector as [K, 1]
    batch: tuple[int, ...]  # MatMul: the broadcast batch dimensions
    trans_a: bool
    trans_b: bool
    alpha: float
    beta: float
    has_c: bool  # Gemm: a C input; o2e.MatMulAddAct: its bias (N values along the last axis)
    act: Activation | None
    kernels: Mapping[str, str] = field(default_factory=dict)  # convert --kernels
    # o2e.MatMulAddAct: a tensor of Y's shape added before the activation (the block's
    # residual, passes/fuse_matmul_bias), None without one
    residual: Tensor | None = None
    # not part of the record's identity: the constant B and C (None when computed at run time)
    weights: np.ndarray | None = field(default=None, compare=False, repr=False)
    bias: np.ndarray | None = field(default=None, compare=False, repr=False)

    @classmethod
    def of(cls, ctx: NodeContext) -> MatMulSpec:
        a, b, y = ctx.x(0), ctx.x(1), ctx.y(0)
        common = {
            "a": a,
            "b": b,
            "y": y,
            "act": fused_act(ctx),
            "kernels": ctx.kernel_options,
            "weights": ctx.const(1),
        }
        if ctx.op == "Gemm":
            ga = gemm_attrs(ctx.node, ctx.graph.opset)
            M, K, N = gemm_dims(ga, a.shape, b.shape)
            return cls(
                op="Gemm",
                M=M,
                N=N,
                K=K,
                a_shape=tuple(a.shape),
                b_shape=tuple(b.shape),
                batch=(),
                trans_a=bool(ga.trans_a),
                trans_b=bool(ga.trans_b),
                alpha=ga.alpha,
                beta=ga.beta,
                has_c=ctx.has_input(2),
                bias=ctx.const(2),
                **common,
            )
        ash, bsh = list(a.shape), list(b.shape)
        if len(ash) == 1:
            ash = [1, ash[0]]
        if len(bsh) == 1:
            bsh = [bsh[0], 1]
        batch = tuple(np.broadcast_shapes(tuple(ash[:-2]), tuple(bsh[:-2])))
        # o2e.MatMulAddAct (passes/fuse_matmul_bias): input 2 a bias of N values (as Gemm's
        # C) or the residual of Y's shape, input 3 the residual after a bias
        biased, residual = _addends(ctx, bsh[-1]) if has_residual(ctx.node) else (False, None)
        return cls(
            op="MatMul",
            M=ash[-2],
            N=bsh[-1],
            K=ash[-1],
            a_shape=tuple(ash),
            b_shape=tuple(bsh),
            batch=batch,
            trans_a=False,
            trans_b=False,
            alpha=1.0,
            beta=1.0 if biased else 0.0,
            has_c=biased,
            bias=ctx.const(2) if biased else None,
            residual=residual,
            **common,
        )

    def setting(self, strategy: str) -> str:
        return self.kernels.get(strategy, AUTO)

    @property
    def nb(self) -> int:
        """Number of matrices in the batch (1 for Gemm)."""
        return int(np.prod(self.batch)) if self.batch else 1

    @property
    def rows(self) -> int:
        """MatMul with a 2-D B: the rows of A once the batch is folded into M."""
        return self.nb * self.M

    @property
    def folds_batch(self) -> bool:
        """MatMul whose B is 2-D and whose A is the batch of rows stacked: one GEMM."""
        return self.op == "MatMul" and len(self.b_shape) == 2 and self.rows == self.a.size // self.K

    def fc_weights(self) -> np.ndarray | None:
        """The constant weight as W[N][K] (what the fully connected kernels read), or None
        (computed at run time, or a MatMul's B with a batch of its own)."""
        w = self.weights
        if w is None or (self.op == "MatMul" and len(self.b_shape) != 2):
            return None
        if self.op == "Gemm":
            return w if self.trans_b else w.T
        return w.reshape(self.K, self.N).T

    def simple_bias(self) -> bool:
        """Gemm: no bias, or a constant one of 1 or N values (a vector the kernels add)."""
        c = self.bias
        return not self.has_c or self.beta == 0.0 or (c is not None and c.size in (1, self.N))

    def is_fc(self) -> bool:
        """One row times a constant float32 weight: the batch-1 fully connected kernels."""
        w = self.weights
        if w is None or w.dtype != np.float32:
            return False
        if self.op == "Gemm":
            return self.M == 1 and not self.trans_a and self.simple_bias()
        return len(self.b_shape) == 2 and self.rows == 1


def _addends(ctx: NodeContext, n: int) -> tuple[bool, Tensor | None]:
    """o2e.MatMulAddAct's addends: whether input 2 is a bias (a constant of 1 or N values
    along the last axis), and the residual tensor (input 2 when it is not a bias, else input
    3), None without one."""
    c = ctx.const(2)
    bias = c is not None and (c.size == 1 or (c.ndim >= 1 and c.shape[-1] == n and c.size == n))
    if not bias:
        return False, ctx.x(2)
    return True, ctx.x(3) if ctx.has_input(3) else None


# one kernel for a matrix product: strategy.py's `Strategy` over a `MatMulSpec`
MatMulStrategy = Strategy[MatMulSpec]

__all__ = ["AUTO", "OFF", "MatMulSpec", "MatMulStrategy", "choose"]
