"""A Conv layer as its kernel strategies see it (`ConvSpec`) and what a Conv strategy adds to
strategy.py's generic `Strategy` (`ConvStrategy`: the residual epilogue).

A strategy is one way to compute a 2-D (or N-d) convolution: depthwise planes, Winograd, the
direct kernels, the implicit GEMM, im2col + GEMM... Each says why it does not take a layer
(`refuse`, None when it does) and writes the C for one it takes (`emit`). `choose` takes the
first strategy of a declared list (ops/conv.py `STRATEGIES`) that does not refuse
(strategy.py `select`), so the
order is the preference. `convert --kernels NAME=off` switches a strategy off (some take a
value: winograd=2|4 forces the tile size); the choice is then recorded per layer in the
manifest (stats.layer_kernels, with every refusal in stats.kernel_refusals) and the options under options.kernels, so an output can be
reproduced from its manifest.

Where to add a strategy: a module next to this one defining
`STRATEGY = register(ConvStrategy(...), rank=N)`; `strategies()` imports every module of this
package and orders what they registered by rank (lower = preferred when several apply), so
no central list is edited (ops/conv.py's `STRATEGIES` is that order).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from .....ir import Graph, Node
from .....semantics.activations import Activation
from .....semantics.conv_geometry import ConvGeometry, conv_geometry, resolve_pads
from .....semantics.fused import has_residual
from ...emitter import ConstTensor, NodeContext, Tensor
from ...nchwc_plan import BlockedRole
from ...ops.checks import float32_input
from ...ops.common import fused_act
from ...strategy import AUTO, OFF, Strategy, choose


@dataclass(frozen=True)
class ConvSpec:
    """One Conv node: its geometry, tensors, epilogue and the conversion's kernel options."""

    geom: ConvGeometry
    x: Tensor
    w: Tensor
    y: Tensor
    bias_tensor: Tensor | None  # the bias input, or None (`bias`: its C symbol)
    act: Activation | None  # fused activation
    residual: bool  # a fused residual add (input 3) before the activation
    optimize: str  # convert --optimize: "speed" or "size"
    kernels: Mapping[str, str] = field(default_factory=dict)  # convert --kernels
    # the layer's layouts when it is in a channel-blocked chain (nchwc_plan.py), else None
    layout: BlockedRole | None = None
    # not part of the record's identity: the layer's place in the graph, its constant weights
    node: Node | None = field(default=None, compare=False, repr=False)
    graph: Graph | None = field(default=None, compare=False, repr=False)
    weights: np.ndarray | None = field(default=None, compare=False, repr=False)

    @classmethod
    def of(cls, ctx: NodeContext) -> ConvSpec:
        x, w, y = ctx.x(0), ctx.x(1), ctx.y(0)
        return cls(
            geom=conv_geometry(ctx.node, x.shape, w.shape, y.shape, ctx.graph.opset),
            x=x,
            w=w,
            y=y,
            bias_tensor=ctx.x(2) if ctx.has_input(2) else None,
            act=fused_act(ctx),
            residual=has_residual(ctx.node),
            optimize=ctx.optimize,
            kernels=ctx.kernel_options,
            layout=ctx.layout_role,
            node=ctx.node,
            graph=ctx.graph,
            weights=ctx.const(1),
        )

    def setting(self, strategy: str) -> str:
        return self.kernels.get(strategy, AUTO)

    @property
    def has_bias(self) -> bool:
        return self.bias_tensor is not None

    @property
    def bias(self) -> str | None:
        """The bias's C symbol, or None. Reading it marks a constant bias as referenced by the
        code (emitter.ConstTensor): a strategy writing a bias of its own (sparse) or refusing
        a layer asks `has_bias` instead."""
        return None if self.bias_tensor is None else self.bias_tensor.sym

    # the names the kernels have always used, read off the geometry
    @property
    def nsp(self) -> int:
        return self.geom.rank

    @property
    def N(self) -> int:  # noqa: N802
        return self.geom.batch

    @property
    def C(self) -> int:  # noqa: N802
        return self.geom.in_channels

    @property
    def M(self) -> int:  # noqa: N802
        return self.geom.out_channels

    @property
    def group(self) -> int:
        return self.geom.group

    @property
    def cg(self) -> int:
        return self.geom.in_per_group

    @property
    def mg(self) -> int:
        return self.geom.out_per_group

    @property
    def ks(self) -> list[int]:
        return list(self.geom.kernel)

    @property
    def st(self) -> list[int]:
        return list(self.geom.strides)

    @property
    def dl(self) -> list[int]:
        return list(self.geom.dilations)

    @property
    def pads(self) -> list[int]:
        return list(self.geom.pads)

    @property
    def depthwise(self) -> bool:
        """One filter per channel, as many outputs as inputs (multipliers above 1 are not)."""
        return self.group == self.C and self.M == self.C and self.cg == 1

    @property
    def rearrangeable(self) -> bool:
        """The weights are a float32 constant (a specialised kernel rearranges them at
        conversion time) and the input a float32 NCHW map."""
        wc = self.weights
        return (
            wc is not None
            and wc.dtype == np.float32
            and self.x.dtype == np.float32
            and self.x.rank == 4
        )

    @property
    def bias_values(self) -> np.ndarray | None:
        """The bias as a constant (None: no bias, or one computed at run time)."""
        if not self.has_bias or self.node is None or self.graph is None:
            return None
        return self.graph.const(self.node.inputs[2])

    def as_2d(self) -> ConvSpec:
        """A 1-D convolution (N, C, L) as the 2-D one it equals, (N, C, 1, L) with a 1 x k
        kernel, so the 2-D strategies (implicit GEMM, lanes, direct...) take it: the buffers
        are the same bytes, only the shapes the kernels read gain a unit axis."""
        assert self.nsp == 1, "only a 1-D convolution has a 2-D view"
        g = self.geom
        geom = dataclasses.replace(
            g,
            in_spatial=(1, *g.in_spatial),
            out_spatial=(1, *g.out_spatial),
            kernel=(1, *g.kernel),
            strides=(1, *g.strides),
            dilations=(1, *g.dilations),
            pads=(0, g.pads[0], 0, g.pads[1]),
            auto_pad="NOTSET",  # the pads above are resolved
            output_padding=(0, 0),
        )
        return dataclasses.replace(
            self,
            geom=geom,
            x=_unit_axis(self.x),
            w=_unit_axis(self.w),
            y=_unit_axis(self.y),
            weights=None if self.weights is None else self.weights[:, :, None, :],
        )

    def without_epilogue(self) -> ConvSpec:
        """The same layer with its residual and activation left to a pass after the kernel."""
        return dataclasses.replace(self, act=None, residual=False)


def _unit_axis(t: Tensor) -> Tensor:
    """The tensor with a unit axis before its last one, under the same C symbol. Built field by
    field: reading a constant's `sym` (as dataclasses.replace would) marks it as referenced
    and would write the original weights beside the kernel's repacked copy."""
    shape = (*t.shape[:-1], 1, t.shape[-1])
    if not isinstance(t, ConstTensor):
        return dataclasses.replace(t, shape=shape)
    view = ConstTensor(t.name, object.__getattribute__(t, "sym"), shape, t.dtype, t.kind)
    for extra in ("_key", "_referenced"):
        object.__setattr__(view, extra, object.__getattribute__(t, extra))
    return view


def refuse_not_rearrangeable(spec: ConvSpec, *, constant_bias: bool = False) -> str | None:
    """The refusal every kernel that lays its weights out at conversion time starts with
    (pointwise, direct, lanes, sparse): run-time weights or a non-float32 / non-NCHW input,
    and with `constant_bias` a bias computed at run time (the kernel pads or repacks it)."""
    if not spec.rearrangeable:
        return "weights computed at run time, or not a float32 NCHW map"
    if constant_bias and spec.has_bias and spec.bias_values is None:
        return "bias computed at run time"
    return None


@dataclass(frozen=True)
class ConvStrategy(Strategy[ConvSpec]):
    """One kernel for a convolution (strategy.py's `Strategy` over a `ConvSpec`).

    fuses_residual: False when the kernel cannot add the residual / apply the activation
    itself; the layer then runs without them and one pass over the output adds them.
    inplace_residual: the kernel reads each residual element before it writes the output
    element at the same place, so the output may take the residual's buffer
    (residual_alias.py)."""

    fuses_residual: bool = True
    inplace_residual: bool = False


# name -> (rank, strategy): filled by `register` as the strategy modules are imported
_REGISTERED: dict[str, tuple[int, ConvStrategy]] = {}


def register(strategy: ConvStrategy, *, rank: int) -> ConvStrategy:
    """Add `strategy` to the Conv list at `rank` (lower = tried first); returns it. Names and
    ranks are unique: two strategies at one rank would leave their order to import order."""
    for name, (r, s) in _REGISTERED.items():
        if name == strategy.name and s is not strategy:
            raise ValueError(f"Conv strategy '{name}' registered twice")
        if r == rank and name != strategy.name:
            raise ValueError(f"Conv strategies '{name}' and '{strategy.name}' share rank {rank}")
    _REGISTERED[strategy.name] = (rank, strategy)
    return strategy


def strategies() -> tuple[ConvStrategy, ...]:
    """Every registered Conv strategy in preference order, after importing each module of
    this package (a new strategy module is found without editing a list)."""
    import importlib
    import pkgutil

    from .. import conv as package

    for mod in sorted(m.name for m in pkgutil.iter_modules(package.__path__)):
        importlib.import_module(f"{package.__name__}.{mod}")
    return tuple(s for _, s in sorted(_REGISTERED.values(), key=lambda rs: rs[0]))


def conv_pads(
    node: Node,
    in_sp: tuple[int, ...],
    out_sp: tuple[int, ...],
    k: list[int],
    s: list[int],
    d: list[int],
) -> list[int]:
    """Begin pads then end pads, resolving auto_pad: semantics/conv_geometry.py's rule."""
    return list(resolve_pads(node, in_sp, out_sp, k, s, d))


def conv_check(node: Node, graph: Graph) -> str | None:
    if (why := float32_input(node, graph)) is not None:
        return why
    w = graph.type_of(node.inputs[1])
    if w is None or w.shape is None or len(w.shape) < 3:
        return "weights of unknown rank"
    return None


__all__ = ["AUTO", "OFF", "ConvSpec", "ConvStrategy", "choose", "conv_check", "conv_pads"]
