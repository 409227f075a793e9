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
 *   o2e_attention_pack (per head): K^T to panels [np / 32][D][32] (np = N padded to a
 *     multiple of 32, zeros past N) and, unless V's rows are whole P . V tiles ep floats
 *     apart already, V to [N][ep] (zero padded), both read
 *     through strides from the layout the exporter produced (Whisper / ViT: one [B, T, 3, H, D]
 *     qkv tensor, no Transpose / Split copies; Q is read there in place);
 *   o2e_attention_rows (per head x block of RB rows): scores in register tiles (broadcast one Q
 *     value, FMA it with a row of K^T), the mask added and the row maximum taken in one pass,
 *     exp(s - max) as a vectorised 2^x of log2-unit scores and its sum, the unnormalised P . V in
 *     register tiles over slices of 256 keys, and 1 / sum applied when the rows are stored
 *     (to the head-merged [B, M, H, E] layout when the graph's Transpose went into the op).
 *     Without a mask the row maxima are taken lane-wise as the score tiles leave the registers
 *     (no separate pass over the RB x N block); the scores are kept in log2 units so the
 *     exp runs as o2e_att_exp2neg (2^x, x <= 0 only).
 * No intrinsics: the tiles are on GNU vector types of the build's width, the softmax loops over
 * 16 lanes the compiler vectorises (AVX-512, AVX2 + FMA, SSE, NEON).
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
#include <string.h>
#include "o2e_vmath.h"

#if defined(__GNUC__) || defined(__clang__)
#define O2E_ATT_INL static inline __attribute__((always_inline, unused))
#define O2E_ATT_FN static __attribute__((unused))
#else
#define O2E_ATT_INL static inline
#define O2E_ATT_FN static
#endif

/* The register tiles, on GNU vector types of the build's width (no intrinsics: one source for
 * AVX-512, AVX2, SSE and NEON; plain floats elsewhere): Q . K^T is TR rows x NK vectors of keys
 * (broadcast one Q value, FMA it with NK vectors of a K^T row), P . V is PR rows x NV vectors of
 * values. Written as auto-vectorised float loops the tiles went through the stack at AVX2.
 * AVX-512: 8 x 32 and 8 x 32 (16 zmm accumulators each, 2 loads + 8 broadcasts per 16 FMAs);
 * AVX2: 6 x 16 (12 ymm); NEON: 6 x 16 (24 q); SSE: 4 x 8. RB query rows a block (a multiple
 * of TR and PR): their RB x np scores (Whisper: 188 KB) stay in the thread's L2.
 * O2E_ATT_SCALAR: the plain-float tiles on any host (tests run them). */
#if defined(O2E_ATT_SCALAR)
#define O2E_ATT_VW 1
#define O2E_ATT_TR 4
#define O2E_ATT_NK 4
#define O2E_ATT_PR 4
#define O2E_ATT_NV 4
#define O2E_ATT_RB 32
#elif (defined(__GNUC__) || defined(__clang__)) && defined(__AVX512F__)
#define O2E_ATT_VW 16
#define O2E_ATT_TR 8
#define O2E_ATT_NK 2
#define O2E_ATT_PR 8
#define O2E_ATT_NV 2
#define O2E_ATT_RB 32
#elif (defined(__GNUC__) || defined(__clang__)) && defined(__AVX__)
#define O2E_ATT_VW 8
#define O2E_ATT_TR 6
#define O2E_ATT_NK 2
#define O2E_ATT_PR 6
#define O2E_ATT_NV 2
#define O2E_ATT_RB 24
#elif (defined(__GNUC__) || defined(__clang__)) && defined(__ARM_NEON) && defined(__aarch64__)
#define O2E_ATT_VW 4
#define O2E_ATT_TR 6
#define O2E_ATT_NK 4
#define O2E_ATT_PR 6
#define O2E_ATT_NV 4
#define O2E_ATT_RB 24
#elif (defined(__GNUC__) || defined(__clang__)) && defined(__SSE2__)
#define O2E_ATT_VW 4
#define O2E_ATT_TR 4
#define O2E_ATT_NK 2
#define O2E_ATT_PR 4
#define O2E_ATT_NV 2
#define O2E_ATT_RB 32
#else
#define O2E_ATT_VW 1 /* plain floats */
#define O2E_ATT_TR 4
#define O2E_ATT_NK 4
#define O2E_ATT_PR 4
#define O2E_ATT_NV 4
#define O2E_ATT_RB 32
#endif
#if O2E_ATT_VW > 1
typedef float o2e_attv __attribute__((vector_size(4 * O2E_ATT_VW)));
typedef int o2e_atti __attribute__((vector_size(4 * O2E_ATT_VW)));
/* a > b ? a : b lane-wise (a NaN a gives b, as the scalar form) */
#define O2E_ATT_VMAX(a, b) \
  ((o2e_attv)((((o2e_atti)(a)) & ((a) > (b))) | (((o2e_atti)(b)) & ~((a) > (b)))))
#else
typedef float o2e_attv;
#define O2E_ATT_VMAX(a, b) ((a) > (b) ? (a) : (b))
#endif
#define O2E_ATT_KW (O2E_ATT_NK * O2E_ATT_VW) /* keys of a Q . K^T tile */
#define O2E_ATT_EW (O2E_ATT_NV * O2E_ATT_VW) /* values of a P . V tile */
#define O2E_ATT_KC 256 /* keys of one P . V slice (64 values: 64 KB of V) */
/* the conversion sizes the scratch for every build: np a multiple of 32 >= every KW, ep of
 * at most 32 >= every EW, RB at most 32 */
#define O2E_ATT_NP(n) (((n) + 31) / 32 * 32)
#define O2E_ATT_EP(e) (((e) + O2E_ATT_EW - 1) / O2E_ATT_EW * O2E_ATT_EW)
/* floats of one thread's scratch: scores, the output block, the row sums */
#define O2E_ATT_THREAD_FLOATS(n, d, e) \
  ((size_t)O2E_ATT_RB * (O2E_ATT_NP(n) + O2E_ATT_EP(e) + 1 + (d)))

/* K^T packed panel-major, [np / KP][D][KP]: the D x KP panel a Q . K^T tile reads is one
 * contiguous 8 KB (D = 64) instead of D rows np floats apart (Whisper: 64 rows 6 KB apart, a
 * page each: TLB misses on every tile). KP = 32, a multiple of every build's KW. */
#define O2E_ATT_KP 32
#define O2E_ATT_KT(D, d, n) \
  (((size_t)(n) / O2E_ATT_KP * (size_t)(D) + (size_t)(d)) * O2E_ATT_KP + (size_t)(n) % O2E_ATT_KP)
/* V packed to [N][ep] unless its rows are whole P . V tiles ep floats apart already: read in
 * place through the packed qkv tensor (Whisper: rows 4.5 KB apart) a 256-key slice spanned
 * 1.1 MB and a page per key */
#define O2E_ATT_VPACK(a, ep) ((a)->E % O2E_ATT_EW != 0 || (a)->v_sn != (ep))
typedef struct {
  const float *q, *k, *v, *mask; /* mask NULL: none */
  float *y;
  float *kt; /* [B * H][np / KP][D][KP] */
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
      /* K rows [N][D] -> one panel of KP keys at a time: their KP rows stay in L1 while
       * each panel row gets KP contiguous values */
      for (int n0 = 0; n0 < N; n0 += O2E_ATT_KP) {
        const int nn = N - n0 < O2E_ATT_KP ? N - n0 : O2E_ATT_KP;
        const float *k0 = k + (ptrdiff_t)n0 * a->k_sn;
        float *o = kt + O2E_ATT_KT(D, 0, n0);
        for (int d = 0; d < D; ++d, o += O2E_ATT_KP)
          for (int j = 0; j < nn; ++j) o[j] = k0[(ptrdiff_t)j * a->k_sn + d];
      }
    } else {
      for (int d = 0; d < D; ++d)
        for (int n = 0; n < N; ++n)
          kt[O2E_ATT_KT(D, d, n)] = k[(ptrdiff_t)n * a->k_sn + d * a->k_sd];
    }
    for (int d = 0; d < D; ++d)
      for (int n = N; n < np; ++n) kt[O2E_ATT_KT(D, d, n)] = 0.0f;
    for (int n = 0; n < N && O2E_ATT_VPACK(a, ep); ++n) { /* else P . V reads V in place */
      const float *vr = v + (ptrdiff_t)n * a->v_sn;
      float *o = vp + (size_t)n * ep;
      for (int e = 0; e < E; ++e) o[e] = vr[e];
      for (int e = E; e < ep; ++e) o[e] = 0.0f;
    }
  }
}

O2E_ATT_INL o2e_attv o2e_att_load(const float *p)
{
  o2e_attv v;
  memcpy(&v, p, sizeof v);
  return v;
}

/* S[r][j .. j + KW) = Q[r] . K^T[:, j ..] * scale for TR rows, Q packed k-major [D][TR]
 * (only the first nr rows stored) */
O2E_ATT_INL void o2e_att_qk(const float *qp, int nr, const float *kt, int ldK, int D, float scale,
    float *s, int ldS, float *rmax)
{
  const o2e_attv zero = {0.0f};
  o2e_attv acc[O2E_ATT_TR][O2E_ATT_NK];
  int r, n;
  for (r = 0; r < O2E_ATT_TR; ++r)
    for (n = 0; n < O2E_ATT_NK; ++n) acc[r][n] = zero;
  for (int d = 0; d < D; ++d) {
    const float *kr = kt + (size_t)d * ldK;
    o2e_attv kv[O2E_ATT_NK];
    for (n = 0; n < O2E_ATT_NK; ++n) kv[n] = o2e_att_load(kr + n * O2E_ATT_VW);
    for (r = 0; r < O2E_ATT_TR; ++r) {
      const float q = qp[d * O2E_ATT_TR + r];
      for (n = 0; n < O2E_ATT_NK; ++n) acc[r][n] += q * kv[n];
    }
  }
  for (r = 0; r < nr; ++r)
    for (n = 0; n < O2E_ATT_NK; ++n) {
      acc[r][n] *= scale;
      memcpy(s + (size_t)r * ldS + n * O2E_ATT_VW, &acc[r][n], sizeof acc[r][n]);
    }
  /* the row maxima of whole tiles of keys, lane-wise (rmax [TR][VW]): a NaN score does not move
   * them (as the row pass: s > m ? s : m) */
  for (r = 0; r < nr && rmax; ++r) {
    o2e_attv mx = o2e_att_load(rmax + r * O2E_ATT_VW);
    for (n = 0; n < O2E_ATT_NK; ++n) mx = O2E_ATT_VMAX(acc[r][n], mx);
    memcpy(rmax + r * O2E_ATT_VW, &mx, sizeof mx);
  }
}

/* O[r][e .. e + EW) += P[r][j0 .. j1) . V[j0 .. j1][e ..] for PR rows (rows past nr repeat the
 * last one and are not stored) */
O2E_ATT_INL void o2e_att_pv(const float *p, int ldP, int nr, const float *vp, ptrdiff_t ldV, int j0,
    int j1, float *o, int ldO)
{
  o2e_attv acc[O2E_ATT_PR][O2E_ATT_NV];
  const float *pr[O2E_ATT_PR];
  int r, n;
  for (r = 0; r < O2E_ATT_PR; ++r) {
    const int rr = r < nr ? r : nr - 1;
    pr[r] = p + (size_t)rr * ldP;
    for (n = 0; n < O2E_ATT_NV; ++n) acc[r][n] = o2e_att_load(o + (size_t)rr * ldO + n * O2E_ATT_VW);
  }
  for (int j = j0; j < j1; ++j) {
    const float *vr = vp + (ptrdiff_t)j * ldV;
    o2e_attv vv[O2E_ATT_NV];
    for (n = 0; n < O2E_ATT_NV; ++n) vv[n] = o2e_att_load(vr + n * O2E_ATT_VW);
    for (r = 0; r < O2E_ATT_PR; ++r) {
      const float pj = pr[r][j];
      for (n = 0; n < O2E_ATT_NV; ++n) acc[r][n] += pj * vv[n];
    }
  }
  for (r = 0; r < nr; ++r)
    for (n = 0; n < O2E_ATT_NV; ++n)
      memcpy(o + (size_t)r * ldO + n * O2E_ATT_VW, &acc[r][n], sizeof acc[r][n]);
}

/* 2^x for the softmax's x = s - max <= 0 with the scores in log2 units (the Q . K^T tiles
 * scale by scale * log2(e), the mask is added times log2(e)), -Inf or NaN: x = n + r, n an
 * integer, r in [-1/2, 1/2] exact (no ln 2 reduction), a degree-6 minimax polynomial of 2^r
 * (c0 = 1; relative error 2e-9 in exact arithmetic), 2^n from n's bits. For x < -126.5 it gives
 * 0 (n = -127 makes 2^n's bits 0; -Inf included), true values below 2^-126, a 2^-126 absolute
 * error against a row sum >= 1; NaN stays NaN. Measured above 2^-126: 0.90 ulp with FMA, 1.13
 * without (x86-64-v2); test_c_fused_attention.py holds 2 ulps at every ISA. About 15 vector
 * operations an element where the natural-base exp (ln 2 in two parts, 2^n as two factors)
 * took 21: the exp pass was about a seventh of Whisper's attention (1500 keys a row). The one
 * more rounding (scale * log2(e)) moves a score by 2^-24 of itself, as the scale's own; a
 * score above 2.4e38 (FLT_MAX / log2(e)) overflows to +Inf here (its row NaN) where the
 * natural-base softmax kept it finite. */
#define O2E_ATT_LOG2E 1.44269504088896341f
O2E_ATT_INL float o2e_att_exp2neg(float x)
{
  const float shift = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
  const float xc = x < -127.0f ? -127.0f : x;
  const float kf = xc + shift;
  const float r = xc - (kf - shift);
  float p = 1.5353361960e-4f;
  p = p * r + 1.3398875017e-3f;
  p = p * r + 9.6184369177e-3f;
  p = p * r + 5.5503323674e-2f;
  p = p * r + 2.4022647738e-1f;
  p = p * r + 6.9314718246e-1f;
  p = p * r + 1.0f;
  /* the low bits of kf hold n + 2^22 (n in [-127, 0]); the shift drops the rest */
  return p * o2e_vm_asf((o2e_vm_asu(kf) + (uint32_t)(127 - 0x400000)) << 23);
}

/* a mask value in log2 units: m log2(e), a finite m kept finite. HF's additive mask is float32's
 * finite minimum; times log2(e) it would be -Inf, and a row masked whole with it NaN (-Inf -
 * -Inf) where onnxruntime's is uniform (every score rounds to the same -3.4e38). An infinite
 * or NaN m stays itself. */
O2E_ATT_INL float o2e_att_mask2(float m)
{
  const float t = m * O2E_ATT_LOG2E;
  const float lo = t < -3.40282347e38f ? -3.40282347e38f : t;
  const float c = lo > 3.40282347e38f ? 3.40282347e38f : lo;
  return m < -3.40282347e38f || m > 3.40282347e38f ? m : c;
}

/* the row softmax of n scores (log2 units) in place, unnormalised:
 * s[j] = 2^(s[j] (+ mask[j] log2(e)) - max);
 * returns 1 / sum (NaN when the row holds a NaN, a +Inf or only -Inf, as onnxruntime) */
O2E_ATT_INL float o2e_att_softmax_row(float *restrict s, int n, const float *mask, ptrdiff_t m_sn,
    const float *vmax, int nmax)
{
  const int n16 = n - n % 16;
  float m[16], t[16], mx = -INFINITY;
  double sum = 0.0;
  int j, l;
  if (mask && m_sn == 1)
    for (j = 0; j < n; ++j) s[j] += o2e_att_mask2(mask[j]);
  else if (mask)
    for (j = 0; j < n; ++j) s[j] += o2e_att_mask2(mask[(ptrdiff_t)j * m_sn]);
  if (vmax) { /* no mask: the maxima of the first nmax scores came with them */
    for (l = 0; l < O2E_ATT_VW; ++l) mx = vmax[l] > mx ? vmax[l] : mx;
    for (j = nmax; j < n; ++j) mx = s[j] > mx ? s[j] : mx;
  } else {
    for (l = 0; l < 16; ++l) m[l] = -INFINITY;
    for (j = 0; j < n16; j += 16)
#pragma GCC unroll 1
      for (l = 0; l < 16; ++l) m[l] = s[j + l] > m[l] ? s[j + l] : m[l];
    for (l = 0; l < 16; ++l) mx = m[l] > mx ? m[l] : mx;
    for (j = n16; j < n; ++j) mx = s[j] > mx ? s[j] : mx;
  }
  for (l = 0; l < 16; ++l) t[l] = 0.0f;
  for (j = 0; j < n16; j += 16)
    for (l = 0; l < 16; ++l) {
      const float e = o2e_att_exp2neg(s[j + l] - mx);
      s[j + l] = e;
      t[l] += e;
    }
  for (j = n16; j < n; ++j) {
    s[j] = o2e_att_exp2neg(s[j] - mx);
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
  float *S = a->s + (size_t)(a->thread ? a->thread() : 0) * O2E_ATT_THREAD_FLOATS(N, D, E);
  float *O = S + (size_t)O2E_ATT_RB * np, *inv = O + (size_t)O2E_ATT_RB * ep, *QP = inv + O2E_ATT_RB;
  float VM[O2E_ATT_RB * O2E_ATT_VW]; /* lane-wise row maxima */
  for (int it = i0; it < i1; ++it) {
    const int bh = it / nblk, b = bh / a->H, h = bh % a->H;
    const int r0 = it % nblk * O2E_ATT_RB;
    const int nr = a->M - r0 < O2E_ATT_RB ? a->M - r0 : O2E_ATT_RB;
    const float *q = a->q + b * a->q_sb + h * a->q_sh + (ptrdiff_t)r0 * a->q_sm;
    const float *kt = a->kt + (size_t)bh * D * np;
    /* V in place when its rows are whole tiles already contiguous, else packed */
    const int vpk = O2E_ATT_VPACK(a, ep);
    const float *vp = vpk ? a->vp + (size_t)bh * N * ep : a->v + b * a->v_sb + h * a->v_sh;
    const ptrdiff_t ldV = vpk ? ep : a->v_sn;
    /* scores: key panels outermost, so a D x 32 panel of K^T (contiguous) stays in L1 across
     * the rows */
    /* the block's Q rows k-major in groups of TR ([r / TR][d][TR]): one pointer feeds the
     * broadcasts */
    for (int r = 0; r < (nr + O2E_ATT_TR - 1) / O2E_ATT_TR * O2E_ATT_TR; ++r) {
      const float *qr = q + (ptrdiff_t)(r < nr ? r : nr - 1) * a->q_sm;
      float *qp = QP + (size_t)(r / O2E_ATT_TR) * D * O2E_ATT_TR + r % O2E_ATT_TR;
      for (int d = 0; d < D; ++d) qp[d * O2E_ATT_TR] = qr[d];
    }
    /* scores in log2 units: the softmax's exp is 2^x (o2e_att_exp2neg) */
    const float scale2 = a->scale * O2E_ATT_LOG2E;
    /* the row maxima ride along with the scores of whole key tiles when there is no mask */
    const int nmax = a->mask ? 0 : N / O2E_ATT_KW * O2E_ATT_KW;
    for (size_t i = 0; i < (size_t)O2E_ATT_RB * O2E_ATT_VW; ++i) VM[i] = -INFINITY;
    for (int j = 0; j < np; j += O2E_ATT_KW)
      for (int r = 0; r < nr; r += O2E_ATT_TR) {
        const int m = nr - r < O2E_ATT_TR ? nr - r : O2E_ATT_TR;
        const float *qp = QP + (size_t)r * D, *kp = kt + O2E_ATT_KT(D, 0, j);
        float *sp = S + (size_t)r * np + j, *vm = VM + (size_t)r * O2E_ATT_VW;
        /* a whole tile with the maxima its own inlined copy: the constant row count lets
         * the tile leave from its registers (with a runtime count gcc spilled all 16) */
        if (m == O2E_ATT_TR && j < nmax)
          o2e_att_qk(qp, O2E_ATT_TR, kp, O2E_ATT_KP, D, scale2, sp, np, vm);
        else
          o2e_att_qk(qp, m, kp, O2E_ATT_KP, D, scale2, sp, np, j < nmax ? vm : NULL);
      }
    for (int r = 0; r < nr; ++r) {
      const float *mrow =
          a->mask ? a->mask + b * a->m_sb + h * a->m_sh + (ptrdiff_t)(r0 + r) * a->m_sm : NULL;
      inv[r] = o2e_att_softmax_row(S + (size_t)r * np, N, mrow, a->m_sn,
          a->mask ? NULL : VM + (size_t)r * O2E_ATT_VW, nmax);
    }
    for (size_t i = 0; i < (size_t)nr * ep; ++i) O[i] = 0.0f;
    for (int j0 = 0; j0 < N; j0 += O2E_ATT_KC) {
      const int j1 = N - j0 < O2E_ATT_KC ? N : j0 + O2E_ATT_KC;
      for (int r = 0; r < nr; r += O2E_ATT_PR) {
        const int m = nr - r < O2E_ATT_PR ? nr - r : O2E_ATT_PR;
        const float *p = S + (size_t)r * np;
        float *o = O + (size_t)r * ep;
        for (int e = 0; e < ep; e += O2E_ATT_EW)
          if (m == O2E_ATT_PR) /* as above */
            o2e_att_pv(p, np, O2E_ATT_PR, vp + e, ldV, j0, j1, o + e, ep);
          else
            o2e_att_pv(p, np, m, vp + e, ldV, j0, j1, o + e, ep);
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
