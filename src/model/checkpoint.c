/* A Hugging Face checkpoint directory as a model's weight source: config.json plus one or more
 * safetensors files, mapped and bound to the decoder's weight table with every shape and dtype
 * checked. A one-shard plan over its own (BF16) weights. */
#include "model/model.h"
#include "util/error.h"
#include "util/mapfile.h"

#include "util/json.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_SHARDS 4096

typedef struct {
    qhx_weight_source src;
    const char *dir;
    qhx_safetensors *files;
    int n_files;
    int n_experts;
} qhx_checkpoint;

static int file_exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

static qhx_status open_file(qhx_checkpoint *ck, const char *dir, const char *name) {
    for (int i = 0; i < ck->n_files; i++) {
        const char *base = strrchr(ck->files[i].map.path, '/');
        if (base && !strcmp(base + 1, name)) return QHX_OK; /* already open */
    }
    if (!*name || strchr(name, '/') || !strcmp(name, "..") || !strcmp(name, "."))
        return qhx_fail(QHX_ERR_FORMAT, "%s/model.safetensors.index.json: shard name '%.200s' is not a plain file name", dir, name);
    if (ck->n_files >= MAX_SHARDS)
        return qhx_fail(QHX_ERR_RANGE, "%s/model.safetensors.index.json: more than %d shards", dir, MAX_SHARDS);
    char *path = qhx_path_join(dir, name);
    if (!path) return qhx_fail(QHX_ERR_NOMEM, "out of memory");
    qhx_status rc = file_exists(path) ? qhx_st_open(&ck->files[ck->n_files], path)
                                      : qhx_fail(QHX_ERR_IO, "%s: shard listed in model.safetensors.index.json is missing", path);
    if (rc == QHX_OK) ck->n_files++;
    free(path);
    return rc;
}

static qhx_status open_index(qhx_checkpoint *ck, const char *dir, const char *index_path) {
    char *buf;
    size_t len;
    qhx_status rc = qhx_read_file(index_path, 64u << 20, &buf, &len);
    if (rc) return rc;
    json_t *root = qhx_json_parse(buf, len);
    free(buf);
    const json_t *map = root ? json_object_get(root, "weight_map") : NULL;
    if (!json_is_object(map)) {
        json_decref(root);
        return qhx_fail(QHX_ERR_FORMAT, "%s: no 'weight_map' object", index_path);
    }
    ck->files = calloc(MAX_SHARDS, sizeof *ck->files);
    if (!ck->files) { json_decref(root); return qhx_fail(QHX_ERR_NOMEM, "out of memory"); }
    const char *key;
    json_t *e;
    json_object_foreach((json_t *)map, key, e) {
        if (rc) break;
        if (!json_is_string(e)) rc = qhx_fail(QHX_ERR_FORMAT, "%s: weight_map entry '%s' is not a file name", index_path, key);
        else rc = open_file(ck, dir, json_string_value(e));
    }
    json_decref(root);
    return rc;
}

static const qhx_st_tensor *find(const qhx_checkpoint *ck, const char *name) {
    for (int i = 0; i < ck->n_files; i++) {
        const qhx_st_tensor *t = qhx_st_find(&ck->files[i], name);
        if (t) return t;
    }
    return NULL;
}

static const char *file_of(const qhx_checkpoint *ck, const qhx_st_tensor *t) {
    for (int i = 0; i < ck->n_files; i++)
        if (t >= ck->files[i].tensors && t < ck->files[i].tensors + ck->files[i].n_tensors) return ck->files[i].map.path;
    return "?";
}

/* A routed expert's matrix from the fused form of the released checkpoints: expert e's gate_proj
 * and up_proj are rows [0, I) and [I, 2I) of gate_up_proj[e] ([E][2I][hidden]), its down_proj is
 * down_proj[e] ([E][hidden][I]); no .weight suffix. Binds s->dst as that slice, or returns 0 when
 * s is no expert matrix or the checkpoint has no fused tensor for it. */
static int bind_fused(qhx_checkpoint *ck, const qhx_tensor_spec *s, qhx_status *rc) {
    const char *at = strstr(s->name, "mlp.experts.");
    char which[16], fused[192];
    int e, used = 0;
    if (!at || sscanf(at, "mlp.experts.%d.%15[a-z]_proj.weight%n", &e, which, &used) != 2 || at[used]) return 0;
    const int gate = !strcmp(which, "gate"), up = !strcmp(which, "up");
    snprintf(fused, sizeof fused, "%.*smlp.experts.%s", (int)(at - s->name), s->name, gate || up ? "gate_up_proj" : "down_proj");
    const qhx_st_tensor *t = find(ck, fused);
    if (!t) return 0;
    const int64_t rows = s->shape[0], cols = s->shape[1], want1 = gate || up ? 2 * rows : rows;
    if (t->dtype == QHX_DT_OTHER || t->ndim != 3 || t->shape[0] != ck->n_experts || t->shape[1] != want1 || t->shape[2] != cols) {
        *rc = qhx_fail(QHX_ERR_FORMAT, "%s: tensor '%s' must be [%d, %lld, %lld] of BF16, F16 or F32", file_of(ck, t), fused,
                       ck->n_experts, (long long)want1, (long long)cols);
        return 1;
    }
    const size_t first = ((size_t)e * want1 + (up ? rows : 0)) * cols;
    s->dst->dtype = t->dtype;
    s->dst->rows = (int)rows;
    s->dst->cols = (int)cols;
    s->dst->data = (const char *)t->data + first * qhx_dtype_size(t->dtype);
    *rc = QHX_OK;
    return 1;
}

static qhx_status bind(qhx_checkpoint *ck, const qhx_tensor_spec *s) {
    const qhx_st_tensor *t = find(ck, s->name);
    qhx_status rc;
    if (!t && bind_fused(ck, s, &rc)) return rc;
    if (!t) return qhx_fail(QHX_ERR_FORMAT, "%s: tensor '%s' is missing from the checkpoint", ck->dir, s->name);
    if (t->dtype == QHX_DT_OTHER)
        return qhx_fail(QHX_ERR_FORMAT, "%s: tensor '%s' has dtype %s (need BF16, F16 or F32)", file_of(ck, t), s->name, t->dtype_name);
    /* HF squeezes nothing: shapes must match exactly. */
    int ok = t->ndim == s->ndim;
    for (int i = 0; ok && i < s->ndim; i++) ok = t->shape[i] == s->shape[i];
    if (!ok) {
        char want[64] = "", got[128] = "";
        for (int i = 0; i < s->ndim; i++) snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", i ? ", " : "", (long long)s->shape[i]);
        for (int i = 0; i < t->ndim && i < 4; i++) snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", i ? ", " : "", (long long)t->shape[i]);
        return qhx_fail(QHX_ERR_FORMAT, "%s: tensor '%s' has shape [%s], config needs [%s]", file_of(ck, t), s->name, got, want);
    }
    s->dst->dtype = t->dtype;
    qhx_spec_dims(s, &s->dst->rows, &s->dst->cols);
    s->dst->data = t->data;
    return QHX_OK;
}

static const qhx_mapfile *file(const qhx_weight_source *src, int i) { return &((const qhx_checkpoint *)src)->files[i].map; }

static void close_checkpoint(qhx_weight_source *src) {
    qhx_checkpoint *ck = (qhx_checkpoint *)src;
    for (int i = 0; i < ck->n_files; i++) qhx_st_close(&ck->files[i]);
    free(ck->files);
    free(ck);
}

static qhx_status open_files(qhx_checkpoint *ck, const char *dir) {
    char *index = qhx_path_join(dir, "model.safetensors.index.json"), *single = qhx_path_join(dir, "model.safetensors");
    qhx_status rc = QHX_OK;
    if (!index || !single) {
        rc = qhx_fail(QHX_ERR_NOMEM, "out of memory");
    } else if (file_exists(index)) {
        rc = open_index(ck, dir, index);
    } else if (!file_exists(single)) {
        rc = qhx_fail(QHX_ERR_IO, "%s: no model.safetensors or model.safetensors.index.json", dir);
    } else if (!(ck->files = calloc(1, sizeof *ck->files))) {
        rc = qhx_fail(QHX_ERR_NOMEM, "out of memory");
    } else if (!(rc = qhx_st_open(&ck->files[0], single))) {
        ck->n_files = 1;
    }
    free(index);
    free(single);
    return rc;
}

qhx_status qhx_checkpoint_model_open(qhx_model *m, const char *dir) {
    qhx_checkpoint *ck = calloc(1, sizeof *ck);
    if (!ck || !(m->dir = strdup(dir)) || !(m->shards = calloc(1, sizeof *m->shards))) {
        free(ck);
        return qhx_fail(QHX_ERR_NOMEM, "out of memory");
    }
    ck->src = (qhx_weight_source){.kind = "checkpoint", .file = file, .close = close_checkpoint};
    ck->dir = m->dir;
    m->src = &ck->src;
    qhx_status rc = qhx_config_load(&m->cfg, dir);
    if (rc || (rc = open_files(ck, dir))) return rc;
    ck->src.n_files = ck->n_files;

    /* Qwen3_5ForConditionalGeneration nests the decoder under model.language_model.; the text-only
     * Qwen3_5ForCausalLM under model. (model.visual.* is never looked up). A config may promise
     * an MTP head the files do not carry (conversions often drop mtp.*): the trunk loads alone. */
    const char *prefix = find(ck, "model.language_model.embed_tokens.weight") ? "model.language_model." : "model.";
    if (m->cfg.mtp_layers && !find(ck, "mtp.fc.weight")) m->cfg.mtp_layers = 0;
    if (!m->cfg.tie_embeddings && !find(ck, "lm_head.weight"))
        return qhx_fail(QHX_ERR_FORMAT, "%s: tie_word_embeddings is false but lm_head.weight is missing", dir);
    ck->n_experts = m->cfg.n_experts;
    m->w = qhx_weights_new(&m->cfg);
    int n = qhx_qwen35_specs(&m->cfg, prefix, m->w, NULL);
    qhx_tensor_spec *specs = calloc((size_t)n, sizeof *specs);
    if (!m->w || !specs) {
        free(specs);
        return qhx_fail(QHX_ERR_NOMEM, "out of memory");
    }
    qhx_qwen35_specs(&m->cfg, prefix, m->w, specs);
    for (int i = 0; i < n && rc == QHX_OK; i++) rc = bind(ck, &specs[i]);
    free(specs);
    if (rc) return rc;
    if (m->cfg.tie_embeddings) m->w->lm_head = m->w->embed;
    m->n_shards = 1;
    m->shards[0].l0 = 0;
    m->shards[0].l1 = m->cfg.n_layers;
    m->context = m->cfg.max_pos;
    for (int i = 0; i < ck->n_files; i++) m->weight_bytes += ck->files[i].map.size;
    return QHX_OK;
}
