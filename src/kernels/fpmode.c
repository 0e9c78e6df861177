/* The floating-point mode kernels run in (kernels.h says why flush-to-zero). */
#include "kernels/kernels.h"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define FLUSH 0x8040u /* MXCSR FTZ and DAZ */
static unsigned get_mode(void) { return _mm_getcsr(); }
static void set_mode(unsigned m) { _mm_setcsr(m); }
#elif defined(__aarch64__)
/* FPCR.FZ flushes subnormal inputs and results to zero: x86's FTZ and DAZ together */
#define FLUSH (1u << 24)
static unsigned get_mode(void) {
    unsigned long v;
    __asm__ volatile("mrs %0, fpcr" : "=r"(v));
    return (unsigned)v;
}
static void set_mode(unsigned m) { __asm__ volatile("msr fpcr, %0" : : "r"((unsigned long)m)); }
#endif

unsigned qhx_fp_mode(void) {
#ifdef FLUSH
    return get_mode();
#else
    return 0;
#endif
}

void qhx_fp_set(unsigned mode) {
#ifdef FLUSH
    set_mode(mode);
#else
    (void)mode;
#endif
}

unsigned qhx_fp_enter(const qhx_kernel_set *ks) {
    const unsigned saved = qhx_fp_mode();
#ifdef FLUSH
    const unsigned want = ks->ieee ? saved & ~FLUSH : saved | FLUSH;
    if (want != saved) qhx_fp_set(want);
#else
    (void)ks;
#endif
    return saved;
}

void qhx_fp_leave(unsigned saved) {
    if (qhx_fp_mode() != saved) qhx_fp_set(saved);
}
