"""The ONNX backend node tests, target-neutral: the cases (`collect_cases`), each case's model
through the frontend with the test's data (`load_case`), the comparison, the summary table and
the expected-status files (`tests/conformance/<target>.expected`).

The runners live beside: `c.py` (batched compile of generated C), `runner.py` (any backend
through `Backend.check` / `emit` / `run`: MPS on its CPU model, Core ML on its evaluator).
"""

from __future__ import annotations

import contextlib
import difflib
import io
import re
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import Onnx2EdgeError


@dataclass
class CaseResult:
    name: str
    op: str
    status: str  # "passed" | "checked" | "failed" | "unsupported" (see STATUSES)
    detail: str = ""


def collect_cases() -> list[Any]:
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        with np.errstate(all="ignore"):
            return list(collect_testcases())


def case_op(case: Any) -> str:
    nodes = case.model.graph.node
    if len(nodes) == 1:
        return nodes[0].op_type
    key = case.name.removeprefix("test_").replace("_", "").lower()
    best = ""
    for n in nodes:
        op = n.op_type.lower()
        if key.startswith(op) and len(op) > len(best):
            best = n.op_type
    if best:
        return best
    for n in nodes:
        if n.op_type.lower() in key:
            return n.op_type
    return nodes[0].op_type if nodes else "?"


def _sequence_specs(model: Any, data: list[Any]) -> dict[str, Any]:
    """Each sequence (or optional) input's structure from the test data: its elements' dtypes
    and shapes (the lengths and shapes are bound, as --input-shape binds a tensor's; the values
    stay run-time inputs), None for an absent optional."""
    specs: dict[str, Any] = {}
    for name, v in zip(_input_names(model), data, strict=False):
        if v is None:
            specs[name] = None
        elif isinstance(v, list):
            specs[name] = [(np.asarray(e).dtype, np.asarray(e).shape) for e in v]
    return specs


def _symbolic_input_shapes(model: Any, data: list[Any]) -> dict[str, tuple[int, ...]]:
    """The test data's shapes for the tensor inputs declared with symbolic dims (as
    --input-shape gives them), next to sequence inputs whose element shapes are bound."""
    declared = {vi.name: vi.type for vi in model.graph.input}
    out = {}
    for name, v in zip(_input_names(model), data, strict=False):
        t = declared[name]
        if isinstance(v, np.ndarray) and t.HasField("tensor_type"):
            dims = t.tensor_type.shape.dim
            if any(not d.HasField("dim_value") for d in dims):
                out[name] = tuple(v.shape)
    return out


def _flat_input_names(model: Any, specs: dict[str, Any]) -> list[str]:
    """The graph's input names once sequences are lowered (frontend/sequences.py): a sequence
    input `x` of n elements is `x_0` .. `x_<n-1>`; an absent optional is gone."""
    out: list[str] = []
    for name in _input_names(model):
        if name not in specs:
            out.append(name)
        elif specs[name] is not None:
            out += [f"{name}_{i}" for i in range(len(specs[name]))]
    return out


def _input_names(model: Any) -> list[str]:
    inits = {t.name for t in model.graph.initializer}
    return [i.name for i in model.graph.input if i.name not in inits]


def _shape_inputs(model: Any, ins: list[Any]) -> dict[str, np.ndarray]:
    """Graph inputs whose values decide a shape or a branch (read, directly or through
    arithmetic, at a position passes.specialise lists, an If condition, a Loop count or a
    Dropout's ratio and training_mode)."""
    from ..passes.specialise import _SHAPE_INPUTS

    producer = {o: n for n in model.graph.node for o in n.output if o}
    stack: list[str] = []
    for n in model.graph.node:
        positions = _SHAPE_INPUTS.get(n.op_type, ())
        if n.op_type == "If":
            positions = (0,)
        elif n.op_type == "Loop":
            positions = (0, 1)
        elif n.op_type == "Dropout":
            positions = (1, 2)  # ratio and training_mode decide whether a mask is drawn
        elif n.op_type in _SEQUENCE_POSITIONS:
            positions = _SEQUENCE_POSITIONS[n.op_type]
        stack += [n.input[i] for i in positions if i < len(n.input) and n.input[i]]
    seen: set[str] = set()
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in producer:
            stack.extend(i for i in producer[name].input if i)
    names = _input_names(model)
    return {
        k: v
        for k, v in zip(names, ins, strict=False)
        if k in seen and isinstance(v, np.ndarray) and v.dtype.kind in "iubf"
    }


def _flatten(data: list[Any]) -> list[Any]:
    """Sequences as their elements in order, an absent optional as nothing: the order of the
    lowered graph's inputs and outputs (frontend/sequences.py)."""
    out: list[Any] = []
    for a in data:
        if a is None:
            continue
        out += list(a) if isinstance(a, list) else [a]
    return out


# the inputs of sequence ops frontend/sequences.py must know at conversion
_SEQUENCE_POSITIONS = {
    "SequenceAt": (1,),
    "SequenceErase": (1,),
    "SequenceInsert": (2,),
    "SplitToSequence": (1,),
    # the image's height and width are in the encoded bytes: bound, the image is decoded at
    # conversion (passes/fold_constants.py, onnx's reference decoder); C decodes nothing
    "ImageDecoder": (0,),
}


def _strings(a: np.ndarray) -> np.ndarray:
    """A string tensor as the backends hold it: fixed-capacity UTF-8 (ir.graph.STRING_DTYPE)."""
    from ..ir.graph import STRING_BYTES, STRING_DTYPE

    raw = [s.encode("utf-8") if isinstance(s, str) else bytes(s) for s in a.reshape(-1)]
    if any(len(b) >= STRING_BYTES for b in raw):
        raise Onnx2EdgeError(f"a string longer than {STRING_BYTES - 1} bytes")
    return np.array(raw, dtype=STRING_DTYPE).reshape(a.shape)


def io_dtype(dtype: np.dtype) -> str:
    """A dtype as run_library rebuilds it: numpy's name, except byte strings ('|S64': the name
    'bytes512' does not parse back)."""
    return dtype.str if dtype.kind == "S" else dtype.name


def _as_arrays(data: list[Any]) -> list[np.ndarray]:
    """Test data as numpy arrays: numpy scalars and TensorProtos (the exotic dtypes) converted."""
    import onnx
    from onnx import numpy_helper

    out = []
    for a in _flatten(data):
        if isinstance(a, onnx.TensorProto):
            a = numpy_helper.to_array(a)
        elif isinstance(a, np.generic):
            a = np.asarray(a)
        if isinstance(a, np.ndarray) and a.dtype == object:
            a = _strings(a)
        if not isinstance(a, np.ndarray) or a.dtype == object:
            raise Onnx2EdgeError("string data is not supported")
        out.append(a)
    return out


def _matches(got: np.ndarray, exp: np.ndarray, rtol: float, atol: float) -> tuple[bool, str]:
    if got.shape != exp.shape:
        return False, f"shape {got.shape} != {exp.shape}"
    # ml_dtypes floats (bfloat16, float8, float4: numpy kind "V") compare as floats, NaN == NaN
    if exp.dtype.kind in "fc" or exp.dtype.name.startswith(("float", "bfloat")):
        with np.errstate(all="ignore"):
            try:
                np.testing.assert_allclose(
                    got.astype(np.float64), exp.astype(np.float64), rtol=rtol, atol=atol
                )
            except AssertionError as e:
                lines = [ln for ln in str(e).splitlines() if "Max" in ln]
                return False, "; ".join(ln.strip() for ln in lines) or "values differ"
        return True, ""
    if not np.array_equal(got, exp.astype(got.dtype) if exp.dtype != got.dtype else exp):
        return False, "values differ"
    return True, ""


SPECIALISED = "passed with the test's values bound (--fix-input):"


SEQUENCES = "sequence lengths and element shapes (or an optional's absence) bound from the test:"


# "checked": a random op's case, whose values no implementation can match, judged by shape,
# range and distribution instead (_check_random) -- conforming, but not a by-value pass.
STATUSES = ("passed", "checked", "failed", "unsupported")


def summarize(results: list[CaseResult]) -> dict[str, Any]:
    by_op: dict[str, dict[str, int]] = {}
    for r in results:
        d = by_op.setdefault(r.op, dict.fromkeys(STATUSES, 0))
        d[r.status] += 1
    return {
        "total": len(results),
        "passed": sum(r.status == "passed" for r in results),
        "checked": sum(r.status == "checked" for r in results),
        "failed": sum(r.status == "failed" for r in results),
        "unsupported": sum(r.status == "unsupported" for r in results),
        "specialised": sum(r.detail.startswith(SPECIALISED) for r in results),
        "sequences": sum(SEQUENCES in r.detail for r in results),
        "by_op": dict(sorted(by_op.items())),
    }


def format_table(summary: dict[str, Any]) -> str:
    lines = ["| op | passed | checked | failed | unsupported |", "|---|---:|---:|---:|---:|"]
    for op, d in summary["by_op"].items():
        lines.append("| " + " | ".join([op, *(str(d[k]) for k in STATUSES)]) + " |")
    t = summary
    lines.append("| **total** | " + " | ".join(f"**{t[k]}**" for k in STATUSES) + " |")
    lines.append("")
    pct = 100.0 * t["passed"] / max(t["total"], 1)
    lines.append(f"{t['passed']} of {t['total']} node test cases pass ({pct:.1f}%).")
    if t.get("checked"):
        ok = 100.0 * (t["passed"] + t["checked"]) / max(t["total"], 1)
        lines.append(
            f"{t['checked']} more, of random ops, are checked by shape, range and distribution "
            f"instead of by value: {t['passed'] + t['checked']} conform ({ok:.1f}%)."
        )
    if t.get("specialised"):
        lines.append(
            f"{t['specialised']} of them pass once the inputs that decide a shape or a branch "
            "are bound to the test's values (static specialisation, as `--fix-input` does)."
        )
    if t.get("sequences"):
        lines.append(
            f"{t['sequences']} of them take sequence or optional inputs, lowered to one tensor per "
            "element with the lengths and element shapes bound from the test "
            "(frontend/sequences.py)."
        )
    return "\n".join(lines)


_NODE_NAME = re.compile(r"node '(?:[^'\\]|\\.)*' \((op [^)]*)\)")


_PATH = re.compile(r"(?<![\w.])/(?:[\w.+-]+/)+[\w.+-]*")


_ADDRESS = re.compile(r"\b0x[0-9a-fA-F]{6,}\b")


def stable_reason(detail: str) -> str:
    """`detail` without what varies between runs or machines: node names (the loader may
    number unnamed nodes), file paths (temporary folders) and memory addresses."""
    s = _NODE_NAME.sub(r"\1", detail.splitlines()[0] if detail else "")
    s = _PATH.sub("<path>", s)
    s = _ADDRESS.sub("0x?", s)
    return " ".join(s.split())


def expected_line(r: CaseResult) -> str:
    return (
        r.name
        + " "
        + (r.status if r.status == "passed" else f"{r.status}: {stable_reason(r.detail)}")
    )


def expected_diff(expected: str, actual: str) -> str:
    """Unified diff of the case lines (comments ignored); empty when they agree."""

    def cases(text: str) -> list[str]:
        return [ln + "\n" for ln in text.splitlines() if ln and not ln.startswith("#")]

    diff = difflib.unified_diff(cases(expected), cases(actual), "expected", "actual", n=0)
    return "".join(ln for ln in diff if not ln.startswith("@@"))


@dataclass
class LoadedCase:
    """A case's model through the frontend and a backend's passes, with the test's data in
    the graph's input / output order."""

    graph: Any
    inputs: list[np.ndarray]
    expected: list[np.ndarray]
    fixed: list[str]  # inputs bound to the test's values (static specialisation)
    sequences: list[str]  # inputs whose sequence structure is bound


def load_case(
    case: Any, passes: Sequence[str], refusals: Callable[[Any], Sequence[object]]
) -> LoadedCase:
    """`case`'s model through the frontend and `passes`; raises Onnx2EdgeError with the first
    refusal (`refusals(graph)`: a backend's `check`, as records or lines) when the target
    cannot take it even once the inputs that decide shapes or branches are bound to the
    test's values (`--fix-input`)."""
    from ..frontend import load
    from ..frontend.handle import DEFAULT_PASSES
    from ..passes import run_passes

    if not case.data_sets:
        raise Onnx2EdgeError("no test data")
    seq_specs = _sequence_specs(case.model, case.data_sets[0][0])
    shapes = _symbolic_input_shapes(case.model, case.data_sets[0][0]) if seq_specs else {}
    ins, outs = (_as_arrays(d) for d in case.data_sets[0])
    fixed_names: list[str] = []
    with contextlib.redirect_stderr(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")

        def attempt(fixed: dict[str, np.ndarray]) -> tuple[Any, list[str]]:
            try:
                g = load(
                    case.model,
                    quiet=True,
                    fixed_inputs=fixed,
                    sequence_inputs=seq_specs,
                    input_shapes={k: v for k, v in shapes.items() if k not in fixed},
                )
                g = run_passes(g, (*DEFAULT_PASSES, *passes))
                # the status without the fix: advice is not what the case's line records
                return g, [getattr(r, "status_line", str(r)) for r in refusals(g)]
            except Onnx2EdgeError as e:
                return None, [str(e)]

        g, problems = attempt({})
        raw = [
            a if isinstance(a, list) or a is None else _as_arrays([a])[0]
            for a in case.data_sets[0][0]
        ]
        fixed = _shape_inputs(case.model, raw) if problems else {}
        if fixed:
            # static specialisation, as `--fix-input` does: the inputs that decide shapes
            # (a Reshape target, Pad amounts, an If condition, a Loop count) become
            # constants with the test's values; the other inputs stay run-time inputs
            g2, problems2 = attempt(fixed)
            if not problems2:
                by_name = dict(zip(_flat_input_names(case.model, seq_specs), ins, strict=False))
                g, problems, fixed_names = g2, [], sorted(fixed)
                ins = [by_name[n] for n in g.inputs if n in by_name]
        if problems:
            raise Onnx2EdgeError(problems[0])
        if len(g.inputs) != len(ins) or len(g.outputs) != len(outs):
            raise Onnx2EdgeError("inputs/outputs differ from the test data")
    return LoadedCase(g, list(ins), list(outs), fixed_names, sorted(seq_specs))


# --------------------------------------------------------------------------------------------
# The expected status of every case (tests/conformance/<target>.expected): a case newly
# passing or newly refused shows up as a diff in review, not as a silently moved floor.
# --------------------------------------------------------------------------------------------
_LABEL = {"c": "C", "mps": "MPS", "coreml": "Core ML"}
# The test that holds each target to its file (the others run a subset: their full runs build
# Swift or convert with coremltools per case).
_TEST = {"c": "tests/test_conformance_c.py"}


def expected_file(target: str) -> str:
    return f"tests/conformance/{target}.expected"


def write_expected_command(target: str) -> str:
    return f"onnx2edge conformance --target {target} --write-expected {expected_file(target)}"


EXPECTED_FILE = expected_file("c")
WRITE_EXPECTED = write_expected_command("c")


def expected_text(results: list[CaseResult], target: str = "c", note: str = "") -> str:
    """One line per case, sorted by name: `<case> passed` or `<case> unsupported: <reason>`."""
    import onnx

    header = [
        f"# Expected status of each ONNX node test case (onnx {onnx.__version__}) in the "
        f"{_LABEL.get(target, target)} backend.",
        f"# {_TEST.get(target, 'tests/test_conformance_targets.py')} fails on any difference, "
        "either way. Regenerate with:",
        f"#   {write_expected_command(target)}",
        *([f"# {note}"] if note else []),
    ]
    return "\n".join([*header, *sorted(expected_line(r) for r in results)]) + "\n"
