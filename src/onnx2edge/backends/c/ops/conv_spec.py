"""What the Conv-family emitters share: the float32 check, pads with auto_pad resolved."""

from __future__ import annotations

from ....ir import Graph, Node
from ....semantics.conv_geometry import resolve_pads
from .checks import float32_input


# --------------------------------------------------------------------------------------------
# convolution
# --------------------------------------------------------------------------------------------
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
