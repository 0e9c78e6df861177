/* AVX2 with int8 activations for W8 matrices (the "avx2-q8" set; see q8.h for the rounding). The
 * llama.cpp Q8_0 trick: vpsignb moves the activation's sign onto the weight so vpmaddubsw can
 * multiply |x| (unsigned) by it, 32 products per instruction; block sums are exact integers,
 * scaled once per 32 columns. Tiles: 4 rows x 2 tokens. Other dtypes go to the fp32 AVX2 kernels. */
#include "kernels/kernels.h"
#include "kernels/q8.h"

#ifdef QHX_HAVE_AVX2
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#define TARGET __attribute__((target("avx2,fma")))

TARGET static inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)));
}

/* One tile: 4 rows x NT (1 or 2) tokens over every block; NT is a constant at each call so the
 * accumulators stay in registers. */
static inline __attribute__((always_inline)) TARGET void q8_tile(const int8_t *const row[4], const int8_t tail[4][QHX_Q8_BLOCK],
                                                                size_t nb, size_t full, const int8_t *q, const int8_t *aq,
                                                                const float *s, size_t pad, int t, int NT, float out[4][2]) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[4][2];
    _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    for (size_t b = 0; b < nb; b++) {
        __m256i w[4];
        _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++)
            w[i] = _mm256_loadu_si256((const __m256i *)(b < full ? row[i] + b * QHX_Q8_BLOCK : tail[i]));
        _Pragma("GCC unroll 2") for (int j = 0; j < NT; j++) {
            const size_t o = (size_t)(t + j) * pad + b * QHX_Q8_BLOCK;
            const __m256i x = _mm256_load_si256((const __m256i *)(q + o)), a = _mm256_load_si256((const __m256i *)(aq + o));
            const __m256 sc = _mm256_set1_ps(s[(size_t)(t + j) * (pad / QHX_Q8_BLOCK) + b]);
            _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) {
                const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(a, _mm256_sign_epi8(w[i], x)), ones);
                acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), sc, acc[i][j]);
            }
        }
    }
    _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++)
        _Pragma("GCC unroll 2") for (int j = 0; j < NT; j++) out[i][j] = hsum(acc[i][j]);
}

TARGET static void q8_rows(const qhx_tensor *W, const int8_t *q, const int8_t *aq, const float *s, size_t pad, int T,
                           float *Y, int r0, int r1) {
    const size_t cols = (size_t)W->cols, nb = pad / QHX_Q8_BLOCK, full = cols / QHX_Q8_BLOCK;
    int8_t tail[4][QHX_Q8_BLOCK];
    float out[4][2];
    for (int r = r0; r < r1; r += 4) {
        const int nr = r1 - r < 4 ? r1 - r : 4;
        const int8_t *row[4];
        for (int i = 0; i < 4; i++) row[i] = (const int8_t *)W->data + (size_t)(r + (i < nr ? i : 0)) * cols;
        if (full < nb) /* the ragged last block, from zero-padded copies: never read past a row */
            for (int i = 0; i < 4; i++) {
                memset(tail[i], 0, QHX_Q8_BLOCK);
                memcpy(tail[i], row[i] + full * QHX_Q8_BLOCK, cols - full * QHX_Q8_BLOCK);
            }
        for (int t = 0; t < T; t += 2) {
            const int nt = T - t < 2 ? T - t : 2;
            if (nt == 2) q8_tile(row, (const int8_t(*)[QHX_Q8_BLOCK])tail, nb, full, q, aq, s, pad, t, 2, out);
            else q8_tile(row, (const int8_t(*)[QHX_Q8_BLOCK])tail, nb, full, q, aq, s, pad, t, 1, out);
            for (int i = 0; i < nr; i++)
                for (int j = 0; j < nt; j++) Y[(size_t)(t + j) * W->rows + r + i] = out[i][j] * W->scale[r + i];
        }
    }
}

static void avx2_q8_matmul(const qhx_tensor *W, const float *X, int T, float *Y, int r0, int r1) {
    if (W->dtype != QHX_I8) { qhx_kernels_avx2.matmul(W, X, T, Y, r0, r1); return; }
    const size_t cols = (size_t)W->cols, pad = qhx_q8_padded(cols), nb = pad / QHX_Q8_BLOCK;
    int8_t *q = aligned_alloc(32, pad * (size_t)T), *aq = aligned_alloc(32, pad * (size_t)T);
    float *s = malloc(sizeof(float) * nb * (size_t)T);
    if (!q || !aq || !s) abort(); /* activation scratch: nothing sensible to do without it */
    for (int t = 0; t < T; t++) qhx_q8_quantize(X + (size_t)t * cols, cols, q + (size_t)t * pad, s + (size_t)t * nb);
    for (size_t i = 0; i < pad * (size_t)T; i++) aq[i] = (int8_t)abs(q[i]);
    q8_rows(W, q, aq, s, pad, T, Y, r0, r1);
    free(q);
    free(aq);
    free(s);
}

const qhx_kernel_set qhx_kernels_avx2_q8 = {"avx2-q8", avx2_q8_matmul, qhx_avx2_dot, qhx_avx2_axpy, qhx_avx2_supported};
#endif
