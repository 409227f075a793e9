"""Command line: parses arguments, calls `onnx2edge.api`, prints. Nothing else lives here."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from . import __version__, api
from .errors import Onnx2EdgeError
from .frontend import parse_input_shapes
from .runtime import parse_input_files


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--debug", action="store_true", help="show tracebacks")


def _shapes(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--input-shape",
        action="append",
        default=[],
        metavar="NAME=DIMS",
        help="fix an input's shape, e.g. input=1x3x224x224 (repeatable)",
    )


def _targets() -> list[str]:
    return ["onnx", "c", "mps"]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="onnx2edge", description="ONNX models -> verified inference code for edge devices"
    )
    p.add_argument("--version", action="version", version=f"onnx2edge {__version__}")
    _common(p)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    s = sub.add_parser("inspect", help="per-node shapes, parameters and MACs")
    s.add_argument("model")
    s.add_argument("--json", action="store_true", help="print JSON")
    _shapes(s)
    _common(s)

    s = sub.add_parser("json", help="ONNX -> editable JSON (lossless)")
    s.add_argument("model")
    s.add_argument("-o", "--output", required=True, help="JSON file to write")
    s.add_argument(
        "--weights",
        choices=["auto", "inline", "npy"],
        default="auto",
        help="tensors as readable arrays (inline), .npy files next to the JSON (npy), or inline "
        "up to 4096 elements and .npy above (auto, default)",
    )
    _common(s)

    s = sub.add_parser("from-json", help="JSON -> ONNX")
    s.add_argument("json_file", metavar="JSON")
    s.add_argument("-o", "--output", required=True, help="ONNX file to write")
    _common(s)

    s = sub.add_parser("weights", help="export / import initializers as .npy files")
    wsub = s.add_subparsers(dest="weights_command", required=True, metavar="ACTION")
    w = wsub.add_parser("export", help="one .npy per initializer plus index.json")
    w.add_argument("model")
    w.add_argument("-o", "--output", required=True, help="folder to write")
    _common(w)
    w = wsub.add_parser("import", help="re-inject edited .npy weights")
    w.add_argument("model")
    w.add_argument("weights_dir", metavar="DIR")
    w.add_argument("-o", "--output", required=True, help="ONNX file to write")
    _common(w)

    s = sub.add_parser("convert", help="generate code for a target")
    s.add_argument("model")
    s.add_argument("--target", required=True, choices=["c", "mps"])
    s.add_argument("-o", "--output", required=True, help="output folder")
    s.add_argument(
        "--weights-file",
        action="store_true",
        help="C: weights in model_weights.bin instead of C arrays",
    )
    s.add_argument(
        "--blas", choices=["none", "openblas"], default="none", help="C: GEMM from a BLAS library"
    )
    s.add_argument("--fp16", action="store_true", help="MPS: store weights as float16")
    _shapes(s)
    _common(s)

    s = sub.add_parser("run", help="build (cached) and run a converted folder")
    s.add_argument("out_dir", metavar="OUT")
    s.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy")
    s.add_argument("-o", "--output", help="write outputs to this .npz (prints them otherwise)")
    _common(s)

    s = sub.add_parser("verify", help="compare against onnxruntime")
    s.add_argument("model")
    s.add_argument(
        "--target",
        default="onnx",
        choices=_targets(),
        help="onnx: frontend + passes re-emitted as ONNX (default); c, mps: generated code",
    )
    s.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy")
    s.add_argument(
        "--rtol",
        type=float,
        default=1e-4,
        help="tolerance relative to max|reference| (default 1e-4)",
    )
    s.add_argument("--atol", type=float, default=1e-6, help="absolute tolerance (default 1e-6)")
    s.add_argument("--per-layer", action="store_true", help="compare every intermediate tensor")
    s.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    s.add_argument("--json", action="store_true", help="print JSON")
    _shapes(s)
    _common(s)
    s = sub.add_parser("bench", help="time the generated C against onnxruntime")
    s.add_argument("model", nargs="?", help="model to benchmark (or --suite)")
    s.add_argument("--target", default="c", choices=["c"])
    s.add_argument("--threads", type=int, default=1)
    s.add_argument("--runs", type=int, default=20)
    s.add_argument("--warmup", type=int, default=3)
    s.add_argument("--profile", action="store_true", help="also time every node (build with -DO2E_PROFILE)")
    s.add_argument("--suite", choices=["seed"], help="benchmark the seed model list at 1 and 2 threads")
    s.add_argument("--models", help="comma-separated subset of the suite")
    s.add_argument("--write-doc", metavar="FILE", help="suite: write the markdown table (and a PNG chart beside it)")
    s.add_argument("--json", action="store_true", help="print JSON")
    _shapes(s)
    _common(s)

    s = sub.add_parser("conformance", help="run the ONNX backend node tests through a target")
    s.add_argument("--target", default="c", choices=["c"])
    s.add_argument("--json", action="store_true", help="print JSON")
    s.add_argument("--filter", metavar="REGEX", help="only cases whose name matches")
    s.add_argument("--failures", action="store_true", help="list every failed / unsupported case with its reason")
    s.add_argument("--write-doc", metavar="FILE", help="also write the markdown table to FILE")
    s.add_argument("--jobs", type=int, default=None, help="worker processes (default: CPU count)")
    _common(s)
    _edit_parsers(sub)
    return p


# --- model editing (issue 16): check, rewrite, surgery, nhwc ------------------------------------
def _edit_parsers(sub: Any) -> None:
    from .check import available_targets

    def model_out(name: str, help: str) -> argparse.ArgumentParser:
        s = sub.add_parser(name, help=help)
        s.add_argument("model")
        s.add_argument("-o", "--output", required=True, help="ONNX file to write")
        _common(s)
        return s

    def verify_opts(s: argparse.ArgumentParser) -> None:
        s.add_argument("--verify", action=argparse.BooleanOptionalAction, default=True,
                       help="compare with the original in onnxruntime on seeded inputs (default on)")
        s.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
        s.add_argument("--json", action="store_true", help="print JSON")

    s = sub.add_parser("check", help="per node: supported / replaceable / unsupported on a target")
    s.add_argument("model")
    s.add_argument("--target", required=True, help=f"one of {', '.join(available_targets())}")
    s.add_argument("--json", action="store_true", help="print JSON")
    _shapes(s)
    _common(s)
    s = sub.add_parser("rewrite", help="replace ops by equivalent ones (rules), verified")
    s.add_argument("model", nargs="?")
    s.add_argument("-o", "--output", help="ONNX file to write")
    s.add_argument("--rules", default="", help="comma-separated rule names (see --list)")
    s.add_argument("--for", dest="target", help="the rules a target needs (from `check`)")
    s.add_argument("--list", action="store_true", help="list the rules and exit")
    s.add_argument("--per-layer", action="store_true",
                   help="verify: also compare every intermediate tensor both models share")
    _shapes(s)
    verify_opts(s)
    _common(s)
    s = model_out("extract", "the subgraph between tensors (onnx.utils.Extractor)")
    s.add_argument("--inputs", default="", help="comma-separated tensor names")
    s.add_argument("--outputs", required=True, help="comma-separated tensor names")
    s = model_out("delete-nodes", "delete nodes (Identity-like ones are bypassed)")
    s.add_argument("nodes", help="comma-separated node names")
    s = model_out("rename", "rename tensors / nodes (OLD=NEW or regex)")
    s.add_argument("--tensor", action="append", default=[], metavar="OLD=NEW")
    s.add_argument("--node", action="append", default=[], metavar="OLD=NEW")
    s.add_argument("--tensor-regex", action="append", default=[], metavar="PATTERN=REPL")
    s.add_argument("--node-regex", action="append", default=[], metavar="PATTERN=REPL")
    s = model_out("set-shape", "change input shapes or the batch size")
    s.add_argument("--input-shape", action="append", default=[], metavar="NAME=DIMS",
                   help="e.g. input=1x3x224x224; a non-numeric dim stays symbolic (input=Nx3x224x224)")
    s.add_argument("--batch", help="dim 0 of every input (a number or a symbolic name)")
    s = model_out("add-output", "make intermediate tensors graph outputs")
    s.add_argument("tensors", help="comma-separated tensor names")
    s = model_out("opset", "convert to another opset (onnx version converter), verified")
    s.add_argument("version", type=int)
    verify_opts(s)
    s = model_out("simplify", "constant folding, dead code, fusions; reports what changed")
    _shapes(s)
    verify_opts(s)
    s = model_out("constant", "bind inputs to constant values (and fold)")
    s.add_argument("--value", action="append", required=True, metavar="NAME=FILE.npy|1,2,3")
    s.add_argument("--fold", action=argparse.BooleanOptionalAction, default=True)
    verify_opts(s)
    s = model_out("nhwc", "NHWC image inputs / outputs, Transposes only at the boundaries")
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


def _cmd_edit(a: argparse.Namespace) -> int:
    from .edit import nhwc, surgery
    from .edit import rewrite as _rw  # noqa: F401 (loads the package)
    rewrite = sys.modules["onnx2edge.edit.rewrite"]

    c = a.command
    if c == "check":
        from .check import format_check

        rep = api.check(a.model, a.target, input_shapes=parse_input_shapes(a.input_shape))
        print(json.dumps(rep, indent=1) if a.json else format_check(rep))
        return 0
    if c == "rewrite":
        if a.list:
            rules = rewrite.list_rules()
            text = "\n".join(f"{r['rule']:20s} {'exact ' if r['exact'] else 'APPROX'} {r['note']}" for r in rules)
            print(json.dumps(rules, indent=1) if a.json else text)
            return 0
        if not a.model or not a.output:
            raise Onnx2EdgeError("rewrite needs MODEL and -o OUT.onnx (or --list)")
        res = rewrite.rewrite(
            a.model, a.output, rules=[r for r in a.rules.split(",") if r], target=a.target,
            verify=a.verify, seed=a.seed, input_shapes=parse_input_shapes(a.input_shape),
            per_layer=a.per_layer,
        )
        return _print_edit(a, res, rewrite.format_rewrite(res))
    if c == "extract":
        res = surgery.extract(a.model, a.output, a.inputs, a.outputs)
        return _print_edit(a, res, f"extracted {res['nodes']} nodes\nwrote {a.output}")
    if c == "delete-nodes":
        res = surgery.delete_nodes(a.model, a.output, a.nodes)
        extra = f"; bypassed {', '.join(res['bypassed'])}" if res["bypassed"] else ""
        dead = f"; also removed (now unused) {', '.join(res['also_removed_dead'])}" if res["also_removed_dead"] else ""
        return _print_edit(a, res, f"deleted {', '.join(res['deleted'])}{extra}{dead}\nwrote {a.output}")
    if c == "rename":
        res = surgery.rename(
            a.model, a.output, tensors=dict(_pairs(a.tensor, "--tensor")), nodes=dict(_pairs(a.node, "--node")),
            tensor_regex=_pairs(a.tensor_regex, "--tensor-regex"), node_regex=_pairs(a.node_regex, "--node-regex"),
        )
        lines = [f"tensor {k} -> {v}" for k, v in res["tensors"].items()] + [f"node {k} -> {v}" for k, v in res["nodes"].items()]
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
        lines = [f"input {k}: {v}" for k, v in res["inputs"].items()] + [f"output {k}: {v}" for k, v in res["outputs"].items()]
        return _print_edit(a, res, "\n".join([*lines, f"wrote {a.output}"]))
    if c == "add-output":
        res = surgery.add_output(a.model, a.output, a.tensors)
        return _print_edit(a, res, f"added outputs {', '.join(res['added'])}\nwrote {a.output}")
    if c == "opset":
        res = surgery.convert_opset(a.model, a.output, a.version, verify=a.verify, seed=a.seed)
        return _print_edit(a, res, f"opset {res['from']} -> {res['to']}{_vline(res)}\nwrote {a.output}")
    if c == "simplify":
        res = surgery.simplify(a.model, a.output, verify=a.verify, seed=a.seed, input_shapes=parse_input_shapes(a.input_shape))
        ops = ", ".join(f"{k} {v:+d}" for k, v in res["ops"].items()) or "nothing to simplify"
        n0, n1 = res["nodes"]
        w0, w1 = res["weight_bytes"]
        return _print_edit(a, res, f"nodes {n0} -> {n1} ({ops}); weights {w0:,} -> {w1:,} bytes{_vline(res)}\nwrote {a.output}")
    if c == "constant":
        values = dict(surgery.parse_value(v) for v in a.value)
        res = surgery.bind_constant(a.model, a.output, values, fold=a.fold, verify=a.verify)
        n0, n1 = res["nodes"]
        return _print_edit(a, res, f"bound {', '.join(res['bound'])}; nodes {n0} -> {n1}{_vline(res)}\nwrote {a.output}")
    if c == "nhwc":
        split = lambda s: [x for x in s.split(",") if x] if s else None  # noqa: E731
        res = nhwc.nhwc(a.model, a.output, inputs=split(a.inputs), outputs=split(a.outputs), verify=a.verify, seed=a.seed)
        t = res["transposes"]
        text = (f"NHWC inputs: {', '.join(res['nhwc_inputs']) or '-'}; outputs: {', '.join(res['nhwc_outputs']) or '-'}\n"
                f"Transposes: {t['before']} in the original, {t['after']} left "
                f"({', '.join(res['transposes_left']) or 'none'}){_vline(res)}\nwrote {a.output}")
        return _print_edit(a, res, text)
    raise AssertionError(c)


def _vline(res: dict[str, Any]) -> str:
    v = res.get("verify")
    if not v:
        return "; not verified"
    worst = max((o["max_abs_error"] for o in v["outputs"]), default=0.0)
    return f"; verified against the original (max abs error {worst:.3g})"


EDIT_COMMANDS = ("check", "rewrite", "extract", "delete-nodes", "rename", "set-shape", "add-output",
                 "opset", "simplify", "constant", "nhwc")


def _cmd_bench(a: argparse.Namespace) -> int:
    from .bench import harness

    def log(msg: str) -> None:
        print(f"onnx2edge: {msg}", file=sys.stderr, flush=True)

    if a.suite:
        from .bench import suite

        models = a.models.split(",") if a.models else None
        results = suite.run_suite(models=models, runs=a.runs, warmup=a.warmup, log=log)
        if a.write_doc:
            suite.write_doc(results, Path(a.write_doc))
        print(json.dumps(results, indent=1) if a.json else suite.format_table(results))
        return 0
    if not a.model:
        raise Onnx2EdgeError("bench needs a MODEL or --suite seed")
    r = harness.bench_model(
        a.model, threads=a.threads, runs=a.runs, warmup=a.warmup,
        input_shapes=parse_input_shapes(a.input_shape), log=log, profile=a.profile,
    )
    print(json.dumps(r, indent=1) if a.json else harness.format_result(r))
    return 0 if r["accurate"] else 1


def _cmd_conformance(a: argparse.Namespace) -> int:
    import re

    from .backends.c import conformance as conf

    cases = conf.collect_cases()
    if a.filter:
        rx = re.compile(a.filter)
        cases = [c for c in cases if rx.search(c.name)]

    def progress(done: int, total: int) -> None:
        print(f"onnx2edge: conformance {done}/{total}", file=sys.stderr, end="\r" if done < total else "\n", flush=True)

    results = conf.run_conformance(cases, jobs=a.jobs, progress=progress)
    summary = conf.summarize(results)
    if a.write_doc:
        from .fsutil import write_text_atomic

        write_text_atomic(a.write_doc, conf.format_doc(summary, results))
    if a.json:
        print(json.dumps(summary, indent=1))
    else:
        print(conf.format_table(summary))
    if a.failures:
        for r in results:
            if r.status != "passed":
                print(f"{r.status:11s} {r.name} ({r.op}): {r.detail}")
    return 0


def _cmd_inspect(a: argparse.Namespace) -> int:
    from .analysis import format_report

    info = api.inspect(a.model, input_shapes=parse_input_shapes(a.input_shape))
    print(json.dumps(info, indent=1) if a.json else format_report(info))
    return 0


def _cmd_json(a: argparse.Namespace) -> int:
    out = api.to_json(a.model, a.output, weights=a.weights)
    print(f"wrote {out}")
    return 0


def _cmd_from_json(a: argparse.Namespace) -> int:
    print(f"wrote {api.from_json(a.json_file, a.output)}")
    return 0


def _cmd_weights(a: argparse.Namespace) -> int:
    if a.weights_command == "export":
        print(f"wrote {api.export_weights(a.model, a.output)}")
    else:
        print(f"wrote {api.import_weights(a.model, a.weights_dir, a.output)}")
    return 0


def _cmd_convert(a: argparse.Namespace) -> int:
    opts: dict[str, Any] = {}
    if a.target == "c":
        opts = {"weights_file": a.weights_file, "blas": a.blas}
    elif a.target == "mps":
        opts = {"fp16": a.fp16}
    res = api.convert(
        a.model, a.target, a.output, input_shapes=parse_input_shapes(a.input_shape), options=opts
    )
    for k, v in res.stats.items():
        if isinstance(v, dict):
            print(f"{k}: " + ", ".join(f"{n} ×{c}" for n, c in v.items()))
        else:
            print(f"{k}: {v:,}" if isinstance(v, int) and not isinstance(v, bool) else f"{k}: {v}")
    print(f"wrote {len(res.files)} files to {res.out_dir}")
    return 0


def _cmd_run(a: argparse.Namespace) -> int:
    outs = api.run(a.out_dir, parse_input_files(a.input))
    if a.output:
        import io

        from .fsutil import write_bytes_atomic

        buf = io.BytesIO()
        np.savez(buf, **outs)
        write_bytes_atomic(a.output, buf.getvalue())
        print(f"wrote {a.output}")
    else:
        with np.printoptions(threshold=50, edgeitems=5):
            for k, v in outs.items():
                print(f"{k} {v.dtype} {'x'.join(map(str, v.shape))}\n{v}")
    return 0


def _cmd_verify(a: argparse.Namespace) -> int:
    rep = api.verify(
        a.model,
        target=a.target,
        input_shapes=parse_input_shapes(a.input_shape),
        inputs=parse_input_files(a.input),
        rtol=a.rtol,
        atol=a.atol,
        per_layer=a.per_layer,
        seed=a.seed,
        log=lambda msg: print(f"onnx2edge: {msg}", file=sys.stderr, flush=True),
    )
    print(json.dumps(rep.as_dict(), indent=1) if a.json else rep.format())
    return 0 if rep.ok else 1


COMMANDS = {
    "inspect": _cmd_inspect,
    "json": _cmd_json,
    "from-json": _cmd_from_json,
    "weights": _cmd_weights,
    "convert": _cmd_convert,
    "run": _cmd_run,
    "verify": _cmd_verify,
    "conformance": _cmd_conformance,
    "bench": _cmd_bench,
}
COMMANDS.update(dict.fromkeys(EDIT_COMMANDS, _cmd_edit))


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    debug = bool(getattr(args, "debug", False)) or "--debug" in argv
    try:
        return COMMANDS[args.command](args)
    except Onnx2EdgeError as e:
        if debug:
            raise
        print(f"onnx2edge: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("onnx2edge: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - last resort: one line, never a traceback
        if debug:
            raise
        msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
        print(
            f"onnx2edge: internal error: {type(e).__name__}: {msg} (rerun with --debug for details)",
            file=sys.stderr,
        )
        return 3


if __name__ == "__main__":
    sys.exit(main())
