/* The ground floor every layer shares: element types and the tensor view. Format readers produce
 * views, kernels consume them, the model binds them; none of those needs another to say what a
 * weight is. */
#ifndef QHX_TENSOR_H
#define QHX_TENSOR_H
#include <stddef.h>

/* QHX_I8 and QHX_Q4 only appear in bundles (W8 weights with per-row fp32 scales, format/w8.h; W4
 * codes with a scale every 32 columns, format/w4.h), never in safetensors. */
typedef enum { QHX_F32, QHX_BF16, QHX_F16, QHX_I8, QHX_Q4, QHX_DT_OTHER } qhx_dtype;

static inline size_t qhx_dtype_size(qhx_dtype dt) {
    switch (dt) {
    case QHX_F32: return 4;
    case QHX_BF16: case QHX_F16: return 2;
    case QHX_I8: return 1;
    default: return 0; /* QHX_Q4 has no row-major element size: see format/w4.h */
    }
}

/* x rounded up to a multiple of m: the one padding rule of layouts, alignments and tiles */
static inline size_t qhx_round_up(size_t x, size_t m) { return (x + m - 1) / m * m; }

/* A weight as the forward pass sees it: a row-major matrix (a vector has rows == 1) of some dtype.
 * QHX_I8 weights carry one fp32 scale per row: W[r][c] = data[r][c] * scale[r]. */
typedef struct {
    qhx_dtype dtype;
    int rows, cols;
    const void *data;
    const float *scale;
} qhx_tensor;

#endif
