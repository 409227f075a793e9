"""The generated C as a library others link (issue 30): prefixed names (two models in one
program), weights where the caller wants them (const data, a loaded file, the caller's blob),
contexts with caller-supplied arenas run concurrently (ThreadSanitizer), the error codes,
and the footprint convert reports against `size` of the built object."""

from __future__ import annotations

import ctypes
import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from onnx2edge import api
from onnx2edge.backends.c.build import STRICT_FLAGS, compiler
from onnx2edge.backends.c.footprint import section_sizes, summarise
from onnx2edge.backends.c.writer import default_name
from onnx2edge.cli import main
from onnx2edge.runtime import ort_run

from conftest import EXAMPLE, make_model, save, tensor, vi

MLP = Path(__file__).parent / "fixtures" / "digits" / "mlp.onnx"
needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")


def _ref(model: Path, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return ort_run(onnx.load(model), feeds)


def _io(out: Path) -> dict:
    return json.loads((out / "onnx2edge.json").read_text())


def _feeds(out: Path, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        s["name"]: rng.standard_normal(s["shape"]).astype(s["dtype"]) for s in _io(out)["inputs"]
    }


def _close(got: np.ndarray, ref: np.ndarray) -> None:
    assert got.shape == ref.shape
    assert np.abs(got - ref).max() <= 1e-4 * max(1.0, float(np.abs(ref).max()))


def _build(tmp: Path, name: str, sources: list[Path], includes: list[Path], *flags: str) -> Path:
    exe = tmp / name
    cmd = [compiler(), *STRICT_FLAGS, "-O2", *flags, *(f"-I{d}" for d in includes)]
    proc = subprocess.run(
        [*cmd, *map(str, sources), "-o", str(exe), "-lm"], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return exe


def _globals(obj: Path) -> set[str]:
    out = subprocess.run(
        ["nm", "-g", "--defined-only", str(obj)], capture_output=True, text=True, check=True
    ).stdout
    return {line.split()[-1] for line in out.splitlines() if line.strip()}


def test_default_name_is_the_model_files() -> None:
    assert default_name("resnet50-v1-7.onnx") == "resnet50_v1_7"
    assert default_name("sdpa_block.dynamo.onnx") == "sdpa_block"
    assert default_name("3dunet.onnx") == "m3dunet"
    assert default_name("int.onnx") == "int_model"
    assert default_name("O2E.onnx") == "o2e_model"
    assert default_name("---.onnx") == default_name(None) == "model"


def test_bad_name_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for bad in ("9lives", "a-b", "static", "o2e_x"):
        rc = main(
            ["convert", str(EXAMPLE), "--target", "c", "-o", str(tmp_path / "o"), "--name", bad]
        )
        err = capsys.readouterr().err
        # refused before the model is read: the one line is all stderr holds
        assert rc == 2 and "--name" in err and len(err.strip().splitlines()) == 1, err
        assert not (tmp_path / "o").exists()  # nothing half-written


TWO_MODELS_MAIN = r"""
#include <stdio.h>
#include "tiny_cnn.h"
#include "digits.h"
static float a_in[TINY_CNN_INPUT_0_SIZE], a_out[TINY_CNN_OUTPUT_0_SIZE];
static float b_in[DIGITS_INPUT_0_SIZE], b_out[DIGITS_OUTPUT_0_SIZE];
static int io(const char *path, void *buf, size_t n, int write)
{
  FILE *f = fopen(path, write ? "wb" : "rb");
  size_t got;
  if (!f) return 1;
  got = write ? fwrite(buf, 1, n, f) : fread(buf, 1, n, f);
  fclose(f);
  return got != n;
}
int main(int argc, char **argv)
{
  int rc;
  if (argc != 6) return 2;
  if (io(argv[1], a_in, sizeof a_in, 0) || io(argv[2], b_in, sizeof b_in, 0)) return 3;
  if ((rc = tiny_cnn_init(argv[5])) != 0) { fprintf(stderr, "tiny_cnn_init %d\n", rc); return 4; }
  if ((rc = digits_init(NULL)) != 0) { fprintf(stderr, "digits_init %d\n", rc); return 4; }
  if (tiny_cnn_predict(a_in, a_out) || digits_predict(b_in, b_out)) return 5;
  return io(argv[3], a_out, sizeof a_out, 1) || io(argv[4], b_out, sizeof b_out, 1);
}
"""


@needs_gcc
def test_two_models_link_into_one_program(tmp_path: Path) -> None:
    """Two models (one loading its weights from a file, one compiled in) in one program:
    no symbol in common, both outputs checked against onnxruntime."""
    a, b = tmp_path / "a", tmp_path / "b"
    ra = api.convert(EXAMPLE, "c", a, options={"weights_storage": "file"})
    rb = api.convert(MLP, "c", b, options={"name": "digits", "weights_storage": "inline"})
    assert (ra.stats["name"], rb.stats["name"]) == ("tiny_cnn", "digits")
    objs = []
    for d in (a, b):
        obj = tmp_path / f"{d.name}.o"
        subprocess.run(
            [
                compiler(),
                "-std=c99",
                "-O2",
                "-DO2E_THREADS=2",
                "-c",
                str(d / "model.c"),
                "-o",
                str(obj),
            ],
            check=True,
        )
        objs.append(_globals(obj))
    assert objs[0] and objs[1] and not objs[0] & objs[1], objs[0] & objs[1]
    assert all(s.startswith("tiny_cnn_") for s in objs[0]), objs[0]
    assert all(s.startswith("digits_") for s in objs[1]), objs[1]
    (tmp_path / "main.c").write_text(TWO_MODELS_MAIN)
    exe = _build(tmp_path, "two", [tmp_path / "main.c", a / "model.c", b / "model.c"], [a, b])
    _run_two(exe, a, b, tmp_path)


def _run_two(exe: Path, a: Path, b: Path, tmp_path: Path) -> None:
    """Run TWO_MODELS_MAIN (a: tiny_cnn, weights from a file; b: the digits MLP) and check
    both outputs against onnxruntime."""
    fa, fb = _feeds(a, 1), _feeds(b, 2)
    (xa,), (xb,) = fa.values(), fb.values()
    xa.tofile(tmp_path / "xa.bin")
    xb.tofile(tmp_path / "xb.bin")
    ya, yb = tmp_path / "ya.bin", tmp_path / "yb.bin"
    args = [tmp_path / "xa.bin", tmp_path / "xb.bin", ya, yb, a / "model_weights.bin"]
    proc = subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    for out, model, feeds, got in ((a, EXAMPLE, fa, ya), (b, MLP, fb, yb)):
        (spec,) = _io(out)["outputs"]
        (ref,) = _ref(model, feeds).values()
        _close(np.fromfile(got, dtype=np.float32).reshape(spec["shape"]), ref)


@pytest.mark.skipif(shutil.which("cmake") is None, reason="needs cmake")
def test_two_models_as_cmake_subdirectories(tmp_path: Path) -> None:
    """Each folder's CMakeLists.txt is a target another project add_subdirectory's; one of
    the two with its thread pool (TINY_CNN_THREADS=2)."""
    a, b = tmp_path / "a", tmp_path / "b"
    opts = {"weights_storage": "file", "footprint": "estimate"}
    api.convert(EXAMPLE, "c", a, options=opts)
    api.convert(MLP, "c", b, options={"name": "digits", "footprint": "estimate"})
    (tmp_path / "main.c").write_text(TWO_MODELS_MAIN)
    (tmp_path / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.10)\nproject(app C)\n"
        "add_subdirectory(a)\nadd_subdirectory(b)\n"
        "add_executable(app main.c)\ntarget_link_libraries(app PRIVATE tiny_cnn digits)\n"
    )
    build = tmp_path / "build"
    for cmd in (
        ["cmake", "-S", str(tmp_path), "-B", str(build), "-DTINY_CNN_THREADS=2"],
        ["cmake", "--build", str(build)],
    ):
        proc = subprocess.run(cmd, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    _run_two(build / "app", a, b, tmp_path)


def _lib(out: Path, tmp: Path, *flags: str) -> ctypes.CDLL:
    lib = tmp / f"lib{out.name}.so"
    cmd = [compiler(), *STRICT_FLAGS, "-O1", "-fPIC", "-shared", *flags, f"-I{out}"]
    subprocess.run([*cmd, str(out / "model.c"), "-o", str(lib), "-lm"], check=True)
    return ctypes.CDLL(str(lib))


def _aligned(raw: bytes, misalign: int = 0) -> tuple[np.ndarray, int]:
    buf = np.zeros(len(raw) + 128, np.uint8)
    start = -buf.ctypes.data % 64 + misalign
    buf[start : start + len(raw)] = np.frombuffer(raw, np.uint8)
    return buf, buf.ctypes.data + start


@needs_gcc
def test_external_weights_checked_and_read_in_place(tmp_path: Path) -> None:
    out = tmp_path / "ext"
    res = api.convert(EXAMPLE, "c", out, options={"weights_storage": "external"})
    assert res.stats["weights_storage"] == "external" and res.stats["weights_ram_bytes"] == 0
    h = (out / "tiny_cnn.h").read_text()
    assert "int tiny_cnn_init_with_weights(const void *blob, size_t len);" in h
    assert "tiny_cnn_init(" not in h
    # no copy of the weights in the image: .bss is the arena, .rodata small
    obj = tmp_path / "ext.o"
    subprocess.run(
        [compiler(), "-std=c99", "-O2", "-c", str(out / "model.c"), "-o", str(obj)], check=True
    )
    sizes = summarise(section_sizes(obj))
    assert sizes["bss_bytes"] - res.stats["arena_bytes"] < 1024, sizes
    lib = _lib(out, tmp_path)
    init = lib.tiny_cnn_init_with_weights
    init.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    run = lib.tiny_cnn_run
    run.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    feeds = _feeds(out, 3)
    (x,) = feeds.values()
    y = np.zeros((1, 10), np.float32)
    ins, outs = (ctypes.c_void_p * 1)(x.ctypes.data), (ctypes.c_void_p * 1)(y.ctypes.data)
    assert run(ins, outs) == -7  # before init
    raw = (out / "model_weights.bin").read_bytes()
    assert init(None, len(raw)) == -1
    buf, ptr = _aligned(raw, misalign=16)
    assert init(ptr, len(raw)) == -5
    buf, ptr = _aligned(raw)
    assert init(ptr, len(raw) - 1) == -2
    bad = bytearray(raw)
    bad[200] ^= 1
    bbuf, bptr = _aligned(bytes(bad))
    assert init(bptr, len(raw)) == -4
    stale = bytearray(raw)
    stale[:8] = b"O2EW0001"
    sbuf, sptr = _aligned(bytes(stale))
    assert init(sptr, len(raw)) == -2
    assert init(ptr, len(raw)) == 0
    assert run(ins, outs) == 0
    (ref,) = _ref(EXAMPLE, feeds).values()
    _close(y, ref)
    del bbuf, sbuf  # kept alive until here: the library reads the blob in place
    # the same through verify (run_library hands the file's bytes over)
    rep = api.verify(EXAMPLE, target="c", options={"weights_storage": "external"})
    assert rep.ok, rep.format()
    assert buf.size  # the blob outlives every run


@needs_gcc
def test_file_weights_errors(tmp_path: Path) -> None:
    out = tmp_path / "f"
    api.convert(EXAMPLE, "c", out, options={"weights_storage": "file"})
    lib = _lib(out, tmp_path)
    init = lib.tiny_cnn_init
    init.argtypes = [ctypes.c_char_p]
    assert init(str(tmp_path / "missing.bin").encode()) == -1
    raw = (out / "model_weights.bin").read_bytes()
    (tmp_path / "short.bin").write_bytes(raw[:1000])
    assert init(str(tmp_path / "short.bin").encode()) == -3
    bad = bytearray(raw)
    bad[300] ^= 4
    (tmp_path / "bad.bin").write_bytes(bytes(bad))
    assert init(str(tmp_path / "bad.bin").encode()) == -4
    (tmp_path / "other.bin").write_bytes(raw[:8] + (1).to_bytes(8, "little") + raw[16:])
    assert init(str(tmp_path / "other.bin").encode()) == -2
    assert init(str(out / "model_weights.bin").encode()) == 0


def _big_matmul(path: Path) -> Path:
    """4.2 MB of float32 weights: above the 4 MB that used to send weights to a file."""
    rng = np.random.default_rng(5)
    w = (rng.standard_normal((1100, 960)) / 30).astype(np.float32)
    m = make_model(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        [vi("x", [1, 1100])],
        [vi("y", [1, 960])],
        [tensor("w", w)],
    )
    return save(m, path)


@needs_gcc
def test_inline_weights_of_a_big_model_are_const_data(tmp_path: Path) -> None:
    model = _big_matmul(tmp_path / "big.onnx")
    out = tmp_path / "big"
    res = api.convert(model, "c", out, options={"weights_storage": "inline"})
    assert res.stats["weight_bytes"] > 4 << 20 and not res.stats["weights_in_file"]
    obj = tmp_path / "big.o"
    # -O0: the sections' placement does not depend on the optimiser; the build is fastest
    subprocess.run(
        [compiler(), "-std=c99", "-O0", "-c", str(out / "model.c"), "-o", str(obj)], check=True
    )
    sizes = summarise(section_sizes(obj))
    assert sizes["rodata_bytes"] >= res.stats["weight_bytes"], sizes
    assert sizes["bss_bytes"] + sizes["data_bytes"] < res.stats["arena_bytes"] + 4096, sizes
    fp = res.stats["footprint"]
    assert fp["weights_ram_bytes"] == 0 and fp["ram_bytes"] < 1 << 20
    assert fp["flash_bytes"] >= res.stats["weight_bytes"]
    x = np.random.default_rng(0).standard_normal((1, 1100)).astype(np.float32)
    _close(api.run(out, {"x": x})["y"], _ref(model, {"x": x})["y"])


CONTEXTS_MAIN = r"""
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tiny_cnn.h"
#define RUNS 3
static float in[2][TINY_CNN_INPUT_0_SIZE], out[2][TINY_CNN_OUTPUT_0_SIZE];
static tiny_cnn_ctx ctx[2];
static void *worker(void *arg)
{
  const int t = (int)(size_t)arg;
  static int failed[2];
  for (int r = 0; r < RUNS; ++r)
    if (tiny_cnn_predict_ctx(&ctx[t], in[t], out[t]) != 0) failed[t] = 1;
  return failed[t] ? (void *)1 : NULL;
}
int main(int argc, char **argv)
{
  pthread_t th[2];
  void *arena[2], *res;
  FILE *f;
  if (argc != 5) return 2;
  for (int t = 0; t < 2; ++t) {
    f = fopen(argv[1 + t], "rb");
    if (!f || fread(in[t], sizeof in[t], 1, f) != 1) return 3;
    fclose(f);
    /* the caller's arenas, aligned as the header states */
    if (posix_memalign(&arena[t], TINY_CNN_ARENA_ALIGN, TINY_CNN_ARENA_BYTES)) return 4;
  }
  if (tiny_cnn_init(NULL) != 0) return 5;
  if (tiny_cnn_ctx_init(&ctx[0], arena[0], TINY_CNN_ARENA_BYTES - 1) != -6) return 6;
  if (tiny_cnn_ctx_init(&ctx[0], (char *)arena[0] + 4, TINY_CNN_ARENA_BYTES) != -6) return 6;
  if (tiny_cnn_run_ctx(NULL, NULL, NULL) != -6) return 6;
  for (int t = 0; t < 2; ++t)
    if (tiny_cnn_ctx_init(&ctx[t], arena[t], TINY_CNN_ARENA_BYTES) != 0) return 7;
#ifdef SET_THREADS /* each context its own count, both on the one pool */
  if (tiny_cnn_set_threads(&ctx[0], SET_THREADS) != 0 || tiny_cnn_set_threads(&ctx[1], 3) != 0)
    return 10;
#endif
  for (int t = 0; t < 2; ++t) pthread_create(&th[t], NULL, worker, (void *)(size_t)t);
  for (int t = 0; t < 2; ++t) { pthread_join(th[t], &res); if (res) return 8; }
  for (int t = 0; t < 2; ++t) {
    f = fopen(argv[3 + t], "wb");
    if (!f || fwrite(out[t], sizeof out[t], 1, f) != 1) return 9;
    fclose(f);
    free(arena[t]);
  }
  return 0;
}
"""


def _tsan_works(tmp: Path) -> bool:
    src = tmp / "probe.c"
    src.write_text("int main(void) { return 0; }\n")
    proc = subprocess.run(
        [compiler(), "-fsanitize=thread", str(src), "-o", str(tmp / "probe")], capture_output=True
    )
    return proc.returncode == 0 and subprocess.run([str(tmp / "probe")]).returncode == 0


@needs_gcc
@pytest.mark.parametrize("threads", [1, 2, 8])
def test_two_contexts_run_concurrently_under_tsan(tmp_path: Path, threads: int) -> None:
    """Two pthreads, each its own context on a caller-allocated arena, run at the same time
    (compiled with -fsanitize=thread: a data race fails the run); with the GEMM pool
    (O2E_THREADS=2) the two share it; with --max-threads 8 one context runs on 8 threads and
    the other on 3 (set_threads). Both outputs checked against onnxruntime."""
    if not _tsan_works(tmp_path):
        pytest.skip("this gcc cannot build or run -fsanitize=thread programs")
    out = tmp_path / "m"
    opts = {"footprint": "estimate", "max_threads": max(threads, 4)}
    api.convert(EXAMPLE, "c", out, options=opts)
    (tmp_path / "ctx.c").write_text(CONTEXTS_MAIN)
    pool = [f"-DO2E_THREADS={min(threads, 2)}"] if threads > 1 else []
    pool += [f"-DSET_THREADS={threads}"] if threads > 2 else []
    exe = _build(
        tmp_path,
        "ctx",
        [tmp_path / "ctx.c", out / "model.c"],
        [out],
        "-g",
        "-fsanitize=thread",
        "-pthread",
        *pool,
    )
    feeds = [_feeds(out, s) for s in (11, 12)]
    for i, f in enumerate(feeds):
        next(iter(f.values())).tofile(tmp_path / f"x{i}.bin")
    args = [str(tmp_path / n) for n in ("x0.bin", "x1.bin", "y0.bin", "y1.bin")]
    proc = subprocess.run(
        [str(exe), *args],
        capture_output=True,
        text=True,
        env={"TSAN_OPTIONS": "halt_on_error=1 exitcode=66"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "WARNING: ThreadSanitizer" not in proc.stderr, proc.stderr[-3000:]
    for i, f in enumerate(feeds):
        (ref,) = _ref(EXAMPLE, f).values()
        _close(np.fromfile(tmp_path / f"y{i}.bin", dtype=np.float32).reshape(ref.shape), ref)


@needs_gcc
def test_no_static_arena_leaves_bss_empty(tmp_path: Path) -> None:
    out = tmp_path / "m"
    res = api.convert(EXAMPLE, "c", out, options={"footprint": "estimate"})
    obj = tmp_path / "m.o"
    cmd = [
        compiler(),
        *STRICT_FLAGS,
        "-O1",
        "-DTINY_CNN_NO_STATIC_ARENA",
        "-c",
        str(out / "model.c"),
    ]
    subprocess.run([*cmd, "-o", str(obj)], check=True)
    assert summarise(section_sizes(obj))["bss_bytes"] < 1024 < res.stats["arena_bytes"]
    assert "tiny_cnn_run" not in _globals(obj) and "tiny_cnn_run_ctx" in _globals(obj)


@needs_gcc
@pytest.mark.parametrize(
    "options",
    [{}, {"weights_storage": "file"}, {"weights": "fp16"}],
    ids=["inline", "file", "fp16"],
)
def test_footprint_matches_size_of_the_object(tmp_path: Path, options: dict) -> None:
    """convert's flash and RAM figures within 5% of `size -A` of the Makefile's build of
    model.c; fp16 weights make no float32 copy: only the per-layer scratch, in the arena."""
    out = tmp_path / "m"
    res = api.convert(MLP, "c", out, options=options)
    fp = res.stats["footprint"]
    assert fp["method"].startswith("measured")
    proc = subprocess.run(
        ["make", "-s", "-C", str(out), "libmlp.a"], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    sizes = section_sizes(out / "mlp.o")
    text_ro_data = sum(
        n for s, n in sizes.items() if s.startswith((".text", ".eh_frame", ".rodata", ".data"))
    )
    ram = sum(n for s, n in sizes.items() if s.startswith((".data", ".bss")))
    assert abs(fp["flash_bytes"] - text_ro_data) <= 0.05 * text_ro_data, (fp, sizes)
    assert abs(fp["ram_bytes"] - ram) <= 0.05 * ram, (fp, sizes)
    assert fp["ram_bytes"] >= fp["arena_bytes"] + fp["weights_ram_bytes"]
    if options.get("weights") == "fp16":
        scratch = res.stats["fp16_scratch_bytes"]
        assert fp["weights_ram_bytes"] == 0 and 0 < scratch <= fp["arena_bytes"]
        assert scratch < res.stats["weight_bytes_fp32"]
    if options.get("weights_storage") == "file":
        assert fp["weights_ram_bytes"] >= res.stats["weight_bytes"]


def test_convert_prints_the_footprint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(
        [
            "convert",
            str(MLP),
            "--target",
            "c",
            "-o",
            str(tmp_path / "o"),
            "--weights",
            "fp16",
            "--footprint",
            "estimate",
        ]
    )
    assert rc == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("footprint:"))
    # fp16 weights stay in flash: the RAM figure is the arena alone (their per-layer scratch)
    assert "estimated" in line and "RAM" in line and "weights" not in line.split("RAM")[1], line


def test_readme_documents_the_package(tmp_path: Path) -> None:
    out = tmp_path / "m"
    res = api.convert(
        MLP, "c", out, options={"weights_storage": "external", "footprint": "estimate"}
    )
    assert "README.md" in res.files
    text = (out / "README.md").read_text()
    h = (out / "mlp.h").read_text()
    for code in range(-7, 1):  # every return code, in the README and the header
        assert f"| {code} |" in text and f" * {code:>2}  " in h, code
    for fn in (
        "mlp_init_with_weights",
        "mlp_ctx_init",
        "mlp_run_ctx",
        "mlp_predict_ctx",
        "mlp_run",
        "mlp_predict",
        "mlp_gemm_kernel",
    ):
        assert f"`int {fn}(" in text or f"{fn}(" in text, fn
    assert "add_subdirectory" in text and "MLP_ARENA_ALIGN" in text and "O2E_THREADS" in text
    assert f"{res.stats['arena_bytes']:,} bytes" in text  # the memory figures
    assert "estimated" in text


@pytest.fixture(scope="module")
def qdq_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small QDQ model (int8 activations, per-tensor input / output scales), quantized with
    onnxruntime.quantization."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    rng = np.random.default_rng(31)
    m = make_model(
        [
            helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c"], ["r"]),
            helper.make_node("Flatten", ["r"], ["f"]),
            helper.make_node("Gemm", ["f", "wg"], ["y"], transB=1),
        ],
        [vi("x", [1, 3, 8, 8])],
        [vi("y", [1, 10])],
        [
            tensor("w", (rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32)),
            tensor("b", (rng.standard_normal(8) * 0.1).astype(np.float32)),
            tensor("wg", (rng.standard_normal((10, 512)) * 0.05).astype(np.float32)),
        ],
    )
    d = tmp_path_factory.mktemp("q")
    fp = save(m, d / "f.onnx")

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            r = np.random.default_rng(32)
            self.it = iter(
                [{"x": r.standard_normal((1, 3, 8, 8)).astype(np.float32)} for _ in range(8)]
            )

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.it, None)

    q = d / "sensor.onnx"
    quantize_static(
        str(fp),
        str(q),
        Reader(),
        quant_format=QuantFormat.QDQ,
        activation_type=QuantType.QInt8,
        weight_type=QuantType.QInt8,
    )
    return q


def test_io_int8_exposes_the_quantized_ends(tmp_path: Path, qdq_model: Path) -> None:
    """--io int8: int8 in, int8 out, scale and zero point in the header and manifest; the
    outputs are exactly the float-io build's, requantized, and within one quantization step of
    onnxruntime on the float model fed the dequantized input."""
    q8, fl = tmp_path / "q8", tmp_path / "fl"
    res = api.convert(qdq_model, "c", q8, options={"io": "int8", "footprint": "estimate"})
    api.convert(qdq_model, "c", fl, options={"footprint": "estimate"})
    io = _io(q8)
    (xin,), (yout,) = io["inputs"], io["outputs"]
    assert xin["dtype"] == yout["dtype"] == "int8" and res.stats["name"] == "sensor"
    h = (q8 / "sensor.h").read_text()
    sx, zx = xin["quantization"]["scale"], xin["quantization"]["zero_point"]
    sy, zy = yout["quantization"]["scale"], yout["quantization"]["zero_point"]
    assert f"#define SENSOR_INPUT_0_ZERO_POINT {zx}" in h and "SENSOR_OUTPUT_0_SCALE" in h
    assert "quantized" in (q8 / "README.md").read_text()
    xf = np.random.default_rng(33).standard_normal((1, 3, 8, 8)).astype(np.float32)
    xq = np.clip(np.round(xf / sx) + zx, -128, 127).astype(np.int8)
    xd = ((xq.astype(np.float32) - zx) * np.float32(sx)).astype(np.float32)
    yq = api.run(q8, {"x": xq})["y"]
    assert yq.dtype == np.int8
    y_deq = (yq.astype(np.float32) - zy) * np.float32(sy)
    y_float_io = api.run(fl, {"x": xd})["y"]
    np.testing.assert_allclose(
        y_deq, y_float_io, rtol=0, atol=1e-6 * max(1.0, float(np.abs(y_float_io).max()))
    )
    ref = _ref(qdq_model, {"x": xd})["y"]
    assert np.abs(y_deq - ref).max() <= sy * (1 + 1e-6)
    # verify quantizes its float inputs and dequantizes the outputs the same way
    rep = api.verify(qdq_model, target="c", options={"io": "int8"})
    assert rep.ok, rep.format()


def test_io_int8_refusals(
    tmp_path: Path, qdq_model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for model, io, why in ((MLP, "int8", "no input"), (qdq_model, "uint8", "quantized as int8")):
        rc = main(["convert", str(model), "--target", "c", "-o", str(tmp_path / "o"), "--io", io])
        err = capsys.readouterr().err
        assert rc == 2 and why in err and "Traceback" not in err, err
        assert not (tmp_path / "o").exists()
