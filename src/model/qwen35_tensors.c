/* The tensor table of the Qwen3.5 text decoder (spec §2): names, shapes, on-disk dtypes. */
#include "model/qwen35.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    qhx_tensor_spec *out;
    int n;
    const char *prefix;
} lister;

static void add(lister *L, qhx_tensor *dst, qhx_dtype dt, qhx_init_kind init, int ndim, int64_t d0, int64_t d1,
                int64_t d2, const char *fmt, int layer) {
    if (L->out) {
        qhx_tensor_spec *s = &L->out[L->n];
        memset(s, 0, sizeof *s);
        char local[128];
        snprintf(local, sizeof local, fmt, layer);
        snprintf(s->name, sizeof s->name, "%s%s", strncmp(local, "lm_head", 7) ? L->prefix : "", local);
        s->ndim = ndim;
        s->shape[0] = d0;
        s->shape[1] = d1;
        s->shape[2] = d2;
        s->dtype = dt;
        s->init = init;
        s->layer = strstr(fmt, "%d") ? layer : -1;
        s->dst = dst;
    }
    L->n++;
}

qhx_weights *qhx_weights_new(const qhx_config *c) {
    qhx_weights *w = calloc(1, sizeof *w);
    if (w && !(w->layers = calloc((size_t)c->n_layers, sizeof *w->layers))) free(w), w = NULL;
    return w;
}

void qhx_weights_free(qhx_weights *w) {
    if (w) free(w->layers);
    free(w);
}

#define W(field) (w ? &w->field : NULL)
#define LW(field) (w ? &w->layers[i].field : NULL)

int qhx_qwen35_specs(const qhx_config *c, const char *prefix, qhx_weights *w, qhx_tensor_spec *out) {
    lister L = {out, 0, prefix};
    const int64_t D = c->hidden, F = c->ffn, V = c->vocab_size;
    add(&L, W(embed), QHX_BF16, QHX_INIT_EMBED, 2, V, D, 0, "embed_tokens.weight", 0);
    for (int i = 0; i < c->n_layers; i++) {
        add(&L, LW(in_norm), QHX_BF16, QHX_INIT_NORM, 1, D, 0, 0, "layers.%d.input_layernorm.weight", i);
        add(&L, LW(post_norm), QHX_BF16, QHX_INIT_NORM, 1, D, 0, 0, "layers.%d.post_attention_layernorm.weight", i);
        add(&L, LW(gate), QHX_BF16, QHX_INIT_MATRIX, 2, F, D, 0, "layers.%d.mlp.gate_proj.weight", i);
        add(&L, LW(up), QHX_BF16, QHX_INIT_MATRIX, 2, F, D, 0, "layers.%d.mlp.up_proj.weight", i);
        add(&L, LW(down), QHX_BF16, QHX_INIT_MATRIX, 2, D, F, 0, "layers.%d.mlp.down_proj.weight", i);
        if (c->full_attn[i]) {
            const int64_t hq = c->n_heads, hkv = c->n_kv_heads, hd = c->head_dim;
            add(&L, LW(q), QHX_BF16, QHX_INIT_MATRIX, 2, hq * hd * 2, D, 0, "layers.%d.self_attn.q_proj.weight", i);
            add(&L, LW(k), QHX_BF16, QHX_INIT_MATRIX, 2, hkv * hd, D, 0, "layers.%d.self_attn.k_proj.weight", i);
            add(&L, LW(v), QHX_BF16, QHX_INIT_MATRIX, 2, hkv * hd, D, 0, "layers.%d.self_attn.v_proj.weight", i);
            add(&L, LW(o), QHX_BF16, QHX_INIT_MATRIX, 2, D, hq * hd, 0, "layers.%d.self_attn.o_proj.weight", i);
            add(&L, LW(q_norm), QHX_BF16, QHX_INIT_NORM, 1, hd, 0, 0, "layers.%d.self_attn.q_norm.weight", i);
            add(&L, LW(k_norm), QHX_BF16, QHX_INIT_NORM, 1, hd, 0, 0, "layers.%d.self_attn.k_norm.weight", i);
        } else {
            const int64_t hv = c->lin_v_heads, dv = c->lin_v_dim, conv = qhx_config_conv_dim(c);
            add(&L, LW(qkv), QHX_BF16, QHX_INIT_MATRIX, 2, conv, D, 0, "layers.%d.linear_attn.in_proj_qkv.weight", i);
            add(&L, LW(z), QHX_BF16, QHX_INIT_MATRIX, 2, hv * dv, D, 0, "layers.%d.linear_attn.in_proj_z.weight", i);
            add(&L, LW(b), QHX_BF16, QHX_INIT_MATRIX, 2, hv, D, 0, "layers.%d.linear_attn.in_proj_b.weight", i);
            add(&L, LW(a), QHX_BF16, QHX_INIT_MATRIX, 2, hv, D, 0, "layers.%d.linear_attn.in_proj_a.weight", i);
            add(&L, LW(conv), QHX_BF16, QHX_INIT_CONV, 3, conv, 1, c->conv_kernel, "layers.%d.linear_attn.conv1d.weight", i);
            add(&L, LW(dt_bias), QHX_BF16, QHX_INIT_DTBIAS, 1, hv, 0, 0, "layers.%d.linear_attn.dt_bias", i);
            add(&L, LW(a_log), QHX_F32, QHX_INIT_ALOG, 1, hv, 0, 0, "layers.%d.linear_attn.A_log", i);
            add(&L, LW(gnorm), QHX_F32, QHX_INIT_GNORM, 1, dv, 0, 0, "layers.%d.linear_attn.norm.weight", i);
            add(&L, LW(out), QHX_BF16, QHX_INIT_MATRIX, 2, D, hv * dv, 0, "layers.%d.linear_attn.out_proj.weight", i);
        }
    }
    add(&L, W(final_norm), QHX_BF16, QHX_INIT_NORM, 1, D, 0, 0, "norm.weight", 0);
    if (!c->tie_embeddings) add(&L, W(lm_head), QHX_BF16, QHX_INIT_EMBED, 2, V, D, 0, "lm_head.weight", 0);
    return L.n;
}
