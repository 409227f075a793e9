"""The ONNX ops (default domain) the C backend has no emitter for, each with why: the one place
that says so. tests/test_op_coverage.py checks that every ONNX op is registered by a module of
this package or listed here, and that nothing listed here is registered (remove the entry when
you add the op; ops/TEMPLATE.py shows how).

phases.refusals() appends the reason to "no C emitter for this op", so `convert`,
`check` and the conformance list (tests/conformance/c.expected) show it. The reasons come from
that conformance run: "not written yet" where nothing else refuses the op's cases; otherwise
what does (sequence, optional or string data; a shape only known at run time).
"""

from __future__ import annotations

_NO_EMITTER = "not written yet"
_SUBGRAPH = "control flow: subgraph attributes are not lowered to C"
_WINDOW = "not written yet; its function body is refused too (its Range output has no static shape)"

UNSUPPORTED: dict[str, str] = {
    "BlackmanWindow": _WINDOW,
    "HammingWindow": _WINDOW,
    "HannWindow": _WINDOW,
    "If": _SUBGRAPH,
    "ImageDecoder": (
        "the image's height and width are in the encoded bytes, so its output has no static "
        "shape; bound bytes (--fix-input) are decoded at conversion"
    ),
    "Loop": _SUBGRAPH,
    "MaxRoiPool": _NO_EMITTER,
    "Scan": _SUBGRAPH,
}

_LOWERED = (
    "sequences and optionals become tensors at conversion, when their lengths and positions "
    "are known then (frontend/sequences.py)"
)

# Ops no emitter needs: they are gone from the graph before the backend sees it.
HANDLED_BEFORE_C: dict[str, str] = {
    "Constant": "becomes an initializer at conversion time (passes/fold_constants.py)",
    "ConcatFromSequence": _LOWERED,
    "Optional": _LOWERED,
    "SequenceAt": _LOWERED,
    "SequenceConstruct": _LOWERED,
    "SequenceEmpty": _LOWERED,
    "SequenceErase": _LOWERED,
    "SequenceInsert": _LOWERED,
    "SequenceLength": _LOWERED,
    "SequenceMap": _LOWERED,
    "SplitToSequence": _LOWERED,
}
