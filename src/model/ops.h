/* Scalar fp32 building blocks of the reference forward. Simple on purpose: they are the oracle. */
#ifndef QHX_OPS_H
#define QHX_OPS_H
#include "format/w4.h"
#include "format/w8.h"
#include "model/qwen35.h"
#include "util/half.h"
#include <math.h>
#include <string.h>

/* element i of fp32 data, which safetensors may leave unaligned (a plain load, vectorized) */
static inline __attribute__((always_inline)) float qhx_f32_at(const void *p, size_t i) {
    float f;
    memcpy(&f, (const unsigned char *)p + 4 * i, sizeof f);
    return f;
}

/* Element i of a weight, widened to fp32 (the data may be unaligned: safetensors packs tightly).
 * Inline: the norms and the conv read their small weights through it once per token. */
static inline __attribute__((always_inline)) float qhx_tensor_get(const qhx_tensor *t, size_t i) {
    const unsigned char *p = t->data;
    uint16_t h;
    switch (t->dtype) {
    case QHX_F32: return qhx_f32_at(p, i);
    case QHX_BF16: memcpy(&h, p + 2 * i, 2); return qhx_bf16_to_f32(h);
    case QHX_F16: memcpy(&h, p + 2 * i, 2); return qhx_f16_to_f32(h);
    case QHX_I8: {
        const size_t r = i / (size_t)t->cols, c = i % (size_t)t->cols;
        return (float)((const int8_t *)p)[qhx_w8_at((size_t)t->cols, r, c)] * t->scale[r];
    }
    case QHX_Q4: {
        const size_t cols = (size_t)t->cols, r = i / cols, c = i % cols, b = c / QHX_W4_BLOCK, k = c % QHX_W4_BLOCK;
        const uint8_t byte = p[qhx_w4_codes_at(cols, r, b) + k % 16];
        memcpy(&h, p + qhx_w4_scale_at(cols, r, b), 2);
        return qhx_f16_to_f32(h) * (float)((k < 16 ? byte & 15 : byte >> 4) - 8);
    }
    default: return 0.0f;
    }
}
/* the sum of squares in double, in 8 lanes (i % 8) added in a fixed order: vectorizes, and every
 * path (prefill, decode, batched) sums a row the same way */
double qhx_sumsq(const float *x, int n);
/* out = x / rms(x) * (1 + w): Qwen3.5's zero-centred RMSNorm. out may alias x. */
void qhx_rmsnorm1p(float *out, const float *x, const qhx_tensor *w, int n, float eps);
/* x = x / rms(x) * w * gate: the Gated DeltaNet's output norm (a plain weight; gate already
 * through SiLU), the products in that order */
void qhx_rmsnorm_gated(float *x, const float *gate, const qhx_tensor *w, int n, float eps);

static inline float qhx_silu(float x) { return x / (1.0f + expf(-x)); }
static inline float qhx_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
/* torch.nn.functional.softplus with beta 1, threshold 20 */
static inline float qhx_softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

#endif
