"""DeformConv (2-D): a convolution whose every kernel tap reads the input at a learned offset,
bilinearly interpolated (zeros outside the image) and scaled by an optional mask.

y[n][o][i][j] = B[o] + sum over the input channels of o's group and the taps (kh, kw) of
W[o][c][kh][kw] * mask * X[n][c] sampled at (i*sh - pad_top + kh*dh + dy, j*sw - pad_left +
kw*dw + dx), the offsets (dy, dx) and mask taken per offset group, tap and output position, as
the ONNX reference (torchvision's deform_conv2d) lays them out. Accumulated in double.
"""

from __future__ import annotations

from ....ir import Graph, Node
from ....semantics.conv_geometry import conv_geometry
from ..emitter import NodeContext
from . import register_op

BILINEAR = r"""
/* X (h x w, row-major) at the real position (y, x): bilinear, 0 outside the image. */
static double o2e_deform_sample(const float *img, long h, long w, double y, double x)
{
  const double fy = floor(y), fx = floor(x);
  const long y0 = (long)fy, x0 = (long)fx;
  const double ly = y - fy, lx = x - fx;
  double v = 0;
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 2; ++b) {
      const long yy = y0 + a, xx = x0 + b;
      if (yy < 0 || yy >= h || xx < 0 || xx >= w) continue;
      v += (a ? ly : 1 - ly) * (b ? lx : 1 - lx) * (double)img[yy * w + xx];
    }
  return v;
}
"""


def _check(node: Node, graph: Graph) -> str | None:
    for i in range(len(node.inputs)):
        if not node.inputs[i]:
            continue
        t = graph.type_of(node.inputs[i])
        if t is None or t.dtype.name != "float32":
            return "DeformConv takes float32 tensors"
    if len(graph.shape_of(node.inputs[0])) != 4:
        return "DeformConv: only the 2-D form (NCHW input) is supported"
    return None


@register_op("DeformConv", check=_check)
def deform_conv(ctx: NodeContext) -> str:
    x, wt, off, y = ctx.x(0), ctx.x(1), ctx.x(2), ctx.y(0)
    n, ic, ih, iw = x.shape
    oc, icg, kh, kw = wt.shape
    _, _, oh, ow = y.shape
    group = int(ctx.attr("group"))
    og = int(ctx.attr("offset_group"))
    geo = conv_geometry(ctx.node, x.shape, wt.shape, y.shape, ctx.graph.opset)
    (sh, sw), (dh, dw), (pt, pl) = geo.strides, geo.dilations, geo.pads_begin
    ocg, icog = oc // group, ic // og
    bias = f"(double){ctx.x(3).sym}[o]" if ctx.has_input(3) else "0.0"
    hw = oh * ow
    mask = (
        f" * (double){ctx.x(4).sym}[((size_t)b * {og * kh * kw} + (g * {kh} + p) * {kw} + q) * {hw} + i * {ow} + j]"
        if ctx.has_input(4)
        else ""
    )
    ctx.helper("o2e_deform_sample", BILINEAR)
    if y.size == 0:
        return "/* empty output */"
    return f"""for (size_t b = 0; b < {n}; ++b)
for (size_t o = 0; o < {oc}; ++o)
for (size_t i = 0; i < {oh}; ++i)
for (size_t j = 0; j < {ow}; ++j) {{
  double acc = {bias};
  for (size_t cc = 0; cc < {icg}; ++cc) {{
    const size_t c = (o / {ocg}) * {icg} + cc;
    const size_t g = c / {icog};
    const float *img = {x.sym} + ((size_t)b * {ic} + c) * {ih * iw};
    for (size_t p = 0; p < {kh}; ++p)
    for (size_t q = 0; q < {kw}; ++q) {{
      const size_t t = ((size_t)b * {og * kh * kw} + (g * {kh} + p) * {kw} + q) * 2;
      const double dy = (double){off.sym}[t * {hw} + i * {ow} + j];
      const double dx = (double){off.sym}[(t + 1) * {hw} + i * {ow} + j];
      const double py = (double)((long)(i * {sh} + p * {dh}) - {pt}) + dy;
      const double px = (double)((long)(j * {sw} + q * {dw}) - {pl}) + dx;
      acc += (double){wt.sym}[((o * {icg} + cc) * {kh} + p) * {kw} + q]
             * o2e_deform_sample(img, {ih}, {iw}, py, px){mask};
    }}
  }}
  {y.sym}[((b * {oc} + o) * {oh} + i) * {ow} + j] = (float)acc;
}}"""
