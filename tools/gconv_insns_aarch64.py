#!/usr/bin/env python3
"""Instructions a grouped 3x3 layer executes in the aarch64 (NEON) build, under qemu-aarch64.

No aarch64 machine here to time: qemu counts the instructions executed instead (deterministic,
unlike timings on a shared machine). Each layer shape (channels, groups, map size; stride 1,
pad 1, Relu) is converted as a chain of 1 and of 3 identical layers, with the default kernels
(conv_grouped.py's NEON tiles) and with `--kernels grouped=off` (the implicit GEMM); the
difference of the two chains over 2 is one layer's count, start-up and weight loading
cancelled. qemu runs with -singlestep and logs every executed block (`-d nochain,exec`), so a
logged line is one instruction: slow (minutes for RegNetX-200MF's shapes), which is why this
is a tool and not a test.

    PYTHONPATH=src python3 tools/gconv_insns_aarch64.py 368,46,7 152,19,14 56,7,28
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from onnx2edge import api
from onnx2edge.backends.c.build import arch_flags, build_executable, emulator


def chain(C: int, g: int, H: int, reps: int) -> onnx.ModelProto:
    w = np.random.default_rng(0).standard_normal((C, C // g, 3, 3)).astype(np.float32)
    nodes, cur = [], "x"
    for i in range(reps):
        nodes.append(helper.make_node("Conv", [cur, "w"], [f"c{i}"], pads=[1] * 4, group=g))
        nodes.append(helper.make_node("Relu", [f"c{i}"], [f"y{i}"]))
        cur = f"y{i}"
    vi = helper.make_tensor_value_info
    graph = helper.make_graph(
        nodes, "g", [vi("x", 1, [1, C, H, H])], [vi(cur, 1, [1, C, H, H])],
        [numpy_helper.from_array(w, "w")],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def count(model: onnx.ModelProto, work: Path, kernels: str | None) -> int:
    src = work / "m.onnx"
    onnx.save(model, src)
    out = work / (kernels or "default")
    api.convert(src, "c", out, options={"kernels": kernels} if kernels else None)
    exe = build_executable(out, arch_flags("aarch64"), name="model", arch="aarch64")
    shape = json.loads((out / "onnx2edge.json").read_text())["inputs"][0]["shape"]
    np.ones(shape, np.float32).tofile(out / "in.bin")
    qemu, *rest = emulator("aarch64")
    log = out / "exec.log"
    cmd = [qemu, "-singlestep", "-d", "nochain,exec", "-D", str(log), *rest, str(exe)]
    env = {"MODEL_WEIGHTS": str(out / "model_weights.bin"), "PATH": "/usr/bin:/bin"}
    subprocess.run([*cmd, str(out / "in.bin"), str(out / "out.bin")], check=True, env=env)
    with log.open() as f:
        return sum(1 for ln in f if ln.startswith("Trace"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("layers", nargs="+", help="C,groups,H (a square H x H map)")
    args = ap.parse_args()
    for spec in args.layers:
        C, g, H = map(int, spec.split(","))
        per = {}
        for kernels in (None, "grouped=off"):
            n = []
            for reps in (1, 3):
                with tempfile.TemporaryDirectory() as tmp:
                    n.append(count(chain(C, g, H, reps), Path(tmp), kernels))
            per[kernels] = (n[1] - n[0]) / 2
        ratio = per[None] / per["grouped=off"]
        print(
            f"C={C} groups={g} {H}x{H}: grouped {per[None]:.0f}, implicit GEMM "
            f"{per['grouped=off']:.0f} instructions a layer, ratio {ratio:.3f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
