/* Int8 activations, what W4 matrices take (matmul.c), as llama.cpp's Q8_0: each activation row is rounded to int8
 * in blocks of 32 with one fp32 scale per block (max|x| / 127), so a block's dot product with an
 * int8 (or 4-bit) weight row is exact integer arithmetic: y[r] = sw[r] * sum_b sx[b] * sum_{i in b} w[i] q[i].
 * The rounding error is at most half a step of each block, ~0.4 % of its largest value. */
#ifndef QHX_Q8_H
#define QHX_Q8_H
#include "util/tensor.h"
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#define QHX_Q8_BLOCK 32

static inline size_t qhx_q8_padded(size_t cols) { return qhx_round_up(cols, QHX_Q8_BLOCK); }

/* Round to nearest, ties to even, for |v| <= 127: adding 1.5 * 2^23 leaves no fraction bits, so
 * the FPU rounds in the add (what lrintf does, without the libm call). */
static inline int8_t qhx_q8_round(float v) { return (int8_t)(int)((v + 0x1.8p23f) - 0x1.8p23f); }

/* q: cols rounded up to a whole block (the tail zero); s: one scale per block */
static inline void qhx_q8_quantize(const float *x, size_t cols, int8_t *q, float *s) {
    for (size_t c0 = 0, b = 0; c0 < cols; c0 += QHX_Q8_BLOCK, b++) {
        const size_t n = cols - c0 < QHX_Q8_BLOCK ? cols - c0 : QHX_Q8_BLOCK;
        float mx = 0.0f;
        for (size_t i = 0; i < n; i++) mx = fabsf(x[c0 + i]) > mx ? fabsf(x[c0 + i]) : mx;
        const float inv = mx > 0 ? 127.0f / mx : 0.0f;
        s[b] = mx / 127.0f;
        for (size_t i = 0; i < QHX_Q8_BLOCK; i++) q[c0 + i] = i < n ? qhx_q8_round(x[c0 + i] * inv) : 0;
    }
}

/* the same with |q| too, for kernels that multiply |x| by sign-moved weights */
static inline void qhx_q8_quantize_abs(const float *x, size_t cols, int8_t *q, int8_t *aq, float *s) {
    qhx_q8_quantize(x, cols, q, s);
    for (size_t c = 0; c < qhx_q8_padded(cols); c++) aq[c] = (int8_t)(q[c] < 0 ? -q[c] : q[c]);
}

/* Int16 activations, what W8 matrices take in every set but ref: each block of 64 is rounded to
 * v = round(x * 32512 / max|x|) in [-32512, 32512], 15 bits where int8 keeps 7, with one scale
 * s = max / 32512 a block, so a block's dot product with an int8 weight row is again exact integer
 * arithmetic (|sum| <= 64 x 128 x 32512 < 2^31). The rounding error is at most half a step,
 * 1/65024 of the block's largest value: two orders of magnitude below the W8 weights' own
 * rounding, where int8 activations are about level with it. Blocks of 64, not int8's 32: a block
 * costs decode one conversion and one multiply-add a row, and over 32 columns those bound the
 * AVX-512 kernel on Zen 5 (W8 decode +5-6 % with 64; bench/README.md in git history, 2026-12-05).
 * Int8 multipliers take v as v = 256 hi + lo (qhx_q16_split), hi in [-127, 127] and lo in
 * [-128, 127]: two passes, exact. */
#define QHX_Q16_MAX 32512
#define QHX_Q16_BLOCK 64

static inline size_t qhx_q16_padded(size_t cols) { return qhx_round_up(cols, QHX_Q16_BLOCK); }

static inline void qhx_q16_split(int32_t v, int8_t *hi, int8_t *lo) {
    const int32_t h = (v + 128) >> 8; /* arithmetic shift: floor((v + 128) / 256) */
    *hi = (int8_t)h;
    *lo = (int8_t)(v - 256 * h);
}

/* v: cols rounded up to a whole block (the tail zero); s: one scale per block */
static inline void qhx_q16_quantize(const float *x, size_t cols, int16_t *v, float *s) {
    for (size_t c0 = 0, b = 0; c0 < cols; c0 += QHX_Q16_BLOCK, b++) {
        const size_t n = cols - c0 < QHX_Q16_BLOCK ? cols - c0 : QHX_Q16_BLOCK;
        float mx = 0.0f;
        for (size_t i = 0; i < n; i++) mx = fabsf(x[c0 + i]) > mx ? fabsf(x[c0 + i]) : mx;
        const float inv = mx > 0 ? (float)QHX_Q16_MAX / mx : 0.0f;
        s[b] = mx / (float)QHX_Q16_MAX;
        for (size_t i = 0; i < QHX_Q16_BLOCK; i++) v[c0 + i] = i < n ? (int16_t)((x[c0 + i] * inv + 0x1.8p23f) - 0x1.8p23f) : 0;
    }
}

#endif
