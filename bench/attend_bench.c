/* Attention at depth, one thread, the 4B shape (4 KV heads of 256, 4 query heads each):
 *  - decode: one query token over N cached rows of a layer in every KV form: the bytes of K and V
 *    read a second, next to a plain streaming read of the same bytes in the same run (the cache is
 *    2 x 4 x N rows, 64 MiB in f32 at 16k, so it comes from memory); on THREADS threads the heads
 *    are dealt out as the model deals them, and the read loop is split the same way; best and mean
 *    of the passes, since threads that share the bus see its noise;
 *  - prefill: a 64-query block against a 128-row tile as attention_blocks runs it (the scores
 *    K q^T, the running softmax a query a lane, the weights times V through a transposed A), in
 *    GFLOP/s of the products next to the peak of independent FMAs in registers, with and without
 *    the softmax.
 *   build/attend_bench [N [KERNELS [THREADS]]] */
#include "kernels/kernels.h"
#include "kernels/kv.h"
#include "util/error.h"
#include "util/hugemem.h"
#include "util/readloop.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t rng = 7;
static float frand(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng >> 40) / 16777216.0 - 0.5);
}

/* 12 independent chains of fused multiply-adds, 16 lanes each, n steps: one core's fp32 peak
 * (AVX-512 where the CPU has it; 0 elsewhere) */
#if defined(__x86_64__)
#include <immintrin.h>
#define FMA12(x) x(0) x(1) x(2) x(3) x(4) x(5) x(6) x(7) x(8) x(9) x(10) x(11)
__attribute__((target("avx512f"))) static float fma_chains(long n) {
    const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
#define DECL(i) __m512 a##i = _mm512_set1_ps((float)i);
#define STEP(i) a##i = _mm512_fmadd_ps(a##i, m, c);
#define SUM(i) s += _mm512_reduce_add_ps(a##i);
    FMA12(DECL)
    for (long k = 0; k < n; k++) {
        FMA12(STEP)
        __asm__ volatile("" ::: "memory");
    }
    float s = 0;
    FMA12(SUM)
    return s;
}
static float qhx_fma_peak_probe(long n) { return __builtin_cpu_supports("avx512f") ? fma_chains(n) + 1 : 0; }
#else
static float qhx_fma_peak_probe(long n) { (void)n; return 0; }
#endif

/* one pass of decode attention over a layer's heads, or of the read loop over its bytes, on the
 * pool: head h on part h mod n, as attention_pairs deals them */
typedef struct {
    const qhx_kernel_set *ks;
    qhx_kv_form form;
    const unsigned char *k, *v;
    size_t head, bytes;
    int n, hd, G, heads, read;
    const float *q;
    float *o, *scratch;
    uint64_t sink[64];
} pass;

static void pass_part(void *arg, int i, int nth) {
    pass *P = arg;
    if (P->read) { /* the same bytes, a contiguous share of K and of V a part */
        const size_t share = P->bytes / nth / 64 * 64, at = share * i, len = i == nth - 1 ? P->bytes - at : share;
        P->sink[i] += qhx_read_stream(P->k + at, len) + qhx_read_stream(P->v + at, len);
        return;
    }
    for (int h = i; h < P->heads; h += nth) {
        const size_t at = (size_t)h * P->n * P->head;
        const qhx_attend_args a = {P->form, P->hd, P->G, P->n, P->q, (size_t)2 * P->hd, P->k + at, P->v + at, P->head, 0.0625f,
                                   P->o + (size_t)i * P->G * P->hd, (size_t)P->hd, P->scratch + (size_t)i * P->G * QHX_ATTEND_TILE};
        P->ks->attend(&a);
    }
}

int main(int argc, char **argv) {
    const int n = argc > 1 ? atoi(argv[1]) : 16384, hd = 256, G = 4, heads = 4, reps = 15;
    const qhx_kernel_set *ks = qhx_kernels_find(argc > 2 ? argv[2] : "auto");
    const int threads = argc > 3 ? atoi(argv[3]) : 1;
    if (!ks || n < 1 || threads < 1 || threads > 64)
        return fprintf(stderr, "attend_bench: %s\n", !ks ? qhx_last_error() : n < 1 ? "N must be positive" : "THREADS must be 1-64"), 2;
    qhx_pool *pool = qhx_pool_new(threads);
    float *q = malloc(sizeof(float) * G * hd * 2), *row = malloc(sizeof(float) * hd), *o = malloc(sizeof(float) * G * hd * threads);
    float *scratch = malloc(sizeof(float) * G * QHX_ATTEND_TILE * threads);
    if (!pool || !q || !row || !o || !scratch) return fprintf(stderr, "attend_bench: out of memory\n"), 1;
    for (int i = 0; i < G * hd * 2; i++) q[i] = frand();
    printf("decode attention over %d rows, 4 heads x (4 queries, 256 wide), %d thread%s, kernels %s; GB/s best (mean)\n", n, threads,
           threads > 1 ? "s" : "", ks->name);
    const qhx_kv_form forms[] = {QHX_KV_F32, QHX_KV_F16, QHX_KV_Q8};
    for (int f = 0; f < 3; f++) {
        const size_t head = qhx_kv_head_bytes(forms[f], hd), bytes = head * heads * (size_t)n;
        unsigned char *k = qhx_huge_calloc(bytes), *v = qhx_huge_calloc(bytes);
        if (!k || !v) return fprintf(stderr, "attend_bench: out of memory\n"), 1;
        for (size_t r = 0; r < (size_t)heads * n; r++) {
            for (int i = 0; i < hd; i++) row[i] = frand();
            qhx_kv_store(forms[f], row, hd, k + r * head);
            qhx_kv_store(forms[f], row, hd, v + r * head);
        }
        pass P = {ks, forms[f], k, v, head, bytes, n, hd, G, heads, 0, q, o, scratch, {0}};
        double best = 1e30, best_read = 1e30, sum = 0, sum_read = 0;
        for (int r = 0; r < reps; r++) { /* alternated with the read loop */
            for (P.read = 0; P.read < 2; P.read++) {
                const double t0 = now();
                qhx_pool_run(pool, pass_part, &P);
                const double t = now() - t0;
                if (P.read) best_read = t < best_read ? t : best_read, sum_read += t;
                else best = t < best ? t : best, sum += t;
            }
        }
        printf("  %-3s %7.2f ms a layer  %5.1f (%5.1f) GB/s  read loop %5.1f (%5.1f) GB/s  %.2f (%.2f) of it%s\n", qhx_kv_form_name(forms[f]),
               best * 1e3, 2 * bytes / best / 1e9, 2 * bytes * reps / sum / 1e9, 2 * bytes / best_read / 1e9, 2 * bytes * reps / sum_read / 1e9,
               best_read / best, sum_read / sum, P.sink[0] == 42 ? " " : "");
        free(k);
        free(v);
    }
    /* prefill's tile: scores ST [128][QB] = K [128][256] Q^T [256][QB], the softmax over ST's
     * columns, out [QB][256] += ST^T [QB][128] V [128][256] */
    enum { QB = 64 };
    float *K = malloc(sizeof(float) * 128 * 256), *QT = malloc(sizeof(float) * 256 * QB), *ST = malloc(sizeof(float) * 128 * QB);
    float *O = malloc(sizeof(float) * QB * 256), mx[QB], sm[QB];
    int seen[QB];
    for (int i = 0; i < 128 * 256; i++) K[i] = frand();
    for (int i = 0; i < 256 * QB; i++) QT[i] = frand();
    for (int i = 0; i < QB; i++) seen[i] = 128, mx[i] = -INFINITY, sm[i] = 0;
    memset(O, 0, sizeof(float) * QB * 256);
    const int tiles = 1000;
    double best = 1e30, best_soft = 1e30;
    for (int r = 0; r < reps; r++)
        for (int soft = 0; soft < 2; soft++) {
            const double t0 = now();
            for (int t = 0; t < tiles; t++) {
                ks->gemm(128, QB, 256, 0.0625f, K, 256, 1, QT, QB, ST, QB);
                if (soft) ks->softmax_tile(ST, 128, QB, QB, seen, mx, sm, O, 256, 256);
                ks->gemm(QB, 256, 128, 1.0f, ST, 1, QB, K, 256, O, 256);
            }
            const double dt = now() - t0;
            if (soft) best_soft = dt < best_soft ? dt : best_soft;
            else best = dt < best ? dt : best;
        }
    const double flops = 2.0 * tiles * (2.0 * 128 * QB * 256);
    /* the peak: 16 independent chains of fused multiply-adds over 16 registers of 16 lanes (8 on
     * AVX2: counted as issued, so a wider layer shows its width) */
    double peak = 1e30;
    volatile float sink = 0;
    for (int r = 0; r < reps; r++) {
        const double t0 = now();
        sink += qhx_fma_peak_probe(20000000);
        const double dt = now() - t0;
        peak = dt < peak ? dt : peak;
    }
    const double peak_flops = 20000000.0 * 12 * 16 * 2 / peak;
    printf("prefill tile (%d queries x 128 rows x 256): products %.1f GFLOP/s, with the softmax %.1f", QB, flops / best / 1e9,
           flops / best_soft / 1e9);
    if (qhx_fma_peak_probe(0) != 0) /* on this machine */
        printf("; fp32 FMA peak of one core %.1f GFLOP/s (%.2f and %.2f of it)", peak_flops / 1e9, flops / best / peak_flops,
               flops / best_soft / peak_flops);
    printf("\n");
    free(K), free(QT), free(ST), free(O);
    free(q), free(row), free(o), free(scratch);
    qhx_pool_free(pool);
    return 0;
}
