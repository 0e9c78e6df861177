/* The parallel-for that splits matmuls by rows, and the rounded-activation scratch. */
#include "format/w4.h"
#include "kernels/kernels.h"
#include "kernels/q8.h"
#include "util/error.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* Several matrices over the same input, as one parallel-for: chunk k of the whole group is chunk
 * k - first[i] of matrix i. */
typedef struct {
    const qhx_kernel_set *ks;
    const qhx_tensor *const *W;
    float *const *Y;
    int n;
    const float *X;
    const qhx_acts *acts;  /* set: rounded activations, for the W4 matrices and (i8_acts) the W8 ones */
    int i8_acts, w4_acts, i8_decode; /* the W8 ones through the set's prefill (i8_acts) or decode kernel */
    int T, own;                /* own: matrix m takes rows m T .. (m + 1) T - 1 of X, else all take X's T */
    int first[QHX_MATMUL_GROUP + 1];  /* matrix m is the group's 16-row blocks first[m] .. first[m + 1] - 1 */
    int step, share;           /* a take: a multiple of step blocks, about 1 / share of those left */
    atomic_int next;           /* the first block not yet taken */
    atomic_int status;         /* the first failure, or QHX_OK */
} matmul_job;

/* Blocks b0 .. b0 + n - 1 of the group, or 0 when none is left. Takes shrink as the work does
 * (guided scheduling): large ones while much is left, so few calls start cold, and single steps
 * at the end, so no thread waits long for another's last take. Memory bandwidth is not shared
 * evenly between cores, which is why the takes are not fixed halves (~8 % of decode). */
static int take(matmul_job *j, int *b0) {
    int cur = atomic_load(&j->next);
    for (;;) {
        const int left = j->first[j->n] - cur;
        if (left <= 0) return 0;
        int n = qhx_round_up(left / j->share + 1, j->step);
        if (n > left) n = left;
        if (atomic_compare_exchange_weak(&j->next, &cur, cur + n)) return *b0 = cur, n;
    }
}

/* a's rows from `at` on, as a view: every array advanced by `at` rows of its stride */
static const qhx_acts *acts_rows(qhx_acts *view, const qhx_acts *a, qhx_acts_form form, size_t at) {
    const size_t nbx = a->pad / (form == QHX_ACTS_Q16 ? QHX_Q16_BLOCK : QHX_Q8_BLOCK), nb4 = a->w4pad / QHX_W4_BLOCK;
    *view = *a;
    view->q = a->q ? a->q + at * a->pad : NULL, view->aq = a->aq ? a->aq + at * a->pad : NULL;
    view->laq = a->laq ? a->laq + at * a->pad : NULL, view->v = a->v ? a->v + at * a->pad : NULL;
    view->s = a->s + at * nbx;
    view->w4h = a->w4h ? a->w4h + at * a->w4pad : NULL, view->w4t = a->w4t ? a->w4t + at * a->w4tstride : NULL;
    view->w4c = a->w4c ? a->w4c + at * nb4 : NULL, view->w4s = a->w4s ? a->w4s + at * nb4 : NULL;
    return view;
}

/* Threads take blocks until none is left. Every row is computed whole by one kernel call, so
 * results never depend on the thread count or on who took what. */
static void matmul_part(void *arg, int i, int nth) {
    (void)i, (void)nth;
    matmul_job *j = arg;
    for (int b0, n; (n = take(j, &b0)) > 0;)
        for (int m = 0; m < j->n; m++) {
            const int lo = b0 > j->first[m] ? b0 : j->first[m], hi = b0 + n < j->first[m + 1] ? b0 + n : j->first[m + 1];
            if (lo >= hi) continue;
            const qhx_tensor *W = j->W[m];
            const int r0 = (lo - j->first[m]) * 16, r1 = (hi - j->first[m]) * 16 < W->rows ? (hi - j->first[m]) * 16 : W->rows;
            const size_t at = j->own ? (size_t)m * j->T : 0; /* the first input row it takes */
            qhx_acts view;
            const qhx_acts *A = j->acts && at ? acts_rows(&view, j->acts, j->w4_acts ? QHX_ACTS_Q8 : j->ks->acts, at) : j->acts;
            const qhx_status rc = W->dtype == QHX_Q4 && j->w4_acts   ? j->ks->matmul_acts_w4(W, A, j->T, j->Y[m], r0, r1)
                                  : W->dtype == QHX_I8 && j->i8_decode ? j->ks->decode_acts(W, A, j->T, j->Y[m], r0, r1)
                                  : W->dtype == QHX_I8 && j->i8_acts ? j->ks->matmul_acts(W, A, j->T, j->Y[m], r0, r1)
                                                                     : j->ks->matmul(W, j->X + at * W->cols, j->T, j->Y[m], r0, r1);
            if (rc) {
                int ok = QHX_OK;
                atomic_compare_exchange_strong(&j->status, &ok, (int)rc);
            }
        }
}

/* Room for the w4 fields of T rows of cols columns (w4t: a row's codes' bytes and an int32 a
 * block, what w4_prep may write). */
static qhx_status w4_reserve(qhx_acts *a, size_t cols, int T) {
    const size_t nb = qhx_w4_blocks(cols), need = nb * QHX_W4_BLOCK * (size_t)T;
    a->w4pad = nb * QHX_W4_BLOCK;
    a->w4tstride = nb * (QHX_W4_BLOCK + sizeof(int32_t));
    if (need <= a->w4cap) return QHX_OK;
    free(a->w4h), free(a->w4c), free(a->w4s), free(a->w4t);
    a->w4h = aligned_alloc(64, qhx_round_up(need, 64));
    a->w4t = aligned_alloc(64, qhx_round_up(a->w4tstride * (size_t)T, 64));
    a->w4c = malloc(sizeof(int32_t) * nb * (size_t)T);
    a->w4s = malloc(sizeof(float) * nb * (size_t)T);
    a->w4cap = need;
    if (a->w4h && a->w4t && a->w4c && a->w4s) return QHX_OK;
    free(a->w4h), free(a->w4c), free(a->w4s), free(a->w4t);
    a->w4h = NULL, a->w4t = NULL, a->w4c = NULL, a->w4s = NULL, a->w4cap = 0;
    return QHX_ERR_NOMEM;
}

/* Row t's w4 fields from its Q8 values (kernels.h says what they hold). Written as plain copies
 * and fixed-length sums, which the compiler vectorizes: a decode call pays it once a matrix. */
static void w4_row(const qhx_acts *a, size_t t) {
    const size_t nbx = a->pad / QHX_Q8_BLOCK, nb = a->w4pad / QHX_W4_BLOCK;
    const int8_t *q = a->q + t * a->pad;
    int8_t *h = a->w4h + t * a->w4pad;
    memcpy(h, q, a->pad);
    memset(h + a->pad, 0, a->w4pad - a->pad);
    for (size_t b = 0; b < nb; b++) {
        int32_t sum = 0;
        for (int c = 0; c < QHX_W4_BLOCK; c++) sum += h[b * QHX_W4_BLOCK + c];
        a->w4c[t * nb + b] = 8 * sum;
        a->w4s[t * nb + b] = b < nbx ? a->s[t * nbx + b] : 0.0f;
    }
}

static void round_part(void *arg, int i, int n) {
    const matmul_job *j = arg;
    const size_t cols = (size_t)j->W[0]->cols;
    const int rows = j->own ? j->T * j->n : j->T;
    for (int t = (int)((long long)rows * i / n); t < (int)((long long)rows * (i + 1) / n); t++) {
        if (j->w4_acts) {
            j->ks->round_q8(j->X + (size_t)t * cols, cols, j->acts, (size_t)t);
            w4_row(j->acts, (size_t)t);
            if (j->ks->w4_prep) j->ks->w4_prep(j->acts, (size_t)t);
        } else {
            j->ks->round_acts(j->X + (size_t)t * cols, cols, j->acts, (size_t)t);
        }
    }
}

/* Room for T rows of `cols` activations in the form; the kernels load them aligned. */
static qhx_status acts_reserve(qhx_acts_form form, qhx_acts *a, size_t cols, int T) {
    const int q16 = form == QHX_ACTS_Q16;
    a->pad = q16 ? qhx_q16_padded(cols) : qhx_q8_padded(cols);
    const size_t need = qhx_round_up(a->pad * (size_t)T, 64); /* aligned_alloc: a multiple of the alignment */
    if (need <= a->cap && !a->v == !q16) return QHX_OK;
    qhx_acts_free(a);
    a->aq = aligned_alloc(64, need);
    a->s = malloc(sizeof(float) * (need / QHX_Q8_BLOCK));
    if (q16) a->v = aligned_alloc(64, need * sizeof(int16_t)), a->laq = aligned_alloc(64, need);
    else a->q = aligned_alloc(64, need);
    if (!a->aq || !a->s || (q16 ? !a->v || !a->laq : !a->q)) {
        qhx_acts_free(a);
        return QHX_ERR_NOMEM;
    }
    a->cap = need;
    return QHX_OK;
}

void qhx_acts_free(qhx_acts *a) {
    free(a->q);
    free(a->aq);
    free(a->s);
    free(a->v);
    free(a->laq);
    free(a->w4h), free(a->w4c), free(a->w4s), free(a->w4t);
    a->w4h = NULL, a->w4t = NULL, a->w4c = NULL, a->w4s = NULL, a->w4cap = 0;
    a->q = a->aq = a->laq = NULL;
    a->v = NULL;
    a->s = NULL;
    a->cap = 0;
}

static qhx_status matmul_group(const qhx_exec *ex, const float *X, int T, int own, int n, const qhx_tensor *const W[], float *const Y[]) {
    if (n < 1 || n > QHX_MATMUL_GROUP) return qhx_fail(QHX_ERR_ARG, "matmul: %d matrices in a group (1 to %d)", n, QHX_MATMUL_GROUP);
    matmul_job j = {.ks = ex->ks, .W = W, .Y = Y, .n = n, .X = X, .T = T, .own = own};
    const int rows = own ? T * n : T; /* input rows to round */
    qhx_acts local = {0};
    /* Rounded activations pay in prefill, where each weight serves several tokens (1.2-1.5x), and
     * in decode where the set has a decode kernel for them: one token streams the
     * weights once either way, but widening int8 weights for fp32 activations costs more
     * arithmetic than the memory leaves room for at 60-70 GB/s (AVX-512: 50 GB/s a thread from
     * L2 against 70-84 with int16 activations). A stepwise call (per_token) and a single token go
     * through the decode kernel, several tokens through the prefill one. */
    int any_i8 = 0, any_w4 = 0;
    for (int m = 0; m < n; m++) {
        if (W[m]->cols != W[0]->cols)
            return qhx_fail(QHX_ERR_ARG, "matmul: a group's matrices take %d and %d columns", W[0]->cols, W[m]->cols);
        any_i8 |= W[m]->dtype == QHX_I8;
        any_w4 |= W[m]->dtype == QHX_Q4;
    }
    /* W4 takes activations rounded to int8 (Q8) for every token count and in every set, as
     * llama.cpp's 4-bit types take Q8_0 ones: its integer kernels compute each token alone
     * (per_token holds), and the rounding (1/254 of a block's largest value) is noise below the
     * 4-bit weights' own. On q35-kjv's W4 bundle it moves perplexity by 0.04 % where int16 moved
     * it by 0.00 %, and it halves the integer work (W4 prefill 1.21-1.25x W8's; bench/README.md in git history, 2026-12-03).
     * A group that mixes W4 and W8 (no bundle does) runs its W8 matrices on fp32 activations. */
    j.w4_acts = any_w4 && ex->ks->matmul_acts_w4;
    j.i8_decode = any_i8 && !j.w4_acts && ex->ks->decode_acts && (T == 1 || ex->per_token) && T <= QHX_DECODE_MAX_T;
    j.i8_acts = !j.i8_decode && any_i8 && !j.w4_acts && ex->ks->matmul_acts && T > 1 && !ex->per_token;
    if (j.i8_acts || j.i8_decode || j.w4_acts) {
        qhx_acts *a = ex->acts ? ex->acts : &local;
        if (acts_reserve(j.w4_acts ? QHX_ACTS_Q8 : ex->ks->acts, a, (size_t)W[0]->cols, rows) ||
            (j.w4_acts && w4_reserve(a, (size_t)W[0]->cols, rows))) {
            qhx_acts_free(&local);
            return qhx_fail(QHX_ERR_NOMEM, "matmul: out of memory for %d rounded activation rows", rows);
        }
        j.acts = a;
        /* a few rows round faster on this thread than the pool wakes (W4 decode: every matmul) */
        if (rows <= 4) round_part(&j, 0, 1);
        else qhx_pool_run(ex->pool, round_part, &j);
    }
    j.first[0] = 0;
    for (int m = 0; m < n; m++) j.first[m + 1] = j.first[m] + (W[m]->rows + 15) / 16;
    /* a kernel that packs panel_rows rows is handed whole panels; without a pool, one take */
    j.step = j.i8_acts && ex->ks->panel_rows > 16 ? ex->ks->panel_rows / 16 : 1;
    j.share = 2 * qhx_pool_size(ex->pool);
    if (ex->pool && j.first[n] > j.step) qhx_pool_run(ex->pool, matmul_part, &j);
    else j.share = 1, matmul_part(&j, 0, 1);
    qhx_acts_free(&local);
    if (j.status) return qhx_fail((qhx_status)j.status, "matmul: out of memory for a kernel's row scratch");
    return QHX_OK;
}

qhx_status qhx_matmul_many(const qhx_exec *ex, const float *X, int T, int n, const qhx_tensor *const W[], float *const Y[]) {
    return matmul_group(ex, X, T, 0, n, W, Y);
}

qhx_status qhx_matmul_each(const qhx_exec *ex, const float *X, int T, int n, const qhx_tensor *const W[], float *const Y[]) {
    return matmul_group(ex, X, T, 1, n, W, Y);
}

qhx_status qhx_matmul(const qhx_exec *ex, const qhx_tensor *W, const float *X, int T, float *Y) {
    return qhx_matmul_many(ex, X, T, 1, &W, &Y);
}
