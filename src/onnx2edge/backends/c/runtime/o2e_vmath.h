/* o2e_vmath.h: single-precision exp, log, log1p, tanh, sigmoid, erf for the generated C.
 *
 * Why not libm: expf / erff / tanhf are calls the compiler cannot vectorise, so an element-wise
 * Sigmoid, Softmax or GELU ran one element at a time (issue 34). These functions are branch-free
 * float code (selects, no calls, no tables, no double) that gcc and clang vectorise inside the
 * caller's loop for whatever the build targets: AVX-512 and AVX2+FMA (-march=x86-64-v4 / v3 /
 * native), SSE (x86-64-v2), NEON (armv8-a) - no intrinsics: the vector code is the compiler's
 * (test_c_vmath checks every function's loop is vectorised at each) - and the same source is
 * the scalar code of a Cortex-M single-precision FPU. One source, so every ISA computes the same formulas; results
 * may differ by the rounding of fused multiply-adds, which the bounds below cover.
 *
 * Error bounds, in ulps of the float result against the correctly rounded value (numpy float64
 * rounded to float32), over every float class: tests/test_c_vmath.py asserts them at x86-64-v2,
 * x86-64-v3, native and aarch64 (qemu) on a dense sweep of special, edge and random inputs
 * (worst measured there: exp, log, log1p, tanh 1; sigmoid 2; erf 3, next to 0.921875).
 *   o2e_expf      2   overflow to +Inf above 88.7228, denormals down to exp(-103.97), 0 below
 *   o2e_logf      2   denormal inputs, log(0) = -Inf, log(<0) = NaN, log(+Inf) = +Inf
 *   o2e_log1pf    2   (inputs > -1)
 *   o2e_tanhf     3   saturates to +-1 (sign kept), tanh(-0) = -0
 *   o2e_sigmoidf  3   1 / (1 + exp(-x)) written so that it keeps full relative accuracy for
 *                     x < 0 (e / (1 + e)): sigmoid(-100) is a denormal, not 0
 *   o2e_erff      3   saturates to +-1 from |x| = 3.9375, erf(-0) = -0
 * and one function with an absolute bound, for GELU epilogues (below):
 *   o2e_gelu_erff     |error| <= 2^-23 |x| + 2 ulps of the result (measured: 0.78 of it)
 * NaN in gives NaN out for every function; +-Inf give the limits; signed zeros are kept.
 *
 * Type punning goes through a union (defined behaviour, compiled to register moves); no integer
 * conversion of a NaN or out-of-range float happens (undefined in C): the exponent of 2^n comes
 * from the bits of a float holding n + 1.5 * 2^23.
 */
#ifndef O2E_VMATH_H
#define O2E_VMATH_H

/* Vectorising with gcc: its default -ftrapping-math forbids executing float arithmetic the
 * source guards by a condition, and gcc itself moves the clamped paths below into branches
 * (it constant-folds exp(89) into the clamp's arm), so no loop calling these functions would
 * vectorise. The generated model.c therefore starts, before any #include, with
 *   #pragma GCC optimize("no-trapping-math")
 * (O2E_VMATH_PRAGMA; placed later, after system headers, gcc 12 ignores it for this purpose).
 * The generated code reads no floating-point exception flags, and the results do not change:
 * it permits speculation, not reassociation or contraction. clang does so by default. */

#include <math.h>
#include <stdint.h>

#if defined(__GNUC__) || defined(__clang__)
#define O2E_VM_INLINE static inline __attribute__((always_inline, unused))
#else
#define O2E_VM_INLINE static inline
#endif

/* type punning through a union (defined in C99 TC3 and C11) */
typedef union {
  float f;
  uint32_t u;
} o2e_vm_bits;

O2E_VM_INLINE float o2e_vm_asf(uint32_t u)
{
  o2e_vm_bits b;
  b.u = u;
  return b.f;
}

O2E_VM_INLINE uint32_t o2e_vm_asu(float f)
{
  o2e_vm_bits b;
  b.f = f;
  return b.u;
}

/* cond ? a : b through bit masks: a select between two computed floats would let gcc sink
 * each computation into its arm, and then not if-convert them back (float arithmetic may trap
 * under the default -ftrapping-math), so the loop would stay scalar. */
O2E_VM_INLINE float o2e_vm_sel(int cond, float a, float b)
{
  const uint32_t m = 0u - (uint32_t)(cond != 0);
  return o2e_vm_asf((o2e_vm_asu(a) & m) | (o2e_vm_asu(b) & ~m));
}

/* exp(x) for x clamped to [-104, 89] or NaN: Cody-Waite reduction x = n ln2 + r,
 * |r| <= ln2 / 2, a degree-6 polynomial (Cephes' coefficients), and 2^n applied in two halves
 * so that a denormal result is rounded once and an overflow gives +Inf. */
O2E_VM_INLINE float o2e_vm_exp_core(float x)
{
  const float shift = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
  const float kf = x * 1.44269504088896341f + shift;
  const float n = kf - shift;
  float r = x - n * 0.693359375f;   /* ln2 high part: n * it is exact */
  r = r - n * -2.12194440e-4f;      /* ln2 low part */
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * (r * r) + r + 1.0f;
  /* n in [-150, 129]: the low bits of kf hold n + 2^22 (two's complement through the offset) */
  const int32_t ni = (int32_t)(o2e_vm_asu(kf) & 0x7fffffu) - 0x400000;
  const int32_t n1 = ni / 2, n2 = ni - n1; /* each in [-75, 65]: 2^n1, 2^n2 are normal */
  const float s1 = o2e_vm_asf((uint32_t)(n1 + 127) << 23);
  const float s2 = o2e_vm_asf((uint32_t)(n2 + 127) << 23);
  return y * s1 * s2;
}

O2E_VM_INLINE float o2e_expf(float x)
{
  /* two independent clamps then one select: a chain of compares gcc would thread into
   * branches it may not if-convert (ordered compares can trap), and the loop would stay
   * scalar. NaN passes (every compare is false) and comes out of the polynomial (the integer
   * part of a NaN is well-defined garbage that only scales it). */
  const float hi = x > 89.0f ? 89.0f : x;
  const float lo = x < -104.0f ? -104.0f : x;
  return o2e_vm_exp_core(o2e_vm_sel(x < 0.0f, lo, hi));
}

/* log(x): x = 2^k m with m in [sqrt(1/2), sqrt(2)), log(m) by Cephes' degree-9 polynomial in
 * f = m - 1; denormals are scaled by 2^23 first. */
O2E_VM_INLINE float o2e_logf(float x)
{
  /* the special cases are told apart on the bits (integer compares: no trapping, so the
   * selects vectorise): +-0, negatives, +Inf and NaN, and positive denormals */
  const uint32_t bits = o2e_vm_asu(x);
  const int tiny = bits < 0x00800000u;
  const float xs = x * (tiny ? 8388608.0f : 1.0f); /* no conditional arithmetic */
  const uint32_t u = o2e_vm_asu(xs) - 0x3f3504f3u;     /* 0x3f3504f3: sqrt(1/2) */
  const int32_t k = (int32_t)(u >> 23) - (int32_t)(u >> 31 << 9) - (tiny ? 23 : 0);
  const float m = o2e_vm_asf((u & 0x7fffffu) + 0x3f3504f3u);
  const float f = m - 1.0f;
  const float z = f * f;
  float p = 7.0376836292e-2f;
  p = p * f + -1.1514610310e-1f;
  p = p * f + 1.1676998740e-1f;
  p = p * f + -1.2420140846e-1f;
  p = p * f + 1.4249322787e-1f;
  p = p * f + -1.6668057665e-1f;
  p = p * f + 2.0000714765e-1f;
  p = p * f + -2.4999993993e-1f;
  p = p * f + 3.3333331174e-1f;
  const float kf = (float)k;
  float y = p * f * z + kf * -2.12194440e-4f - 0.5f * z;
  y = f + y + kf * 0.693359375f;
  /* +-0: -Inf; negative (-Inf, -NaN too): NaN; +Inf, NaN: themselves */
  const uint32_t sp = (bits & 0x7fffffffu) == 0 ? 0xff800000u : (bits > 0x80000000u ? 0x7fc00000u : bits);
  return o2e_vm_sel((bits - 1u) >= 0x7f7fffffu, o2e_vm_asf(sp), y);
}

/* log(1 + x) without the cancellation of 1 + x: log(u) corrected by ((u - 1) - x) / u, the
 * correction taken on x clamped to 1e30 (where it is 0) so that +Inf gives no Inf - Inf.
 * log1p has the sign of x: OR-ing it in gives log1p(-0) = -0 without a select. */
O2E_VM_INLINE float o2e_log1pf(float x)
{
  const uint32_t bits = o2e_vm_asu(x);
  const float l = o2e_logf(1.0f + x);
  const float xr = x > 1e30f ? 1e30f : x;
  const float u = 1.0f + xr;
  const float c = ((u - 1.0f) - xr) / (bits == 0xbf800000u ? 1.0f : u); /* x = -1: 0 / 1 */
  return o2e_vm_asf(o2e_vm_asu(l - c) | (bits & 0x80000000u));
}

/* sigmoid: e = exp(-|x|) by exp's reduction and polynomial, but with 2^n applied in one
 * multiply as 2^(n + 64) (normal for every n in [-150, 0]), its exponent field shifted straight
 * out of the rounding constant's bits; the 2^-64 goes back in 1 + e (a fused multiply-add) and
 * in one final multiply, exact for normal results and rounding a denormal one once more (the
 * only double rounding; within the bound). About half the instructions of 1 / (1 + o2e_expf):
 * SiLU / Swish epilogues of every conv run it (issue 34: 0.31 -> 0.16 ns per value, AVX-512).
 * Below -104 (and -Inf) gcc may substitute the clamped value's constant: sigmoid(-104) rounds
 * to 0. */
O2E_VM_INLINE float o2e_sigmoidf(float x)
{
  float a = o2e_vm_asf(o2e_vm_asu(x) | 0x80000000u); /* -|x|, NaN kept */
  a = a < -104.0f ? -104.0f : a;
  const float shift = 12583103.0f; /* 1.5 * 2^23 + 127 + 64: kf's low bits hold n + 191 */
  const float kf = a * 1.44269504088896341f + shift;
  const float n = kf - shift;
  float r = a - n * 0.693359375f; /* ln2 high part: n * it is exact */
  r = r - n * -2.12194440e-4f;    /* ln2 low part */
  /* one degree less than exp's (Cephes) polynomial: a fit of (e^r - 1 - r) / r^2 minimising
   * the relative error of e^r on [-ln2/2, ln2/2] (Lawson-weighted least squares, coefficients
   * rounded to float): 0.05 ulp before rounding; the sigmoid's worst stays 2 ulps */
  float p = 1.3814602280e-3f;
  p = p * r + 8.3687156439e-3f;
  p = p * r + 4.1668388993e-2f;
  p = p * r + 1.6666521132e-1f;
  p = p * r + 4.9999994040e-1f;
  const float q = p * (r * r) + r; /* e^r - 1 */
  /* n + 191 in [41, 191]: shifting kf's bits by 23 leaves exactly the biased exponent */
  const float s = o2e_vm_asf(o2e_vm_asu(kf) << 23);
#if defined(__FMA__) || defined(__aarch64__)
  /* (q + 1) * s as one fused multiply-add: s is a normal power of two, so q * s + s rounds
   * once to s * round(q + 1), the same float as the add then the exact multiply (checked bit
   * for bit over all 2^32 inputs, x86-64-v3 and native), one instruction fewer: 5 % of SiLU
   * (issue 34, EfficientNet). Without FMA the mul + add measured slower than add + mul. */
  const float e = q * s + s; /* exp(-|x|) * 2^64 */
#else
  const float e = (q + 1.0f) * s; /* exp(-|x|) * 2^64 */
#endif
  const float d = e * 5.42101086242752217e-20f + 1.0f;   /* 1 + exp(-|x|) */
  /* x < 0: e / (1 + e); else 1 / (1 + e); NaN: e is NaN */
  return (x < 0.0f ? e : 18446744073709551616.0f) / d * 5.42101086242752217e-20f;
}

/* Both range formulas are computed on clamped inputs (finite, NaN kept) and blended with a
 * weight of exactly 0 or 1: a select between two computed floats would let gcc sink each into
 * its own branch and then not if-convert them back (float arithmetic may trap under the
 * default -ftrapping-math), and the loop would stay scalar. The sign is OR-ed in last. */

/* tanh: |x| < 0.625 by an odd polynomial (Cephes), above by 1 - 2 / (exp(2|x|) + 1). */
O2E_VM_INLINE float o2e_tanhf(float x)
{
  const uint32_t sign = o2e_vm_asu(x) & 0x80000000u;
  const float a = o2e_vm_asf(o2e_vm_asu(x) & 0x7fffffffu);
  const float as = a > 0.625f ? 0.625f : a;
  const float z = as * as;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z + -5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z + -3.33332819422e-1f;
  const float small = p * z * as + as;
  const float ab = a > 10.0f ? 10.0f : a; /* tanh(|x| > 9.02) rounds to 1 */
  const float e = o2e_vm_exp_core(ab + ab);
  const float big = 1.0f - 2.0f / (e + 1.0f);
  const float w = a < 0.625f ? 1.0f : 0.0f;
  return o2e_vm_asf(o2e_vm_asu(w * small + (1.0f - w) * big) | sign);
}

/* erf: |x| < 0.921875: x P(x^2); above, 1 - exp(Q(v)), Q a fit of log(erfc) in
 * v = (|x| - 2.4296875) / 1.5078125, |x| clamped to 3.9375 where it rounds to 1.
 * Coefficients: least-squares fits on Chebyshev nodes, rounded to float. */
O2E_VM_INLINE float o2e_erff(float x)
{
  const uint32_t sign = o2e_vm_asu(x) & 0x80000000u;
  const float a = o2e_vm_asf(o2e_vm_asu(x) & 0x7fffffffu);
  const float as = a > 0.921875f ? 0.921875f : a;
  const float t = as * as;
  float p = 8.3650084e-05f;
  p = p * t + -8.1413949e-04f;
  p = p * t + 5.2009057e-03f;
  p = p * t + -2.6859341e-02f;
  p = p * t + 1.1283694e-01f;
  p = p * t + -3.7612635e-01f;
  p = p * t + 1.1283792e+00f;
  const float small = p * as;
  const float ac = a > 3.9375f ? 3.9375f : a;
  const float v = (ac - 2.4296875f) * 0.66321244f; /* 1 / 1.5078125 */
  float q = -3.4914419e-06f;
  q = q * v + -1.1071875e-06f;
  q = q * v + 5.2331729e-05f;
  q = q * v + -2.4919354e-04f;
  q = q * v + 9.8057429e-04f;
  q = q * v + -3.5421334e-03f;
  q = q * v + 1.1988470e-02f;
  q = q * v + -3.9383005e-02f;
  q = q * v + -2.1405845e+00f;
  q = q * v + -7.8709469e+00f;
  q = q * v + -7.4351177e+00f;
  const float big = 1.0f - o2e_vm_exp_core(q);
  const float w = a < 0.921875f ? 1.0f : 0.0f;
  return o2e_vm_asf(o2e_vm_asu(w * small + (1.0f - w) * big) | sign);
}

/* GELU, erf form: 0.5 x (1 + erf(x / sqrt 2)), for the fused GEMM / convolution epilogues
 * (o2e_gemm.h's o2e_act_vm1_ and its AVX-512 / AVX2 copies); the standalone Gelu and Erf ops
 * keep o2e_erff. erf(x / sqrt 2) = x Q(x^2 / 16 - 1) on |x| <= 4 sqrt 2 (where it rounds to
 * +-1), one degree-15 polynomial (a least-squares fit on Chebyshev nodes, rounded to float):
 * 2.0e-7 absolute error in erf, against o2e_erff's two polynomials, exp and blend. In
 * 1 + erf that is under an ulp of the result for x >= 0 and an absolute error for x < 0 (where
 * 1 + erf cancels in onnxruntime's formula too), hence the bound's 2^-23 |x|. About half the
 * instructions (AVX-512, a ViT MLP layer's 197 x 768 GELU: 65 -> 36 us). NaN in gives NaN
 * (x multiplies the result), +Inf gives +Inf, -Inf gives NaN as onnxruntime's -Inf * 0. */
O2E_VM_INLINE float o2e_gelu_erff(float x)
{
  const float hi = x > 5.65685415f ? 5.65685415f : x; /* 4 sqrt 2; NaN passes */
  const float xc = hi < -5.65685415f ? -5.65685415f : hi;
  const float t = xc * xc * 0.0625f - 1.0f;
  float p = -6.91915571e-04f;
  p = p * t + 2.03516195e-03f;
  p = p * t + -1.73429656e-03f;
  p = p * t + 1.48855348e-03f;
  p = p * t + -5.78157464e-03f;
  p = p * t + 1.17900288e-02f;
  p = p * t + -1.62661150e-02f;
  p = p * t + 2.26289127e-02f;
  p = p * t + -3.21829505e-02f;
  p = p * t + 4.25284766e-02f;
  p = p * t + -5.28793223e-02f;
  p = p * t + 6.37659207e-02f;
  p = p * t + -7.61592761e-02f;
  p = p * t + 9.31093246e-02f;
  p = p * t + -1.24858342e-01f;
  p = p * t + 2.49984160e-01f;
  const float e1 = xc * p;
  /* the fit ends 3e-7 above 1 (a weighted end point): at the clamp e is exactly +-1 after
   * these selects however the compiler contracts the polynomial, so 1 + e = 0 for x <= -4 sqrt 2
   * (-Inf gives -Inf * 0 = NaN, as onnxruntime) */
  const float e2 = e1 > 1.0f ? 1.0f : e1;
  const float e = e2 < -1.0f ? -1.0f : e2;
  return 0.5f * x * (1.0f + e);
}

#endif
