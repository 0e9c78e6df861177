/* What this CPU runs: the one place that asks it (CPUID on x86-64; the OS where it must grant a
 * feature). Asked once; a race to the first answer is harmless, as asking twice is. */
#include "kernels/kernels.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

static unsigned detect(void) {
    unsigned a, b, c, d, f = 0;
    __builtin_cpu_init();
    /* F16C is CPUID leaf 1, ECX bit 29: not every compiler's __builtin_cpu_supports knows it */
    const int f16c = __get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1);
    if (f16c && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) f |= QHX_CPU_AVX2;
    if ((f & QHX_CPU_AVX2) && __builtin_cpu_supports("avx512f")) f |= QHX_CPU_AVX512;
    const int bwvl = (f & QHX_CPU_AVX512) && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
    if (bwvl && __builtin_cpu_supports("avx512vnni")) f |= QHX_CPU_AVX512_VNNI;
    /* leaf 7: AMX-BF16 and AMX-TILE (subleaf 0, EDX bits 22 and 24), AVX512-BF16 (subleaf 1, EAX
     * bit 5); Linux hands out the tile data state only on request (arch_prctl) */
    const int amx = __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d >> 22 & 1) && (d >> 24 & 1) &&
                    __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a >> 5 & 1);
#ifdef __linux__
    if (bwvl && amx && syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0) f |= QHX_CPU_AMX_BF16;
#else
    (void)amx;
#endif
    return f;
}
#else
static unsigned detect(void) { return 0; }
#endif

unsigned qhx_cpu_features(void) {
    static _Atomic int known = 0;
    static _Atomic unsigned features;
    if (!known) {
        features = detect();
        known = 1;
    }
    return features;
}
