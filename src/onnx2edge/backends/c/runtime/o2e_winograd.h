/* o2e_winograd.h - Winograd F(2x2,3x3) and F(4x4,3x3) convolution kernels (kernels/conv/winograd.py).
 * Static C moved out of kernels/conv/winograd.py (issue 32): the generated model.c includes it
 * where a Winograd Conv needs it (backends/c/headers.py); it compiles on its own.
 *
 * Per output tile y = A^T [(G g G^T) . (B^T d B)] A. The filter transform U = G g G^T is done at
 * conversion time (winograd.transform_weights); here are the input transform (B^T d B), the
 * output transform (A^T M A + bias, residual, activation), the direct computation of the tiles
 * that read NaN / Inf, and the drivers that chain them with the (m + 2)^2 packed GEMMs of
 * o2e_gemm.h. One specialised function per tile size m: the transforms are straight-line code
 * of B^T and A^T's small-integer entries for winograd.matrices(m) (points 0, 1, -1 and infinity
 * for F(2x2); 0, 1, -1, -1/2, 2 and infinity for F(4x4)), and the inversion of G in the direct
 * tiles is winograd.py's too: tests/test_c_winograd.py checks these against matrices(m)
 * numerically (the kernels alone in a harness, and whole models against onnxruntime).
 * Tiles are transformed in chunks of 16 (a constant trip count gcc vectorises without a run-time
 * profitability check; winograd.VEC). */
#ifndef O2E_WINOGRAD_H
#define O2E_WINOGRAD_H
#include <stddef.h>
#include <stdint.h>
#include "o2e_gemm.h"

/* O2E_IVDEP asserts that a loop has no loop-carried memory dependence, so the compiler
 * vectorises it without run-time overlap checks between the many rows one pointer addresses
 * (gcc gives up past 10 such checks). O2E_PREFETCH asks for a cache line ahead of its use.
 * Compilers that know neither get nothing. */
#ifndef O2E_IVDEP
#if defined(__clang__)
#define O2E_IVDEP _Pragma("clang loop vectorize(assume_safety)")
#elif defined(__GNUC__)
#define O2E_IVDEP _Pragma("GCC ivdep")
#else
#define O2E_IVDEP
#endif
#endif
#ifndef O2E_PREFETCH
#if defined(__GNUC__)
#define O2E_PREFETCH(p) __builtin_prefetch(p)
#define O2E_PREFETCH_W(p) __builtin_prefetch(p, 1)
#else
#define O2E_PREFETCH(p) ((void)(p))
#define O2E_PREFETCH_W(p) ((void)(p))
#endif
#endif

/* Tiles whose input holds NaN / Inf are recomputed directly (winograd.py, DIRECT): the 3x3
 * weights are recovered from the packed U[k], and a non-finite input is multiplied by its
 * weight's sign (or 0), as the exact product. */
typedef struct {
  const float *x, *u;         /* one image [C][H][W]; the packed U[k] (MR = 8 rows per panel), */
  const uint8_t *nz, *neg;    /* bits of the 3x3 weights [M][C][3][3]: nonzero, negative */
  size_t us;                  /* floats between the U[k] */
  int C, H, W, pt, pl, o0;    /* o0: the first output channel of the caller's range */
} o2e_wino_direct;

/* One block's transforms, split by channel across threads (each in its own e / rb slot). */
typedef struct {
  const float *x;
  int C, H, W, pt, pl, row0, nth, TW, ld;
  size_t vs, ms;
  float *e;
  size_t e_slot;
  float *rb;
  size_t rb_slot;
  float *v, *mm;
  int M, OH, OW;
  const float *bias, *res;
  float *y;
  o2e_act act;
  const float *u; /* for the tiles computed directly: the packed U[k], us floats apart, */
  size_t us;
  const uint8_t *nz, *neg; /* and the bits of the 3x3 weights */
} o2e_wino_tr_args;

/* Outputs [r0, r0+2) x [q0, q0+2) (clipped to OH x OW) of output channel o (of d's range), the
 * 3x3 window over the zero-padded input directly, + bias, + residual, activation (the output
 * transform's kinds): a tile that read NaN / Inf. Weights recovered from the packed U (see
 * winograd.py, DIRECT); a non-finite input is multiplied by its weight's sign, or 0. */
O2E_GEMM_FN void o2e_winograd_f2_direct(const o2e_wino_direct *d, int o, int r0, int q0, int OH, int OW, float b,
    const float *restrict res, float *restrict y, o2e_act act)
{
  const int og = d->o0 + o;
  const size_t base = (size_t)(og / 8) * d->C * 8 + (size_t)(og % 8);
  float acc[4];
  for (int p = 0; p < 4; ++p) acc[p] = 0.0f;
  for (int c = 0; c < d->C; ++c) {
    const float *uc = d->u + base + (size_t)c * 8;
    const float *xc = d->x + (size_t)c * d->H * d->W;
    const size_t w0 = ((size_t)og * d->C + (size_t)c) * 9;
    float gw[9];
    const float u0_0 = uc[0 * d->us];
    const float u0_1 = uc[1 * d->us];
    const float u0_2 = uc[3 * d->us];
    const float u1_0 = uc[4 * d->us];
    const float u1_1 = uc[5 * d->us];
    const float u1_2 = uc[7 * d->us];
    const float u2_0 = uc[12 * d->us];
    const float u2_1 = uc[13 * d->us];
    const float u2_2 = uc[15 * d->us];
    const float t0_0 = -u0_0;
    const float t0_1 = -u0_1;
    const float t0_2 = -u0_2;
    const float t1_0 = u0_0 + 2.0f * u1_0 - u2_0;
    const float t1_1 = u0_1 + 2.0f * u1_1 - u2_1;
    const float t1_2 = u0_2 + 2.0f * u1_2 - u2_2;
    const float t2_0 = u2_0;
    const float t2_1 = u2_1;
    const float t2_2 = u2_2;
    gw[0] = -t0_0;
    gw[1] = t0_0 + 2.0f * t0_1 - t0_2;
    gw[2] = t0_2;
    gw[3] = -t1_0;
    gw[4] = t1_0 + 2.0f * t1_1 - t1_2;
    gw[5] = t1_2;
    gw[6] = -t2_0;
    gw[7] = t2_0 + 2.0f * t2_1 - t2_2;
    gw[8] = t2_2;
    for (int a = 0; a < 2 && r0 + a < OH; ++a)
      for (int e = 0; e < 2 && q0 + e < OW; ++e) {
        float s = 0.0f;
        for (int i = 0; i < 3; ++i) {
          const int ih = r0 + a - d->pt + i;
          if (ih < 0 || ih >= d->H) continue;
          for (int j = 0; j < 3; ++j) {
            const int iw = q0 + e - d->pl + j;
            const size_t bit = w0 + (size_t)(i * 3 + j);
            float xv, wv;
            if (iw < 0 || iw >= d->W) continue;
            xv = xc[(size_t)ih * d->W + iw];
            if (xv - xv == 0.0f) wv = gw[i * 3 + j];
            else if (d->nz[bit >> 3] >> (bit & 7) & 1) wv = (d->neg[bit >> 3] >> (bit & 7) & 1) ? -1.0f : 1.0f;
            else wv = 0.0f;
            s += wv * xv;
          }
        }
        acc[a * 2 + e] += s;
      }
  }
  for (int a = 0; a < 2 && r0 + a < OH; ++a)
    for (int e = 0; e < 2 && q0 + e < OW; ++e) {
      const size_t at = (size_t)(r0 + a) * OW + (size_t)(q0 + e);
      float v = acc[a * 2 + e] + b;
      if (res) v += res[at];
      switch (act.kind) {
      case 1: v = v < 0.0f ? 0.0f : v; break;
      case 2: v = v < act.a ? act.a : v; v = v > act.b ? act.b : v; break;
      case 3: v = v < 0.0f ? v * act.a : v; break;
      default: v = o2e_act1_(v, act); break; /* HardSigmoid, HardSwish, o2e_vmath.h kinds */
      }
      y[at] = v;
    }
}

/* Winograd F(2x2,3x3) input transform of one block of tile rows (rows row0 .. row0+nth-1 of
 * TW tiles, nt = nth*TW tiles): v[k][c][t] = (B^T d B)[k] for channel c's 4x4 input tile t,
 * rows of v ld floats apart (ld: nt rounded up to 16), matrices v[k] vs floats apart.
 * Each channel is first split by phase: plane a*4+j holds xp[2R+a][2tw+j] at R*TW+tw (xp: the
 * zero-padded input, R = 0..nth), so input (i, j) of every tile t = th*TW+tw sits at offset
 * (i/2)*TW + t of plane (i%2)*4+j: the transform is then one loop over all tiles, in chunks of
 * 16 that vectorise whatever the map width. e: 8 planes of es floats (ld+TW+16, rounded up
 * to an odd number of chunks: planes read together then fall in different cache sets); rb: one
 * zero-padded input row (2*TW+2 floats, TW rounded up to 16). */
O2E_GEMM_FN void o2e_winograd_f2_in(const float *restrict x, int C, int H, int W, int pt, int pl, int row0, int nth,
    int TW, int ld, size_t vs, float *restrict e, float *restrict rb, float *restrict v)
{
  size_t es = ((size_t)ld + TW + 31) / 16 * 16;
  if (es / 16 % 2 == 0) es += 16;
  const int tp = (TW + 15) / 16 * 16; /* TW rounded up to whole chunks */
  const int rw = 2 * tp + 2;
  for (int q = 0; q < rw; ++q) rb[q] = 0.0f; /* only [pl, pl+W) is rewritten below */
  for (int p = 0; p < 8; ++p) /* chunk padding past the last row of tiles: zeros */
    for (size_t q = (size_t)(nth + 1) * TW; q < es; ++q) e[p * es + q] = 0.0f;
  for (int c = 0; c < C; ++c) {
    const float *restrict xc = x + (size_t)c * H * W;
    /* rows in increasing order: a row's last chunk overruns into the start of the next row,
     * which that row then overwrites (past the last row: the padding lanes, whose results
     * nothing reads) */
    for (int r = 0; r < 2 * nth + 2; ++r) {
      const int ir = row0 * 2 + r - pt;
      float *restrict er = e + (size_t)(r % 2) * 4 * es + (size_t)(r / 2) * TW;
      if (ir < 0 || ir >= H) {
        for (int j = 0; j < 4; ++j)
          for (int tw = 0; tw < tp; ++tw) er[j * es + tw] = 0.0f;
        continue;
      }
      if (c + 1 < C) /* the same row of the next channel, from memory while this one is used */
        for (int q = 0; q < W; q += 16) O2E_PREFETCH(xc + (size_t)H * W + (size_t)ir * W + q);
      for (int q = 0; q < W && pl + q < rw; ++q) rb[pl + q] = xc[(size_t)ir * W + q];
      for (int tw0 = 0; tw0 < TW; tw0 += 16) {
        const float *restrict q0 = rb + 2 * tw0;
        float *restrict e0 = er + tw0;
        O2E_IVDEP
        for (int u = 0; u < 16; ++u) {
          const float *q = q0 + 2 * u;
          e0[0 * es + u] = q[0]; e0[1 * es + u] = q[1]; e0[2 * es + u] = q[2]; e0[3 * es + u] = q[3];
        }
      }
    }
    for (int t0 = 0; t0 < ld; t0 += 16) {
      const float *restrict et = e + t0;
      float *restrict vt = v + (size_t)c * ld + t0;
      O2E_IVDEP
      for (int u = 0; u < 16; ++u) {
        const float d0_0 = et[0 * es + u];
        const float d0_1 = et[1 * es + u];
        const float d0_2 = et[2 * es + u];
        const float d0_3 = et[3 * es + u];
        const float d1_0 = et[4 * es + u];
        const float d1_1 = et[5 * es + u];
        const float d1_2 = et[6 * es + u];
        const float d1_3 = et[7 * es + u];
        const float d2_0 = et[0 * es + 1 * (size_t)TW + u];
        const float d2_1 = et[1 * es + 1 * (size_t)TW + u];
        const float d2_2 = et[2 * es + 1 * (size_t)TW + u];
        const float d2_3 = et[3 * es + 1 * (size_t)TW + u];
        const float d3_0 = et[4 * es + 1 * (size_t)TW + u];
        const float d3_1 = et[5 * es + 1 * (size_t)TW + u];
        const float d3_2 = et[6 * es + 1 * (size_t)TW + u];
        const float d3_3 = et[7 * es + 1 * (size_t)TW + u];
        const float s0_0 = -d0_0 + d2_0;
        const float s0_1 = -d0_1 + d2_1;
        const float s0_2 = -d0_2 + d2_2;
        const float s0_3 = -d0_3 + d2_3;
        const float s1_0 = d1_0 + d2_0;
        const float s1_1 = d1_1 + d2_1;
        const float s1_2 = d1_2 + d2_2;
        const float s1_3 = d1_3 + d2_3;
        const float s2_0 = -d1_0 + d2_0;
        const float s2_1 = -d1_1 + d2_1;
        const float s2_2 = -d1_2 + d2_2;
        const float s2_3 = -d1_3 + d2_3;
        const float s3_0 = -d1_0 + d3_0;
        const float s3_1 = -d1_1 + d3_1;
        const float s3_2 = -d1_2 + d3_2;
        const float s3_3 = -d1_3 + d3_3;
        vt[0 * vs + u] = -s0_0 + s0_2;
        vt[1 * vs + u] = s0_1 + s0_2;
        vt[2 * vs + u] = -s0_1 + s0_2;
        vt[3 * vs + u] = -s0_1 + s0_3;
        vt[4 * vs + u] = -s1_0 + s1_2;
        vt[5 * vs + u] = s1_1 + s1_2;
        vt[6 * vs + u] = -s1_1 + s1_2;
        vt[7 * vs + u] = -s1_1 + s1_3;
        vt[8 * vs + u] = -s2_0 + s2_2;
        vt[9 * vs + u] = s2_1 + s2_2;
        vt[10 * vs + u] = -s2_1 + s2_2;
        vt[11 * vs + u] = -s2_1 + s2_3;
        vt[12 * vs + u] = -s3_0 + s3_2;
        vt[13 * vs + u] = s3_1 + s3_2;
        vt[14 * vs + u] = -s3_1 + s3_2;
        vt[15 * vs + u] = -s3_1 + s3_3;
      }
    }
  }
}

/* Winograd F(2x2,3x3) output transform of one block of tile rows: y = A^T M A + bias for each
 * output channel o from mm[k][o][t] (nt = nth*TW tiles, rows ld floats apart, matrices ms floats
 * apart), first as 4 planes f[a*2+b][t] (chunks of 16 tiles; planes fs floats apart, an odd
 * number of chunks), then interleaved into y's rows with the residual and
 * the activation; outputs past OH x OW (edge tiles) are dropped. A tile whose outputs sum to a
 * non-finite value read NaN / Inf: it is recomputed directly (o2e_winograd_f2_direct, dx). */
O2E_GEMM_FN void o2e_winograd_f2_out(const float *restrict mm, int M, int row0, int nth, int TW, int ld, size_t ms, int OH,
    int OW, const float *restrict bias, const float *restrict res, float *restrict y, o2e_act act, float *restrict f,
    const o2e_wino_direct *dx)
{
  const size_t fs = (size_t)ld + (ld / 16 % 2 == 0 ? 16 : 0);
  const int full = OW / 2, nt = nth * TW;
  for (int o = 0; o < M; ++o) {
    const float b = bias ? bias[o] : 0.0f;
    int bad = 0;
    for (int t0 = 0; t0 < ld; t0 += 16) {
      const float *restrict mt = mm + (size_t)o * ld + t0;
      float *restrict ft = f + t0;
      O2E_IVDEP
      for (int u = 0; u < 16; ++u) {
        const float m0_0 = mt[0 * ms + u];
        const float m1_0 = mt[4 * ms + u];
        const float m2_0 = mt[8 * ms + u];
        const float m3_0 = mt[12 * ms + u];
        const float s0_0 = m0_0 + m1_0 + m2_0;
        const float s1_0 = m1_0 - m2_0 + m3_0;
        const float m0_1 = mt[1 * ms + u];
        const float m1_1 = mt[5 * ms + u];
        const float m2_1 = mt[9 * ms + u];
        const float m3_1 = mt[13 * ms + u];
        const float s0_1 = m0_1 + m1_1 + m2_1;
        const float s1_1 = m1_1 - m2_1 + m3_1;
        const float m0_2 = mt[2 * ms + u];
        const float m1_2 = mt[6 * ms + u];
        const float m2_2 = mt[10 * ms + u];
        const float m3_2 = mt[14 * ms + u];
        const float s0_2 = m0_2 + m1_2 + m2_2;
        const float s1_2 = m1_2 - m2_2 + m3_2;
        const float m0_3 = mt[3 * ms + u];
        const float m1_3 = mt[7 * ms + u];
        const float m2_3 = mt[11 * ms + u];
        const float m3_3 = mt[15 * ms + u];
        const float s0_3 = m0_3 + m1_3 + m2_3;
        const float s1_3 = m1_3 - m2_3 + m3_3;
        ft[0 * fs + u] = b + s0_0 + s0_1 + s0_2;
        ft[1 * fs + u] = b + s0_1 - s0_2 + s0_3;
        ft[2 * fs + u] = b + s1_0 + s1_1 + s1_2;
        ft[3 * fs + u] = b + s1_1 - s1_2 + s1_3;
      }
      for (int u = 0; u < 16; ++u) { /* padding tiles past nt do not count */
        const float s = ft[0 * fs + u] + ft[1 * fs + u] + ft[2 * fs + u] + ft[3 * fs + u];
        bad |= (t0 + u < nt) & (s - s != 0.0f);
      }
    }
    for (int th = 0; th < nth; ++th)
      for (int a = 0; a < 2; ++a) {
        const int r = (row0 + th) * 2 + a;
        if (r >= OH) break;
        float *restrict yr = y + ((size_t)o * OH + r) * OW;
        if (o + 1 < M) /* the same row of the next channel, from memory while this one is written */
          for (int q = 0; q < OW; q += 16) {
            O2E_PREFETCH_W(yr + (size_t)OH * OW + q);
            if (res) O2E_PREFETCH(res + ((size_t)(o + 1) * OH + r) * OW + q);
          }
        const float *restrict f0 = f + (a * 2 + 0) * fs + (size_t)th * TW;
        const float *restrict f1 = f + (a * 2 + 1) * fs + (size_t)th * TW;
        O2E_IVDEP
        for (int tw = 0; tw < full; ++tw) { yr[2 * tw + 0] = f0[tw]; yr[2 * tw + 1] = f1[tw]; }
        for (int ow = full * 2; ow < OW; ++ow) yr[ow] = f[(a * 2 + ow % 2) * fs + (size_t)th * TW + ow / 2];
        if (res) {
          const float *restrict rr = res + ((size_t)o * OH + r) * OW;
          for (int ow = 0; ow < OW; ++ow) yr[ow] += rr[ow];
        }
        switch (act.kind) {
        case 1: for (int ow = 0; ow < OW; ++ow) yr[ow] = yr[ow] < 0.0f ? 0.0f : yr[ow]; break;
        case 2: for (int ow = 0; ow < OW; ++ow) { const float v = yr[ow] < act.a ? act.a : yr[ow]; yr[ow] = v > act.b ? act.b : v; } break;
        case 3: for (int ow = 0; ow < OW; ++ow) yr[ow] = yr[ow] < 0.0f ? yr[ow] * act.a : yr[ow]; break;
        default: o2e_act_n_(yr, (size_t)OW, act); break; /* the others (none: a no-op) */
        }
      }
    if (bad)
      for (int t = 0; t < nt; ++t) {
        float s = 0.0f;
        for (int p = 0; p < 4; ++p) s += f[p * fs + t];
        if (s - s == 0.0f) continue;
        o2e_winograd_f2_direct(dx, o, (row0 + t / TW) * 2, t % TW * 2, OH, OW, b,
                                 res ? res + (size_t)o * OH * OW : NULL, y + (size_t)o * OH * OW, act);
      }
  }
}

O2E_GEMM_FN void o2e_winograd_f2_in_par(void *arg, int c0, int c1)
{
  const o2e_wino_tr_args *a = (const o2e_wino_tr_args *)arg;
  const int t = o2e_parallel_thread();
  o2e_winograd_f2_in(a->x + (size_t)c0 * a->H * a->W, c1 - c0, a->H, a->W, a->pt, a->pl, a->row0, a->nth, a->TW, a->ld, a->vs,
      a->e + (size_t)t * a->e_slot, a->rb + (size_t)t * a->rb_slot, a->v + (size_t)c0 * a->ld);
}

O2E_GEMM_FN void o2e_winograd_f2_out_par(void *arg, int o0, int o1)
{
  const o2e_wino_tr_args *a = (const o2e_wino_tr_args *)arg;
  const int t = o2e_parallel_thread();
  const size_t plane = (size_t)a->OH * a->OW;
  const o2e_wino_direct dx = {a->x, a->u, a->nz, a->neg, a->us, a->C, a->H, a->W, a->pt, a->pl, o0};
  o2e_winograd_f2_out(a->mm + (size_t)o0 * a->ld, o1 - o0, a->row0, a->nth, a->TW, a->ld, a->ms, a->OH, a->OW,
       a->bias ? a->bias + o0 : NULL, a->res ? a->res + o0 * plane : NULL, a->y + o0 * plane, a->act,
       a->e + (size_t)t * a->e_slot, &dx);
}

/* Outputs [r0, r0+4) x [q0, q0+4) (clipped to OH x OW) of output channel o (of d's range), the
 * 3x3 window over the zero-padded input directly, + bias, + residual, activation (the output
 * transform's kinds): a tile that read NaN / Inf. Weights recovered from the packed U (see
 * winograd.py, DIRECT); a non-finite input is multiplied by its weight's sign, or 0. */
O2E_GEMM_FN void o2e_winograd_f4_direct(const o2e_wino_direct *d, int o, int r0, int q0, int OH, int OW, float b,
    const float *restrict res, float *restrict y, o2e_act act)
{
  const int og = d->o0 + o;
  const size_t base = (size_t)(og / 8) * d->C * 8 + (size_t)(og % 8);
  float acc[16];
  for (int p = 0; p < 16; ++p) acc[p] = 0.0f;
  for (int c = 0; c < d->C; ++c) {
    const float *uc = d->u + base + (size_t)c * 8;
    const float *xc = d->x + (size_t)c * d->H * d->W;
    const size_t w0 = ((size_t)og * d->C + (size_t)c) * 9;
    float gw[9];
    const float u0_0 = uc[0 * d->us];
    const float u0_1 = uc[1 * d->us];
    const float u0_2 = uc[5 * d->us];
    const float u1_0 = uc[6 * d->us];
    const float u1_1 = uc[7 * d->us];
    const float u1_2 = uc[11 * d->us];
    const float u2_0 = uc[30 * d->us];
    const float u2_1 = uc[31 * d->us];
    const float u2_2 = uc[35 * d->us];
    const float t0_0 = 2.0f * u0_0;
    const float t0_1 = 2.0f * u0_1;
    const float t0_2 = 2.0f * u0_2;
    const float t1_0 = -2.0f * u0_0 - 6.0f * u1_0 - 2.0f * u2_0;
    const float t1_1 = -2.0f * u0_1 - 6.0f * u1_1 - 2.0f * u2_1;
    const float t1_2 = -2.0f * u0_2 - 6.0f * u1_2 - 2.0f * u2_2;
    const float t2_0 = 2.0f * u2_0;
    const float t2_1 = 2.0f * u2_1;
    const float t2_2 = 2.0f * u2_2;
    gw[0] = 2.0f * t0_0;
    gw[1] = -2.0f * t0_0 - 6.0f * t0_1 - 2.0f * t0_2;
    gw[2] = 2.0f * t0_2;
    gw[3] = 2.0f * t1_0;
    gw[4] = -2.0f * t1_0 - 6.0f * t1_1 - 2.0f * t1_2;
    gw[5] = 2.0f * t1_2;
    gw[6] = 2.0f * t2_0;
    gw[7] = -2.0f * t2_0 - 6.0f * t2_1 - 2.0f * t2_2;
    gw[8] = 2.0f * t2_2;
    for (int a = 0; a < 4 && r0 + a < OH; ++a)
      for (int e = 0; e < 4 && q0 + e < OW; ++e) {
        float s = 0.0f;
        for (int i = 0; i < 3; ++i) {
          const int ih = r0 + a - d->pt + i;
          if (ih < 0 || ih >= d->H) continue;
          for (int j = 0; j < 3; ++j) {
            const int iw = q0 + e - d->pl + j;
            const size_t bit = w0 + (size_t)(i * 3 + j);
            float xv, wv;
            if (iw < 0 || iw >= d->W) continue;
            xv = xc[(size_t)ih * d->W + iw];
            if (xv - xv == 0.0f) wv = gw[i * 3 + j];
            else if (d->nz[bit >> 3] >> (bit & 7) & 1) wv = (d->neg[bit >> 3] >> (bit & 7) & 1) ? -1.0f : 1.0f;
            else wv = 0.0f;
            s += wv * xv;
          }
        }
        acc[a * 4 + e] += s;
      }
  }
  for (int a = 0; a < 4 && r0 + a < OH; ++a)
    for (int e = 0; e < 4 && q0 + e < OW; ++e) {
      const size_t at = (size_t)(r0 + a) * OW + (size_t)(q0 + e);
      float v = acc[a * 4 + e] + b;
      if (res) v += res[at];
      switch (act.kind) {
      case 1: v = v < 0.0f ? 0.0f : v; break;
      case 2: v = v < act.a ? act.a : v; v = v > act.b ? act.b : v; break;
      case 3: v = v < 0.0f ? v * act.a : v; break;
      default: v = o2e_act1_(v, act); break; /* HardSigmoid, HardSwish, o2e_vmath.h kinds */
      }
      y[at] = v;
    }
}

/* Winograd F(4x4,3x3) input transform of one block of tile rows (rows row0 .. row0+nth-1 of
 * TW tiles, nt = nth*TW tiles): v[k][c][t] = (B^T d B)[k] for channel c's 6x6 input tile t,
 * rows of v ld floats apart (ld: nt rounded up to 16), matrices v[k] vs floats apart.
 * Each channel is first split by phase: plane a*6+j holds xp[4R+a][4tw+j] at R*TW+tw (xp: the
 * zero-padded input, R = 0..nth), so input (i, j) of every tile t = th*TW+tw sits at offset
 * (i/4)*TW + t of plane (i%4)*6+j: the transform is then one loop over all tiles, in chunks of
 * 16 that vectorise whatever the map width. e: 24 planes of es floats (ld+TW+16, rounded up
 * to an odd number of chunks: planes read together then fall in different cache sets); rb: one
 * zero-padded input row (4*TW+4 floats, TW rounded up to 16). */
O2E_GEMM_FN void o2e_winograd_f4_in(const float *restrict x, int C, int H, int W, int pt, int pl, int row0, int nth,
    int TW, int ld, size_t vs, float *restrict e, float *restrict rb, float *restrict v)
{
  size_t es = ((size_t)ld + TW + 31) / 16 * 16;
  if (es / 16 % 2 == 0) es += 16;
  const int tp = (TW + 15) / 16 * 16; /* TW rounded up to whole chunks */
  const int rw = 4 * tp + 4;
  for (int q = 0; q < rw; ++q) rb[q] = 0.0f; /* only [pl, pl+W) is rewritten below */
  for (int p = 0; p < 24; ++p) /* chunk padding past the last row of tiles: zeros */
    for (size_t q = (size_t)(nth + 1) * TW; q < es; ++q) e[p * es + q] = 0.0f;
  for (int c = 0; c < C; ++c) {
    const float *restrict xc = x + (size_t)c * H * W;
    /* rows in increasing order: a row's last chunk overruns into the start of the next row,
     * which that row then overwrites (past the last row: the padding lanes, whose results
     * nothing reads) */
    for (int r = 0; r < 4 * nth + 2; ++r) {
      const int ir = row0 * 4 + r - pt;
      float *restrict er = e + (size_t)(r % 4) * 6 * es + (size_t)(r / 4) * TW;
      if (ir < 0 || ir >= H) {
        for (int j = 0; j < 6; ++j)
          for (int tw = 0; tw < tp; ++tw) er[j * es + tw] = 0.0f;
        continue;
      }
      if (c + 1 < C) /* the same row of the next channel, from memory while this one is used */
        for (int q = 0; q < W; q += 16) O2E_PREFETCH(xc + (size_t)H * W + (size_t)ir * W + q);
      for (int q = 0; q < W && pl + q < rw; ++q) rb[pl + q] = xc[(size_t)ir * W + q];
      for (int tw0 = 0; tw0 < TW; tw0 += 16) {
        const float *restrict q0 = rb + 4 * tw0;
        float *restrict e0 = er + tw0;
        O2E_IVDEP
        for (int u = 0; u < 16; ++u) {
          const float *q = q0 + 4 * u;
          e0[0 * es + u] = q[0]; e0[1 * es + u] = q[1]; e0[2 * es + u] = q[2]; e0[3 * es + u] = q[3]; e0[4 * es + u] = q[4]; e0[5 * es + u] = q[5];
        }
      }
    }
    for (int t0 = 0; t0 < ld; t0 += 16) {
      const float *restrict et = e + t0;
      float *restrict vt = v + (size_t)c * ld + t0;
      O2E_IVDEP
      for (int u = 0; u < 16; ++u) {
        const float d0_0 = et[0 * es + u];
        const float d0_1 = et[1 * es + u];
        const float d0_2 = et[2 * es + u];
        const float d0_3 = et[3 * es + u];
        const float d0_4 = et[4 * es + u];
        const float d0_5 = et[5 * es + u];
        const float d1_0 = et[6 * es + u];
        const float d1_1 = et[7 * es + u];
        const float d1_2 = et[8 * es + u];
        const float d1_3 = et[9 * es + u];
        const float d1_4 = et[10 * es + u];
        const float d1_5 = et[11 * es + u];
        const float d2_0 = et[12 * es + u];
        const float d2_1 = et[13 * es + u];
        const float d2_2 = et[14 * es + u];
        const float d2_3 = et[15 * es + u];
        const float d2_4 = et[16 * es + u];
        const float d2_5 = et[17 * es + u];
        const float d3_0 = et[18 * es + u];
        const float d3_1 = et[19 * es + u];
        const float d3_2 = et[20 * es + u];
        const float d3_3 = et[21 * es + u];
        const float d3_4 = et[22 * es + u];
        const float d3_5 = et[23 * es + u];
        const float d4_0 = et[0 * es + 1 * (size_t)TW + u];
        const float d4_1 = et[1 * es + 1 * (size_t)TW + u];
        const float d4_2 = et[2 * es + 1 * (size_t)TW + u];
        const float d4_3 = et[3 * es + 1 * (size_t)TW + u];
        const float d4_4 = et[4 * es + 1 * (size_t)TW + u];
        const float d4_5 = et[5 * es + 1 * (size_t)TW + u];
        const float d5_0 = et[6 * es + 1 * (size_t)TW + u];
        const float d5_1 = et[7 * es + 1 * (size_t)TW + u];
        const float d5_2 = et[8 * es + 1 * (size_t)TW + u];
        const float d5_3 = et[9 * es + 1 * (size_t)TW + u];
        const float d5_4 = et[10 * es + 1 * (size_t)TW + u];
        const float d5_5 = et[11 * es + 1 * (size_t)TW + u];
        const float s0_0 = 2.0f * d0_0 + 3.0f * d1_0 - 4.0f * d2_0 - 3.0f * d3_0 + 2.0f * d4_0;
        const float s0_1 = 2.0f * d0_1 + 3.0f * d1_1 - 4.0f * d2_1 - 3.0f * d3_1 + 2.0f * d4_1;
        const float s0_2 = 2.0f * d0_2 + 3.0f * d1_2 - 4.0f * d2_2 - 3.0f * d3_2 + 2.0f * d4_2;
        const float s0_3 = 2.0f * d0_3 + 3.0f * d1_3 - 4.0f * d2_3 - 3.0f * d3_3 + 2.0f * d4_3;
        const float s0_4 = 2.0f * d0_4 + 3.0f * d1_4 - 4.0f * d2_4 - 3.0f * d3_4 + 2.0f * d4_4;
        const float s0_5 = 2.0f * d0_5 + 3.0f * d1_5 - 4.0f * d2_5 - 3.0f * d3_5 + 2.0f * d4_5;
        const float s1_0 = -2.0f * d1_0 - 5.0f * d2_0 - d3_0 + 2.0f * d4_0;
        const float s1_1 = -2.0f * d1_1 - 5.0f * d2_1 - d3_1 + 2.0f * d4_1;
        const float s1_2 = -2.0f * d1_2 - 5.0f * d2_2 - d3_2 + 2.0f * d4_2;
        const float s1_3 = -2.0f * d1_3 - 5.0f * d2_3 - d3_3 + 2.0f * d4_3;
        const float s1_4 = -2.0f * d1_4 - 5.0f * d2_4 - d3_4 + 2.0f * d4_4;
        const float s1_5 = -2.0f * d1_5 - 5.0f * d2_5 - d3_5 + 2.0f * d4_5;
        const float s2_0 = 2.0f * d1_0 + d2_0 - 5.0f * d3_0 + 2.0f * d4_0;
        const float s2_1 = 2.0f * d1_1 + d2_1 - 5.0f * d3_1 + 2.0f * d4_1;
        const float s2_2 = 2.0f * d1_2 + d2_2 - 5.0f * d3_2 + 2.0f * d4_2;
        const float s2_3 = 2.0f * d1_3 + d2_3 - 5.0f * d3_3 + 2.0f * d4_3;
        const float s2_4 = 2.0f * d1_4 + d2_4 - 5.0f * d3_4 + 2.0f * d4_4;
        const float s2_5 = 2.0f * d1_5 + d2_5 - 5.0f * d3_5 + 2.0f * d4_5;
        const float s3_0 = 2.0f * d1_0 - d2_0 - 2.0f * d3_0 + d4_0;
        const float s3_1 = 2.0f * d1_1 - d2_1 - 2.0f * d3_1 + d4_1;
        const float s3_2 = 2.0f * d1_2 - d2_2 - 2.0f * d3_2 + d4_2;
        const float s3_3 = 2.0f * d1_3 - d2_3 - 2.0f * d3_3 + d4_3;
        const float s3_4 = 2.0f * d1_4 - d2_4 - 2.0f * d3_4 + d4_4;
        const float s3_5 = 2.0f * d1_5 - d2_5 - 2.0f * d3_5 + d4_5;
        const float s4_0 = -d1_0 - 2.0f * d2_0 + d3_0 + 2.0f * d4_0;
        const float s4_1 = -d1_1 - 2.0f * d2_1 + d3_1 + 2.0f * d4_1;
        const float s4_2 = -d1_2 - 2.0f * d2_2 + d3_2 + 2.0f * d4_2;
        const float s4_3 = -d1_3 - 2.0f * d2_3 + d3_3 + 2.0f * d4_3;
        const float s4_4 = -d1_4 - 2.0f * d2_4 + d3_4 + 2.0f * d4_4;
        const float s4_5 = -d1_5 - 2.0f * d2_5 + d3_5 + 2.0f * d4_5;
        const float s5_0 = 2.0f * d1_0 + 3.0f * d2_0 - 4.0f * d3_0 - 3.0f * d4_0 + 2.0f * d5_0;
        const float s5_1 = 2.0f * d1_1 + 3.0f * d2_1 - 4.0f * d3_1 - 3.0f * d4_1 + 2.0f * d5_1;
        const float s5_2 = 2.0f * d1_2 + 3.0f * d2_2 - 4.0f * d3_2 - 3.0f * d4_2 + 2.0f * d5_2;
        const float s5_3 = 2.0f * d1_3 + 3.0f * d2_3 - 4.0f * d3_3 - 3.0f * d4_3 + 2.0f * d5_3;
        const float s5_4 = 2.0f * d1_4 + 3.0f * d2_4 - 4.0f * d3_4 - 3.0f * d4_4 + 2.0f * d5_4;
        const float s5_5 = 2.0f * d1_5 + 3.0f * d2_5 - 4.0f * d3_5 - 3.0f * d4_5 + 2.0f * d5_5;
        vt[0 * vs + u] = 2.0f * s0_0 + 3.0f * s0_1 - 4.0f * s0_2 - 3.0f * s0_3 + 2.0f * s0_4;
        vt[1 * vs + u] = -2.0f * s0_1 - 5.0f * s0_2 - s0_3 + 2.0f * s0_4;
        vt[2 * vs + u] = 2.0f * s0_1 + s0_2 - 5.0f * s0_3 + 2.0f * s0_4;
        vt[3 * vs + u] = 2.0f * s0_1 - s0_2 - 2.0f * s0_3 + s0_4;
        vt[4 * vs + u] = -s0_1 - 2.0f * s0_2 + s0_3 + 2.0f * s0_4;
        vt[5 * vs + u] = 2.0f * s0_1 + 3.0f * s0_2 - 4.0f * s0_3 - 3.0f * s0_4 + 2.0f * s0_5;
        vt[6 * vs + u] = 2.0f * s1_0 + 3.0f * s1_1 - 4.0f * s1_2 - 3.0f * s1_3 + 2.0f * s1_4;
        vt[7 * vs + u] = -2.0f * s1_1 - 5.0f * s1_2 - s1_3 + 2.0f * s1_4;
        vt[8 * vs + u] = 2.0f * s1_1 + s1_2 - 5.0f * s1_3 + 2.0f * s1_4;
        vt[9 * vs + u] = 2.0f * s1_1 - s1_2 - 2.0f * s1_3 + s1_4;
        vt[10 * vs + u] = -s1_1 - 2.0f * s1_2 + s1_3 + 2.0f * s1_4;
        vt[11 * vs + u] = 2.0f * s1_1 + 3.0f * s1_2 - 4.0f * s1_3 - 3.0f * s1_4 + 2.0f * s1_5;
        vt[12 * vs + u] = 2.0f * s2_0 + 3.0f * s2_1 - 4.0f * s2_2 - 3.0f * s2_3 + 2.0f * s2_4;
        vt[13 * vs + u] = -2.0f * s2_1 - 5.0f * s2_2 - s2_3 + 2.0f * s2_4;
        vt[14 * vs + u] = 2.0f * s2_1 + s2_2 - 5.0f * s2_3 + 2.0f * s2_4;
        vt[15 * vs + u] = 2.0f * s2_1 - s2_2 - 2.0f * s2_3 + s2_4;
        vt[16 * vs + u] = -s2_1 - 2.0f * s2_2 + s2_3 + 2.0f * s2_4;
        vt[17 * vs + u] = 2.0f * s2_1 + 3.0f * s2_2 - 4.0f * s2_3 - 3.0f * s2_4 + 2.0f * s2_5;
        vt[18 * vs + u] = 2.0f * s3_0 + 3.0f * s3_1 - 4.0f * s3_2 - 3.0f * s3_3 + 2.0f * s3_4;
        vt[19 * vs + u] = -2.0f * s3_1 - 5.0f * s3_2 - s3_3 + 2.0f * s3_4;
        vt[20 * vs + u] = 2.0f * s3_1 + s3_2 - 5.0f * s3_3 + 2.0f * s3_4;
        vt[21 * vs + u] = 2.0f * s3_1 - s3_2 - 2.0f * s3_3 + s3_4;
        vt[22 * vs + u] = -s3_1 - 2.0f * s3_2 + s3_3 + 2.0f * s3_4;
        vt[23 * vs + u] = 2.0f * s3_1 + 3.0f * s3_2 - 4.0f * s3_3 - 3.0f * s3_4 + 2.0f * s3_5;
        vt[24 * vs + u] = 2.0f * s4_0 + 3.0f * s4_1 - 4.0f * s4_2 - 3.0f * s4_3 + 2.0f * s4_4;
        vt[25 * vs + u] = -2.0f * s4_1 - 5.0f * s4_2 - s4_3 + 2.0f * s4_4;
        vt[26 * vs + u] = 2.0f * s4_1 + s4_2 - 5.0f * s4_3 + 2.0f * s4_4;
        vt[27 * vs + u] = 2.0f * s4_1 - s4_2 - 2.0f * s4_3 + s4_4;
        vt[28 * vs + u] = -s4_1 - 2.0f * s4_2 + s4_3 + 2.0f * s4_4;
        vt[29 * vs + u] = 2.0f * s4_1 + 3.0f * s4_2 - 4.0f * s4_3 - 3.0f * s4_4 + 2.0f * s4_5;
        vt[30 * vs + u] = 2.0f * s5_0 + 3.0f * s5_1 - 4.0f * s5_2 - 3.0f * s5_3 + 2.0f * s5_4;
        vt[31 * vs + u] = -2.0f * s5_1 - 5.0f * s5_2 - s5_3 + 2.0f * s5_4;
        vt[32 * vs + u] = 2.0f * s5_1 + s5_2 - 5.0f * s5_3 + 2.0f * s5_4;
        vt[33 * vs + u] = 2.0f * s5_1 - s5_2 - 2.0f * s5_3 + s5_4;
        vt[34 * vs + u] = -s5_1 - 2.0f * s5_2 + s5_3 + 2.0f * s5_4;
        vt[35 * vs + u] = 2.0f * s5_1 + 3.0f * s5_2 - 4.0f * s5_3 - 3.0f * s5_4 + 2.0f * s5_5;
      }
    }
  }
}

/* Winograd F(4x4,3x3) output transform of one block of tile rows: y = A^T M A + bias for each
 * output channel o from mm[k][o][t] (nt = nth*TW tiles, rows ld floats apart, matrices ms floats
 * apart), first as 16 planes f[a*4+b][t] (chunks of 16 tiles; planes fs floats apart, an odd
 * number of chunks), then interleaved into y's rows with the residual and
 * the activation; outputs past OH x OW (edge tiles) are dropped. A tile whose outputs sum to a
 * non-finite value read NaN / Inf: it is recomputed directly (o2e_winograd_f4_direct, dx). */
O2E_GEMM_FN void o2e_winograd_f4_out(const float *restrict mm, int M, int row0, int nth, int TW, int ld, size_t ms, int OH,
    int OW, const float *restrict bias, const float *restrict res, float *restrict y, o2e_act act, float *restrict f,
    const o2e_wino_direct *dx)
{
  const size_t fs = (size_t)ld + (ld / 16 % 2 == 0 ? 16 : 0);
  const int full = OW / 4, nt = nth * TW;
  for (int o = 0; o < M; ++o) {
    const float b = bias ? bias[o] : 0.0f;
    int bad = 0;
    for (int t0 = 0; t0 < ld; t0 += 16) {
      const float *restrict mt = mm + (size_t)o * ld + t0;
      float *restrict ft = f + t0;
      O2E_IVDEP
      for (int u = 0; u < 16; ++u) {
        const float m0_0 = mt[0 * ms + u];
        const float m1_0 = mt[6 * ms + u];
        const float m2_0 = mt[12 * ms + u];
        const float m3_0 = mt[18 * ms + u];
        const float m4_0 = mt[24 * ms + u];
        const float m5_0 = mt[30 * ms + u];
        const float s0_0 = m0_0 + m1_0 + m2_0 + 8.0f * m3_0 + m4_0;
        const float s1_0 = m1_0 - m2_0 - 4.0f * m3_0 + 2.0f * m4_0;
        const float s2_0 = m1_0 + m2_0 + 2.0f * m3_0 + 4.0f * m4_0;
        const float s3_0 = m1_0 - m2_0 - m3_0 + 8.0f * m4_0 + m5_0;
        const float m0_1 = mt[1 * ms + u];
        const float m1_1 = mt[7 * ms + u];
        const float m2_1 = mt[13 * ms + u];
        const float m3_1 = mt[19 * ms + u];
        const float m4_1 = mt[25 * ms + u];
        const float m5_1 = mt[31 * ms + u];
        const float s0_1 = m0_1 + m1_1 + m2_1 + 8.0f * m3_1 + m4_1;
        const float s1_1 = m1_1 - m2_1 - 4.0f * m3_1 + 2.0f * m4_1;
        const float s2_1 = m1_1 + m2_1 + 2.0f * m3_1 + 4.0f * m4_1;
        const float s3_1 = m1_1 - m2_1 - m3_1 + 8.0f * m4_1 + m5_1;
        const float m0_2 = mt[2 * ms + u];
        const float m1_2 = mt[8 * ms + u];
        const float m2_2 = mt[14 * ms + u];
        const float m3_2 = mt[20 * ms + u];
        const float m4_2 = mt[26 * ms + u];
        const float m5_2 = mt[32 * ms + u];
        const float s0_2 = m0_2 + m1_2 + m2_2 + 8.0f * m3_2 + m4_2;
        const float s1_2 = m1_2 - m2_2 - 4.0f * m3_2 + 2.0f * m4_2;
        const float s2_2 = m1_2 + m2_2 + 2.0f * m3_2 + 4.0f * m4_2;
        const float s3_2 = m1_2 - m2_2 - m3_2 + 8.0f * m4_2 + m5_2;
        const float m0_3 = mt[3 * ms + u];
        const float m1_3 = mt[9 * ms + u];
        const float m2_3 = mt[15 * ms + u];
        const float m3_3 = mt[21 * ms + u];
        const float m4_3 = mt[27 * ms + u];
        const float m5_3 = mt[33 * ms + u];
        const float s0_3 = m0_3 + m1_3 + m2_3 + 8.0f * m3_3 + m4_3;
        const float s1_3 = m1_3 - m2_3 - 4.0f * m3_3 + 2.0f * m4_3;
        const float s2_3 = m1_3 + m2_3 + 2.0f * m3_3 + 4.0f * m4_3;
        const float s3_3 = m1_3 - m2_3 - m3_3 + 8.0f * m4_3 + m5_3;
        const float m0_4 = mt[4 * ms + u];
        const float m1_4 = mt[10 * ms + u];
        const float m2_4 = mt[16 * ms + u];
        const float m3_4 = mt[22 * ms + u];
        const float m4_4 = mt[28 * ms + u];
        const float m5_4 = mt[34 * ms + u];
        const float s0_4 = m0_4 + m1_4 + m2_4 + 8.0f * m3_4 + m4_4;
        const float s1_4 = m1_4 - m2_4 - 4.0f * m3_4 + 2.0f * m4_4;
        const float s2_4 = m1_4 + m2_4 + 2.0f * m3_4 + 4.0f * m4_4;
        const float s3_4 = m1_4 - m2_4 - m3_4 + 8.0f * m4_4 + m5_4;
        const float m0_5 = mt[5 * ms + u];
        const float m1_5 = mt[11 * ms + u];
        const float m2_5 = mt[17 * ms + u];
        const float m3_5 = mt[23 * ms + u];
        const float m4_5 = mt[29 * ms + u];
        const float m5_5 = mt[35 * ms + u];
        const float s0_5 = m0_5 + m1_5 + m2_5 + 8.0f * m3_5 + m4_5;
        const float s1_5 = m1_5 - m2_5 - 4.0f * m3_5 + 2.0f * m4_5;
        const float s2_5 = m1_5 + m2_5 + 2.0f * m3_5 + 4.0f * m4_5;
        const float s3_5 = m1_5 - m2_5 - m3_5 + 8.0f * m4_5 + m5_5;
        ft[0 * fs + u] = b + s0_0 + s0_1 + s0_2 + 8.0f * s0_3 + s0_4;
        ft[1 * fs + u] = b + s0_1 - s0_2 - 4.0f * s0_3 + 2.0f * s0_4;
        ft[2 * fs + u] = b + s0_1 + s0_2 + 2.0f * s0_3 + 4.0f * s0_4;
        ft[3 * fs + u] = b + s0_1 - s0_2 - s0_3 + 8.0f * s0_4 + s0_5;
        ft[4 * fs + u] = b + s1_0 + s1_1 + s1_2 + 8.0f * s1_3 + s1_4;
        ft[5 * fs + u] = b + s1_1 - s1_2 - 4.0f * s1_3 + 2.0f * s1_4;
        ft[6 * fs + u] = b + s1_1 + s1_2 + 2.0f * s1_3 + 4.0f * s1_4;
        ft[7 * fs + u] = b + s1_1 - s1_2 - s1_3 + 8.0f * s1_4 + s1_5;
        ft[8 * fs + u] = b + s2_0 + s2_1 + s2_2 + 8.0f * s2_3 + s2_4;
        ft[9 * fs + u] = b + s2_1 - s2_2 - 4.0f * s2_3 + 2.0f * s2_4;
        ft[10 * fs + u] = b + s2_1 + s2_2 + 2.0f * s2_3 + 4.0f * s2_4;
        ft[11 * fs + u] = b + s2_1 - s2_2 - s2_3 + 8.0f * s2_4 + s2_5;
        ft[12 * fs + u] = b + s3_0 + s3_1 + s3_2 + 8.0f * s3_3 + s3_4;
        ft[13 * fs + u] = b + s3_1 - s3_2 - 4.0f * s3_3 + 2.0f * s3_4;
        ft[14 * fs + u] = b + s3_1 + s3_2 + 2.0f * s3_3 + 4.0f * s3_4;
        ft[15 * fs + u] = b + s3_1 - s3_2 - s3_3 + 8.0f * s3_4 + s3_5;
      }
      for (int u = 0; u < 16; ++u) { /* padding tiles past nt do not count */
        const float s = ft[0 * fs + u] + ft[1 * fs + u] + ft[2 * fs + u] + ft[3 * fs + u] + ft[4 * fs + u] + ft[5 * fs + u] + ft[6 * fs + u] + ft[7 * fs + u] + ft[8 * fs + u] + ft[9 * fs + u] + ft[10 * fs + u] + ft[11 * fs + u] + ft[12 * fs + u] + ft[13 * fs + u] + ft[14 * fs + u] + ft[15 * fs + u];
        bad |= (t0 + u < nt) & (s - s != 0.0f);
      }
    }
    for (int th = 0; th < nth; ++th)
      for (int a = 0; a < 4; ++a) {
        const int r = (row0 + th) * 4 + a;
        if (r >= OH) break;
        float *restrict yr = y + ((size_t)o * OH + r) * OW;
        if (o + 1 < M) /* the same row of the next channel, from memory while this one is written */
          for (int q = 0; q < OW; q += 16) {
            O2E_PREFETCH_W(yr + (size_t)OH * OW + q);
            if (res) O2E_PREFETCH(res + ((size_t)(o + 1) * OH + r) * OW + q);
          }
        const float *restrict f0 = f + (a * 4 + 0) * fs + (size_t)th * TW;
        const float *restrict f1 = f + (a * 4 + 1) * fs + (size_t)th * TW;
        const float *restrict f2 = f + (a * 4 + 2) * fs + (size_t)th * TW;
        const float *restrict f3 = f + (a * 4 + 3) * fs + (size_t)th * TW;
        O2E_IVDEP
        for (int tw = 0; tw < full; ++tw) { yr[4 * tw + 0] = f0[tw]; yr[4 * tw + 1] = f1[tw]; yr[4 * tw + 2] = f2[tw]; yr[4 * tw + 3] = f3[tw]; }
        for (int ow = full * 4; ow < OW; ++ow) yr[ow] = f[(a * 4 + ow % 4) * fs + (size_t)th * TW + ow / 4];
        if (res) {
          const float *restrict rr = res + ((size_t)o * OH + r) * OW;
          for (int ow = 0; ow < OW; ++ow) yr[ow] += rr[ow];
        }
        switch (act.kind) {
        case 1: for (int ow = 0; ow < OW; ++ow) yr[ow] = yr[ow] < 0.0f ? 0.0f : yr[ow]; break;
        case 2: for (int ow = 0; ow < OW; ++ow) { const float v = yr[ow] < act.a ? act.a : yr[ow]; yr[ow] = v > act.b ? act.b : v; } break;
        case 3: for (int ow = 0; ow < OW; ++ow) yr[ow] = yr[ow] < 0.0f ? yr[ow] * act.a : yr[ow]; break;
        default: o2e_act_n_(yr, (size_t)OW, act); break; /* the others (none: a no-op) */
        }
      }
    if (bad)
      for (int t = 0; t < nt; ++t) {
        float s = 0.0f;
        for (int p = 0; p < 16; ++p) s += f[p * fs + t];
        if (s - s == 0.0f) continue;
        o2e_winograd_f4_direct(dx, o, (row0 + t / TW) * 4, t % TW * 4, OH, OW, b,
                                 res ? res + (size_t)o * OH * OW : NULL, y + (size_t)o * OH * OW, act);
      }
  }
}

O2E_GEMM_FN void o2e_winograd_f4_in_par(void *arg, int c0, int c1)
{
  const o2e_wino_tr_args *a = (const o2e_wino_tr_args *)arg;
  const int t = o2e_parallel_thread();
  o2e_winograd_f4_in(a->x + (size_t)c0 * a->H * a->W, c1 - c0, a->H, a->W, a->pt, a->pl, a->row0, a->nth, a->TW, a->ld, a->vs,
      a->e + (size_t)t * a->e_slot, a->rb + (size_t)t * a->rb_slot, a->v + (size_t)c0 * a->ld);
}

O2E_GEMM_FN void o2e_winograd_f4_out_par(void *arg, int o0, int o1)
{
  const o2e_wino_tr_args *a = (const o2e_wino_tr_args *)arg;
  const int t = o2e_parallel_thread();
  const size_t plane = (size_t)a->OH * a->OW;
  const o2e_wino_direct dx = {a->x, a->u, a->nz, a->neg, a->us, a->C, a->H, a->W, a->pt, a->pl, o0};
  o2e_winograd_f4_out(a->mm + (size_t)o0 * a->ld, o1 - o0, a->row0, a->nth, a->TW, a->ld, a->ms, a->OH, a->OW,
       a->bias ? a->bias + o0 : NULL, a->res ? a->res + o0 * plane : NULL, a->y + o0 * plane, a->act,
       a->e + (size_t)t * a->e_slot, &dx);
}

/* One job per transformed-tile position k: M[k] = U[k] . V[k] on the calling thread, in that
 * thread's share of the workspace. */
typedef struct {
  const float *packed;
  size_t wstride;
  const float *v;
  size_t vs;
  float *mm;
  size_t ms;
  int M, nt, C, ld;
  char *ws;
  size_t ws_per;
} o2e_wino_gemm_args;

O2E_GEMM_FN void o2e_wino_gemms(void *arg, int k0, int k1)
{
  const o2e_wino_gemm_args *a = (const o2e_wino_gemm_args *)arg;
  char *ws = a->ws + a->ws_per * (size_t)o2e_parallel_thread();
  for (int k = k0; k < k1; ++k)
    o2e_sgemm_packed_local(a->M, a->nt, a->C, a->packed + (size_t)k * a->wstride, a->v + (size_t)k * a->vs,
                           a->ld, a->mm + (size_t)k * a->ms, a->ld, ws);
}

/* The run-time buffers of a Conv that shares whole blocks between threads. */
typedef struct {
  const float *x, *packed, *bias, *res;
  float *y, *e, *rb, *v, *mm; /* e, rb, v, mm: MAX_THREADS slots each */
  char *ws;
  const uint8_t *nz, *neg; /* bits of the 3x3 weights, for the tiles computed directly */
} o2e_wino_block_args;

/* The sizes of one such Conv, constants of its node (winograd.Plan): the generated wrapper
 * passes them in a static const record, which the compiler folds into the inlined driver. */
typedef struct {
  int m, N, C, H, W, pt, pl, M, OH, OW;
  int TH, TW, rows, nblocks; /* tile rows, tiles per row, tile rows per block, blocks per image */
  int nt[2], ld[2];          /* [0]: a block of `rows` tile rows, [1]: the image's last block */
  size_t vs[2], ms[2];
  size_t stride;             /* floats between the packed U[k] */
  size_t e_slot, rb_slot, v_slot, m_slot, ws_per; /* one thread's scratch (floats; ws: bytes) */
  o2e_act act;
  int res;                   /* a residual is added (a->res): known here, the residual code folds away */
} o2e_wino_plan;

/* Blocks [u0, u1) of a Conv of plan p: block u is image u / nblocks, tile rows from
 * (u % nblocks) * rows; input transform, (m + 2)^2 GEMMs and output transform on the calling
 * thread, in its own scratch slots. */
O2E_GEMM_INL void o2e_winograd_blocks(const o2e_wino_block_args *a,
    const o2e_wino_plan *p, int u0, int u1)
{
  const int t = o2e_parallel_thread(), n = p->m + 2;
  float *e = a->e + (size_t)t * p->e_slot, *rb = a->rb + (size_t)t * p->rb_slot;
  float *v = a->v + (size_t)t * p->v_slot, *mm = a->mm + (size_t)t * p->m_slot;
  char *ws = a->ws + (size_t)t * p->ws_per;
  const size_t xs = (size_t)p->C * p->H * p->W, ys = (size_t)p->M * p->OH * p->OW;
  for (int u = u0; u < u1; ++u) {
    const int b = u / p->nblocks, row0 = u % p->nblocks * p->rows;
    const int nth = p->TH - row0 < p->rows ? p->TH - row0 : p->rows, g = nth == p->rows ? 0 : 1;
    const int nt = p->nt[g], ld = p->ld[g];
    const size_t vs = p->vs[g], ms = p->ms[g];
    const float *x = a->x + (size_t)b * xs;
    const o2e_wino_direct dx = {x, a->packed, a->nz, a->neg, p->stride, p->C, p->H, p->W, p->pt, p->pl, 0};
    if (p->m == 4)
      o2e_winograd_f4_in(x, p->C, p->H, p->W, p->pt, p->pl, row0, nth, p->TW, ld, vs, e, rb, v);
    else
      o2e_winograd_f2_in(x, p->C, p->H, p->W, p->pt, p->pl, row0, nth, p->TW, ld, vs, e, rb, v);
    for (int k = 0; k < n * n; ++k)
      o2e_sgemm_packed_local(p->M, nt, p->C, a->packed + (size_t)k * p->stride, v + (size_t)k * vs, ld,
                             mm + (size_t)k * ms, ld, ws);
    if (p->m == 4)
      o2e_winograd_f4_out(mm, p->M, row0, nth, p->TW, ld, ms, p->OH, p->OW, a->bias,
                          p->res ? a->res + (size_t)b * ys : NULL, a->y + (size_t)b * ys, p->act, e, &dx);
    else
      o2e_winograd_f2_out(mm, p->M, row0, nth, p->TW, ld, ms, p->OH, p->OW, a->bias,
                          p->res ? a->res + (size_t)b * ys : NULL, a->y + (size_t)b * ys, p->act, e, &dx);
  }
}

#endif /* O2E_WINOGRAD_H */
