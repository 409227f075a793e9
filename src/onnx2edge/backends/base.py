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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import Onnx2EdgeError
from ..ir import Graph
from .refusal import Refusal

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
    # Options the API takes besides the declared ones, read when verifying or running rather
    # than converting (no `convert` flag): `verify --per-layer`, `--arch`, build flags.
    # `log`: a callable for progress lines (a slow emit says what it is doing).
    run_options: tuple[str, ...] = ("per_layer", "arch", "cflags", "timeout", "log")
    # Another target's spelling of one of this target's options, accepted as that option:
    # (name, value) -> (name, value). One fp16 spelling for every target (`--fp16` and
    # `--weights fp16`), instead of a flag silently ignored by the targets that spell it
    # the other way.
    aliases: Mapping[tuple[str, Any], tuple[str, Any]] = {}

    def normalize_options(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """The options as `emit` reads them and the manifest records them (a backend may
        canonicalise a value or refuse a bad one with Onnx2EdgeError); default: unchanged."""
        return dict(options)

    def describe_run(self, out_dir: Path, options: Mapping[str, Any]) -> str:
        """What `run` executed the converted folder on, for the verdict of `verify` ("ran on
        ..."): a backend says whether that was the target itself, a build for this host or
        a model of the target (a simulator, an evaluator). Backends override this."""
        return f"{self.label or self.name} output run by onnx2edge on this host"

    # `onnx2edge check --target NAME`: where a node this backend takes runs (the placement
    # column), the conversion options the verdict is asked under, and (placement, options)
    # under which the backend still takes a node refused there (MPS: the Swift CPU tail).
    check_placement: str = "cpu"
    check_as: Mapping[str, Any] = {}
    check_fallback: tuple[str, Mapping[str, Any]] | None = None

    def checkers(self) -> Mapping[str, Callable[..., list[dict[str, Any]]]]:
        """`check` targets this backend answers with its own checker, `fn(graph, **options)
        -> entries` (Core ML: where on the device each node runs); empty (the default):
        `check --target NAME` asks `check` below, with the rewrite rules tried on refusals."""
        return {}

    # The ops (domain, op_type) this backend has an emitter for; a node of another op is
    # refused by `check`. Empty: the backend does not say (check still judges every node).
    @property
    def supported_ops(self) -> frozenset[tuple[str, str]]:
        return frozenset()

    def check(self, graph: Graph, options: Mapping[str, Any] | None = None) -> list[Refusal]:
        """Every node (or graph-level problem) this backend cannot express under the
        conversion `options`, as records (`Refusal`): what `convert` refuses with, `check`
        reports and conformance files. A backend overrides this (or, older ones, `unsupported`,
        whose lines become graph-level refusals)."""
        return [Refusal.graph(line) for line in self._legacy_unsupported(graph, options or {})]

    def _legacy_unsupported(self, graph: Graph, options: Mapping[str, Any]) -> list[str]:
        cls = type(self)
        if cls.unsupported_for is not Backend.unsupported_for:
            return cls.unsupported_for(self, graph, options)
        if cls.unsupported is Backend.unsupported:
            raise NotImplementedError(f"{cls.__name__} implements neither check nor unsupported")
        return self.unsupported(graph)

    def unsupported(self, graph: Graph) -> list[str]:
        """One line per node this backend cannot express: name, op, opset, and why/what to do
        (`check` as text)."""
        return [str(r) for r in self.check(graph, {})]

    def passes_for(self, options: Mapping[str, Any]) -> tuple[str, ...]:
        """The passes a conversion with `options` needs (default: required_passes)."""
        return self.required_passes

    def unsupported_for(self, graph: Graph, options: Mapping[str, Any]) -> list[str]:
        """`check` under the conversion options, as text (one line per refusal)."""
        return [str(r) for r in self.check(graph, options)]

    @abstractmethod
    def emit(self, graph: Graph, out_dir: Path, options: Mapping[str, Any]) -> ConvertResult:
        """Write the generated sources into `out_dir` (an empty temporary folder)."""

    @abstractmethod
    def run(
        self, out_dir: Path, inputs: Mapping[str, np.ndarray], options: Mapping[str, Any]
    ) -> dict[str, np.ndarray]:
        """Build `out_dir` if needed (cached) and run it on `inputs`; outputs by ONNX name."""

    def default_rtol(self, options: Mapping[str, Any]) -> tuple[float, str]:
        """`verify`'s rtol when none is given, and why: float32 code is held to 1e-4 of the
        output's scale; a backend whose conversion computes in float16 says so here (float16
        keeps 11 bits: 1e-4 would fail every correct conversion)."""
        return 1e-4, ""

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


def check_options(backend: Backend, options: Mapping[str, Any]) -> dict[str, Any]:
    """`options` with another target's fp16 spelling turned into this one's (`aliases`);
    refuses, in one line, a key this target does not take: misspelt (the close spelling
    suggested) or another target's option (that target named)."""
    import difflib

    declared = {o.name for o in backend.options}
    known = declared | set(backend.run_options)
    out: dict[str, Any] = {}
    problems = []
    for key, value in options.items():
        alias = backend.aliases.get((key, value)) if isinstance(value, str | bool) else None
        if key not in known and alias is not None:
            name, v = alias
            if name in options and options[name] != v:
                raise Onnx2EdgeError(
                    f"options for target {backend.name}: {key}={value!r} means {name}={v!r}, "
                    f"but {name}={options[name]!r} is given too"
                )
            out[name] = v
            continue
        if key in known:
            out[key] = value
            continue
        owners = [n for n, b in sorted(BACKENDS.items()) if any(o.name == key for o in b.options)]
        if owners:
            problems.append(
                f"'{key}' is an option of target {', '.join(owners)}, not {backend.name}"
            )
            continue
        close = difflib.get_close_matches(str(key), sorted(known), n=1, cutoff=0.6)
        problems.append(
            f"unknown option '{key}'" + (f" (did you mean '{close[0]}'?)" if close else "")
        )
    if problems:
        raise Onnx2EdgeError(
            f"options for target {backend.name}: {'; '.join(problems)} "
            f"({backend.name} takes: {', '.join(sorted(declared)) or 'no options'})"
        )
    return out


def backend_names() -> list[str]:
    """The registered targets, sorted: the CLI's --target choices."""
    return sorted(BACKENDS)
