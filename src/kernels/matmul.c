/* The parallel-for that splits matmuls by rows, and the rounded-activation scratch. */
#include "kernels/kernels.h"
#include "kernels/q8.h"
#include "util/error.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define MAX_GROUP 4

/* Several matrices over the same input, as one parallel-for: chunk k of the whole group is chunk
 * k - first[i] of matrix i. */
typedef struct {
    const qhx_kernel_set *ks;
    const qhx_tensor *const *W;
    float *const *Y;
    int n;
    const float *X;
    const qhx_acts *acts;  /* set: the rounded-activation kernel for the I8 matrices */
    int T;
    int chunk_rows[MAX_GROUP], first[MAX_GROUP + 1];
    atomic_int next;          /* the next chunk to take */
    atomic_int status;        /* the first failure, or QHX_OK */
} matmul_job;

/* Threads take chunks of rows until none is left: memory bandwidth is not shared evenly between
 * cores, so equal static halves left one core waiting for the other (~8 % of decode). Chunks
 * are whole 16-row blocks, so every row is still computed whole by one kernel call and results
 * never depend on the thread count. */
static void matmul_part(void *arg, int i, int n) {
    (void)i, (void)n;
    matmul_job *j = arg;
    for (int k; (k = atomic_fetch_add(&j->next, 1)) < j->first[j->n];) {
        int m = 0;
        while (k >= j->first[m + 1]) m++;
        const qhx_tensor *W = j->W[m];
        const int r0 = (k - j->first[m]) * j->chunk_rows[m], r1 = r0 + j->chunk_rows[m] < W->rows ? r0 + j->chunk_rows[m] : W->rows;
        const qhx_status rc = j->acts && W->dtype == QHX_I8 ? j->ks->matmul_acts(W, j->acts, j->T, j->Y[m], r0, r1)
                                                            : j->ks->matmul(W, j->X, j->T, j->Y[m], r0, r1);
        if (rc) {
            int ok = QHX_OK;
            atomic_compare_exchange_strong(&j->status, &ok, (int)rc);
        }
    }
}

static void round_part(void *arg, int i, int n) {
    const matmul_job *j = arg;
    const size_t cols = (size_t)j->W[0]->cols;
    for (int t = (int)((long long)j->T * i / n); t < (int)((long long)j->T * (i + 1) / n); t++)
        j->ks->round_acts(j->X + (size_t)t * cols, cols, j->acts, (size_t)t);
}

/* Room for T rows of `cols` activations in the set's form; the kernels load them aligned. */
static qhx_status acts_reserve(const qhx_kernel_set *ks, qhx_acts *a, size_t cols, int T) {
    a->pad = qhx_q8_padded(cols);
    const int bf16 = ks->acts == QHX_ACTS_BF16, q16 = ks->acts == QHX_ACTS_Q16;
    const size_t rows = bf16 ? qhx_round_up((size_t)T, QHX_ACTS_TILE) : (size_t)T;
    const size_t need = qhx_round_up(a->pad * rows, 64); /* aligned_alloc: a multiple of the alignment */
    if (need <= a->cap && !a->bf == !bf16 && !a->v == !q16) return QHX_OK;
    qhx_acts_free(a);
    if (bf16) {
        a->bf = aligned_alloc(64, need * sizeof(uint16_t));
    } else {
        a->aq = aligned_alloc(64, need);
        a->s = malloc(sizeof(float) * (need / QHX_Q8_BLOCK));
        if (q16) a->v = aligned_alloc(64, need * sizeof(int16_t)), a->laq = aligned_alloc(64, need);
        else a->q = aligned_alloc(64, need);
    }
    if (bf16 ? !a->bf : !a->aq || !a->s || (q16 ? !a->v || !a->laq : !a->q)) {
        qhx_acts_free(a);
        return QHX_ERR_NOMEM;
    }
    a->cap = need;
    return QHX_OK;
}

/* the rows past T in the last bf16 tile: zero, so no kernel reads anything unset */
static void acts_zero_tail(qhx_acts *a, int T) {
    for (size_t t = (size_t)T; t % QHX_ACTS_TILE; t++)
        for (size_t c = 0; c < a->pad; c += 32) memset(a->bf + qhx_acts_bf16_at(a, t, c), 0, 32 * sizeof(uint16_t));
}

void qhx_acts_free(qhx_acts *a) {
    free(a->q);
    free(a->aq);
    free(a->s);
    free(a->bf);
    free(a->v);
    free(a->laq);
    a->q = a->aq = a->laq = NULL;
    a->v = NULL;
    a->s = NULL;
    a->bf = NULL;
    a->cap = 0;
}

qhx_status qhx_matmul_many(const qhx_exec *ex, const float *X, int T, int n, const qhx_tensor *const W[], float *const Y[]) {
    if (n < 1 || n > MAX_GROUP) return qhx_fail(QHX_ERR_ARG, "matmul: %d matrices in a group (1 to %d)", n, MAX_GROUP);
    matmul_job j = {.ks = ex->ks, .W = W, .Y = Y, .n = n, .X = X, .T = T};
    qhx_acts local = {0};
    /* Int8 activations pay where each weight serves several tokens (prefill: 1.2-1.5x). One token
     * streams the weights once either way: there the two measured equal on the 4B shape (5.22-5.60
     * vs 5.40-5.64 tok/s, alternating runs; again 0.83-0.85 vs 0.76-0.84 of the bandwidth), and
     * fp32 activations are exact against the W8 weights, so decode keeps them. */
    int any_i8 = 0;
    for (int m = 0; m < n; m++) {
        if (W[m]->cols != W[0]->cols)
            return qhx_fail(QHX_ERR_ARG, "matmul: a group's matrices take %d and %d columns", W[0]->cols, W[m]->cols);
        any_i8 |= W[m]->dtype == QHX_I8;
    }
    if (any_i8 && ex->ks->matmul_acts && T > 1 && !ex->per_token) {
        qhx_acts *a = ex->acts ? ex->acts : &local;
        if (acts_reserve(ex->ks, a, (size_t)W[0]->cols, T))
            return qhx_fail(QHX_ERR_NOMEM, "matmul: out of memory for %d rounded activation rows", T);
        if (a->bf) acts_zero_tail(a, T);
        j.acts = a;
        qhx_pool_run(ex->pool, round_part, &j);
    }
    /* 16 chunks a thread over the whole group: a late thread costs at most 1/16 of its share
     * (48 measured the same); matrices under 64 rows are one chunk each */
    int blocks = 0;
    for (int m = 0; m < n; m++) blocks += (W[m]->rows + 15) / 16;
    const int want = 16 * qhx_pool_size(ex->pool);
    int rows = 16 * ((blocks + want - 1) / want);
    if (j.acts && rows < ex->ks->panel_rows) rows = ex->ks->panel_rows;
    j.first[0] = 0;
    for (int m = 0; m < n; m++) {
        j.chunk_rows[m] = W[m]->rows < 64 || !ex->pool ? W[m]->rows : rows;
        j.first[m + 1] = j.first[m] + (W[m]->rows + j.chunk_rows[m] - 1) / j.chunk_rows[m];
    }
    if (ex->pool && j.first[n] > 1) qhx_pool_run(ex->pool, matmul_part, &j);
    else matmul_part(&j, 0, 1);
    qhx_acts_free(&local);
    if (j.status) return qhx_fail((qhx_status)j.status, "matmul: out of memory for a kernel's row scratch");
    return QHX_OK;
}

qhx_status qhx_matmul(const qhx_exec *ex, const qhx_tensor *W, const float *X, int T, float *Y) {
    return qhx_matmul_many(ex, X, T, 1, &W, &Y);
}
