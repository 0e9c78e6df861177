#include "model/ops.h"
#include <math.h>

void qhx_rmsnorm1p(float *out, const float *x, const qhx_tensor *w, int n, float eps) {
    double ss = 0.0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float inv = 1.0f / sqrtf((float)(ss / n) + eps);
    for (int i = 0; i < n; i++) out[i] = x[i] * inv * (1.0f + qhx_tensor_get(w, (size_t)i));
}
