/* The streaming read loop: 4 independent accumulators over the widest loads the CPU has, as close
 * to pure streaming as C gets (64-bit loads reach only ~0.6 of what memory gives on two cores of a
 * Zen 5 VM, bench/README.md). */
#include "util/readloop.h"

#if defined(__x86_64__)
#include <immintrin.h>
__attribute__((target("avx2"))) static uint64_t read_wide(const unsigned char *p, size_t n) {
    __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
    for (size_t k = 0; k + 128 <= n; k += 128) {
        a = _mm256_add_epi64(a, _mm256_loadu_si256((const __m256i *)(p + k)));
        b = _mm256_add_epi64(b, _mm256_loadu_si256((const __m256i *)(p + k + 32)));
        c = _mm256_add_epi64(c, _mm256_loadu_si256((const __m256i *)(p + k + 64)));
        d = _mm256_add_epi64(d, _mm256_loadu_si256((const __m256i *)(p + k + 96)));
    }
    a = _mm256_add_epi64(_mm256_add_epi64(a, b), _mm256_add_epi64(c, d));
    return (uint64_t)_mm256_extract_epi64(a, 0) ^ (uint64_t)_mm256_extract_epi64(a, 3);
}
static int have_wide(void) { return __builtin_cpu_supports("avx2"); }
#elif defined(__aarch64__)
#include <arm_neon.h>
static uint64_t read_wide(const unsigned char *p, size_t n) {
    uint64x2_t a = vdupq_n_u64(0), b = a, c = a, d = a;
    for (size_t k = 0; k + 64 <= n; k += 64) {
        a = vaddq_u64(a, vld1q_u64((const uint64_t *)(p + k)));
        b = vaddq_u64(b, vld1q_u64((const uint64_t *)(p + k + 16)));
        c = vaddq_u64(c, vld1q_u64((const uint64_t *)(p + k + 32)));
        d = vaddq_u64(d, vld1q_u64((const uint64_t *)(p + k + 48)));
    }
    a = vaddq_u64(vaddq_u64(a, b), vaddq_u64(c, d));
    return vgetq_lane_u64(a, 0) ^ vgetq_lane_u64(a, 1);
}
static int have_wide(void) { return 1; }
#else
static uint64_t read_wide(const unsigned char *p, size_t n) { return 0; }
static int have_wide(void) { return 0; }
#endif

static uint64_t read_scalar(const unsigned char *p, size_t n) {
    const uint64_t *w = (const uint64_t *)p;
    uint64_t a = 0, b = 0, c = 0, d = 0;
    for (size_t k = 0; k + 4 <= n / 8; k += 4) a += w[k], b += w[k + 1], c += w[k + 2], d += w[k + 3];
    return a ^ b ^ c ^ d;
}

uint64_t qhx_read_stream(const unsigned char *p, size_t n) { return have_wide() ? read_wide(p, n) : read_scalar(p, n); }
