"""RoiAlign: average or max of bilinear samples over a grid in each output bin of each region.

Follows the ONNX reference (and onnxruntime's kernel) step by step, in double: sample points
outside [-1, size] count as 0, the grid is sampling_ratio or ceil(bin size) points per axis, and
max mode takes the largest of the four weighted corner values of each sample (the spec's, not a
max of interpolated values).
"""

from __future__ import annotations

from ....ir import Graph, Node
from ..emitter import NodeContext
from . import register_op


def _check(node: Node, graph: Graph) -> str | None:
    t = graph.type_of(node.inputs[0])
    if t is None or t.dtype.name not in ("float32", "float64"):
        return "RoiAlign takes float32 or float64 input"
    if len(graph.shape_of(node.inputs[0])) != 4:
        return "RoiAlign takes an NCHW input"
    return None


@register_op("RoiAlign", check=_check)
def roi_align(ctx: NodeContext) -> str:
    x, rois, bidx, y = ctx.x(0), ctx.x(1), ctx.x(2), ctx.y(0)
    _, ch, h, w = x.shape
    nr, _, ph, pw = y.shape
    half = str(ctx.attr("coordinate_transformation_mode", "half_pixel")) == "half_pixel"
    avg = str(ctx.attr("mode", "avg")) == "avg"
    ratio = int(ctx.attr("sampling_ratio", 0))
    scale = float(ctx.attr("spatial_scale", 1.0))
    ncol = rois.shape[1]
    if y.size == 0:
        return "/* empty output */"
    sample = f"""double yy = sh + (double)p_h * bh + (iy + 0.5) * bh / gh;
        double xx = sw + (double)p_w * bw + (ix + 0.5) * bw / gw;
        double v1 = 0, v2 = 0, v3 = 0, v4 = 0;
        if (!(yy < -1.0 || yy > {h} || xx < -1.0 || xx > {w})) {{
          if (yy < 0) yy = 0;
          if (xx < 0) xx = 0;
          long yl = (long)yy, xl = (long)xx, yh, xh;
          if (yl >= {h - 1}) {{ yh = yl = {h - 1}; yy = (double)yl; }} else yh = yl + 1;
          if (xl >= {w - 1}) {{ xh = xl = {w - 1}; xx = (double)xl; }} else xh = xl + 1;
          const double ly = yy - yl, lx = xx - xl, hy = 1.0 - ly, hx = 1.0 - lx;
          v1 = hy * hx * (double)img[yl * {w} + xl];
          v2 = hy * lx * (double)img[yl * {w} + xh];
          v3 = ly * hx * (double)img[yh * {w} + xl];
          v4 = ly * lx * (double)img[yh * {w} + xh];
        }}"""
    if avg:
        combine = "acc += v1 + v2 + v3 + v4;"
        result = "acc / (double)(gh * gw > 1 ? gh * gw : 1)"
    else:
        combine = """double m = v1 > v2 ? v1 : v2;
        if (v3 > m) m = v3;
        if (v4 > m) m = v4;
        if (first || m > acc) acc = m;
        first = 0;"""
        result = "acc"
    off = "0.5" if half else "0.0"
    clamp = "" if half else "if (rw < 1.0) rw = 1.0;\n  if (rh < 1.0) rh = 1.0;"
    grid = (
        f"const long gh = {ratio}, gw = {ratio};"
        if ratio > 0
        else f"const long gh = (long)ceil(rh / {ph}), gw = (long)ceil(rw / {pw});"
    )
    return f"""for (size_t n = 0; n < {nr}; ++n) {{
  const double sw = (double){rois.sym}[n * {ncol}] * {scale!r} - {off};
  const double sh = (double){rois.sym}[n * {ncol} + 1] * {scale!r} - {off};
  double rw = (double){rois.sym}[n * {ncol} + 2] * {scale!r} - {off} - sw;
  double rh = (double){rois.sym}[n * {ncol} + 3] * {scale!r} - {off} - sh;
  {clamp}
  const double bh = rh / {ph}, bw = rw / {pw};
  {grid}
  const int64_t b = (int64_t){bidx.sym}[n];
  if (b < 0 || b >= {x.shape[0]}) {{  /* a batch index out of range: zeros, no read */
    for (size_t i = 0; i < {ch * ph * pw}; ++i) {y.sym}[n * {ch * ph * pw} + i] = 0;
    continue;
  }}
  for (size_t c = 0; c < {ch}; ++c) {{
    const {x.ctype} *img = {x.sym} + ((size_t)b * {ch} + c) * {h * w};
    for (size_t p_h = 0; p_h < {ph}; ++p_h)
    for (size_t p_w = 0; p_w < {pw}; ++p_w) {{
      double acc = 0;
      int first = 1;
      (void)first;
      for (long iy = 0; iy < gh; ++iy)
      for (long ix = 0; ix < gw; ++ix) {{
        {sample}
        {combine}
      }}
      {y.sym}[((n * {ch} + c) * {ph} + p_h) * {pw} + p_w] = ({y.ctype})({result});
    }}
  }}
}}"""
