#!/usr/bin/env python3
"""What the cache state costs each node: the same generated C timed plain and with buffers
touched just before each node, outside its timer.

Variants (one conversion, four builds, run in turn for several rounds as tools/ab_nodes.py
does; per-node minima of thread CPU time):
  plain      the generated C as it is
  warm_out   each node's arena outputs read once (every 64th byte) before the node: its
             stores then find their lines cached instead of fetching them (write-allocate)
  warm_w     each node's weights read once before the node
  warm_both  both

warm_out bounds from above what any arena placement can win on a node: the best a planner
can do is put the output on bytes touched just before, and warm_out touches all of them (a
buffer larger than L2 still loses its first part before the node runs, here as with any
plan). Used for issue 9's arena study (ResNet50, native, shared 2-core host: warm_out 0.93 of
the plain total, the gains on the 56x56 layers whose 3.2 MB outputs no placement keeps in
a 1.25 MB L2).

    python tools/ab_warm.py resnet50.onnx --src /path/to/onnx2edge/src --arch native
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ab_nodes  # noqa: E402  (the sibling tool: conversion, harness, build)

ITEMSIZE = {"float": 4, "double": 8, "int8_t": 1, "uint8_t": 1, "int16_t": 2, "uint16_t": 2}
ITEMSIZE |= {"int32_t": 4, "uint32_t": 4, "int64_t": 8, "uint64_t": 8, "char": 1, "bool": 1}
WARM = (
    "static void o2e_warm(const void *p, size_t n) { volatile const unsigned char *q = p;"
    " unsigned char s = 0; for (size_t i = 0; i < n; i += 64) s += q[i]; (void)s; }"
)
VARIANTS = [
    ("plain", ""),
    ("warm_out", "-DO2E_WARM"),
    ("warm_w", "-DO2E_WARMW"),
    ("warm_both", "-DO2E_WARM -DO2E_WARMW"),
]


def _nbytes(ctype: str, shape: str) -> int:
    dims = [int(v) for v in shape.split("x") if v]
    return int(np.prod(dims, dtype=np.int64)) * ITEMSIZE.get(ctype, 4)


def instrument(c: str) -> str:
    """model.c with `#ifdef O2E_WARM / O2E_WARMW` touches before every node block, read from
    the arena tensors' and weights' declarations (their shape comments give their sizes)."""
    outs = {
        m[2]: _nbytes(m[1], m[3])
        for m in re.finditer(
            r"(\w+) \*const (T_\w+) = \(\w+ \*\)\(o2e_arena \+ \d+\);  /\* .*: ([\dx]*) \*/", c
        )
    }
    weights = {
        m[1]: _nbytes(m[2], m[3])
        for m in re.finditer(
            r"#define (W_\w+) \(\(const (\w+) \*\)\(o2e_\w+ \+ \d+\)\)  /\* .*: ([\dx]*) \*/", c
        )
    }
    lines = c.split("\n")
    new: list[str] = []
    for i, line in enumerate(lines):
        if line.startswith("void ") and "_profile(double *ms)" in line:
            new.append(WARM)
        if re.match(r"\s*/\* node .* \*/$", line):
            j = i
            while "O2E_PROF(" not in lines[j]:
                j += 1
            written = [s for s in re.findall(r"\bT_\w+", lines[j]) if s in outs]
            read = sorted(
                {w for w in re.findall(r"\bW_\w+", "\n".join(lines[i:j])) if w in weights}
            )
            new += ["#ifdef O2E_WARM", *(f"  o2e_warm({s}, {outs[s]});" for s in written)]
            new += ["#endif", "#ifdef O2E_WARMW"]
            new += [*(f"  o2e_warm({w}, {weights[w]});" for w in read), "#endif"]
            new += ["#if defined(O2E_WARM) || defined(O2E_WARMW)", "  o2e_t0 = o2e_prof_now();"]
            new.append("#endif")
        new.append(line)
    return "\n".join(new)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", type=Path)
    ap.add_argument("--src", type=Path, default=ab_nodes.ROOT / "src", help="onnx2edge src tree")
    ap.add_argument("--arch", default="native")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--min-ms", type=float, default=0.3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="ab_warm_") as tmp:
        work = Path(tmp)
        gen = work / "gen"
        ab_nodes.convert(args.model, args.src.resolve(), gen)
        (gen / "model.c").write_text(instrument((gen / "model.c").read_text()))
        exes = []
        for k, (_, flags) in enumerate(VARIANTS):
            (work / f"v{k}").mkdir()
            exes.append(work / f"v{k}" / "run")
            ab_nodes.build(gen, args.arch, flags, exes[-1])
        weights = gen / "model_weights.bin"
        cmd = [str(weights) if weights.exists() else "", str(args.runs)]
        best = ab_nodes.interleave([[str(exe), *cmd] for exe in exes], args.rounds)
        names = ab_nodes.node_names((gen / "model.c").read_text())
    label = "node (min ms; ratio to plain)"
    ab_nodes.print_table(label, names, [n for n, _ in VARIANTS], best, args.min_ms)
    return 0


if __name__ == "__main__":
    sys.exit(main())
