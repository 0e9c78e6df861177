/*
 * The forward pass of the Qwen3.5 text decoder, written to read like the spec (shared spec §3;
 * Hugging Face modeling_qwen3_5.py): one function per block, plain loops. The projections go
 * through qhx_matmul, so the same graph runs as the fp32 reference (the "ref" kernels: double
 * accumulation over checkpoint weights) and as the fast path (SIMD kernels over W8 bundles).
 *
 *   x = embed[token]
 *   per layer:  x += GatedDeltaNet(norm(x))   or   x += GatedAttention(norm(x))   (every 4th)
 *               x += MLP(norm(x))
 *   logits = lm_head · norm(x)
 */
#include "kernels/kernels.h"
#include "kernels/kv.h"
#include "model/ops.h"
#include "model/qwen35.h"
#include "util/buf.h"
#include "util/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- scratch: one block per call, carved into named arrays ---------------------------------- */

typedef struct {
    float *next;
} carver;

static float *carve(carver *cv, size_t n) {
    float *p = cv->next;
    cv->next += (n + 15) & ~(size_t)15;
    return p;
}

#define QBLOCK 64            /* queries of one attention_blocks item */
#define KTILE 128            /* cached rows of one attention_blocks step */
#define ATTN_BLOCKED_FROM 8  /* tokens a run; fewer: a gemm this narrow wastes most of its lanes */

/* floats of one attention thread's scratch, whatever the depth: attention_blocks' queries
 * [group][hd][QBLOCK] and outputs [group][QBLOCK][hd], scores [KTILE][QBLOCK], widened key and
 * value tiles [KTILE][hd] and the running maxima and sums [group][QBLOCK]; or attend's tile of
 * scores a query head */
static size_t attention_block_floats(int hd, int group) {
    const size_t blocks = (size_t)2 * group * hd * QBLOCK + (size_t)KTILE * QBLOCK + (size_t)2 * KTILE * hd + (size_t)2 * group * QBLOCK,
                 pairs = (size_t)group * QHX_ATTEND_TILE;
    return ((blocks > pairs ? blocks : pairs) + 15) & ~(size_t)15;
}

/* floats of scratch one call over n tokens needs, with `threads` work areas */
static size_t scratch_need(const qhx_config *c, int n, int threads) {
    size_t T = (size_t)n, D = c->hidden, conv = qhx_config_conv_dim(c);
    size_t hv = c->lin_v_heads, dv = c->lin_v_dim, attn = (size_t)c->n_heads * c->head_dim;
    size_t gdn = T * conv * 2 + T * hv * dv * 2 + T * hv * 4 + ((dv + 15) & ~(size_t)15) * threads;
    size_t att = T * attn * 3 + T * (size_t)c->n_kv_heads * c->head_dim * 2 + attention_block_floats(c->head_dim, c->n_heads / c->n_kv_heads) * threads;
    size_t mlp = T * (size_t)c->ffn * 2;
    if (c->n_experts) { /* moe()'s arrays (ints in float-sized slots), then the shared expert's mlp() */
        const size_t E = c->n_experts, slots = T * c->top_k;
        mlp += T * E + T + slots * 3 + E + slots * (2 * D + 2 * (size_t)c->moe_ffn) + T * D + 16 * 12;
    }
    size_t blk = gdn > att ? gdn : att;
    if (mlp > blk) blk = mlp;
    return T * D * 3 + blk + 16 * 64;
}

/* ---- Gated DeltaNet (spec §3.5) ------------------------------------------------------------- */

static void l2norm(float *x, int n) {
    float inv = 1.0f / sqrtf((float)qhx_sumsq(x, n) + 1e-6f);
    for (int i = 0; i < n; i++) x[i] *= inv;
}

/* Everything after the projections happens per key head and the value heads that read it (HF
 * repeat_interleave: value head j reads key head j / group), so it runs in parallel with no
 * sharing: the conv of their channels, q/k normalisation, the gates, the delta rule, the gated
 * RMSNorm. One job takes every run (a batched step's sessions), each on its own state. */
typedef struct {
    const qhx_kernel_set *ks;
    const qhx_config *c;
    const qhx_layer_weights *lw;
    const qhx_run *runs;
    int n_runs, l;
    float *mixed, *xc, *z, *b, *a, *beta, *g, *o, *work; /* [rows of every run][...] */
} heads_job;

static void deltanet_heads(void *arg, int th, int nth) {
    const heads_job *J = arg;
    const qhx_config *c = J->c;
    const qhx_layer_weights *lw = J->lw;
    const int C = qhx_config_conv_dim(c), hk = c->lin_k_heads, hv = c->lin_v_heads;
    const int dk = c->lin_k_dim, dv = c->lin_v_dim, group = hv / hk;
    const float qscale = 1.0f / sqrtf((float)dk);
    float *work = J->work + (size_t)th * ((dv + 15) & ~15);
    /* a run of key heads a thread: the value-head states it steps lie one after another, and each
     * head's last token fetches the next one's (qhx_delta_args.next), the next run's first at the end */
    const int kh0 = hk * th / nth, kh1 = hk * (th + 1) / nth;
    for (int r = 0; r < J->n_runs; r++) {
        qhx_layer_state *ls = qhx_state_layer(J->runs[r].st, J->l);
        float *following = r + 1 < J->n_runs ? qhx_state_layer(J->runs[r + 1].st, J->l)->ssm + (size_t)kh0 * group * dk * dv : NULL;
        const size_t t0 = (size_t)J->runs[r].row0;
        const int T = J->runs[r].n;
        float *xc = J->xc + t0 * C, *beta = J->beta + t0 * hv, *g = J->g + t0 * hv;
        const float *b = J->b + t0 * hv, *a = J->a + t0 * hv;
        for (int kh = kh0; kh < kh1; kh++) {
            const float *mixed = J->mixed + t0 * C;
            /* the conv of its channels (spec §3.5): its q head's, its k head's, its value heads' */
            const int ch[3] = {kh * dk, (hk + kh) * dk, 2 * hk * dk + kh * group * dv}, nch[3] = {dk, dk, group * dv};
            for (int i = 0; i < 3; i++)
                J->ks->conv(lw->conv_taps + ch[i], ls->conv + ch[i], mixed + ch[i], xc + ch[i], (size_t)C, c->conv_kernel, T, nch[i]);
            float *q = xc + (size_t)kh * dk, *k = xc + (size_t)(hk + kh) * dk; /* row: q heads | k heads | v heads */
            for (int t = 0; t < T; t++) {
                float *qt = q + (size_t)t * C, *kt = k + (size_t)t * C;
                l2norm(qt, dk);
                l2norm(kt, dk);
                for (int e = 0; e < dk; e++) qt[e] *= qscale;
            }
            for (int j = kh * group; j < (kh + 1) * group; j++) {
                const float A = -expf(qhx_tensor_get(&lw->a_log, j)), dt_bias = qhx_tensor_get(&lw->dt_bias, j);
                for (int t = 0; t < T; t++) {
                    const size_t i = (size_t)t * hv + j;
                    beta[i] = qhx_sigmoid(b[i]);
                    g[i] = A * qhx_softplus(a[i] + dt_bias);
                }
                float *S = ls->ssm + (size_t)j * dk * dv, *o = J->o + (t0 * hv + j) * dv;
                const qhx_delta_args da = {q, k, xc + (size_t)2 * hk * dk + (size_t)j * dv, (size_t)C, beta + j, g + j,
                                           (size_t)hv, o, (size_t)hv * dv, T, dk, dv, work,
                                           j + 1 < kh1 * group ? S + (size_t)dk * dv : following};
                J->ks->delta_rule(S, &da);
                for (int t = 0; t < T; t++) {
                    float *zr = J->z + ((t0 + t) * hv + j) * dv;
                    J->ks->silu(zr, NULL, (size_t)dv); /* z is read only here */
                    qhx_rmsnorm_gated(o + (size_t)t * hv * dv, zr, &lw->gnorm, dv, c->eps);
                }
            }
        }
    }
}

/* The projections over all T rows; the rest a run (a sequence) at a time, on its own state. A run
 * whose state is marked records its recurrence inputs for a rewind (model/rewind.c). */
static qhx_status gated_deltanet(const qhx_exec *ex, const qhx_config *c, const qhx_layer_weights *lw, int l,
                                 const qhx_run *runs, int n_runs, const float *h, float *out, int T, carver cv) {
    const int C = qhx_config_conv_dim(c), hv = c->lin_v_heads, dv = c->lin_v_dim;
    float *mixed = carve(&cv, (size_t)T * C), *xc = carve(&cv, (size_t)T * C);
    float *z = carve(&cv, (size_t)T * hv * dv), *o = carve(&cv, (size_t)T * hv * dv);
    float *b = carve(&cv, (size_t)T * hv), *a = carve(&cv, (size_t)T * hv);
    float *beta = carve(&cv, (size_t)T * hv), *g = carve(&cv, (size_t)T * hv);
    float *work = carve(&cv, (size_t)((dv + 15) & ~15) * qhx_pool_size(ex->pool));

    const qhx_tensor *const W[] = {&lw->qkv, &lw->z, &lw->b, &lw->a};
    float *const Y[] = {mixed, z, b, a};
    qhx_status rc = qhx_matmul_many(ex, h, T, 4, W, Y);
    if (rc) return rc;
    heads_job job = {ex->ks, c, lw, runs, n_runs, l, mixed, xc, z, b, a, beta, g, o, work};
    qhx_pool_run(ex->pool, deltanet_heads, &job);
    for (int r = 0; r < n_runs; r++) {
        const qhx_state *s = runs[r].st;
        const size_t t0 = (size_t)runs[r].row0;
        if (s->mark >= 0) qhx_state_record(c, qhx_state_layer(s, l), s->pos - s->mark, mixed + t0 * C, xc + t0 * C, beta + t0 * hv, g + t0 * hv, runs[r].n);
    }
    return qhx_matmul(ex, &lw->out, o, T, out);
}

/* ---- gated softmax attention (spec §3.6) ---------------------------------------------------- */

/* NeoX-style rotation of the first rot dims: pairs (i, i + rot/2), by the angles of a position
 * (rope_angles: once a token for all its heads) */
static void rope_angles(float *cs, float *sn, int rot, int pos, float theta) {
    for (int i = 0; i < rot / 2; i++) {
        const float inv_freq = 1.0f / powf(theta, (float)(2 * i) / (float)rot), ang = (float)pos * inv_freq;
        cs[i] = cosf(ang), sn[i] = sinf(ang);
    }
}

static void rope(float *x, int rot, const float *cs, const float *sn) {
    const int half = rot / 2;
    for (int i = 0; i < half; i++) {
        const float x0 = x[i], x1 = x[i + half];
        x[i] = x0 * cs[i] - x1 * sn[i];
        x[i + half] = x1 * cs[i] + x0 * sn[i];
    }
}

/* Causal attention over the cache, in parallel over (token, KV head) pairs for a few tokens (the
 * kernel set's attend: one pass over the head's rows for its group of query heads) and over
 * (KV head, block of QBLOCK tokens) in prefill, where the scores and the weighted sum of values are
 * matrix products (ks->gemm) over tiles of KTILE cached rows with a running softmax, so the work
 * area stays in L2 at any depth. */
typedef struct {
    const qhx_kernel_set *ks;
    const float *qg;
    const unsigned char *kc, *vc;  /* the caches: [head][cap] rows of `head` bytes */
    size_t head, cap;
    qhx_kv_form form;
    float *att, *scratch;
    size_t scratch_floats;
    int T, pos0, hq, hd, group;
    float scale;
} attn_job;

static void gate_output(float *o, const float *gate, int hd) {
    for (int e = 0; e < hd; e++) o[e] *= qhx_sigmoid(gate[e]);
}

/* The pairs of every run (a batched step's sessions) in one job: item i of the runs in turn. */
typedef struct {
    const attn_job *jobs;
    int n;
} attn_runs;

static void attention_pairs(void *arg, int th, int nth) {
    const attn_runs *R = arg;
    int r = 0, first = 0; /* run r's items are [first, first + its count) */
    for (int item = th;; item += nth) {
        while (r < R->n && item - first >= R->jobs[r].T * (R->jobs[r].hq / R->jobs[r].group)) first += R->jobs[r].T * (R->jobs[r].hq / R->jobs[r].group), r++;
        if (r == R->n) break;
        const attn_job *J = &R->jobs[r];
        const int hd = J->hd, G = J->group, hkv = J->hq / G, t = (item - first) / hkv, kvh = (item - first) % hkv;
        const float *q0 = J->qg + ((size_t)t * J->hq + (size_t)kvh * G) * hd * 2; /* query g at q0 + 2 hd g, its gate after it */
        float *o0 = J->att + ((size_t)t * J->hq + (size_t)kvh * G) * hd;
        const size_t at = (size_t)kvh * J->cap * J->head;
        const qhx_attend_args a = {J->form, hd, G, J->pos0 + t + 1, q0, (size_t)2 * hd, J->kc + at, J->vc + at, J->head, J->scale, o0,
                                   (size_t)hd, J->scratch + (size_t)th * J->scratch_floats};
        J->ks->attend(&a);
        for (int g = 0; g < G; g++) gate_output(o0 + (size_t)g * hd, q0 + (size_t)2 * hd * g + hd, hd);
    }
}

/* rows [p0, p0 + n) of a head as fp32 rows hd apart: the f32 cache itself, or widened into buf */
static const float *head_tile(const attn_job *J, const unsigned char *cache, int kvh, int p0, int n, float *buf) {
    const unsigned char *at = cache + ((size_t)kvh * J->cap + p0) * J->head;
    if (J->form == QHX_KV_F32) return (const float *)at;
    J->ks->kv_widen(J->form, at, J->head, J->hd, n, buf, J->hd);
    return buf;
}

/* The bytes of tile rows [p0, p0 + KTILE) of a head's K and V, piece `piece` of `pieces`, fetched
 * into L2 while the tile before them is multiplied: read on demand, they stalled the widening (or
 * f32's products) on memory at depth, where a head outgrows the caches (~8k tokens). */
static void fetch_tile_piece(const attn_job *J, int kvh, int p0, int n, int piece, int pieces) {
    if (p0 >= n) return;
    const size_t bytes = (size_t)(n - p0 < KTILE ? n - p0 : KTILE) * J->head, at = ((size_t)kvh * J->cap + p0) * J->head;
    for (size_t b = (bytes * piece / pieces) & ~(size_t)63; b < bytes * (piece + 1) / pieces; b += 64) {
        __builtin_prefetch(J->kc + at + b, 0, 2);
        __builtin_prefetch(J->vc + at + b, 0, 2);
    }
}

/* One item is a KV head and a block of queries: each tile of the head's rows is widened once for
 * the query heads that share it (at 16k tokens a head's rows outgrow the caches, and widening them
 * once a query head read them from memory that many times). The scores come out a query a column
 * (K q), the running softmax takes them a query a lane (ks->softmax_tile), and the weights go into
 * the product with V as they lie (A transposed, ks->gemm's acs), into outputs of the block's own
 * (rows of att lie hq * hd floats apart). A block of 64 queries shares each widened tile twice as
 * widely as 32 did (bench/README.md, "Depth"); KTILE sets where the running softmax rescales, so
 * it is part of the result and must not change with the block. */
static void attention_blocks(void *arg, int th, int nth) {
    const attn_job *J = arg;
    const int hd = J->hd, G = J->group, hkv = J->hq / G, blocks = (J->T + QBLOCK - 1) / QBLOCK;
    float *QT = J->scratch + (size_t)th * J->scratch_floats; /* [G][hd][QBLOCK]: the block's queries, transposed */
    float *OB = QT + (size_t)G * hd * QBLOCK;               /* [G][QBLOCK][hd]: their outputs */
    float *ST = OB + (size_t)G * QBLOCK * hd;               /* [KTILE][QBLOCK]: K q, then the weights, one column a query */
    float *KB = ST + (size_t)KTILE * QBLOCK, *VB = KB + (size_t)KTILE * hd; /* widened tiles */
    float *mx = VB + (size_t)KTILE * hd, *sum = mx + (size_t)G * QBLOCK; /* [G][QBLOCK] each */
    int seen[QBLOCK];
    for (int item = th; item < hkv * blocks; item += nth) {
        const int kvh = item % hkv, t0 = item / hkv * QBLOCK;
        const int nq = J->T - t0 < QBLOCK ? J->T - t0 : QBLOCK, n = J->pos0 + t0 + nq; /* the block's last query sees n */
        for (int g = 0; g < G; g++)
            for (int i = 0; i < nq; i++) {
                const float *qi = J->qg + ((size_t)(t0 + i) * J->hq + kvh * G + g) * hd * 2;
                for (int d = 0; d < hd; d++) QT[((size_t)g * hd + d) * QBLOCK + i] = qi[d];
                mx[g * QBLOCK + i] = -INFINITY, sum[g * QBLOCK + i] = 0.0f;
            }
        memset(OB, 0, sizeof(float) * (size_t)G * QBLOCK * hd);
        for (int p0 = 0; p0 < n; p0 += KTILE) {
            const int kt = n - p0 < KTILE ? n - p0 : KTILE;
            const float *K = head_tile(J, J->kc, kvh, p0, kt, KB), *V = head_tile(J, J->vc, kvh, p0, kt, VB);
            for (int i = 0; i < nq; i++) { /* causal: rows of this tile query i sees */
                const int r = J->pos0 + t0 + i + 1 - p0;
                seen[i] = r < 0 ? 0 : r > kt ? kt : r;
            }
            for (int g = 0; g < G; g++) {
                float *o = OB + (size_t)g * QBLOCK * hd;
                memset(ST, 0, sizeof(float) * (size_t)kt * QBLOCK);
                J->ks->gemm(kt, nq, hd, J->scale, K, hd, 1, QT + (size_t)g * hd * QBLOCK, QBLOCK, ST, QBLOCK);
                fetch_tile_piece(J, kvh, p0 + KTILE, n, 2 * g, 2 * G);
                J->ks->softmax_tile(ST, kt, QBLOCK, nq, seen, mx + g * QBLOCK, sum + g * QBLOCK, o, (size_t)hd, hd);
                J->ks->gemm(nq, hd, kt, 1.0f, ST, 1, QBLOCK, V, hd, o, hd);
                fetch_tile_piece(J, kvh, p0 + KTILE, n, 2 * g + 1, 2 * G);
            }
        }
        for (int g = 0; g < G; g++)
            for (int i = 0; i < nq; i++) {
                const int j = kvh * G + g;
                const float *ob = OB + ((size_t)g * QBLOCK + i) * hd, inv = 1.0f / sum[g * QBLOCK + i];
                float *oi = J->att + ((size_t)(t0 + i) * J->hq + j) * hd;
                for (int e = 0; e < hd; e++) oi[e] = ob[e] * inv;
                gate_output(oi, J->qg + ((size_t)(t0 + i) * J->hq + j) * hd * 2 + hd, hd);
            }
    }
}

/* A run's queries and keys normed and rotated, its keys and values stored into its cache: each
 * token's rows alone, so a prompt's tokens split over the pool. */
typedef struct {
    const qhx_config *c;
    const qhx_layer_weights *lw;
    const qhx_state *st;
    qhx_layer_state *ls;
    float *qg, *k, *v; /* the run's first token's rows */
    int nt, pos0;
} qk_job;

static void qk_rows(void *arg, int th, int nth) {
    const qk_job *J = arg;
    const qhx_config *c = J->c;
    const int hq = c->n_heads, hkv = c->n_kv_heads, hd = c->head_dim, kvdim = hkv * hd;
    for (int t = J->nt * th / nth; t < J->nt * (th + 1) / nth; t++) {
        float *k = J->k + (size_t)t * kvdim, *v = J->v + (size_t)t * kvdim;
        float *qgt = J->qg + (size_t)t * hq * hd * 2, cs[2048], sn[2048]; /* rot <= head_dim <= 4096 (hfconfig.c) */
        rope_angles(cs, sn, c->rot_dim, J->pos0 + t, c->rope_theta);
        for (int j = 0; j < hq; j++) {
            float *qj = qgt + (size_t)j * hd * 2;
            qhx_rmsnorm1p(qj, qj, &J->lw->q_norm, hd, c->eps);
            rope(qj, c->rot_dim, cs, sn);
        }
        for (int j = 0; j < hkv; j++) {
            qhx_rmsnorm1p(k + (size_t)j * hd, k + (size_t)j * hd, &J->lw->k_norm, hd, c->eps);
            rope(k + (size_t)j * hd, c->rot_dim, cs, sn);
            qhx_kv_store(J->st->kv, k + (size_t)j * hd, hd, qhx_state_kv(J->st, J->ls->k_cache, j, J->pos0 + t));
            qhx_kv_store(J->st->kv, v + (size_t)j * hd, hd, qhx_state_kv(J->st, J->ls->v_cache, j, J->pos0 + t));
        }
    }
}

/* The projections over all T rows, K and V normed and rotated, then stored into each run's cache
 * in its form; then a run at a time over its own cache, at its own positions. */
static qhx_status gated_attention(const qhx_exec *ex, const qhx_config *c, const qhx_layer_weights *lw, int l,
                                  const qhx_run *runs, int n_runs, const float *h, float *out, int T, carver cv) {
    const int hq = c->n_heads, hkv = c->n_kv_heads, hd = c->head_dim;
    const int group = hq / hkv, kvdim = hkv * hd;
    const size_t scratch_floats = attention_block_floats(hd, group);
    float *qg = carve(&cv, (size_t)T * hq * hd * 2), *att = carve(&cv, (size_t)T * hq * hd);
    float *scratch = carve(&cv, scratch_floats * (size_t)qhx_pool_size(ex->pool));
    float *kv = carve(&cv, (size_t)T * kvdim * 2);

    const qhx_tensor *const W[] = {&lw->q, &lw->k, &lw->v}; /* q per head: [query hd | gate hd] */
    float *const Y[] = {qg, kv, kv + (size_t)T * kvdim};
    const qhx_status rc = qhx_matmul_many(ex, h, T, 3, W, Y);
    if (rc) return rc;
    enum { MAX_PAIRED_RUNS = 16 };
    attn_job pairs[MAX_PAIRED_RUNS];
    int n_pairs = 0;
    for (int r = 0; r < n_runs; r++) {
        const qhx_state *st = runs[r].st;
        qhx_layer_state *ls = qhx_state_layer(st, l);
        const int pos0 = st->pos, t0 = runs[r].row0, nt = runs[r].n;
        float *qg0 = qg + (size_t)t0 * hq * hd * 2; /* the run's first query row */
        qk_job qk = {c, lw, st, ls, qg0, kv + (size_t)t0 * kvdim, kv + ((size_t)T + t0) * kvdim, nt, pos0};
        if (nt > QHX_DECODE_MAX_T) qhx_pool_run(ex->pool, qk_rows, &qk);
        else qk_rows(&qk, 0, 1);
        attn_job job = {ex->ks, qg0, ls->k_cache, ls->v_cache, st->kv_head, (size_t)st->kv_capacity, st->kv,
                        att + (size_t)t0 * hq * hd, scratch, scratch_floats, nt, pos0, hq, hd, group, 1.0f / sqrtf((float)hd)};
        if (nt >= ATTN_BLOCKED_FROM && !ex->per_token) {
            qhx_pool_run(ex->pool, attention_blocks, &job);
        } else { /* the few-token runs side by side, one job for all of them */
            pairs[n_pairs++] = job;
            if (n_pairs == MAX_PAIRED_RUNS) {
                attn_runs all = {pairs, n_pairs};
                qhx_pool_run(ex->pool, attention_pairs, &all);
                n_pairs = 0;
            }
        }
    }
    if (n_pairs) {
        attn_runs all = {pairs, n_pairs};
        qhx_pool_run(ex->pool, attention_pairs, &all);
    }
    return qhx_matmul(ex, &lw->o, att, T, out);
}

/* ---- SwiGLU MLP (spec §3.4) ----------------------------------------------------------------- */

typedef struct {
    const qhx_kernel_set *ks;
    float *gt;
    const float *up;
    size_t n;
} swiglu_job;

static void swiglu_part(void *arg, int th, int nth) {
    const swiglu_job *J = arg;
    const size_t i0 = J->n * th / nth, i1 = J->n * (th + 1) / nth;
    J->ks->silu(J->gt + i0, J->up + i0, i1 - i0);
}

static qhx_status mlp(const qhx_exec *ex, const qhx_config *c, const qhx_layer_weights *lw, const float *h, float *out, int T,
                carver cv) {
    const size_t n = (size_t)T * c->ffn;
    float *gt = carve(&cv, n), *up = carve(&cv, n);
    const qhx_tensor *const W[] = {&lw->gate, &lw->up};
    float *const Y[] = {gt, up};
    const qhx_status rc = qhx_matmul_many(ex, h, T, 2, W, Y);
    if (rc) return rc;
    swiglu_job job = {ex->ks, gt, up, n}; /* 9216 exps a token: worth both cores */
    qhx_pool_run(ex->pool, swiglu_part, &job);
    return qhx_matmul(ex, &lw->down, gt, T, out);
}

/* ---- sparse mixture of experts (Qwen3.5-MoE; HF Qwen3_5MoeSparseMoeBlock) -------------------- */

/* Each token's top_k experts by router logit (ties: the lower index), their softmax weights
 * renormalised over the k, which is e^(l - max) over its sum across the k: the full softmax's
 * denominator cancels. sel[] comes out in ascending expert order, the order HF adds them in. */
static void route(const float *logits, int E, int K, int *sel, float *wt) {
    int chosen[QHX_MAX_TOP_K];
    float mx = -INFINITY;
    for (int e = 0; e < E; e++) mx = logits[e] > mx ? logits[e] : mx;
    int n = 0;
    for (int k = 0; k < K; k++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            int taken = 0;
            for (int j = 0; j < n && !taken; j++) taken = chosen[j] == e;
            if (!taken && (best < 0 || logits[e] > logits[best])) best = e;
        }
        chosen[n++] = best;
    }
    for (int i = 1; i < K; i++) /* insertion sort: ascending expert ids */
        for (int j = i; j > 0 && chosen[j - 1] > chosen[j]; j--) { const int t = chosen[j]; chosen[j] = chosen[j - 1], chosen[j - 1] = t; }
    float sum = 0.0f;
    for (int k = 0; k < K; k++) sum += wt[k] = expf(logits[chosen[k]] - mx);
    for (int k = 0; k < K; k++) sel[k] = chosen[k], wt[k] /= sum;
}

/* The router picks top_k experts a token; the tokens are grouped by expert so each routed
 * expert's weights are read once a call for every token sent to it, and an expert no token chose
 * is not read at all. Each token's output then sums its experts' rows, weighted, in expert order,
 * and adds the shared expert's, scaled by sigmoid(shared_gate . x). A token's result depends only
 * on its own row: per_token calls give what a lone step gives. */
static qhx_status moe(const qhx_exec *ex, const qhx_config *c, const qhx_layer_weights *lw, const float *h, float *out, int T,
                      carver cv) {
    const int E = c->n_experts, K = c->top_k, D = c->hidden, I = c->moe_ffn, S = T * K;
    float *logits = carve(&cv, (size_t)T * E), *sg = carve(&cv, (size_t)T), *wt = carve(&cv, (size_t)S);
    int *sel = (int *)carve(&cv, (size_t)S), *row = (int *)carve(&cv, (size_t)S), *who = (int *)carve(&cv, (size_t)S);
    int *first = (int *)carve(&cv, (size_t)E + 1);
    float *xe = carve(&cv, (size_t)S * D), *ye = carve(&cv, (size_t)S * D);
    float *ge = carve(&cv, (size_t)S * I), *ue = carve(&cv, (size_t)S * I), *shared = carve(&cv, (size_t)T * D);
    const qhx_tensor *const R[] = {&lw->router, &lw->shared_gate};
    float *const RY[] = {logits, sg};
    qhx_status rc = qhx_matmul_many(ex, h, T, 2, R, RY);
    if (rc) return rc;
    for (int t = 0; t < T; t++) route(logits + (size_t)t * E, E, K, sel + (size_t)t * K, wt + (size_t)t * K);
    qhx_route_log *log = ex->routes;
    if (log && !qhx_reserve(&log->ids, &log->cap, log->n + (size_t)S, sizeof *log->ids))
        for (int i = 0; i < S; i++) log->ids[log->n++] = sel[i];

    /* slot i = t K + k: token t's k-th expert; row[i]: where its input and output sit in xe / ye,
     * grouped by expert, tokens in order within a group */
    memset(first, 0, sizeof(int) * (size_t)(E + 1));
    for (int i = 0; i < S; i++) first[sel[i] + 1]++;
    for (int e = 0; e < E; e++) first[e + 1] += first[e];
    for (int i = 0; i < S; i++) row[i] = first[sel[i]]++;  /* first[e] ends at group e's end, */
    for (int e = E; e > 0; e--) first[e] = first[e - 1];    /* which is group e + 1's start */
    first[0] = 0;
    for (int i = 0; i < S; i++) who[row[i]] = i / K;
    if (T == 1 && 2 * K + 2 <= QHX_MATMUL_GROUP) {
        /* a step: the K experts' and the shared expert's gates and ups as one matmul group on the
         * token's row, then their downs as another, each on its own row (2 waits a layer, not 2 K + 3) */
        const int F = c->ffn;
        float *sgt = carve(&cv, (size_t)F), *sup = carve(&cv, (size_t)F); /* what mlp() would carve */
        const qhx_tensor *W[QHX_MATMUL_GROUP];
        float *Y[QHX_MATMUL_GROUP];
        for (int k = 0; k < K; k++) {
            W[2 * k] = &lw->experts[3 * sel[k]], W[2 * k + 1] = &lw->experts[3 * sel[k] + 1];
            Y[2 * k] = ge + (size_t)k * I, Y[2 * k + 1] = ue + (size_t)k * I;
        }
        W[2 * K] = &lw->gate, W[2 * K + 1] = &lw->up, Y[2 * K] = sgt, Y[2 * K + 1] = sup;
        if ((rc = qhx_matmul_many(ex, h, 1, 2 * K + 2, W, Y))) return rc;
        ex->ks->silu(ge, ue, (size_t)K * I);
        ex->ks->silu(sgt, sup, (size_t)F);
        for (int k = 0; k < K; k++) W[k] = &lw->experts[3 * sel[k] + 2], Y[k] = ye + (size_t)k * D;
        int n = K;
        if (F == I) { /* the shared expert's input as row K (ue, read by now) */
            memcpy(ge + (size_t)K * I, sgt, sizeof(float) * (size_t)F);
            W[n] = &lw->down, Y[n++] = shared;
        } else if ((rc = qhx_matmul(ex, &lw->down, sgt, 1, shared))) {
            return rc;
        }
        if ((rc = qhx_matmul_each(ex, ge, 1, n, W, Y))) return rc;
    }
    for (int r = 0; r < S && T > 1; r++) memcpy(xe + (size_t)r * D, h + (size_t)who[r] * D, sizeof(float) * D);
    for (int e = 0; e < E && !rc && T > 1; e++) {
        const int r0 = first[e], n = first[e + 1] - first[e];
        if (!n) continue;
        const qhx_tensor *const W[] = {&lw->experts[3 * e], &lw->experts[3 * e + 1]};
        float *const Y[] = {ge + (size_t)r0 * I, ue + (size_t)r0 * I};
        if ((rc = qhx_matmul_many(ex, xe + (size_t)r0 * D, n, 2, W, Y))) break;
        ex->ks->silu(Y[0], Y[1], (size_t)n * I);
        rc = qhx_matmul(ex, &lw->experts[3 * e + 2], Y[0], n, ye + (size_t)r0 * D);
    }
    if (rc || (T > 1 && (rc = mlp(ex, c, lw, h, shared, T, cv)))) return rc;
    for (int t = 0; t < T; t++) {
        float *o = out + (size_t)t * D;
        const float gate = qhx_sigmoid(sg[t]);
        memset(o, 0, sizeof(float) * D);
        for (int k = 0; k < K; k++) {
            const float *y = ye + (size_t)row[t * K + k] * D, w = wt[t * K + k];
            for (int d = 0; d < D; d++) o[d] += y[d] * w;
        }
        for (int d = 0; d < D; d++) o[d] += gate * shared[(size_t)t * D + d];
    }
    return QHX_OK;
}

/* ---- the model ------------------------------------------------------------------------------ */

void qhx_qwen35_embed(const qhx_config *c, const qhx_weights *w, const int32_t *tokens, int n, float *x) {
    const int D = c->hidden;
    for (int t = 0; t < n; t++)
        for (int i = 0; i < D; i++) x[(size_t)t * D + i] = qhx_tensor_get(&w->embed, (size_t)tokens[t] * D + i);
}

qhx_status qhx_state_begin(const qhx_exec *ex, const qhx_run *runs, int n_runs, int stepwise) {
    int T = 0;
    for (int r = 0; r < n_runs; r++) {
        qhx_state *s = runs[r].st;
        qhx_status rc = qhx_state_reserve_kv(s, s->pos + runs[r].n);
        if (rc) return rc;
        if (s->mark >= 0 && (!stepwise || s->pos + runs[r].n - s->mark > QHX_MAX_REWIND)) s->mark = -1;
        T += runs[r].n;
    }
    qhx_state *s = runs[0].st;
    const size_t need = scratch_need(s->cfg, T, qhx_pool_size(ex->pool));
    if (need > s->scratch_floats) {
        float *p = realloc(s->scratch, need * sizeof(float));
        if (!p) return qhx_fail(QHX_ERR_NOMEM, "forward: out of memory for %d tokens", T);
        s->scratch = p;
        s->scratch_floats = need;
    }
    return QHX_OK;
}

void qhx_state_end(const qhx_run *runs, int n_runs) {
    for (int r = 0; r < n_runs; r++) runs[r].st->pos += runs[r].n;
}

/* x += delta (delta NULL: nothing to add), then h = RMSNorm(x) (h NULL: none), for each of n rows;
 * a prompt's rows split over the pool (on one thread the other waited ~1 % of a prefill), every
 * row computed as alone. */
typedef struct {
    float *x, *h;
    const float *delta;
    const qhx_tensor *w;
    int n, D;
    float eps;
} norm_job;

static void norm_rows(void *arg, int i, int nth) {
    const norm_job *j = arg;
    for (int t = j->n * i / nth; t < j->n * (i + 1) / nth; t++) {
        float *x = j->x + (size_t)t * j->D;
        if (j->delta)
            for (int k = 0; k < j->D; k++) x[k] += j->delta[(size_t)t * j->D + k];
        if (j->h) qhx_rmsnorm1p(j->h + (size_t)t * j->D, x, j->w, j->D, j->eps);
    }
}

static void add_norm(const qhx_exec *ex, float *x, const float *delta, float *h, const qhx_tensor *w, int n, int D, float eps) {
    norm_job j = {x, h, delta, w, n, D, eps};
    if (ex->pool && n > QHX_DECODE_MAX_T) qhx_pool_run(ex->pool, norm_rows, &j);
    else norm_rows(&j, 0, 1);
}

qhx_status qhx_qwen35_layers(const qhx_exec *ex, const qhx_config *c, const qhx_weights *w, const qhx_run *runs, int n_runs,
                             int l0, int l1, float *x, int n) {
    const int D = c->hidden;
    carver cv = {runs[0].st->scratch};
    float *h = carve(&cv, (size_t)n * D), *delta = carve(&cv, (size_t)n * D);
    const unsigned fp = qhx_fp_enter(ex->ks);
    qhx_status rc = QHX_OK;

    for (int l = l0; l < l1; l++) {
        const qhx_layer_weights *lw = &w->layers[l];
        add_norm(ex, x, NULL, h, &lw->in_norm, n, D, c->eps);
        rc = c->full_attn[l] ? gated_attention(ex, c, lw, l, runs, n_runs, h, delta, n, cv)
                             : gated_deltanet(ex, c, lw, l, runs, n_runs, h, delta, n, cv);
        if (rc) break;
        add_norm(ex, x, delta, h, &lw->post_norm, n, D, c->eps);
        if ((rc = c->n_experts ? moe(ex, c, lw, h, delta, n, cv) : mlp(ex, c, lw, h, delta, n, cv))) break;
        add_norm(ex, x, delta, NULL, NULL, n, D, c->eps);
    }
    if (!rc && l1 == c->n_layers) add_norm(ex, x, NULL, x, &w->final_norm, n, D, c->eps);
    qhx_fp_leave(fp);
    return rc; /* on failure, layers before l moved on: the caller resets the state */
}

/* The MTP head (vLLM qwen3_next_mtp.py): the next token's embedding and the trunk's hidden state,
 * each normed, side by side through fc, then the head's one layer (its own KV cache, its norm as
 * the final norm) as the trunk runs its layers. */
qhx_status qhx_qwen35_mtp(const qhx_exec *ex, const qhx_weights *w, qhx_state *s, const float *hidden,
                          const int32_t *next, int n, float *y) {
    const qhx_mtp_weights *m = w->mtp;
    const qhx_config *c = &m->cfg;
    const int D = c->hidden;
    float *cat = malloc(sizeof(float) * 2 * D * (size_t)n), *e = malloc(sizeof(float) * D * (size_t)n);
    qhx_status rc = QHX_OK;
    if (!cat || !e) rc = qhx_fail(QHX_ERR_NOMEM, "MTP head: out of memory for %d tokens", n);
    if (!rc) {
        qhx_qwen35_embed(c, w, next, n, e);
        const unsigned fp = qhx_fp_enter(ex->ks);
        for (int t = 0; t < n; t++) {
            qhx_rmsnorm1p(cat + (size_t)t * 2 * D, e + (size_t)t * D, &m->norm_embed, D, c->eps);
            qhx_rmsnorm1p(cat + (size_t)t * 2 * D + D, hidden + (size_t)t * D, &m->norm_hidden, D, c->eps);
        }
        rc = qhx_matmul(ex, &m->fc, cat, n, y);
        qhx_fp_leave(fp);
    }
    free(cat);
    free(e);
    const qhx_run run = {s, 0, n};
    if (!rc) rc = qhx_state_begin(ex, &run, 1, 0);
    if (!rc) rc = qhx_qwen35_layers(ex, c, &m->block, &run, 1, 0, c->n_layers, y, n);
    if (!rc) qhx_state_end(&run, 1);
    return rc;
}

qhx_status qhx_qwen35_head(const qhx_exec *ex, const qhx_config *c, const qhx_weights *w, const float *x, int n,
                           float *logits) {
    const unsigned fp = qhx_fp_enter(ex->ks);
    const qhx_status rc = qhx_matmul(ex, &w->lm_head, x, n, logits);
    qhx_fp_leave(fp);
    return rc;
}
