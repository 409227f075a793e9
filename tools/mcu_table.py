"""Flash, RAM and instructions per inference of the microcontroller models on QEMU's boards
(issue 31): writes the tables of docs/mcu.md.

Each model (tiny_cnn, the digits CNN and the MLPerf Tiny-style set of tests/mcu_models.py: the
DS-CNN keyword spotter, visual wake words MobileNetV1 0.25, ResNet-8 and the anomaly-detection
autoencoder; float and int8 QDQ from `quantize`) is converted with `--device <board>` (plus
mcu_models.CONVERT_OPTIONS) and, for the arena column, also for `generic`; linked at -O2 into
the part's budget (mcu.build(budget=True): "fits" is whether that link succeeded, else the
linker's reason, and the counts come from the same code linked into the board's memory);
built with arm-none-eabi-gcc at -O2 (and -Os); run under
qemu-system-arm -icount shift=0 on the board, checked against onnxruntime (float within the
verify tolerance, int8 exactly). Sizes are the model object's own (model.o, `size -A`): flash =
.text + .rodata + .data, RAM = .data + .bss (the arena) + the run's stack peak; the harness (startup, semihosting,
newlib's memcpy / memset) is not counted. Instructions: SysTick ticks of one inference at the
board's clock under -icount shift=0 (1 instruction = 1 ns), calibrated by
tests/test_c_mcu.py::test_instruction_count_is_calibrated.

    PYTHONPATH=src python3 tools/mcu_table.py [--boards cortex-m4,...] [--models a,b] [--opts -O2]
        [-o docs/mcu_table.md]       # every model, board, -O2 and -Os: about 15 minutes
    PYTHONPATH=src python3 tools/mcu_table.py --profile --models ds_cnn_int8 --boards cortex-m4

--profile: instructions per node instead (the model's trace hook, mcu.build(profile=True)).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from onnx2edge import api  # noqa: E402
from onnx2edge.backends.c import mcu  # noqa: E402
from onnx2edge.errors import Onnx2EdgeError  # noqa: E402
from onnx2edge.runtime import ort_run  # noqa: E402

from mcu_models import (  # noqa: E402
    CONVERT_OPTIONS,
    TINY_MODELS,
    digits_cnn,
    inputs_for,
    quantized,
)


def models(d: Path, only: set[str] | None = None) -> dict[str, Path]:
    """{name: ONNX file}, float and int8 of each (only the `only` names when given)."""
    from conftest import save

    builders = {"digits": digits_cnn, **TINY_MODELS}
    out: dict[str, Path] = {}
    if not only or "tiny_cnn" in only:
        out["tiny_cnn"] = ROOT / "examples" / "tiny_cnn.onnx"
    for name, build in builders.items():
        if only and not {name, f"{name}_int8"} & only:
            continue
        m = build()
        out[name] = save(m, d / f"{name}.onnx")
        out[f"{name}_int8"] = quantized(m, d, name)
    return {k: v for k, v in out.items() if not only or k in only}


def _convert_options(name: str) -> dict[str, str]:
    return {} if name.endswith("_int8") else CONVERT_OPTIONS.get(name, {})


def _fits(out: Path, board: str) -> tuple[str, mcu.Image | None]:
    """("yes", the -O2 image linked into the part's budget), or (the linker's reason, None)."""
    try:
        return "yes", mcu.build(out, board, "-O2", budget=True, build_dir=out / ".budget")
    except Onnx2EdgeError as e:
        m = re.search(r"region .(\w+)' overflowed by (\d+) bytes", str(e))
        if m:
            return f"no: {m.group(1)} +{int(m.group(2)) / 1024:.1f} KB", None
        if "flash over the part budget" in str(e):
            return "no: flash", None
        raise


def measure(name: str, src: Path, board: str, work: Path, macs: int, opts: list[str]) -> dict:
    proto = onnx.load(str(src))
    x = inputs_for(proto, seed=7)
    ref = ort_run(proto, x)
    copts = _convert_options(name)
    gen_dir = work / f"{name}_generic"
    generic = (
        json.loads((gen_dir / "onnx2edge.json").read_text())["stats"]
        if (gen_dir / "onnx2edge.json").is_file()
        else api.convert(src, "c", gen_dir, options=copts or None).stats
    )
    out = work / f"{name}_{board}"
    stats = api.convert(src, "c", out, options={"device": board, **copts}).stats
    fits, budget_image = _fits(out, board)
    row = {
        "model": name + (f" ({', '.join(copts.values())})" if copts else ""),
        "board": board,
        "macs": macs,
        "arena_generic": generic["arena_bytes"],
        "arena_planned": stats["arena_bytes"],
        "weight_bytes": stats["weight_bytes"],
        "fits": fits,
    }
    for opt in opts:
        image = budget_image if opt == "-O2" and budget_image else mcu.build(out, board, opt)
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
            "ram": fp["ram"] + st.stack_bytes,
            "instructions": st.instructions,
            "touched": st.arena_touched,
            "stack": st.stack_bytes,
        }
    return row


def profile(name: str, src: Path, board: str, work: Path) -> str:
    out = work / f"{name}_{board}_prof"
    api.convert(src, "c", out, options={"device": board, **_convert_options(name)})
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
    opts = [o for o in ("-O2", "-Os") if o in rows[0]] if rows else ["-O2"]
    both = len(opts) == 2
    sl = " / ".join(opts)
    head = (
        "| model | board | MACs | arena generic KB | arena planned KB (--device) | touched KB "
        f"| planned / touched | flash KB {sl} (convert: weights KB) | RAM KB (+ stack) | stack B "
        f"| fits the part | instructions {sl} | instr / MAC -O2 |\n"
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|\n"
    )
    lines = []
    for r in rows:
        o2 = r["-O2"]
        alt = r["-Os"] if both else None
        flash = kb(o2["flash"]) + (f" / {kb(alt['flash'])}" if alt else "")
        ins = f"{o2['instructions']:,}" + (f" / {alt['instructions']:,}" if alt else "")
        lines.append(
            f"| {r['model']} | {r['board']} | {r['macs']:,} | {kb(r['arena_generic'])} "
            f"| {kb(r['arena_planned'])} | {kb(o2['touched'])} "
            f"| {r['arena_planned'] / max(o2['touched'], 1):.3f} "
            f"| {flash} ({kb(r['weight_bytes'])}) "
            f"| {kb(o2['ram'])} | {o2['stack']} | {r['fits']} "
            f"| {ins} | {o2['instructions'] / max(r['macs'], 1):.2f} |"
        )
    return head + "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--boards", default=",".join(mcu.BOARDS))
    p.add_argument("--models", default="", help="comma-separated names (default: all)")
    p.add_argument("--opts", default="-O2,-Os", help="optimisation levels (-O2 first)")
    p.add_argument("-o", "--out", type=Path)
    p.add_argument("--profile", action="store_true", help="per-node instruction counts")
    a = p.parse_args()
    why = mcu.missing_tools()
    if why:
        raise SystemExit(why)
    rows = []
    with tempfile.TemporaryDirectory(prefix="o2e-mcu-table-") as tmp:
        d = Path(tmp)
        srcs = models(d, set(a.models.split(",")) if a.models else None)
        if a.profile:
            for name, src in srcs.items():
                for board in a.boards.split(","):
                    print(profile(name, src, board, d))
            return
        for name, src in srcs.items():
            fp32 = src if "int8" not in name else d / f"{name.removesuffix('_int8')}.onnx"
            macs = int(api.inspect(fp32 if fp32.is_file() else src)["total_macs"])
            for board in a.boards.split(","):
                rows.append(measure(name, src, board, d, macs, a.opts.split(",")))
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    text = table(rows)
    if a.out:
        a.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
