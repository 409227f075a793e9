"""A model read once: the handle `report`, `check` and `verify` share, so the frontend (the
slowest step before a backend: onnx's checker, shape inference, constant folding,
specialisation) runs once per command however many of them look at the model.

Lower than every command module (api, check, verify, report, bench): it knows models, the
frontend and the passes, nothing that uses them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from ..ir import Graph
from . import loader

Shapes = Mapping[str, Sequence[int]] | None
Fixed = Mapping[str, np.ndarray] | None  # --fix-input: inputs bound to constants
# A model file, or a model already in memory (an onnx.ModelProto carrying its weights).
Model = str | Path | onnx.ModelProto

# What `verify --target onnx` exercises: the frontend plus the target-independent passes.
DEFAULT_PASSES = ("fold_constants", "eliminate_dead_nodes", "remove_identity", "infer_shapes")


def model_label(model: Model | LoadedModel) -> str:
    """How messages and manifests name a model: its file name, or for an in-memory model its
    graph name (never the protobuf's text)."""
    model = source_of(model)
    if isinstance(model, onnx.ModelProto):
        return f"{model.graph.name or 'model'} (in-memory ModelProto)"
    return Path(model).name


@dataclass
class LoadedModel:
    """`source` through the frontend with `input_shapes` / `fixed_inputs`, computed on first
    use and kept: pass it wherever the API takes a model (`prepare`, `convert`, `verify`,
    `check_model`) and none of them loads it again. The graphs it hands out are shared:
    passes never mutate their input, so that is safe."""

    source: Model
    input_shapes: Shapes = None
    fixed_inputs: Fixed = None
    quiet: bool = True  # the frontend's notes on stderr (False: printed, as `inspect` does)
    _graph: Graph | None = field(default=None, repr=False)
    _after: dict[tuple[str, ...], Graph] = field(default_factory=dict, repr=False)

    @property
    def label(self) -> str:
        return model_label(self.source)

    def graph(self) -> Graph:
        """The frontend's graph (shapes static, constants folded)."""
        if self._graph is None:
            self._graph = loader.load(
                self.source,
                input_shapes=self.input_shapes,
                fixed_inputs=self.fixed_inputs,
                quiet=self.quiet,
            )
        return self._graph

    def after(self, passes: Sequence[str]) -> Graph:
        """The frontend's graph after `passes` (run once per distinct list)."""
        from ..passes import run_passes

        key = tuple(passes)
        if key not in self._after:
            self._after[key] = run_passes(self.graph(), key)
        return self._after[key]


def source_of(model: Model | LoadedModel) -> Model:
    """The file or ModelProto behind `model`."""
    return model.source if isinstance(model, LoadedModel) else model


def frontend_graph(
    model: Model | LoadedModel,
    *,
    input_shapes: Shapes = None,
    fixed_inputs: Fixed = None,
    quiet: bool = False,
    **kwargs: Any,
) -> Graph:
    """`loader.load(model, ...)`, or the graph a LoadedModel already holds (its own shapes
    and bound inputs: those given here must be the same or absent)."""
    if isinstance(model, LoadedModel):
        if input_shapes and dict(input_shapes) != dict(model.input_shapes or {}):
            raise ValueError("input_shapes differ from the LoadedModel's")
        if fixed_inputs and set(fixed_inputs) != set(model.fixed_inputs or {}):
            raise ValueError("fixed_inputs differ from the LoadedModel's")
        return model.graph()
    return loader.load(
        model, input_shapes=input_shapes, fixed_inputs=fixed_inputs, quiet=quiet, **kwargs
    )
