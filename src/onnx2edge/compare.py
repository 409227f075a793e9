"""Numerical verification of a converted model against onnxruntime: the comparison (the
`verify` command itself is `api.verify`; `onnx2edge.verify` re-exports this module).

The reference is always onnxruntime running the user's original file. The candidate is the
model after the frontend and passes, re-emitted as ONNX (`target="onnx"`), or a backend's
generated code built and run (`target="c"`, `"mps"`).

A tensor passes when max|ours - ref| <= atol + rtol * max|ref|: the error is measured
against the tensor's scale, so a 1e-4 relative tolerance means "1e-4 of the largest output",
which is what float32 reassociation in a different kernel order can produce.

Deep networks amplify rounding: on Inception-v3 onnxruntime's own optimised and unoptimised
runs of the same file differ by 1.2e-4 of the largest logit, more than that tolerance. An
output that misses the tolerance is therefore also compared with onnxruntime's unoptimised run
(`within_spread`), and passes when its error is at most SPREAD_FACTOR times that spread: the
distance between two correct float32 implementations on this model and input. `--strict` (or
`spread=False`) turns the allowance off. The benchmark harness applies the same rule.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from .ir import Graph


@dataclass
class TensorReport:
    name: str
    shape: tuple[int, ...]
    max_abs: float
    max_rel: float  # max_abs / max|ref|
    ok: bool
    node: str = ""  # producing node, for per-layer reports
    op: str = ""
    # onnxruntime optimised vs unoptimised (max_rel), when the allowance decided `ok`
    ort_spread_rel: float | None = None
    exact: bool = False  # an integer / bool tensor: compared for equality
    quant_step: bool = False  # a quantized output: within one step of the format's runtime
    # a QDQ model's DequantizeLinear output judged in steps: the share of elements one step off
    step_share: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "shape": list(self.shape),
            "max_abs_error": self.max_abs,
            "max_rel_error": self.max_rel,
            "ok": self.ok,
            **({"node": self.node, "op": self.op} if self.node else {}),
            **({"ort_spread_rel": self.ort_spread_rel} if self.ort_spread_rel is not None else {}),
            **({"step_share": self.step_share} if self.step_share is not None else {}),
        }

    def tolerance(self, rtol: float, atol: float) -> str:
        """The rule that decided `ok`, in words: the one `format` and `--json` state."""
        if self.exact:
            return "exact (integer / bool tensor)"
        if self.quant_step and self.step_share is not None:
            return (
                "within one step of its DequantizeLinear scale, on at most 1% of elements "
                f"({self.step_share:.2%} one step off; {atol:g} + {rtol:g} * max|ref| missed)"
            )
        if self.quant_step:
            return "within one quantization step (int8 output)"
        if self.ort_spread_rel is not None:
            return (
                f"max|err| <= {SPREAD_FACTOR:g}x onnxruntime's own optimised-vs-unoptimised "
                f"difference ({self.ort_spread_rel:.2g} of max|ref|), {atol:g} + {rtol:g} * "
                "max|ref| missed"
            )
        return f"max|err| <= {atol:g} + {rtol:g} * max|ref|"

    def note(self) -> str:
        if self.step_share is not None:
            verdict = "within" if self.ok else "beyond"
            return (
                f" ({verdict} one step of its DequantizeLinear scale on at most 1% of elements: "
                f"{self.step_share:.2%} one step off)"
            )
        if self.ort_spread_rel is None:
            return ""
        verdict = "within" if self.ok else "beyond"
        placed = (
            "NaN / Inf as in onnxruntime's unoptimised run; "
            if self.ok and (self.max_abs == float("inf"))
            else ""
        )
        return (
            f" ({placed}{verdict} {SPREAD_FACTOR:g}x onnxruntime's own optimised-vs-unoptimised "
            f"difference, {self.ort_spread_rel:.2g})"
        )


@dataclass
class VerifyReport:
    target: str
    rtol: float
    atol: float
    outputs: list[TensorReport]
    layers: list[TensorReport] = field(default_factory=list)
    arch: str | None = None  # C target: the instruction set built for (--arch); None: default
    # What the candidate ran on, from the backend (Backend.describe_run): a binary built for
    # this host, a CPU model of the target, an evaluator of the file... never implied.
    ran_on: str = ""
    # The reference: "" for onnxruntime on the model; LiteRT / OpenVINO for imported models.
    reference: str = ""

    @property
    def tolerance_applied(self) -> str:
        """The tolerance each output was judged by: the rtol / atol rule, or for outputs
        that missed it and were judged against onnxruntime's own spread, that rule."""
        rules = {o.name: o.tolerance(self.rtol, self.atol) for o in self.outputs}
        if len(set(rules.values())) <= 1:
            return next(
                iter(rules.values()), f"max|err| <= {self.atol:g} + {self.rtol:g} * max|ref|"
            )
        return "; ".join(f"{n}: {r}" for n, r in rules.items())

    # The target's own checks of the written files (Backend.verify_details): (passed, line)
    details: list[tuple[bool, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(o.ok for o in self.outputs) and all(ok for ok, _ in self.details)

    @property
    def first_divergence(self) -> TensorReport | None:
        return next((r for r in self.layers if not r.ok), None)

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "target": self.target,
            "ok": self.ok,
            "rtol": self.rtol,
            "atol": self.atol,
            "tolerance_applied": self.tolerance_applied,
            "ran_on": self.ran_on,
            **({"reference": self.reference} if self.reference else {}),
            "outputs": [
                {**o.as_dict(), "tolerance_applied": o.tolerance(self.rtol, self.atol)}
                for o in self.outputs
            ],
        }
        if self.arch:
            d["arch"] = self.arch
        if self.details:
            d["details"] = [{"ok": ok, "detail": line} for ok, line in self.details]
        if self.layers:
            fd = self.first_divergence
            d["layers"] = [r.as_dict() for r in self.layers]
            d["first_divergence"] = fd.as_dict() if fd else None
        return d

    def format(self) -> str:
        lines = []
        for o in self.outputs:
            lines.append(
                f"{'ok  ' if o.ok else 'FAIL'} {o.name} {'x'.join(map(str, o.shape))}: "
                f"max abs error {o.max_abs:.3g}, max rel error {o.max_rel:.3g}{o.note()}"
            )
        if self.layers:
            fd = self.first_divergence
            lines.append(
                f"per-layer: {sum(r.ok for r in self.layers)}/{len(self.layers)} intermediate tensors match"
            )
            if fd is not None:
                lines.append(
                    f"first divergence: node '{fd.node}' ({fd.op}) output '{fd.name}': "
                    f"max abs error {fd.max_abs:.3g}, max rel error {fd.max_rel:.3g}"
                )
        lines += [f"{'ok  ' if ok else 'FAIL'} {line}" for ok, line in self.details]
        verdict = "PASS" if self.ok else "FAIL"
        arch = f" (--arch {self.arch})" if self.arch else ""
        ran = f", ran on {self.ran_on}" if self.ran_on else ""
        ran += f", compared with {self.reference}" if self.reference else ""
        lines.append(
            f"{verdict}: target {self.target}{arch}{ran}; tolerance {self.tolerance_applied}"
        )
        return "\n".join(lines)


def compare(name: str, ours: np.ndarray, ref: np.ndarray, rtol: float, atol: float) -> TensorReport:
    ours, ref = np.asarray(ours), np.asarray(ref)
    if ours.shape != ref.shape:
        return TensorReport(name, tuple(ref.shape), float("inf"), float("inf"), False)
    if ref.size == 0:
        return TensorReport(name, tuple(ref.shape), 0.0, 0.0, True)
    if ref.dtype.kind not in "fc":
        diff = (
            np.abs(ours.astype(np.float64) - ref.astype(np.float64))
            if ref.dtype.kind != "b"
            else (ours != ref).astype(np.float64)
        )
        err = float(diff.max())
        return TensorReport(name, tuple(ref.shape), err, err, err == 0.0, exact=True)
    r, o = ref.astype(np.float64), ours.astype(np.float64)
    same_nonfinite = _same_nonfinite(o, r)
    finite = np.isfinite(r) & np.isfinite(o)
    err = float(np.abs(o[finite] - r[finite]).max()) if finite.any() else 0.0
    scale = float(np.abs(r[finite]).max()) if finite.any() else 0.0
    rel = err / scale if scale > 0 else (0.0 if err == 0 else float("inf"))
    if not same_nonfinite:  # a NaN / Inf out of place is an unbounded error
        err = rel = float("inf")
    ok = same_nonfinite and err <= atol + rtol * scale
    return TensorReport(name, tuple(ref.shape), err, rel, ok)


SPREAD_FACTOR = 2.0


def within_spread(
    rep: TensorReport, ours: np.ndarray, plain: np.ndarray, ref: np.ndarray
) -> TensorReport:
    """`rep` (the comparison of `ours` with the optimised reference `ref`) judged again against
    onnxruntime's own spread, `plain` being its unoptimised run. Only float tensors get the
    allowance. NaN / Inf must sit where one of onnxruntime's two runs has them: its NCHWc
    kernels (optimised run) turn some Inf - Inf sums into NaN where its plain kernels keep the
    Inf, so on such inputs the two runs disagree on placement, not only on rounding."""
    ref = np.asarray(ref)
    if rep.ok or ref.dtype.kind not in "fc" or np.shape(ours) != ref.shape:
        return rep
    spread = _finite_error(plain, ref)
    scale = float(np.abs(ref[np.isfinite(ref)]).max()) if np.isfinite(ref).any() else 0.0
    placed = _same_nonfinite(ours, ref) or _same_nonfinite(ours, plain)
    ok = placed and _finite_error(ours, ref) <= SPREAD_FACTOR * spread
    rel = spread / scale if scale > 0 else (0.0 if spread == 0 else float("inf"))
    return replace(rep, ok=ok, ort_spread_rel=rel)


def _finite_error(a: np.ndarray, b: np.ndarray) -> float:
    """max|a - b| where both are finite."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    both = np.isfinite(a) & np.isfinite(b)
    return float(np.abs(a[both] - b[both]).max()) if both.any() else 0.0


def _same_nonfinite(ours: np.ndarray, ref: np.ndarray) -> bool:
    """NaN where the reference has NaN, the same infinities where it has them, and no
    infinity where it is finite (an error the finite-only max would not see)."""
    o, r = np.asarray(ours, np.float64), np.asarray(ref, np.float64)
    inf = np.isinf(r)
    return bool(
        np.array_equal(np.isnan(o), np.isnan(r))
        and np.array_equal(np.isinf(o), inf)
        and np.array_equal(o[inf], r[inf])
    )


def compare_all(
    names: list[str],
    ours: Mapping[str, np.ndarray],
    ref: Mapping[str, np.ndarray],
    rtol: float,
    atol: float,
    graph: Graph | None = None,
) -> list[TensorReport]:
    out = []
    for n in names:
        if n not in ours or n not in ref:
            continue
        rep = compare(n, ours[n], ref[n], rtol, atol)
        if graph is not None and (p := graph.producer(n)) is not None:
            rep.node, rep.op = p.name, p.op_type
        out.append(rep)
    return out
