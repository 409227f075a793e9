"""Where Core ML is expected to run each node, and why (issue 15, seeds 000/001/004).

`check_coreml(graph)`: can onnx2edge express the node in Core ML, directly ('supported'),
through a rewrite ('replaceable': a seed-004 layer replacement, or only in the mlprogram
format), or not at all ('unsupported')?

`check_coreml_ane(graph)`: would Core ML run the node on the Neural Engine? Apple documents
no list, so the rules are the public, cited observations below; 'supported' = no documented
limit applies (placement 'ane'), 'replaceable' = a generic converter's layer would not run
on the ANE but a documented rewrite (applied by `--format neuralnetwork`) makes it do so,
'unsupported' = a documented limit applies and no documented rewrite moves it to the ANE.
The documents say such layers fall back to "the CPU or GPU" without saying which: the
placement given is the likely one ('cpu' for recurrent, gather, custom and dynamically
shaped work, 'gpu' for image-shaped work), and says so in `reason`.

Both functions take the IR after the frontend (onnx2edge.frontend.load) and return one dict
per node: node, op, status, placement, reason, rule, source.
"""

from __future__ import annotations

from typing import Any

from ...ir import Graph, Node
from ...semantics.pooling import pool_attrs
from ...semantics.records import resize_attrs
from . import mil, nn

SEED004 = "seed 004 (notes on hollance/neural-engine), /work/shared/seeds/004_e6bbb67fd8c84463.txt"
HOLLANCE = (
    "hollance/neural-engine, docs/unsupported-layers.md, 'Problematic layers' "
    "(https://github.com/hollance/neural-engine/blob/master/docs/unsupported-layers.md)"
)
FLEX = (
    "Apple Developer Forums thread 724930, Apple engineer's answer: with range-flexible "
    "shapes only the default shape runs on the Neural Engine "
    "(https://developer.apple.com/forums/thread/724930); coremltools guide 'Flexible Input "
    "Shapes' (https://apple.github.io/coremltools/docs-guides/source/flexible-inputs.html)"
)
NN_PROTO = "Core ML Format Reference, NeuralNetwork.proto (apple/coremltools mlmodel/format)"
VALIDATOR = (
    "Core ML's validator (CoreML::Model::validate, coremltools mlmodel/src/Validation; "
    "tools/coreml-validate): a layer from specification version 4 (iOS 13) or later needs "
    "EXACT_ARRAY_MAPPING; permute takes rank-5 blobs only"
)
TYPED = (
    "coremltools guide 'Typed Execution Workflow Example': a float 16 typed ML Program is "
    "eligible for the Neural Engine, GPU and CPU, a float 32 typed one executes on the GPU "
    "and CPU (https://apple.github.io/coremltools/docs-guides/source/typed-execution-example.html)"
)
# ONNX ops that a Core ML 2 layer (rank-5 era, not "ND") expresses: NeuralNetwork.proto.
LEGACY = {
    "Exp": "unary EXP (UnaryFunctionLayerParams)",
    "Split": "split (SplitLayerParams, channel axis)",
    "Slice": "slice (SliceLayerParams, channel / height / width)",
    "Transpose": "permute (PermuteLayerParams)",
}
EMITTERS = "onnx2edge backends/coreml/nn.py (NeuralNetwork) and mil.py (ML Program)"

RNN = {"LSTM", "GRU", "RNN"}
GATHER = {"Gather", "GatherElements", "GatherND"}
POOL = {"MaxPool", "AveragePool", "LpPool"}
GLOBAL_POOL = {"GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"}
RESIZE = {"Resize", "Upsample"}


def _entry(
    n: Node,
    status: str,
    placement: str | None,
    reason: str,
    rule: str | None,
    source: str,
    fix: str | None = None,
) -> dict[str, Any]:
    return {
        "node": n.name,
        "op": n.op_type,
        "status": status,
        "placement": placement,
        "reason": reason,
        "rule": rule,
        "source": source,
        "fix": fix,
    }


def check_coreml(graph: Graph) -> list[dict[str, Any]]:
    nn_refused, lowered = nn.node_refusals(graph)
    mil_refused = mil.node_refusals(graph)
    nn_why = {k: r.reason for k, r in nn_refused.items()}
    mil_why = {k: r.reason for k, r in mil_refused.items()}
    repl = {r["node"]: r for r in lowered.replacements}
    out = []
    for n in graph.nodes:
        if n.name not in nn_why and n.name in repl:
            r = repl[n.name]
            out.append(
                _entry(
                    n,
                    "replaceable",
                    None,
                    f"a generic converter emits {r['instead_of']}; onnx2edge emits "
                    f"{', '.join(r['emitted'])} (neuralnetwork) or one MIL op (mlprogram)",
                    f"{r['instead_of']} -> {' + '.join(r['emitted'])}",
                    SEED004,
                )
            )
        elif n.name not in nn_why:
            out.append(
                _entry(
                    n,
                    "supported",
                    None,
                    "emitted in both formats"
                    if n.name not in mil_why
                    else "emitted by --format neuralnetwork",
                    None,
                    EMITTERS,
                )
            )
        elif n.name not in mil_why:
            out.append(
                _entry(
                    n,
                    "replaceable",
                    None,
                    f"neuralnetwork: {nn_why[n.name]}; the ML Program format has it",
                    "convert with --format mlprogram",
                    EMITTERS,
                )
            )
        else:
            out.append(
                _entry(
                    n,
                    "unsupported",
                    None,
                    f"neuralnetwork: {nn_why[n.name]}; mlprogram: {mil_why[n.name]}",
                    None,
                    EMITTERS,
                    # the ML Program's fix first: it is the default format
                    mil_refused[n.name].fix or nn_refused[n.name].fix,
                )
            )
    return out


def _dynamic(graph: Graph, n: Node) -> bool:
    for name in (*n.inputs, *n.outputs):
        if name and not graph.is_const(name):
            t = graph.type_of(name)
            if t is None or not t.is_static:
                return True
    return False


def _shape(graph: Graph, name: str) -> tuple[int, ...] | None:
    t = graph.type_of(name)
    return tuple(int(d) for d in t.static_shape) if t is not None and t.is_static else None


def _ane_rule(
    graph: Graph, n: Node, nn_why: dict[str, str], repl: dict[str, Any]
) -> tuple[str, str | None, str, str | None, str]:
    """(status, placement, reason, rule, source) for one node."""
    op = n.op_type
    if _dynamic(graph, n):
        return (
            "unsupported",
            "cpu",
            "a tensor has a dynamic shape: only a range-flexible "
            "model's default shape runs on the ANE (others on CPU or GPU; 'cpu' assumed)",
            "fix the shape (--input-shape) or use enumerated shapes",
            FLEX,
        )
    if op in RNN:
        return (
            "unsupported",
            "cpu",
            "RNN layers (LSTM, GRU) do not run on the ANE; Core ML "
            "falls back to CPU or GPU ('cpu' assumed for sequential work)",
            None,
            HOLLANCE,
        )
    if op in GATHER:
        return (
            "unsupported",
            "cpu",
            "gather does not run on the ANE (CPU or GPU; 'cpu' assumed)",
            None,
            HOLLANCE,
        )
    if n.domain not in ("", "ai.onnx"):
        return (
            "unsupported",
            "cpu",
            f"custom op ({n.domain}) -> a Core ML custom layer, "
            "which has only CPU/GPU implementations",
            None,
            HOLLANCE,
        )
    if op in ("Conv", "ConvTranspose") and any(int(d) != 1 for d in n.attr("dilations") or ()):
        return (
            "unsupported",
            "gpu",
            "dilated convolutions do not run on the ANE (CPU or GPU; 'gpu' assumed for image work)",
            None,
            HOLLANCE,
        )
    if op in POOL or op in GLOBAL_POOL:
        if op in GLOBAL_POOL:
            # A global pooling layer's kernel is the whole H x W plane: the reference's
            # rule is about the kernel, so a 14 x 14 global average is as far off the
            # ANE as a 14 x 14 AveragePool.
            x = _shape(graph, n.inputs[0])
            k, s = (list(x[2:]) if x else [1]), [1]
        else:
            pa = pool_attrs(n, graph.opset)
            k = list(pa.kernel_shape or ())
            s = list(pa.strides or (1,) * len(k))  # no schema default: 1 per axis
        if max(k) > 13 or max(s) > 2:
            return (
                "unsupported",
                "gpu",
                f"{'global ' if op in GLOBAL_POOL else ''}pooling with kernel {k} / stride "
                f"{s}: 'pooling layers with kernel size greater than 13, or stride greater "
                "than 2' do not run on the ANE ('gpu' assumed)",
                None,
                HOLLANCE,
            )
    if op in RESIZE:
        x, y = _shape(graph, n.inputs[0]), _shape(graph, n.outputs[0])
        if x and y and len(x) == 4 and (y[2] > 2 * x[2] or y[3] > 2 * x[3]):
            mode = resize_attrs(n, graph.opset).mode
            rule = (
                "successive upsamplings by at most 2x each (exact for integer nearest)"
                if mode == "nearest"
                else None
            )
            return (
                "unsupported" if rule is None else "replaceable",
                "gpu",
                f"upsampling {x[2:]} -> {y[2:]}: factors > 2 do not run on the ANE",
                rule,
                HOLLANCE,
            )
    if op in ("Add", "Sub", "Mul", "Div", "Concat"):
        return _elementwise(graph, n, nn_why, repl)
    if op == "Transpose":
        return (
            "supported",
            "ane",
            "permute is a Core ML 2 layer, not an 'ND' layer, and is not among the documented "
            "ANE limits; it takes rank-5 blobs only, so it needs the rank-5 mapping, which "
            "Core ML refuses in a network with iOS 13+ layers (clip, bilinear upsample): "
            "onnx2edge's --format neuralnetwork (exact mapping) does not emit it, "
            "--format mlprogram does (transpose)",
            None,
            f"{NN_PROTO}; {VALIDATOR}; {HOLLANCE}",
        )
    if op in LEGACY and n.name not in nn_why:
        return (
            "supported",
            "ane",
            f"{LEGACY[op]} is a Core ML 2 layer, not an 'ND' layer, and is not among the "
            "documented ANE limits (--format neuralnetwork emits it)",
            None,
            f"{NN_PROTO}; {HOLLANCE}",
        )
    if op == "Clip" and n.name not in nn_why:
        return (
            "supported",
            "ane",
            "ReLU6 / Clip: an activation or a clip layer, not among the documented ANE limits; "
            "clip is from specification version 4 (iOS 13), valid only with the exact array "
            "mapping, which --format neuralnetwork writes",
            None,
            f"{HOLLANCE}; {VALIDATOR}",
        )
    if op in RESIZE and n.name not in nn_why:
        mode = resize_attrs(n, graph.opset).mode
        valid = (
            "; a bilinear upsample's linearUpsampleMode is from specification version 5 "
            "(iOS 14), valid only with the exact array mapping, which --format "
            "neuralnetwork writes"
            if mode == "linear"
            else ""
        )
        return (
            "supported",
            "ane",
            "upsampling by at most 2x 'appeared to run just fine on the ANE' (the reference's "
            f"'Layers that do work'){valid}",
            None,
            f"{HOLLANCE}; {VALIDATOR}" if valid else HOLLANCE,
        )
    if n.name in nn_why:
        return (
            "unsupported",
            "gpu",
            f"no rank-3 (Core ML 2) layer expresses it "
            f"({nn_why[n.name]}); it becomes an ND layer / ML Program op, and "
            "'broadcastable and ND layers' do not run on the ANE ('gpu' assumed)",
            None,
            HOLLANCE,
        )
    return (
        "supported",
        "ane",
        "no documented ANE limit applies (the published list is not exhaustive)",
        None,
        HOLLANCE,
    )


def _elementwise(
    graph: Graph, n: Node, nn_why: dict[str, str], repl: dict[str, Any]
) -> tuple[str, str | None, str, str | None, str]:
    acts = [i for i in n.inputs if i and not graph.is_const(i)]
    shapes = [_shape(graph, i) for i in acts]
    out = _shape(graph, n.outputs[0])
    if n.op_type != "Concat" and len(acts) == 2 and out and len(out) == 4:
        small = [s for s in shapes if s != out]
        if small and small[0] and small[0][2:] == (1, 1) and small[0][1] == out[1]:
            return (
                "unsupported",
                "gpu",
                f"broadcast of {list(out[1:])} and "
                f"{list(small[0][1:])} activations (C x H x W with C x 1 x 1) does not "
                "run on the ANE ('gpu' assumed)",
                None,
                HOLLANCE,
            )
    if n.name in repl:
        r = repl[n.name]
        return (
            "replaceable",
            "ane",
            f"a generic converter emits {r['instead_of']} "
            "('broadcastable' layers do not run on the ANE); --format neuralnetwork emits "
            f"{', '.join(r['emitted'])} instead",
            f"{r['instead_of']} -> {' + '.join(r['emitted'])}",
            SEED004,
        )
    return (
        "unsupported",
        "gpu",
        f"needs a broadcastable / ND layer ({nn_why.get(n.name, '')})"
        ", which does not run on the ANE ('gpu' assumed)",
        None,
        HOLLANCE,
    )


def check_coreml_ane(
    graph: Graph, *, fmt: str = "neuralnetwork", precision: str | None = None
) -> list[dict[str, Any]]:
    """The Neural Engine placement of each node. `fmt` / `precision` are the conversion's
    (`--format`, `--precision`): a float32 ML Program runs on the GPU and CPU only, so every
    node is placed off the ANE with that reason and the fix."""
    if fmt == "mlprogram" and precision == "fp32":
        return [
            _entry(
                n,
                "unsupported",
                "gpu",
                "a float32 ML Program never runs on the Neural Engine (GPU and CPU only): "
                "convert with --precision fp16",
                "--precision fp16",
                TYPED,
            )
            for n in graph.nodes
        ]
    nn_why, lowered = nn.node_reasons(graph)
    repl = {r["node"]: r for r in lowered.replacements}
    return [_entry(n, *_ane_rule(graph, n, nn_why, repl)) for n in graph.nodes]
