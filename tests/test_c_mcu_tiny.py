"""The MLPerf Tiny-style models on the Cortex-M boards (issue 31 item 4): the keyword-spotting
DS-CNN, visual wake words MobileNetV1 0.25 at 96x96, ResNet-8 on 32x32 and the anomaly-detection
autoencoder (tests/mcu_models.py, seeded random weights), float and int8 (QDQ from the
project's `quantize --mode static --per-channel --activations int8`).

Each is linked into every board's part budget (mcu.build(budget=True): the linker script's
FLASH and RAM cut to 1 MB / 256 KB for the M4F, 2 MB / 512 KB M7, 2 MB / 768 KB M33 and M55, so
an image that does not fit does not link) and run under qemu-system-arm on one board per model
and precision, compared with onnxruntime (int8 bit for bit, float within the verify
tolerance). CI time: one conversion per model and precision, for the board it runs on (int8
kernels differ by device: SMLAD on the M4 / M7 / M33, Helium on the M55; the other boards link
the same C with those kernels compiled out by their #if), -O2 only, a run on one board, links
on all four: about 30 s of CPU per model. Every board's run, and -Os, are in
tools/mcu_table.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from onnx2edge import api
from onnx2edge.backends.c import mcu
from onnx2edge.errors import Onnx2EdgeError
from onnx2edge.runtime import ort_run

from conftest import save
from mcu_models import CONVERT_OPTIONS, TINY_MODELS, inputs_for, quantized

MISSING = mcu.missing_tools()
pytestmark = pytest.mark.skipif(MISSING is not None, reason=f"Cortex-M toolchain: {MISSING}")

# model -> (board of the float run, board of the int8 run): each board runs two models
RUN_ON = {
    "ds_cnn": ("cortex-m33", "cortex-m55"),
    "vww": ("cortex-m7", "cortex-m4"),
    "resnet8": ("cortex-m4", "cortex-m7"),
    "ad": ("cortex-m55", "cortex-m33"),
}
# float images that do not fit the part, and the linker's reason: VWW's float arena (257 KB)
# is over the M4F's 256 KB of RAM; the autoencoder's float weights (1.01 MB) over its 1 MB of flash
NO_FIT = {
    ("vww", "cortex-m4"): "region `RAM' overflowed",
    ("ad", "cortex-m4"): "flash over the part budget of 1024 KB",
}


def _close(got: np.ndarray, ref: np.ndarray) -> bool:
    return float(np.abs(got - ref).max()) <= 1e-6 + 1e-4 * float(np.abs(ref).max())


@pytest.mark.parametrize("name", list(TINY_MODELS))
def test_tiny_model_fits_every_part_and_matches(tmp_path: Path, name: str) -> None:
    """int8: links into every part and matches onnxruntime exactly on its board; float: links
    where it fits (everywhere but the two NO_FIT pairs, which must fail to link with the
    linker's reason) and matches onnxruntime on its board. The keyword and ResNet-8 models fit
    every part in float too (issue 31's targets)."""
    model = TINY_MODELS[name]()
    fp = save(model, tmp_path / f"{name}.onnx")
    srcs = {"float": fp, "int8": quantized(model, tmp_path, name)}
    for prec, src in srcs.items():
        run_on = RUN_ON[name][prec == "int8"]
        opts = {"device": run_on, **(CONVERT_OPTIONS.get(name, {}) if prec == "float" else {})}
        out = tmp_path / f"{name}_{prec}"
        api.convert(src, "c", out, options=opts)
        for board in mcu.BOARDS:
            work = out / ".build" / board
            why = NO_FIT.get((name, board)) if prec == "float" else None
            if why:  # it links on the board's 4 MB, not into the part
                mcu.build(out, board, build_dir=work)
                with pytest.raises(Onnx2EdgeError, match=why.replace("`", ".")):
                    mcu.build(out, board, budget=True, build_dir=work)
                continue
            image = mcu.build(out, board, budget=True, build_dir=work)
            if board != run_on:
                continue
            proto = onnx.load(str(src))
            x = inputs_for(proto, seed=11)
            manifest = json.loads((out / "onnx2edge.json").read_text())
            got, st = mcu.run_image(image, manifest, x)
            for k, r in ort_run(proto, x).items():
                ok = np.array_equal(got[k], r) if prec == "int8" else _close(got[k], r)
                assert ok, (name, prec, board, k, np.abs(got[k] - r).max())
            # the stack the budget reserved held the run (the harness's own frames included)
            assert 0 < st.stack_bytes < mcu.PART_STACK_BYTES, st.stack_bytes
