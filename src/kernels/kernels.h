/* The split between the model graph and the kernels (ggml style): the forward pass calls
 * qhx_matmul; which kernel runs (reference, scalar, AVX2, AVX-512) and on how many threads is the
 * business of the qhx_exec it is handed. Every variant has the scalar twin as its oracle. */
#ifndef QHX_KERNELS_H
#define QHX_KERNELS_H
#include "qhexrt.h"
#include "util/tensor.h"
#include <stdint.h>
#include <string.h>

typedef struct qhx_pool qhx_pool;

/* Y[t][r] = sum_c W[r][c] * X[t][c] for t < T and rows r0 <= r < r1. X rows are W->cols floats,
 * Y rows W->rows floats. One call computes whole rows, so results never depend on the thread
 * count. QHX_ERR_NOMEM when a kernel's row scratch cannot be had. */
typedef qhx_status (*qhx_matmul_fn)(const qhx_tensor *W, const float *X, int T, float *Y, int r0, int r1);

/* How activations are rounded for a matrix's integer kernel. */
typedef enum {
    QHX_ACTS_F32 = 0, /* not at all: fp32 activations throughout */
    QHX_ACTS_Q8,      /* int8 in blocks of 32 (kernels/q8.h), as llama.cpp's Q8_0: what W4 takes */
    QHX_ACTS_Q16,     /* int16 in blocks of 64, or as two int8 parts (kernels/q8.h): what W8 takes */
} qhx_acts_form;

/* T activation rows rounded once per matmul for every thread, pad (cols rounded up to the form's
 * block: 64 for Q16, else 32) values a row, one scale s per block (pad / block per row). Q8: q, and the set's second form of it in
 * aq (|q| for AVX2's sign trick, q + 128 as unsigned bytes for VNNI). Q16: v, and for VNNI the
 * high and low bytes (qhx_q16_split) + 128 in aq and laq. */
typedef struct {
    int8_t *q, *aq, *laq;
    int16_t *v;
    float *s;
    size_t pad, cap;      /* cap: values each of q, aq, laq and v can hold */
    /* For W4 matrices (format/w4.h), which always take Q8 (see qhx_matmul_many): q again as the
     * W4 kernels take it, each row w4pad long (whole 4-block units, zero past pad) in w4h, and per
     * 32-column block 8 x its sum of q in w4c and its scale in w4s; and, for a set that arranges
     * them its own way (qhx_acts_ops.w4_prep), row t's arrangement at w4t + t w4tstride. */
    int8_t *w4h, *w4t;
    int32_t *w4c;
    float *w4s;
    size_t w4pad, w4cap, w4tstride;
} qhx_acts;

typedef qhx_status (*qhx_matmul_acts_fn)(const qhx_tensor *W, const qhx_acts *X, int T, float *Y, int r0, int r1);

/* One query token's attention over the n cached rows of a KV head, for the G query heads that
 * share it: o_g = sum_p softmax_p(scale q_g . k_p) v_p, in one pass over the rows (online softmax,
 * QHX_ATTEND_TILE rows at a time), each row read once for all G queries. Rows are head rows in
 * `form` (kernels/kv.h), `stride` bytes apart. Tiles of 256 rows: on two threads at 32k rows,
 * f16 reads 0.60 of a streaming loop's bandwidth, against 0.47 at 64 (bench/README.md). */
#define QHX_ATTEND_TILE 256
typedef struct {
    qhx_kv_form form;
    int hd, G, n;
    const float *q;
    size_t q_stride;               /* query g at q + g q_stride */
    const unsigned char *k, *v;    /* the head's row 0 */
    size_t stride;
    float scale;
    float *o;
    size_t o_stride;               /* o_g at o + g o_stride */
    float *scratch;                /* QHX_ATTEND_TILE G floats */
} qhx_attend_args;

/* T tokens of the gated delta rule on one value head's state S [dk][dv] (spec §3.5.1), each as
 * a lone step computes it:  S = e^g S;  S += k ((v - S^T k) beta)^T;  o = S^T q.  So prefill,
 * decode and a rewind's replay leave the same state bit for bit, however the tokens were split. */
typedef struct {
    const float *q, *k, *v;   /* token t's rows at q + t stride, ... */
    size_t stride;
    const float *beta, *g;    /* token t's at beta[t gstride], g[t gstride]; g: the decay's log */
    size_t gstride;
    float *o;                 /* token t's dv outputs at o + t ostride */
    size_t ostride;
    int T, dk, dv;
    float *work;              /* dv floats */
    const float *next;        /* the [dk][dv] state the caller steps next, fetched into cache during
                                 the last token (NULL: none) */
} qhx_delta_args;

/* What one vector layer gives over fp32 activations: kernels/fp32_ops.h written once and
 * instantiated per ISA (qhx_fp32_avx2, qhx_fp32_avx512), and the portable pair qhx_fp32_scalar (the
 * twin the others are tested against) and qhx_fp32_ref (the oracle). */
typedef struct {
    qhx_matmul_fn matmul;  /* every dtype: F32, BF16, F16 and I8 */
    /* C[M][N] += alpha A[M][K] B[K][N]: B and C row-major with row strides, A(i, k) at
     * A[i lda + k acs] (acs 1: row-major; lda 1: A stored transposed). Prefill attention's tiles. */
    void (*gemm)(int M, int N, int K, float alpha, const float *A, int lda, int acs, const float *B, int ldb, float *C, int ldc);
    /* The recurrent gated delta rule (spec §3.5.1) over T tokens of one value head */
    void (*delta_rule)(float *S, const qhx_delta_args *a);
    /* x = silu(x) * mul elementwise (mul NULL: silu(x)); silu(x) = x / (1 + e^-x) */
    void (*silu)(float *x, const float *mul, size_t n);
    /* The Gated DeltaNet's causal depthwise conv over T tokens, then SiLU (spec §3.5), for n
     * channels of rows C floats apart: out_t = silu(w[K-1] x_t + w[0] x_{t-K+1} + ... + w[K-2]
     * x_{t-1}), the products added in that order (the reference's, in every set: only the SiLU is
     * the set's own, as its silu). taps [K][C]; inputs before token 0 come from fifo [K-1][C]
     * (oldest first), which is left holding the last K-1 (qhx_conv_keep). */
    void (*conv)(const float *taps, float *fifo, const float *in, float *out, size_t C, int K, int T, int n);
    void (*attend)(const qhx_attend_args *a);
    /* One tile of prefill attention's running softmax over a block of queries, a query a column:
     * s [n][ld] holds the tile's scores (row p, column i < nq) and query i sees its first seen[i]
     * rows. With m_i the running maximum over this and earlier tiles, s becomes e^(s - m_i), 0 past
     * seen[i]; sum[i] and query i's output row o + i ostride (hd floats) are scaled by
     * e^(m_old - m_i), and the new weights' sum is added to sum[i]. */
    void (*softmax_tile)(float *s, int n, int ld, int nq, const int *seen, float *m, float *sum, float *o, size_t ostride, int hd);
    /* n head rows (kernels/kv.h), `stride` bytes apart, widened to fp32 rows ld floats apart */
    void (*kv_widen)(qhx_kv_form form, const unsigned char *rows, size_t stride, int hd, int n, float *out, int ld);
} qhx_fp32_ops;

/* An int8-dot specialisation: W8 weights x activations rounded to `form` (prefill), and W4
 * weights x the same activations (decode and prefill). */
typedef struct {
    qhx_acts_form form;
    qhx_matmul_acts_fn matmul;
    /* W8 decode (T <= QHX_DECODE_MAX_T) over the same activations, each token alone, the weights
     * streamed once; NULL: W8 decode keeps fp32 activations (the fp32 layer's kernel) */
    qhx_matmul_acts_fn decode;
    /* W4 (format/w4.h) x Q8 activations (q, s and the w4 fields; a prefill kernel may take the
     * set's second form of q in aq, as its W8 one does). Every set's kernel computes what the scalar
     * twin does, bit for bit: per row and block the exact integer sum of (q - 8) x, then
     * acc[b % 4] = fma(sum, d * s, acc[b % 4]) in fp32, and (acc0 + acc1) + (acc2 + acc3). Each
     * token alone: results do not depend on T. NULL: W4 runs the fp32 kernel. */
    qhx_matmul_acts_fn matmul_w4;
    /* one activation row (cols values) into row t of a, in the form; q or v and s are bit for bit
     * those of qhx_q8_quantize / qhx_q16_quantize, the pad columns zero */
    void (*round)(const float *x, size_t cols, const qhx_acts *a, size_t t);
    /* the same ISA's Q8 rounding, whatever the form: what W4 matrices take */
    void (*round_q8)(const float *x, size_t cols, const qhx_acts *a, size_t t);
    /* after row t's w4 fields: the set's own arrangement of them in w4t, once a matmul for every
     * call of its W4 kernel (NULL: none) */
    void (*w4_prep)(const qhx_acts *a, size_t t);
    /* the fewest rows a call should get (0: any), for a kernel that packs that many rows and
     * passes every token over them */
    int panel_rows;
} qhx_acts_ops;

/* The conv's input row tau (< T): token tau's, or before the first token the FIFO's. */
static inline const float *qhx_conv_row(const float *fifo, const float *in, size_t C, int K, int tau) {
    return tau >= 0 ? in + (size_t)tau * C : fifo + (size_t)(tau + K - 1) * C;
}
/* After T tokens: the FIFO moved on to the last K-1 inputs (oldest first), n channels a row. */
static inline void qhx_conv_keep(float *fifo, const float *in, size_t C, int K, int T, int n) {
    for (int j = 0; j < K - 1; j++) /* row j + T of the old FIFO is read before it is written */
        memmove(fifo + (size_t)j * C, qhx_conv_row(fifo, in, C, K, T - (K - 1) + j), sizeof(float) * (size_t)n);
}

/* the scalar twins, which the vector layers fall back on for shapes their lanes do not divide */
void qhx_attend_scalar(const qhx_attend_args *a);
void qhx_kv_widen_scalar(qhx_kv_form form, const unsigned char *rows, size_t stride, int hd, int n, float *out, int ld);

extern const qhx_fp32_ops qhx_fp32_ref, qhx_fp32_scalar, qhx_fp32_avx2, qhx_fp32_avx512, qhx_fp32_neon;
extern const qhx_acts_ops qhx_acts_scalar_q16, qhx_acts_avx2_q16, qhx_acts_vnni_q16, qhx_acts_neon_q16, qhx_acts_i8mm_q16;
qhx_status qhx_i8mm_w8_matmul(const qhx_tensor *W, const qhx_acts *X, int T, float *Y, int r0, int r1);

/* A kernel set: a vector layer's fp32 ops x how prefill and decode round activations for W8
 * (kernels/sets.c composes them). The forward calls it through these fields. */
typedef struct {
    /* "ref", "scalar", "avx2", "avx512", "neon", "neon-i8mm" */
    const char *name;
    qhx_matmul_fn matmul;
    /* I8 weights x rounded activations (prefill); NULL: fp32 activations throughout */
    qhx_matmul_acts_fn matmul_acts;
    qhx_matmul_acts_fn decode_acts; /* I8 weights x rounded activations, decode; NULL: fp32 */
    qhx_matmul_acts_fn matmul_acts_w4; /* Q4 weights x rounded activations; NULL: fp32 */
    qhx_acts_form acts;
    void (*round_acts)(const float *x, size_t cols, const qhx_acts *a, size_t t);
    void (*round_q8)(const float *x, size_t cols, const qhx_acts *a, size_t t); /* for W4 */
    void (*w4_prep)(const qhx_acts *a, size_t t);
    int panel_rows;
    void (*gemm)(int M, int N, int K, float alpha, const float *A, int lda, int acs, const float *B, int ldb, float *C, int ldc);
    void (*delta_rule)(float *S, const qhx_delta_args *a);
    void (*silu)(float *x, const float *mul, size_t n);
    void (*conv)(const float *taps, float *fifo, const float *in, float *out, size_t C, int K, int T, int n);
    void (*attend)(const qhx_attend_args *a);
    void (*softmax_tile)(float *s, int n, int ld, int nq, const int *seen, float *m, float *sum, float *o, size_t ostride, int hd);
    void (*kv_widen)(qhx_kv_form form, const unsigned char *rows, size_t stride, int hd, int n, float *out, int ld);
    int ieee;       /* computes without flush-to-zero (ref): see qhx_fp_enter */
    int supported;  /* this CPU (and OS) runs it */
} qhx_kernel_set;

/* ---- the CPU (kernels/cpu.c: the one place that asks it) ----------------------------------- */

enum {
    QHX_CPU_AVX2 = 1 << 0,      /* with FMA and F16C */
    QHX_CPU_AVX512 = 1 << 1,    /* F, with AVX2, FMA and F16C */
    QHX_CPU_AVX512_VNNI = 1 << 2, /* with BW and VL */
    QHX_CPU_NEON = 1 << 4,      /* AArch64 Advanced SIMD (every AArch64 CPU) */
    QHX_CPU_NEON_DOT = 1 << 5,  /* Armv8.2 dot product: sdot/udot (HWCAP_ASIMDDP) */
    QHX_CPU_NEON_I8MM = 1 << 6, /* Armv8.6 int8 matrix multiply: smmla (HWCAP2_I8MM) */
};
unsigned qhx_cpu_features(void);

/* Bytes ahead of a decode kernel's stream, fetched non-temporally (every weight is read once).
 * 8 KiB streamed W8 1.12-1.19x faster than 2 KiB with the AVX-512 layer on a Zen 5 VM
 * (distances alternated 15 times in one process, 2 threads, 4B MLP matrices); 16 KiB measured the
 * same as 8. Over 614 MB, 2 threads, at 72-76 GB/s, alternated 21 times with a plain read loop:
 * 0.87-0.89 of the loop against 0.70-0.73 fetching into every level (4 and 2 KiB ahead:
 * 0.76-0.84). The row-major rows, AVX2's one-pass int16 W8 and the AVX-512 W8 decode of several
 * tokens fetch this far ahead; the AVX-512 W8 decode of one token fetches nothing (int_vnni.c),
 * W4 its own way. */
#define QHX_STREAM_AHEAD 8192

/* Up to this many tokens a call, the SIMD sets' fp32 matmuls run their decode kernels, one token
 * after another over each row group while it sits in L1: the weights stream once, each token
 * gets the arithmetic it gets alone, and a speculative verify pass costs little more than one
 * decode step. Above it, multi-token register tiles take over (prefill with fp32 activations). */
#define QHX_DECODE_MAX_T 16

struct qhx_route_log; /* model/qwen35.h */

typedef struct qhx_exec {
    const qhx_kernel_set *ks;
    struct qhx_route_log *routes; /* measurement: where MoE layers record the experts they chose, or NULL */
    qhx_pool *pool;        /* NULL: run on the calling thread */
    qhx_acts *acts;        /* rounded-activation scratch kept between calls; NULL: one per call */
    int per_token;         /* decode's numerics for every token of a call: the decode kernels, no
                              multi-token tiles, so n tokens at once give bit for bit what n
                              one-token calls give (weights still stream once) */
} qhx_exec;

/* The kernel set called `name` ("auto" = the best this CPU runs; the environment variable
 * QHX_KERNELS overrides "auto"), or NULL with the error set when unknown or unsupported here. */
const qhx_kernel_set *qhx_kernels_find(const char *name);
/* Names of every kernel set compiled in, for help texts: "ref scalar avx2 avx512". */
const char *qhx_kernels_names(void);

qhx_status qhx_matmul(const qhx_exec *ex, const qhx_tensor *W, const float *X, int T, float *Y);
/* Y[m] = W[m] X for up to QHX_MATMUL_GROUP matrices of the same width as one parallel-for: one
 * wait for the group instead of one a matrix, and small matrices run beside the large ones. */
#define QHX_MATMUL_GROUP 32
qhx_status qhx_matmul_many(const qhx_exec *ex, const float *X, int T, int n, const qhx_tensor *const W[], float *const Y[]);
/* The same, matrix m on its own T rows of X (rows m T .. (m + 1) T - 1): a decode step's experts */
qhx_status qhx_matmul_each(const qhx_exec *ex, const float *X, int T, int n, const qhx_tensor *const W[], float *const Y[]);
void qhx_acts_free(qhx_acts *a);


/* ---- floating-point mode ------------------------------------------------------------------- */

/* Subnormal floats cost Intel cores a microcode assist per operation (about 100 cycles): the
 * delta rule's decayed states underflow into them, and on a Sapphire Rapids VM they made the rule
 * 2.5x slower, 20 % of prefill at 1024 tokens. So every set but ref computes with flush-to-zero and
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
/* Runs fn(arg, i, n) for each part i in [0, n), n = the pool size, each part once, on whichever
 * thread claims it first (the caller included: a part may index per-part scratch, never assume a
 * thread); returns when all are done. */
void qhx_pool_run(qhx_pool *p, void (*fn)(void *arg, int i, int n), void *arg);

#endif
