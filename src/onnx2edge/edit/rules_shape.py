"""Flatten / Reshape clean-ups and Resize coordinate-mode normalisation."""

from __future__ import annotations

import numpy as np

from ..ir import Graph
from ..semantics.records import reduce_attrs, reduced_axes, resize_attrs
from .rules import Builder, default_domain, register_rule

_RESHAPES = ("Reshape", "Flatten", "Squeeze", "Unsqueeze")


def _static(graph: Graph, name: str) -> tuple[int, ...] | None:
    t = graph.type_of(name)
    return t.static_shape if t is not None and t.is_static else None


@register_rule("reshape_cleanup", ops=_RESHAPES)
def reshape_cleanup(graph: Graph) -> Graph:
    """Chains of Reshape / Flatten / Squeeze / Unsqueeze -> one Reshape to the final static
    shape; a reshape to the shape it already has -> removed. Exact (pure data movement).

    before:  x[1,512,1,1] -> Flatten -> t[1,512] -> Reshape[1,512] -> y
    after:   x -> Reshape[1,512] -> y
    """
    b = Builder(graph)
    rename: dict[str, str] = {}  # bypassed tensor -> the tensor it equals
    for n in graph.nodes:
        n = n.replace(inputs=tuple(rename.get(i, i) for i in n.inputs))
        out = _static(graph, n.outputs[0]) if n.op_type in _RESHAPES and default_domain(n) else None
        if out is None or 0 in out:  # a 0 in a Reshape shape means "copy", not "empty"
            b.keep(n)
            continue
        src = n.inputs[0]
        # walk up through single-use reshapes to the first tensor that is not a reshape
        p = graph.producer(src)
        while (
            p is not None
            and p.op_type in _RESHAPES
            and default_domain(p)
            and len(graph.consumers(p.outputs[0])) == 1
            and p.outputs[0] not in graph.outputs
        ):
            src = rename.get(p.inputs[0], p.inputs[0])
            p = graph.producer(p.inputs[0])
        if _static(graph, src) == out and n.outputs[0] not in graph.outputs:
            rename[n.outputs[0]] = src
            b.changed = True
        elif src != n.inputs[0] or n.op_type != "Reshape":
            if src == n.inputs[0] and n.op_type != "Reshape":
                b.keep(n)  # a lone Flatten / Squeeze is left as it is
                continue
            shape = b.const(n, "shape", np.array(out, np.int64))
            b.add(n, "reshape", "Reshape", [src, shape], output=n.outputs[0])
        else:
            b.keep(n)
    if not b.changed:
        return graph
    # drop the reshapes nobody reads any more (the chain's inner links)
    live = set(graph.outputs)
    keep = []
    for n in reversed(b.nodes):
        if any(o in live for o in n.outputs) or n.op_type not in _RESHAPES:
            keep.append(n)
            live.update(i for i in n.inputs if i)
    b.nodes = keep[::-1]
    return b.result()


def _scales(graph: Graph, n) -> np.ndarray | None:  # noqa: ANN001
    """Per-axis output/input size ratios of a Resize with static shapes."""
    xs, ys = _static(graph, n.inputs[0]), _static(graph, n.outputs[0])
    if xs is None or ys is None or len(xs) != len(ys) or 0 in xs:
        return None
    return np.array(ys, np.float64) / np.array(xs, np.float64)


@register_rule("resize_normalize", ops=("Resize",))
def resize_normalize(graph: Graph) -> Graph:
    """Resize coordinate modes rewritten to the canonical one where the result is provably
    the same (runtimes disagree on the rest; seed 002's classic mismatch):

    - nearest, integer upscale factors: every (coordinate mode, nearest mode) of
      half_pixel / pytorch_half_pixel / asymmetric with round_prefer_floor / round_prefer_ceil /
      floor picks source index floor(dst / s) -> asymmetric + floor (what Core ML's and MPS's
      nearest upsampling do). (half_pixel: (dst + 0.5) / s - 0.5 = k + (r + 0.5) / s - 0.5,
      whose fractional part lies strictly inside (-0.5, 0.5), so every rounding gives k.)
    - linear / cubic: pytorch_half_pixel -> half_pixel when no resized axis has output size 1
      (the two differ only there).

    before:  Resize(nearest, coordinate_transformation_mode=half_pixel,
                    nearest_mode=round_prefer_floor, scales 1,1,2,2)
    after:   Resize(nearest, coordinate_transformation_mode=asymmetric, nearest_mode=floor, ...)
    """
    b = Builder(graph)
    for n in graph.nodes:
        s = (
            _scales(graph, n)
            if n.op_type == "Resize" and default_domain(n) and graph.opset >= 11
            else None
        )
        if s is None or resize_attrs(n, graph.opset).antialias:
            b.keep(n)
            continue
        r = resize_attrs(n, graph.opset)
        ctm, mode, nm = r.coordinate_transformation_mode, r.mode, r.nearest_mode
        attrs = dict(n.attrs)
        if (
            mode == "nearest"
            and np.all(s >= 1)
            and np.all(s == np.round(s))
            and ctm in ("half_pixel", "pytorch_half_pixel", "asymmetric")
            and nm in ("round_prefer_floor", "round_prefer_ceil", "floor")
            and not (ctm == "asymmetric" and nm != "floor" and np.any(s > 1))
            and (ctm, nm) != ("asymmetric", "floor")
        ):
            from .rules import make_attr

            attrs["coordinate_transformation_mode"] = make_attr("asymmetric")
            attrs["nearest_mode"] = make_attr("floor")
        elif mode in ("linear", "cubic") and ctm == "pytorch_half_pixel":
            ys = _static(graph, n.outputs[0])
            xs = _static(graph, n.inputs[0])
            if (
                ys is None
                or xs is None
                or any(o == 1 and i != 1 for o, i in zip(ys, xs, strict=True))
            ):
                b.keep(n)
                continue
            from .rules import make_attr

            attrs["coordinate_transformation_mode"] = make_attr("half_pixel")
        else:
            b.keep(n)
            continue
        b.keep(n.replace(attrs=attrs, name=b.fresh(f"{n.name}/normalized")))
        b.changed = True
    return b.result()


@register_rule("reducemean_to_gap", ops=("ReduceMean",), targets=("mps",))
def reducemean_to_gap(graph: Graph) -> Graph:
    """ReduceMean over the spatial axes of a 4-D tensor -> GlobalAveragePool (the same mean;
    torch's dynamo exporter writes global average pooling as ReduceMean). keepdims=0 adds a
    Reshape to [N, C].

    before:  x[N,C,H,W] -> ReduceMean(axes=[2,3], keepdims=1) -> y[N,C,1,1]
    after:   x -> GlobalAveragePool -> y
    """
    b = Builder(graph)
    for n in graph.nodes:
        xs = (
            _static(graph, n.inputs[0]) if n.op_type == "ReduceMean" and default_domain(n) else None
        )
        axes = reduced_axes(n, graph, 4) if xs is not None and len(xs) == 4 else None
        if axes != [2, 3]:
            b.keep(n)
            continue
        if reduce_attrs(n, graph.opset).keepdims:
            b.add(n, "gap", "GlobalAveragePool", [n.inputs[0]], output=n.outputs[0])
        else:
            g = b.add(n, "gap", "GlobalAveragePool", [n.inputs[0]])
            shape = b.const(n, "shape", np.array(xs[:2], np.int64))
            b.add(n, "reshape", "Reshape", [g, shape], output=n.outputs[0])
    return b.result()
