"""A pooling node as its kernel strategies see it (`PoolSpec`), for the windowed pools
(MaxPool / AveragePool / LpPool: ops/pool.py `STRATEGIES`) and the global ones
(`GLOBAL_STRATEGIES`): strategy.py's `Strategy` over this record."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from .....semantics.conv_geometry import ConvGeometry, pool_geometry
from ...emitter import NodeContext, Tensor
from ...nchwc_plan import BlockedRole
from ...strategy import Strategy


@dataclass(frozen=True)
class PoolSpec:
    """One pooling node: its op, tensors, window geometry and the conversion's kernel options."""

    op: str  # MaxPool, AveragePool, LpPool, GlobalAveragePool, GlobalMaxPool, GlobalLpPool
    x: Tensor
    y: Tensor
    geom: ConvGeometry
    indices: bool  # MaxPool's second output (the argmax indices) is wanted
    kernels: Mapping[str, str] = field(default_factory=dict)  # convert --kernels
    # the node's layouts when it is in a channel-blocked chain (nchwc_plan.py), else None
    layout: BlockedRole | None = None
    # GlobalAveragePool: the depthwise layer whose kernel already wrote the means
    # (kernels/conv/se_pool.py), else None
    pooled_by: str | None = None

    @classmethod
    def of(cls, ctx: NodeContext) -> PoolSpec:
        x, y = ctx.x(0), ctx.y(0)
        return cls(
            op=ctx.node.op_type,
            x=x,
            y=y,
            geom=pool_geometry(ctx.node, x.shape, y.shape, ctx.graph.opset),
            indices=ctx.op == "MaxPool" and ctx.has_output(1),
            kernels=ctx.kernel_options,
            layout=ctx.layout_role,
            pooled_by=ctx.pooled_by,
        )


# one kernel for a pool
PoolStrategy = Strategy[PoolSpec]
