/* The Qwen3.5 text decoder: weights as views, per-sequence state, and the fp32 reference forward. */
#ifndef QHX_QWEN35_H
#define QHX_QWEN35_H
#include <stddef.h>
#include "format/hfconfig.h"
#include "format/safetensors.h"

/* A weight as the forward pass sees it: a row-major matrix (a vector has rows == 1) of some dtype. */
typedef struct {
    qhx_dtype dtype;
    int rows, cols;
    const void *data;
} qhx_tensor;

typedef struct {
    qhx_tensor in_norm, post_norm;                 /* zero-centred RMSNorm weights (scale 1 + w) */
    qhx_tensor gate, up, down;                     /* SwiGLU MLP */
    /* Gated DeltaNet (linear attention) layers */
    qhx_tensor qkv, z, b, a, conv, dt_bias, a_log, gnorm, out;
    /* gated softmax attention layers */
    qhx_tensor q, k, v, o, q_norm, k_norm;
} qhx_layer_weights;

typedef struct {
    qhx_tensor embed, lm_head, final_norm;
    qhx_layer_weights layers[QHX_MAX_LAYERS];
} qhx_weights;

/* How a synthetic checkpoint initialises a tensor (see forge/synth.c). */
typedef enum { QHX_INIT_MATRIX, QHX_INIT_EMBED, QHX_INIT_NORM, QHX_INIT_GNORM, QHX_INIT_CONV,
               QHX_INIT_ALOG, QHX_INIT_DTBIAS } qhx_init_kind;

typedef struct {
    char name[160];
    int ndim;
    int64_t shape[3];
    qhx_dtype dtype;          /* the dtype Hugging Face stores it in */
    qhx_init_kind init;
    qhx_tensor *dst;          /* where the loader binds it; NULL when enumerating only */
} qhx_tensor_spec;

/* Every tensor the text decoder needs, with its name (after `prefix`, e.g. "model.language_model."),
 * exact shape and dtype. Returns the count; fills out[] when it is not NULL (size it with a first
 * call). The one list the loader checks against and the synthesizer writes. */
int qhx_qwen35_specs(const qhx_config *c, const char *prefix, qhx_weights *w, qhx_tensor_spec *out);

/* ---- per-sequence state ------------------------------------------------------------------- */

typedef struct {
    float *conv;       /* [conv_kernel-1][conv_dim]: the last inputs of the causal conv, oldest first */
    float *ssm;        /* [lin_v_heads][lin_k_dim][lin_v_dim]: the delta-rule state S[h][i_k][j_v] */
    float *k_cache;    /* [capacity][n_kv_heads*head_dim], post-norm post-RoPE */
    float *v_cache;
} qhx_layer_state;

typedef struct {
    const qhx_config *cfg;
    qhx_layer_state layers[QHX_MAX_LAYERS];
    int pos;           /* tokens consumed */
    int kv_capacity;   /* tokens the KV caches hold before they grow */
    float *scratch;    /* per-call work buffers, grown on demand and reused */
    size_t scratch_floats;
} qhx_state;

qhx_status qhx_state_init(qhx_state *s, const qhx_config *c);
void qhx_state_free(qhx_state *s);
void qhx_state_reset(qhx_state *s);

/* The reference forward: feeds tokens[0..n) at the state's position. `stepwise` selects the
 * recurrent delta rule (one token at a time) instead of the chunked one. Writes logits of every
 * position to logits_all [n][vocab] and/or the last one to logits_last, when not NULL. */
qhx_status qhx_qwen35_forward(const qhx_config *c, const qhx_weights *w, qhx_state *s,
                              const int32_t *tokens, int n, int stepwise,
                              float *logits_all, float *logits_last);

#endif
