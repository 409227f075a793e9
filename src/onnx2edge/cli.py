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
    _prune_parser(sub)
    return p


# --- pruning (issue 14): see onnx2edge/prune.py
def _prune_parser(sub: Any) -> None:
    s = sub.add_parser("prune", help="magnitude pruning of Gemm/MatMul/Conv weights")
    s.add_argument("model")
    s.add_argument("-o", "--output", required=True, help="ONNX file to write")
    s.add_argument("--sparsity", type=float, default=0.9, help="fraction of weights zeroed")
    s.add_argument("--scope", choices=("global", "layer"), default="global")
    s.add_argument("--structured", metavar="channels|blocks:RxC", help="prune whole units")
    s.add_argument("--skip", default="", help="comma-separated node names left dense")
    s.add_argument("--sweep", metavar="S,S,...", help="sparsity levels to try (needs --eval)")
    s.add_argument("--eval", metavar="FILE.npz", help="sweep inputs (one array per input)")
    s.add_argument("--labels", metavar="FILE.npy", help="sweep labels (else: agreement with dense)")
    s.add_argument("--tolerance", type=float, default=0.01, help="sweep: allowed score drop")
    s.add_argument("--no-latency", action="store_true", help="sweep: skip the C timing")
    s.add_argument("--json", action="store_true", help="print JSON")
    _common(s)


def _cmd_prune(a: argparse.Namespace) -> int:
    from . import prune as pr
    from .frontend.loader import load_model
    from .fsutil import write_bytes_atomic

    kw = {"scope": a.scope, "structured": a.structured, "skip": [x for x in a.skip.split(",") if x]}
    if a.sweep:
        if not a.eval:
            raise Onnx2EdgeError("--sweep needs --eval FILE.npz")
        try:
            levels = [float(x) for x in a.sweep.split(",") if x]
        except ValueError:
            raise Onnx2EdgeError(f"--sweep: expected numbers, got {a.sweep!r}") from None
        res = pr.sweep(a.model, a.output, levels, a.eval, labels_file=a.labels,
                       tolerance=a.tolerance, latency=not a.no_latency, **kw)
        print(json.dumps(res, indent=1) if a.json else pr.format_sweep(res))
        return 0
    model, rep = pr.prune_model(load_model(a.model), a.sparsity, **kw)
    write_bytes_atomic(a.output, model.SerializeToString())
    print(json.dumps(rep.as_dict(), indent=1) if a.json else rep.format())
    return 0


# --- model editing (issue 16): check, rewrite, surgery, nhwc (see onnx2edge/edit/commands.py)
def _edit_parsers(sub: Any) -> None:
    from .edit.commands import add_parsers

    add_parsers(sub, _common, _shapes)


def _cmd_edit(a: argparse.Namespace) -> int:
    from .edit.commands import run_command

    return run_command(a)


EDIT_COMMANDS = ("check", "rewrite", "extract", "delete-nodes", "rename", "set-shape",
                 "add-output", "opset", "simplify", "constant", "nhwc")


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
COMMANDS["prune"] = _cmd_prune


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
            f"onnx2edge: internal error: {type(e).__name__}: {msg} (a bug in onnx2edge: "
            "please report it with the output of --debug)",
            file=sys.stderr,
        )
        return 3


if __name__ == "__main__":
    sys.exit(main())
