"""Consistency of a model's shapes: mistakes named by node before any backend trips on them.

`onnx.checker` validates the file's structure, not whether a Conv's weight fits its input.
A mismatch found only later surfaces as a numpy reshape error deep in a backend (or, in
onnxruntime, only when the model runs). Two checks close that gap:

- onnx's own shape inference in strict mode, on a skeleton whose declared intermediate and
  output shapes are dropped: declared shapes are hints some exporters get wrong, so only the
  ops' own rules can fail here (MatMul/Gemm inner dimensions, broadcasting, Concat, ...);
- the rules onnx's inference does not check (its Conv inference ignores input channels), each
  from the operator's spec.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import onnx

from ..errors import Onnx2EdgeError

Shape = tuple[int | None, ...]
# op type -> rule(node, shapes of its inputs) -> what is wrong, or None
_RULES: dict[str, Callable[[onnx.NodeProto, list[Shape | None]], str | None]] = {}


def _rule(*ops: str) -> Callable:
    def deco(fn: Callable) -> Callable:
        for op in ops:
            _RULES[op] = fn
        return fn

    return deco


def _attr_int(node: onnx.NodeProto, name: str, default: int) -> int:
    for a in node.attribute:
        if a.name == name:
            return int(a.i)
    return default


def _dim(shape: Shape | None, axis: int) -> int | None:
    if shape is None or len(shape) <= axis:
        return None
    return shape[axis]


@_rule("Conv", "QLinearConv", "ConvInteger")
def _conv(node: onnx.NodeProto, shapes: list[Shape | None]) -> str | None:
    # Conv spec: X is (N x C x D1 ...), W is (M x C/group x k1 ...), B has M elements.
    x_i, w_i = (0, 3) if node.op_type == "QLinearConv" else (0, 1)
    x, w = shapes[x_i] if len(shapes) > x_i else None, shapes[w_i] if len(shapes) > w_i else None
    group = _attr_int(node, "group", 1)
    if group < 1:
        return f"group is {group}; it must be at least 1"
    if x is not None and w is not None and len(x) != len(w):
        return f"input has rank {len(x)} but the weight has rank {len(w)}"
    c, wc, m = _dim(x, 1), _dim(w, 1), _dim(w, 0)
    if c is not None and wc is not None and c != wc * group:
        return (
            f"the input has {c} channels but the weight expects {wc * group} "
            f"({wc} per group x group {group})"
        )
    if m is not None and m % group:
        return f"{m} output channels are not divisible by group {group}"
    b_i = 8 if node.op_type == "QLinearConv" else 2
    b = shapes[b_i] if len(shapes) > b_i and node.op_type != "ConvInteger" else None
    if b is not None and m is not None and b != (m,):
        return f"the bias has shape {_fmt(b)}; the weight has {m} output channels"
    return None


@_rule("ConvTranspose")
def _conv_transpose(node: onnx.NodeProto, shapes: list[Shape | None]) -> str | None:
    # ConvTranspose spec: W is (C x M/group x k1 ...), B has M elements.
    x, w = shapes[0], shapes[1] if len(shapes) > 1 else None
    group = _attr_int(node, "group", 1)
    if group < 1:
        return f"group is {group}; it must be at least 1"
    c, wc = _dim(x, 1), _dim(w, 0)
    if c is not None and wc is not None and c != wc:
        return f"the input has {c} channels but the weight expects {wc}"
    m = _dim(w, 1)
    b = shapes[2] if len(shapes) > 2 else None
    if b is not None and m is not None and b != (m * group,):
        return f"the bias has shape {_fmt(b)}; the weight has {m * group} output channels"
    return None


@_rule("BatchNormalization", "InstanceNormalization")
def _norm(node: onnx.NodeProto, shapes: list[Shape | None]) -> str | None:
    c = _dim(shapes[0], 1)
    names = ("scale", "B", "mean", "var")
    for name, s in zip(names, shapes[1:], strict=False):
        if c is not None and s is not None and s != (c,):
            return f"{name} has shape {_fmt(s)}; the input has {c} channels"
    return None


def _fmt(shape: Sequence[int | None]) -> str:
    return "x".join("?" if d is None else str(d) for d in shape) or "scalar"


def _shapes(model: onnx.ModelProto) -> dict[str, Shape]:
    out: dict[str, Shape] = {}
    g = model.graph
    for vi in [*g.input, *g.value_info, *g.output]:
        tt = vi.type.tensor_type
        if tt.HasField("shape"):
            out[vi.name] = tuple(
                d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim
            )
    for t in g.initializer:
        out[t.name] = tuple(t.dims)
    return out


def _without_declared_shapes(model: onnx.ModelProto) -> onnx.ModelProto:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    del m.graph.value_info[:]
    for o in m.graph.output:
        if o.type.HasField("tensor_type"):  # reading tensor_type would make a sequence a tensor
            o.type.tensor_type.ClearField("shape")
    return m


def _node_label(node: onnx.NodeProto, index: int) -> str:
    return f"node '{node.name or f'#{index}'}' (op {node.op_type})"


def check_consistency(skeleton: onnx.ModelProto, source: str) -> None:
    """Raise one Onnx2EdgeError naming every inconsistent node; `skeleton` keeps weight shapes
    (see loader.skeleton) so this costs no weight copies."""
    bare = _without_declared_shapes(skeleton)
    try:
        inferred = onnx.shape_inference.infer_shapes(bare, strict_mode=True, data_prop=True)
    except onnx.shape_inference.InferenceError as e:
        found = _main_graph_errors(e, bare.graph)
        if found:
            raise Onnx2EdgeError(f"{source}: inconsistent model: {found}") from e
        # Only inside function bodies or subgraphs: onnx's strict mode is stricter there than
        # onnxruntime (e.g. the spec's own test_mvn); the models run, so they are not refused.
        inferred = bare
    except Exception:  # noqa: BLE001 - onnx raises several types; the loader's own inference reports
        inferred = bare
    shapes = _shapes(inferred)
    bad = []
    for i, node in enumerate(inferred.graph.node):
        rule = _RULES.get(node.op_type) if node.domain in ("", "ai.onnx") else None
        if rule is None:
            continue
        what = rule(node, [shapes.get(n) if n else None for n in node.input])
        if what:
            bad.append(f"{_node_label(node, i)}: {what}")
    if bad:
        raise Onnx2EdgeError(f"{source}: inconsistent model: " + "; ".join(bad))


def _main_graph_errors(e: Exception, graph: onnx.GraphProto) -> str:
    """onnx's '[ShapeInferenceError] Inference error(s): (op_type:MatMul, node name: mm):
    [ShapeInferenceError] Incompatible dimensions ...' as "node 'mm' (op MatMul): ...", keeping
    the shape errors of the main graph's named nodes."""
    import re

    names = {n.name for n in graph.node if n.name}
    text = " ".join(str(e).split())
    found = re.findall(
        r"\(op_type:([^,)]+), node name: ([^)]*)\): \[ShapeInferenceError\] ([^(]+)", text
    )
    return "; ".join(
        f"node '{n.strip()}' (op {op.strip()}): {msg.strip()}"
        for op, n, msg in found
        if n.strip() in names
    )
