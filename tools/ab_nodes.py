#!/usr/bin/env python3
"""Interleaved A/B of the generated C, node by node, for a machine shared with other jobs.

`onnx2edge bench --profile` times one build per call: on a 2-core machine shared by several
jobs its medians moved by up to 2x between calls (ResNet50, native: ours 80-109 ms over four
calls of the same build), far more than the kernel changes being judged. This tool instead
builds every variant once, then runs the variants in turn for several rounds (A B C C B A ...),
each run timing every node by thread CPU time (-DO2E_PROFILE), and keeps each node's minimum
over all runs of a variant: interference only adds time, so minima of interleaved runs
compare the variants under the same conditions. On ResNet50 the per-node minima of two
identical builds agreed within 1-5 % (up to 10 % on the 56x56 1x1 layers) where the medians
did not.

A variant is NAME=SRC[@KERNELS][:CFLAGS]: SRC is an onnx2edge source tree (its `src`
directory, whose converter generates the C; "." for this tree), KERNELS a `convert --kernels`
value (e.g. lanes=off, to compare two strategies of one tree) and CFLAGS extra compiler flags
(e.g. -D overrides of o2e_gemm.h's blocking). Variants with the same SRC and KERNELS share one
conversion.

    python tools/ab_nodes.py resnet50.onnx --arch native --rounds 4 --runs 8 \\
        base=/work/main/src mine=. 'kc128=.:-DO2E_GEMM_KC=128'

Prints the total (minimum over runs of the sum of the nodes) and every node above --min-ms,
with each variant's time as a ratio to the first. Weights are read by the binary at start-up,
so a run counts model_run only. onnxruntime is not timed here: use `onnx2edge bench` for the
ratio against it (this tool answers "which build is faster", not "how far from onnxruntime").
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The timing program: one warm-up call, then `runs` calls, each node's time taken from the
# difference of <name>_profile() around the call (the timers accumulate).
HARNESS = r"""
#include <stdio.h>
#include <stdlib.h>
#include "PREFIX.h"
void PREFIX_profile(double *ms);
int main(int argc, char **argv) {
  const int runs = atoi(argv[2]);
  static double p0[NNODES], p1[NNODES], best[NNODES];
  double total = 1e30;
  const void *in[NIN];
  void *out[NOUT];
  size_t in_n[NIN] = {IN_SIZES}, out_n[NOUT] = {OUT_SIZES};
  if (PREFIX_init(argv[1])) { fprintf(stderr, "PREFIX_init failed\n"); return 1; }
  size_t in_w[NIN] = {IN_WIDTHS}, out_w[NOUT] = {OUT_WIDTHS};
  int in_f[NIN] = {IN_FLOAT};
  for (int i = 0; i < NIN; ++i) {
    unsigned char *x = calloc(in_n[i], in_w[i]);
    for (size_t j = 0; j < in_n[i]; ++j) {
      if (in_f[i]) ((float *)x)[j] = (float)((j * 7919u) % 1000u) / 1000.0f - 0.5f;
      else x[j * in_w[i]] = (unsigned char)(j % 100u); /* small ids: valid Gather indices */
    }
    in[i] = x;
  }
  for (int i = 0; i < NOUT; ++i) out[i] = calloc(out_n[i], out_w[i]);
  for (int i = 0; i < NNODES; ++i) best[i] = 1e30;
  PREFIX_run(in, out);
  for (int r = 0; r < runs; ++r) {
    double t = 0.0;
    PREFIX_profile(p0);
    PREFIX_run(in, out);
    PREFIX_profile(p1);
    for (int i = 0; i < NNODES; ++i) {
      const double d = p1[i] - p0[i];
      t += d;
      if (d < best[i]) best[i] = d;
    }
    if (t < total) total = t;
  }
  printf("%.5f", total);
  for (int i = 0; i < NNODES; ++i) printf(" %.5f", best[i]);
  printf("\n");
  return 0;
}
"""


def parse_variant(text: str) -> tuple[str, tuple[Path, str], str]:
    """NAME=SRC[@KERNELS][:CFLAGS] -> (name, (source tree, kernels), cflags)."""
    name, _, rest = text.partition("=")
    src, _, cflags = rest.partition(":")
    src, _, kernels = src.partition("@")
    if not name or not src:
        raise SystemExit(f"ab_nodes: variant {text!r} is not NAME=SRC[@KERNELS][:CFLAGS]")
    path = (ROOT / "src") if src == "." else Path(src)
    if not (path / "onnx2edge").is_dir():
        raise SystemExit(f"ab_nodes: {path} has no onnx2edge package")
    return name, (path.resolve(), kernels), cflags


def convert(model: Path, src: tuple[Path, str], out: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(src[0])}
    run_cli = "import sys; from onnx2edge.cli import main; sys.exit(main(sys.argv[1:]))"
    cmd = [sys.executable, "-c", run_cli, "convert", str(model), "--target", "c"]
    if src[1]:
        cmd += ["--kernels", src[1]]
    subprocess.run([*cmd, "-o", str(out)], env=env, check=True, capture_output=True)


def node_names(model_c: str) -> dict[int, str]:
    """Node index -> the name its trace hook gives (the node's first output)."""
    found = re.findall(r'O2E_PROF\((\d+)\); O2E_TRACE\("([^"]*)"', model_c)
    return {int(i): n for i, n in reversed(found)}


# bytes per element of the dtypes the header's size comments name
WIDTHS = {"float32": 4, "float16": 2, "int64": 8, "int32": 4, "int8": 1, "uint8": 1, "bool": 1}


def io_sizes(model_h: str) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """(element count, dtype) of the inputs and outputs, from the header's
    `#define <NAME>_*_SIZE n  /* dims dtype */` lines. Integer inputs (token ids) get small
    values, float ones a fixed ramp: filling an int64 input with floats made MiniLM's
    embedding Gather read out of bounds."""
    pat = r"#define \w+_{}_\d+_SIZE\s+(\d+)\s*/\*\s*\S+\s+(\w+)\s*\*/"
    ins = [(int(n), t) for n, t in re.findall(pat.format("INPUT"), model_h)]
    outs = [(int(n), t) for n, t in re.findall(pat.format("OUTPUT"), model_h)]
    if not ins or not outs:
        raise SystemExit("ab_nodes: model.h declares no inputs / outputs")
    unknown = {t for _, t in ins + outs} - WIDTHS.keys()
    if unknown:
        raise SystemExit(f"ab_nodes: no harness fill for dtype {sorted(unknown)}")
    return ins, outs


def build(gen: Path, arch: str, cflags: str, exe: Path) -> None:
    model_c = (gen / "model.c").read_text()
    nnodes = int(re.search(r"o2e_prof_ms\[(\d+)\]", model_c).group(1))
    # the symbol prefix (convert --name; "model" before it existed)
    prefix = json.loads((gen / "onnx2edge.json").read_text()).get("stats", {}).get("name", "model")
    ins, outs = io_sizes((gen / f"{prefix}.h").read_text())
    harness = (
        HARNESS.replace("PREFIX", prefix)
        .replace("NNODES", str(nnodes))
        .replace("NIN", str(len(ins)))
        .replace("NOUT", str(len(outs)))
        .replace("IN_SIZES", ", ".join(str(n) for n, _ in ins))
        .replace("OUT_SIZES", ", ".join(str(n) for n, _ in outs))
        .replace("IN_WIDTHS", ", ".join(str(WIDTHS[t]) for _, t in ins))
        .replace("OUT_WIDTHS", ", ".join(str(WIDTHS[t]) for _, t in outs))
        .replace("IN_FLOAT", ", ".join("1" if t == "float32" else "0" for _, t in ins))
    )
    (exe.parent / "ab_main.c").write_text(harness)
    flags = ["-std=c99", "-O3", f"-march={arch}", "-ffp-contract=fast", "-D_POSIX_C_SOURCE=200809L"]
    flags += ["-DO2E_PROFILE", "-DO2E_PROF_CLOCK=CLOCK_THREAD_CPUTIME_ID", *cflags.split()]
    srcs = [str(gen / "model.c"), str(exe.parent / "ab_main.c")]
    cmd = ["gcc", *flags, f"-I{gen}", *srcs, "-o", str(exe), "-lm", "-lpthread"]
    subprocess.run(cmd, check=True)


def interleave(cmds: list[list[str]], rounds: int) -> list[list[float]]:
    """Each command's per-value minima over `rounds` rounds of running them all in turn.

    Odd rounds run them in reverse (A B C C B A ...): in a fixed order two identical builds
    differed by up to 14 % from their position alone; this order brought them within about
    1 % (the arena branch's measurement)."""
    best: list[list[float]] = [[] for _ in cmds]
    for r in range(rounds):
        order = range(len(cmds)) if r % 2 == 0 else range(len(cmds) - 1, -1, -1)
        for i in order:
            run = subprocess.run(cmds[i], check=True, capture_output=True, text=True)
            got = [float(v) for v in run.stdout.split()]
            prev = best[i] or got
            best[i] = [min(a, b) for a, b in zip(prev, got, strict=True)]
    return best


def print_table(
    label: str, names: dict[int, str], variants: list[str], best: list[list[float]], min_ms: float
) -> None:
    """The total (value 0) and every node (value i + 1) above `min_ms` in the first variant,
    each variant's time with its ratio to the first."""
    ref = best[0]
    print(f"{label:48s}" + "".join(f" {n:>14s}" for n in variants))
    rows = [("total", 0)] + [(names.get(i, f"node {i}"), i + 1) for i in range(len(ref) - 1)]
    for name, k in rows:
        if k and ref[k] < min_ms:
            continue
        cells = "".join(
            f" {b[k]:7.3f} {b[k] / ref[k]:5.2f}" if ref[k] > 0 else f" {b[k]:7.3f}   -  "
            for b in best
        )
        print(f"{name[:48]:48s}{cells}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", type=Path)
    ap.add_argument(
        "variants", nargs="+", help="NAME=SRC[@KERNELS][:CFLAGS]; the first is the reference"
    )
    ap.add_argument("--arch", default="native")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--runs", type=int, default=4, help="model runs per variant per round")
    ap.add_argument("--min-ms", type=float, default=0.3, help="list nodes above this time")
    args = ap.parse_args()
    variants = [parse_variant(v) for v in args.variants]
    with tempfile.TemporaryDirectory(prefix="ab_nodes_") as tmp:
        work = Path(tmp)
        gens: dict[tuple[Path, str], Path] = {}
        for _, src, _ in variants:
            if src not in gens:
                gens[src] = work / f"gen{len(gens)}"
                convert(args.model, src, gens[src])
        exes = []
        for i, (_, src, cflags) in enumerate(variants):
            (work / f"v{i}").mkdir()
            exes.append(work / f"v{i}" / "run")
            build(gens[src], args.arch, cflags, exes[-1])
        cmds = []
        for i, (_, src, _) in enumerate(variants):
            weights = gens[src] / "model_weights.bin"
            cmds.append([str(exes[i]), str(weights) if weights.exists() else "", str(args.runs)])
        best = interleave(cmds, args.rounds)
        names = node_names((next(iter(gens.values())) / "model.c").read_text())
    label = "node (min ms over runs; ratio to " + variants[0][0] + ")"
    print_table(label, names, [n for n, _, _ in variants], best, args.min_ms)
    return 0


if __name__ == "__main__":
    sys.exit(main())
