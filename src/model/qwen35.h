/* The Qwen3.5 text decoder: weights as views, per-sequence state, and the fp32 reference forward. */
#ifndef QHX_QWEN35_H
#define QHX_QWEN35_H
#include <stddef.h>
#include "format/hfconfig.h"
#include "format/safetensors.h"
#include "util/tensor.h"

typedef struct {
    qhx_tensor in_norm, post_norm;                 /* zero-centred RMSNorm weights (scale 1 + w) */
    qhx_tensor gate, up, down;                     /* SwiGLU MLP; in a MoE layer the shared expert */
    /* sparse MoE MLP (cfg n_experts > 0): the router [E][hidden], the shared expert's gate
     * [1][hidden], and each routed expert's gate, up and down at experts[3 e + 0, 1, 2] */
    qhx_tensor router, shared_gate;
    qhx_tensor *experts;
    /* Gated DeltaNet (linear attention) layers */
    qhx_tensor qkv, z, b, a, conv, dt_bias, a_log, gnorm, out;
    const float *conv_taps; /* conv as fp32 [tap][channel], so a step's sums run along the channels */
    /* gated softmax attention layers */
    qhx_tensor q, k, v, o, q_norm, k_norm;
} qhx_layer_weights;

typedef struct qhx_mtp_weights qhx_mtp_weights;

typedef struct {
    qhx_tensor embed, lm_head, final_norm;
    qhx_layer_weights *layers;  /* n_layers of them */
    qhx_mtp_weights *mtp;       /* the multi-token-prediction head, or NULL */
    qhx_tensor *expert_table;   /* what layers[].experts point into, or NULL (dense) */
    float *conv_taps;           /* what layers[].conv_taps point into */
} qhx_weights;

/* Each linear layer's conv_taps from its conv, once its weights are bound (a model that runs). */
int qhx_weights_conv_taps(qhx_weights *w, const qhx_config *c);

/* The MTP head (Hugging Face mtp.*; vLLM qwen3_next_mtp.py): y = fc([norm_embed(embed(next)) |
 * norm_hidden(h)]), then one gated-attention decoder layer with its own KV cache, then its norm,
 * then the trunk's lm-head. `block` is that layer as a one-layer model the trunk's forward runs
 * (its final_norm the head's norm, its embed and lm_head the trunk's), over `cfg`. */
struct qhx_mtp_weights {
    qhx_tensor fc, norm_embed, norm_hidden;
    qhx_weights block;
    qhx_layer_weights layer;
    qhx_config cfg;            /* the trunk's, as one gated-attention layer */
    uint8_t full_attn_one;     /* cfg.full_attn's one entry */
};

/* Spec layer number of the MTP head's tensors (not in any decode shard). */
#define QHX_LAYER_MTP (-2)

/* An empty weight table for c's layers and, when c->mtp_layers, its MTP head (views bound by the
 * loader); NULL when out of memory. */
qhx_weights *qhx_weights_new(const qhx_config *c);
void qhx_weights_free(qhx_weights *w);

/* How a synthetic checkpoint initialises a tensor (see forge/synth.c). */
/* QHX_INIT_ROUTER: a matrix that chooses (the MoE router, the shared expert's gate), initialised
 * as one but kept fp32 in bundles, since a rounded router changes which experts run. */
typedef enum { QHX_INIT_MATRIX, QHX_INIT_EMBED, QHX_INIT_NORM, QHX_INIT_GNORM, QHX_INIT_CONV,
               QHX_INIT_ALOG, QHX_INIT_DTBIAS, QHX_INIT_ROUTER } qhx_init_kind;

typedef struct {
    char name[160];
    int ndim;
    int64_t shape[3];
    qhx_dtype dtype;          /* the dtype Hugging Face stores it in */
    qhx_init_kind init;
    int layer;                /* the decoder layer it belongs to, or -1 (embedding, final norm, head) */
    qhx_tensor *dst;          /* where the loader binds it; NULL when enumerating only */
} qhx_tensor_spec;

/* Every tensor the text decoder needs, with its name (after `prefix`, e.g. "model.language_model."),
 * exact shape and dtype; routed experts one by one (mlp.experts.E.gate_proj.weight ...), which a
 * checkpoint that fuses them (mlp.experts.gate_up_proj) binds as slices. Returns the count; fills out[] when it is not NULL (size it with a first
 * call). The one list the loader checks against and the synthesizer writes. */
int qhx_qwen35_specs(const qhx_config *c, const char *prefix, qhx_weights *w, qhx_tensor_spec *out);

/* A spec's shape as the forward sees it: [rows, cols], a vector being one row ([C, 1, K] conv: C x K). */
static inline void qhx_spec_dims(const qhx_tensor_spec *s, int *rows, int *cols) {
    *rows = s->ndim >= 2 ? (int)s->shape[0] : 1;
    *cols = s->ndim == 1 ? (int)s->shape[0] : (int)s->shape[s->ndim - 1];
}

/* ---- per-sequence state of every layer ------------------------------------------------------ */

typedef struct {
    float *conv;       /* [conv_kernel-1][conv_dim]: the last inputs of the causal conv, oldest first */
    float *ssm;        /* [lin_v_heads][lin_k_dim][lin_v_dim]: the delta-rule state S[h][i_k][j_v] */
    unsigned char *k_cache;  /* [n_kv_heads][capacity] head rows in the state's form (kernels/kv.h): */
    unsigned char *v_cache;  /* a head's rows contiguous, so attention streams them; keys post-norm post-RoPE */
    float *undo;       /* linear layers, once marked: conv and ssm at the mark, then each later
                          stepwise token's recurrence inputs (model/rewind.c) */
} qhx_layer_state;

/* A sequence's state over all of a model's layers (the decode shards are files the host-op runs in
 * order, each over its own layers of this one state). */
typedef struct {
    const qhx_config *cfg;
    qhx_layer_state *layers;  /* cfg->n_layers of them */
    int pos;           /* tokens consumed */
    int mark;          /* the position qhx_state_rewind can go back to from, or -1 */
    int kv_capacity;   /* tokens the KV caches hold before they grow */
    int kv_limit;      /* positions the caches never need beyond (the context), or 0: none */
    qhx_kv_form kv;    /* the form the KV caches hold rows in */
    size_t kv_head;    /* bytes of one head's row (qhx_kv_head_bytes) */
    float *scratch;    /* per-call work buffers, grown on demand and reused */
    size_t scratch_floats;
} qhx_state;

static inline qhx_layer_state *qhx_state_layer(const qhx_state *s, int l) { return &s->layers[l]; }
/* head j's row at position p of a layer's K or V cache */
static inline unsigned char *qhx_state_kv(const qhx_state *s, unsigned char *cache, int j, int p) {
    return cache + ((size_t)j * s->kv_capacity + p) * s->kv_head;
}

qhx_status qhx_state_init(qhx_state *s, const qhx_config *c, qhx_kv_form kv);
void qhx_state_free(qhx_state *s);
void qhx_state_reset(qhx_state *s);
/* Bytes of a sequence's recurrent state (conv FIFOs + delta-rule states), and of its KV cache per
 * token. */
size_t qhx_state_fixed_bytes(const qhx_config *c);
size_t qhx_state_kv_bytes_per_token(const qhx_config *c, qhx_kv_form kv);
/* bytes of one position's row in one layer's K (or V) cache */
size_t qhx_state_kv_row_bytes(const qhx_config *c, qhx_kv_form kv);
/* floats of one linear layer's conv FIFO and of its delta-rule state */
size_t qhx_state_conv_floats(const qhx_config *c);
size_t qhx_state_ssm_floats(const qhx_config *c);
/* Grows the KV caches to hold `need` tokens (their rows kept). */
qhx_status qhx_state_reserve_kv(qhx_state *s, int need);

/* Taking stepwise tokens back (model/rewind.c): qhx_state_mark keeps the recurrent state as it
 * is; the forward records each stepwise token after it (qhx_state_record, up to QHX_MAX_REWIND; a
 * sequence call or one more token drops the mark); qhx_state_rewind goes back to any position
 * from the mark on, bit for bit. */
typedef struct qhx_exec qhx_exec;
qhx_status qhx_state_mark(qhx_state *s);
void qhx_state_record(const qhx_config *c, qhx_layer_state *ls, int at, const float *mixed, const float *xc,
                      const float *beta, const float *g, int T);
qhx_status qhx_state_rewind(const qhx_exec *ex, qhx_state *s, int pos);

/* ---- the forward, in three steps so a host-op can run shards in between ---------------------- */

/* x[n][hidden] = embedding rows of tokens (ids already validated). */
void qhx_qwen35_embed(const qhx_config *c, const qhx_weights *w, const int32_t *tokens, int n, float *x);

/* A call's rows, a run of them a sequence: rows [row0, row0 + n) of the residual stream are the
 * next n tokens of st, from its position on. One sequence's evaluation is one run of every row;
 * a batched decode step (qhx_sessions_step) one run of one row per session. */
typedef struct {
    qhx_state *st;
    int row0, n;
} qhx_run;

/* One evaluation of T rows: qhx_state_begin makes room (each run's KV rows; the call's scratch,
 * in runs[0].st) and drops marks the call cannot keep; qhx_qwen35_layers runs decoder layers
 * [l0, l1) over the residual stream x[T][hidden] in place, each run at its state's position (the
 * range that ends at the last layer also applies the final norm), once per shard in order; the
 * projections read each weight once for all rows. qhx_state_end advances every run's state. On
 * failure the states are part-way through the call: reset them. The delta rule is the recurrent
 * one however the rows are split (kernels.h: qhx_delta_args); `stepwise` (the mark's records)
 * with ex->per_token (attention's numerics) makes every row what a lone step of its sequence
 * gives, bit for bit. */
qhx_status qhx_state_begin(const qhx_exec *ex, const qhx_run *runs, int n_runs, int stepwise);
qhx_status qhx_qwen35_layers(const qhx_exec *ex, const qhx_config *c, const qhx_weights *w, const qhx_run *runs, int n_runs,
                             int l0, int l1, float *x, int T);
void qhx_state_end(const qhx_run *runs, int n_runs);

/* Bytes of weights one token's forward reads: every layer (of a MoE layer, top_k experts of the
 * average size), the final norm, one embedding row and the lm-head. */
uint64_t qhx_weights_bytes_per_token(const qhx_config *c, const qhx_weights *w);

/* The MTP head over n positions at its state's position: hidden[n][hidden] the trunk's final-normed
 * states there, next[n] the token after each; y[n][hidden] gets the head's normed output (what the
 * lm-head reads, and the hidden a further draft step takes). s is a qhx_state over w->mtp->cfg's
 * one layer. */
qhx_status qhx_qwen35_mtp(const qhx_exec *ex, const qhx_weights *w, qhx_state *s, const float *hidden,
                          const int32_t *next, int n, float *y);

/* What a measurement hangs on an exec (ex->routes) to see routing: each MoE layer a call runs
 * appends, for its rows in order, the top_k experts of each (ascending ids). */
typedef struct qhx_route_log {
    int32_t *ids;
    size_t n, cap;
} qhx_route_log;

/* logits[n][vocab] = lm_head · x for final-normed x. */
qhx_status qhx_qwen35_head(const qhx_exec *ex, const qhx_config *c, const qhx_weights *w, const float *x, int n,
                           float *logits);

#endif
