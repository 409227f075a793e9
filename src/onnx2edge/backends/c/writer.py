"""Assemble model.c, model.h, model_weights.bin, main.c, Makefile and CMakeLists.txt."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ...ir import Graph
from ...passes.bounded import bounded_axis
from .emitter import (
    INLINE_WEIGHT_LIMIT,
    WEIGHTS_MAGIC,
    ModelEmitter,
    Tensor,
    array_literal,
    c_ident,
)
from .ops.sparse import BREAK_EVEN as _SPARSE_BREAK_EVEN
from .ops.sparse import mode as sparse_mode
from .planner import ALIGN


def _shape_str(t: Tensor) -> str:
    return "x".join(map(str, t.shape)) or "scalar"


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


# fp16 weight storage: float32 constants of at least this many elements whose finite values
# fit fp16's range are stored as IEEE half and widened to float32 by <prefix>_init. Small
# constants (scales, clip bounds, pads, -FLT_MAX sentinels) stay float32: they cost no flash
# worth saving and some must stay exact.
FP16_MIN_ELEMENTS = 64
FP16_MAX = 65504.0

# Portable IEEE half -> float (subnormals, Inf, NaN), run once per weight at init: no F16C /
# NEON fp16 needed, so the stored model runs on every target; the kernels stay float32.
F16_DECODE = r"""static float o2e_h2f(uint16_t h)
{
  uint32_t s = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, bits;
  float f;
  if (e == 0) {
    if (m == 0) bits = s;
    else { e = 113; while (!(m & 0x400u)) { m <<= 1; --e; } bits = s | (e << 23) | ((m & 0x3ffu) << 13); }
  } else if (e == 31) bits = s | 0x7f800000u | (m << 13);
  else bits = s | ((e + 112) << 23) | (m << 13);
  memcpy(&f, &bits, sizeof f);
  return f;
}
static void o2e_f16_decode(float *dst, const uint16_t *src, size_t n)
{
  size_t i;
  for (i = 0; i < n; ++i) dst[i] = o2e_h2f(src[i]);
}"""


def fp16_storable(arr: np.ndarray) -> bool:
    if arr.dtype != np.float32 or arr.size < FP16_MIN_ELEMENTS:
        return False
    finite = arr[np.isfinite(arr)]
    return bool(finite.size == 0 or np.abs(finite).max() <= FP16_MAX)


def _write_weights(
    path: Path, arrays: dict[Any, np.ndarray], offsets: dict[Any, int], total: int
) -> None:
    """The header, then each array at its aligned offset, written in slices: a 2 GB model is
    never assembled in memory (nor copied again by a little-endian conversion that is a no-op)."""
    with path.open("wb") as f:
        f.write(WEIGHTS_MAGIC + np.uint64(total).tobytes())
        pos = 0
        for key, arr in arrays.items():
            f.write(b"\0" * (offsets[key] - pos))
            flat = np.ascontiguousarray(arr).reshape(-1)
            little = flat.dtype.newbyteorder("<")
            step = max(1, (64 << 20) // max(flat.itemsize, 1))
            for i in range(0, flat.size, step):
                f.write(flat[i : i + step].astype(little, copy=False).tobytes())
            pos = offsets[key] + arr.nbytes
        f.write(b"\0" * (total - pos))


def write_model(
    graph: Graph,
    out_dir: Path,
    *,
    prefix: str = "model",
    weights_file: bool | None = None,
    source_name: str = "model",
    weights_fp16: bool = False,
    optimize: str = "speed",
    kernel_options: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Emit the C sources for `graph` into `out_dir`; return stats for the manifest.

    optimize: "speed" or "size" (ModelEmitter.optimize)."""
    em = ModelEmitter(graph, prefix=prefix, optimize=optimize, kernel_options=kernel_options)
    res = em.emit()
    # Emitters may look at a weight (its shape, its values) and write a repacked copy: keep
    # exactly the constants whose symbol the code names, recorded as the code is written
    # (emitter.ConstTensor: reading `sym` is the one way to name a constant).
    for key in [k for k in em.constants if k not in em.referenced]:
        del em.constants[key]
        del em.const_data[key]
    half = {k for k, a in em.const_data.items() if weights_fp16 and fp16_storable(a)}
    stored = {
        k: (a.astype(np.float16).view(np.uint16) if k in half else a)
        for k, a in em.const_data.items()
    }
    weight_bytes = sum(a.nbytes for a in stored.values())
    to_file = weights_file if weights_file is not None else weight_bytes > INLINE_WEIGHT_LIMIT
    P, U = prefix, prefix.upper()
    ins = [em.tensor(n) for n in graph.inputs]
    outs = [em.tensor(n) for n in graph.outputs]

    # --- weights -----------------------------------------------------------------------------
    weight_lines: list[str] = []
    if to_file:
        offsets, end = {}, 0
        for key, arr in stored.items():
            offsets[key] = _align(end)
            end = offsets[key] + arr.nbytes
        total = max(end, 1)
        weight_lines.append(
            f"static unsigned char o2e_weights[{total}] O2E_ALIGNED;  /* filled by {P}_init() */"
        )
        for key, t in em.constants.items():
            if key in half:  # widened into RAM by init
                weight_lines.append(
                    f"static float {t.sym}[{stored[key].size}] O2E_ALIGNED;  /* {_c(t.name)}: {_shape_str(t)}, fp16 at +{offsets[key]} */"
                )
                continue
            weight_lines.append(
                f"#define {t.sym} ((const {t.ctype} *)(o2e_weights + {offsets[key]}))  /* {_c(t.name)}: {_shape_str(t)} */"
            )
    else:
        for key, t in em.constants.items():
            arr = stored[key]
            if key in half:
                weight_lines.append(
                    f"/* {_c(t.name)}: {_shape_str(t)} stored as float16, widened by {prefix}_init */\n"
                    f"static const uint16_t {t.sym}_f16[{arr.size}] O2E_ALIGNED = {{\n  {array_literal(arr)}\n}};\n"
                    f"static float {t.sym}[{arr.size}] O2E_ALIGNED;"
                )
                continue
            weight_lines.append(
                f"/* {_c(t.name)}: {_shape_str(t)} {arr.dtype.name} */\n"
                f"static const {t.ctype} {t.sym}[{max(arr.size, 1)}] O2E_ALIGNED O2E_UNUSED = {{\n  {array_literal(arr)}\n}};"
            )
    if half:
        weight_lines.insert(0, F16_DECODE)
        src = (
            (lambda k, t: f"(const uint16_t *)(o2e_weights + {offsets[k]})")
            if to_file
            else (lambda k, t: f"{t.sym}_f16")
        )
        decode = [
            f"  o2e_f16_decode({t.sym}, {src(k, t)}, {stored[k].size});"
            for k, t in em.constants.items()
            if k in half
        ]
    else:
        decode = []

    # --- run() -------------------------------------------------------------------------------
    decls = []
    for i, t in enumerate(ins):
        decls.append(
            f"  const {t.ctype} *const {t.sym} = (const {t.ctype} *)inputs[{i}];  /* {_c(t.name)}: {_shape_str(t)} */"
        )
    for i, name in enumerate(graph.outputs):
        t = em.tensor(name)
        if t.kind == "output":
            decls.append(
                f"  {t.ctype} *const {t.sym} = ({t.ctype} *)outputs[{i}];  /* {_c(t.name)}: {_shape_str(t)} */"
            )
    for name, t in em.tensors.items():
        if t.kind == "arena":
            decls.append(
                f"  {t.ctype} *const {t.sym} = ({t.ctype} *)(o2e_arena + {res['offsets'][name]});  /* {_c(name)}: {_shape_str(t)} */"
            )
    scratch_defs = [
        f"#define {macro} (({ctype} *)(o2e_arena + {res['offsets'][key]}))"
        for key, (macro, ctype) in em.scratch_macros.items()
    ]
    voids = [f"(void){t.sym};" for t in ins] + [
        f"(void){t.sym};" for t in em.tensors.values() if t.kind in ("arena", "output")
    ]
    arena_bytes = max(int(res["arena"]), 1)
    body = "\n".join([*em.helpers.values(), *res["blocks"], *res["tail"]])
    uses_vmath = VMATH_CALL.search(body) is not None
    if uses_vmath:
        em.runtime_files.add(VMATH_HEADER)

    c = [
        f"/* Generated by onnx2edge from {_c(source_name)}: do not edit; regenerate instead.",
        f" * Arena: {res['arena']} bytes of activations. Weights: {weight_bytes} bytes"
        + (" in model_weights.bin." if to_file else " as static arrays below."),
        " * Not reentrant: one static arena serves every call. */",
        *(VMATH_PRAGMA if uses_vmath else []),
        "#include <math.h>",
        "#include <stdbool.h>",
        "#include <stddef.h>",
        "#include <stdint.h>",
        "#include <string.h>",
        *(["#include <stdio.h>"] if to_file else []),
        f'#include "{P}.h"',
        *([f'#include "{VMATH_HEADER}"'] if uses_vmath else []),
        "",
        "#if defined(__GNUC__) || defined(__clang__)",
        "#define O2E_ALIGNED __attribute__((aligned(64)))",
        "#define O2E_UNUSED __attribute__((unused))",
        "#else",
        "#define O2E_ALIGNED",
        "#define O2E_UNUSED",
        "#endif",
        "",
        "#ifdef O2E_PROFILE  /* per-node times for `onnx2edge bench --profile` (needs POSIX clock_gettime) */",
        "#include <time.h>",
        f"static double o2e_prof_ms[{max(len(graph.nodes), 1)}];",
        # bench --cpu-clock passes CLOCK_THREAD_CPUTIME_ID: node times on the clock the runs use
        "#ifndef O2E_PROF_CLOCK",
        "#define O2E_PROF_CLOCK CLOCK_MONOTONIC",
        "#endif",
        "static double o2e_prof_now(void) { struct timespec ts; clock_gettime(O2E_PROF_CLOCK, &ts); return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6; }",
        f"void {P}_profile(double *ms) {{ for (int i = 0; i < {len(graph.nodes)}; ++i) ms[i] = o2e_prof_ms[i]; }}",
        "#define O2E_PROF_BEGIN double o2e_t0 = o2e_prof_now(), o2e_t1;",
        "#define O2E_PROF(i) do { o2e_t1 = o2e_prof_now(); o2e_prof_ms[i] += o2e_t1 - o2e_t0; o2e_t0 = o2e_t1; } while (0)",
        "#else",
        "#define O2E_PROF_BEGIN",
        "#define O2E_PROF(i) ((void)0)",
        "#endif",
        "",
        "#ifdef O2E_TRACE_ENABLED  /* per-layer dumps for `onnx2edge verify --per-layer` */",
        "static void (*o2e_trace_cb)(const char *, const void *, size_t);",
        f"void {P}_set_trace(void (*cb)(const char *, const void *, size_t)) {{ o2e_trace_cb = cb; }}",
        "#define O2E_TRACE(name, ptr, n) do { if (o2e_trace_cb) o2e_trace_cb(name, ptr, n); } while (0)",
        "#else",
        "#define O2E_TRACE(name, ptr, n) ((void)0)",
        "#endif",
        "",
        *[code.strip() + "\n" for code in em.helpers.values()],
        "/* ---- weights ---- */",
        *weight_lines,
        "",
        "/* ---- activations: one arena, offsets from the liveness planner ---- */",
        f"static unsigned char o2e_arena[{arena_bytes}] O2E_ALIGNED;",
        "",
        *scratch_defs,
        "",
    ]
    # outputs whose size is only known at run time (passes/bounded.py): their actual extent
    bounded = {i: bounded_axis(graph, n) for i, n in enumerate(graph.outputs)}
    bounded = {i: a for i, a in bounded.items() if a is not None}
    if bounded:
        c += [
            "/* actual extent of each output along its run-time-sized axis (-1: static shape) */",
            f"static int64_t o2e_out_count[{len(outs)}] = {{{', '.join('-1' for _ in outs)}}};",
            f"int64_t {P}_output_count(int i) {{ return i >= 0 && i < {len(outs)} ? o2e_out_count[i] : -1; }}",
            "",
        ]
    if to_file:
        c += [
            f"int {P}_init(const char *weights_path)",
            "{",
            "  unsigned char magic[8];",
            "  unsigned long long size = 0;",
            "  size_t got;",
            '  FILE *f = fopen(weights_path ? weights_path : "model_weights.bin", "rb");',
            "  if (!f) return -1;",
            "  got = fread(magic, 1, 8, f);",
            "  got += fread(&size, 1, 8, f);",
            f'  if (got != 16 || memcmp(magic, "{WEIGHTS_MAGIC.decode()}", 8) != 0 || size != sizeof(o2e_weights)) {{ fclose(f); return -2; }}',
            "  got = fread(o2e_weights, 1, sizeof(o2e_weights), f);",
            "  fclose(f);",
            "  if (got != sizeof(o2e_weights)) return -3;",
            *decode,
            "  return 0;",
            "}",
        ]
    else:
        c += [
            f"int {P}_init(const char *weights_path)",
            "{",
            "  (void)weights_path;  /* weights are compiled in */",
            *decode,
            "  return 0;",
            "}",
        ]
    kernel_name = "o2e_gemm_kernel_name()" if "o2e_gemm.h" in em.runtime_files else '"none"'
    c += [
        "",
        f"const char *{P}_gemm_kernel(void) {{ return {kernel_name}; }}",
        "",
        f"int {P}_run(const void *const *inputs, void *const *outputs)",
        "{",
        *decls,
        "  O2E_PROF_BEGIN",
        "  (void)inputs; (void)outputs; (void)o2e_arena;",
        *(["  " + " ".join(voids[i : i + 8]) for i in range(0, len(voids), 8)]),
        "",
        *res["blocks"],
        *res["tail"],
        "  return 0;",
        "}",
        "",
        f"int {P}_predict({', '.join([f'const {t.ctype} *{c_ident(t.name)}' for t in ins] + [f'{t.ctype} *{c_ident(t.name)}' for t in outs])})",
        "{",
        f"  const void *o2e_in[{max(len(ins), 1)}] = {{{', '.join(c_ident(t.name) for t in ins) or '0'}}};",
        f"  void *o2e_out[{max(len(outs), 1)}] = {{{', '.join(c_ident(t.name) for t in outs) or '0'}}};",
        f"  return {P}_run(o2e_in, o2e_out);",
        "}",
        "",
    ]
    h = [
        f"/* {P}.h: generated by onnx2edge from {_c(source_name)}.",
        " *",
        f" * Call {P}_init() once (it loads model_weights.bin when the weights are not compiled in;",
        " * pass its path, or NULL for ./model_weights.bin), then",
        f" * {P}_run() / {P}_predict() with caller-owned buffers of the sizes below (element counts).",
        " * No memory is allocated. Not reentrant: calls must not overlap. Returns 0 on success. */",
        f"#ifndef {U}_H",
        f"#define {U}_H",
        "#include <stddef.h>",
        "#include <stdint.h>",
        "#include <stdbool.h>",
        "",
        f"#define {U}_NUM_INPUTS {len(ins)}",
        f"#define {U}_NUM_OUTPUTS {len(outs)}",
    ]
    for kind, ts in (("INPUT", ins), ("OUTPUT", outs)):
        for i, t in enumerate(ts):
            h.append(f'#define {U}_{kind}_{i}_NAME "{_c(t.name)}"')
            h.append(f"#define {U}_{kind}_{i}_SIZE {t.size}  /* {_shape_str(t)} {t.dtype.name} */")
    for i, axis in bounded.items():
        h.append(
            f"#define {U}_OUTPUT_{i}_BOUNDED_AXIS {axis}  /* SIZE is a bound: its extent along "
            f"this axis after a run is {P}_output_count({i}) */"
        )
    h += [
        f"#define {U}_ARENA_BYTES {res['arena']}",
        f"#define {U}_WEIGHT_BYTES {weight_bytes}",
        f"#define {U}_WEIGHTS_IN_FILE {1 if to_file else 0}",
        "",
        f"int {P}_init(const char *weights_path);",
        f"const char *{P}_gemm_kernel(void);  /* which GEMM micro-kernel was compiled in */",
        f"int {P}_run(const void *const *inputs, void *const *outputs);",
        *([f"int64_t {P}_output_count(int i);  /* see _BOUNDED_AXIS */"] if bounded else []),
        f"int {P}_predict({', '.join([f'const {t.ctype} *{c_ident(t.name)}' for t in ins] + [f'{t.ctype} *{c_ident(t.name)}' for t in outs])});",
        "#ifdef O2E_TRACE_ENABLED",
        f"void {P}_set_trace(void (*cb)(const char *, const void *, size_t));",
        "#endif",
        "",
        "#endif",
        "",
    ]
    files = {f"{P}.c": "\n".join(c), f"{P}.h": "\n".join(h)}
    runtime = Path(__file__).parent / "runtime"
    for name in sorted(em.runtime_files):
        files[name] = (runtime / name).read_text()
    for name, text in files.items():
        (out_dir / name).write_text(text)
    if to_file:
        _write_weights(out_dir / "model_weights.bin", stored, offsets, total)
    return {
        "arena_bytes": int(res["arena"]),
        "weight_bytes": int(weight_bytes),
        # the float constants the graph holds after folding: what weight_bytes compares with
        "onnx_weight_bytes": int(sum(a.nbytes for a in graph.initializers.values())),
        "optimize": optimize,
        "weights_in_file": bool(to_file),
        **(
            {
                "weights_fp16_tensors": len(half),
                "weight_bytes_fp32": int(sum(a.nbytes for a in em.const_data.values())),
            }
            if weights_fp16
            else {}
        ),
        "nodes": len(graph.nodes),
        "kernels": dict(sorted(em.kernels.items())),
        "sparse_layers": em.sparse_layers,
        "sparse_mode": sparse_mode(em.kernel_options),
        "layer_kernels": dict(sorted(em.layer_strategies.items())),
        "sparse_break_even": dict(_SPARSE_BREAK_EVEN),
        "sparse_bytes_saved": sum(d["bytes_saved"] for d in em.sparse_layers),
        "runtime_files": sorted(em.runtime_files),
    }


def _c(s: str) -> str:
    return s.replace("*/", "* /").replace("\\", "/").replace('"', "'")


# runtime/o2e_vmath.h: included when the code calls one of its functions, with the pragma that
# lets gcc vectorise the loops around them first in the file (the header says why)
VMATH_HEADER = "o2e_vmath.h"
VMATH_CALL = re.compile(r"\bo2e_(?:exp|log|log1p|tanh|sigmoid|erf)f\(")
VMATH_PRAGMA = [
    "#if defined(__GNUC__) && !defined(__clang__)",
    '#pragma GCC optimize("no-trapping-math")  /* o2e_vmath.h: lets its callers\' loops vectorise */',
    "#endif",
]

MAIN_C = r"""/* Example program: reads each input as raw little-endian binary, runs the model, writes each
 * output as raw binary. Usage: ./model IN_0.bin [...] OUT_0.bin [...]
 * (inputs then outputs, in the order of model.h). */
#include <stdio.h>
#include <stdlib.h>
#include "model.h"

static int read_file(const char *path, void *buf, size_t bytes)
{
  FILE *f = fopen(path, "rb");
  size_t got;
  if (!f) { fprintf(stderr, "cannot open %s\n", path); return -1; }
  got = fread(buf, 1, bytes, f);
  fclose(f);
  if (got != bytes) { fprintf(stderr, "%s: expected %lu bytes, got %lu\n", path, (unsigned long)bytes, (unsigned long)got); return -1; }
  return 0;
}

static int write_file(const char *path, const void *buf, size_t bytes)
{
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(buf, 1, bytes, f) != bytes) { fprintf(stderr, "cannot write %s\n", path); if (f) fclose(f); return -1; }
  return fclose(f);
}

@BUFFERS@

int main(int argc, char **argv)
{
  const void *inputs[@NIN_ARR@];
  void *outputs[@NOUT_ARR@];
  int rc;
  if (argc != 1 + @NIN@ + @NOUT@) {
    fprintf(stderr, "usage: %s @USAGE@\n", argv[0]);
    return 2;
  }
  rc = @P@_init(getenv("MODEL_WEIGHTS"));
  if (rc != 0) { fprintf(stderr, "@P@_init failed (%d): is model_weights.bin here, or MODEL_WEIGHTS set?\n", rc); return 1; }
@READS@
  if (@P@_run(inputs, outputs) != 0) return 1;
@WRITES@
  return 0;
}
"""


def write_support_files(graph: Graph, out_dir: Path, prefix: str = "model") -> list[str]:
    em_ins = [(n, graph.type_of(n)) for n in graph.inputs]
    em_outs = [(n, graph.type_of(n)) for n in graph.outputs]
    from .emitter import ctype_of

    bufs, reads, writes = [], [], []
    for i, (n, t) in enumerate(em_ins):
        assert t is not None
        bufs.append(f"static {ctype_of(t.dtype)} in_{i}[{max(t.size, 1)}];  /* {_c(n)} */")
        reads.append(
            f"  if (read_file(argv[{1 + i}], in_{i}, sizeof(in_{i}) * {t.size} / {max(t.size, 1)})) return 1;"
        )
        reads.append(f"  inputs[{i}] = in_{i};")
    for i, (n, t) in enumerate(em_outs):
        assert t is not None
        bufs.append(f"static {ctype_of(t.dtype)} out_{i}[{max(t.size, 1)}];  /* {_c(n)} */")
        reads.append(f"  outputs[{i}] = out_{i};")
        writes.append(
            f"  if (write_file(argv[{1 + len(em_ins) + i}], out_{i}, sizeof(out_{i}) * {t.size} / {max(t.size, 1)})) return 1;"
        )
    usage = " ".join(
        [f"{c_ident(n)}.bin" for n, _ in em_ins] + [f"{c_ident(n)}.bin" for n, _ in em_outs]
    )
    main = (
        MAIN_C.replace("@BUFFERS@", "\n".join(bufs))
        .replace("@NIN_ARR@", str(max(len(em_ins), 1)))
        .replace("@NOUT_ARR@", str(max(len(em_outs), 1)))
        .replace("@NIN@", str(len(em_ins)))
        .replace("@NOUT@", str(len(em_outs)))
        .replace("@USAGE@", usage)
        .replace("@READS@", "\n".join(reads))
        .replace("@WRITES@", "\n".join(writes))
        .replace("@P@", prefix)
    )
    if prefix != "model":
        main = main.replace('#include "model.h"', f'#include "{prefix}.h"')
    (out_dir / "main.c").write_text(main)
    (out_dir / "Makefile").write_text(
        "# Build the example program: make [CFLAGS='-O3 -march=native']\n"
        "CC ?= gcc\n"
        "CFLAGS ?= -std=c99 -O2 -Wall -Wextra -Werror\n"
        "LDLIBS = -lm\n\n"
        f"model: main.c {prefix}.c {prefix}.h\n"
        f"\t$(CC) $(CFLAGS) -o $@ main.c {prefix}.c $(LDLIBS)\n\n"
        "clean:\n\trm -f model\n\n.PHONY: clean\n"
    )
    (out_dir / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.10)\n"
        "project(onnx2edge_model C)\n"
        "set(CMAKE_C_STANDARD 99)\n"
        "set(CMAKE_C_STANDARD_REQUIRED ON)\n"
        f"add_library({prefix} STATIC {prefix}.c)\n"
        f"target_include_directories({prefix} PUBLIC ${{CMAKE_CURRENT_SOURCE_DIR}})\n"
        f"target_link_libraries({prefix} PUBLIC m)\n"
        f"add_executable(model_main main.c)\n"
        f"target_link_libraries(model_main {prefix})\n"
        'if(CMAKE_C_COMPILER_ID MATCHES "GNU|Clang")\n'
        f"  target_compile_options({prefix} PRIVATE -Wall -Wextra)\n"
        "endif()\n"
    )
    return ["main.c", "Makefile", "CMakeLists.txt"]
