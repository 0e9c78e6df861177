/* The portable kernels. "ref" is the oracle: double accumulation, any dtype. "scalar" is
 * the twin every SIMD variant is tested against: fp32 accumulation in the same blocked order the
 * SIMD kernels use (8 lanes, summed pairwise at the end), so the comparison tolerance stays tight. */
#include "kernels/kernels.h"
#include "format/w4.h"
#include "format/w8.h"
#include "kernels/q8.h"
#include "kernels/kv.h"
#include <math.h>
#include "util/half.h"

#include <stdlib.h>
#include <string.h>

static float sum8(const float acc[8]) {
    return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}

/* Row r of W widened to fp32 (int8 rows unscaled: the scale is applied to the dot product). */
static void widen_row(const qhx_tensor *W, int r, float *out) {
    const size_t cols = (size_t)W->cols;
    if (W->dtype == QHX_I8) { /* packed in row groups (format/w8.h), not row-major */
        for (size_t c = 0; c < cols; c++) out[c] = (float)((const int8_t *)W->data)[qhx_w8_at(cols, (size_t)r, c)];
        return;
    }
    if (W->dtype == QHX_Q4) { /* scaled: the scale changes every 32 columns */
        qhx_w4_row_f32(W->data, cols, (size_t)r, out);
        return;
    }
    const unsigned char *row = (const unsigned char *)W->data + (size_t)r * cols * qhx_dtype_size(W->dtype);
    uint16_t h;
    switch (W->dtype) {
    case QHX_F16:
        for (size_t c = 0; c < cols; c++) memcpy(&h, row + 2 * c, 2), out[c] = qhx_f16_to_f32(h);
        break;
    case QHX_BF16:
        for (size_t c = 0; c < cols; c++) memcpy(&h, row + 2 * c, 2), out[c] = qhx_bf16_to_f32(h);
        break;
    default: memcpy(out, row, cols * sizeof(float));
    }
}

/* the twin's dot: 8 lanes, summed pairwise at the end */
static double scalar_dot_exact(const float *a, const float *b, size_t n) {
    float acc[8] = {0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) acc[l] += a[i + l] * b[i + l];
    for (; i < n; i++) acc[i & 7] += a[i] * b[i];
    return sum8(acc);
}

/* the oracle's: in double */
static double ref_dot_exact(const float *a, const float *b, size_t n) {
    double acc = 0.0;
    for (size_t i = 0; i < n; i++) acc += (double)a[i] * b[i];
    return acc;
}

/* Row by row, each widened once (one buffer a call, so worker threads own nothing between
 * calls), a dot per token; scaled in double and rounded once (for the twin's fp32 sum times an
 * fp32 scale that is the fp32 product exactly). */
static qhx_status rows_by_dot(const qhx_tensor *W, const float *X, int T, float *Y, int r0, int r1,
                              double (*dot)(const float *, const float *, size_t)) {
    const size_t cols = (size_t)W->cols;
    float *w = malloc(sizeof(float) * cols);
    if (!w) return QHX_ERR_NOMEM;
    for (int r = r0; r < r1; r++) {
        widen_row(W, r, w);
        for (int t = 0; t < T; t++) {
            const double d = dot(w, X + (size_t)t * cols, cols);
            Y[(size_t)t * W->rows + r] = (float)(W->dtype == QHX_I8 ? d * W->scale[r] : d);
        }
    }
    free(w);
    return QHX_OK;
}

static qhx_status scalar_matmul(const qhx_tensor *W, const float *X, int T, float *Y, int r0, int r1) {
    return rows_by_dot(W, X, T, Y, r0, r1, scalar_dot_exact);
}

static qhx_status ref_matmul(const qhx_tensor *W, const float *X, int T, float *Y, int r0, int r1) {
    return rows_by_dot(W, X, T, Y, r0, r1, ref_dot_exact);
}


static void scalar_axpy(float *y, float a, const float *x, int n) {
    for (int i = 0; i < n; i++) y[i] += a * x[i];
}

/* the twin of the SIMD sets' W8 kernels: the same int16 activations, exact integer block sums of
 * 64 columns each scaled once */
static qhx_status scalar_int_matmul(const qhx_tensor *W, const qhx_acts *X, int T, float *Y, int r0, int r1) {
    const size_t blk = QHX_Q16_BLOCK;
    const size_t cols = (size_t)W->cols, pad = X->pad, nb = (cols + blk - 1) / blk, nbx = pad / blk;
    int8_t *w = malloc(cols);
    if (!w) return QHX_ERR_NOMEM;
    for (int r = r0; r < r1; r++) {
        qhx_w8_get_row(W->data, cols, (size_t)r, w);
        for (int t = 0; t < T; t++) {
            const int16_t *v = X->v + (size_t)t * pad;
            float acc = 0.0f;
            for (size_t b = 0; b < nb; b++) {
                int32_t d = 0;
                const size_t c0 = b * blk, c1 = c0 + blk < cols ? c0 + blk : cols;
                for (size_t c = c0; c < c1; c++) d += (int32_t)w[c] * v[c];
                acc += (float)d * X->s[(size_t)t * nbx + b];
            }
            Y[(size_t)t * W->rows + r] = acc * W->scale[r];
        }
    }
    free(w);
    return QHX_OK;
}

/* The twin of every set's W4 kernel (kernels.h): exact block sums of (q - 8) x from the int8
 * activations themselves (W4 always takes Q8), four fp32 accumulators by block, fused
 * multiply-adds. */
static qhx_status scalar_w4_matmul(const qhx_tensor *W, const qhx_acts *X, int T, float *Y, int r0, int r1) {
    const size_t cols = (size_t)W->cols, pad = X->pad, nbx = pad / QHX_Q8_BLOCK, nb = qhx_w4_blocks(cols);
    uint8_t *q = malloc(cols);
    float *d = malloc(sizeof(float) * nb);
    if (!q || !d) { free(q), free(d); return QHX_ERR_NOMEM; }
    for (int r = r0; r < r1; r++) {
        qhx_w4_get_row(W->data, cols, (size_t)r, q, d);
        for (int t = 0; t < T; t++) {
            float acc[QHX_W4_UNIT] = {0};
            for (size_t b = 0; b * QHX_W4_BLOCK < cols; b++) {
                int32_t sum = 0;
                const size_t c1 = (b + 1) * QHX_W4_BLOCK < cols ? (b + 1) * QHX_W4_BLOCK : cols;
                for (size_t c = b * QHX_W4_BLOCK; c < c1; c++)
                    sum += (q[c] - 8) * X->q[(size_t)t * pad + c];
                acc[b % QHX_W4_UNIT] = fmaf((float)sum, d[b] * X->s[(size_t)t * nbx + b], acc[b % QHX_W4_UNIT]);
            }
            Y[(size_t)t * W->rows + r] = (acc[0] + acc[1]) + (acc[2] + acc[3]);
        }
    }
    free(q);
    free(d);
    return QHX_OK;
}

static void scalar_round_q8(const float *x, size_t cols, const qhx_acts *a, size_t t) {
    qhx_q8_quantize_abs(x, cols, a->q + t * a->pad, a->aq + t * a->pad, a->s + t * (a->pad / QHX_Q8_BLOCK));
}

static void scalar_round_q16(const float *x, size_t cols, const qhx_acts *a, size_t t) {
    qhx_q16_quantize(x, cols, a->v + t * a->pad, a->s + t * (a->pad / QHX_Q16_BLOCK));
}

/* row by row, k by k: an axpy per (i, k) */
static void scalar_gemm(int M, int N, int K, float alpha, const float *A, int lda, int acs, const float *B, int ldb, float *C, int ldc) {
    for (int i = 0; i < M; i++)
        for (int k = 0; k < K; k++) scalar_axpy(C + (size_t)i * ldc, alpha * A[(size_t)i * lda + (size_t)k * acs], B + (size_t)k * ldb, N);
}

static void ref_gemm(int M, int N, int K, float alpha, const float *A, int lda, int acs, const float *B, int ldb, float *C, int ldc) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double acc = 0.0;
            for (int k = 0; k < K; k++) acc += (double)A[(size_t)i * lda + (size_t)k * acs] * B[(size_t)k * ldb + j];
            C[(size_t)i * ldc + j] = (float)(C[(size_t)i * ldc + j] + alpha * acc);
        }
}

static void scalar_delta_rule(float *S, const qhx_delta_args *a) {
    const int dk = a->dk, dv = a->dv;
    float *kv = a->work;
    for (int t = 0; t < a->T; t++) {
        const float *q = a->q + (size_t)t * a->stride, *k = a->k + (size_t)t * a->stride, *v = a->v + (size_t)t * a->stride;
        const float decay = expf(a->g[(size_t)t * a->gstride]), beta = a->beta[(size_t)t * a->gstride];
        float *o = a->o + (size_t)t * a->ostride;
        for (int i = 0; i < dk * dv; i++) S[i] *= decay;
        for (int j = 0; j < dv; j++) kv[j] = 0.0f;
        for (int i = 0; i < dk; i++) scalar_axpy(kv, k[i], S + (size_t)i * dv, dv); /* kv = S^T k */
        for (int j = 0; j < dv; j++) kv[j] = (v[j] - kv[j]) * beta;                 /* delta */
        for (int i = 0; i < dk; i++) scalar_axpy(S + (size_t)i * dv, k[i], kv, dv); /* S += k delta^T */
        for (int j = 0; j < dv; j++) o[j] = 0.0f;
        for (int i = 0; i < dk; i++) scalar_axpy(o, q[i], S + (size_t)i * dv, dv);  /* o = S^T q */
    }
}

static void scalar_silu(float *x, const float *mul, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = x[i] / (1.0f + expf(-x[i])) * (mul ? mul[i] : 1.0f);
}

static void scalar_conv(const float *taps, float *fifo, const float *in, float *out, size_t C, int K, int T, int n) {
    for (int t = 0; t < T; t++) {
        float *y = out + (size_t)t * C;
        for (int i = 0; i < n; i++) {
            float v = taps[(size_t)(K - 1) * C + i] * in[(size_t)t * C + i];
            for (int j = 0; j < K - 1; j++) v += taps[(size_t)j * C + i] * qhx_conv_row(fifo, in, C, K, t - (K - 1) + j)[i];
            y[i] = v;
        }
        scalar_silu(y, NULL, (size_t)n);
    }
    qhx_conv_keep(fifo, in, C, K, T, n);
}

static float scalar_exp_sum(float *x, int n, float sub) {
    float sum = 0.0f;
    for (int i = 0; i < n; i++) sum += x[i] = expf(x[i] - sub);
    return sum;
}

static void scalar_softmax_tile(float *s, int n, int ld, int nq, const int *seen, float *m, float *sum, float *o, size_t ostride,
                                int hd) {
    for (int i = 0; i < nq; i++) {
        float mx = m[i], acc = 0.0f;
        for (int p = 0; p < seen[i]; p++) mx = s[(size_t)p * ld + i] > mx ? s[(size_t)p * ld + i] : mx;
        const float shrink = mx > -INFINITY ? expf(m[i] - mx) : 1.0f; /* no row seen yet: 1 */
        for (int p = 0; p < n; p++) {
            float *x = s + (size_t)p * ld + i;
            *x = p < seen[i] ? expf(*x - mx) : 0.0f;
            acc += *x;
        }
        sum[i] = sum[i] * shrink + acc;
        m[i] = mx;
        if (shrink != 1.0f)
            for (int e = 0; e < hd; e++) o[(size_t)i * ostride + e] *= shrink;
    }
}

void qhx_kv_widen_scalar(qhx_kv_form form, const unsigned char *rows, size_t stride, int hd, int n, float *out, int ld) {
    for (int p = 0; p < n; p++)
        for (int i = 0; i < hd; i++) out[(size_t)p * ld + i] = qhx_kv_at(form, rows + (size_t)p * stride, hd, i);
}

/* the twin: the vector layer's tiles and online softmax in plain floats */
void qhx_attend_scalar(const qhx_attend_args *a) {
    const int G = a->G, hd = a->hd;
    float *s = a->scratch;
    for (int g = 0; g < G; g++) memset(a->o + (size_t)g * a->o_stride, 0, sizeof(float) * hd);
    float m[64], l[64];
    for (int g0 = 0; g0 < G; g0 += 64) { /* groups of up to 64 queries: m and l on the stack */
        const int ng = G - g0 < 64 ? G - g0 : 64;
        for (int g = 0; g < ng; g++) m[g] = -INFINITY, l[g] = 0.0f;
        for (int p0 = 0; p0 < a->n; p0 += QHX_ATTEND_TILE) {
            const int np = a->n - p0 < QHX_ATTEND_TILE ? a->n - p0 : QHX_ATTEND_TILE;
            for (int g = 0; g < ng; g++) {
                const float *q = a->q + (size_t)(g0 + g) * a->q_stride;
                float *sg = s + (size_t)g * QHX_ATTEND_TILE, *o = a->o + (size_t)(g0 + g) * a->o_stride, mx = m[g];
                for (int p = 0; p < np; p++) {
                    const unsigned char *row = a->k + (size_t)(p0 + p) * a->stride;
                    float acc = 0.0f;
                    for (int i = 0; i < hd; i++) acc += q[i] * qhx_kv_at(a->form, row, hd, i);
                    sg[p] = acc * a->scale;
                    mx = sg[p] > mx ? sg[p] : mx;
                }
                const float shrink = expf(m[g] - mx);
                l[g] = l[g] * shrink + scalar_exp_sum(sg, np, mx);
                for (int i = 0; i < hd; i++) o[i] *= shrink;
                m[g] = mx;
                for (int p = 0; p < np; p++) {
                    const unsigned char *row = a->v + (size_t)(p0 + p) * a->stride;
                    for (int i = 0; i < hd; i++) o[i] += sg[p] * qhx_kv_at(a->form, row, hd, i);
                }
            }
        }
        for (int g = 0; g < ng; g++)
            for (int i = 0; i < hd; i++) a->o[(size_t)(g0 + g) * a->o_stride + i] /= l[g];
    }
}

/* the oracle: a whole softmax in double, then the weighted sum */
static void ref_attend(const qhx_attend_args *a) {
    double *w = malloc(sizeof(double) * (size_t)(a->n ? a->n : 1)), *acc = malloc(sizeof(double) * (size_t)a->hd);
    if (!w || !acc) { /* the oracle's own scratch; without it, the twin */
        free(w), free(acc);
        qhx_attend_scalar(a);
        return;
    }
    for (int g = 0; g < a->G; g++) {
        const float *q = a->q + (size_t)g * a->q_stride;
        double mx = -INFINITY, sum = 0.0;
        for (int p = 0; p < a->n; p++) {
            const unsigned char *row = a->k + (size_t)p * a->stride;
            double d = 0.0;
            for (int i = 0; i < a->hd; i++) d += (double)q[i] * qhx_kv_at(a->form, row, a->hd, i);
            w[p] = d * a->scale;
            mx = w[p] > mx ? w[p] : mx;
        }
        for (int p = 0; p < a->n; p++) sum += w[p] = exp(w[p] - mx);
        for (int i = 0; i < a->hd; i++) acc[i] = 0.0;
        for (int p = 0; p < a->n; p++) {
            const unsigned char *row = a->v + (size_t)p * a->stride;
            for (int i = 0; i < a->hd; i++) acc[i] += w[p] * qhx_kv_at(a->form, row, a->hd, i);
        }
        for (int i = 0; i < a->hd; i++) a->o[(size_t)g * a->o_stride + i] = (float)(acc[i] / sum);
    }
    free(w);
    free(acc);
}

const qhx_fp32_ops qhx_fp32_ref = {.matmul = ref_matmul, .gemm = ref_gemm,
                                   .delta_rule = scalar_delta_rule, .silu = scalar_silu, .conv = scalar_conv, .attend = ref_attend,
                                   .softmax_tile = scalar_softmax_tile, .kv_widen = qhx_kv_widen_scalar};
const qhx_fp32_ops qhx_fp32_scalar = {.matmul = scalar_matmul, .gemm = scalar_gemm,
                                      .delta_rule = scalar_delta_rule, .silu = scalar_silu, .conv = scalar_conv, .attend = qhx_attend_scalar,
                                      .softmax_tile = scalar_softmax_tile, .kv_widen = qhx_kv_widen_scalar};
const qhx_acts_ops qhx_acts_scalar_q16 = {.form = QHX_ACTS_Q16, .matmul = scalar_int_matmul, .decode = scalar_int_matmul, .matmul_w4 = scalar_w4_matmul,
                                          .round = scalar_round_q16, .round_q8 = scalar_round_q8};
