/* The split between the model graph and the kernels (ggml style): the forward pass calls
 * qhx_matmul; which kernel runs (reference, scalar, AVX2, AVX-512) and on how many threads is the
 * business of the qhx_exec it is handed. Every variant has the scalar twin as its oracle. */
#ifndef QHX_KERNELS_H
#define QHX_KERNELS_H
#include "util/tensor.h"
#include <stdint.h>

typedef struct qhx_pool qhx_pool;

/* Y[t][r] = sum_c W[r][c] * X[t][c] for t < T and rows r0 <= r < r1. X rows are W->cols floats,
 * Y rows W->rows floats. One call computes whole rows, so results never depend on the thread
 * count. */
typedef void (*qhx_matmul_fn)(const qhx_tensor *W, const float *X, int T, float *Y, int r0, int r1);

/* How a kernel set rounds prefill activations for W8 matrices. */
typedef enum {
    QHX_ACTS_F32 = 0, /* not at all: fp32 activations throughout */
    QHX_ACTS_Q8,      /* int8 in blocks of 32 (kernels/q8.h): approximate, as llama.cpp's Q8_0 */
    QHX_ACTS_Q16,     /* int16 in blocks of 32 as two int8 parts (kernels/q8.h): the default */
    QHX_ACTS_BF16     /* bf16, nearest even, in AMX's tile order */
} qhx_acts_form;

/* T activation rows rounded once per matmul for every thread, pad (cols rounded up to 32) values a
 * row, one scale s per 32 columns (pad / 32 per row). Q8: q, and the set's second form of it in
 * aq (|q| for AVX2's sign trick, q + 128 as unsigned bytes for VNNI). Q16: v, and for VNNI the
 * high and low bytes (qhx_q16_split) + 128 in aq and laq. BF16: bf in AMX's tile order
 * (qhx_acts_bf16_at): rows in tiles of 16, each tile a run of 16 x 32-column blocks, so one tile
 * load is 1 KiB in a row; the rows past T in the last tile are zero. */
typedef struct {
    int8_t *q, *aq, *laq;
    int16_t *v;
    float *s;
    uint16_t *bf;
    size_t pad, cap;      /* cap: values each of q, aq, laq and v, or bf, can hold */
} qhx_acts;

#define QHX_ACTS_TILE 16

/* index in a->bf of row t, column c */
static inline size_t qhx_acts_bf16_at(const qhx_acts *a, size_t t, size_t c) {
    return (t / QHX_ACTS_TILE * a->pad + c / 32 * 32) * QHX_ACTS_TILE + t % QHX_ACTS_TILE * 32 + c % 32;
}

typedef void (*qhx_matmul_acts_fn)(const qhx_tensor *W, const qhx_acts *X, int T, float *Y, int r0, int r1);

typedef struct {
    /* "ref", "scalar", "avx2", "avx512", "amx"; "-q16" / "-q8" / "-bf16": how activations are
     * rounded for W8 in prefill */
    const char *name;
    qhx_matmul_fn matmul;  /* handles every dtype: F32, BF16, F16 and I8 */
    /* I8 weights x rounded activations (prefill); NULL: fp32 activations throughout */
    qhx_matmul_acts_fn matmul_acts;
    qhx_acts_form acts;
    /* one activation row (cols values) into row t of a, in the set's form; q or v and s are bit
     * for bit those of qhx_q8_quantize / qhx_q16_quantize, the pad columns zero */
    void (*round_acts)(const float *x, size_t cols, const qhx_acts *a, size_t t);
    /* prefill: the fewest rows a matmul_acts call should get (0: any), for a kernel that packs
     * that many rows and passes every token over them */
    int panel_rows;
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

/* Up to this many tokens a call, the SIMD sets' fp32 matmuls run their decode kernels, one token
 * after another over each row group while it sits in L1: the weights stream once, each token
 * gets the arithmetic it gets alone, and a speculative verify pass costs little more than one
 * decode step. Above it, multi-token register tiles take over (prefill with fp32 activations). */
#define QHX_DECODE_MAX_T 16

typedef struct qhx_exec {
    const qhx_kernel_set *ks;
    qhx_pool *pool;        /* NULL: run on the calling thread */
    qhx_acts *acts;        /* rounded-activation scratch kept between calls; NULL: one per call */
    int per_token;         /* decode's numerics for every token of a call: fp32 activations, no
                              multi-token tiles, so n tokens at once give bit for bit what n
                              one-token calls give (weights still stream once) */
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
/* the avx512 set's fp32-activation matmul and vector ops, shared by the VNNI and AMX sets */
void qhx_avx512_matmul(const qhx_tensor *W, const float *X, int T, float *Y, int r0, int r1);
float qhx_avx512_dot(const float *a, const float *b, int n);
void qhx_avx512_axpy(float *y, float a, const float *x, int n);
void qhx_avx512_gemm(int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb, float *C, int ldc);
int qhx_avx512_supported(void);
/* the rule as the spec writes it, step by step: the twin of every other delta_step */
void qhx_scalar_delta_step(float *S, const float *q, const float *k, const float *v, float beta, float decay, int dk, int dv,
                           float *o, float *kv);

void qhx_matmul(const qhx_exec *ex, const qhx_tensor *W, const float *X, int T, float *Y);
/* Y[m] = W[m] X for up to 4 matrices of the same width as one parallel-for: one wait for the
 * group instead of one a matrix, and small matrices run beside the large ones. */
void qhx_matmul_many(const qhx_exec *ex, const float *X, int T, int n, const qhx_tensor *const W[], float *const Y[]);
void qhx_acts_free(qhx_acts *a);

extern const qhx_kernel_set qhx_kernels_ref, qhx_kernels_scalar, qhx_kernels_avx2, qhx_kernels_avx512,
    qhx_kernels_scalar_q8, qhx_kernels_avx2_q8, qhx_kernels_avx512_q8, qhx_kernels_scalar_q16, qhx_kernels_avx2_q16,
    qhx_kernels_avx512_q16, qhx_kernels_scalar_bf16, qhx_kernels_amx_bf16;

/* ---- floating-point mode ------------------------------------------------------------------- */

/* Subnormal floats cost Intel cores a microcode assist per operation (about 100 cycles): the
 * delta rule's decays underflow into them (e^{G_i - G_j} across a chunk, a state decayed chunk
 * after chunk), and on a Sapphire Rapids VM they made the rule's products 2.5x slower, 20 % of
 * prefill at 1024 tokens. So every set but ref computes with flush-to-zero and
 * denormals-are-zero, which moves results by less than 1.2e-38 a value; ref stays IEEE.
 * qhx_fp_enter sets the mode for `ks` on this thread and returns the one to restore. */
unsigned qhx_fp_enter(const qhx_kernel_set *ks);
void qhx_fp_leave(unsigned saved);
unsigned qhx_fp_mode(void);   /* this thread's mode, as qhx_fp_set takes it */
void qhx_fp_set(unsigned mode);

/* ---- thread pool: persistent workers, one parallel-for at a time -------------------------- */

qhx_pool *qhx_pool_new(int n_threads);
void qhx_pool_free(qhx_pool *p);
int qhx_pool_size(const qhx_pool *p);
/* Runs fn(arg, i, n) for i in [0, n) with n = the pool size, the caller taking i = 0; returns
 * when all are done. */
void qhx_pool_run(qhx_pool *p, void (*fn)(void *arg, int i, int n), void *arg);

#endif
