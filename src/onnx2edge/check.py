"""`onnx2edge check`: per node, can a target run it, could a rewrite rule make it runnable,
or is it unsupported (and why). One registry serves every target.

A checker is `fn(graph) -> list[dict]` registered with `@register_checker(target)`; the graph
is the frontend's (shapes static, constants folded). Each dict has the keys of `ENTRY_KEYS`:
node, op, status ('supported' | 'replaceable' | 'unsupported'), placement (str or None),
reason, rule (str or None), source (str or None: where the verdict comes from); optionally
fix (str or None: the command that removes the refusal, from the backend's `Refusal.fix`, or
`rewrite --for` for a node a verified rule replaces; `check_model` fills it when absent).

Every registered backend is a check target: `backend_check` asks the backend itself
(`Backend.check`: the `Refusal` records `convert` refuses with) and tries the rewrite rules of
`onnx2edge.edit` on every refused node; a backend with a finer verdict (Core ML: where on the
device a node runs) declares its own checkers (`Backend.checkers`). A checker for another
target is registered with `register_checker(target)(fn)`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import Onnx2EdgeError
from .ir import Graph

if TYPE_CHECKING:
    from .backends.refusal import Refusal

CheckFn = Callable[[Graph], list[dict[str, Any]]]
ENTRY_KEYS = ("node", "op", "status", "placement", "reason", "rule", "source", "fix")
STATUSES = ("supported", "replaceable", "unsupported")

# Checkers registered by hand (tests, plugins); the backends' own come from the registry.
CHECKERS: dict[str, CheckFn] = {}


def register_checker(target: str) -> Callable[[CheckFn], CheckFn]:
    def deco(fn: CheckFn) -> CheckFn:
        CHECKERS[target] = fn
        return fn

    return deco


def all_checkers() -> dict[str, CheckFn]:
    """target -> checker: every registered backend's (its own `checkers()`, else `check`
    asked through `backend_check` with the backend's placement), then those registered
    by hand."""
    from functools import partial

    from .backends.base import BACKENDS

    out: dict[str, CheckFn] = {}
    for name, cls in sorted(BACKENDS.items()):
        backend = cls()
        own = dict(backend.checkers())
        if own:
            out.update(own)
            continue
        fallback = backend.check_fallback
        out[name] = partial(
            backend_check,
            target=name,
            placement=backend.check_placement,
            options=dict(backend.check_as),
            fallback=(fallback[0], dict(fallback[1])) if fallback else None,
        )
    return {**out, **CHECKERS}


def available_targets() -> list[str]:
    return sorted(all_checkers())


# --- backend-driven checkers ----------------------------------------------------------------
def _refusals(records: Sequence[Refusal]) -> tuple[dict[str, str], list[Refusal]]:
    """A backend's records -> (node name -> reason, the records about the graph as a whole)."""
    by_node: dict[str, str] = {}
    other: list[Refusal] = []
    for r in records:
        if r.node is None:
            other.append(r)
            continue
        prev = by_node.get(r.node)
        by_node[r.node] = f"{prev}; {r.reason}" if prev else r.reason
    return by_node, other


def _fixes(records: Sequence[Refusal]) -> dict[str, str]:
    """node name -> the backend's fix (the first one given for the node)."""
    out: dict[str, str] = {}
    for r in records:
        if r.node is not None and r.fix:
            out.setdefault(r.node, r.fix)
    return out


def rewrite_fix(target: str) -> str:
    """The command that applies the verified rules `check` proposes for `target`."""
    return f"onnx2edge rewrite MODEL -o OUT.onnx --for {target}"


def backend_check(
    graph: Graph,
    target: str,
    placement: str,
    options: Mapping[str, Any] | None = None,
    fallback: tuple[str, Mapping[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Entries for `graph` on a registered backend (its verdicts under `options`), with rewrite
    rules tried on refusals. `fallback` = (placement, options) under which the backend still
    takes a refused node elsewhere (MPS: in the Swift CPU tail): such a node is reported
    there, with the reason it is not on `placement`."""
    from .backends import get_backend
    from .edit import RULES
    from .passes import run_passes

    backend = get_backend(target)
    source = f"{type(backend).__module__}.{type(backend).__name__}.check"

    opts = dict(options or {})

    def refusals(g: Graph) -> tuple[dict[str, str], list[Refusal]]:
        return _refusals(backend.check(run_passes(g, backend.required_passes), opts))

    lowered = run_passes(graph, backend.required_passes)
    records = backend.check(lowered, opts)
    refused, other = _refusals(records)
    fixes = _fixes(records)
    still = _refusals(backend.check(lowered, fallback[1]))[0] if fallback else refused
    after = {n.name for n in lowered.nodes}
    tried: dict[str, tuple[set[str], dict[str, str]]] = {}  # rule -> (names left, refusals)
    ops = {n.op_type for n in graph.nodes if n.name in refused}
    for rule in RULES.values():
        if not ops & set(rule.ops) or not rule.exact and target not in rule.targets:
            continue  # approximate rules are proposed only where a target declares them
        try:
            g2 = rule.fn(graph)
        except Exception:  # noqa: BLE001 - a rule that cannot handle this graph proposes nothing
            continue
        if g2 is graph:
            continue
        tried[rule.name] = ({n.name for n in g2.nodes}, refusals(g2)[0])

    entries: list[dict[str, Any]] = []
    for node in graph.nodes:
        e: dict[str, Any] = {
            "node": node.name,
            "op": node.op_type,
            "status": "supported",
            "placement": placement,
            "reason": "",
            "rule": None,
            "source": source,
            "fix": None,
        }
        if node.name in refused and fallback and node.name not in still:
            e.update(
                placement=fallback[0], reason=f"{refused[node.name]} (runs on the {fallback[0]})"
            )
        elif node.name in refused:
            e.update(
                status="unsupported",
                placement=None,
                reason=refused[node.name],
                fix=fixes.get(node.name),
            )
        if node.name in refused:
            for rule, (names, again) in tried.items():
                prefix = f"{node.name}/"
                if node.name in names or any(k.startswith(prefix) for k in again):
                    continue
                e.update(
                    status="replaceable",
                    rule=rule,
                    reason=f"{refused[node.name]} -> {RULES[rule].note}",
                )
                break
        elif node.name not in after:
            e["reason"] = "folded or fused into a neighbour by the backend's passes"
        entries.append(e)
    _confirm_together(graph, entries, refusals)
    for r in other:
        entries.append(
            {
                "node": None,
                "op": None,
                "status": "unsupported",
                "placement": None,
                "reason": r.reason,
                "rule": None,
                "source": source,
                "fix": r.fix,
            }
        )
    return entries


def _confirm_together(graph: Graph, entries: list[dict[str, Any]], refusals: Any) -> None:
    """Each rule was tried alone; a backend may skip nodes downstream of a refused one, so
    apply all proposed rules at once and downgrade any node whose replacement is refused."""
    from .edit import RULES

    chosen = [e for e in entries if e["status"] == "replaceable"]
    if not chosen:
        return
    g = graph
    for name in [r for r in RULES if r in {e["rule"] for e in chosen}]:
        g = RULES[name].fn(g)
    names = {n.name for n in g.nodes}
    again, _ = refusals(g)
    for e in entries:  # refusals the first pass hid downstream of a refused node
        if e["status"] == "supported" and e["node"] in again:
            e.update(
                status="unsupported",
                placement=None,
                reason=f"{again[e['node']]} (found once the nodes before it are rewritten)",
            )
    for e in chosen:
        bad = [f"{k}: {v}" for k, v in again.items() if k.startswith(f"{e['node']}/")]
        if e["node"] in names or bad:
            e.update(
                status="unsupported",
                placement=None,
                reason=f"{e['reason']} -- but the replacement is refused too "
                f"({'; '.join(bad) or 'not rewritten'})",
                rule=None,
            )


# --- "replaceable" only when verified ------------------------------------------------------------
def _tries_rules(target: str) -> bool:
    """Whether the target's checker tries the rewrite rules on every refusal itself (it is
    `backend_check`)."""
    fn = all_checkers().get(target)
    return getattr(fn, "func", None) is backend_check


def _by_convert_coreml(graph: Graph, target: str) -> set[str]:
    """Nodes the Core ML converter itself makes supported: its seed-004 layer replacements
    (--format neuralnetwork) and, for `coreml`, what only the ML Program format (the
    default) expresses. Nothing for `rewrite` to do there."""
    from .backends.coreml import mil, nn

    nn_why, lowered = nn.node_reasons(graph)
    done = {r["node"] for r in lowered.replacements}
    if target == "coreml":
        mil_why = mil.node_reasons(graph)
        done |= {n.name for n in graph.nodes if n.name in nn_why and n.name not in mil_why}
    return done


# target -> fn(graph, target): nodes `convert` makes supported by itself (no rewrite rule)
BY_CONVERT: dict[str, Callable[[Graph, str], set[str]]] = {
    "coreml": _by_convert_coreml,
    "coreml-ane": _by_convert_coreml,
}


def confirm_replaceable(
    graph: Graph,
    target: str,
    entries: list[dict[str, Any]],
    options: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """A node is 'replaceable' only by a rewrite rule that, run on a copy of the graph and
    checked again, leaves the node and every node replacing it supported (a rule that trades
    an unsupported Mul for an unsupported Expand proposes nothing). A remedy that is not a
    rewrite rule either is what `convert` does by itself ('supported', reason says so) or is
    advice in the reason ('unsupported'). For targets whose checker does not try the rules
    itself, every rule for an unsupported node's op is tried the same way."""
    from .edit import RULES

    checker = _checker(target, options)
    tries_rules = _tries_rules(target)
    trials: dict[str, tuple[set[str], dict[str, dict[str, Any]]] | None] = {}

    def trial(rule: str) -> tuple[set[str], dict[str, dict[str, Any]]] | None:
        if rule not in trials:
            try:
                g2 = RULES[rule].fn(graph)
                again = None if g2 is graph else {e["node"]: e for e in checker(g2) if e["node"]}
            except Exception:  # noqa: BLE001 - a rule that cannot handle this graph: no remedy
                again = None
            trials[rule] = None if again is None else ({n.name for n in g2.nodes}, again)
        return trials[rule]

    def why_not(node: str, rule: str) -> str | None:
        """None when `rule` makes `node` supported (on a copy, checked again)."""
        t = trial(rule)
        if t is None:
            return f"{rule} does not rewrite it"
        names, again = t
        mine = [e for k, e in again.items() if k == node or k.startswith(f"{node}/")]
        bad = [e for e in mine if e["status"] != "supported"]
        if node in names and again.get(node, {}).get("status") != "supported" and not bad:
            bad = [again.get(node, {"node": node, "op": "?", "reason": "not rewritten"})]
        if not bad:
            return None
        return "; ".join(f"{e['node']} ({e['op']}) {e['status']}: {e['reason']}" for e in bad)

    by_convert: set[str] | None = None
    out = []
    for e in entries:
        e = dict(e)
        rule = e["rule"]
        if e["status"] == "replaceable" and rule in RULES:
            if (why := why_not(e["node"], rule)) is not None:
                e.update(
                    status="unsupported",
                    rule=None,
                    reason=f"{e['reason']} -- rewrite rule {rule}, tried on a copy, does not "
                    f"make it supported ({why})",
                )
        elif e["status"] == "replaceable" and e["node"] is not None:
            if by_convert is None:
                fn = BY_CONVERT.get(target)
                by_convert = fn(graph, target) if fn is not None else set()
            if e["node"] in by_convert:
                e.update(
                    status="supported",
                    rule=None,
                    reason=f"{e['reason']} ({rule}: convert does this itself, nothing to rewrite)",
                )
            else:
                e.update(
                    status="unsupported",
                    rule=None,
                    reason=f"{e['reason']} (suggested: {rule}; not a rule onnx2edge can apply "
                    "and check)",
                )
        elif e["status"] == "unsupported" and e["node"] is not None and not tries_rules:
            for r in RULES.values():
                if e["op"] in r.ops and (r.exact or target in r.targets):
                    if why_not(e["node"], r.name) is None:
                        e.update(
                            status="replaceable", rule=r.name, reason=f"{e['reason']} -> {r.note}"
                        )
                        break
        out.append(e)
    return out


# --- driver -------------------------------------------------------------------------------------
# target -> the conversion options its checker takes (`check --format/--precision`): where a
# node runs depends on them (a float32 ML Program never runs on the Neural Engine).
CHECK_OPTIONS: dict[str, tuple[str, ...]] = {"coreml-ane": ("format", "precision")}


def check_options(target: str, options: Mapping[str, Any] | None) -> dict[str, Any]:
    """The options given (None values dropped), validated and in canonical form."""
    given = {k: v for k, v in (options or {}).items() if v is not None}
    allowed = CHECK_OPTIONS.get(target, ())
    for key in given:
        if key not in allowed:
            raise Onnx2EdgeError(
                f"check --{key.replace('_', '-')}: only with --target "
                + " / ".join(t for t, keys in CHECK_OPTIONS.items() if key in keys)
            )
    if target == "coreml-ane" and given:
        from .backends.coreml import options as ct_opts

        fmt = given.get("format", "neuralnetwork")
        if fmt not in ("neuralnetwork", "mlprogram"):
            raise Onnx2EdgeError(f"check --format {fmt}: use neuralnetwork or mlprogram")
        given = {"fmt": fmt, "precision": ct_opts.precision(given.get("precision"), False, fmt)}
    return given


def _checker(target: str, options: Mapping[str, Any] | None) -> CheckFn:
    fn = all_checkers()[target]
    if not options:
        return fn
    return lambda graph: fn(graph, **options)  # type: ignore[call-arg]


def check_model(
    model: Any,
    target: str,
    *,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    options: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Frontend + the target-independent passes, then the target's checker; with totals.
    `model`: a file, a ModelProto or a `frontend.handle.LoadedModel` (not loaded again).
    `options`: the conversion options the target's checker takes (CHECK_OPTIONS)."""
    if target not in available_targets():
        raise Onnx2EdgeError(
            f"unknown check target '{target}' (available: {', '.join(available_targets())})"
        )
    kwargs = check_options(target, options)
    from .frontend.handle import DEFAULT_PASSES, LoadedModel, model_label, source_of

    handle = model if isinstance(model, LoadedModel) else LoadedModel(model, input_shapes)
    graph = handle.after(DEFAULT_PASSES)
    entries = _checker(target, kwargs)(graph)
    for e in entries:
        e.setdefault("fix", None)  # optional for a checker: most refusals have no known fix
        missing = [k for k in ENTRY_KEYS if k not in e]
        if missing or e["status"] not in STATUSES:
            raise ValueError(f"checker for {target} returned a malformed entry {e!r}")
    entries = confirm_replaceable(graph, target, entries, kwargs)
    for e in entries:
        if e["status"] == "replaceable" and e["rule"] in _rule_names():
            e["fix"] = rewrite_fix(target)  # the rule, run on a copy, was checked again
        elif e.get("fix") == rewrite_fix(target) or e["status"] == "supported":
            e["fix"] = None
    totals = {s: sum(e["status"] == s for e in entries) for s in STATUSES}
    src = source_of(model)
    name = str(src) if isinstance(src, str | Path) else model_label(src)
    rep: dict[str, Any] = {"model": name, "target": target, "totals": totals, "nodes": entries}
    if kwargs:
        rep["options"] = {"format" if k == "fmt" else k: v for k, v in kwargs.items()}
    return rep


def _rule_names() -> set[str]:
    from .edit import RULES

    return set(RULES)


def format_check(rep: dict[str, Any]) -> str:
    rows = [("node", "op", "status", "placement", "rule", "reason")]
    for e in rep["nodes"]:
        rows.append(
            (
                str(e["node"] or "(graph)"),
                str(e["op"] or "-"),
                e["status"],
                str(e["placement"] or "-"),
                str(e["rule"] or "-"),
                e["reason"] or "",
            )
        )
    widths = [min(max(len(r[i]) for r in rows), 40) for i in range(5)]
    lines = []
    fixes = [None, *(e.get("fix") for e in rep["nodes"])]  # None: the header row
    for r, fix in zip(rows, fixes, strict=True):
        lines.append(
            "  ".join(c[:40].ljust(w) for c, w in zip(r[:5], widths, strict=True)) + "  " + r[5]
        )
        if fix:
            lines.append(f"{'':{widths[0]}}  fix: {fix}")
    t = rep["totals"]
    lines.append(
        f"{rep['target']}: {t['supported']} supported, {t['replaceable']} replaceable "
        f"(onnx2edge rewrite --for {rep['target']}), {t['unsupported']} unsupported"
    )
    return "\n".join(line.rstrip() for line in lines)
