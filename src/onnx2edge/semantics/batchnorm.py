"""Inference BatchNormalization as a per-channel affine map, the one formula every consumer
uses (the fold_batchnorm pass, the MPS lowering, the C emitter of a BN left unfolded):

    y = scale·x + shift,   scale = γ / sqrt(σ² + ε),   shift = β − μ·scale

computed in float64 from the constant parameters, ε the node's or the schema's default.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir import Graph, Node
from .attrs import attr, epsilon


@dataclass(frozen=True)
class BatchNormAttrs:
    """BatchNormalization's attributes at the node's opset: `training` is the attribute
    training_mode from opset 14, before it the presence of the running-statistics outputs
    (opset 9-13 have no attribute); `spatial` (before 9; 1 after, per-channel statistics)."""

    epsilon: float
    momentum: float
    training: bool
    spatial: bool


def bn_attrs(node: Node, opset: int) -> BatchNormAttrs:
    if opset >= 14:
        training = bool(int(attr(node, "training_mode", opset)))
    else:
        training = any(node.outputs[1:])
    # o2e.BatchNormalizationAct's one schema has no `spatial` (removed at opset 9): per channel
    spatial = attr(node, "spatial", opset)
    return BatchNormAttrs(
        epsilon(node, opset),
        float(attr(node, "momentum", opset)),
        training,
        True if spatial is None else bool(int(spatial)),
    )


def bn_affine(graph: Graph, bn: Node) -> tuple[np.ndarray, np.ndarray] | None:
    """(scale, shift) per channel of an inference BN whose parameters are all constant; None
    in training mode, with its extra outputs requested, or with a parameter computed at run
    time."""
    if len(bn.inputs) < 5 or len(bn.outputs) > 1 and any(bn.outputs[1:]):
        return None  # training-mode outputs requested
    if bn.attr("training_mode", 0):
        return None
    params = [graph.const(n) for n in bn.inputs[1:5]]
    if any(p is None for p in params):
        return None
    gamma, beta, mean, var = (np.asarray(p, dtype=np.float64).reshape(-1) for p in params)  # type: ignore[arg-type]
    scale = gamma / np.sqrt(var + epsilon(bn, graph.opset))
    return scale, beta - mean * scale
