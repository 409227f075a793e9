/* o2e_qdwpw.h - an int8 depthwise convolution and the 1x1 convolution that alone reads it, as
 * one call (issue 34: MobileNetV2's inverted residual blocks, their depthwise 3x3 and
 * projection 1x1).
 *
 * o2e_qdwc (o2e_qdw.h) computes a block of 16 channels into a tile of 16-byte pixels, then
 * transposes it back to NCHW bytes; the 1x1 layer (o2e_qgemm_rows, o2e_qgemm.h) read those
 * rows again and transposed them into its panels of 16 columns x 4 channels. Here each tile
 * goes straight into those panels: a block of 16 channels is 4 panel steps, and step g of the
 * panel of pixels p0 .. p0 + 15 is the 4-byte group g of each of its 16 tile rows (a 16 x 4
 * transpose of int32 words, two vpermt2d and two vshufi32x4 per step pair on AVX-512; the
 * target's panel format through o2e_qstep_put elsewhere). No NCHW tensor between the layers,
 * no byte transposes on either side of it. The bytes are the same as the two layers' own
 * (the same depthwise sums and requantisation, the same product over the same panel bytes).
 * panels: O2E_QPANEL_BYTES(C, OH * OW) bytes; the plane as o2e_qdwc's, the tile one band of
 * output rows (O2E_QDWPW_BAND).
 */
#ifndef O2E_QDWPW_H
#define O2E_QDWPW_H

#include "o2e_qgemm.h"
#include "o2e_qdw.h"

/* tile[P][16] (rows past P readable) of the channel block at c0, columns q0 .. q0 + P - 1
 * (q0 a multiple of 16), into steps c0 / 4 .. of the panels of a K-channel matrix, bytes ^
 * flip (as o2e_qpack_rows packs an int8 tensor) */
static inline void o2e_qdwpw_put_(const uint8_t *tile, size_t c0, size_t K, size_t q0, size_t P,
                                  uint8_t flip, uint8_t *panels) {
  const size_t K4 = (K + 3) / 4, s0 = c0 / 4, ns = K4 - s0 < 4 ? K4 - s0 : 4;
  panels += (q0 / 16) * K4 * O2E_QSTEP;
#if defined(O2E_Q_VNNI)
  /* word d of i01's result: group d / 8 of pixel d % 8 of 8 tile rows as (r0 | r1), word
   * 4 (d % 8) + d / 8; i23: groups 2 and 3 */
  const __m512i i01 = _mm512_set_epi32(29, 25, 21, 17, 13, 9, 5, 1, 28, 24, 20, 16, 12, 8, 4, 0);
  const __m512i i23 = _mm512_set_epi32(31, 27, 23, 19, 15, 11, 7, 3, 30, 26, 22, 18, 14, 10, 6, 2);
  const __m512i f = _mm512_set1_epi8((char)flip);
  for (size_t p0 = 0; p0 < P; p0 += 16) {
    uint8_t *d = panels + (p0 / 16) * K4 * 64 + s0 * 64;
    const uint8_t *t = tile + p0 * O2E_QDWC_CB;
    const __m512i r0 = _mm512_loadu_si512(t), r1 = _mm512_loadu_si512(t + 64);
    const __m512i r2 = _mm512_loadu_si512(t + 128), r3 = _mm512_loadu_si512(t + 192);
    const __m512i a01 = _mm512_permutex2var_epi32(r0, i01, r1); /* groups 0, 1 of rows 0..7 */
    const __m512i a23 = _mm512_permutex2var_epi32(r0, i23, r1); /* groups 2, 3 */
    const __m512i b01 = _mm512_permutex2var_epi32(r2, i01, r3); /* of rows 8..15 */
    const __m512i b23 = _mm512_permutex2var_epi32(r2, i23, r3);
    const __m512i g[4] = {_mm512_shuffle_i32x4(a01, b01, 0x44), _mm512_shuffle_i32x4(a01, b01, 0xEE),
                          _mm512_shuffle_i32x4(a23, b23, 0x44), _mm512_shuffle_i32x4(a23, b23, 0xEE)};
    for (size_t s = 0; s < ns; ++s) _mm512_storeu_si512(d + s * 64, _mm512_xor_si512(g[s], f));
  }
#elif (defined(__SSE2__) || (defined(__ARM_NEON) && defined(__aarch64__))) && !defined(O2E_Q_DSP)
  /* four pixels at a time: their 4 x 4 words transposed, row s the step s0 + s of those
   * pixels (AVX2: widened to the int16 sub-panel of those 4 columns, o2e_qstep_store's) */
  for (size_t p0 = 0; p0 < P; p0 += 16) {
    uint8_t *panel = panels + (p0 / 16) * K4 * O2E_QSTEP;
    for (size_t i = 0; i < 4; ++i) {
      const uint8_t *t = tile + (p0 + 4 * i) * O2E_QDWC_CB;
#if defined(__SSE2__)
      const __m128i f = _mm_set1_epi8((char)flip);
      const __m128i r0 = _mm_loadu_si128((const __m128i *)t);
      const __m128i r1 = _mm_loadu_si128((const __m128i *)(t + 16));
      const __m128i r2 = _mm_loadu_si128((const __m128i *)(t + 32));
      const __m128i r3 = _mm_loadu_si128((const __m128i *)(t + 48));
      const __m128i a0 = _mm_unpacklo_epi32(r0, r1), a1 = _mm_unpacklo_epi32(r2, r3);
      const __m128i a2 = _mm_unpackhi_epi32(r0, r1), a3 = _mm_unpackhi_epi32(r2, r3);
      const __m128i g[4] = {_mm_unpacklo_epi64(a0, a1), _mm_unpackhi_epi64(a0, a1),
                            _mm_unpacklo_epi64(a2, a3), _mm_unpackhi_epi64(a2, a3)};
      for (size_t s = 0; s < ns; ++s) {
        const __m128i v = _mm_xor_si128(g[s], f);
#if defined(O2E_Q_AVX2)
        _mm256_storeu_si256((__m256i *)(panel + (i * K4 + s0 + s) * 32), _mm256_cvtepu8_epi16(v));
#else
        _mm_storeu_si128((__m128i *)(panel + (s0 + s) * 64 + 16 * i), v);
#endif
      }
#else
      const uint32x4x4_t r = vld4q_u32((const uint32_t *)(const void *)t);
      for (size_t s = 0; s < ns; ++s)
        vst1q_u8(panel + (s0 + s) * 64 + 16 * i,
                 veorq_u8(vreinterpretq_u8_u32(r.val[s]), vdupq_n_u8(flip)));
#endif
    }
  }
#else
  for (size_t p0 = 0; p0 < P; p0 += 16) {
    uint8_t *panel = panels + (p0 / 16) * K4 * O2E_QSTEP;
    const uint8_t *t = tile + p0 * O2E_QDWC_CB;
    for (size_t s = 0; s < ns; ++s) {
      uint8_t blk[64];
      for (size_t j = 0; j < 16; ++j)
        for (size_t i = 0; i < 4; ++i) blk[4 * j + i] = (uint8_t)(t[j * O2E_QDWC_CB + 4 * s + i] ^ flip);
      o2e_qstep_put(panel, s0 + s, K4, blk);
    }
  }
#endif
}

/* The operands of both layers: the depthwise one as o2e_qdwc_mt's (d.y unused; d.ws: a plane
 * and a tile per thread slot), the 1x1 one as o2e_qgemm's over the panels. */
typedef struct {
  o2e_qdwc_par_args d;
  uint8_t *panels; /* O2E_QPANEL_BYTES(C, OH * OW) */
  uint8_t pflip;   /* the 1x1 layer's input flip (0x80: int8 activations) */
  const int8_t *apack;
  const int32_t *bias, *rowsum;
  const float *scale;
  int32_t zp, lo, hi;
  uint8_t *y; /* [M][OH * OW] */
} o2e_qdwpw_args;

/* Work units of the 1x1 phase: chunks of 32 columns (o2e_qgemm_rows' chunks), one for a map
 * of at most 64 (o2e_qgemm takes those whole). */
#define O2E_QDWPW_UNITS(P) (O2E_QWIDE(P) ? 1 : ((size_t)(P) + 2 * O2E_QNR - 1) / (2 * O2E_QNR))

/* Output rows per band of the depthwise phase: whole panels (a multiple of 16 pixels) of 256
 * pixels or more, so the tile of a block (tile bytes: O2E_QDWC_TILE of the band's pixels, or
 * of the map's where it is smaller) is a few KB where a whole map's is 196 KB at 112 x 112,
 * times the thread slots (kernels/int8/qdwpw.py's band_rows) */
#define O2E_QDWPW_ROWS16(OW) ((size_t)16 / (((OW) & (~(size_t)(OW) + 1)) > 16 ? 16 : ((OW) & (~(size_t)(OW) + 1))))
#define O2E_QDWPW_BAND(OW)                                                                      \
  (O2E_QDWPW_ROWS16(OW) * (O2E_QDWPW_ROWS16(OW) * (OW) >= 256                                   \
                               ? 1                                                              \
                               : (256 + O2E_QDWPW_ROWS16(OW) * (OW) - 1) / (O2E_QDWPW_ROWS16(OW) * (OW))))

/* Channel blocks [b0, b1) of the depthwise layer into the panels (the dimensions as
 * arguments: the per-layer wrappers pass constants, as for o2e_qdwc_units_k_). */
static inline __attribute__((always_inline)) void o2e_qdwpw_dw_k_(
    const o2e_qdwpw_args *a, int b0, int b1, size_t C, size_t H, size_t W, size_t OH, size_t OW,
    int kh, int kw, int sh, int sw, int ph, int pw, int dh, int dw) {
  const o2e_qdwc_par_args *d = &a->d;
  const size_t CB = O2E_QDWC_CB, T = (size_t)kh * (size_t)kw, P = OH * OW;
  const size_t Hp = O2E_QDWC_HP(OH, kh, sh, dh), Wp = O2E_QDWC_WP(OW, kw, sw, dw);
  const float flo = (float)(d->lo - d->zp), fhi = (float)(d->hi - d->zp);
  uint8_t *plane = d->ws + d->slot * (size_t)(d->thread ? d->thread() : 0);
  uint8_t *tile = plane + d->tile;
  const size_t rb = O2E_QDWPW_BAND(OW);
  memset(plane, (int)(uint8_t)d->xz, Hp * Wp * CB);
  memset(tile, 0, O2E_QDWC_TILE(rb * OW < P ? rb * OW : P));
  for (size_t c0 = (size_t)b0 * CB; c0 < C && c0 < (size_t)b1 * CB; c0 += CB) {
    const size_t cn = C - c0 < CB ? C - c0 : CB;
    const int32_t *wb = d->w + (c0 / CB) * T * CB;
    o2e_qdwc_fill(d->x + c0 * H * W, cn, H, W, Hp, Wp, ph, pw, d->flip, plane);
    for (size_t oy = 0; oy < OH; oy += rb) {
      const size_t nr = OH - oy < rb ? OH - oy : rb;
      o2e_qdwc_tile_(plane + oy * (size_t)sh * Wp * CB, Wp, nr, OW, kh, kw, sh, sw, dw, wb,
                     d->off, d->bias + c0, d->scale + c0, flo, fhi, d->zp, tile);
      o2e_qdwpw_put_(tile, c0, C, oy * OW, nr * OW, a->pflip, a->panels);
    }
  }
}

/* Units [u0, u1) of the 1x1 layer: M rows over K = C channels of P columns. */
static inline __attribute__((always_inline)) void o2e_qdwpw_pw_k_(const o2e_qdwpw_args *a,
                                                                  int u0, int u1, size_t M,
                                                                  size_t P, size_t K) {
  const size_t K4 = (K + 3) / 4;
  if (O2E_QWIDE(P)) {
    o2e_qgemm(M, P, K, a->apack, a->panels, a->bias, a->rowsum, a->scale, a->zp, a->lo, a->hi,
              a->y, P, 1);
    return;
  }
  for (size_t u = (size_t)u0; u < (size_t)u1; ++u) {
    const size_t p0 = u * 2 * O2E_QNR, nc = P - p0 < 2 * O2E_QNR ? P - p0 : 2 * O2E_QNR;
    o2e_qgemm(M, nc, K, a->apack, a->panels + (p0 / O2E_QNR) * K4 * O2E_QSTEP, a->bias,
              a->rowsum, a->scale, a->zp, a->lo, a->hi, a->y + p0, P, 1);
  }
}

static inline void o2e_qdwpw_dw_units_(void *arg, int b0, int b1) {
  const o2e_qdwpw_args *a = (const o2e_qdwpw_args *)arg;
  const o2e_qdwc_par_args *d = &a->d;
  o2e_qdwpw_dw_k_(a, b0, b1, d->C, d->H, d->W, d->OH, d->OW, d->kh, d->kw, d->sh, d->sw, d->ph,
                  d->pw, d->dh, d->dw);
}

/* The operands with the 1x1 layer's M, for the generic unit functions (the per-layer ones
 * take the dimensions as constants). */
typedef struct {
  o2e_qdwpw_args a;
  size_t M;
} o2e_qdwpw_gen_args;

static inline void o2e_qdwpw_pw_units_(void *arg, int u0, int u1) {
  const o2e_qdwpw_gen_args *g = (const o2e_qdwpw_gen_args *)arg;
  o2e_qdwpw_pw_k_(&g->a, u0, u1, g->M, g->a.d.OH * g->a.d.OW, g->a.d.C);
}

/* y [M][OH * OW] = the 1x1 layer (apack .. hi2: o2e_qgemm's operands, pflip its input flip)
 * over the depthwise layer (C .. hi: o2e_qdwc's operands) of one image x [C][H][W]. ws: slot
 * bytes per thread (one slot when dpar is NULL), each a plane and at offset tile a tile;
 * dpar / ppar: o2e_parallel_for for a phase that splits, else NULL; dunits / punits: the
 * per-layer unit functions (o2e_qdwpw_dw_k_ / o2e_qdwpw_pw_k_ with constant dimensions; the
 * pw one is given &args, an o2e_qdwpw_args), or NULL for the generic ones. */
static inline void o2e_qdwpw(size_t C, size_t H, size_t W, size_t OH, size_t OW, int kh, int kw,
                             int sh, int sw, int ph, int pw, int dh, int dw, const uint8_t *x,
                             uint8_t flip, int32_t xz, const int32_t *w, const int32_t *off,
                             const int32_t *bias, const float *scale, int32_t zp, int32_t lo,
                             int32_t hi, uint8_t *ws, size_t slot, size_t tile, uint8_t *panels,
                             size_t M, const int8_t *apack, uint8_t pflip, const int32_t *bias2,
                             const int32_t *rowsum, const float *scale2, int32_t zp2, int32_t lo2,
                             int32_t hi2, uint8_t *y, o2e_qpar_for dpar, o2e_qpar_for ppar,
                             o2e_qpar_thread thread, void (*dunits)(void *, int, int),
                             void (*punits)(void *, int, int)) {
  o2e_qdwpw_gen_args g = {
      .a = {.d = {.C = C, .H = H, .W = W, .OH = OH, .OW = OW, .kh = kh, .kw = kw, .sh = sh,
                  .sw = sw, .ph = ph, .pw = pw, .dh = dh, .dw = dw, .x = x, .flip = flip,
                  .xz = xz, .w = w, .off = off, .bias = bias, .scale = scale, .zp = zp,
                  .lo = lo, .hi = hi, .y = 0, .ws = ws, .slot = dpar ? slot : 0, .tile = tile,
                  .thread = dpar ? thread : 0},
            .panels = panels, .pflip = pflip, .apack = apack, .bias = bias2, .rowsum = rowsum,
            .scale = scale2, .zp = zp2, .lo = lo2, .hi = hi2, .y = y},
      .M = M};
  const int nb = (int)((C + O2E_QDWC_CB - 1) / O2E_QDWC_CB);
  const int nu = (int)O2E_QDWPW_UNITS(OH * OW);
  void (*df)(void *, int, int) = dunits ? dunits : o2e_qdwpw_dw_units_;
  void (*pf)(void *, int, int) = punits ? punits : o2e_qdwpw_pw_units_;
  if (dpar)
    dpar(nb, df, &g);
  else
    df(&g, 0, nb);
  if (ppar)
    ppar(nu, pf, &g);
  else
    pf(&g, 0, nu);
}

#endif
