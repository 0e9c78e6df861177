/* Armv8.2 dot product (sdot), the "neon" set where the CPU has it: W8 matrices with int16
 * activations, W4 ones with int8 activations (kernels/q8.h). sdot multiplies 4
 * signed bytes by 4 signed bytes into an int32 lane: 16 products an instruction. Int16 activations
 * go as their high and low bytes (qhx_q16_split, both signed: sdot needs no bias) in two passes
 * whose sums meet as 256 hi + lo: exact. Each 32-column block of a W8 row group (4 rows in 128
 * consecutive bytes, format/w8.h) gives 4 rows' int32 sums at once (pairwise adds put the rows in
 * the lanes); the two W8 blocks of an int16 block of 64 are summed as integers, and each
 * activation block's scaling runs as the scalar twin's does, one fp32 multiply and one add per row
 * and block: the results are the twin's bit for bit. Decode goes through the same kernel, a token
 * at a time. This file alone is
 * compiled for armv8.2-a+dotprod; the sets that call it need QHX_CPU_NEON_DOT. */
#include "format/w4.h"
#include "format/w8.h"
#include "kernels/kernels.h"
#include "kernels/q8.h"

#ifdef QHX_HAVE_NEON
#include <arm_neon.h>

/* the 4 rows of one W8 block (32 columns each) against 32 activation bytes: int32 sums, row i in
 * lane i */
static inline int32x4_t block_dot(const int8_t *wb, const int8_t *x) {
    const int8x16_t x0 = vld1q_s8(x), x1 = vld1q_s8(x + 16);
    int32x4_t d[4];
    for (int i = 0; i < 4; i++) {
        const int8_t *w = wb + i * QHX_W8_BLOCK;
        d[i] = vdotq_s32(vdotq_s32(vdupq_n_s32(0), vld1q_s8(w), x0), vld1q_s8(w + 16), x1);
    }
    return vpaddq_s32(vpaddq_s32(d[0], d[1]), vpaddq_s32(d[2], d[3]));
}

static qhx_status dot_matmul(const qhx_tensor *W, const qhx_acts *X, int T, float *Y, int r0, int r1) {
    const size_t cols = (size_t)W->cols, pad = X->pad, nb = qhx_w8_padded_cols(cols) / QHX_W8_BLOCK, gbytes = qhx_w8_group_bytes(cols);
    /* an activation block of 64 is two W8 blocks, summed as one integer before its scaling */
    const size_t per = QHX_Q16_BLOCK / QHX_Q8_BLOCK, nbx = pad / QHX_Q16_BLOCK;
    for (int r = r0; r < r1; r += QHX_W8_GROUP) {
        const int8_t *g = (const int8_t *)W->data + (size_t)r / QHX_W8_GROUP * gbytes;
        const int nr = r1 - r < QHX_W8_GROUP ? r1 - r : QHX_W8_GROUP;
        for (int t = 0; t < T; t++) {
            const int8_t *hi = X->aq + (size_t)t * pad, *lo = X->laq + (size_t)t * pad;
            const float *s = X->s + (size_t)t * nbx;
            float32x4_t acc = vdupq_n_f32(0.0f);
            for (size_t b0 = 0; b0 < nb; b0 += per) {
                int32x4_t d = vdupq_n_s32(0);
                for (size_t b = b0; b < b0 + per && b < nb; b++) {
                    const int8_t *wb = g + b * QHX_W8_GROUP * QHX_W8_BLOCK;
                    d = vaddq_s32(d, vaddq_s32(vshlq_n_s32(block_dot(wb, hi + b * QHX_Q8_BLOCK), 8), block_dot(wb, lo + b * QHX_Q8_BLOCK)));
                }
                acc = vaddq_f32(acc, vmulq_n_f32(vcvtq_f32_s32(d), s[b0 / per]));
            }
            float out[4];
            vst1q_f32(out, acc);
            for (int i = 0; i < nr; i++) Y[(size_t)t * W->rows + r + i] = out[i] * W->scale[r + i];
        }
    }
    return QHX_OK;
}

static void round_q8(const float *x, size_t cols, const qhx_acts *a, size_t t) {
    qhx_q8_quantize(x, cols, a->q + t * a->pad, a->s + t * (a->pad / QHX_Q8_BLOCK));
}

/* qhx_q16_quantize, then each value's signed high and low bytes for the two passes */
static void round_q16(const float *x, size_t cols, const qhx_acts *a, size_t t) {
    int16_t *v = a->v + t * a->pad;
    int8_t *hi = a->aq + t * a->pad, *lo = a->laq + t * a->pad;
    qhx_q16_quantize(x, cols, v, a->s + t * (a->pad / QHX_Q16_BLOCK));
    for (size_t c = 0; c < a->pad; c++) qhx_q16_split(v[c], hi + c, lo + c);
}

/* ---- W4 (format/w4.h), decode and prefill ----------------------------------------------------
 * A row's 16 code bytes of a block, low nibbles then high ones, sdot against the token's 16 + 16
 * activation bytes: 4 int32 quads; pairwise adds over 4 blocks put row i's block sums in lanes
 * 0-3, the order the layout keeps its scales in. The fp32 steps are the scalar twin's. Each
 * block's codes are loaded and split once for two tokens at a time. */
static inline int32x4_t w4_dot(int8x16_t lo, int8x16_t hi, const int8_t *x) {
    return vdotq_s32(vdotq_s32(vdupq_n_s32(0), lo, vld1q_s8(x)), hi, vld1q_s8(x + 16));
}

static inline int32x4_t w4_sum4(const int32x4_t s[4]) { return vpaddq_s32(vpaddq_s32(s[0], s[1]), vpaddq_s32(s[2], s[3])); }

/* row i's sums of the 4 blocks of unit u for NT (1 or 2) tokens h[j]. NT is a constant at each
 * call, so the sums stay in registers. */
static inline __attribute__((always_inline)) void w4_row_unit(const uint8_t *g, size_t u, int i, const int8_t *const h[2], int NT,
                                                             int32x4_t tot[2]) {
    int32x4_t sh[2][4];
    _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
        const uint8x16_t v = vld1q_u8(g + (u + k) * QHX_W4_CODE_BYTES + i * (QHX_W4_BLOCK / 2));
        const int8x16_t lo = vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(15))), hi = vreinterpretq_s8_u8(vshrq_n_u8(v, 4));
        const size_t c = (u + k) * QHX_W4_BLOCK;
        _Pragma("GCC unroll 2") for (int j = 0; j < NT; j++) sh[j][k] = w4_dot(lo, hi, h[j] + c);
    }
    _Pragma("GCC unroll 2") for (int j = 0; j < NT; j++) tot[j] = w4_sum4(sh[j]);
}

/* rows r .. r + nr - 1 of tokens t .. t + NT - 1 */
static inline __attribute__((always_inline)) void w4_rows(const uint8_t *g, size_t nb, const qhx_acts *X, int t, int NT, int nr,
                                                         float *Y, size_t ystride) {
    const uint16_t *ds = (const uint16_t *)(g + nb * QHX_W4_CODE_BYTES);
    const int8_t *h[2];
    _Pragma("GCC unroll 2") for (int j = 0; j < 2; j++) h[j] = X->w4h + (size_t)(t + (j < NT ? j : 0)) * X->w4pad;
    for (int i = 0; i < nr; i++) {
        float32x4_t acc[2] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};
        for (size_t u = 0; u < nb; u += QHX_W4_UNIT) {
            int32x4_t tot[2];
            w4_row_unit(g, u, i, h, NT, tot);
            const float32x4_t d = vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(ds + u * QHX_W4_GROUP + i * QHX_W4_UNIT)));
            _Pragma("GCC unroll 2") for (int j = 0; j < NT; j++) {
                const size_t o = (size_t)(t + j) * nb + u;
                acc[j] = vfmaq_f32(acc[j], vcvtq_f32_s32(vsubq_s32(tot[j], vld1q_s32(X->w4c + o))), vmulq_f32(d, vld1q_f32(X->w4s + o)));
            }
        }
        _Pragma("GCC unroll 2") for (int j = 0; j < NT; j++) {
            float a[4];
            vst1q_f32(a, acc[j]);
            Y[(size_t)(t + j) * ystride + i] = (a[0] + a[1]) + (a[2] + a[3]);
        }
    }
}

static qhx_status dot_w4_matmul(const qhx_tensor *W, const qhx_acts *X, int T, float *Y, int r0, int r1) {
    const size_t cols = (size_t)W->cols, nb = qhx_w4_blocks(cols), gbytes = qhx_w4_group_bytes(cols), ys = (size_t)W->rows;
    for (int r = r0; r < r1; r += QHX_W4_GROUP) {
        const uint8_t *g = (const uint8_t *)W->data + (size_t)r / QHX_W4_GROUP * gbytes;
        const int nr = r1 - r < QHX_W4_GROUP ? r1 - r : QHX_W4_GROUP;
        for (int t = 0; t < T; t += 2) {
            if (T - t >= 2) w4_rows(g, nb, X, t, 2, nr, Y + r, ys);
            else w4_rows(g, nb, X, t, 1, nr, Y + r, ys);
        }
    }
    return QHX_OK;
}

const qhx_acts_ops qhx_acts_neon_q16 = {.form = QHX_ACTS_Q16, .matmul = dot_matmul, .decode = dot_matmul, .matmul_w4 = dot_w4_matmul, .round = round_q16, .round_q8 = round_q8};
/* W8 prefill through smmla (int_neon_i8mm.c); W4 keeps sdot */
const qhx_acts_ops qhx_acts_i8mm_q16 = {.form = QHX_ACTS_Q16, .matmul = qhx_i8mm_w8_matmul, .decode = dot_matmul, .matmul_w4 = dot_w4_matmul, .round = round_q16, .round_q8 = round_q8};
#endif
