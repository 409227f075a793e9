"""The imported formats' own runtimes, as the reference `verify` compares against: LiteRT's
interpreter for .tflite, OpenVINO's runtime for .xml. Each is optional; without it `verify`
falls back to onnxruntime on the imported ONNX and says so."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from . import model_format

NAMES = {"tflite": "LiteRT's interpreter (ai-edge-litert)", "openvino": "OpenVINO's runtime (CPU)"}


def _litert(path: Path, feeds: Mapping[str, np.ndarray], outputs: Sequence[str]) -> dict:
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_path=str(path), num_threads=1)
    it.allocate_tensors()
    for d in it.get_input_details():
        it.set_tensor(d["index"], np.asarray(feeds[d["name"]], dtype=d["dtype"]))
    it.invoke()
    got = {d["name"]: it.get_tensor(d["index"]).copy() for d in it.get_output_details()}
    return {n: got[n] for n in outputs if n in got}


def _openvino(path: Path, feeds: Mapping[str, np.ndarray], outputs: Sequence[str]) -> dict:
    import openvino as ov

    core = ov.Core()
    compiled = core.compile_model(
        core.read_model(str(path)), "CPU", {"INFERENCE_PRECISION_HINT": "f32"}
    )
    ins = {}
    for port in compiled.inputs:
        name = next((n for n in port.get_names() if n in feeds), None)
        if name is None:
            raise KeyError(f"OpenVINO input {port.get_names()} not among {list(feeds)}")
        ins[port] = feeds[name]
    res = compiled(ins)
    out = {}
    for port in compiled.outputs:
        name = next((n for n in outputs if n in port.get_names()), None)
        if name is not None:
            out[name] = np.asarray(res[port])
    return out


def native_reference(
    model: object, feeds: Mapping[str, np.ndarray], outputs: Sequence[str]
) -> tuple[dict[str, np.ndarray] | None, str]:
    """(outputs, description) from the format's own runtime; (None, why not) when the model is
    ONNX or the runtime is not installed."""
    if not isinstance(model, str | Path):
        return None, ""
    kind = model_format(model)
    if kind is None:
        return None, ""
    run = _litert if kind == "tflite" else _openvino
    try:
        got = run(Path(model), feeds, outputs)
    except ImportError:
        pkg = "ai-edge-litert" if kind == "tflite" else "openvino"
        return None, f"onnxruntime on the imported ONNX ({pkg} is not installed)"
    missing = [n for n in outputs if n not in got]
    if missing:
        return (
            None,
            f"onnxruntime on the imported ONNX ({NAMES[kind]} named no output {missing[0]})",
        )
    return got, NAMES[kind]
