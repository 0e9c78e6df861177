#include "model/checkpoint.h"
#include "util/error.h"
#include "util/mapfile.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_SHARDS 4096

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
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (!file_exists(path)) return qhx_fail(QHX_ERR_IO, "%s: shard listed in model.safetensors.index.json is missing", path);
    qhx_status rc = qhx_st_open(&ck->files[ck->n_files], path);
    if (rc == QHX_OK) ck->n_files++;
    return rc;
}

static qhx_status open_index(qhx_checkpoint *ck, const char *dir, const char *index_path) {
    char *buf;
    size_t len;
    qhx_status rc = qhx_read_file(index_path, 64u << 20, &buf, &len);
    if (rc) return rc;
    cJSON *root = cJSON_ParseWithLength(buf, len);
    free(buf);
    const cJSON *map = root ? cJSON_GetObjectItemCaseSensitive(root, "weight_map") : NULL;
    if (!cJSON_IsObject(map)) {
        cJSON_Delete(root);
        return qhx_fail(QHX_ERR_FORMAT, "%s: no 'weight_map' object", index_path);
    }
    ck->files = calloc(MAX_SHARDS, sizeof *ck->files);
    if (!ck->files) { cJSON_Delete(root); return qhx_fail(QHX_ERR_NOMEM, "out of memory"); }
    for (const cJSON *e = map->child; e && rc == QHX_OK; e = e->next) {
        if (!cJSON_IsString(e)) rc = qhx_fail(QHX_ERR_FORMAT, "%s: weight_map entry '%s' is not a file name", index_path, e->string);
        else rc = open_file(ck, dir, e->valuestring);
    }
    cJSON_Delete(root);
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

static qhx_status bind(qhx_checkpoint *ck, const qhx_tensor_spec *s) {
    const qhx_st_tensor *t = find(ck, s->name);
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

qhx_status qhx_checkpoint_open(qhx_checkpoint *ck, const char *dir) {
    memset(ck, 0, sizeof *ck);
    snprintf(ck->dir, sizeof ck->dir, "%s", dir);
    qhx_status rc = qhx_config_load(&ck->cfg, dir);
    if (rc) return rc;
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    if (file_exists(path)) {
        rc = open_index(ck, dir, path);
    } else {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        if (!file_exists(path)) return qhx_fail(QHX_ERR_IO, "%s: no model.safetensors or model.safetensors.index.json", dir);
        ck->files = calloc(1, sizeof *ck->files);
        if (!ck->files) return qhx_fail(QHX_ERR_NOMEM, "out of memory");
        rc = qhx_st_open(&ck->files[0], path);
        if (rc == QHX_OK) ck->n_files = 1;
    }
    if (rc) { qhx_checkpoint_close(ck); return rc; }

    /* Qwen3_5ForConditionalGeneration nests the decoder under model.language_model.; the text-only
     * Qwen3_5ForCausalLM under model. (model.visual.* and mtp.* are simply never looked up). */
    const char *prefix = find(ck, "model.language_model.embed_tokens.weight") ? "model.language_model." : "model.";
    if (!ck->cfg.tie_embeddings && !find(ck, "lm_head.weight"))
        return qhx_checkpoint_close(ck), qhx_fail(QHX_ERR_FORMAT, "%s: tie_word_embeddings is false but lm_head.weight is missing", dir);
    ck->w = calloc(1, sizeof *ck->w);
    int n = qhx_qwen35_specs(&ck->cfg, prefix, ck->w, NULL);
    qhx_tensor_spec *specs = calloc((size_t)n, sizeof *specs);
    if (!ck->w || !specs) { free(specs); qhx_checkpoint_close(ck); return qhx_fail(QHX_ERR_NOMEM, "out of memory"); }
    qhx_qwen35_specs(&ck->cfg, prefix, ck->w, specs);
    for (int i = 0; i < n && rc == QHX_OK; i++) rc = bind(ck, &specs[i]);
    free(specs);
    if (rc) qhx_checkpoint_close(ck);
    return rc;
}

void qhx_checkpoint_close(qhx_checkpoint *ck) {
    for (int i = 0; i < ck->n_files; i++) qhx_st_close(&ck->files[i]);
    free(ck->files);
    free(ck->w);
    memset(ck, 0, sizeof *ck);
}
