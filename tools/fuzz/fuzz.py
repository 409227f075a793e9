"""Coverage-guided fuzzing (atheris) of what reads user input: the model loader, the JSON
import and `--input-shape` parsing.

    python tools/fuzz/fuzz.py loader [-runs=100000] [-max_total_time=60] [corpus_dir ...]

Every input must end in a result or an `Onnx2EdgeError` (the CLI's clean exit 2); any other
exception is a crash, which atheris reports with the input that caused it and exit code 1.
The libFuzzer options after the target name pass through (`-runs`, `-max_total_time`, ...).
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import atheris
import numpy  # noqa: F401 - imported before instrumentation: only our own code is instrumented
import onnx  # noqa: F401

with atheris.instrument_imports(include=["onnx2edge"]):
    from onnx2edge.errors import Onnx2EdgeError
    from onnx2edge.frontend.loader import load_model, parse_input_shapes, parse_model_bytes
    from onnx2edge.ir.proto import graph_from_model
    from onnx2edge.jsonio import loads, model_from_json

ROOT = Path(__file__).resolve().parents[2]
SOURCE = Path("fuzzed.onnx")
# One scratch folder for JSON documents that name .npy weights: they must stay inside it.
SCRATCH = Path(tempfile.mkdtemp(prefix="onnx2edge-fuzz-"))


def fuzz_loader(data: bytes) -> None:
    """Bytes as a model file: parse, every check `load` makes, then the IR."""
    try:
        graph_from_model(load_model(parse_model_bytes(data, SOURCE)))
    except Onnx2EdgeError:
        pass


def fuzz_json(data: bytes) -> None:
    """Bytes as a JSON document for `from-json`."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return  # from-json reads the file as UTF-8 text; undecodable bytes never reach the codec
    try:
        model_from_json(loads(text, "fuzzed.json"), SCRATCH)
    except Onnx2EdgeError:
        pass


def fuzz_shapes(data: bytes) -> None:
    """Bytes as the text of `--input-shape` options."""
    specs = atheris.FuzzedDataProvider(data).ConsumeUnicodeNoSurrogates(64).split(" ")
    try:
        parse_input_shapes(specs)
    except Onnx2EdgeError:
        pass


TARGETS: dict[str, Callable[[bytes], None]] = {
    "loader": fuzz_loader,
    "json": fuzz_json,
    "shapes": fuzz_shapes,
}


def seed_corpus(target: str, folder: Path) -> Path:
    """Valid inputs to start from: the bundled model, its JSON form, a few shape options."""
    folder.mkdir(parents=True, exist_ok=True)
    model = ROOT / "examples" / "tiny_cnn.onnx"
    if target == "loader":
        (folder / "tiny_cnn.onnx").write_bytes(model.read_bytes())
    elif target == "json":
        from onnx2edge import api

        api.to_json(model, folder / "tiny_cnn.json", weights="inline")
    else:
        for i, s in enumerate(["input=1x3x32x32", "a=1,2 b=3x4", "x=0x1", "=1"]):
            (folder / f"s{i}").write_text(s)
    return folder


def main(argv: list[str]) -> None:
    if len(argv) < 2 or argv[1] not in TARGETS:
        sys.exit(f"usage: fuzz.py {{{'|'.join(TARGETS)}}} [libFuzzer options] [corpus dirs]")
    target = argv[1]
    rest = argv[2:]
    if not any(not a.startswith("-") for a in rest):
        rest.append(str(seed_corpus(target, SCRATCH / f"corpus-{target}")))
    atheris.Setup([argv[0], *rest], TARGETS[target])
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
