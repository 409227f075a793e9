"""Typed attributes of Cast, Clip, QuantizeLinear / DequantizeLinear and the Gemm / MatMul
shapes (issue 32, item 1), opset differences resolved here:
- Clip: `min` / `max` are attributes before opset 11 (defaults the float32 extremes), inputs
  from 11 (absent: unbounded).
- Cast: `saturate` (opset 19) only changes conversions to float8, 1 by default.
- QuantizeLinear / DequantizeLinear: `axis` (13, per-axis scales; 1 by default), `block_size`
  (21, blocked scales; 0 = none), QuantizeLinear's `saturate` (19) and `output_dtype` (21).
Checked against onnx's reference evaluator in tests/test_semantics_records.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import onnx
import onnx.helper

from ..ir import Node
from .attrs import GemmAttrs, attr
from .invalid import invalid

CLIP_ATTRS_UNTIL = 11  # Clip's bounds are inputs from this opset on


@dataclass(frozen=True)
class ClipAttrs:
    """`min` / `max` of Clip before opset 11; from 11 `from_inputs` and both None (inputs 1
    and 2, each optional)."""

    min: float | None
    max: float | None
    from_inputs: bool


def clip_attrs(node: Node, opset: int) -> ClipAttrs:
    if opset >= CLIP_ATTRS_UNTIL:
        return ClipAttrs(None, None, True)
    return ClipAttrs(float(attr(node, "min", opset)), float(attr(node, "max", opset)), False)


@dataclass(frozen=True)
class CastAttrs:
    to: int  # onnx.TensorProto data type (0 for CastLike)
    saturate: bool  # float8 targets only: clamp to the finite range instead of NaN / Inf
    round_mode: str  # float -> float8 / float4 rounding (Cast-25; 'up' by default)

    @property
    def dtype(self) -> np.dtype:
        return onnx.helper.tensor_dtype_to_np_dtype(self.to)


def cast_attrs(node: Node, opset: int | None = None) -> CastAttrs:
    """Cast, and CastLike (`to` 0: the type of its input 1)."""
    sat = bool(int(attr(node, "saturate", opset)))
    mode = str(attr(node, "round_mode", opset))
    if node.op_type == "CastLike":
        return CastAttrs(0, sat, mode)
    to = attr(node, "to", opset)
    if to is None or int(to) not in onnx.TensorProto.DataType.values() or int(to) == 0:
        raise invalid(node, opset, f"'to' {to!r} is not an ONNX data type")
    return CastAttrs(int(to), sat, mode)


@dataclass(frozen=True)
class QuantAttrs:
    """QuantizeLinear / DequantizeLinear (and their o2e fused forms)."""

    axis: int  # the scale's axis when the scale is a 1-D tensor (not normalised)
    block_size: int  # 0: per-tensor / per-axis; > 0: blocked along `axis`
    saturate: bool  # QuantizeLinear to float8
    output_dtype: int  # Q-21 / DQ-23: 0 = the zero point's (Q: uint8 when absent) / scale's type
    precision: int  # type x / scale is computed in (0: numpy's promotion of x and scale)

    def problem(self, rank: int | None = None) -> str | None:
        if self.block_size < 0:
            return f"block_size {self.block_size} is negative"
        if rank is not None and rank > 0 and not -rank <= self.axis < rank:
            return f"axis {self.axis} is outside [{-rank}, {rank - 1}] for rank {rank}"
        return None

    def scale_axis(self, rank: int) -> int:
        return self.axis + rank if self.axis < 0 else self.axis


def quant_attrs(node: Node, opset: int | None = None) -> QuantAttrs:
    """Defaults of the node's opset; before axis existed (opset 10) the scale is a scalar and
    axis 1 is the nearest version's default (never read)."""
    q = node.op_type == "QuantizeLinear"
    return QuantAttrs(
        axis=int(attr(node, "axis", opset)),
        block_size=int(attr(node, "block_size", opset) or 0),
        saturate=q and bool(int(attr(node, "saturate", opset))),
        output_dtype=int(attr(node, "output_dtype", opset) or 0),
        precision=int(attr(node, "precision", opset) or 0),
    )


def gemm_dims(
    ga: GemmAttrs, a_shape: Sequence[int], b_shape: Sequence[int]
) -> tuple[int, int, int]:
    """(M, K, N) of Gemm's A [M, K] (A^T when transA) times B [K, N] (B^T when transB);
    ValueError when the inner sizes differ or an input is not 2-D."""
    if len(a_shape) != 2 or len(b_shape) != 2:
        raise ValueError(f"Gemm takes 2-D A and B, not {list(a_shape)} and {list(b_shape)}")
    M, K = (a_shape[1], a_shape[0]) if ga.trans_a else (a_shape[0], a_shape[1])
    K2, N = (b_shape[1], b_shape[0]) if ga.trans_b else (b_shape[0], b_shape[1])
    if K != K2:
        raise ValueError(f"Gemm's inner sizes differ: {K} and {K2}")
    return int(M), int(K), int(N)


def matmul_shape(a_shape: Sequence[int], b_shape: Sequence[int]) -> tuple[int, ...]:
    """MatMul's output shape (numpy.matmul: 1-D operands promoted then squeezed, the batch
    axes broadcast); ValueError when the shapes do not fit."""
    a, b = list(a_shape), list(b_shape)
    if not a or not b:
        raise ValueError("MatMul does not take scalars")
    a2 = [1, *a] if len(a) == 1 else a
    b2 = [*b, 1] if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        raise ValueError(f"MatMul's inner sizes differ: {a2[-1]} and {b2[-2]}")
    batch = np.broadcast_shapes(tuple(a2[:-2]), tuple(b2[:-2]))
    out = [*batch, a2[-2], b2[-1]]
    if len(a) == 1:
        out.pop(-2)
    if len(b) == 1:
        out.pop(-1)
    return tuple(int(d) for d in out)
