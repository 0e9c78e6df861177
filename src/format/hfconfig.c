#include "format/hfconfig.h"
#include "util/error.h"
#include "util/mapfile.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

/* Dimension fields are bounded so that products of two of them cannot overflow 64-bit sizes. */
#define MAX_DIM (1 << 20)

typedef struct {
    const char *path;
    const cJSON *tc;   /* the text config object (text_config, or the root when flat) */
    const cJSON *root;
} ctx;

static const cJSON *field(const ctx *x, const char *key) { return cJSON_GetObjectItemCaseSensitive(x->tc, key); }

static qhx_status get_int(const ctx *x, const char *key, int lo, int hi, int *out, int required, int dflt) {
    const cJSON *v = field(x, key);
    if (!v || cJSON_IsNull(v)) {
        if (required) return qhx_fail(QHX_ERR_FORMAT, "%s: missing field '%s'", x->path, key);
        *out = dflt;
        return QHX_OK;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < lo || v->valuedouble > hi)
        return qhx_fail(QHX_ERR_FORMAT, "%s: field '%s' must be an integer in [%d, %d]", x->path, key, lo, hi);
    *out = (int)v->valuedouble;
    return QHX_OK;
}

static qhx_status get_float(const ctx *x, const cJSON *obj, const char *key, double lo, double hi, float *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v) return qhx_fail(QHX_ERR_FORMAT, "%s: missing field '%s'", x->path, key);
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= lo && v->valuedouble <= hi))
        return qhx_fail(QHX_ERR_FORMAT, "%s: field '%s' must be a number in [%g, %g]", x->path, key, lo, hi);
    *out = (float)v->valuedouble;
    return QHX_OK;
}

/* eos_token_id may be an int or a list of ints. */
static void read_eos(qhx_config *c, const cJSON *v) {
    if (cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble < c->vocab_size) {
        c->n_eos = 1;
        c->eos[0] = (int32_t)v->valuedouble;
    } else if (cJSON_IsArray(v)) {
        c->n_eos = 0;
        for (const cJSON *e = v->child; e && c->n_eos < 4; e = e->next)
            if (cJSON_IsNumber(e) && e->valuedouble >= 0 && e->valuedouble < c->vocab_size)
                c->eos[c->n_eos++] = (int32_t)e->valuedouble;
    }
}

static qhx_status parse_text(qhx_config *c, const ctx *x) {
    qhx_status rc;
    if ((rc = get_int(x, "vocab_size", 1, 1 << 24, &c->vocab_size, 1, 0)) ||
        (rc = get_int(x, "hidden_size", 1, MAX_DIM, &c->hidden, 1, 0)) ||
        (rc = get_int(x, "num_hidden_layers", 1, QHX_MAX_LAYERS, &c->n_layers, 1, 0)) ||
        (rc = get_int(x, "intermediate_size", 1, MAX_DIM, &c->ffn, 1, 0)) ||
        (rc = get_int(x, "num_attention_heads", 1, 4096, &c->n_heads, 1, 0)) ||
        (rc = get_int(x, "num_key_value_heads", 1, 4096, &c->n_kv_heads, 1, 0)) ||
        (rc = get_int(x, "head_dim", 2, 4096, &c->head_dim, 1, 0)) ||
        (rc = get_int(x, "linear_num_key_heads", 1, 4096, &c->lin_k_heads, 1, 0)) ||
        (rc = get_int(x, "linear_num_value_heads", 1, 4096, &c->lin_v_heads, 1, 0)) ||
        (rc = get_int(x, "linear_key_head_dim", 1, 4096, &c->lin_k_dim, 1, 0)) ||
        (rc = get_int(x, "linear_value_head_dim", 1, 4096, &c->lin_v_dim, 1, 0)) ||
        (rc = get_int(x, "linear_conv_kernel_dim", 1, 64, &c->conv_kernel, 1, 0)) ||
        (rc = get_int(x, "max_position_embeddings", 1, 1 << 30, &c->max_pos, 0, 262144)))
        return rc;
    if ((rc = get_float(x, x->tc, "rms_norm_eps", 0, 1, &c->eps))) return rc;
    if (c->n_heads % c->n_kv_heads)
        return qhx_fail(QHX_ERR_FORMAT, "%s: num_attention_heads %d is not a multiple of num_key_value_heads %d",
                        x->path, c->n_heads, c->n_kv_heads);
    if (c->lin_v_heads % c->lin_k_heads)
        return qhx_fail(QHX_ERR_FORMAT, "%s: linear_num_value_heads %d is not a multiple of linear_num_key_heads %d",
                        x->path, c->lin_v_heads, c->lin_k_heads);
    if ((long long)c->n_heads * c->head_dim * 2 > MAX_DIM || (long long)qhx_config_conv_dim(c) > MAX_DIM)
        return qhx_fail(QHX_ERR_FORMAT, "%s: attention dimensions too large", x->path);

    const cJSON *act = field(x, "hidden_act");
    if (act && !(cJSON_IsString(act) && !strcmp(act->valuestring, "silu")))
        return qhx_fail(QHX_ERR_UNSUPPORTED, "%s: hidden_act must be \"silu\"", x->path);
    const cJSON *bias = field(x, "attention_bias");
    if (bias && cJSON_IsTrue(bias)) return qhx_fail(QHX_ERR_UNSUPPORTED, "%s: attention_bias true is not supported", x->path);

    /* RoPE: newer configs nest it in rope_parameters, older ones keep flat keys. */
    const cJSON *rp = field(x, "rope_parameters");
    if (!rp) rp = field(x, "rope_scaling");
    const cJSON *rsrc = cJSON_IsObject(rp) && cJSON_GetObjectItemCaseSensitive(rp, "rope_theta") ? rp : x->tc;
    if ((rc = get_float(x, rsrc, "rope_theta", 1, 1e12, &c->rope_theta))) return rc;
    float prf = 1.0f;
    const cJSON *pr = cJSON_IsObject(rp) ? cJSON_GetObjectItemCaseSensitive(rp, "partial_rotary_factor") : NULL;
    if (!pr) pr = field(x, "partial_rotary_factor");
    if (pr) {
        if (!cJSON_IsNumber(pr) || !(pr->valuedouble > 0 && pr->valuedouble <= 1))
            return qhx_fail(QHX_ERR_FORMAT, "%s: partial_rotary_factor must be in (0, 1]", x->path);
        prf = (float)pr->valuedouble;
    }
    if (cJSON_IsObject(rp)) {
        const cJSON *rt = cJSON_GetObjectItemCaseSensitive(rp, "rope_type");
        if (!rt) rt = cJSON_GetObjectItemCaseSensitive(rp, "type");
        if (rt && !(cJSON_IsString(rt) && !strcmp(rt->valuestring, "default")))
            return qhx_fail(QHX_ERR_UNSUPPORTED, "%s: rope_type '%s' is not supported (only \"default\")", x->path,
                            cJSON_IsString(rt) ? rt->valuestring : "?");
    }
    /* HF: rotary_dim = int(head_dim * partial_rotary_factor) */
    c->rot_dim = (int)(c->head_dim * (double)prf);
    if (c->rot_dim % 2 || c->rot_dim < 2)
        return qhx_fail(QHX_ERR_FORMAT, "%s: rotary dimension %d (head_dim x partial_rotary_factor) must be even",
                        x->path, c->rot_dim);

    const cJSON *lt = field(x, "layer_types");
    if (lt) {
        if (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != c->n_layers)
            return qhx_fail(QHX_ERR_FORMAT, "%s: layer_types must list %d layers", x->path, c->n_layers);
        int i = 0;
        for (const cJSON *e = lt->child; e; e = e->next, i++) {
            if (cJSON_IsString(e) && !strcmp(e->valuestring, "full_attention")) c->full_attn[i] = 1;
            else if (cJSON_IsString(e) && !strcmp(e->valuestring, "linear_attention")) c->full_attn[i] = 0;
            else return qhx_fail(QHX_ERR_UNSUPPORTED, "%s: layer_types[%d] is not \"linear_attention\" or \"full_attention\"", x->path, i);
        }
    } else {
        int interval;
        if ((rc = get_int(x, "full_attention_interval", 1, QHX_MAX_LAYERS, &interval, 0, 4))) return rc;
        for (int i = 0; i < c->n_layers; i++) c->full_attn[i] = (i + 1) % interval == 0;
    }

    /* The composite model ties by its top-level flag; a flat config carries one flag. */
    const cJSON *tie = cJSON_GetObjectItemCaseSensitive(x->root, "tie_word_embeddings");
    if (!tie) tie = field(x, "tie_word_embeddings");
    c->tie_embeddings = tie && cJSON_IsTrue(tie);
    read_eos(c, field(x, "eos_token_id"));
    if (!c->n_eos) read_eos(c, cJSON_GetObjectItemCaseSensitive(x->root, "eos_token_id"));
    return QHX_OK;
}

qhx_status qhx_config_parse(qhx_config *c, const char *path, const char *json, size_t len) {
    memset(c, 0, sizeof *c);
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return qhx_fail(QHX_ERR_FORMAT, "%s: not a JSON object", path);
    }
    ctx x = {path, root, root};
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(root, "model_type");
    const char *type = cJSON_IsString(mt) ? mt->valuestring : NULL;
    qhx_status rc;
    if (!type) {
        rc = qhx_fail(QHX_ERR_FORMAT, "%s: missing field 'model_type'", path);
    } else if (!strcmp(type, "qwen3_5")) {
        const cJSON *tc = cJSON_GetObjectItemCaseSensitive(root, "text_config");
        if (!cJSON_IsObject(tc)) {
            rc = qhx_fail(QHX_ERR_FORMAT, "%s: model_type qwen3_5 needs a 'text_config' object", path);
        } else {
            const cJSON *tmt = cJSON_GetObjectItemCaseSensitive(tc, "model_type");
            if (tmt && !(cJSON_IsString(tmt) && !strcmp(tmt->valuestring, "qwen3_5_text")))
                rc = qhx_fail(QHX_ERR_UNSUPPORTED, "%s: text_config.model_type '%s' is not supported (expected qwen3_5_text)",
                              path, cJSON_IsString(tmt) ? tmt->valuestring : "?");
            else {
                x.tc = tc;
                rc = parse_text(c, &x);
            }
        }
    } else if (!strcmp(type, "qwen3_5_text")) {
        rc = parse_text(c, &x);
    } else {
        rc = qhx_fail(QHX_ERR_UNSUPPORTED, "%s: model_type '%.64s' is not supported (expected qwen3_5 or qwen3_5_text)",
                      path, type);
    }
    cJSON_Delete(root);
    return rc;
}

qhx_status qhx_config_load(qhx_config *c, const char *dir) {
    char path[4096];
    char *buf;
    size_t len;
    snprintf(path, sizeof path, "%s/config.json", dir);
    qhx_status rc = qhx_read_file(path, 16u << 20, &buf, &len);
    if (rc) return rc;
    rc = qhx_config_parse(c, path, buf, len);
    free(buf);
    if (rc) return rc;
    /* generation_config.json names the ids generation stops on; it is optional. */
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    if (qhx_read_file(path, 1u << 20, &buf, &len) == QHX_OK) {
        cJSON *g = cJSON_ParseWithLength(buf, len);
        if (g) read_eos(c, cJSON_GetObjectItemCaseSensitive(g, "eos_token_id"));
        cJSON_Delete(g);
        free(buf);
    }
    qhx_clear_error();
    return QHX_OK;
}

char *qhx_config_to_json(const qhx_config *c) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddStringToObject(o, "model_type", "qwen3_5_text");
    cJSON_AddNumberToObject(o, "vocab_size", c->vocab_size);
    cJSON_AddNumberToObject(o, "hidden_size", c->hidden);
    cJSON_AddNumberToObject(o, "num_hidden_layers", c->n_layers);
    cJSON_AddNumberToObject(o, "intermediate_size", c->ffn);
    cJSON_AddNumberToObject(o, "num_attention_heads", c->n_heads);
    cJSON_AddNumberToObject(o, "num_key_value_heads", c->n_kv_heads);
    cJSON_AddNumberToObject(o, "head_dim", c->head_dim);
    cJSON_AddNumberToObject(o, "linear_num_key_heads", c->lin_k_heads);
    cJSON_AddNumberToObject(o, "linear_num_value_heads", c->lin_v_heads);
    cJSON_AddNumberToObject(o, "linear_key_head_dim", c->lin_k_dim);
    cJSON_AddNumberToObject(o, "linear_value_head_dim", c->lin_v_dim);
    cJSON_AddNumberToObject(o, "linear_conv_kernel_dim", c->conv_kernel);
    cJSON_AddNumberToObject(o, "max_position_embeddings", c->max_pos);
    cJSON_AddNumberToObject(o, "rms_norm_eps", c->eps);
    cJSON_AddStringToObject(o, "hidden_act", "silu");
    cJSON *rp = cJSON_AddObjectToObject(o, "rope_parameters");
    cJSON_AddStringToObject(rp, "rope_type", "default");
    cJSON_AddNumberToObject(rp, "rope_theta", c->rope_theta);
    cJSON_AddNumberToObject(rp, "partial_rotary_factor", (double)c->rot_dim / c->head_dim);
    cJSON *lt = cJSON_AddArrayToObject(o, "layer_types");
    for (int i = 0; i < c->n_layers; i++)
        cJSON_AddItemToArray(lt, cJSON_CreateString(c->full_attn[i] ? "full_attention" : "linear_attention"));
    cJSON_AddBoolToObject(o, "tie_word_embeddings", c->tie_embeddings);
    cJSON *eos = cJSON_AddArrayToObject(o, "eos_token_id");
    for (int i = 0; i < c->n_eos; i++) cJSON_AddItemToArray(eos, cJSON_CreateNumber(c->eos[i]));
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}
