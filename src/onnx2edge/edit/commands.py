"""The CLI of the editing commands (check, rewrite, surgery, nhwc); `onnx2edge.cli` hooks
these in. Parsing and printing only: the work is in `onnx2edge.check` and this package."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..errors import Onnx2EdgeError


def add_parsers(
    sub: Any,
    _common: Callable[[Any], None],
    _shapes: Callable[[Any], None],
    command: str | None,
    helps: Mapping[str, str],
) -> None:
    """The editing commands' subparsers, their one-line `helps` from cli.py (which lists them
    without importing this package); `command` (the one being run, None: all) limits the
    imports to what it needs (check's target list loads every backend)."""

    def model_out(name: str, help: str) -> argparse.ArgumentParser:
        s = sub.add_parser(name, help=help)
        s.add_argument("model")
        s.add_argument("-o", "--output", required=True, help="ONNX file to write")
        _common(s)
        return s

    def verify_opts(s: argparse.ArgumentParser) -> None:
        s.add_argument(
            "--verify",
            action=argparse.BooleanOptionalAction,
            default=True,
            help="compare with the original in onnxruntime on seeded inputs (default on)",
        )
        s.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
        s.add_argument("--json", action="store_true", help="print JSON")

    s = sub.add_parser("check", help=helps["check"])
    s.add_argument("model")
    if command in (None, "check"):
        from ..check import available_targets

        targets = f"one of {', '.join(available_targets())}"
    else:
        targets = "a target of the check registry"
    s.add_argument("--target", required=True, help=targets)
    s.add_argument(
        "--format",
        choices=("neuralnetwork", "mlprogram"),
        help="coreml-ane: the Core ML format converted to (default neuralnetwork)",
    )
    s.add_argument(
        "--precision",
        choices=("fp16", "fp32"),
        help="coreml-ane: the conversion's precision (a float32 ML Program never runs on the ANE)",
    )
    s.add_argument("--json", action="store_true", help="print JSON")
    _shapes(s)
    _common(s)
    s = sub.add_parser("rewrite", help=helps["rewrite"])
    s.add_argument("model", nargs="?")
    s.add_argument("-o", "--output", help="ONNX file to write")
    s.add_argument("--rules", default="", help="comma-separated rule names (see --list)")
    s.add_argument("--for", dest="target", help="the rules a target needs (from `check`)")
    s.add_argument("--list", action="store_true", help="list the rules and exit")
    s.add_argument(
        "--per-layer",
        action="store_true",
        help="verify: also compare every intermediate tensor both models share",
    )
    _shapes(s)
    verify_opts(s)
    _common(s)
    s = model_out("extract", helps["extract"])
    s.add_argument("--inputs", default="", help="comma-separated tensor names")
    s.add_argument("--outputs", required=True, help="comma-separated tensor names")
    s = model_out("delete-nodes", helps["delete-nodes"])
    s.add_argument("nodes", help="comma-separated node names")
    s = model_out("rename", helps["rename"])
    s.add_argument("--tensor", action="append", default=[], metavar="OLD=NEW")
    s.add_argument("--node", action="append", default=[], metavar="OLD=NEW")
    s.add_argument("--tensor-regex", action="append", default=[], metavar="PATTERN=REPL")
    s.add_argument("--node-regex", action="append", default=[], metavar="PATTERN=REPL")
    s = model_out("set-shape", helps["set-shape"])
    s.add_argument(
        "--input-shape",
        action="append",
        default=[],
        metavar="NAME=DIMS",
        help="e.g. input=1x3x224x224; a non-numeric dim stays symbolic (input=Nx3x224x224)",
    )
    s.add_argument("--batch", help="dim 0 of every input (a number or a symbolic name)")
    s = model_out("add-output", helps["add-output"])
    s.add_argument("tensors", help="comma-separated tensor names")
    s = model_out("opset", helps["opset"])
    s.add_argument("version", type=int)
    verify_opts(s)
    s = model_out("simplify", helps["simplify"])
    _shapes(s)
    verify_opts(s)
    s = model_out("constant", helps["constant"])
    s.add_argument("--value", action="append", required=True, metavar="NAME=FILE.npy|1,2,3")
    s.add_argument("--fold", action=argparse.BooleanOptionalAction, default=True)
    verify_opts(s)
    s = model_out("nhwc", helps["nhwc"])
    s.add_argument("--inputs", help="comma-separated inputs (default: every rank-4 float input)")
    s.add_argument("--outputs", help="comma-separated outputs (default: every rank-4 float output)")
    verify_opts(s)


def _pairs(items: Sequence[str], what: str) -> list[tuple[str, str]]:
    out = []
    for it in items:
        old, sep, new = it.partition("=")
        if not sep or not old:
            raise Onnx2EdgeError(f"bad {what} '{it}': expected OLD=NEW")
        out.append((old, new))
    return out


def _print_edit(a: argparse.Namespace, res: dict[str, Any], text: str) -> int:
    print(json.dumps(res, indent=1, default=str) if getattr(a, "json", False) else text)
    return 0


def run_command(a: argparse.Namespace) -> int:
    from .. import api
    from ..frontend import parse_input_shapes
    from . import nhwc, rewrite, surgery

    c = a.command
    if c == "check":
        from ..check import format_check

        rep = api.check(
            a.model,
            a.target,
            input_shapes=parse_input_shapes(a.input_shape),
            options={"format": a.format, "precision": a.precision},
        )
        print(json.dumps(rep, indent=1) if a.json else format_check(rep))
        return 0
    if c == "rewrite":
        if a.list:
            rules = rewrite.list_rules()
            text = "\n".join(
                f"{r['rule']:20s} {'exact ' if r['exact'] else 'APPROX'} {r['note']}" for r in rules
            )
            print(json.dumps(rules, indent=1) if a.json else text)
            return 0
        if not a.model or not a.output:
            raise Onnx2EdgeError("rewrite needs MODEL and -o OUT.onnx (or --list)")
        res = rewrite.rewrite(
            a.model,
            a.output,
            rules=[r for r in a.rules.split(",") if r],
            target=a.target,
            verify=a.verify,
            seed=a.seed,
            input_shapes=parse_input_shapes(a.input_shape),
            per_layer=a.per_layer,
        )
        return _print_edit(a, res, rewrite.format_rewrite(res))
    if c == "extract":
        res = surgery.extract(a.model, a.output, a.inputs, a.outputs)
        return _print_edit(a, res, f"extracted {res['nodes']} nodes\nwrote {a.output}")
    if c == "delete-nodes":
        res = surgery.delete_nodes(a.model, a.output, a.nodes)
        extra = f"; bypassed {', '.join(res['bypassed'])}" if res["bypassed"] else ""
        dead = (
            f"; also removed (now unused) {', '.join(res['also_removed_dead'])}"
            if res["also_removed_dead"]
            else ""
        )
        return _print_edit(
            a, res, f"deleted {', '.join(res['deleted'])}{extra}{dead}\nwrote {a.output}"
        )
    if c == "rename":
        res = surgery.rename(
            a.model,
            a.output,
            tensors=dict(_pairs(a.tensor, "--tensor")),
            nodes=dict(_pairs(a.node, "--node")),
            tensor_regex=_pairs(a.tensor_regex, "--tensor-regex"),
            node_regex=_pairs(a.node_regex, "--node-regex"),
        )
        lines = [f"tensor {k} -> {v}" for k, v in res["tensors"].items()] + [
            f"node {k} -> {v}" for k, v in res["nodes"].items()
        ]
        return _print_edit(a, res, "\n".join([*lines, f"wrote {a.output}"]))
    if c == "set-shape":
        shapes = {}
        for spec in a.input_shape:
            name, sep, dims = spec.rpartition("=")
            if not sep or not name or not dims:
                raise Onnx2EdgeError(f"bad --input-shape '{spec}': expected NAME=DIMS")
            shapes[name] = [int(d) if d.isdigit() else d for d in dims.replace(",", "x").split("x")]
        batch = int(a.batch) if a.batch and a.batch.isdigit() else a.batch
        res = surgery.set_shape(a.model, a.output, shapes=shapes, batch=batch)
        lines = [f"input {k}: {v}" for k, v in res["inputs"].items()] + [
            f"output {k}: {v}" for k, v in res["outputs"].items()
        ]
        return _print_edit(a, res, "\n".join([*lines, f"wrote {a.output}"]))
    if c == "add-output":
        res = surgery.add_output(a.model, a.output, a.tensors)
        return _print_edit(a, res, f"added outputs {', '.join(res['added'])}\nwrote {a.output}")
    if c == "opset":
        res = surgery.convert_opset(a.model, a.output, a.version, verify=a.verify, seed=a.seed)
        return _print_edit(
            a, res, f"opset {res['from']} -> {res['to']}{_vline(res)}\nwrote {a.output}"
        )
    if c == "simplify":
        res = surgery.simplify(
            a.model,
            a.output,
            verify=a.verify,
            seed=a.seed,
            input_shapes=parse_input_shapes(a.input_shape),
        )
        ops = ", ".join(f"{k} {v:+d}" for k, v in res["ops"].items()) or "nothing to simplify"
        n0, n1 = res["nodes"]
        w0, w1 = res["weight_bytes"]
        return _print_edit(
            a,
            res,
            f"nodes {n0} -> {n1} ({ops}); weights {w0:,} -> {w1:,} bytes{_vline(res)}\n"
            f"wrote {a.output}",
        )
    if c == "constant":
        values = dict(surgery.parse_value(v) for v in a.value)
        res = surgery.bind_constant(a.model, a.output, values, fold=a.fold, verify=a.verify)
        n0, n1 = res["nodes"]
        return _print_edit(
            a,
            res,
            f"bound {', '.join(res['bound'])}; nodes {n0} -> {n1}{_vline(res)}\nwrote {a.output}",
        )
    if c == "nhwc":
        split = lambda s: [x for x in s.split(",") if x] if s else None  # noqa: E731
        res = nhwc.nhwc(
            a.model,
            a.output,
            inputs=split(a.inputs),
            outputs=split(a.outputs),
            verify=a.verify,
            seed=a.seed,
        )
        t = res["transposes"]
        text = (
            f"NHWC inputs: {', '.join(res['nhwc_inputs']) or '-'}; "
            f"outputs: {', '.join(res['nhwc_outputs']) or '-'}\n"
            f"Transposes: {t['before']} in the original, {t['after']} left "
            f"({', '.join(res['transposes_left']) or 'none'}){_vline(res)}\nwrote {a.output}"
        )
        return _print_edit(a, res, text)
    raise AssertionError(c)


def _vline(res: dict[str, Any]) -> str:
    v = res.get("verify")
    if not v:
        return "; not verified"
    worst = max((o["max_abs_error"] for o in v["outputs"]), default=0.0)
    return f"; verified against the original (max abs error {worst:.3g})"
