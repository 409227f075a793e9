/* o2e_mcu.h: what the Cortex-M test harness needs from the machine, and nothing more.
 *
 * ARM semihosting (BKPT 0xAB: the debugger, here qemu-system-arm with
 * -semihosting-config enable=on,target=native, services the call on the host): files for the
 * input / output tensors, a console line, the exit status. No newlib stdio, no malloc: the
 * harness links only what the model itself needs (memcpy / memset / libm), so the image's
 * sizes are the model's plus a few hundred bytes.
 *
 * SysTick counts the instructions of a run under `qemu-system-arm -icount shift=0` (one
 * instruction = 1 ns of virtual time; SysTick ticks at the board's CPU clock), extended to
 * 64 bits by its wrap interrupt. */
#ifndef O2E_MCU_H
#define O2E_MCU_H
#include <stddef.h>
#include <stdint.h>

#define O2E_SH_OPEN 0x01
#define O2E_SH_CLOSE 0x02
#define O2E_SH_WRITE0 0x04
#define O2E_SH_WRITE 0x05
#define O2E_SH_READ 0x06
#define O2E_SH_EXIT_EXTENDED 0x20

static inline int o2e_semihost(int op, const void *arg)
{
  register int r0 __asm__("r0") = op;
  register const void *r1 __asm__("r1") = arg;
  __asm__ volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
  return r0;
}

static inline size_t o2e_strlen(const char *s)
{
  size_t n = 0;
  while (s[n]) ++n;
  return n;
}

/* mode: 1 = "rb", 5 = "wb" (the semihosting fopen mode index) */
static inline int o2e_open(const char *path, int mode)
{
  const uintptr_t a[3] = {(uintptr_t)path, (uintptr_t)mode, (uintptr_t)o2e_strlen(path)};
  return o2e_semihost(O2E_SH_OPEN, a);
}

static inline int o2e_close(int fd)
{
  const uintptr_t a[1] = {(uintptr_t)fd};
  return o2e_semihost(O2E_SH_CLOSE, a);
}

/* 0 when all `n` bytes moved (semihosting returns the count NOT transferred) */
static inline int o2e_read(int fd, void *buf, size_t n)
{
  const uintptr_t a[3] = {(uintptr_t)fd, (uintptr_t)buf, (uintptr_t)n};
  return o2e_semihost(O2E_SH_READ, a);
}

static inline int o2e_write(int fd, const void *buf, size_t n)
{
  const uintptr_t a[3] = {(uintptr_t)fd, (uintptr_t)buf, (uintptr_t)n};
  return o2e_semihost(O2E_SH_WRITE, a);
}

static inline void o2e_puts(const char *s) { o2e_semihost(O2E_SH_WRITE0, s); }

static inline void o2e_put_u32(uint32_t v)
{
  char buf[12];
  int i = 11;
  buf[i] = 0;
  do {
    buf[--i] = (char)('0' + v % 10u);
    v /= 10u;
  } while (v);
  o2e_puts(buf + i);
}

__attribute__((noreturn)) static inline void o2e_exit(int status)
{
  const uintptr_t a[2] = {0x20026u /* ADP_Stopped_ApplicationExit */, (uintptr_t)status};
  for (;;) o2e_semihost(O2E_SH_EXIT_EXTENDED, a);
}

/* ---- SysTick: a 64-bit count of CPU clock ticks ---- */
#define O2E_SYST_CSR (*(volatile uint32_t *)0xE000E010u)
#define O2E_SYST_RVR (*(volatile uint32_t *)0xE000E014u)
#define O2E_SYST_CVR (*(volatile uint32_t *)0xE000E018u)

extern volatile uint32_t o2e_systick_wraps;

static inline void o2e_ticks_start(void)
{
  O2E_SYST_CSR = 0;
  O2E_SYST_RVR = 0x00FFFFFFu;
  O2E_SYST_CVR = 0;
  o2e_systick_wraps = 0;
  O2E_SYST_CSR = 7u; /* processor clock, wrap interrupt, enable */
  while (O2E_SYST_CVR == 0) {
  } /* the first reload */
}

#define O2E_ICSR (*(volatile uint32_t *)0xE000ED04u)

static inline uint64_t o2e_ticks(void)
{
  uint32_t w, v, pending;
  do {
    w = o2e_systick_wraps;
    v = O2E_SYST_CVR;
    pending = (O2E_ICSR >> 26) & 1u; /* wrapped, interrupt not taken yet */
  } while (w != o2e_systick_wraps);
  if (pending && v > 0x00800000u) ++w;
  return ((uint64_t)w << 24) + (0x00FFFFFFu - v);
}

#endif
