/* startup.c: reset handler and vector table for the Cortex-M test harness (every MPS2 / MPS3
 * board: the linker script places .vectors where the board's VTOR points at reset). */
#include <stdint.h>
#include "o2e_mcu.h"

extern uint32_t __data_load[], __data_start[], __data_end[], __bss_start[], __bss_end[];
extern uint32_t __stack_top[];
int main(void);

volatile uint32_t o2e_systick_wraps;

__attribute__((noreturn)) void Reset_Handler(void)
{
  /* CP10 / CP11 full access: the FPU (and MVE on the M55) is off at reset */
  *(volatile uint32_t *)0xE000ED88u |= 0xFu << 20;
  __asm__ volatile("dsb\n\tisb" ::: "memory");
  for (uint32_t *s = __data_load, *d = __data_start; d < __data_end;) *d++ = *s++;
  for (uint32_t *d = __bss_start; d < __bss_end;) *d++ = 0;
  o2e_exit(main());
}

/* a fault ends the run with a status the host recognises */
__attribute__((noreturn)) static void Fault_Handler(void)
{
  o2e_puts("o2e: fault\n");
  o2e_exit(0x7f);
}

static void SysTick_Handler(void) { ++o2e_systick_wraps; }

typedef void (*o2e_vector)(void);
__attribute__((section(".vectors"), used)) const o2e_vector o2e_vectors[16] = {
  (o2e_vector)(uintptr_t)__stack_top,
  Reset_Handler,
  Fault_Handler, /* NMI */
  Fault_Handler, /* HardFault */
  Fault_Handler, /* MemManage */
  Fault_Handler, /* BusFault */
  Fault_Handler, /* UsageFault */
  Fault_Handler, /* SecureFault (v8-M) */
  0, 0, 0,
  Fault_Handler, /* SVCall */
  Fault_Handler, /* DebugMonitor */
  0,
  Fault_Handler, /* PendSV */
  SysTick_Handler,
};
