/* Micro-benchmark behind the batch-1 choices in runtime/o2e_sparse.h (issue 14): one 1000 -> 500
 * FC layer, density argv[1], share of zero inputs argv[2] (default 0.5, as after a ReLU): our
 * dense zero-skipping kernel (o2e_fc_skip_zeros), the row-wise CSR gather spmv (AVX-512), CSC
 * (one nonzero at a time, "csc-scalar"), CSC 4 at a time ("csr-gather" column: the min of the
 * gather and the 4-wide CSC) and the bitmap / vexpandps kernel. Thread CPU time, best of 7.
 *   R=src/onnx2edge/backends/c/runtime
 *   gcc -O3 -march=native -ffp-contract=fast -I$R tools/sparse_micro/mb1.c -o /tmp/mb1 -lm
 *   /tmp/mb1 0.2 */
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <time.h>
#include "o2e_gemm.h"
#include "o2e_sparse.h"
#ifndef EXP
#define EXP(m, v) _mm512_maskz_expand_ps((m), _mm512_loadu_ps(v))
#endif
#ifndef G
#define G 64
#endif
static double now(void){struct timespec t;clock_gettime(CLOCK_THREAD_CPUTIME_ID,&t);return t.tv_sec*1e3+t.tv_nsec*1e-6;}
static float frand(void){return (float)rand()/RAND_MAX*2-1;}
/* bitmap-expand: groups of G outputs; per (g,k): uint64 masks[G/64]... use G/16 uint16 masks */
#ifdef __AVX512F__
static void bm_fc(int N, int K, const uint16_t *mask, const int *off, const float *val, const float *x,
                  const float *bias, float *y, int *nz) {
  int n = 0, k, g, i, q;
  for (k = 0; k < K; k++) if (x[k] != 0.0f) nz[n++] = k;
  for (g = 0; g < (N + G - 1) / G; g++) {
    __m512 a[G/16];
    for (q = 0; q < G/16; q++) a[q] = _mm512_setzero_ps();
    const uint16_t *mg = mask + (size_t)g * K * (G/16);
    const int *og = off + (size_t)g * K;
    for (i = 0; i < n; i++) {
      const int kk = nz[i];
      const __m512 xv = _mm512_set1_ps(x[kk]);
      const uint16_t *m = mg + (size_t)kk * (G/16);
      const float *v = val + og[kk];
      for (q = 0; q < G/16; q++) {
        const __mmask16 km = _load_mask16((__mmask16 *)(m + q));
        a[q] = _mm512_fmadd_ps(xv, EXP(km, v), a[q]);
        v += __builtin_popcount(m[q]);
      }
    }
    for (q = 0; q < G/16; q++) if (g*G+16*q < N) {
      int r = N - (g*G+16*q); __mmask16 mm = r >= 16 ? 0xffff : (1u<<r)-1;
      _mm512_mask_storeu_ps(y + g*G + 16*q, mm, _mm512_add_ps(a[q], _mm512_maskz_loadu_ps(mm, bias + g*G+16*q)));
    }
  }
}
#endif
static void csc4(int N, int K, const int *cp, const int16_t *row, const float *val, const float *x, const float *bias, float *y) {
  int k, j;
  for (j = 0; j < N; j++) y[j] = bias[j];
  for (k = 0; k < K; k++) { const float xk = x[k]; if (xk == 0.0f) continue;
    const int j1 = cp[k+1];
    for (j = cp[k]; j + 4 <= j1; j += 4) {
      const int r0 = row[j], r1 = row[j+1], r2 = row[j+2], r3 = row[j+3];
      const float y0 = y[r0] + xk * val[j], y1 = y[r1] + xk * val[j+1], y2 = y[r2] + xk * val[j+2], y3 = y[r3] + xk * val[j+3];
      y[r0] = y0; y[r1] = y1; y[r2] = y2; y[r3] = y3; }
    for (; j < j1; j++) y[row[j]] += xk * val[j]; }
}
static void csc_fc(int N, int K, const int *cp, const int16_t *row, const float *val, const float *x, const float *bias, float *y) {
  int k, j;
  for (j = 0; j < N; j++) y[j] = bias[j];
  for (k = 0; k < K; k++) { const float xk = x[k]; if (xk == 0.0f) continue;
    for (j = cp[k]; j < cp[k+1]; j++) y[row[j]] += xk * val[j]; }
}
#ifdef __AVX512F__
static void csc_vec(int N, int K, const int *cp, const int16_t *row, const float *val, const float *x, const float *bias, float *y) {
  int k, j;
  for (j = 0; j < N; j++) y[j] = bias[j];
  for (k = 0; k < K; k++) { const float xk = x[k]; if (xk == 0.0f) continue;
    const __m512 xv = _mm512_set1_ps(xk);
    for (j = cp[k]; j + 16 <= cp[k+1]; j += 16) {
      __m512i idx = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(row + j)));
      __m512 g = _mm512_i32gather_ps(idx, y, 4);
      g = _mm512_fmadd_ps(xv, _mm512_loadu_ps(val + j), g);
      _mm512_i32scatter_ps(y, idx, g, 4);
    }
    for (; j < cp[k+1]; j++) y[row[j]] += xk * val[j]; }
}
#endif
int main(int argc, char **argv) {
  int N = 500, K = 1000; double dens = atof(argv[1]), xz = argc > 2 ? atof(argv[2]) : 0.5;
  int reps = 2000;
  float *w = calloc((size_t)N*K, 4), *x = malloc(K*4), *b = malloc(N*4), *y0 = malloc(N*4), *y1 = malloc(N*4);
  int *nz = malloc(K*4); int i, j, k;
  srand(1);
  for (i = 0; i < N*K; i++) w[i] = ((double)rand()/RAND_MAX < dens) ? frand() : 0.0f;
  for (k = 0; k < K; k++) x[k] = ((double)rand()/RAND_MAX < xz) ? 0.0f : frand();
  for (i = 0; i < N; i++) b[i] = frand();
  /* dense blocked */
  int nbk = (N + 255)/256; float *wt = calloc((size_t)nbk*K*256, 4);
  for (j = 0; j < N; j++) for (k = 0; k < K; k++) wt[((size_t)(j/256)*K + k)*256 + j%256] = w[(size_t)j*K+k];
  o2e_act act = {0, 0, 0};
  /* csr */
  int *rp = malloc((N+1)*4), *col = malloc((size_t)N*K*4); float *val = malloc((size_t)N*K*4); int nnz = 0;
  rp[0]=0; for (j=0;j<N;j++){for(k=0;k<K;k++) if(w[(size_t)j*K+k]!=0){col[nnz]=k;val[nnz++]=w[(size_t)j*K+k];} rp[j+1]=nnz;}
  /* csc */
  int *cp = malloc((K+1)*4); int16_t *row = malloc((size_t)nnz*2); float *cv = malloc((size_t)nnz*4); int c=0;
  cp[0]=0; for(k=0;k<K;k++){for(j=0;j<N;j++) if(w[(size_t)j*K+k]!=0){row[c]=j;cv[c++]=w[(size_t)j*K+k];} cp[k+1]=c;}
#ifdef __AVX512F__
  int ng = (N+G-1)/G; uint16_t *msk = calloc((size_t)ng*K*(G/16),2); int *off = malloc((size_t)ng*K*4); float *bv = malloc((size_t)(nnz+16)*4); c=0;
  for (int g=0; g<ng; g++) for (k=0;k<K;k++){ off[(size_t)g*K+k]=c; for(int q=0;q<G/16;q++){uint16_t m=0; for(int l=0;l<16;l++){int jj=g*G+16*q+l; if(jj<N && w[(size_t)jj*K+k]!=0){m|=1u<<l; bv[c++]=w[(size_t)jj*K+k];}} msk[((size_t)g*K+k)*(G/16)+q]=m;}}
#endif
  double t, best[4] = {1e9,1e9,1e9,1e9}; int r, it;
  for (it = 0; it < 7; it++) {
    t = now(); for (r=0;r<reps;r++) o2e_fc_skip_zeros(N,K,wt,x,b,y0,act,nz); t = (now()-t)/reps; if (t<best[0]) best[0]=t;
    t = now(); for (r=0;r<reps;r++) { o2e_spmv(N,rp,col,val,x,b,y1);} t = (now()-t)/reps; if (t<best[1]) best[1]=t;
    t = now(); for (r=0;r<reps;r++) csc_fc(N,K,cp,row,cv,x,b,y1); t = (now()-t)/reps; if (t<best[2]) best[2]=t;
#ifdef __AVX512F__
    t = now(); for (r=0;r<reps;r++) bm_fc(N,K,msk,off,bv,x,b,y1,nz); t = (now()-t)/reps; if (t<best[3]) best[3]=t;
    t = now(); for (r=0;r<reps;r++) csc4(N,K,cp,row,cv,x,b,y1); t = (now()-t)/reps; if (t<best[1]) best[1]=t;
#endif
  }
  double e=0; for(j=0;j<N;j++){double d=fabs(y0[j]-y1[j]); if(d>e)e=d;}
  printf("dens %.2f xz %.2f: dense %.2f us  csr-gather %.2f  csc-scalar %.2f  bitmap-expand %.2f   (err %g)\n", dens, xz, best[0]*1e3, best[1]*1e3, best[2]*1e3, best[3]*1e3, e);
  return 0;
}
