from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "tiny_cnn.onnx"
LIGHT_DIR = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
LIGHT_MODELS = sorted(LIGHT_DIR.glob("*.onnx"))


def save(model: onnx.ModelProto, path: Path) -> Path:
    model.ir_version = min(model.ir_version, 8) if model.ir_version else 8
    path.write_bytes(model.SerializeToString())
    return path


def make_model(nodes, inputs, outputs, inits=(), opset: int = 17, **kw) -> onnx.ModelProto:  # noqa: ANN001
    g = helper.make_graph(nodes, "test", inputs, outputs, initializer=list(inits), **kw)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def vi(name: str, shape, elem: int = TensorProto.FLOAT) -> onnx.ValueInfoProto:  # noqa: ANN001
    return helper.make_tensor_value_info(name, elem, shape)


def tensor(name: str, arr: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(arr, name)


@pytest.fixture
def example() -> Path:
    return EXAMPLE


@pytest.fixture(autouse=True)
def _keep_env() -> None:
    # Tests must never change the BLAS core type the machine is configured with.
    before = os.environ.get("OPENBLAS_CORETYPE")
    yield
    assert os.environ.get("OPENBLAS_CORETYPE") == before
