/* Scalar fp32 building blocks of the reference forward. Simple on purpose: they are the oracle. */
#ifndef QHX_OPS_H
#define QHX_OPS_H
#include "model/qwen35.h"
#include <math.h>

/* Element i of a weight, widened to fp32 (the data may be unaligned: safetensors packs tightly). */
float qhx_tensor_get(const qhx_tensor *t, size_t i);
/* out = x / rms(x) * (1 + w): Qwen3.5's zero-centred RMSNorm. out may alias x. */
void qhx_rmsnorm1p(float *out, const float *x, const qhx_tensor *w, int n, float eps);

static inline float qhx_silu(float x) { return x / (1.0f + expf(-x)); }
static inline float qhx_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
/* torch.nn.functional.softplus with beta 1, threshold 20 */
static inline float qhx_softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

#endif
