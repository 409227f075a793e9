/* o2e_sparse.h - sparse (pruned) fully connected layers and 1x1 convolutions (issue 14).
 *
 * Weights W[M][K] (M outputs, K inputs). Kernels:
 *
 *  - o2e_spmm (CSR: rowptr[M+1], col[nnz], val[nnz]): Y[M][P] = W . X[K][P] with the P
 *    columns (pixels of a 1x1 convolution in NCHW, or batch rows of a fully connected layer
 *    after a tile transpose) as the SIMD lanes; per output row up to 12 vectors of lanes in
 *    registers, one broadcast and one FMA per vector per nonzero, so the vector units stay full
 *    whatever the sparsity pattern (the XNNPACK / "Fast Sparse ConvNets" layout). Written with
 *    GCC / clang vector extensions of the native width: one source that compiles to zmm
 *    (AVX-512), ymm (AVX2), xmm (SSE) or NEON q registers; plain C elsewhere.
 *  - o2e_csc_fc (CSC) and o2e_bsc_fc (16x1 blocks by column): batch 1, zero inputs skipped as
 *    our dense batch-1 kernel does.
 *  - o2e_spmv (CSR, AVX-512 / AVX2 gathers): batch-N layers with few outputs (a 10-class head),
 *    one row of the batch at a time.
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

/* Vectors of lanes per pass of o2e_spmm, all accumulators in registers (32 zmm / 16 ymm / 16
 * xmm / 32 NEON q registers, one more for the broadcast weight). Measured on an AVX-512 host
 * (tools/sparse_breakeven.py's 1x1 layers of MobileNet v1 shapes at density 0.1, one thread,
 * sparse / our dense GEMM in the same process): the former 4-vector tiles ran 16-22 GFLOP/s,
 * 12 vectors per pass 24-38 GFLOP/s (1.3-1.5x, 2.0-2.8x our dense GEMM); 24 spilled. */
#ifndef O2E_SP_CH
#define O2E_SP_CH 12
#endif

/* The last vector of a row of lanes may be partial (49 pixels of a 7x7 map): AVX-512 and AVX2
 * load and store it masked (no fault on the masked-off lanes); other ISAs leave the last
 * P % O2E_SPW lanes to the scalar loop. */
#if O2E_SP_VEC && O2E_SPW == 16 && defined(__AVX512F__)
#define O2E_SP_MASKED 1
typedef __mmask16 o2e_sp_mask;
static inline o2e_sp_mask o2e_sp_lanes(int r) { return r >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << r) - 1u); }
#define O2E_SPV_MLOAD(v, p, mk) ((v) = (o2e_spv)_mm512_maskz_loadu_ps((mk), (p)))
#define O2E_SPV_MSTORE(p, v, mk) _mm512_mask_storeu_ps((p), (mk), (__m512)(v))
#elif O2E_SP_VEC && O2E_SPW == 8 && defined(__AVX2__)
#define O2E_SP_MASKED 1
typedef __m256i o2e_sp_mask;
static inline o2e_sp_mask o2e_sp_lanes(int r) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(r), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
#define O2E_SPV_MLOAD(v, p, mk) ((v) = (o2e_spv)_mm256_maskload_ps((p), (mk)))
#define O2E_SPV_MSTORE(p, v, mk) _mm256_maskstore_ps((p), (mk), (__m256)(v))
#else
#define O2E_SP_MASKED 0
#endif

/* Y[m][p] = bias[m] + sum_j val[j] * X[col[j]][p] for p < P (X row stride ldx, Y ldy).
 * The lanes of a row are cut into passes of at most O2E_SP_CH vectors (as equal as possible);
 * per pass and output row all the pass's accumulators stay in registers while the row's
 * nonzeros stream: per nonzero, one broadcast and one FMA per vector reading a contiguous run
 * of X's row (XNNPACK's sparse 1x1 design: pixels in the lanes, CSR over output channels). */
static inline void o2e_spmm(int M, int K, int P, const int *rowptr, const int *col, const float *val,
                     const float *x, int ldx, const float *bias, float *y, int ldy) {
  int p = 0, m, j;
#if O2E_SP_VEC
  const int nvec = O2E_SP_MASKED ? (P + O2E_SPW - 1) / O2E_SPW : P / O2E_SPW;
  const int npass = (nvec + O2E_SP_CH - 1) / O2E_SP_CH;
  int v0 = 0, pass, v;
  for (pass = 0; pass < npass; ++pass) {
    const int v1 = (int)((long)nvec * (pass + 1) / npass), nv = v1 - v0;
#if O2E_SP_MASKED
    const o2e_sp_mask lm = o2e_sp_lanes(P - (v1 - 1) * O2E_SPW);
#endif
    p = v0 * O2E_SPW;
    for (m = 0; m < M; ++m) {
      o2e_spv a[O2E_SP_CH];
      const float b = bias ? bias[m] : 0.0f;
      float *yr = y + (size_t)m * ldy + p;
      for (v = 0; v < O2E_SP_CH; ++v) {
        a[v] = (o2e_spv){0};
        a[v] += b;
      }
      for (j = rowptr[m]; j < rowptr[m + 1]; ++j) {
        const float w = val[j];
        const float *xr = x + (size_t)col[j] * ldx + p;
        for (v = 0; v < O2E_SP_CH; ++v) {
          o2e_spv t;
          if (v >= nv) break;
#if O2E_SP_MASKED
          if (v == nv - 1) O2E_SPV_MLOAD(t, xr + v * O2E_SPW, lm);
          else
#endif
            O2E_SPV_LOAD(t, xr + v * O2E_SPW);
          a[v] += w * t;
        }
      }
      for (v = 0; v < O2E_SP_CH; ++v) {
        if (v >= nv) break;
#if O2E_SP_MASKED
        if (v == nv - 1) O2E_SPV_MSTORE(yr + v * O2E_SPW, a[v], lm);
        else
#endif
          O2E_SPV_STORE(yr + v * O2E_SPW, a[v]);
      }
    }
    v0 = v1;
  }
  p = O2E_SP_MASKED ? P : nvec * O2E_SPW;
#endif
  for (; p < P; p += 16) {
    /* the last lanes (fewer than a vector without masked loads; all of them without vector
     * extensions), 16 at a time: rows outer, then the row's nonzeros, lanes innermost, so each
     * nonzero reads one contiguous run of X */
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

/* Batch 1, column-compressed (CSC: colptr[K+1], row[nnz] ascending per column, val[nnz]):
 * y = bias; for each input k with x[k] != 0, y[row[j]] += x[k] * val[j] over column k's
 * nonzeros. Like our dense batch-1 kernel (o2e_fc_skip_zeros) it skips the zero inputs ReLU
 * leaves, so it does nnz(W) * (nonzero share of x) multiply-adds instead of the row-wise CSR's
 * nnz(W) gathers: measured on the 1000 -> 500 layer with half the inputs zero (AVX-512 host)
 * at density 0.1: 17 us vs 36 us for the AVX-512 gather spmv and 27 us for our dense kernel
 * (10 vs 22 and 27 at 0.05); an AVX-512 gather / scatter version measured no faster than the
 * scalar loop, so the scalar loop is the one kernel for every ISA. Not kept either: a bitmap
 * format (per 16 outputs and input, a 16-bit mask + the packed values, vexpandps into a full
 * vector, one FMA per 16 outputs: the dense arithmetic on sparse bytes) timed the same as our
 * dense kernel at densities 0.1 - 0.5 (tools/sparse_breakeven.py, 1000 -> 500 after a Relu,
 * sparse / dense 1.04, 0.95, 1.01, 1.00), as expand costs more than the dense FMA's loads. Zero inputs are skipped exactly as the
 * dense kernel does (NaN and Inf are kept); a non-finite x[k] also makes NaN every output
 * whose pruned weight on k is zero (0 * Inf, as dense math). */
static inline void o2e_csc_fc(int M, int K, const int *colptr, const int *row, const float *val,
                              const float *x, const float *bias, float *y) {
  int k, j, m, bad = 0;
  for (m = 0; m < M; ++m) y[m] = bias ? bias[m] : 0.0f;
  for (k = 0; k < K; ++k) {
    const float xk = x[k];
    const int j1 = colptr[k + 1];
    if (xk == 0.0f) continue;
    bad |= !(xk - xk == 0.0f); /* NaN or +-Inf */
    /* 4 nonzeros per step, loads before stores: a column's rows are distinct, and the four
     * read-modify-writes overlap (measured 1.4x the one-at-a-time loop) */
    for (j = colptr[k]; j + 4 <= j1; j += 4) {
      const int r0 = row[j], r1 = row[j + 1], r2 = row[j + 2], r3 = row[j + 3];
      const float y0 = y[r0] + xk * val[j], y1 = y[r1] + xk * val[j + 1];
      const float y2 = y[r2] + xk * val[j + 2], y3 = y[r3] + xk * val[j + 3];
      y[r0] = y0;
      y[r1] = y1;
      y[r2] = y2;
      y[r3] = y3;
    }
    for (; j < j1; ++j) y[row[j]] += xk * val[j];
  }
  if (!bad) return;
  for (k = 0; k < K; ++k) {
    if (x[k] - x[k] == 0.0f) continue;
    /* the rows of column k are ascending: every row not among them had a zero weight */
    for (m = 0, j = colptr[k]; m < M; ++m) {
      if (j < colptr[k + 1] && row[j] == m) ++j;
      else y[m] = NAN;
    }
  }
}

/* Batch 1 with block-sparse weights (16 x 1 blocks: 16 consecutive outputs of one input, what
 * `onnx2edge prune --structured blocks:16x1` leaves), stored by input (column) like
 * o2e_csc_fc so zero inputs are skipped: for each input k with x[k] != 0 and each stored block
 * j of column k (row block brow[j]), yp[16 brow[j] .. +15] += x[k] * bval[16 j .. 16 j + 15]
 * -- one broadcast and one full-width FMA per 16 weights, as our dense kernel, but only over
 * the stored blocks. bias and yp (scratch) are padded to 16 * ceil(M / 16). Zero weights inside
 * a stored block are multiplied as dense does; a non-finite x[k] makes NaN the row blocks that
 * column k does not store. */
static inline void o2e_bsc_fc(int M, int K, const int *cptr, const int *brow, const float *bval,
                              const float *x, const float *bias, float *y, float *yp) {
  const int nr = (M + 15) / 16;
  int k, j, q, bad = 0;
  for (q = 0; q < 16 * nr; ++q) yp[q] = bias ? bias[q] : 0.0f;
  for (k = 0; k < K; ++k) {
    const float xk = x[k];
    if (xk == 0.0f) continue;
    bad |= !(xk - xk == 0.0f);
    for (j = cptr[k]; j < cptr[k + 1]; ++j) {
      float *yr = yp + 16 * brow[j];
      const float *w = bval + (size_t)16 * j;
#if O2E_SP_VEC
      for (q = 0; q < 16 / O2E_SPW; ++q) {
        o2e_spv a, b;
        O2E_SPV_LOAD(a, yr + q * O2E_SPW);
        O2E_SPV_LOAD(b, w + q * O2E_SPW);
        a += xk * b;
        O2E_SPV_STORE(yr + q * O2E_SPW, a);
      }
#else
      for (q = 0; q < 16; ++q) yr[q] += xk * w[q];
#endif
    }
  }
  if (bad)
    for (k = 0; k < K; ++k) {
      int r;
      if (x[k] - x[k] == 0.0f) continue;
      for (r = 0, j = cptr[k]; r < nr; ++r) {
        if (j < cptr[k + 1] && brow[j] == r) ++j;
        else
          for (q = 0; q < 16; ++q) yp[16 * r + q] = NAN;
      }
    }
  memcpy(y, yp, sizeof(float) * (size_t)M);
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

/* Fully connected: y[B][M] = x[B][K] . W^T + bias (batch 1 uses o2e_csc_fc). B == 1 or few
 * outputs take o2e_spmv per row; larger batches are
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
