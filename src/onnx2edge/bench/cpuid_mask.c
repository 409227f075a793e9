/* cpuid_mask.c - LD_PRELOAD shim that hides instruction sets from a process's CPUID.
 *
 * onnxruntime's MLAS picks its kernels from CPUID at run time and has no switch to force a
 * lower level, so on an AVX-512 host it cannot be timed as it runs on an AVX2-only CPU. Linux
 * can make CPUID fault in user space (arch_prctl ARCH_SET_CPUID, CPUs with "cpuid_fault"):
 * this shim turns that on before main, and its SIGSEGV handler executes the real CPUID with
 * the masked feature bits written back, so every later CPUID in the process (and in threads
 * it starts) sees the lower level. The loader's own CPU detection ran before and is not
 * affected (glibc's string functions), which a benchmark of compute kernels does not mind.
 *
 * Built by onnx2edge.bench.ort_isa with -DO2E_MASK_AVX (hide AVX/AVX2/FMA/F16C too: the
 * x86-64-v2 level) or without (hide the AVX-512 family only: x86-64-v3).
 */
#define _GNU_SOURCE
#include <asm/prctl.h>
#include <cpuid.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#define BIT(n) (1u << (n))
/* leaf 7.0 EBX: AVX512 F DQ IFMA PF ER CD BW VL; ECX: VBMI VBMI2 VNNI BITALG VPOPCNTDQ;
 * EDX: 4VNNIW 4FMAPS VP2INTERSECT FP16 */
#define L7_EBX_AVX512 (BIT(16) | BIT(17) | BIT(21) | BIT(26) | BIT(27) | BIT(28) | BIT(30) | BIT(31))
#define L7_ECX_AVX512 (BIT(1) | BIT(6) | BIT(11) | BIT(12) | BIT(14))
#define L7_EDX_AVX512 (BIT(2) | BIT(3) | BIT(8) | BIT(23))

static void o2e_mask(unsigned leaf, unsigned sub, unsigned *a, unsigned *b, unsigned *c,
                     unsigned *d) {
  if (leaf == 7 && sub == 0) {
    *b &= ~L7_EBX_AVX512;
    *c &= ~L7_ECX_AVX512;
    *d &= ~L7_EDX_AVX512;
#ifdef O2E_MASK_AVX
    *b &= ~BIT(5); /* AVX2 */
    *c &= ~BIT(10); /* VPCLMULQDQ (VEX/EVEX) */
#endif
  } else if (leaf == 7 && sub == 1) {
    *a &= ~BIT(5); /* AVX512_BF16 */
#ifdef O2E_MASK_AVX
    *a &= ~BIT(4); /* AVX-VNNI */
#endif
  } else if (leaf == 0xd && sub == 0) {
    *a &= ~(BIT(5) | BIT(6) | BIT(7)); /* opmask / ZMM state supported */
#ifdef O2E_MASK_AVX
    *a &= ~BIT(2); /* YMM state */
#endif
  }
#ifdef O2E_MASK_AVX
  else if (leaf == 1) {
    *c &= ~(BIT(12) | BIT(28) | BIT(29)); /* FMA, AVX, F16C */
  }
#endif
}

static void o2e_on_segv(int sig, siginfo_t *si, void *vctx) {
  ucontext_t *uc = (ucontext_t *)vctx;
  greg_t *g = uc->uc_mcontext.gregs;
  const unsigned char *ip = (const unsigned char *)g[REG_RIP];
  unsigned a, b, c, d;
  (void)si;
  if (ip[0] != 0x0f || ip[1] != 0xa2) { /* a real fault: default action on the retry */
    signal(sig, SIG_DFL);
    return;
  }
  syscall(SYS_arch_prctl, ARCH_SET_CPUID, 1);
  __cpuid_count((unsigned)g[REG_RAX], (unsigned)g[REG_RCX], a, b, c, d);
  syscall(SYS_arch_prctl, ARCH_SET_CPUID, 0);
  o2e_mask((unsigned)g[REG_RAX], (unsigned)g[REG_RCX], &a, &b, &c, &d);
  g[REG_RAX] = a;
  g[REG_RBX] = b;
  g[REG_RCX] = c;
  g[REG_RDX] = d;
  g[REG_RIP] += 2;
}

__attribute__((constructor)) static void o2e_cpuid_mask_init(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = o2e_on_segv;
  sa.sa_flags = SA_SIGINFO | SA_NODEFER;
  if (sigaction(SIGSEGV, &sa, 0) == 0) syscall(SYS_arch_prctl, ARCH_SET_CPUID, 0);
}
