#include "format/hfconfig.h"
#include "util/error.h"
#include "util/mapfile.h"

#include "util/json.h"
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

/* Dimension fields are bounded so that products of two of them cannot overflow 64-bit sizes. */
#define MAX_DIM (1 << 20)

typedef struct {
    const char *path;
    const json_t *tc;   /* the text config object (text_config, or the root when flat) */
    const json_t *root;
} ctx;

static const json_t *field(const ctx *x, const char *key) { return json_object_get(x->tc, key); }

static qhx_status get_int(const ctx *x, const char *key, int lo, int hi, int *out, int required, int dflt) {
    const json_t *v = field(x, key);
    if (!v || json_is_null(v)) {
        if (required) return qhx_fail(QHX_ERR_FORMAT, "%s: missing field '%s'", x->path, key);
        *out = dflt;
        return QHX_OK;
    }
    if (!json_is_number(v) || json_number_value(v) != floor(json_number_value(v)) || json_number_value(v) < lo || json_number_value(v) > hi)
        return qhx_fail(QHX_ERR_FORMAT, "%s: field '%s' must be an integer in [%d, %d]", x->path, key, lo, hi);
    *out = (int)json_number_value(v);
    return QHX_OK;
}

static qhx_status get_float(const ctx *x, const json_t *obj, const char *key, double lo, double hi, float *out) {
    const json_t *v = json_object_get(obj, key);
    if (!v) return qhx_fail(QHX_ERR_FORMAT, "%s: missing field '%s'", x->path, key);
    if (!json_is_number(v) || !(json_number_value(v) >= lo && json_number_value(v) <= hi))
        return qhx_fail(QHX_ERR_FORMAT, "%s: field '%s' must be a number in [%g, %g]", x->path, key, lo, hi);
    *out = (float)json_number_value(v);
    return QHX_OK;
}

/* eos_token_id may be an int or a list of ints. */
static void read_eos(qhx_config *c, const json_t *v) {
    if (json_is_number(v) && json_number_value(v) >= 0 && json_number_value(v) < c->vocab_size) {
        c->n_eos = 1;
        c->eos[0] = (int32_t)json_number_value(v);
    } else if (json_is_array(v)) {
        c->n_eos = 0;
        size_t i;
        const json_t *e;
        json_array_foreach(v, i, e)
            if (c->n_eos < 4 && json_is_number(e) && json_number_value(e) >= 0 && json_number_value(e) < c->vocab_size)
                c->eos[c->n_eos++] = (int32_t)json_number_value(e);
    }
}

/* The sparse MoE block (Qwen3.5-MoE, as Qwen3-Next): every layer's, top-k weights renormalised. */
static qhx_status parse_moe(qhx_config *c, const ctx *x) {
    qhx_status rc;
    if ((rc = get_int(x, "num_experts", 1, 1 << 16, &c->n_experts, 1, 0)) ||
        (rc = get_int(x, "num_experts_per_tok", 1, c->n_experts < QHX_MAX_TOP_K ? c->n_experts : QHX_MAX_TOP_K, &c->top_k, 1, 0)) ||
        (rc = get_int(x, "moe_intermediate_size", 1, MAX_DIM, &c->moe_ffn, 1, 0)) ||
        (rc = get_int(x, "shared_expert_intermediate_size", 1, MAX_DIM, &c->ffn, 1, 0)))
        return rc;
    const json_t *norm = field(x, "norm_topk_prob"), *only = field(x, "mlp_only_layers"), *step = field(x, "decoder_sparse_step");
    if (norm && !json_is_true(norm))
        return qhx_fail(QHX_ERR_UNSUPPORTED, "%s: norm_topk_prob must be true (Qwen3.5-MoE renormalises the top-k weights)", x->path);
    if (only && !(json_is_array(only) && json_array_size(only) == 0))
        return qhx_fail(QHX_ERR_UNSUPPORTED, "%s: mlp_only_layers must be empty (every layer's MLP is a MoE block)", x->path);
    if (step && !(json_is_number(step) && json_number_value(step) == 1))
        return qhx_fail(QHX_ERR_UNSUPPORTED, "%s: decoder_sparse_step must be 1", x->path);
    return QHX_OK;
}

static qhx_status parse_text(qhx_config *c, const ctx *x, int moe) {
    qhx_status rc;
    if ((rc = get_int(x, "vocab_size", 1, 1 << 24, &c->vocab_size, 1, 0)) ||
        (rc = get_int(x, "hidden_size", 1, MAX_DIM, &c->hidden, 1, 0)) ||
        (rc = get_int(x, "num_hidden_layers", 1, QHX_MAX_LAYERS, &c->n_layers, 1, 0)) ||
        (rc = moe ? parse_moe(c, x) : get_int(x, "intermediate_size", 1, MAX_DIM, &c->ffn, 1, 0)) ||
        (rc = get_int(x, "num_attention_heads", 1, 4096, &c->n_heads, 1, 0)) ||
        (rc = get_int(x, "num_key_value_heads", 1, 4096, &c->n_kv_heads, 1, 0)) ||
        (rc = get_int(x, "head_dim", 2, 4096, &c->head_dim, 1, 0)) ||
        (rc = get_int(x, "linear_num_key_heads", 1, 4096, &c->lin_k_heads, 1, 0)) ||
        (rc = get_int(x, "linear_num_value_heads", 1, 4096, &c->lin_v_heads, 1, 0)) ||
        (rc = get_int(x, "linear_key_head_dim", 1, 4096, &c->lin_k_dim, 1, 0)) ||
        (rc = get_int(x, "linear_value_head_dim", 1, 4096, &c->lin_v_dim, 1, 0)) ||
        (rc = get_int(x, "linear_conv_kernel_dim", 1, 64, &c->conv_kernel, 1, 0)) ||
        (rc = get_int(x, "max_position_embeddings", 1, 1 << 30, &c->max_pos, 0, 262144)) ||
        (rc = get_int(x, "mtp_num_hidden_layers", 0, 1024, &c->mtp_layers, 0, 0)))
        return rc;
    if (c->mtp_layers > 1) c->mtp_layers = 0; /* qhexrt runs one-layer heads, as Qwen3.5's; the trunk still loads */
    if ((rc = get_float(x, x->tc, "rms_norm_eps", 0, 1, &c->eps))) return rc;
    if (c->n_heads % c->n_kv_heads)
        return qhx_fail(QHX_ERR_FORMAT, "%s: num_attention_heads %d is not a multiple of num_key_value_heads %d",
                        x->path, c->n_heads, c->n_kv_heads);
    if (c->lin_v_heads % c->lin_k_heads)
        return qhx_fail(QHX_ERR_FORMAT, "%s: linear_num_value_heads %d is not a multiple of linear_num_key_heads %d",
                        x->path, c->lin_v_heads, c->lin_k_heads);
    if ((long long)c->n_heads * c->head_dim * 2 > MAX_DIM || (long long)qhx_config_conv_dim(c) > MAX_DIM)
        return qhx_fail(QHX_ERR_FORMAT, "%s: attention dimensions too large", x->path);

    const json_t *act = field(x, "hidden_act");
    if (act && !(json_is_string(act) && !strcmp(json_string_value(act), "silu")))
        return qhx_fail(QHX_ERR_UNSUPPORTED, "%s: hidden_act must be \"silu\"", x->path);
    const json_t *bias = field(x, "attention_bias");
    if (bias && json_is_true(bias)) return qhx_fail(QHX_ERR_UNSUPPORTED, "%s: attention_bias true is not supported", x->path);

    /* RoPE: newer configs nest it in rope_parameters, older ones keep flat keys. */
    const json_t *rp = field(x, "rope_parameters");
    if (!rp) rp = field(x, "rope_scaling");
    const json_t *rsrc = json_is_object(rp) && json_object_get(rp, "rope_theta") ? rp : x->tc;
    if ((rc = get_float(x, rsrc, "rope_theta", 1, 1e12, &c->rope_theta))) return rc;
    float prf = 1.0f;
    const json_t *pr = json_is_object(rp) ? json_object_get(rp, "partial_rotary_factor") : NULL;
    if (!pr) pr = field(x, "partial_rotary_factor");
    if (pr) {
        if (!json_is_number(pr) || !(json_number_value(pr) > 0 && json_number_value(pr) <= 1))
            return qhx_fail(QHX_ERR_FORMAT, "%s: partial_rotary_factor must be in (0, 1]", x->path);
        prf = (float)json_number_value(pr);
    }
    if (json_is_object(rp)) {
        const json_t *rt = json_object_get(rp, "rope_type");
        if (!rt) rt = json_object_get(rp, "type");
        if (rt && !(json_is_string(rt) && !strcmp(json_string_value(rt), "default")))
            return qhx_fail(QHX_ERR_UNSUPPORTED, "%s: rope_type '%s' is not supported (only \"default\")", x->path,
                            json_is_string(rt) ? json_string_value(rt) : "?");
    }
    /* HF: rotary_dim = int(head_dim * partial_rotary_factor) */
    c->rot_dim = (int)(c->head_dim * (double)prf);
    if (c->rot_dim % 2 || c->rot_dim < 2)
        return qhx_fail(QHX_ERR_FORMAT, "%s: rotary dimension %d (head_dim x partial_rotary_factor) must be even",
                        x->path, c->rot_dim);

    if (!(c->full_attn = calloc((size_t)c->n_layers, 1))) return qhx_fail(QHX_ERR_NOMEM, "out of memory");
    const json_t *lt = field(x, "layer_types");
    if (lt) {
        if (!json_is_array(lt) || json_array_size(lt) != (size_t)c->n_layers)
            return qhx_fail(QHX_ERR_FORMAT, "%s: layer_types must list %d layers", x->path, c->n_layers);
        size_t k;
        const json_t *e;
        json_array_foreach(lt, k, e) {
            const int i = (int)k;
            if (json_is_string(e) && !strcmp(json_string_value(e), "full_attention")) c->full_attn[i] = 1;
            else if (json_is_string(e) && !strcmp(json_string_value(e), "linear_attention")) c->full_attn[i] = 0;
            else return qhx_fail(QHX_ERR_UNSUPPORTED, "%s: layer_types[%d] is not \"linear_attention\" or \"full_attention\"", x->path, i);
        }
    } else {
        int interval;
        if ((rc = get_int(x, "full_attention_interval", 1, QHX_MAX_LAYERS, &interval, 0, 4))) return rc;
        for (int i = 0; i < c->n_layers; i++) c->full_attn[i] = (i + 1) % interval == 0;
    }

    /* The composite model ties by its top-level flag; a flat config carries one flag. */
    const json_t *tie = json_object_get(x->root, "tie_word_embeddings");
    if (!tie) tie = field(x, "tie_word_embeddings");
    c->tie_embeddings = tie && json_is_true(tie);
    read_eos(c, field(x, "eos_token_id"));
    if (!c->n_eos) read_eos(c, json_object_get(x->root, "eos_token_id"));
    return QHX_OK;
}

qhx_status qhx_config_parse(qhx_config *c, const char *path, const char *json, size_t len) {
    memset(c, 0, sizeof *c);
    json_t *root = qhx_json_parse(json, len);
    if (!root || !json_is_object(root)) {
        json_decref(root);
        return qhx_fail(QHX_ERR_FORMAT, "%s: not a JSON object", path);
    }
    ctx x = {path, root, root};
    const json_t *mt = json_object_get(root, "model_type");
    const char *type = json_is_string(mt) ? json_string_value(mt) : NULL;
    qhx_status rc;
    if (!type) {
        rc = qhx_fail(QHX_ERR_FORMAT, "%s: missing field 'model_type'", path);
    } else if (!strcmp(type, "qwen3_5") || !strcmp(type, "qwen3_5_moe")) {
        const int moe = !strcmp(type, "qwen3_5_moe");
        const char *want = moe ? "qwen3_5_moe_text" : "qwen3_5_text";
        const json_t *tc = json_object_get(root, "text_config");
        if (!json_is_object(tc)) {
            rc = qhx_fail(QHX_ERR_FORMAT, "%s: model_type %s needs a 'text_config' object", path, type);
        } else {
            const json_t *tmt = json_object_get(tc, "model_type");
            if (tmt && !(json_is_string(tmt) && !strcmp(json_string_value(tmt), want)))
                rc = qhx_fail(QHX_ERR_UNSUPPORTED, "%s: text_config.model_type '%s' is not supported (expected %s)",
                              path, json_is_string(tmt) ? json_string_value(tmt) : "?", want);
            else {
                x.tc = tc;
                rc = parse_text(c, &x, moe);
            }
        }
    } else if (!strcmp(type, "qwen3_5_text") || !strcmp(type, "qwen3_5_moe_text")) {
        rc = parse_text(c, &x, !strcmp(type, "qwen3_5_moe_text"));
    } else {
        rc = qhx_fail(QHX_ERR_UNSUPPORTED, "%s: model_type '%.64s' is not supported (expected qwen3_5, qwen3_5_moe or their _text forms)",
                      path, type);
    }
    json_decref(root);
    if (rc) qhx_config_free(c);
    return rc;
}

void qhx_config_free(qhx_config *c) {
    free(c->full_attn);
    c->full_attn = NULL;
}

qhx_status qhx_config_load(qhx_config *c, const char *dir) {
    char *path = qhx_path_join(dir, "config.json"), *buf;
    size_t len;
    qhx_status rc = path ? qhx_read_file(path, 16u << 20, &buf, &len) : qhx_fail(QHX_ERR_NOMEM, "out of memory");
    if (!rc) {
        rc = qhx_config_parse(c, path, buf, len);
        free(buf);
    }
    free(path);
    if (rc) return rc;
    /* generation_config.json names the ids generation stops on; it is optional. */
    path = qhx_path_join(dir, "generation_config.json");
    if (path && qhx_read_file(path, 1u << 20, &buf, &len) == QHX_OK) {
        json_t *g = qhx_json_parse(buf, len);
        if (g) read_eos(c, json_object_get(g, "eos_token_id"));
        json_decref(g);
        free(buf);
    }
    free(path);
    qhx_clear_error();
    return QHX_OK;
}

void qhx_config_json_moe(json_t *tc, int n_experts, int top_k, int expert_ffn, int shared_ffn) {
    json_object_set_new(tc, "model_type", json_string("qwen3_5_moe_text"));
    json_object_del(tc, "intermediate_size");
    json_object_set_new(tc, "num_experts", json_integer(n_experts));
    json_object_set_new(tc, "num_experts_per_tok", json_integer(top_k));
    json_object_set_new(tc, "moe_intermediate_size", json_integer(expert_ffn));
    json_object_set_new(tc, "shared_expert_intermediate_size", json_integer(shared_ffn));
}

char *qhx_config_to_json(const qhx_config *c) {
    json_t *lt = json_array(), *eos = json_array();
    for (int i = 0; lt && i < c->n_layers; i++) json_array_append_new(lt, json_string(c->full_attn[i] ? "full_attention" : "linear_attention"));
    for (int i = 0; eos && i < c->n_eos; i++) json_array_append_new(eos, json_integer(c->eos[i]));
    /* numbers as qhx_json_number writes them: the text is what a bundle's model_hash covers */
    json_t *o = json_pack("{s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:o, s:s, s:{s:s, s:o, s:o}, s:o, s:b, s:o}",
                          "model_type", "qwen3_5_text", "vocab_size", c->vocab_size, "hidden_size", c->hidden,
                          "num_hidden_layers", c->n_layers, "intermediate_size", c->ffn, "num_attention_heads", c->n_heads,
                          "num_key_value_heads", c->n_kv_heads, "head_dim", c->head_dim, "linear_num_key_heads", c->lin_k_heads,
                          "linear_num_value_heads", c->lin_v_heads, "linear_key_head_dim", c->lin_k_dim,
                          "linear_value_head_dim", c->lin_v_dim, "linear_conv_kernel_dim", c->conv_kernel,
                          "max_position_embeddings", c->max_pos, "rms_norm_eps", qhx_json_number(c->eps), "hidden_act", "silu",
                          "rope_parameters", "rope_type", "default", "rope_theta", qhx_json_number(c->rope_theta),
                          "partial_rotary_factor", qhx_json_number((double)c->rot_dim / c->head_dim), "layer_types", lt,
                          "tie_word_embeddings", c->tie_embeddings, "eos_token_id", eos);
    /* only where there is a head, so the text (and hash) of models without one stays as it was */
    if (o && c->mtp_layers) json_object_set_new(o, "mtp_num_hidden_layers", json_integer(c->mtp_layers));
    if (o && c->n_experts) qhx_config_json_moe(o, c->n_experts, c->top_k, c->moe_ffn, c->ffn);
    char *s = o ? qhx_json_canonical(o) : NULL;
    json_decref(o);
    return s;
}
