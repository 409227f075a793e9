"""The activation table (semantics/activations.py) and the internal fused ops (fused.py).

- every row's numpy meaning equals onnxruntime's standalone op on NaN, +-Inf, -0.0, huge and
  ordinary values (ORT_ENABLE_ALL and without optimisation), parameters defaulted and given;
- the GEMM-epilogue kinds equal runtime/o2e_gemm.h's O2E_ACT_* enum;
- the C backend's standalone op for every row, and the fused epilogue for every fusable row,
  matches onnxruntime on those values (NaN where onnxruntime has NaN, same infinities);
- the fused ops have onnx schemas, and fuse_activation produces them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import onnx
import onnx.defs
import onnxruntime as ort
import pytest
from onnx import helper

from onnx2edge import api
from onnx2edge.backends.c.build import build_executable, run_executable
from onnx2edge.ir.proto import graph_from_model
from onnx2edge.semantics import fused
from onnx2edge.semantics.activations import (
    ACTIVATIONS,
    FUSABLE,
    GEMM_LEAKY_RELU,
    GEMM_NONE,
    GEMM_VM_FIRST,
    Activation,
    as_activation,
    reference,
    swift_expr,
)

from conftest import make_model, save, tensor, vi

SPECIAL = np.array(
    [np.nan, np.inf, -np.inf, -0.0, 0.0, -1.5, 2.5, 7.0, -7.0, 1e30, -1e30, 3.0, -3.0, 0.3],
    np.float32,
)
OPSET = 22  # Gelu (20), Swish needs 24: skipped below when onnxruntime lacks it

# (op, attributes or Clip bounds): defaults, then explicit parameters
CASES = [
    ("Relu", {}),
    ("LeakyRelu", {}),
    ("LeakyRelu", {"alpha": 0.3}),
    ("Clip", {"bounds": (0.0, 6.0)}),
    ("Clip", {"bounds": (-1.0, None)}),
    ("Clip", {"bounds": (None, 2.0)}),
    ("Sigmoid", {}),
    ("Tanh", {}),
    ("HardSigmoid", {}),
    ("HardSigmoid", {"alpha": 0.5, "beta": 0.1}),
    ("HardSwish", {}),
    ("Elu", {"alpha": 0.7}),
    ("Selu", {}),
    ("Celu", {"alpha": 2.0}),
    ("ThresholdedRelu", {"alpha": 0.5}),
    ("Softplus", {}),
    ("Softsign", {}),
    ("Mish", {}),
    ("Gelu", {}),
    ("Gelu", {"approximate": "tanh"}),
]
IDS = [f"{op}{i}" for i, (op, _) in enumerate(CASES)]


def _act_nodes(op: str, kw: dict, src: str, dst: str, tag: str) -> tuple[list, list]:
    if op != "Clip":
        return [helper.make_node(op, [src], [dst], name=f"act{tag}", **kw)], []
    lo, hi = kw["bounds"]
    names, inits = [src], []
    for v, n in ((lo, f"lo{tag}"), (hi, f"hi{tag}")):
        names.append("" if v is None else n)
        if v is not None:
            inits.append(tensor(n, np.array(v, np.float32)))
    while names[-1] == "":
        names.pop()
    return [helper.make_node("Clip", names, [dst], name=f"act{tag}")], inits


def _model(op: str, kw: dict) -> onnx.ModelProto:
    nodes, inits = _act_nodes(op, kw, "x", "y", "")
    m = make_model(nodes, [vi("x", list(SPECIAL.shape))], [vi("y", list(SPECIAL.shape))], inits)
    m.opset_import[0].version = OPSET
    return m


def _ort(m: onnx.ModelProto, feeds: dict, optimise: bool = True) -> list[np.ndarray]:
    so = ort.SessionOptions()
    if not optimise:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    s = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return s.run(None, feeds)


def _same(got: np.ndarray, ref: np.ndarray, rtol: float = 2e-6) -> None:
    """NaN where ref has NaN, the same infinities and signs, finite values close."""
    assert got.shape == ref.shape
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    fin = np.isfinite(ref)
    np.testing.assert_array_equal(got[~fin & ~np.isnan(ref)], ref[~fin & ~np.isnan(ref)])
    np.testing.assert_allclose(got[fin], ref[fin], rtol=rtol, atol=1e-6)
    zero = ref == 0
    np.testing.assert_array_equal(np.signbit(got[zero]), np.signbit(ref[zero]))


@pytest.mark.parametrize("op,kw", CASES, ids=IDS)
def test_table_reference_is_onnxruntime(op: str, kw: dict) -> None:
    m = _model(op, kw)
    node = graph_from_model(m).nodes[0]
    act = as_activation(graph_from_model(m), node)
    assert act is not None and act.op == op
    ours = reference(act, SPECIAL)
    for optimise in (True, False):
        _same(ours, _ort(m, {"x": SPECIAL}, optimise)[0])


def test_gemm_kinds_match_the_header() -> None:
    """Every O2E_ACT_* of o2e_gemm.h (the register kinds, then the o2e_vmath.h kinds) has the
    number of the activation table's row of the same name, and the generated code's names
    (kernels/gemm/gemm.py) are the header's."""
    from onnx2edge.backends.c.kernels.gemm.gemm import _KIND_NAMES  # noqa: PLC0415

    header = (Path(api.__file__).parent / "backends" / "c" / "runtime" / "o2e_gemm.h").read_text()
    enum = {k: int(v) for k, v in re.findall(r"\bO2E_ACT_([A-Z_]+) = (\d+)", header)}
    table = {
        "Relu": "RELU",
        "Clip": "CLIP",
        "LeakyRelu": "LEAKY_RELU",
        "Sigmoid": "SIGMOID",
        "Tanh": "TANH",
        "HardSigmoid": "HARD_SIGMOID",
        "HardSwish": "HARD_SWISH",
        "Swish": "SWISH",
        "Gelu": "GELU",
        "Mish": "MISH",
    }
    assert enum == {"NONE": GEMM_NONE, **{table[op]: k for op, k in _kinds().items()}}
    assert set(_kinds()) == set(table)
    names = {f"O2E_ACT_{table[op]}": k for op, k in _kinds().items() if k > GEMM_LEAKY_RELU}
    assert names == {v: k for k, v in _KIND_NAMES.items()}
    assert int(re.search(r"#define O2E_ACT_VM_FIRST_ (\d+)", header)[1]) == GEMM_VM_FIRST  # type: ignore[index]


def _kinds() -> dict[str, int]:
    return {d.op: d.gemm_kind for d in ACTIVATIONS.values() if d.gemm_kind is not None}


def _c_run(m: onnx.ModelProto, feeds: dict, tmp: Path, name: str) -> dict[str, np.ndarray]:
    path = save(m, tmp / f"{name}.onnx")
    out = tmp / name
    api.convert(path, "c", out)
    io = json.loads((out / "onnx2edge.json").read_text())
    return run_executable(build_executable(out, ["-O2"], name), io, feeds, tmp)


def test_c_standalone_and_fused_match_onnxruntime(tmp_path: Path) -> None:
    """One model: every case standalone on the special values, and every fusable case fused
    after an Add (x + 0, so the activation sees the special values) and after a MatMul by the
    identity (the GEMM epilogue or its post-loop)."""
    nodes, inits, outs = [], [tensor("zero", np.zeros(1, np.float32))], []
    n = SPECIAL.size
    inits.append(tensor("eye", np.eye(n, dtype=np.float32)))
    nodes.append(helper.make_node("Reshape", ["x", "shape2"], ["x2"]))
    inits.append(tensor("shape2", np.array([1, n], np.int64)))
    for i, (op, kw) in enumerate(CASES):
        a_nodes, a_inits = _act_nodes(op, kw, "x", f"s{i}", f"s{i}")
        nodes += a_nodes
        inits += a_inits
        outs.append(vi(f"s{i}", [n]))
        if op in FUSABLE:
            nodes.append(helper.make_node("Add", ["x", "zero"], [f"a{i}"]))
            a_nodes, a_inits = _act_nodes(op, kw, f"a{i}", f"fa{i}", f"fa{i}")
            nodes += a_nodes
            inits += a_inits
            nodes.append(helper.make_node("MatMul", ["x2", "eye"], [f"m{i}"]))
            a_nodes, a_inits = _act_nodes(op, kw, f"m{i}", f"fm{i}", f"fm{i}")
            nodes += a_nodes
            inits += a_inits
            outs += [vi(f"fa{i}", [n]), vi(f"fm{i}", [1, n])]
    m = make_model(nodes, [vi("x", [n])], outs, inits)
    m.opset_import[0].version = OPSET
    feeds = {"x": SPECIAL}
    ref = dict(zip([o.name for o in outs], _ort(m, feeds, optimise=False), strict=True))
    got = _c_run(m, feeds, tmp_path, "acts")
    code = (tmp_path / "acts" / "model.c").read_text()
    n_fused = sum(op in FUSABLE for op, _ in CASES)
    # the fusable ones were fused: into the Add loop and into the MatMul (GEMM epilogue)
    assert code.count(": o2e.AddAct(") == n_fused and code.count(": o2e.MatMulAct(") == n_fused
    for name, r in ref.items():
        try:
            _same(got[name], r, rtol=1e-5)
        except AssertionError as e:
            raise AssertionError(f"{name}: {e}") from e


def test_fused_ops_have_schemas_and_roundtrip() -> None:
    for f in fused.FUSED_OPS.values():
        s = onnx.defs.get_schema(f.name, fused.VERSION, fused.DOMAIN)
        version = fused.VERSION if f.base_domain else onnx.defs.onnx_opset_version()
        base = onnx.defs.get_schema(f.base, version, f.base_domain)
        assert set(base.attributes) | set(fused.ACT_ATTRS) == set(s.attributes)
        # MatMulAddAct: a linear layer's bias (R) and then the block's residual (S)
        extra = int(f.residual) + int(f.name == "MatMulAddAct")
        assert len(s.inputs) == len(base.inputs) + extra
    m = make_model(
        [
            helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
            helper.make_node("LeakyRelu", ["c"], ["y"], name="act"),
        ],
        [vi("x", [1, 2, 4, 4])],
        [vi("y", [1, 3, 4, 4])],
        [tensor("w", np.ones((3, 2, 3, 3), np.float32))],
    )
    from onnx2edge.passes import fuse_activation, infer_shapes

    g = fuse_activation(infer_shapes(graph_from_model(m)))
    (node,) = g.nodes
    assert (node.domain, node.op_type) == ("o2e", "ConvAct")
    assert fused.activation_of(node) == Activation("LeakyRelu", float(np.float32(0.01)), 0.0)
    assert fused.base_op(node) == "Conv" and not fused.has_residual(node)
    # onnx resolves the o2e schema (the graph imports the domain) and infers its output
    assert g.opset_imports["o2e"] == fused.VERSION
    assert infer_shapes(g).type_of("y") == g.type_of("y")
    plain = fused.unfused(node)
    assert (plain.domain, plain.op_type, plain.inputs) == ("", "Conv", ("x", "w"))
    assert dict(plain.attrs) == dict(graph_from_model(m).nodes[0].attrs)


def test_mps_swift_renders_the_table_not_a_table_of_its_own() -> None:
    """MPS's CPU segments render the activation table (`swift_expr`), with no second table:
    Softplus keeps the table's overflow-free form and a Clip without a bound clamps to the
    largest finite Float, as C does (issue 32: the old ACT_SWIFT disagreed on both)."""
    from onnx2edge.backends.mps import cpu

    assert not hasattr(cpu, "ACT_SWIFT")
    assert not set(cpu.UNARY) & set(ACTIVATIONS), "an activation retyped in mps/cpu.py"
    soft = swift_expr(Activation("Softplus", 0, 0), "v")
    # max(v, 0) + log1p(exp(-|v|)): exp never sees a positive argument, so no overflow
    assert soft == "(((v > 0 ? v : 0) + log1pf(expf(-fabsf(v)))))"
    big = repr(float(np.finfo(np.float32).max))
    clip = swift_expr(Activation("Clip", -np.inf, 6.0), "v")
    assert f"v < -{big} ? -{big}" in clip and "infinity" not in clip
