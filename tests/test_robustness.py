"""Bad input gets one clean line and exit 2 — never a traceback, a MemoryError or exit 3."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from onnx2edge.cli import main

from conftest import EXAMPLE, make_model, save, tensor, vi

ROOT = Path(__file__).resolve().parent.parent


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().err


def _one_clean_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.startswith("onnx2edge: error:")]
    assert len(lines) == 1, err
    assert "Traceback" not in err and "internal error" not in err, err
    return lines[0]


def test_conv_channel_mismatch_names_the_node(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    w = tensor("W", np.ones((8, 5, 3, 3), np.float32))
    m = make_model(
        [helper.make_node("Conv", ["x", "W"], ["y"], name="conv1")],
        [vi("x", [1, 3, 8, 8])],
        [vi("y", ["n", "c", "h", "w"])],
        [w],
    )
    path = save(m, tmp_path / "bad.onnx")
    for argv in (
        ["convert", str(path), "--target", "c", "-o", str(tmp_path / "out")],
        ["inspect", str(path)],
    ):
        code, err = _cli(capsys, *argv)
        assert code == 2
        line = _one_clean_line(err)
        assert "conv1" in line and "Conv" in line and "3 channels" in line and "expects 5" in line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("bias", "bn", "expect"),
    [
        (5, 6, "'gconv' (op Conv): the bias has shape 5; the weight has 6 output channels"),
        (6, 7, "node 'bn' (op BatchNormalization)"),
    ],
)
def test_grouped_conv_bias_and_batchnorm_sizes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], bias: int, bn: int, expect: str
) -> None:
    m = make_model(
        [
            helper.make_node("Conv", ["x", "W", "B"], ["y"], name="gconv", group=2),
            helper.make_node("BatchNormalization", ["y", "s", "b", "mu", "var"], ["z"], name="bn"),
        ],
        [vi("x", [1, 4, 8, 8])],
        [vi("z", [1, 6, 6, 6])],
        [
            tensor("W", np.ones((6, 2, 3, 3), np.float32)),
            tensor("B", np.zeros(bias, np.float32)),
            *(tensor(n, np.ones(bn, np.float32)) for n in ("s", "b", "mu", "var")),
        ],
    )
    code, err = _cli(capsys, "inspect", str(save(m, tmp_path / "bad.onnx")))
    assert code == 2
    assert expect in _one_clean_line(err)


def test_matmul_mismatch_from_onnx_inference(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    m = make_model(
        [helper.make_node("MatMul", ["a", "W"], ["c"], name="mm")],
        [vi("a", [2, 3])],
        [vi("c", [2, 5])],
        [tensor("W", np.ones((4, 5), np.float32))],
    )
    code, err = _cli(capsys, "verify", str(save(m, tmp_path / "bad.onnx")))
    assert code == 2
    assert "node 'mm' (op MatMul)" in _one_clean_line(err)


def test_lying_declared_output_shape_is_not_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Declared shapes are hints (some exporters get them wrong): only the ops' own rules count.
    m = make_model(
        [helper.make_node("Relu", ["x"], ["y"], name="r")], [vi("x", [1, 3])], [vi("y", [1, 7])]
    )
    code, err = _cli(capsys, "verify", str(save(m, tmp_path / "lie.onnx")))
    assert code == 0, err


def test_input_too_big_is_refused_with_its_size(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    m = make_model(
        [helper.make_node("Relu", ["x"], ["y"], name="r")],
        [vi("x", [1, 3, 60000, 60000])],
        [vi("y", [1, 3, 60000, 60000])],
    )
    code, err = _cli(capsys, "verify", str(save(m, tmp_path / "huge.onnx")))
    assert code == 2
    line = _one_clean_line(err)
    assert "1x3x60000x60000 float32" in line and "40.2 GiB" in line and "--input-shape" in line


def test_verify_clamps_ir_version_for_onnxruntime(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    m = make_model(
        [helper.make_node("Relu", ["x"], ["y"], name="r")], [vi("x", [1, 3])], [vi("y", [1, 3])]
    )
    m.ir_version = 14  # what onnx 1.23 writes by default; onnxruntime 1.31 loads up to 13
    path = tmp_path / "ir14.onnx"
    path.write_bytes(m.SerializeToString())
    code, err = _cli(capsys, "verify", str(path))
    assert code == 0, err
    code, err = _cli(capsys, "verify", str(path), "--target", "c")
    assert code == 0, err


def _corrupt(tmp_path: Path, name: str, edit) -> Path:  # noqa: ANN001
    m = onnx.load(EXAMPLE)
    edit(m)
    path = tmp_path / name
    path.write_bytes(m.SerializeToString())
    return path


def test_corrupt_text_and_tensor_types(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Found by mutating the bundled model: invalid UTF-8 in names (protobuf returns bytes, which
    # then failed inside onnx.defs.get_schema) and undefined tensor data types.
    data = bytearray(EXAMPLE.read_bytes())
    op = onnx.load(EXAMPLE).graph.node[0].op_type.encode()
    at = data.index(op)
    data[at] = 0xA2
    bad_utf8 = tmp_path / "utf8.onnx"
    bad_utf8.write_bytes(bytes(data))
    code, err = _cli(capsys, "inspect", str(bad_utf8))
    assert code == 2 and "not valid UTF-8" in _one_clean_line(err)

    def bad_type(m: onnx.ModelProto) -> None:
        m.graph.initializer[0].data_type = 91

    code, err = _cli(capsys, "inspect", str(_corrupt(tmp_path, "dtype.onnx", bad_type)))
    assert code == 2 and "data type 91" in _one_clean_line(err)

    def bad_size(m: onnx.ModelProto) -> None:  # found by the loader fuzzer: a flipped data type
        t = next(
            t for t in m.graph.initializer if t.data_type == onnx.TensorProto.FLOAT and t.raw_data
        )
        t.data_type = onnx.TensorProto.FLOAT16

    code, err = _cli(capsys, "inspect", str(_corrupt(tmp_path, "size.onnx", bad_size)))
    line = _one_clean_line(err)
    assert code == 2 and "bytes of raw_data but has" in line


def test_random_mutations_of_the_example_exit_cleanly(tmp_path: Path) -> None:
    """300 byte flips, truncations and insertions through the in-process loader: each ends in a
    result or an Onnx2EdgeError (the CLI's exit 2), never another exception."""
    from onnx2edge import api
    from onnx2edge.errors import Onnx2EdgeError

    rng = np.random.default_rng(7)
    data = EXAMPLE.read_bytes()
    path = tmp_path / "m.onnx"
    for _ in range(300):
        b = bytearray(data)
        kind = rng.integers(3)
        if kind == 0:
            for _ in range(rng.integers(1, 5)):
                b[rng.integers(len(b))] = rng.integers(256)
        elif kind == 1:
            b = b[: rng.integers(len(b))]
        else:
            pos = int(rng.integers(len(b)))
            b[pos:pos] = bytes(rng.integers(0, 256, rng.integers(1, 9)).astype(np.uint8))
        path.write_bytes(bytes(b))
        try:
            api.inspect(path)
        except Onnx2EdgeError:
            pass


@pytest.mark.parametrize(
    ("target", "runs"), [("shapes", 100_000), ("json", 15_000), ("loader", 8_000)]
)
def test_fuzz_bounded_run(target: str, runs: int) -> None:
    """A bounded atheris run per target (123k executions in all); a crash fails with the input."""
    pytest.importorskip("atheris", reason="atheris (PyPI) is in the dev extra; not installed here")
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tools" / "fuzz" / "fuzz.py"),
            target,
            f"-runs={runs}",
            "-seed=1",
            # ru_maxrss survives execve: a pytest worker that peaked above libFuzzer's 2 GB
            # default would make the child look out of memory before its first input
            "-rss_limit_mb=0",
        ],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"Done {runs} runs" in proc.stderr, proc.stderr[-2000:]


def test_external_weights_are_mapped_not_copied(tmp_path: Path) -> None:
    """External data is memory-mapped read-only by the frontend (a 2 GB model is not loaded into
    the protobuf and copied again), and the C built from it still matches onnxruntime."""
    from onnx2edge import api, frontend

    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((64, 300)).astype(np.float32)
    w2 = rng.standard_normal((300, 10)).astype(np.float32)
    m = make_model(
        [
            helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
            helper.make_node("Relu", ["h"], ["r"], name="relu"),
            helper.make_node("MatMul", ["r", "w2"], ["y"], name="fc2"),
        ],
        [vi("x", [1, 64])],
        [vi("y", [1, 10])],
        [tensor("w1", w1), tensor("w2", w2)],
    )
    path = tmp_path / "ext.onnx"
    onnx.save_model(m, path, save_as_external_data=True, location="ext.data", size_threshold=0)
    graph = frontend.load(path, quiet=True)
    for name, ref in (("w1", w1), ("w2", w2)):
        arr = graph.initializers[name]
        assert not arr.flags.writeable  # mapped, and passes that would write to it fail loudly
        np.testing.assert_array_equal(arr, ref)
    report = api.verify(path, target="c")
    assert report.ok, report


def _consistent(out: Path) -> None:
    """A converted folder is whole: its manifest lists files that all exist, and the weights
    file is there exactly when the manifest says the weights are in a file."""
    import json

    manifest = json.loads((out / "onnx2edge.json").read_text())
    for f in manifest["files"]:
        assert (out / f).is_file(), f
    assert (out / "model_weights.bin").exists() == manifest["stats"]["weights_in_file"]
    assert ("weights_file" in manifest["options"]) == manifest["stats"]["weights_in_file"]


def test_concurrent_converts_into_one_folder_never_mix(tmp_path: Path) -> None:
    """Two writers with different options race into one folder: the result is one of them, whole."""
    import concurrent.futures as cf

    from onnx2edge import api

    out = tmp_path / "out"
    (tmp_path / "out").mkdir()
    (out / "notes.txt").write_text("mine")  # a user's own file survives every conversion

    def convert(i: int) -> None:
        api.convert(EXAMPLE, "c", out, options={"weights_file": True} if i % 2 else {})

    with cf.ThreadPoolExecutor(4) as pool:
        list(pool.map(convert, range(12)))
    _consistent(out)
    assert (out / "notes.txt").read_text() == "mine"
    assert not list(tmp_path.glob(".out.*.tmp"))


def test_killed_convert_leaves_the_previous_folder_whole(tmp_path: Path) -> None:
    """SIGKILL at several moments of a conversion: the folder is the previous one or the new
    one, whole; the killed writer's temporary folder is removed by the next conversion."""
    import signal
    import time

    from onnx2edge import api

    out = tmp_path / "out"
    api.convert(EXAMPLE, "c", out)
    script = (
        "import sys; from onnx2edge import api; "
        f"api.convert({str(EXAMPLE)!r}, 'c', {str(out)!r}, options={{'weights_file': True}})"
    )
    for delay in (0.3, 0.8, 1.5, 2.5):
        proc = subprocess.Popen([sys.executable, "-c", script])
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        _consistent(out)
    api.convert(EXAMPLE, "c", out)
    _consistent(out)
    assert not (out / "model_weights.bin").exists()  # stale output of an earlier run is gone
    assert not list(tmp_path.glob(".out.*.tmp"))
