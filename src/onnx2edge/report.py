"""`onnx2edge report`: one self-contained HTML page about a model on a target.

The page holds the graph drawn as inline SVG (nodes coloured by what the target does with
them; nodes a pass fused into another drawn inside that node's group), a per-layer table
(output shapes, parameters, MACs, the C kernel chosen, RAM / flash bytes, arena offsets,
measured latency with `--bench`, error against onnxruntime with `--verify`; a fused group's
numbers on its kept node's row) with bars, and RAM / flash totals. One inline script (no
network, no external file: it opens offline) adds a search box, zoom / pan of the graph and a
panel that shows a clicked node's attributes, shapes, kernel and the kernels that refused it;
`#node=NAME` / `#search=TEXT` in the URL do the same on load.

Data gathering (`collect`) and drawing (`render_html`) are separate pure steps, so tests can
check the data and the page apart.
"""

from __future__ import annotations

import html
import json
import math
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .analysis import inspect_graph
from .errors import Onnx2EdgeError
from .fsutil import write_text_atomic
from .ir import Graph

Shapes = Mapping[str, Sequence[int]] | None

COLOURS = {
    "supported": "#4caf50",
    "replaceable": "#ffb300",
    "unsupported": "#e53935",
    "fused": "#90a4ae",
}


# --- data ---------------------------------------------------------------------------------------
def fused_into(original: Graph, kept: set[str]) -> dict[str, str]:
    """For each node of `original` missing from the target's graph, the kept node it was folded
    into: the nearest kept producer of its first input (BatchNorm, activations and residual
    Adds fold into the node before them), else of its consumers."""
    producer = {o: n for n in original.nodes for o in n.outputs if o}
    consumers: dict[str, list[str]] = {}
    for n in original.nodes:
        for i in n.inputs:
            if i in producer:
                consumers.setdefault(producer[i].name, []).append(n.name)
    result: dict[str, str] = {}
    by_name = {n.name: n for n in original.nodes}
    for n in original.nodes:
        if n.name in kept:
            continue
        seen, cur = set(), n
        while cur is not None and cur.name not in kept and cur.name not in seen:
            seen.add(cur.name)
            first = next((i for i in cur.inputs if i in producer), None)
            cur = producer[first] if first else None
        if cur is not None and cur.name in kept:
            result[n.name] = cur.name
            continue
        after = [c for c in consumers.get(n.name, []) if c in kept]
        if after:
            result[n.name] = after[0]
        elif n.name in by_name:
            result[n.name] = ""  # removed (dead code, identity) without a host
    return result


def _c_footprint(graph: Graph, work: Path) -> dict[str, Any]:
    """Arena offsets by tensor, arena / weight / code bytes of the C the target would emit, and
    per layer: the kernels it runs (the manifest's `layer_kernels` strategy and the kernel
    labels), the strategies that refused it, its RAM (arena outputs + scratch) and flash bytes
    (the constants it names first)."""
    from .backends.c.build import compiler
    from .backends.c.phases import emit_model
    from .backends.c.writer import write_model

    em, res = emit_model(graph)
    offsets = res.offsets
    stats = write_model(graph, work, emitted=(em, res))  # the plan above, not a second emit
    code = _code_bytes(compiler(), work)
    layers = {}
    for n in graph.nodes:
        outs = [em.tensors[o] for o in n.outputs if o and o in em.tensors]
        layers[n.name] = {
            "strategy": stats.get("layer_kernels", {}).get(n.name),
            "kernels": em.node_kernels.get(n.name, []),
            "refusals": [
                f"{name}: {why}" for name, why in stats.get("kernel_refusals", {}).get(n.name, [])
            ],
            "ram_bytes": sum(int(t.nbytes) for t in outs if t.kind == "arena")
            + em.node_scratch.get(n.name, 0),
            "flash_bytes": sum(
                int(em.const_data[k].nbytes)
                for k in em.node_constants.get(n.name, [])
                if k in em.const_data
            ),
        }
    return {
        "offsets": {k: int(v) for k, v in offsets.items() if isinstance(k, str)},
        "arena_bytes": int(stats["arena_bytes"]),
        "weight_bytes": int(stats["weight_bytes"]),
        # weights in model_weights.bin are read into a RAM buffer by model_init
        "weights_in_file": bool(stats.get("weights_in_file")),
        "code_bytes": code,
        "kernels": stats.get("kernels", {}),
        "layers": layers,
    }


def _code_bytes(cc: str, folder: Path) -> int | None:
    """Machine code of model.c at the release flags (.text sections; weights compiled in as
    static arrays are data, counted as weights)."""
    obj = folder / "model.o"
    built = subprocess.run(
        [
            cc,
            "-O3",
            "-march=native",
            "-c",
            str(folder / "model.c"),
            "-I",
            str(folder),
            "-o",
            str(obj),
        ],
        capture_output=True,
        text=True,
    )
    if built.returncode != 0:
        return None
    sizes = subprocess.run(["size", "-A", str(obj)], capture_output=True, text=True)
    if sizes.returncode != 0:
        return None
    total = 0
    for line in sizes.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0].startswith(".text") and parts[1].isdigit():
            total += int(parts[1])
    return total


def collect(
    model: str | Path,
    *,
    target: str = "c",
    input_shapes: Shapes = None,
    bench: bool = False,
    verify: bool = False,
    log: Any = None,
) -> dict[str, Any]:
    """Everything the page shows, as plain data."""
    from . import api
    from .check import check_model

    say = log or (lambda msg: None)
    say("reading the model")
    handle = api.load(model, input_shapes=input_shapes)  # the frontend runs once for all below
    original = handle.graph()
    info = inspect_graph(original)
    say(f"checking what {target} supports")
    checked = check_model(handle, target)
    status = {e["node"]: e for e in checked["nodes"] if e["node"]}
    try:
        prepared = api.prepare(handle, target, quiet=True)
        refused = None
    except Onnx2EdgeError as e:
        prepared, refused = None, str(e)
    kept = (
        {n.name for n in prepared.nodes}
        if prepared is not None
        else {n.name for n in original.nodes}
    )
    host = fused_into(original, kept)
    footprint: dict[str, Any] = {}
    if prepared is not None and target == "c":
        say("planning the arena and building the code")
        with tempfile.TemporaryDirectory(prefix="onnx2edge-report-") as tmp:
            footprint = _c_footprint(prepared, Path(tmp))
    latency: dict[str, float] = {}
    bench_summary = None
    bench_note = None
    if bench and target != "c":
        # the harness times the C build; Core ML / MPS need their device (`bench` says so too)
        bench_note = f"--bench times the C build only: not available for target {target}"
        say(f"{bench_note} (use --target c)")
    elif bench and prepared is None:
        bench_note = "--bench skipped: the model does not convert for this target"
        say(bench_note)
    if bench and prepared is not None and target == "c":
        from .bench.harness import bench_model

        say("timing ours and onnxruntime per node")
        # the handle: the bench converts, feeds and profiles without running the frontend again
        r = bench_model(handle, profile=True, runs=10, log=log)
        latency = {p["node"]: p["ms"] for p in r.get("profile") or []}
        bench_summary = {
            k: r[k] for k in ("ours_ms", "ort_ms", "ratio", "cpu", "cflags", "gemm_kernel")
        }
    errors: dict[str, float] = {}
    verify_ok = None
    if verify and prepared is not None:
        say(f"verifying every layer of {target} against onnxruntime")
        rep = api.verify(handle, target=target, per_layer=True)
        errors = {t.name: t.max_rel for t in [*rep.layers, *rep.outputs]}
        verify_ok = rep.ok
    offsets = footprint.get("offsets", {})
    layers = footprint.get("layers", {})
    # A kept node writes what its fused chain ends in: its outputs in the target's graph.
    written = {n.name: list(n.outputs) for n in prepared.nodes} if prepared is not None else {}
    nodes = []
    for n, row in zip(original.nodes, info["nodes"], strict=True):
        entry = status.get(n.name, {})
        into = host.get(n.name)
        state, reason = entry.get("status", "supported"), entry.get("reason") or ""
        if state == "replaceable" and target == "coreml" and prepared is not None:
            # check's note that a generic converter would emit a slower op; onnx2edge converts
            # the node itself (the model converted), so it is not painted as something to fix
            state, reason = "supported", f"note: {reason}" if reason else ""
        if into is not None and state == "supported":
            state = "fused"
        # a fused group's numbers (latency, error, kernel, bytes) belong to its kept node,
        # which writes the group's last output
        outs = written.get(n.name, []) if into is None else []
        errs = [errors[o] for o in outs if o in errors]
        if into is None and not errs:
            errs = [errors[o] for o in n.outputs if o in errors]
        lay = layers.get(n.name, {}) if into is None else {}
        nodes.append(
            {
                **row,
                "inputs": [i for i in n.inputs if i and i not in original.initializers],
                "outputs": [o for o in n.outputs if o],
                "attrs": {k: _attr_text(a.value) for k, a in sorted(n.attrs.items())},
                "status": state,
                "reason": reason,
                "rule": entry.get("rule"),
                "placement": entry.get("placement"),
                "fused_into": into,
                "fused": sorted(m for m, h in host.items() if h == n.name),
                "arena_offset": [offsets.get(o) for o in written.get(n.name, []) if o],
                "ms": latency.get(n.name),
                "max_rel_error": max(errs, default=None),
                "strategy": lay.get("strategy"),
                "kernel": lay.get("kernels", []),
                "refusals": lay.get("refusals", []),
                "ram_bytes": lay.get("ram_bytes"),
                "flash_bytes": lay.get("flash_bytes"),
            }
        )
    weight_bytes = footprint.get(
        "weight_bytes", sum(int(a.nbytes) for a in original.initializers.values())
    )
    code = footprint.get("code_bytes")
    arena = footprint.get("arena_bytes")
    ram_weights = weight_bytes if footprint.get("weights_in_file") else 0
    counts = {k: 0 for k in ("supported", "replaceable", "unsupported")}
    for nd in nodes:
        key = "supported" if nd["status"] == "fused" else nd["status"]
        counts[key] = counts.get(key, 0) + 1
    return {
        "model": Path(model).name if not isinstance(model, Path) else model.name,
        "target": target,
        "refused": refused,
        "inputs": info["inputs"],
        "outputs": info["outputs"],
        "graph_inputs": list(original.inputs),
        "totals": {
            "params": info["total_params"],
            "macs": info["total_macs"],
            "arena_bytes": arena,
            "ram_weight_bytes": ram_weights if arena is not None else None,
            "ram_bytes": arena + ram_weights if arena is not None else None,
            "weight_bytes": weight_bytes,
            "weights_in_file": bool(footprint.get("weights_in_file")),
            "code_bytes": code,
            "flash_bytes": weight_bytes + code if code is not None else None,
            **counts,
        },
        "kernels": footprint.get("kernels", {}),
        "bench": bench_summary,
        "bench_note": bench_note,
        "verified": verify_ok,
        "nodes": nodes,
    }


def _attr_text(v: Any) -> str:
    """An attribute value for the inspect panel: tensors by shape, long lists cut."""
    if hasattr(v, "shape") and hasattr(v, "dtype"):
        return f"tensor {getattr(v, 'dtype', '')} {list(v.shape)}"
    text = repr(v.decode() if isinstance(v, bytes) else v)
    return text if len(text) <= 200 else text[:199] + "…"


# --- layout -------------------------------------------------------------------------------------
NODE_W, NODE_H, GAP_X, GAP_Y = 168, 34, 24, 26


def layout(
    nodes: Sequence[Mapping[str, Any]], graph_inputs: Sequence[str]
) -> dict[str, tuple[int, int]]:
    """Top-left corner of each node: its layer is its longest path from an input, nodes of one
    layer side by side in graph order, each layer centred."""
    producer = {o: nd["name"] for nd in nodes for o in nd["outputs"]}
    depth: dict[str, int] = {}
    for nd in nodes:  # nodes are in topological order
        depth[nd["name"]] = 1 + max(
            (depth[producer[i]] for i in nd["inputs"] if i in producer), default=-1
        )
    layers: dict[int, list[str]] = {}
    for nd in nodes:
        layers.setdefault(depth[nd["name"]], []).append(nd["name"])
    widest = max((len(v) for v in layers.values()), default=1)
    total_w = widest * (NODE_W + GAP_X)
    pos = {}
    for d, names in layers.items():
        row_w = len(names) * (NODE_W + GAP_X)
        x0 = (total_w - row_w) // 2 + GAP_X // 2
        for k, name in enumerate(names):
            pos[name] = (x0 + k * (NODE_W + GAP_X), 40 + d * (NODE_H + GAP_Y))
    return pos


# --- rendering ----------------------------------------------------------------------------------
def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _bytes(n: int | None) -> str:
    if n is None:
        return "n/a"
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} B"


def _svg(data: Mapping[str, Any]) -> str:
    nodes = data["nodes"]
    pos = layout(nodes, data["graph_inputs"])
    producer = {o: nd["name"] for nd in nodes for o in nd["outputs"]}
    width = max((x for x, _ in pos.values()), default=0) + NODE_W + GAP_X
    height = max((y for _, y in pos.values()), default=0) + NODE_H + 40
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" id="graph" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="model graph">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="6" '
        'markerHeight="6" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#78909c"/></marker></defs>',
    ]
    # groups: a kept node and the nodes fused into it, boxed together
    groups: dict[str, list[str]] = {}
    for nd in nodes:
        if nd["fused_into"]:
            groups.setdefault(nd["fused_into"], [nd["fused_into"]]).append(nd["name"])
    for host, members in groups.items():
        xs = [pos[m][0] for m in members if m in pos]
        ys = [pos[m][1] for m in members if m in pos]
        parts.append(
            f'<rect class="group" x="{min(xs) - 6}" y="{min(ys) - 6}" width="{max(xs) - min(xs) + NODE_W + 12}" '
            f'height="{max(ys) - min(ys) + NODE_H + 12}" rx="10"><title>fused into {_e(host)}</title></rect>'
        )
    for nd in nodes:
        x1, y1 = pos[nd["name"]]
        for i in nd["inputs"]:
            if i not in producer:
                continue
            x0, y0 = pos[producer[i]]
            sx, sy, ex, ey = x0 + NODE_W / 2, y0 + NODE_H, x1 + NODE_W / 2, y1
            my = (sy + ey) / 2
            parts.append(
                f'<path class="edge" d="M{sx:.0f},{sy:.0f} C{sx:.0f},{my:.0f} {ex:.0f},{my:.0f} {ex:.0f},{ey:.0f}" '
                'marker-end="url(#arrow)"/>'
            )
    for i, nd in enumerate(nodes):
        x, y = pos[nd["name"]]
        colour = COLOURS.get(nd["status"], "#9e9e9e")
        shape = " ".join("x".join(map(str, s)) if s else "?" for s in nd["output_shapes"])
        tip = f"{nd['name']} ({nd['op']}) → {shape}; {nd['status']}"
        if nd["fused_into"]:
            tip += f", fused into {nd['fused_into']}"
        if nd["reason"]:
            tip += f": {nd['reason']}"
        label = nd["op"] if len(nd["op"]) <= 20 else nd["op"][:19] + "…"
        name = nd["name"] if len(nd["name"]) <= 24 else nd["name"][:23] + "…"
        parts.append(
            f'<g class="node {nd["status"]}" id="n-{_e(nd["name"])}" data-i="{i}"><title>{_e(tip)}</title>'
            f'<rect x="{x}" y="{y}" width="{NODE_W}" height="{NODE_H}" rx="6" fill="{colour}"/>'
            f'<text x="{x + NODE_W / 2:.0f}" y="{y + 14}" class="op">{_e(label)}</text>'
            f'<text x="{x + NODE_W / 2:.0f}" y="{y + 27}" class="nm">{_e(name)}</text></g>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _bar(value: float | None, top: float, colour: str) -> str:
    if value is None or top <= 0:
        return ""
    pct = max(0.5, 100.0 * value / top) if value > 0 else 0
    return f'<div class="bar" style="width:{pct:.1f}%;background:{colour}"></div>'


def _table(data: Mapping[str, Any]) -> str:
    nodes = data["nodes"]
    top_macs = max((n["macs"] for n in nodes), default=0)
    top_ms = max((n["ms"] or 0 for n in nodes), default=0)
    has_ms = any(n["ms"] is not None for n in nodes)
    has_err = any(n["max_rel_error"] is not None for n in nodes)
    has_kernel = any(n["kernel"] or n["strategy"] for n in nodes)
    has_bytes = any(n["ram_bytes"] is not None for n in nodes)
    head = ["#", "node", "op", "status", "output shape", "params", "MACs"]
    head += ["C kernel"] if has_kernel else []
    head += ["RAM", "flash"] if has_bytes else []
    head += ["arena offset"]
    head += ["latency (ms)"] if has_ms else []
    head += ["max rel error"] if has_err else []
    rows = ["<tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>"]
    for i, n in enumerate(nodes):
        shape = " ".join("x".join(map(str, s)) if s else "?" for s in n["output_shapes"])
        status = n["status"] + (f" → {n['fused_into']}" if n["fused_into"] else "")
        if n["rule"]:
            status += f" (rule {n['rule']})"
        offs = ", ".join("-" if o is None else f"{o:,}" for o in n["arena_offset"]) or "-"
        cells = [
            str(i),
            _e(n["name"]),
            _e(n["op"]),
            f'<span class="dot" style="background:{COLOURS.get(n["status"], "#9e9e9e")}"></span>{_e(status)}'
            + (f'<div class="why {n["status"]}">{_e(n["reason"])}</div>' if n["reason"] else ""),
            _e(shape),
            f"{n['params']:,}",
            f"{n['macs']:,}{_bar(n['macs'], top_macs, '#5c6bc0')}",
        ]
        if has_kernel:
            k = _e("; ".join(n["kernel"]) or ("" if n["fused_into"] else "-"))
            if n["strategy"]:
                k += f' <span class="why">({_e(n["strategy"])})</span>'
            if n["fused"]:
                k += f'<div class="why">with {_e(", ".join(n["fused"]))} fused</div>'
            cells.append(k)
        if has_bytes:
            cells += [_bytes(n["ram_bytes"]) if n["ram_bytes"] is not None else "-"]
            cells += [_bytes(n["flash_bytes"]) if n["flash_bytes"] is not None else "-"]
        cells.append(offs)
        if has_ms:
            ms = n["ms"]
            cells.append(("-" if ms is None else f"{ms:.3f}") + _bar(ms, top_ms, "#26a69a"))
        if has_err:
            err = n["max_rel_error"]
            cells.append("-" if err is None else f"{err:.1e}")
        rows.append(
            f'<tr id="row-{i}" data-i="{i}">' + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"
        )
    return '<table id="layers">' + "".join(rows) + "</table>"


CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#263238}
h1{font-size:22px;margin:0 0 4px} h2{font-size:17px;margin:28px 0 8px}
.cards{display:flex;flex-wrap:wrap;gap:12px}
.card{border:1px solid #cfd8dc;border-radius:8px;padding:10px 14px;min-width:130px}
.card b{display:block;font-size:18px}
.legend span{display:inline-block;margin-right:14px}
.dot{display:inline-block;width:10px;height:10px;border-radius:5px;margin-right:5px}
.graphrow{display:flex;gap:12px;align-items:flex-start}
#graphbox{flex:1;min-width:0;border:1px solid #cfd8dc;border-radius:8px;overflow:hidden;position:relative}
#graphbox svg{display:block;width:100%;height:70vh;cursor:grab;touch-action:none}
#graphbox .tools{position:absolute;top:6px;right:6px;display:flex;gap:4px}
#graphbox .tools button{font:13px system-ui,sans-serif;min-width:28px;padding:2px 6px}
#inspect{width:340px;flex:none;border:1px solid #cfd8dc;border-radius:8px;padding:8px 12px;max-height:70vh;overflow:auto;font-size:13px}
#inspect h3{margin:4px 0 6px;font-size:15px;word-break:break-all} #inspect td{padding:1px 4px;border:0}
#inspect ul{margin:2px 0 6px;padding-left:18px}
#searchbar{margin:6px 0} #search{width:260px;padding:3px 6px}
svg .node{cursor:pointer} svg .node.dim{opacity:.25} svg .node.hit rect{stroke:#1a237e;stroke-width:3}
svg .node.sel rect{stroke:#000;stroke-width:3} tr.sel td{background:#fff8e1} tr[data-i]{cursor:pointer}
svg .edge{fill:none;stroke:#90a4ae;stroke-width:1.3}
svg .group{fill:#eceff1;stroke:#607d8b;stroke-dasharray:4 3}
svg text{text-anchor:middle;fill:#fff;font:11px system-ui,sans-serif}
svg text.op{font-weight:600} svg .node.replaceable text{fill:#263238}
table{border-collapse:collapse;width:100%} th,td{border-bottom:1px solid #eceff1;padding:3px 6px;text-align:left;vertical-align:top}
th{background:#f5f7f8;position:sticky;top:0}
.bar{height:5px;border-radius:2px;margin-top:2px}
.why{color:#607d8b;font-size:12px} .why.unsupported{color:#b71c1c}
.refused{background:#ffebee;border:1px solid #e53935;padding:8px;border-radius:6px}
"""


# Search, zoom / pan and the inspect panel; data from the JSON block "nodedata" (one entry per
# row of the table, in its order). Plain DOM and SVG, no library.
SCRIPT = r"""
(function () {
  var N = JSON.parse(document.getElementById('nodedata').textContent);
  var svg = document.getElementById('graph'), panel = document.getElementById('inspect');
  var search = document.getElementById('search'), count = document.getElementById('searchcount');
  var full = svg.viewBox.baseVal, W0 = full.width, H0 = full.height, vb = {x: 0, y: 0, w: W0, h: H0};
  var gs = {}, rows = {}, sel = -1, hits = [], next = 0;
  Array.prototype.forEach.call(svg.querySelectorAll('g.node'), function (g) { gs[g.getAttribute('data-i')] = g; });
  Array.prototype.forEach.call(document.querySelectorAll('#layers tr[data-i]'), function (r) { rows[r.getAttribute('data-i')] = r; });
  function esc(v) {
    return String(v).replace(/[&<>"]/g, function (c) { return {'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;'}[c]; });
  }
  function bytes(n) {
    if (n === null || n === undefined) return '-';
    var u = [['GB', 1e9], ['MB', 1e6], ['kB', 1e3]];
    for (var i = 0; i < u.length; i++) if (n >= u[i][1]) return (n / u[i][1]).toFixed(2) + ' ' + u[i][0];
    return n + ' B';
  }
  function apply() { svg.setAttribute('viewBox', [vb.x, vb.y, vb.w, vb.h].join(' ')); }
  function size() { var r = svg.getBoundingClientRect(); return {w: r.width || W0, h: r.height || H0, r: r}; }
  function natural() { var s = size(); vb.w = s.w; vb.h = s.h; vb.x = (W0 - s.w) / 2; vb.y = 0; apply(); }
  function fit() {
    var s = size(), k = Math.max(W0 / s.w, H0 / s.h);
    vb.w = s.w * k; vb.h = s.h * k; vb.x = (W0 - vb.w) / 2; vb.y = (H0 - vb.h) / 2; apply();
  }
  function zoom(f, cx, cy) {
    vb.x = cx - (cx - vb.x) * f; vb.y = cy - (cy - vb.y) * f; vb.w *= f; vb.h *= f; apply();
  }
  function toGraph(e) {
    var s = size();
    return {x: vb.x + (e.clientX - s.r.left) / s.w * vb.w, y: vb.y + (e.clientY - s.r.top) / s.h * vb.h};
  }
  function centre(i) {
    var g = gs[i]; if (!g) return;
    var r = g.querySelector('rect'), x = +r.getAttribute('x') + (+r.getAttribute('width')) / 2;
    vb.x = x - vb.w / 2; vb.y = +r.getAttribute('y') - vb.h / 3; apply();
  }
  function list(items) {
    return items && items.length ? '<ul>' + items.map(function (v) { return '<li>' + esc(v) + '</li>'; }).join('') + '</ul>' : '-';
  }
  function show(i) {
    if (sel >= 0) { if (gs[sel]) gs[sel].classList.remove('sel'); if (rows[sel]) rows[sel].classList.remove('sel'); }
    sel = i; var n = N[i];
    if (gs[i]) gs[i].classList.add('sel'); if (rows[i]) rows[i].classList.add('sel');
    var shapes = n.output_shapes.map(function (s) { return s ? s.join('x') : '?'; }).join(', ');
    var at = Object.keys(n.attrs).map(function (k) { return '<tr><td>' + esc(k) + '</td><td>' + esc(n.attrs[k]) + '</td></tr>'; }).join('');
    var f = [['op', n.op], ['status', n.status + (n.fused_into ? ' → ' + n.fused_into : '') + (n.rule ? ' (rule ' + n.rule + ')' : '')],
             ['why', n.reason || '-'], ['placement', n.placement || '-'], ['inputs', (n.inputs || []).join(', ') || '-'],
             ['outputs', n.outputs.join(', ')], ['output shapes', shapes], ['params', n.params.toLocaleString()],
             ['MACs', n.macs.toLocaleString()], ['C kernel', (n.kernel || []).join('; ') + (n.strategy ? ' (' + n.strategy + ')' : '') || '-'],
             ['fused here', (n.fused || []).join(', ') || '-'], ['RAM', bytes(n.ram_bytes)], ['flash', bytes(n.flash_bytes)],
             ['latency (ms)', n.ms === null ? '-' : n.ms.toFixed(3)],
             ['max rel error', n.max_rel_error === null ? '-' : (typeof n.max_rel_error === 'number' ? n.max_rel_error.toExponential(1) : n.max_rel_error)]];
    panel.innerHTML = '<h3>' + esc(n.name) + '</h3><table>' +
      f.map(function (p) { return '<tr><td><b>' + esc(p[0]) + '</b></td><td>' + esc(p[1]) + '</td></tr>'; }).join('') +
      '</table><b>attributes</b>' + (at ? '<table>' + at + '</table>' : ' -') +
      '<br><b>kernels that refused it</b>' + list(n.refusals);
  }
  function find(q) {
    q = q.trim().toLowerCase(); hits = []; next = 0;
    N.forEach(function (n, i) {
      var hit = q !== '' && (n.name.toLowerCase().indexOf(q) >= 0 || n.op.toLowerCase().indexOf(q) >= 0);
      if (hit) hits.push(i);
      if (gs[i]) { gs[i].classList.toggle('hit', hit); gs[i].classList.toggle('dim', q !== '' && !hit); }
      if (rows[i]) rows[i].style.display = q === '' || hit ? '' : 'none';
    });
    count.textContent = q === '' ? '' : hits.length + ' match' + (hits.length === 1 ? '' : 'es');
    if (hits.length) centre(hits[0]);
  }
  search.addEventListener('input', function () { find(search.value); });
  search.addEventListener('keydown', function (e) {
    if (e.key === 'Enter' && hits.length) { var i = hits[next++ % hits.length]; show(i); centre(i); }
  });
  svg.addEventListener('wheel', function (e) {
    e.preventDefault(); var p = toGraph(e); zoom(e.deltaY > 0 ? 1.15 : 1 / 1.15, p.x, p.y);
  }, {passive: false});
  var drag = null;
  svg.addEventListener('pointerdown', function (e) { drag = {x: e.clientX, y: e.clientY, moved: false}; });
  svg.addEventListener('pointermove', function (e) {
    if (!drag) return;
    var dx = e.clientX - drag.x, dy = e.clientY - drag.y, s = size();
    if (!drag.moved && Math.abs(dx) + Math.abs(dy) < 4) return;
    drag.moved = true; vb.x -= dx * vb.w / s.w; vb.y -= dy * vb.h / s.h; drag.x = e.clientX; drag.y = e.clientY; apply();
  });
  svg.addEventListener('pointerup', function (e) {
    var d = drag; drag = null;
    if (d && d.moved) return;
    var g = e.target.closest ? e.target.closest('g.node') : null;
    if (g) show(+g.getAttribute('data-i'));
  });
  Object.keys(rows).forEach(function (i) { rows[i].addEventListener('click', function () { show(+i); centre(+i); }); });
  document.getElementById('zin').addEventListener('click', function () { zoom(1 / 1.4, vb.x + vb.w / 2, vb.y + vb.h / 2); });
  document.getElementById('zout').addEventListener('click', function () { zoom(1.4, vb.x + vb.w / 2, vb.y + vb.h / 2); });
  document.getElementById('zfit').addEventListener('click', fit);
  document.getElementById('z1').addEventListener('click', natural);
  natural();
  var h = decodeURIComponent(location.hash.slice(1)), m;
  if ((m = /^search=(.*)$/.exec(h))) { search.value = m[1]; find(m[1]); }
  if ((m = /^node=(.*)$/.exec(h))) {
    N.forEach(function (n, i) { if (n.name === m[1]) { show(i); centre(i); } });
  }
  document.body.setAttribute('data-ready', '1');
})();
"""

# what the inspect panel shows of a node (JSON: non-finite floats as text)
PANEL_KEYS = (
    "name", "op", "status", "reason", "rule", "placement", "fused_into", "fused", "inputs",
    "outputs", "output_shapes", "attrs", "params", "macs", "strategy", "kernel", "refusals",
    "ram_bytes", "flash_bytes", "ms", "max_rel_error",
)  # fmt: skip


def _node_json(nodes: Sequence[Mapping[str, Any]]) -> str:
    """The nodes as JSON safe inside a <script> element ('<' escaped)."""

    def clean(v: Any) -> Any:
        if isinstance(v, float) and not math.isfinite(v):
            return str(v)
        return v

    rows = [{k: clean(n.get(k)) for k in PANEL_KEYS} for n in nodes]
    return json.dumps(rows, separators=(",", ":")).replace("<", "\\u003c")


def render_html(data: Mapping[str, Any]) -> str:
    t = data["totals"]
    ram_label = "RAM (arena + weights)" if t.get("ram_weight_bytes") else "RAM (arena)"
    cards = [
        ("target", data["target"]),
        ("nodes", f"{len(data['nodes'])}"),
        ("parameters", f"{t['params']:,}"),
        ("MACs", f"{t['macs'] / 1e6:,.1f} M"),
        (ram_label, _bytes(t["ram_bytes"])),
        (
            "flash (weights)" if not t.get("weights_in_file") else "weights file (read into RAM)",
            _bytes(t["weight_bytes"]),
        ),
        ("flash (code)", _bytes(t["code_bytes"])),
        ("flash total", _bytes(t["flash_bytes"])),
        ("supported", f"{t['supported']}"),
        ("replaceable", f"{t['replaceable']}"),
        ("unsupported", f"{t['unsupported']}"),
    ]
    if data["bench"]:
        b = data["bench"]
        cards += [
            ("ours (ms)", f"{b['ours_ms']:.3f}"),
            ("onnxruntime (ms)", f"{b['ort_ms']:.3f}"),
            ("ratio", f"{b['ratio']:.2f}"),
        ]
    if data["verified"] is not None:
        cards.append(("verified", "pass" if data["verified"] else "FAIL"))
    io = "".join(
        f"<li>{kind} <code>{_e(v['name'])}</code> {_e(v['dtype'])} "
        f"{_e('x'.join(map(str, v['shape'])) if v['shape'] else '?')}</li>"
        for kind, key in (("input", "inputs"), ("output", "outputs"))
        for v in data[key]
    )
    legend = "".join(
        f'<span><span class="dot" style="background:{c}"></span>{k}</span>'
        for k, c in COLOURS.items()
    )
    refused = f'<p class="refused">{_e(data["refused"])}</p>' if data["refused"] else ""
    kernels = "".join(f"<li>{_e(k)}: {_e(v)}</li>" for k, v in data["kernels"].items())
    bench = ""
    if data["bench"]:
        b = data["bench"]
        bench = f"<p>Timed on {_e(b['cpu'])} with <code>{_e(b['cflags'])}</code> (GEMM kernel {_e(b['gemm_kernel'])}), 1 thread, medians.</p>"
    if data.get("bench_note"):
        bench += f'<p class="refused">{_e(data["bench_note"])}</p>'
    ram_note = (
        f"RAM is the C arena (activations and scratch, {_bytes(t.get('arena_bytes'))}) plus the "
        f"weights buffer model_init reads model_weights.bin into ({_bytes(t['ram_weight_bytes'])}); "
        if t.get("ram_weight_bytes")
        else "RAM is the C arena (activations and scratch); "
    )
    graph = (
        '<div id="searchbar"><input id="search" type="search" placeholder="search nodes by name or op" '
        'aria-label="search nodes"> <span id="searchcount"></span></div>'
        f'<div class="graphrow"><div id="graphbox">{_svg(data)}<div class="tools">'
        '<button id="zin" title="zoom in">+</button><button id="zout" title="zoom out">−</button>'
        '<button id="z1" title="natural size">1:1</button><button id="zfit" title="whole graph">fit</button>'
        '</div></div><div id="inspect"><h3>Click a node</h3>or a row of the table to inspect it; '
        "scroll to zoom, drag to pan, type to search (Enter: next match).</div></div>"
    )
    return (
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>"
        f"<title>onnx2edge report: {_e(data['model'])} on {_e(data['target'])}</title>"
        f"<style>{CSS}</style></head><body>"
        f"<h1>{_e(data['model'])} on {_e(data['target'])}</h1><ul>{io}</ul>{refused}"
        '<div class="cards">'
        + "".join(f'<div class="card">{_e(k)}<b>{_e(v)}</b></div>' for k, v in cards)
        + "</div>"
        + f'<h2>Graph</h2><p class="legend">{legend}</p>{graph}'
        + f"<h2>Layers</h2>{bench}{_table(data)}"
        + (f"<h2>Kernels</h2><ul>{kernels}</ul>" if kernels else "")
        + f"<p><small>Written by onnx2edge report. {ram_note}"
        "flash is the weights plus the machine code of model.c at -O3 -march=native. Per layer: "
        "RAM = its output buffers and scratch in the arena (buffers are shared over time, so "
        "they add up to more than the arena), flash = the weights it is the first to use; a "
        "fused group's kernel, bytes, latency and error are on its kept node's row.</small></p>"
        f'<script type="application/json" id="nodedata">{_node_json(data["nodes"])}</script>'
        f"<script>{SCRIPT}</script>"
        "</body></html>\n"
    )


def write_report(
    model: str | Path,
    out: str | Path,
    *,
    target: str = "c",
    input_shapes: Shapes = None,
    bench: bool = False,
    verify: bool = False,
    log: Any = None,
) -> dict[str, Any]:
    data = collect(
        model, target=target, input_shapes=input_shapes, bench=bench, verify=verify, log=log
    )
    write_text_atomic(out, render_html(data))
    return data
