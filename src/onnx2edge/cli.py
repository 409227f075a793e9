"""Command line: parses arguments, calls `onnx2edge.api`, prints. Nothing else lives here."""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import __version__
from .errors import Onnx2EdgeError

if TYPE_CHECKING:
    from .backends import BackendOption


class _Lazy:
    """A module imported on first attribute access: `--help` and argument errors need only
    argparse and the backend declarations, not numpy, onnx or the conversion code."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        return getattr(importlib.import_module(self._name), attr)


api = _Lazy("onnx2edge.api")
np = _Lazy("numpy")


def parse_input_shapes(specs: Sequence[str]) -> Any:
    from .frontend import parse_input_shapes as parse

    return parse(specs)


def parse_fixed_inputs(specs: Sequence[str]) -> Any:
    from .frontend.loader import parse_fixed_inputs as parse

    return parse(specs)


def parse_input_files(specs: Sequence[str]) -> Any:
    from .runtime import parse_input_files as parse

    return parse(specs)


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
    p.add_argument(
        "--fix-input",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="bind an input to a constant (a number, a comma list or FILE.npy): branches on it "
        "fold away and it leaves the generated API (repeatable)",
    )


def _targets() -> list[str]:
    """verify's targets: the frontend re-emitted as ONNX, then every registered backend."""
    from .backends import backend_names

    return ["onnx", *backend_names()]


def _backend_options(p: argparse.ArgumentParser) -> None:
    """One flag per conversion option the registered backends declare (Backend.options); its
    help names the targets that read it. A backend adds an option there, not here."""
    from .backends import BACKENDS, backend_names

    decls: dict[str, list[tuple[str, BackendOption]]] = {}
    for name in backend_names():
        b = BACKENDS[name]
        for o in b.options:
            decls.setdefault(o.name, []).append((b.label or name, o))
    for name, pairs in decls.items():
        o = pairs[0][1]
        shape = (o.switch, o.choices, o.default)
        if any((d.switch, d.choices, d.default) != shape for _, d in pairs):
            raise AssertionError(f"backends declare option {name} differently: {pairs}")
        text = "; ".join(f"{label}: {d.help}" for label, d in pairs)
        if o.switch:
            p.add_argument(o.flag, dest=name, action="store_true", help=text)
        else:
            p.add_argument(
                o.flag, dest=name, choices=o.choices, default=None, metavar=o.metavar, help=text
            )


def _target_options(a: argparse.Namespace, target: str) -> dict[str, Any]:
    """The options `target` declares, from the parsed flags (defaults filled in; those marked
    so are left out at their default, as older manifests have them). A flag of another target
    is refused rather than ignored, except another target's fp16 spelling (`--fp16`,
    `--weights fp16`), which means this target's (Backend.aliases)."""
    from .backends import BACKENDS
    from .backends.base import check_options

    backend = BACKENDS.get(target)
    declared = {o.name: o for o in backend.options} if backend is not None else {}
    given: dict[str, Any] = {}
    for _, b in sorted(BACKENDS.items()):
        for o in b.options:
            v = getattr(a, o.name, None)
            if v is None or v is False or o.name in given:
                continue
            if o.name not in declared and (backend is None or (o.name, v) not in backend.aliases):
                owners = [n for n, c in sorted(BACKENDS.items()) if o in c.options]
                raise Onnx2EdgeError(
                    f"{o.flag} applies to --target {' or '.join(owners)}, not {target}"
                )
            given[o.name] = v
    if backend is None:
        return {}
    opts = check_options(backend(), given)
    for o in backend.options:
        if o.name in opts:
            continue
        v = False if o.switch else o.default
        if v is not None and (o.record_default or v != o.default):
            opts[o.name] = v
    return opts


# the commands whose flags come from the backend registry (importing every backend)
_BACKEND_COMMANDS = ("convert", "verify")


class _Parser(argparse.ArgumentParser):
    """Argument errors in one line on stderr, exit 2, like every other refusal (the usage
    block is what --help prints)."""

    def error(self, message: str) -> Any:  # argparse's signature: NoReturn
        command = self.prog.partition(" ")[2]
        where = f"{command}: " if command else ""
        self.exit(2, f"onnx2edge: error: {where}{message} (see {self.prog} --help)\n")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole parser; given the `command` being run, the backends are imported only when it
    needs them (the other subparsers are only listed), so `--help` stays quick."""
    backends = command is None or command in _BACKEND_COMMANDS
    p = _Parser(
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

    s = sub.add_parser("import", help="TFLite (.tflite) or OpenVINO IR (.xml + .bin) -> ONNX")
    s.add_argument("model", help="MODEL.tflite or MODEL.xml (its .bin beside it)")
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
    s.add_argument("--target", required=True, choices=_targets()[1:] if backends else None)
    s.add_argument("-o", "--output", required=True, help="output folder")
    s.add_argument(
        "--json",
        action="store_true",
        help="print one JSON document (files, weight and arena bytes, manifest path, stats)",
    )
    s.add_argument(
        "--explain-kernels",
        action="store_true",
        help="C: print, per layer, the kernel strategy chosen and why each earlier one refused",
    )
    if backends:
        _backend_options(s)
    _shapes(s)
    _common(s)

    s = sub.add_parser("run", help="build (cached) and run a converted folder")
    s.add_argument("out_dir", metavar="OUT")
    s.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy")
    s.add_argument("-o", "--output", help="write outputs to this .npz (prints them otherwise)")
    _arch(s, command)
    _common(s)

    s = sub.add_parser("verify", help="compare against onnxruntime")
    s.add_argument("model")
    s.add_argument(
        "--target",
        default="onnx",
        choices=_targets() if backends else None,
        help="onnx: frontend + passes re-emitted as ONNX (default); c, mps: generated code; coreml: NumPy model of the Core ML file",
    )
    s.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy")
    s.add_argument(
        "--rtol",
        type=float,
        default=None,
        help="tolerance relative to max|reference| (default 1e-4; float16 targets: Core ML "
        "--precision fp16 1e-2, MPS --fp16 3e-2, stated in the verdict)",
    )
    s.add_argument("--atol", type=float, default=1e-6, help="absolute tolerance (default 1e-6)")
    s.add_argument(
        "--strict",
        action="store_true",
        help="no allowance for onnxruntime's own optimised-vs-unoptimised spread (outputs "
        "missing the tolerance otherwise pass within twice that spread)",
    )
    s.add_argument("--per-layer", action="store_true", help="compare every intermediate tensor")
    s.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    s.add_argument("--json", action="store_true", help="print JSON")
    s.add_argument(
        "--reference",
        metavar="FP32.onnx",
        help="compare MODEL (a quantized model) with its fp32 original instead, per layer",
    )
    s.add_argument("--calib", metavar="FILE.npz|DIR", help="with --reference: samples to use")
    s.add_argument(
        "--source",
        metavar="MODEL.onnx",
        help="MODEL is a converted folder: the model it was made from (default: the file its "
        "manifest names, in the current folder or beside the folder)",
    )
    if backends:
        _backend_options(s)
    _arch(s, command)
    _shapes(s)
    _common(s)
    _quantize_parser(sub)
    s = sub.add_parser("bench", help="time the generated C against onnxruntime")
    s.add_argument("model", nargs="?", help="model to benchmark (or --suite)")
    s.add_argument("--target", default="c", choices=["c"])
    s.add_argument("--threads", type=int, default=1)
    s.add_argument("--runs", type=int, default=20)
    s.add_argument("--warmup", type=int, default=3)
    s.add_argument(
        "--profile",
        action="store_true",
        help="also time every node (build with -DO2E_PROFILE), beside onnxruntime's per-node profile (and OpenVINO's performance counters with --against ort,openvino)",
    )
    s.add_argument(
        "--suite",
        choices=["seed", "modern"],
        help="benchmark a model list at 1 and 2 threads: seed (2015-era CNNs), modern (today's "
        "edge networks, exported with torch into a cache dir)",
    )
    s.add_argument(
        "--against",
        default="ort",
        help="runtimes timed beside ours: ort (default) or ort,openvino (OpenVINO's CPU plugin; "
        "ratios then against the faster one whose outputs agree with onnxruntime's)",
    )
    s.add_argument(
        "--int8",
        action="store_true",
        help="suite: also bench each network's static QDQ int8 copy (seed: squeezenet, "
        "mobilenet_v2, resnet50 unless --models)",
    )
    s.add_argument(
        "--cache-dir",
        help="suite modern: where the exported networks are kept "
        "(default $ONNX2EDGE_CACHE/modern or ~/.cache/onnx2edge/modern)",
    )
    s.add_argument("--models", help="comma-separated subset of the suite")
    s.add_argument(
        "--results",
        metavar="FILE",
        help="suite: keep every network's rows in this JSON file as each finishes; run again "
        "with the same file and the networks it holds are not run again (an interrupted suite "
        "resumes, or is run in parts and written as one doc)",
    )
    s.add_argument(
        "--write-doc",
        metavar="FILE",
        help="suite: write the markdown table (and a PNG chart beside it)",
    )
    s.add_argument(
        "--arch",
        default="native",
        metavar="native|x86-64-v2|x86-64-v3|x86-64-v4",
        help="build the C with this -march (an AVX-512 host can time the AVX2 path: x86-64-v3); "
        "--suite: a comma-separated list, one table per ISA",
    )
    s.add_argument(
        "--cpu-clock",
        action="store_true",
        help="1 thread: time calls by thread CPU time on both sides (a machine shared with other jobs)",
    )
    s.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="alternate ours and onnxruntime in this many rounds of runs/ROUNDS each (a shared "
        "machine's changing load then falls on both sides alike)",
    )
    s.add_argument(
        "--ort-isa",
        choices=["host", "match"],
        default="host",
        help="match: hold onnxruntime to the instruction set of our --arch build (x86-64-v3: "
        "AVX2 + FMA, v2: SSE4.2) by masking its CPUID (Linux, CPUs with cpuid_fault), so an "
        "AVX-512 host measures what an AVX2-only CPU would",
    )
    s.add_argument("--json", action="store_true", help="print JSON")
    _shapes(s)
    _common(s)

    s = sub.add_parser("conformance", help="run the ONNX backend node tests through a target")
    s.add_argument("--target", default="c", choices=["c", "mps", "coreml"])
    s.add_argument("--json", action="store_true", help="print JSON")
    s.add_argument("--filter", metavar="REGEX", help="only cases whose name matches")
    s.add_argument(
        "--failures",
        action="store_true",
        help="list every failed / unsupported case with its reason",
    )
    s.add_argument("--write-doc", metavar="FILE", help="also write the markdown table to FILE")
    s.add_argument(
        "--write-expected",
        metavar="FILE",
        help="write each case's status to FILE "
        "(tests/conformance/TARGET.expected; needs the full run, no --filter)",
    )
    s.add_argument("--jobs", type=int, default=None, help="worker processes (default: CPU count)")
    _arch(s, command)
    _common(s)
    _edit_parsers(sub, command)

    s = sub.add_parser("report", help="one self-contained HTML page: graph, layers, RAM and flash")
    s.add_argument("model")
    s.add_argument("-o", "--output", required=True, help="HTML file to write")
    s.add_argument(
        "--target", default="c", help="target whose support colours the graph (default c)"
    )
    s.add_argument("--bench", action="store_true", help="measure per-layer latency (C target)")
    s.add_argument("--verify", action="store_true", help="per-layer error against onnxruntime")
    _shapes(s)
    _common(s)
    _prune_parser(sub)
    return p


# --- pruning (issue 14): see onnx2edge/prune.py
def _prune_parser(sub: Any) -> None:
    s = sub.add_parser("prune", help="magnitude pruning of Gemm/MatMul/Conv weights")
    s.add_argument("model")
    s.add_argument("-o", "--output", required=True, help="ONNX file to write")
    s.add_argument("--sparsity", type=float, default=0.9, help="fraction of weights zeroed")
    s.add_argument("--scope", choices=("global", "layer"), default="global")
    s.add_argument("--max-layer-sparsity", type=float, default=0.98, help="cap per layer (1: none)")
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
    kw["max_layer_sparsity"] = a.max_layer_sparsity
    if a.sweep:
        if not a.eval:
            raise Onnx2EdgeError("--sweep needs --eval FILE.npz")
        try:
            levels = [float(x) for x in a.sweep.split(",") if x]
        except ValueError:
            raise Onnx2EdgeError(f"--sweep: expected numbers, got {a.sweep!r}") from None
        from .bench.prune_sweep import format_sweep, sweep

        res = sweep(
            a.model,
            a.output,
            levels,
            a.eval,
            labels_file=a.labels,
            tolerance=a.tolerance,
            latency=not a.no_latency,
            **kw,
        )
        print(json.dumps(res, indent=1) if a.json else format_sweep(res))
        return 0
    model, rep = pr.prune_model(load_model(a.model), a.sparsity, **kw)
    write_bytes_atomic(a.output, model.SerializeToString())
    print(json.dumps(rep.as_dict(), indent=1) if a.json else rep.format())
    return 0


# --- model editing (issue 16): check, rewrite, surgery, nhwc (see onnx2edge/edit/commands.py)
def _edit_parsers(sub: Any, command: str | None = None) -> None:
    if command is not None and command not in EDIT_COMMANDS:
        for name, text in EDIT_COMMANDS.items():  # listed only: another command is running
            sub.add_parser(name, help=text)
        return
    from .edit.commands import add_parsers

    add_parsers(sub, _common, _shapes, command, EDIT_COMMANDS)


def _cmd_edit(a: argparse.Namespace) -> int:
    from .edit.commands import run_command

    return run_command(a)


# the editing commands (edit/commands.py) and their one-line help, listed without importing
# the edit package (its rules load onnx and numpy)
EDIT_COMMANDS = {
    "check": "per node: supported / replaceable / unsupported on a target",
    "rewrite": "replace ops by equivalent ones (rules), verified",
    "extract": "the subgraph between tensors (onnx.utils.Extractor)",
    "delete-nodes": "delete nodes (Identity-like ones are bypassed)",
    "rename": "rename tensors / nodes (OLD=NEW or regex)",
    "set-shape": "change input shapes or the batch size",
    "add-output": "make intermediate tensors graph outputs",
    "opset": "convert to another opset (onnx version converter), verified",
    "simplify": "constant folding, dead code, fusions; reports what changed",
    "constant": "bind inputs to constant values (and fold)",
    "nhwc": "NHWC image inputs / outputs, Transposes only at the boundaries",
}


def _arch(s: argparse.ArgumentParser, command: str | None = None) -> None:
    """--arch (C target, issue 9): the instruction set the generated C is built for (its
    choices, from the C backend's build module, only when `s` is the command being run)."""
    if command is not None and command != s.prog.split()[-1]:
        s.add_argument("--arch")
        return
    from .backends.c.build import ARCHES

    s.add_argument(
        "--arch",
        choices=ARCHES,
        help="C: build with this -march (x86-64-v2: no AVX, v3: AVX2+FMA, v4: AVX-512, native); "
        "aarch64: cross-compile, run under qemu-aarch64 (correctness only); "
        "cortex-m4|cortex-m7|cortex-m33|cortex-m55: bare-metal image on QEMU's MPS2/MPS3 board "
        "(arm-none-eabi-gcc, qemu-system-arm)",
    )


def _cmd_bench(a: argparse.Namespace) -> int:
    from .backends.c.build import arch_flags
    from .bench import harness

    def log(msg: str) -> None:
        print(f"onnx2edge: {msg}", file=sys.stderr, flush=True)

    if a.suite:
        from .bench import suite

        models = a.models.split(",") if a.models else None
        against = harness.parse_against(a.against)
        results: list[dict] = []
        archs = a.arch.split(",")
        for arch in archs:
            arch_flags(arch)  # an unknown or unusable level fails before hours of benchmarking
            _refuse_emulated_timing(arch)
        held = suite.load_results(a.results) if a.results else []

        def keep(rows: list[dict]) -> None:
            if a.results:
                suite.save_results(a.results, results + rows, held)

        for arch in archs:
            results += suite.run_suite(
                models=models,
                runs=a.runs,
                warmup=a.warmup,
                log=log,
                arch=arch,
                cpu_clock=a.cpu_clock,
                rounds=a.rounds,
                ort_isa=a.ort_isa,
                suite=a.suite,
                against=against,
                int8=a.int8,
                cache_dir=a.cache_dir,
                held=held,
                on_network=keep,
            )
        if a.write_doc:
            suite.write_doc(results, Path(a.write_doc))
        print(json.dumps(results, indent=1) if a.json else suite.format_table(results))
        return 0
    if not a.model:
        raise Onnx2EdgeError("bench needs a MODEL or --suite seed|modern")
    if a.int8 or a.cache_dir or a.results:
        raise Onnx2EdgeError("bench: --int8, --cache-dir and --results go with --suite")
    _refuse_emulated_timing(a.arch)
    r = harness.bench_model(
        a.model,
        threads=a.threads,
        runs=a.runs,
        warmup=a.warmup,
        input_shapes=parse_input_shapes(a.input_shape),
        log=log,
        profile=a.profile,
        fixed_inputs=parse_fixed_inputs(a.fix_input),
        arch=a.arch,
        cpu_clock=a.cpu_clock,
        rounds=a.rounds,
        ort_isa=a.ort_isa,
        against=harness.parse_against(a.against),
    )
    print(json.dumps(r, indent=1) if a.json else harness.format_result(r))
    return 0 if r["accurate"] else 1


def _refuse_emulated_timing(arch: str | None) -> None:
    from .backends.c.build import is_emulated

    if is_emulated(arch):
        raise Onnx2EdgeError(
            f"bench --arch {arch}: this host runs {arch} code under emulation (qemu), which gives "
            f"correctness only, no timing; use `verify --target c --arch {arch}`"
        )


def _cmd_conformance(a: argparse.Namespace) -> int:
    import re

    from .conformance import cases as conf

    if a.write_expected and a.filter:
        raise Onnx2EdgeError("--write-expected lists every case: drop --filter")
    if a.target != "c" and a.write_doc:
        raise Onnx2EdgeError(
            "--write-doc writes the C table of docs/conformance.md: use --target c"
        )
    cases = conf.collect_cases()
    if a.filter:
        rx = re.compile(a.filter)
        cases = [c for c in cases if rx.search(c.name)]

    def progress(done: int, total: int) -> None:
        print(
            f"onnx2edge: conformance {done}/{total}",
            file=sys.stderr,
            end="\r" if done < total else "\n",
            flush=True,
        )

    note = ""
    if a.target == "c":
        from .conformance import c as c_conf

        results = c_conf.run_conformance(cases, jobs=a.jobs, progress=progress, arch=a.arch)
    else:
        from .conformance import runner

        if a.arch:
            raise Onnx2EdgeError(f"--arch: only with --target c, not {a.target}")
        opts = runner.options_for(a.target, None)
        note = "options: " + (", ".join(f"{k}={v}" for k, v in opts.items()) or "defaults")
        results = runner.run_conformance(a.target, cases, jobs=a.jobs, progress=progress)
    summary = conf.summarize(results)
    if a.write_doc:
        from .conformance.c import format_doc
        from .fsutil import write_text_atomic

        write_text_atomic(a.write_doc, format_doc(summary, results))
    if a.write_expected:
        from .fsutil import write_text_atomic

        write_text_atomic(a.write_expected, conf.expected_text(results, a.target, note))
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

    info = api.inspect(
        a.model,
        input_shapes=parse_input_shapes(a.input_shape),
        fixed_inputs=parse_fixed_inputs(a.fix_input),
    )
    print(json.dumps(info, indent=1) if a.json else format_report(info))
    return 0


def _cmd_json(a: argparse.Namespace) -> int:
    out = api.to_json(a.model, a.output, weights=a.weights)
    print(f"wrote {out}")
    return 0


def _cmd_from_json(a: argparse.Namespace) -> int:
    print(f"wrote {api.from_json(a.json_file, a.output)}")
    return 0


def _cmd_import(a: argparse.Namespace) -> int:
    print(f"wrote {api.import_model(a.model, a.output)}")
    return 0


def _cmd_weights(a: argparse.Namespace) -> int:
    if a.weights_command == "export":
        print(f"wrote {api.export_weights(a.model, a.output)}")
    else:
        print(f"wrote {api.import_weights(a.model, a.weights_dir, a.output)}")
    return 0


def _human(v: Any) -> str:
    """A stat as a person reads it: no Python reprs (brackets, quotes, True)."""
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, dict):
        return ", ".join(
            f"{n} ×{c}" if isinstance(c, int) and not isinstance(c, bool) else f"{n} {_human(c)}"
            for n, c in v.items()
        )
    if isinstance(v, list | tuple):
        return ", ".join(_human(x) for x in v) or "none"
    return str(v)


def _log(msg: str) -> None:
    print(f"onnx2edge: {msg}", file=sys.stderr, flush=True)


def _cmd_convert(a: argparse.Namespace) -> int:
    opts = _target_options(a, a.target)
    res = api.convert(
        a.model,
        a.target,
        a.output,
        input_shapes=parse_input_shapes(a.input_shape),
        options=opts,
        fixed_inputs=parse_fixed_inputs(a.fix_input),
        log=_log,
    )
    if a.json:
        from .backends.base import MANIFEST

        doc = {
            "target": a.target,
            "out_dir": str(res.out_dir),
            "manifest": str(res.out_dir / MANIFEST),
            "files": sorted({*res.files, MANIFEST}),
            "weight_bytes": res.stats.get("weight_bytes"),
            "arena_bytes": res.stats.get("arena_bytes"),
            "options": {k: v for k, v in sorted(opts.items())},
            "stats": res.stats,
        }
        print(json.dumps(doc, indent=1, default=str))
        return 0
    for k, v in res.stats.items():
        # layer_kernels: one line per layer, in the manifest, counted under kernels;
        # footprint: its own line below
        if k in ("layer_kernels", "kernel_refusals", "footprint"):
            continue
        print(f"{k}: {_human(v)}")
    if isinstance(res.stats.get("footprint"), dict):
        from .backends.c.footprint import describe

        print(f"footprint: {describe(res.stats['footprint'])}")
    elif "weight_bytes" in res.stats and "arena_bytes" in res.stats:
        print(
            f"footprint: weights {res.stats['weight_bytes'] / 1e6:.2f} MB (flash), "
            f"arena {res.stats['arena_bytes'] / 1e6:.2f} MB (RAM)"
        )
    if a.explain_kernels:
        from .backends.c.strategy import explain

        print(explain(res.stats.get("layer_kernels", {}), res.stats.get("kernel_refusals", {})))
    print(f"wrote {len(res.files)} files to {res.out_dir}")
    return 0


def _cmd_run(a: argparse.Namespace) -> int:
    if a.arch:
        from .backends.base import read_manifest

        if (target := read_manifest(a.out_dir).get("target")) != "c":
            raise Onnx2EdgeError(f"--arch applies to C output folders, {a.out_dir} is {target}")
    outs = api.run(
        a.out_dir, parse_input_files(a.input), options={"arch": a.arch} if a.arch else None
    )
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


def _declared(target: str) -> tuple[BackendOption, ...]:
    from .backends import BACKENDS

    return BACKENDS[target].options


def _cmd_verify(a: argparse.Namespace) -> int:
    if a.arch and a.target != "c" and not Path(a.model).is_dir():
        raise Onnx2EdgeError(f"--arch applies to --target c, not {a.target}")
    if a.reference:
        cmp = api.compare_quantized(
            a.model,
            a.reference,
            calib=a.calib,
            inputs=parse_input_files(a.input),
            input_shapes=parse_input_shapes(a.input_shape),
            seed=a.seed,
        )
        print(json.dumps(cmp.as_dict(), indent=1) if a.json else cmp.format())
        return 0
    if a.calib:
        raise Onnx2EdgeError("--calib goes with --reference (a quantized model vs its original)")
    if Path(a.model).is_dir():  # a converted folder, verified as it is
        from .backends.base import read_manifest

        target = read_manifest(a.model).get("target")
        if a.target not in ("onnx", target):
            raise Onnx2EdgeError(f"{a.model} holds {target} output, not --target {a.target}")
        _target_options(a, str(target))  # another target's flag: refused as for convert
        given = [
            o.flag for o in _declared(str(target)) if getattr(a, o.name, None) not in (None, False)
        ]
        if given or a.input_shape or a.fix_input:
            flags = [
                *given,
                *(["--input-shape"] if a.input_shape else []),
                *(["--fix-input"] if a.fix_input else []),
            ]
            raise Onnx2EdgeError(
                f"{a.model} is already converted: {', '.join(flags)} cannot change it "
                "(convert again to change it)"
            )
        rep = api.verify_folder(
            a.model,
            source=a.source,
            inputs=parse_input_files(a.input),
            rtol=a.rtol,
            atol=a.atol,
            per_layer=a.per_layer,
            seed=a.seed,
            spread=not a.strict,
            options={"arch": a.arch} if a.arch else None,
            log=_log,
        )
        print(json.dumps(rep.as_dict(), indent=1) if a.json else rep.format())
        return 0 if rep.ok else 1
    if a.source:
        raise Onnx2EdgeError("--source goes with a converted folder: verify OUT_DIR --source MODEL")
    rep = api.verify(
        a.model,
        target=a.target,
        input_shapes=parse_input_shapes(a.input_shape),
        fixed_inputs=parse_fixed_inputs(a.fix_input),
        inputs=parse_input_files(a.input),
        rtol=a.rtol,
        atol=a.atol,
        per_layer=a.per_layer,
        seed=a.seed,
        spread=not a.strict,
        options={**_target_options(a, a.target), **({"arch": a.arch} if a.arch else {})} or None,
        log=lambda msg: print(f"onnx2edge: {msg}", file=sys.stderr, flush=True),
    )
    print(json.dumps(rep.as_dict(), indent=1) if a.json else rep.format())
    return 0 if rep.ok else 1


# --- quantize ------------------------------------------------------------------------------
def _quantize_parser(sub: Any) -> None:
    s = sub.add_parser("quantize", help="FP16 / INT8 (dynamic, static QDQ) copy of a model")
    s.add_argument("model")
    s.add_argument("-o", "--output", required=True, help="ONNX file to write")
    s.add_argument("--mode", required=True, choices=["fp16", "dynamic", "static"])
    add = s.add_argument
    add(
        "--calib",
        metavar="FILE.npz|DIR",
        help="samples: .npz (one array per input, first axis = samples) or a folder of .npy",
    )
    add(
        "--method",
        choices=["minmax", "percentile", "entropy"],
        default="minmax",
        help="static: calibration method",
    )
    add("--per-channel", action="store_true", help="int8: per-output-channel weight scales")
    add("--activations", choices=["uint8", "int8"], default="uint8", help="static: activations")
    add(
        "--exclude",
        default="",
        metavar="NODE,...|auto",
        help="nodes kept in fp32, or 'auto' (sensitivity pass)",
    )
    add("--max-drop", type=float, default=0.01, help="--exclude auto: allowed drop (0.01)")
    add("--labels", metavar="FILE.npy", help="class per sample: the metric becomes accuracy")
    add("--samples", type=int, help="use only the first N samples")
    add("--json", action="store_true", help="print JSON")
    _common(s)


def _cmd_quantize(a: argparse.Namespace) -> int:
    res = api.quantize(
        a.model,
        a.output,
        mode=a.mode,
        calib=a.calib,
        method=a.method,
        per_channel=a.per_channel,
        activations=a.activations,
        max_drop=a.max_drop,
        labels=a.labels,
        samples=a.samples,
        exclude="auto" if a.exclude == "auto" else [e for e in a.exclude.split(",") if e.strip()],
        log=lambda msg: print(f"onnx2edge: {msg}", file=sys.stderr, flush=True),
    )
    print(json.dumps(res.as_dict(), indent=1) if a.json else res.format())
    return 0


COMMANDS = {
    "quantize": _cmd_quantize,
    "inspect": _cmd_inspect,
    "json": _cmd_json,
    "from-json": _cmd_from_json,
    "import": _cmd_import,
    "weights": _cmd_weights,
    "convert": _cmd_convert,
    "run": _cmd_run,
    "verify": _cmd_verify,
    "conformance": _cmd_conformance,
    "bench": _cmd_bench,
}
COMMANDS.update(dict.fromkeys(EDIT_COMMANDS, _cmd_edit))
COMMANDS["prune"] = _cmd_prune


def _cmd_report(a: argparse.Namespace) -> int:
    from .report import write_report

    data = write_report(
        a.model,
        a.output,
        target=a.target,
        input_shapes=parse_input_shapes(a.input_shape),
        bench=a.bench,
        verify=a.verify,
        log=lambda msg: print(f"onnx2edge: {msg}", file=sys.stderr),
    )
    t = data["totals"]
    print(
        f"wrote {a.output}: {len(data['nodes'])} nodes, {t['supported']} supported, "
        f"{t['replaceable']} replaceable, {t['unsupported']} unsupported"
    )
    return 0


COMMANDS["report"] = _cmd_report


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((t for t in argv if not t.startswith("-")), "")  # "": no command given
    args = build_parser(command).parse_args(argv)
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
