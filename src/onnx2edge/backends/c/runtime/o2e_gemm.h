/* o2e_gemm.h - single-precision GEMM engine of the code onnx2edge generates.
 *
 *   C[M][N] (=|+=) act( A[M][K] . B[K][N] + bias_m[M] (per row) + bias_n[N] (per column)
 *                       + R[M][N] )
 *
 * All matrices are row-major with explicit leading dimensions. With accumulate != 0 the
 * old C is added AFTER the activation (C = C_old + act(...)); with accumulate == 0 C is
 * only written. bias_m, bias_n and R may be NULL. R may alias C exactly (in-place residual:
 * R == C, ldr == ldc); no other operand may overlap C.
 *
 * The design follows the GotoBLAS / BLIS recipe (Goto & van de Geijn, "Anatomy of
 * high-performance matrix multiplication"; Van Zee & van de Geijn, "BLIS: a framework for
 * rapidly instantiating BLAS functionality"):
 *   - the K dimension is cut into KC slices and N into NC slices so that one packed slice of
 *     B (KC x NC) stays in the L2 cache while every row panel of A streams past it;
 *   - B is copied ("packed") into contiguous NR-wide column panels so that the innermost
 *     kernel reads it with unit stride, without TLB misses or cache-set conflicts;
 *   - A is stored as MR-row panels interleaved along K ("k-major": the MR values of one
 *     column of the panel are adjacent). Weights are constant, so conversion packs them once
 *     (see gemm_pack.py); a plain A is packed block by block into the workspace;
 *   - a register-blocked MR x NR micro-kernel keeps the whole C tile in vector registers for
 *     a KC-long loop of rank-1 updates (broadcast one A value, FMA it with the NR-wide row
 *     of B), so each loaded value feeds several FMAs and loads never limit the FMA units;
 *   - bias / residual / activation are fused into the store of each C tile after the last
 *     K slice, so C is written once more at most and never re-read by a separate pass.
 *
 * The packed-A layout is the same for every kernel variant (MR = O2E_GEMM_MR = 8 rows per
 * panel, the full K per panel, rows past M zero-filled): weights converted once run with the
 * AVX-512, the AVX2 and the portable kernel alike. A K sub-range of a panel is contiguous,
 * so KC can change freely without repacking.
 *
 * Kernel chosen at compile time: __AVX512F__ -> 8x48 AVX-512 kernel; __AVX2__ && __FMA__ ->
 * 4x24 AVX2 kernel (works on half panels); otherwise a portable C99 kernel.
 * Optional threads: compile with -DO2E_THREADS=n (pthreads; link with -pthread).
 * No heap allocation: all scratch comes from the caller's 64-byte-aligned workspace of
 * o2e_sgemm_workspace(M, N, K) bytes.
 */
#ifndef O2E_GEMM_H
#define O2E_GEMM_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifndef O2E_THREADS
#define O2E_THREADS 1
#endif
#if O2E_THREADS > 1
#include <pthread.h>
#endif

#if defined(__AVX512F__)
#define O2E_GEMM_AVX512 1
#include <immintrin.h>
#elif defined(__AVX2__) && defined(__FMA__)
#define O2E_GEMM_AVX2 1
#include <immintrin.h>
#endif

/* Every function is static: the header is included into model.c. Unused ones must not
 * warn, and the hot helpers must be inlined into the kernels. */
#if defined(__GNUC__) || defined(__clang__)
#define O2E_GEMM_FN static __attribute__((unused))
#define O2E_GEMM_INL static inline __attribute__((always_inline, unused))
#else
#define O2E_GEMM_FN static
#define O2E_GEMM_INL static inline
#endif

/* ---- blocking parameters ---------------------------------------------------------------
 * MR is part of the packed-weight format; do not change it without changing gemm_pack.py.
 * The others may be overridden with -D for tuning (NC must stay a multiple of NR, MC of MR).
 * Values were chosen by measurement on a Zen 5 core (48 KiB L1d, 1 MiB L2): one packed B
 * slice of KC x NC floats fills about half of L2, and an MR x KC panel of A (8 KiB) stays in
 * L1 while the kernel sweeps across the B slice (MC = MR: the A panel is the operand that is
 * reused from L1, B streams from L2 - the ordering BLIS uses on AVX-512 machines). */
#define O2E_GEMM_MR 8
#if defined(O2E_GEMM_AVX512)
#define O2E_GEMM_NR 48 /* 3 zmm of 16 floats: 8 x 3 = 24 accumulators + 3 B + 1 A regs */
#define O2E_GEMM_VW 16 /* packed B panels are padded to a multiple of the vector width */
#elif defined(O2E_GEMM_AVX2)
#define O2E_GEMM_NR 24 /* 3 ymm: 4 x 3 = 12 accumulators + 3 B + 1 A of the 16 ymm regs */
#define O2E_GEMM_VW 8
#else
#define O2E_GEMM_NR 8
#define O2E_GEMM_VW 8
#endif
#ifndef O2E_GEMM_KC
#define O2E_GEMM_KC 256
#endif
#ifndef O2E_GEMM_NC
#define O2E_GEMM_NC 480
#endif
#ifndef O2E_GEMM_MC
#define O2E_GEMM_MC 8
#endif
/* Rows per chunk when partial sums must go to a scratch tile instead of C (see below). */
#define O2E_GEMM_MT 64
/* Below this many flops a call stays on one thread: thread start-up costs ~20-50 us. */
#ifndef O2E_GEMM_MT_FLOPS
#define O2E_GEMM_MT_FLOPS 4000000.0
#endif

#ifndef O2E_ACT_DEFINED
#define O2E_ACT_DEFINED
/* kind: 0 none, 1 relu, 2 clip(a, b), 3 leaky relu (alpha = a) */
typedef struct {
  int kind;
  float a, b;
} o2e_act;
#endif

O2E_GEMM_FN const char *o2e_gemm_kernel_name(void) {
#if defined(O2E_GEMM_AVX512)
  return "avx512";
#elif defined(O2E_GEMM_AVX2)
  return "avx2";
#else
  return "portable";
#endif
}

/* ---- packed A ---------------------------------------------------------------------------
 * Panel p holds rows 8p..8p+7; element (row 8p+i, column k) is at p*8*K + k*8 + i. */
O2E_GEMM_FN size_t o2e_packed_a_size(int M, int K) {
  if (M <= 0 || K <= 0) return 0;
  return (size_t)((M + O2E_GEMM_MR - 1) / O2E_GEMM_MR) * O2E_GEMM_MR * (size_t)K;
}

/* Packs rows [0, rows) (rows <= 8, rest zero) x columns [k0, k0 + kc) of A into one panel. */
O2E_GEMM_INL void o2e_pack_a_panel_(int rows, int kc, const float *A, int lda, float *dst) {
  int i, k;
  if (rows == O2E_GEMM_MR) {
    for (k = 0; k < kc; k++)
      for (i = 0; i < O2E_GEMM_MR; i++) dst[(size_t)k * O2E_GEMM_MR + i] = A[(size_t)i * lda + k];
  } else {
    for (k = 0; k < kc; k++)
      for (i = 0; i < O2E_GEMM_MR; i++)
        dst[(size_t)k * O2E_GEMM_MR + i] = i < rows ? A[(size_t)i * lda + k] : 0.0f;
  }
}

O2E_GEMM_FN void o2e_pack_a(int M, int K, const float *A, int lda, float *packed) {
  int p;
  if (M <= 0 || K <= 0) return;
  for (p = 0; p * O2E_GEMM_MR < M; p++) {
    int rows = M - p * O2E_GEMM_MR;
    if (rows > O2E_GEMM_MR) rows = O2E_GEMM_MR;
    o2e_pack_a_panel_(rows, K, A + (size_t)p * O2E_GEMM_MR * lda, lda,
                      packed + (size_t)p * O2E_GEMM_MR * K);
  }
}

/* ---- epilogue ----------------------------------------------------------------------------
 * A tile store computes  out = P + act(acc + Q + bias_m + bias_n + R)  where Q holds the
 * partial sums of earlier K slices (NULL on the first slice) and everything after Q only
 * happens on the last K slice ("final"). P is the old C when accumulating. Q and out are
 * either C itself or a scratch tile T whose origin is (row ti, column tj). */
typedef struct {
  float *out;
  int ldo, oi, oj; /* out element (i, j) is out[(i - oi) * ldo + (j - oj)] */
  const float *q;
  int ldq, qi, qj;
  int final;
  const float *bm, *bn, *r;
  int ldr;
  const float *p;
  int ldp;
  o2e_act act;
} o2e_epi_;

O2E_GEMM_INL float o2e_act1_(float x, o2e_act act) {
  switch (act.kind) {
  case 1:
    return x < 0.0f ? 0.0f : x;
  case 2:
    x = x < act.a ? act.a : x;
    return x > act.b ? act.b : x;
  case 3:
    return x < 0.0f ? x * act.a : x;
  default:
    return x;
  }
}

/* Scalar epilogue of an mr x nr tile held in t (row stride ldt) at C position (i0, j0). */
O2E_GEMM_FN void o2e_store_tile_(const o2e_epi_ *e, const float *t, int ldt, int mr, int nr,
                                 int i0, int j0) {
  int i, j;
  for (i = 0; i < mr; i++) {
    const int gi = i0 + i;
    const float *ti = t + (size_t)i * ldt;
    float *o = e->out + (size_t)(gi - e->oi) * e->ldo + (j0 - e->oj);
    const float *q = e->q ? e->q + (size_t)(gi - e->qi) * e->ldq + (j0 - e->qj) : NULL;
    if (!e->final) {
      if (q)
        for (j = 0; j < nr; j++) o[j] = ti[j] + q[j];
      else
        for (j = 0; j < nr; j++) o[j] = ti[j];
    } else {
      const float bm = e->bm ? e->bm[gi] : 0.0f;
      const float *bn = e->bn ? e->bn + j0 : NULL;
      const float *r = e->r ? e->r + (size_t)gi * e->ldr + j0 : NULL;
      const float *p = e->p ? e->p + (size_t)gi * e->ldp + j0 : NULL;
      for (j = 0; j < nr; j++) {
        float x = ti[j];
        if (q) x += q[j];
        x += bm;
        if (bn) x += bn[j];
        if (r) x += r[j];
        x = o2e_act1_(x, e->act);
        if (p) x += p[j];
        o[j] = x;
      }
    }
  }
}

/* ---- B packing ---------------------------------------------------------------------------
 * The kc x nc block of B at (pc, jc) becomes column panels of width NR stored one after the
 * other; panel q starts at q * NR * kc and has row stride w = NR, except the last (partial)
 * panel, whose width is rounded up to the vector width VW and zero-filled, so kernels never
 * need masked or scalar loads of B. */
O2E_GEMM_INL int o2e_panel_w_(int nr) {
  return nr >= O2E_GEMM_NR ? O2E_GEMM_NR : (nr + O2E_GEMM_VW - 1) / O2E_GEMM_VW * O2E_GEMM_VW;
}

O2E_GEMM_FN void o2e_pack_b_(int kc, int nc, const float *B, int ldb, float *bp) {
  int jr, k;
  for (jr = 0; jr < nc; jr += O2E_GEMM_NR) {
    const int nr = nc - jr < O2E_GEMM_NR ? nc - jr : O2E_GEMM_NR;
    const int w = o2e_panel_w_(nr);
    float *dst = bp + (size_t)jr * kc;
    const float *src = B + jr;
    if (nr == O2E_GEMM_NR) {
      for (k = 0; k < kc; k++)
        memcpy(dst + (size_t)k * O2E_GEMM_NR, src + (size_t)k * ldb,
               sizeof(float) * O2E_GEMM_NR);
    } else {
      for (k = 0; k < kc; k++) {
        float *d = dst + (size_t)k * w;
        int j;
        memcpy(d, src + (size_t)k * ldb, sizeof(float) * (size_t)nr);
        for (j = nr; j < w; j++) d[j] = 0.0f;
      }
    }
  }
}

/* ==== micro-kernels ======================================================================
 * o2e_kernel_(kc, a, b, w, mr, nr, e, i0, j0): acc = A-panel(8 x kc, k-major) * B-panel
 * (kc x w, row stride w), then the epilogue stores the valid mr x nr part at (i0, j0). */
#if defined(O2E_GEMM_AVX512)

O2E_GEMM_INL __m512 o2e_act16_(__m512 x, o2e_act act) {
  switch (act.kind) {
  case 1: /* max(0, x): with a NaN second operand vmaxps returns it, so NaN propagates */
    return _mm512_max_ps(_mm512_setzero_ps(), x);
  case 2:
    return _mm512_min_ps(_mm512_set1_ps(act.b), _mm512_max_ps(_mm512_set1_ps(act.a), x));
  case 3: {
    const __mmask16 neg = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
    return _mm512_mask_mul_ps(x, neg, x, _mm512_set1_ps(act.a));
  }
  default:
    return x;
  }
}

/* Epilogue for one 16-wide row segment; masked loads/stores keep edge tiles in bounds. */
O2E_GEMM_INL void o2e_st16_(const o2e_epi_ *e, __m512 x, int i, int j, __mmask16 m) {
  if (e->q)
    x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(m, e->q + (size_t)(i - e->qi) * e->ldq +
                                                      (j - e->qj)));
  if (e->final) {
    if (e->bm) x = _mm512_add_ps(x, _mm512_set1_ps(e->bm[i]));
    if (e->bn) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(m, e->bn + j));
    if (e->r) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(m, e->r + (size_t)i * e->ldr + j));
    x = o2e_act16_(x, e->act);
    if (e->p) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(m, e->p + (size_t)i * e->ldp + j));
  }
  _mm512_mask_storeu_ps(e->out + (size_t)(i - e->oi) * e->ldo + (j - e->oj), m, x);
}

/* One row r of the rank-1 update: broadcast a[r], FMA with the NV vectors of B. */
#define O2E_R16_(r)                                                                            \
  do {                                                                                         \
    const __m512 av = _mm512_set1_ps(a[r]);                                                    \
    c##r##0 = _mm512_fmadd_ps(av, b0, c##r##0);                                                \
    if (NV > 1) c##r##1 = _mm512_fmadd_ps(av, b1, c##r##1);                                    \
    if (NV > 2) c##r##2 = _mm512_fmadd_ps(av, b2, c##r##2);                                    \
  } while (0)

#define O2E_ST16_ROW_(r)                                                                       \
  do {                                                                                         \
    if (r < mr) {                                                                              \
      o2e_st16_(e, c##r##0, i0 + r, j0, NV == 1 ? last : 0xFFFF);                              \
      if (NV > 1) o2e_st16_(e, c##r##1, i0 + r, j0 + 16, NV == 2 ? last : 0xFFFF);             \
      if (NV > 2) o2e_st16_(e, c##r##2, i0 + r, j0 + 32, last);                                \
    }                                                                                          \
  } while (0)

/* NV (1..3) is a compile-time constant in each caller, so the unused accumulators and FMAs
 * disappear: 8 x 48, 8 x 32 and 8 x 16 kernels from one body. */
O2E_GEMM_INL void o2e_k16_body_(const int NV, int kc, const float *a, const float *b, int w,
                                int mr, int nr, const o2e_epi_ *e, int i0, int j0) {
  __m512 c00 = _mm512_setzero_ps(), c01 = c00, c02 = c00, c10 = c00, c11 = c00, c12 = c00;
  __m512 c20 = c00, c21 = c00, c22 = c00, c30 = c00, c31 = c00, c32 = c00;
  __m512 c40 = c00, c41 = c00, c42 = c00, c50 = c00, c51 = c00, c52 = c00;
  __m512 c60 = c00, c61 = c00, c62 = c00, c70 = c00, c71 = c00, c72 = c00;
  const int rem = nr - 16 * (NV - 1);
  const __mmask16 last = (__mmask16)(rem >= 16 ? 0xFFFF : (1u << rem) - 1u);
  int k;
  for (k = 0; k < kc; k++) {
    const __m512 b0 = _mm512_loadu_ps(b);
    const __m512 b1 = NV > 1 ? _mm512_loadu_ps(b + 16) : b0;
    const __m512 b2 = NV > 2 ? _mm512_loadu_ps(b + 32) : b0;
    O2E_R16_(0);
    O2E_R16_(1);
    O2E_R16_(2);
    O2E_R16_(3);
    O2E_R16_(4);
    O2E_R16_(5);
    O2E_R16_(6);
    O2E_R16_(7);
    a += O2E_GEMM_MR;
    b += w;
  }
  O2E_ST16_ROW_(0);
  O2E_ST16_ROW_(1);
  O2E_ST16_ROW_(2);
  O2E_ST16_ROW_(3);
  O2E_ST16_ROW_(4);
  O2E_ST16_ROW_(5);
  O2E_ST16_ROW_(6);
  O2E_ST16_ROW_(7);
}

O2E_GEMM_FN void o2e_k16x3_(int kc, const float *a, const float *b, int w, int mr, int nr,
                            const o2e_epi_ *e, int i0, int j0) {
  o2e_k16_body_(3, kc, a, b, w, mr, nr, e, i0, j0);
}
O2E_GEMM_FN void o2e_k16x2_(int kc, const float *a, const float *b, int w, int mr, int nr,
                            const o2e_epi_ *e, int i0, int j0) {
  o2e_k16_body_(2, kc, a, b, w, mr, nr, e, i0, j0);
}
O2E_GEMM_FN void o2e_k16x1_(int kc, const float *a, const float *b, int w, int mr, int nr,
                            const o2e_epi_ *e, int i0, int j0) {
  o2e_k16_body_(1, kc, a, b, w, mr, nr, e, i0, j0);
}

O2E_GEMM_INL void o2e_kernel_(int kc, const float *a, const float *b, int w, int mr, int nr,
                              const o2e_epi_ *e, int i0, int j0) {
  if (nr > 32)
    o2e_k16x3_(kc, a, b, w, mr, nr, e, i0, j0);
  else if (nr > 16)
    o2e_k16x2_(kc, a, b, w, mr, nr, e, i0, j0);
  else
    o2e_k16x1_(kc, a, b, w, mr, nr, e, i0, j0);
}

#elif defined(O2E_GEMM_AVX2)

O2E_GEMM_INL __m256 o2e_act8_(__m256 x, o2e_act act) {
  switch (act.kind) {
  case 1:
    return _mm256_max_ps(_mm256_setzero_ps(), x);
  case 2:
    return _mm256_min_ps(_mm256_set1_ps(act.b), _mm256_max_ps(_mm256_set1_ps(act.a), x));
  case 3: {
    const __m256 neg = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ);
    return _mm256_blendv_ps(x, _mm256_mul_ps(x, _mm256_set1_ps(act.a)), neg);
  }
  default:
    return x;
  }
}

/* Full-width (8 lanes) epilogue; edge tiles go through o2e_store_tile_ instead. */
O2E_GEMM_INL void o2e_st8_(const o2e_epi_ *e, __m256 x, int i, int j) {
  if (e->q)
    x = _mm256_add_ps(x, _mm256_loadu_ps(e->q + (size_t)(i - e->qi) * e->ldq + (j - e->qj)));
  if (e->final) {
    if (e->bm) x = _mm256_add_ps(x, _mm256_set1_ps(e->bm[i]));
    if (e->bn) x = _mm256_add_ps(x, _mm256_loadu_ps(e->bn + j));
    if (e->r) x = _mm256_add_ps(x, _mm256_loadu_ps(e->r + (size_t)i * e->ldr + j));
    x = o2e_act8_(x, e->act);
    if (e->p) x = _mm256_add_ps(x, _mm256_loadu_ps(e->p + (size_t)i * e->ldp + j));
  }
  _mm256_storeu_ps(e->out + (size_t)(i - e->oi) * e->ldo + (j - e->oj), x);
}

#define O2E_R8_(r)                                                                             \
  do {                                                                                         \
    const __m256 av = _mm256_broadcast_ss(a + r);                                              \
    c##r##0 = _mm256_fmadd_ps(av, b0, c##r##0);                                                \
    if (NV > 1) c##r##1 = _mm256_fmadd_ps(av, b1, c##r##1);                                    \
    if (NV > 2) c##r##2 = _mm256_fmadd_ps(av, b2, c##r##2);                                    \
  } while (0)

/* 4 x (8 NV) kernel over rows [h, h + 4) of the 8-row panel (A read with stride 8). */
O2E_GEMM_INL void o2e_k8_body_(const int NV, int kc, const float *a, const float *b, int w,
                               int mr, int nr, const o2e_epi_ *e, int i0, int j0) {
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c02 = c00, c10 = c00, c11 = c00, c12 = c00;
  __m256 c20 = c00, c21 = c00, c22 = c00, c30 = c00, c31 = c00, c32 = c00;
  int k;
  for (k = 0; k < kc; k++) {
    const __m256 b0 = _mm256_loadu_ps(b);
    const __m256 b1 = NV > 1 ? _mm256_loadu_ps(b + 8) : b0;
    const __m256 b2 = NV > 2 ? _mm256_loadu_ps(b + 16) : b0;
    O2E_R8_(0);
    O2E_R8_(1);
    O2E_R8_(2);
    O2E_R8_(3);
    a += O2E_GEMM_MR;
    b += w;
  }
  if (nr == 8 * NV && mr == 4) {
    o2e_st8_(e, c00, i0, j0);
    o2e_st8_(e, c10, i0 + 1, j0);
    o2e_st8_(e, c20, i0 + 2, j0);
    o2e_st8_(e, c30, i0 + 3, j0);
    if (NV > 1) {
      o2e_st8_(e, c01, i0, j0 + 8);
      o2e_st8_(e, c11, i0 + 1, j0 + 8);
      o2e_st8_(e, c21, i0 + 2, j0 + 8);
      o2e_st8_(e, c31, i0 + 3, j0 + 8);
    }
    if (NV > 2) {
      o2e_st8_(e, c02, i0, j0 + 16);
      o2e_st8_(e, c12, i0 + 1, j0 + 16);
      o2e_st8_(e, c22, i0 + 2, j0 + 16);
      o2e_st8_(e, c32, i0 + 3, j0 + 16);
    }
  } else {
    float t[4 * 24];
    _mm256_storeu_ps(t, c00);
    _mm256_storeu_ps(t + 24, c10);
    _mm256_storeu_ps(t + 48, c20);
    _mm256_storeu_ps(t + 72, c30);
    if (NV > 1) {
      _mm256_storeu_ps(t + 8, c01);
      _mm256_storeu_ps(t + 32, c11);
      _mm256_storeu_ps(t + 56, c21);
      _mm256_storeu_ps(t + 80, c31);
    }
    if (NV > 2) {
      _mm256_storeu_ps(t + 16, c02);
      _mm256_storeu_ps(t + 40, c12);
      _mm256_storeu_ps(t + 64, c22);
      _mm256_storeu_ps(t + 88, c32);
    }
    o2e_store_tile_(e, t, 24, mr, nr, i0, j0);
  }
}

O2E_GEMM_FN void o2e_k8x3_(int kc, const float *a, const float *b, int w, int mr, int nr,
                           const o2e_epi_ *e, int i0, int j0) {
  o2e_k8_body_(3, kc, a, b, w, mr, nr, e, i0, j0);
}
O2E_GEMM_FN void o2e_k8x2_(int kc, const float *a, const float *b, int w, int mr, int nr,
                           const o2e_epi_ *e, int i0, int j0) {
  o2e_k8_body_(2, kc, a, b, w, mr, nr, e, i0, j0);
}
O2E_GEMM_FN void o2e_k8x1_(int kc, const float *a, const float *b, int w, int mr, int nr,
                           const o2e_epi_ *e, int i0, int j0) {
  o2e_k8_body_(1, kc, a, b, w, mr, nr, e, i0, j0);
}

O2E_GEMM_INL void o2e_kernel_(int kc, const float *a, const float *b, int w, int mr, int nr,
                              const o2e_epi_ *e, int i0, int j0) {
  int h;
  /* The AVX2 register file holds a 4 x 24 tile: do the 8-row panel as two halves. */
  for (h = 0; h < mr; h += 4) {
    const int m4 = mr - h < 4 ? mr - h : 4;
    if (nr > 16)
      o2e_k8x3_(kc, a + h, b, w, m4, nr, e, i0 + h, j0);
    else if (nr > 8)
      o2e_k8x2_(kc, a + h, b, w, m4, nr, e, i0 + h, j0);
    else
      o2e_k8x1_(kc, a + h, b, w, m4, nr, e, i0 + h, j0);
  }
}

#else /* portable C99 */

/* 4 x 8 tile of scalars: 32 accumulators map onto 8 SSE / NEON registers when the compiler
 * vectorizes, and stay a reasonable register load for a scalar FPU. */
O2E_GEMM_FN void o2e_k4x8_(int kc, const float *a, const float *b, int w, int mr, int nr,
                           const o2e_epi_ *e, int i0, int j0) {
  float c[4][8] = {{0.0f}};
  int k, i, j;
  for (k = 0; k < kc; k++) {
    for (i = 0; i < 4; i++) {
      const float av = a[i];
      for (j = 0; j < 8; j++) c[i][j] += av * b[j];
    }
    a += O2E_GEMM_MR;
    b += w;
  }
  o2e_store_tile_(e, &c[0][0], 8, mr, nr, i0, j0);
}

O2E_GEMM_INL void o2e_kernel_(int kc, const float *a, const float *b, int w, int mr, int nr,
                              const o2e_epi_ *e, int i0, int j0) {
  int h;
  for (h = 0; h < mr; h += 4)
    o2e_k4x8_(kc, a + h, b, w, mr - h < 4 ? mr - h : 4, nr, e, i0 + h, j0);
}

#endif

/* ==== matrix-vector (N == 1) ==============================================================
 * With one column of B every A value is used once, so the product is bound by how fast A
 * streams in; packing B or tiling would only add traffic. */

/* y[i] = dot(A row i, x) for rows [m0, m1) of a plain row-major A. */
O2E_GEMM_FN void o2e_gemv_plain_(int m0, int m1, int K, const float *A, int lda,
                                 const float *x, float *y) {
  int i = m0;
#if defined(O2E_GEMM_AVX512)
  /* 4 rows x 2 vectors = 8 independent FMA chains (FMA latency x throughput). */
  for (; i + 4 <= m1; i += 4) {
    const float *r0 = A + (size_t)i * lda, *r1 = r0 + lda, *r2 = r1 + lda, *r3 = r2 + lda;
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0, t0 = s0, t1 = s0, t2 = s0,
           t3 = s0;
    int k = 0;
    for (; k + 32 <= K; k += 32) {
      const __m512 x0 = _mm512_loadu_ps(x + k), x1 = _mm512_loadu_ps(x + k + 16);
      s0 = _mm512_fmadd_ps(_mm512_loadu_ps(r0 + k), x0, s0);
      s1 = _mm512_fmadd_ps(_mm512_loadu_ps(r1 + k), x0, s1);
      s2 = _mm512_fmadd_ps(_mm512_loadu_ps(r2 + k), x0, s2);
      s3 = _mm512_fmadd_ps(_mm512_loadu_ps(r3 + k), x0, s3);
      t0 = _mm512_fmadd_ps(_mm512_loadu_ps(r0 + k + 16), x1, t0);
      t1 = _mm512_fmadd_ps(_mm512_loadu_ps(r1 + k + 16), x1, t1);
      t2 = _mm512_fmadd_ps(_mm512_loadu_ps(r2 + k + 16), x1, t2);
      t3 = _mm512_fmadd_ps(_mm512_loadu_ps(r3 + k + 16), x1, t3);
    }
    for (; k < K; k += 16) {
      const __mmask16 m = (__mmask16)(K - k >= 16 ? 0xFFFF : (1u << (K - k)) - 1u);
      const __m512 x0 = _mm512_maskz_loadu_ps(m, x + k);
      s0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, r0 + k), x0, s0);
      s1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, r1 + k), x0, s1);
      s2 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, r2 + k), x0, s2);
      s3 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, r3 + k), x0, s3);
    }
    y[i] = _mm512_reduce_add_ps(_mm512_add_ps(s0, t0));
    y[i + 1] = _mm512_reduce_add_ps(_mm512_add_ps(s1, t1));
    y[i + 2] = _mm512_reduce_add_ps(_mm512_add_ps(s2, t2));
    y[i + 3] = _mm512_reduce_add_ps(_mm512_add_ps(s3, t3));
  }
  for (; i < m1; i++) {
    const float *r0 = A + (size_t)i * lda;
    __m512 s0 = _mm512_setzero_ps(), t0 = s0;
    int k = 0;
    for (; k + 32 <= K; k += 32) {
      s0 = _mm512_fmadd_ps(_mm512_loadu_ps(r0 + k), _mm512_loadu_ps(x + k), s0);
      t0 = _mm512_fmadd_ps(_mm512_loadu_ps(r0 + k + 16), _mm512_loadu_ps(x + k + 16), t0);
    }
    for (; k < K; k += 16) {
      const __mmask16 m = (__mmask16)(K - k >= 16 ? 0xFFFF : (1u << (K - k)) - 1u);
      s0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, r0 + k), _mm512_maskz_loadu_ps(m, x + k),
                           s0);
    }
    y[i] = _mm512_reduce_add_ps(_mm512_add_ps(s0, t0));
  }
#elif defined(O2E_GEMM_AVX2)
  for (; i < m1; i++) {
    const float *r0 = A + (size_t)i * lda;
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    float tail = 0.0f, v[8];
    int k = 0, j;
    for (; k + 32 <= K; k += 32) {
      s0 = _mm256_fmadd_ps(_mm256_loadu_ps(r0 + k), _mm256_loadu_ps(x + k), s0);
      s1 = _mm256_fmadd_ps(_mm256_loadu_ps(r0 + k + 8), _mm256_loadu_ps(x + k + 8), s1);
      s2 = _mm256_fmadd_ps(_mm256_loadu_ps(r0 + k + 16), _mm256_loadu_ps(x + k + 16), s2);
      s3 = _mm256_fmadd_ps(_mm256_loadu_ps(r0 + k + 24), _mm256_loadu_ps(x + k + 24), s3);
    }
    for (; k + 8 <= K; k += 8)
      s0 = _mm256_fmadd_ps(_mm256_loadu_ps(r0 + k), _mm256_loadu_ps(x + k), s0);
    for (; k < K; k++) tail += r0[k] * x[k];
    _mm256_storeu_ps(v, _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    for (j = 0; j < 8; j++) tail += v[j];
    y[i] = tail;
  }
#else
  for (; i < m1; i++) {
    const float *r0 = A + (size_t)i * lda;
    float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    int k = 0;
    for (; k + 4 <= K; k += 4) {
      s[0] += r0[k] * x[k];
      s[1] += r0[k + 1] * x[k + 1];
      s[2] += r0[k + 2] * x[k + 2];
      s[3] += r0[k + 3] * x[k + 3];
    }
    for (; k < K; k++) s[0] += r0[k] * x[k];
    y[i] = (s[0] + s[1]) + (s[2] + s[3]);
  }
#endif
}

/* y[8p .. 8p+7] for panels [p0, p1) of a packed A: each K step is 8 adjacent rows, so the
 * panel is one contiguous stream and the 8 partial sums stay in one register. */
O2E_GEMM_FN void o2e_gemv_packed_(int p0, int p1, int K, const float *Ap, const float *x,
                                  float *y) {
  int p;
  for (p = p0; p < p1; p++) {
    const float *a = Ap + (size_t)p * O2E_GEMM_MR * K;
    float *yp = y + (size_t)p * O2E_GEMM_MR;
    int k = 0;
#if defined(O2E_GEMM_AVX512)
    /* One zmm covers two K steps (16 values). x[k], x[k+1] are spread over the two halves
     * with a permute; 4 accumulators hide the FMA latency. */
    const __m512i i0 = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m512i two = _mm512_set1_epi32(2);
    const __m512i i1 = _mm512_add_epi32(i0, two), i2 = _mm512_add_epi32(i1, two);
    const __m512i i3 = _mm512_add_epi32(i2, two), i4 = _mm512_add_epi32(i3, two);
    const __m512i i5 = _mm512_add_epi32(i4, two), i6 = _mm512_add_epi32(i5, two);
    const __m512i i7 = _mm512_add_epi32(i6, two);
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    __m256 h;
    for (; k + 16 <= K; k += 16) {
      const __m512 xv = _mm512_loadu_ps(x + k);
      const float *ak = a + (size_t)k * O2E_GEMM_MR;
      s0 = _mm512_fmadd_ps(_mm512_loadu_ps(ak), _mm512_permutexvar_ps(i0, xv), s0);
      s1 = _mm512_fmadd_ps(_mm512_loadu_ps(ak + 16), _mm512_permutexvar_ps(i1, xv), s1);
      s2 = _mm512_fmadd_ps(_mm512_loadu_ps(ak + 32), _mm512_permutexvar_ps(i2, xv), s2);
      s3 = _mm512_fmadd_ps(_mm512_loadu_ps(ak + 48), _mm512_permutexvar_ps(i3, xv), s3);
      s0 = _mm512_fmadd_ps(_mm512_loadu_ps(ak + 64), _mm512_permutexvar_ps(i4, xv), s0);
      s1 = _mm512_fmadd_ps(_mm512_loadu_ps(ak + 80), _mm512_permutexvar_ps(i5, xv), s1);
      s2 = _mm512_fmadd_ps(_mm512_loadu_ps(ak + 96), _mm512_permutexvar_ps(i6, xv), s2);
      s3 = _mm512_fmadd_ps(_mm512_loadu_ps(ak + 112), _mm512_permutexvar_ps(i7, xv), s3);
    }
    s0 = _mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3));
    h = _mm256_add_ps(_mm512_castps512_ps256(s0), _mm512_extractf32x8_ps(s0, 1));
    for (; k < K; k++)
      h = _mm256_fmadd_ps(_mm256_loadu_ps(a + (size_t)k * O2E_GEMM_MR), _mm256_set1_ps(x[k]), h);
    _mm256_storeu_ps(yp, h);
#elif defined(O2E_GEMM_AVX2)
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    for (; k + 4 <= K; k += 4) {
      const float *ak = a + (size_t)k * O2E_GEMM_MR;
      s0 = _mm256_fmadd_ps(_mm256_loadu_ps(ak), _mm256_broadcast_ss(x + k), s0);
      s1 = _mm256_fmadd_ps(_mm256_loadu_ps(ak + 8), _mm256_broadcast_ss(x + k + 1), s1);
      s2 = _mm256_fmadd_ps(_mm256_loadu_ps(ak + 16), _mm256_broadcast_ss(x + k + 2), s2);
      s3 = _mm256_fmadd_ps(_mm256_loadu_ps(ak + 24), _mm256_broadcast_ss(x + k + 3), s3);
    }
    for (; k < K; k++)
      s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + (size_t)k * O2E_GEMM_MR), _mm256_broadcast_ss(x + k),
                           s0);
    _mm256_storeu_ps(yp, _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
#else
    float s[O2E_GEMM_MR] = {0.0f};
    int i;
    for (; k < K; k++) {
      const float xk = x[k];
      const float *ak = a + (size_t)k * O2E_GEMM_MR;
      for (i = 0; i < O2E_GEMM_MR; i++) s[i] += ak[i] * xk;
    }
    for (i = 0; i < O2E_GEMM_MR; i++) yp[i] = s[i];
#endif
  }
}

/* ==== driver ============================================================================== */
typedef struct {
  int M, N, K;
  const float *A;
  int lda, a_packed;
  const float *B;
  int ldb;
  float *C;
  int ldc, accumulate;
  const float *bm, *bn, *R;
  int ldr;
  o2e_act act;
} o2e_gemm_args_;

#define O2E_GEMM_RUP16_(n) (((size_t)(n) + 15u) & ~(size_t)15u)

/* Floats of scratch one thread needs. */
O2E_GEMM_FN size_t o2e_ws_floats_(int M, int N, int K) {
  size_t kcm, ncm, total;
  if (M <= 0 || N <= 0 || K <= 0) return 0;
  if (N == 1) return O2E_GEMM_RUP16_(K) + O2E_GEMM_RUP16_((size_t)M + O2E_GEMM_MR);
  kcm = (size_t)(K < O2E_GEMM_KC ? K : O2E_GEMM_KC);
  ncm = (size_t)(N + O2E_GEMM_NR - 1) / O2E_GEMM_NR * O2E_GEMM_NR;
  if (ncm > O2E_GEMM_NC) ncm = O2E_GEMM_NC;
  total = O2E_GEMM_RUP16_(kcm * ncm);          /* packed B slice */
  total += O2E_GEMM_RUP16_(O2E_GEMM_MC * kcm); /* packed A block (plain A only) */
  if (K > O2E_GEMM_KC) total += O2E_GEMM_RUP16_((size_t)O2E_GEMM_MT * ncm); /* T */
  (void)M;
  return total;
}

O2E_GEMM_FN size_t o2e_sgemm_workspace(int M, int N, int K) {
  return (o2e_ws_floats_(M, N, K) * (size_t)O2E_THREADS) * sizeof(float) + 64;
}

O2E_GEMM_INL int o2e_overlap_(const float *p, size_t np, const float *q, size_t nq) {
  const uintptr_t a = (uintptr_t)p, b = (uintptr_t)q;
  return a < b + nq * sizeof(float) && b < a + np * sizeof(float);
}

/* Final store of y (mr x 1 results at rows [i0, i0 + n)) for the N == 1 paths. */
O2E_GEMM_FN void o2e_gemv_epilogue_(const o2e_gemm_args_ *g, const float *y, int i0, int n) {
  o2e_epi_ e;
  memset(&e, 0, sizeof e);
  e.out = g->C;
  e.ldo = g->ldc;
  e.final = 1;
  e.bm = g->bm;
  e.bn = g->bn;
  e.r = g->R;
  e.ldr = g->ldr;
  e.p = g->accumulate ? g->C : NULL;
  e.ldp = g->ldc;
  e.act = g->act;
  o2e_store_tile_(&e, y, 1, n, 1, i0, 0);
}

/* N == 1 over rows [m0, m1) (m0 a multiple of 8). */
O2E_GEMM_FN void o2e_gemv_run_(const o2e_gemm_args_ *g, int m0, int m1, float *ws) {
  const float *x = g->B;
  float *y = ws;
  const int K = g->K;
  if (g->ldb != 1) {
    int k;
    float *xc = ws + O2E_GEMM_RUP16_((size_t)g->M + O2E_GEMM_MR);
    for (k = 0; k < K; k++) xc[k] = g->B[(size_t)k * g->ldb];
    x = xc;
  }
  if (g->a_packed) {
    /* whole panels are computed into y (which has room for the padding rows) */
    o2e_gemv_packed_(m0 / O2E_GEMM_MR, (m1 + O2E_GEMM_MR - 1) / O2E_GEMM_MR, K, g->A, x, y);
  } else {
    o2e_gemv_plain_(m0, m1, K, g->A, g->lda, x, y);
  }
  o2e_gemv_epilogue_(g, y + m0, m0, m1 - m0);
}

/* The blocked product for rows [m0, m1) x columns [n0, n1) (m0 a multiple of 8). */
O2E_GEMM_FN void o2e_gemm_run_(const o2e_gemm_args_ *g, int m0, int m1, int n0, int n1,
                               float *ws) {
  const int K = g->K;
  const size_t kcm = (size_t)(K < O2E_GEMM_KC ? K : O2E_GEMM_KC);
  size_t ncm = (size_t)(g->N + O2E_GEMM_NR - 1) / O2E_GEMM_NR * O2E_GEMM_NR;
  float *bp, *ap, *t;
  int use_t = 0, mchunk, jc, mc0, pc;
  if (ncm > O2E_GEMM_NC) ncm = O2E_GEMM_NC;
  bp = ws;
  ap = bp + O2E_GEMM_RUP16_(kcm * ncm);
  t = ap + O2E_GEMM_RUP16_(O2E_GEMM_MC * kcm);
  if (K > O2E_GEMM_KC) {
    /* Partial sums of K slices normally live in C itself. That is wrong when the old C is
     * still needed at the end: accumulating through a non-linear activation, or R == C.
     * Then they go to the scratch tile T, MT rows at a time. */
    const int r_alias =
        g->R && o2e_overlap_(g->R, (size_t)(g->M - 1) * g->ldr + g->N, g->C,
                             (size_t)(g->M - 1) * g->ldc + g->N);
    use_t = r_alias || (g->accumulate && g->act.kind != 0);
  }
  mchunk = use_t ? O2E_GEMM_MT : m1 - m0;
  for (jc = n0; jc < n1; jc += O2E_GEMM_NC) {
    const int nc = n1 - jc < O2E_GEMM_NC ? n1 - jc : O2E_GEMM_NC;
    for (mc0 = m0; mc0 < m1; mc0 += mchunk) {
      const int mc1 = m1 - mc0 < mchunk ? m1 : mc0 + mchunk;
      for (pc = 0; pc < K; pc += O2E_GEMM_KC) {
        const int kc = K - pc < O2E_GEMM_KC ? K - pc : O2E_GEMM_KC;
        const int first = pc == 0, last = pc + kc >= K;
        o2e_epi_ e;
        int ic;
        o2e_pack_b_(kc, nc, g->B + (size_t)pc * g->ldb + jc, g->ldb, bp);
        memset(&e, 0, sizeof e);
        e.final = last;
        e.act = g->act;
        if (last) {
          e.bm = g->bm;
          e.bn = g->bn;
          e.r = g->R;
          e.ldr = g->ldr;
        }
        if (use_t) {
          if (last) {
            e.out = g->C;
            e.ldo = g->ldc;
            e.p = g->accumulate ? g->C : NULL;
            e.ldp = g->ldc;
          } else {
            e.out = t;
            e.ldo = (int)ncm;
            e.oi = mc0;
            e.oj = jc;
          }
          if (!first) {
            e.q = t;
            e.ldq = (int)ncm;
            e.qi = mc0;
            e.qj = jc;
          }
        } else {
          e.out = g->C;
          e.ldo = g->ldc;
          if (first && last) {
            e.p = g->accumulate ? g->C : NULL; /* single slice: exact C_old + act(...) */
            e.ldp = g->ldc;
          } else if (!first || g->accumulate) {
            e.q = g->C; /* linear case: the old C can join the sum before the epilogue */
            e.ldq = g->ldc;
          }
        }
        for (ic = mc0; ic < mc1; ic += O2E_GEMM_MC) {
          const int mcb = mc1 - ic < O2E_GEMM_MC ? mc1 - ic : O2E_GEMM_MC;
          const float *abase;
          size_t astride;
          int jr, ir;
          if (g->a_packed) {
            abase = g->A + (size_t)(ic / O2E_GEMM_MR) * O2E_GEMM_MR * K + (size_t)pc * O2E_GEMM_MR;
            astride = (size_t)O2E_GEMM_MR * K;
          } else {
            for (ir = 0; ir < mcb; ir += O2E_GEMM_MR) {
              const int rows = mcb - ir < O2E_GEMM_MR ? mcb - ir : O2E_GEMM_MR;
              o2e_pack_a_panel_(rows, kc, g->A + (size_t)(ic + ir) * g->lda + pc, g->lda,
                                ap + (size_t)ir * kc);
            }
            abase = ap;
            astride = (size_t)O2E_GEMM_MR * kc;
          }
          for (jr = 0; jr < nc; jr += O2E_GEMM_NR) {
            const int nr = nc - jr < O2E_GEMM_NR ? nc - jr : O2E_GEMM_NR;
            const float *bpan = bp + (size_t)jr * kc;
            const int w = o2e_panel_w_(nr);
            for (ir = 0; ir < mcb; ir += O2E_GEMM_MR) {
              const int mr = mcb - ir < O2E_GEMM_MR ? mcb - ir : O2E_GEMM_MR;
              o2e_kernel_(kc, abase + (size_t)(ir / O2E_GEMM_MR) * astride, bpan, w, mr, nr, &e,
                          ic + ir, jc + jr);
            }
          }
        }
      }
    }
  }
}

/* K == 0: C (=|+=) act(bias_m + bias_n + R). */
O2E_GEMM_FN void o2e_gemm_k0_(const o2e_gemm_args_ *g) {
  float zero[64];
  o2e_epi_ e;
  int i, j;
  memset(zero, 0, sizeof zero);
  memset(&e, 0, sizeof e);
  e.out = g->C;
  e.ldo = g->ldc;
  e.final = 1;
  e.bm = g->bm;
  e.bn = g->bn;
  e.r = g->R;
  e.ldr = g->ldr;
  e.p = g->accumulate ? g->C : NULL;
  e.ldp = g->ldc;
  e.act = g->act;
  for (i = 0; i < g->M; i++)
    for (j = 0; j < g->N; j += 64)
      o2e_store_tile_(&e, zero, 0, 1, g->N - j < 64 ? g->N - j : 64, i, j);
}

typedef struct {
  const o2e_gemm_args_ *g;
  int m0, m1, n0, n1;
  float *ws;
} o2e_gemm_job_;

O2E_GEMM_FN void o2e_gemm_job_run_(const o2e_gemm_job_ *j) {
  if (j->m0 >= j->m1 || j->n0 >= j->n1) return;
  if (j->g->N == 1)
    o2e_gemv_run_(j->g, j->m0, j->m1, j->ws);
  else
    o2e_gemm_run_(j->g, j->m0, j->m1, j->n0, j->n1, j->ws);
}

#if O2E_THREADS > 1
static void *o2e_gemm_thread_(void *p) {
  o2e_gemm_job_run_((const o2e_gemm_job_ *)p);
  return NULL;
}
#endif

O2E_GEMM_FN void o2e_gemm_dispatch_(const o2e_gemm_args_ *g, void *workspace) {
  float *ws = (float *)workspace;
  if (g->M <= 0 || g->N <= 0) return;
  if (g->K <= 0) {
    o2e_gemm_k0_(g);
    return;
  }
#if O2E_THREADS > 1
  {
    const size_t per = o2e_ws_floats_(g->M, g->N, g->K);
    const double flops = 2.0 * g->M * g->N * g->K;
    const int panels = (g->M + O2E_GEMM_MR - 1) / O2E_GEMM_MR;
    const int npan = (g->N + O2E_GEMM_NR - 1) / O2E_GEMM_NR;
    o2e_gemm_job_ jobs[O2E_THREADS];
    pthread_t tid[O2E_THREADS];
    int started[O2E_THREADS];
    int nt = O2E_THREADS, t;
    /* Split the columns when there are enough NR panels for everyone (threads then pack
     * disjoint parts of B and share A); otherwise split the rows (each thread packs B). */
    const int split_n = g->N > 1 && npan >= 4 * nt;
    if (flops < O2E_GEMM_MT_FLOPS) nt = 1;
    if (!split_n && panels < nt) nt = panels;
    if (split_n && npan < nt) nt = npan;
    if (nt > 1) {
      for (t = 0; t < nt; t++) {
        jobs[t].g = g;
        jobs[t].ws = ws + per * (size_t)t;
        if (split_n) {
          jobs[t].m0 = 0;
          jobs[t].m1 = g->M;
          jobs[t].n0 = (int)((long)npan * t / nt) * O2E_GEMM_NR;
          jobs[t].n1 = t == nt - 1 ? g->N : (int)((long)npan * (t + 1) / nt) * O2E_GEMM_NR;
        } else {
          jobs[t].n0 = 0;
          jobs[t].n1 = g->N;
          jobs[t].m0 = (int)((long)panels * t / nt) * O2E_GEMM_MR;
          jobs[t].m1 = t == nt - 1 ? g->M : (int)((long)panels * (t + 1) / nt) * O2E_GEMM_MR;
        }
      }
      for (t = 1; t < nt; t++)
        started[t] = pthread_create(&tid[t], NULL, o2e_gemm_thread_, &jobs[t]) == 0;
      o2e_gemm_job_run_(&jobs[0]);
      for (t = 1; t < nt; t++) {
        if (started[t])
          pthread_join(tid[t], NULL);
        else
          o2e_gemm_job_run_(&jobs[t]); /* could not start a thread: do its share here */
      }
      return;
    }
  }
#endif
  {
    o2e_gemm_job_ j;
    j.g = g;
    j.m0 = 0;
    j.m1 = g->M;
    j.n0 = 0;
    j.n1 = g->N;
    j.ws = ws;
    o2e_gemm_job_run_(&j);
  }
}

/* ==== public entry points ================================================================= */
O2E_GEMM_FN void o2e_sgemm(int M, int N, int K, const float *A, int lda, const float *B, int ldb,
                           float *C, int ldc, int accumulate, const float *bias_m,
                           const float *bias_n, const float *R, int ldr, o2e_act act,
                           void *workspace) {
  o2e_gemm_args_ g;
  g.M = M;
  g.N = N;
  g.K = K;
  g.A = A;
  g.lda = lda;
  g.a_packed = 0;
  g.B = B;
  g.ldb = ldb;
  g.C = C;
  g.ldc = ldc;
  g.accumulate = accumulate;
  g.bm = bias_m;
  g.bn = bias_n;
  g.R = R;
  g.ldr = ldr;
  g.act = act;
  o2e_gemm_dispatch_(&g, workspace);
}

O2E_GEMM_FN void o2e_sgemm_packed(int M, int N, int K, const float *packed_A, const float *B,
                                  int ldb, float *C, int ldc, int accumulate,
                                  const float *bias_m, const float *bias_n, const float *R,
                                  int ldr, o2e_act act, void *workspace) {
  o2e_gemm_args_ g;
  g.M = M;
  g.N = N;
  g.K = K;
  g.A = packed_A;
  g.lda = K;
  g.a_packed = 1;
  g.B = B;
  g.ldb = ldb;
  g.C = C;
  g.ldc = ldc;
  g.accumulate = accumulate;
  g.bm = bias_m;
  g.bn = bias_n;
  g.R = R;
  g.ldr = ldr;
  g.act = act;
  o2e_gemm_dispatch_(&g, workspace);
}

#endif /* O2E_GEMM_H */
