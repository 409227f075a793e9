"""Resampling: Resize (opset 10 to 19) and Upsample, GridSample, AffineGrid.

Resize is separable: along each resized axis, every output index reads a few input indices
("taps") with weights that depend only on that axis. The generated code fills one tap table per
axis at run time with `o2e_resize_taps` (scales, sizes and roi may be runtime inputs: the
output shape is static, but e.g. a scale of 0.6 on 4 pixels gives 2 outputs that sample at
x / 0.6, not x / 0.5), then sums the products of the weights over the taps of all axes, in
double, like the spec's reference (onnx/reference/ops/op_resize.py) which works in float64.
"""

from __future__ import annotations

import math

import numpy as np

from ....ir import Graph, Node
from ....semantics.attrs import attr
from ....semantics.records import resize_attrs
from ..emitter import NodeContext, c_literal
from ..kernels.gemm.gemm import _use_engine, plan_threads
from ..kernels.par_split import RATE_RESIZE, split_at
from . import register_op
from .common import norm_axis, strides
from .dtypes import allow_storage_dtypes, is_float, is_storage, load_expr, store_expr

MODES = {"nearest": 0, "linear": 1, "bilinear": 1, "trilinear": 1, "cubic": 2}
COORD_MODES = {
    "half_pixel": 0,
    "asymmetric": 1,
    "align_corners": 2,
    "pytorch_half_pixel": 3,
    "tf_crop_and_resize": 4,
    "half_pixel_symmetric": 5,
    "tf_half_pixel_for_nn": 6,  # Resize-11 only
}
# 4 = onnxruntime's rule for Resize-10 and Upsample, which predate `nearest_mode`:
# round down when upsampling, up when downsampling
NEAREST_MODES = {
    "round_prefer_floor": 0,
    "round_prefer_ceil": 1,
    "floor": 2,
    "ceil": 3,
    "simple": 4,
}

RESIZE_TAPS = r"""
/* Resize along one axis (ONNX Resize-19 spec; onnx/reference/ops/op_resize.py): for each output
 * index o, the input indices idx[o*n .. o*n+n-1] and their weights w[...]; returns n, the taps
 * per output index. idx[o*n] = -1 marks an output outside the tf_crop_and_resize box.
 * mode: 0 nearest, 1 linear, 2 cubic. ctm: 0 half_pixel, 1 asymmetric, 2 align_corners,
 * 3 pytorch_half_pixel, 4 tf_crop_and_resize, 5 half_pixel_symmetric, 6 tf_half_pixel_for_nn (Resize-11).
 * nearest: 0 round_prefer_floor, 1 round_prefer_ceil, 2 floor, 3 ceil, 4 floor up / ceil down
 * (Resize-10). */
static double o2e_cubic_kernel(double x, double a)
{
  x = fabs(x);
  if (x <= 1) return ((a + 2) * x - (a + 3)) * x * x + 1;
  if (x < 2) return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
  return 0;
}

static int o2e_resize_taps(int64_t in_w, int64_t out_w, double scale, double roi0, double roi1, int mode, int ctm,
                           int nearest, double cubic_a, int exclude_outside, int antialias, int nmax,
                           int32_t *idx, double *w)
{
  const double ow = scale * (double)in_w; /* the spec's output width: a real number */
  int n = mode == 0 ? 1 : mode == 1 ? 2 : 4, start = mode == 0 ? 0 : 1 - n / 2;
  double s = scale < 1 ? scale : 1;
  if (out_w == in_w && fabs(scale - 1) <= 1e-9 && (ctm != 4 || (roi0 == 0 && fabs(roi1 - 1) <= 1e-9))) {
    for (int64_t o = 0; o < out_w; ++o) { idx[o] = (int32_t)o; if (w) w[o] = 1; }
    return 1; /* identity along this axis: the reference skips it too */
  }
  if (antialias && mode != 0) { /* a wider kernel, stretched by 1/scale when downsampling */
    start = (int)floor((mode == 1 ? -1.0 : -2.0) / s) + 1;
    n = 2 - 2 * start;
  }
  if (n > nmax) n = nmax;
  for (int64_t o = 0; o < out_w; ++o) {
    int32_t *io = idx + o * n;
    double *wo = w ? w + o * n : 0, x, f, r, sum = 0;
    switch (ctm) {
      case 1: x = (double)o / scale; break;
      case 2: x = ow == 1 ? 0 : (double)o * (double)(in_w - 1) / (ow - 1); break;
      case 3: x = out_w > 1 ? ((double)o + 0.5) / scale - 0.5 : 0; break; /* spec text and onnxruntime */
      case 4:
        x = ow == 1 ? (roi1 - roi0) * (double)(in_w - 1) / 2 : (double)o * (roi1 - roi0) * (double)(in_w - 1) / (ow - 1);
        x += roi0 * (double)(in_w - 1);
        break;
      case 5: {
        const double adj = (double)out_w / ow, center = (double)in_w / 2;
        x = center * (1 - adj) + ((double)o + 0.5) / scale - 0.5;
        break;
      }
      case 6: x = ((double)o + 0.5) / scale; break;
      default: x = ((double)o + 0.5) / scale - 0.5; break;
    }
    if (ctm == 4 && (x < 0 || x > (double)(in_w - 1))) { io[0] = -1; continue; }
    /* the reference prefers the pixel left of x: an integer x is "1 past x - 1" */
    f = floor(x);
    r = x - f;
    if (r == 0) { f -= 1; r = 1; }
    if (mode == 0) {
      int64_t i;
      switch (nearest) {
        case 1: i = (int64_t)f + (r < 0.5 ? 0 : 1); break;
        case 2: i = (int64_t)f + (r == 1 ? 1 : 0); break;
        case 3: i = (int64_t)f + 1; break;
        case 4: i = scale < 1 ? (int64_t)ceil(x) : (int64_t)x; break;
        default: i = (int64_t)f + (r <= 0.5 ? 0 : 1); break;
      }
      io[0] = (int32_t)(i < 0 ? 0 : i >= in_w ? in_w - 1 : i);
      if (wo) wo[0] = 1;
      continue;
    }
    for (int k = 0; k < n; ++k) {
      const double t = (double)(start + k) - r; /* tap position relative to x */
      double v;
      if (mode == 1) v = antialias ? fmax(0, 1 - fabs(t * s)) : (k == 0 ? 1 - r : r);
      else v = o2e_cubic_kernel(antialias ? t * s : t, cubic_a);
      io[k] = (int32_t)((int64_t)f + start + k);
      if (exclude_outside && (io[k] < 0 || io[k] >= in_w)) v = 0;
      wo[k] = v;
      sum += v;
    }
    for (int k = 0; k < n; ++k) {
      if ((antialias || exclude_outside) && sum != 0) wo[k] /= sum;
      io[k] = io[k] < 0 ? 0 : io[k] >= in_w ? (int32_t)(in_w - 1) : io[k]; /* edge padding */
    }
  }
  return n;
}
"""


RESIZE2D_F32 = r"""
/* float32 Resize of the last two axes, separably: each input row a vertical tap needs is
 * resampled along W once into a small cache (slot = row % ny: a tap's rows are consecutive
 * after edge clamping, so two rows in use never share a slot), then each output row is the
 * weighted sum of its ny cached rows, a contiguous loop the compiler vectorises. ny/nx = 0: that
 * axis is copied unchanged (iy/ix unused); weights NULL (nearest): every tap weighs 1. Works in
 * float like onnxruntime's upsample kernels (the generic loop sums in double like the spec's
 * reference). Planes [p0, p1) per call (o2e_parallel_for splits them); a thread's row cache is
 * its slot of `rows` (ny * wout floats) and `tags` (ny ints): thread(), or slot 0 when NULL. */
typedef struct {
  const float *x;
  float *y;
  int64_t hin, win, hout, wout;
  int ny, nx;
  const int32_t *iy, *ix;
  const float *wy, *wx; /* the tap weights as float (o2e_resize2d_weights), NULL: all 1 */
  float *rows;
  int32_t *tags;
  int (*thread)(void);
} o2e_resize2d_args;

static inline void o2e_resize2d_weights(const double *wd, float *w, int64_t n)
{
  for (int64_t i = 0; i < n; ++i) w[i] = (float)wd[i];
}

static void o2e_resize2d_planes(void *arg, int p0, int p1)
{
  const o2e_resize2d_args *a = (const o2e_resize2d_args *)arg;
  const int ny = a->ny, nx = a->nx, nyc = ny ? ny : 1;
  const int64_t hin = a->hin, win = a->win, hout = a->hout, wout = a->wout;
  const int32_t *iy = a->iy, *ix = a->ix;
  const float *wy = a->wy, *wx = a->wx;
  const int t = a->thread ? a->thread() : 0;
  float *rows = a->rows + (size_t)t * (size_t)nyc * (size_t)wout;
  int32_t *tags = a->tags + (size_t)t * (size_t)nyc;
  for (int p = p0; p < p1; ++p) {
    const float *xp = a->x + (size_t)p * (size_t)(hin * win);
    float *yp = a->y + (size_t)p * (size_t)(hout * wout);
    for (int s = 0; s < nyc; ++s) tags[s] = -1;
    for (int64_t oy = 0; oy < hout; ++oy) {
      float *restrict yr = yp + oy * wout;
      const float *src[64];
      float wk[64];
      int nk = 0;
      for (int k = 0; k < nyc && k < 64; ++k) {
        const int32_t r = ny ? iy[oy * ny + k] : (int32_t)oy;
        const float *restrict xr = xp + (int64_t)r * win;
        float *restrict h = rows + (size_t)(r % nyc) * (size_t)wout;
        if (!nx) {
          src[nk] = xr; /* W unchanged: read the input row itself */
        } else {
          if (tags[r % nyc] != r) {
            tags[r % nyc] = r;
            if (nx == 1 && !wx) {
              for (int64_t j = 0; j < wout; ++j) h[j] = xr[ix[j]];
            } else if (nx == 1) {
              for (int64_t j = 0; j < wout; ++j) h[j] = wx[j] * xr[ix[j]];
            } else if (nx == 2) {
              for (int64_t j = 0; j < wout; ++j)
                h[j] = wx[2 * j] * xr[ix[2 * j]] + wx[2 * j + 1] * xr[ix[2 * j + 1]];
            } else {
              for (int64_t j = 0; j < wout; ++j) {
                float acc = 0;
                for (int q = 0; q < nx; ++q) acc += wx[j * nx + q] * xr[ix[j * nx + q]];
                h[j] = acc;
              }
            }
          }
          src[nk] = h;
        }
        wk[nk++] = ny && wy ? wy[oy * ny + k] : 1.0f;
      }
      if (nk == 1 && wk[0] == 1.0f) {
        memcpy(yr, src[0], (size_t)wout * sizeof(float));
      } else if (nk == 2) {
        const float *restrict u = src[0], *restrict v = src[1];
        const float w0 = wk[0], w1 = wk[1];
        for (int64_t j = 0; j < wout; ++j) yr[j] = w0 * u[j] + w1 * v[j];
      } else {
        for (int64_t j = 0; j < wout; ++j) {
          float acc = 0;
          for (int k = 0; k < nk; ++k) acc += wk[k] * src[k][j];
          yr[j] = acc;
        }
      }
    }
  }
}
"""


def _taps_bound(mode: int, antialias: bool, s_lo: float) -> int:
    """The most taps an axis can need when its scale is at least `s_lo` (same formula as C)."""
    if mode == 0:
        return 1
    n = 2 if mode == 1 else 4
    if antialias and s_lo < 1:
        start = math.floor((-1.0 if mode == 1 else -2.0) / max(s_lo, 1e-6)) + 1
        n = 2 - 2 * start
    return n


def _params(node: Node, graph: Graph) -> dict:
    """Attributes and input positions of Resize / Upsample across opsets, spec defaults applied."""
    op, opset = node.op_type, graph.opset
    r = resize_attrs(node, opset)
    legacy = r.legacy  # Resize-10 and Upsample: asymmetric, no roi/sizes
    p = {
        "mode": r.mode,
        "ctm": r.coordinate_transformation_mode,
        "nearest": r.nearest_mode,
        "cubic_a": r.cubic_coeff_a,
        "exclude": r.exclude_outside,
        "extrap": r.extrapolation_value,
        "antialias": r.antialias,
        "axes": None if r.axes is None else list(r.axes),
        "policy": r.keep_aspect_ratio_policy,
        "roi": None,
        "scales": None,
        "sizes": None,
        "scales_attr": None,
    }
    if op == "Upsample" and opset < 9:
        p["scales_attr"] = list(r.scales or ())  # required
        return p
    if legacy:
        p["scales"] = 1
        return p

    def present(i: int) -> bool:
        if i >= len(node.inputs) or not node.inputs[i]:
            return False
        t = graph.type_of(node.inputs[i])
        return t is None or not t.is_static or t.size > 0

    p["roi"] = 1 if present(1) else None
    p["scales"] = 2 if present(2) else None
    p["sizes"] = 3 if present(3) else None
    return p


def _resize_check(node: Node, graph: Graph) -> str | None:
    p = _params(node, graph)
    if p["mode"] not in MODES:
        return f"{node.op_type} mode '{p['mode']}' is not supported"
    if p["ctm"] not in COORD_MODES:
        return f"coordinate_transformation_mode '{p['ctm']}' is not supported"
    if p["nearest"] not in NEAREST_MODES:
        return f"nearest_mode '{p['nearest']}' is not supported"
    if p["policy"] not in ("stretch", "not_larger", "not_smaller"):
        return f"keep_aspect_ratio_policy '{p['policy']}' is not supported"
    if p["scales"] is None and p["sizes"] is None and p["scales_attr"] is None:
        return f"{node.op_type} without scales or sizes"
    t = graph.type_of(node.inputs[0])
    if t is not None and is_storage(t.dtype) and not is_float(t.dtype) and MODES[p["mode"]]:
        return f"{node.op_type} {p['mode']} on {t.dtype.name} is not supported (nearest only)"
    return None


@register_op("Resize", "Upsample", check=_resize_check)
def resize(ctx: NodeContext) -> str:
    x, y = ctx.x(0), ctx.y(0)
    if y.size == 0:
        return "/* empty */"
    p = _params(ctx.node, ctx.graph)
    r = x.rank
    mode = MODES[p["mode"]]
    ctm = COORD_MODES[p["ctm"]]
    axes = [norm_axis(int(a), r) for a in p["axes"]] if p["axes"] is not None else list(range(r))
    pos = {a: j for j, a in enumerate(axes)}  # where an axis' entry sits in scales/sizes/roi

    def elem(i: int, j: int) -> tuple[str, float | None]:
        """Input i's element j as a C double expression, and its value when constant."""
        c = ctx.const(i)
        if c is not None:
            v = float(c.reshape(-1)[j])
            return c_literal(v, np.float64), v
        return f"(double){ctx.x(i).sym}[{j}]", None

    # per-axis scale (C expression, known value or None)
    scale: list[tuple[str, float | None]] = []
    lines: list[str] = []
    if p["sizes"] is not None and p["policy"] != "stretch":
        # keep_aspect_ratio_policy: one scale for the listed axes, the min (not_larger) or
        # max (not_smaller) of sizes / input size
        fn = "fmin" if p["policy"] == "not_larger" else "fmax"
        terms = []
        for a in axes:
            e, v = elem(p["sizes"], pos[a])
            terms.append((f"{e} / {x.shape[a]}.0", None if v is None else v / x.shape[a]))
        expr = terms[0][0]
        for t in terms[1:]:
            expr = f"{fn}({expr}, {t[0]})"
        known = [t[1] for t in terms]
        kv = None if None in known else (min if fn == "fmin" else max)(known)  # type: ignore[type-var]
        lines.append(f"const double keep = {expr};")
        lines.append("(void)keep;  /* unused when no axis changes */")
        scale = [("keep", kv) if a in pos else ("1.0", 1.0) for a in range(r)]
    elif p["sizes"] is not None:
        scale = [(f"{y.shape[a]}.0 / {x.shape[a]}", y.shape[a] / x.shape[a]) for a in range(r)]
    elif p["scales_attr"] is not None:
        scale = [(c_literal(v, np.float64), v) for v in p["scales_attr"]]
    else:
        scale = [elem(p["scales"], pos[a]) if a in pos else ("1.0", 1.0) for a in range(r)]

    roi: list[tuple[str, str]] = []
    trivial_roi = [True] * r
    for a in range(r):
        if ctm == 4 and p["roi"] is not None and a in pos:
            (s0, v0), (s1, v1) = elem(p["roi"], pos[a]), elem(p["roi"], pos[a] + len(axes))
            roi.append((s0, s1))
            trivial_roi[a] = v0 == 0.0 and v1 is not None and abs(v1 - 1.0) <= 1e-9
        else:
            roi.append(("0.0", "1.0"))

    # axes the output copies unchanged (known at conversion time) need no taps
    # (the same test as the C helper's, so both agree on which axes are identities)
    def identity(a: int) -> bool | None:
        kv = scale[a][1]
        if x.shape[a] != y.shape[a] or (kv is not None and abs(kv - 1.0) > 1e-9):
            return False
        return True if kv is not None and trivial_roi[a] else None  # None: known at run time

    tabled = [a for a in range(r) if identity(a) is not True]
    if tabled:
        ctx.helper("o2e_resize_taps", RESIZE_TAPS)
    xs = strides(x.shape)
    ntaps: dict[int, str] = {}
    bound: dict[int, int] = {}
    for a in tabled:
        kv = scale[a][1]
        s_lo = kv if kv is not None else max((y.shape[a] - 0.5) / x.shape[a], 1e-6)
        nmax = _taps_bound(mode, bool(p["antialias"]), s_lo) + (0 if kv is not None else 2)
        bound[a] = nmax
        n_out = y.shape[a]
        ib = ctx.scratch(n_out * nmax * 4, "int32_t")
        wb = ctx.scratch(n_out * nmax * 8, "double") if mode else "0"
        lines.append(
            f"/* axis {a}: {x.shape[a]} -> {n_out}, {p['mode']}, {p['ctm']}"
            + (f", nearest_mode {p['nearest']}" if mode == 0 else "")
            + (", antialias" if p["antialias"] and mode else "")
            + " */"
        )
        call = (
            f"o2e_resize_taps({x.shape[a]}, {n_out}, {scale[a][0]}, {roi[a][0]}, {roi[a][1]}, "
            f"{mode}, {ctm}, {NEAREST_MODES[p['nearest']]}, {c_literal(p['cubic_a'], np.float64)}, "
            f"{p['exclude']}, {p['antialias']}, {nmax}, {ib}, {wb})"
        )
        if kv is not None and identity(a) is False:
            # the tap count is known: constant loop bounds the compiler can unroll
            lines.append(f"{call};")
            ntaps[a] = str(nmax)
        else:
            lines.append(f"const int n{a} = {call};")
            ntaps[a] = f"n{a}"
        lines.append(f"const int32_t *I{a} = {ib};")
        if mode:
            lines.append(f"const double *W{a} = {wb};")

    if _separable_f32(x.dtype, y.dtype, r, ctm, tabled, bound):
        lines.append(_resize2d_call(ctx, tabled, ntaps, bound, bool(mode)))
        return "\n".join(lines)

    # the loop nest: untabled axes add to the offset directly, tabled ones select a row of taps
    lines.append("size_t o = 0;")
    for d in range(r):
        ind = "  " * d
        lines.append(f"{ind}for (size_t i{d} = 0; i{d} < {y.shape[d]}; ++i{d}) {{")
        prev = f"p{d - 1}" if d else "0"
        step = f"(int64_t)i{d} * {xs[d]}" if xs[d] != 1 else f"(int64_t)i{d}"
        if d in tabled:
            lines.append(f"{ind}  const int32_t *I{d}r = I{d} + i{d} * (size_t){ntaps[d]};")
            if mode:
                lines.append(f"{ind}  const double *W{d}r = W{d} + i{d} * (size_t){ntaps[d]};")
            lines.append(f"{ind}  const int64_t p{d} = {prev};")
        else:
            lines.append(f"{ind}  const int64_t p{d} = {step if not d else f'{prev} + {step}'};")
    ind = "  " * (r + 1)
    last = f"p{r - 1}"
    if ctm == 4 and tabled:
        cond = " || ".join(f"I{d}r[0] < 0" for d in tabled)
        lines.append(
            f"{ind[:-2]}if ({cond}) {{ {y.sym}[o++] = {c_literal(p['extrap'], y.dtype)}; continue; }}"
        )
    if mode == 0:
        off = " + ".join([last] + [_scaled(f"I{d}r[0]", xs[d]) for d in tabled])
        lines.append(f"{ind[:-2]}{y.sym}[o++] = {x.sym}[{off}];")
    else:
        lines.append(f"{ind[:-2]}double acc = 0;")
        inner_ind = ind[:-2]
        for d in tabled:
            lines.append(f"{inner_ind}for (int k{d} = 0; k{d} < {ntaps[d]}; ++k{d})")
            inner_ind += "  "
        wt = " * ".join(f"W{d}r[k{d}]" for d in tabled) or "1.0"
        off = " + ".join([last] + [_scaled(f"I{d}r[k{d}]", xs[d]) for d in tabled])
        val = load_expr(ctx, x.dtype, f"{x.sym}[{off}]")
        lines.append(f"{inner_ind}acc += {wt} * (double){val};")
        if np.dtype(y.dtype).name == "bfloat16":
            # ml_dtypes (the reference's cast) rounds double -> float -> bfloat16
            store = store_expr(ctx, y.dtype, "(float)acc", src="float")
        elif is_storage(y.dtype):
            store = store_expr(ctx, y.dtype, "acc", src="double")
        else:
            store = _store(y.dtype, "acc")
        lines.append(f"{ind[:-2]}{y.sym}[o++] = {store};")
    lines += ["  " * d + "}" for d in reversed(range(r))]
    return "\n".join(lines)


def _separable_f32(
    xt: np.dtype, yt: np.dtype, rank: int, ctm: int, tabled: list[int], bound: dict[int, int]
) -> bool:
    """float32, only the last two axes resampled, no tf_crop_and_resize box (its outside
    pixels are not a weighted sum) and at most 64 vertical taps (o2e_resize2d_f32's arrays)."""
    f32 = np.dtype(np.float32)
    return (
        np.dtype(xt) == f32
        and np.dtype(yt) == f32
        and rank >= 2
        and ctm != COORD_MODES["tf_crop_and_resize"]
        and bool(tabled)
        and all(a >= rank - 2 for a in tabled)
        and bound.get(rank - 2, 1) <= 64
    )


def _resize2d_call(
    ctx: NodeContext,
    tabled: list[int],
    ntaps: dict[int, str],
    bound: dict[int, int],
    weighted: bool,
) -> str:
    """o2e_resize2d_planes over the tap tables already filled (I<axis>, W<axis>), its planes
    split across threads when the output is large enough to pay for the hand-off."""
    x, y = ctx.x(0), ctx.y(0)
    r = x.rank
    ha, wa = r - 2, r - 1
    ctx.helper("o2e_resize2d_f32", RESIZE2D_F32)
    ctx.kernel("separable rows (float)")
    planes = int(np.prod(x.shape[: r - 2], dtype=np.int64)) if r > 2 else 1
    threaded = split_at(ctx, y.size, planes, RATE_RESIZE)
    slots = plan_threads(ctx) if threaded else 1
    ny_max, nx_max = bound.get(ha, 0), bound.get(wa, 0)
    lines = ["{"]
    wts = {}
    for a, n_max in ((ha, ny_max), (wa, nx_max)):
        if a in tabled and weighted:
            wts[a] = ctx.scratch(n_max * y.shape[a] * 4, "float")
            lines.append(
                f"  o2e_resize2d_weights(W{a}, {wts[a]}, (int64_t){ntaps[a]} * {y.shape[a]});"
            )
    rows = ctx.scratch(max(ny_max, 1) * y.shape[wa] * 4 * slots, "float")
    tags = ctx.scratch(max(ny_max, 1) * 4 * slots, "int32_t")

    def taps(a: int) -> tuple[str, str, str]:
        if a not in tabled:
            return "0", "NULL", "NULL"
        return ntaps[a], f"I{a}", wts.get(a, "NULL")

    (ny, iy, wy), (nx, ix, wx) = taps(ha), taps(wa)
    if threaded:
        _use_engine(ctx)  # o2e_parallel_for and the pool live in o2e_gemm.h
    fields = (
        f".x = {x.sym}, .y = {y.sym}, .hin = {x.shape[ha]}, .win = {x.shape[wa]}, "
        f".hout = {y.shape[ha]}, .wout = {y.shape[wa]}, .ny = {ny}, .nx = {nx}, .iy = {iy}, "
        f".ix = {ix}, .wy = {wy}, .wx = {wx}, .rows = {rows}, .tags = {tags}, "
        f".thread = {'o2e_parallel_thread' if threaded else 'NULL'}"
    )
    lines.append(f"  o2e_resize2d_args a = {{{fields}}};")
    run = "o2e_parallel_for" if threaded else "o2e_resize2d_planes"
    args = f"{planes}, o2e_resize2d_planes, &a" if threaded else f"&a, 0, {planes}"
    lines += [f"  {run}({args});", "}"]
    return "\n".join(lines)


def _scaled(i: str, stride: int) -> str:
    return f"(int64_t){i}" + (f" * {stride}" if stride != 1 else "")


def _store(dtype: np.dtype, v: str) -> str:
    """double -> output type: integers round half to even and saturate (numpy_helper.saturate_cast)."""
    dt = np.dtype(dtype)
    ct = {"float32": "float", "float64": "double"}.get(dt.name)
    if ct:
        return f"({ct}){v}"
    if dt.kind == "b":
        return f"{v} != 0"
    info = np.iinfo(dt)
    ctype = {"int8": "int8_t", "int16": "int16_t", "int32": "int32_t", "int64": "int64_t"}.get(
        dt.name, f"{dt.name}_t"
    )
    return f"({ctype})fmin(fmax(rint({v}), {float(info.min)!r}), {float(info.max)!r})"


# --------------------------------------------------------------------------------------------
# GridSample
# --------------------------------------------------------------------------------------------
GS_REFLECT = r"""
/* Reflect x into [lo, hi] by its nearer border until it lands inside (ONNX GridSample spec,
 * as PyTorch's grid_sampler). */
static double o2e_gs_reflect(double x, double lo, double hi)
{
  const double rng = hi - lo;
  if (rng <= 0) return lo;
  if (x < lo) {
    const double dx = lo - x;
    const int64_t n = (int64_t)(dx / rng);
    const double r = dx - (double)n * rng;
    return n % 2 == 0 ? lo + r : hi - r;
  }
  if (x > hi) {
    const double dx = x - hi;
    const int64_t n = (int64_t)(dx / rng);
    const double r = dx - (double)n * rng;
    return n % 2 == 0 ? hi - r : lo + r;
  }
  return x;
}
"""


def _gs_check(node: Node, graph: Graph) -> str | None:
    t = graph.type_of(node.inputs[0])
    if t is not None and t.dtype.kind != "f":
        return f"GridSample on {t.dtype.name} is not supported (float types only)"
    mode = attr(node, "mode", graph.opset)
    if mode not in ("linear", "bilinear", "nearest", "cubic", "bicubic"):
        return f"GridSample mode '{mode}' is not supported"
    if attr(node, "padding_mode", graph.opset) not in ("zeros", "border", "reflection"):
        return f"GridSample padding_mode '{node.attr('padding_mode')}' is not supported"
    return None


@register_op("GridSample", check=_gs_check)
def grid_sample(ctx: NodeContext) -> str:
    """Sample X at the normalised coordinates of `grid` (last axis: x, y[, z], i.e. the spatial
    axes in reverse). Taps and weights per axis as the spec's reference: nearest rounds half to
    even, linear uses floor and floor + 1, cubic floor - 1 .. floor + 2 with A = -0.75."""
    x, g, y = ctx.x(0), ctx.x(1), ctx.y(0)
    if y.size == 0:
        return "/* empty */"
    T = x.ctype
    f = "f" if T == "float" else ""
    mode = ctx.attr("mode")
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    pad = ctx.attr("padding_mode")
    align = int(ctx.attr("align_corners"))
    N, C = x.shape[:2]
    dims = list(x.shape[2:])
    nd = len(dims)
    out_sp = list(y.shape[2:])
    P = int(np.prod(out_sp))
    isz = int(np.prod(dims))
    ds = strides(tuple(dims))
    ntap = {"nearest": 1, "linear": 2, "cubic": 4}[mode]
    if pad == "reflection":
        ctx.helper("o2e_gs_reflect", GS_REFLECT)
    lines = [
        f"for (size_t n = 0; n < {N}; ++n)",
        f"for (size_t q = 0; q < {P}; ++q) {{",
        f"  const {T} *gq = {g.sym} + (n * {P} + q) * {nd};",
        f"  int64_t ix[{nd}][{ntap}];",
        f"  {T} wx[{nd}][{ntap}];",
    ]
    for d in range(nd):
        D = dims[d]
        lo, hi = (0.0, D - 1.0) if align else (-0.5, D - 0.5)
        gv = f"gq[{nd - 1 - d}]"
        den = f"({gv} + 1) / 2 * {D - 1}" if align else f"(({gv} + 1) * {D} - 1) / 2"
        lines.append("  {")
        lines.append(f"    {T} c = ({T})({den});")
        if mode == "nearest":
            lines.append(f"    c = rint{f}(c);  /* half to even, as PyTorch */")
        if mode == "cubic":
            pass  # PyTorch and onnxruntime pad each cubic tap, not the coordinate (see below)
        elif pad == "border":
            lines.append(
                f"    if (c < {lo!r} || c > {hi!r}) c = c < 0 ? 0 : c > {D - 1} ? {D - 1} : c;"
            )
        elif pad == "reflection":
            lines.append(
                f"    if (c < {lo!r} || c > {hi!r}) c = ({T})o2e_gs_reflect(c, {lo!r}, {hi!r});"
            )
        if mode == "nearest":
            lines.append(f"    ix[{d}][0] = (int64_t)c; wx[{d}][0] = 1;")
        else:
            lines.append(f"    const {T} fl = floor{f}(c), t = c - fl;")
            if mode == "linear":
                lines.append(f"    ix[{d}][0] = (int64_t)fl; ix[{d}][1] = (int64_t)fl + 1;")
                lines.append(f"    wx[{d}][0] = 1 - t; wx[{d}][1] = t;")
            else:
                a = "-0.75" + f
                lines.append(f"    for (int k = 0; k < 4; ++k) ix[{d}][k] = (int64_t)fl - 1 + k;")
                lines.append(
                    f"    wx[{d}][0] = (({a} * (t + 1) - 5 * {a}) * (t + 1) + 8 * {a}) * (t + 1) - 4 * {a};"
                )
                lines.append(f"    wx[{d}][1] = (({a} + 2) * t - ({a} + 3)) * t * t + 1;")
                lines.append(
                    f"    wx[{d}][2] = (({a} + 2) * (1 - t) - ({a} + 3)) * (1 - t) * (1 - t) + 1;"
                )
                lines.append(
                    f"    wx[{d}][3] = (({a} * (2 - t) - 5 * {a}) * (2 - t) + 8 * {a}) * (2 - t) - 4 * {a};"
                )
        # the pixel index of each tap after padding; -1: a zero pixel
        lines.append(f"    for (int k = 0; k < {ntap}; ++k) {{")
        lines.append(f"      int64_t i = ix[{d}][k];")
        if pad == "zeros":
            lines.append(f"      if (i < 0 || i >= {D}) i = -1;")
        elif pad == "border":
            lines.append(f"      i = i < 0 ? 0 : i > {D - 1} ? {D - 1} : i;")
        else:
            lines.append(f"      i = (int64_t)o2e_gs_reflect((double)i, {lo!r}, {hi!r});")
        lines.append(f"      ix[{d}][k] = i;")
        lines.append("    }")
        lines.append("  }")
    lines.append(f"  for (size_t c = 0; c < {C}; ++c) {{")
    lines.append(f"    const {T} *xc = {x.sym} + (n * {C} + c) * {isz};")
    lines.append(f"    {T} acc = 0;")
    ind = "    "
    for d in range(nd):
        lines.append(f"{ind}for (int k{d} = 0; k{d} < {ntap}; ++k{d})")
        ind += "  "
    cond = " || ".join(f"ix[{d}][k{d}] < 0" for d in range(nd))
    wt = " * ".join(f"wx[{d}][k{d}]" for d in range(nd))
    off = " + ".join(f"ix[{d}][k{d}] * {ds[d]}" for d in range(nd))
    lines.append(f"{ind}{{ if ({cond}) continue; acc += {wt} * xc[{off}]; }}")
    lines.append(f"    {y.sym}[(n * {C} + c) * {P} + q] = acc;")
    lines.append("  }")
    lines.append("}")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# AffineGrid
# --------------------------------------------------------------------------------------------
@register_op("AffineGrid")
def affine_grid(ctx: NodeContext) -> str:
    """grid[n, (d,) h, w] = theta[n] @ (x_w, y_h, (z_d,) 1): the normalised base grid in [-1, 1]
    (pixel centres, or corners with align_corners), computed in double as the reference does."""
    theta, y = ctx.x(0), ctx.y(0)
    if y.size == 0:
        return "/* empty */"
    align = int(ctx.attr("align_corners"))
    N = y.shape[0]
    sp = list(y.shape[1:-1])  # (H, W) or (D, H, W)
    nd = len(sp)
    T = y.ctype

    def base(size: int, i: str) -> str:
        if align:
            return "-1.0" if size == 1 else f"-1.0 + (double){i} * (2.0 / {size - 1})"
        return f"-1.0 + (2.0 / {size}) / 2 + (double){i} * (2.0 / {size})"

    lines = [
        f"for (size_t n = 0; n < {N}; ++n) {{",
        f"  const {theta.ctype} *th = {theta.sym} + n * {nd * (nd + 1)};",
    ]
    ind = "  "
    for d in range(nd):
        lines.append(f"{ind}for (size_t i{d} = 0; i{d} < {sp[d]}; ++i{d}) {{")
        ind += "  "
    # homogeneous coordinates: x runs along the last axis, then y, then z
    coords = [base(sp[nd - 1 - j], f"i{nd - 1 - j}") for j in range(nd)]
    for j, c in enumerate(coords):
        lines.append(f"{ind}const double h{j} = {c};")
    pos = " + ".join(f"i{d} * {int(np.prod(sp[d + 1 :]))}" for d in range(nd))
    lines.append(f"{ind}{T} *out = {y.sym} + (n * {int(np.prod(sp))} + {pos}) * {nd};")
    for r_ in range(nd):
        row = " + ".join(f"(double)th[{r_ * (nd + 1) + j}] * h{j}" for j in range(nd))
        lines.append(f"{ind}out[{r_}] = ({T})({row} + (double)th[{r_ * (nd + 1) + nd}]);")
    for _ in range(nd):
        ind = ind[:-2]
        lines.append(f"{ind}}}")
    lines.append("}")
    return "\n".join(lines)


# float16 & co: nearest copies their bits; linear and cubic convert through double
allow_storage_dtypes("Resize", "Upsample")
