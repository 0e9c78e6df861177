/* Opening a bundle: the manifest (the declarative run plan) and the files it names, every one
 * checked (checksum, magic, version, kind, target, layout, bundle id, model hash, tensor shapes)
 * before any compute can start. */
#include "util/buf.h"
#include "model/model.h"
#include "format/w4.h"
#include "util/error.h"

#include "util/json.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

typedef struct {
    const char *path;   /* the manifest, for messages */
    json_t *root;
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
/* type: JSON_STRING, JSON_OBJECT, JSON_ARRAY, or JSON_REAL for any number */
static const json_t *get(const manifest *mf, const char *dotted, json_type type) {
    const json_t *o = mf->root;
    char key[128];
    for (const char *p = dotted; o && *p;) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);
        snprintf(key, sizeof key, "%.*s", (int)n, p);
        o = json_is_object(o) ? json_object_get(o, key) : NULL;
        p += n + (dot != NULL);
    }
    if (!o || (type == JSON_REAL ? !json_is_number(o) : json_typeof(o) != type)) {
        const char *what = type == JSON_STRING ? "a string" : type == JSON_REAL ? "a number" : type == JSON_ARRAY ? "a list" : "an object";
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
    const json_t *files = get(mf, "files", JSON_OBJECT);
    if (!files) return QHX_ERR_FORMAT;
    const json_t *e = json_object_get(files, name);
    const json_t *bytes = e ? json_object_get(e, "bytes") : NULL, *xx = e ? json_object_get(e, "xxh3") : NULL;
    uint64_t want;
    if (!json_is_number(bytes) || !json_is_string(xx) || !parse_hex64(json_string_value(xx), &want))
        return qhx_fail(QHX_ERR_FORMAT, "%s: 'files' has no bytes/xxh3 entry for %s", mf->path, name);
    if ((double)f->map.size != json_number_value(bytes))
        return qhx_fail(QHX_ERR_FORMAT, "%s/%s: %zu bytes, the manifest says %.0f (truncated or replaced)", m->dir, name,
                        f->map.size, json_number_value(bytes));
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
    rc = qhxf_open(f, path, &want, !m->map);
    if (rc && kind == QHXF_HEAD) { /* the lm-head of a tied model is the embedding file */
        want.kind = QHXF_EMBED;
        if (!qhxf_open(f, path, &want, !m->map)) rc = QHX_OK;
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
                        t->cols, rows, cols, want_dt == QHX_I8 ? "int8" : want_dt == QHX_Q4 ? "4-bit" : want_dt == QHX_F16 ? "fp16" : "fp32");
    *dst = *t;
    return QHX_OK;
}

/* How the forge stores each decoder tensor: matrices W8 or W4, everything small fp32. */
qhx_dtype qhx_bundle_dtype(const qhx_tensor_spec *s, qhx_dtype matrices) { return s->init == QHX_INIT_MATRIX ? matrices : QHX_F32; }

/* The MTP head the model description promises, from the file plan.mtp names. */
static qhx_status load_mtp(qhx_model *m, manifest *mf, const qhxf_expect *base, qhx_dtype matrices, const qhx_tensor_spec *specs,
                           int n_specs) {
    const json_t *file = get(mf, "plan.mtp.file", JSON_STRING);
    if (!file) return QHX_ERR_FORMAT;
    qhxf_file *f;
    qhx_status rc = open_file(m, mf, json_string_value(file), QHXF_MTP, base, &f);
    for (int k = 0; k < n_specs && !rc; k++) {
        if (specs[k].layer != QHX_LAYER_MTP) continue;
        int rows, cols;
        qhx_spec_dims(&specs[k], &rows, &cols);
        rc = bind(mf, f, specs[k].name, qhx_bundle_dtype(&specs[k], matrices), rows, cols, specs[k].dst);
    }
    return rc;
}

static qhx_status load(qhx_model *m, manifest *mf) {
    qhx_status rc;
    const json_t *fmt = get(mf, "format", JSON_STRING), *ver = get(mf, "schema_version", JSON_REAL);
    if (!fmt || !ver) return QHX_ERR_FORMAT;
    if (strcmp(json_string_value(fmt), "qhexrt-bundle"))
        return qhx_fail(QHX_ERR_FORMAT, "%s: format is '%s', not 'qhexrt-bundle'", mf->path, json_string_value(fmt));
    if (json_number_value(ver) != QHX_BUNDLE_SCHEMA)
        return qhx_fail(QHX_ERR_UNSUPPORTED, "%s: schema version %g, this qhexrt reads version %d", mf->path, json_number_value(ver),
                        QHX_BUNDLE_SCHEMA);
    const json_t *model = get(mf, "model", JSON_OBJECT), *mh = get(mf, "model_hash", JSON_STRING);
    const json_t *bid = get(mf, "bundle_id", JSON_STRING), *ctx = get(mf, "context_length", JSON_REAL);
    const json_t *tgt = get(mf, "target.target", JSON_STRING), *lay = get(mf, "target.weight_layout", JSON_STRING);
    const json_t *op = get(mf, "plan.host_op", JSON_STRING), *shards = get(mf, "plan.decode_shards", JSON_ARRAY);
    const json_t *emb = get(mf, "plan.embedding.file", JSON_STRING), *head = get(mf, "plan.lm_head.file", JSON_STRING);
    const json_t *head_dt = get(mf, "plan.lm_head.dtype", JSON_STRING);
    if (!model || !mh || !bid || !ctx || !tgt || !lay || !op || !shards || !emb || !head || !head_dt || !get(mf, "files", JSON_OBJECT))
        return QHX_ERR_FORMAT;
    /* Weights are read in (on huge pages: faster where TLB misses are dear) when they fit with a
     * GiB to spare for sessions, else mapped, so a model larger than memory streams from the page
     * cache instead of failing or pushing everything else out (docs/usage.md, bench/README.md). */
    uint64_t total = 0;
    const char *fname;
    json_t *fe;
    json_object_foreach((json_t *)get(mf, "files", JSON_OBJECT), fname, fe) total += (uint64_t)json_number_value(json_object_get(fe, "bytes"));
    const uint64_t avail = qhx_memory_available();
    m->map = m->rt->map_weights || (avail && total + (1ull << 30) > avail);
    if (strcmp(json_string_value(op), "qwen3_5_generate"))
        return qhx_fail(QHX_ERR_UNSUPPORTED, "%s: host op '%s' is unknown (this qhexrt runs qwen3_5_generate)", mf->path, json_string_value(op));
    static const char *const sharing[] = {QHX_TARGETS_SHARING_LAYOUT};
    int target_ok = 0;
    for (size_t i = 0; i < sizeof sharing / sizeof *sharing; i++) target_ok |= !strcmp(json_string_value(tgt), sharing[i]);
    const char *layout = json_string_value(lay);
    const int w4 = !strcmp(layout, QHX_LAYOUT_W4);
    if (!target_ok || (!w4 && strcmp(layout, QHX_LAYOUT_W8)))
        return qhx_fail(QHX_ERR_UNSUPPORTED, "%s: built for target '%s' with weight layout '%s'; this build runs '%s' / '%s' or '%s': "
                        "forge the checkpoint again here (qhx forge)", mf->path, json_string_value(tgt), layout,
                        QHX_TARGET, QHX_LAYOUT_W8, QHX_LAYOUT_W4);
    const qhx_dtype matrices = w4 ? QHX_Q4 : QHX_I8;
    /* another CPU target with this layout: its files carry their own target */
    qhxf_expect base = {0, json_string_value(tgt), w4 ? QHX_LAYOUT_W4 : QHX_LAYOUT_W8, 0, 0};
    if (!parse_hex64(json_string_value(bid), &base.bundle_id) || !parse_hex64(json_string_value(mh), &base.model_hash))
        return qhx_fail(QHX_ERR_FORMAT, "%s: bundle_id and model_hash must be 16 hex digits", mf->path);

    char *mtext = qhx_json_canonical(model);
    if (!mtext) return qhx_fail(QHX_ERR_NOMEM, "out of memory");
    const uint64_t hash = XXH3_64bits(mtext, strlen(mtext));
    char *where = malloc(strlen(mf->path) + 8);
    if (where) sprintf(where, "%s: model", mf->path);
    rc = where ? qhx_config_parse(&m->cfg, where, mtext, strlen(mtext)) : qhx_fail(QHX_ERR_NOMEM, "out of memory");
    free(where);
    free(mtext);
    if (rc) return rc;
    if (hash != base.model_hash)
        return qhx_fail(QHX_ERR_FORMAT, "%s: model_hash %s does not match the model description (%016llx)", mf->path,
                        json_string_value(mh), (unsigned long long)hash);
    const double cl = json_number_value(ctx);
    if (cl < 1 || cl > m->cfg.max_pos || cl != (int)cl)
        return qhx_fail(QHX_ERR_FORMAT, "%s: context_length %g is not in [1, %d]", mf->path, cl, m->cfg.max_pos);
    m->context = (int)cl;

    m->w = qhx_weights_new(&m->cfg);
    const int n_specs = qhx_qwen35_specs(&m->cfg, "", m->w, NULL);
    qhx_tensor_spec *specs = calloc((size_t)n_specs, sizeof *specs);
    if (!m->w || !specs) { free(specs); return qhx_fail(QHX_ERR_NOMEM, "out of memory"); }
    qhx_qwen35_specs(&m->cfg, "", m->w, specs);

    /* decode shards: contiguous, in order, covering every layer */
    const int n_shards = (int)json_array_size(shards);
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
        const json_t *sh = json_array_get(shards, i), *file = json_object_get(sh, "file");
        const json_t *layers = json_object_get(sh, "layers");
        qhx_shard_desc *d = &m->shards[i];
        if (!json_is_string(file) || !json_is_array(layers) || (int)json_array_size(layers) != 2) {
            rc = qhx_fail(QHX_ERR_FORMAT, "%s: plan.decode_shards[%d] needs 'file' and 'layers': [first, end)", mf->path, i);
            break;
        }
        d->l0 = (int)json_number_value(json_array_get(layers, 0));
        d->l1 = (int)json_number_value(json_array_get(layers, 1));
        if (d->l0 != next || d->l1 <= d->l0 || d->l1 > m->cfg.n_layers) {
            rc = qhx_fail(QHX_ERR_FORMAT, "%s: plan.decode_shards[%d] covers layers [%d, %d); expected to start at %d", mf->path,
                          i, d->l0, d->l1, next);
            break;
        }
        next = d->l1;
        if (!(d->file = strdup(json_string_value(file)))) {
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
            rc = bind(mf, f, s->name, qhx_bundle_dtype(s, matrices), rows, cols, s->dst);
        }
    }
    if (!rc && m->w->mtp) rc = load_mtp(m, mf, &base, matrices, specs, n_specs);
    free(specs);
    if (!rc && next != m->cfg.n_layers)
        rc = qhx_fail(QHX_ERR_FORMAT, "%s: the decode shards end at layer %d of %d", mf->path, next, m->cfg.n_layers);
    if (rc) return rc;

    const int V = m->cfg.vocab_size, D = m->cfg.hidden;
    qhxf_file *f;
    if ((rc = open_file(m, mf, json_string_value(emb), QHXF_EMBED, &base, &f)) ||
        (rc = bind(mf, f, "embed_tokens.weight", QHX_F16, V, D, &m->w->embed)))
        return rc;
    const char *hd = json_string_value(head_dt);
    const qhx_dtype hdt = !strcmp(hd, "i8") ? QHX_I8 : !strcmp(hd, "q4") ? QHX_Q4 : !strcmp(hd, "f16") ? QHX_F16 : QHX_DT_OTHER;
    if (hdt == QHX_DT_OTHER) return qhx_fail(QHX_ERR_FORMAT, "%s: plan.lm_head.dtype '%s' is not f16, i8 or q4", mf->path, hd);
    if ((rc = open_file(m, mf, json_string_value(head), QHXF_HEAD, &base, &f))) return rc;
    return bind(mf, f, f->h.kind == QHXF_EMBED ? "embed_tokens.weight" : "lm_head.weight", hdt, V, D,
                &m->w->lm_head);
}

/* Files the loader does not map (the tokenizer) are checked here, at open, like the rest. */
static qhx_status verify_other_files(qhx_model *m, const manifest *mf) {
    const char *name;
    json_t *e;
    const json_t *files = get(mf, "files", JSON_OBJECT);
    if (!files) return QHX_ERR_FORMAT;
    json_object_foreach((json_t *)files, name, e) {
        int mapped = 0;
        for (int i = 0; i < m->src->n_files && !mapped; i++) mapped = !strcmp(strrchr(m->src->file(m->src, i)->path, '/') + 1, name);
        if (mapped) continue;
        qhx_status rc = plain_name(mf, name);
        if (rc) return rc;
        char *path = qhx_path_join(m->dir, name);
        if (!path) return qhx_fail(QHX_ERR_NOMEM, "out of memory");
        qhx_mapfile f;
        rc = qhx_map_open(&f, path);
        free(path);
        if (rc) return rc;
        qhxf_file view = {.map = f};
        rc = verify(m, mf, &view, name);
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
    b->src = (qhx_weight_source){.kind = "bundle", .file = file, .close = close_bundle};
    m->src = &b->src;
    size_t len;
    qhx_status rc = qhx_read_file(manifest_path, 16u << 20, &m->manifest, &len);
    if (rc) return rc;
    manifest mf = {manifest_path, qhx_json_parse(m->manifest, len)};
    if (!mf.root || !json_is_object(mf.root)) rc = qhx_fail(QHX_ERR_FORMAT, "%s: not a JSON object", manifest_path);
    else if (!(rc = load(m, &mf))) rc = verify_other_files(m, &mf);
    json_decref(mf.root);
    return rc;
}
