"""RoiAlign: average or max of bilinear samples over a grid in each output bin of each region.

Follows the ONNX reference (and onnxruntime's kernel) step by step, in the tensor's type (the
region's float32 rounding decides the sampling grid, ceil(bin size), as it does there): points
outside [-1, size] count as 0, the grid is sampling_ratio or ceil(bin size) points per axis, and
max mode takes the largest of the four weighted corner values of each sample (the spec's, not a
max of interpolated values).
"""

from __future__ import annotations

from ....ir import Graph, Node
from ..emitter import NodeContext, c_literal
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
    half = str(ctx.attr("coordinate_transformation_mode")) == "half_pixel"
    avg = str(ctx.attr("mode")) == "avg"
    ratio = int(ctx.attr("sampling_ratio"))
    scale = float(ctx.attr("spatial_scale"))
    ncol = rois.shape[1]
    if y.size == 0:
        return "/* empty output */"
    T = x.ctype
    half_lit = "0.5" if T == "double" else "0.5f"
    sample = f"""{T} yy = sh + ({T})p_h * bh + (({T})iy + {half_lit}) * bh / ({T})gh;
        {T} xx = sw + ({T})p_w * bw + (({T})ix + {half_lit}) * bw / ({T})gw;
        {T} v1 = 0, v2 = 0, v3 = 0, v4 = 0;
        if (!(yy < -1.0 || yy > {h} || xx < -1.0 || xx > {w})) {{
          if (yy < 0) yy = 0;
          if (xx < 0) xx = 0;
          long yl = (long)yy, xl = (long)xx, yh, xh;
          if (yl >= {h - 1}) {{ yh = yl = {h - 1}; yy = ({T})yl; }} else yh = yl + 1;
          if (xl >= {w - 1}) {{ xh = xl = {w - 1}; xx = ({T})xl; }} else xh = xl + 1;
          const {T} ly = yy - ({T})yl, lx = xx - ({T})xl, hy = 1 - ly, hx = 1 - lx;
          v1 = hy * hx * img[yl * {w} + xl];
          v2 = hy * lx * img[yl * {w} + xh];
          v3 = ly * hx * img[yh * {w} + xl];
          v4 = ly * lx * img[yh * {w} + xh];
        }}"""
    if avg:
        combine = "acc += v1 + v2 + v3 + v4;"
        result = f"acc / ({T})(gh * gw > 1 ? gh * gw : 1)"
    else:
        combine = f"""{T} m = v1 > v2 ? v1 : v2;
        if (v3 > m) m = v3;
        if (v4 > m) m = v4;
        if (first || m > acc) acc = m;
        first = 0;"""
        result = "acc"
    off = c_literal(0.5 if half else 0.0, x.dtype)
    clamp = "" if half else "if (rw < 1) rw = 1;\n  if (rh < 1) rh = 1;"
    grid = (
        f"const long gh = {ratio}, gw = {ratio};"
        if ratio > 0
        else f"const long gh = (long)ceil(rh / ({T}){ph}), gw = (long)ceil(rw / ({T}){pw});"
    )
    return f"""const {T} sc = {c_literal(scale, x.dtype)};
for (size_t n = 0; n < {nr}; ++n) {{
  const {T} sw = ({T}){rois.sym}[n * {ncol}] * sc - {off};
  const {T} sh = ({T}){rois.sym}[n * {ncol} + 1] * sc - {off};
  {T} rw = ({T}){rois.sym}[n * {ncol} + 2] * sc - {off} - sw;
  {T} rh = ({T}){rois.sym}[n * {ncol} + 3] * sc - {off} - sh;
  {clamp}
  const {T} bh = rh / ({T}){ph}, bw = rw / ({T}){pw};
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
      {T} acc = 0;
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
