"""`onnx2edge rewrite`: apply named rules (or a target's rule set) and verify the result."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import Onnx2EdgeError
from .model_io import Shapes, load_graph, save_model, to_model, verify_models
from .rules import RULES, get_rules
from .rules import apply_rules as apply_rules  # graph-only: lives with the registry
from .rules import list_rules as list_rules


def rules_for_target(model: str | Path, target: str, *, input_shapes: Shapes = None) -> list[str]:
    """The rules `check` has verified make this model's unsupported nodes supported on
    `target` (each run on a copy and checked again: check.confirm_replaceable), and no
    other: a rule the target merely declares (the ANE's explicit broadcasts) is applied
    only where it was found to help."""
    from ..check import check_model

    rep = check_model(model, target, input_shapes=input_shapes)
    names = {e["rule"] for e in rep["nodes"] if e["status"] == "replaceable" and e["rule"] in RULES}
    # keep registry order: decompositions before the clean-ups that may follow them
    return [n for n in RULES if n in names]


def rewrite(
    model: str | Path,
    out: str | Path,
    *,
    rules: Sequence[str] = (),
    target: str | None = None,
    verify: bool = True,
    seed: int = 0,
    rtol: float = 1e-4,
    atol: float = 1e-6,
    input_shapes: Shapes = None,
    per_layer: bool = False,
) -> dict[str, Any]:
    """Rewrite `model` with `rules` (or `target`'s rule set) into `out`.

    With `verify`, both models run in onnxruntime on seeded random inputs; when every applied
    rule is exact a mismatch is an error and nothing is written. Approximate rules (their note
    says by how much they move values) are written with the measured difference reported.
    `input_shapes` fixes the model's input shapes first (rules such as broadcast_explicit or
    gemm_to_conv need static shapes; other symbolic dims become 1). `per_layer` compares every
    tensor both models share and names the first one that moved.
    """
    if not rules and not target:
        raise Onnx2EdgeError("rewrite needs --rules NAME[,NAME] or --for TARGET (see --list)")
    names = list(rules)
    if target:
        names += [
            n for n in rules_for_target(model, target, input_shapes=input_shapes) if n not in names
        ]
    chosen = get_rules(names)
    proto, graph = load_graph(model)
    if input_shapes:
        from ..frontend.loader import fix_input_shapes

        proto, graph = load_graph(fix_input_shapes(proto, input_shapes))
    new, log = apply_rules(graph, chosen)
    result: dict[str, Any] = {"rules": log, "output": str(out), "target": target}
    result["changed"] = any(e["rewritten"] for e in log)
    edited = to_model(new)
    if verify:
        rep = verify_models(proto, edited, seed=seed, rtol=rtol, atol=atol, per_layer=per_layer)
        exact = all(e["exact"] or not e["rewritten"] for e in log)
        result["verify"] = {**rep.as_dict(), "exact_rules_only": exact}
        if not rep.ok and exact:
            worst = max(rep.outputs, key=lambda o: o.max_rel)
            raise Onnx2EdgeError(
                f"rewritten model differs from the original on output '{worst.name}' "
                f"(max abs error "
                f"{worst.max_abs:.3g}, max rel {worst.max_rel:.3g}); nothing written"
            )
    save_model(edited, out, "rewrite")
    if target:  # what the target still refuses, so the user knows where the rules stop
        from ..check import check_model

        rep = check_model(out, target, input_shapes=input_shapes)
        result["still_unsupported"] = [e for e in rep["nodes"] if e["status"] != "supported"]
    return result


def format_rewrite(res: dict[str, Any]) -> str:
    lines = []
    for e in res["rules"]:
        n = len(e["rewritten"])
        ops = ", ".join(f"{k} {v:+d}" for k, v in e["ops"].items()) or "attributes only"
        ops = f"{n} node{'s' if n != 1 else ''} rewritten ({ops})" if n else "no match"
        flag = "" if e["exact"] else "  [approximate]"
        lines.append(f"{e['rule']}: {ops}{flag}")
    v = res.get("verify")
    if v:
        for o in v["outputs"]:
            lines.append(
                f"verify {'ok  ' if o['ok'] else 'DIFF'} {o['name']}: max abs error "
                f"{o['max_abs_error']:.3g}, max rel error {o['max_rel_error']:.3g}"
            )
        if v.get("layers"):
            n_ok = sum(r["ok"] for r in v["layers"])
            lines.append(f"per-layer: {n_ok}/{len(v['layers'])} shared intermediate tensors match")
            fd = v.get("first_divergence")
            if fd:
                lines.append(
                    f"first divergence: '{fd['name']}' "
                    f"(node {fd.get('node', '?')}, {fd.get('op', '?')}): "
                    f"max abs error {fd['max_abs_error']:.3g}"
                )
        if not v["ok"]:
            lines.append("note: approximate rules changed the numerics by the amounts above")
    elif v is None:
        lines.append("not verified (--no-verify)")
    left = res.get("still_unsupported")
    if left is not None:
        lines.append(f"{res['target']}: {len(left)} node(s) still unsupported after the rules")
        for e in left[:10]:
            lines.append(f"  {e['node'] or '(graph)'} ({e['op'] or '-'}): {e['reason']}")
        if len(left) > 10:
            lines.append(
                f"  ... and {len(left) - 10} more (onnx2edge check --target {res['target']})"
            )
    lines.append(f"wrote {res['output']}")
    return "\n".join(lines)
