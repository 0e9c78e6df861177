/* What each kernel set streams: W8 and W4 matrices of the 4B shape's MLP (9216 x 2560, 23.6 MB in W8, 13.3 MB in W4; eight of
 * them in turn, so the weights come from memory, not the 32 MB L3), decode (1 token) on one thread and on the pool, and prefill (64 tokens) on
 * the pool. Decode reports weight GB/s, prefill multiply-adds per second; both next to the read
 * bandwidth of a plain streaming loop measured in the same run, and the AVX-512 sets' prefill next to
 * the machine's VNNI peak (vpdpbusd over registers on every thread; W8's int16 activations issue
 * two per product, so their peak is half). Ratios only: the machine is shared.
 *   build/kernel_bench [THREADS [PREFILL_TOKENS]] */
#include "format/w4.h"
#include "kernels/kernels.h"
#include "util/error.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* best of `reps` of a callback, seconds */
#define BEST(reps, stmt)                                                                                               \
    ({                                                                                                                 \
        double best_ = 1e30;                                                                                           \
        for (int r_ = 0; r_ < (reps); r_++) {                                                                          \
            const double t0_ = now();                                                                                  \
            stmt;                                                                                                      \
            const double dt_ = now() - t0_;                                                                            \
            if (dt_ < best_) best_ = dt_;                                                                              \
        }                                                                                                              \
        best_;                                                                                                         \
    })

typedef struct {
    const uint64_t *p;
    size_t n;
    uint64_t sum[16];
} stream_job;

static void stream_part(void *arg, int i, int n) {
    stream_job *j = arg;
    const size_t a = j->n * i / n, b = j->n * (i + 1) / n;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t k = a; k + 4 <= b; k += 4) s0 ^= j->p[k], s1 ^= j->p[k + 1], s2 ^= j->p[k + 2], s3 ^= j->p[k + 3];
    j->sum[i] = s0 ^ s1 ^ s2 ^ s3;
}

#ifdef QHX_HAVE_AVX512
#include <immintrin.h>
/* 12 independent chains of vpdpbusd (64 int8 multiply-adds each) over registers, n steps */
__attribute__((target("avx512f,avx512bw,avx512vnni"), noinline)) static int vnni_chains(long n) {
    const __m512i x = _mm512_set1_epi32(0x01010101), y = _mm512_set1_epi32(0x02020202);
    __m512i a0 = x, a1 = x, a2 = x, a3 = x, a4 = x, a5 = x, a6 = x, a7 = x, a8 = x, a9 = x, a10 = x, a11 = x;
#define CHAIN(a) a = _mm512_dpbusd_epi32(a, x, y); __asm__("" : "+v"(a)); /* each chain's instruction kept */
    for (long k = 0; k < n; k++) {
        CHAIN(a0) CHAIN(a1) CHAIN(a2) CHAIN(a3) CHAIN(a4) CHAIN(a5)
        CHAIN(a6) CHAIN(a7) CHAIN(a8) CHAIN(a9) CHAIN(a10) CHAIN(a11)
    }
#undef CHAIN
    const __m512i s = _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3)),
                                       _mm512_add_epi32(_mm512_add_epi32(a4, a5), _mm512_add_epi32(a6, a7)));
    return _mm512_reduce_add_epi32(_mm512_add_epi32(s, _mm512_add_epi32(_mm512_add_epi32(a8, a9), _mm512_add_epi32(a10, a11))));
}
#endif

typedef struct {
    long n;
    int sink[64];
} peak_job;

static void peak_part(void *arg, int i, int n) {
    peak_job *j = arg;
    (void)n;
#ifdef QHX_HAVE_AVX512
    j->sink[i & 63] += vnni_chains(j->n);
#else
    (void)j;
#endif
}

/* int8 multiply-adds a second that vpdpbusd gives on every thread of the pool; 0: no VNNI */
static double vnni_peak(qhx_pool *pool) {
#ifdef QHX_HAVE_AVX512
    if (!__builtin_cpu_supports("avx512vnni")) return 0;
    peak_job j = {20000000, {0}};
    const double t = BEST(5, qhx_pool_run(pool, peak_part, &j));
    return (double)j.n * 12 * 64 * qhx_pool_size(pool) / t;
#else
    (void)pool;
    return 0;
#endif
}

int main(int argc, char **argv) {
    const int threads = argc > 1 ? atoi(argv[1]) : 2;
    const int rows = 9216, cols = 2560, T = argc > 2 ? atoi(argv[2]) : 64;
    const size_t wbytes = (size_t)rows * cols, NM = 8;
    int8_t *w = malloc(wbytes * NM);
    float *scale = malloc(sizeof(float) * rows), *X = malloc(sizeof(float) * cols * T), *Y = malloc(sizeof(float) * rows * T);
    uint64_t seed = 1;
    for (size_t i = 0; i < wbytes * NM; i++) seed = seed * 6364136223846793005ull + 1, w[i] = (int8_t)(seed >> 56);
    for (int r = 0; r < rows; r++) scale[r] = 1e-3f;
    for (int i = 0; i < cols * T; i++) seed = seed * 6364136223846793005ull + 1, X[i] = (float)(int)(seed >> 40 & 0xffff) / 65536.0f - 0.5f;
    qhx_tensor W[8], W4[8];
    for (size_t m = 0; m < NM; m++) W[m] = (qhx_tensor){QHX_I8, rows, cols, w + m * wbytes, scale};
    /* W4: random codes, every scale 2^-10 */
    const size_t w4bytes = qhx_w4_bytes(rows, cols), gbytes = qhx_w4_group_bytes(cols), nb = qhx_w4_blocks(cols);
    uint8_t *w4 = malloc(w4bytes * NM);
    for (size_t i = 0; i < w4bytes * NM; i++) seed = seed * 6364136223846793005ull + 1, w4[i] = (uint8_t)(seed >> 56);
    for (size_t g = 0; g < NM * (size_t)rows / QHX_W4_GROUP; g++)
        for (size_t k = 0; k < nb * QHX_W4_GROUP; k++) memcpy(w4 + g * gbytes + nb * QHX_W4_CODE_BYTES + 2 * k, &(uint16_t){0x1400}, 2);
    for (size_t m = 0; m < NM; m++) W4[m] = (qhx_tensor){QHX_Q4, rows, cols, w4 + m * w4bytes, NULL};
    qhx_pool *pool = qhx_pool_new(threads);

    const size_t sbytes = (size_t)256 << 20;
    uint64_t *buf = malloc(sbytes);
    memset(buf, 1, sbytes);
    stream_job sj = {buf, sbytes / 8, {0}};
    const double st = BEST(5, qhx_pool_run(pool, stream_part, &sj));
    const double bw = sbytes / st / 1e9;
    printf("read bandwidth, %d threads: %.1f GB/s\n", qhx_pool_size(pool), bw);
    const double peak = vnni_peak(pool) / 1e9;
    if (peak > 0) printf("VNNI peak, %d threads: %.1f G int8 multiply-adds/s (int16 x int8 in two passes: %.1f)\n", qhx_pool_size(pool), peak, peak / 2);

    const char *sets[] = {"avx2", "avx512", "scalar"};
    for (size_t s = 0; s < sizeof sets / sizeof *sets; s++) {
        const qhx_kernel_set *ks = qhx_kernels_find(sets[s]);
        if (!ks) { qhx_clear_error(); continue; }
        const int reps = strcmp(sets[s], "scalar") ? 5 : 1;
        qhx_acts acts = {0};
        const qhx_exec one = {.ks = ks, .acts = &acts}, all = {.ks = ks, .pool = pool, .acts = &acts};
        const qhx_exec batch = {.ks = ks, .pool = pool, .acts = &acts, .per_token = 1}; /* 4 sessions' decode step */
        const double d1 = BEST(reps, for (size_t m = 0; m < NM; m++) qhx_matmul(&one, &W[m], X, 1, Y)) / NM;
        const double dn = BEST(reps, for (size_t m = 0; m < NM; m++) qhx_matmul(&all, &W[m], X, 1, Y)) / NM;
        const double d4 = BEST(reps, for (size_t m = 0; m < NM; m++) qhx_matmul(&batch, &W[m], X, 4, Y)) / NM;
        const double pf = BEST(reps / 4 + 1, qhx_matmul(&all, &W[0], X, T, Y));
        const double gmac = (double)wbytes * T / pf / 1e9;
        /* the VNNI set's W8 prefill: int16 activations, two vpdpbusd a product */
        const double set_peak = !strcmp(sets[s], "avx512") ? peak / 2 : 0;
        printf("%-10s decode 1 thread %5.1f GB/s | decode %d threads %5.1f GB/s = %.2f of bandwidth, 4 tokens stepwise %.2fx the time | prefill %d: %6.1f GMAC/s",
               sets[s], wbytes / d1 / 1e9, qhx_pool_size(pool), wbytes / dn / 1e9, wbytes / dn / 1e9 / bw, d4 / dn, T, gmac);
        if (set_peak > 0) printf(" = %.2f of its VNNI peak", gmac / set_peak);
        printf("\n");
        if (ks->matmul_acts_w4) {
            const double e1 = BEST(reps, for (size_t m = 0; m < NM; m++) qhx_matmul(&one, &W4[m], X, 1, Y)) / NM;
            const double en = BEST(reps, for (size_t m = 0; m < NM; m++) qhx_matmul(&all, &W4[m], X, 1, Y)) / NM;
            const double e4 = BEST(reps, for (size_t m = 0; m < NM; m++) qhx_matmul(&batch, &W4[m], X, 4, Y)) / NM;
            const double pf4 = BEST(reps / 4 + 1, qhx_matmul(&all, &W4[0], X, T, Y));
            const double gmac4 = (double)wbytes * T / pf4 / 1e9;
            printf("%-10s W4 decode 1 thread %5.1f GB/s | decode %d threads %5.1f GB/s = %.2f of bandwidth, %.2fx W8's tokens, 4 tokens stepwise %.2fx the time | prefill %d: %6.1f GMAC/s",
                   sets[s], w4bytes / e1 / 1e9, qhx_pool_size(pool), w4bytes / en / 1e9, w4bytes / en / 1e9 / bw, dn / en, e4 / en, T, gmac4);
            if (set_peak > 0) printf(" = %.2f of the VNNI peak (int8 activations)", gmac4 / peak); /* W4 takes int8 in every set */
            printf("\n");
        }
        qhx_acts_free(&acts);
    }
    qhx_pool_free(pool);
    free(w), free(w4), free(scale), free(X), free(Y), free(buf);
    return 0;
}
