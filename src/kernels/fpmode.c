/* The floating-point mode kernels run in (kernels.h says why flush-to-zero). */
#include "kernels/kernels.h"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define MXCSR_FTZ_DAZ 0x8040u
#endif

unsigned qhx_fp_mode(void) {
#ifdef MXCSR_FTZ_DAZ
    return _mm_getcsr();
#else
    return 0;
#endif
}

void qhx_fp_set(unsigned mode) {
#ifdef MXCSR_FTZ_DAZ
    _mm_setcsr(mode);
#else
    (void)mode;
#endif
}

unsigned qhx_fp_enter(const qhx_kernel_set *ks) {
    const unsigned saved = qhx_fp_mode();
#ifdef MXCSR_FTZ_DAZ
    const unsigned want = ks->ieee ? saved & ~MXCSR_FTZ_DAZ : saved | MXCSR_FTZ_DAZ;
    if (want != saved) qhx_fp_set(want);
#else
    (void)ks;
#endif
    return saved;
}

void qhx_fp_leave(unsigned saved) {
    if (qhx_fp_mode() != saved) qhx_fp_set(saved);
}
