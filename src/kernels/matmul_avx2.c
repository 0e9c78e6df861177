/* AVX2 + FMA + F16C matmul, every dtype, fp32 activations: the weights are widened in registers
 * (int8 -> fp32 with one scale per row, fp16/bf16 -> fp32), so results match the scalar twin up
 * to FMA rounding. Prefill widens 4 rows once and sweeps every token over them; decode streams
 * 4 rows at once against one activation vector (for W8, a row group of the packed layout,
 * format/w8.h, in one sequential stream). Also the delta rule's small products (gemm).
 * Compiled for these instructions through target attributes, so the rest of the build stays
 * baseline x86-64 and this code only runs when the CPU reports AVX2/FMA/F16C. */
#include "format/w8.h"
#include "kernels/kernels.h"

#ifdef QHX_HAVE_AVX2
#include <cpuid.h>
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#define TARGET __attribute__((target("avx2,fma,f16c")))
#define INLINE static inline __attribute__((always_inline)) TARGET

/* the scalar twin's lane order: ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)) */
INLINE float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)));
}

INLINE __m256 load_i8(const void *p) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p))); }
INLINE __m256 load_f16(const void *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
INLINE __m256 load_bf16(const void *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}
INLINE __m256 load_f32(const void *p) { return _mm256_loadu_ps((const float *)p); }

/* One tile: NR rows x NT tokens, all columns. A ragged tail of columns goes through zero-padded
 * copies, landing in the same lanes as in the scalar twin. */
#define TILE(NAME, LOAD, ES)                                                                                           \
    INLINE void NAME(const unsigned char *w, size_t wstride, const float *x, size_t xstride, size_t cols, int NR,      \
                     int NT, float out[4][4]) {                                                                        \
        __m256 acc[4][4];                                                                                              \
        _Pragma("GCC unroll 4") for (int i = 0; i < NR; i++)                                                                                   \
            _Pragma("GCC unroll 4") for (int j = 0; j < NT; j++) acc[i][j] = _mm256_setzero_ps();                                              \
        size_t c = 0;                                                                                                  \
        for (; c + 8 <= cols; c += 8) {                                                                                \
            __m256 wv[4], xv[4];                                                                                       \
            _Pragma("GCC unroll 4") for (int i = 0; i < NR; i++) wv[i] = LOAD(w + i * wstride + c * ES);                                       \
            _Pragma("GCC unroll 4") for (int j = 0; j < NT; j++) xv[j] = _mm256_loadu_ps(x + j * xstride + c);                                 \
            _Pragma("GCC unroll 4") for (int i = 0; i < NR; i++)                                                                               \
                _Pragma("GCC unroll 4") for (int j = 0; j < NT; j++) acc[i][j] = _mm256_fmadd_ps(wv[i], xv[j], acc[i][j]);                     \
        }                                                                                                              \
        if (c < cols) {                                                                                                \
            unsigned char wt[4][8 * 4] = {{0}};                                                                        \
            float xt[4][8] = {{0}};                                                                                    \
            _Pragma("GCC unroll 4") for (int i = 0; i < NR; i++) memcpy(wt[i], w + i * wstride + c * ES, (cols - c) * ES);                     \
            _Pragma("GCC unroll 4") for (int j = 0; j < NT; j++) memcpy(xt[j], x + j * xstride + c, (cols - c) * sizeof(float));               \
            _Pragma("GCC unroll 4") for (int i = 0; i < NR; i++)                                                                               \
                _Pragma("GCC unroll 4") for (int j = 0; j < NT; j++) acc[i][j] = _mm256_fmadd_ps(LOAD(wt[i]), _mm256_loadu_ps(xt[j]), acc[i][j]); \
        }                                                                                                              \
        _Pragma("GCC unroll 4") for (int i = 0; i < NR; i++)                                                                                   \
            _Pragma("GCC unroll 4") for (int j = 0; j < NT; j++) out[i][j] = hsum(acc[i][j]);                                                  \
    }

TILE(tile_f16, load_f16, 2)
TILE(tile_bf16, load_bf16, 2)
TILE(tile_f32, load_f32, 4)

/* Prefill (T >= 4): widen 4 rows to fp32 once, then sweep every token 3 at a time, so the FMAs
 * run from registers (12 accumulators + 3 activations + 1 weight = the 16 ymm registers) and the
 * widening cost is shared by all T tokens. */
TARGET static void prefill_rows(const float *wf, size_t cols, int nr, const float *X, int T, float *Y, size_t ystride,
                                int r, const float *scale) {
    const size_t c8 = cols & ~(size_t)7;
    for (int t = 0; t < T; t += 3) {
        const int nt = T - t < 3 ? T - t : 3;
        const float *x0 = X + (size_t)t * cols, *x1 = nt > 1 ? x0 + cols : x0, *x2 = nt > 2 ? x0 + 2 * cols : x0;
        __m256 acc[4][3];
        _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) acc[i][0] = acc[i][1] = acc[i][2] = _mm256_setzero_ps();
        for (size_t c = 0; c < c8; c += 8) {
            const __m256 a = _mm256_loadu_ps(x0 + c), b = _mm256_loadu_ps(x1 + c), d = _mm256_loadu_ps(x2 + c);
            _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) {
                const __m256 w = _mm256_loadu_ps(wf + i * cols + c);
                acc[i][0] = _mm256_fmadd_ps(w, a, acc[i][0]);
                acc[i][1] = _mm256_fmadd_ps(w, b, acc[i][1]);
                acc[i][2] = _mm256_fmadd_ps(w, d, acc[i][2]);
            }
        }
        for (int i = 0; i < nr; i++) {
            const float *xs[3] = {x0, x1, x2};
            for (int j = 0; j < nt; j++) {
                float v = hsum(acc[i][j]);
                for (size_t c = c8; c < cols; c++) v += wf[i * cols + c] * xs[j][c];
                Y[(size_t)(t + j) * ystride + r + i] = scale ? v * scale[r + i] : v;
            }
        }
    }
}

#define WIDEN(NAME, LOAD, ES)                                                                                          \
    TARGET static void NAME(const unsigned char *w, size_t cols, float *out) {                                         \
        size_t c = 0;                                                                                                  \
        for (; c + 8 <= cols; c += 8) _mm256_storeu_ps(out + c, LOAD(w + c * ES));                                     \
        if (c < cols) {                                                                                                \
            unsigned char t[8 * 4] = {0};                                                                              \
            float o[8];                                                                                                \
            memcpy(t, w + c * ES, (cols - c) * ES);                                                                    \
            _mm256_storeu_ps(o, LOAD(t));                                                                              \
            memcpy(out + c, o, (cols - c) * sizeof(float));                                                            \
        }                                                                                                              \
    }

WIDEN(widen_i8, load_i8, 1)
WIDEN(widen_f16, load_f16, 2)
WIDEN(widen_bf16, load_bf16, 2)
WIDEN(widen_f32, load_f32, 4)

static void prefill(const qhx_tensor *W, const float *X, int T, float *Y, int r0, int r1) {
    const size_t cols = (size_t)W->cols, es = qhx_dtype_size(W->dtype);
    float *wf = aligned_alloc(32, (sizeof(float) * 4 * cols + 31) & ~(size_t)31); /* row i at wf + i * cols */
    unsigned char *plain = W->dtype == QHX_I8 ? malloc(4 * cols) : NULL;          /* W8: a row group unpacked */
    if (!wf || (W->dtype == QHX_I8 && !plain)) abort(); /* 4 rows of weights: nothing sensible to do without them */
    for (int r = r0; r < r1; r += 4) {
        const int nr = r1 - r < 4 ? r1 - r : 4;
        if (plain) qhx_w8_get_group(W->data, cols, (size_t)r, (int8_t *)plain);
        for (int i = 0; i < 4; i++) {
            const size_t ri = (size_t)(i < nr ? i : 0);
            const unsigned char *w = plain ? plain + ri * cols : (const unsigned char *)W->data + (r + ri) * cols * es;
            switch (W->dtype) {
            case QHX_I8: widen_i8(w, cols, wf + i * cols); break;
            case QHX_F16: widen_f16(w, cols, wf + i * cols); break;
            case QHX_BF16: widen_bf16(w, cols, wf + i * cols); break;
            default: widen_f32(w, cols, wf + i * cols); break;
            }
        }
        prefill_rows(wf, cols, nr, X, T, Y, (size_t)W->rows, r, W->dtype == QHX_I8 ? W->scale : NULL);
    }
    free(wf);
    free(plain);
}

/* Walks the output in 4x4 tiles; the tile sizes are compile-time constants in each call so the
 * accumulators stay in registers. */
#define MATMUL(NAME, TILEFN, ES)                                                                                       \
    TARGET static void NAME(const qhx_tensor *W, const float *X, int T, float *Y, int r0, int r1) {                    \
        const size_t cols = (size_t)W->cols, ws = cols * ES;                                                           \
        const unsigned char *base = W->data;                                                                           \
        float out[4][4];                                                                                               \
        for (int r = r0; r < r1; r += 4) {                                                                             \
            const int nr = r1 - r < 4 ? r1 - r : 4;                                                                    \
            const unsigned char *w = base + (size_t)r * ws;                                                            \
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
    }

MATMUL(mm_f16, tile_f16, 2)
MATMUL(mm_bf16, tile_bf16, 2)
MATMUL(mm_f32, tile_f32, 4)

INLINE void w8_block(const unsigned char *wb, const float *x, __m256 acc[4]) {
    _mm_prefetch((const char *)wb + 2048, _MM_HINT_T0); /* as in the int8 kernel */
    _mm_prefetch((const char *)wb + 2048 + 64, _MM_HINT_T0);
    _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
        const __m256 xv = _mm256_loadu_ps(x + 8 * k);
        _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++)
            acc[i] = _mm256_fmadd_ps(load_i8(wb + i * QHX_W8_BLOCK + 8 * k), xv, acc[i]);
    }
}

/* Decode over the W8 layout: a row group's 4 rows x 8 columns at a time, straight from the
 * packed blocks (the layout's zero padding makes the ragged tail plain arithmetic). */
TARGET static void mm_w8(const qhx_tensor *W, const float *X, int T, float *Y, int r0, int r1) {
    const size_t cols = (size_t)W->cols, full = cols / QHX_W8_BLOCK, gbytes = qhx_w8_group_bytes(cols);
    for (int r = r0; r < r1; r += QHX_W8_GROUP) {
        const unsigned char *g = (const unsigned char *)W->data + (size_t)r / QHX_W8_GROUP * gbytes;
        const int nr = r1 - r < QHX_W8_GROUP ? r1 - r : QHX_W8_GROUP;
        for (int t = 0; t < T; t++) {
            const float *x = X + (size_t)t * cols;
            __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
            for (size_t b = 0; b < full; b++) w8_block(g + b * QHX_W8_GROUP * QHX_W8_BLOCK, x + b * QHX_W8_BLOCK, acc);
            if (cols > full * QHX_W8_BLOCK) { /* the ragged block */
                float xt[QHX_W8_BLOCK] = {0};
                memcpy(xt, x + full * QHX_W8_BLOCK, sizeof(float) * (cols - full * QHX_W8_BLOCK));
                w8_block(g + full * QHX_W8_GROUP * QHX_W8_BLOCK, xt, acc);
            }
            for (int i = 0; i < nr; i++) Y[(size_t)t * W->rows + r + i] = hsum(acc[i]) * W->scale[r + i];
        }
    }
}

static void avx2_matmul(const qhx_tensor *W, const float *X, int T, float *Y, int r0, int r1) {
    if (T > QHX_DECODE_MAX_T) { prefill(W, X, T, Y, r0, r1); return; }
    switch (W->dtype) {
    case QHX_I8: mm_w8(W, X, T, Y, r0, r1); break;
    case QHX_F16: mm_f16(W, X, T, Y, r0, r1); break;
    case QHX_BF16: mm_bf16(W, X, T, Y, r0, r1); break;
    default: mm_f32(W, X, T, Y, r0, r1); break;
    }
}

TARGET float qhx_avx2_dot(const float *a, const float *b, int n) {
    __m256 acc = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
    float s = hsum(acc);
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

TARGET void qhx_avx2_axpy(float *y, float a, const float *x, int n) {
    const __m256 av = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a * x[i];
}

/* Tiles of MR rows x 16 columns: 2 * MR accumulators, B's row loaded once per k for all MR rows. */
INLINE void gemm_tile(int MR, int K, float alpha, const float *A, int lda, const float *B, int ldb, float *C, int ldc) {
    __m256 acc[4][2];
    _Pragma("GCC unroll 4") for (int r = 0; r < MR; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    for (int k = 0; k < K; k++) {
        const __m256 b0 = _mm256_loadu_ps(B + (size_t)k * ldb), b1 = _mm256_loadu_ps(B + (size_t)k * ldb + 8);
        _Pragma("GCC unroll 4") for (int r = 0; r < MR; r++) {
            const __m256 a = _mm256_broadcast_ss(A + (size_t)r * lda + k);
            acc[r][0] = _mm256_fmadd_ps(a, b0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(a, b1, acc[r][1]);
        }
    }
    const __m256 al = _mm256_set1_ps(alpha);
    _Pragma("GCC unroll 4") for (int r = 0; r < MR; r++) {
        float *c = C + (size_t)r * ldc;
        _mm256_storeu_ps(c, _mm256_fmadd_ps(al, acc[r][0], _mm256_loadu_ps(c)));
        _mm256_storeu_ps(c + 8, _mm256_fmadd_ps(al, acc[r][1], _mm256_loadu_ps(c + 8)));
    }
}

TARGET void qhx_avx2_gemm(int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb, float *C, int ldc) {
    const int N16 = N & ~15;
    for (int i = 0; i < M; i += 4) {
        const int mr = M - i < 4 ? M - i : 4;
        const float *a = A + (size_t)i * lda;
        float *c = C + (size_t)i * ldc;
        for (int j = 0; j < N16; j += 16) {
            if (mr == 4) gemm_tile(4, K, alpha, a, lda, B + j, ldb, c + j, ldc);
            else
                for (int r = 0; r < mr; r++) gemm_tile(1, K, alpha, a + (size_t)r * lda, lda, B + j, ldb, c + (size_t)r * ldc + j, ldc);
        }
        for (int r = 0; r < mr; r++) /* the last N % 16 columns */
            for (int j = N16; j < N; j++) {
                float acc = 0.0f;
                for (int k = 0; k < K; k++) acc += a[(size_t)r * lda + k] * B[(size_t)k * ldb + j];
                c[(size_t)r * ldc + j] += alpha * acc;
            }
    }
}

/* The same rule in one sweep of S from L2 instead of four, by linearity:
 *   S^T k after the decay = decay (S^T k),   o = S'^T q = decay (S^T q) + (k . q) delta
 * so one read of a column block gathers S^T k and S^T q, and the write of the updated block
 * follows while it is still in L1 (32 columns x dk rows = 16 KB at dk = 128). */
TARGET void qhx_avx2_delta_step(float *S, const float *q, const float *k, const float *v, float beta, float decay, int dk,
                                int dv, float *o, float *kv) {
    const float kq = qhx_avx2_dot(k, q, dk);
    const __m256 dec = _mm256_set1_ps(decay), bet = _mm256_set1_ps(beta), kqv = _mm256_set1_ps(kq);
    int c0 = 0;
    for (; c0 + 32 <= dv; c0 += 32) {
        __m256 sk[4], sq[4], delta[4];
        _Pragma("GCC unroll 4") for (int u = 0; u < 4; u++) sk[u] = sq[u] = _mm256_setzero_ps();
        for (int i = 0; i < dk; i++) {
            const float *row = S + (size_t)i * dv + c0;
            const __m256 ki = _mm256_broadcast_ss(k + i), qi = _mm256_broadcast_ss(q + i);
            _Pragma("GCC unroll 4") for (int u = 0; u < 4; u++) {
                const __m256 sv = _mm256_loadu_ps(row + 8 * u);
                sk[u] = _mm256_fmadd_ps(ki, sv, sk[u]);
                sq[u] = _mm256_fmadd_ps(qi, sv, sq[u]);
            }
        }
        _Pragma("GCC unroll 4") for (int u = 0; u < 4; u++) {
            delta[u] = _mm256_mul_ps(_mm256_fnmadd_ps(dec, sk[u], _mm256_loadu_ps(v + c0 + 8 * u)), bet);
            _mm256_storeu_ps(o + c0 + 8 * u, _mm256_fmadd_ps(kqv, delta[u], _mm256_mul_ps(dec, sq[u])));
        }
        for (int i = 0; i < dk; i++) {
            float *row = S + (size_t)i * dv + c0;
            const __m256 ki = _mm256_broadcast_ss(k + i);
            _Pragma("GCC unroll 4") for (int u = 0; u < 4; u++)
                _mm256_storeu_ps(row + 8 * u, _mm256_fmadd_ps(ki, delta[u], _mm256_mul_ps(dec, _mm256_loadu_ps(row + 8 * u))));
        }
    }
    if (c0 < dv) { /* the last dv % 32 columns, one at a time */
        for (int c = c0; c < dv; c++) {
            float sk = 0.0f, sq = 0.0f;
            for (int i = 0; i < dk; i++) sk += k[i] * S[(size_t)i * dv + c], sq += q[i] * S[(size_t)i * dv + c];
            kv[c] = (v[c] - decay * sk) * beta;
            o[c] = decay * sq + kq * kv[c];
        }
        for (int i = 0; i < dk; i++)
            for (int c = c0; c < dv; c++) S[(size_t)i * dv + c] = decay * S[(size_t)i * dv + c] + k[i] * kv[c];
    }
}

/* CPUID leaf 1, ECX bit 29 (not every compiler's __builtin_cpu_supports knows "f16c") */
static int has_f16c(void) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1);
}

int qhx_avx2_supported(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
}

const qhx_kernel_set qhx_kernels_avx2 = {.name = "avx2", .matmul = avx2_matmul, .dot = qhx_avx2_dot, .axpy = qhx_avx2_axpy,
                                         .gemm = qhx_avx2_gemm, .delta_step = qhx_avx2_delta_step, .silu = qhx_avx2_silu,
                                         .supported = qhx_avx2_supported};
#endif
