/* Opening a bundle: the manifest (the declarative run plan) and the files it names, every one
 * checked (checksum, magic, version, kind, target, layout, bundle id, model hash, tensor shapes)
 * before any compute can start. */
#include "util/buf.h"
#include "model/model.h"
#include "util/error.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

typedef struct {
    const char *path;   /* the manifest, for messages */
    cJSON *root;
} manifest;

/* The bundle's QHXF files as the model's weight source. */
typedef struct {
    qhx_weight_source src;
    qhxf_file *files;
    size_t cap;
} bundle;

static const qhx_mapfile *file(const qhx_weight_source *src, int i) { return &((const bundle *)src)->files[i].map; }

static void close_bundle(qhx_weight_source *src) {
    bundle *b = (bundle *)src;
    for (int i = 0; i < b->src.n_files; i++) qhxf_close(&b->files[i]);
    free(b->files);
    free(b);
}

/* dotted lookups ("plan.lm_head.file") with one message for every missing or mistyped field */
static const cJSON *get(const manifest *mf, const char *dotted, int type) {
    const cJSON *o = mf->root;
    char key[128];
    for (const char *p = dotted; o && *p;) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);
        snprintf(key, sizeof key, "%.*s", (int)n, p);
        o = cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
        p += n + (dot != NULL);
    }
    if (!o || (o->type & 0xFF) != type) {
        const char *what = type == cJSON_String ? "a string" : type == cJSON_Number ? "a number" : type == cJSON_Array ? "a list" : "an object";
        qhx_fail(QHX_ERR_FORMAT, "%s: field '%s' is %s (need %s)", mf->path, dotted, o ? "of the wrong type" : "missing", what);
        return NULL;
    }
    return o;
}

static int parse_hex64(const char *s, uint64_t *v) {
    if (strlen(s) != 16) return 0;
    char *end;
    *v = strtoull(s, &end, 16);
    return *end == 0;
}

static qhx_status plain_name(const manifest *mf, const char *name) {
    if (!*name || strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, ".."))
        return qhx_fail(QHX_ERR_FORMAT, "%s: file name '%.200s' is not a plain name inside the bundle", mf->path, name);
    return QHX_OK;
}

/* The file's size and XXH3 must be what the manifest's "files" table says. */
static qhx_status verify(qhx_model *m, const manifest *mf, const qhxf_file *f, const char *name) {
    const cJSON *files = get(mf, "files", cJSON_Object);
    if (!files) return QHX_ERR_FORMAT;
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(files, name);
    const cJSON *bytes = e ? cJSON_GetObjectItemCaseSensitive(e, "bytes") : NULL, *xx = e ? cJSON_GetObjectItemCaseSensitive(e, "xxh3") : NULL;
    uint64_t want;
    if (!cJSON_IsNumber(bytes) || !cJSON_IsString(xx) || !parse_hex64(xx->valuestring, &want))
        return qhx_fail(QHX_ERR_FORMAT, "%s: 'files' has no bytes/xxh3 entry for %s", mf->path, name);
    if ((double)f->map.size != bytes->valuedouble)
        return qhx_fail(QHX_ERR_FORMAT, "%s/%s: %zu bytes, the manifest says %.0f (truncated or replaced)", m->dir, name,
                        f->map.size, bytes->valuedouble);
    XXH3_state_t *st = XXH3_createState();
    if (!st) return qhx_fail(QHX_ERR_NOMEM, "out of memory");
    XXH3_64bits_reset(st);
    const size_t step = (size_t)64 << 20; /* a progress line per 64 MiB on big files */
    for (size_t off = 0; off < f->map.size; off += step) {
        XXH3_64bits_update(st, (const char *)f->map.data + off, f->map.size - off < step ? f->map.size - off : step);
        if (m->rt->progress && f->map.size > step) {
            char what[300];
            snprintf(what, sizeof what, "checking %s:", name);
            m->rt->progress(what, off + step < f->map.size ? off + step : f->map.size, f->map.size, m->rt->progress_user);
        }
    }
    const uint64_t got = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    if (got != want)
        return qhx_fail(QHX_ERR_FORMAT, "%s/%s: checksum mismatch (xxh3 %016llx, the manifest says %016llx)", m->dir, name,
                        (unsigned long long)got, (unsigned long long)want);
    return QHX_OK;
}

/* Opens (once) the bundle file `name` with the expected kind. */
static qhx_status open_file(qhx_model *m, const manifest *mf, const char *name, qhxf_kind kind, const qhxf_expect *base,
                            qhxf_file **out) {
    qhx_status rc = plain_name(mf, name);
    if (rc) return rc;
    bundle *bu = (bundle *)m->src;
    for (int i = 0; i < bu->src.n_files; i++) {
        const char *b = strrchr(bu->files[i].map.path, '/');
        if (!strcmp(b + 1, name)) {
            if (bu->files[i].h.kind != (uint32_t)kind && !(kind == QHXF_HEAD && bu->files[i].h.kind == QHXF_EMBED))
                return qhx_fail(QHX_ERR_FORMAT, "%s: %s is used for two different roles", mf->path, name);
            *out = &bu->files[i];
            return QHX_OK;
        }
    }
    if (qhx_reserve(&bu->files, &bu->cap, (size_t)bu->src.n_files + 1, sizeof *bu->files)) return qhx_fail(QHX_ERR_NOMEM, "out of memory");
    char *path = qhx_path_join(m->dir, name);
    if (!path) return qhx_fail(QHX_ERR_NOMEM, "out of memory");
    qhxf_expect want = *base;
    want.kind = kind;
    qhxf_file *f = &bu->files[bu->src.n_files];
    rc = qhxf_open(f, path, &want, !m->rt->map_weights);
    if (rc && kind == QHXF_HEAD) { /* the lm-head of a tied model is the embedding file */
        want.kind = QHXF_EMBED;
        if (!qhxf_open(f, path, &want, !m->rt->map_weights)) rc = QHX_OK;
    }
    free(path);
    if (rc) return rc;
    bu->src.n_files++;
    if ((rc = verify(m, mf, f, name))) return rc;
    m->weight_bytes += f->map.size;
    *out = f;
    return QHX_OK;
}

static qhx_status bind(const manifest *mf, const qhxf_file *f, const char *name, qhx_dtype want_dt, int rows, int cols,
                       qhx_tensor *dst) {
    const qhxf_tensor *e = qhxf_find(f, name);
    if (!e) return qhx_fail(QHX_ERR_FORMAT, "%s: tensor '%s' is missing", f->map.path, name);
    const qhx_tensor *t = &e->t;
    if (t->dtype != want_dt || t->rows != rows || t->cols != cols)
        return qhx_fail(QHX_ERR_FORMAT, "%s: tensor '%s' is [%d, %d], the model needs [%d, %d] %s", f->map.path, name, t->rows,
                        t->cols, rows, cols, want_dt == QHX_I8 ? "int8" : want_dt == QHX_F16 ? "fp16" : "fp32");
    *dst = *t;
    return QHX_OK;
}

/* How the forge stores each decoder tensor: matrices W8, everything small fp32. */
qhx_dtype qhx_bundle_dtype(const qhx_tensor_spec *s) { return s->init == QHX_INIT_MATRIX ? QHX_I8 : QHX_F32; }

static qhx_status load(qhx_model *m, manifest *mf) {
    qhx_status rc;
    const cJSON *fmt = get(mf, "format", cJSON_String), *ver = get(mf, "schema_version", cJSON_Number);
    if (!fmt || !ver) return QHX_ERR_FORMAT;
    if (strcmp(fmt->valuestring, "qhexrt-bundle"))
        return qhx_fail(QHX_ERR_FORMAT, "%s: format is '%s', not 'qhexrt-bundle'", mf->path, fmt->valuestring);
    if (ver->valuedouble != QHX_BUNDLE_SCHEMA)
        return qhx_fail(QHX_ERR_UNSUPPORTED, "%s: schema version %g, this qhexrt reads version %d", mf->path, ver->valuedouble,
                        QHX_BUNDLE_SCHEMA);
    const cJSON *model = get(mf, "model", cJSON_Object), *mh = get(mf, "model_hash", cJSON_String);
    const cJSON *bid = get(mf, "bundle_id", cJSON_String), *ctx = get(mf, "context_length", cJSON_Number);
    const cJSON *tgt = get(mf, "target.target", cJSON_String), *lay = get(mf, "target.weight_layout", cJSON_String);
    const cJSON *op = get(mf, "plan.host_op", cJSON_String), *shards = get(mf, "plan.decode_shards", cJSON_Array);
    const cJSON *emb = get(mf, "plan.embedding.file", cJSON_String), *head = get(mf, "plan.lm_head.file", cJSON_String);
    const cJSON *head_dt = get(mf, "plan.lm_head.dtype", cJSON_String);
    if (!model || !mh || !bid || !ctx || !tgt || !lay || !op || !shards || !emb || !head || !head_dt || !get(mf, "files", cJSON_Object))
        return QHX_ERR_FORMAT;
    if (strcmp(op->valuestring, "qwen3_5_generate"))
        return qhx_fail(QHX_ERR_UNSUPPORTED, "%s: host op '%s' is unknown (this qhexrt runs qwen3_5_generate)", mf->path, op->valuestring);
    if (strcmp(tgt->valuestring, QHX_TARGET) || strcmp(lay->valuestring, QHX_LAYOUT_W8))
        return qhx_fail(QHX_ERR_UNSUPPORTED, "%s: built for target '%s' with weight layout '%s'; this build runs '%s' / '%s'",
                        mf->path, tgt->valuestring, lay->valuestring, QHX_TARGET, QHX_LAYOUT_W8);
    qhxf_expect base = {0, QHX_TARGET, QHX_LAYOUT_W8, 0, 0};
    if (!parse_hex64(bid->valuestring, &base.bundle_id) || !parse_hex64(mh->valuestring, &base.model_hash))
        return qhx_fail(QHX_ERR_FORMAT, "%s: bundle_id and model_hash must be 16 hex digits", mf->path);

    char *mtext = cJSON_PrintUnformatted(model);
    if (!mtext) return qhx_fail(QHX_ERR_NOMEM, "out of memory");
    const uint64_t hash = XXH3_64bits(mtext, strlen(mtext));
    char where[1200];
    snprintf(where, sizeof where, "%s: model", mf->path);
    rc = qhx_config_parse(&m->cfg, where, mtext, strlen(mtext));
    free(mtext);
    if (rc) return rc;
    if (hash != base.model_hash)
        return qhx_fail(QHX_ERR_FORMAT, "%s: model_hash %s does not match the model description (%016llx)", mf->path,
                        mh->valuestring, (unsigned long long)hash);
    const double cl = ctx->valuedouble;
    if (cl < 1 || cl > m->cfg.max_pos || cl != (int)cl)
        return qhx_fail(QHX_ERR_FORMAT, "%s: context_length %g is not in [1, %d]", mf->path, cl, m->cfg.max_pos);
    m->context = (int)cl;

    m->w = qhx_weights_new(&m->cfg);
    const int n_specs = qhx_qwen35_specs(&m->cfg, "", m->w, NULL);
    qhx_tensor_spec *specs = calloc((size_t)n_specs, sizeof *specs);
    if (!m->w || !specs) { free(specs); return qhx_fail(QHX_ERR_NOMEM, "out of memory"); }
    qhx_qwen35_specs(&m->cfg, "", m->w, specs);

    /* decode shards: contiguous, in order, covering every layer */
    const int n_shards = cJSON_GetArraySize(shards);
    if (n_shards < 1 || n_shards > QHX_MAX_SHARDS) {
        free(specs);
        return qhx_fail(QHX_ERR_FORMAT, "%s: plan.decode_shards must list 1 to %d shards", mf->path, QHX_MAX_SHARDS);
    }
    if (!(m->shards = calloc((size_t)n_shards, sizeof *m->shards))) {
        free(specs);
        return qhx_fail(QHX_ERR_NOMEM, "out of memory");
    }
    m->n_shards = n_shards;
    int next = 0;
    for (int i = 0; i < m->n_shards && !rc; i++) {
        const cJSON *sh = cJSON_GetArrayItem(shards, i), *file = cJSON_GetObjectItemCaseSensitive(sh, "file");
        const cJSON *layers = cJSON_GetObjectItemCaseSensitive(sh, "layers");
        qhx_shard_desc *d = &m->shards[i];
        if (!cJSON_IsString(file) || !cJSON_IsArray(layers) || cJSON_GetArraySize(layers) != 2) {
            rc = qhx_fail(QHX_ERR_FORMAT, "%s: plan.decode_shards[%d] needs 'file' and 'layers': [first, end)", mf->path, i);
            break;
        }
        d->l0 = (int)cJSON_GetArrayItem(layers, 0)->valuedouble;
        d->l1 = (int)cJSON_GetArrayItem(layers, 1)->valuedouble;
        if (d->l0 != next || d->l1 <= d->l0 || d->l1 > m->cfg.n_layers) {
            rc = qhx_fail(QHX_ERR_FORMAT, "%s: plan.decode_shards[%d] covers layers [%d, %d); expected to start at %d", mf->path,
                          i, d->l0, d->l1, next);
            break;
        }
        next = d->l1;
        if (!(d->file = strdup(file->valuestring))) {
            rc = qhx_fail(QHX_ERR_NOMEM, "out of memory");
            break;
        }
        qhxf_file *f;
        if ((rc = open_file(m, mf, d->file, QHXF_SHARD, &base, &f))) break;
        d->bytes = f->map.size;
        if (f->h.l0 != d->l0 || f->h.l1 != d->l1) {
            rc = qhx_fail(QHX_ERR_FORMAT, "%s/%s: holds layers [%d, %d), the manifest says [%d, %d)", m->dir, d->file, f->h.l0,
                          f->h.l1, d->l0, d->l1);
            break;
        }
        const int last = d->l1 == m->cfg.n_layers;
        for (int k = 0; k < n_specs && !rc; k++) {
            const qhx_tensor_spec *s = &specs[k];
            const int mine = s->layer >= d->l0 && s->layer < d->l1;
            if (!mine && !(last && s->dst == &m->w->final_norm)) continue;
            int rows, cols;
            qhx_spec_dims(s, &rows, &cols);
            rc = bind(mf, f, s->name, qhx_bundle_dtype(s), rows, cols, s->dst);
        }
    }
    free(specs);
    if (!rc && next != m->cfg.n_layers)
        rc = qhx_fail(QHX_ERR_FORMAT, "%s: the decode shards end at layer %d of %d", mf->path, next, m->cfg.n_layers);
    if (rc) return rc;

    const int V = m->cfg.vocab_size, D = m->cfg.hidden;
    qhxf_file *f;
    if ((rc = open_file(m, mf, emb->valuestring, QHXF_EMBED, &base, &f)) ||
        (rc = bind(mf, f, "embed_tokens.weight", QHX_F16, V, D, &m->w->embed)))
        return rc;
    const int w8 = !strcmp(head_dt->valuestring, "i8");
    if (!w8 && strcmp(head_dt->valuestring, "f16"))
        return qhx_fail(QHX_ERR_FORMAT, "%s: plan.lm_head.dtype '%s' is not f16 or i8", mf->path, head_dt->valuestring);
    if ((rc = open_file(m, mf, head->valuestring, QHXF_HEAD, &base, &f))) return rc;
    return bind(mf, f, f->h.kind == QHXF_EMBED ? "embed_tokens.weight" : "lm_head.weight", w8 ? QHX_I8 : QHX_F16, V, D,
                &m->w->lm_head);
}

/* Files the loader does not map (the tokenizer) are checked here, at open, like the rest. */
static qhx_status verify_other_files(qhx_model *m, const manifest *mf) {
    const cJSON *e;
    cJSON_ArrayForEach(e, get(mf, "files", cJSON_Object)) {
        int mapped = 0;
        for (int i = 0; i < m->src->n_files && !mapped; i++) mapped = !strcmp(strrchr(m->src->file(m->src, i)->path, '/') + 1, e->string);
        if (mapped) continue;
        qhx_status rc = plain_name(mf, e->string);
        if (rc) return rc;
        char *path = qhx_path_join(m->dir, e->string);
        if (!path) return qhx_fail(QHX_ERR_NOMEM, "out of memory");
        qhx_mapfile f;
        rc = qhx_map_open(&f, path);
        free(path);
        if (rc) return rc;
        qhxf_file view = {.map = f};
        rc = verify(m, mf, &view, e->string);
        qhx_map_close(&f);
        if (rc) return rc;
    }
    return QHX_OK;
}

qhx_status qhx_bundle_open(qhx_model *m, const char *manifest_path) {
    const char *slash = strrchr(manifest_path, '/');
    bundle *b = calloc(1, sizeof *b);
    m->dir = slash ? strndup(manifest_path, (size_t)(slash - manifest_path)) : strdup(".");
    if (!b || !m->dir) {
        free(b);
        return qhx_fail(QHX_ERR_NOMEM, "out of memory");
    }
    b->src = (qhx_weight_source){.file = file, .close = close_bundle};
    m->src = &b->src;
    size_t len;
    qhx_status rc = qhx_read_file(manifest_path, 16u << 20, &m->manifest, &len);
    if (rc) return rc;
    manifest mf = {manifest_path, cJSON_ParseWithLength(m->manifest, len)};
    if (!mf.root || !cJSON_IsObject(mf.root)) rc = qhx_fail(QHX_ERR_FORMAT, "%s: not a JSON object", manifest_path);
    else if (!(rc = load(m, &mf))) rc = verify_other_files(m, &mf);
    cJSON_Delete(mf.root);
    return rc;
}
