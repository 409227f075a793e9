"""MaxPool / AveragePool / LpPool and the Global* pools as one typed record (issue 32, item 1).

The window itself (kernel, strides, dilations, pads resolved from auto_pad and ceil_mode, the
output size) is `conv_geometry.pool_geometry`; `PoolAttrs` carries the attributes the window
does not: AveragePool's `count_include_pad`, MaxPool's `storage_order` (the numbering of its
Indices output), LpPool's `p`, with the defaults of the node's opset (`p` is an INT from LpPool-2,
a FLOAT in LpPool-1; `dilations` exist on MaxPool from 10 and on AveragePool / LpPool from 19
(18 for LpPool), 1 before). Checked against onnx's reference evaluator in
tests/test_semantics_records.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..ir import Node
from .attrs import attr
from .conv_geometry import AUTO_PADS, ConvGeometry, pool_geometry
from .fused import DOMAIN, base_op
from .invalid import require

_QUANTISED = ("QMaxPool", "QAveragePool", "QGlobalAveragePool")
POOLS = ("MaxPool", "AveragePool", "LpPool", "GlobalMaxPool", "GlobalAveragePool", "GlobalLpPool")


@dataclass(frozen=True)
class PoolAttrs:
    op: str
    kernel_shape: tuple[int, ...] | None  # None: a Global* pool (the whole spatial extent)
    strides: tuple[int, ...] | None  # None: absent, 1 per axis
    dilations: tuple[int, ...] | None  # None: absent (or the op has none), 1 per axis
    pads: tuple[int, ...] | None  # None: absent, 0 (begin pads, then end pads)
    auto_pad: str
    ceil_mode: bool
    count_include_pad: bool  # AveragePool
    storage_order: int  # MaxPool's Indices: 0 row-major, 1 column-major
    p: int  # LpPool / GlobalLpPool (2 when absent; LpPool-1's FLOAT p must be integral)

    @property
    def is_global(self) -> bool:
        return self.kernel_shape is None

    def problem(self, rank: int | None = None) -> str | None:
        """What the spec does not allow (`rank`: the input's, batch and channel included)."""
        if self.auto_pad not in AUTO_PADS:
            return f"unknown auto_pad {self.auto_pad!r}"
        if self.storage_order not in (0, 1):
            return f"storage_order {self.storage_order} is not 0 or 1"
        if self.op.endswith("LpPool") and self.p <= 0:
            return "p must be a positive integer"
        if self.kernel_shape is None:
            return None
        n = len(self.kernel_shape)
        if n == 0:
            return "kernel_shape is required"
        if any(k < 1 for k in self.kernel_shape):
            return f"kernel_shape {list(self.kernel_shape)} has a size below 1"
        if rank is not None and n != rank - 2:
            return f"kernel_shape has {n} axes for an input of rank {rank}"
        for name, v, want in (
            ("strides", self.strides, n),
            ("dilations", self.dilations, n),
            ("pads", self.pads, 2 * n),
        ):
            if v is not None and len(v) != want:
                return f"{name} has {len(v)} values, {want} expected"
            if v is not None and name != "pads" and any(i < 1 for i in v):
                return f"{name} {list(v)} has a value below 1"
        if self.pads is not None and any(i < 0 for i in self.pads):
            return f"pads {list(self.pads)} has a negative value"
        return None

    def geometry(
        self,
        node: Node,
        x_shape: Sequence[int],
        y_shape: Sequence[int] | None = None,
        opset: int | None = None,
    ) -> ConvGeometry:
        """The window (conv_geometry.pool_geometry: the one formula for every backend)."""
        return pool_geometry(node, x_shape, y_shape, opset)


def _ints(v: object) -> tuple[int, ...] | None:
    return None if v is None else tuple(int(i) for i in v)  # type: ignore[union-attr]


def _p(node: Node, opset: int | None) -> int:
    p = float(attr(node, "p", opset))
    return int(p) if p.is_integer() else -1  # a fractional p (LpPool-1 FLOAT): problem()


def pool_attrs(node: Node, opset: int | None = None, rank: int | None = None) -> PoolAttrs:
    """The record of a pooling node; with `rank` (the input's), inconsistent attributes raise
    InvalidAttributes."""
    op = base_op(node)
    if node.domain == DOMAIN and op in _QUANTISED:  # o2e.QAveragePool: AveragePool on int8
        op = op[1:]
    glob = op.startswith("Global")
    auto = attr(node, "auto_pad", opset) or "NOTSET"
    rec = PoolAttrs(
        op=op,
        kernel_shape=None if glob else _ints(attr(node, "kernel_shape", opset)) or (),
        strides=None if glob else _ints(attr(node, "strides", opset)),
        dilations=None if glob else _ints(attr(node, "dilations", opset)),
        pads=None if glob else _ints(attr(node, "pads", opset)),
        auto_pad="NOTSET" if glob else str(auto),
        ceil_mode=not glob and bool(int(attr(node, "ceil_mode", opset) or 0)),
        count_include_pad=op == "AveragePool" and bool(int(attr(node, "count_include_pad", opset))),
        storage_order=int(attr(node, "storage_order", opset) or 0) if op == "MaxPool" else 0,
        p=_p(node, opset) if op.endswith("LpPool") else 2,
    )
    if rank is not None:
        require(node, opset, rec.problem(rank))
    return rec
