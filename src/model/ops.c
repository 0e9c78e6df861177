#include "model/ops.h"
#include "format/w8.h"
#include "util/half.h"

#include <math.h>
#include <string.h>

float qhx_tensor_get(const qhx_tensor *t, size_t i) {
    const unsigned char *p = t->data;
    uint16_t h;
    float f;
    switch (t->dtype) {
    case QHX_F32: memcpy(&f, p + 4 * i, 4); return f;
    case QHX_BF16: memcpy(&h, p + 2 * i, 2); return qhx_bf16_to_f32(h);
    case QHX_F16: memcpy(&h, p + 2 * i, 2); return qhx_f16_to_f32(h);
    case QHX_I8: {
        const size_t r = i / (size_t)t->cols, c = i % (size_t)t->cols;
        return (float)((const int8_t *)p)[qhx_w8_at((size_t)t->cols, r, c)] * t->scale[r];
    }
    default: return 0.0f;
    }
}

void qhx_rmsnorm1p(float *out, const float *x, const qhx_tensor *w, int n, float eps) {
    double ss = 0.0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float inv = 1.0f / sqrtf((float)(ss / n) + eps);
    for (int i = 0; i < n; i++) out[i] = x[i] * inv * (1.0f + qhx_tensor_get(w, (size_t)i));
}
