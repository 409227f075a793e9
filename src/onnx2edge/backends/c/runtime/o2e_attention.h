/* o2e_attention.h - fused scaled-dot-product attention of float32 heads (o2e.FusedAttention,
 * passes/fuse_attention.py, ops/fused_attention.py):
 *
 *   Y[b, h] = softmax(Q[b, h] . K[b, h]^T * scale + mask[b, h]) . V[b, h]
 *
 * Why fused: Whisper-tiny's encoder has 6 heads x 1500 x 1500 scores per block (54 MB); run as
 * MatMul, Mul, Softmax, MatMul the score tensor went to memory and back three times. Here a
 * block of RB query rows of one head computes its RB x N scores, their row softmax and their
 * product with V while the block sits in the thread's L2 scratch; the full score tensor is
 * never written.
 *
 * Two steps, each a data-parallel loop (o2e_parallel_for when threaded):
 *   o2e_attention_pack (per head): K^T to [D][np] (np = N padded to a multiple of 32, zeros
 *     past N) and V to [N][ep] (ep = E padded to 16), both read in place through strides from
 *     the layout the exporter produced (Whisper / ViT: one [B, T, 3, H, D] qkv tensor, no
 *     Transpose / Split copies);
 *   o2e_attention_rows (per head x block of RB rows): scores in register tiles (broadcast one Q
 *     value, FMA it with a row of K^T), the mask added and the row maximum taken in one pass,
 *     exp(s - max) with o2e_vmath.h's vectorised exp and its sum, the unnormalised P . V in
 *     register tiles over slices of 256 keys, and 1 / sum applied when the rows are stored
 *     (to the head-merged [B, M, H, E] layout when the graph's Transpose went into the op).
 * Every loop is written over 16 lanes so the compiler vectorises it at every ISA (AVX-512,
 * AVX2 + FMA, SSE, NEON) - no intrinsics; the tile sizes are chosen per ISA below.
 *
 * NaN / Inf as onnxruntime's MatMul -> Softmax -> MatMul: a NaN score makes the row's sum, so
 * its output row, NaN; a +Inf score, or a row of only -Inf (all masked), gives NaN (Inf - Inf)
 * as onnxruntime's Softmax; a -Inf mask entry contributes exp(-Inf) = 0; NaN or Inf in V reach
 * every row (0 * Inf = NaN, as the unfused product). Differences from the unfused graph: the
 * dot products accumulate in another order and may contract (FMA), and P is normalised after
 * the product with V (one rounding moved), within verify's tolerance. */
#ifndef O2E_ATTENTION_H
#define O2E_ATTENTION_H
#include <math.h>
#include <stddef.h>
#include "o2e_vmath.h"

#if defined(__GNUC__) || defined(__clang__)
#define O2E_ATT_INL static inline __attribute__((always_inline, unused))
#define O2E_ATT_FN static __attribute__((unused))
#else
#define O2E_ATT_INL static inline
#define O2E_ATT_FN static
#endif

/* rows of a block, the register tiles of Q . K^T (TR rows x CW keys) and of P . V (PR rows x
 * 16 * k values), and the key slice of P . V that stays in L1 */
#if defined(__AVX512F__)
#define O2E_ATT_TR 8 /* 8 x 32: 16 zmm accumulators, 2 loads + 8 broadcasts per 16 FMAs */
#define O2E_ATT_PR 4 /* 4 x 64 in the widest P . V tile: 16 zmm */
#else
#define O2E_ATT_TR 4 /* 4 x 16: 8 ymm (AVX2), 16 q (NEON) accumulators */
#define O2E_ATT_PR 4
#endif
#define O2E_ATT_RB 32  /* query rows of a block: RB x np scores (Whisper: 188 KB) per thread */
#define O2E_ATT_KC 256 /* keys of one P . V slice (64 values: 64 KB of V) */
#define O2E_ATT_NP(n) (((n) + 31) / 32 * 32)
#define O2E_ATT_EP(e) (((e) + 15) / 16 * 16)
/* floats of one thread's scratch: scores, the output block, the row sums */
#define O2E_ATT_THREAD_FLOATS(n, e) \
  ((size_t)O2E_ATT_RB * O2E_ATT_NP(n) + (size_t)O2E_ATT_RB * O2E_ATT_EP(e) + O2E_ATT_RB)

typedef struct {
  const float *q, *k, *v, *mask; /* mask NULL: none */
  float *y;
  float *kt; /* [B * H][D][np] */
  float *vp; /* [B * H][N][ep] */
  float *s;  /* [threads][O2E_ATT_THREAD_FLOATS] */
  int (*thread)(void); /* o2e_parallel_thread, NULL on one thread */
  int H, M, N, D, E;
  /* element strides (floats): Q (b, h, m, d) at q_sb b + q_sh h + q_sm m + d; K (n, d) at
   * k_sn n + k_sd d (k_sd != 1: K given transposed); V (n, e) at v_sn n + e; Y likewise;
   * the mask's strides are 0 along its broadcast axes */
  ptrdiff_t q_sb, q_sh, q_sm;
  ptrdiff_t k_sb, k_sh, k_sn, k_sd;
  ptrdiff_t v_sb, v_sh, v_sn;
  ptrdiff_t m_sb, m_sh, m_sm, m_sn;
  ptrdiff_t y_sb, y_sh, y_sm;
  float scale;
} o2e_attention_args;

/* heads [h0, h1) of B * H: K^T and V packed (zero padded) */
O2E_ATT_FN void o2e_attention_pack(void *arg, int h0, int h1)
{
  const o2e_attention_args *a = (const o2e_attention_args *)arg;
  const int N = a->N, D = a->D, E = a->E, np = O2E_ATT_NP(N), ep = O2E_ATT_EP(E);
  for (int bh = h0; bh < h1; ++bh) {
    const int b = bh / a->H, h = bh % a->H;
    const float *k = a->k + b * a->k_sb + h * a->k_sh;
    const float *v = a->v + b * a->v_sb + h * a->v_sh;
    float *kt = a->kt + (size_t)bh * D * np, *vp = a->vp + (size_t)bh * N * ep;
    if (a->k_sd == 1) {
      /* K rows [N][D] -> columns: blocks of 16 keys, so each K row is read once in order */
      for (int n0 = 0; n0 < N; n0 += 16) {
        const int nn = N - n0 < 16 ? N - n0 : 16;
        for (int j = 0; j < nn; ++j) {
          const float *kr = k + (ptrdiff_t)(n0 + j) * a->k_sn;
          for (int d = 0; d < D; ++d) kt[(size_t)d * np + n0 + j] = kr[d];
        }
      }
    } else {
      for (int d = 0; d < D; ++d)
        for (int n = 0; n < N; ++n) kt[(size_t)d * np + n] = k[(ptrdiff_t)n * a->k_sn + d * a->k_sd];
    }
    for (int d = 0; d < D; ++d)
      for (int n = N; n < np; ++n) kt[(size_t)d * np + n] = 0.0f;
    for (int n = 0; n < N; ++n) {
      const float *vr = v + (ptrdiff_t)n * a->v_sn;
      float *o = vp + (size_t)n * ep;
      for (int e = 0; e < E; ++e) o[e] = vr[e];
      for (int e = E; e < ep; ++e) o[e] = 0.0f;
    }
  }
}

/* S[r][j0 .. j0 + CW) = Q[r] . K^T[:, j0 ..] * scale for TR rows (rows past nr repeat the last
 * one and are not stored) */
O2E_ATT_INL void o2e_att_qk_tile(const int TR, const int CW, const float *q, ptrdiff_t q_sm,
    int nr, const float *kt, int np, int D, float scale, float *s, int ldS)
{
  float acc[O2E_ATT_TR][32];
  const float *qr[O2E_ATT_TR];
  for (int r = 0; r < TR; ++r) {
    qr[r] = q + (ptrdiff_t)(r < nr ? r : nr - 1) * q_sm;
    for (int l = 0; l < CW; ++l) acc[r][l] = 0.0f;
  }
  for (int d = 0; d < D; ++d) {
    const float *restrict kr = kt + (size_t)d * np;
    for (int r = 0; r < TR; ++r) {
      const float qv = qr[r][d];
      for (int l = 0; l < CW; ++l) acc[r][l] += qv * kr[l];
    }
  }
  for (int r = 0; r < TR; ++r)
    if (r < nr)
      for (int l = 0; l < CW; ++l) s[(size_t)r * ldS + l] = acc[r][l] * scale;
}

/* O[r][e0 .. e0 + EW) += P[r][j0 .. j1) . V[j0 .. j1][e0 ..] for PR rows */
O2E_ATT_INL void o2e_att_pv_tile(const int PR, const int EW, const float *p, int ldP, int nr,
    const float *vp, int ep, int j0, int j1, float *o, int ldO)
{
  float acc[O2E_ATT_PR][64];
  const float *pr[O2E_ATT_PR];
  for (int r = 0; r < PR; ++r) {
    const int rr = r < nr ? r : nr - 1;
    pr[r] = p + (size_t)rr * ldP;
    for (int l = 0; l < EW; ++l) acc[r][l] = o[(size_t)rr * ldO + l];
  }
  for (int j = j0; j < j1; ++j) {
    const float *restrict vr = vp + (size_t)j * ep;
    for (int r = 0; r < PR; ++r) {
      const float pv = pr[r][j];
      for (int l = 0; l < EW; ++l) acc[r][l] += pv * vr[l];
    }
  }
  for (int r = 0; r < PR; ++r)
    if (r < nr)
      for (int l = 0; l < EW; ++l) o[(size_t)r * ldO + l] = acc[r][l];
}

/* the row softmax of n scores in place, unnormalised: s[j] = exp(s[j] (+ mask[j]) - max);
 * returns 1 / sum (NaN when the row holds a NaN, a +Inf or only -Inf, as onnxruntime) */
O2E_ATT_INL float o2e_att_softmax_row(float *restrict s, int n, const float *mask, ptrdiff_t m_sn)
{
  const int n16 = n - n % 16;
  float m[16], t[16], mx = -INFINITY;
  double sum = 0.0;
  int j, l;
  if (mask && m_sn == 1)
    for (j = 0; j < n; ++j) s[j] += mask[j];
  else if (mask)
    for (j = 0; j < n; ++j) s[j] += mask[(ptrdiff_t)j * m_sn];
  for (l = 0; l < 16; ++l) m[l] = -INFINITY;
  for (j = 0; j < n16; j += 16)
#pragma GCC unroll 1
    for (l = 0; l < 16; ++l) m[l] = s[j + l] > m[l] ? s[j + l] : m[l];
  for (l = 0; l < 16; ++l) mx = m[l] > mx ? m[l] : mx;
  for (j = n16; j < n; ++j) mx = s[j] > mx ? s[j] : mx;
  for (l = 0; l < 16; ++l) t[l] = 0.0f;
  for (j = 0; j < n16; j += 16)
    for (l = 0; l < 16; ++l) {
      const float e = o2e_expf(s[j + l] - mx);
      s[j + l] = e;
      t[l] += e;
    }
  for (j = n16; j < n; ++j) {
    s[j] = o2e_expf(s[j] - mx);
    sum += s[j];
  }
  for (l = 0; l < 16; ++l) sum += t[l];
  return (float)(1.0 / sum);
}

/* work items [i0, i1) of B * H * ceil(M / RB): one block of query rows of one head each */
O2E_ATT_FN void o2e_attention_rows(void *arg, int i0, int i1)
{
  const o2e_attention_args *a = (const o2e_attention_args *)arg;
  const int N = a->N, D = a->D, E = a->E, np = O2E_ATT_NP(N), ep = O2E_ATT_EP(E);
  const int nblk = (a->M + O2E_ATT_RB - 1) / O2E_ATT_RB;
  float *S = a->s + (size_t)(a->thread ? a->thread() : 0) * O2E_ATT_THREAD_FLOATS(N, E);
  float *O = S + (size_t)O2E_ATT_RB * np, *inv = O + (size_t)O2E_ATT_RB * ep;
  for (int it = i0; it < i1; ++it) {
    const int bh = it / nblk, b = bh / a->H, h = bh % a->H;
    const int r0 = it % nblk * O2E_ATT_RB;
    const int nr = a->M - r0 < O2E_ATT_RB ? a->M - r0 : O2E_ATT_RB;
    const float *q = a->q + b * a->q_sb + h * a->q_sh + (ptrdiff_t)r0 * a->q_sm;
    const float *kt = a->kt + (size_t)bh * D * np, *vp = a->vp + (size_t)bh * N * ep;
    /* scores: key panels outermost, so a D x 32 panel of K^T stays in L1 across the rows */
    for (int j = 0; j < np; j += 32)
      for (int r = 0; r < nr; r += O2E_ATT_TR) {
        const int m = nr - r < O2E_ATT_TR ? nr - r : O2E_ATT_TR;
#if defined(__AVX512F__)
        o2e_att_qk_tile(O2E_ATT_TR, 32, q + (ptrdiff_t)r * a->q_sm, a->q_sm, m, kt + j, np, D,
            a->scale, S + (size_t)r * np + j, np);
#else
        o2e_att_qk_tile(O2E_ATT_TR, 16, q + (ptrdiff_t)r * a->q_sm, a->q_sm, m, kt + j, np, D,
            a->scale, S + (size_t)r * np + j, np);
        o2e_att_qk_tile(O2E_ATT_TR, 16, q + (ptrdiff_t)r * a->q_sm, a->q_sm, m, kt + j + 16, np,
            D, a->scale, S + (size_t)r * np + j + 16, np);
#endif
      }
    for (int r = 0; r < nr; ++r) {
      const float *mrow =
          a->mask ? a->mask + b * a->m_sb + h * a->m_sh + (ptrdiff_t)(r0 + r) * a->m_sm : NULL;
      inv[r] = o2e_att_softmax_row(S + (size_t)r * np, N, mrow, a->m_sn);
    }
    for (size_t i = 0; i < (size_t)nr * ep; ++i) O[i] = 0.0f;
    for (int j0 = 0; j0 < N; j0 += O2E_ATT_KC) {
      const int j1 = N - j0 < O2E_ATT_KC ? N : j0 + O2E_ATT_KC;
      for (int r = 0; r < nr; r += O2E_ATT_PR) {
        const int m = nr - r < O2E_ATT_PR ? nr - r : O2E_ATT_PR;
        const float *p = S + (size_t)r * np;
        float *o = O + (size_t)r * ep;
        int e = 0;
#if defined(__AVX512F__) /* 16 and 8 zmm accumulators; 4 x 16 elsewhere (8 ymm, 16 q) */
        for (; e + 64 <= ep; e += 64)
          o2e_att_pv_tile(O2E_ATT_PR, 64, p, np, m, vp + e, ep, j0, j1, o + e, ep);
        for (; e + 32 <= ep; e += 32)
          o2e_att_pv_tile(O2E_ATT_PR, 32, p, np, m, vp + e, ep, j0, j1, o + e, ep);
#endif
        for (; e < ep; e += 16)
          o2e_att_pv_tile(O2E_ATT_PR, 16, p, np, m, vp + e, ep, j0, j1, o + e, ep);
      }
    }
    for (int r = 0; r < nr; ++r) {
      float *y = a->y + b * a->y_sb + h * a->y_sh + (ptrdiff_t)(r0 + r) * a->y_sm;
      const float c = inv[r], *o = O + (size_t)r * ep;
      for (int e = 0; e < E; ++e) y[e] = o[e] * c;
    }
  }
}

#endif /* O2E_ATTENTION_H */
