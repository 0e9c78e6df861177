/* What this CPU runs: the one place that asks it (CPUID on x86-64, the auxiliary vector's hwcaps
 * on AArch64 Linux; the OS where it must grant a feature). Asked once; a race to the first answer is harmless, as asking twice is. */
#include "kernels/kernels.h"

#if defined(__x86_64__)
#include <cpuid.h>

static unsigned detect(void) {
    unsigned a, b, c, d, f = 0;
    __builtin_cpu_init();
    /* F16C is CPUID leaf 1, ECX bit 29: not every compiler's __builtin_cpu_supports knows it */
    const int f16c = __get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1);
    if (f16c && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) f |= QHX_CPU_AVX2;
    if ((f & QHX_CPU_AVX2) && __builtin_cpu_supports("avx512f")) f |= QHX_CPU_AVX512;
    const int bwvl = (f & QHX_CPU_AVX512) && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
    if (bwvl && __builtin_cpu_supports("avx512vnni")) f |= QHX_CPU_AVX512_VNNI;
    return f;
}
#elif defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#ifndef HWCAP_ASIMD
#define HWCAP_ASIMD (1 << 1)
#endif
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20)
#endif
#ifndef HWCAP2_I8MM
#define HWCAP2_I8MM (1 << 13)
#endif

/* the kernel's view of the CPU, as Linux hands it to every process */
static unsigned detect(void) {
    const unsigned long hw = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
    unsigned f = 0;
    if (hw & HWCAP_ASIMD) f |= QHX_CPU_NEON;
    if ((f & QHX_CPU_NEON) && (hw & HWCAP_ASIMDDP)) f |= QHX_CPU_NEON_DOT;
    if ((f & QHX_CPU_NEON_DOT) && (hw2 & HWCAP2_I8MM)) f |= QHX_CPU_NEON_I8MM;
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
