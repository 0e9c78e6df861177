/* The tensor table of the Qwen3.5 text decoder (spec §2): names, shapes, on-disk dtypes. */
#include "format/qhxf.h"
#include "model/ops.h"
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
        /* lm_head and the MTP head sit beside the decoder, outside its prefix */
        const int outside = !strncmp(local, "lm_head", 7) || !strncmp(local, "mtp.", 4);
        snprintf(s->name, sizeof s->name, "%s%s", outside ? "" : L->prefix, local);
        s->ndim = ndim;
        s->shape[0] = d0;
        s->shape[1] = d1;
        s->shape[2] = d2;
        s->dtype = dt;
        s->init = init;
        s->layer = layer == QHX_LAYER_MTP || strstr(fmt, "%d") ? layer : -1;
        s->dst = dst;
    }
    L->n++;
}

qhx_weights *qhx_weights_new(const qhx_config *c) {
    qhx_weights *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->layers = calloc((size_t)c->n_layers, sizeof *w->layers);
    /* every layer's routed experts in one table, the MTP head's layer's last */
    const size_t per_layer = (size_t)3 * c->n_experts, n = per_layer * (size_t)(c->n_layers + (c->mtp_layers != 0));
    if (w->layers && n && (w->expert_table = calloc(n, sizeof(qhx_tensor))))
        for (int l = 0; l < c->n_layers; l++) w->layers[l].experts = w->expert_table + per_layer * l;
    if (n && !w->expert_table) return qhx_weights_free(w), NULL;
    if (c->mtp_layers && (w->mtp = calloc(1, sizeof *w->mtp))) {
        qhx_mtp_weights *m = w->mtp;
        m->cfg = *c; /* the head's layer is shaped as the trunk's gated-attention layers */
        m->cfg.n_layers = 1;
        m->full_attn_one = 1;
        m->cfg.full_attn = &m->full_attn_one;
        m->cfg.mtp_layers = 0;
        m->block.layers = &m->layer;
        if (n) m->layer.experts = w->expert_table + per_layer * c->n_layers;
    }
    if (!w->layers || (c->mtp_layers && !w->mtp)) qhx_weights_free(w), w = NULL;
    return w;
}

void qhx_weights_free(qhx_weights *w) {
    if (w) free(w->layers), free(w->mtp), free(w->expert_table), free(w->conv_taps);
    free(w);
}

int qhx_weights_conv_taps(qhx_weights *w, const qhx_config *c) {
    const size_t C = qhx_config_conv_dim(c), K = (size_t)c->conv_kernel;
    int linear = 0;
    for (int l = 0; l < c->n_layers; l++) linear += !c->full_attn[l];
    free(w->conv_taps);
    if (!(w->conv_taps = malloc(sizeof(float) * C * K * (size_t)(linear ? linear : 1)))) return 1;
    float *t = w->conv_taps;
    for (int l = 0; l < c->n_layers; l++) {
        if (c->full_attn[l]) continue;
        for (size_t ch = 0; ch < C; ch++)
            for (size_t j = 0; j < K; j++) t[j * C + ch] = qhx_tensor_get(&w->layers[l].conv, ch * K + j);
        w->layers[l].conv_taps = t;
        t += C * K;
    }
    return 0;
}

#define W(field) (w ? &w->field : NULL)
#define LW(field) (lw ? &lw->field : NULL)
/* the fmt of add() is a name with at most the layer's %d in it */

/* One decoder layer's tensors, named `base` + their name in the layer ("layers.%d." in the trunk,
 * "mtp.layers.0." in the MTP head). */
static void layer_specs(lister *L, qhx_layer_weights *lw, const qhx_config *c, int full, const char *base, int layer) {
    const int64_t D = c->hidden, F = c->ffn;
    char f[160];
#define ADD(field, dt, init, ndim, d0, d1, d2, name) \
    (snprintf(f, sizeof f, "%s%s", base, name), add(L, LW(field), dt, init, ndim, d0, d1, d2, f, layer))
    ADD(in_norm, QHX_BF16, QHX_INIT_NORM, 1, D, 0, 0, "input_layernorm.weight");
    ADD(post_norm, QHX_BF16, QHX_INIT_NORM, 1, D, 0, 0, "post_attention_layernorm.weight");
    if (c->n_experts) {
        const int64_t I = c->moe_ffn;
        ADD(router, QHX_BF16, QHX_INIT_ROUTER, 2, c->n_experts, D, 0, "mlp.gate.weight");
        for (int e = 0; e < c->n_experts; e++) {
            /* one expert's three matrices side by side in the table and, in bundles, in the file */
            char g[64], u[64], d[64];
            snprintf(g, sizeof g, "mlp.experts.%d.gate_proj.weight", e);
            snprintf(u, sizeof u, "mlp.experts.%d.up_proj.weight", e);
            snprintf(d, sizeof d, "mlp.experts.%d.down_proj.weight", e);
            ADD(experts[3 * e], QHX_BF16, QHX_INIT_MATRIX, 2, I, D, 0, g);
            ADD(experts[3 * e + 1], QHX_BF16, QHX_INIT_MATRIX, 2, I, D, 0, u);
            ADD(experts[3 * e + 2], QHX_BF16, QHX_INIT_MATRIX, 2, D, I, 0, d);
        }
        ADD(gate, QHX_BF16, QHX_INIT_MATRIX, 2, F, D, 0, "mlp.shared_expert.gate_proj.weight");
        ADD(up, QHX_BF16, QHX_INIT_MATRIX, 2, F, D, 0, "mlp.shared_expert.up_proj.weight");
        ADD(down, QHX_BF16, QHX_INIT_MATRIX, 2, D, F, 0, "mlp.shared_expert.down_proj.weight");
        ADD(shared_gate, QHX_BF16, QHX_INIT_ROUTER, 2, 1, D, 0, "mlp.shared_expert_gate.weight");
    } else {
        ADD(gate, QHX_BF16, QHX_INIT_MATRIX, 2, F, D, 0, "mlp.gate_proj.weight");
        ADD(up, QHX_BF16, QHX_INIT_MATRIX, 2, F, D, 0, "mlp.up_proj.weight");
        ADD(down, QHX_BF16, QHX_INIT_MATRIX, 2, D, F, 0, "mlp.down_proj.weight");
    }
    if (full) {
        const int64_t hq = c->n_heads, hkv = c->n_kv_heads, hd = c->head_dim;
        ADD(q, QHX_BF16, QHX_INIT_MATRIX, 2, hq * hd * 2, D, 0, "self_attn.q_proj.weight");
        ADD(k, QHX_BF16, QHX_INIT_MATRIX, 2, hkv * hd, D, 0, "self_attn.k_proj.weight");
        ADD(v, QHX_BF16, QHX_INIT_MATRIX, 2, hkv * hd, D, 0, "self_attn.v_proj.weight");
        ADD(o, QHX_BF16, QHX_INIT_MATRIX, 2, D, hq * hd, 0, "self_attn.o_proj.weight");
        ADD(q_norm, QHX_BF16, QHX_INIT_NORM, 1, hd, 0, 0, "self_attn.q_norm.weight");
        ADD(k_norm, QHX_BF16, QHX_INIT_NORM, 1, hd, 0, 0, "self_attn.k_norm.weight");
    } else {
        const int64_t hv = c->lin_v_heads, dv = c->lin_v_dim, conv = qhx_config_conv_dim(c);
        ADD(qkv, QHX_BF16, QHX_INIT_MATRIX, 2, conv, D, 0, "linear_attn.in_proj_qkv.weight");
        ADD(z, QHX_BF16, QHX_INIT_MATRIX, 2, hv * dv, D, 0, "linear_attn.in_proj_z.weight");
        ADD(b, QHX_BF16, QHX_INIT_MATRIX, 2, hv, D, 0, "linear_attn.in_proj_b.weight");
        ADD(a, QHX_BF16, QHX_INIT_MATRIX, 2, hv, D, 0, "linear_attn.in_proj_a.weight");
        ADD(conv, QHX_BF16, QHX_INIT_CONV, 3, conv, 1, c->conv_kernel, "linear_attn.conv1d.weight");
        ADD(dt_bias, QHX_BF16, QHX_INIT_DTBIAS, 1, hv, 0, 0, "linear_attn.dt_bias");
        ADD(a_log, QHX_F32, QHX_INIT_ALOG, 1, hv, 0, 0, "linear_attn.A_log");
        ADD(gnorm, QHX_F32, QHX_INIT_GNORM, 1, dv, 0, 0, "linear_attn.norm.weight");
        ADD(out, QHX_BF16, QHX_INIT_MATRIX, 2, D, hv * dv, 0, "linear_attn.out_proj.weight");
    }
#undef ADD
}

int qhx_qwen35_specs(const qhx_config *c, const char *prefix, qhx_weights *w, qhx_tensor_spec *out) {
    lister L = {out, 0, prefix};
    const int64_t D = c->hidden, V = c->vocab_size;
    add(&L, W(embed), QHX_BF16, QHX_INIT_EMBED, 2, V, D, 0, "embed_tokens.weight", 0);
    for (int i = 0; i < c->n_layers; i++) layer_specs(&L, w ? &w->layers[i] : NULL, c, c->full_attn[i], "layers.%d.", i);
    add(&L, W(final_norm), QHX_BF16, QHX_INIT_NORM, 1, D, 0, 0, "norm.weight", 0);
    if (!c->tie_embeddings) add(&L, W(lm_head), QHX_BF16, QHX_INIT_EMBED, 2, V, D, 0, "lm_head.weight", 0);
    if (c->mtp_layers) {
        const int M = QHX_LAYER_MTP;
        qhx_mtp_weights *m = w ? w->mtp : NULL;
#define MW(field) (m ? &m->field : NULL)
        add(&L, MW(fc), QHX_BF16, QHX_INIT_MATRIX, 2, D, 2 * D, 0, "mtp.fc.weight", M);
        add(&L, MW(norm_embed), QHX_BF16, QHX_INIT_NORM, 1, D, 0, 0, "mtp.pre_fc_norm_embedding.weight", M);
        add(&L, MW(norm_hidden), QHX_BF16, QHX_INIT_NORM, 1, D, 0, 0, "mtp.pre_fc_norm_hidden.weight", M);
        layer_specs(&L, m ? &m->layer : NULL, c, 1, "mtp.layers.0.", M);
        add(&L, MW(block.final_norm), QHX_BF16, QHX_INIT_NORM, 1, D, 0, 0, "mtp.norm.weight", M);
#undef MW
    }
    return L.n;
}

/* what one decode step reads: every layer's weights, the final norm, the lm-head, one embedding row */
static uint64_t tensor_bytes(const qhx_tensor *t) {
    if (!t->data) return 0;
    return qhxf_data_bytes(t->dtype, (uint64_t)t->rows, (uint64_t)t->cols) + (t->dtype == QHX_I8 ? 4 * (uint64_t)t->rows : 0);
}

uint64_t qhx_weights_bytes_per_token(const qhx_config *c, const qhx_weights *w) {
    uint64_t n = tensor_bytes(&w->final_norm) + tensor_bytes(&w->lm_head) + (uint64_t)c->hidden * qhx_dtype_size(w->embed.dtype);
    for (int l = 0; l < c->n_layers; l++) {
        const qhx_layer_weights *lw = &w->layers[l];
        const qhx_tensor *all[] = {&lw->in_norm, &lw->post_norm, &lw->gate, &lw->up, &lw->down, &lw->qkv, &lw->z,
                                   &lw->b, &lw->a, &lw->conv, &lw->dt_bias, &lw->a_log, &lw->gnorm, &lw->out,
                                   &lw->q, &lw->k, &lw->v, &lw->o, &lw->q_norm, &lw->k_norm, &lw->router, &lw->shared_gate};
        for (size_t i = 0; i < sizeof all / sizeof *all; i++) n += tensor_bytes(all[i]);
        uint64_t experts = 0;
        for (int e = 0; e < 3 * c->n_experts; e++) experts += tensor_bytes(&lw->experts[e]);
        if (c->n_experts) n += experts * (uint64_t)c->top_k / (uint64_t)c->n_experts;
    }
    return n;
}
