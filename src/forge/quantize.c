/* The forge's quantizers: W8 rows and W4 groups. */
#include "forge/forge.h"
#include "util/half.h"

#include <math.h>

float qhx_quantize_row(const float *w, int n, int8_t *q) {
    float mx = 0.0f;
    for (int i = 0; i < n; i++) mx = fmaxf(mx, fabsf(w[i]));
    const float scale = mx / 127.0f, inv = mx > 0 ? 127.0f / mx : 0.0f;
    for (int i = 0; i < n; i++) {
        long v = lrintf(w[i] * inv);
        q[i] = (int8_t)(v > 127 ? 127 : v < -127 ? -127 : v);
    }
    return scale;
}

static float f16_round(float v) { return qhx_f16_to_f32(qhx_f32_to_f16(v)); }

/* codes for w given d and m (w ~ d q + m), and the squared error they leave. Clamped first, then
 * rounded to nearest (ties up) by truncation: no libm call in the forge's innermost loop. */
static float codes(const float *w, int n, float d, float m, uint8_t *q) {
    const float inv = d != 0 ? 1.0f / d : 0.0f;
    float err = 0;
    for (int i = 0; i < n; i++) {
        float v = (w[i] - m) * inv;
        v = v < 0.0f ? 0.0f : v > 15.0f ? 15.0f : v;
        q[i] = (uint8_t)(int)(v + 0.5f);
        const float e = w[i] - (d * q[i] + m);
        err += e * e;
    }
    return err;
}

/* Least squares for fixed codes: the d (and m when asym; else m = -8 d) closest to w. Returns 0
 * when the codes leave nothing to fit (all equal). */
static int fit(const float *w, int n, const uint8_t *q, int asym, float *d, float *m) {
    double sq = 0, sqq = 0, sw = 0, sqw = 0;
    for (int i = 0; i < n; i++) {
        const double c = asym ? q[i] : q[i] - 8.0;
        sq += c, sqq += c * c, sw += w[i], sqw += c * w[i];
    }
    if (!asym) {
        if (sqq <= 0) return 0;
        *d = (float)(sqw / sqq), *m = -8 * *d;
        return 1;
    }
    const double det = n * sqq - sq * sq;
    if (det <= 0) return 0;
    *d = (float)((n * sqw - sq * sw) / det);
    *m = (float)((sw - *d * sq) / n);
    return 1;
}

/* The W4 quantizer: w ~ d q + m with codes q in [0, 15] and d, m stored as fp16; symmetric groups
 * keep m = -8 d (one number a group). Scales start from the group's range, are tried at 8
 * stretches of it (0.8x-1.08x), and each start is refined once by least squares and re-rounding;
 * the codes and (d, m) with the least squared error win. The error is measured with d and m
 * rounded to fp16, as the kernels see them. On q35-kjv's matrices (relative RMS): 8.59 % with the
 * range alone (Q4_0's rule), 8.11 % this way, 8.10 % with 16 stretches and 2 refinements, which
 * took 2.6x as long. */
void qhx_quantize_w4(const float *w, int n, int asym, uint8_t *q, float *d_out, float *m_out) {
    float lo = w[0], hi = w[0], amax = 0, vmax = 0;
    for (int i = 0; i < n; i++) {
        lo = fminf(lo, w[i]), hi = fmaxf(hi, w[i]);
        if (fabsf(w[i]) > amax) amax = fabsf(w[i]), vmax = w[i];
    }
    float best_d = 0, best_m = asym ? f16_round(lo) : 0;
    float best = codes(w, n, 0, best_m, q);
    if ((asym ? hi - lo : amax) <= 0) goto done;
    uint8_t t[256];
    for (int k = 0; k < 8; k++) {
        const float stretch = 0.8f + 0.04f * k;
        /* symmetric: the largest magnitude lands on code 0 (-8 d), as Q4_0 does, stretched */
        float d = asym ? (hi - lo) / 15 * stretch : vmax / -8 * stretch, m = asym ? lo : -8 * d;
        for (int it = 0; it < 2; it++) {
            d = f16_round(d), m = asym ? f16_round(m) : -8 * d;
            const float e = codes(w, n, d, m, t);
            if (e < best) {
                best = e, best_d = d, best_m = m;
                for (int i = 0; i < n; i++) q[i] = t[i];
            }
            if (!fit(w, n, t, asym, &d, &m)) break;
        }
    }
done:
    codes(w, n, best_d, best_m, q);
    *d_out = best_d, *m_out = best_m;
}
