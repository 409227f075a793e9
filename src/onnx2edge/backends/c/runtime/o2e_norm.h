/* o2e_norm.h - GroupNormalization / InstanceNormalization, LRN, LayerNormalization rows and
 * o2e.ChannelLayerNorm kernels (ops/norm.py), float and double. Static C moved out of ops/norm.py (issue 32): the generated model.c includes it
 * where a kernel needs it (backends/c/headers.py); it compiles on its own.
 *
 * Statistics accumulate in double, as the reference's numpy sums do; the kernels keep that
 * accuracy with vectorisable inner loops: short partial sums in 32 lanes merged in double
 * (o2e_moments_*), LRN's window of `size` values summed directly. Both take whole planes /
 * pixel blocks as their unit of work (the o2e_parallel_for signature), so the results do not
 * depend on the thread count. */
#ifndef O2E_NORM_H
#define O2E_NORM_H
#include <math.h>
#include <stddef.h>
#if defined(__AVX__)
#include <immintrin.h>
#elif defined(__aarch64__) && defined(__ARM_NEON)
#include <arm_neon.h>
#endif

#if defined(__GNUC__)
#define O2E_NORM_FN static __attribute__((unused))
#define O2E_NORM_INL static inline __attribute__((always_inline, unused))
#else
#define O2E_NORM_FN static
#define O2E_NORM_INL static inline
#endif

/* Elements per block of the moments pass (norm.MOMENTS_BLOCK): a block is centred on its own
 * mean while it sits in L1, so its float partial sums see no cancellation; 1024 keeps the
 * per-block double merge (a division or two) small next to the vector work. */
#define O2E_MOMENTS_BLOCK 1024
/* Pixels per unit of LRN work (norm.LRN_BLOCK): the window sums of one block for all channels
 * stay in L1, and small maps (13x13, 27x27) still give a few units to split across threads. */
#define O2E_LRN_BLOCK 128
enum { O2E_LRN_B075, O2E_LRN_B05, O2E_LRN_B1, O2E_LRN_POW };

/* Arguments of the GroupNormalization / InstanceNormalization kernel: block b of the N*G
 * blocks is the cg*S contiguous values of group b % G of sample b / G; the scale and bias of
 * channel c are at [c], or at [group] when per_group. */
typedef struct {
  const float *x, *scale, *bias;
  float *y;
  int G, cg, per_group;
  size_t S;
  double eps;
} o2e_group_norm_args_f32;


/* Mean and sum of squared deviations of x[0, n), in one pass over memory. Each block of
 * O2E_MOMENTS_BLOCK values is read three times while it is in L1: for its rough mean (the pivot), then for
 * the sums of d = x - pivot and of d*d, each in 32 float lanes that the compiler vectorises (one
 * lane array per loop: gcc shuffles badly when a loop feeds two); the blocks are merged in
 * double (Chan, Golub and LeVeque's pairwise update). Centring each block first keeps the
 * float sums free of cancellation however large the mean is next to the spread, which a
 * running sum of x*x is not; 32 lanes keep the adds off a single latency chain. */
O2E_NORM_FN void o2e_moments_f32(const float *restrict x, size_t n, double *mean_out, double *m2_out)
{
  double mean = 0.0, m2 = 0.0;
  size_t done = 0;
  while (done < n) {
    const size_t len = n - done < O2E_MOMENTS_BLOCK ? n - done : O2E_MOMENTS_BLOCK;
    const float *restrict b = x + done;
    float s[32], q[32], pivot = 0;
    double ds = 0.0, dq = 0.0;
    size_t j;
    int l;
    for (l = 0; l < 32; ++l) s[l] = q[l] = 0;
    for (j = 0; j + 32 <= len; j += 32)
      for (l = 0; l < 32; ++l) s[l] += b[j + l];
    for (; j < len; ++j) pivot += b[j];
    for (l = 0; l < 32; ++l) {
      pivot += s[l];
      s[l] = 0;
    }
    pivot /= (float)len;
    for (j = 0; j + 32 <= len; j += 32)
      for (l = 0; l < 32; ++l) s[l] += b[j + l] - pivot;
    for (j = 0; j + 32 <= len; j += 32)
      for (l = 0; l < 32; ++l) {
        const float d = b[j + l] - pivot;
        q[l] += d * d;
      }
    for (; j < len; ++j) {
      const double d = b[j] - pivot;
      ds += d;
      dq += d * d;
    }
    for (l = 0; l < 32; ++l) {
      ds += s[l];
      dq += q[l];
    }
    {
      const double bmean = pivot + ds / (double)len, bm2 = dq - ds * ds / (double)len;
      const double delta = bmean - mean, total = (double)(done + len);
      mean += delta * ((double)len / total);
      m2 += (bm2 > 0 ? bm2 : 0) + delta * delta * ((double)done * (double)len / total);
    }
    done += len;
  }
  *mean_out = mean;
  *m2_out = m2;
}


/* Arguments of the GroupNormalization / InstanceNormalization kernel: block b of the N*G
 * blocks is the cg*S contiguous values of group b % G of sample b / G; the scale and bias of
 * channel c are at [c], or at [group] when per_group. */
typedef struct {
  const double *x, *scale, *bias;
  double *y;
  int G, cg, per_group;
  size_t S;
  double eps;
} o2e_group_norm_args_f64;


/* Mean and sum of squared deviations of x[0, n), in one pass over memory. Each block of
 * O2E_MOMENTS_BLOCK values is read three times while it is in L1: for its rough mean (the pivot), then for
 * the sums of d = x - pivot and of d*d, each in 32 double lanes that the compiler vectorises (one
 * lane array per loop: gcc shuffles badly when a loop feeds two); the blocks are merged in
 * double (Chan, Golub and LeVeque's pairwise update). Centring each block first keeps the
 * float sums free of cancellation however large the mean is next to the spread, which a
 * running sum of x*x is not; 32 lanes keep the adds off a single latency chain. */
O2E_NORM_FN void o2e_moments_f64(const double *restrict x, size_t n, double *mean_out, double *m2_out)
{
  double mean = 0.0, m2 = 0.0;
  size_t done = 0;
  while (done < n) {
    const size_t len = n - done < O2E_MOMENTS_BLOCK ? n - done : O2E_MOMENTS_BLOCK;
    const double *restrict b = x + done;
    double s[32], q[32], pivot = 0;
    double ds = 0.0, dq = 0.0;
    size_t j;
    int l;
    for (l = 0; l < 32; ++l) s[l] = q[l] = 0;
    for (j = 0; j + 32 <= len; j += 32)
      for (l = 0; l < 32; ++l) s[l] += b[j + l];
    for (; j < len; ++j) pivot += b[j];
    for (l = 0; l < 32; ++l) {
      pivot += s[l];
      s[l] = 0;
    }
    pivot /= (double)len;
    for (j = 0; j + 32 <= len; j += 32)
      for (l = 0; l < 32; ++l) s[l] += b[j + l] - pivot;
    for (j = 0; j + 32 <= len; j += 32)
      for (l = 0; l < 32; ++l) {
        const double d = b[j + l] - pivot;
        q[l] += d * d;
      }
    for (; j < len; ++j) {
      const double d = b[j] - pivot;
      ds += d;
      dq += d * d;
    }
    for (l = 0; l < 32; ++l) {
      ds += s[l];
      dq += q[l];
    }
    {
      const double bmean = pivot + ds / (double)len, bm2 = dq - ds * ds / (double)len;
      const double delta = bmean - mean, total = (double)(done + len);
      mean += delta * ((double)len / total);
      m2 += (bm2 > 0 ? bm2 : 0) + delta * delta * ((double)done * (double)len / total);
    }
    done += len;
  }
  *mean_out = mean;
  *m2_out = m2;
}

/* GroupNormalization / InstanceNormalization over blocks [b0, b1) (ops/norm.py), act the fused
 * activation or NULL. The output is (x - m) * s + t with m the mean rounded to float: the
 * subtraction is exact for values near the mean, so a large mean costs no precision, and the
 * loop vectorises. The generated wrapper passes a constant act, a static inline function that
 * gcc inlines into the loop. */
O2E_NORM_INL void o2e_group_norm_f32(void *arg, int b0, int b1, float (*act)(float))
{
  const o2e_group_norm_args_f32 *a = (const o2e_group_norm_args_f32 *)arg;
  const size_t S = a->S, n = (size_t)a->cg * S;
  int b, k;
  for (b = b0; b < b1; ++b) {
    const float *restrict x = a->x + (size_t)b * n;
    float *restrict y = a->y + (size_t)b * n;
    const int g = b % a->G;
    double mean, m2;
    o2e_moments_f32(x, n, &mean, &m2);
    {
      const double inv = 1.0 / sqrt(m2 / (double)n + a->eps);
      const float m = (float)mean;
      for (k = 0; k < a->cg; ++k) {
        const int at = a->per_group ? g : g * a->cg + k;
        const double s = inv * a->scale[at];
        const float sc = (float)s, sh = (float)(a->bias[at] - (mean - m) * s);
        const float *restrict xc = x + (size_t)k * S;
        float *restrict yc = y + (size_t)k * S;
        size_t i;
        if (act)
          for (i = 0; i < S; ++i) yc[i] = act((xc[i] - m) * sc + sh);
        else
          for (i = 0; i < S; ++i) yc[i] = (xc[i] - m) * sc + sh;
      }
    }
  }
}

/* without a fused activation */
O2E_NORM_FN void o2e_group_norm_f32_plain(void *arg, int b0, int b1) { o2e_group_norm_f32(arg, b0, b1, NULL); }

/* Arguments of the LRN kernel: unit u is pixels [(u % nb) * O2E_LRN_BLOCK, ...) of sample u / nb,
 * all C channels of it; the window of channel c is [c - lo, c + hi] clipped to [0, C). */
typedef struct {
  const float *x;
  float *y;
  int C, S, nb, lo, hi;
  float alpha, bias, beta; /* alpha already divided by size */
} o2e_lrn_args_f32;

/* LRN (y = x / (bias + alpha * window sum of x^2)^beta) over units [u0, u1) (ops/norm.py), for
 * beta = 0.75, 0.5, 1 (mode O2E_LRN_B075 / B05 / B1: a short form of correctly rounded
 * operations, a few ulp from the exact power and much faster than pow) or any (O2E_LRN_POW).
 * Each unit loops over channels with the pixels innermost, so the window sums and the scaling
 * vectorise across pixels; the window is only `size` values, summed directly. mode is a
 * constant of each wrapper below. */
O2E_NORM_INL void o2e_lrn_f32(void *arg, int u0, int u1, int mode)
{
  const o2e_lrn_args_f32 *a = (const o2e_lrn_args_f32 *)arg;
  const int C = a->C, S = a->S;
  const float alpha = a->alpha, bias = a->bias, beta = a->beta;
  float sq[O2E_LRN_BLOCK];
  int u, c, k, i;
  (void)beta;
  for (u = u0; u < u1; ++u) {
    const int i0 = (u % a->nb) * O2E_LRN_BLOCK, len = S - i0 < O2E_LRN_BLOCK ? S - i0 : O2E_LRN_BLOCK;
    const size_t base = (size_t)(u / a->nb) * C * S + i0;
    for (c = 0; c < C; ++c) {
      const int k0 = c < a->lo ? 0 : c - a->lo, k1 = c + a->hi < C ? c + a->hi : C - 1;
      const float *restrict xc = a->x + base + (size_t)c * S;
      float *restrict yc = a->y + base + (size_t)c * S;
      for (i = 0; i < len; ++i) sq[i] = 0;
      for (k = k0; k <= k1; ++k) {
        const float *restrict xk = a->x + base + (size_t)k * S;
        for (i = 0; i < len; ++i) sq[i] += xk[i] * xk[i];
      }
      i = 0;
      /* the intrinsics exist because gcc will not vectorise sqrtf under the default
       * -fmath-errno. The scalar tail may contract bias + alpha*sq into an fma where the
       * vector loop does not: an ulp of difference, tied to the pixel's position in its
       * block, not to the thread count. */
#if defined(__AVX512F__)
      if (mode == O2E_LRN_B075 || mode == O2E_LRN_B05) {
        const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(bias);
        for (; i + 16 <= len; i += 16) {
          const __m512 x = _mm512_loadu_ps(xc + i);
          const __m512 t = _mm512_add_ps(vb, _mm512_mul_ps(va, _mm512_loadu_ps(sq + i)));
          _mm512_storeu_ps(yc + i, mode == O2E_LRN_B075 ? _mm512_div_ps(x, _mm512_sqrt_ps(_mm512_mul_ps(t, _mm512_sqrt_ps(t))))
                                                        : _mm512_div_ps(x, _mm512_sqrt_ps(t)));
        }
      }
#elif defined(__AVX__)
      if (mode == O2E_LRN_B075 || mode == O2E_LRN_B05) {
        const __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(bias);
        for (; i + 8 <= len; i += 8) {
          const __m256 x = _mm256_loadu_ps(xc + i);
          const __m256 t = _mm256_add_ps(vb, _mm256_mul_ps(va, _mm256_loadu_ps(sq + i)));
          _mm256_storeu_ps(yc + i, mode == O2E_LRN_B075 ? _mm256_div_ps(x, _mm256_sqrt_ps(_mm256_mul_ps(t, _mm256_sqrt_ps(t))))
                                                        : _mm256_div_ps(x, _mm256_sqrt_ps(t)));
        }
      }
#endif
      for (; i < len; ++i) {
        const float t = bias + alpha * sq[i];
        switch (mode) {
        case O2E_LRN_B075: yc[i] = xc[i] / sqrtf(t * sqrtf(t)); break; /* t^0.75 = sqrt(t * sqrt(t)) */
        case O2E_LRN_B05: yc[i] = xc[i] / sqrtf(t); break;
        case O2E_LRN_B1: yc[i] = xc[i] / t; break;
        default: yc[i] = xc[i] * powf(t, -beta); break;
        }
      }
    }
  }
}

O2E_NORM_FN void o2e_lrn_f32_b075(void *arg, int u0, int u1) { o2e_lrn_f32(arg, u0, u1, O2E_LRN_B075); }
O2E_NORM_FN void o2e_lrn_f32_b05(void *arg, int u0, int u1) { o2e_lrn_f32(arg, u0, u1, O2E_LRN_B05); }
O2E_NORM_FN void o2e_lrn_f32_b1(void *arg, int u0, int u1) { o2e_lrn_f32(arg, u0, u1, O2E_LRN_B1); }
O2E_NORM_FN void o2e_lrn_f32_pow(void *arg, int u0, int u1) { o2e_lrn_f32(arg, u0, u1, O2E_LRN_POW); }

/* GroupNormalization / InstanceNormalization over blocks [b0, b1) (ops/norm.py), act the fused
 * activation or NULL. The output is (x - m) * s + t with m the mean rounded to double: the
 * subtraction is exact for values near the mean, so a large mean costs no precision, and the
 * loop vectorises. The generated wrapper passes a constant act, a static inline function that
 * gcc inlines into the loop. */
O2E_NORM_INL void o2e_group_norm_f64(void *arg, int b0, int b1, double (*act)(double))
{
  const o2e_group_norm_args_f64 *a = (const o2e_group_norm_args_f64 *)arg;
  const size_t S = a->S, n = (size_t)a->cg * S;
  int b, k;
  for (b = b0; b < b1; ++b) {
    const double *restrict x = a->x + (size_t)b * n;
    double *restrict y = a->y + (size_t)b * n;
    const int g = b % a->G;
    double mean, m2;
    o2e_moments_f64(x, n, &mean, &m2);
    {
      const double inv = 1.0 / sqrt(m2 / (double)n + a->eps);
      const double m = (double)mean;
      for (k = 0; k < a->cg; ++k) {
        const int at = a->per_group ? g : g * a->cg + k;
        const double s = inv * a->scale[at];
        const double sc = (double)s, sh = (double)(a->bias[at] - (mean - m) * s);
        const double *restrict xc = x + (size_t)k * S;
        double *restrict yc = y + (size_t)k * S;
        size_t i;
        if (act)
          for (i = 0; i < S; ++i) yc[i] = act((xc[i] - m) * sc + sh);
        else
          for (i = 0; i < S; ++i) yc[i] = (xc[i] - m) * sc + sh;
      }
    }
  }
}

/* without a fused activation */
O2E_NORM_FN void o2e_group_norm_f64_plain(void *arg, int b0, int b1) { o2e_group_norm_f64(arg, b0, b1, NULL); }

/* Arguments of the LRN kernel: unit u is pixels [(u % nb) * O2E_LRN_BLOCK, ...) of sample u / nb,
 * all C channels of it; the window of channel c is [c - lo, c + hi] clipped to [0, C). */
typedef struct {
  const double *x;
  double *y;
  int C, S, nb, lo, hi;
  double alpha, bias, beta; /* alpha already divided by size */
} o2e_lrn_args_f64;

/* LRN (y = x / (bias + alpha * window sum of x^2)^beta) over units [u0, u1) (ops/norm.py), for
 * beta = 0.75, 0.5, 1 (mode O2E_LRN_B075 / B05 / B1: a short form of correctly rounded
 * operations, a few ulp from the exact power and much faster than pow) or any (O2E_LRN_POW).
 * Each unit loops over channels with the pixels innermost, so the window sums and the scaling
 * vectorise across pixels; the window is only `size` values, summed directly. mode is a
 * constant of each wrapper below. */
O2E_NORM_INL void o2e_lrn_f64(void *arg, int u0, int u1, int mode)
{
  const o2e_lrn_args_f64 *a = (const o2e_lrn_args_f64 *)arg;
  const int C = a->C, S = a->S;
  const double alpha = a->alpha, bias = a->bias, beta = a->beta;
  double sq[O2E_LRN_BLOCK];
  int u, c, k, i;
  (void)beta;
  for (u = u0; u < u1; ++u) {
    const int i0 = (u % a->nb) * O2E_LRN_BLOCK, len = S - i0 < O2E_LRN_BLOCK ? S - i0 : O2E_LRN_BLOCK;
    const size_t base = (size_t)(u / a->nb) * C * S + i0;
    for (c = 0; c < C; ++c) {
      const int k0 = c < a->lo ? 0 : c - a->lo, k1 = c + a->hi < C ? c + a->hi : C - 1;
      const double *restrict xc = a->x + base + (size_t)c * S;
      double *restrict yc = a->y + base + (size_t)c * S;
      for (i = 0; i < len; ++i) sq[i] = 0;
      for (k = k0; k <= k1; ++k) {
        const double *restrict xk = a->x + base + (size_t)k * S;
        for (i = 0; i < len; ++i) sq[i] += xk[i] * xk[i];
      }
      i = 0;
      for (; i < len; ++i) {
        const double t = bias + alpha * sq[i];
        switch (mode) {
        case O2E_LRN_B075: yc[i] = xc[i] / sqrt(t * sqrt(t)); break; /* t^0.75 = sqrt(t * sqrt(t)) */
        case O2E_LRN_B05: yc[i] = xc[i] / sqrt(t); break;
        case O2E_LRN_B1: yc[i] = xc[i] / t; break;
        default: yc[i] = xc[i] * pow(t, -beta); break;
        }
      }
    }
  }
}

O2E_NORM_FN void o2e_lrn_f64_b075(void *arg, int u0, int u1) { o2e_lrn_f64(arg, u0, u1, O2E_LRN_B075); }
O2E_NORM_FN void o2e_lrn_f64_b05(void *arg, int u0, int u1) { o2e_lrn_f64(arg, u0, u1, O2E_LRN_B05); }
O2E_NORM_FN void o2e_lrn_f64_b1(void *arg, int u0, int u1) { o2e_lrn_f64(arg, u0, u1, O2E_LRN_B1); }
O2E_NORM_FN void o2e_lrn_f64_pow(void *arg, int u0, int u1) { o2e_lrn_f64(arg, u0, u1, O2E_LRN_POW); }

/* Arguments of the LayerNormalization / RMSNormalization row kernel (ops/norm.py): rows of n
 * values, scale and bias (NULL: none) of n values; mean / inv (NULL: not asked) per row. */
typedef struct {
  const float *x, *scale, *bias;
  float *y, *mean, *inv;
  size_t n;
  double eps;
} o2e_layer_norm_args;

/* LayerNormalization (rms 0) or RMSNormalization (rms 1) over rows [r0, r1) (ops/norm.py): the
 * statistics by o2e_moments_f32 (float lanes merged in double, each block centred on its own
 * pivot), then one vectorised pass y = ((x - m) * s + t) * scale + bias, with m the mean rounded
 * to float (as GroupNormalization's kernel: the subtraction is exact near the mean). rms is a
 * constant of each wrapper below. */
O2E_NORM_INL void o2e_norm_rows(void *arg, int r0, int r1, int rms)
{
  const o2e_layer_norm_args *a = (const o2e_layer_norm_args *)arg;
  const size_t n = a->n;
  const float *restrict scale = a->scale, *restrict bias = a->bias;
  int r;
  for (r = r0; r < r1; ++r) {
    const float *restrict x = a->x + (size_t)r * n;
    float *restrict y = a->y + (size_t)r * n;
    double mean, m2, msq; /* msq: the mean of x^2 (RMSNormalization) */
    size_t j;
    o2e_moments_f32(x, n, &mean, &m2);
    msq = mean * mean + m2 / (double)n;
    if (!isfinite(mean)) { /* an Inf: centring made it NaN; the plain sums keep Inf (as onnxruntime) */
      double sum = 0.0, sq = 0.0;
      for (j = 0; j < n; ++j) {
        sum += x[j];
        sq += (double)x[j] * x[j];
      }
      mean = sum / (double)n;
      m2 = sq - mean * sum;
      msq = sq / (double)n;
    }
    {
      const double inv = rms ? 1.0 / sqrt(msq + a->eps) : 1.0 / sqrt(m2 / (double)n + a->eps);
      if (rms) mean = 0.0; /* no centring */
      {
        const float m = (float)mean, sc = (float)inv, sh = (float)((mean - m) * -inv);
        if (bias)
          for (j = 0; j < n; ++j) y[j] = ((x[j] - m) * sc + sh) * scale[j] + bias[j];
        else
          for (j = 0; j < n; ++j) y[j] = ((x[j] - m) * sc + sh) * scale[j];
        if (a->mean) a->mean[r] = (float)mean;
        if (a->inv) a->inv[r] = (float)inv;
      }
    }
  }
}

O2E_NORM_FN void o2e_layer_norm_rows(void *arg, int r0, int r1) { o2e_norm_rows(arg, r0, r1, 0); }
O2E_NORM_FN void o2e_rms_norm_rows(void *arg, int r0, int r1) { o2e_norm_rows(arg, r0, r1, 1); }

/* Positions per step of the channel LayerNorm (o2e.ChannelLayerNorm, norm.CHANNEL_LANES): its
 * loops run along the contiguous positions in 16 float lanes (one AVX-512 vector, two AVX2 or
 * four NEON ones), each position's C values read three times while C * 64 bytes sit in L1. */
#define O2E_CN_LANES 16

/* o2e.ChannelLayerNorm: x [N, C, S] normalised over C at each of the N * S positions; scale and
 * bias (NULL: none) of C values. A unit of work is one step of O2E_CN_LANES positions of one
 * sample (the last one of a sample shorter): n_steps per sample. */
typedef struct {
  const float *x, *scale, *bias;
  float *y;
  size_t C, S, n_steps;
  float eps;
} o2e_channel_norm_args;

/* v[l] = 1 / sqrt(v[l]) for O2E_CN_LANES lanes: the vector square root of each ISA (a loop of
 * sqrtf does not vectorise while sqrtf may set errno) and the portable loop elsewhere. */
O2E_NORM_INL void o2e_cn_rsqrt(float *v)
{
#if defined(__AVX512F__)
  _mm512_storeu_ps(v, _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_sqrt_ps(_mm512_loadu_ps(v))));
#elif defined(__AVX__)
  int l;
  for (l = 0; l < O2E_CN_LANES; l += 8)
    _mm256_storeu_ps(v + l, _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_sqrt_ps(_mm256_loadu_ps(v + l))));
#elif defined(__aarch64__) && defined(__ARM_NEON)
  int l;
  for (l = 0; l < O2E_CN_LANES; l += 4)
    vst1q_f32(v + l, vdivq_f32(vdupq_n_f32(1.0f), vsqrtq_f32(vld1q_f32(v + l))));
#else
  int l;
  for (l = 0; l < O2E_CN_LANES; ++l) v[l] = 1.0f / sqrtf(v[l]);
#endif
}

/* One step of `len` (<= O2E_CN_LANES) positions at x / y, channel stride S: two passes for the
 * statistics (the mean, then the squared deviations from it: no cancellation however large
 * the mean is next to the spread), then y = (x - mean) * inv * scale[c] + bias[c]. float
 * sums of C terms, as onnxruntime's LayerNorm; a position holding an Inf or NaN gets NaN at
 * every channel (its deviations are NaN), as onnxruntime's channels-last LayerNorm gives. */
O2E_NORM_INL void o2e_cn_step(const o2e_channel_norm_args *a, const float *restrict x,
                              float *restrict y, size_t len)
{
  const size_t C = a->C, S = a->S;
  const float rc = 1.0f / (float)C;
  float m[O2E_CN_LANES], q[O2E_CN_LANES];
  size_t c, l;
  for (l = 0; l < O2E_CN_LANES; ++l) m[l] = q[l] = 0;
  for (c = 0; c < C; ++c)
    for (l = 0; l < len; ++l) m[l] += x[c * S + l];
  for (l = 0; l < O2E_CN_LANES; ++l) m[l] *= rc;
  for (c = 0; c < C; ++c)
    for (l = 0; l < len; ++l) {
      const float d = x[c * S + l] - m[l];
      q[l] += d * d;
    }
  for (l = 0; l < O2E_CN_LANES; ++l) q[l] = q[l] * rc + a->eps;
  o2e_cn_rsqrt(q);
  for (c = 0; c < C; ++c) {
    const float sc = a->scale[c], b = a->bias ? a->bias[c] : 0.0f;
    for (l = 0; l < len; ++l) y[c * S + l] = (x[c * S + l] - m[l]) * q[l] * sc + b;
  }
}

#if defined(__GNUC__)
/* A full step in GCC's vector extension, vectors of the target's width (zmm, ymm, xmm / NEON
 * q), O2E_CN_NV of them side by side: the sums stay in registers across the channel loop (the
 * lane-array form above keeps them in memory, a store-forward on each add). */
#if defined(__AVX512F__)
#define O2E_CN_VB 64
#elif defined(__AVX__)
#define O2E_CN_VB 32
#else
#define O2E_CN_VB 16
#endif
#define O2E_CN_VL (O2E_CN_VB / 4)
#define O2E_CN_NV (O2E_CN_LANES / O2E_CN_VL)
typedef float o2e_cn_v __attribute__((vector_size(O2E_CN_VB), aligned(4), may_alias));
O2E_NORM_INL void o2e_cn_full(const o2e_channel_norm_args *a, const float *restrict x, float *restrict y)
{
  const size_t C = a->C, S = a->S;
  const float rc = 1.0f / (float)C;
  o2e_cn_v m[O2E_CN_NV], q[O2E_CN_NV];
  float v[O2E_CN_LANES];
  size_t c;
  int k;
  for (k = 0; k < O2E_CN_NV; ++k) m[k] = q[k] = (o2e_cn_v){0};
  for (c = 0; c < C; ++c)
#pragma GCC unroll 4
    for (k = 0; k < O2E_CN_NV; ++k) m[k] += *(const o2e_cn_v *)(x + c * S + k * O2E_CN_VL);
  for (k = 0; k < O2E_CN_NV; ++k) m[k] *= rc;
  for (c = 0; c < C; ++c)
#pragma GCC unroll 4
    for (k = 0; k < O2E_CN_NV; ++k) {
      const o2e_cn_v d = *(const o2e_cn_v *)(x + c * S + k * O2E_CN_VL) - m[k];
      q[k] += d * d;
    }
  for (k = 0; k < O2E_CN_NV; ++k) {
    q[k] = q[k] * rc + a->eps;
    __builtin_memcpy(v + k * O2E_CN_VL, &q[k], O2E_CN_VB);
  }
  o2e_cn_rsqrt(v);
  for (k = 0; k < O2E_CN_NV; ++k) __builtin_memcpy(&q[k], v + k * O2E_CN_VL, O2E_CN_VB);
  for (c = 0; c < C; ++c) {
    const float sc = a->scale[c], b = a->bias ? a->bias[c] : 0.0f;
#pragma GCC unroll 4
    for (k = 0; k < O2E_CN_NV; ++k)
      *(o2e_cn_v *)(y + c * S + k * O2E_CN_VL) = (*(const o2e_cn_v *)(x + c * S + k * O2E_CN_VL) - m[k]) * (q[k] * sc) + b;
  }
}
#define O2E_CN_FULL(a, x, y) o2e_cn_full(a, x, y)
#else
#define O2E_CN_FULL(a, x, y) o2e_cn_step(a, x, y, O2E_CN_LANES)
#endif

O2E_NORM_FN void o2e_channel_norm(void *arg, int s0, int s1)
{
  const o2e_channel_norm_args *a = (const o2e_channel_norm_args *)arg;
  int s;
  for (s = s0; s < s1; ++s) {
    const size_t n = (size_t)s / a->n_steps, p = ((size_t)s % a->n_steps) * O2E_CN_LANES;
    const size_t off = n * a->C * a->S + p;
    if (a->S - p >= O2E_CN_LANES)
      O2E_CN_FULL(a, a->x + off, a->y + off);
    else
      o2e_cn_step(a, a->x + off, a->y + off, a->S - p);
  }
}

#endif /* O2E_NORM_H */
