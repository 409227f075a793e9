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
 * rapidly instantiating BLAS functionality"), with the loop order picked by measurement:
 *   - a register-blocked MR x NR micro-kernel keeps the whole C tile in vector registers for
 *     a KC-long loop of rank-1 updates (broadcast one A value, FMA it with the NR-wide row
 *     of B), so each loaded value feeds several FMAs and the FMA units, not the loads, set
 *     the pace (8 x 48 on AVX-512: 24 accumulators, 11 loads per 24 FMAs);
 *   - K is cut into KC slices and B into NR-wide column strips; each KC x NR strip is copied
 *     ("packed") to contiguous memory right before use, small enough to stay in L1 while
 *     every 8-row panel of A streams past it, and free of the TLB misses and cache-set
 *     conflicts a strided walk down B's columns would cause;
 *   - A is stored as 8-row panels interleaved along K ("k-major": the 8 values of one K step
 *     are adjacent), so the kernel reads it as one sequential stream. Weights are constant,
 *     so conversion packs them once (gemm_pack.py); a plain A is read in place, since the
 *     broadcast operand is loaded one scalar at a time anyway;
 *   - rows are grouped in M blocks sized for the last-level cache (the A block is reused by
 *     every strip), the next strip of B and the next A panel are prefetched while the
 *     current ones are being multiplied;
 *   - bias / residual / activation are fused into the store of each C tile after the last
 *     K slice, so C is never re-read by a separate pass.
 * Matrix-vector (N == 1) and small-N products are memory bound and take dedicated paths.
 *
 * The packed-A layout is the same for every kernel variant (MR = O2E_GEMM_MR = 8 rows per
 * panel, the full K per panel, rows past M zero-filled): weights converted once run with the
 * AVX-512, the AVX2 and the portable kernel alike. A K sub-range of a panel is contiguous,
 * so KC can change freely without repacking.
 *
 * Kernel chosen at compile time: __AVX512F__ -> 8x48 AVX-512 kernel; __AVX2__ && __FMA__ ->
 * 4x24 AVX2 kernel (works on half panels); __ARM_NEON on aarch64 -> 8x12 NEON kernel;
 * otherwise a portable C99 kernel.
 * Optional threads: compile with -DO2E_THREADS=n, n > 1 (pthreads; link with -pthread): a
 * pool of up to O2E_MAX_THREADS - 1 workers (default n; the generated model.c sets it to
 * convert --max-threads), started on first use, splits N (or M when N is small) for large
 * enough calls. n is the default thread count; o2e_use_threads(t) chooses 1..O2E_MAX_THREADS
 * for the calls the calling thread makes next (read once per call). Without it (n = 1, the
 * default) nothing of pthreads is referenced. The same pool runs other data-parallel loops of
 * the generated code (o2e_parallel_for).
 * No heap allocation: all scratch comes from the caller's 64-byte-aligned workspace of
 * o2e_sgemm_workspace(M, N, K) bytes (gemm_pack.sgemm_workspace_bytes gives an upper bound
 * at conversion time, valid for every kernel variant). One workspace per concurrent caller.
 * o2e_act is defined here unless O2E_ACT_DEFINED is (same layout required).
 */
#ifndef O2E_GEMM_H
#define O2E_GEMM_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>


#ifndef O2E_THREADS
#define O2E_THREADS 1
#endif
#ifndef O2E_MAX_THREADS /* the pool's capacity: per-thread workspaces are sized for it */
#define O2E_MAX_THREADS O2E_THREADS
#endif
#if O2E_THREADS < 1 || O2E_THREADS > O2E_MAX_THREADS
#error "O2E_THREADS must be 1 .. O2E_MAX_THREADS (the threads the workspaces were sized for)"
#endif
#if O2E_THREADS > 1
#include <pthread.h>
#include <sched.h>
#endif
#ifndef O2E_PAR_CHUNKS /* work ranges per thread of a parallel call, claimed dynamically: a */
#define O2E_PAR_CHUNKS 4 /* late or descheduled thread's share is taken over by the others */
#endif

#if defined(__AVX512F__)
#define O2E_GEMM_AVX512 1
#include <immintrin.h>
#elif defined(__AVX2__) && defined(__FMA__)
#define O2E_GEMM_AVX2 1
#include <immintrin.h>
#elif defined(__ARM_NEON) && defined(__aarch64__)
#define O2E_GEMM_NEON 1 /* AArch64 Advanced SIMD: 32 q registers of 4 floats, fused fmla */
#include <arm_neon.h>
#endif

/* Every function is static: the header is included into model.c. Unused ones must not
 * warn, and the hot helpers must be inlined into the kernels. */
#if defined(__GNUC__) || defined(__clang__)
/* Keeps a loaded vector in a register: gcc otherwise re-reads it as a memory operand of every
 * FMA that uses it, which doubles the loads of a kernel that is load-port bound. */
#define O2E_IN_REG_(v) __asm__("" : "+v"(v))
#define O2E_GEMM_FN static __attribute__((unused))
#define O2E_GEMM_INL static inline __attribute__((always_inline, unused))
#else
#define O2E_IN_REG_(v) ((void)0)
#define O2E_GEMM_FN static
#define O2E_GEMM_INL static inline
#endif

/* ---- blocking parameters ---------------------------------------------------------------
 * MR is part of the packed-weight format; do not change it without changing gemm_pack.py.
 * The others may be overridden with -D for tuning. Defaults were measured on a Zen 5 core
 * (48 KiB L1d, 1 MiB L2, 32 MiB L3); the portable default targets small caches. */
#define O2E_GEMM_MR 8
#if defined(O2E_GEMM_AVX512)
#define O2E_GEMM_NR 48 /* 3 zmm of 16 floats: 8 x 3 = 24 accumulators + 3 B + 1 A regs */
#define O2E_GEMM_VW 16 /* packed B panels are padded to a multiple of the vector width */
#elif defined(O2E_GEMM_AVX2)
#define O2E_GEMM_NR 24 /* 3 ymm: 4 x 3 = 12 accumulators + 3 B + 1 A of the 16 ymm regs */
#define O2E_GEMM_VW 8
#elif defined(O2E_GEMM_NEON)
#define O2E_GEMM_NR 12 /* 3 q: 8 x 3 = 24 accumulators + 3 B + 2 A of the 32 q regs */
#define O2E_GEMM_VW 4
#else
#define O2E_GEMM_NR 8
#define O2E_GEMM_VW 8
#endif
/* Column strips of a B packed at conversion (o2e_sgemm_bpacked, gemm_pack.pack_b): strip q
 * holds columns [q PB, q PB + PB) of all K rows, row-major with row stride PB, zero past N.
 * 48 is a multiple of every kernel's NR, so one layout serves every ISA: an NR-wide strip of
 * it is PB / NR panels side by side, and any K slice of one is a contiguous run of rows. */
#define O2E_GEMM_PB 48
#if O2E_GEMM_PB % O2E_GEMM_NR != 0
#error "O2E_GEMM_PB must be a multiple of O2E_GEMM_NR"
#endif
#ifndef O2E_GEMM_KC /* K slice: a KC x NR strip of packed B stays in L1 */
#if defined(O2E_GEMM_AVX512)
#define O2E_GEMM_KC 256 /* 48 KB: 2-6 % faster than 160 on a 48 KB-L1 AVX-512 core (Zen 5) */
#elif defined(O2E_GEMM_NEON)
#define O2E_GEMM_KC 256 /* 12 KB strip: well inside a 32 KB L1d (Cortex-A53 .. A78) */
#else
#define O2E_GEMM_KC 160
#endif
#endif
/* K slice of a B packed at conversion (o2e_sgemm_bpacked: a transformer's weights). AVX-512:
 * a 256-row slice of a 48-wide strip is 48 KB, the whole L1 of a Zen 5 core, and the A rows
 * and C tile streaming past it evicted it: 192-row slices (36 KB) ran ViT-tiny's fc2
 * (197 x 192, K 768: 4 slices, not 3) 0.94-0.98x. AVX2: KC = 160 cut K = 192 (ViT-tiny's
 * qkv, proj and fc1) into two slices of 96; one slice of 192 (an 18 KB strip of 24 columns)
 * ran fc1 0.96-0.99x (tools/ab_nodes.py, per-node minima of interleaved builds, 1 thread).
 * The slice is this only where the workspace allows (o2e_gemm_run_): K <= O2E_GEMM_KC_BPK
 * (one slice: no partial-sum tile T) or K > O2E_GEMM_KC (o2e_ws_floats_sb_ holds T); a packed
 * B needs no KC-row packing buffer, so O2E_GEMM_KC_BPK may exceed O2E_GEMM_KC. */
#ifndef O2E_GEMM_KC_BPK
#if defined(O2E_GEMM_AVX512) || defined(O2E_GEMM_AVX2)
#define O2E_GEMM_KC_BPK 192
#else
#define O2E_GEMM_KC_BPK O2E_GEMM_KC
#endif
#endif
/* ... and with at most 128 rows (16 A panels sweep each slice) and K > KC, 128-row slices at
 * AVX-512: MiniLM-L6 (M 128; K 384 -> 3 x 128, K 1536 -> 12 x 128) ran its qkv, fc1 and fc2
 * 0.93-0.98x the 192-row slices (model total 0.95x), where ViT-tiny's fc2 (M 197, K 768)
 * ran 1.02-1.03x with 128 (and 1.00-1.03x with 160): taken for the few-row case only. */
#ifndef O2E_GEMM_KC_BPK_FEW
#if defined(O2E_GEMM_AVX512)
#define O2E_GEMM_KC_BPK_FEW 128
#else
#define O2E_GEMM_KC_BPK_FEW O2E_GEMM_KC_BPK
#endif
#endif
#ifndef O2E_GEMM_SB /* NR strips packed together: B is read in rows of SB * NR floats */
#define O2E_GEMM_SB 1
#endif
#ifndef O2E_GEMM_CONV_SB /* the same for an implicit-im2col B (o2e_sgemm_packed_conv) */
/* Each packing of a strip reads, per input channel, the few phase-plane rows its columns
 * need; 4 strips (192 columns at AVX-512: about 7 output rows of a 28-wide map) read each of
 * those rows once instead of up to 4 times. ResNet50's 7x7 / 2 stem (3 -> 64, 112x112 out)
 * 1.00 -> 0.93 (x86-64-v3) / 0.97 (native), its 3x3 / 2 128 -> 128 on 28x28 0.92
 * (tools/ab_nodes.py, minima, against SB 1) */
#define O2E_GEMM_CONV_SB 4
#endif
#ifndef O2E_GEMM_A_BYTES /* A block (M block x K) kept in the last-level cache */
#if defined(O2E_GEMM_AVX512) || defined(O2E_GEMM_AVX2)
#define O2E_GEMM_A_BYTES (8 * 1024 * 1024)
#elif defined(O2E_GEMM_NEON)
#define O2E_GEMM_A_BYTES (512 * 1024) /* the L2 of small ARM cores (Raspberry Pi 3: 512 KB) */
#else
#define O2E_GEMM_A_BYTES (256 * 1024)
#endif
#endif
#ifndef O2E_GEMM_MC_MIN /* fewer rows per block would repack each B strip too often */
#define O2E_GEMM_MC_MIN 64
#endif
#ifndef O2E_GEMM_PF_B_LOC /* cache level hint for prefetching the next B strip */
#define O2E_GEMM_PF_B_LOC 2
#endif
/* ... and of the next strip of a B packed at conversion (o2e_sgemm_bpacked: a transformer's
 * weights, 0.15-2.4 MB a matrix, read from L3 or memory once a layer): into L1. In the model
 * (tools/ab_nodes.py, per-node minima of interleaved builds, AVX-512, 1 thread) ViT-tiny's MLP
 * layers (197 x 768 x 192 and back) ran 0.95-0.98x, MiniLM-L6's (128 x 1536 x 384 and back)
 * 0.94-0.98x against the L2 hint (AVX-512); convolutions, whose B is built at run time, keep
 * O2E_GEMM_PF_B_LOC. */
#ifndef O2E_GEMM_PF_BPK_LOC
#if defined(O2E_GEMM_AVX512)
#define O2E_GEMM_PF_BPK_LOC 3
#else /* x86-64-v3 on the same host: 1.00-1.03x, not taken */
#define O2E_GEMM_PF_BPK_LOC O2E_GEMM_PF_B_LOC
#endif
#endif
#ifndef O2E_GEMM_PF_C_BYTES /* most C + R bytes of one strip prefetched a strip ahead */
#define O2E_GEMM_PF_C_BYTES (256 * 1024)
#endif
/* B read in place (M <= 32, o2e_gemm_run_'s `direct`): the first A panel's kernel call of a
 * strip prefetches the next strip's lines of the same K rows, one row per K step (cache level
 * hint; 0: none). Its K rows lie a whole plane apart, more streams than the hardware follows,
 * so without this the first panel of every strip waited for its B lines from L3. AVX-512 and
 * AVX2 (not NEON: not timed). SqueezeNet's squeeze1x1 layers (16 / 32 outputs;
 * tools/ab_nodes.py, 1 thread, interleaved runs): native 0.83-0.87x with K = 96 / 128 (fire2,
 * fire3), 0.91-0.96x fire4 / fire5; x86-64-v3 0.80-0.83x fire2 / fire3, fire4 0.98x; the other
 * layers unchanged (they pack B, or have M > 32). */
#ifndef O2E_GEMM_PF_DIRECT_K
#define O2E_GEMM_PF_DIRECT_K 2
#endif
/* Prefetch C a strip ahead (o2e_pf_c_) also without a residual. In the model (tools/ab_nodes.py,
 * per-node minima of interleaved builds) ResNet50's residual-free 56x56 1x1 layers ran
 * 0.88-0.97x with it at AVX-512 while other jobs loaded the machine, 0.93-1.0x on a quiet one;
 * at x86-64-v3 on the same host 1.00-1.04x, so AVX2 takes it only where K is small
 * (O2E_GEMM_PF_C_NORES_MAXK), i.e. where the few FMAs per tile cannot hide the output lines'
 * misses: SqueezeNet's expand1x1 layers (K = 32 .. 64) then ran 0.69-0.82x, its squeeze1x1
 * layers on 55x55 maps (K = 96, 128) 0.80x at x86-64-v3. */
#ifndef O2E_GEMM_PF_C_NORES
#if defined(O2E_GEMM_AVX512) || defined(O2E_GEMM_AVX2)
#define O2E_GEMM_PF_C_NORES 1
#else
#define O2E_GEMM_PF_C_NORES 0
#endif
#endif
#ifndef O2E_GEMM_PF_C_NORES_MAXK /* ... and then only for K up to this */
#if defined(O2E_GEMM_AVX2)
#define O2E_GEMM_PF_C_NORES_MAXK 128
#else
#define O2E_GEMM_PF_C_NORES_MAXK (1 << 30)
#endif
#endif
/* C rows at least this many floats apart are prefetched (o2e_pf_c_). In the model
 * (tools/ab_nodes.py, per-node minima of interleaved builds, AVX-512) a 1024 threshold left
 * out 27x27 and 28x28 maps (729 / 784): SqueezeNet's fire8/expand1x1 (64 -> 256, small K, so
 * the output lines are the cost) ran 0.62x and fire6/expand1x1 0.72x with it, ResNet50's
 * res3b-d 1x1 + residual 0.8x; 13x13 / 14x14 maps (169 / 196) stay out: res4's 1x1 layers
 * with their residual ran 1.1-1.2x slower with it. */
#ifndef O2E_GEMM_PF_C_MINLD
#define O2E_GEMM_PF_C_MINLD 512
#endif
#ifndef O2E_PACK_PD /* rows of B the packing loop prefetches ahead of its copy */
#define O2E_PACK_PD 16
#endif
/* Below this much work (flops; a product with N < 16 counts 16 / N times its flops, being
 * memory bound) a call stays on one thread, and each further thread needs half of it: the
 * rule of the int8 kernels (kernels/int8/qdw_kernels.py, `split`), about 10 us a thread. A
 * parallel region costs ~2-6 us on a 2-vCPU host (hand-off, join, the job counter's cache line
 * crossing cores), far more when the host stalls the second vCPU mid-job; 4e6 flops take
 * ~18 us on one core (~220 GFLOP/s). At 1e6, MobileViT-xs's 256 x 256 x 24 attention products
 * (3.1e6 flops, 14 us) split 64 times a run into 7 us halves. */
#ifndef O2E_GEMM_MT_FLOPS
#define O2E_GEMM_MT_FLOPS 4e6
#endif

#ifndef O2E_ACT_DEFINED
#define O2E_ACT_DEFINED
/* kind: one of O2E_ACT_*, the `gemm_kind` column of onnx2edge's activation table
 * (semantics/activations.py; a test checks both agree). Relu and Clip keep NaN. */
typedef struct {
  int kind;
  float a, b;
} o2e_act;
#endif
enum {
  O2E_ACT_NONE = 0,
  O2E_ACT_RELU = 1,
  O2E_ACT_CLIP = 2,
  O2E_ACT_LEAKY_RELU = 3,
  O2E_ACT_HARD_SIGMOID = 4, /* max(0, min(1, a x + b)) */
  O2E_ACT_HARD_SWISH = 5    /* x max(0, min(1, x / 6 + 1 / 2)) */
};
/* Kinds 1-5 are compare-and-select in the registers. From here on the o2e_vmath.h kinds,
 * applied by o2e_act_vm_n_ over a tile just stored (in L1), or a vector spilled to the stack.
 * They exist when o2e_vmath.h was included first (the generated model.c includes it when the
 * code names one of them: writer.py); without it, naming one is a compile error, never a
 * silently skipped activation. */
#define O2E_ACT_VM_FIRST_ 6
#ifdef O2E_VMATH_H
enum {
  O2E_ACT_SIGMOID = 6,
  O2E_ACT_TANH = 7,
  O2E_ACT_SWISH = 8, /* x sigmoid(a x): SiLU for a = 1 */
  O2E_ACT_GELU = 9,  /* a == 0: the erf form, a != 0: the tanh approximation */
  O2E_ACT_MISH = 10
};

/* One element of a vmath kind, the same expressions as the activation table's C column
 * (semantics/activations.py), so a fused epilogue and the standalone op agree: NaN in gives
 * NaN out, selects rather than fminf / fmaxf (calls gcc would not vectorise). GELU's erf form
 * is the one exception: o2e_gelu_erff, one polynomial in place of the table's o2e_erff (half
 * the instructions), within its stated bound of the exact value. */
O2E_GEMM_INL float o2e_act_vm1_(float x, int kind, float a, float b) {
  (void)b; /* no vmath kind has a second parameter */
  switch (kind) {
  case O2E_ACT_SIGMOID:
    return o2e_sigmoidf(x);
  case O2E_ACT_TANH:
    return o2e_tanhf(x);
  case O2E_ACT_SWISH:
    return x * o2e_sigmoidf(a * x);
  case O2E_ACT_GELU:
    if (a != 0)
      return 0.5f * x * (1 + o2e_tanhf(0.7978845608f * (x + 0.044715f * x * x * x)));
    return o2e_gelu_erff(x); /* the table's o2e_erff within o2e_gelu_erff's bound (o2e_vmath.h) */
  case O2E_ACT_MISH: { /* x tanh(softplus(x)) = x n / (n + 2), n = e^x (e^x + 2): the table's */
    const float e = o2e_expf(x > 20 ? 20 : x);
    const float n = e * (e + 2);
    return x * (n / (n + 2));
  }
  default:
    return x;
  }
}

#if defined(O2E_GEMM_AVX512)
/* GELU, erf form, on 16 floats: o2e_gelu_erff (o2e_vmath.h) written with intrinsics, which
 * keep its constants in registers across a tile. With o2e_erff's two polynomials and exp it
 * took 65 us over a ViT MLP layer's 197 x 768 output (0.43 ns a value, 200-call minimum,
 * 1 thread, AVX-512 EPYC; 12 layers: 0.8 ms of a 13.5 ms model), 36 us with this one.
 * x is clamped first (min / max return their second operand for a NaN x, finite), so NaN
 * comes back through 0.5 x; +Inf gives +Inf, -Inf gives NaN (-Inf * 0) as onnxruntime. */
O2E_GEMM_INL __m512 o2e_gelu16_(__m512 x) {
  const __m512 xc = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(5.65685415f)), _mm512_set1_ps(-5.65685415f));
  const __m512 t = _mm512_fmsub_ps(_mm512_mul_ps(xc, xc), _mm512_set1_ps(0.0625f), _mm512_set1_ps(1.0f));
  __m512 p = _mm512_set1_ps(-6.91915571e-04f);
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(2.03516195e-03f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-1.73429656e-03f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(1.48855348e-03f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-5.78157464e-03f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(1.17900288e-02f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-1.62661150e-02f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(2.26289127e-02f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-3.21829505e-02f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(4.25284766e-02f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-5.28793223e-02f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(6.37659207e-02f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-7.61592761e-02f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(9.31093246e-02f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-1.24858342e-01f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(2.49984160e-01f));
  __m512 e = _mm512_mul_ps(xc, p);
  e = _mm512_max_ps(_mm512_min_ps(e, _mm512_set1_ps(1.0f)), _mm512_set1_ps(-1.0f));
  return _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), x), _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}
#elif defined(O2E_GEMM_AVX2)
/* the same on 8 floats */
O2E_GEMM_INL __m256 o2e_gelu8_(__m256 x) {
  const __m256 xc = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(5.65685415f)), _mm256_set1_ps(-5.65685415f));
  const __m256 t = _mm256_fmsub_ps(_mm256_mul_ps(xc, xc), _mm256_set1_ps(0.0625f), _mm256_set1_ps(1.0f));
  __m256 p = _mm256_set1_ps(-6.91915571e-04f);
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(2.03516195e-03f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-1.73429656e-03f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(1.48855348e-03f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-5.78157464e-03f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(1.17900288e-02f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-1.62661150e-02f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(2.26289127e-02f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-3.21829505e-02f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(4.25284766e-02f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-5.28793223e-02f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(6.37659207e-02f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-7.61592761e-02f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(9.31093246e-02f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-1.24858342e-01f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(2.49984160e-01f));
  __m256 e = _mm256_mul_ps(xc, p);
  e = _mm256_max_ps(_mm256_min_ps(e, _mm256_set1_ps(1.0f)), _mm256_set1_ps(-1.0f));
  return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), x), _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

/* o2e_sigmoidf (o2e_vmath.h) on 8 floats, its operations one for one (bit-identical to gcc's
 * vectorisation of it at -march=x86-64-v3 over all 2^32 inputs, NaNs included), with two
 * selects the intrinsics make cheaper: the clamp at -104 as one max (its second operand, -|x|,
 * passes a NaN) where gcc compared and blended twice, and the numerator picked by x's sign bit
 * (blendv reads only that bit; x = -0 gives the same 2^64 either way) without a compare.
 * 21 instructions a vector where gcc's loop had 28: SiLU over a tile 0.35 -> 0.31 ns a value
 * (AVX2 EPYC, 1 thread; EfficientNet's expand and depthwise epilogues run it). */
O2E_GEMM_INL __m256 o2e_sigmoid8_(__m256 x) {
  const __m256 shift = _mm256_set1_ps(12583103.0f);
  __m256 a = _mm256_or_ps(x, _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u)));
  a = _mm256_max_ps(_mm256_set1_ps(-104.0f), a);
  const __m256 kf = _mm256_fmadd_ps(a, _mm256_set1_ps(1.44269504088896341f), shift);
  const __m256 n = _mm256_sub_ps(kf, shift);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), a);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_fmadd_ps(_mm256_set1_ps(1.3814602280e-3f), r, _mm256_set1_ps(8.3687156439e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1668388993e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666521132e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.9999994040e-1f));
  const __m256 q = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r);
  const __m256 s = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_castps_si256(kf), 23));
  const __m256 e = _mm256_fmadd_ps(q, s, s);
  const __m256 d = _mm256_fmadd_ps(e, _mm256_set1_ps(5.42101086242752217e-20f), _mm256_set1_ps(1.0f));
  const __m256 num = _mm256_blendv_ps(_mm256_set1_ps(18446744073709551616.0f), e, x);
  return _mm256_mul_ps(_mm256_div_ps(num, d), _mm256_set1_ps(5.42101086242752217e-20f));
}
#endif

/* x[0..i) = SiLU(x) (sigmoid when !swish) a whole vector at a time; returns i (0 without AVX2:
 * the caller's loop, which gcc vectorises, does the rest) */
O2E_GEMM_FN size_t o2e_sigmoid_vec_(float *x, size_t n, int swish) {
  size_t i = 0;
#if defined(O2E_GEMM_AVX2)
  if (swish)
    for (; i + 8 <= n; i += 8) {
      const __m256 v = _mm256_loadu_ps(x + i);
      _mm256_storeu_ps(x + i, _mm256_mul_ps(v, o2e_sigmoid8_(v)));
    }
  else
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, o2e_sigmoid8_(_mm256_loadu_ps(x + i)));
#else
  (void)x, (void)n, (void)swish;
#endif
  return i;
}

/* x[0..i) = GELU(x) (erf form) a whole vector at a time; returns i (0 without the
 * intrinsics: the caller's loop, which gcc vectorises, does the rest) */
O2E_GEMM_FN size_t o2e_gelu_vec_(float *x, size_t n) {
  size_t i = 0;
#if defined(O2E_GEMM_AVX512)
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, o2e_gelu16_(_mm512_loadu_ps(x + i)));
#elif defined(O2E_GEMM_AVX2)
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, o2e_gelu8_(_mm256_loadu_ps(x + i)));
#else
  (void)x, (void)n;
#endif
  return i;
}

/* x[0..n) = act(x[0..n)) for a vmath kind: the kind dispatched once, outside the loops, so
 * each loop is one vectorised o2e_vmath.h body (the generated model.c starts with the pragma
 * that lets gcc vectorise them, see o2e_vmath.h). */
#define O2E_ACT_LOOP_(K)                                                                       \
  for (i = 0; i < n; i++) x[i] = o2e_act_vm1_(x[i], K, a, b)
O2E_GEMM_FN void o2e_act_vm_n_(float *x, size_t n, o2e_act act) {
  const float a = act.a, b = act.b; /* b: passed on to o2e_act_vm1_, which ignores it */
  size_t i;
  switch (act.kind) {
  case O2E_ACT_SIGMOID:
    for (i = o2e_sigmoid_vec_(x, n, 0); i < n; i++) x[i] = o2e_sigmoidf(x[i]);
    break;
  case O2E_ACT_TANH: O2E_ACT_LOOP_(O2E_ACT_TANH); break;
  case O2E_ACT_SWISH:
    if (a == 1.0f)
      for (i = o2e_sigmoid_vec_(x, n, 1); i < n; i++) x[i] = x[i] * o2e_sigmoidf(x[i]);
    else
      O2E_ACT_LOOP_(O2E_ACT_SWISH);
    break;
  case O2E_ACT_GELU:
    if (a != 0)
      for (i = 0; i < n; i++)
        x[i] = 0.5f * x[i] * (1 + o2e_tanhf(0.7978845608f * (x[i] + 0.044715f * x[i] * x[i] * x[i])));
    else
      for (i = o2e_gelu_vec_(x, n); i < n; i++) x[i] = o2e_gelu_erff(x[i]);
    break;
  case O2E_ACT_MISH: O2E_ACT_LOOP_(O2E_ACT_MISH); break;
  default: break;
  }
}

/* o2e_act_vm_n_ over rows [0, rows) of n floats at stride ld: a tile just stored, in L1.
 * The whole-vector part of every row in one loop nest, so the o2e_vmath.h constants are
 * loaded once per tile rather than once per row (AVX-512, 8 rows of 48: 7 % faster); the
 * rows' last n % 16 columns (7x7 and 14x14 maps leave 1 and 4: gcc's scalar remainder loop
 * ran them at 3.5 ns per value, 18 times the vector loop's cost) gathered into a buffer of
 * whole vectors, activated there in one vector loop and copied back. */
#define O2E_ACT_TILE_BUF_ 128
O2E_GEMM_FN void o2e_act_tile_(float *x, size_t ld, int rows, int n, o2e_act act) {
  const int nv = n & ~15, tail = n - nv;
  float buf[O2E_ACT_TILE_BUF_];
  int r, j, m = 0, r0 = 0;
#if defined(O2E_GEMM_AVX512)
  if (act.kind == O2E_ACT_GELU && act.a == 0) {
    for (r = 0; r < rows; r++)
      for (j = 0; j < nv; j += 16) {
        float *p = x + (size_t)r * ld + j;
        _mm512_storeu_ps(p, o2e_gelu16_(_mm512_loadu_ps(p)));
      }
  } else
#elif defined(O2E_GEMM_AVX2)
  if (act.kind == O2E_ACT_GELU && act.a == 0) {
    for (r = 0; r < rows; r++) {
      float *xr = x + (size_t)r * ld;
      for (j = 0; j + 8 <= n; j += 8) _mm256_storeu_ps(xr + j, o2e_gelu8_(_mm256_loadu_ps(xr + j)));
      for (; j < n; j++) xr[j] = o2e_act_vm1_(xr[j], O2E_ACT_GELU, 0.0f, 0.0f);
    }
    return;
  } else
#endif
  if (nv > 0) {
    const float a = act.a;
    size_t i;
    float *xr;
    switch (act.kind) {
#define O2E_ACT_ROWS_(K)                                                                       \
  for (r = 0; r < rows; r++)                                                                   \
    for (xr = x + (size_t)r * ld, i = 0; i < (size_t)nv; i++) xr[i] = o2e_act_vm1_(xr[i], K, a, 0.0f)
#if defined(O2E_GEMM_AVX2) /* nv: whole vectors */
    case O2E_ACT_SIGMOID:
      for (r = 0; r < rows; r++) (void)o2e_sigmoid_vec_(x + (size_t)r * ld, (size_t)nv, 0);
      break;
#else
    case O2E_ACT_SIGMOID: O2E_ACT_ROWS_(O2E_ACT_SIGMOID); break;
#endif
    case O2E_ACT_TANH: O2E_ACT_ROWS_(O2E_ACT_TANH); break;
    case O2E_ACT_SWISH:
#if defined(O2E_GEMM_AVX2)
      if (a == 1.0f)
        for (r = 0; r < rows; r++) (void)o2e_sigmoid_vec_(x + (size_t)r * ld, (size_t)nv, 1);
#else
      if (a == 1.0f)
        for (r = 0; r < rows; r++)
          for (xr = x + (size_t)r * ld, i = 0; i < (size_t)nv; i++) xr[i] = xr[i] * o2e_sigmoidf(xr[i]);
#endif
      else
        O2E_ACT_ROWS_(O2E_ACT_SWISH);
      break;
    case O2E_ACT_GELU: O2E_ACT_ROWS_(O2E_ACT_GELU); break;
    case O2E_ACT_MISH: O2E_ACT_ROWS_(O2E_ACT_MISH); break;
#undef O2E_ACT_ROWS_
    default: break;
    }
  }
  if (tail == 0) return;
  /* the tails, a buffer (whole 16-float vectors) at a time */
  for (r = 0; r <= rows; r++) {
    if (r == rows || m + tail > O2E_ACT_TILE_BUF_) {
      const int mm = (m + 15) & ~15;
      int k, rr;
      for (k = m; k < mm; k++) buf[k] = 0.0f;
      o2e_act_vm_n_(buf, (size_t)mm, act);
      for (rr = r0, k = 0; rr < r; rr++)
        for (j = 0; j < tail; j++) x[(size_t)rr * ld + nv + j] = buf[k++];
      r0 = r, m = 0;
      if (r == rows) break;
    }
    for (j = 0; j < tail; j++) buf[m++] = x[(size_t)r * ld + nv + j];
  }
}
#else
O2E_GEMM_INL float o2e_act_vm1_(float x, int kind, float a, float b) {
  (void)kind, (void)a, (void)b;
  return x;
}
O2E_GEMM_FN void o2e_act_vm_n_(float *x, size_t n, o2e_act act) { (void)x, (void)n, (void)act; }
O2E_GEMM_FN void o2e_act_tile_(float *x, size_t ld, int rows, int n, o2e_act act) {
  (void)x, (void)ld, (void)rows, (void)n, (void)act;
}
#endif

O2E_GEMM_FN const char *o2e_gemm_kernel_name(void) {
#if defined(O2E_GEMM_AVX512)
  return "avx512";
#elif defined(O2E_GEMM_AVX2)
  return "avx2";
#elif defined(O2E_GEMM_NEON)
  return "neon";
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
  const float *pf_a; /* packed A panel of the next kernel call: prefetched during this one */
  const float *pf_b; /* B read in place: the next strip's lines on this call's rows, or NULL */
} o2e_epi_;

O2E_GEMM_INL float o2e_act1_(float x, o2e_act act) {
  switch (act.kind) {
  case O2E_ACT_RELU:
    return x < 0.0f ? 0.0f : x;
  case O2E_ACT_CLIP:
    x = x < act.a ? act.a : x;
    return x > act.b ? act.b : x;
  case O2E_ACT_LEAKY_RELU:
    return x < 0.0f ? x * act.a : x;
  case O2E_ACT_HARD_SIGMOID: /* a NaN fails both comparisons and passes */
    x = act.a * x + act.b;
    x = x < 0.0f ? 0.0f : x;
    return x > 1.0f ? 1.0f : x;
  case O2E_ACT_HARD_SWISH: { /* 1/6 as onnxruntime's alpha; -Inf gives -Inf * 0 = NaN as it does */
    float t = x * (1.0f / 6.0f) + 0.5f;
    t = t < 0.0f ? 0.0f : t;
    return x * (t > 1.0f ? 1.0f : t);
  }
  default:
    return o2e_act_vm1_(x, act.kind, act.a, act.b);
  }
}

/* x[0..n) = act(x[0..n)) for any kind (the register kinds one element at a time: the paths
 * that call this for them are rare). */
O2E_GEMM_FN void o2e_act_n_(float *x, size_t n, o2e_act act) {
  size_t i;
  if (act.kind >= O2E_ACT_VM_FIRST_)
    o2e_act_vm_n_(x, n, act);
  else if (act.kind != O2E_ACT_NONE)
    for (i = 0; i < n; i++) x[i] = o2e_act1_(x[i], act);
}

/* Scalar epilogue of an mr x nr tile held in t (row stride ldt) at C position (i0, j0). */
O2E_GEMM_FN void o2e_store_tile_(const o2e_epi_ *e, const float *t, int ldt, int mr, int nr,
                                 int i0, int j0) {
  int i, j;
  if (e->final && !e->p && e->act.kind >= O2E_ACT_VM_FIRST_) {
    /* a vmath kind: the plain epilogue, then the activation over the stored tile (in L1) */
    o2e_epi_ ev_ = *e;
    ev_.act.kind = O2E_ACT_NONE;
    o2e_store_tile_(&ev_, t, ldt, mr, nr, i0, j0);
    o2e_act_tile_(e->out + (size_t)(i0 - e->oi) * e->ldo + (j0 - e->oj), (size_t)e->ldo, mr, nr,
                  e->act);
    return;
  }
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

#if (defined(__GNUC__) || defined(__clang__)) && !defined(O2E_GEMM_NO_PREFETCH)
#define O2E_PREFETCH_(addr, loc) __builtin_prefetch((addr), 0, (loc))
#else
#define O2E_PREFETCH_(addr, loc) ((void)(addr))
#endif

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
      for (k = 0; k < kc; k++) {
        if (k + O2E_PACK_PD < kc) { /* rows still missing the cache: ask for them early */
          const float *pf_ = src + (size_t)(k + O2E_PACK_PD) * ldb;
          O2E_PREFETCH_(pf_, 3);
          O2E_PREFETCH_(pf_ + 16, 3);
          O2E_PREFETCH_(pf_ + 32, 3);
          O2E_PREFETCH_(pf_ + 47, 3);
        }
        memcpy(dst + (size_t)k * O2E_GEMM_NR, src + (size_t)k * ldb,
               sizeof(float) * O2E_GEMM_NR);
      }
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


/* ==== implicit im2col ======================================================================
 * B of a 2-D convolution's GEMM - row k = (c, ki, kj) of the filter, column n = output
 * position (oh, ow) - packed straight from the input. An explicit column matrix would be
 * written and then read back by this packing: for a 5x5 or 1x7 layer that is MBs of traffic
 * per call, more than the packing itself. */
typedef struct {
  const float *x; /* C x H x W input (one group's channels) */
  int H, W, kh, kw, sh, sw, dh, dw, pt, pl, OW;
  /* phased (strided convolutions): x holds, per channel, the sh x sw phase planes of the
   * zero-bordered input, each H x W (kernels/pool/pool2d.py phase_split: plane (a, b) element [r][q] is
   * xpad[r*sh + a][q*sw + b]); every row of B is then a run of plain copies, no bounds */
  int phased;
} o2e_conv_b;

/* Rows [pc, pc + kc) x columns [jb, jb + nb) of the implicit B, in o2e_pack_b_'s layout.
 * The columns split into runs - one output row within one panel - that are the same for
 * every row k, so they are worked out once; each row k is then a few bounded copies. */
#define O2E_CONV_RUNS_ (2 * O2E_GEMM_CONV_SB * O2E_GEMM_NR + 2)
#if defined(O2E_GEMM_AVX512)
/* the first min(n, 16) lanes (n > 0) */
O2E_GEMM_INL __mmask16 o2e_mask16_(int n) {
  return (__mmask16)(n >= 16 ? 0xFFFFu : (1u << n) - 1u);
}
#elif defined(O2E_GEMM_AVX2)
/* the first min(n, 8) lanes (n > 0), as a vmaskmov / vgather mask */
O2E_GEMM_INL __m256i o2e_mask8_(int n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
/* d[0 .. n) = s[0 .. n) (s == NULL: zeros): whole vectors, then one masked move, which
 * neither reads nor writes the lanes past n */
O2E_GEMM_INL void o2e_copy8_(float *d, const float *s, int n) {
  int t = 0;
  for (; t + 8 <= n; t += 8) _mm256_storeu_ps(d + t, s ? _mm256_loadu_ps(s + t) : _mm256_setzero_ps());
  if (t < n) {
    const __m256i m = o2e_mask8_(n - t);
    _mm256_maskstore_ps(d + t, m, s ? _mm256_maskload_ps(s + t, m) : _mm256_setzero_ps());
  }
}
#endif
O2E_GEMM_FN void o2e_pack_b_conv_(const o2e_conv_b *cv, int pc, int kc, int jb, int nb,
                                  float *bp) {
  const int OW = cv->OW, sw = cv->sw, khw = cv->kh * cv->kw;
  const int nlast = nb - (nb - 1) / O2E_GEMM_NR * O2E_GEMM_NR; /* columns of the last panel */
  int r_ih[O2E_CONV_RUNS_], r_ow[O2E_CONV_RUNS_], r_len[O2E_CONV_RUNS_], r_w[O2E_CONV_RUNS_];
  size_t r_dst[O2E_CONV_RUNS_];
  int nruns = 0, j = 0, k, u;
  while (j < nb && nruns < O2E_CONV_RUNS_) {
    const int n = jb + j, oh = n / OW, ow = n % OW;
    const int q = j / O2E_GEMM_NR, l = j - q * O2E_GEMM_NR;
    const int nrq = nb - q * O2E_GEMM_NR < O2E_GEMM_NR ? nb - q * O2E_GEMM_NR : O2E_GEMM_NR;
    int run = OW - ow;
    if (run > nrq - l) run = nrq - l;
    r_ih[nruns] = oh * cv->sh - cv->pt;
    r_ow[nruns] = ow;
    r_len[nruns] = run;
    r_w[nruns] = o2e_panel_w_(nrq);
    r_dst[nruns] = (size_t)q * O2E_GEMM_NR * kc + (size_t)l;
    nruns++;
    j += run;
  }
  /* (c, ki, kj) of row pc + k, stepped rather than divided out per row */
  int c = pc / khw, ki = pc / cv->kw % cv->kh, kj = pc % cv->kw - 1;
  /* phased: tap (ki, kj) reads plane (ki*dh % sh, kj*dw % sw) from row ki*dh / sh, column
   * kj*dw / sw, and run u from the k-independent offset r_src[u]. Quotients and remainders
   * are stepped too: divisions per row k and run were a quarter of a 3x3 stride-2 layer's
   * time (ResNet50's res3a_branch2b: 128 rows of A share each packed row) */
  size_t r_src[O2E_CONV_RUNS_];
  int rq = 0, rr = 0, cq = 0, cr = 0;
  if (cv->phased) {
    for (u = 0; u < nruns; u++) /* row oh of the output reads row oh (+ tap) of a plane */
      r_src[u] = (size_t)((r_ih[u] + cv->pt) / cv->sh) * cv->W + (size_t)r_ow[u];
    rq = ki * cv->dh / cv->sh, rr = ki * cv->dh % cv->sh;
    cq = kj * cv->dw / sw, cr = kj * cv->dw % sw; /* kj = -1: row 0 resets them */
  }
  for (k = 0; k < kc; k++) {
    int off, ow0, ow1;
    const float *plane;
    if (++kj == cv->kw) {
      kj = 0;
      if (++ki == cv->kh) ki = 0, c++;
    }
    if (cv->phased) {
      const float *src;
      if (kj == 0) {
        cq = cr = 0;
        rq = ki * cv->dh / cv->sh, rr = ki * cv->dh % cv->sh; /* once per kw rows */
      } else {
        cr += cv->dw;
        while (cr >= sw) cr -= sw, cq++;
      }
      src = cv->x + ((size_t)(c * cv->sh + rr) * sw + cr) * cv->H * cv->W + (size_t)rq * cv->W +
            (size_t)cq;
      for (u = 0; u < nruns; u++) {
        const float *restrict sr = src + r_src[u];
        float *restrict d = bp + r_dst[u] + (size_t)k * r_w[u];
        int t = 0;
#if defined(O2E_GEMM_AVX512)
        for (; t < r_len[u]; t += 16) {
          const __mmask16 m = o2e_mask16_(r_len[u] - t);
          _mm512_mask_storeu_ps(d + t, m, _mm512_maskz_loadu_ps(m, sr + t));
        }
#elif defined(O2E_GEMM_AVX2)
        (void)t;
        o2e_copy8_(d, sr, r_len[u]);
#else
        for (; t < r_len[u]; t++) d[t] = sr[t];
#endif
      }
      goto pad_lanes;
    }
    off = kj * cv->dw - cv->pl; /* input column of output column ow: ow*sw + off */
    plane = cv->x + (size_t)c * cv->H * cv->W;
    if (sw == 1)
      ow0 = off >= 0 ? 0 : -off, ow1 = cv->W - off;
    else
      ow0 = off >= 0 ? 0 : (-off + sw - 1) / sw, ow1 = cv->W > off ? (cv->W - off + sw - 1) / sw : 0;
    if (ow0 > OW) ow0 = OW;
    if (ow1 > OW) ow1 = OW;
    if (ow1 < ow0) ow1 = ow0;
    for (u = 0; u < nruns; u++) {
      const int ow = r_ow[u], run = r_len[u], ih = r_ih[u] + ki * cv->dh;
      float *restrict d = bp + r_dst[u] + (size_t)k * r_w[u];
      int a = ow0 - ow < 0 ? 0 : (ow0 - ow > run ? run : ow0 - ow);
      int b = ow1 - ow < a ? a : (ow1 - ow > run ? run : ow1 - ow), t;
      if (ih < 0 || ih >= cv->H) a = b = run;
#if defined(O2E_GEMM_AVX512)
      if (sw == 1) { /* runs are short (often < 48): masked moves beat loops with tails */
        const float *src = plane + (size_t)ih * cv->W + (size_t)(ow + a + off);
        if (a > 0 || b < run)
          for (t = 0; t < run; t += 16)
            _mm512_mask_storeu_ps(d + t, o2e_mask16_(run - t), _mm512_setzero_ps());
        for (t = 0; t < b - a; t += 16) {
          const __mmask16 m = o2e_mask16_(b - a - t);
          _mm512_mask_storeu_ps(d + a + t, m, _mm512_maskz_loadu_ps(m, src + t));
        }
        continue;
      } else { /* strided (stem) convolutions: one gather per 16 columns */
        const float *src = plane + (size_t)ih * cv->W + (size_t)((ow + a) * sw + off);
        const __m512i idx = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                               _mm512_set1_epi32(sw));
        if (a > 0 || b < run)
          for (t = 0; t < run; t += 16)
            _mm512_mask_storeu_ps(d + t, o2e_mask16_(run - t), _mm512_setzero_ps());
        for (t = 0; t < b - a; t += 16) {
          const __mmask16 m = o2e_mask16_(b - a - t);
          _mm512_mask_storeu_ps(d + a + t, m,
                                _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, idx, src + (size_t)t * sw, 4));
        }
        continue;
      }
#elif defined(O2E_GEMM_AVX2)
      if (sw == 1) { /* runs are short (<= 24): vector moves with a masked tail */
        if (a > 0) o2e_copy8_(d, NULL, a);
        if (b > a) o2e_copy8_(d + a, plane + (size_t)ih * cv->W + (size_t)(ow + a + off), b - a);
        if (b < run) o2e_copy8_(d + b, NULL, run - b);
        continue;
      } else { /* strided (stem) convolutions: one masked gather per 8 columns */
        const float *src = plane + (size_t)ih * cv->W + (size_t)((ow + a) * sw + off);
        const __m256i idx = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(sw));
        if (a > 0) o2e_copy8_(d, NULL, a);
        for (t = 0; t < b - a; t += 8) {
          const __m256i m = o2e_mask8_(b - a - t);
          _mm256_maskstore_ps(d + a + t, m,
                              _mm256_mask_i32gather_ps(_mm256_setzero_ps(), src + (size_t)t * sw, idx,
                                                       _mm256_castsi256_ps(m), 4));
        }
        if (b < run) o2e_copy8_(d + b, NULL, run - b);
        continue;
      }
#endif
      for (t = 0; t < a; t++) d[t] = 0.0f;
      if (b > a) {
        const float *restrict src = plane + (size_t)ih * cv->W + (size_t)((ow + a) * sw + off);
        float *restrict dd = d + a;
        const int len = b - a;
        if (sw == 1)
          for (t = 0; t < len; t++) dd[t] = src[t];
        else
          for (t = 0; t < len; t++) dd[t] = src[(size_t)t * sw];
      }
      for (t = b; t < run; t++) d[t] = 0.0f;
    }
  pad_lanes:
    if (nlast < O2E_GEMM_NR) { /* zero lanes of the partial last panel, as o2e_pack_b_ does */
      const int w = o2e_panel_w_(nlast), q = (nb - 1) / O2E_GEMM_NR;
      float *d = bp + (size_t)q * O2E_GEMM_NR * kc + (size_t)k * w;
      for (j = nlast; j < w; j++) d[j] = 0.0f;
    }
  }
}

/* ==== micro-kernels ======================================================================
 * o2e_kernel_(kc, a, lda, b, w, mr, nr, e, i0, j0): acc = A panel (8 x kc) * B panel (kc x nr,
 * row stride w), then the epilogue stores the valid mr x nr part at (i0, j0).
 * lda == 0: a is a packed panel (k-major, 8 values per K step). lda > 0: a points at row i0
 * of a plain row-major A; the broadcast operand needs no packing (each use is one scalar
 * load), rows past mr are read as row mr - 1 so nothing past the matrix is touched. */
/* The lean epilogue of a full tile on its last K slice without accumulation:
 * out = act(acc + Q + bias_m + bias_n + R) (the generic epilogue's order of additions, Q the
 * earlier K slices' partial sums), the activation kind a constant of each copy, the tile's
 * bias_n vectors loaded once. A transformer's GEMMs all carry a column bias and MiniLM's run
 * in K slices: through the generic epilogue ViT-tiny's qkv (197 x 576, K 192) and fc1
 * (+ GELU) ran 4-7 % slower, MiniLM-L6's qkv (128 x 1152, K 384 in 3 slices) 1-3 %
 * (AVX-512, 300-call minima; AVX2 likewise 5-6 % on ViT's).
 * The generic one re-read the epilogue's fields and re-dispatched the activation for every
 * vector, since a float store may alias them: with a short K loop (1x1 convolutions with
 * 16-96 input channels on 56x56 maps) that took ~40 % of the time (issue 9). The fields are
 * read once into locals (O2E_LEAN_LOCALS_, for a full tile at C position (i0, j0)). */
#define O2E_LEAN_LOCALS_()                                                                     \
  float *const lo_ = e->out + (size_t)(i0 - e->oi) * e->ldo + (j0 - e->oj);                   \
  const size_t lldo_ = (size_t)e->ldo, lldr_ = (size_t)e->ldr;                                 \
  const float *const lr_ = e->r ? e->r + (size_t)i0 * e->ldr + j0 : NULL;                      \
  const float *const lbm_ = e->bm ? e->bm + i0 : NULL;                                         \
  const float la_ = e->act.a, lb_ = e->act.b
/* Row r of a plain-A tile: rows past mr repeat row mr - 1 (results discarded). */
#define O2E_PR_(r) (PLAIN ? a + (size_t)((r) < mr ? (r) : mr - 1) * lda : a)

#if defined(O2E_GEMM_AVX512)

O2E_GEMM_INL __m512 o2e_act16_(__m512 x, o2e_act act) {
  switch (act.kind) {
  case O2E_ACT_RELU: /* max(0, x): with a NaN second operand vmaxps returns it, so NaN propagates */
    return _mm512_max_ps(_mm512_setzero_ps(), x);
  case O2E_ACT_CLIP:
    return _mm512_min_ps(_mm512_set1_ps(act.b), _mm512_max_ps(_mm512_set1_ps(act.a), x));
  case O2E_ACT_LEAKY_RELU: {
    const __mmask16 neg = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
    return _mm512_mask_mul_ps(x, neg, x, _mm512_set1_ps(act.a));
  }
  case O2E_ACT_HARD_SIGMOID:
  case O2E_ACT_HARD_SWISH: { /* as o2e_act1_: compares that a NaN fails, so it passes */
    const __m512 z = _mm512_setzero_ps(), one = _mm512_set1_ps(1.0f);
    __m512 t = act.kind == O2E_ACT_HARD_SWISH
                   ? _mm512_fmadd_ps(x, _mm512_set1_ps(1.0f / 6.0f), _mm512_set1_ps(0.5f))
                   : _mm512_fmadd_ps(x, _mm512_set1_ps(act.a), _mm512_set1_ps(act.b));
    t = _mm512_mask_mov_ps(t, _mm512_cmp_ps_mask(t, z, _CMP_LT_OQ), z);
    t = _mm512_mask_mov_ps(t, _mm512_cmp_ps_mask(t, one, _CMP_GT_OQ), one);
    return act.kind == O2E_ACT_HARD_SWISH ? _mm512_mul_ps(x, t) : t;
  }
  default:
    if (act.kind >= O2E_ACT_VM_FIRST_) { /* through the stack: an edge or multi-slice tile */
      float t_[16];
      _mm512_storeu_ps(t_, x);
      o2e_act_n_(t_, 16, act);
      return _mm512_loadu_ps(t_);
    }
    return x;
  }
}

/* Vectorized epilogue of an mr x nr tile t (row stride ldt) at C position (i0, j0); masked
 * loads and stores keep the edge tiles inside the matrices. */
O2E_GEMM_FN void o2e_tile_store_(const o2e_epi_ *e, const float *t, int ldt, int mr, int nr,
                                 int i0, int j0) {
  int i, j;
  if (e->final && !e->p && e->act.kind >= O2E_ACT_VM_FIRST_) {
    /* a vmath kind: the plain epilogue, then the activation over the stored tile (in L1) */
    o2e_epi_ ev_ = *e;
    ev_.act.kind = O2E_ACT_NONE;
    o2e_tile_store_(&ev_, t, ldt, mr, nr, i0, j0);
    o2e_act_tile_(e->out + (size_t)(i0 - e->oi) * e->ldo + (j0 - e->oj), (size_t)e->ldo, mr, nr,
                  e->act);
    return;
  }
  for (i = 0; i < mr; i++) {
    const int gi = i0 + i;
    const float *ti = t + (size_t)i * ldt;
    float *o = e->out + (size_t)(gi - e->oi) * e->ldo + (j0 - e->oj);
    const float *q = e->q ? e->q + (size_t)(gi - e->qi) * e->ldq + (j0 - e->qj) : NULL;
    const float *r = e->r ? e->r + (size_t)gi * e->ldr + j0 : NULL;
    const float *p = e->p ? e->p + (size_t)gi * e->ldp + j0 : NULL;
    const float *bn = e->bn ? e->bn + j0 : NULL;
    const __m512 bm = _mm512_set1_ps(e->bm ? e->bm[gi] : 0.0f);
    for (j = 0; j < nr; j += 16) {
      const __mmask16 m = (__mmask16)(nr - j >= 16 ? 0xFFFF : (1u << (nr - j)) - 1u);
      __m512 x = _mm512_maskz_loadu_ps(m, ti + j);
      if (q) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(m, q + j));
      if (e->final) {
        x = _mm512_add_ps(x, bm);
        if (bn) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(m, bn + j));
        if (r) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(m, r + j));
        x = o2e_act16_(x, e->act);
        if (p) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(m, p + j));
      }
      _mm512_mask_storeu_ps(o + j, m, x);
    }
  }
}

/* Epilogue of one full 16-wide vector of row i (pointers already offset to the row). */
O2E_GEMM_INL __m512 o2e_epi16_(const o2e_epi_ *e, __m512 x, const float *q, __m512 bm,
                               const float *bn, const float *r, const float *p) {
  if (q) x = _mm512_add_ps(x, _mm512_loadu_ps(q));
  if (e->final) {
    x = _mm512_add_ps(x, bm);
    if (bn) x = _mm512_add_ps(x, _mm512_loadu_ps(bn));
    if (r) x = _mm512_add_ps(x, _mm512_loadu_ps(r));
    x = o2e_act16_(x, e->act);
    if (p) x = _mm512_add_ps(x, _mm512_loadu_ps(p));
  }
  return x;
}

#define O2E_OFF16_(ptr, v) ((ptr) ? (ptr) + 16 * (v) : NULL)
#define O2E_FAST16_ROW_(rw)                                                                    \
  do {                                                                                         \
    const int gi = i0 + rw;                                                                    \
    float *o = e->out + (size_t)(gi - e->oi) * e->ldo + (j0 - e->oj);                          \
    const float *q = e->q ? e->q + (size_t)(gi - e->qi) * e->ldq + (j0 - e->qj) : NULL;        \
    const float *bn = e->bn ? e->bn + j0 : NULL;                                               \
    const float *r = e->r ? e->r + (size_t)gi * e->ldr + j0 : NULL;                            \
    const float *p = e->p ? e->p + (size_t)gi * e->ldp + j0 : NULL;                            \
    const __m512 bm = _mm512_set1_ps(e->bm ? e->bm[gi] : 0.0f);                                \
    _mm512_storeu_ps(o, o2e_epi16_(e, c##rw##0, q, bm, bn, r, p));                             \
    if (NV > 1)                                                                                \
      _mm512_storeu_ps(o + 16, o2e_epi16_(e, c##rw##1, O2E_OFF16_(q, 1), bm,                   \
                                          O2E_OFF16_(bn, 1), O2E_OFF16_(r, 1),                 \
                                          O2E_OFF16_(p, 1)));                                  \
    if (NV > 2)                                                                                \
      _mm512_storeu_ps(o + 32, o2e_epi16_(e, c##rw##2, O2E_OFF16_(q, 2), bm,                   \
                                          O2E_OFF16_(bn, 2), O2E_OFF16_(r, 2),                 \
                                          O2E_OFF16_(p, 2)));                                  \
  } while (0)

/* AVX-512 lean epilogue: see O2E_LEAN_LOCALS_. */
#define O2E_LEAN16_V_(acc, rw, v, KIND)                                                        \
  do {                                                                                         \
    __m512 x_ = acc;                                                                           \
    if (lq_) x_ = _mm512_add_ps(x_, _mm512_loadu_ps(lq_ + (rw) * lldq_ + 16 * (v)));           \
    x_ = _mm512_add_ps(x_, bm_);                                                               \
    if (lbn_) x_ = _mm512_add_ps(x_, bn##v##_);                                                \
    if (lr_) x_ = _mm512_add_ps(x_, _mm512_loadu_ps(lr_ + (rw) * lldr_ + 16 * (v)));           \
    x_ = o2e_act16_(x_, lact_);                                                                \
    _mm512_storeu_ps(lo_ + (rw) * lldo_ + 16 * (v), x_);                                       \
  } while (0)
#define O2E_LEAN16_ROW_(rw, KIND)                                                              \
  do {                                                                                         \
    const __m512 bm_ = _mm512_set1_ps(lbm_ ? lbm_[rw] : 0.0f);                                 \
    O2E_LEAN16_V_(c##rw##0, rw, 0, KIND);                                                      \
    if (NV > 1) O2E_LEAN16_V_(c##rw##1, rw, 1, KIND);                                          \
    if (NV > 2) O2E_LEAN16_V_(c##rw##2, rw, 2, KIND);                                          \
  } while (0)
#define O2E_LEAN16_TILE_(KIND)                                                                 \
  do {                                                                                         \
    const o2e_act lact_ = {KIND, la_, lb_};                                                    \
    O2E_LEAN16_ROW_(0, KIND);                                                                  \
    O2E_LEAN16_ROW_(1, KIND);                                                                  \
    O2E_LEAN16_ROW_(2, KIND);                                                                  \
    O2E_LEAN16_ROW_(3, KIND);                                                                  \
    O2E_LEAN16_ROW_(4, KIND);                                                                  \
    O2E_LEAN16_ROW_(5, KIND);                                                                  \
    O2E_LEAN16_ROW_(6, KIND);                                                                  \
    O2E_LEAN16_ROW_(7, KIND);                                                                  \
  } while (0)

/* One row r of the rank-1 update: broadcast a[r], FMA with the NV vectors of B. */
#define O2E_R16_(r)                                                                            \
  do {                                                                                         \
    const __m512 av = _mm512_set1_ps(PLAIN ? p##r[k] : a[r]);                                                    \
    c##r##0 = _mm512_fmadd_ps(av, b0, c##r##0);                                                \
    if (NV > 1) c##r##1 = _mm512_fmadd_ps(av, b1, c##r##1);                                    \
    if (NV > 2) c##r##2 = _mm512_fmadd_ps(av, b2, c##r##2);                                    \
  } while (0)

/* NV (1..3) is a compile-time constant in each caller, so the unused accumulators and FMAs
 * disappear: 8 x 48, 8 x 32 and 8 x 16 kernels from one body. */
O2E_GEMM_INL void o2e_k16_body_(const int NV, const int PLAIN, int kc, const float *a, int lda,
                                const float *b, int w, int mr, int nr, const o2e_epi_ *e, int i0,
                                int j0) {
  const float *p0 = a, *p1 = O2E_PR_(1), *p2 = O2E_PR_(2), *p3 = O2E_PR_(3);
  const float *p4 = O2E_PR_(4), *p5 = O2E_PR_(5), *p6 = O2E_PR_(6), *p7 = O2E_PR_(7);
  __m512 c00 = _mm512_setzero_ps(), c01 = c00, c02 = c00, c10 = c00, c11 = c00, c12 = c00;
  __m512 c20 = c00, c21 = c00, c22 = c00, c30 = c00, c31 = c00, c32 = c00;
  __m512 c40 = c00, c41 = c00, c42 = c00, c50 = c00, c51 = c00, c52 = c00;
  __m512 c60 = c00, c61 = c00, c62 = c00, c70 = c00, c71 = c00, c72 = c00;
  int k;
  for (k = 0; k < kc; k++) {
    __m512 b0 = _mm512_loadu_ps(b);
    __m512 b1 = NV > 1 ? _mm512_loadu_ps(b + 16) : b0;
    __m512 b2 = NV > 2 ? _mm512_loadu_ps(b + 32) : b0;
    O2E_IN_REG_(b0);
    if (NV > 1) O2E_IN_REG_(b1);
    if (NV > 2) O2E_IN_REG_(b2);
    O2E_R16_(0);
    O2E_R16_(1);
    O2E_R16_(2);
    O2E_R16_(3);
    O2E_R16_(4);
    O2E_R16_(5);
    O2E_R16_(6);
    O2E_R16_(7);
    /* bring the next call's A panel into L1 (one line per two K steps) */
    if (!PLAIN && (k & 1) == 0) O2E_PREFETCH_(e->pf_a + (size_t)k * O2E_GEMM_MR, 3);
    if (O2E_GEMM_PF_DIRECT_K && e->pf_b) {
      const float *q_ = e->pf_b + (size_t)k * w;
      O2E_PREFETCH_(q_, O2E_GEMM_PF_DIRECT_K);
      O2E_PREFETCH_(q_ + 16, O2E_GEMM_PF_DIRECT_K);
      O2E_PREFETCH_(q_ + 32, O2E_GEMM_PF_DIRECT_K);
      O2E_PREFETCH_(q_ + 47, O2E_GEMM_PF_DIRECT_K);
    }
    if (!PLAIN) a += O2E_GEMM_MR;
    b += w;
  }
  if (mr == O2E_GEMM_MR && nr == 16 * NV && e->final && !e->p) {
    /* Full tile, last K slice, bias / residual / activation only: the lean epilogue */
    O2E_LEAN_LOCALS_();
    const float *const lq_ = e->q ? e->q + (size_t)(i0 - e->qi) * e->ldq + (j0 - e->qj) : NULL;
    const size_t lldq_ = (size_t)e->ldq;
    const float *const lbn_ = e->bn ? e->bn + j0 : NULL;
    const __m512 bn0_ = lbn_ ? _mm512_loadu_ps(lbn_) : _mm512_setzero_ps();
    const __m512 bn1_ = lbn_ && NV > 1 ? _mm512_loadu_ps(lbn_ + 16) : bn0_;
    const __m512 bn2_ = lbn_ && NV > 2 ? _mm512_loadu_ps(lbn_ + 32) : bn0_;
    switch (e->act.kind) {
    case O2E_ACT_RELU: O2E_LEAN16_TILE_(O2E_ACT_RELU); break;
    case O2E_ACT_CLIP: O2E_LEAN16_TILE_(O2E_ACT_CLIP); break;
    case O2E_ACT_LEAKY_RELU: O2E_LEAN16_TILE_(O2E_ACT_LEAKY_RELU); break;
    case O2E_ACT_HARD_SIGMOID: O2E_LEAN16_TILE_(O2E_ACT_HARD_SIGMOID); break;
    case O2E_ACT_HARD_SWISH: O2E_LEAN16_TILE_(O2E_ACT_HARD_SWISH); break;
    default:
      O2E_LEAN16_TILE_(O2E_ACT_NONE);
      if (e->act.kind >= O2E_ACT_VM_FIRST_) o2e_act_tile_(lo_, lldo_, O2E_GEMM_MR, 16 * NV, e->act);
      break;
    }
  } else if (mr == O2E_GEMM_MR && nr == 16 * NV) {
    /* Full tile: the epilogue straight from the registers (a vmath kind: then over the
     * stored tile, see o2e_tile_store_) */
    o2e_epi_ ev_;
    const o2e_epi_ *const e0_ = e;
    if (e->final && !e->p && e->act.kind >= O2E_ACT_VM_FIRST_) {
      ev_ = *e;
      ev_.act.kind = O2E_ACT_NONE;
      e = &ev_;
    }
    O2E_FAST16_ROW_(0);
    O2E_FAST16_ROW_(1);
    O2E_FAST16_ROW_(2);
    O2E_FAST16_ROW_(3);
    O2E_FAST16_ROW_(4);
    O2E_FAST16_ROW_(5);
    O2E_FAST16_ROW_(6);
    O2E_FAST16_ROW_(7);
    if (e != e0_)
      o2e_act_tile_(e0_->out + (size_t)(i0 - e0_->oi) * e0_->ldo + (j0 - e0_->oj),
                    (size_t)e0_->ldo, O2E_GEMM_MR, 16 * NV, e0_->act);
  } else {
    /* Edge tile: through a small L1-resident tile to the masked epilogue. */
    float t[O2E_GEMM_MR * 48];
#define O2E_T16_(r)                                                                            \
  do {                                                                                         \
    _mm512_storeu_ps(t + r * 48, c##r##0);                                                     \
    if (NV > 1) _mm512_storeu_ps(t + r * 48 + 16, c##r##1);                                    \
    if (NV > 2) _mm512_storeu_ps(t + r * 48 + 32, c##r##2);                                    \
  } while (0)
    O2E_T16_(0);
    O2E_T16_(1);
    O2E_T16_(2);
    O2E_T16_(3);
    O2E_T16_(4);
    O2E_T16_(5);
    O2E_T16_(6);
    O2E_T16_(7);
#undef O2E_T16_
    o2e_tile_store_(e, t, 48, mr, nr, i0, j0);
  }
}

#define O2E_K16_FN_(name, NV, PLAIN)                                                           \
  O2E_GEMM_FN void name(int kc, const float *a, int lda, const float *b, int w, int mr, int nr, \
                        const o2e_epi_ *e, int i0, int j0) {                                   \
    o2e_k16_body_(NV, PLAIN, kc, a, lda, b, w, mr, nr, e, i0, j0);                             \
  }
O2E_K16_FN_(o2e_k16x3_, 3, 0)
O2E_K16_FN_(o2e_k16x2_, 2, 0)
O2E_K16_FN_(o2e_k16x1_, 1, 0)
O2E_K16_FN_(o2e_k16x3p_, 3, 1)
O2E_K16_FN_(o2e_k16x2p_, 2, 1)
O2E_K16_FN_(o2e_k16x1p_, 1, 1)

/* A last strip of at most O2E_GEMM_NARROW columns (N = 289 = 6 x 48 + 1, 196 = 4 x 48 + 4):
 * the 8 x 16 kernel would spend 8 A broadcasts and 8 FMAs per k on <= 4 useful columns (load
 * bound: about 4.5 cycles per k, 6-9 % of such a layer). Here one k's 8 rows of the packed A
 * panel are one ymm and each column's B value the broadcast: 1 + nr loads and nr FMAs per k,
 * over 4 k-chains to cover the FMA latency. */
#ifndef O2E_GEMM_NARROW
#define O2E_GEMM_NARROW 4
#endif
#define O2E_N8_(j)                                                                             \
  do {                                                                                         \
    if (NC > j) {                                                                              \
      s0##j = _mm256_fmadd_ps(a0, _mm256_broadcast_ss(b + j), s0##j);                          \
      s1##j = _mm256_fmadd_ps(a1, _mm256_broadcast_ss(b + w + j), s1##j);                      \
      s2##j = _mm256_fmadd_ps(a2, _mm256_broadcast_ss(b + 2 * w + j), s2##j);                  \
      s3##j = _mm256_fmadd_ps(a3, _mm256_broadcast_ss(b + 3 * w + j), s3##j);                  \
    }                                                                                          \
  } while (0)
O2E_GEMM_INL void o2e_k8n_body_(const int NC, int kc, const float *a, const float *b, int w,
                                int mr, const o2e_epi_ *e, int i0, int j0) {
  __m256 s00 = _mm256_setzero_ps(), s01 = s00, s02 = s00, s03 = s00;
  __m256 s10 = s00, s11 = s00, s12 = s00, s13 = s00, s20 = s00, s21 = s00, s22 = s00;
  __m256 s23 = s00, s30 = s00, s31 = s00, s32 = s00, s33 = s00;
  float t[O2E_GEMM_MR * 48], c[8];
  int k, r;
  for (k = 0; k + 4 <= kc; k += 4) {
    const __m256 a0 = _mm256_loadu_ps(a), a1 = _mm256_loadu_ps(a + 8);
    const __m256 a2 = _mm256_loadu_ps(a + 16), a3 = _mm256_loadu_ps(a + 24);
    O2E_N8_(0);
    O2E_N8_(1);
    O2E_N8_(2);
    O2E_N8_(3);
    O2E_PREFETCH_(e->pf_a + (size_t)k * O2E_GEMM_MR, 3);
    O2E_PREFETCH_(e->pf_a + (size_t)k * O2E_GEMM_MR + 16, 3);
    a += 4 * O2E_GEMM_MR;
    b += 4 * w;
  }
  for (; k < kc; k++) { /* the K tail: one k at a time into chain 0 */
    const __m256 a0 = _mm256_loadu_ps(a);
    s00 = _mm256_fmadd_ps(a0, _mm256_broadcast_ss(b), s00);
    if (NC > 1) s01 = _mm256_fmadd_ps(a0, _mm256_broadcast_ss(b + 1), s01);
    if (NC > 2) s02 = _mm256_fmadd_ps(a0, _mm256_broadcast_ss(b + 2), s02);
    if (NC > 3) s03 = _mm256_fmadd_ps(a0, _mm256_broadcast_ss(b + 3), s03);
    a += O2E_GEMM_MR;
    b += w;
  }
#define O2E_N8_ST_(j)                                                                          \
  do {                                                                                         \
    if (NC > j) {                                                                              \
      _mm256_storeu_ps(c, _mm256_add_ps(_mm256_add_ps(s0##j, s1##j),                           \
                                        _mm256_add_ps(s2##j, s3##j)));                         \
      for (r = 0; r < O2E_GEMM_MR; r++) t[r * 48 + j] = c[r];                                  \
    }                                                                                          \
  } while (0)
  O2E_N8_ST_(0);
  O2E_N8_ST_(1);
  O2E_N8_ST_(2);
  O2E_N8_ST_(3);
#undef O2E_N8_ST_
  o2e_tile_store_(e, t, 48, mr, NC, i0, j0);
}
#undef O2E_N8_
#define O2E_K8N_FN_(name, NC)                                                                  \
  O2E_GEMM_FN void name(int kc, const float *a, const float *b, int w, int mr,                 \
                        const o2e_epi_ *e, int i0, int j0) {                                   \
    o2e_k8n_body_(NC, kc, a, b, w, mr, e, i0, j0);                                             \
  }
O2E_K8N_FN_(o2e_k8n1_, 1)
O2E_K8N_FN_(o2e_k8n2_, 2)
O2E_K8N_FN_(o2e_k8n3_, 3)
O2E_K8N_FN_(o2e_k8n4_, 4)

O2E_GEMM_INL void o2e_kernel_(int kc, const float *a, int lda, const float *b, int w, int mr,
                              int nr, const o2e_epi_ *e, int i0, int j0) {
  if (lda) {
    if (nr > 32)
      o2e_k16x3p_(kc, a, lda, b, w, mr, nr, e, i0, j0);
    else if (nr > 16)
      o2e_k16x2p_(kc, a, lda, b, w, mr, nr, e, i0, j0);
    else
      o2e_k16x1p_(kc, a, lda, b, w, mr, nr, e, i0, j0);
  } else if (nr <= O2E_GEMM_NARROW && nr <= 4) {
    if (nr == 1)
      o2e_k8n1_(kc, a, b, w, mr, e, i0, j0);
    else if (nr == 2)
      o2e_k8n2_(kc, a, b, w, mr, e, i0, j0);
    else if (nr == 3)
      o2e_k8n3_(kc, a, b, w, mr, e, i0, j0);
    else
      o2e_k8n4_(kc, a, b, w, mr, e, i0, j0);
  } else {
    if (nr > 32)
      o2e_k16x3_(kc, a, 0, b, w, mr, nr, e, i0, j0);
    else if (nr > 16)
      o2e_k16x2_(kc, a, 0, b, w, mr, nr, e, i0, j0);
    else
      o2e_k16x1_(kc, a, 0, b, w, mr, nr, e, i0, j0);
  }
}

#elif defined(O2E_GEMM_AVX2)

O2E_GEMM_INL __m256 o2e_act8_(__m256 x, o2e_act act) {
  switch (act.kind) {
  case O2E_ACT_RELU:
    return _mm256_max_ps(_mm256_setzero_ps(), x);
  case O2E_ACT_CLIP:
    return _mm256_min_ps(_mm256_set1_ps(act.b), _mm256_max_ps(_mm256_set1_ps(act.a), x));
  case O2E_ACT_LEAKY_RELU: {
    const __m256 neg = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ);
    return _mm256_blendv_ps(x, _mm256_mul_ps(x, _mm256_set1_ps(act.a)), neg);
  }
  case O2E_ACT_HARD_SIGMOID:
  case O2E_ACT_HARD_SWISH: { /* as o2e_act1_: compares that a NaN fails, so it passes */
    const __m256 z = _mm256_setzero_ps(), one = _mm256_set1_ps(1.0f);
    __m256 t = act.kind == O2E_ACT_HARD_SWISH
                   ? _mm256_fmadd_ps(x, _mm256_set1_ps(1.0f / 6.0f), _mm256_set1_ps(0.5f))
                   : _mm256_fmadd_ps(x, _mm256_set1_ps(act.a), _mm256_set1_ps(act.b));
    t = _mm256_blendv_ps(t, z, _mm256_cmp_ps(t, z, _CMP_LT_OQ));
    t = _mm256_blendv_ps(t, one, _mm256_cmp_ps(t, one, _CMP_GT_OQ));
    return act.kind == O2E_ACT_HARD_SWISH ? _mm256_mul_ps(x, t) : t;
  }
  default:
    if (act.kind >= O2E_ACT_VM_FIRST_) { /* through the stack: an edge or multi-slice tile */
      float t_[8];
      _mm256_storeu_ps(t_, x);
      o2e_act_n_(t_, 8, act);
      return _mm256_loadu_ps(t_);
    }
    return x;
  }
}

/* Epilogue of an mr x nr tile t (row stride ldt) at C position (i0, j0): 8 lanes at a time,
 * the columns past the last multiple of 8 one by one (AVX2 has no cheap masked loads). */
O2E_GEMM_FN void o2e_tile_store_(const o2e_epi_ *e, const float *t, int ldt, int mr, int nr,
                                 int i0, int j0) {
  const int n8 = nr & ~7;
  int i, j;
  if (e->final && !e->p && e->act.kind >= O2E_ACT_VM_FIRST_) {
    /* a vmath kind: the plain epilogue, then the activation over the stored tile (in L1) */
    o2e_epi_ ev_ = *e;
    ev_.act.kind = O2E_ACT_NONE;
    o2e_tile_store_(&ev_, t, ldt, mr, nr, i0, j0);
    o2e_act_tile_(e->out + (size_t)(i0 - e->oi) * e->ldo + (j0 - e->oj), (size_t)e->ldo, mr, nr,
                  e->act);
    return;
  }
  for (i = 0; i < mr; i++) {
    const int gi = i0 + i;
    const float *ti = t + (size_t)i * ldt;
    float *o = e->out + (size_t)(gi - e->oi) * e->ldo + (j0 - e->oj);
    const float *q = e->q ? e->q + (size_t)(gi - e->qi) * e->ldq + (j0 - e->qj) : NULL;
    const float *r = e->r ? e->r + (size_t)gi * e->ldr + j0 : NULL;
    const float *p = e->p ? e->p + (size_t)gi * e->ldp + j0 : NULL;
    const float *bn = e->bn ? e->bn + j0 : NULL;
    const float bms = e->bm ? e->bm[gi] : 0.0f;
    const __m256 bm = _mm256_set1_ps(bms);
    for (j = 0; j < n8; j += 8) {
      __m256 x = _mm256_loadu_ps(ti + j);
      if (q) x = _mm256_add_ps(x, _mm256_loadu_ps(q + j));
      if (e->final) {
        x = _mm256_add_ps(x, bm);
        if (bn) x = _mm256_add_ps(x, _mm256_loadu_ps(bn + j));
        if (r) x = _mm256_add_ps(x, _mm256_loadu_ps(r + j));
        x = o2e_act8_(x, e->act);
        if (p) x = _mm256_add_ps(x, _mm256_loadu_ps(p + j));
      }
      _mm256_storeu_ps(o + j, x);
    }
    for (; j < nr; j++) {
      float x = ti[j];
      if (q) x += q[j];
      if (e->final) {
        x += bms;
        if (bn) x += bn[j];
        if (r) x += r[j];
        x = o2e_act1_(x, e->act);
        if (p) x += p[j];
      }
      o[j] = x;
    }
  }
}

#define O2E_R8_(r)                                                                             \
  do {                                                                                         \
    const __m256 av = _mm256_broadcast_ss(PLAIN ? p##r + k : a + r);                                              \
    c##r##0 = _mm256_fmadd_ps(av, b0, c##r##0);                                                \
    if (NV > 1) c##r##1 = _mm256_fmadd_ps(av, b1, c##r##1);                                    \
    if (NV > 2) c##r##2 = _mm256_fmadd_ps(av, b2, c##r##2);                                    \
  } while (0)

#define O2E_LEAN8_V_(acc, rw, v, KIND)                                                         \
  do {                                                                                         \
    __m256 x_ = acc;                                                                           \
    if (lq_) x_ = _mm256_add_ps(x_, _mm256_loadu_ps(lq_ + (rw) * lldq_ + 8 * (v)));            \
    x_ = _mm256_add_ps(x_, bm_);                                                               \
    if (lbn_) x_ = _mm256_add_ps(x_, bn##v##_);                                                \
    if (lr_) x_ = _mm256_add_ps(x_, _mm256_loadu_ps(lr_ + (rw) * lldr_ + 8 * (v)));            \
    x_ = o2e_act8_(x_, lact_);                                                                 \
    _mm256_storeu_ps(lo_ + (rw) * lldo_ + 8 * (v), x_);                                        \
  } while (0)
#define O2E_LEAN8_ROW_(rw, KIND)                                                               \
  do {                                                                                         \
    const __m256 bm_ = _mm256_set1_ps(lbm_ ? lbm_[rw] : 0.0f);                                 \
    O2E_LEAN8_V_(c##rw##0, rw, 0, KIND);                                                       \
    if (NV > 1) O2E_LEAN8_V_(c##rw##1, rw, 1, KIND);                                           \
    if (NV > 2) O2E_LEAN8_V_(c##rw##2, rw, 2, KIND);                                           \
  } while (0)
#define O2E_LEAN8_TILE_(KIND)                                                                  \
  do {                                                                                         \
    const o2e_act lact_ = {KIND, la_, lb_};                                                    \
    O2E_LEAN8_ROW_(0, KIND);                                                                   \
    O2E_LEAN8_ROW_(1, KIND);                                                                   \
    O2E_LEAN8_ROW_(2, KIND);                                                                   \
    O2E_LEAN8_ROW_(3, KIND);                                                                   \
  } while (0)

/* 4 x (8 NV) kernel over rows [h, h + 4) of the 8-row panel (A read with stride 8). */
O2E_GEMM_INL void o2e_k8_body_(const int NV, const int PLAIN, int kc, const float *a, int lda,
                               const float *b, int w, int mr, int nr, const o2e_epi_ *e, int i0,
                               int j0) {
  const float *p0 = a, *p1 = O2E_PR_(1), *p2 = O2E_PR_(2), *p3 = O2E_PR_(3);
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c02 = c00, c10 = c00, c11 = c00, c12 = c00;
  __m256 c20 = c00, c21 = c00, c22 = c00, c30 = c00, c31 = c00, c32 = c00;
  int k;
  for (k = 0; k < kc; k++) {
    __m256 b0 = _mm256_loadu_ps(b);
    __m256 b1 = NV > 1 ? _mm256_loadu_ps(b + 8) : b0;
    __m256 b2 = NV > 2 ? _mm256_loadu_ps(b + 16) : b0;
    O2E_IN_REG_(b0);
    if (NV > 1) O2E_IN_REG_(b1);
    if (NV > 2) O2E_IN_REG_(b2);
    O2E_R8_(0);
    O2E_R8_(1);
    O2E_R8_(2);
    O2E_R8_(3);
    if (O2E_GEMM_PF_DIRECT_K && e->pf_b && !(i0 & 4)) { /* the panel's first half only */
      const float *q_ = e->pf_b + (size_t)k * w;
      O2E_PREFETCH_(q_, O2E_GEMM_PF_DIRECT_K);
      O2E_PREFETCH_(q_ + 16, O2E_GEMM_PF_DIRECT_K);
      O2E_PREFETCH_(q_ + 23, O2E_GEMM_PF_DIRECT_K);
    }
    if (!PLAIN) a += O2E_GEMM_MR;
    b += w;
  }
  if (mr == 4 && nr == 8 * NV && e->final && !e->p) {
    /* full tile, last K slice: from the registers (see the AVX-512 kernel's lean epilogue) */
    O2E_LEAN_LOCALS_();
    const float *const lq_ = e->q ? e->q + (size_t)(i0 - e->qi) * e->ldq + (j0 - e->qj) : NULL;
    const size_t lldq_ = (size_t)e->ldq;
    const float *const lbn_ = e->bn ? e->bn + j0 : NULL;
    const __m256 bn0_ = lbn_ ? _mm256_loadu_ps(lbn_) : _mm256_setzero_ps();
    const __m256 bn1_ = lbn_ && NV > 1 ? _mm256_loadu_ps(lbn_ + 8) : bn0_;
    const __m256 bn2_ = lbn_ && NV > 2 ? _mm256_loadu_ps(lbn_ + 16) : bn0_;
    switch (e->act.kind) {
    case O2E_ACT_RELU: O2E_LEAN8_TILE_(O2E_ACT_RELU); break;
    case O2E_ACT_CLIP: O2E_LEAN8_TILE_(O2E_ACT_CLIP); break;
    case O2E_ACT_LEAKY_RELU: O2E_LEAN8_TILE_(O2E_ACT_LEAKY_RELU); break;
    case O2E_ACT_HARD_SIGMOID: O2E_LEAN8_TILE_(O2E_ACT_HARD_SIGMOID); break;
    case O2E_ACT_HARD_SWISH: O2E_LEAN8_TILE_(O2E_ACT_HARD_SWISH); break;
    default:
      O2E_LEAN8_TILE_(O2E_ACT_NONE);
      if (e->act.kind >= O2E_ACT_VM_FIRST_) o2e_act_tile_(lo_, lldo_, 4, 8 * NV, e->act);
      break;
    }
    return;
  }
  {
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
    o2e_tile_store_(e, t, 24, mr, nr, i0, j0);
  }
}

#define O2E_K8_FN_(name, NV, PLAIN)                                                            \
  O2E_GEMM_FN void name(int kc, const float *a, int lda, const float *b, int w, int mr, int nr, \
                        const o2e_epi_ *e, int i0, int j0) {                                   \
    o2e_k8_body_(NV, PLAIN, kc, a, lda, b, w, mr, nr, e, i0, j0);                              \
  }
O2E_K8_FN_(o2e_k8x3_, 3, 0)
O2E_K8_FN_(o2e_k8x2_, 2, 0)
O2E_K8_FN_(o2e_k8x1_, 1, 0)
O2E_K8_FN_(o2e_k8x3p_, 3, 1)
O2E_K8_FN_(o2e_k8x2p_, 2, 1)
O2E_K8_FN_(o2e_k8x1p_, 1, 1)

/* A last strip of at most O2E_GEMM_NARROW columns (N = 169 = 7 x 24 + 1, 196 = 8 x 24 + 4,
 * 289 = 12 x 24 + 1): the two 4 x 8 halves spend 2 B loads, 8 A broadcasts and 8 FMAs per k
 * (load bound, ~5 cycles) on <= 4 useful columns. As at AVX-512, one k's 8 packed A rows are
 * one ymm and each column's B value the broadcast: 1 + nr loads and nr FMAs per k. 16 ymm
 * registers hold 4 k-chains of 1-2 columns, 2 chains of 3-4 (4 x 4 accumulators + A + the
 * broadcast would spill; at 3-4 columns the loads, not the FMA latency, bound the loop). */
#ifndef O2E_GEMM_NARROW
#define O2E_GEMM_NARROW 4
#endif
#define O2E_N8_(c, j)                                                                          \
  do {                                                                                         \
    if (NC > j) s##c##j = _mm256_fmadd_ps(a##c, _mm256_broadcast_ss(b + c * w + j), s##c##j);  \
  } while (0)
#define O2E_N8_K_(c)                                                                           \
  do {                                                                                         \
    const __m256 a##c = _mm256_loadu_ps(a + c * O2E_GEMM_MR);                                  \
    O2E_N8_(c, 0);                                                                             \
    O2E_N8_(c, 1);                                                                             \
    O2E_N8_(c, 2);                                                                             \
    O2E_N8_(c, 3);                                                                             \
  } while (0)
O2E_GEMM_INL void o2e_k8n_body_(const int NC, int kc, const float *a, const float *b, int w,
                                int mr, const o2e_epi_ *e, int i0, int j0) {
  const int CH = NC > 2 ? 2 : 4; /* k-chains */
  __m256 s00 = _mm256_setzero_ps(), s01 = s00, s02 = s00, s03 = s00;
  __m256 s10 = s00, s11 = s00, s12 = s00, s13 = s00, s20 = s00, s21 = s00, s22 = s00;
  __m256 s23 = s00, s30 = s00, s31 = s00, s32 = s00, s33 = s00; /* unused ones fold away */
  float t[O2E_GEMM_MR * 4], c[8];
  int k, r;
  for (k = 0; k + CH <= kc; k += CH) {
    O2E_N8_K_(0);
    O2E_N8_K_(1);
    if (CH > 2) {
      O2E_N8_K_(2);
      O2E_N8_K_(3);
    }
    O2E_PREFETCH_(e->pf_a + (size_t)k * O2E_GEMM_MR, 3);
    if (CH > 2) O2E_PREFETCH_(e->pf_a + (size_t)k * O2E_GEMM_MR + 16, 3);
    a += CH * O2E_GEMM_MR;
    b += CH * w;
  }
  for (; k < kc; k++) { /* the K tail: one k at a time into chain 0 */
    O2E_N8_K_(0);
    a += O2E_GEMM_MR;
    b += w;
  }
#define O2E_N8_ST_(j, x)                                                                       \
  do {                                                                                         \
    if (NC > j) {                                                                              \
      _mm256_storeu_ps(c, x);                                                                  \
      for (r = 0; r < O2E_GEMM_MR; r++) t[r * 4 + j] = c[r];                                   \
    }                                                                                          \
  } while (0)
  if (CH > 2) {
    O2E_N8_ST_(0, _mm256_add_ps(_mm256_add_ps(s00, s10), _mm256_add_ps(s20, s30)));
    O2E_N8_ST_(1, _mm256_add_ps(_mm256_add_ps(s01, s11), _mm256_add_ps(s21, s31)));
  } else {
    O2E_N8_ST_(0, _mm256_add_ps(s00, s10));
    O2E_N8_ST_(1, _mm256_add_ps(s01, s11));
    O2E_N8_ST_(2, _mm256_add_ps(s02, s12));
    O2E_N8_ST_(3, _mm256_add_ps(s03, s13));
  }
#undef O2E_N8_ST_
  o2e_tile_store_(e, t, 4, mr, NC, i0, j0);
}
#undef O2E_N8_K_
#undef O2E_N8_
#define O2E_K8N_FN_(name, NC)                                                                  \
  O2E_GEMM_FN void name(int kc, const float *a, const float *b, int w, int mr,                 \
                        const o2e_epi_ *e, int i0, int j0) {                                   \
    o2e_k8n_body_(NC, kc, a, b, w, mr, e, i0, j0);                                             \
  }
O2E_K8N_FN_(o2e_k8n1_, 1)
O2E_K8N_FN_(o2e_k8n2_, 2)
O2E_K8N_FN_(o2e_k8n3_, 3)
O2E_K8N_FN_(o2e_k8n4_, 4)

O2E_GEMM_INL void o2e_kernel_(int kc, const float *a, int lda, const float *b, int w, int mr,
                              int nr, const o2e_epi_ *e, int i0, int j0) {
  int h;
  if (!lda && nr <= O2E_GEMM_NARROW && nr <= 4) {
    if (nr == 1)
      o2e_k8n1_(kc, a, b, w, mr, e, i0, j0);
    else if (nr == 2)
      o2e_k8n2_(kc, a, b, w, mr, e, i0, j0);
    else if (nr == 3)
      o2e_k8n3_(kc, a, b, w, mr, e, i0, j0);
    else
      o2e_k8n4_(kc, a, b, w, mr, e, i0, j0);
    return;
  }
  /* The AVX2 register file holds a 4 x 24 tile: do the 8-row panel as two halves. */
  for (h = 0; h < mr; h += 4) {
    const int m4 = mr - h < 4 ? mr - h : 4;
    if (lda) {
      const float *ah = a + (size_t)h * lda;
      if (nr > 16)
        o2e_k8x3p_(kc, ah, lda, b, w, m4, nr, e, i0 + h, j0);
      else if (nr > 8)
        o2e_k8x2p_(kc, ah, lda, b, w, m4, nr, e, i0 + h, j0);
      else
        o2e_k8x1p_(kc, ah, lda, b, w, m4, nr, e, i0 + h, j0);
    } else {
      if (nr > 16)
        o2e_k8x3_(kc, a + h, 0, b, w, m4, nr, e, i0 + h, j0);
      else if (nr > 8)
        o2e_k8x2_(kc, a + h, 0, b, w, m4, nr, e, i0 + h, j0);
      else
        o2e_k8x1_(kc, a + h, 0, b, w, m4, nr, e, i0 + h, j0);
    }
  }
}

#elif defined(O2E_GEMM_NEON)

/* Same comparisons as o2e_act1_ (not vmaxq / vminq), so results match the portable path bit
 * for bit: NaN fails every comparison and passes through, and relu(-0) stays -0. */
O2E_GEMM_INL float32x4_t o2e_act4_(float32x4_t x, o2e_act act) {
  const float32x4_t z = vdupq_n_f32(0.0f);
  switch (act.kind) {
  case O2E_ACT_RELU:
    return vbslq_f32(vcltq_f32(x, z), z, x);
  case O2E_ACT_CLIP: {
    const float32x4_t lo = vdupq_n_f32(act.a), hi = vdupq_n_f32(act.b);
    x = vbslq_f32(vcltq_f32(x, lo), lo, x);
    return vbslq_f32(vcgtq_f32(x, hi), hi, x);
  }
  case O2E_ACT_LEAKY_RELU:
    return vbslq_f32(vcltq_f32(x, z), vmulq_n_f32(x, act.a), x);
  case O2E_ACT_HARD_SIGMOID:
  case O2E_ACT_HARD_SWISH: { /* as o2e_act1_: compares that a NaN fails, so it passes */
    const float32x4_t one = vdupq_n_f32(1.0f);
    float32x4_t t = act.kind == O2E_ACT_HARD_SWISH
                        ? vfmaq_f32(vdupq_n_f32(0.5f), x, vdupq_n_f32(1.0f / 6.0f))
                        : vfmaq_f32(vdupq_n_f32(act.b), x, vdupq_n_f32(act.a));
    t = vbslq_f32(vcltq_f32(t, z), z, t);
    t = vbslq_f32(vcgtq_f32(t, one), one, t);
    return act.kind == O2E_ACT_HARD_SWISH ? vmulq_f32(x, t) : t;
  }
  default:
    if (act.kind >= O2E_ACT_VM_FIRST_) { /* through the stack: an edge or multi-slice tile */
      float t_[4];
      vst1q_f32(t_, x);
      o2e_act_n_(t_, 4, act);
      return vld1q_f32(t_);
    }
    return x;
  }
}

/* Epilogue of an mr x nr tile t (row stride ldt) at C position (i0, j0): 4 lanes at a time,
 * the last nr % 4 columns one by one (NEON has no masked loads). */
O2E_GEMM_FN void o2e_tile_store_(const o2e_epi_ *e, const float *t, int ldt, int mr, int nr,
                                 int i0, int j0) {
  const int n4 = nr & ~3;
  int i, j;
  if (e->final && !e->p && e->act.kind >= O2E_ACT_VM_FIRST_) {
    /* a vmath kind: the plain epilogue, then the activation over the stored tile (in L1) */
    o2e_epi_ ev_ = *e;
    ev_.act.kind = O2E_ACT_NONE;
    o2e_tile_store_(&ev_, t, ldt, mr, nr, i0, j0);
    o2e_act_tile_(e->out + (size_t)(i0 - e->oi) * e->ldo + (j0 - e->oj), (size_t)e->ldo, mr, nr,
                  e->act);
    return;
  }
  for (i = 0; i < mr; i++) {
    const int gi = i0 + i;
    const float *ti = t + (size_t)i * ldt;
    float *o = e->out + (size_t)(gi - e->oi) * e->ldo + (j0 - e->oj);
    const float *q = e->q ? e->q + (size_t)(gi - e->qi) * e->ldq + (j0 - e->qj) : NULL;
    const float *r = e->r ? e->r + (size_t)gi * e->ldr + j0 : NULL;
    const float *p = e->p ? e->p + (size_t)gi * e->ldp + j0 : NULL;
    const float *bn = e->bn ? e->bn + j0 : NULL;
    const float bms = e->bm ? e->bm[gi] : 0.0f;
    const float32x4_t bm = vdupq_n_f32(bms);
    for (j = 0; j < n4; j += 4) {
      float32x4_t x = vld1q_f32(ti + j);
      if (q) x = vaddq_f32(x, vld1q_f32(q + j));
      if (e->final) {
        x = vaddq_f32(x, bm);
        if (bn) x = vaddq_f32(x, vld1q_f32(bn + j));
        if (r) x = vaddq_f32(x, vld1q_f32(r + j));
        x = o2e_act4_(x, e->act);
        if (p) x = vaddq_f32(x, vld1q_f32(p + j));
      }
      vst1q_f32(o + j, x);
    }
    for (; j < nr; j++) {
      float x = ti[j];
      if (q) x += q[j];
      if (e->final) {
        x += bms;
        if (bn) x += bn[j];
        if (r) x += r[j];
        x = o2e_act1_(x, e->act);
        if (p) x += p[j];
      }
      o[j] = x;
    }
  }
}

/* Row r of the rank-1 update: A value r times the NV vectors of B. Packed A: the 8 values of
 * one K step are two q registers and fmla by element reads them in place (no broadcast). */
#define O2E_RN_(r, av, lane)                                                                   \
  do {                                                                                         \
    if (PLAIN) {                                                                               \
      const float s_ = p##r[k];                                                                \
      c##r##0 = vfmaq_n_f32(c##r##0, b0, s_);                                                  \
      if (NV > 1) c##r##1 = vfmaq_n_f32(c##r##1, b1, s_);                                      \
      if (NV > 2) c##r##2 = vfmaq_n_f32(c##r##2, b2, s_);                                      \
    } else {                                                                                   \
      c##r##0 = vfmaq_laneq_f32(c##r##0, b0, av, lane);                                        \
      if (NV > 1) c##r##1 = vfmaq_laneq_f32(c##r##1, b1, av, lane);                            \
      if (NV > 2) c##r##2 = vfmaq_laneq_f32(c##r##2, b2, av, lane);                            \
    }                                                                                          \
  } while (0)

#define O2E_LEAN4_V_(acc, rw, v, KIND)                                                         \
  do {                                                                                         \
    float32x4_t x_ = acc;                                                                      \
    if (lq_) x_ = vaddq_f32(x_, vld1q_f32(lq_ + (rw) * lldq_ + 4 * (v)));                      \
    x_ = vaddq_f32(x_, bm_);                                                                   \
    if (lbn_) x_ = vaddq_f32(x_, bn##v##_);                                                    \
    if (lr_) x_ = vaddq_f32(x_, vld1q_f32(lr_ + (rw) * lldr_ + 4 * (v)));                      \
    x_ = o2e_act4_(x_, lact_);                                                                 \
    vst1q_f32(lo_ + (rw) * lldo_ + 4 * (v), x_);                                               \
  } while (0)
#define O2E_LEAN4_ROW_(rw, KIND)                                                               \
  do {                                                                                         \
    const float32x4_t bm_ = vdupq_n_f32(lbm_ ? lbm_[rw] : 0.0f);                               \
    O2E_LEAN4_V_(c##rw##0, rw, 0, KIND);                                                       \
    if (NV > 1) O2E_LEAN4_V_(c##rw##1, rw, 1, KIND);                                           \
    if (NV > 2) O2E_LEAN4_V_(c##rw##2, rw, 2, KIND);                                           \
  } while (0)
#define O2E_LEAN4_TILE_(KIND)                                                                  \
  do {                                                                                         \
    const o2e_act lact_ = {KIND, la_, lb_};                                                    \
    O2E_LEAN4_ROW_(0, KIND);                                                                   \
    O2E_LEAN4_ROW_(1, KIND);                                                                   \
    O2E_LEAN4_ROW_(2, KIND);                                                                   \
    O2E_LEAN4_ROW_(3, KIND);                                                                   \
    O2E_LEAN4_ROW_(4, KIND);                                                                   \
    O2E_LEAN4_ROW_(5, KIND);                                                                   \
    O2E_LEAN4_ROW_(6, KIND);                                                                   \
    O2E_LEAN4_ROW_(7, KIND);                                                                   \
  } while (0)

/* 8 x (4 NV) kernel: 24 accumulators for NV = 3, the 8-row panel in one pass. */
O2E_GEMM_INL void o2e_k4_body_(const int NV, const int PLAIN, int kc, const float *a, int lda,
                               const float *b, int w, int mr, int nr, const o2e_epi_ *e, int i0,
                               int j0) {
  const float *p0 = a, *p1 = O2E_PR_(1), *p2 = O2E_PR_(2), *p3 = O2E_PR_(3);
  const float *p4 = O2E_PR_(4), *p5 = O2E_PR_(5), *p6 = O2E_PR_(6), *p7 = O2E_PR_(7);
  float32x4_t c00 = vdupq_n_f32(0.0f), c01 = c00, c02 = c00, c10 = c00, c11 = c00, c12 = c00;
  float32x4_t c20 = c00, c21 = c00, c22 = c00, c30 = c00, c31 = c00, c32 = c00;
  float32x4_t c40 = c00, c41 = c00, c42 = c00, c50 = c00, c51 = c00, c52 = c00;
  float32x4_t c60 = c00, c61 = c00, c62 = c00, c70 = c00, c71 = c00, c72 = c00;
  float t[O2E_GEMM_MR * 12];
  int k;
  for (k = 0; k < kc; k++) {
    const float32x4_t b0 = vld1q_f32(b);
    const float32x4_t b1 = NV > 1 ? vld1q_f32(b + 4) : b0;
    const float32x4_t b2 = NV > 2 ? vld1q_f32(b + 8) : b0;
    const float32x4_t alo = PLAIN ? b0 : vld1q_f32(a), ahi = PLAIN ? b0 : vld1q_f32(a + 4);
    O2E_RN_(0, alo, 0);
    O2E_RN_(1, alo, 1);
    O2E_RN_(2, alo, 2);
    O2E_RN_(3, alo, 3);
    O2E_RN_(4, ahi, 0);
    O2E_RN_(5, ahi, 1);
    O2E_RN_(6, ahi, 2);
    O2E_RN_(7, ahi, 3);
    if (!PLAIN && (k & 1) == 0) O2E_PREFETCH_(e->pf_a + (size_t)k * O2E_GEMM_MR, 3);
    if (!PLAIN) a += O2E_GEMM_MR;
    b += w;
  }
  if (mr == O2E_GEMM_MR && nr == 4 * NV && e->final && !e->p) {
    /* full tile, last K slice: from the registers (see the lean epilogue's note above
     * O2E_LEAN_LOCALS_) */
    O2E_LEAN_LOCALS_();
    const float *const lq_ = e->q ? e->q + (size_t)(i0 - e->qi) * e->ldq + (j0 - e->qj) : NULL;
    const size_t lldq_ = (size_t)e->ldq;
    const float *const lbn_ = e->bn ? e->bn + j0 : NULL;
    const float32x4_t bn0_ = lbn_ ? vld1q_f32(lbn_) : vdupq_n_f32(0.0f);
    const float32x4_t bn1_ = lbn_ && NV > 1 ? vld1q_f32(lbn_ + 4) : bn0_;
    const float32x4_t bn2_ = lbn_ && NV > 2 ? vld1q_f32(lbn_ + 8) : bn0_;
    switch (e->act.kind) {
    case O2E_ACT_RELU: O2E_LEAN4_TILE_(O2E_ACT_RELU); break;
    case O2E_ACT_CLIP: O2E_LEAN4_TILE_(O2E_ACT_CLIP); break;
    case O2E_ACT_LEAKY_RELU: O2E_LEAN4_TILE_(O2E_ACT_LEAKY_RELU); break;
    case O2E_ACT_HARD_SIGMOID: O2E_LEAN4_TILE_(O2E_ACT_HARD_SIGMOID); break;
    case O2E_ACT_HARD_SWISH: O2E_LEAN4_TILE_(O2E_ACT_HARD_SWISH); break;
    default:
      O2E_LEAN4_TILE_(O2E_ACT_NONE);
      if (e->act.kind >= O2E_ACT_VM_FIRST_) o2e_act_tile_(lo_, lldo_, O2E_GEMM_MR, 4 * NV, e->act);
      break;
    }
    return;
  }
  /* Through a small L1-resident tile to the epilogue (kc >> 1: the 24 stores and reloads
   * cost little next to the kc x 24 fmla). */
#define O2E_TN_(r)                                                                             \
  do {                                                                                         \
    vst1q_f32(t + r * 12, c##r##0);                                                            \
    if (NV > 1) vst1q_f32(t + r * 12 + 4, c##r##1);                                            \
    if (NV > 2) vst1q_f32(t + r * 12 + 8, c##r##2);                                            \
  } while (0)
  O2E_TN_(0);
  O2E_TN_(1);
  O2E_TN_(2);
  O2E_TN_(3);
  O2E_TN_(4);
  O2E_TN_(5);
  O2E_TN_(6);
  O2E_TN_(7);
#undef O2E_TN_
  o2e_tile_store_(e, t, 12, mr, nr, i0, j0);
}

#define O2E_K4_FN_(name, NV, PLAIN)                                                            \
  O2E_GEMM_FN void name(int kc, const float *a, int lda, const float *b, int w, int mr, int nr, \
                        const o2e_epi_ *e, int i0, int j0) {                                   \
    o2e_k4_body_(NV, PLAIN, kc, a, lda, b, w, mr, nr, e, i0, j0);                              \
  }
O2E_K4_FN_(o2e_k4x3_, 3, 0)
O2E_K4_FN_(o2e_k4x2_, 2, 0)
O2E_K4_FN_(o2e_k4x1_, 1, 0)
O2E_K4_FN_(o2e_k4x3p_, 3, 1)
O2E_K4_FN_(o2e_k4x2p_, 2, 1)
O2E_K4_FN_(o2e_k4x1p_, 1, 1)

O2E_GEMM_INL void o2e_kernel_(int kc, const float *a, int lda, const float *b, int w, int mr,
                              int nr, const o2e_epi_ *e, int i0, int j0) {
  if (lda) {
    if (nr > 8)
      o2e_k4x3p_(kc, a, lda, b, w, mr, nr, e, i0, j0);
    else if (nr > 4)
      o2e_k4x2p_(kc, a, lda, b, w, mr, nr, e, i0, j0);
    else
      o2e_k4x1p_(kc, a, lda, b, w, mr, nr, e, i0, j0);
  } else {
    if (nr > 8)
      o2e_k4x3_(kc, a, 0, b, w, mr, nr, e, i0, j0);
    else if (nr > 4)
      o2e_k4x2_(kc, a, 0, b, w, mr, nr, e, i0, j0);
    else
      o2e_k4x1_(kc, a, 0, b, w, mr, nr, e, i0, j0);
  }
}

#else /* portable C99 */

/* 4 x 8 tile of scalars: 32 accumulators map onto 8 SSE / NEON registers when the compiler
 * vectorizes, and stay a reasonable register load for a scalar FPU. */
/* 4 x 4 block of scalar accumulators (16 registers plus 8 operands: fits the FPU register
 * file of small cores such as a Cortex-M4F/M7 and SLP-vectorizes on SSE/NEON); the 8-wide
 * strip is done as two column halves. */
#if defined(__GNUC__) && !defined(__clang__)
/* gcc -O3 would vectorize the K loop itself (shuffling scalars in and out of vectors),
 * which runs at a third of the speed of this straight-line code. */
__attribute__((optimize("no-tree-loop-vectorize")))
#endif
O2E_GEMM_FN void o2e_k4x4_(int kc, const float *a0, const float *a1, const float *a2,
                           const float *a3, size_t ks, const float *b, int w, float *t) {
  float c00 = 0.0f, c01 = 0.0f, c02 = 0.0f, c03 = 0.0f, c10 = 0.0f, c11 = 0.0f, c12 = 0.0f;
  float c13 = 0.0f, c20 = 0.0f, c21 = 0.0f, c22 = 0.0f, c23 = 0.0f, c30 = 0.0f, c31 = 0.0f;
  float c32 = 0.0f, c33 = 0.0f;
  size_t k, ak = 0;
  for (k = 0; k < (size_t)kc; k++, ak += ks, b += w) {
    const float b0 = b[0], b1 = b[1], b2 = b[2], b3 = b[3];
    const float v0 = a0[ak], v1 = a1[ak], v2 = a2[ak], v3 = a3[ak];
    c00 += v0 * b0;
    c01 += v0 * b1;
    c02 += v0 * b2;
    c03 += v0 * b3;
    c10 += v1 * b0;
    c11 += v1 * b1;
    c12 += v1 * b2;
    c13 += v1 * b3;
    c20 += v2 * b0;
    c21 += v2 * b1;
    c22 += v2 * b2;
    c23 += v2 * b3;
    c30 += v3 * b0;
    c31 += v3 * b1;
    c32 += v3 * b2;
    c33 += v3 * b3;
  }
  t[0] = c00, t[1] = c01, t[2] = c02, t[3] = c03;
  t[8] = c10, t[9] = c11, t[10] = c12, t[11] = c13;
  t[16] = c20, t[17] = c21, t[18] = c22, t[19] = c23;
  t[24] = c30, t[25] = c31, t[26] = c32, t[27] = c33;
}

O2E_GEMM_FN void o2e_k4x8_(int kc, const float *a, int lda, const float *b, int w, int mr,
                           int nr, const o2e_epi_ *e, int i0, int j0) {
  float t[4 * 8];
  const size_t ks = lda ? 1 : O2E_GEMM_MR; /* distance between K steps of one row */
  const float *a1 = lda ? a + (size_t)(mr > 1 ? 1 : 0) * lda : a + 1;
  const float *a2 = lda ? a + (size_t)(mr > 2 ? 2 : mr - 1) * lda : a + 2;
  const float *a3 = lda ? a + (size_t)(mr > 3 ? 3 : mr - 1) * lda : a + 3;
  o2e_k4x4_(kc, a, a1, a2, a3, ks, b, w, t);
  if (nr > 4) o2e_k4x4_(kc, a, a1, a2, a3, ks, b + 4, w, t + 4);
  o2e_store_tile_(e, t, 8, mr, nr, i0, j0);
}

#define o2e_tile_store_ o2e_store_tile_

O2E_GEMM_INL void o2e_kernel_(int kc, const float *a, int lda, const float *b, int w, int mr,
                              int nr, const o2e_epi_ *e, int i0, int j0) {
  int h;
  for (h = 0; h < mr; h += 4)
    o2e_k4x8_(kc, lda ? a + (size_t)h * lda : a + h, lda, b, w, mr - h < 4 ? mr - h : 4, nr, e,
              i0 + h, j0);
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
#elif defined(O2E_GEMM_NEON)
  /* 2 rows x 4 vectors = 8 independent fmla chains; rows stream from memory. */
  for (; i + 2 <= m1; i += 2) {
    const float *r0 = A + (size_t)i * lda, *r1 = r0 + lda;
    float32x4_t s0 = vdupq_n_f32(0.0f), s1 = s0, s2 = s0, s3 = s0, t0 = s0, t1 = s0, t2 = s0,
                t3 = s0;
    float u0 = 0.0f, u1 = 0.0f;
    int k = 0;
    for (; k + 16 <= K; k += 16) {
      const float32x4_t x0 = vld1q_f32(x + k), x1 = vld1q_f32(x + k + 4);
      const float32x4_t x2 = vld1q_f32(x + k + 8), x3 = vld1q_f32(x + k + 12);
      s0 = vfmaq_f32(s0, vld1q_f32(r0 + k), x0);
      s1 = vfmaq_f32(s1, vld1q_f32(r0 + k + 4), x1);
      s2 = vfmaq_f32(s2, vld1q_f32(r0 + k + 8), x2);
      s3 = vfmaq_f32(s3, vld1q_f32(r0 + k + 12), x3);
      t0 = vfmaq_f32(t0, vld1q_f32(r1 + k), x0);
      t1 = vfmaq_f32(t1, vld1q_f32(r1 + k + 4), x1);
      t2 = vfmaq_f32(t2, vld1q_f32(r1 + k + 8), x2);
      t3 = vfmaq_f32(t3, vld1q_f32(r1 + k + 12), x3);
    }
    for (; k + 4 <= K; k += 4) {
      const float32x4_t x0 = vld1q_f32(x + k);
      s0 = vfmaq_f32(s0, vld1q_f32(r0 + k), x0);
      t0 = vfmaq_f32(t0, vld1q_f32(r1 + k), x0);
    }
    for (; k < K; k++) {
      u0 += r0[k] * x[k];
      u1 += r1[k] * x[k];
    }
    y[i] = u0 + vaddvq_f32(vaddq_f32(vaddq_f32(s0, s1), vaddq_f32(s2, s3)));
    y[i + 1] = u1 + vaddvq_f32(vaddq_f32(vaddq_f32(t0, t1), vaddq_f32(t2, t3)));
  }
  for (; i < m1; i++) {
    const float *r0 = A + (size_t)i * lda;
    float32x4_t s0 = vdupq_n_f32(0.0f), s1 = s0;
    float u0 = 0.0f;
    int k = 0;
    for (; k + 8 <= K; k += 8) {
      s0 = vfmaq_f32(s0, vld1q_f32(r0 + k), vld1q_f32(x + k));
      s1 = vfmaq_f32(s1, vld1q_f32(r0 + k + 4), vld1q_f32(x + k + 4));
    }
    for (; k < K; k++) u0 += r0[k] * x[k];
    y[i] = u0 + vaddvq_f32(vaddq_f32(s0, s1));
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
#elif defined(O2E_GEMM_NEON)
    /* One K step is 8 rows = two q registers; x[k .. k+3] is loaded once and used by lane.
     * Two accumulator pairs alternate so consecutive fmla do not wait on each other. */
    float32x4_t l0 = vdupq_n_f32(0.0f), h0 = l0, l1 = l0, h1 = l0;
    for (; k + 4 <= K; k += 4) {
      const float32x4_t xv = vld1q_f32(x + k);
      const float *ak = a + (size_t)k * O2E_GEMM_MR;
      l0 = vfmaq_laneq_f32(l0, vld1q_f32(ak), xv, 0);
      h0 = vfmaq_laneq_f32(h0, vld1q_f32(ak + 4), xv, 0);
      l1 = vfmaq_laneq_f32(l1, vld1q_f32(ak + 8), xv, 1);
      h1 = vfmaq_laneq_f32(h1, vld1q_f32(ak + 12), xv, 1);
      l0 = vfmaq_laneq_f32(l0, vld1q_f32(ak + 16), xv, 2);
      h0 = vfmaq_laneq_f32(h0, vld1q_f32(ak + 20), xv, 2);
      l1 = vfmaq_laneq_f32(l1, vld1q_f32(ak + 24), xv, 3);
      h1 = vfmaq_laneq_f32(h1, vld1q_f32(ak + 28), xv, 3);
    }
    for (; k < K; k++) {
      const float *ak = a + (size_t)k * O2E_GEMM_MR;
      l0 = vfmaq_n_f32(l0, vld1q_f32(ak), x[k]);
      h0 = vfmaq_n_f32(h0, vld1q_f32(ak + 4), x[k]);
    }
    vst1q_f32(yp, vaddq_f32(l0, l1));
    vst1q_f32(yp + 4, vaddq_f32(h0, h1));
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
  const o2e_conv_b *conv; /* B is a convolution's implicit im2col matrix (B, ldb unused) */
  int b_packed; /* B packed at conversion in O2E_GEMM_PB-wide strips (ldb unused) */
} o2e_gemm_args_;

#define O2E_GEMM_RUP16_(n) (((size_t)(n) + 15u) & ~(size_t)15u)
/* rows of the largest K slice o2e_gemm_run_ packs: min(K, KC) */
#define O2E_GEMM_KCB_(K) ((size_t)(K) < (size_t)O2E_GEMM_KC ? (size_t)(K) : (size_t)O2E_GEMM_KC)

#if defined(O2E_GEMM_AVX512)
#define O2E_GEMM_SMALLN 12
#ifndef O2E_SN_KB
#define O2E_SN_KB 128 /* K chunk: the expanded B chunk (N x KB x 8 floats) stays in L1 */
#endif

O2E_GEMM_FN size_t o2e_sn_ws_floats_(int M, int N) {
  return O2E_GEMM_RUP16_((size_t)N * (O2E_SN_KB + 2) * 8) +
         O2E_GEMM_RUP16_((size_t)4 * O2E_GEMM_MR * O2E_SN_KB) +
         O2E_GEMM_RUP16_(((size_t)M + O2E_GEMM_MR) * N) + 16;
}
#else
#define O2E_GEMM_SMALLN 1
#endif

/* Rows of A per M block of the blocked product (a multiple of 8): as many as keep the block's
 * M x K floats within O2E_GEMM_A_BYTES, at least O2E_GEMM_MC_MIN. */
O2E_GEMM_INL int o2e_mc_(int M, int K) {
  /* integers, not double: a single-precision FPU (Cortex-M4F / M33) would run double
   * arithmetic in software routines (the floor of the quotient is the same) */
  size_t rows = (size_t)O2E_GEMM_A_BYTES / ((size_t)K * sizeof(float));
  int mc;
  if (rows < (size_t)O2E_GEMM_MC_MIN) rows = (size_t)O2E_GEMM_MC_MIN;
  if (rows > (size_t)M) rows = (size_t)M;
  mc = ((int)rows + O2E_GEMM_MR - 1) / O2E_GEMM_MR * O2E_GEMM_MR;
  return mc < O2E_GEMM_MR ? O2E_GEMM_MR : mc;
}

/* Floats of scratch one thread needs with strips of sb x NR columns. */
O2E_GEMM_FN size_t o2e_ws_floats_sb_(int M, int N, int K, int sb) {
  size_t total;
  if (M <= 0 || N <= 0 || K <= 0) return 0;
  if (N == 1) return O2E_GEMM_RUP16_(K) + O2E_GEMM_RUP16_((size_t)M + O2E_GEMM_MR);
  /* packed B: one K slice of a strip (at most K rows: a short K needs no KC-row buffer) */
  total = O2E_GEMM_RUP16_((size_t)O2E_GEMM_KCB_(K) * sb * O2E_GEMM_NR);
  if (K > O2E_GEMM_KC) /* partial sums of an M block (scratch tile T), see o2e_epi_setup_ */
    total += O2E_GEMM_RUP16_((size_t)o2e_mc_(M, K) * sb * O2E_GEMM_NR);
#if O2E_GEMM_SMALLN > 1
  if (N <= O2E_GEMM_SMALLN && o2e_sn_ws_floats_(M, N) > total) total = o2e_sn_ws_floats_(M, N);
#endif
  return total;
}

O2E_GEMM_FN size_t o2e_ws_floats_(int M, int N, int K) {
  return o2e_ws_floats_sb_(M, N, K, O2E_GEMM_SB);
}

O2E_GEMM_FN size_t o2e_sgemm_workspace(int M, int N, int K) {
  return (o2e_ws_floats_(M, N, K) * (size_t)O2E_MAX_THREADS) * sizeof(float) + 64;
}

/* Workspace of o2e_sgemm_packed_conv (its strips are O2E_GEMM_CONV_SB panels wide). */
O2E_GEMM_FN size_t o2e_sgemm_conv_workspace(int M, int N, int K) {
  return (o2e_ws_floats_sb_(M, N, K, O2E_GEMM_CONV_SB) * (size_t)O2E_MAX_THREADS) * sizeof(float) + 64;
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

#if defined(O2E_GEMM_AVX512)
/* ==== small N (2 .. O2E_GEMM_SMALLN columns) ===============================================
 * A fully-connected layer at batch 2..12 is A-bandwidth bound like a matrix-vector product,
 * and an 8 x 48 tile would waste most of its lanes. Here one zmm holds two K steps of a
 * packed panel (16 values = 2 x 8 rows) and is multiplied by the matching "expanded" B
 * vector (B[k][n] repeated 8 times, then B[k+1][n] 8 times), built once per K chunk, so
 * every A value is loaded once and feeds all N columns; the two halves are added at the end.
 * PP panels are processed together so that each expanded-B load feeds PP FMAs. */
O2E_GEMM_INL void o2e_sn_body_(const int PP, const int NN, int kk, const float *const *ap,
                               const float *bx, float *y, int first) {
  __m512 acc[4][12];
  int q, n, k;
  for (q = 0; q < PP; q++)
    for (n = 0; n < NN; n++) acc[q][n] = _mm512_setzero_ps();
  for (k = 0; k + 2 <= kk; k += 2) {
    __m512 av[4];
    for (q = 0; q < PP; q++) {
      av[q] = _mm512_loadu_ps(ap[q] + (size_t)k * O2E_GEMM_MR);
      O2E_IN_REG_(av[q]);
    }
    for (n = 0; n < NN; n++) {
      __m512 bv = _mm512_load_ps(bx + (size_t)n * (O2E_SN_KB + 2) * 8 + (size_t)k * 8);
      O2E_IN_REG_(bv);
      for (q = 0; q < PP; q++) acc[q][n] = _mm512_fmadd_ps(av[q], bv, acc[q][n]);
    }
  }
  if (k < kk) { /* odd tail: only the low half of A exists; the expanded B pad is zero */
    for (q = 0; q < PP; q++) {
      const __m512 a1 = _mm512_maskz_loadu_ps(0x00FF, ap[q] + (size_t)k * O2E_GEMM_MR);
      for (n = 0; n < NN; n++)
        acc[q][n] = _mm512_fmadd_ps(
            a1, _mm512_load_ps(bx + (size_t)n * (O2E_SN_KB + 2) * 8 + (size_t)k * 8), acc[q][n]);
    }
  }
  for (q = 0; q < PP; q++)
    for (n = 0; n < NN; n++) {
      __m256 h = _mm256_add_ps(_mm512_castps512_ps256(acc[q][n]),
                               _mm512_extractf32x8_ps(acc[q][n], 1));
      float *yq = y + ((size_t)q * NN + n) * O2E_GEMM_MR;
      if (!first) h = _mm256_add_ps(h, _mm256_loadu_ps(yq));
      _mm256_storeu_ps(yq, h);
    }
}

#define O2E_SN_CASE_(PP, NN)                                                                   \
  case NN:                                                                                     \
    o2e_sn_body_(PP, NN, kk, ap, bx, y, first);                                                \
    break

/* y[p][n][i] (+)= panels ap[0..PP) x expanded B, for N = 2..12. */
O2E_GEMM_FN void o2e_sn_block_(int N, int kk, const float *const *ap, const float *bx, float *y,
                               int first) {
  switch (N) {
    O2E_SN_CASE_(4, 2);
    O2E_SN_CASE_(4, 3);
    O2E_SN_CASE_(4, 4);
    O2E_SN_CASE_(4, 5);
    O2E_SN_CASE_(4, 6);
    O2E_SN_CASE_(2, 7);
    O2E_SN_CASE_(2, 8);
    O2E_SN_CASE_(2, 9);
    O2E_SN_CASE_(2, 10);
    O2E_SN_CASE_(2, 11);
  default:
    o2e_sn_body_(2, 12, kk, ap, bx, y, first);
    break;
  }
}


/* Rows [m0, m1) (m0 a multiple of 8), all N columns, 2 <= N <= O2E_GEMM_SMALLN. */
O2E_GEMM_FN void o2e_sn_run_(const o2e_gemm_args_ *g, int m0, int m1, float *ws) {
  const int N = g->N, K = g->K, PP = N <= 6 ? 4 : 2;
  const int p0 = m0 / O2E_GEMM_MR, p1 = (m1 + O2E_GEMM_MR - 1) / O2E_GEMM_MR;
  float *bx = ws; /* 64-byte aligned: the workspace is, and every part is a multiple of 16 */
  float *apk = bx + O2E_GEMM_RUP16_((size_t)N * (O2E_SN_KB + 2) * 8);
  float *y = apk + O2E_GEMM_RUP16_((size_t)4 * O2E_GEMM_MR * O2E_SN_KB); /* [p - p0][n][8] */
  o2e_epi_ e;
  int kb, p, n, i, k;
  for (kb = 0; kb < K; kb += O2E_SN_KB) {
    const int kk = K - kb < O2E_SN_KB ? K - kb : O2E_SN_KB;
    for (n = 0; n < N; n++) {
      float *d = bx + (size_t)n * (O2E_SN_KB + 2) * 8;
      for (k = 0; k < kk; k++)
        _mm256_store_ps(d + (size_t)k * 8, _mm256_set1_ps(g->B[(size_t)(kb + k) * g->ldb + n]));
      _mm256_store_ps(d + (size_t)kk * 8, _mm256_setzero_ps());
    }
    for (p = p0; p < p1; p += PP) {
      const float *ap[4];
      int q;
      for (q = 0; q < PP; q++) {
        const int pq = p + q < p1 ? p + q : p1 - 1; /* past the end: recompute the last one */
        if (g->a_packed) {
          ap[q] = g->A + (size_t)pq * O2E_GEMM_MR * K + (size_t)kb * O2E_GEMM_MR;
        } else {
          const int r0 = pq * O2E_GEMM_MR;
          const int rows = g->M - r0 < O2E_GEMM_MR ? g->M - r0 : O2E_GEMM_MR;
          float *dst = apk + (size_t)q * O2E_GEMM_MR * O2E_SN_KB;
          o2e_pack_a_panel_(rows, kk, g->A + (size_t)r0 * g->lda + kb, g->lda, dst);
          ap[q] = dst;
        }
      }
      if (p + PP <= p1) {
        o2e_sn_block_(N, kk, ap, bx, y + (size_t)(p - p0) * N * O2E_GEMM_MR, kb == 0);
      } else { /* short last group: compute into scratch, keep the real panels */
        float tmp[4 * O2E_GEMM_SMALLN * O2E_GEMM_MR];
        const int valid = p1 - p;
        int j;
        if (kb > 0) memcpy(tmp, y + (size_t)(p - p0) * N * O2E_GEMM_MR, sizeof(float) * (size_t)valid * N * O2E_GEMM_MR);
        o2e_sn_block_(N, kk, ap, bx, tmp, kb == 0);
        for (j = 0; j < valid * N * O2E_GEMM_MR; j++) y[(size_t)(p - p0) * N * O2E_GEMM_MR + j] = tmp[j];
      }
    }
  }
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
  for (p = p0; p < p1; p++) {
    float t[O2E_GEMM_MR * O2E_GEMM_SMALLN];
    const float *yp = y + (size_t)(p - p0) * N * O2E_GEMM_MR;
    const int i0 = p * O2E_GEMM_MR;
    for (i = 0; i < O2E_GEMM_MR; i++)
      for (n = 0; n < N; n++) t[i * N + n] = yp[n * O2E_GEMM_MR + i];
    o2e_tile_store_(&e, t, N, m1 - i0 < O2E_GEMM_MR ? m1 - i0 : O2E_GEMM_MR, N, i0, 0);
  }
}
#endif

/* Epilogue of one K slice (see o2e_epi_). Partial sums of K slices normally live in C
 * itself. That is wrong when the old C is still needed at the end (accumulating through a
 * non-linear activation, or R == C): then use_t sends them to the scratch tile t, whose
 * element (i, j) is t[(i - ti) * ldt + (j - tj)]. */
O2E_GEMM_INL void o2e_epi_setup_(o2e_epi_ *e, const o2e_gemm_args_ *g, int first, int last,
                                 int use_t, float *t, int ldt, int ti, int tj) {
  memset(e, 0, sizeof *e);
  e->final = last;
  e->act = g->act;
  if (last) {
    e->bm = g->bm;
    e->bn = g->bn;
    e->r = g->R;
    e->ldr = g->ldr;
  }
  if (use_t) {
    if (last) {
      e->out = g->C;
      e->ldo = g->ldc;
      e->p = g->accumulate ? g->C : NULL;
      e->ldp = g->ldc;
    } else {
      e->out = t;
      e->ldo = ldt;
      e->oi = ti;
      e->oj = tj;
    }
    if (!first) {
      e->q = t;
      e->ldq = ldt;
      e->qi = ti;
      e->qj = tj;
    }
  } else {
    e->out = g->C;
    e->ldo = g->ldc;
    if (first && last) {
      e->p = g->accumulate ? g->C : NULL; /* single slice: exact C_old + act(...) */
      e->ldp = g->ldc;
    } else if (!first || g->accumulate) {
      e->q = g->C; /* linear case: the old C can join the sum before the epilogue */
      e->ldq = g->ldc;
    }
  }
}

/* Whether K slices need the scratch tile (see o2e_epi_setup_). */
O2E_GEMM_INL int o2e_need_t_(const o2e_gemm_args_ *g, int nkb) {
  if (nkb <= 1) return 0;
  if (g->accumulate && g->act.kind != 0) return 1;
  return g->R && o2e_overlap_(g->R, (size_t)(g->M - 1) * g->ldr + g->N, g->C,
                              (size_t)(g->M - 1) * g->ldc + g->N);
}

/* Software prefetch of the next strip of B (rows x cols floats, cols <= NR, row stride ld),
 * a few rows per micro-kernel call, so that it is already in cache when its turn comes:
 * the data movement hides under the FMAs instead of stalling before the next packing. */
typedef struct {
  const float *p;
  int rows, last, ld, per, r;
} o2e_pf_;

O2E_GEMM_INL void o2e_pf_init_(o2e_pf_ *f, const float *p, int rows, int cols, int ld, int calls) {
  f->p = p;
  f->rows = p ? rows : 0;
  f->last = cols - 1;
  f->ld = ld;
  f->per = calls > 0 ? (rows + calls - 1) / calls : 0;
  f->r = 0;
}

#define O2E_PF_STEP_(f, loc)                                                                   \
  do {                                                                                         \
    int end_ = (f).r + (f).per;                                                                \
    if (end_ > (f).rows) end_ = (f).rows;                                                      \
    for (; (f).r < end_; (f).r++) {                                                            \
      const float *row_ = (f).p + (size_t)(f).r * (f).ld;                                      \
      int c_;                                                                                  \
      for (c_ = 0; c_ < (f).last; c_ += 16) O2E_PREFETCH_(row_ + c_, loc);                     \
      O2E_PREFETCH_(row_ + (f).last, loc);                                                     \
    }                                                                                          \
  } while (0)

/* Prefetch (to L2) of the C and R lines that rows [i, i + rows) of the next strip, from
 * column j, will store and read: each strip's epilogue touches 8 x NR floats in every one of
 * the block's rows, hundreds of rows apart (a 1x1 convolution's output channels are whole
 * planes), more streams than the hardware prefetchers follow, so without this every epilogue
 * waits for its lines from L3 or memory. Issued one strip ahead (a sweep over the block's
 * panels): ResNet50's res2 1x1 64 -> 256 with its residual ran 0.77-0.81x the time. */
O2E_GEMM_INL int o2e_r_in_place_(const o2e_gemm_args_ *g) {
  return g->R == g->C && g->ldr == g->ldc;
}

/* (R == C, a residual written in place: its lines are C's, fetched once.) */
O2E_GEMM_INL void o2e_pf_c_(const o2e_gemm_args_ *g, int i, int rows, int j) {
  const float *R = o2e_r_in_place_(g) ? NULL : g->R;
  int r, c;
  for (r = 0; r < rows; r++)
    for (c = 0; c < O2E_GEMM_NR && j + c < g->N; c += 16) {
      O2E_PREFETCH_(g->C + (size_t)(i + r) * g->ldc + j + c, 2);
      if (R) O2E_PREFETCH_(R + (size_t)(i + r) * g->ldr + j + c, 2);
    }
}

/* Element (k, j) of a B packed at conversion (o2e_sgemm_bpacked); j a multiple of NR. */
O2E_GEMM_INL const float *o2e_bpk_(const o2e_gemm_args_ *g, int k, int j) {
  return g->B + (size_t)(j / O2E_GEMM_PB) * O2E_GEMM_PB * g->K + (size_t)k * O2E_GEMM_PB +
         j % O2E_GEMM_PB;
}

/* The blocked product for rows [m0, m1) x columns [n0, n1) (m0 a multiple of 8).
 *
 * Loop order, outer to inner: M blocks of mc rows; NR-wide column strips of B; K slices of
 * kc; 8-row panels of A. One kc x NR strip of B is packed right before use (30 KiB at
 * kc = 160: it stays in L1 while every A panel of the block sweeps across it, so each B value
 * loaded into L1 feeds mc / 8 micro-kernel calls); the A panels stream from L2 / L3, which
 * costs only 32 bytes per 24 FMAs. Because the K slices of one strip run back to back, the
 * mc x NR block of C stays in cache between slices instead of going to memory and back once
 * per slice; the source of the next strip is prefetched meanwhile (B is often a large
 * im2col buffer that comes from DRAM). mc is chosen so that the M block of A stays in the
 * last-level cache, so B is re-read only M / mc times.
 * K slices are balanced (K = 576 runs as 4 x 144, not 160 x 3 + 96). With few A panels
 * the copy costs more than it saves, and the kernel reads B in place. */
O2E_GEMM_FN void o2e_gemm_run_(const o2e_gemm_args_ *g, int m0, int m1, int n0, int n1,
                               float *ws) {
  const int K = g->K;
  const int kcap = !g->b_packed                         ? O2E_GEMM_KC
                   : K > O2E_GEMM_KC && g->M <= 16 * O2E_GEMM_MR ? O2E_GEMM_KC_BPK_FEW
                   : K <= O2E_GEMM_KC_BPK || K > O2E_GEMM_KC   ? O2E_GEMM_KC_BPK
                                                                 : O2E_GEMM_KC;
  const int nkb = (K + kcap - 1) / kcap;
  const int kcb = (K + nkb - 1) / nkb;
  const int mcb = o2e_mc_(g->M, K);
  const int use_t = o2e_need_t_(g, nkb);
  const int lda = g->a_packed ? 0 : g->lda;
  const int NB = (g->conv ? O2E_GEMM_CONV_SB : O2E_GEMM_SB) * O2E_GEMM_NR;
  float *bp = ws;
  float *t = bp + O2E_GEMM_RUP16_((size_t)O2E_GEMM_KCB_(K) * NB);
  int ic, jb, pc;
  for (ic = m0; ic < m1; ic += mcb) {
    const int ie = m1 - ic < mcb ? m1 : ic + mcb;
    const int npan = (ie - ic + O2E_GEMM_MR - 1) / O2E_GEMM_MR;
    const float *a0 = g->A + (size_t)(ic / O2E_GEMM_MR) * O2E_GEMM_MR * K; /* packed A */
    /* Packing pays off when enough A panels reuse a strip; with few panels the kernel reads
     * B in place - if the row stride is an odd number of cache lines the strip's rows
     * spread over all L1 sets, so up to 8 panels still read it without conflicts. */
    const int direct = !g->conv && !g->b_packed &&
                       (npan <= 4 || (npan <= 8 && g->ldb % 16 == 0 && (g->ldb / 16) % 2 == 1));
    /* a residual is read (without one, 56x56 / 54x54 maps measured 0.92-1.0x: within the
     * noise), C's rows are at least O2E_GEMM_PF_C_MINLD floats apart (closer rows, the
     * hardware prefetchers follow them) and the next strip's C and R lines of the whole block
     * fit the prefetch budget */
    const int pf_c = (g->R || (O2E_GEMM_PF_C_NORES && K <= O2E_GEMM_PF_C_NORES_MAXK)) &&
                     g->ldc >= O2E_GEMM_PF_C_MINLD &&
                     (size_t)(ie - ic) * O2E_GEMM_NR * sizeof(float) *
                             (g->R && !o2e_r_in_place_(g) ? 2 : 1) <=
                         (size_t)O2E_GEMM_PF_C_BYTES;
    for (jb = n0; jb < n1; jb += NB) {
      const int nb = n1 - jb < NB ? n1 - jb : NB;
      const int nstrips = (nb + O2E_GEMM_NR - 1) / O2E_GEMM_NR;
      const int nfull = nb / O2E_GEMM_NR;
      for (pc = 0; pc < K; pc += kcb) {
        const int kc = K - pc < kcb ? K - pc : kcb;
        const float *bsrc = g->conv || g->b_packed ? NULL : g->B + (size_t)pc * g->ldb + jb;
        int sidx;
        o2e_epi_ e;
        o2e_pf_ pf;
        /* the block of B that comes next in this loop order */
        if (direct || g->conv) /* a convolution's input is small and read in place */
          o2e_pf_init_(&pf, NULL, 0, 0, 0, 0);
        else if (g->b_packed) /* the same blocks in the strips packed at conversion */
          o2e_pf_init_(&pf,
                       pc + kc < K   ? o2e_bpk_(g, pc + kc, jb)
                       : jb + NB < n1 ? o2e_bpk_(g, 0, jb + NB)
                       : ie < m1      ? o2e_bpk_(g, 0, n0)
                                      : NULL,
                       pc + kc < K ? (K - pc - kc < kcb ? K - pc - kc : kcb) : (K < kcb ? K : kcb),
                       pc + kc < K ? nb : jb + NB < n1 ? (n1 - jb - NB < NB ? n1 - jb - NB : NB)
                                                      : (n1 - n0 < NB ? n1 - n0 : NB),
                       O2E_GEMM_PB, npan * nstrips);
        else if (pc + kc < K)
          o2e_pf_init_(&pf, bsrc + (size_t)kc * g->ldb, K - pc - kc < kcb ? K - pc - kc : kcb,
                       nb, g->ldb, npan * nstrips);
        else if (jb + NB < n1)
          o2e_pf_init_(&pf, g->B + jb + NB, K < kcb ? K : kcb, n1 - jb - NB < NB ? n1 - jb - NB : NB,
                       g->ldb, npan * nstrips);
        else if (ie < m1)
          o2e_pf_init_(&pf, g->B + n0, K < kcb ? K : kcb, n1 - n0 < NB ? n1 - n0 : NB, g->ldb,
                       npan * nstrips);
        else
          o2e_pf_init_(&pf, NULL, 0, 0, 0, 0);
        if (g->conv)
          o2e_pack_b_conv_(g->conv, pc, kc, jb, nb, bp);
        else if (g->b_packed)
          ; /* packed at conversion: the kernels read its strips in place */
        else if (!direct)
          o2e_pack_b_(kc, nb, bsrc, g->ldb, bp);
        else if (nfull < nstrips) /* only the partial last strip needs padding */
          o2e_pack_b_(kc, nb - nfull * O2E_GEMM_NR, bsrc + nfull * O2E_GEMM_NR, g->ldb,
                      bp + (size_t)nfull * O2E_GEMM_NR * kc);
        o2e_epi_setup_(&e, g, pc == 0, pc + kc >= K, use_t, t, NB, ic, jb);
        for (sidx = 0; sidx < nstrips; sidx++) {
          const int jr = jb + sidx * O2E_GEMM_NR;
          const int nr = n1 - jr < O2E_GEMM_NR ? n1 - jr : O2E_GEMM_NR;
          const int in_place = direct && nr == O2E_GEMM_NR;
          const float *bk = g->b_packed ? o2e_bpk_(g, pc, jr)
                            : in_place ? bsrc + sidx * O2E_GEMM_NR
                                       : bp + (size_t)sidx * O2E_GEMM_NR * kc;
          const int w = g->b_packed ? O2E_GEMM_PB : in_place ? g->ldb : o2e_panel_w_(nr);
          int ip;
          for (ip = 0; ip < npan; ip++) {
            const int i = ic + ip * O2E_GEMM_MR;
            const float *a = lda ? g->A + (size_t)i * lda + pc
                                 : a0 + (size_t)ip * O2E_GEMM_MR * K + (size_t)pc * O2E_GEMM_MR;
            if (g->b_packed) {
              if (O2E_GEMM_PF_BPK_LOC >= 0)
                O2E_PF_STEP_(pf, O2E_GEMM_PF_BPK_LOC >= 0 ? O2E_GEMM_PF_BPK_LOC : 0);
            } else if (O2E_GEMM_PF_B_LOC >= 0)
              O2E_PF_STEP_(pf, O2E_GEMM_PF_B_LOC >= 0 ? O2E_GEMM_PF_B_LOC : 0);
            if (!lda) /* the A panel of the next call in this loop order */
              e.pf_a = ip + 1 < npan ? a + (size_t)O2E_GEMM_MR * K
                       : sidx + 1 < nstrips ? a0 + (size_t)pc * O2E_GEMM_MR
                       : pc + kc < K        ? a0 + (size_t)(pc + kc) * O2E_GEMM_MR
                                            : a0;
            e.pf_b = in_place && ip == 0 && jr + 2 * O2E_GEMM_NR <= n1 ? bk + O2E_GEMM_NR : NULL;
            if (pf_c && pc + kc >= K && jr + O2E_GEMM_NR < n1)
              o2e_pf_c_(g, i, ie - i < O2E_GEMM_MR ? ie - i : O2E_GEMM_MR, jr + O2E_GEMM_NR);
            o2e_kernel_(kc, a, lda, bk, w, ie - i < O2E_GEMM_MR ? ie - i : O2E_GEMM_MR, nr, &e,
                        i, jr);
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
  float *ws;     /* thread t's workspace: ws + ws_per * t (any thread may run any job) */
  size_t ws_per;
  /* a generic task (o2e_parallel_for) instead of a GEMM block: fn(ctx, m0, m1) */
  void (*fn)(void *ctx, int begin, int end);
  void *ctx;
} o2e_gemm_job_;

/* Runs job j on thread tid (0: the caller). */
O2E_GEMM_FN void o2e_gemm_job_run_(const o2e_gemm_job_ *j, int tid) {
  float *ws;
  if (j->fn) {
    if (j->m0 < j->m1) j->fn(j->ctx, j->m0, j->m1);
    return;
  }
  if (j->m0 >= j->m1 || j->n0 >= j->n1) return;
  ws = j->ws + j->ws_per * (size_t)tid;
  if (j->g->N == 1 && !j->g->conv && !j->g->b_packed)
    o2e_gemv_run_(j->g, j->m0, j->m1, ws);
#if O2E_GEMM_SMALLN > 1
  else if (j->g->N <= O2E_GEMM_SMALLN && !j->g->conv && !j->g->b_packed)
    o2e_sn_run_(j->g, j->m0, j->m1, ws);
#endif
  else
    o2e_gemm_run_(j->g, j->m0, j->m1, j->n0, j->n1, ws);
}

/* ==== how many threads a call may use ======================================================
 * Per calling thread (thread-local), so two contexts running at once on two threads each keep
 * their own count; 0: the build's default, O2E_THREADS. Read once per parallel call. */
#if O2E_THREADS > 1
#if defined(__GNUC__) || defined(__clang__)
#define O2E_TLS_ __thread
#elif defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
#define O2E_TLS_ _Thread_local
#else
#define O2E_TLS_ /* no thread-local storage: one count for the process */
#endif
static O2E_TLS_ int o2e_threads_tls_;
#endif

/* Threads (1 .. O2E_MAX_THREADS) for the parallel calls this thread makes from now on;
 * returns 0, or -1 for a count outside that range (nothing changed) or above 1 in a build
 * without the pool (O2E_THREADS = 1). */
O2E_GEMM_FN int o2e_use_threads(int n) {
  if (n < 1 || n > O2E_MAX_THREADS) return -1;
#if O2E_THREADS > 1
  o2e_threads_tls_ = n;
  return 0;
#else
  return n == 1 ? 0 : -1;
#endif
}

O2E_GEMM_INL int o2e_threads_now_(void) {
#if O2E_THREADS > 1
  const int n = o2e_threads_tls_;
  return n > 0 ? n : O2E_THREADS;
#else
  return 1;
#endif
}

/* Most jobs one parallel call publishes: O2E_PAR_CHUNKS per thread, bounded (a stack array) */
#define O2E_JOBS_CAP_                                                                          \
  (O2E_MAX_THREADS * O2E_PAR_CHUNKS < 256 ? O2E_MAX_THREADS * O2E_PAR_CHUNKS                   \
                                          : (O2E_MAX_THREADS > 256 ? O2E_MAX_THREADS : 256))

#if O2E_THREADS > 1
/* A small persistent pool: up to O2E_MAX_THREADS - 1 workers, started as calls first need
 * them. After a job a
 * worker spins for a while (GNU C atomics) before parking on a condition variable, so
 * back-to-back GEMMs - the layers of a network - start in well under a microsecond instead
 * of paying a wake-up or a thread creation (20-50 us) each. One parallel call runs at a
 * time (run_mu); calls from several threads take turns.
 * A call publishes its jobs and every thread - the caller included - claims them one at a
 * time from a shared counter, so a worker that is late (descheduled on a busy machine, or
 * still waking up) never holds the caller back: the caller runs the jobs nobody has claimed
 * and only waits for jobs already under way. A job does not depend on the thread that runs
 * it (GEMM jobs carry their own workspace; o2e_parallel_for tasks ask o2e_parallel_thread).
 * The call's generation, its job count and the next unclaimed job share one 64-bit word, so
 * a worker that wakes after its call has finished cannot claim a job of the next call.
 * Each call also publishes how many threads may take part (`active`, its caller included):
 * workers numbered at or past it sit the call out, so a call never runs on more threads than
 * it was given, and per-thread workspaces are indexed below that count.
 * A spinning worker that finds itself on its caller's CPU parks at once (O2E_POOL_COLOC):
 * the scheduler kept the two threads on one CPU for long stretches on the 2-vCPU test host,
 * where the worker's spin took the caller's time slices (issue 34's 2-thread stalls). */
#ifndef O2E_POOL_SPIN
#define O2E_POOL_SPIN 20000 /* polls (~0.1-0.5 ms) before a worker / the caller sleeps */
#endif
#if defined(__GNUC__) || defined(__clang__)
#define O2E_POOL_ATOMIC_ 1
#define O2E_LOAD_(x) __atomic_load_n(&(x), __ATOMIC_ACQUIRE)
#define O2E_STORE_(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELEASE)
#if defined(__x86_64__) || defined(__i386__)
#define O2E_RELAX_() __builtin_ia32_pause()
#else
#define O2E_RELAX_() ((void)0)
#endif
#define O2E_SPINS_ O2E_POOL_SPIN
#ifndef O2E_POOL_COLOC /* 0: a worker spins even on its caller's CPU (the A/B of that rule) */
#define O2E_POOL_COLOC 1
#endif
/* every 256 polls a spinning thread yields: on an oversubscribed machine the thread it waits
 * for may be queued behind it (a no-op costing ~0.3 us when nothing else is runnable) */
#ifndef O2E_POOL_YIELD /* polls between two sched_yield calls of a spinning thread, 0: never */
#define O2E_POOL_YIELD 256
#endif
#define O2E_POLL_(spins)                                                                       \
  ((O2E_POOL_YIELD > 0 && (spins) % (O2E_POOL_YIELD > 0 ? O2E_POOL_YIELD : 1) == 0)            \
       ? (void)sched_yield()                                                                   \
       : O2E_RELAX_())
#else /* no atomics: every access under the mutex, no spinning */
#define O2E_POOL_ATOMIC_ 0
#define O2E_LOAD_(x) (x)
#define O2E_STORE_(x, v) ((x) = (v))
#define O2E_RELAX_() ((void)0)
#define O2E_SPINS_ 0
#define O2E_POLL_(spins) ((void)(spins))
#endif
/* The CPU the calling thread runs on, or -1 where it cannot be read cheaply: x86's RDTSCP
 * returns the kernel's per-CPU TSC_AUX (Linux: the CPU number in bits 0-11). RDTSCP is an
 * optional instruction (CPUID 0x80000001 EDX bit 27; hypervisors may hide it): asked once,
 * when the pool starts, since executing it where it is absent faults. */
#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__)) &&   \
    defined(__linux__)
#include <cpuid.h>
static int o2e_pool_rdtscp_;
static void o2e_pool_cpu_init_(void) {
  unsigned a, b, c, d;
  o2e_pool_rdtscp_ = __get_cpuid(0x80000001u, &a, &b, &c, &d) && (d >> 27 & 1u);
}
static inline int o2e_pool_cpu_(void) {
  unsigned aux;
  if (!o2e_pool_rdtscp_) return -1;
  (void)__builtin_ia32_rdtscp(&aux);
  return (int)(aux & 0xFFFu);
}
#else
static void o2e_pool_cpu_init_(void) {}
static inline int o2e_pool_cpu_(void) { return -1; }
#endif
#define O2E_POOL_MAX_JOBS_ 0xFFFF
static struct {
  pthread_mutex_t run_mu, mu;
  pthread_cond_t work, done_cv;
  int state;     /* threads the pool has (caller included: workers + 1), 1 before any start */
  int failed;    /* a worker could not be started: the pool keeps the threads it has */
  int active;    /* threads the current call may use (workers 1 .. active - 1 take part) */
  uint64_t word; /* generation << 32 | job count << 16 | index of the next unclaimed job */
  int done;      /* jobs of the current generation finished */
  int caller_cpu; /* the CPU the current call's caller published it from (-1: unknown) */
  const o2e_gemm_job_ *jobs;
#ifdef O2E_POOL_STATS
  long stat_wj, stat_coloc;
#endif
  pthread_t tid[O2E_MAX_THREADS]; /* tid[t] runs as thread t (t >= 1), set before it starts */
} o2e_pool_;
static pthread_once_t o2e_pool_once_ = PTHREAD_ONCE_INIT;
#ifdef O2E_POOL_STATS /* diagnosis only: how the pool's time is spent, printed at exit */
#include <stdio.h>
#include <time.h>
static struct {
  long regions, caller_parks, worker_parks, worker_jobs, caller_jobs, wakes_parked, wakes_spun;
  long join_hist[5]; /* join waits < 10 us, < 100 us, < 1 ms, < 10 ms, more */
  double join_ms, join_max_ms, wake_parked_ms, wake_spun_ms, wake_max_ms, region_ms, region_cpu_ms,
      serial_ms, serial_cpu_ms, last_wall, last_cpu, publish;
} o2e_pst_;
static double o2e_pst_clock_(clockid_t c) {
  struct timespec ts;
  clock_gettime(c, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}
__attribute__((destructor)) static void o2e_pst_print_(void) {
  fprintf(stderr,
          "{\"regions\": %ld, \"caller_parks\": %ld, \"worker_parks\": %ld, \"worker_jobs\": %ld, "
          "\"caller_jobs\": %ld, \"wakes_parked\": %ld, \"wakes_spun\": %ld, \"join_ms\": %.4f, "
          "\"join_max_ms\": %.4f, \"wake_parked_ms\": %.4f, \"wake_spun_ms\": %.4f, "
          "\"wake_max_ms\": %.4f, \"region_ms\": %.4f, \"region_cpu_ms\": %.4f, \"serial_ms\": %.4f, "
          "\"serial_cpu_ms\": %.4f, \"colocated_parks\": %ld, \"join_hist\": [%ld, %ld, %ld, %ld, %ld]}\n",
          o2e_pst_.regions, o2e_pst_.caller_parks, o2e_pst_.worker_parks, o2e_pst_.worker_jobs,
          o2e_pst_.caller_jobs, o2e_pst_.wakes_parked, o2e_pst_.wakes_spun, o2e_pst_.join_ms,
          o2e_pst_.join_max_ms, o2e_pst_.wake_parked_ms, o2e_pst_.wake_spun_ms, o2e_pst_.wake_max_ms,
          o2e_pst_.region_ms, o2e_pst_.region_cpu_ms, o2e_pst_.serial_ms, o2e_pst_.serial_cpu_ms,
          o2e_pool_.stat_coloc, o2e_pst_.join_hist[0], o2e_pst_.join_hist[1], o2e_pst_.join_hist[2], o2e_pst_.join_hist[3],
          o2e_pst_.join_hist[4]);
}
#define O2E_PST_(stmt) stmt
#else
#define O2E_PST_(stmt) ((void)0)
#endif

/* Index of a job of generation gen nobody has taken yet (now ours) and the call's job
 * count, or -1. */
static int o2e_pool_claim_(uint32_t gen, int *njobs) {
#if O2E_POOL_ATOMIC_
  uint64_t w = __atomic_load_n(&o2e_pool_.word, __ATOMIC_ACQUIRE);
  for (;;) {
    const int nj = (int)((w >> 16) & 0xFFFFu), next = (int)(w & 0xFFFFu);
    if ((uint32_t)(w >> 32) != gen || next >= nj) return -1;
    if (__atomic_compare_exchange_n(&o2e_pool_.word, &w, w + 1u, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE)) {
      *njobs = nj;
      return next;
    }
  }
#else
  int i = -1;
  pthread_mutex_lock(&o2e_pool_.mu);
  if ((uint32_t)(o2e_pool_.word >> 32) == gen &&
      (int)(o2e_pool_.word & 0xFFFFu) < (int)((o2e_pool_.word >> 16) & 0xFFFFu)) {
    *njobs = (int)((o2e_pool_.word >> 16) & 0xFFFFu);
    i = (int)(o2e_pool_.word++ & 0xFFFFu);
  }
  pthread_mutex_unlock(&o2e_pool_.mu);
  return i;
#endif
}

/* Runs claimed job i on thread tid; returns 1 when it was the last of the call's njobs jobs
 * to finish. */
static int o2e_pool_finish_(int i, int njobs, int tid) {
  int last;
  o2e_gemm_job_run_(&o2e_pool_.jobs[i], tid);
#if O2E_POOL_ATOMIC_
  last = __atomic_add_fetch(&o2e_pool_.done, 1, __ATOMIC_ACQ_REL) == njobs;
#else
  pthread_mutex_lock(&o2e_pool_.mu);
  last = ++o2e_pool_.done == njobs;
  pthread_mutex_unlock(&o2e_pool_.mu);
#endif
  return last;
}

static void *o2e_pool_worker_(void *arg) {
  const int tid = (int)(intptr_t)arg;
  uint32_t seen = 0;
  for (;;) {
    int spins = 0, i, nj = 0;
    O2E_PST_(int parked = 0);
    /* Spinning only pays on a CPU of its own: a worker the scheduler has put on its caller's
     * CPU (both threads runnable there, the other CPU busy or not yet balanced) would spin
     * in the caller's time slices and stall its serial nodes by a slice (~1 ms) at a time.
     * It parks instead; the next wake-up places it on an idle CPU if there is one. */
    while (O2E_SPINS_ > 0 && (uint32_t)(O2E_LOAD_(o2e_pool_.word) >> 32) == seen &&
           spins++ < O2E_SPINS_) {
      if (O2E_POOL_COLOC && (spins & 63) == 0) {
        const int cpu = o2e_pool_cpu_();
        if (cpu >= 0 && cpu == O2E_LOAD_(o2e_pool_.caller_cpu)) {
          O2E_PST_(__atomic_add_fetch(&o2e_pool_.stat_coloc, 1, __ATOMIC_RELAXED));
          break;
        }
      }
      O2E_POLL_(spins);
    }
    pthread_mutex_lock(&o2e_pool_.mu);
    while ((uint32_t)(O2E_LOAD_(o2e_pool_.word) >> 32) == seen) {
      O2E_PST_(parked = 1);
      pthread_cond_wait(&o2e_pool_.work, &o2e_pool_.mu);
    }
    seen = (uint32_t)(O2E_LOAD_(o2e_pool_.word) >> 32);
    pthread_mutex_unlock(&o2e_pool_.mu);
    if (tid >= O2E_LOAD_(o2e_pool_.active)) continue; /* not one of this call's threads */
#ifdef O2E_POOL_STATS
    if (tid == 1) {
      const double w = o2e_pst_clock_(CLOCK_MONOTONIC) - o2e_pst_.publish;
      if (parked) o2e_pst_.worker_parks++, o2e_pst_.wakes_parked++, o2e_pst_.wake_parked_ms += w;
      else o2e_pst_.wakes_spun++, o2e_pst_.wake_spun_ms += w;
      if (w > o2e_pst_.wake_max_ms) o2e_pst_.wake_max_ms = w;
    }
#endif
    while ((i = o2e_pool_claim_(seen, &nj)) >= 0)
      if (O2E_PST_(__atomic_add_fetch(&o2e_pool_.stat_wj, 1, __ATOMIC_RELAXED)),
          o2e_pool_finish_(i, nj, tid)) { /* last one: wake a caller that went to sleep */
        pthread_mutex_lock(&o2e_pool_.mu);
        pthread_cond_signal(&o2e_pool_.done_cv);
        pthread_mutex_unlock(&o2e_pool_.mu);
      }
  }
  return NULL;
}

static void o2e_pool_init_(void) {
  o2e_pool_.state = 1;
  o2e_pool_cpu_init_();
  pthread_mutex_init(&o2e_pool_.run_mu, NULL);
  pthread_mutex_init(&o2e_pool_.mu, NULL);
  pthread_cond_init(&o2e_pool_.work, NULL);
  pthread_cond_init(&o2e_pool_.done_cv, NULL);
}

/* Runs jobs[0 .. njobs) on up to nt threads, the caller taking part; run_mu is held. */
static void o2e_pool_run_locked_(const o2e_gemm_job_ *jobs, int njobs, int nt) {
  int t, spins = 0;
  uint32_t gen;
  if (nt > O2E_LOAD_(o2e_pool_.state) && !o2e_pool_.failed) {
    /* start the workers this call is the first to need (they stay for later calls) */
    pthread_attr_t attr;
    int have = O2E_LOAD_(o2e_pool_.state);
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    for (t = have; t < nt; t++) {
      if (pthread_create(&o2e_pool_.tid[t], &attr, o2e_pool_worker_, (void *)(intptr_t)t) != 0) {
        o2e_pool_.failed = 1; /* the pool keeps the workers it has */
        break;
      }
      /* Published after tid[t] is written: o2e_parallel_thread on another caller's thread (a
       * second context running while this one holds the pool) reads tid[1 .. state). */
      O2E_STORE_(o2e_pool_.state, t + 1);
    }
    pthread_attr_destroy(&attr);
  }
  if (nt > O2E_LOAD_(o2e_pool_.state)) nt = O2E_LOAD_(o2e_pool_.state);
  if (nt <= 1) {
    for (t = 0; t < njobs; t++) o2e_gemm_job_run_(&jobs[t], 0);
    return;
  }
#ifdef O2E_POOL_STATS
  const double st_w0 = o2e_pst_clock_(CLOCK_MONOTONIC), st_c0 = o2e_pst_clock_(CLOCK_THREAD_CPUTIME_ID);
  double st_j0;
  if (o2e_pst_.last_wall > 0 && st_w0 - o2e_pst_.last_wall < 20.0)
    o2e_pst_.serial_ms += st_w0 - o2e_pst_.last_wall, o2e_pst_.serial_cpu_ms += st_c0 - o2e_pst_.last_cpu;
  o2e_pst_.regions++;
  o2e_pst_.publish = st_w0;
#endif
  pthread_mutex_lock(&o2e_pool_.mu);
  /* atomic: a late worker's failed compare-exchange may still be touching the word */
  gen = (uint32_t)(O2E_LOAD_(o2e_pool_.word) >> 32) + 1u;
  o2e_pool_.jobs = jobs;
  O2E_STORE_(o2e_pool_.active, nt);
  O2E_STORE_(o2e_pool_.done, 0);
  O2E_STORE_(o2e_pool_.caller_cpu, o2e_pool_cpu_());
  /* publishes jobs and done */
  O2E_STORE_(o2e_pool_.word, (uint64_t)gen << 32 | (uint64_t)njobs << 16);
  pthread_cond_broadcast(&o2e_pool_.work);
  pthread_mutex_unlock(&o2e_pool_.mu);
  while ((t = o2e_pool_claim_(gen, &njobs)) >= 0) O2E_PST_(o2e_pst_.caller_jobs++), o2e_pool_finish_(t, njobs, 0);
  O2E_PST_(st_j0 = o2e_pst_clock_(CLOCK_MONOTONIC));
  while (O2E_SPINS_ > 0 && O2E_LOAD_(o2e_pool_.done) < njobs && spins++ < O2E_SPINS_)
    O2E_POLL_(spins);
  pthread_mutex_lock(&o2e_pool_.mu);
  while (O2E_LOAD_(o2e_pool_.done) < njobs) {
    O2E_PST_(o2e_pst_.caller_parks++);
    pthread_cond_wait(&o2e_pool_.done_cv, &o2e_pool_.mu);
  }
  pthread_mutex_unlock(&o2e_pool_.mu);
#ifdef O2E_POOL_STATS
  {
    const double w1 = o2e_pst_clock_(CLOCK_MONOTONIC), jw = w1 - st_j0;
    o2e_pst_.join_ms += jw;
    if (jw > o2e_pst_.join_max_ms) o2e_pst_.join_max_ms = jw;
    o2e_pst_.join_hist[jw < 0.01 ? 0 : jw < 0.1 ? 1 : jw < 1 ? 2 : jw < 10 ? 3 : 4]++;
    o2e_pst_.region_ms += w1 - st_w0;
    o2e_pst_.last_wall = w1;
    o2e_pst_.last_cpu = o2e_pst_clock_(CLOCK_THREAD_CPUTIME_ID);
    o2e_pst_.region_cpu_ms += o2e_pst_.last_cpu - st_c0;
    o2e_pst_.worker_jobs = o2e_pool_.stat_wj;
  }
#endif
}

static void o2e_pool_run_(const o2e_gemm_job_ *jobs, int njobs, int nt) {
  pthread_once(&o2e_pool_once_, o2e_pool_init_);
  pthread_mutex_lock(&o2e_pool_.run_mu);
  o2e_pool_run_locked_(jobs, njobs, nt);
  pthread_mutex_unlock(&o2e_pool_.run_mu);
}
#endif

O2E_GEMM_FN void o2e_gemm_dispatch_(const o2e_gemm_args_ *g, void *workspace) {
  /* 64-byte aligned by contract; rounding up here (within the 64 spare bytes that
   * o2e_sgemm_workspace includes) keeps a misaligned buffer from faulting. */
  float *ws = (float *)(((uintptr_t)workspace + 63u) & ~(uintptr_t)63u);
  if (g->M <= 0 || g->N <= 0) return;
  if (g->K <= 0) {
    o2e_gemm_k0_(g);
    return;
  }
#if O2E_THREADS > 1
  {
    const size_t per =
        o2e_ws_floats_sb_(g->M, g->N, g->K, g->conv ? O2E_GEMM_CONV_SB : O2E_GEMM_SB);
    const double flops = 2.0 * g->M * g->N * g->K * (g->N < 16 ? 16.0 / g->N : 1.0);
    const int panels = (g->M + O2E_GEMM_MR - 1) / O2E_GEMM_MR;
    const int npan = (g->N + O2E_GEMM_NR - 1) / O2E_GEMM_NR;
    o2e_gemm_job_ jobs[O2E_JOBS_CAP_];
    int nt = o2e_threads_now_(), nj, t;
    /* Split the columns when there are enough NR panels for everyone (threads then pack
     * disjoint parts of B and share A); otherwise split the rows (each thread packs B). */
    const int split_n = g->N > 1 && npan >= 4 * nt;
    if (flops < O2E_GEMM_MT_FLOPS) nt = 1;
    else if (nt > 2 && nt * (0.5 * O2E_GEMM_MT_FLOPS) > flops)
      nt = (int)(flops / (0.5 * O2E_GEMM_MT_FLOPS));
    if (!split_n && panels < nt) nt = panels;
    if (split_n && npan < nt) nt = npan;
    /* Column ranges of 4+ panels, up to O2E_PAR_CHUNKS per thread (claimed dynamically);
     * row ranges one per thread, since each of them packs all of B. */
    nj = split_n ? (npan / 4 < nt * O2E_PAR_CHUNKS ? npan / 4 : nt * O2E_PAR_CHUNKS) : nt;
    if (nj > O2E_JOBS_CAP_) nj = O2E_JOBS_CAP_;
    if (nt > 1) {
      for (t = 0; t < nj; t++) {
        jobs[t].g = g;
        jobs[t].ws = ws;
        jobs[t].ws_per = per;
        jobs[t].fn = NULL;
        jobs[t].ctx = NULL;
        if (split_n) {
          jobs[t].m0 = 0;
          jobs[t].m1 = g->M;
          jobs[t].n0 = (int)((long)npan * t / nj) * O2E_GEMM_NR;
          jobs[t].n1 = t == nj - 1 ? g->N : (int)((long)npan * (t + 1) / nj) * O2E_GEMM_NR;
        } else {
          jobs[t].n0 = 0;
          jobs[t].n1 = g->N;
          jobs[t].m0 = (int)((long)panels * t / nj) * O2E_GEMM_MR;
          jobs[t].m1 = t == nj - 1 ? g->M : (int)((long)panels * (t + 1) / nj) * O2E_GEMM_MR;
        }
      }
      o2e_pool_run_(jobs, nj, nt);
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
    j.ws_per = 0;
    j.fn = NULL;
    j.ctx = NULL;
    o2e_gemm_job_run_(&j, 0);
  }
}

/* ==== public entry points ================================================================= */
/* The three entry points differ only in how A and B are laid out (a_packed, b_packed). */
O2E_GEMM_INL void o2e_gemm_call_(int M, int N, int K, const float *A, int lda, int a_packed,
                                 const float *B, int ldb, int b_packed, float *C, int ldc,
                                 int accumulate, const float *bias_m, const float *bias_n,
                                 const float *R, int ldr, o2e_act act, void *workspace) {
  o2e_gemm_args_ g;
  memset(&g, 0, sizeof g);
  g.M = M;
  g.N = N;
  g.K = K;
  g.A = A;
  g.lda = lda;
  g.a_packed = a_packed;
  g.B = B;
  g.ldb = ldb;
  g.b_packed = b_packed;
  g.C = C;
  g.ldc = ldc;
  g.accumulate = accumulate;
  g.bm = bias_m;
  g.bn = bias_n;
  g.R = R;
  g.ldr = ldr;
  g.act = act;
  g.conv = NULL;
  o2e_gemm_dispatch_(&g, workspace);
}

O2E_GEMM_FN void o2e_sgemm(int M, int N, int K, const float *A, int lda, const float *B, int ldb,
                           float *C, int ldc, int accumulate, const float *bias_m,
                           const float *bias_n, const float *R, int ldr, o2e_act act,
                           void *workspace) {
  o2e_gemm_call_(M, N, K, A, lda, 0, B, ldb, 0, C, ldc, accumulate, bias_m, bias_n, R, ldr, act,
                 workspace);
}

O2E_GEMM_FN void o2e_sgemm_packed(int M, int N, int K, const float *packed_A, const float *B,
                                  int ldb, float *C, int ldc, int accumulate,
                                  const float *bias_m, const float *bias_n, const float *R,
                                  int ldr, o2e_act act, void *workspace) {
  o2e_gemm_call_(M, N, K, packed_A, K, 1, B, ldb, 0, C, ldc, accumulate, bias_m, bias_n, R, ldr,
                 act, workspace);
}

/* o2e_sgemm with B constant and packed at conversion (gemm_pack.pack_b: O2E_GEMM_PB-wide
 * strips, zero-padded past N): no packing of B at run time, each strip a contiguous stream.
 * Any N runs the blocked product (the N == 1 and small-N paths, which read B by rows, are
 * for callers that do not pack); the workspace is o2e_sgemm_workspace(M, N, K). */
O2E_GEMM_FN void o2e_sgemm_bpacked(int M, int N, int K, const float *A, int lda,
                                   const float *packed_B, float *C, int ldc, int accumulate,
                                   const float *bias_m, const float *bias_n, const float *R,
                                   int ldr, o2e_act act, void *workspace) {
  o2e_gemm_call_(M, N, K, A, lda, 0, packed_B, O2E_GEMM_PB, 1, C, ldc, accumulate, bias_m, bias_n,
                 R, ldr, act, workspace);
}

/* A product with a packed A and no epilogue yet (the callers below add theirs). */
O2E_GEMM_INL void o2e_packed_args_(o2e_gemm_args_ *g, int M, int N, int K, const float *packed_A,
                                   float *C, int ldc) {
  memset(g, 0, sizeof *g);
  g->M = M;
  g->N = N;
  g->K = K;
  g->A = packed_A;
  g->lda = K;
  g->a_packed = 1;
  g->C = C;
  g->ldc = ldc;
}

/* C = act(packed_A · B + bias_m + R) where B is the implicit im2col matrix of the convolution
 * `conv` (K = C·kh·kw rows, N = OH·OW columns): a convolution with no column buffer. */
O2E_GEMM_FN void o2e_sgemm_packed_conv(int M, int N, int K, const float *packed_A,
                                       const o2e_conv_b *conv, float *C, int ldc,
                                       const float *bias_m, const float *R, int ldr, o2e_act act,
                                       void *workspace) {
  o2e_gemm_args_ g;
  o2e_packed_args_(&g, M, N, K, packed_A, C, ldc);
  g.bm = bias_m;
  g.R = R;
  g.ldr = ldr;
  g.act = act;
  g.conv = conv;
  o2e_gemm_dispatch_(&g, workspace);
}

/* o2e_sgemm_packed on the calling thread only, with `workspace` sized for one thread: for
 * callers that already run independent products in parallel (o2e_parallel_for jobs, which
 * must not use the pool themselves), e.g. the (m + 2)^2 GEMMs of a Winograd convolution. */
O2E_GEMM_FN void o2e_sgemm_packed_local(int M, int N, int K, const float *packed_A, const float *B,
                                        int ldb, float *C, int ldc, void *workspace) {
  o2e_gemm_args_ g;
  o2e_gemm_job_ j;
  o2e_packed_args_(&g, M, N, K, packed_A, C, ldc);
  g.B = B;
  g.ldb = ldb;
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    o2e_gemm_k0_(&g);
    return;
  }
  j.g = &g;
  j.m0 = 0;
  j.m1 = M;
  j.n0 = 0;
  j.n1 = N;
  j.ws = (float *)(((uintptr_t)workspace + 63u) & ~(uintptr_t)63u);
  j.ws_per = 0;
  j.fn = NULL;
  j.ctx = NULL;
  o2e_gemm_job_run_(&j, 0);
}

/* ==== generic data parallelism on the same pool ============================================ */
/* o2e_parallel_for(n, fn, ctx) calls fn(ctx, begin, end) on disjoint contiguous ranges that
 * cover [0, n) - up to O2E_PAR_CHUNKS per thread - possibly concurrently on the pool's
 * threads; o2e_parallel_thread() tells a range which thread runs it (0 .. the call's thread
 * count - 1, at most O2E_MAX_THREADS - 1; 0 on the caller), so per-thread scratch can be
 * indexed by it. Without O2E_THREADS (or O2E_THREADS=1), or with one thread chosen
 * (o2e_use_threads), it is the plain call fn(ctx, 0, n). The caller decides whether the work is
 * worth a hand-off (a few microseconds with spinning workers). fn must not call o2e_sgemm
 * (one parallel call runs at a time); a nested o2e_parallel_for, or one issued while another
 * thread holds the pool, runs on the calling thread. */
O2E_GEMM_FN int o2e_parallel_thread(void) {
#if O2E_THREADS > 1
  int t;
  const int have = O2E_LOAD_(o2e_pool_.state);
  if (have > 1) {
    const pthread_t self = pthread_self();
    for (t = 1; t < have; t++)
      if (pthread_equal(self, o2e_pool_.tid[t])) return t;
  }
#endif
  return 0;
}

O2E_GEMM_FN void o2e_parallel_for(int n, void (*fn)(void *ctx, int begin, int end), void *ctx) {
  if (n <= 0) return;
#if O2E_THREADS > 1
  const int nt = o2e_threads_now_();
  pthread_once(&o2e_pool_once_, o2e_pool_init_);
  if (n > 1 && nt > 1 && pthread_mutex_trylock(&o2e_pool_.run_mu) == 0) {
    o2e_gemm_job_ jobs[O2E_JOBS_CAP_];
    const int mj = nt * O2E_PAR_CHUNKS < O2E_JOBS_CAP_ ? nt * O2E_PAR_CHUNKS : O2E_JOBS_CAP_;
    const int nj = n < mj ? n : mj;
    int t;
    for (t = 0; t < nj; t++) {
      jobs[t].g = NULL;
      jobs[t].ws = NULL;
      jobs[t].ws_per = 0;
      jobs[t].n0 = jobs[t].n1 = 0;
      jobs[t].fn = fn;
      jobs[t].ctx = ctx;
      jobs[t].m0 = (int)((long)n * t / nj);
      jobs[t].m1 = (int)((long)n * (t + 1) / nj);
    }
    o2e_pool_run_locked_(jobs, nj, nt);
    pthread_mutex_unlock(&o2e_pool_.run_mu);
    return;
  }
#endif
  fn(ctx, 0, n);
}

/* ==== fully connected at batch 1, skipping zero inputs ======================================
 * y = act(b + Σ_k x[k]·Wᵀ[k]) with Wᵀ stored in column blocks of O2E_FC_NB outputs (block q:
 * K rows of O2E_FC_NB weights, zero-padded past N). A layer after a ReLU gets about half of
 * its inputs exactly zero; their weight rows are never read, which is what matters for a
 * product bound by how fast the weights stream in. Skipping x[k] == 0 leaves every sum as
 * the dense one would be (adding 0·w changes nothing for finite w; the converter only uses
 * this layout when all weights are finite). */
#define O2E_FC_NB 256
#ifndef O2E_FC_PD /* AVX2: nonzero rows the slice loop prefetches ahead */
#define O2E_FC_PD 6
#endif
#ifndef O2E_FC_PD512 /* AVX-512: nonzero rows (1 KB each) prefetched ahead */
#define O2E_FC_PD512 4
#endif
#ifndef O2E_FC_STREAM /* weights (floats) from which a layer is taken to stream from DRAM */
#define O2E_FC_STREAM (7u << 17)
#endif
/* Rows of a streamed layer are prefetched into L2, the others into L1. A prefetch into L1 holds
 * one of the core's few L1 miss buffers until its line comes back, so DRAM latency capped the
 * rows in flight: AlexNet's fc6 (151 MB) streamed at 16 GB/s against onnxruntime's 22. Into
 * L2, at native (AMD EPYC): fc6 0.75x, fc7 0.68x, fc8 0.68x of the L1 prefetch's time; x86-64-v3
 * 0.68x / 0.59x / 0.64x; ResNet50's 2048 x 1000 classifier 0.75x / 0.57x, MobileNet v1's 1024 x 1000
 * 0.81x / 0.59x (tools/ab_nodes.py, in-model). Weights that stay in the last-level cache between
 * calls (the 5 MB MNIST MLP's fc1, 784 x 1000) were 1.15x slower that way, hence the size
 * threshold between the two: 3.5 MB (917504 floats). At AVX2 it also selects the one-pass row
 * loop below over the 64-output slices. */
typedef struct {
  int N, K;
  const float *wt, *x, *bias;
  float *y;
  const int *nz; /* indices of the nonzero inputs */
  int nnz;
  int stream; /* K * N >= O2E_FC_STREAM */
  o2e_act act;
} o2e_fc_args;

O2E_GEMM_FN void o2e_fc_blocks_(void *arg, int q0, int q1) {
  const o2e_fc_args *f = (const o2e_fc_args *)arg;
  int q, i, j;
  for (q = q0; q < q1; q++) {
    const float *wq = f->wt + (size_t)q * f->K * O2E_FC_NB;
    const int n0 = q * O2E_FC_NB, nb = f->N - n0 < O2E_FC_NB ? f->N - n0 : O2E_FC_NB;
    float acc[O2E_FC_NB], *yq = f->y + n0;
#if defined(O2E_GEMM_AVX512)
    __m512 a[O2E_FC_NB / 16];
    for (j = 0; j < O2E_FC_NB / 16; j++) a[j] = _mm512_setzero_ps();
    for (i = 0; i < f->nnz; i++) {
      const int k = f->nz[i];
      const float *row = wq + (size_t)k * O2E_FC_NB;
      const __m512 xv = _mm512_set1_ps(f->x[k]);
      if (i + O2E_FC_PD512 < f->nnz) { /* rows are skipped irregularly: the streamer cannot guess them */
        const float *nx = wq + (size_t)f->nz[i + O2E_FC_PD512] * O2E_FC_NB;
        if (f->stream) /* locality must be a constant: one loop per level */
          for (j = 0; j < O2E_FC_NB; j += 16) O2E_PREFETCH_(nx + j, 2);
        else
          for (j = 0; j < O2E_FC_NB; j += 16) O2E_PREFETCH_(nx + j, 3);
      }
      for (j = 0; j < O2E_FC_NB / 16; j++) a[j] = _mm512_fmadd_ps(xv, _mm512_loadu_ps(row + 16 * j), a[j]);
    }
    for (j = 0; j < O2E_FC_NB / 16; j++) _mm512_storeu_ps(acc + 16 * j, a[j]);
#elif defined(O2E_GEMM_NEON)
    /* 256 outputs would need 64 q registers: the block is done as 4 column chunks of 64
     * (16 accumulators), each a pass over the nonzero inputs. Per output the sum runs in the
     * same order as the portable loop. */
    int c4;
    for (c4 = 0; c4 < O2E_FC_NB; c4 += 64) {
      float32x4_t v[16];
      for (j = 0; j < 16; j++) v[j] = vdupq_n_f32(0.0f);
      for (i = 0; i < f->nnz; i++) {
        const int k = f->nz[i];
        const float *row = wq + (size_t)k * O2E_FC_NB + c4;
        const float xk = f->x[k];
        if (i + 4 < f->nnz) O2E_PREFETCH_(wq + (size_t)f->nz[i + 4] * O2E_FC_NB + c4, 3);
        for (j = 0; j < 16; j++) v[j] = vfmaq_n_f32(v[j], vld1q_f32(row + 4 * j), xk);
      }
      for (j = 0; j < 16; j++) vst1q_f32(acc + c4 + 4 * j, v[j]);
    }
#elif defined(O2E_GEMM_AVX2)
    if (f->stream) {
      /* Weights too large for the last-level cache, streamed from DRAM on every call
       * (AlexNet's fc6 / fc7, VGG's): each nonzero row is read whole, in one pass, as on
       * AVX-512 - 1 KB contiguous per row is what DRAM streams fastest. The block's 32
       * accumulators do not fit in 16 ymm registers, so they live in acc (L1), loaded and
       * stored once per 4 rows. Per output the sum still runs over the rows in order.
       * (The 64-output slices below read 256 B of every 1 KB row per pass: fc6, 151 MB,
       * 16.2 -> 13.6 ms this way, AVX-512 13.5; weights that stay in cache, e.g. 784 x 1000,
       * ran 8 % faster in slices.) */
      for (j = 0; j < O2E_FC_NB; j++) acc[j] = 0.0f;
      for (i = 0; i + 4 <= f->nnz; i += 4) {
        const float *r0 = wq + (size_t)f->nz[i] * O2E_FC_NB, *r1 = wq + (size_t)f->nz[i + 1] * O2E_FC_NB;
        const float *r2 = wq + (size_t)f->nz[i + 2] * O2E_FC_NB, *r3 = wq + (size_t)f->nz[i + 3] * O2E_FC_NB;
        const __m256 x0 = _mm256_broadcast_ss(f->x + f->nz[i]), x1 = _mm256_broadcast_ss(f->x + f->nz[i + 1]);
        const __m256 x2 = _mm256_broadcast_ss(f->x + f->nz[i + 2]), x3 = _mm256_broadcast_ss(f->x + f->nz[i + 3]);
        int d;
        for (d = O2E_FC_PD; d < O2E_FC_PD + 4 && i + d < f->nnz; d++) { /* irregular rows: prefetch them */
          const float *nx = wq + (size_t)f->nz[i + d] * O2E_FC_NB;
          for (j = 0; j < O2E_FC_NB; j += 16) O2E_PREFETCH_(nx + j, 2);
        }
        for (j = 0; j < nb; j += 8) {
          __m256 v = _mm256_loadu_ps(acc + j);
          v = _mm256_fmadd_ps(x0, _mm256_loadu_ps(r0 + j), v);
          v = _mm256_fmadd_ps(x1, _mm256_loadu_ps(r1 + j), v);
          v = _mm256_fmadd_ps(x2, _mm256_loadu_ps(r2 + j), v);
          v = _mm256_fmadd_ps(x3, _mm256_loadu_ps(r3 + j), v);
          _mm256_storeu_ps(acc + j, v);
        }
      }
      for (; i < f->nnz; i++) {
        const float *r0 = wq + (size_t)f->nz[i] * O2E_FC_NB;
        const __m256 x0 = _mm256_broadcast_ss(f->x + f->nz[i]);
        for (j = 0; j < nb; j += 8)
          _mm256_storeu_ps(acc + j, _mm256_fmadd_ps(x0, _mm256_loadu_ps(r0 + j), _mm256_loadu_ps(acc + j)));
      }
    } else {
      /* 16 ymm registers cannot hold the block's 32 accumulators: it is done in slices of 64
       * outputs (8 accumulators = the 8 independent FMA chains two FMA pipes of latency 4
       * need, + the broadcast x). Each slice reads 256 contiguous bytes of each nonzero row. */
      int c;
      for (c = 0; c < O2E_FC_NB; c += 64) {
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0,
               a7 = a0;
        if (c >= nb) { /* padding only: the stores below are never read */
          for (j = c; j < O2E_FC_NB; j++) acc[j] = 0.0f;
          break;
        }
        for (i = 0; i < f->nnz; i++) {
          const float *row = wq + (size_t)f->nz[i] * O2E_FC_NB + c;
          const __m256 xv = _mm256_broadcast_ss(f->x + f->nz[i]);
          if (i + O2E_FC_PD < f->nnz) { /* rows are skipped irregularly: the streamer cannot guess them */
            const float *nx = wq + (size_t)f->nz[i + O2E_FC_PD] * O2E_FC_NB + c;
            O2E_PREFETCH_(nx, 3);
            O2E_PREFETCH_(nx + 16, 3);
            O2E_PREFETCH_(nx + 32, 3);
            O2E_PREFETCH_(nx + 48, 3);
          }
          a0 = _mm256_fmadd_ps(xv, _mm256_loadu_ps(row), a0);
          a1 = _mm256_fmadd_ps(xv, _mm256_loadu_ps(row + 8), a1);
          a2 = _mm256_fmadd_ps(xv, _mm256_loadu_ps(row + 16), a2);
          a3 = _mm256_fmadd_ps(xv, _mm256_loadu_ps(row + 24), a3);
          a4 = _mm256_fmadd_ps(xv, _mm256_loadu_ps(row + 32), a4);
          a5 = _mm256_fmadd_ps(xv, _mm256_loadu_ps(row + 40), a5);
          a6 = _mm256_fmadd_ps(xv, _mm256_loadu_ps(row + 48), a6);
          a7 = _mm256_fmadd_ps(xv, _mm256_loadu_ps(row + 56), a7);
        }
        _mm256_storeu_ps(acc + c, a0);
        _mm256_storeu_ps(acc + c + 8, a1);
        _mm256_storeu_ps(acc + c + 16, a2);
        _mm256_storeu_ps(acc + c + 24, a3);
        _mm256_storeu_ps(acc + c + 32, a4);
        _mm256_storeu_ps(acc + c + 40, a5);
        _mm256_storeu_ps(acc + c + 48, a6);
        _mm256_storeu_ps(acc + c + 56, a7);
      }
    }
#else
    for (j = 0; j < O2E_FC_NB; j++) acc[j] = 0.0f;
    for (i = 0; i < f->nnz; i++) {
      const int k = f->nz[i];
      const float *restrict row = wq + (size_t)k * O2E_FC_NB;
      const float xk = f->x[k];
      for (j = 0; j < O2E_FC_NB; j++) acc[j] += xk * row[j];
    }
#endif
    for (j = 0; j < nb; j++) yq[j] = o2e_act1_(acc[j] + (f->bias ? f->bias[n0 + j] : 0.0f), f->act);
  }
}

/* nz: scratch for K ints. */
O2E_GEMM_FN void o2e_fc_skip_zeros(int N, int K, const float *wt, const float *x, const float *bias,
                                   float *y, o2e_act act, int *nz) {
  o2e_fc_args f;
  int k, n = 0;
  for (k = 0; k < K; k++)
    if (x[k] != 0.0f) nz[n++] = k; /* NaN and infinities are kept, so they propagate */
  f.N = N;
  f.K = K;
  f.wt = wt;
  f.x = x;
  f.bias = bias;
  f.y = y;
  f.nz = nz;
  f.nnz = n;
  f.stream = (size_t)K * (size_t)N >= O2E_FC_STREAM;
  f.act = act;
  {
    const int nq = (N + O2E_FC_NB - 1) / O2E_FC_NB;
    if (nq > 1 && (long long)n * N >= (long long)(O2E_GEMM_MT_FLOPS / 32)) /* no run-time double */
      o2e_parallel_for(nq, o2e_fc_blocks_, &f);
    else
      o2e_fc_blocks_(&f, 0, nq);
  }
}

/* ==== fp16 weights, widened in registers (convert --weights fp16) ==========================
 * The batch-1 fully-connected kernels read their weights as IEEE half, converting each
 * vector as it is loaded: F16C on x86 builds that have it (x86-64-v3 and later), NEON fcvtl
 * on aarch64, else the portable exact decoder below. No float32 copy of the weights exists;
 * the conversions are exact, so every path computes with the same float32 weights. */
#if defined(__F16C__) && defined(__FMA__)
#define O2E_F16C_ 1
#include <immintrin.h>
#endif
O2E_GEMM_INL float o2e_h2f_(uint16_t h) {
  uint32_t s = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, bits;
  float f;
  if (e == 0) {
    if (m == 0)
      bits = s;
    else { /* subnormal: normalise */
      e = 113;
      while (!(m & 0x400u)) {
        m <<= 1;
        --e;
      }
      bits = s | (e << 23) | ((m & 0x3ffu) << 13);
    }
  } else if (e == 31)
    bits = s | 0x7f800000u | (m << 13);
  else
    bits = s | ((e + 112) << 23) | (m << 13);
  memcpy(&f, &bits, sizeof f);
  return f;
}

/* y[M] = act(A·x + bias_m) with A packed (gemm_pack.pack_a layout) and stored as half.
 * workspace: o2e_sgemm_workspace(M, 1, K) bytes (the panels' padded results). One thread: a
 * batch-1 layer is bound by its weights' bandwidth, which fp16 already halves. */
O2E_GEMM_FN void o2e_sgemv_packed_h(int M, int K, const uint16_t *packed_A, const float *x,
                                    float *y, const float *bias_m, o2e_act act, void *workspace) {
  float *t = (float *)(((uintptr_t)workspace + 63u) & ~(uintptr_t)63u);
  const int panels = (M + O2E_GEMM_MR - 1) / O2E_GEMM_MR;
  o2e_gemm_args_ g;
  int p, k, i;
  if (M <= 0) return;
  for (p = 0; p < panels; p++) {
    const uint16_t *a = packed_A + (size_t)p * O2E_GEMM_MR * K;
    float *yp = t + (size_t)p * O2E_GEMM_MR;
    k = 0;
#if defined(O2E_F16C_)
    {
      __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
      for (; k + 4 <= K; k += 4) {
        const __m128i *ak = (const __m128i *)(const void *)(a + (size_t)k * O2E_GEMM_MR);
        s0 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128(ak)), _mm256_broadcast_ss(x + k), s0);
        s1 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128(ak + 1)), _mm256_broadcast_ss(x + k + 1), s1);
        s2 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128(ak + 2)), _mm256_broadcast_ss(x + k + 2), s2);
        s3 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128(ak + 3)), _mm256_broadcast_ss(x + k + 3), s3);
      }
      for (; k < K; k++)
        s0 = _mm256_fmadd_ps(
            _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(a + (size_t)k * O2E_GEMM_MR))),
            _mm256_broadcast_ss(x + k), s0);
      _mm256_storeu_ps(yp, _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    }
#elif defined(O2E_GEMM_NEON)
    {
      float32x4_t lo0 = vdupq_n_f32(0.0f), hi0 = lo0, lo1 = lo0, hi1 = lo0;
      for (; k + 2 <= K; k += 2) {
        const float16x8_t h0 = vreinterpretq_f16_u16(vld1q_u16(a + (size_t)k * O2E_GEMM_MR));
        const float16x8_t h1 = vreinterpretq_f16_u16(vld1q_u16(a + (size_t)(k + 1) * O2E_GEMM_MR));
        lo0 = vfmaq_n_f32(lo0, vcvt_f32_f16(vget_low_f16(h0)), x[k]);
        hi0 = vfmaq_n_f32(hi0, vcvt_high_f32_f16(h0), x[k]);
        lo1 = vfmaq_n_f32(lo1, vcvt_f32_f16(vget_low_f16(h1)), x[k + 1]);
        hi1 = vfmaq_n_f32(hi1, vcvt_high_f32_f16(h1), x[k + 1]);
      }
      for (; k < K; k++) {
        const float16x8_t h0 = vreinterpretq_f16_u16(vld1q_u16(a + (size_t)k * O2E_GEMM_MR));
        lo0 = vfmaq_n_f32(lo0, vcvt_f32_f16(vget_low_f16(h0)), x[k]);
        hi0 = vfmaq_n_f32(hi0, vcvt_high_f32_f16(h0), x[k]);
      }
      vst1q_f32(yp, vaddq_f32(lo0, lo1));
      vst1q_f32(yp + 4, vaddq_f32(hi0, hi1));
    }
#else
    for (i = 0; i < O2E_GEMM_MR; i++) yp[i] = 0.0f;
    for (; k < K; k++) {
      const uint16_t *ak = a + (size_t)k * O2E_GEMM_MR;
      const float xk = x[k];
      for (i = 0; i < O2E_GEMM_MR; i++) yp[i] += o2e_h2f_(ak[i]) * xk;
    }
#endif
  }
  (void)i;
  o2e_packed_args_(&g, M, 1, K, NULL, y, 1);
  g.bm = bias_m;
  g.act = act;
  o2e_gemv_epilogue_(&g, t, 0, M);
}

typedef struct {
  int N, K;
  const uint16_t *wt;
  const float *x, *bias;
  float *y;
  const int *nz;
  int nnz;
  o2e_act act;
} o2e_fc_h_args;

/* o2e_fc_blocks_ on half weights: each nonzero input's row of the block is widened as it is
 * loaded and added, in input order, into the block's float32 sums. */
O2E_GEMM_FN void o2e_fc_blocks_h_(void *arg, int q0, int q1) {
  const o2e_fc_h_args *f = (const o2e_fc_h_args *)arg;
  int q, i, j;
  for (q = q0; q < q1; q++) {
    const uint16_t *wq = f->wt + (size_t)q * f->K * O2E_FC_NB;
    const int n0 = q * O2E_FC_NB, nb = f->N - n0 < O2E_FC_NB ? f->N - n0 : O2E_FC_NB;
    float acc[O2E_FC_NB], *yq = f->y + n0;
    for (j = 0; j < O2E_FC_NB; j++) acc[j] = 0.0f;
    for (i = 0; i < f->nnz; i++) {
      const int k = f->nz[i];
      const uint16_t *row = wq + (size_t)k * O2E_FC_NB;
      const float xk = f->x[k];
#if defined(O2E_F16C_)
      const __m256 xv = _mm256_set1_ps(xk);
      for (j = 0; j < nb; j += 8)
        _mm256_storeu_ps(acc + j, _mm256_fmadd_ps(xv, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(row + j))),
                                                  _mm256_loadu_ps(acc + j)));
#elif defined(O2E_GEMM_NEON)
      for (j = 0; j < nb; j += 8) {
        const float16x8_t h = vreinterpretq_f16_u16(vld1q_u16(row + j));
        vst1q_f32(acc + j, vfmaq_n_f32(vld1q_f32(acc + j), vcvt_f32_f16(vget_low_f16(h)), xk));
        vst1q_f32(acc + j + 4, vfmaq_n_f32(vld1q_f32(acc + j + 4), vcvt_high_f32_f16(h), xk));
      }
#else
      for (j = 0; j < nb; j++) acc[j] += xk * o2e_h2f_(row[j]);
#endif
    }
    for (j = 0; j < nb; j++) yq[j] = o2e_act1_(acc[j] + (f->bias ? f->bias[n0 + j] : 0.0f), f->act);
  }
}

/* o2e_fc_skip_zeros with the blocked weights stored as half. nz: scratch for K ints. */
O2E_GEMM_FN void o2e_fc_skip_zeros_h(int N, int K, const uint16_t *wt, const float *x,
                                     const float *bias, float *y, o2e_act act, int *nz) {
  o2e_fc_h_args f;
  int k, n = 0;
  for (k = 0; k < K; k++)
    if (x[k] != 0.0f) nz[n++] = k;
  f.N = N;
  f.K = K;
  f.wt = wt;
  f.x = x;
  f.bias = bias;
  f.y = y;
  f.nz = nz;
  f.nnz = n;
  f.act = act;
  {
    const int nq = (N + O2E_FC_NB - 1) / O2E_FC_NB;
    if (nq > 1 && (long long)n * N >= (long long)(O2E_GEMM_MT_FLOPS / 32))
      o2e_parallel_for(nq, o2e_fc_blocks_h_, &f);
    else
      o2e_fc_blocks_h_(&f, 0, nq);
  }
}

#endif /* O2E_GEMM_H */
