"""verify (target onnx): the frontend + passes against onnxruntime, whole-model and per layer."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from onnx2edge import api
from onnx2edge.errors import Onnx2EdgeError
from onnx2edge.verify import SPREAD_FACTOR, compare, within_spread

from conftest import LIGHT_MODELS, make_model, save, tensor, vi


@pytest.mark.parametrize("path", LIGHT_MODELS, ids=lambda p: p.stem)
def test_light_models_verify(path: Path) -> None:
    rep = api.verify(path)
    assert rep.ok, rep.format()


def test_example_per_layer(example: Path) -> None:
    rep = api.verify(example, per_layer=True)
    assert rep.ok and len(rep.layers) == 17 and rep.first_divergence is None


def test_user_inputs(tmp_path: Path, example: Path) -> None:
    x = np.random.default_rng(5).standard_normal((1, 3, 32, 32)).astype(np.float32)
    rep = api.verify(example, inputs={"input": x})
    assert rep.ok
    with pytest.raises(Onnx2EdgeError, match="does not match"):
        api.verify(example, inputs={"input": x[:, :2]})
    with pytest.raises(Onnx2EdgeError, match="not an input"):
        api.verify(example, inputs={"nope": x})


def test_compare_catches_errors() -> None:
    ref = np.array([1.0, -2.0, 100.0], np.float32)
    assert compare("y", ref + 0.001, ref, rtol=1e-4, atol=0).ok  # 0.001 <= 1e-4 * 100
    bad = compare("y", ref + np.array([0, 0.5, 0], np.float32), ref, rtol=1e-4, atol=0)
    assert not bad.ok and bad.max_abs == pytest.approx(0.5) and bad.max_rel == pytest.approx(0.005)
    assert not compare("y", np.array([np.nan, -2, 100], np.float32), ref, 1e-4, 0).ok
    assert not compare("y", ref[:2], ref, 1e-4, 0).ok
    assert compare("i", np.array([1, 2]), np.array([1, 2]), 0, 0).ok
    assert not compare("i", np.array([1, 3]), np.array([1, 2]), 0, 0).ok


def test_compare_catches_nonfinite_out_of_place() -> None:
    ref = np.array([1.0, np.inf, -np.inf, np.nan], np.float32)
    assert compare("y", ref.copy(), ref, 1e-4, 0).ok
    spurious = np.array([np.inf, np.inf, -np.inf, np.nan], np.float32)  # Inf where ref is 1
    bad = compare("y", spurious, ref, 1e-4, 0)
    assert not bad.ok and bad.max_abs == np.inf
    assert not compare("y", np.array([1, -np.inf, -np.inf, np.nan], np.float32), ref, 1e-4, 0).ok


def test_within_spread_allowance() -> None:
    """A float output missing the tolerance passes within SPREAD_FACTOR x onnxruntime's own
    optimised-vs-unoptimised difference; NaN placement and integer outputs get no allowance."""
    ref = np.linspace(-10, 10, 50).astype(np.float32)
    plain = ref + np.float32(0.004)  # onnxruntime unoptimised: 2e-4 of max|ref|
    near = ref + np.float32(0.004 * (SPREAD_FACTOR - 0.5))
    rep = within_spread(compare("y", near, ref, 1e-4, 0), near, plain, ref)
    assert rep.ok and rep.ort_spread_rel == pytest.approx(4e-4, rel=1e-3)
    assert "within 2x onnxruntime" in rep.note()
    far = ref + np.float32(0.004 * (SPREAD_FACTOR + 0.5))
    rep = within_spread(compare("y", far, ref, 1e-4, 0), far, plain, ref)
    assert not rep.ok and "beyond" in rep.note()
    nan = near.copy()
    nan[3] = np.nan
    assert not within_spread(compare("y", nan, ref, 1e-4, 0), nan, plain, ref).ok
    # onnxruntime's NCHWc kernels (optimised) give NaN where its plain kernels keep an Inf:
    # ours may follow either run's placement, with the finite error still judged against ref
    ref_nan, plain_inf = ref.copy(), plain.copy()
    ref_nan[5], plain_inf[5] = np.nan, np.inf
    ours_inf = near.copy()
    ours_inf[5] = np.inf
    rep = within_spread(compare("y", ours_inf, ref_nan, 1e-4, 0), ours_inf, plain_inf, ref_nan)
    assert rep.ok and "unoptimised run" in rep.note()
    ours_inf[6] = np.inf  # an Inf neither run has
    assert not within_spread(compare("y", ours_inf, ref_nan, 0, 0), ours_inf, plain_inf, ref_nan).ok
    ints = np.arange(4)
    rep = compare("i", ints + 1, ints, 0, 0)
    assert within_spread(rep, ints + 1, ints + 1, ints) is rep  # no allowance for integers


def test_verify_spread_allowance_end_to_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """verify asks onnxruntime for its unoptimised run only when an output fails, reports the
    spread, and `spread=False` (CLI --strict) keeps the plain tolerance."""
    m = make_model(
        [helper.make_node("Mul", ["x", "k"], ["y"], name="scale")],
        [vi("x", [4])],
        [vi("y", [4])],
        [tensor("k", np.full(4, 2.0, np.float32))],
    )
    path = save(m, tmp_path / "m.onnx")
    import onnx2edge.api as api_mod

    real_emit, real_ort = api_mod.model_from_graph, api_mod.ort_run

    def off_by_3e4(graph):  # noqa: ANN001, ANN202 - ours: 3e-4 relative error
        k = np.full(4, 2.0 * (1 + 3e-4), np.float32)
        return real_emit(graph.replace(initializers={**graph.initializers, "k": k}))

    def ort(model, feeds, outputs=None, *, optimize=True):  # noqa: ANN001, ANN202
        out = real_ort(model, feeds, outputs, optimize=optimize)
        # onnxruntime unoptimised made to differ by 2e-4 relative, as on deep models
        return out if optimize else {n: v * np.float32(1 + 2e-4) for n, v in out.items()}

    monkeypatch.setattr(api_mod, "model_from_graph", off_by_3e4)
    monkeypatch.setattr(api_mod, "ort_run", ort)
    x = {"x": np.array([1.0, -2.0, 3.0, 0.5], np.float32)}
    rep = api.verify(path, inputs=x)
    assert rep.ok and rep.outputs[0].ort_spread_rel == pytest.approx(2e-4, rel=1e-2)
    assert "within 2x" in rep.format() and rep.as_dict()["outputs"][0]["ort_spread_rel"] > 0
    strict = api.verify(path, inputs=x, spread=False)
    assert not strict.ok and strict.outputs[0].ort_spread_rel is None


def test_per_layer_names_first_divergent_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sabotage one pass's output and check per-layer names the node whose output changed."""
    m = make_model(
        [
            helper.make_node("Relu", ["x"], ["a"], name="first"),
            helper.make_node("Mul", ["a", "k"], ["b"], name="scale"),
            helper.make_node("Sigmoid", ["b"], ["y"], name="last"),
        ],
        [vi("x", [4])],
        [vi("y", [4])],
        [tensor("k", np.full(4, 2.0, np.float32))],
    )
    path = save(m, tmp_path / "m.onnx")
    import onnx2edge.api as api_mod

    real = api_mod.model_from_graph

    def broken(graph):  # noqa: ANN001, ANN202
        g = graph.replace(initializers={**graph.initializers, "k": np.full(4, 3.0, np.float32)})
        return real(g)

    monkeypatch.setattr(api_mod, "model_from_graph", broken)
    rep = api.verify(path, per_layer=True)
    assert not rep.ok
    fd = rep.first_divergence
    assert fd is not None and fd.node == "scale" and fd.op == "Mul"


def test_verify_loadable_by_ort_ir_version(example: Path) -> None:
    from onnx2edge.frontend import load
    from onnx2edge.ir.proto import MAX_IR_VERSION, model_from_graph

    g = load(example, quiet=True).replace(ir_version=14)
    m = model_from_graph(g)
    assert m.ir_version <= MAX_IR_VERSION
    onnx.checker.check_model(m)


def _dq_graph(scale: float):  # noqa: ANN202 - a Graph whose output "y" a DequantizeLinear makes
    from onnx2edge.ir.proto import graph_from_model

    m = make_model(
        [helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], name="dq")],
        [helper.make_tensor_value_info("q", onnx.TensorProto.UINT8, [200])],
        [vi("y", [200])],
        [tensor("s", np.array(scale, np.float32)), tensor("z", np.array(128, np.uint8))],
    )
    return graph_from_model(m)


def test_dequantized_output_within_one_step() -> None:
    """A QDQ model's float output that misses the float rules passes when every element is
    within one step of its DequantizeLinear scale and at most 1 % are a step off (float ties
    before the QuantizeLinear); two steps, a systematic one-step shift, NaN out of place or an
    output no DequantizeLinear makes do not pass."""
    step = 0.05
    g = _dq_graph(step)
    ref = (np.arange(200, dtype=np.float32) - 100) * np.float32(step)
    one = ref.copy()
    one[7] += step  # one tie flipped: 0.5 % of the elements
    rep = api._within_dq_step(compare("y", one, ref, 1e-4, 0), one, ref, g)
    assert rep.ok and rep.quant_step and rep.step_share == pytest.approx(0.005)
    assert "0.50% one step off" in rep.note() and "DequantizeLinear" in rep.tolerance(1e-4, 0)
    assert rep.as_dict()["step_share"] == pytest.approx(0.005)
    two = ref.copy()
    two[7] += 2 * step
    assert not api._within_dq_step(compare("y", two, ref, 1e-4, 0), two, ref, g).ok
    shifted = ref.copy()
    shifted[::2] -= step  # half the elements a step low: a rounding bug, not ties
    rep = api._within_dq_step(compare("y", shifted, ref, 1e-4, 0), shifted, ref, g)
    assert not rep.ok and "beyond" in rep.note()
    nan = one.copy()
    nan[9] = np.nan
    assert not api._within_dq_step(compare("y", nan, ref, 1e-4, 0), nan, ref, g).ok
    plain = _dq_graph(step).replace(nodes=())  # no producer: the float rules stand
    rep = compare("y", one, ref, 1e-4, 0)
    assert api._within_dq_step(rep, one, ref, plain) is rep


def test_per_layer_quantized_bytes_one_step() -> None:
    """--per-layer: a QuantizeLinear's bytes one step off pass (the exposed reference rounds
    in float what onnxruntime's fused integer kernel rounds otherwise); two steps, or bytes
    another op makes, still fail."""
    ref = np.arange(10, dtype=np.uint8)
    one, two = ref.copy(), ref.copy()
    one[3] += 1
    two[3] += 2
    rep = replace(compare("q", one, ref, 0, 0), node="n", op="QuantizeLinear")
    assert api._layer_step(rep).ok and api._layer_step(rep).quant_step
    assert not api._layer_step(replace(rep, max_abs=2.0, max_rel=2.0)).ok
    assert not api._layer_step(replace(compare("q", two, ref, 0, 0), op="QuantizeLinear")).ok
    assert not api._layer_step(replace(rep, op="Cast")).ok
