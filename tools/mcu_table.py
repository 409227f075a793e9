"""Flash, RAM and instructions per inference of the microcontroller models on QEMU's boards
(issue 31): writes the tables of docs/mcu.md.

Each model (tiny_cnn, the digits CNN and the DS-CNN keyword spotter of tests/mcu_models.py,
float and int8 QDQ from `quantize`) is converted with `--device <board>` and, for the arena
column, also for `generic`; built with arm-none-eabi-gcc at -O2 (and -Os for flash); run under
qemu-system-arm -icount shift=0 on the board, checked against onnxruntime (float within the
verify tolerance, int8 exactly). Sizes are the model object's own (model.o, `size -A`): flash =
.text + .rodata + .data, RAM = .data + .bss (the arena); the harness (startup, semihosting,
newlib's memcpy / memset) is not counted. Instructions: SysTick ticks of one inference at the
board's clock under -icount shift=0 (1 instruction = 1 ns), calibrated by
tests/test_c_mcu.py::test_instruction_count_is_calibrated.

    PYTHONPATH=src python3 tools/mcu_table.py [--boards cortex-m4,...] [-o docs/mcu_table.md]
    PYTHONPATH=src python3 tools/mcu_table.py --profile --models ds_cnn_int8 --boards cortex-m4

--profile: instructions per node instead (the model's trace hook, mcu.build(profile=True)).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from onnx2edge import api  # noqa: E402
from onnx2edge.backends.c import mcu  # noqa: E402
from onnx2edge.runtime import ort_run  # noqa: E402

from mcu_models import digits_cnn, ds_cnn, inputs_for, quantized  # noqa: E402


def models(d: Path) -> dict[str, Path]:
    from conftest import save

    return {
        "tiny_cnn": ROOT / "examples" / "tiny_cnn.onnx",
        "digits": save(digits_cnn(), d / "digits.onnx"),
        "digits_int8": quantized(digits_cnn(), d, "digits"),
        "ds_cnn": save(ds_cnn(), d / "ds_cnn.onnx"),
        "ds_cnn_int8": quantized(ds_cnn(), d, "ds_cnn"),
    }


def measure(name: str, src: Path, board: str, work: Path, macs: int) -> dict:
    proto = onnx.load(str(src))
    x = inputs_for(proto, seed=7)
    ref = ort_run(proto, x)
    generic = api.convert(src, "c", work / f"{name}_generic").stats
    out = work / f"{name}_{board}"
    stats = api.convert(src, "c", out, options={"device": board}).stats
    row = {
        "model": name,
        "board": board,
        "macs": macs,
        "arena_generic": generic["arena_bytes"],
        "arena_planned": stats["arena_bytes"],
        "weight_bytes": stats["weight_bytes"],
    }
    for opt in ("-O2", "-Os"):
        image = mcu.build(out, board, opt)
        manifest = json.loads((out / "onnx2edge.json").read_text())
        got, st = mcu.run_image(image, manifest, x)
        for k, r in ref.items():
            if "int8" in name:
                ok = np.array_equal(got[k], r)
            else:
                ok = np.abs(got[k] - r).max() <= 1e-6 + 1e-4 * np.abs(r).max()
            if not ok:
                raise SystemExit(f"{name} on {board} {opt}: {k} does not match onnxruntime")
        fp = mcu.footprint(image.objects["model"])
        row[opt] = {
            "flash": fp["flash"],
            "ram": fp["ram"],
            "instructions": st.instructions,
            "touched": st.arena_touched,
            "stack": st.stack_bytes,
        }
    return row


def profile(name: str, src: Path, board: str, work: Path) -> str:
    out = work / f"{name}_{board}_prof"
    api.convert(src, "c", out, options={"device": board})
    image = mcu.build(out, board, profile=True, build_dir=out / ".prof")
    manifest = json.loads((out / "onnx2edge.json").read_text())
    _, st = mcu.run_image(image, manifest, inputs_for(onnx.load(str(src)), seed=7))
    total = sum(n for _, n in st.nodes)
    lines = [
        f"{name} on {board} (-O2): {st.instructions:,} instructions",
        "",
        "| node output | instructions | share |",
        "|---|---:|---:|",
    ]
    lines += [f"| {t} | {n:,} | {n / total:.1%} |" for t, n in st.nodes]
    return "\n".join(lines) + "\n"


def kb(n: int) -> str:
    return f"{n / 1024:.1f}"


def table(rows: list[dict]) -> str:
    head = (
        "| model | board | MACs | arena generic KB | arena planned KB (--device) | touched KB "
        "| planned / touched | flash KB -O2 / -Os (convert: weights KB) | RAM KB | stack B "
        "| instructions -O2 / -Os | instr / MAC -O2 |\n"
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
    )
    lines = []
    for r in rows:
        o2, os_ = r["-O2"], r["-Os"]
        lines.append(
            f"| {r['model']} | {r['board']} | {r['macs']:,} | {kb(r['arena_generic'])} "
            f"| {kb(r['arena_planned'])} | {kb(o2['touched'])} "
            f"| {r['arena_planned'] / max(o2['touched'], 1):.3f} "
            f"| {kb(o2['flash'])} / {kb(os_['flash'])} ({kb(r['weight_bytes'])}) "
            f"| {kb(o2['ram'])} | {o2['stack']} "
            f"| {o2['instructions']:,} / {os_['instructions']:,} "
            f"| {o2['instructions'] / max(r['macs'], 1):.2f} |"
        )
    return head + "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--boards", default=",".join(mcu.BOARDS))
    p.add_argument("--models", default="")
    p.add_argument("-o", "--out", type=Path)
    p.add_argument("--profile", action="store_true", help="per-node instruction counts")
    a = p.parse_args()
    why = mcu.missing_tools()
    if why:
        raise SystemExit(why)
    rows = []
    with tempfile.TemporaryDirectory(prefix="o2e-mcu-table-") as tmp:
        d = Path(tmp)
        srcs = models(d)
        if a.models:
            srcs = {k: v for k, v in srcs.items() if k in a.models.split(",")}
        if a.profile:
            for name, src in srcs.items():
                for board in a.boards.split(","):
                    print(profile(name, src, board, d))
            return
        for name, src in srcs.items():
            fp32 = src if "int8" not in name else d / f"{name.removesuffix('_int8')}.onnx"
            macs = int(api.inspect(fp32 if fp32.is_file() else src)["total_macs"])
            for board in a.boards.split(","):
                rows.append(measure(name, src, board, d, macs))
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    text = table(rows)
    if a.out:
        a.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
