/* The split between the model graph and the kernels (ggml style): the forward pass calls
 * qhx_matmul; which kernel runs (reference, scalar, AVX2, AVX-512) and on how many threads is the
 * business of the qhx_exec it is handed. Every variant has the scalar twin as its oracle. */
#ifndef QHX_KERNELS_H
#define QHX_KERNELS_H
#include "model/qwen35.h"

typedef struct qhx_pool qhx_pool;

/* Y[t][r] = sum_c W[r][c] * X[t][c] for t < T and rows r0 <= r < r1. X rows are W->cols floats,
 * Y rows W->rows floats. One call computes whole rows, so results never depend on the thread
 * count. */
typedef void (*qhx_matmul_fn)(const qhx_tensor *W, const float *X, int T, float *Y, int r0, int r1);

/* T activation rows rounded to int8 (kernels/q8.h), once per matmul for every thread: q, the
 * set's second form of it (pad bytes per row: |q| for AVX2's sign trick, q + 128 as unsigned bytes
 * for VNNI), one scale per 32 columns (pad / 32 per row). */
typedef struct {
    int8_t *q, *aq;
    float *s;
    size_t pad, cap;      /* cap: bytes each of q and aq can hold */
} qhx_q8_acts;

typedef void (*qhx_matmul_q8_fn)(const qhx_tensor *W, const qhx_q8_acts *X, int T, float *Y, int r0, int r1);

typedef struct {
    const char *name;      /* "ref", "scalar", "avx2", "avx512"; "-q8": int8 activations for W8 */
    qhx_matmul_fn matmul;  /* handles every dtype: F32, BF16, F16 and I8 */
    qhx_matmul_q8_fn matmul_q8; /* I8 weights x int8 activations; NULL: fp32 activations throughout */
    /* one activation row to int8, its second form and block scales, q bit for bit as qhx_q8_quantize */
    void (*quantize)(const float *x, size_t cols, int8_t *q, int8_t *aq, float *s);
    float (*dot)(const float *a, const float *b, int n);
    void (*axpy)(float *y, float a, const float *x, int n);  /* y += a x */
    /* C[M][N] += alpha A[M][K] B[K][N], row-major with row strides: the chunked delta rule's
     * small products (64 x 128 x 128 per chunk and head) */
    void (*gemm)(int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb, float *C, int ldc);
    /* One token of the recurrent gated delta rule (spec §3.5.1) for one value head, S [dk][dv]:
     * S = decay S;  S += k ((v - S^T k) beta)^T;  o = S^T q.  kv: dv floats of scratch. */
    void (*delta_step)(float *S, const float *q, const float *k, const float *v, float beta, float decay, int dk, int dv,
                       float *o, float *kv);
    /* x = silu(x) * mul elementwise (mul NULL: silu(x)); silu(x) = x / (1 + e^-x) */
    void (*silu)(float *x, const float *mul, size_t n);
    int (*supported)(void);
} qhx_kernel_set;

typedef struct qhx_exec {
    const qhx_kernel_set *ks;
    qhx_pool *pool;        /* NULL: run on the calling thread */
    qhx_q8_acts *acts;     /* int8 activation scratch kept between calls; NULL: one per call */
} qhx_exec;

/* The kernel set called `name` ("auto" = the best this CPU runs; the environment variable
 * QHX_KERNELS overrides "auto"), or NULL with the error set when unknown or unsupported here. */
const qhx_kernel_set *qhx_kernels_find(const char *name);
/* Names of every kernel set compiled in, for help texts: "ref scalar avx2 avx512". */
const char *qhx_kernels_names(void);

/* the AVX2 vector ops, shared by the AVX2 sets */
float qhx_avx2_dot(const float *a, const float *b, int n);
void qhx_avx2_axpy(float *y, float a, const float *x, int n);
void qhx_avx2_gemm(int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb, float *C, int ldc);
void qhx_avx2_delta_step(float *S, const float *q, const float *k, const float *v, float beta, float decay, int dk, int dv,
                         float *o, float *kv);
void qhx_avx2_silu(float *x, const float *mul, size_t n);
int qhx_avx2_supported(void);
/* the avx512 set's fp32-activation matmul, shared by the VNNI set */
void qhx_avx512_matmul(const qhx_tensor *W, const float *X, int T, float *Y, int r0, int r1);
int qhx_avx512_supported(void);
/* the rule as the spec writes it, step by step: the twin of every other delta_step */
void qhx_scalar_delta_step(float *S, const float *q, const float *k, const float *v, float beta, float decay, int dk, int dv,
                           float *o, float *kv);

void qhx_matmul(const qhx_exec *ex, const qhx_tensor *W, const float *X, int T, float *Y);
/* Y[m] = W[m] X for up to 4 matrices of the same width as one parallel-for: one wait for the
 * group instead of one a matrix, and small matrices run beside the large ones. */
void qhx_matmul_many(const qhx_exec *ex, const float *X, int T, int n, const qhx_tensor *const W[], float *const Y[]);
void qhx_q8_acts_free(qhx_q8_acts *a);

extern const qhx_kernel_set qhx_kernels_ref, qhx_kernels_scalar, qhx_kernels_avx2, qhx_kernels_avx512,
    qhx_kernels_scalar_q8, qhx_kernels_avx2_q8, qhx_kernels_avx512_q8;

/* ---- thread pool: persistent workers, one parallel-for at a time -------------------------- */

qhx_pool *qhx_pool_new(int n_threads);
void qhx_pool_free(qhx_pool *p);
int qhx_pool_size(const qhx_pool *p);
/* Runs fn(arg, i, n) for i in [0, n) with n = the pool size, the caller taking i = 0; returns
 * when all are done. */
void qhx_pool_run(qhx_pool *p, void (*fn)(void *arg, int i, int n), void *arg);

#endif
