/* AVX2 (the "avx2" set): W8 matrices with int16 activations, W4 ones with int8 activations
 * (kernels/q8.h). Int16 activations multiply whole with vpmaddwd against the weights widened to
 * int16 (16 products an instruction, the widening shared by a token pair); block sums are exact
 * integers, scaled once per 64 columns. The W8 layout (format/w8.h) puts a row group's block in
 * 128 consecutive bytes, so decode reads one sequential stream. Other dtypes go to the fp32 AVX2
 * kernels. */
#include "format/w4.h"
#include "format/w8.h"
#include "kernels/kernels.h"
#include "kernels/q8.h"

#ifdef QHX_HAVE_AVX2
#include "kernels/vec_avx2.h"
#include <string.h>

#define TARGET QV_TARGET

/* Bytes ahead of the block being read: far enough to cover memory latency at this stream's
 * rate, measured best on the 4B shape's matrices (bench/kernel_bench). */
#define PREFETCH 2048
/* Weights of a row block that stay in L2 while every token pair passes over them. */
#define L2_WEIGHTS (512 << 10)

/* 32 int32 (4 registers) -> 32 int8; the packs interleave 128-bit lanes, the permute restores the order */
TARGET static inline __m256i pack32(const __m256i r[4]) {
    return _mm256_permutevar8x32_epi32(_mm256_packs_epi16(_mm256_packs_epi32(r[0], r[1]), _mm256_packs_epi32(r[2], r[3])),
                                       _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* One block of 32: its max |x| and the 4 registers of values */
TARGET static inline float block_max(const float *x, __m256 v[4]) {
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 m = _mm256_setzero_ps();
    for (int i = 0; i < 4; i++) v[i] = _mm256_loadu_ps(x + 8 * i), m = _mm256_max_ps(m, _mm256_and_ps(v[i], absmask));
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    return _mm_cvtss_f32(_mm_max_ss(h, _mm_shuffle_ps(h, h, 1)));
}

/* qhx_q8_quantize_abs, 8 lanes at a time: the max is exact, 127 / max and the products are the
 * same fp32 operations, and vcvtps2dq rounds to nearest even as the scalar rounding does. */
TARGET static void round_q8(const float *x, size_t cols, const qhx_acts *a, size_t t) {
    int8_t *q = a->q + t * a->pad, *aq = a->aq + t * a->pad;
    float *s = a->s + t * (a->pad / QHX_Q8_BLOCK);
    for (size_t c0 = 0, b = 0; c0 < cols; c0 += QHX_Q8_BLOCK, b++) {
        if (cols - c0 < QHX_Q8_BLOCK) { /* the ragged last block */
            float tail[QHX_Q8_BLOCK] = {0};
            memcpy(tail, x + c0, sizeof(float) * (cols - c0));
            qhx_q8_quantize_abs(tail, QHX_Q8_BLOCK, q + c0, aq + c0, s + b);
            break;
        }
        __m256 v[4];
        const float mx = block_max(x + c0, v);
        const __m256 inv = _mm256_set1_ps(mx > 0 ? 127.0f / mx : 0.0f);
        s[b] = mx / 127.0f;
        __m256i r[4];
        for (int i = 0; i < 4; i++) r[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], inv));
        const __m256i p = pack32(r);
        _mm256_storeu_si256((__m256i *)(q + c0), p);
        _mm256_storeu_si256((__m256i *)(aq + c0), _mm256_abs_epi8(p));
    }
}

/* qhx_q16_quantize the same way (bit for bit) */
TARGET static void round_q16(const float *x, size_t cols, const qhx_acts *a, size_t t) {
    int16_t *v = a->v + t * a->pad;
    float *s = a->s + t * (a->pad / QHX_Q16_BLOCK);
    for (size_t c0 = 0, b = 0; c0 < cols; c0 += QHX_Q16_BLOCK, b++) {
        if (cols - c0 < QHX_Q16_BLOCK) { /* the ragged last block */
            float tail[QHX_Q16_BLOCK] = {0};
            memcpy(tail, x + c0, sizeof(float) * (cols - c0));
            qhx_q16_quantize(tail, QHX_Q16_BLOCK, v + c0, s + b);
            break;
        }
        __m256 f[8];
        const float m0 = block_max(x + c0, f), m1 = block_max(x + c0 + 32, f + 4), mx = m0 > m1 ? m0 : m1;
        const __m256 inv = _mm256_set1_ps(mx > 0 ? (float)QHX_Q16_MAX / mx : 0.0f);
        s[b] = mx / (float)QHX_Q16_MAX;
        __m256i r[8];
        for (int i = 0; i < 8; i++) r[i] = _mm256_cvtps_epi32(_mm256_mul_ps(f[i], inv));
        /* the pack interleaves 128-bit lanes; the permute restores the order */
        for (int i = 0; i < 4; i++)
            _mm256_storeu_si256((__m256i *)(v + c0 + 16 * i), _mm256_permute4x64_epi64(_mm256_packs_epi32(r[2 * i], r[2 * i + 1]), 0xd8));
    }
}

/* One row group (4 rows) x NT tokens (1 or 2; NT is a constant at each call, so the 4 x NT
 * accumulators stay in registers). Each row's two blocks of an activation block are widened to
 * 4 x 16 int16 once for both tokens, vpmaddwd multiplying 16 pairs into 8 int32 (|v w| sums of 8
 * stay under 2^26: exact). */
static inline __attribute__((always_inline)) TARGET void tile(const int8_t *group, size_t nb, const qhx_acts *X,
                                                               int t, int NT, int STREAM, float out[4][2]) {
    const size_t nbx16 = X->pad / QHX_Q16_BLOCK;
    __m256 acc[4][2];
    _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    for (size_t b = 0; b < nb; b++) {
        const int8_t *wb = group + b * QHX_W8_GROUP * QHX_W8_BLOCK;
        /* STREAM: one pass over the rows (one or two tokens: decode) takes the decode streams' fetch
         * (non-temporal, QHX_STREAM_AHEAD): W8 over 613 MB, 2 threads, 0.82-0.93 of a read loop
         * against 0.67-0.82 with the prefill's (Zen 5). A pass that comes back for more tokens
         * keeps the fetch into every level, where L2 holds the rows. */
        if (STREAM) {
            _mm_prefetch((const char *)wb + QHX_STREAM_AHEAD, _MM_HINT_NTA);
            _mm_prefetch((const char *)wb + QHX_STREAM_AHEAD + 64, _MM_HINT_NTA);
        } else {
            _mm_prefetch((const char *)wb + PREFETCH, _MM_HINT_T0);
            _mm_prefetch((const char *)wb + PREFETCH + 64, _MM_HINT_T0);
        }
        /* blocks b and b + 1 are one activation block of 64: their products one integer sum */
        if (b % 2) continue; /* taken with b - 1 */
        {
            const int two = b + 1 < nb;
            _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) {
                const int8_t *w = wb + i * QHX_W8_BLOCK, *w2 = w + QHX_W8_GROUP * QHX_W8_BLOCK;
                const __m256i w0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)w));
                const __m256i w1 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(w + 16)));
                const __m256i w2a = two ? _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)w2)) : _mm256_setzero_si256();
                const __m256i w2b = two ? _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(w2 + 16))) : _mm256_setzero_si256();
                _Pragma("GCC unroll 2") for (int j = 0; j < NT; j++) {
                    const int16_t *v = X->v + (size_t)(t + j) * X->pad + b * QHX_Q8_BLOCK;
                    __m256i p = _mm256_add_epi32(_mm256_madd_epi16(w0, _mm256_load_si256((const __m256i *)v)),
                                                 _mm256_madd_epi16(w1, _mm256_load_si256((const __m256i *)(v + 16))));
                    if (two)
                        p = _mm256_add_epi32(p, _mm256_add_epi32(_mm256_madd_epi16(w2a, _mm256_load_si256((const __m256i *)(v + 32))),
                                                                 _mm256_madd_epi16(w2b, _mm256_load_si256((const __m256i *)(v + 48)))));
                    acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_broadcast_ss(X->s + (size_t)(t + j) * nbx16 + b / 2), acc[i][j]);
                }
            }
        }
    }
    _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++)
        _Pragma("GCC unroll 2") for (int j = 0; j < NT; j++) out[i][j] = qv_reduce(acc[i][j]);
}

/* Rows in blocks whose weights stay in L2; over each block, token pairs, then its row groups. */
TARGET static qhx_status avx2_int_matmul(const qhx_tensor *W, const qhx_acts *X, int T, float *Y, int r0, int r1) {
    const size_t cols = (size_t)W->cols, nb = qhx_w8_padded_cols(cols) / QHX_W8_BLOCK, gbytes = qhx_w8_group_bytes(cols);
    int block = (int)(L2_WEIGHTS / gbytes) * QHX_W8_GROUP;
    if (block < QHX_W8_GROUP) block = QHX_W8_GROUP;
    const int stream = T <= 2; /* one pass over the rows */
    float out[4][2];
    for (int rb = r0; rb < r1; rb += block) {
        const int rb1 = r1 - rb < block ? r1 : rb + block;
        for (int t = 0; t < T; t += 2) {
            const int nt = T - t < 2 ? T - t : 2;
            for (int r = rb; r < rb1; r += QHX_W8_GROUP) {
                const int8_t *group = (const int8_t *)W->data + (size_t)r / QHX_W8_GROUP * gbytes;
                if (nt == 2) tile(group, nb, X, t, 2, stream, out);
                else tile(group, nb, X, t, 1, stream, out);
                const int nr = rb1 - r < QHX_W8_GROUP ? rb1 - r : QHX_W8_GROUP;
                for (int i = 0; i < nr; i++)
                    for (int j = 0; j < nt; j++) Y[(size_t)(t + j) * W->rows + r + i] = out[i][j] * W->scale[r + i];
            }
        }
    }
    return QHX_OK;
}

/* ---- W4 (format/w4.h), decode and prefill ----------------------------------------------------
 * int_vnni.c's scheme on 256 bits: a block's codes are two registers (rows 0-1, rows 2-3), and
 * vpmaddubsw (codes unsigned, activations signed; |products| <= 2 x 15 x 128, no saturation)
 * plus vpmaddwd stand in for vpdpbusd, so a block's sum is exact in one register. Four blocks fold into lanes
 * (row, block % 4), so the fp32 steps, and the results, are the scalar twin's. Two tokens at a
 * time share each block's load and nibble split. */

/* lanes of a, b summed pairwise: half of a fold of four */
TARGET static inline __m256i w4_half(__m256i a, __m256i b) {
    return _mm256_add_epi32(_mm256_unpacklo_epi32(a, b), _mm256_unpackhi_epi32(a, b));
}

/* codes (32 bytes: two rows' low or high nibbles done) x the 16 + 16 bytes at x: int16 pair sums */
TARGET static inline __m256i w4_dot16(__m256i lo, __m256i hi, const int8_t *x) {
    const __m256i xl = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)x));
    const __m256i xh = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(x + 16)));
    return _mm256_add_epi16(_mm256_maddubs_epi16(lo, xl), _mm256_maddubs_epi16(hi, xh));
}

/* One row group x NT (1 or 2) tokens from t: out[j] the 16 lanes (row, block % 4) of token t + j. */
TARGET static inline void w4_tile(const uint8_t *g, const uint16_t *ds, size_t nb, const qhx_acts *X, int t, int NT, float out[2][16]) {
    const __m256i m = _mm256_set1_epi8(15);
    const size_t pad = X->w4pad;
    __m256 acc[2][2] = {{_mm256_setzero_ps(), _mm256_setzero_ps()}, {_mm256_setzero_ps(), _mm256_setzero_ps()}};
    for (size_t u = 0; u < nb; u += QHX_W4_UNIT) {
        _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) __builtin_prefetch(g + (u + k) * QHX_W4_CODE_BYTES + PREFETCH, 0, 3);
        for (int p = 0; p < 2; p++) { /* rows 2p, 2p + 1 */
            __m256i half[2][2];
            _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
                const __m256i v = _mm256_loadu_si256((const __m256i *)(g + (u + k) * QHX_W4_CODE_BYTES + 32 * p));
                const __m256i lo = _mm256_and_si256(v, m), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m);
                const size_t c = (u + k) * QHX_W4_BLOCK;
                _Pragma("GCC unroll 2") for (int j = 0; j < NT; j++) {
                    const size_t o = (size_t)(t + j) * pad + c;
                    const __m256i d = _mm256_madd_epi16(w4_dot16(lo, hi, X->w4h + o), _mm256_set1_epi16(1));
                    if (k % 2) half[j][k / 2] = w4_half(half[j][k / 2], d);
                    else half[j][k / 2] = d;
                }
            }
            const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(ds + u * QHX_W4_GROUP + 8 * p)));
            _Pragma("GCC unroll 2") for (int j = 0; j < NT; j++) {
                const size_t nbj = (size_t)(t + j) * nb;
                const __m256i tot = _mm256_add_epi32(_mm256_unpacklo_epi64(half[j][0], half[j][1]), _mm256_unpackhi_epi64(half[j][0], half[j][1]));
                const __m256i corr = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(X->w4c + nbj + u)));
                const __m256 s = _mm256_broadcast_ps((const __m128 *)(X->w4s + nbj + u));
                acc[j][p] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(tot, corr)), _mm256_mul_ps(d, s), acc[j][p]);
            }
        }
    }
    _Pragma("GCC unroll 2") for (int j = 0; j < NT; j++) _mm256_storeu_ps(out[j], acc[j][0]), _mm256_storeu_ps(out[j] + 8, acc[j][1]);
}

TARGET static qhx_status avx2_w4_matmul(const qhx_tensor *W, const qhx_acts *X, int T, float *Y, int r0, int r1) {
    const size_t cols = (size_t)W->cols, nb = qhx_w4_blocks(cols), gbytes = qhx_w4_group_bytes(cols);
    for (int r = r0; r < r1; r += QHX_W4_GROUP) {
        const uint8_t *g = (const uint8_t *)W->data + (size_t)r / QHX_W4_GROUP * gbytes;
        const uint16_t *ds = (const uint16_t *)(g + nb * QHX_W4_CODE_BYTES);
        const int nr = r1 - r < QHX_W4_GROUP ? r1 - r : QHX_W4_GROUP;
        for (int t = 0; t < T; t += 2) {
            float a[2][16];
            const int nt = T - t < 2 ? T - t : 2;
            if (nt == 2) w4_tile(g, ds, nb, X, t, 2, a);
            else w4_tile(g, ds, nb, X, t, 1, a);
            for (int j = 0; j < nt; j++)
                for (int i = 0; i < nr; i++)
                    Y[(size_t)(t + j) * W->rows + r + i] = (a[j][4 * i] + a[j][4 * i + 1]) + (a[j][4 * i + 2] + a[j][4 * i + 3]);
        }
    }
    return QHX_OK;
}

const qhx_acts_ops qhx_acts_avx2_q16 = {.form = QHX_ACTS_Q16, .matmul = avx2_int_matmul, .decode = avx2_int_matmul, .matmul_w4 = avx2_w4_matmul,
                                        .round = round_q16, .round_q8 = round_q8};
#endif
