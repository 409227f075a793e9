#!/usr/bin/env python3
"""How far onnxruntime's default session moves a quantized model's accuracy on an AVX2 CPU.

Quantizes the digits CNN (tests/fixtures/digits) per channel with `onnx2edge quantize`, then
prints the RMS error of its logits against the fp32 model, once through the exact reference
session (runtime.ort_session, as `quantize` and `verify` run it) and once through onnxruntime's
default session. Run it natively and under an emulated AVX2-only CPU to compare:

    python tools/quant_ort_avx2.py
    qemu-x86_64 -cpu Haswell "$(python3 -c 'import sys; print(sys.executable)')" tools/quant_ort_avx2.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402

import onnx2edge  # noqa: E402
from onnx2edge.runtime import ort_session  # noqa: E402

DIGITS = ROOT / "tests" / "fixtures" / "digits"


def _x(digits: dict[str, np.ndarray], part: str, n: int | None = None) -> np.ndarray:
    return (digits[f"x_{part}"][:n] / 16).astype(np.float32).reshape(-1, 1, 8, 8)


def _rms_rel(got: np.ndarray, ref: np.ndarray) -> float:
    return float(np.sqrt(((got - ref) ** 2).sum() / (ref**2).sum()))


def main() -> int:
    with np.load(DIGITS / "digits.npz") as z:
        digits = dict(z)
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        np.savez(d / "calib.npz", input=_x(digits, "train", 64))
        q = d / "q.onnx"
        onnx2edge.quantize(
            DIGITS / "cnn.onnx", q, mode="static", calib=d / "calib.npz", per_channel=True
        )
        x = _x(digits, "test")

        def run(sess: ort.InferenceSession) -> np.ndarray:
            return sess.run(None, {sess.get_inputs()[0].name: x})[0]

        ref = run(ort_session(onnx.load(DIGITS / "cnn.onnx")))
        exact = run(ort_session(onnx.load(q)))
        plain = run(ort.InferenceSession(str(q), providers=["CPUExecutionProvider"]))
    print(f"RMS error vs fp32: exact session {_rms_rel(exact, ref):.3f}, "
          f"onnxruntime default {_rms_rel(plain, ref):.3f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
