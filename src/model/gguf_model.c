/* A GGUF of llama.cpp's qwen35 (or qwen35moe) architecture as a model's weight source. The configuration comes
 * from the qwen35.* keys, the tokenizer from tokenizer.ggml.*, and every tensor is bound under
 * its Hugging Face name with what llama.cpp's converter (conversion/qwen.py, Qwen3_5TextModel)
 * changed undone:
 *   - the zero-centred RMSNorms were stored as 1 + w (all but the gated norm inside the linear
 *     layers): w = stored - 1;
 *   - A_log was stored as -exp(A_log): A_log = log(-stored);
 *   - where key and value head counts differ, the value heads of the linear layers (the V rows of
 *     in_proj_qkv and conv1d, the rows of in_proj_z/a/b, dt_bias, A_log, the columns of out_proj)
 *     were reordered from grouped by key head to tiled: they are put back;
 *   - the MTP head was stored as extra layers (qwen35.nextn_predict_layers) named nextn.*;
 *   - qwen35moe: the routed experts of a layer as one 3-D tensor per matrix (ffn_gate_exps,
 *     ffn_up_exps, ffn_down_exps: [expert][row][col]), of which each expert is a slice.
 * F32/F16/BF16 tensors nothing changed are views into the mapped file; the rest are decoded to
 * fp32 (exactly, format/ggml_quant.c) into memory this source owns, or, where that would not fit
 * in memory (a 35B Q4_K file is 140 GB in fp32) or the forge asks, a row at a time as the forge
 * reads them (src->row): such a model can be forged into a bundle, not run. */
#include "format/ggml_quant.h"
#include "format/gguf.h"
#include "model/model.h"
#include "model/ops.h"
#include "tokenizer/tokenizer_lists.h"
#include "util/error.h"
#include "util/json.h"
#include "util/mapfile.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* a tensor decoded a row at a time: its GGUF tensor (a routed expert's slice) and the change */
typedef struct {
    const qhx_tensor *dst;
    qhx_gguf_tensor t;
    qhx_gguf_change undo;
} row_tensor;

typedef struct {
    qhx_weight_source src;
    qhx_gguf g;
    const qhx_config *cfg;
    float **owned;   /* decoded tensors */
    int n_owned;
    row_tensor *rows; /* sorted by dst */
    int n_rows;
} gguf_source;


static const qhx_mapfile *file(const qhx_weight_source *src, int i) { return &((const gguf_source *)src)->g.map; }

static void close_source(qhx_weight_source *src) {
    gguf_source *s = (gguf_source *)src;
    for (int i = 0; i < s->n_owned; i++) free(s->owned[i]);
    free(s->owned);
    free(s->rows);
    qhx_gguf_close(&s->g);
    free(s);
}

/* ---- configuration ------------------------------------------------------------------------ */

qhx_status qhx_gguf_read_config(qhx_config *c, const qhx_gguf *g) {
    const char *arch;
    size_t alen;
    qhx_status rc = qhx_gguf_string(g, "general.architecture", 0, &arch, &alen);
    if (rc) return rc;
    const int moe = alen == 9 && !memcmp(arch, "qwen35moe", 9);
    if (!moe && (alen != 6 || memcmp(arch, "qwen35", 6)))
        return qhx_fail(QHX_ERR_UNSUPPORTED, "%s: architecture '%.*s' is not qwen35 or qwen35moe (Qwen3.5)", g->path,
                        (int)(alen < 40 ? alen : 40), arch);
    /* the keys are the architecture's name, then these */
    static const struct {
        const char *gguf, *hf;
        int optional;  /* 1: optional; 2: required in qwen35, not read in qwen35moe; 3: qwen35moe's own */
    } ints[] = {
        {"block_count", NULL, 0}, {"nextn_predict_layers", NULL, 1},
        {"embedding_length", "hidden_size", 0}, {"feed_forward_length", "intermediate_size", 2},
        {"attention.head_count", "num_attention_heads", 0}, {"attention.head_count_kv", "num_key_value_heads", 0},
        {"attention.key_length", "head_dim", 0}, {"context_length", "max_position_embeddings", 0},
        {"ssm.conv_kernel", "linear_conv_kernel_dim", 0}, {"ssm.state_size", "linear_key_head_dim", 0},
        {"ssm.group_count", "linear_num_key_heads", 0}, {"ssm.time_step_rank", "linear_num_value_heads", 0},
        {"full_attention_interval", "full_attention_interval", 1},
        {"expert_count", "num_experts", 3}, {"expert_used_count", "num_experts_per_tok", 3},
        {"expert_feed_forward_length", "moe_intermediate_size", 3},
        {"expert_shared_feed_forward_length", "shared_expert_intermediate_size", 3},
    };
    json_t *tc = json_object();
    if (!tc) return qhx_fail(QHX_ERR_NOMEM, "out of memory");
    json_object_set_new(tc, "model_type", json_string(moe ? "qwen3_5_moe_text" : "qwen3_5_text"));
    int64_t v[sizeof ints / sizeof *ints] = {0};
    char key[96];
#define KEY(k) (snprintf(key, sizeof key, "%s.%s", moe ? "qwen35moe" : "qwen35", k), key)
    for (size_t i = 0; i < sizeof ints / sizeof *ints && !rc; i++) {
        v[i] = -1;
        if (ints[i].optional == (moe ? 2 : 3)) continue;
        rc = qhx_gguf_int(g, KEY(ints[i].gguf), ints[i].optional == 1, &v[i]);
        if (!rc && ints[i].hf && v[i] >= 0) json_object_set_new(tc, ints[i].hf, json_integer(v[i]));
    }
    int64_t vlen = 0, inner = 0, rot = 0;
    double theta = 0, eps = 0;
    if (!rc) rc = qhx_gguf_int(g, KEY("attention.value_length"), 0, &vlen);
    if (!rc) rc = qhx_gguf_int(g, KEY("ssm.inner_size"), 0, &inner);
    if (!rc) rc = qhx_gguf_int(g, KEY("rope.dimension_count"), 0, &rot);
    if (!rc) rc = qhx_gguf_float(g, KEY("rope.freq_base"), 0, &theta);
    if (!rc) rc = qhx_gguf_float(g, KEY("attention.layer_norm_rms_epsilon"), 0, &eps);
#undef KEY
    const int64_t blocks = v[0], nextn = v[1] < 0 ? 0 : v[1], head_dim = v[6], v_heads = v[11];
    if (!rc && vlen != head_dim)
        rc = qhx_fail(QHX_ERR_FORMAT, "%s: attention value_length %lld differs from key_length %lld", g->path, (long long)vlen, (long long)head_dim);
    if (!rc && (nextn < 0 || nextn > 1 || blocks - nextn < 1))
        rc = qhx_fail(QHX_ERR_FORMAT, "%s: block_count %lld with nextn_predict_layers %lld (0 or 1)", g->path, (long long)blocks, (long long)nextn);
    if (!rc && (v_heads < 1 || inner < 1 || inner % v_heads || head_dim < 1 || rot < 1 || rot > head_dim))
        rc = qhx_fail(QHX_ERR_FORMAT, "%s: ssm.inner_size, time_step_rank or rope.dimension_count out of range", g->path);
    const qhx_gguf_tensor *embd = qhx_gguf_tensor_find(g, "token_embd.weight");
    if (!rc && !embd) rc = qhx_fail(QHX_ERR_FORMAT, "%s: tensor 'token_embd.weight' is missing", g->path);
    if (!rc) {
        json_object_set_new(tc, "num_hidden_layers", json_integer(blocks - nextn));
        json_object_set_new(tc, "mtp_num_hidden_layers", json_integer(nextn));
        json_object_set_new(tc, "linear_value_head_dim", json_integer(inner / v_heads));
        json_object_set_new(tc, "vocab_size", json_integer(embd->ne[1]));
        json_object_set_new(tc, "rms_norm_eps", json_real(eps));
        json_object_set_new(tc, "rope_parameters", json_pack("{s:s, s:f, s:f}", "rope_type", "default", "rope_theta", theta,
                                                               "partial_rotary_factor", (double)rot / (double)head_dim));
        json_object_set_new(tc, "tie_word_embeddings", json_boolean(!qhx_gguf_tensor_find(g, "output.weight")));
        json_t *eos = json_array();
        const char *const ends[] = {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"};
        for (int i = 0; i < 2; i++) {
            int64_t id = -1;
            if (!qhx_gguf_int(g, ends[i], 1, &id) && id >= 0) json_array_append_new(eos, json_integer(id));
        }
        json_object_set_new(tc, "eos_token_id", eos);
        qhx_clear_error();
        char *text = json_dumps(tc, 0);
        rc = text ? qhx_config_parse(c, g->path, text, strlen(text)) : qhx_fail(QHX_ERR_NOMEM, "out of memory");
        free(text);
    }
    json_decref(tc);
    return rc;
}

/* ---- tensors ------------------------------------------------------------------------------ */

int qhx_gguf_tensor_name(const qhx_config *c, const char *hf, char *out, size_t cap, qhx_gguf_change *undo, int *expert) {
    static const struct {
        const char *hf, *gguf;
        qhx_gguf_change undo;
    } layer[] = {
        {"input_layernorm.weight", "attn_norm.weight", QHX_GGUF_NORM},
        {"post_attention_layernorm.weight", "post_attention_norm.weight", QHX_GGUF_NORM},
        {"mlp.gate_proj.weight", "ffn_gate.weight", QHX_GGUF_AS_IS}, {"mlp.up_proj.weight", "ffn_up.weight", QHX_GGUF_AS_IS},
        {"mlp.down_proj.weight", "ffn_down.weight", QHX_GGUF_AS_IS},
        {"self_attn.q_proj.weight", "attn_q.weight", QHX_GGUF_AS_IS}, {"self_attn.k_proj.weight", "attn_k.weight", QHX_GGUF_AS_IS},
        {"self_attn.v_proj.weight", "attn_v.weight", QHX_GGUF_AS_IS}, {"self_attn.o_proj.weight", "attn_output.weight", QHX_GGUF_AS_IS},
        {"self_attn.q_norm.weight", "attn_q_norm.weight", QHX_GGUF_NORM}, {"self_attn.k_norm.weight", "attn_k_norm.weight", QHX_GGUF_NORM},
        {"linear_attn.in_proj_qkv.weight", "attn_qkv.weight", QHX_GGUF_V_ROWS_AFTER_QK},
        {"linear_attn.in_proj_z.weight", "attn_gate.weight", QHX_GGUF_V_ROWS}, {"linear_attn.in_proj_b.weight", "ssm_beta.weight", QHX_GGUF_V_ROWS},
        {"linear_attn.in_proj_a.weight", "ssm_alpha.weight", QHX_GGUF_V_ROWS},
        {"linear_attn.conv1d.weight", "ssm_conv1d.weight", QHX_GGUF_V_ROWS_AFTER_QK},
        {"linear_attn.dt_bias", "ssm_dt.bias", QHX_GGUF_V_ROWS}, {"linear_attn.A_log", "ssm_a", QHX_GGUF_A_LOG},
        {"linear_attn.norm.weight", "ssm_norm.weight", QHX_GGUF_AS_IS}, {"linear_attn.out_proj.weight", "ssm_out.weight", QHX_GGUF_V_COLS},
        {"mlp.gate.weight", "ffn_gate_inp.weight", QHX_GGUF_AS_IS},
        {"mlp.shared_expert.gate_proj.weight", "ffn_gate_shexp.weight", QHX_GGUF_AS_IS},
        {"mlp.shared_expert.up_proj.weight", "ffn_up_shexp.weight", QHX_GGUF_AS_IS},
        {"mlp.shared_expert.down_proj.weight", "ffn_down_shexp.weight", QHX_GGUF_AS_IS},
        {"mlp.shared_expert_gate.weight", "ffn_gate_inp_shexp.weight", QHX_GGUF_AS_IS},
    };
    static const struct {
        const char *hf, *gguf;
        qhx_gguf_change undo;
    } top[] = {
        {"embed_tokens.weight", "token_embd.weight", QHX_GGUF_AS_IS}, {"norm.weight", "output_norm.weight", QHX_GGUF_NORM},
        {"lm_head.weight", "output.weight", QHX_GGUF_AS_IS}, {"mtp.fc.weight", "nextn.eh_proj.weight", QHX_GGUF_AS_IS},
        {"mtp.pre_fc_norm_embedding.weight", "nextn.enorm.weight", QHX_GGUF_NORM},
        {"mtp.pre_fc_norm_hidden.weight", "nextn.hnorm.weight", QHX_GGUF_NORM}, {"mtp.norm.weight", "nextn.shared_head_norm.weight", QHX_GGUF_NORM},
    };
    int l, n = 0, e, used = 0;
    const char *rest = NULL;
    char which[8];
    *expert = -1;
    if (sscanf(hf, "layers.%d.%n", &l, &n) == 1 && n) rest = hf + n;
    else if (!strncmp(hf, "mtp.layers.0.", 13)) rest = hf + 13, l = c->n_layers;
    if (rest && sscanf(rest, "mlp.experts.%d.%5[a-z]_proj.weight%n", &e, which, &used) == 2 && !rest[used]) {
        *undo = QHX_GGUF_AS_IS;
        *expert = e;
        return snprintf(out, cap, "blk.%d.ffn_%s_exps.weight", l, which) < (int)cap;
    }
    for (size_t i = 0; rest && i < sizeof layer / sizeof *layer; i++)
        if (!strcmp(rest, layer[i].hf)) {
            *undo = layer[i].undo;
            return snprintf(out, cap, "blk.%d.%s", l, layer[i].gguf) < (int)cap;
        }
    for (size_t i = 0; !rest && i < sizeof top / sizeof *top; i++)
        if (!strcmp(hf, top[i].hf)) {
            *undo = top[i].undo;
            return strncmp(hf, "mtp.", 4) ? snprintf(out, cap, "%s", top[i].gguf) < (int)cap
                                           : snprintf(out, cap, "blk.%d.%s", c->n_layers, top[i].gguf) < (int)cap;
        }
    return 0;
}

/* bytes of one row of cols values of a ggml type (whole blocks) */
static size_t row_bytes(uint32_t type, int cols) { return (size_t)cols / qhx_ggml_block_values(type) * qhx_ggml_block_bytes(type); }

/* Where the Hugging Face (grouped) value-head index i lies in the converter's tiled order: head
 * (k, j) of key group k is stored at j * n_k + k. `head` is the size of one head's block. */
static int64_t tiled(const qhx_config *c, int64_t i, int64_t head) {
    const int64_t r = c->lin_v_heads / c->lin_k_heads, h = i / head, e = i % head;
    return ((h % r) * c->lin_k_heads + h / r) * head + e;
}

/* the head size along a row whose value heads were reordered along it (0: none) */
static int64_t column_head(const qhx_config *c, qhx_gguf_change undo, int rows) {
    if (c->lin_v_heads == c->lin_k_heads) return 0;
    if (undo == QHX_GGUF_V_COLS) return c->lin_v_dim;
    return rows == 1 && (undo == QHX_GGUF_V_ROWS || undo == QHX_GGUF_A_LOG) ? 1 : 0;
}

/* Row r of t decoded to fp32 in Hugging Face order: value heads put back along the rows
 * (in_proj_z/a/b, the V rows of qkv and conv1d) or along the row (out_proj's columns; dt_bias and
 * A_log, which are one row: through tmp, cols floats), then the norms' 1 and A_log's -exp undone. */
static void decode_row(const qhx_config *c, const qhx_gguf_tensor *t, qhx_gguf_change undo, int rows, int cols, int64_t r, float *y,
                       float *tmp) {
    const int reorder = c->lin_v_heads != c->lin_k_heads;
    const int64_t qk = 2 * (int64_t)c->lin_k_heads * c->lin_k_dim; /* rows before V in qkv and conv */
    const int64_t row_head = undo == QHX_GGUF_V_ROWS && rows == c->lin_v_heads ? 1 : c->lin_v_dim;
    const int64_t col_head = column_head(c, undo, rows);
    int64_t src = r;
    if (reorder && undo == QHX_GGUF_V_ROWS && rows > 1) src = tiled(c, r, row_head);
    if (reorder && undo == QHX_GGUF_V_ROWS_AFTER_QK && r >= qk) src = qk + tiled(c, r - qk, c->lin_v_dim);
    qhx_ggml_dequant(t->type, t->data + (size_t)src * row_bytes(t->type, cols), col_head ? tmp : y, cols);
    for (int64_t j = 0; col_head && j < cols; j++) y[j] = tmp[tiled(c, j, col_head)];
    for (int64_t j = 0; j < cols; j++) {
        if (undo == QHX_GGUF_NORM) y[j] -= 1.0f;
        if (undo == QHX_GGUF_A_LOG) y[j] = (float)log(-(double)y[j]);
    }
}

static int by_dst(const void *a, const void *b) {
    const uintptr_t x = (uintptr_t)((const row_tensor *)a)->dst, y = (uintptr_t)((const row_tensor *)b)->dst;
    return x < y ? -1 : x > y;
}

enum { ROW_TMP = 16384 }; /* a value-head reordered row decoded a row at a time has at most these columns */

/* The tensor's source row, for the forge: decoded, or read from the mapped view. */
static void source_row(const qhx_weight_source *src, const qhx_tensor_spec *sp, int r, float *out) {
    const gguf_source *s = (const gguf_source *)src;
    const qhx_tensor *t = sp->dst;
    const row_tensor key = {.dst = t}, *rt = bsearch(&key, s->rows, (size_t)s->n_rows, sizeof key, by_dst);
    if (!rt) {
        for (int c = 0; c < t->cols; c++) out[c] = qhx_tensor_get(t, (size_t)r * t->cols + c);
        return;
    }
    float tmp[ROW_TMP];
    decode_row(s->cfg, &rt->t, rt->undo, t->rows, t->cols, r, out, tmp);
}

/* How bind treats a tensor that must be decoded: count its fp32 bytes only, decode it whole, or
 * leave it to be decoded a row at a time (source_row) */
typedef enum { BIND_COUNT, BIND_WHOLE, BIND_ROWS } bind_mode;

static qhx_status bind(qhx_model *m, gguf_source *s, const qhx_tensor_spec *sp, bind_mode mode, uint64_t *decoded) {
    const qhx_config *c = &m->cfg;
    const char *path = s->g.path;
    char name[200];
    qhx_gguf_change undo;
    int expert;
    if (!qhx_gguf_tensor_name(c, sp->name, name, sizeof name, &undo, &expert))
        return qhx_fail(QHX_ERR_FORMAT, "%s: no GGUF name for tensor '%s'", path, sp->name);
    const qhx_gguf_tensor *t = qhx_gguf_tensor_find(&s->g, name);
    if (!t) return qhx_fail(QHX_ERR_FORMAT, "%s: tensor '%s' is missing", path, name);
    int rows, cols;
    qhx_spec_dims(sp, &rows, &cols);
    const int64_t experts = expert >= 0 ? c->n_experts : 1;
    if (t->ne[0] != cols || t->ne[1] != rows || t->ne[2] != experts || t->ne[3] != 1)
        return qhx_fail(QHX_ERR_FORMAT, "%s: tensor '%s' has shape [%lld, %lld, %lld, %lld], the configuration needs [%d, %d, %lld]", path,
                        name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3], cols, rows,
                        (long long)experts);
    qhx_gguf_tensor slice = *t; /* an expert: its [rows][cols] of the 3-D tensor */
    if (expert >= 0) {
        slice.data += (size_t)expert * (size_t)rows * row_bytes(t->type, cols);
        slice.ne[2] = 1;
        t = &slice;
    }
    const int plain = t->type == QHX_GGML_F32 || t->type == QHX_GGML_F16 || t->type == QHX_GGML_BF16;
    const int changed = undo == QHX_GGUF_NORM || undo == QHX_GGUF_A_LOG || (undo != QHX_GGUF_AS_IS && c->lin_v_heads != c->lin_k_heads);
    const uint64_t bytes = plain && !changed ? 0 : sizeof(float) * (uint64_t)rows * (uint64_t)cols;
    *decoded += bytes;
    if (mode == BIND_COUNT) return QHX_OK;
    qhx_tensor *dst = sp->dst;
    dst->rows = rows;
    dst->cols = cols;
    if (!bytes) {
        dst->dtype = t->type == QHX_GGML_F32 ? QHX_F32 : t->type == QHX_GGML_F16 ? QHX_F16 : QHX_BF16;
        dst->data = t->data;
        return QHX_OK;
    }
    dst->dtype = QHX_F32;
    if (mode == BIND_ROWS && (!column_head(c, undo, rows) || cols <= ROW_TMP)) {
        row_tensor *grown = realloc(s->rows, sizeof *s->rows * (size_t)(s->n_rows + 1));
        if (!grown) return qhx_fail(QHX_ERR_NOMEM, "out of memory");
        s->rows = grown;
        s->rows[s->n_rows++] = (row_tensor){dst, *t, undo};
        dst->data = NULL;
        return QHX_OK;
    }
    float *y = malloc(sizeof(float) * (size_t)rows * (size_t)cols), *tmp = malloc(sizeof(float) * (size_t)cols);
    float **grown = y && tmp ? realloc(s->owned, sizeof *s->owned * (size_t)(s->n_owned + 1)) : NULL;
    if (!grown) {
        free(y), free(tmp);
        return qhx_fail(QHX_ERR_NOMEM, "%s: out of memory decoding '%s'", path, name);
    }
    s->owned = grown;
    s->owned[s->n_owned++] = y;
    for (int64_t r = 0; r < rows; r++) decode_row(c, t, undo, rows, cols, r, y + r * (int64_t)cols, tmp);
    free(tmp);
    dst->data = y;
    m->weight_bytes += bytes;
    return QHX_OK;
}

/* ---- tokenizer ---------------------------------------------------------------------------- */

qhx_status qhx_gguf_read_tokenizer(const qhx_gguf *g, qhx_tokenizer **out) {
    const qhx_gguf_kv *tokens, *types, *merges;
    const char *model, *pre;
    size_t model_len, pre_len;
    qhx_status rc = qhx_gguf_string(g, "tokenizer.ggml.model", 0, &model, &model_len);
    if (!rc && (model_len != 4 || memcmp(model, "gpt2", 4)))
        return qhx_fail(QHX_ERR_UNSUPPORTED, "%s: tokenizer.ggml.model '%.*s' is not gpt2 (byte-level BPE)", g->path, (int)(model_len < 40 ? model_len : 40), model);
    if (!rc) rc = qhx_gguf_string(g, "tokenizer.ggml.pre", 0, &pre, &pre_len);
    if (!rc) rc = qhx_gguf_array(g, "tokenizer.ggml.tokens", 0, QHX_GGUF_STRING, &tokens);
    if (!rc) rc = qhx_gguf_array(g, "tokenizer.ggml.token_type", 0, QHX_GGUF_I32, &types);
    if (!rc) rc = qhx_gguf_array(g, "tokenizer.ggml.merges", 0, QHX_GGUF_STRING, &merges);
    if (rc) return rc;
    if (types->arr_n != tokens->arr_n || tokens->arr_n > (1u << 24) || merges->arr_n > (1u << 24))
        return qhx_fail(QHX_ERR_FORMAT, "%s: %llu tokens with %llu token types", g->path, (unsigned long long)tokens->arr_n,
                        (unsigned long long)types->arr_n);
    const int nt = (int)tokens->arr_n, nm = (int)merges->arr_n;
    const char **tok = malloc(sizeof *tok * ((size_t)nt + 1)), **mer = malloc(sizeof *mer * ((size_t)nm + 1));
    size_t *tlen = malloc(sizeof *tlen * ((size_t)nt + 1)), *mlen = malloc(sizeof *mlen * ((size_t)nm + 1));
    int32_t *ty = malloc(sizeof *ty * ((size_t)nt + 1));
    char *pre_z = malloc(pre_len + 1);
    if (!tok || !mer || !tlen || !mlen || !ty || !pre_z) {
        rc = qhx_fail(QHX_ERR_NOMEM, "out of memory");
    } else {
        const unsigned char *cur = tokens->val;
        for (int i = 0; i < nt; i++) tok[i] = qhx_gguf_next_string(&cur, &tlen[i]);
        cur = merges->val;
        for (int i = 0; i < nm; i++) mer[i] = qhx_gguf_next_string(&cur, &mlen[i]);
        memcpy(ty, types->val, sizeof *ty * (size_t)nt);
        memcpy(pre_z, pre, pre_len);
        pre_z[pre_len] = 0;
        const qhx_vocab_lists v = {nt, tok, tlen, ty, nm, mer, mlen, pre_z};
        rc = qhx_tokenizer_from_lists(&v, g->path, out);
    }
    free(tok), free(mer), free(tlen), free(mlen), free(ty), free(pre_z);
    return rc;
}

/* ---- opening ------------------------------------------------------------------------------ */

/* The identity state files name it by: the header (metadata and tensor directory) and a sample
 * of the data; hashing a multi-GB file at every open would cost more than a state saves. */
static uint64_t identity(const gguf_source *s) {
    const qhx_mapfile *f = &s->g.map;
    size_t header = f->size;
    for (size_t i = 0; i < s->g.n_tensors; i++) {
        const size_t at = (size_t)(s->g.tensors[i].data - f->data);
        if (at < header) header = at;
    }
    XXH3_state_t *st = XXH3_createState();
    if (!st) return 0;
    XXH3_64bits_reset(st);
    XXH3_64bits_update(st, f->data, header);
    for (int k = 1; k <= 64 && f->size > 4096; k++) XXH3_64bits_update(st, f->data + (f->size - 4096) / 64 * k, 4096);
    const uint64_t id = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return id;
}

qhx_status qhx_gguf_model_open(qhx_model *m, const char *path, int by_rows) {
    gguf_source *s = calloc(1, sizeof *s);
    if (!s || !(m->dir = strdup(path)) || !(m->shards = calloc(1, sizeof *m->shards))) {
        free(s);
        return qhx_fail(QHX_ERR_NOMEM, "out of memory");
    }
    s->src = (qhx_weight_source){.n_files = 1, .kind = "gguf", .file = file, .close = close_source, .row = NULL};
    s->cfg = &m->cfg;
    qhx_status rc = qhx_gguf_open(&s->g, path);
    if (rc) {
        free(s);
        return rc;
    }
    m->src = &s->src;
    if ((rc = qhx_gguf_read_config(&m->cfg, &s->g))) return rc;
    m->w = qhx_weights_new(&m->cfg);
    int n = qhx_qwen35_specs(&m->cfg, "", m->w, NULL);
    qhx_tensor_spec *specs = calloc((size_t)n, sizeof *specs);
    if (!m->w || !specs) {
        free(specs);
        return qhx_fail(QHX_ERR_NOMEM, "out of memory");
    }
    qhx_qwen35_specs(&m->cfg, "", m->w, specs);
    /* decoded whole where that fits with a GiB to spare (as bundles are read in), else a row at a time */
    uint64_t decoded = 0;
    for (int i = 0; i < n && !rc; i++) rc = bind(m, s, &specs[i], BIND_COUNT, &decoded);
    const uint64_t avail = qhx_memory_available();
    if (!by_rows && avail && decoded + (1ull << 30) > avail) by_rows = 1;
    uint64_t again = 0;
    for (int i = 0; i < n && !rc; i++) rc = bind(m, s, &specs[i], by_rows ? BIND_ROWS : BIND_WHOLE, &again);
    free(specs);
    if (!rc && s->n_rows) {
        qsort(s->rows, (size_t)s->n_rows, sizeof *s->rows, by_dst);
        s->src.row = source_row;
        m->rows_bytes = decoded;
    }
    if (rc || (rc = qhx_gguf_read_tokenizer(&s->g, &m->tok))) return rc;
    if (m->cfg.tie_embeddings) m->w->lm_head = m->w->embed;
    m->n_shards = 1;
    m->shards[0].l0 = 0;
    m->shards[0].l1 = m->cfg.n_layers;
    m->context = m->cfg.max_pos;
    m->weight_bytes += s->g.map.size;
    s->src.identity = identity(s);
    return QHX_OK;
}
