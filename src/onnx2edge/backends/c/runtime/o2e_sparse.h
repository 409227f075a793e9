/* o2e_sparse.h - sparse (pruned) fully connected layers and 1x1 convolutions (issue 14).
 *
 * Weights W[M][K] (M outputs, K inputs) in CSR: rowptr[M+1], col[nnz] (input index), val[nnz].
 * Two kernels:
 *
 *  - o2e_spmm: Y[M][P] = W . X[K][P] with the P columns (pixels of a 1x1 convolution in NCHW,
 *    or batch rows of a fully connected layer after a tile transpose) as the SIMD lanes. Per
 *    nonzero weight: one broadcast and one FMA per 16 lanes, so the vector units stay full
 *    whatever the sparsity pattern (the XNNPACK / "Fast Sparse ConvNets" layout). Written
 *    with GCC / clang vector extensions of the native width: one source that compiles to zmm
 *    (AVX-512), ymm (AVX2), xmm (SSE) or NEON q registers; plain C elsewhere.
 *  - o2e_spmv: y[M] = W . x[K] at batch 1: per row, 16 (AVX-512) or 8 (AVX2) nonzeros at a
 *    time with a gather of x; scalar with four accumulators otherwise.
 *
 * Non-finite inputs: onnxruntime's dense GEMM also multiplies the pruned (zero) weights, and
 * 0 * Inf and 0 * NaN are NaN. A skipped zero would give a finite output instead, so when an
 * input column holds a non-finite value (one cheap scan: x * 0 is NaN exactly then), every
 * output whose row has no nonzero weight on that input is set to NaN, as dense math does.
 */
#ifndef O2E_SPARSE_H
#define O2E_SPARSE_H

#include <math.h>
#include <stddef.h>
#include <string.h>
#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#if defined(__GNUC__) || defined(__clang__)
#define O2E_SP_VEC 1
/* one native vector: GCC lowers wider vector types badly on narrower ISAs (measured: a
 * 64-byte type built with -march=x86-64-v3 ran 15-50x slower than the dense kernel) */
#if defined(__AVX512F__)
#define O2E_SPW 16
#elif defined(__AVX__)
#define O2E_SPW 8
#else
#define O2E_SPW 4 /* SSE, NEON q registers; plain scalar code where neither exists */
#endif
typedef float o2e_spv __attribute__((vector_size(4 * O2E_SPW)));
/* unaligned load / store (vmovups, ldr q); macros, not functions, so no vector is passed by
 * value (-Wpsabi) */
#define O2E_SPV_LOAD(v, p) memcpy(&(v), (p), sizeof(o2e_spv))
#define O2E_SPV_STORE(p, v) memcpy((p), &(v), sizeof(o2e_spv))
#else
#define O2E_SP_VEC 0
#define O2E_SPW 1
#endif

/* 1 when every x[i] (i < n) is finite: x * 0 is NaN exactly for NaN and +-Inf. */
static inline int o2e_sp_all_finite(const float *x, size_t n) {
  /* 16 independent sums: one serial sum (no reassociation without -ffast-math) would cost a
   * 4-cycle add latency per element */
  float acc[16], t = 0.0f;
  const size_t nb = n / 16;
  size_t b, i;
  int q;
  for (q = 0; q < 16; ++q) acc[q] = 0.0f;
  for (b = 0; b < nb; ++b)
    for (q = 0; q < 16; ++q) acc[q] += x[b * 16 + (size_t)q] * 0.0f;
  for (i = nb * 16; i < n; ++i) t += x[i] * 0.0f;
  for (q = 0; q < 16; ++q) t += acc[q];
  return t == t;
}

/* The dense-math NaNs of the pruned weights (see the top of this file); y is pre-activation. */
static inline void o2e_sp_nonfinite(int M, int K, int P, const int *rowptr, const int *col,
                             const float *x, int ldx, float *y, int ldy) {
  int p, k, m, j;
  for (p = 0; p < P; ++p) {
    int nbad = 0;
    for (k = 0; k < K; ++k) nbad += !isfinite(x[(size_t)k * ldx + p]);
    if (!nbad) continue;
    for (m = 0; m < M; ++m) {
      int hits = 0;
      for (j = rowptr[m]; j < rowptr[m + 1]; ++j) hits += !isfinite(x[(size_t)col[j] * ldx + p]);
      if (hits < nbad) y[(size_t)m * ldy + p] = NAN;
    }
  }
}

/* Y[m][p] = bias[m] + sum_j val[j] * X[col[j]][p] for p < P (X row stride ldx, Y ldy). */
static inline void o2e_spmm(int M, int K, int P, const int *rowptr, const int *col, const float *val,
                     const float *x, int ldx, const float *bias, float *y, int ldy) {
  int p = 0, m, j;
#if O2E_SP_VEC
  /* 4 vectors of lanes per pass (64 on AVX-512, 32 on AVX2, 16 on SSE / NEON): the X tile
   * stays in L1/L2 across all M rows */
  for (; p + 4 * O2E_SPW <= P; p += 4 * O2E_SPW)
    for (m = 0; m < M; ++m) {
      const float b = bias ? bias[m] : 0.0f;
      o2e_spv a0 = {0}, a1, a2, a3;
      a0 += b;
      a1 = a0, a2 = a0, a3 = a0;
      for (j = rowptr[m]; j < rowptr[m + 1]; ++j) {
        const float w = val[j];
        const float *xr = x + (size_t)col[j] * ldx + p;
        o2e_spv x0, x1, x2, x3;
        O2E_SPV_LOAD(x0, xr);
        O2E_SPV_LOAD(x1, xr + O2E_SPW);
        O2E_SPV_LOAD(x2, xr + 2 * O2E_SPW);
        O2E_SPV_LOAD(x3, xr + 3 * O2E_SPW);
        a0 += w * x0;
        a1 += w * x1;
        a2 += w * x2;
        a3 += w * x3;
      }
      float *yr = y + (size_t)m * ldy + p;
      O2E_SPV_STORE(yr, a0);
      O2E_SPV_STORE(yr + O2E_SPW, a1);
      O2E_SPV_STORE(yr + 2 * O2E_SPW, a2);
      O2E_SPV_STORE(yr + 3 * O2E_SPW, a3);
    }
  for (; p + O2E_SPW <= P; p += O2E_SPW)
    for (m = 0; m < M; ++m) {
      o2e_spv a0 = {0};
      a0 += bias ? bias[m] : 0.0f;
      for (j = rowptr[m]; j < rowptr[m + 1]; ++j) {
        o2e_spv x0;
        O2E_SPV_LOAD(x0, x + (size_t)col[j] * ldx + p);
        a0 += val[j] * x0;
      }
      O2E_SPV_STORE(y + (size_t)m * ldy + p, a0);
    }
#endif
  for (; p < P; p += 16) {
    /* the last lanes (fewer than a vector, e.g. 49 pixels of a 7x7 map; all of them without
     * vector extensions), 16 at a time: rows outer, then the row's nonzeros, lanes innermost,
     * so each nonzero reads one contiguous run of X */
    const int r = P - p < 16 ? P - p : 16;
    for (m = 0; m < M; ++m) {
      float acc[16];
      int q;
      for (q = 0; q < r; ++q) acc[q] = bias ? bias[m] : 0.0f;
      for (j = rowptr[m]; j < rowptr[m + 1]; ++j) {
        const float w = val[j];
        const float *xr = x + (size_t)col[j] * ldx + p;
        for (q = 0; q < r; ++q) acc[q] += w * xr[q];
      }
      for (q = 0; q < r; ++q) y[(size_t)m * ldy + p + q] = acc[q];
    }
  }
  (void)K;
}

/* y[m] = bias[m] + sum_j val[j] * x[col[j]] (batch 1). */
static inline void o2e_spmv(int M, const int *rowptr, const int *col, const float *val, const float *x,
                     const float *bias, float *y) {
  int m;
  for (m = 0; m < M; ++m) {
    int j = rowptr[m];
    const int j1 = rowptr[m + 1];
    float s = bias ? bias[m] : 0.0f;
#if defined(__AVX512F__)
    __m512 acc = _mm512_setzero_ps();
    for (; j + 16 <= j1; j += 16)
      acc = _mm512_fmadd_ps(_mm512_loadu_ps(val + j),
                            _mm512_i32gather_ps(_mm512_loadu_si512((const void *)(col + j)), x, 4), acc);
    if (j < j1) {
      const __mmask16 k = (__mmask16)((1u << (j1 - j)) - 1u);
      const __m512i idx = _mm512_maskz_loadu_epi32(k, col + j);
      const __m512 g = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), k, idx, x, 4);
      acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, val + j), g, acc);
    }
    s += _mm512_reduce_add_ps(acc);
#elif defined(__AVX2__) && defined(__FMA__)
    __m256 acc = _mm256_setzero_ps();
    for (; j + 8 <= j1; j += 8)
      acc = _mm256_fmadd_ps(_mm256_loadu_ps(val + j),
                            _mm256_i32gather_ps(x, _mm256_loadu_si256((const __m256i *)(col + j)), 4),
                            acc);
    {
      __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
      h = _mm_add_ps(h, _mm_movehl_ps(h, h));
      h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
      s += _mm_cvtss_f32(h);
    }
    for (; j < j1; ++j) s += val[j] * x[col[j]];
#else
    {
      float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
      for (; j + 4 <= j1; j += 4) {
        s0 += val[j] * x[col[j]];
        s1 += val[j + 1] * x[col[j + 1]];
        s2 += val[j + 2] * x[col[j + 2]];
        s3 += val[j + 3] * x[col[j + 3]];
      }
      for (; j < j1; ++j) s0 += val[j] * x[col[j]];
      s += (s0 + s1) + (s2 + s3);
    }
#endif
    y[m] = s;
  }
}

/* Batch 1 with block-sparse weights (BSR, 16 x 1 blocks: 16 consecutive outputs of one input,
 * what `onnx2edge prune --structured blocks:16x1` leaves): y[16r .. 16r+15] += x[bcol[j]] *
 * bval[16j .. 16j+15] per stored block j of row block r -- one broadcast and one full-width
 * FMA per 16 weights, as dense, but only over the stored blocks. bias and y are padded to
 * 16 * ceil(M / 16) (yp: scratch). Skipped blocks of a non-finite input give NaN, as dense. */
static inline void o2e_bsr_fc(int M, int K, const int *bptr, const int *bcol, const float *bval,
                              const float *x, const float *bias, float *y, float *yp) {
  const int nr = (M + 15) / 16;
  int r, j, q;
  for (r = 0; r < nr; ++r) {
#if O2E_SP_VEC
    o2e_spv acc[16 / O2E_SPW];
    for (q = 0; q < 16 / O2E_SPW; ++q) {
      if (bias) O2E_SPV_LOAD(acc[q], bias + 16 * r + q * O2E_SPW);
      else memset(&acc[q], 0, sizeof(o2e_spv));
    }
    for (j = bptr[r]; j < bptr[r + 1]; ++j) {
      const float xv = x[bcol[j]];
      for (q = 0; q < 16 / O2E_SPW; ++q) {
        o2e_spv w;
        O2E_SPV_LOAD(w, bval + (size_t)16 * j + q * O2E_SPW);
        acc[q] += xv * w;
      }
    }
    for (q = 0; q < 16 / O2E_SPW; ++q) O2E_SPV_STORE(yp + 16 * r + q * O2E_SPW, acc[q]);
#else
    float acc[16];
    for (q = 0; q < 16; ++q) acc[q] = bias ? bias[16 * r + q] : 0.0f;
    for (j = bptr[r]; j < bptr[r + 1]; ++j)
      for (q = 0; q < 16; ++q) acc[q] += x[bcol[j]] * bval[(size_t)16 * j + q];
    for (q = 0; q < 16; ++q) yp[16 * r + q] = acc[q];
#endif
  }
  if (!o2e_sp_all_finite(x, (size_t)K)) {
    int nbad = 0, k;
    for (k = 0; k < K; ++k) nbad += !isfinite(x[k]);
    for (r = 0; r < nr; ++r) {
      int hits = 0;
      for (j = bptr[r]; j < bptr[r + 1]; ++j) hits += !isfinite(x[bcol[j]]);
      if (hits < nbad)
        for (q = 0; q < 16; ++q) yp[16 * r + q] = NAN;
    }
  }
  memcpy(y, yp, sizeof(float) * (size_t)M);
  (void)q;
}

/* 1x1 convolution, stride 1, no padding, group 1, NCHW: per image, Y[M][HW] = W . X[K][HW]. */
static inline void o2e_sparse_conv1x1(int N, int M, int K, int HW, const int *rowptr, const int *col,
                               const float *val, const float *x, const float *bias, float *y) {
  int n;
  for (n = 0; n < N; ++n) {
    const float *xn = x + (size_t)n * K * HW;
    float *yn = y + (size_t)n * M * HW;
    o2e_spmm(M, K, HW, rowptr, col, val, xn, HW, bias, yn, HW);
    if (!o2e_sp_all_finite(xn, (size_t)K * HW)) o2e_sp_nonfinite(M, K, HW, rowptr, col, xn, HW, yn, HW);
  }
}

/* Batch rows per tile of o2e_sparse_fc: the transposed tile (K x 64 floats) and its result
 * (M x 64) stay in L2 for the layers this is used on. */
#define O2E_SP_TILE 64

/* Fully connected: y[B][M] = x[B][K] . W^T + bias. B == 1 takes o2e_spmv; larger batches are
 * transposed 64 rows at a time into xt[K][64] so the rows are the lanes of o2e_spmm, and back.
 * xt: K * 64 floats, yt: M * 64 floats of scratch. */
static inline void o2e_sparse_fc(int B, int M, int K, const int *rowptr, const int *col, const float *val,
                          const float *x, const float *bias, float *y, float *xt, float *yt) {
  int b0, b, k, m;
  if (B == 1 || M < 32) {
    /* batch 1, or so few outputs (e.g. a 10-class head) that transposing the inputs and
     * outputs costs more than gathering: one spmv per row (measured: with "nnz < 16 K" here
     * instead, a 97%-sparse 256 -> 128 layer at batch 360 took 2.3 ms, 4.6x onnxruntime's
     * dense time) */
    for (b = 0; b < B; ++b) {
      const float *xb = x + (size_t)b * K;
      o2e_spmv(M, rowptr, col, val, xb, bias, y + (size_t)b * M);
      if (!o2e_sp_all_finite(xb, (size_t)K)) o2e_sp_nonfinite(M, K, 1, rowptr, col, xb, 1, y + (size_t)b * M, 1);
    }
    return;
  }
  for (b0 = 0; b0 < B; b0 += O2E_SP_TILE) {
    const int nb = B - b0 < O2E_SP_TILE ? B - b0 : O2E_SP_TILE;
    const int np = (nb + 15) & ~15; /* lanes padded with zero rows: vectors stay full */
    const float *xb = x + (size_t)b0 * K;
    int k0;
    for (k0 = 0; k0 < K; k0 += 16) { /* 16 x np blocks: both sides stay in L1 */
      const int k1 = k0 + 16 < K ? k0 + 16 : K;
      for (b = 0; b < nb; ++b)
        for (k = k0; k < k1; ++k) xt[(size_t)k * np + b] = xb[(size_t)b * K + k];
      for (k = k0; k < k1; ++k)
        for (b = nb; b < np; ++b) xt[(size_t)k * np + b] = 0.0f;
    }
    o2e_spmm(M, K, np, rowptr, col, val, xt, np, bias, yt, np);
    if (!o2e_sp_all_finite(xb, (size_t)nb * K)) o2e_sp_nonfinite(M, K, nb, rowptr, col, xt, np, yt, np);
    for (m = 0; m < M; m += 16) {
      const int m1 = m + 16 < M ? m + 16 : M;
      int mm;
      for (b = 0; b < nb; ++b)
        for (mm = m; mm < m1; ++mm) y[(size_t)(b0 + b) * M + mm] = yt[(size_t)mm * np + b];
    }
  }
}

#endif /* O2E_SPARSE_H */
