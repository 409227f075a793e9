"""Assemble model.c, model.h, model_weights.bin, main.c, Makefile and CMakeLists.txt."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import Onnx2EdgeError
from ...ir import Graph
from .device import GENERIC, MAX_THREADS, Device
from .emitter import (
    INLINE_WEIGHT_LIMIT,
    STORAGES,
    STRING_TYPEDEF,
    WEIGHTS_HEADER,
    WEIGHTS_MAGIC,
    ModelEmitter,
    Tensor,
    _f32,
    array_literal,
    c_ident,
)
from .kernels.gemm.sparse import BREAK_EVEN as _SPARSE_BREAK_EVEN
from .kernels.gemm.sparse import mode as sparse_mode
from .phases import Analyses, emit_model
from .planner import ALIGN
from .quantized_io import quantized_io_of


def _shape_str(t: Tensor) -> str:
    return "x".join(map(str, t.shape)) or "scalar"


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


# fp16 weight storage: the constants fp16.fp16_storable picks are stored as IEEE half. The
# layer that reads one widens it into its own arena scratch right before it runs
# (emitter._widen_fp16), so RAM grows by the largest layer's weights, never by a float32 copy
# of them all.

# IEEE half -> float: F16C (8 at a time) on x86 builds that have it, NEON fcvtl on aarch64,
# else a portable bit-exact decoder (subnormals, Inf, NaN) that needs no fp16 hardware, so
# the stored model runs on every target. Conversions are exact: all three give equal floats.
F16_DECODE = r"""#if defined(__F16C__)
#include <immintrin.h>
#elif defined(__aarch64__) && defined(__ARM_NEON)
#include <arm_neon.h>
#endif
static float o2e_h2f(uint16_t h)
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
  size_t i, v = 0;  /* v: the elements the vector loop converts */
#if defined(__F16C__)
  for (v = n / 8 * 8, i = 0; i < v; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(src + i))));
#elif defined(__aarch64__) && defined(__ARM_NEON)
  for (v = n / 4 * 4, i = 0; i < v; i += 4) vst1q_f32(dst + i, vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(src + i))));
#endif
  for (i = v; i < n; ++i) dst[i] = o2e_h2f(src[i]);
}"""


def weights_checksum(path: Path, offset: int, n: int) -> int:
    """The 64-bit checksum `<prefix>_init` recomputes over the n weight bytes at `offset` of
    `path` (C: o2e_checksum): sum over little-endian 8-byte words w_i (the last one zero-padded)
    of mix(w_i ^ i) * (2i + 1), mod 2^64, xor n. Not cryptographic: it catches a truncated,
    corrupt or stale weights file (one from another conversion); every word's change shows."""
    h = 0
    step = 8 << 20  # words per chunk (64 MB): a large model is never read whole
    with path.open("rb") as f:
        f.seek(offset)
        word = 0
        while word * 8 < n:
            buf = f.read(min(step * 8, n - word * 8))
            if not buf:
                break
            buf += b"\0" * (-len(buf) % 8)
            w = np.frombuffer(buf, dtype="<u8")
            i = np.arange(word, word + w.size, dtype=np.uint64)
            x = w ^ i
            x ^= x >> np.uint64(33)
            x *= np.uint64(_CHECKSUM_MIX)
            x ^= x >> np.uint64(33)
            h = (h + int(np.sum(x * (i * np.uint64(2) + np.uint64(1)), dtype=np.uint64))) % (
                1 << 64
            )
            word += w.size
    return h ^ n


_CHECKSUM_MIX = 0xFF51AFD7ED558CCD
CHECKSUM_C = r"""/* the weights' checksum (writer.weights_checksum): catches a corrupt or stale file */
static uint64_t o2e_checksum(const unsigned char *p, size_t n)
{
  uint64_t h = 0, w, i;
  for (i = 0; i * 8 < n; ++i) {
    const size_t left = n - (size_t)i * 8;
    w = 0;
    memcpy(&w, p + i * 8, left < 8 ? left : 8);
    w ^= i;
    w ^= w >> 33;
    w *= UINT64_C(0xff51afd7ed558ccd);
    w ^= w >> 33;
    h += w * (2 * i + 1);
  }
  return h ^ (uint64_t)n;
}"""


def _write_weights(
    path: Path, arrays: dict[Any, np.ndarray], offsets: dict[Any, int], total: int
) -> int:
    """The header (magic, payload size, checksum, zero padding to WEIGHTS_HEADER bytes, so each
    weight stays 64-byte aligned in a mapped file), then each array at its aligned offset,
    written in slices: a 2 GB model is never assembled in memory (nor copied again by a
    little-endian conversion that is a no-op). Returns the checksum."""
    with path.open("wb") as f:
        f.write(b"\0" * WEIGHTS_HEADER)
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
    checksum = weights_checksum(path, WEIGHTS_HEADER, total)
    with path.open("r+b") as f:
        f.write(WEIGHTS_MAGIC + np.uint64(total).tobytes() + np.uint64(checksum).tobytes())
    return checksum


_C_KEYWORDS = frozenset(
    "auto break case char const continue default do double else enum extern float for goto if "
    "inline int long register restrict return short signed sizeof static struct switch typedef "
    "union unsigned void volatile while main".split()
)


def default_name(model_file: str | None) -> str:
    """The symbol prefix when convert is given no --name: the model file's stem as a lower-case
    C identifier ("resnet50-v1-7.onnx" -> resnet50_v1_7), `model` when there is none."""
    stem = Path(model_file).name.split(".")[0] if model_file else ""
    s = re.sub(r"_+", "_", re.sub(r"[^0-9a-z_]", "_", stem.lower())).strip("_")[:32].rstrip("_")
    if not s:
        return "model"
    if s[0].isdigit():
        s = "m" + s
    if s in _C_KEYWORDS or s.startswith("o2e"):
        s += "_model"
    return s


def check_name(name: str) -> str:
    """`--name`: a C identifier that prefixes every exported symbol (NAME_init) and macro
    (NAME_INPUT_0_SIZE); o2e_ is the runtime's own prefix."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,47}", name):
        raise Onnx2EdgeError(
            f"--name {name!r}: expected a C identifier (letters, digits, _; at most 48)"
        )
    if name in _C_KEYWORDS or name.lower().startswith("o2e"):
        raise Onnx2EdgeError(f"--name {name!r}: reserved (a C keyword or the runtime's o2e_)")
    return name


# what <prefix>_init / _init_with_weights / _ctx_init / _run return: the header and README
# document these (one list, so they cannot drift apart)
RETURN_CODES: tuple[tuple[int, str], ...] = (
    (0, "success"),
    (-1, "the weights file cannot be opened (_init), or blob is NULL (_init_with_weights)"),
    (-2, "the weights are not this model's: wrong magic, payload size or blob length"),
    (-3, "the weights file is shorter than its header says (truncated, or a read error)"),
    (-4, "checksum mismatch: the weights are corrupt or from another conversion"),
    (-5, "the blob passed to _init_with_weights is not 64-byte aligned"),
    (-6, "bad context: ctx NULL, arena smaller than ARENA_BYTES or not ARENA_ALIGN-aligned"),
    (-7, "_run before a successful _init / _init_with_weights"),
    (
        -8,
        "_set_threads: n outside 1 .. MAX_THREADS (the threads the arena's workspaces were "
        "planned for: convert --max-threads)",
    ),
    (
        -9,
        "_set_threads: n > 1 in a build without the thread pool (compile with -DO2E_THREADS=m, "
        "m > 1: make THREADS=m)",
    ),
)


def threads_block(max_threads: int, device: Device = GENERIC) -> list[str]:
    """model.c's thread settings, before any runtime header: the pool's capacity is the count
    the arena's per-thread workspaces were planned for, and a build asking for more stops
    (a --device conversion's own guard, device.build_guard, says why in its terms)."""
    if device.is_mcu:
        return [
            "#ifndef O2E_THREADS",
            "#define O2E_THREADS 1",
            "#endif",
            "#undef O2E_MAX_THREADS",
            "#define O2E_MAX_THREADS 1",
        ]
    return [
        f"/* ---- threads (README: Threads): per-thread workspaces planned for {max_threads} "
        "(convert --max-threads);",
        " * -DO2E_THREADS=n (1 < n <= that) builds the pthread pool with n threads by default */",
        "#ifndef O2E_THREADS",
        "#define O2E_THREADS 1",
        "#endif",
        "#undef O2E_MAX_THREADS",
        f"#define O2E_MAX_THREADS {max_threads}",
        "#if O2E_THREADS < 1 || O2E_THREADS > O2E_MAX_THREADS",
        f'#error "O2E_THREADS must be 1 .. {max_threads}: the arena workspaces were planned '
        f'for {max_threads} threads (reconvert with --max-threads)"',
        "#endif",
    ]


def _storage(weights_storage: str | None, weights_file: bool | None, weight_bytes: int) -> str:
    if weights_storage is not None:
        if weights_storage not in STORAGES:
            raise Onnx2EdgeError(
                f"--weights-storage {weights_storage}: expected one of {', '.join(STORAGES)}"
            )
        return weights_storage
    if weights_file is not None:
        return "file" if weights_file else "inline"
    return "file" if weight_bytes > INLINE_WEIGHT_LIMIT else "inline"


def write_model(
    graph: Graph,
    out_dir: Path,
    *,
    prefix: str = "model",
    file_stem: str | None = None,
    weights_file: bool | None = None,
    weights_storage: str | None = None,
    source_name: str = "model",
    weights_fp16: bool = False,
    optimize: str = "speed",
    kernel_options: Mapping[str, str] | None = None,
    device: Device = GENERIC,
    max_threads: int = MAX_THREADS,
    emitted: tuple[ModelEmitter, Analyses] | None = None,
) -> dict[str, Any]:
    """Emit the C sources for `graph` into `out_dir`; return stats for the manifest.
    `emitted`: (emitter, analyses), what `phases.emit_model` returned for `graph` with these
    prefix / optimize / kernel / device / fp16 / thread settings, already run by the caller
    (`report` reads its plan): written out, not emitted a second time.

    prefix: every exported symbol and header macro starts with it (`<prefix>_run`,
    `<PREFIX>_ARENA_BYTES`); file_stem: the source's name (`<file_stem>.c`, default prefix),
    the header is `<prefix>.h`. weights_storage: inline | file | external (STORAGES; None:
    weights_file, else inline up to INLINE_WEIGHT_LIMIT). optimize: "speed" or "size";
    device: the build the arena is planned for (device.py)."""
    if emitted is not None:
        em, res = emitted
    else:
        em, res = emit_model(
            graph,
            prefix=prefix,
            optimize=optimize,
            kernel_options=kernel_options,
            device=device,
            weights_fp16=weights_fp16,
            max_threads=max_threads,
        )
    # Emitters may look at a weight (its shape, its values) and write a repacked copy: keep
    # exactly the constants whose symbol the code names, recorded as the code is written
    # (emitter.ConstTensor: reading `sym` is the one way to name a constant).
    for key in [k for k in em.constants if k not in em.referenced]:
        del em.constants[key]
        del em.const_data[key]
    half = em.fp16_keys & em.const_data.keys()
    stored = {
        k: (a.astype(np.float16).view(np.uint16) if k in half else a)
        for k, a in em.const_data.items()
    }
    weight_bytes = sum(a.nbytes for a in stored.values())
    # fp16 constants kernels read as half themselves (emitter.fp16_in_kernel)
    n_kernel_half = sum(1 for a in stored.values() if a.dtype == np.float16) if weights_fp16 else 0
    storage = _storage(weights_storage, weights_file, weight_bytes)
    to_file = storage != "inline"
    P, U = prefix, prefix.upper()
    stem = file_stem or prefix
    ins = [em.tensor(n) for n in graph.inputs]
    outs = [em.tensor(n) for n in graph.outputs]

    # --- weights -----------------------------------------------------------------------------
    weight_lines: list[str] = []
    offsets: dict[Any, int] = {}
    total = 0
    if to_file:
        end = 0
        for key, arr in stored.items():
            offsets[key] = _align(end)
            end = offsets[key] + arr.nbytes
        total = max(end, 1)
        if storage == "file":
            weight_lines.append(
                f"static unsigned char o2e_weights[{total}] O2E_ALIGNED;  /* filled by {P}_init() */"
            )
        else:
            weight_lines.append(
                f"static const unsigned char *o2e_weights;  /* the caller's blob + {WEIGHTS_HEADER}, set by {P}_init_with_weights() */"
            )
        for key, t in em.constants.items():
            if key in half:  # widened per layer (emitter._widen_fp16)
                weight_lines.append(
                    f"#define {em.fp16_sym[key]} ((const uint16_t *)(o2e_weights + {offsets[key]}))  /* {_c(t.name)}: {_shape_str(t)} fp16 */"
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
                    f"/* {_c(t.name)}: {_shape_str(t)} float16, widened by the layers that read it */\n"
                    f"static const uint16_t {em.fp16_sym[key]}[{arr.size}] O2E_ALIGNED O2E_UNUSED = {{\n  {array_literal(arr)}\n}};"
                )
                continue
            weight_lines.append(
                f"/* {_c(t.name)}: {_shape_str(t)} {arr.dtype.name} */\n"
                f"static const {t.ctype} {t.sym}[{max(arr.size, 1)}] O2E_ALIGNED O2E_UNUSED = {{\n  {array_literal(arr)}\n}};"
            )
    if half:
        weight_lines.insert(0, F16_DECODE)
    if to_file:
        weight_lines.insert(0, CHECKSUM_C)
    # inline weights need no init; loaded or checked ones do
    ready_at_start = 0 if to_file else 1

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
                f"  {t.ctype} *const {t.sym} = ({t.ctype} *)(o2e_arena + {res.offsets[name]});  /* {_c(name)}: {_shape_str(t)} */"
            )
    scratch_defs = [
        f"#define {macro} (({ctype} *)(o2e_arena + {res.offsets[key]}))"
        for key, (macro, ctype) in em.scratch_macros.items()
    ]
    voids = [f"(void){t.sym};" for t in ins] + [
        f"(void){t.sym};" for t in em.tensors.values() if t.kind in ("arena", "output")
    ]
    arena_bytes = max(int(res.arena), 1)
    # outputs whose size is only known at run time (the bounded_outputs phase): their extent
    bounded = res.bounded
    minus_ones = ", ".join("-1" for _ in outs)
    in_params = [f"const {t.ctype} *{c_ident(t.name)}" for t in ins]
    out_params = [f"{t.ctype} *{c_ident(t.name)}" for t in outs]
    predict_params = ", ".join(in_params + out_params)
    predict_body = [
        f"  const void *o2e_in[{max(len(ins), 1)}] = {{{', '.join(c_ident(t.name) for t in ins) or '0'}}};",
        f"  void *o2e_out[{max(len(outs), 1)}] = {{{', '.join(c_ident(t.name) for t in outs) or '0'}}};",
    ]

    body = "\n".join([*em.helpers.values(), *res.blocks, *res.tail])
    uses_vmath = VMATH_CALL.search(body) is not None
    if uses_vmath:
        em.runtime_files.add(VMATH_HEADER)

    c = [
        f"/* Generated by onnx2edge from {_c(source_name)}: do not edit; regenerate instead.",
        f" * Arena: {res.arena} bytes of activations (per context). Weights: {weight_bytes} bytes"
        + {
            "inline": " as const arrays below.",
            "file": " in model_weights.bin, loaded by " + P + "_init.",
            "external": " in the caller's blob (" + P + "_init_with_weights).",
        }[storage],
        f" * Every exported symbol starts with {P}_; see {P}.h and README.md. */",
        *(VMATH_PRAGMA if uses_vmath else []),
        "#include <math.h>",
        "#include <stdbool.h>",
        "#include <stddef.h>",
        "#include <stdint.h>",
        "#include <string.h>",
        *(["#include <stdio.h>"] if storage == "file" else []),
        f'#include "{P}.h"',
        *([f'#include "{VMATH_HEADER}"'] if uses_vmath else []),
        "",
        *threads_block(em.max_threads, device),
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
        f"static int o2e_ready = {ready_at_start};  /* weights in place: set by {P}_init* */",
        "",
        "/* ---- activations: one arena per context, offsets from the liveness planner ---- */",
        f"#ifndef {U}_NO_STATIC_ARENA  /* the built-in arena of {P}_run / the NULL-arena context */",
        f"static unsigned char o2e_static_arena[{arena_bytes}] O2E_ALIGNED;",
        f"static {P}_ctx o2e_default_ctx = {{o2e_static_arena, O2E_THREADS"
        + (f", {{{minus_ones}}}" if bounded else "")
        + "};",
        "#endif",
        "",
        *scratch_defs,
        "",
        f"int {P}_ctx_init({P}_ctx *ctx, void *arena, size_t arena_bytes)",
        "{",
        "  if (!ctx) return -6;",
        "  if (!arena) {",
        f"#ifndef {U}_NO_STATIC_ARENA",
        "    arena = o2e_static_arena;",
        "    arena_bytes = sizeof(o2e_static_arena);",
        "#else",
        "    return -6;",
        "#endif",
        "  }",
        # (no size test when the model needs no arena: size_t < 0 trips -Wtype-limits)
        f"  if ({f'arena_bytes < {U}_ARENA_BYTES || ' if res.arena else '(void)arena_bytes, '}((uintptr_t)arena & ({U}_ARENA_ALIGN - 1)) != 0) return -6;",
        "  ctx->arena = (unsigned char *)arena;",
        "  ctx->threads = O2E_THREADS;",
        *([f"  for (int i = 0; i < {len(outs)}; ++i) ctx->out_count[i] = -1;"] if bounded else []),
        "  return 0;",
        "}",
        "",
    ]
    if bounded:
        c += [
            "/* actual extent of each output along its run-time-sized axis (-1: static shape) */",
            f"int64_t {P}_ctx_output_count(const {P}_ctx *ctx, int i) {{ return ctx && i >= 0 && i < {len(outs)} ? ctx->out_count[i] : -1; }}",
            f"#ifndef {U}_NO_STATIC_ARENA",
            f"int64_t {P}_output_count(int i) {{ return {P}_ctx_output_count(&o2e_default_ctx, i); }}",
            "#endif",
            "",
        ]
    tail_decode = ["  o2e_ready = 1;", "  return 0;", "}"]
    if storage == "file":
        c += [
            f"int {P}_init(const char *weights_path)",
            "{",
            f"  unsigned char head[{WEIGHTS_HEADER}];",
            "  uint64_t size, sum;",
            "  size_t got;",
            '  FILE *f = fopen(weights_path ? weights_path : "model_weights.bin", "rb");',
            "  if (!f) return -1;",
            "  got = fread(head, 1, sizeof head, f);",
            "  if (got == sizeof head) { memcpy(&size, head + 8, 8); memcpy(&sum, head + 16, 8); }",
            f'  if (got != sizeof head || memcmp(head, "{WEIGHTS_MAGIC.decode()}", 8) != 0 || size != sizeof(o2e_weights)) {{ fclose(f); return -2; }}',
            "  got = fread(o2e_weights, 1, sizeof(o2e_weights), f);",
            "  fclose(f);",
            "  if (got != sizeof(o2e_weights)) return -3;",
            "  if (o2e_checksum(o2e_weights, sizeof(o2e_weights)) != sum) return -4;",
            *tail_decode,
        ]
    elif storage == "external":
        c += [
            f"int {P}_init_with_weights(const void *blob, size_t len)",
            "{",
            "  const unsigned char *b = (const unsigned char *)blob;",
            "  uint64_t size, sum;",
            "  if (!b) return -1;",
            "  if (((uintptr_t)b & 63u) != 0) return -5;",
            f'  if (len < {WEIGHTS_HEADER} || memcmp(b, "{WEIGHTS_MAGIC.decode()}", 8) != 0) return -2;',
            "  memcpy(&size, b + 8, 8);",
            "  memcpy(&sum, b + 16, 8);",
            f"  if (size != {U}_WEIGHT_BLOB_BYTES - {WEIGHTS_HEADER} || len != {U}_WEIGHT_BLOB_BYTES) return -2;",
            f"  if (sum != {U}_WEIGHT_CHECKSUM) return -4;",
            f"#ifndef {U}_SKIP_CHECKSUM  /* one pass over the blob; define it to trust the header */",
            f"  if (o2e_checksum(b + {WEIGHTS_HEADER}, (size_t)size) != sum) return -4;",
            "#endif",
            f"  o2e_weights = b + {WEIGHTS_HEADER};",
            *tail_decode,
        ]
    else:
        c += [
            f"int {P}_init(const char *weights_path)",
            "{",
            "  (void)weights_path;  /* weights are compiled in */",
            *tail_decode,
        ]
    kernel_name = "o2e_gemm_kernel_name()" if "o2e_gemm.h" in em.runtime_files else '"none"'
    pooled = "o2e_gemm.h" in em.runtime_files  # the kernels that split work across threads
    c += [
        "",
        f"const char *{P}_gemm_kernel(void) {{ return {kernel_name}; }}",
        "",
        f"int {P}_set_threads({P}_ctx *ctx, int n)",
        "{",
        f"#ifndef {U}_NO_STATIC_ARENA",
        "  if (!ctx) ctx = &o2e_default_ctx;",
        "#endif",
        "  if (!ctx) return -6;",
        f"  if (n < 1 || n > {U}_MAX_THREADS) return -8;",
        "#if O2E_THREADS == 1",
        "  if (n > 1) return -9;",
        "#endif",
        "  ctx->threads = n;",
        "  return 0;",
        "}",
        "",
        f"int {P}_get_threads(const {P}_ctx *ctx)",
        "{",
        f"#ifndef {U}_NO_STATIC_ARENA",
        "  if (!ctx) ctx = &o2e_default_ctx;",
        "#endif",
        "  return ctx ? ctx->threads : -6;",
        "}",
        "",
        f"int {P}_run_ctx({P}_ctx *ctx, const void *const *inputs, void *const *outputs)",
        "{",
        "  unsigned char *o2e_arena;",
        *(["  int64_t *o2e_out_count;"] if bounded else []),
        "  if (!ctx || !ctx->arena) return -6;",
        "  if (!o2e_ready) return -7;",
        "  o2e_arena = ctx->arena;",
        *(
            [
                "#if O2E_THREADS > 1  /* this context's thread count, for the calls of this run */",
                "  o2e_use_threads(ctx->threads > 0 ? ctx->threads : O2E_THREADS);",
                "#endif",
            ]
            if pooled
            else []
        ),
        *(["  o2e_out_count = ctx->out_count;"] if bounded else []),
        "  {",
        *decls,
        "  O2E_PROF_BEGIN",
        "  (void)inputs; (void)outputs; (void)o2e_arena;",
        *(["  " + " ".join(voids[i : i + 8]) for i in range(0, len(voids), 8)]),
        "",
        *res.blocks,
        *res.tail,
        "  }",
        "  return 0;",
        "}",
        "",
        f"int {P}_predict_ctx({P}_ctx *ctx{', ' if predict_params else ''}{predict_params})",
        "{",
        *predict_body,
        f"  return {P}_run_ctx(ctx, o2e_in, o2e_out);",
        "}",
        "",
        f"#ifndef {U}_NO_STATIC_ARENA",
        f"int {P}_run(const void *const *inputs, void *const *outputs)",
        "{",
        f"  return {P}_run_ctx(&o2e_default_ctx, inputs, outputs);",
        "}",
        "",
        f"int {P}_predict({predict_params or 'void'})",
        "{",
        *predict_body,
        f"  return {P}_run_ctx(&o2e_default_ctx, o2e_in, o2e_out);",
        "}",
        "#endif",
        "",
    ]
    checksum = 0
    if to_file:
        # written before the header: the checksum the code compares with is the file's own
        checksum = _write_weights(out_dir / "model_weights.bin", stored, offsets, total)
    h = _header(
        P,
        U,
        source_name=source_name,
        storage=storage,
        ins=ins,
        outs=outs,
        bounded=bounded,
        arena=int(res.arena),
        max_threads=em.max_threads,
        weight_bytes=weight_bytes,
        blob_bytes=WEIGHTS_HEADER + total if to_file else 0,
        checksum=checksum,
        predict_params=predict_params,
        quant=quantized_io_of(graph),
        strings=_has_strings(graph),
    )
    files = {f"{stem}.c": "\n".join(c), f"{P}.h": "\n".join(h)}
    runtime = Path(__file__).parent / "runtime"
    for name in sorted(em.runtime_files):
        files[name] = (runtime / name).read_text()
    for name, text in files.items():
        (out_dir / name).write_text(text)
    const_bytes = weight_bytes if storage == "inline" else 0
    return {
        "name": P,
        "arena_bytes": int(res.arena),
        "weight_bytes": int(weight_bytes),
        # the float constants the graph holds after folding: what weight_bytes compares with
        "onnx_weight_bytes": int(sum(a.nbytes for a in graph.initializers.values())),
        "optimize": optimize,
        "weights_storage": storage,
        # convert --max-threads: the per-thread workspaces' slots (NAME_MAX_THREADS)
        "max_threads": int(em.max_threads),
        # convert --device: the build the arena was planned for (generic: not recorded)
        **(
            {"device": device.name, "planned_threads": device.threads, "int8_kernels": device.int8}
            if device.is_mcu
            else {}
        ),
        "weights_in_file": bool(to_file),
        # where the weights' bytes live once the model runs (README: memory figures):
        # const data in the image, copies the init makes in RAM, the caller's blob
        "weights_const_bytes": int(const_bytes),
        "weights_ram_bytes": int(total if storage == "file" else 0),
        "weights_caller_bytes": int(WEIGHTS_HEADER + total if storage == "external" else 0),
        **(
            {
                "weights_fp16_tensors": len(half) + n_kernel_half,
                "weight_bytes_fp32": int(
                    sum(
                        4 * a.size if a.dtype == np.float16 else a.nbytes
                        for a in em.const_data.values()
                    )
                ),
                # the layers that read fp16 weights: batch-1 fully-connected kernels widen
                # them in registers as they load them (fp16_in_kernel_layers); any other
                # layer widens its own into arena scratch before it runs (fp16_scratch_layers;
                # the largest such scratch is counted in arena_bytes). No float32 copy of all.
                "fp16_weight_layers": sorted(set(em.fp16_layers) | em.fp16_kernel_layers),
                "fp16_in_kernel_layers": sorted(em.fp16_kernel_layers),
                "fp16_scratch_layers": sorted(em.fp16_layers),
                "fp16_scratch_bytes": max(em.fp16_layer_bytes.values(), default=0),
            }
            if weights_fp16
            else {}
        ),
        "nodes": len(graph.nodes),
        "kernels": dict(sorted(em.kernels.items())),
        "sparse_layers": em.sparse_layers,
        "sparse_mode": sparse_mode(em.kernel_options),
        "layer_kernels": dict(sorted(em.layer_strategies.items())),
        # per node with kernel strategies: [strategy, why it refused] for each before the chosen
        "kernel_refusals": {k: [list(r) for r in v] for k, v in sorted(em.kernel_refusals.items())},
        "sparse_break_even": dict(_SPARSE_BREAK_EVEN),
        "sparse_bytes_saved": sum(d["bytes_saved"] for d in em.sparse_layers),
        "runtime_files": sorted(em.runtime_files),
    }


def _header(
    P: str,
    U: str,
    *,
    source_name: str,
    storage: str,
    ins: list[Tensor],
    outs: list[Tensor],
    bounded: dict[int, int],
    arena: int,
    max_threads: int,
    weight_bytes: int,
    blob_bytes: int,
    checksum: int,
    predict_params: str,
    quant: Mapping[str, Mapping[str, Any]],
    strings: bool = False,
) -> list[str]:
    init_doc = {
        "inline": [
            f" * {P}_init(NULL) once before the first run (the weights are compiled in as const",
            " * data: it only marks the model ready).",
        ],
        "file": [
            f" * {P}_init(path) once before the first run: it loads model_weights.bin (NULL:",
            " * ./model_weights.bin) into a static buffer and checks its size and checksum.",
        ],
        "external": [
            f" * {P}_init_with_weights(blob, len) once before the first run: blob is the whole of",
            f" * model_weights.bin ({blob_bytes} bytes, 64-byte aligned) wherever the caller keeps it",
            " * (memory-mapped file, flash, a bundle resource); it is read in place, never copied, and",
            " * must stay valid while the model is in use. Size and checksum are checked.",
        ],
    }[storage]
    width = max(len(str(code)) for code, _ in RETURN_CODES)
    h = [
        f"/* {P}.h: generated by onnx2edge from {_c(source_name)}; see README.md beside it.",
        " *",
        *init_doc,
        f" * Then {P}_run() / {P}_predict() on the built-in static arena (one call at a time), or",
        f" * per instance: {P}_ctx_init(&ctx, arena, bytes) with an arena of {U}_ARENA_BYTES",
        f" * aligned to {U}_ARENA_ALIGN (NULL: the built-in one), then {P}_run_ctx(&ctx, ...).",
        " * Contexts with their own arenas may run at the same time from different threads.",
        f" * {P}_set_threads(&ctx, n) (NULL: the built-in context) chooses 1 .. {U}_MAX_THREADS",
        " * threads for that context's runs, in a build with the pool (-DO2E_THREADS=m, m > 1:",
        " * its default is m; without it, 1 thread and no pthread at all).",
        " * Buffers are caller-owned, of the element counts below. Nothing is allocated.",
        " *",
        " * Return codes (every int function):",
        *[f" * {code:>{width}}  {text}" for code, text in RETURN_CODES],
        " */",
        f"#ifndef {U}_H",
        f"#define {U}_H",
        "#include <stddef.h>",
        "#include <stdint.h>",
        "#include <stdbool.h>",
        *([STRING_TYPEDEF] if strings else []),
        "#ifdef __cplusplus",
        'extern "C" {',
        "#endif",
        "",
        f"#define {U}_NUM_INPUTS {len(ins)}",
        f"#define {U}_NUM_OUTPUTS {len(outs)}",
    ]
    for kind, ts in (("INPUT", ins), ("OUTPUT", outs)):
        for i, t in enumerate(ts):
            h.append(f'#define {U}_{kind}_{i}_NAME "{_c(t.name)}"')
            h.append(f"#define {U}_{kind}_{i}_SIZE {t.size}  /* {_shape_str(t)} {t.dtype.name} */")
            if t.name in quant:  # --io int8: real value = (q - ZERO_POINT) * SCALE
                q = quant[t.name]
                h.append(f"#define {U}_{kind}_{i}_SCALE {_f32(np.float32(q['scale']))}")
                h.append(f"#define {U}_{kind}_{i}_ZERO_POINT {int(q['zero_point'])}")
    for i, axis in bounded.items():
        h.append(
            f"#define {U}_OUTPUT_{i}_BOUNDED_AXIS {axis}  /* SIZE is a bound: its extent along "
            f"this axis after a run is {P}_output_count({i}) */"
        )
    h += [
        f"#define {U}_ARENA_BYTES {arena}",
        f"#define {U}_ARENA_ALIGN {ALIGN}",
        # the arena's per-thread workspaces were sized for this many (convert --max-threads):
        # -DO2E_THREADS above it stops the build, _set_threads above it returns -8
        f"#define {U}_MAX_THREADS {max_threads}",
        f"#define {U}_WEIGHT_BYTES {weight_bytes}",
        f"#define {U}_WEIGHTS_IN_FILE {1 if storage != 'inline' else 0}",
        *(
            [
                f"#define {U}_WEIGHT_BLOB_BYTES {blob_bytes}  /* model_weights.bin, header included */",
                f"#define {U}_WEIGHT_CHECKSUM UINT64_C({checksum})",
            ]
            if storage == "external"
            else []
        ),
        "",
        "/* one instance: its activation arena (and, for bounded outputs, their extents) */",
        f"typedef struct {P}_ctx {{",
        "  unsigned char *arena;",
        "  int threads;  /* 1 .. MAX_THREADS: set by _ctx_init (the build's default), _set_threads */",
        *([f"  int64_t out_count[{len(outs)}];"] if bounded else []),
        f"}} {P}_ctx;",
        "",
        *(
            [f"int {P}_init_with_weights(const void *blob, size_t len);"]
            if storage == "external"
            else [f"int {P}_init(const char *weights_path);"]
        ),
        f"int {P}_ctx_init({P}_ctx *ctx, void *arena, size_t arena_bytes);",
        f"int {P}_run_ctx({P}_ctx *ctx, const void *const *inputs, void *const *outputs);",
        f"int {P}_predict_ctx({P}_ctx *ctx{', ' if predict_params else ''}{predict_params});",
        f"int {P}_set_threads({P}_ctx *ctx, int n);  /* 0, -6, -8 or -9 (see above) */",
        f"int {P}_get_threads(const {P}_ctx *ctx);  /* the context's thread count */",
        f"const char *{P}_gemm_kernel(void);  /* which GEMM micro-kernel was compiled in */",
        *(
            [f"int64_t {P}_ctx_output_count(const {P}_ctx *ctx, int i);  /* see _BOUNDED_AXIS */"]
            if bounded
            else []
        ),
        f"#ifndef {U}_NO_STATIC_ARENA  /* define it to leave the built-in arena out */",
        f"int {P}_run(const void *const *inputs, void *const *outputs);",
        f"int {P}_predict({predict_params or 'void'});",
        *([f"int64_t {P}_output_count(int i);  /* see _BOUNDED_AXIS */"] if bounded else []),
        "#endif",
        "#ifdef O2E_TRACE_ENABLED",
        f"void {P}_set_trace(void (*cb)(const char *, const void *, size_t));",
        "#endif",
        "",
        "#ifdef __cplusplus",
        "}",
        "#endif",
        "#endif",
        "",
    ]
    return h


def _has_strings(graph: Graph) -> bool:
    return any(
        v.type is not None and v.type.elem_type == 8 for v in graph.values.values()
    )  # STRING


def _c(s: str) -> str:
    return s.replace("*/", "* /").replace("\\", "/").replace('"', "'")


# runtime/o2e_vmath.h: included when the code calls one of its functions, with the pragma that
# lets gcc vectorise the loops around them first in the file (the header says why)
VMATH_HEADER = "o2e_vmath.h"
# (or names one of o2e_gemm.h's epilogue kinds that call them, which exist only after it)
VMATH_CALL = re.compile(
    r"\bo2e_(?:exp|log|log1p|tanh|sigmoid|erf)f\("
    r"|\bO2E_ACT_(?:SIGMOID|TANH|SWISH|GELU|MISH)\b"
    r"|\bo2e_softmax_(?:rows|cols)\b"  # runtime/o2e_softmax{,_cols}.h's loops call them
)
VMATH_PRAGMA = [
    "#if defined(__GNUC__) && !defined(__clang__)",
    '#pragma GCC optimize("no-trapping-math")  /* o2e_vmath.h: lets its callers\' loops vectorise */',
    "#endif",
]

MAIN_C = r"""/* Example program: reads each input as raw little-endian binary, runs the model, writes each
 * output as raw binary. Usage: ./model IN_0.bin [...] OUT_0.bin [...]
 * (inputs then outputs, in the order of @P@.h). The weights file, when the weights are not
 * compiled in: $MODEL_WEIGHTS, else ./model_weights.bin. */
#include <stdio.h>
#include <stdlib.h>
#include "@P@.h"

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
@EXTERNAL@
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
@INIT@
  if (rc != 0) { fprintf(stderr, "@P@ init failed (%d): is model_weights.bin here, or MODEL_WEIGHTS set?\n", rc); return 1; }
@READS@
  if (@P@_run(inputs, outputs) != 0) return 1;
@WRITES@
  return 0;
}
"""

# --weights-storage external: how a program hands the weights over (here: read into a
# 64-byte aligned heap block; a real one would map the file or point into flash)
EXTERNAL_LOAD = r"""
static void *o2e_blob_mem;

static int load_weights(const char *path)
{
  FILE *f = fopen(path ? path : "model_weights.bin", "rb");
  unsigned char *blob;
  size_t got;
  if (!f) return -1;
  o2e_blob_mem = malloc(@BLOB@ + 64);
  if (!o2e_blob_mem) { fclose(f); return -1; }
  blob = (unsigned char *)o2e_blob_mem + (64 - (size_t)((uintptr_t)o2e_blob_mem & 63u));
  got = fread(blob, 1, @BLOB@, f);
  fclose(f);
  return @P@_init_with_weights(blob, got);
}
"""


def write_support_files(
    graph: Graph,
    out_dir: Path,
    prefix: str = "model",
    *,
    source: str = "model.c",
    storage: str = "inline",
    blob_bytes: int = 0,
) -> list[str]:
    """main.c (the example program), a Makefile and a CMakeLists.txt for the package."""
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
    if not em_ins:  # a model of random or constant outputs: nothing to read
        reads.insert(0, "  (void)read_file;")
    usage = " ".join(
        [f"{c_ident(n)}.bin" for n, _ in em_ins] + [f"{c_ident(n)}.bin" for n, _ in em_outs]
    )
    external = storage == "external"
    init = (
        '  rc = load_weights(getenv("MODEL_WEIGHTS"));'
        if external
        else f'  rc = {prefix}_init(getenv("MODEL_WEIGHTS"));'
    )
    main = (
        MAIN_C.replace(
            "@EXTERNAL@", EXTERNAL_LOAD.replace("@BLOB@", str(blob_bytes)) if external else ""
        )
        .replace("@BUFFERS@", "\n".join(bufs))
        .replace("@INIT@", init)
        .replace("@NIN_ARR@", str(max(len(em_ins), 1)))
        .replace("@NOUT_ARR@", str(max(len(em_outs), 1)))
        .replace("@NIN@", str(len(em_ins)))
        .replace("@NOUT@", str(len(em_outs)))
        .replace("@USAGE@", usage)
        .replace("@READS@", "\n".join(reads))
        .replace("@WRITES@", "\n".join(writes))
        .replace("@P@", prefix)
    )
    (out_dir / "main.c").write_text(main)
    P, U = prefix, prefix.upper()
    (out_dir / "Makefile").write_text(
        "# make            the example program ./model and the library lib" + P + ".a\n"
        "# make THREADS=4  with the GEMM thread pool (pthreads); CFLAGS='-O3 -march=native'\n"
        "CC ?= gcc\n"
        "AR ?= ar\n"
        "CFLAGS ?= -std=c99 -O2 -Wall -Wextra -Werror\n"
        "THREADS ?= 1\n"
        "LDLIBS = -lm\n"
        "ifneq ($(THREADS),1)\n"
        "  CFLAGS += -DO2E_THREADS=$(THREADS) -pthread\n"
        "  LDLIBS += -pthread\n"
        "endif\n\n"
        f"all: model lib{P}.a\n\n"
        f"model: main.c {source} {P}.h\n"
        f"\t$(CC) $(CFLAGS) -o $@ main.c {source} $(LDLIBS)\n\n"
        f"lib{P}.a: {source} {P}.h\n"
        f"\t$(CC) $(CFLAGS) -c {source} -o {P}.o\n"
        f"\t$(AR) rcs $@ {P}.o\n\n"
        f"clean:\n\trm -f model lib{P}.a {P}.o\n\n.PHONY: all clean\n"
    )
    (out_dir / "CMakeLists.txt").write_text(
        "# The model as a static library target `" + P + "`: add_subdirectory(this folder), then\n"
        "# target_link_libraries(your_app PRIVATE " + P + ') and #include "' + P + '.h".\n'
        f"# -D{U}_THREADS=4: the GEMM thread pool (pthreads); 1 (default) pulls in no pthread.\n"
        "cmake_minimum_required(VERSION 3.10)\n"
        f"project({P} C)\n"
        f'set({U}_THREADS 1 CACHE STRING "threads of the GEMM pool (1: none)")\n'
        f"add_library({P} STATIC {source})\n"
        f"set_target_properties({P} PROPERTIES C_STANDARD 99 C_STANDARD_REQUIRED ON)\n"
        f"target_include_directories({P} PUBLIC ${{CMAKE_CURRENT_SOURCE_DIR}})\n"
        f"if(NOT MSVC)\n  target_link_libraries({P} PUBLIC m)\nendif()\n"
        f"if({U}_THREADS GREATER 1)\n"
        "  find_package(Threads REQUIRED)\n"
        f"  target_compile_definitions({P} PRIVATE O2E_THREADS=${{{U}_THREADS}})\n"
        f"  target_link_libraries({P} PUBLIC Threads::Threads)\n"
        "endif()\n"
        'if(CMAKE_C_COMPILER_ID MATCHES "GNU|Clang")\n'
        f"  target_compile_options({P} PRIVATE -Wall -Wextra)\n"
        "endif()\n"
        "# the example program, only when this folder is the top-level project\n"
        "if(CMAKE_SOURCE_DIR STREQUAL CMAKE_CURRENT_SOURCE_DIR)\n"
        f"  add_executable({P}_main main.c)\n"
        f"  target_link_libraries({P}_main {P})\n"
        "endif()\n"
    )
    return ["main.c", "Makefile", "CMakeLists.txt"]
