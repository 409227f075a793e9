"""Tests for the model zoo (onnx2edge.bench.zoo).

Every model is built, checked with ``onnx.checker`` (full_check) and run in onnxruntime on
two seeded standard-normal inputs.  The numeric properties asserted here are the ones that
make the zoo useful for verification tests: finite outputs of a sane magnitude that vary
across elements and whose argmax depends on the input.

vgg16, vgg19, inception_v3 and convdeconv are marked ``slow``: the VGGs are ~550 MB each
(building twice for the determinism check plus ``check_model`` takes tens of seconds and
over 2 GB of memory), Inception-v3 has ~300 nodes at 299x299 and the style-transfer net
runs ~80 GFLOPs at 480x640.  Run them with ``pytest -m "slow or not slow"``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from onnx2edge.bench import zoo

IMAGENET_LOGITS = (1, 1000)


@dataclass(frozen=True)
class Expected:
    output_shape: tuple[int, ...]
    ops: frozenset[str]  # op types the architecture is known for
    slow: bool = False


def _ops(*names: str) -> frozenset[str]:
    return frozenset(names)


EXPECTED: dict[str, Expected] = {
    "alexnet": Expected(IMAGENET_LOGITS, _ops("Conv", "LRN", "MaxPool", "Gemm")),
    "alexnet_bn": Expected(IMAGENET_LOGITS, _ops("Conv", "BatchNormalization", "Gemm")),
    "nin": Expected(IMAGENET_LOGITS, _ops("Conv", "MaxPool", "GlobalAveragePool")),
    "nin_bn": Expected(IMAGENET_LOGITS, _ops("Conv", "BatchNormalization", "GlobalAveragePool")),
    "googlenet": Expected(IMAGENET_LOGITS, _ops("Conv", "LRN", "Concat", "AveragePool", "Gemm")),
    "vgg16": Expected(IMAGENET_LOGITS, _ops("Conv", "MaxPool", "Gemm"), slow=True),
    "vgg19": Expected(IMAGENET_LOGITS, _ops("Conv", "MaxPool", "Gemm"), slow=True),
    "inception_v3": Expected(
        IMAGENET_LOGITS,
        _ops("Conv", "BatchNormalization", "Concat", "AveragePool", "GlobalAveragePool"),
        slow=True,
    ),
    "resnet50": Expected(IMAGENET_LOGITS, _ops("Conv", "BatchNormalization", "Add", "Gemm")),
    "squeezenet": Expected(IMAGENET_LOGITS, _ops("Conv", "Concat", "GlobalAveragePool")),
    "mobilenet_v1": Expected(IMAGENET_LOGITS, _ops("Conv", "BatchNormalization", "Clip")),
    "mobilenet_v2": Expected(IMAGENET_LOGITS, _ops("Conv", "BatchNormalization", "Clip", "Add")),
    "convdeconv": Expected(
        (1, 3, 480, 640),
        _ops("Pad", "Conv", "InstanceNormalization", "Add", "ConvTranspose", "Tanh"),
        slow=True,
    ),
    "mnist_mlp": Expected((1, 10), _ops("Gemm", "Relu")),
    "unet_small": Expected(
        (1, 3, 64, 64), _ops("Conv", "BatchNormalization", "ConvTranspose", "Concat")
    ),
}

BN_MODELS = ["alexnet_bn", "nin_bn", "resnet50", "mobilenet_v1", "mobilenet_v2", "unet_small"]


def _params(names: list[str]) -> list[object]:
    return [pytest.param(n, marks=pytest.mark.slow) if EXPECTED[n].slow else n for n in names]


@functools.cache
def _built(name: str) -> onnx.ModelProto:
    """One build per fast model per session, shared by the tests below (never mutated)."""
    return zoo.build(name, seed=0)


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def _inputs(shape: tuple[int, ...]) -> list[np.ndarray]:
    return [np.random.default_rng(s).standard_normal(shape, dtype=np.float32) for s in (1, 2)]


def _dims(value_info: onnx.ValueInfoProto) -> tuple[int, ...]:
    return tuple(d.dim_value for d in value_info.type.tensor_type.shape.dim)


def test_registry_names() -> None:
    assert set(zoo.MODELS) == set(EXPECTED)
    for name, entry in zoo.MODELS.items():
        assert entry.name == name
        assert entry.description
        assert callable(entry.build)


def test_unknown_name_lists_known_models() -> None:
    with pytest.raises(ValueError, match="resnet50") as info:
        zoo.build("resnet51")
    assert isinstance(info.value, KeyError)
    assert "mnist_mlp" in str(info.value)


@pytest.mark.parametrize("name", _params(list(EXPECTED)))
def test_model(name: str) -> None:
    """Build, check, run twice, check the numerics and that the build is reproducible.

    The four big models are ``slow`` (see the module docstring for why).
    """
    expected = EXPECTED[name]
    entry = zoo.MODELS[name]
    model = zoo.build(name) if expected.slow else _built(name)

    onnx.checker.check_model(model, full_check=True)
    assert model.ir_version == 8
    assert [(o.domain, o.version) for o in model.opset_import] == [("", 17)]
    op_types = {n.op_type for n in model.graph.node}
    assert expected.ops <= op_types
    assert "Softmax" not in op_types  # logits, so outputs are not near-uniform
    node_names = [n.name for n in model.graph.node]
    assert all(node_names) and len(set(node_names)) == len(node_names)

    (graph_input,) = model.graph.input
    (graph_output,) = model.graph.output
    assert _dims(graph_input) == entry.input_shape
    assert _dims(graph_output) == expected.output_shape

    session = _session(model)
    outputs = [session.run(None, {graph_input.name: x})[0] for x in _inputs(entry.input_shape)]
    for out in outputs:
        assert out.shape == expected.output_shape
        assert np.isfinite(out).all()
        peak = float(np.abs(out).max())
        assert 1e-2 <= peak <= 1e3, f"{name}: max|output| = {peak:.3g}"
        assert float(np.ptp(out)) > 1e-3 * peak, f"{name}: output is constant"
    assert outputs[0].argmax() != outputs[1].argmax(), f"{name}: argmax ignores the input"

    again = zoo.build(name, seed=0)
    assert again.SerializeToString(deterministic=True) == model.SerializeToString(
        deterministic=True
    )


def test_seed_changes_weights() -> None:
    first = {t.name: numpy_helper.to_array(t) for t in _built("mnist_mlp").graph.initializer}
    other = zoo.build("mnist_mlp", seed=1)
    assert [t.name for t in other.graph.initializer] == list(first)
    assert not np.array_equal(
        numpy_helper.to_array(other.graph.initializer[0]), first["fc1.weight"]
    )


def test_readable_tensor_names() -> None:
    names = {t.name for t in _built("resnet50").graph.initializer}
    assert {"conv1.weight", "res2a_branch2a.weight", "bn2a_branch2a.running_var"} <= names
    assert {n.name for n in _built("resnet50").graph.node} >= {"conv1", "res2a_branch2a", "res2a"}


@pytest.mark.parametrize("name", BN_MODELS)
def test_batchnorm_is_calibrated_and_non_trivial(name: str) -> None:
    """BN outputs are roughly standardized, yet folding BN would change every parameter."""
    model = _built(name)
    params = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    bns = [n for n in model.graph.node if n.op_type == "BatchNormalization"]
    assert bns
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    del probe.graph.output[:]
    probe.graph.output.extend(
        helper.make_tensor_value_info(n.output[0], onnx.TensorProto.FLOAT, None) for n in bns
    )
    session = _session(probe)
    x = _inputs(zoo.MODELS[name].input_shape)[0]
    offset_bns = 0
    for node, value in zip(bns, session.run(None, {model.graph.input[0].name: x}), strict=True):
        gamma, beta, mean, var = (params[i] for i in node.input[1:])
        assert 0.2 < float(value.std()) < 3.0, f"{node.name}: BN output std {value.std():.3g}"
        # gamma/beta are not the identity and the variances spread like a trained net's,
        # so a BN-folding bug shows in the outputs.
        assert np.ptp(gamma) > 0 and np.ptp(beta) > 0
        assert var.max() / var.min() > 2.0, f"{node.name}: running_var {var.min()}..{var.max()}"
        offset_bns += int(np.abs(mean).max() > 0.1)
    # Only the first BN may have ~zero running means: it normalizes a conv of zero-mean noise.
    assert offset_bns >= len(bns) - 1


def test_save_writes_the_built_model(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "mnist.onnx"
    written = zoo.save("mnist_mlp", target, seed=3)
    assert written == target
    assert sorted(p.name for p in target.parent.iterdir()) == ["mnist.onnx"]  # no temp left
    assert target.read_bytes() == zoo.build("mnist_mlp", seed=3).SerializeToString(
        deterministic=True
    )
    assert onnx.load(target).ir_version == 8
    with pytest.raises(ValueError):
        zoo.save("nope", tmp_path / "x.onnx")
