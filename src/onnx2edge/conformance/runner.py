"""The node tests through any registered backend, one case at a time, the way `verify` takes a
model: the backend's own `check` (a refusal: `unsupported`, with its reason), `emit` into a
folder, the target's own tools on what was written (`verify_details`: Core ML's validator),
`run` (MPS: the generated Swift compiled against the CPU model of Metal / MPS; Core ML: its
evaluator), and each output compared with the case's expected one at the case's rtol/atol.

The C backend has its own batched runner (c.py: one compiler call per 48 cases); this one
serves every other target and is slower per case (a Swift build, a coremltools conversion).
"""

from __future__ import annotations

import contextlib
import io
import multiprocessing as mp
import tempfile
import warnings
from collections.abc import Callable, Mapping
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from ..errors import Onnx2EdgeError
from .cases import SEQUENCES, SPECIALISED, CaseResult, _matches, case_op, collect_cases, load_case

# The conversion options each target's cases run under, when none are given: Core ML computes
# in float32 (its default, float16, keeps 11 bits: every case's rtol 1e-3 / atol 1e-7 would
# measure float16 rounding, not the emitter's meaning of the op).
DEFAULT_OPTIONS: dict[str, dict[str, Any]] = {"coreml": {"precision": "fp32"}}


def options_for(target: str, options: Mapping[str, Any] | None) -> dict[str, Any]:
    return dict(DEFAULT_OPTIONS.get(target, {}) if options is None else options)


def run_case(
    case: Any, target: str, work: Path, options: Mapping[str, Any] | None = None
) -> CaseResult:
    """One case through `target`; never raises."""
    from ..backends import get_backend

    op = case_op(case)
    backend = get_backend(target)
    try:
        opts = backend.normalize_options(dict(options or {}))
        loaded = load_case(case, backend.passes_for(opts), lambda g: backend.check(g, opts))
    except Onnx2EdgeError as e:
        return CaseResult(case.name, op, "unsupported", str(e).splitlines()[0][:300])
    except Exception as e:  # noqa: BLE001 - a converter bug on one case must not end the run
        why = f"converter error: {type(e).__name__}: {str(e)[:200]}"
        return CaseResult(case.name, op, "unsupported", why)
    g = loaded.graph
    out = Path(tempfile.mkdtemp(prefix="case_", dir=work))
    quiet = contextlib.redirect_stderr(io.StringIO())
    try:
        with quiet, contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            backend.emit(g, out, {"model_file": f"{case.name}.onnx", **opts})
    except Onnx2EdgeError as e:  # check passed the graph, emit refused it: recorded as such
        why = f"refused by emit after check passed: {str(e).splitlines()[0][:260]}"
        return CaseResult(case.name, op, "unsupported", why)
    except Exception as e:  # noqa: BLE001
        why = f"converter error: {type(e).__name__}: {str(e)[:200]}"
        return CaseResult(case.name, op, "unsupported", why)
    bad = [line for ok, line in backend.verify_details(out) if not ok]
    if bad:
        return CaseResult(case.name, op, "failed", bad[0][:300])
    feeds = dict(zip(g.inputs, loaded.inputs, strict=True))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = backend.run(out, feeds, opts)
    except Exception as e:  # noqa: BLE001 - a crash or a build error fails this case only
        return CaseResult(case.name, op, "failed", f"run error: {str(e).splitlines()[0][:300]}")
    for name, exp in zip(g.outputs, loaded.expected, strict=True):
        if name not in got:
            return CaseResult(case.name, op, "failed", f"output {name}: not produced")
        ok, why = _matches(got[name], exp, case.rtol, case.atol)
        if not ok:
            return CaseResult(case.name, op, "failed", f"output {name}: {why}")
    why = f"{SPECIALISED} {', '.join(loaded.fixed)}" if loaded.fixed else ""
    if loaded.sequences:
        why = f"{why}; {SEQUENCES} {', '.join(loaded.sequences)}".lstrip("; ")
    return CaseResult(case.name, op, "passed", why)


def _one(args: tuple[Any, str, str, dict[str, Any]]) -> CaseResult:
    case, target, work, options = args
    return run_case(case, target, Path(work), options)


def run_conformance(
    target: str,
    cases: list[Any] | None = None,
    *,
    jobs: int | None = None,
    options: Mapping[str, Any] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[CaseResult]:
    """Every case (or `cases`) through `target`, `jobs` worker processes (default 2), in the
    cases' order."""
    cases = collect_cases() if cases is None else cases
    results: list[CaseResult] = []
    with tempfile.TemporaryDirectory(prefix=f"onnx2edge-conformance-{target}-") as work:
        args = [(c, target, work, options_for(target, options)) for c in cases]
        if (jobs or 2) == 1:
            for a in args:
                results.append(_one(a))
                if progress:
                    progress(len(results), len(args))
            return results
        with ProcessPoolExecutor(max_workers=jobs or 2, mp_context=mp.get_context("fork")) as ex:
            for r in ex.map(_one, args, chunksize=4):
                results.append(r)
                if progress:
                    progress(len(results), len(args))
    return results
