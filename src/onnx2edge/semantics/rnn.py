"""The recurrent layers' activation functions (ONNX RNN / GRU / LSTM `activations` attribute).

One table for every backend that runs a recurrent cell: the C backend (backends/c/ops/rnn.py)
and the MPS package's Swift CPU segments (backends/mps/cpu.py) render the same expression.
Not the activation table (activations.py) on purpose: these are the RNN attribute's functions
(Affine and ScaledTanh exist nowhere else), and onnxruntime's cells compute them with their own
helpers, e.g. Relu as max(0, v), which turns NaN into 0 where the standalone Relu keeps it
(checked against onnxruntime 1.31).

`activation_alpha` / `activation_beta` are consumed in order by the activations that take them,
with onnxruntime's defaults (rnn_helpers NameToArgUsageMap / NameToArgDefaultsMap).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..ir import Node
from .attrs import attr

# Gate count per cell and its default activations (ONNX spec: f, g, h for LSTM; f, g for GRU).
CELLS = {
    "RNN": (1, ("Tanh",)),
    "GRU": (3, ("Sigmoid", "Tanh")),
    "LSTM": (4, ("Sigmoid", "Tanh", "Tanh")),
}

# Activation name -> (uses alpha, default alpha, uses beta, default beta); None = required.
ACT_ARGS: dict[str, tuple[bool, float | None, bool, float | None]] = {
    "relu": (False, None, False, None),
    "tanh": (False, None, False, None),
    "sigmoid": (False, None, False, None),
    "softsign": (False, None, False, None),
    "softplus": (False, None, False, None),
    "affine": (True, None, True, None),
    "leakyrelu": (True, 0.01, False, None),
    "thresholdedrelu": (True, 1.0, False, None),
    "scaledtanh": (True, None, True, None),
    "hardsigmoid": (True, 0.2, True, 0.5),
    "elu": (True, 1.0, False, None),
}


@dataclass(frozen=True)
class RecurrentAttrs:
    """RNN / GRU / LSTM attributes, schema defaults applied (layout before opset 14: 0, the
    later versions' default; GRU-1's schema spells its default direction 'foward')."""

    direction: str
    layout: int
    clip: float | None
    linear_before_reset: bool  # GRU
    input_forget: bool  # LSTM

    @property
    def num_directions(self) -> int:
        return 2 if self.direction == "bidirectional" else 1

    def problem(self) -> str | None:
        """What the spec does not allow, or None."""
        if self.direction not in ("forward", "reverse", "bidirectional"):
            return f"unknown direction {self.direction!r}"
        if self.layout not in (0, 1):
            return f"layout {self.layout} is not 0 or 1"
        return None


def recurrent_attrs(node: Node, opset: int | None = None) -> RecurrentAttrs:
    """RNN / GRU / LSTM, and com.microsoft's DynamicQuantizeLSTM: onnx has no schema for it,
    onnxruntime's contrib schema declares LSTM's attributes with LSTM's defaults (forward,
    no clip, input_forget 0; no layout: 0), so LSTM's newest schema supplies them."""
    if node.op_type == "DynamicQuantizeLSTM":
        node, opset = node.replace(op_type="LSTM", domain=""), None
    direction = str(attr(node, "direction", opset))
    clip = attr(node, "clip", opset)
    return RecurrentAttrs(
        direction="forward" if direction == "foward" else direction,
        layout=int(attr(node, "layout", opset)),
        clip=None if clip is None else float(clip),
        linear_before_reset=node.op_type == "GRU"
        and bool(int(attr(node, "linear_before_reset", opset))),
        input_forget=node.op_type == "LSTM" and bool(int(attr(node, "input_forget", opset))),
    )


@dataclass(frozen=True)
class RnnAct:
    name: str  # lower case
    alpha: float = 0.0
    beta: float = 0.0


def rnn_activations(node: Node) -> list[RnnAct]:
    """The node's activations, one list per direction concatenated, alpha/beta resolved;
    ValueError names what is wrong."""
    n_act = CELLS[node.op_type][1]
    # (also DynamicQuantizeLSTM, which has no onnx schema: absent direction is forward there)
    ndir = 2 if attr(node, "direction") == "bidirectional" else 1
    names = [str(a) for a in node.attr("activations", list(n_act) * ndir)]
    if ndir == 2 and len(names) == len(n_act):
        names = names * 2
    if len(names) != len(n_act) * ndir:
        raise ValueError(f"{len(names)} activations given, {len(n_act) * ndir} expected")
    alphas = list(node.attr("activation_alpha", []))
    betas = list(node.attr("activation_beta", []))
    out = []
    for name in names:
        key = name.lower()
        if key not in ACT_ARGS:
            raise ValueError(f"activation {name!r} is not one the ONNX spec lists")
        uses_a, def_a, uses_b, def_b = ACT_ARGS[key]
        a = b = 0.0
        if uses_a:
            if alphas:
                a = float(alphas.pop(0))
            elif def_a is None:
                raise ValueError(f"activation {name} needs activation_alpha")
            else:
                a = def_a
        if uses_b:
            if betas:
                b = float(betas.pop(0))
            elif def_b is None:
                raise ValueError(f"activation {name} needs activation_beta")
            else:
                b = def_b
        out.append(RnnAct(key, a, b))
    return out


def rnn_act_expr(
    act: RnnAct, v: str, lit: Callable[[float], str], f: str, *, vmath: bool = False
) -> str:
    """The expression of one RNN activation of `v` (safe to repeat): `lit` formats a literal,
    `f` is the libm suffix ("f": float; C and Swift both have expf, tanhf, fmaxf...).
    vmath: C's o2e_vmath.h functions for float tanh / sigmoid (vectorisable, no libm)."""
    a, b = lit(act.alpha), lit(act.beta)
    fast = vmath and f == "f"
    tanh = "o2e_tanhf" if fast else f"tanh{f}"
    return {
        "relu": f"({v} > 0 ? {v} : 0)",
        "tanh": f"{tanh}({v})",
        "sigmoid": f"o2e_sigmoidf({v})" if fast else f"(1 / (1 + exp{f}(-{v})))",
        "softsign": f"({v} / (1 + fabs{f}({v})))",
        "softplus": f"log{f}(1 + exp{f}({v}))",
        "affine": f"({a} * {v} + {b})",
        "leakyrelu": f"({v} < 0 ? {a} * {v} : {v})",
        "thresholdedrelu": f"({v} > {a} ? {v} : 0)",
        "scaledtanh": f"({a} * {tanh}({b} * {v}))",
        "hardsigmoid": f"fmax{f}(0, fmin{f}(1, {a} * {v} + {b}))",
        "elu": f"({v} >= 0 ? {v} : {a} * (exp{f}({v}) - 1))",
    }[act.name]
