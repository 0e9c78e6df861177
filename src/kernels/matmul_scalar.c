/* The two portable kernel sets. "ref" is the oracle: double accumulation, any dtype. "scalar" is
 * the twin every SIMD variant is tested against: fp32 accumulation in the same blocked order the
 * SIMD kernels use (8 lanes, summed pairwise at the end), so the comparison tolerance stays tight. */
#include "kernels/kernels.h"
#include "model/ops.h"
#include "util/half.h"

#include <string.h>

static float sum8(const float acc[8]) {
    return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}

static inline float widen(const qhx_tensor *W, const unsigned char *row, size_t c) {
    uint16_t h;
    switch (W->dtype) {
    case QHX_I8: return (float)((const int8_t *)row)[c];
    case QHX_F16: memcpy(&h, row + 2 * c, 2); return qhx_f16_to_f32(h);
    case QHX_BF16: memcpy(&h, row + 2 * c, 2); return qhx_bf16_to_f32(h);
    default: { float f; memcpy(&f, row + 4 * c, 4); return f; }
    }
}

static void scalar_matmul(const qhx_tensor *W, const float *X, int T, float *Y, int r0, int r1) {
    const size_t cols = (size_t)W->cols, es = qhx_dtype_size(W->dtype);
    for (int r = r0; r < r1; r++) {
        const unsigned char *row = (const unsigned char *)W->data + (size_t)r * cols * es;
        for (int t = 0; t < T; t++) {
            const float *x = X + (size_t)t * cols;
            float acc[8] = {0};
            size_t c = 0;
            for (; c + 8 <= cols; c += 8)
                for (int l = 0; l < 8; l++) acc[l] += widen(W, row, c + l) * x[c + l];
            for (; c < cols; c++) acc[c & 7] += widen(W, row, c) * x[c];
            const float s = sum8(acc);
            Y[(size_t)t * W->rows + r] = W->dtype == QHX_I8 ? s * W->scale[r] : s;
        }
    }
}

static void ref_matmul(const qhx_tensor *W, const float *X, int T, float *Y, int r0, int r1) {
    const size_t cols = (size_t)W->cols, es = qhx_dtype_size(W->dtype);
    for (int r = r0; r < r1; r++) {
        const unsigned char *row = (const unsigned char *)W->data + (size_t)r * cols * es;
        for (int t = 0; t < T; t++) {
            const float *x = X + (size_t)t * cols;
            double acc = 0.0;
            for (size_t c = 0; c < cols; c++) acc += (double)widen(W, row, c) * x[c];
            Y[(size_t)t * W->rows + r] = (float)(W->dtype == QHX_I8 ? acc * W->scale[r] : acc);
        }
    }
}

static int always(void) { return 1; }

const qhx_kernel_set qhx_kernels_ref = {"ref", ref_matmul, always};
const qhx_kernel_set qhx_kernels_scalar = {"scalar", scalar_matmul, always};
