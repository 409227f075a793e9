"""Types C has no arithmetic for: float16, bfloat16, the float8 / float4 formats, int4 / int2.

They are stored as their raw bits (`emitter.STORAGE_CTYPES`: uint16_t or uint8_t; numpy and
ml_dtypes keep one 4- or 2-bit element a byte, in its low bits, and so do we). Arithmetic happens
in `float` (or int8_t / uint8_t for the small integers): an op loads each element through
`load_expr`, computes, and stores through `store_expr`. Computing a float16 op in float and
rounding once is what numpy (the ONNX reference) does for float16, and ml_dtypes for bfloat16.

Conversions are exact: round to nearest even, subnormals, NaN and infinities as in ml_dtypes
(which produces the ONNX test data), and the float8 `saturate` rules of the ONNX Cast spec:
with saturate, +-Inf and out-of-range values become +-max; without, they become NaN (E4M3FN,
the FNUZ types) or +-Inf (E5M2).
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

from ..emitter import CTYPES, STORAGE_CTYPES, STORAGE_DTYPE_OPS, NodeContext, Tensor, ctype_of


def allow_storage_dtypes(*ops: str) -> None:
    """Let these ops see float16 & co (their emitters convert with the helpers below)."""
    STORAGE_DTYPE_OPS.update(ops)


# Ops that only move bytes (shape.py, indexing.py) or read only shapes: any element type works
# as it is. They are listed here, next to the storage types, because an op that does arithmetic
# must not see raw bits: an op opts in once its emitter converts (load_expr / store_expr).
allow_storage_dtypes(
    "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Transpose", "Concat", "Split", "Slice",
    "Expand", "Tile", "DepthToSpace", "SpaceToDepth", "Pad", "CenterCropPad", "Shape", "Size",
    "Gather", "GatherElements", "GatherND", "Compress", "ReverseSequence", "Trilu",
)  # fmt: skip
# pool.py's pooling loads and stores through load_expr / store_expr
allow_storage_dtypes(
    "MaxPool", "AveragePool", "LpPool", "GlobalMaxPool", "GlobalAveragePool", "GlobalLpPool"
)


@dataclass(frozen=True)
class FloatFormat:
    """A small binary float: 1 sign bit, `ebits` exponent bits (`bias`), `mbits` mantissa bits."""

    name: str
    ebits: int
    mbits: int
    bias: int
    special: str  # "ieee": Inf and NaN | "fn": NaN only (S.1111.111) | "fnuz": NaN = 0x80, no -0 | "none"

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(getattr(ml_dtypes, self.name) if self.name != "float16" else np.float16)

    @property
    def ctype(self) -> str:
        return STORAGE_CTYPES[self.name]

    @property
    def bits(self) -> int:
        return 1 + self.ebits + self.mbits

    def code(self, value: float) -> int:
        """The bits ml_dtypes stores for `value`."""
        arr = np.array(value, dtype=self.dtype)
        return int(arr.view(np.uint16 if arr.itemsize == 2 else np.uint8))


FLOAT_FORMATS = {
    f.name: f
    for f in (
        FloatFormat("float16", 5, 10, 15, "ieee"),
        FloatFormat("bfloat16", 8, 7, 127, "ieee"),
        FloatFormat("float8_e4m3fn", 4, 3, 7, "fn"),
        FloatFormat("float8_e4m3fnuz", 4, 3, 8, "fnuz"),
        FloatFormat("float8_e5m2", 5, 2, 15, "ieee"),
        FloatFormat("float8_e5m2fnuz", 5, 2, 16, "fnuz"),
        FloatFormat("float4_e2m1fn", 2, 1, 1, "none"),
    )
}
E8M0 = "float8_e8m0fnu"  # exponent only: 2^(v - 127), 0xFF is NaN (OCP microscaling formats)
SMALL_INTS = {"int4": (4, True), "uint4": (4, False), "int2": (2, True), "uint2": (2, False)}
SMALL_FLOATS = (*FLOAT_FORMATS, E8M0)


def name_of(dtype: np.dtype) -> str:
    return np.dtype(dtype).name


def is_storage(dtype: np.dtype) -> bool:
    return name_of(dtype) in STORAGE_CTYPES


def is_float(dtype: np.dtype) -> bool:
    """Any floating-point type, stored natively or as bits."""
    return np.dtype(dtype).kind == "f" or name_of(dtype) in SMALL_FLOATS


def is_signed_int(dtype: np.dtype) -> bool:
    n = name_of(dtype)
    return np.dtype(dtype).kind == "i" if n not in SMALL_INTS else SMALL_INTS[n][1]


def is_int(dtype: np.dtype) -> bool:
    return np.dtype(dtype).kind in "iu" or name_of(dtype) in SMALL_INTS


def compute_ctype(dtype: np.dtype) -> str:
    """The C type an element is computed in."""
    n = name_of(dtype)
    if n in SMALL_FLOATS:
        return "float"
    if n in SMALL_INTS:
        return "int8_t" if SMALL_INTS[n][1] else "uint8_t"
    return ctype_of(dtype)


# --------------------------------------------------------------------------------------------
# C helpers
# --------------------------------------------------------------------------------------------
H2F = r"""
/* IEEE half (bits) -> float, exact. */
static inline float o2e_h2f(uint16_t h)
{
  const uint32_t s = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
  uint32_t u;
  float f;
  if (e == 0) { /* zero or subnormal: m * 2^-24 */
    f = (float)m * 5.9604644775390625e-08f;
    return s ? -f : f;
  }
  u = s | (e == 31 ? 0x7F800000u | (m << 13) : ((e + 112u) << 23) | (m << 13));
  memcpy(&f, &u, 4);
  return f;
}
"""

F2H = r"""
/* float -> IEEE half (bits): round to nearest even, overflow to Inf, NaN stays NaN. */
static inline uint16_t o2e_f2h(float f)
{
  uint32_t u, a;
  uint16_t s;
  memcpy(&u, &f, 4);
  s = (uint16_t)((u >> 16) & 0x8000u);
  a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return (uint16_t)(s | 0x7E00u | (a >> 13)); /* NaN, made quiet */
  if (a >= 0x47800000u) return (uint16_t)(s | 0x7C00u);              /* >= 2^16 or Inf */
  if (a < 0x38800000u) {                                             /* below 2^-14: subnormal */
    float t;
    memcpy(&t, &a, 4);
    return (uint16_t)(s | (uint16_t)nearbyintf(t * 16777216.0f)); /* t * 2^24 is exact */
  }
  a -= 0x38000000u; /* exponent bias 127 -> 15; the rounding carry may reach Inf, as it should */
  return (uint16_t)(s | ((a + 0x0FFFu + ((a >> 13) & 1u)) >> 13));
}
"""

BF2F = r"""
/* bfloat16 (bits) -> float: the high half of a float. */
static inline float o2e_bf2f(uint16_t h)
{
  const uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
"""

F2BF = r"""
/* float -> bfloat16 (bits): round to nearest even, NaN stays NaN. */
static inline uint16_t o2e_f2bf(float f)
{
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x40u);
  return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
"""

F2I64 = r"""
/* float -> int64 truncating toward zero; NaN and out-of-range values (undefined in C) give 0. */
static inline int64_t o2e_f2i64(double x)
{
  return x > -9223372036854775808.0 && x < 9223372036854775808.0 ? (int64_t)x : 0;
}
"""

F2U64 = r"""
/* float -> uint64 truncating toward zero; NaN and out-of-range values (undefined in C) give 0. */
static inline uint64_t o2e_f2u64(double x)
{
  return x > -1.0 && x < 18446744073709551616.0 ? (uint64_t)x : 0;
}
"""

E8M0_FROM = r"""
/* float8 E8M0 (bits) -> float: 2^(v - 127); 0xFF is NaN. */
static inline float o2e_from_float8_e8m0fnu(uint8_t v)
{
  return v == 0xFF ? NAN : ldexpf(1.0f, (int)v - 127);
}
"""

E8M0_TO = r"""
/* float -> float8 E8M0: the float's exponent, rounded by `mode` (0 up, 1 down, 2 nearest) as in
 * onnx.numpy_helper.to_float8e8m0; saturate keeps 2^127 from rounding up to NaN. */
static inline uint8_t o2e_to_float8_e8m0fnu(float x, int saturate, int mode)
{
  uint32_t u, e, up = 0;
  memcpy(&u, &x, 4);
  e = (u >> 23) & 0xFFu;
  if (e == 0xFFu) return 0xFF;
  if (mode == 0) {
    up = (u & 0x7FFFFFu) != 0;
  } else if (mode == 2) {
    const uint32_t g = (u >> 22) & 1u, r = (u >> 21) & 1u, st = (u & 0x1FFFFFu) != 0;
    up = g && (r || st || e > 0);
  }
  if (saturate && e == 0xFEu) up = 0;
  return (uint8_t)(e + up);
}
"""


def _decoder(f: FloatFormat) -> str:
    sign = 1 << (f.bits - 1)
    emask, mmask = (1 << f.ebits) - 1, (1 << f.mbits) - 1
    lines = [
        f"/* {f.name} (bits) -> float, exact: 1 sign, {f.ebits} exponent (bias {f.bias}), {f.mbits} mantissa bits. */",
        f"static inline float o2e_from_{f.name}({f.ctype} v)",
        "{",
        f"  const int e = (v >> {f.mbits}) & {emask}, m = v & {mmask};",
        "  float r;",
    ]
    if f.special == "fn":
        lines.append(f"  if ((v & {sign - 1}) == {sign - 1}) return (v & {sign}) ? -NAN : NAN;")
    elif f.special == "fnuz":
        lines.append(f"  if (v == {sign}) return NAN;")
    elif f.special == "ieee":
        lines.append(
            f"  if (e == {emask}) return (v & {sign}) ? (m ? -NAN : -INFINITY) : (m ? NAN : INFINITY);"
        )
    lines += [
        f"  r = e ? ldexpf((float)(m | {1 << f.mbits}), e - {f.bias + f.mbits}) : ldexpf((float)m, {1 - f.bias - f.mbits});",
        f"  return (v & {sign}) ? -r : r;",
        "}",
    ]
    return "\n".join(lines)


def _encoder(f: FloatFormat) -> str:
    """double -> format: one rounding (to nearest even) on the target's grid, then the specials."""
    sign = 1 << (f.bits - 1)
    maxv = float(ml_dtypes.finfo(f.dtype).max)
    max_code = f.code(maxv)
    nan = f"{f.code(float('nan'))}u" if f.special == "fnuz" else f"s | {f.code(float('nan'))}u"
    if f.special == "none":
        nan = f"s ^ {sign}u"  # as ml_dtypes: no NaN encoding, so +NaN -> 0x8 (-0) and -NaN -> 0
    overflow = {
        "ieee": f"s | {f.code(float('inf'))}u",
        "fn": nan,
        "fnuz": nan,
        "none": f"s | {max_code}u",
    }[f.special]
    zero = "0u" if f.special == "fnuz" else "s"
    emin = 1 - f.bias
    return f"""/* double -> {f.name} (bits), one rounding to nearest even; without saturate, overflow gives
 * {"Inf" if f.special == "ieee" else "NaN" if f.special in ("fn", "fnuz") else "max (no Inf or NaN)"} (ONNX Cast spec). */
static inline {f.ctype} o2e_to_{f.name}(double x, int saturate)
{{
  const unsigned s = signbit(x) ? {sign}u : 0u;
  double a = fabs(x);
  int e;
  if (isnan(x)) return ({f.ctype})({nan});
  if (isinf(a)) return ({f.ctype})(saturate ? s | {max_code}u : {overflow});
  if (a == 0) return ({f.ctype})({zero});
  (void)frexp(a, &e);
  e = e - 1 < {emin} ? {emin} : e - 1; /* a in [2^e, 2^(e+1)), or the subnormal range */
  a = nearbyint(ldexp(a, {f.mbits} - e));
  a = ldexp(a, e - {f.mbits}); /* now exact in the format, or past its max */
  if (a > {maxv!r}) return ({f.ctype})(saturate ? s | {max_code}u : {overflow});
  if (a == 0) return ({f.ctype})({zero});
  (void)frexp(a, &e);
  if (e - 1 < {emin}) return ({f.ctype})(s | (unsigned)ldexp(a, {f.bias - 1 + f.mbits}));
  return ({f.ctype})(s | ((unsigned)(e - 1 + {f.bias}) << {f.mbits}) | ((unsigned)ldexp(a, {f.mbits} - e + 1) - {1 << f.mbits}u));
}}"""


def _small_int_helpers(name: str) -> tuple[str, str]:
    bits, signed = SMALL_INTS[name]
    mask, half = (1 << bits) - 1, 1 << (bits - 1)
    ct = "int8_t" if signed else "uint8_t"
    val = f"(((int)(v & {mask}u) ^ {half}) - {half})" if signed else f"(v & {mask}u)"
    frm = f"""/* {name} (low {bits} bits of a byte) -> {ct} */
static inline {ct} o2e_from_{name}(uint8_t v) {{ return ({ct}){val}; }}"""
    to = f"""/* integer -> {name}: keep the low {bits} bits (the ONNX Cast rule for integers out of range) */
static inline uint8_t o2e_to_{name}(int64_t v) {{ return (uint8_t)((uint64_t)v & {mask}u); }}"""
    return frm, to


def need(ctx: NodeContext, name: str) -> str:
    """Add the C helper `name` (and what it uses); returns `name`."""
    fixed = {"o2e_h2f": H2F, "o2e_f2h": F2H, "o2e_bf2f": BF2F, "o2e_f2bf": F2BF, "o2e_f2i64": F2I64,
             "o2e_f2u64": F2U64,
             f"o2e_from_{E8M0}": E8M0_FROM, f"o2e_to_{E8M0}": E8M0_TO}  # fmt: skip
    if name in fixed:
        return ctx.helper(name, fixed[name])
    kind, _, fmt = name.removeprefix("o2e_").partition("_")
    if fmt in FLOAT_FORMATS:
        f = FLOAT_FORMATS[fmt]
        return ctx.helper(name, _decoder(f) if kind == "from" else _encoder(f))
    if fmt in SMALL_INTS:
        frm, to = _small_int_helpers(fmt)
        return ctx.helper(name, frm if kind == "from" else to)
    raise KeyError(name)


# --------------------------------------------------------------------------------------------
# expressions
# --------------------------------------------------------------------------------------------
def load_expr(ctx: NodeContext, dtype: np.dtype, ref: str) -> str:
    """C expression: the stored element `ref` as a value of compute_ctype(dtype)."""
    n = name_of(dtype)
    if n == "float16":
        return f"{need(ctx, 'o2e_h2f')}({ref})"
    if n == "bfloat16":
        return f"{need(ctx, 'o2e_bf2f')}({ref})"
    if n in SMALL_FLOATS or n in SMALL_INTS:
        return f"{need(ctx, f'o2e_from_{n}')}({ref})"
    return ref


def store_expr(
    ctx: NodeContext,
    dtype: np.dtype,
    expr: str,
    *,
    src: str = "float",
    saturate: bool = True,
    round_mode: str = "up",
) -> str:
    """C expression: the value `expr` (of C type `src`) converted to how `dtype` is stored.

    From floating point to an integer type truncates toward zero (C and the ONNX reference);
    NaN and values past int64 give 0 instead of C's undefined behaviour."""
    n = name_of(dtype)
    src_float = src in ("float", "double")
    if n in ("float16", "bfloat16") and src != "double" and src_float:
        return f"{need(ctx, 'o2e_f2h' if n == 'float16' else 'o2e_f2bf')}({expr})"
    if n in FLOAT_FORMATS:
        # `saturate` is a float8 rule; float16 and bfloat16 overflow to Inf, float4 always saturates
        sat = saturate if n.startswith("float8") else n == "float4_e2m1fn"
        return f"{need(ctx, f'o2e_to_{n}')}((double)({expr}), {int(sat)})"
    if n == E8M0:
        mode = {"up": 0, "down": 1, "nearest": 2}[round_mode]
        return f"{need(ctx, f'o2e_to_{n}')}((float)({expr}), {int(saturate)}, {mode})"
    if n in SMALL_INTS:
        v = f"{need(ctx, 'o2e_f2i64')}({expr})" if src_float else f"(int64_t)({expr})"
        return f"{need(ctx, f'o2e_to_{n}')}({v})"
    if n == "bool":
        return f"({expr}) != 0"
    if src_float and np.dtype(dtype).kind in "iu":
        # C leaves float -> int undefined out of range (the Cast spec too); numpy on x86 wraps
        # values in int64's range to narrower types, which this does without the undefined part
        f2i = need(ctx, "o2e_f2u64" if n == "uint64" else "o2e_f2i64")
        return f"({CTYPES[n]}){f2i}({expr})"
    return f"({CTYPES[n]})({expr})"


def loader(ctx: NodeContext):  # noqa: ANN201 - the `load` hook of common.elementwise
    def load(t: Tensor, ref: str) -> tuple[str, str]:
        return compute_ctype(t.dtype), load_expr(ctx, t.dtype, ref)

    return load


def storer(ctx: NodeContext, out: Tensor, src: str | None = None):  # noqa: ANN201
    """The `store` hook of common.elementwise for `out` (src: the C type of the expression)."""
    src = src or compute_ctype(out.dtype)
    return lambda expr: store_expr(ctx, out.dtype, expr, src=src)
