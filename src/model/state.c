/* The per-sequence state of every layer: conv FIFOs and delta-rule states (fixed size) and
 * KV caches (growing with the tokens). */
#include "model/qwen35.h"
#include "kernels/kv.h"
#include "util/error.h"
#include "util/hugemem.h"

#include <stdlib.h>
#include <string.h>

/* floats of one linear layer's conv FIFO and delta-rule state */
size_t qhx_state_conv_floats(const qhx_config *c) {
    return (size_t)qhx_config_conv_dim(c) * (c->conv_kernel > 1 ? c->conv_kernel - 1 : 1);
}
size_t qhx_state_ssm_floats(const qhx_config *c) { return (size_t)c->lin_v_heads * c->lin_k_dim * c->lin_v_dim; }

size_t qhx_state_fixed_bytes(const qhx_config *c) {
    size_t n = 0;
    for (int l = 0; l < c->n_layers; l++)
        if (!c->full_attn[l]) n += (qhx_state_conv_floats(c) + qhx_state_ssm_floats(c)) * sizeof(float);
    return n;
}

size_t qhx_state_kv_row_bytes(const qhx_config *c, qhx_kv_form kv) {
    return (size_t)c->n_kv_heads * qhx_kv_head_bytes(kv, c->head_dim);
}

size_t qhx_state_kv_bytes_per_token(const qhx_config *c, qhx_kv_form kv) {
    size_t n = 0;
    for (int l = 0; l < c->n_layers; l++)
        if (c->full_attn[l]) n += 2 * qhx_state_kv_row_bytes(c, kv);
    return n;
}

qhx_status qhx_state_init(qhx_state *s, const qhx_config *c, qhx_kv_form kv) {
    memset(s, 0, sizeof *s);
    s->cfg = c;
    s->mark = -1;
    s->kv = kv;
    s->kv_head = qhx_kv_head_bytes(kv, c->head_dim);
    const size_t conv = qhx_state_conv_floats(c), ssm = qhx_state_ssm_floats(c);
    s->layers = calloc((size_t)c->n_layers, sizeof *s->layers);
    if (!s->layers) {
        memset(s, 0, sizeof *s);
        return qhx_fail(QHX_ERR_NOMEM, "session state: out of memory");
    }
    for (int l = 0; l < c->n_layers; l++) {
        if (c->full_attn[l]) continue;
        qhx_layer_state *ls = qhx_state_layer(s, l);
        ls->conv = calloc(conv, sizeof(float));
        ls->ssm = qhx_huge_calloc(ssm * sizeof(float));
        if (!ls->conv || !ls->ssm) {
            qhx_state_free(s);
            return qhx_fail(QHX_ERR_NOMEM, "session state: out of memory");
        }
    }
    return QHX_OK;
}

void qhx_state_reset(qhx_state *s) {
    const qhx_config *c = s->cfg;
    const size_t conv = qhx_state_conv_floats(c), ssm = qhx_state_ssm_floats(c);
    for (int l = 0; l < s->cfg->n_layers; l++) {
        if (c->full_attn[l]) continue;
        memset(qhx_state_layer(s, l)->conv, 0, conv * sizeof(float));
        memset(qhx_state_layer(s, l)->ssm, 0, ssm * sizeof(float));
    }
    s->pos = 0;
    s->mark = -1;
}

void qhx_state_free(qhx_state *s) {
    if (!s->cfg) return;
    for (int l = 0; l < s->cfg->n_layers && s->layers; l++) {
        qhx_layer_state *ls = qhx_state_layer(s, l);
        free(ls->conv);
        free(ls->ssm);
        free(ls->k_cache);
        free(ls->v_cache);
        free(ls->undo);
    }
    free(s->layers);
    free(s->scratch);
    memset(s, 0, sizeof *s);
}

qhx_status qhx_state_reserve_kv(qhx_state *s, int need) {
    if (need <= s->kv_capacity) return QHX_OK;
    int cap = s->kv_capacity ? s->kv_capacity : 256;
    while (cap < need) cap = cap > (1 << 29) ? need : cap * 2;
    if (s->kv_limit && need <= s->kv_limit && cap > s->kv_limit) cap = s->kv_limit; /* doubling past the context wastes up to half */
    const int heads = s->cfg->n_kv_heads, L = s->cfg->n_layers;
    const size_t old = (size_t)s->kv_capacity * s->kv_head, now = (size_t)cap * s->kv_head; /* bytes of a head's rows */
    /* every new cache allocated first (a failure leaves the old ones as they were), then each
     * head's rows copied once to their new place */
    unsigned char **fresh = calloc((size_t)2 * L, sizeof *fresh);
    int ok = fresh != NULL;
    for (int i = 0; i < 2 * L && ok; i++)
        if (s->cfg->full_attn[i / 2]) ok = (fresh[i] = qhx_huge_calloc(now * heads)) != NULL;
    for (int i = 0; i < 2 * L && fresh; i++) {
        if (!fresh[i]) continue;
        if (!ok) {
            free(fresh[i]);
            continue;
        }
        qhx_layer_state *ls = qhx_state_layer(s, i / 2);
        unsigned char **cache = i % 2 ? &ls->v_cache : &ls->k_cache;
        for (int j = 0; j < heads && *cache; j++) memcpy(fresh[i] + j * now, *cache + j * old, old);
        free(*cache);
        *cache = fresh[i];
    }
    free(fresh);
    if (!ok) return qhx_fail(QHX_ERR_NOMEM, "KV cache: out of memory for %d tokens", cap);
    s->kv_capacity = cap;
    return QHX_OK;
}
