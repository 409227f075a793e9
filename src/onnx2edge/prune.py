"""Magnitude pruning of Gemm / MatMul / Conv constant weights (issue 14, seed 003).

The model is edited as a protobuf copy (the input is never mutated). Each prunable weight is
viewed as a 2-D matrix (outputs, inputs): Gemm's B as (N, K) whatever transB says, MatMul's B
as (N, K) (its transpose), Conv's W as (M, C/group * kh * kw). Three granularities:

- unstructured: the smallest |w| are zeroed;
- `channels`: whole output rows (L2 norm per row);
- `blocks:RxC`: R outputs x C inputs tiles (mean |w| per tile), which vector units like.

`global` scope ranks every candidate weight together (one threshold for the whole model);
`layer` scope prunes each weight to the same sparsity.

One global threshold can empty a whole layer (a layer whose weights are all small: 12
convolutions of ResNet50 at 90%, the middle layer of an MLP), which turns the model into a
constant. `max_layer_sparsity` caps every layer (DEFAULT_MAX_LAYER_SPARSITY); a layer at the
cap keeps its largest weights and the rest of the target is taken from the layers below it
(the global order among them is unchanged). Each capped layer is reported in `warnings`, and a
target the cap makes unreachable is refused.

Shared initializers (exporters tie weights): a weight used by several prunable nodes is
pruned once, with one mask, so every user sees the same tensor. A weight that is also read by
a node we do not prune (e.g. a tied embedding Gather), or by a node in `skip`, is left dense
and reported in `notes` — pruning it would silently change the other user.

No library does this on ONNX graphs (torch.nn.utils.prune works on torch modules, not on an
exported model), hence the hand-written pass; the ranking itself is numpy.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from .errors import Onnx2EdgeError

PRUNABLE = ("Gemm", "MatMul", "Conv")

# At most this fraction of a layer's weights pruned unless asked otherwise: a layer keeps >= 2%
# of its weights, so no layer is emptied (one emptied layer makes every output a constant),
# while global magnitude pruning keeps its freedom to prune big redundant layers much harder
# than the average (the digits MLP 64-500-250-10 pruned globally to 90% puts its middle layer
# at 97.1%, below the cap; at 95% at 99.5%, where the cap moves 1.5% of that layer's
# weights to the others and leaves 0.8% of its outputs without any weight instead of 25.6%:
# docs/pruning.md).
DEFAULT_MAX_LAYER_SPARSITY = 0.98


@dataclass
class PruneReport:
    sparsity: float  # achieved, over the pruned weights
    weights: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> nodes, zeros, size
    notes: list[str] = field(default_factory=list)
    # per layer at the cap, or fully zero: printed by `format` (CLI) and in `--json`
    warnings: list[str] = field(default_factory=list)
    max_layer_sparsity: float = DEFAULT_MAX_LAYER_SPARSITY

    def as_dict(self) -> dict[str, Any]:
        return {
            "sparsity": self.sparsity,
            "max_layer_sparsity": self.max_layer_sparsity,
            "weights": self.weights,
            "notes": self.notes,
            "warnings": self.warnings,
        }

    def format(self) -> str:
        lines = [f"pruned {len(self.weights)} weight(s) to {self.sparsity:.1%} zeros"]
        for name, w in self.weights.items():
            lines.append(
                f"  {name} ({', '.join(w['nodes'])}): {w['zeros'] / w['size']:.1%} of {w['size']}"
            )
        lines += [f"  note: {n}" for n in self.notes]
        lines += [f"  warning: {w}" for w in self.warnings]
        return "\n".join(lines)


def parse_structured(spec: str | None) -> tuple[int, int] | None:
    """None (unstructured), 'channels' -> (1, 0) meaning whole rows, 'blocks:RxC' -> (R, C)."""
    if not spec:
        return None
    if spec == "channels":
        return (1, 0)
    m = re.fullmatch(r"blocks:(\d+)x(\d+)", spec)
    if not m or int(m.group(1)) < 1 or int(m.group(2)) < 1:
        raise Onnx2EdgeError(f"--structured: expected 'channels' or 'blocks:RxC', got {spec!r}")
    return int(m.group(1)), int(m.group(2))


def _as_matrix(
    op: str, node: onnx.NodeProto, w: np.ndarray
) -> tuple[np.ndarray, Callable[[np.ndarray], np.ndarray]]:
    """The (outputs, inputs) view of a weight, and the inverse mapping for a same-shape mask."""
    if op == "Conv":
        return w.reshape(w.shape[0], -1), lambda m: m.reshape(w.shape)
    trans_b = op == "Gemm" and any(a.name == "transB" and a.i for a in node.attribute)
    if trans_b:
        return w, lambda m: m
    return w.T, lambda m: m.T


def _candidates(
    model: onnx.ModelProto, skip: set[str]
) -> tuple[dict[str, tuple[str, onnx.NodeProto]], list[str]]:
    """Initializer name -> (op, first user node) for the weights we may prune; and notes."""
    inits = {t.name: t for t in model.graph.initializer}
    users: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
    for n in model.graph.node:
        for i, name in enumerate(n.input):
            if name in inits:
                users.setdefault(name, []).append((n, i))
    graph_outputs = {o.name for o in model.graph.output}
    out: dict[str, tuple[str, onnx.NodeProto]] = {}
    notes: list[str] = []
    for name, us in users.items():
        weight_uses = [(n, i) for n, i in us if n.op_type in PRUNABLE and i == 1]
        if not weight_uses:
            continue
        t = inits[name]
        if t.data_type != onnx.TensorProto.FLOAT:
            continue
        dims = list(t.dims)
        ok_rank = all(
            (n.op_type == "Conv" and len(dims) >= 3) or (n.op_type != "Conv" and len(dims) == 2)
            for n, _ in weight_uses
        )
        if not ok_rank:
            continue
        ops = {n.op_type for n, _ in weight_uses}
        names = [n.name or n.output[0] for n, _ in us]
        if len(weight_uses) != len(us) or name in graph_outputs:
            notes.append(
                f"{name}: shared with a node that is not pruned ({', '.join(names)}): left dense"
            )
            continue
        skipped = [n for n in names if n in skip]
        if skipped:
            if len(names) > 1:
                notes.append(
                    f"{name}: shared by {', '.join(names)}, {', '.join(skipped)} skipped: left dense"
                )
            continue
        if len(ops) > 1 or (ops == {"Gemm"} and len({_trans_b(n) for n, _ in weight_uses}) > 1):
            notes.append(f"{name}: used with different layouts ({', '.join(names)}): left dense")
            continue
        if len(us) > 1:
            notes.append(f"{name}: shared by {', '.join(names)}: pruned once, one mask for all")
        out[name] = (weight_uses[0][0].op_type, weight_uses[0][0])
    return out, notes


def _trans_b(n: onnx.NodeProto) -> bool:
    return any(a.name == "transB" and a.i for a in n.attribute)


def _scores(mat: np.ndarray, groups: tuple[int, int] | None) -> np.ndarray:
    """One score per prunable unit, shaped like the unit grid (same shape as mat if unstructured)."""
    a = np.abs(mat.astype(np.float64))
    if groups is None:
        return a
    r, c = groups
    if c == 0:  # whole output channels
        return np.sqrt((a * a).mean(axis=1, keepdims=True))
    rows, cols = a.shape
    pr, pc = -rows % r, -cols % c
    a = np.pad(a, ((0, pr), (0, pc)))
    return a.reshape((rows + pr) // r, r, (cols + pc) // c, c).mean(axis=(1, 3))


def _expand(
    unit_mask: np.ndarray, shape: tuple[int, int], groups: tuple[int, int] | None
) -> np.ndarray:
    if groups is None:
        return unit_mask
    r, c = groups
    if c == 0:
        return np.broadcast_to(unit_mask, shape)
    big = np.repeat(np.repeat(unit_mask, r, axis=0), c, axis=1)
    return big[: shape[0], : shape[1]]


def _unit_sizes(shape: tuple[int, int], groups: tuple[int, int] | None) -> np.ndarray:
    """Weights per unit (edge blocks are smaller), so a sparsity counts weights, not units."""
    ones = np.ones(shape)
    if groups is None:
        return ones
    r, c = groups
    if c == 0:
        return np.full((shape[0], 1), float(shape[1]))
    rows, cols = shape
    pr, pc = -rows % r, -cols % c
    ones = np.pad(ones, ((0, pr), (0, pc)))
    return ones.reshape((rows + pr) // r, r, (cols + pc) // c, c).sum(axis=(1, 3))


def _prunable_units(score: np.ndarray, size: np.ndarray, cap: float) -> np.ndarray:
    """Mask of the units of one layer that may be zeroed under the cap: its lowest-scoring
    units while their weights stay within `cap` of the layer's (a prefix of the layer's own
    order, which is also its order within the global ranking, both being stable sorts)."""
    s, n = score.reshape(-1), size.reshape(-1)
    order = np.argsort(s, kind="stable")
    ok = np.zeros(s.size, bool)
    ok[order] = np.cumsum(n[order]) <= cap * n.sum() + 1e-9
    return ok.reshape(score.shape)


def _zero_units(
    scores: list[np.ndarray],
    sizes: list[np.ndarray],
    sparsity: float,
    cap: float = 1.0,
) -> list[np.ndarray]:
    """Keep-masks over units: the lowest-scoring units until `sparsity` of the weights are zero,
    no layer (list entry) beyond `cap` of its weights (the caller checks reachability).

    Stable ordering (ties broken by position) keeps the result deterministic."""
    flat_s = np.concatenate([s.reshape(-1) for s in scores])
    flat_n = np.concatenate([n.reshape(-1) for n in sizes])
    order = np.argsort(flat_s, kind="stable")
    if cap < 1.0:
        ok = np.concatenate(
            [_prunable_units(s, n, cap).reshape(-1) for s, n in zip(scores, sizes, strict=True)]
        )
        order = order[ok[order]]
    target = sparsity * flat_n.sum()
    cum = np.cumsum(flat_n[order])
    k = int(np.searchsorted(cum, target - 1e-9, side="left")) + 1 if target > 0 else 0
    k = min(k, order.size)
    if (
        k > 0
        and cum[k - 1] > target + 0.5
        and (k == 1 or abs(cum[k - 2] - target) < abs(cum[k - 1] - target))
    ):
        k -= 1  # the nearer of the two counts around the target
    keep = np.ones(flat_s.size, bool)
    keep[order[:k]] = False
    out, at = [], 0
    for s in scores:
        out.append(keep[at : at + s.size].reshape(s.shape))
        at += s.size
    return out


def prune_model(
    model: onnx.ModelProto,
    sparsity: float,
    *,
    scope: str = "global",
    structured: str | None = None,
    skip: Sequence[str] = (),
    max_layer_sparsity: float = DEFAULT_MAX_LAYER_SPARSITY,
) -> tuple[onnx.ModelProto, PruneReport]:
    """A pruned copy of `model` (the argument is not modified) and what was pruned.

    No layer loses more than `max_layer_sparsity` of its weights (1.0: no cap); a target the
    cap makes unreachable raises Onnx2EdgeError."""
    if not 0.0 <= sparsity < 1.0:
        raise Onnx2EdgeError(f"--sparsity must be in [0, 1), got {sparsity}")
    cap = max_layer_sparsity
    if not 0.0 < cap <= 1.0:
        raise Onnx2EdgeError(f"--max-layer-sparsity must be in (0, 1], got {cap}")
    if scope not in ("global", "layer"):
        raise Onnx2EdgeError(f"--scope must be global or layer, got {scope!r}")
    groups = parse_structured(structured)
    node_names = {n.name for n in model.graph.node} | {
        o for n in model.graph.node for o in n.output
    }
    unknown = [s for s in skip if s not in node_names]
    if unknown:
        raise Onnx2EdgeError(f"--skip: no node named {', '.join(unknown)}")
    out = onnx.ModelProto()
    out.CopyFrom(model)
    cands, notes = _candidates(out, set(skip))
    warnings: list[str] = []
    inits = {t.name: t for t in out.graph.initializer}
    mats, inverse, scores, sizes = {}, {}, {}, {}
    for name, (op, node) in cands.items():
        w = numpy_helper.to_array(inits[name])
        mats[name], inverse[name] = _as_matrix(op, node, w)
        scores[name] = _scores(mats[name], groups)
        sizes[name] = _unit_sizes(mats[name].shape, groups)
    names = list(cands)  # channels are scored by RMS, so wide layers are not favoured
    _check_reachable(names, scores, sizes, sparsity, cap, scope)
    keeps: dict[str, np.ndarray] = {}
    groups_of = [names] if scope == "global" else [[n] for n in names]
    for group in groups_of if names else []:
        args = [scores[n] for n in group], [sizes[n] for n in group], sparsity
        capped = _zero_units(*args, cap)
        # what the uncapped rule would have done, to say what the cap changed
        free = _zero_units(*args) if cap < 1.0 else capped
        for name, k, f in zip(group, capped, free, strict=True):
            keeps[name] = k
            got, would = _pruned_share(k, sizes[name]), _pruned_share(f, sizes[name])
            if would > got + 1e-12:
                rule = "one global threshold" if scope == "global" else "the layer target"
                warnings.append(
                    f"{name}: capped at {got:.1%} by --max-layer-sparsity {cap:g} ({rule} "
                    f"would prune {would:.1%})"
                    + ("; the rest taken from the other layers" if scope == "global" else "")
                )
    report = PruneReport(sparsity=0.0, notes=notes, warnings=warnings, max_layer_sparsity=cap)
    zeros = total = 0
    users = _users(out)
    for name in names:
        mat = mats[name]
        mask = _expand(keeps[name], mat.shape, groups)
        new = np.where(mask, mat, np.float32(0)).astype(np.float32)
        arr = np.ascontiguousarray(inverse[name](new))
        inits[name].CopyFrom(numpy_helper.from_array(arr, name))
        z = int(arr.size - np.count_nonzero(arr))
        zeros, total = zeros + z, total + arr.size
        report.weights[name] = {"nodes": users[name], "zeros": z, "size": int(arr.size)}
        if z == arr.size:
            warnings.append(
                f"{name} ({', '.join(users[name])}): every weight is zero, the layer's output "
                "no longer depends on its input"
            )
    report.sparsity = zeros / total if total else 0.0
    if not names:
        report.notes.append("no prunable Gemm / MatMul / Conv constant weight")
    return out, report


def _pruned_share(keep: np.ndarray, size: np.ndarray) -> float:
    """Fraction of a layer's weights its keep-mask over units zeroes."""
    return float(size[~keep].sum() / size.sum())


def _check_reachable(
    names: Sequence[str],
    scores: Mapping[str, np.ndarray],
    sizes: Mapping[str, np.ndarray],
    sparsity: float,
    cap: float,
    scope: str,
) -> None:
    """Refuse a target the cap makes unreachable: in layer scope a target above the cap, in
    global scope one above what the layers can give under the cap (in whole units)."""
    if cap >= 1.0 or not names:
        return
    hint = "raise --max-layer-sparsity (1 allows emptying a layer) or lower --sparsity"
    if scope != "global":
        if sparsity > cap:
            raise Onnx2EdgeError(
                f"--sparsity {sparsity:g} (layer scope) above --max-layer-sparsity {cap:g}: {hint}"
            )
        return
    most = sum(float(sizes[n][_prunable_units(scores[n], sizes[n], cap)].sum()) for n in names)
    total = sum(float(sizes[n].sum()) for n in names)
    if sparsity * total > most + 0.5:
        raise Onnx2EdgeError(
            f"--sparsity {sparsity:g} unreachable with --max-layer-sparsity {cap:g}: at most "
            f"{most / total:.2%} of the weights can be pruned; {hint}"
        )


def _users(model: onnx.ModelProto) -> dict[str, list[str]]:
    u: dict[str, list[str]] = {}
    for n in model.graph.node:
        for name in n.input:
            u.setdefault(name, []).append(n.name or n.output[0])
    return u


def weight_sparsity(model: onnx.ModelProto) -> float:
    """Fraction of zeros over the Gemm / MatMul / Conv constant weights."""
    inits = {t.name: t for t in model.graph.initializer}
    z = n = 0
    seen = set()
    for node in model.graph.node:
        if (
            node.op_type in PRUNABLE
            and len(node.input) > 1
            and node.input[1] in inits
            and node.input[1] not in seen
        ):
            seen.add(node.input[1])
            a = numpy_helper.to_array(inits[node.input[1]])
            z, n = z + a.size - np.count_nonzero(a), n + a.size
    return z / n if n else 0.0


# --- sweep ------------------------------------------------------------------------------------


def evaluate(
    model: onnx.ModelProto,
    feeds: Mapping[str, np.ndarray],
    labels: np.ndarray | None,
    reference: np.ndarray | None,
) -> tuple[float, np.ndarray]:
    """Top-1 accuracy against labels, or top-1 agreement with `reference` predictions."""
    from .runtime import ort_run

    out = ort_run(model, dict(feeds))
    first = next(iter(out.values()))
    pred = np.asarray(first).reshape(first.shape[0], -1).argmax(axis=1)
    truth = labels if labels is not None else reference
    if truth is None:
        return float("nan"), pred
    return float((pred == np.asarray(truth).reshape(-1)).mean()), pred
