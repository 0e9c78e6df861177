/* The forge's quantizers: W8 rows and W4 groups. */
#include "forge/forge.h"
#include "util/half.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

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
 * rounded to nearest (ties up) by truncation: no libm call in the forge's innermost loop. Four
 * values at a time in GCC's portable vectors, the error summed in 8 lanes (i mod 8): written as
 * one chain of dependent scalar adds, W4 forging ran 6x slower than W8's. */
typedef float v4f __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));

static inline v4f clamp15(v4f v) {
    const v4f zero = {0, 0, 0, 0}, top = {15, 15, 15, 15};
    v = (v4f)((v4i)v & (v > zero));                              /* v > 0 ? v : 0 */
    const v4i low = v < top;
    return (v4f)(((v4i)v & low) | ((v4i)top & ~low));           /* v < 15 ? v : 15 */
}

static float codes(const float *w, int n, float d, float m, uint8_t *q) {
    const float inv = d != 0 ? 1.0f / d : 0.0f;
    v4f acc[2] = {{0, 0, 0, 0}, {0, 0, 0, 0}};
    float tail[8] = {0};
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        v4f x;
        memcpy(&x, w + i, sizeof x);
        const v4i c = __builtin_convertvector(clamp15((x - m) * inv) + 0.5f, v4i);
        const v4f e = x - (d * __builtin_convertvector(c, v4f) + m);
        acc[(i / 4) & 1] += e * e;
        for (int k = 0; k < 4; k++) q[i + k] = (uint8_t)c[k];
    }
    for (; i < n; i++) {
        float v = (w[i] - m) * inv;
        v = v > 0.0f ? v : 0.0f;
        v = v < 15.0f ? v : 15.0f;
        q[i] = (uint8_t)(int32_t)(v + 0.5f);
        const float e = w[i] - (d * (float)q[i] + m);
        tail[i % 8] += e * e;
    }
    for (int k = 0; k < 4; k++) tail[k] += acc[0][k], tail[4 + k] += acc[1][k];
    return ((tail[0] + tail[1]) + (tail[2] + tail[3])) + ((tail[4] + tail[5]) + (tail[6] + tail[7]));
}

/* Least squares for fixed codes: the d (and m when asym; else m = -8 d) closest to w. Returns 0
 * when the codes leave nothing to fit (all equal). Sums in pairs of double lanes (i mod 2). */
typedef double v2d __attribute__((vector_size(16)));
static int fit(const float *w, int n, const uint8_t *q, int asym, float *d, float *m) {
    const double off = asym ? 0.0 : 8.0;
    v2d lq = {0, 0}, lqq = {0, 0}, lw = {0, 0}, lqw = {0, 0};
    int i = 0;
    for (; i + 2 <= n; i += 2) {
        const v2d c = {q[i] - off, q[i + 1] - off}, x = {w[i], w[i + 1]};
        lq += c, lqq += c * c, lw += x, lqw += c * x;
    }
    for (; i < n; i++) {
        const double c = q[i] - off;
        lq[i & 1] += c, lqq[i & 1] += c * c, lw[i & 1] += w[i], lqw[i & 1] += c * w[i];
    }
    const double sq = lq[0] + lq[1], sqq = lqq[0] + lqq[1], sw = lw[0] + lw[1], sqw = lqw[0] + lqw[1];
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
    for (int i = 0; i < n; i++) { /* comparisons, not fminf/fmaxf: those are libm calls here */
        lo = w[i] < lo ? w[i] : lo, hi = w[i] > hi ? w[i] : hi;
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
