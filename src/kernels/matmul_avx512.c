/* AVX-512F matmul, every dtype, fp32 activations: the AVX2 kernels' design at 16 lanes (see
 * matmul_avx2.c). Weights widen in registers; tiles of 4 rows x 4 tokens in prefill, 4 rows x 1
 * token in decode. VNNI would need int8 activations; decode is bandwidth-bound without it, so the
 * exact fp32-activation path is the one kept. */
#include "format/w8.h"
#include "kernels/kernels.h"

#ifdef QHX_HAVE_AVX512
#include <cpuid.h>
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#define TARGET __attribute__((target("avx512f,avx2,fma,f16c")))
#define INLINE static inline __attribute__((always_inline)) TARGET

INLINE __m512 load_i8(const void *p) { return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p))); }
INLINE __m512 load_f16(const void *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }
INLINE __m512 load_bf16(const void *p) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
}
INLINE __m512 load_f32(const void *p) { return _mm512_loadu_ps((const float *)p); }

#define TILE(NAME, LOAD, ES)                                                                                           \
    INLINE void NAME(const unsigned char *w, size_t wstride, const float *x, size_t xstride, size_t cols, int NR,      \
                     int NT, float out[4][4]) {                                                                        \
        __m512 acc[4][4];                                                                                              \
        _Pragma("GCC unroll 4") for (int i = 0; i < NR; i++)                                                                                   \
            _Pragma("GCC unroll 4") for (int j = 0; j < NT; j++) acc[i][j] = _mm512_setzero_ps();                                              \
        size_t c = 0;                                                                                                  \
        for (; c + 16 <= cols; c += 16) {                                                                              \
            __m512 wv[4], xv[4];                                                                                       \
            _Pragma("GCC unroll 4") for (int i = 0; i < NR; i++) wv[i] = LOAD(w + i * wstride + c * ES);                                       \
            _Pragma("GCC unroll 4") for (int j = 0; j < NT; j++) xv[j] = _mm512_loadu_ps(x + j * xstride + c);                                 \
            _Pragma("GCC unroll 4") for (int i = 0; i < NR; i++)                                                                               \
                _Pragma("GCC unroll 4") for (int j = 0; j < NT; j++) acc[i][j] = _mm512_fmadd_ps(wv[i], xv[j], acc[i][j]);                     \
        }                                                                                                              \
        if (c < cols) {                                                                                                \
            unsigned char wt[4][16 * 4] = {{0}};                                                                       \
            float xt[4][16] = {{0}};                                                                                   \
            _Pragma("GCC unroll 4") for (int i = 0; i < NR; i++) memcpy(wt[i], w + i * wstride + c * ES, (cols - c) * ES);                     \
            _Pragma("GCC unroll 4") for (int j = 0; j < NT; j++) memcpy(xt[j], x + j * xstride + c, (cols - c) * sizeof(float));               \
            _Pragma("GCC unroll 4") for (int i = 0; i < NR; i++)                                                                               \
                _Pragma("GCC unroll 4") for (int j = 0; j < NT; j++) acc[i][j] = _mm512_fmadd_ps(LOAD(wt[i]), _mm512_loadu_ps(xt[j]), acc[i][j]); \
        }                                                                                                              \
        _Pragma("GCC unroll 4") for (int i = 0; i < NR; i++)                                                                                   \
            _Pragma("GCC unroll 4") for (int j = 0; j < NT; j++) out[i][j] = _mm512_reduce_add_ps(acc[i][j]);                                  \
    }

TILE(tile_i8, load_i8, 1)
TILE(tile_f16, load_f16, 2)
TILE(tile_bf16, load_bf16, 2)
TILE(tile_f32, load_f32, 4)

#define MATMUL(NAME, TILEFN, ES)                                                                                       \
    TARGET static void NAME(const qhx_tensor *W, const float *X, int T, float *Y, int r0, int r1) {                    \
        const size_t cols = (size_t)W->cols, ws = cols * ES;                                                           \
        const unsigned char *base = W->data;                                                                           \
        float out[4][4];                                                                                               \
        unsigned char *plain = ES == 1 ? malloc(4 * cols) : NULL; /* W8: a row group unpacked */                       \
        if (ES == 1 && !plain) abort();                                                                                \
        for (int r = r0; r < r1; r += 4) {                                                                             \
            const int nr = r1 - r < 4 ? r1 - r : 4;                                                                    \
            const unsigned char *w = base + (size_t)r * ws;                                                            \
            if (ES == 1) qhx_w8_get_group(W->data, cols, (size_t)r, (int8_t *)(w = plain));                           \
            for (int t = 0; t < T; t += 4) {                                                                           \
                const int nt = T - t < 4 ? T - t : 4;                                                                  \
                const float *x = X + (size_t)t * cols;                                                                 \
                if (nr == 4 && nt == 4) TILEFN(w, ws, x, cols, cols, 4, 4, out);                                       \
                else if (nr == 4 && nt == 1) TILEFN(w, ws, x, cols, cols, 4, 1, out);                                  \
                else if (nr == 4 && nt == 2) TILEFN(w, ws, x, cols, cols, 4, 2, out);                                  \
                else if (nr == 4 && nt == 3) TILEFN(w, ws, x, cols, cols, 4, 3, out);                                  \
                else                                                                                                   \
                    for (int i = 0; i < nr; i++)                                                                       \
                        for (int j = 0; j < nt; j++) {                                                                 \
                            float o[4][4];                                                                             \
                            TILEFN(w + i * ws, ws, x + j * cols, cols, cols, 1, 1, o);                                 \
                            out[i][j] = o[0][0];                                                                       \
                        }                                                                                              \
                for (int i = 0; i < nr; i++) {                                                                         \
                    const float s = W->dtype == QHX_I8 ? W->scale[r + i] : 1.0f;                                       \
                    for (int j = 0; j < nt; j++) Y[(size_t)(t + j) * W->rows + r + i] = out[i][j] * s;                 \
                }                                                                                                      \
            }                                                                                                          \
        }                                                                                                              \
        free(plain);                                                                                                   \
    }

MATMUL(mm_i8, tile_i8, 1)
MATMUL(mm_f16, tile_f16, 2)
MATMUL(mm_bf16, tile_bf16, 2)
MATMUL(mm_f32, tile_f32, 4)

/* Bytes ahead of the block being read. 8 KiB streamed 1.12-1.19x faster than the AVX2 kernels'
 * 2 KiB on a Zen 5 VM (distances alternated 15 times in one process, 2 threads, 4B MLP matrices);
 * 16 KiB measured the same as 8. */
#define PREFETCH 8192

INLINE void w8_block(const int8_t *wb, const float *x, __m512 acc[4]) {
    _mm_prefetch((const char *)wb + PREFETCH, _MM_HINT_T0);
    _mm_prefetch((const char *)wb + PREFETCH + 64, _MM_HINT_T0);
    _Pragma("GCC unroll 2") for (int k = 0; k < 2; k++) {
        const __m512 xv = _mm512_loadu_ps(x + 16 * k);
        _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++)
            acc[i] = _mm512_fmadd_ps(load_i8(wb + i * QHX_W8_BLOCK + 16 * k), xv, acc[i]);
    }
}

/* Decode over the W8 layout: a row group's 4 rows x 16 columns at a time, straight from the packed
 * blocks in one sequential stream (the layout's zero padding makes the ragged block plain
 * arithmetic). */
TARGET static void mm_w8(const qhx_tensor *W, const float *X, int T, float *Y, int r0, int r1) {
    const size_t cols = (size_t)W->cols, full = cols / QHX_W8_BLOCK, gbytes = qhx_w8_group_bytes(cols);
    for (int r = r0; r < r1; r += QHX_W8_GROUP) {
        const int8_t *g = (const int8_t *)W->data + (size_t)r / QHX_W8_GROUP * gbytes;
        const int nr = r1 - r < QHX_W8_GROUP ? r1 - r : QHX_W8_GROUP;
        for (int t = 0; t < T; t++) {
            const float *x = X + (size_t)t * cols;
            __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
            for (size_t b = 0; b < full; b++) w8_block(g + b * QHX_W8_GROUP * QHX_W8_BLOCK, x + b * QHX_W8_BLOCK, acc);
            if (cols > full * QHX_W8_BLOCK) { /* the ragged block */
                float xt[QHX_W8_BLOCK] = {0};
                memcpy(xt, x + full * QHX_W8_BLOCK, sizeof(float) * (cols - full * QHX_W8_BLOCK));
                w8_block(g + full * QHX_W8_GROUP * QHX_W8_BLOCK, xt, acc);
            }
            for (int i = 0; i < nr; i++) Y[(size_t)t * W->rows + r + i] = _mm512_reduce_add_ps(acc[i]) * W->scale[r + i];
        }
    }
}

void qhx_avx512_matmul(const qhx_tensor *W, const float *X, int T, float *Y, int r0, int r1) {
    switch (W->dtype) {
    case QHX_I8: T <= QHX_DECODE_MAX_T ? mm_w8(W, X, T, Y, r0, r1) : mm_i8(W, X, T, Y, r0, r1); break;
    case QHX_F16: mm_f16(W, X, T, Y, r0, r1); break;
    case QHX_BF16: mm_bf16(W, X, T, Y, r0, r1); break;
    default: mm_f32(W, X, T, Y, r0, r1); break;
    }
}

/* Tiles of MR rows x 32 columns: 2 * MR accumulators, B's row loaded once per k for all MR rows;
 * ragged columns through masks, so every shape runs the same arithmetic per element. */
INLINE void gemm_tile(int MR, int K, float alpha, const float *A, int lda, const float *B, int ldb, float *C, int ldc,
                      __mmask16 m0, __mmask16 m1) {
    __m512 acc[8][2];
    _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    for (int k = 0; k < K; k++) {
        const __m512 b0 = _mm512_maskz_loadu_ps(m0, B + (size_t)k * ldb), b1 = _mm512_maskz_loadu_ps(m1, B + (size_t)k * ldb + 16);
        _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++) {
            const __m512 a = _mm512_set1_ps(A[(size_t)r * lda + k]);
            acc[r][0] = _mm512_fmadd_ps(a, b0, acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(a, b1, acc[r][1]);
        }
    }
    const __m512 al = _mm512_set1_ps(alpha);
    _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++) {
        float *c = C + (size_t)r * ldc;
        _mm512_mask_storeu_ps(c, m0, _mm512_fmadd_ps(al, acc[r][0], _mm512_maskz_loadu_ps(m0, c)));
        _mm512_mask_storeu_ps(c + 16, m1, _mm512_fmadd_ps(al, acc[r][1], _mm512_maskz_loadu_ps(m1, c + 16)));
    }
}

TARGET void qhx_avx512_gemm(int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb, float *C, int ldc) {
    for (int j = 0; j < N; j += 32) {
        const int n = N - j < 32 ? N - j : 32;
        const __mmask16 m0 = n >= 16 ? 0xffff : (__mmask16)((1u << n) - 1), m1 = n >= 32 ? 0xffff : n > 16 ? (__mmask16)((1u << (n - 16)) - 1) : 0;
        int i = 0;
        for (; i + 8 <= M; i += 8) gemm_tile(8, K, alpha, A + (size_t)i * lda, lda, B + j, ldb, C + (size_t)i * ldc + j, ldc, m0, m1);
        if (M - i >= 4) gemm_tile(4, K, alpha, A + (size_t)i * lda, lda, B + j, ldb, C + (size_t)i * ldc + j, ldc, m0, m1), i += 4;
        for (; i < M; i++) gemm_tile(1, K, alpha, A + (size_t)i * lda, lda, B + j, ldb, C + (size_t)i * ldc + j, ldc, m0, m1);
    }
}

TARGET float qhx_avx512_dot(const float *a, const float *b, int n) {
    __m512 acc = _mm512_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc);
    float s = _mm512_reduce_add_ps(acc);
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

TARGET void qhx_avx512_axpy(float *y, float a, const float *x, int n) {
    const __m512 av = _mm512_set1_ps(a);
    int i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_fmadd_ps(av, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a * x[i];
}

/* CPUID leaf 1, ECX bit 29 (not every compiler's __builtin_cpu_supports knows "f16c") */
static int has_f16c(void) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1);
}

int qhx_avx512_supported(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           has_f16c();
}

const qhx_kernel_set qhx_kernels_avx512 = {.name = "avx512", .matmul = qhx_avx512_matmul, .dot = qhx_avx512_dot, .axpy = qhx_avx512_axpy,
                                           .gemm = qhx_avx512_gemm, .delta_step = qhx_avx2_delta_step, .silu = qhx_avx2_silu, .supported = qhx_avx512_supported};
#endif
