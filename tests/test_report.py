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
    # nothing fetched from anywhere: no scripts, no external URLs but the SVG namespace
    assert "<script" not in html
    urls = set(re.findall(r"(?:src|href)=\"([^\"]+)\"", html))
    assert not urls, urls
    assert "http" not in html.replace("http://www.w3.org/2000/svg", "")


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
