#include "model/ops.h"
#include <math.h>

double qhx_sumsq(const float *x, int n) {
    /* eight sums in named variables: as an array GCC kept them on the stack, a store and a load
     * each 8 values (1-1.5 % of a prefill) */
    double a0 = 0, a1 = 0, a2 = 0, a3 = 0, a4 = 0, a5 = 0, a6 = 0, a7 = 0;
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        a0 += (double)x[i] * x[i], a1 += (double)x[i + 1] * x[i + 1], a2 += (double)x[i + 2] * x[i + 2];
        a3 += (double)x[i + 3] * x[i + 3], a4 += (double)x[i + 4] * x[i + 4], a5 += (double)x[i + 5] * x[i + 5];
        a6 += (double)x[i + 6] * x[i + 6], a7 += (double)x[i + 7] * x[i + 7];
    }
    double acc[8] = {a0, a1, a2, a3, a4, a5, a6, a7};
    for (; i < n; i++) acc[i % 8] += (double)x[i] * x[i];
    return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}

void qhx_rmsnorm1p(float *out, const float *x, const qhx_tensor *w, int n, float eps) {
    const float inv = 1.0f / sqrtf((float)(qhx_sumsq(x, n) / n) + eps);
    if (w->dtype == QHX_F32)
        for (int i = 0; i < n; i++) out[i] = x[i] * inv * (1.0f + qhx_f32_at(w->data, (size_t)i));
    else
        for (int i = 0; i < n; i++) out[i] = x[i] * inv * (1.0f + qhx_tensor_get(w, (size_t)i));
}

void qhx_rmsnorm_gated(float *x, const float *gate, const qhx_tensor *w, int n, float eps) {
    const float inv = 1.0f / sqrtf((float)(qhx_sumsq(x, n) / n) + eps);
    if (w->dtype == QHX_F32)
        for (int i = 0; i < n; i++) x[i] = x[i] * inv * qhx_f32_at(w->data, (size_t)i) * gate[i];
    else
        for (int i = 0; i < n; i++) x[i] = x[i] * inv * qhx_tensor_get(w, (size_t)i) * gate[i];
}
