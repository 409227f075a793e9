"""`onnx2edge report`: the data behind the page, and the page in a real headless browser."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from onnx import helper

from onnx2edge.cli import main
from onnx2edge.report import collect, fused_into, render_html

from conftest import EXAMPLE, make_model, save, tensor, vi

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _model_with_refusal(tmp_path: Path) -> Path:
    """Conv -> BatchNorm -> Relu (fused into the Conv for C), then an op MPS cannot run."""
    rng = np.random.default_rng(0)
    m = make_model(
        [
            helper.make_node("Conv", ["x", "W"], ["c"], name="conv", pads=[1, 1, 1, 1]),
            helper.make_node("BatchNormalization", ["c", "s", "b", "mu", "var"], ["n"], name="bn"),
            helper.make_node("Relu", ["n"], ["r"], name="relu"),
            helper.make_node("Erf", ["r"], ["y"], name="erf"),
        ],
        [vi("x", [1, 3, 8, 8])],
        [vi("y", [1, 4, 8, 8])],
        [
            tensor("W", rng.standard_normal((4, 3, 3, 3)).astype(np.float32)),
            tensor("s", np.ones(4, np.float32)),
            tensor("b", np.zeros(4, np.float32)),
            tensor("mu", np.zeros(4, np.float32)),
            tensor("var", np.ones(4, np.float32)),
        ],
    )
    return save(m, tmp_path / "m.onnx")


def test_collect_c_footprint_fusion_and_verification(tmp_path: Path) -> None:
    data = collect(_model_with_refusal(tmp_path), target="c", verify=True)
    by = {n["name"]: n for n in data["nodes"]}
    assert by["bn"]["fused_into"] == "conv" and by["relu"]["fused_into"] == "conv"
    assert by["bn"]["status"] == "fused" and by["conv"]["status"] == "supported"
    t = data["totals"]
    assert t["ram_bytes"] is not None and t["ram_bytes"] >= 0
    assert t["weight_bytes"] >= 4 * 3 * 3 * 3 * 4  # the folded Conv weights at least
    assert t["code_bytes"] and t["flash_bytes"] == t["weight_bytes"] + t["code_bytes"]
    assert t["macs"] == 4 * 8 * 8 * 27
    assert data["verified"] is True
    assert by["erf"]["max_rel_error"] is not None and by["erf"]["max_rel_error"] < 1e-4


def test_collect_marks_what_mpsnngraph_cannot_run(tmp_path: Path) -> None:
    data = collect(_model_with_refusal(tmp_path), target="mps")
    by = {n["name"]: n for n in data["nodes"]}
    assert by["erf"]["status"] in ("unsupported", "replaceable")
    assert by["erf"]["reason"]
    assert by["conv"]["placement"] == "gpu"


def _count_frontend_runs(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The models the frontend (loader.load) runs on from now on, one entry a run."""
    import onnx2edge.frontend as frontend
    import onnx2edge.frontend.loader as loader

    calls: list[object] = []
    real = loader.load

    def counting(*args: object, **kwargs: object) -> object:
        calls.append(args[0] if args else kwargs.get("path"))
        return real(*args, **kwargs)

    monkeypatch.setattr(loader, "load", counting)
    monkeypatch.setattr(frontend, "load", counting)
    return calls


def test_report_runs_the_frontend_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """check, prepare, the footprint and verify share one loaded model: the frontend (read,
    check, shape inference, folding, specialisation) runs once per report, not per step."""
    calls = _count_frontend_runs(monkeypatch)
    from onnx2edge.backends.c.emitter import ModelEmitter

    emits: list[str] = []
    real_emit = ModelEmitter.emit

    def counting_emit(self: ModelEmitter) -> object:
        emits.append(self.prefix)
        return real_emit(self)

    monkeypatch.setattr(ModelEmitter, "emit", counting_emit)
    data = collect(EXAMPLE, target="c", verify=True)
    assert data["verified"] is True
    assert len(calls) == 1, calls
    # the footprint's plan is the code written for the code size; verify converts once more
    # (a per-layer build, which traces every tensor)
    assert len(emits) == 2, emits


def test_fused_into_walks_back_to_the_kept_producer() -> None:
    from onnx2edge import frontend

    g = frontend.load(EXAMPLE, quiet=True)
    kept = {n.name for n in g.nodes if n.op_type != "Relu"}
    host = fused_into(g, kept)
    for n in g.nodes:
        if n.op_type == "Relu":
            assert host[n.name] in kept


def test_page_is_self_contained(tmp_path: Path) -> None:
    html = render_html(collect(EXAMPLE, target="c"))
    assert "<svg" in html and 'id="layers"' in html
    # nothing fetched from anywhere: the one script and its data are inline, no external URLs
    # but the SVG namespace
    assert html.count("<script") == 2 and "<script src" not in html
    assert '<script type="application/json" id="nodedata">' in html
    urls = set(re.findall(r"(?:src|href)=\"([^\"]+)\"", html))
    assert not urls, urls
    assert "http" not in html.replace("http://www.w3.org/2000/svg", "")
    assert 'id="search"' in html and 'id="inspect"' in html and 'id="zfit"' in html


# --- issue 29 item 7 ----------------------------------------------------------------------------


def test_fused_group_row_has_latency_error_kernel_and_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Conv + BatchNorm + Relu run as one C node: its row carries the group's latency (profile
    of the kept node) and error (of the group's last output, which the kept node writes); it
    used to be latency on the Conv row, error on the Relu row. Also the kernel chosen (the
    manifest's layer_kernels strategy and the kernel label), the strategies that refused it,
    and the layer's RAM / flash bytes.

    And --bench runs on the report's loaded model (issue 32, item 5): its conversion, its
    random inputs and its profile's graph reuse the one frontend run (they ran it three more
    times)."""
    model = _model_with_refusal(tmp_path)
    calls = _count_frontend_runs(monkeypatch)
    data = collect(model, target="c", bench=True, verify=True)
    assert len(calls) == 1, calls
    by = {n["name"]: n for n in data["nodes"]}
    conv = by["conv"]
    assert conv["ms"] is not None and conv["ms"] > 0
    assert conv["max_rel_error"] is not None and conv["max_rel_error"] < 1e-4
    for fused in ("bn", "relu"):
        assert by[fused]["ms"] is None and by[fused]["max_rel_error"] is None
        assert by[fused]["kernel"] == [] and by[fused]["ram_bytes"] is None
    assert conv["fused"] == ["bn", "relu"]
    from onnx2edge.backends.c.ops.conv import STRATEGIES

    assert conv["strategy"] in {s.name for s in STRATEGIES} and conv["kernel"]
    names = [s.name for s in STRATEGIES]
    refused = [r.split(":")[0] for r in conv["refusals"]]
    assert refused == names[: names.index(conv["strategy"])]  # each one before it, in order
    assert all(": " in r for r in conv["refusals"])
    assert conv["ram_bytes"] >= 4 * 8 * 8 * 4  # its output at least
    assert conv["flash_bytes"] >= 4 * 3 * 3 * 3 * 4  # the folded weights at least
    html = render_html(data)
    row = re.search(r'<tr id="row-0".*?</tr>', html).group(0)
    assert f"{conv['ms']:.3f}" in row and f"{conv['max_rel_error']:.1e}" in row
    assert "with bn, relu fused" in row and conv["strategy"] in row


def test_ram_card_counts_the_weights_buffer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Weights in model_weights.bin are read into a RAM buffer by model_init: the RAM total
    includes them (it showed the arena only)."""
    from onnx2edge.backends.c import writer

    data = collect(EXAMPLE, target="c")
    inline = data["totals"]
    assert not inline["weights_in_file"] and inline["ram_bytes"] == inline["arena_bytes"]
    # every stored constant is counted once, on the layer that names it first
    assert sum(n["flash_bytes"] or 0 for n in data["nodes"]) == inline["weight_bytes"]
    monkeypatch.setattr(writer, "INLINE_WEIGHT_LIMIT", 0)  # every model's weights to the file
    t = collect(EXAMPLE, target="c")["totals"]
    assert t["weights_in_file"] and t["ram_weight_bytes"] == t["weight_bytes"] > 0
    assert t["ram_bytes"] == t["arena_bytes"] + t["weight_bytes"]
    html = render_html(collect(EXAMPLE, target="c"))
    assert "RAM (arena + weights)" in html and "weights file (read into RAM)" in html


def test_coreml_nodes_that_convert_are_not_replaceable(tmp_path: Path) -> None:
    """check's coreml note "a generic converter emits AddBroadcastable; onnx2edge emits add"
    painted the Add of a model that converts as replaceable (37 of 39 nodes of one model): it
    is supported, the note kept as its reason; and --bench, which times the C build only,
    says it was not run instead of being silently ignored."""
    from onnx2edge.check import check_model

    # check itself now calls the residual Add supported (its replacement is the converter's
    # own, issue 29 item 5), with the note as its reason; the report agrees node for node
    nodes = check_model(EXAMPLE, "coreml")["nodes"]
    assert not [e for e in nodes if e["status"] == "replaceable"]
    noted = [e for e in nodes if "generic converter" in str(e.get("reason", ""))]
    assert noted  # the premise: the residual Add carries the note
    said: list[str] = []
    data = collect(EXAMPLE, target="coreml", bench=True, log=said.append)
    assert data["refused"] is None and data["totals"]["replaceable"] == 0
    by = {n["name"]: n for n in data["nodes"]}
    for e in noted:
        assert by[e["node"]]["status"] in ("supported", "fused")
    assert data["bench"] is None and "not available for target coreml" in data["bench_note"]
    assert any("not available for target coreml" in m for m in said)
    assert "not available for target coreml" in render_html(data)


@pytest.mark.skipif(
    CHROMIUM is None, reason="chromium not installed (apt-get install chromium; .ci/run does)"
)
def test_report_renders_in_headless_chromium(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "report.html"
    assert main(["report", str(EXAMPLE), "-o", str(out), "--verify"]) == 0
    assert "wrote" in capsys.readouterr().out
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        "--enable-logging=stderr",
        "--v=0",
    ]
    dom = subprocess.run(
        [CHROMIUM, *flags, "--dump-dom", out.as_uri()], capture_output=True, text=True, timeout=120
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    from onnx2edge import frontend

    n_nodes = len(frontend.load(EXAMPLE, quiet=True).nodes)
    assert (
        dom.stdout.count('class="node ') == n_nodes
    )  # every node drawn, after the browser parsed it
    assert dom.stdout.count('<tr id="row-') == n_nodes
    console_errors = [ln for ln in dom.stderr.splitlines() if "CONSOLE" in ln or "Uncaught" in ln]
    assert not console_errors, console_errors
    assert 'data-ready="1"' in dom.stdout  # the inline script ran to its end
    # click-to-inspect (#node=) and search (#search=) through the page's own script
    picked = subprocess.run(
        [CHROMIUM, *flags, "--dump-dom", out.as_uri() + "#node=conv3"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    panel = re.search(r'<div id="inspect">(.*?)</div>', picked.stdout, re.S).group(1)
    assert "<h3>conv3</h3>" in panel and "winograd" in panel and "pads" in panel
    assert "kernels that refused it" in panel and "max rel error" in panel
    assert 'class="node supported sel"' in picked.stdout
    found = subprocess.run(
        [CHROMIUM, *flags, "--dump-dom", out.as_uri() + "#search=relu"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    hits = found.stdout.count('class="node fused hit"')
    assert hits == 4 and "4 matches" in found.stdout
    assert found.stdout.count('style="display: none;"') == n_nodes - hits
    png = tmp_path / "shot.png"
    shot = subprocess.run(
        [CHROMIUM, *flags, "--window-size=1200,900", f"--screenshot={png}", out.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shot.returncode == 0 and png.stat().st_size > 10_000, shot.stderr[-2000:]
    from PIL import Image

    img = np.asarray(Image.open(png).convert("RGB")).astype(int)
    green = (img[..., 1] > 150) & (img[..., 0] < 120) & (img[..., 2] < 120)  # supported nodes
    assert green.sum() > 500  # the graph is on screen, not a blank page
