#include "model/ops.h"
#include <math.h>

double qhx_sumsq(const float *x, int n) {
    double acc[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) acc[k] += (double)x[i + k] * x[i + k];
    for (; i < n; i++) acc[i % 8] += (double)x[i] * x[i];
    return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}

void qhx_rmsnorm1p(float *out, const float *x, const qhx_tensor *w, int n, float eps) {
    const float inv = 1.0f / sqrtf((float)(qhx_sumsq(x, n) / n) + eps);
    if (w->dtype == QHX_F32)
        for (int i = 0; i < n; i++) out[i] = x[i] * inv * (1.0f + ((const float *)w->data)[i]);
    else
        for (int i = 0; i < n; i++) out[i] = x[i] * inv * (1.0f + qhx_tensor_get(w, (size_t)i));
}
