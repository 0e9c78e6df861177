/* Armv8.6 int8 matrix multiply (smmla) for W8 prefill: the "neon-i8mm" set. smmla multiplies a
 * 2 x 8 block of signed bytes by another 2 x 8 one, transposed, into a 2 x 2 block of int32: 32
 * products an instruction, twice sdot's. Here the left operand is two weight rows and the right
 * one two tokens, 8 columns at a time: the 64-bit halves of two rows' (or two tokens') loads,
 * zipped. A 32-column block of a W8 row group (4 rows, format/w8.h) gives two such 2 x 2 blocks
 * from 4 + 4 smmla, each lane one row's exact int32 sum for one token, which are scaled as the
 * scalar twin scales them (one fp32 multiply and one add per row, token and block): bit for bit
 * the twin's. The int16 activations take two passes over their high and low bytes, 256 hi + lo, as in
 * int_neon.c, the two W8 blocks of an int16 block of 64 summed before its scaling. This file alone
 * is compiled for armv8.2-a+dotprod+i8mm; the sets that call it need QHX_CPU_NEON_I8MM. */
#include "format/w8.h"
#include "kernels/kernels.h"
#include "kernels/q8.h"

#ifdef QHX_HAVE_NEON
#include <arm_neon.h>

/* lanes 0-7 of a's 16 bytes then lanes 0-7 of b's (lo), and lanes 8-15 of each (hi) */
static inline int8x16_t zip_lo(int8x16_t a, int8x16_t b) {
    return vreinterpretq_s8_s64(vzip1q_s64(vreinterpretq_s64_s8(a), vreinterpretq_s64_s8(b)));
}
static inline int8x16_t zip_hi(int8x16_t a, int8x16_t b) {
    return vreinterpretq_s8_s64(vzip2q_s64(vreinterpretq_s64_s8(a), vreinterpretq_s64_s8(b)));
}

/* 32 bytes of two rows (or two tokens) as smmla operands: 8 columns of each per register */
static inline void pair32(const int8_t *a, const int8_t *b, int8x16_t out[4]) {
    const int8x16_t a0 = vld1q_s8(a), a1 = vld1q_s8(a + 16), b0 = vld1q_s8(b), b1 = vld1q_s8(b + 16);
    out[0] = zip_lo(a0, b0), out[1] = zip_hi(a0, b0), out[2] = zip_lo(a1, b1), out[3] = zip_hi(a1, b1);
}

/* lanes (row 0 token 0, row 0 token 1, row 1 token 0, row 1 token 1) of one row pair's block */
static inline int32x4_t mm_block(const int8x16_t w[4], const int8x16_t x[4]) {
    int32x4_t d = vmmlaq_s32(vdupq_n_s32(0), w[0], x[0]);
    d = vmmlaq_s32(d, w[1], x[1]);
    d = vmmlaq_s32(d, w[2], x[2]);
    return vmmlaq_s32(d, w[3], x[3]);
}

/* tokens t0 and t1 (the same token when T is odd: its second lane is dropped) over one row group;
 * an activation block of 64 is two W8 blocks, summed as one integer before its scaling */
static void group_tokens(const int8_t *g, size_t nb, const qhx_acts *X, size_t t0, size_t t1, float32x4_t acc[2]) {
    const size_t pad = X->pad, per = QHX_Q16_BLOCK / QHX_Q8_BLOCK, nbx = pad / QHX_Q16_BLOCK;
    const int8_t *h0 = X->aq + t0 * pad, *h1 = X->aq + t1 * pad;
    const int8_t *l0 = X->laq + t0 * pad, *l1 = X->laq + t1 * pad;
    const float *s0 = X->s + t0 * nbx, *s1 = X->s + t1 * nbx;
    acc[0] = acc[1] = vdupq_n_f32(0.0f);
    for (size_t b0 = 0; b0 < nb; b0 += per) {
        int32x4_t d[2] = {vdupq_n_s32(0), vdupq_n_s32(0)};
        for (size_t b = b0; b < b0 + per && b < nb; b++) {
            const int8_t *wb = g + b * QHX_W8_GROUP * QHX_W8_BLOCK;
            const size_t c = b * QHX_Q8_BLOCK;
            int8x16_t xh[4], xl[4], w[4];
            pair32(h0 + c, h1 + c, xh);
            pair32(l0 + c, l1 + c, xl);
            for (int p = 0; p < 2; p++) {
                pair32(wb + 2 * p * QHX_W8_BLOCK, wb + (2 * p + 1) * QHX_W8_BLOCK, w);
                d[p] = vaddq_s32(d[p], vaddq_s32(vshlq_n_s32(mm_block(w, xh), 8), mm_block(w, xl)));
            }
        }
        const size_t bx = b0 / per;
        const float32x2_t s01 = vld1_lane_f32(s1 + bx, vld1_dup_f32(s0 + bx), 1);
        const float32x4_t s = vcombine_f32(s01, s01);
        for (int p = 0; p < 2; p++) acc[p] = vaddq_f32(acc[p], vmulq_f32(vcvtq_f32_s32(d[p]), s));
    }
}

qhx_status qhx_i8mm_w8_matmul(const qhx_tensor *W, const qhx_acts *X, int T, float *Y, int r0, int r1) {
    const size_t cols = (size_t)W->cols, nb = qhx_w8_padded_cols(cols) / QHX_W8_BLOCK, gbytes = qhx_w8_group_bytes(cols), ys = (size_t)W->rows;
    for (int r = r0; r < r1; r += QHX_W8_GROUP) {
        const int8_t *g = (const int8_t *)W->data + (size_t)r / QHX_W8_GROUP * gbytes;
        const int nr = r1 - r < QHX_W8_GROUP ? r1 - r : QHX_W8_GROUP;
        for (int t = 0; t < T; t += 2) {
            const int two = T - t >= 2;
            float32x4_t acc[2];
            group_tokens(g, nb, X, (size_t)t, (size_t)(two ? t + 1 : t), acc);
            float out[2][4];
            vst1q_f32(out[0], acc[0]), vst1q_f32(out[1], acc[1]);
            for (int i = 0; i < nr; i++)
                for (int j = 0; j <= two; j++) Y[(size_t)(t + j) * ys + r + i] = out[i / 2][(i % 2) * 2 + j] * W->scale[r + i];
        }
    }
    return QHX_OK;
}
#endif
