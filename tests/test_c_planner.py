"""The arena planner's invariant: buffers alive at the same step never share bytes.

Checked on random buffer sets (lifetimes, sizes, run-time If guards), and on the plans the C
backend makes for real graphs (seed zoo models, torch fixtures), where Concat inputs written
in place (concat_alias.py) and residual adds written over their residual
(residual_alias.py) must also stay inside the buffer that holds them, for its whole life.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from onnx2edge import api
from onnx2edge.backends.c import emitter as emitter_mod
from onnx2edge.backends.c import phases as phases_mod
from onnx2edge.backends.c import planner
from onnx2edge.backends.c.planner import ALIGN, Buffer, collisions, plan

FIXTURES = Path(__file__).parent / "fixtures" / "torch"


def _random_buffers(rng: random.Random, n: int) -> list[Buffer]:
    out = []
    for i in range(n):
        first = rng.randrange(40)
        last = first + rng.choice([0, 0, 1, 1, 2, 3, 5, 12])
        nbytes = rng.choice([0, 1, 63, 64, 65, 4096, 7000, 100_000, rng.randrange(1, 300_000)])
        guard: tuple[tuple[str, bool], ...] = ()
        if rng.random() < 0.2:
            guard = ((f"c{rng.randrange(2)}", rng.random() < 0.5),)
        out.append(Buffer(f"t{i}", nbytes, first, last, guard))
    return out


@pytest.mark.parametrize("seed", range(40))
def test_random_plans_never_collide(seed: int) -> None:
    rng = random.Random(seed)
    buffers = _random_buffers(rng, rng.randrange(1, 60))
    offsets, total = plan(buffers)
    assert set(offsets) == {b.key for b in buffers}
    assert collisions(buffers, offsets) == []
    assert all(off % ALIGN == 0 for off in offsets.values())
    assert total == max(offsets[b.key] + -(-max(b.nbytes, 1) // ALIGN) * ALIGN for b in buffers)
    # same input (in any order) -> same plan: the generated C is byte-identical run to run
    shuffled = buffers[:]
    rng.shuffle(shuffled)
    assert plan(shuffled) == (offsets, total)


def test_collisions_finds_an_overlap() -> None:
    """The checker itself: two live buffers forced onto the same bytes are reported, buffers
    of opposite sides of one If are not."""
    a, b = Buffer("a", 128, 0, 2), Buffer("b", 64, 1, 3)
    assert collisions([a, b], {"a": 0, "b": 64}) == [("a", "b")]
    assert collisions([a, b], {"a": 0, "b": 128}) == []
    c = Buffer("c", 128, 0, 2, (("k", True),))
    d = Buffer("d", 128, 0, 2, (("k", False),))
    assert collisions([c, d], {"c": 0, "d": 0}) == []


def _checked_convert(monkeypatch: pytest.MonkeyPatch, model: Path, out: Path) -> dict[str, Any]:
    """Convert `model` to C, checking the plan the emitter makes: returns what was seen."""
    seen: dict[str, Any] = {}

    def checked_plan(buffers: list[Buffer]) -> tuple[dict[str, int], int]:
        offsets, total = planner.plan(buffers)
        seen["buffers"], seen["offsets"], seen["total"] = list(buffers), offsets, total
        return offsets, total

    emit = emitter_mod.ModelEmitter.emit

    def checked_emit(self: emitter_mod.ModelEmitter) -> dict[str, Any]:
        seen["emitter"] = self
        return emit(self)

    monkeypatch.setattr(phases_mod, "plan", checked_plan)
    monkeypatch.setattr(emitter_mod.ModelEmitter, "emit", checked_emit)
    api.convert(model, "c", out)
    buffers: list[Buffer] = seen["buffers"]
    offsets: dict[str, int] = seen["offsets"]
    assert collisions(buffers, offsets) == []
    em: emitter_mod.ModelEmitter = seen["emitter"]
    assert seen["total"] == em.analyses.arena
    final = em.analyses.offsets
    by_key = {b.key: b for b in buffers}
    steps: dict[str, list[int]] = {}
    for step, node in enumerate(em.graph.nodes):
        for name in (*node.inputs, *node.outputs):
            if name:
                steps.setdefault(name, []).append(step)
    # aliased tensors: inside their holder's bytes, and used only while the holder is alive
    holders = {x: y for x, (y, _) in em.concat_aliases.items()} | em.residual_inplace
    for x, y in holders.items():
        hold = by_key[y]
        assert final[y] <= final[x], (x, y)
        assert final[x] + em.tensors[x].nbytes <= final[y] + hold.nbytes, (x, y)
        assert hold.first <= min(steps[x]) and max(steps[x]) <= hold.last, (x, y)
    # every arena tensor has an offset inside the arena
    for name, t in em.tensors.items():
        if t.kind == "arena":
            assert 0 <= final[name] and final[name] + t.nbytes <= seen["total"], name
    return seen


# ~3-6 s each here (conversion only, no compiler): SqueezeNet and GoogLeNet alias their
# concats, ResNet50 runs its residual adds in place, Inception-v3 has both branchy blocks and
# concats, MobileNet v2 has residual adds left to their own buffers
@pytest.mark.parametrize(
    "name", ["squeezenet", "googlenet", "resnet50", "inception_v3", "mobilenet_v2", "mnist_mlp"]
)
def test_seed_model_plans_never_collide(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from onnx2edge.bench import zoo

    path = tmp_path / f"{name}.onnx"
    zoo.save(name, path)
    seen = _checked_convert(monkeypatch, path, tmp_path / "c")
    if name in ("squeezenet", "googlenet", "inception_v3"):
        assert seen["emitter"].concat_aliases, "the concats' inputs should be aliased"
    if name == "resnet50":
        assert seen["emitter"].residual_inplace, "residual adds should run in place"


@pytest.mark.parametrize(
    "fixture",
    sorted(p.name for p in FIXTURES.glob("*.onnx")) if FIXTURES.is_dir() else [],
)
def test_fixture_plans_never_collide(
    fixture: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _checked_convert(monkeypatch, FIXTURES / fixture, tmp_path / "c")


def _dense_block(path: Path, layers: int = 4) -> Path:
    """DenseNet-style block built with onnx.helper: BN -> ReLU -> 1x1 Conv -> ReLU -> 3x3 Conv
    per layer, each layer reading the Concat of the block input and every earlier output."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    c0, grow = 8, 4
    inits, nodes, feats = [], [helper.make_node("Relu", ["x"], ["f0"])], ["f0"]
    for i in range(layers):
        cin = c0 + grow * i
        nodes.append(helper.make_node("Concat", list(feats), [f"cat{i}"], axis=1))
        for n, v in (("g", 1.0), ("b", 0.1), ("m", 0.0), ("v", 1.0)):
            arr = (v + 0.1 * rng.standard_normal(cin)).astype(np.float32)
            inits.append(numpy_helper.from_array(np.abs(arr) if n == "v" else arr, f"{n}{i}"))
        nodes.append(
            helper.make_node(
                "BatchNormalization",
                [f"cat{i}", f"g{i}", f"b{i}", f"m{i}", f"v{i}"],
                [f"bn{i}"],
            )
        )
        nodes.append(helper.make_node("Relu", [f"bn{i}"], [f"r{i}"]))
        w1 = rng.standard_normal((16, cin, 1, 1)).astype(np.float32) * 0.3
        w3 = rng.standard_normal((grow, 16, 3, 3)).astype(np.float32) * 0.1
        inits += [numpy_helper.from_array(w1, f"w1_{i}"), numpy_helper.from_array(w3, f"w3_{i}")]
        nodes.append(helper.make_node("Conv", [f"r{i}", f"w1_{i}"], [f"p{i}"]))
        nodes.append(helper.make_node("Relu", [f"p{i}"], [f"q{i}"]))
        nodes.append(helper.make_node("Conv", [f"q{i}", f"w3_{i}"], [f"f{i + 1}"], pads=[1] * 4))
        feats.append(f"f{i + 1}")
    nodes.append(helper.make_node("Concat", list(feats), ["cat"], axis=1))
    nodes.append(
        helper.make_node("AveragePool", ["cat"], ["y"], kernel_shape=[2, 2], strides=[2, 2])
    )
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c0, 12, 12])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    m = helper.make_model(
        helper.make_graph(nodes, "dense", [x], [y], inits),
        opset_imports=[helper.make_opsetid("", 13)],
    )
    m.ir_version = 8
    onnx.save(onnx.shape_inference.infer_shapes(m), path)
    return path


def test_dense_block_plan_never_collides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every feature map of a dense block is placed in the block's last Concat, the earlier
    Concats are views of its first bytes: nothing copied, nothing overwritten while read."""
    seen = _checked_convert(monkeypatch, _dense_block(tmp_path / "dense.onnx"), tmp_path / "c")
    aliases = seen["emitter"].concat_aliases
    assert {x for x, (y, _) in aliases.items() if y == "cat"} == {
        *(f"f{i}" for i in range(5)),
        *(f"cat{i}" for i in range(4)),
    }
    assert "memcpy" not in (tmp_path / "c" / "model.c").read_text()
