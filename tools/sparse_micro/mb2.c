/* Micro-benchmark behind o2e_spmm's tiling (issue 14): Y[M][P] = W[M][K] . X[K][P] at density
 * argv[4] (M K P = argv[1..3], e.g. 512 512 196 for MobileNet v1's 14x14 pointwise layers),
 * o2e_spmm ("cur") and SPMM2 from spmm2.h ("new": a variant under test) against our dense
 * o2e_sgemm (unpacked A) in the same process. Thread CPU time, best of 5.
 *   R=src/onnx2edge/backends/c/runtime
 *   echo '#define SPMM2 o2e_spmm' > /tmp/spmm2.h
 *   gcc -O3 -march=native -ffp-contract=fast -I$R -I/tmp tools/sparse_micro/mb2.c -o /tmp/mb2 -lm
 *   /tmp/mb2 512 512 196 0.1 */
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <time.h>
#include "o2e_gemm.h"
#include "o2e_sparse.h"
#include "spmm2.h"
static double now(void){struct timespec t;clock_gettime(CLOCK_THREAD_CPUTIME_ID,&t);return t.tv_sec*1e3+t.tv_nsec*1e-6;}
static float frand(void){return (float)rand()/RAND_MAX*2-1;}
int main(int argc, char **argv) {
  int M = atoi(argv[1]), K = atoi(argv[2]), P = atoi(argv[3]); double dens = atof(argv[4]);
  float *w = calloc((size_t)M*K, 4), *x = aligned_alloc(64, ((size_t)K*P*4+63)/64*64), *b = malloc(M*4), *y0 = malloc((size_t)M*P*4), *y1 = malloc((size_t)M*P*4);
  int i, j, k; srand(1);
  if (getenv("FIXED")) { int per = (int)(dens*K+0.5); for (j=0;j<M;j++){ int c=0; while(c<per){ k=rand()%K; if(w[(size_t)j*K+k]==0){w[(size_t)j*K+k]=frand(); c++;} } } }
  else for (i = 0; i < M*K; i++) w[i] = ((double)rand()/RAND_MAX < dens) ? frand() : 0.0f;
  for (i = 0; i < K*P; i++) x[i] = frand();
  for (i = 0; i < M; i++) b[i] = frand();
  int *rp = malloc((M+1)*4), *col = malloc((size_t)M*K*4); float *val = malloc((size_t)M*K*4); int nnz = 0;
  rp[0]=0; for (j=0;j<M;j++){for(k=0;k<K;k++) if(w[(size_t)j*K+k]!=0){col[nnz]=k;val[nnz++]=w[(size_t)j*K+k];} rp[j+1]=nnz;}
  /* xnnpack-style: per row, nnz count; byte diffs */
  int *nnzc = malloc(M*4); long *dmap = malloc((size_t)(nnz+1)*8); 
  { long prev = 0; int c = 0; for (j=0;j<M;j++){ nnzc[j]=rp[j+1]-rp[j]; for (i=rp[j];i<rp[j+1];i++){ long cur=(long)col[i]*P*4; dmap[c++]=cur-prev; prev=cur;} } }
  int reps = (int)(2e8 / ((double)nnz*P + 1)) + 1;
  double t, best[3] = {1e9,1e9,1e9}; void *ws = aligned_alloc(64, (o2e_sgemm_workspace(M,P,K)+63)/64*64); o2e_act act={0,0,0}; int r, it;
  for (it = 0; it < 5; it++) {
    t = now(); for (r=0;r<reps;r++) o2e_spmm(M,K,P,rp,col,val,x,P,b,y0,P); t=(now()-t)/reps; if(t<best[0])best[0]=t;
    t = now(); for (r=0;r<reps/4+1;r++) o2e_sgemm(M,P,K,w,K,x,P,y1,P,0,b,NULL,NULL,0,act,ws); t=(now()-t)/(reps/4+1); if(t<best[2])best[2]=t;
    t = now(); for (r=0;r<reps;r++) SPMM2(M,K,P,rp,col,val,x,P,b,y1,P); t=(now()-t)/reps; if(t<best[1])best[1]=t;
  }
  double e=0; for(i=0;i<M*P;i++){double d=fabs(y0[i]-y1[i]); if(d>e)e=d;}
  double fl = 2.0*nnz*P;
  printf("dense %.1f us (%.1f GF/s) ", best[2]*1e3, 2.0*M*K*P/best[2]/1e6); printf("M%d K%d P%d d%.2f: cur %.1f us (%.1f GF/s)  new %.1f us (%.1f GF/s)  dense-equiv GF/s of new %.1f  err %g\n", M,K,P,dens,best[0]*1e3, fl/best[0]/1e6, best[1]*1e3, fl/best[1]/1e6, 2.0*M*K*P/best[1]/1e6, e);
  return 0;
}
