"""Instructions per multiply-accumulate of the int8 Cortex-M kernels (issue 31), per kernel
and board: the markdown rows of docs/mcu.md's kernel table.

    PYTHONPATH=src python3 tools/mcu_kernels.py

Each kernel runs alone under qemu-system-arm -icount (deterministic: the counts do not depend
on the host) through tests/test_c_mcu_kernels.py's driver, which also checks its output bytes
against numpy's onnxruntime-order requantisation."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import test_c_mcu_kernels as k  # noqa: E402

BOARDS = ("cortex-m4", "cortex-m7", "cortex-m33", "cortex-m55")


def cases() -> dict[str, tuple[k.Case, bool]]:
    """{label: (case, Helium only)}"""
    return {
        "pointwise 1x1, M 64, K 64, 250 px, int8 out (o2e_qgemm_rows)": (
            k.gemm_case(64, 250, 64, signed=True),
            False,
        ),
        "pointwise 1x1, same, uint8 out with a fused Relu": (
            k.gemm_case(64, 250, 64, out="u8relu"),
            False,
        ),
        "conv 3x3 as GEMM, M 32, K 144, 16 px": (k.gemm_case(32, 16, 144, signed=True), False),
        "fully connected batch 1, 128 x 256 (o2e_qgemv)": (k.fc_case(128, 256, out="s8"), False),
        "fully connected batch 1, 12 x 64 (o2e_qgemv)": (k.fc_case(12, 64, out="s8"), False),
        "depthwise 3x3 s1, 64 ch of 25 x 5 (o2e_qdwn)": (k.depthwise_case(64, 25, 5), False),
        "depthwise 3x3 s2, 32 ch of 48 x 48 (o2e_qdwn)": (
            k.depthwise_case(32, 48, 48, stride=2),
            False,
        ),
        "depthwise 3x3 s1, 64 ch of 25 x 5 (o2e_qdwc, generic)": (
            k.depthwise_case(64, 25, 5, nchw=False),
            False,
        ),
        "Helium pointwise, M 64, K 64, 250 px (o2e_qgemm16)": (
            k.gemm_case(64, 250, 64, signed=True, k16=True),
            True,
        ),
        "Helium fully connected batch 1, 10 x 512 (o2e_qgemm16)": (
            k.gemm_case(10, 1, 512, k16=True),
            True,
        ),
    }


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        print("| kernel, shape | " + " | ".join(BOARDS) + " |")
        print("|---|" + "---:|" * len(BOARDS))
        for i, (label, (case, mve)) in enumerate(cases().items()):
            cells = []
            for arch in BOARDS:
                if mve and arch != "cortex-m55":
                    cells.append("-")
                    continue
                bad, ipm = k.run_case(case, arch, Path(tmp) / f"{i}_{arch}")
                if bad:
                    print(f"{label} on {arch}: {bad} bytes differ", file=sys.stderr)
                    return 1
                cells.append(f"{ipm:.2f}")
            print(f"| {label} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
