"""The one place that resolves convolution and pooling geometry (issue 10, item 1).

Conv, ConvTranspose, MaxPool / AveragePool / LpPool and the global pools all describe their
windows with the same attributes: kernel, strides, dilations, pads or auto_pad, group,
ceil_mode, output_padding / output_shape. `conv_geometry`, `conv_transpose_geometry` and
`pool_geometry` turn a node plus its shapes into a frozen `ConvGeometry` that every backend and
pass reads (the C kernels, MPS, the quantised and sparse convolutions, the BatchNorm fold).

Rules follow the ONNX spec as onnxruntime implements it (onnx shape inference agrees; the tests
check every formula against it):
- Conv / pool output: floor((in + pb + pe - ((k - 1)·d + 1)) / s) + 1; with ceil_mode the
  ceiling, minus one when the last window would start past the input and its begin pad.
- SAME_UPPER / SAME_LOWER: out = ceil(in / s); total pad = max((out - 1)·s + (k - 1)·d + 1 - in,
  0), the odd unit at the end (UPPER) or the beginning (LOWER). VALID: no pads.
- ConvTranspose: out = s·(in - 1) + output_padding + (k - 1)·d + 1 - pb - pe; with output_shape
  or SAME the pads come from total = s·(in - 1) + output_padding + (k - 1)·d + 1 - out, the odd
  unit at the end for SAME_UPPER, at the beginning otherwise (output_shape with NOTSET too),
  and SAME's out is in·s.

When the caller knows the output shape (shape inference ran), it passes it and the pads are
derived from it, so the record always describes the tensors the code will read and write.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..ir import Node
from .attrs import attr, ints
from .fused import base_op

AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


@dataclass(frozen=True)
class ConvGeometry:
    """Window geometry of one Conv / ConvTranspose / pooling node (spatial axes only in the
    tuples; `pads` is ONNX's layout: all begin pads, then all end pads)."""

    kind: str  # "conv", "conv_transpose" or "pool"
    batch: int
    in_channels: int
    out_channels: int
    group: int
    in_spatial: tuple[int, ...]
    out_spatial: tuple[int, ...]
    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    pads: tuple[int, ...]
    auto_pad: str = "NOTSET"
    ceil_mode: bool = False
    output_padding: tuple[int, ...] = ()

    @property
    def rank(self) -> int:
        """Number of spatial axes."""
        return len(self.in_spatial)

    @property
    def pads_begin(self) -> tuple[int, ...]:
        return self.pads[: self.rank]

    @property
    def pads_end(self) -> tuple[int, ...]:
        return self.pads[self.rank :]

    @property
    def in_per_group(self) -> int:
        return self.in_channels // self.group

    @property
    def out_per_group(self) -> int:
        return self.out_channels // self.group

    @property
    def extent(self) -> tuple[int, ...]:
        """Dilated kernel size per axis: (k - 1)·d + 1."""
        return tuple((k - 1) * d + 1 for k, d in zip(self.kernel, self.dilations, strict=True))

    @property
    def depthwise(self) -> bool:
        """One input channel per group and as many groups as channels (any multiplier)."""
        return self.kind != "pool" and self.group == self.in_channels and self.in_per_group == 1

    @property
    def pointwise(self) -> bool:
        """1x..x1 kernel, stride 1, no padding."""
        return (
            all(k == 1 for k in self.kernel)
            and all(s == 1 for s in self.strides)
            and not any(self.pads)
        )

    @property
    def unit_dilation(self) -> bool:
        return all(d == 1 for d in self.dilations)


def _auto_pad(node: Node, opset: int | None) -> str:
    a = attr(node, "auto_pad", opset) or "NOTSET"
    return "NOTSET" if a == "" else str(a)


def same_pads(total: int, auto_pad: str) -> tuple[int, int]:
    """(begin, end) of a total pad: the odd unit at the end for SAME_UPPER, else at the begin."""
    small = total // 2
    return (small, total - small) if auto_pad == "SAME_UPPER" else (total - small, small)


def window_output(
    size: int, k: int, s: int, d: int, pb: int, pe: int, ceil_mode: bool = False
) -> int:
    """Output length of a sliding window along one axis (Conv / pooling, explicit pads)."""
    span = size + pb + pe - ((k - 1) * d + 1)
    if not ceil_mode:
        return span // s + 1
    out = -(-span // s) + 1
    # the last window must start inside the input or its begin pad (onnxruntime, PyTorch)
    return out - 1 if (out - 1) * s >= size + pb else out


def _window_pads(
    auto: str,
    explicit: Sequence[int] | None,
    in_sp: Sequence[int],
    out_sp: Sequence[int] | None,
    k: Sequence[int],
    s: Sequence[int],
    d: Sequence[int],
    ceil_mode: bool,
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(pads, out_spatial) of a Conv / pool."""
    n = len(in_sp)
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        out = (
            tuple(out_sp)
            if out_sp is not None
            else tuple(-(-i // t) for i, t in zip(in_sp, s, strict=True))
        )
        pads = [0] * (2 * n)
        for i in range(n):
            total = max((out[i] - 1) * s[i] + (k[i] - 1) * d[i] + 1 - in_sp[i], 0)
            pads[i], pads[i + n] = same_pads(total, auto)
        return tuple(pads), out
    pads = (
        (0,) * (2 * n) if auto == "VALID" or explicit is None else tuple(int(p) for p in explicit)
    )
    if out_sp is not None:
        return pads, tuple(out_sp)
    out = tuple(
        window_output(in_sp[i], k[i], s[i], d[i], pads[i], pads[i + n], ceil_mode) for i in range(n)
    )
    return pads, out


def resolve_pads(
    node: Node,
    in_sp: Sequence[int],
    out_sp: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    opset: int | None = None,
) -> tuple[int, ...]:
    """Begin pads then end pads of a Conv / pool window whose output size is known, auto_pad
    resolved (the pads part of conv_geometry / pool_geometry, for callers holding the sizes)."""
    pads, _ = _window_pads(
        _auto_pad(node, opset),
        attr(node, "pads", opset),
        in_sp,
        out_sp,
        kernel,
        strides,
        dilations,
        False,
    )
    return pads


def conv_geometry(
    node: Node,
    x_shape: Sequence[int],
    w_shape: Sequence[int],
    y_shape: Sequence[int] | None = None,
    opset: int | None = None,
) -> ConvGeometry:
    """Geometry of a Conv (or a fused internal conv op): x [N, C, *sp], w [M, C/group, *k]."""
    n = len(x_shape) - 2
    kernel = tuple(int(v) for v in w_shape[2:])
    s = ints(node, "strides", n, 1, opset)
    d = ints(node, "dilations", n, 1, opset)
    auto = _auto_pad(node, opset)
    pads, out = _window_pads(
        auto,
        attr(node, "pads", opset),
        tuple(int(v) for v in x_shape[2:]),
        None if y_shape is None else tuple(int(v) for v in y_shape[2:]),
        kernel,
        s,
        d,
        False,
    )
    return ConvGeometry(
        kind="conv",
        batch=int(x_shape[0]),
        in_channels=int(x_shape[1]),
        out_channels=int(w_shape[0]),
        group=int(attr(node, "group", opset)),
        in_spatial=tuple(int(v) for v in x_shape[2:]),
        out_spatial=out,
        kernel=kernel,
        strides=s,
        dilations=d,
        pads=pads,
        auto_pad=auto,
        output_padding=(0,) * n,
    )


def conv_transpose_geometry(
    node: Node,
    x_shape: Sequence[int],
    w_shape: Sequence[int],
    y_shape: Sequence[int] | None = None,
    opset: int | None = None,
) -> ConvGeometry:
    """Geometry of a ConvTranspose: x [N, C, *sp], w [C, M/group, *k]."""
    n = len(x_shape) - 2
    in_sp = tuple(int(v) for v in x_shape[2:])
    kernel = tuple(int(v) for v in w_shape[2:])
    s = ints(node, "strides", n, 1, opset)
    d = ints(node, "dilations", n, 1, opset)
    opad = ints(node, "output_padding", n, 0, opset)
    group = int(attr(node, "group", opset))
    auto = _auto_pad(node, opset)
    shape_attr = attr(node, "output_shape", opset)
    full = tuple(s[i] * (in_sp[i] - 1) + opad[i] + (kernel[i] - 1) * d[i] + 1 for i in range(n))
    if y_shape is not None:
        out = tuple(int(v) for v in y_shape[2:])
    elif shape_attr is not None:
        out = tuple(int(v) for v in list(shape_attr)[-n:])
    elif auto in ("SAME_UPPER", "SAME_LOWER"):
        out = tuple(in_sp[i] * s[i] for i in range(n))
    else:
        out = None
    if shape_attr is not None or auto in ("SAME_UPPER", "SAME_LOWER"):
        assert out is not None
        pads = [0] * (2 * n)
        for i in range(n):
            pads[i], pads[i + n] = same_pads(max(full[i] - out[i], 0), auto)
        pad_t = tuple(pads)
    elif auto == "VALID":
        pad_t = (0,) * (2 * n)
    else:
        pad_t = tuple(int(p) for p in (attr(node, "pads", opset) or (0,) * (2 * n)))
    if out is None:
        out = tuple(full[i] - pad_t[i] - pad_t[i + n] for i in range(n))
    return ConvGeometry(
        kind="conv_transpose",
        batch=int(x_shape[0]),
        in_channels=int(x_shape[1]),
        out_channels=int(w_shape[1]) * group,
        group=group,
        in_spatial=in_sp,
        out_spatial=out,
        kernel=kernel,
        strides=s,
        dilations=d,
        pads=pad_t,
        auto_pad=auto,
        output_padding=opad,
    )


def pool_geometry(
    node: Node,
    x_shape: Sequence[int],
    y_shape: Sequence[int] | None = None,
    opset: int | None = None,
) -> ConvGeometry:
    """Geometry of MaxPool / AveragePool / LpPool and the Global* pools (x [N, C, *sp])."""
    n = len(x_shape) - 2
    in_sp = tuple(int(v) for v in x_shape[2:])
    N, C = int(x_shape[0]), int(x_shape[1])
    if node.op_type.startswith("Global"):
        return ConvGeometry(
            "pool", N, C, C, 1, in_sp, (1,) * n, in_sp, (1,) * n, (1,) * n, (0,) * (2 * n)
        )
    kernel = tuple(int(v) for v in attr(node, "kernel_shape", opset))
    s = ints(node, "strides", n, 1, opset)
    # dilations exist on MaxPool (opset 10+) and AveragePool (19+): the schema says which
    d = ints(node, "dilations", n, 1, opset)
    ceil_mode = bool(int(attr(node, "ceil_mode", opset) or 0))
    auto = _auto_pad(node, opset)
    pads, out = _window_pads(
        auto,
        attr(node, "pads", opset),
        in_sp,
        None if y_shape is None else tuple(int(v) for v in y_shape[2:]),
        kernel,
        s,
        d,
        ceil_mode,
    )
    return ConvGeometry(
        kind="pool",
        batch=N,
        in_channels=C,
        out_channels=C,
        group=1,
        in_spatial=in_sp,
        out_spatial=out,
        kernel=kernel,
        strides=s,
        dilations=d,
        pads=pads,
        auto_pad=auto,
        ceil_mode=ceil_mode,
        output_padding=(0,) * n,
    )


def geometry(
    node: Node,
    x_shape: Sequence[int],
    w_shape: Sequence[int] | None = None,
    y_shape: Sequence[int] | None = None,
    opset: int | None = None,
) -> ConvGeometry:
    """Dispatch on the op type: ConvTranspose, pools, else a convolution (fused ops by their
    base op: o2e.ConvTransposeAct is a ConvTranspose)."""
    op = base_op(node)
    if op == "ConvTranspose":
        assert w_shape is not None
        return conv_transpose_geometry(node, x_shape, w_shape, y_shape, opset)
    if op.endswith("Pool"):
        return pool_geometry(node, x_shape, y_shape, opset)
    assert w_shape is not None
    return conv_geometry(node, x_shape, w_shape, y_shape, opset)
