/* AVX-512 VNNI (the "avx512" set, the default here): W8 matrices with int16 activations, W4 ones
 * with int8 activations (kernels/q8.h). vpdpbusd multiplies 4
 * unsigned by 4 signed bytes and adds them into an int32 lane: 64 multiply-adds an instruction,
 * where AVX2 needs vpsignb + vpmaddubsw + vpmaddwd for 32. The weights are the signed operand, so
 * the activations go in biased to unsigned (aq = q + 128, kernels/q8.h) and 128 x the block's sum
 * of weights comes off again; block sums stay exact integers, scaled once per 32 columns, as in
 * the scalar twin. Int16 activations take two passes, their high and low bytes, into two sums over
 * the activation block (64 columns, two W8 blocks) that meet as 256 hi + lo before its one
 * scaling: exact, at half the int8 rate.
 *
 * Prefill packs 32 rows at a time (pack_block) so that one register holds 4 consecutive columns of
 * 16 rows: lanes are rows, a token's 4 activation bytes are one broadcast, and nothing is summed
 * across lanes until a row ends. Every token then passes over the packed rows while they sit in
 * L2. Decode streams the W8 layout once with int16 activations whole (vnni_w8_decode). */
#include "format/w4.h"
#include "format/w8.h"
#include "kernels/kernels.h"
#include "kernels/q8.h"

#ifdef QHX_HAVE_AVX512
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#define TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
#define INLINE static inline __attribute__((always_inline)) TARGET

#define LANES 16                     /* rows a register holds */
#define PANEL 32                     /* rows packed at once: two registers */
#define UNITS (QHX_W8_BLOCK / 4 + 1) /* a 16-row block: 8 column quads, then -128 x its row sums */
#define TOKENS 6                     /* W4 prefill: tokens per pass, 2 x 6 int32 + 2 x 6 fp32 accumulators */
#define W8_TOKENS 4                  /* W8's two byte passes: 2 x 2 x 4 int32 + 2 x 4 fp32 */
#define DTOKENS 4                    /* decode: tokens per pass over a row group (W8 16 accumulators, W4 8) */

/* qhx_q8_quantize, 16 lanes at a time, and the biased copy for vpdpbusd's unsigned operand. The max
 * is exact, 127 / max and the products are the same fp32 operations, and vcvtps2dq rounds to
 * nearest even as the scalar rounding does, so q is bit for bit the scalar one. */
TARGET static void round_q8(const float *x, size_t cols, const qhx_acts *a, size_t t) {
    int8_t *q = a->q + t * a->pad, *uq = a->aq + t * a->pad;
    float *s = a->s + t * (a->pad / QHX_Q8_BLOCK);
    const __m256i bias = _mm256_set1_epi8((char)0x80);
    for (size_t c0 = 0, b = 0; c0 < cols; c0 += QHX_Q8_BLOCK, b++) {
        __m256i p;
        if (cols - c0 < QHX_Q8_BLOCK) { /* the ragged last block */
            float tail[QHX_Q8_BLOCK] = {0};
            memcpy(tail, x + c0, sizeof(float) * (cols - c0));
            qhx_q8_quantize(tail, QHX_Q8_BLOCK, q + c0, s + b);
            p = _mm256_loadu_si256((const __m256i *)(q + c0));
        } else {
            const __m512 v0 = _mm512_loadu_ps(x + c0), v1 = _mm512_loadu_ps(x + c0 + 16);
            const float mx = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
            const __m512 inv = _mm512_set1_ps(mx > 0 ? 127.0f / mx : 0.0f);
            s[b] = mx / 127.0f;
            p = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v0, inv)))),
                                        _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v1, inv))), 1);
            _mm256_storeu_si256((__m256i *)(q + c0), p);
        }
        _mm256_storeu_si256((__m256i *)(uq + c0), _mm256_xor_si256(p, bias));
    }
}

/* 16 int16-range values to their high and low bytes (qhx_q16_split), each + 128 */
INLINE void split16(__m512i v, __m128i *hi, __m128i *lo) {
    const __m512i h = _mm512_srai_epi32(_mm512_add_epi32(v, _mm512_set1_epi32(128)), 8);
    const __m128i bias = _mm_set1_epi8((char)0x80);
    *hi = _mm_xor_si128(_mm512_cvtepi32_epi8(h), bias);
    *lo = _mm_xor_si128(_mm512_cvtepi32_epi8(_mm512_sub_epi32(v, _mm512_slli_epi32(h, 8))), bias);
}

/* qhx_q16_quantize the same way (bit for bit), and both bytes biased for vpdpbusd */
TARGET static void round_q16(const float *x, size_t cols, const qhx_acts *a, size_t t) {
    int16_t *v = a->v + t * a->pad;
    int8_t *uhi = a->aq + t * a->pad, *ulo = a->laq + t * a->pad;
    float *s = a->s + t * (a->pad / QHX_Q16_BLOCK);
    for (size_t c0 = 0, b = 0; c0 < cols; c0 += QHX_Q16_BLOCK, b++) {
        __m512i r[4];
        if (cols - c0 < QHX_Q16_BLOCK) { /* the ragged last block */
            float tail[QHX_Q16_BLOCK] = {0};
            memcpy(tail, x + c0, sizeof(float) * (cols - c0));
            qhx_q16_quantize(tail, QHX_Q16_BLOCK, v + c0, s + b);
            for (int i = 0; i < 4; i++) r[i] = _mm512_cvtepi16_epi32(_mm256_loadu_si256((const __m256i *)(v + c0 + 16 * i)));
        } else {
            __m512 f[4], m = _mm512_setzero_ps();
            for (int i = 0; i < 4; i++) f[i] = _mm512_loadu_ps(x + c0 + 16 * i), m = _mm512_max_ps(m, _mm512_abs_ps(f[i]));
            const float mx = _mm512_reduce_max_ps(m);
            const __m512 inv = _mm512_set1_ps(mx > 0 ? (float)QHX_Q16_MAX / mx : 0.0f);
            s[b] = mx / (float)QHX_Q16_MAX;
            for (int i = 0; i < 4; i++) {
                r[i] = _mm512_cvtps_epi32(_mm512_mul_ps(f[i], inv));
                _mm256_storeu_si256((__m256i *)(v + c0 + 16 * i), _mm512_cvtepi32_epi16(r[i]));
            }
        }
        for (int i = 0; i < 4; i++) {
            __m128i h, l;
            split16(r[i], &h, &l);
            _mm_storeu_si128((__m128i *)(uhi + c0 + 16 * i), h);
            _mm_storeu_si128((__m128i *)(ulo + c0 + 16 * i), l);
        }
    }
}

/* W8 weights in the order vpdpbusd multiplies: for 16 rows and one 32-column block, unit k lane i
 * (a dword) = row i's bytes 4k..4k+3, k = 0..7, each unit one register. In the W8 layout
 * (format/w8.h) a row group's block is 4 rows x 8 dwords, so this is a 16 x 8 dword transpose.
 * Column block b of the 16 rows from group g0 on; groups at or past `groups` read as zero rows. */
INLINE void vnni_pack16(const int8_t *data, size_t gbytes, size_t g0, size_t groups, size_t b, __m512i out[8]) {
    /* x[G][h] lane 4k + i = row i of group G, dword 4h + k */
    const __m512i lo = _mm512_setr_epi32(0, 8, 16, 24, 1, 9, 17, 25, 2, 10, 18, 26, 3, 11, 19, 27);
    const __m512i hi = _mm512_add_epi32(lo, _mm512_set1_epi32(4));
    __m512i x[4][2];
    _Pragma("GCC unroll 4") for (int G = 0; G < 4; G++) {
        if (g0 + G < groups) {
            const int8_t *p = data + (g0 + G) * gbytes + b * QHX_W8_GROUP * QHX_W8_BLOCK;
            const __m512i a = _mm512_loadu_si512(p), c = _mm512_loadu_si512(p + 64);
            x[G][0] = _mm512_permutex2var_epi32(a, lo, c);
            x[G][1] = _mm512_permutex2var_epi32(a, hi, c);
        } else {
            x[G][0] = x[G][1] = _mm512_setzero_si512();
        }
    }
    /* unit 4h + k: 128-bit chunk k of x[0..3][h], a 4 x 4 transpose of chunks */
    _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
        const __m512i t0 = _mm512_shuffle_i32x4(x[0][h], x[1][h], 0x44), t1 = _mm512_shuffle_i32x4(x[0][h], x[1][h], 0xee);
        const __m512i t2 = _mm512_shuffle_i32x4(x[2][h], x[3][h], 0x44), t3 = _mm512_shuffle_i32x4(x[2][h], x[3][h], 0xee);
        out[4 * h + 0] = _mm512_shuffle_i32x4(t0, t2, 0x88);
        out[4 * h + 1] = _mm512_shuffle_i32x4(t0, t2, 0xdd);
        out[4 * h + 2] = _mm512_shuffle_i32x4(t1, t3, 0x88);
        out[4 * h + 3] = _mm512_shuffle_i32x4(t1, t3, 0xdd);
    }
}

/* Column block b of 16 rows (vnni_pack16) into UNITS registers: the 8 column quads, then
 * -128 x each row's block sum. */
INLINE void pack_block(const int8_t *data, size_t gbytes, size_t g0, size_t groups, size_t b, __m512i *out) {
    vnni_pack16(data, gbytes, g0, groups, b, out);
    __m512i sum = _mm512_setzero_si512();
    const __m512i ones = _mm512_set1_epi8(1);
    _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++) sum = _mm512_dpbusd_epi32(sum, ones, out[k]);
    out[8] = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sum, 7));
}

/* The W4 prefill's packed block: W8's units, then its 16 rows' scales (fp32 bits). */
#define W4_UNITS (UNITS + 1)

/* Where the W4 prefill's panel keeps block b: the blocks of each of tile()'s four passes one after
 * another, so every pass reads the panel in order. */
INLINE size_t w4_slot(size_t b, size_t nb) { return b % 4 * ((nb + 3) / 4) + b / 4; }

/* NR (1 or 2) packed 16-row registers x NT tokens from t, over the nb blocks; writes rows
 * row0 .. row0 + nvalid - 1 of those tokens. SPLIT: int16 activations, a second pass for the low
 * bytes. W4: the panel holds W4 blocks (W4_UNITS a block, each scaled by its rows' scales), taken
 * in four passes b = j, j + 4, ... whose sums meet as (p0 + p1) + (p2 + p3), the twin's order;
 * W8: one pass, the rows' scales last. NR, NT, SPLIT and W4 are constants at each call, so the
 * accumulators stay in registers (SPLIT, 4 tokens: 8 + 8 int32 and 8 fp32 of the 32; W4, 6 tokens:
 * 12 + 12, where 4 tokens left the weight loads a third of the loads and ran 0.92x as fast). */
INLINE void tile(const __m512i *panel, size_t nb, const qhx_acts *X, int t, int NR, int NT, int SPLIT, int W4, const qhx_tensor *W,
                 int row0, int nvalid, float *Y) {
    const size_t nbx = X->pad / (SPLIT ? QHX_Q16_BLOCK : QHX_Q8_BLOCK), units = W4 ? W4_UNITS : UNITS;
    const int passes = W4 ? 4 : 1;
    __m512 part[4][TOKENS][2];
    for (int p = 0; p < passes; p++) {
        __m512 acc[TOKENS][2];
        _Pragma("GCC unroll 6") for (int j = 0; j < NT; j++) acc[j][0] = acc[j][1] = _mm512_setzero_ps();
        __m512i d[TOKENS][2], e[TOKENS][2];
        _Pragma("GCC unroll 6") for (int j = 0; j < NT; j++) d[j][0] = d[j][1] = e[j][0] = e[j][1] = _mm512_setzero_si512();
        for (size_t b = (size_t)p; b < nb; b += (size_t)passes) {
            const __m512i *pb = panel + (W4 ? w4_slot(b, nb) : b) * 2 * units;
            /* SPLIT: the int16 block of 64 columns is two W8 blocks, their sums one integer */
            const int first = !SPLIT || b % 2 == 0, last = !SPLIT || b % 2 == 1 || b + 1 == nb;
            _Pragma("GCC unroll 6") for (int j = 0; j < NT; j++)
                _Pragma("GCC unroll 2") for (int i = 0; i < NR; i++) {
                    const __m512i corr = pb[i * units + UNITS - 1];
                    d[j][i] = first ? corr : _mm512_add_epi32(d[j][i], corr);
                    if (SPLIT) e[j][i] = first ? corr : _mm512_add_epi32(e[j][i], corr);
                }
            _Pragma("GCC unroll 8") for (int k = 0; k < UNITS - 1; k++) {
                const __m512i w0 = pb[k], w1 = pb[units + k];
                _Pragma("GCC unroll 6") for (int j = 0; j < NT; j++) {
                    const size_t o = (size_t)(t + j) * X->pad + b * QHX_Q8_BLOCK + 4 * k;
                    int32_t quad;
                    memcpy(&quad, X->aq + o, 4);
                    const __m512i a = _mm512_set1_epi32(quad);
                    d[j][0] = _mm512_dpbusd_epi32(d[j][0], a, w0);
                    if (NR == 2) d[j][1] = _mm512_dpbusd_epi32(d[j][1], a, w1);
                    if (SPLIT) {
                        memcpy(&quad, X->laq + o, 4);
                        const __m512i l = _mm512_set1_epi32(quad);
                        e[j][0] = _mm512_dpbusd_epi32(e[j][0], l, w0);
                        if (NR == 2) e[j][1] = _mm512_dpbusd_epi32(e[j][1], l, w1);
                    }
                }
            }
            if (!last) continue;
            _Pragma("GCC unroll 6") for (int j = 0; j < NT; j++) {
                const __m512 sc = _mm512_set1_ps(X->s[(size_t)(t + j) * nbx + (SPLIT ? b / 2 : b)]);
                _Pragma("GCC unroll 2") for (int i = 0; i < NR; i++) {
                    const __m512i sum = SPLIT ? _mm512_add_epi32(_mm512_slli_epi32(d[j][i], 8), e[j][i]) : d[j][i];
                    const __m512 s = W4 ? _mm512_mul_ps(_mm512_castsi512_ps(pb[i * units + UNITS]), sc) : sc;
                    acc[j][i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), s, acc[j][i]);
                }
            }
        }
        _Pragma("GCC unroll 6") for (int j = 0; j < NT; j++) part[p][j][0] = acc[j][0], part[p][j][1] = acc[j][1];
    }
    _Pragma("GCC unroll 2") for (int i = 0; i < NR; i++) {
        const int n = nvalid - i * LANES < LANES ? nvalid - i * LANES : LANES;
        if (n <= 0) break;
        const __mmask16 m = (__mmask16)((1u << n) - 1);
        const __m512 sw = W4 ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m, W->scale + row0 + i * LANES);
        _Pragma("GCC unroll 6") for (int j = 0; j < NT; j++) {
            const __m512 y = W4 ? _mm512_add_ps(_mm512_add_ps(part[0][j][i], part[1][j][i]), _mm512_add_ps(part[2][j][i], part[3][j][i]))
                                : _mm512_mul_ps(part[0][j][i], sw);
            _mm512_mask_storeu_ps(Y + (size_t)(t + j) * W->rows + row0 + i * LANES, m, y);
        }
    }
}

/* T tokens over the panel, NMAX (W8_TOKENS or TOKENS) a pass */
#define TOKEN_TAILS(NR, SPLIT, W4, NMAX)                                                                               \
    for (int t = 0; t < T; t += NMAX) {                                                                                \
        switch (T - t < NMAX ? T - t : NMAX) {                                                                         \
        case 1: tile(panel, nb, X, t, NR, 1, SPLIT, W4, W, row0, nvalid, Y); break;                                    \
        case 2: tile(panel, nb, X, t, NR, 2, SPLIT, W4, W, row0, nvalid, Y); break;                                    \
        case 3: tile(panel, nb, X, t, NR, 3, SPLIT, W4, W, row0, nvalid, Y); break;                                    \
        case 4: tile(panel, nb, X, t, NR, 4, SPLIT, W4, W, row0, nvalid, Y); break;                                    \
        case 5: tile(panel, nb, X, t, NR, 5 < NMAX ? 5 : NMAX, SPLIT, W4, W, row0, nvalid, Y); break;                  \
        default: tile(panel, nb, X, t, NR, NMAX, SPLIT, W4, W, row0, nvalid, Y); break;                                \
        }                                                                                                              \
    }

TARGET static qhx_status vnni_int_matmul(const qhx_tensor *W, const qhx_acts *X, int T, float *Y, int r0, int r1) {
    const size_t cols = (size_t)W->cols, nb = qhx_w8_padded_cols(cols) / QHX_W8_BLOCK, gbytes = qhx_w8_group_bytes(cols);
    const size_t groups = ((size_t)W->rows + QHX_W8_GROUP - 1) / QHX_W8_GROUP;
    __m512i *panel = aligned_alloc(64, nb * 2 * UNITS * sizeof(__m512i));
    if (!panel) return QHX_ERR_NOMEM;
    for (int row0 = r0; row0 < r1; row0 += PANEL) {
        const int nvalid = r1 - row0 < PANEL ? r1 - row0 : PANEL, nr = nvalid > LANES ? 2 : 1;
        for (size_t b = 0; b < nb; b++)
            for (int i = 0; i < nr; i++)
                pack_block(W->data, gbytes, (size_t)(row0 + i * LANES) / QHX_W8_GROUP, groups, b, panel + (b * 2 + i) * UNITS);
        if (nr == 2) TOKEN_TAILS(2, 1, 0, W8_TOKENS)
        else TOKEN_TAILS(1, 1, 0, W8_TOKENS)
    }
    free(panel);
    return QHX_OK;
}

/* Decode with int16 activations: the W8 layout streamed once, as the fp32 kernel streams it, each
 * row's block of 32 widened to int16 (vpmovsxbw) and multiplied with the token's int16 values by
 * vpmaddwd into 16 exact pair sums; the second block of an activation block of 64 adds into the
 * same sums (vpdpwssd), and the 64 columns are scaled once into fp32 lanes. A row's block costs one
 * widening and one product; the conversion and multiply-add, once per 64 columns, are what bound
 * the kernel over blocks of 32 (Zen 5, one thread: 0.80 of a read loop against 0.85 over 64; in
 * the model +5-6 %; bench/README.md in git history, 2026-12-05). Each token alone, so results do not depend on T.
 * One token fetches nothing ahead: the hardware's streamer alone ran the 4B layers' matrices
 * 1.07x faster on two threads and 1.12x on one than the 8 KiB non-temporal fetch the other streams
 * take. Several tokens (a batched step) keep it: without it 4 sessions' steps fell from 3.4x one
 * session's tok/s to 2.0x (bench/README.md, "Decode against the read limit"). */
INLINE __m512i w8_widen(const int8_t *p) { return _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)p)); }

/* NT tokens (1-4) over one row group: each block widened once for all of them, each token's
 * accumulators stepped exactly as it alone steps them (so a batch gives each token its solo result) */
INLINE void w8_decode_tokens(const int8_t *g, size_t nb, const qhx_acts *X, int t0, const int NT, __m512 acc[DTOKENS][QHX_W8_GROUP]) {
    enum { GB = QHX_W8_GROUP * QHX_W8_BLOCK }; /* bytes of a row group's block */
    const size_t nbx = X->pad / QHX_Q16_BLOCK, pairs = nb / 2;
    const int16_t *v[DTOKENS];
    const float *s[DTOKENS];
    _Pragma("GCC unroll 4") for (int t = 0; t < NT; t++) {
        v[t] = X->v + (size_t)(t0 + t) * X->pad, s[t] = X->s + (size_t)(t0 + t) * nbx;
        _Pragma("GCC unroll 4") for (int i = 0; i < QHX_W8_GROUP; i++) acc[t][i] = _mm512_setzero_ps();
    }
    for (size_t p = 0; p < pairs; p++) {
        const int8_t *wb = g + 2 * p * GB;
        if (NT > 1) _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) _mm_prefetch((const char *)wb + QHX_STREAM_AHEAD + 64 * k, _MM_HINT_NTA);
        __m512i w0[QHX_W8_GROUP], w1[QHX_W8_GROUP];
        _Pragma("GCC unroll 4") for (int i = 0; i < QHX_W8_GROUP; i++) w0[i] = w8_widen(wb + i * QHX_W8_BLOCK), w1[i] = w8_widen(wb + GB + i * QHX_W8_BLOCK);
        _Pragma("GCC unroll 4") for (int t = 0; t < NT; t++) {
            const __m512i x0 = _mm512_load_si512(v[t] + p * QHX_Q16_BLOCK), x1 = _mm512_load_si512(v[t] + p * QHX_Q16_BLOCK + 32);
            const __m512 sc = _mm512_set1_ps(s[t][p]);
            _Pragma("GCC unroll 4") for (int i = 0; i < QHX_W8_GROUP; i++) {
                const __m512i sum = _mm512_dpwssd_epi32(_mm512_madd_epi16(w0[i], x0), w1[i], x1);
                acc[t][i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), sc, acc[t][i]);
            }
        }
    }
    if (nb % 2) { /* a last block of 32 alone: the first half of its activation block */
        const int8_t *wb = g + (nb - 1) * GB;
        __m512i w0[QHX_W8_GROUP];
        _Pragma("GCC unroll 4") for (int i = 0; i < QHX_W8_GROUP; i++) w0[i] = w8_widen(wb + i * QHX_W8_BLOCK);
        _Pragma("GCC unroll 4") for (int t = 0; t < NT; t++) {
            const __m512i x0 = _mm512_load_si512(v[t] + pairs * QHX_Q16_BLOCK);
            const __m512 sc = _mm512_set1_ps(s[t][pairs]);
            _Pragma("GCC unroll 4") for (int i = 0; i < QHX_W8_GROUP; i++)
                acc[t][i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_madd_epi16(w0[i], x0)), sc, acc[t][i]);
        }
    }
}

TARGET static qhx_status vnni_w8_decode(const qhx_tensor *W, const qhx_acts *X, int T, float *Y, int r0, int r1) {
    const size_t cols = (size_t)W->cols, nb = qhx_w8_padded_cols(cols) / QHX_W8_BLOCK, gbytes = qhx_w8_group_bytes(cols);
    for (int r = r0; r < r1; r += QHX_W8_GROUP) {
        const int8_t *g = (const int8_t *)W->data + (size_t)r / QHX_W8_GROUP * gbytes;
        const int nr = r1 - r < QHX_W8_GROUP ? r1 - r : QHX_W8_GROUP;
        for (int t0 = 0; t0 < T; t0 += DTOKENS) {
            const int nt = T - t0 < DTOKENS ? T - t0 : DTOKENS;
            __m512 acc[DTOKENS][QHX_W8_GROUP];
            switch (nt) {
            case 4: w8_decode_tokens(g, nb, X, t0, 4, acc); break;
            case 3: w8_decode_tokens(g, nb, X, t0, 3, acc); break;
            case 2: w8_decode_tokens(g, nb, X, t0, 2, acc); break;
            default: w8_decode_tokens(g, nb, X, t0, 1, acc); break;
            }
            for (int t = 0; t < nt; t++)
                for (int i = 0; i < nr; i++) Y[(size_t)(t0 + t) * W->rows + r + i] = _mm512_reduce_add_ps(acc[t][i]) * W->scale[r + i];
        }
    }
    return QHX_OK;
}

/* ---- W4 (format/w4.h), decode and prefill ----------------------------------------------------
 * A block of a row group is one register of codes: 128-bit lane i is row i's 16 bytes, their low
 * nibbles columns 0-15, their high nibbles columns 16-31. Four blocks' registers are transposed
 * by dwords within each lane (transpose4), so register m holds in lane i, dword j, row i's columns
 * 4m..4m+3 of block j; with the codes as vpdpbusd's unsigned operand and the token's activations
 * transposed the same way once a matmul (w4_prep: 16 bytes, dword j from block j, broadcast to
 * the 4 rows), eight vpdpbusd leave in lane 4i + j row i's whole sum of block j, the
 * order the layout keeps its scales in: one fp16 load scales 16 sums. The transpose is the
 * codes', shared by every token of a decode step. The codes' offset of 8 comes off as 8 x the
 * block's activation sum (w4c), where each sum starts. Integer sums are exact, so the fp32 steps
 * are the scalar twin's, bit for bit. */

/* within each 128-bit lane, the 4 x 4 dwords of r[0..3] transposed: r[m] dword j = old r[j] dword m */
INLINE void transpose4(__m512i r[4]) {
    const __m512i t0 = _mm512_unpacklo_epi32(r[0], r[1]), t1 = _mm512_unpackhi_epi32(r[0], r[1]);
    const __m512i t2 = _mm512_unpacklo_epi32(r[2], r[3]), t3 = _mm512_unpackhi_epi32(r[2], r[3]);
    r[0] = _mm512_unpacklo_epi64(t0, t2), r[1] = _mm512_unpackhi_epi64(t0, t2);
    r[2] = _mm512_unpacklo_epi64(t1, t3), r[3] = _mm512_unpackhi_epi64(t1, t3);
}

/* Row t's W4 activations (w4h) into w4t, a unit (4 blocks, 128 bytes) at a time: 16 bytes for
 * each of the 4 column quads of the blocks' first halves, dword j from block j, then the same for
 * their second halves; after them, -w4c a block (the codes' offset), where a block's sum starts. */
TARGET static void w4_prep(const qhx_acts *X, size_t t) {
    const size_t nb = X->w4pad / QHX_W4_BLOCK;
    const int8_t *h = X->w4h + t * X->w4pad;
    int8_t *o = X->w4t + t * X->w4tstride;
    int32_t *neg = (int32_t *)(o + X->w4pad);
    for (size_t b = 0; b < nb; b++) neg[b] = -X->w4c[t * nb + b];
    const __m512i lo = _mm512_setr_epi64(0, 1, 4, 5, 8, 9, 12, 13), hi = _mm512_setr_epi64(2, 3, 6, 7, 10, 11, 14, 15);
    const __m512i tr = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    for (size_t u = 0; u < nb; u += QHX_W4_UNIT) {
        const __m512i a = _mm512_loadu_si512(h + u * QHX_W4_BLOCK), b = _mm512_loadu_si512(h + u * QHX_W4_BLOCK + 64);
        _mm512_storeu_si512(o + u * QHX_W4_BLOCK, _mm512_permutexvar_epi32(tr, _mm512_permutex2var_epi64(a, lo, b)));
        _mm512_storeu_si512(o + u * QHX_W4_BLOCK + 64, _mm512_permutexvar_epi32(tr, _mm512_permutex2var_epi64(a, hi, b)));
    }
}

/* Prefetch: two groups are read side by side, so a fixed distance ahead of each cursor lands in
 * the other group (or the second group's start goes unfetched). What is fetched is what the pair
 * reads W4_AHEAD blocks later, codes and scales, in the next pair once this one runs out. Against
 * 4096 bytes ahead of each cursor, kernel_bench measured one thread 1.2-1.5x faster. The fetches
 * are non-temporal (each line is read once, so it need not displace L2). Over 576 MB, 2 threads,
 * each distance alternated 21 times with a plain read loop in one
 * process: 0.94-0.98 of the loop 40 blocks (2.5 KiB) ahead, 0.88-0.93 at 32, 0.90-0.94 at 48,
 * against 0.81-0.87 for 64 into every level, at 58-65 GB/s (bench/README.md in git history, 2026-12-03). */
#define W4_AHEAD 40

INLINE __m512i bcast16(const int8_t *p) { return _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)p)); }


/* NT tokens (1-4) over NG (1 or 2) row groups: per group and token the 16 lanes of (row,
 * block % 4) accumulators. Each group's codes are transposed and unpacked once for every token
 * (w4t: the tokens' activations transposed likewise), and each token's activations loaded once for both
 * groups (a 4-token step: 1.15-1.2x faster than a load per group); a token's sums and
 * accumulation are what it alone gets. */
INLINE void w4_tokens(const uint8_t *g, size_t gbytes, size_t nb, int NG, const int NT, const qhx_acts *X, int t0, __m512 acc[DTOKENS][2]) {
    const __m512i m = _mm512_set1_epi8(15);
    const uint16_t *ds[2] = {(const uint16_t *)(g + nb * QHX_W4_CODE_BYTES), (const uint16_t *)(g + gbytes + nb * QHX_W4_CODE_BYTES)};
    const int8_t *h[DTOKENS];
    const int32_t *n8[DTOKENS];
    const float *sx[DTOKENS];
    _Pragma("GCC unroll 4") for (int t = 0; t < NT; t++) {
        h[t] = X->w4t + (size_t)(t0 + t) * X->w4tstride, n8[t] = (const int32_t *)(h[t] + X->w4pad), sx[t] = X->w4s + (size_t)(t0 + t) * nb;
        acc[t][0] = acc[t][1] = _mm512_setzero_ps();
    }
    for (size_t u = 0; u < nb; u += QHX_W4_UNIT) {
        const size_t ahead = u + W4_AHEAD, a = ahead < nb ? ahead : ahead - nb;
        const uint8_t *pf = (ahead < nb ? g : g + 2 * gbytes) + a * QHX_W4_CODE_BYTES; /* its codes; its scales: */
        const uint8_t *pfd = pf + (nb - a) * QHX_W4_CODE_BYTES + a / QHX_W4_UNIT * QHX_W4_UNIT * QHX_W4_GROUP * 2;
        __m512i lo[2][4], hi[2][4];
        __m512 d[2];
        _Pragma("GCC unroll 2") for (int q = 0; q < NG; q++) {
            __builtin_prefetch(pfd + q * gbytes, 0, 0);
            __m512i v[4];
            _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
                __builtin_prefetch(pf + q * gbytes + k * QHX_W4_CODE_BYTES, 0, 0);
                v[k] = _mm512_loadu_si512(g + q * gbytes + (u + k) * QHX_W4_CODE_BYTES);
            }
            transpose4(v);
            _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++)
                lo[q][k] = _mm512_and_si512(v[k], m), hi[q][k] = _mm512_and_si512(_mm512_srli_epi16(v[k], 4), m);
            d[q] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(ds[q] + u * QHX_W4_GROUP)));
        }
        /* a token's activations, loaded once for both groups */
        _Pragma("GCC unroll 4") for (int t = 0; t < NT; t++) {
            const int8_t *x = h[t] + u * QHX_W4_BLOCK;
            const __m512i start = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(n8[t] + u))); /* -8 x the activations' sums */
            __m512i sum[2] = {start, start};
            _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
                const __m512i xa = bcast16(x + 16 * k);
                _Pragma("GCC unroll 2") for (int q = 0; q < NG; q++) sum[q] = _mm512_dpbusd_epi32(sum[q], lo[q][k], xa);
            }
            _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
                const __m512i xa = bcast16(x + 64 + 16 * k);
                _Pragma("GCC unroll 2") for (int q = 0; q < NG; q++) sum[q] = _mm512_dpbusd_epi32(sum[q], hi[q][k], xa);
            }
            const __m512 s = _mm512_broadcast_f32x4(_mm_loadu_ps(sx[t] + u));
            _Pragma("GCC unroll 2") for (int q = 0; q < NG; q++)
                acc[t][q] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[q]), _mm512_mul_ps(d[q], s), acc[t][q]);
        }
    }
}

/* rows r .. r + nr - 1 (nr <= 8) of token t from the accumulators */
INLINE void w4_store(const __m512 acc[2], int nr, float *y) {
    float a[32];
    _mm512_storeu_ps(a, acc[0]);
    _mm512_storeu_ps(a + 16, acc[1]);
    for (int i = 0; i < nr; i++) y[i] = (a[4 * i] + a[4 * i + 1]) + (a[4 * i + 2] + a[4 * i + 3]);
}

/* Prefill (more than QHX_DECODE_MAX_T tokens): W4 blocks unpacked to signed bytes q - 8 in W8's
 * block order and packed as the W8 prefill packs them (rows in lanes), so every token passes over
 * 32 rows at a time while they sit in L2. A packed block carries its 16 rows' scales as a tenth
 * unit. The blocks go in four passes, b = j, j + 4, ..., one accumulator per pass, which is the
 * twin's acc[b % 4]: the results stay the twin's bit for bit, for every T. */

INLINE void w4_pack_block(const uint8_t *data, size_t gbytes, size_t nb, size_t g0, size_t groups, size_t b, __m512i *out) {
    int8_t tmp[4 * QHX_W8_GROUP * QHX_W8_BLOCK];
    uint16_t dh[16];
    const __m512i m = _mm512_set1_epi8(15), eight = _mm512_set1_epi8(8);
    const __m512i i0 = _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11), i1 = _mm512_setr_epi64(4, 5, 12, 13, 6, 7, 14, 15);
    for (size_t G = 0; G < 4; G++) {
        if (g0 + G >= groups) {
            memset(tmp + G * 128, 0, 128);
            memset(dh + 4 * G, 0, 8);
            continue;
        }
        const uint8_t *g = data + (g0 + G) * gbytes;
        const __m512i v = _mm512_loadu_si512(g + b * QHX_W4_CODE_BYTES);
        const __m512i lo = _mm512_sub_epi8(_mm512_and_si512(v, m), eight);
        const __m512i hi = _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(v, 4), m), eight);
        _mm512_storeu_si512(tmp + G * 128, _mm512_permutex2var_epi64(lo, i0, hi));
        _mm512_storeu_si512(tmp + G * 128 + 64, _mm512_permutex2var_epi64(lo, i1, hi));
        const uint16_t *ds = (const uint16_t *)(g + nb * QHX_W4_CODE_BYTES);
        for (int i = 0; i < 4; i++) dh[4 * G + i] = ds[b / 4 * 16 + i * 4 + b % 4];
    }
    pack_block(tmp, 128, 0, 4, 0, out);
    out[UNITS] = _mm512_castps_si512(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)dh)));
}

TARGET static qhx_status vnni_w4_prefill(const qhx_tensor *W, const qhx_acts *X, int T, float *Y, int r0, int r1) {
    /* nb: the blocks holding columns (the layout's padding blocks are zero: skipped, as the twin does) */
    const size_t cols = (size_t)W->cols, nbw = qhx_w4_blocks(cols), nb = X->pad / QHX_Q8_BLOCK, gbytes = qhx_w4_group_bytes(cols);
    const size_t groups = ((size_t)W->rows + QHX_W4_GROUP - 1) / QHX_W4_GROUP;
    __m512i *panel = aligned_alloc(64, qhx_round_up(nb, 4) * 2 * W4_UNITS * sizeof(__m512i));
    if (!panel) return QHX_ERR_NOMEM;
    for (int row0 = r0; row0 < r1; row0 += PANEL) {
        const int nvalid = r1 - row0 < PANEL ? r1 - row0 : PANEL, nr = nvalid > LANES ? 2 : 1;
        for (size_t b = 0; b < nb; b++)
            for (int i = 0; i < nr; i++)
                w4_pack_block(W->data, gbytes, nbw, (size_t)(row0 + i * LANES) / QHX_W4_GROUP, groups, b, panel + (w4_slot(b, nb) * 2 + i) * W4_UNITS);
        if (nr == 2) TOKEN_TAILS(2, 0, 1, TOKENS)
        else TOKEN_TAILS(1, 0, 1, TOKENS)
    }
    free(panel);
    return QHX_OK;
}

TARGET static qhx_status vnni_w4_matmul(const qhx_tensor *W, const qhx_acts *X, int T, float *Y, int r0, int r1) {
    if (T > QHX_DECODE_MAX_T) return vnni_w4_prefill(W, X, T, Y, r0, r1);
    const size_t cols = (size_t)W->cols, nb = qhx_w4_blocks(cols), gbytes = qhx_w4_group_bytes(cols);
    for (int r = r0; r < r1; r += 2 * QHX_W4_GROUP) {
        const uint8_t *g = (const uint8_t *)W->data + (size_t)r / QHX_W4_GROUP * gbytes;
        const int nr = r1 - r < 2 * QHX_W4_GROUP ? r1 - r : 2 * QHX_W4_GROUP;
        for (int t0 = 0; t0 < T; t0 += DTOKENS) {
            const int nt = T - t0 < DTOKENS ? T - t0 : DTOKENS, ng = nr > QHX_W4_GROUP ? 2 : 1;
            __m512 acc[DTOKENS][2];
#define W4_NT(NG) (nt == 4 ? w4_tokens(g, gbytes, nb, NG, 4, X, t0, acc) : nt == 3 ? w4_tokens(g, gbytes, nb, NG, 3, X, t0, acc) \
                   : nt == 2 ? w4_tokens(g, gbytes, nb, NG, 2, X, t0, acc) : w4_tokens(g, gbytes, nb, NG, 1, X, t0, acc))
            if (ng == 2) W4_NT(2);
            else W4_NT(1);
#undef W4_NT
            for (int t = 0; t < nt; t++) w4_store(acc[t], nr, Y + (size_t)(t0 + t) * W->rows + r);
        }
    }
    return QHX_OK;
}

const qhx_acts_ops qhx_acts_vnni_q16 = {.form = QHX_ACTS_Q16, .matmul = vnni_int_matmul, .decode = vnni_w8_decode,
                                        .matmul_w4 = vnni_w4_matmul, .round = round_q16, .round_q8 = round_q8, .w4_prep = w4_prep};
#endif
