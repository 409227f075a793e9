"""The backend seam.

A backend is a class with a `name`, the passes it needs, a check that names every node it
cannot express, `emit` (IR -> files in a folder), and `run` (execute a converted folder on
numpy inputs, for `verify` and `run`). `convert` in `onnx2edge.api` drives them all the same
way: load -> passes -> check -> emit into a temporary folder -> rename, and writes a manifest
(`onnx2edge.json`) so `onnx2edge run OUT/` knows which backend made OUT/.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import Onnx2EdgeError
from ..ir import Graph

MANIFEST = "onnx2edge.json"


@dataclass
class ConvertResult:
    out_dir: Path
    files: list[str]
    # Facts worth printing after a conversion (arena bytes, weight bytes, ...).
    stats: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class BackendOption:
    """One conversion option a backend declares. `convert` (and `verify`) get a `--NAME` flag
    from it (underscores as dashes), the API takes `options={NAME: value}`, and the manifest
    records the value so `convert` can reproduce the output."""

    name: str
    help: str
    choices: tuple[str, ...] | None = None  # None: any string (or a switch)
    default: Any = None  # None: absent from the options unless given
    switch: bool = False  # a flag without a value (default False)
    # False: recorded only when it differs from the default (older manifests stay identical)
    record_default: bool = True
    metavar: str | None = None  # how --help shows a free-form value

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


class Backend(ABC):
    name: str = ""
    # Pass names (see onnx2edge.passes.PASSES), ordered by their declared dependencies.
    required_passes: tuple[str, ...] = ()
    # The options `convert` takes for this target (the CLI builds its flags from these).
    options: tuple[BackendOption, ...] = ()
    # How `--help` names the target before an option's help text.
    label: str = ""

    def normalize_options(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """The options as `emit` reads them and the manifest records them (a backend may
        canonicalise a value or refuse a bad one with Onnx2EdgeError); default: unchanged."""
        return dict(options)

    @abstractmethod
    def unsupported(self, graph: Graph) -> list[str]:
        """One line per node this backend cannot express: name, op, opset, and why/what to do."""

    def unsupported_for(self, graph: Graph, options: Mapping[str, Any]) -> list[str]:
        """`unsupported` for the conversion options (a backend with several output formats
        overrides this); the default ignores the options."""
        return self.unsupported(graph)

    @abstractmethod
    def emit(self, graph: Graph, out_dir: Path, options: Mapping[str, Any]) -> ConvertResult:
        """Write the generated sources into `out_dir` (an empty temporary folder)."""

    @abstractmethod
    def run(
        self, out_dir: Path, inputs: Mapping[str, np.ndarray], options: Mapping[str, Any]
    ) -> dict[str, np.ndarray]:
        """Build `out_dir` if needed (cached) and run it on `inputs`; outputs by ONNX name."""

    def verify_details(self, out_dir: Path) -> list[tuple[bool, str]]:
        """Checks of the written files by the target's own tools, for `verify`'s verdict:
        (passed, one line) each; a failed one makes the verdict FAIL. Default: none."""
        return []


BACKENDS: dict[str, type[Backend]] = {}


def register_backend(cls: type[Backend]) -> type[Backend]:
    BACKENDS[cls.name] = cls
    return cls


def get_backend(name: str) -> Backend:
    # onnx2edge.backends (the package, imported before this module) registers the built-in
    # backends; other packages register theirs with `register_backend` when imported.
    if name not in BACKENDS:
        raise Onnx2EdgeError(f"unknown target '{name}' (available: {', '.join(sorted(BACKENDS))})")
    return BACKENDS[name]()


def read_manifest(out_dir: str | Path) -> dict[str, Any]:
    path = Path(out_dir) / MANIFEST
    if not path.is_file():
        raise Onnx2EdgeError(
            f"{out_dir}: no {MANIFEST} here; pass a folder written by `onnx2edge convert`"
        )
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise Onnx2EdgeError(f"{path}: corrupt manifest ({e}); convert the model again") from e


def backend_names() -> list[str]:
    """The registered targets, sorted: the CLI's --target choices."""
    return sorted(BACKENDS)
