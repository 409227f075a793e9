"""What the Conv-family emitters share: the float32 check, pads with auto_pad resolved."""

from __future__ import annotations

from ....ir import Graph, Node
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
    """Begin pads then end pads, resolving auto_pad (ONNX Conv spec)."""
    n = len(in_sp)
    auto = node.attr("auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads = [0] * (2 * n)
        for i in range(n):
            total = max((out_sp[i] - 1) * s[i] + (k[i] - 1) * d[i] + 1 - in_sp[i], 0)
            small = total // 2
            pads[i], pads[i + n] = (
                (small, total - small) if auto == "SAME_UPPER" else (total - small, small)
            )
        return pads
    if auto == "VALID":
        return [0] * (2 * n)
    return list(node.attr("pads", [0] * (2 * n)))


def conv_check(node: Node, graph: Graph) -> str | None:
    if (why := float32_input(node, graph)) is not None:
        return why
    w = graph.type_of(node.inputs[1])
    if w is None or w.shape is None or len(w.shape) < 3:
        return "weights of unknown rank"
    return None
