/* Forge stages 2 and 4: every tensor written in its bundle dtype (W8 matrices, fp16 embedding and
 * head, fp32 small tensors), each file hashed as it is written; the tokenizer; the manifest. */
#include "forge/forge_internal.h"
#include "model/model.h"
#include "format/w4.h"
#include "model/ops.h"
#include "util/error.h"
#include "util/half.h"
#include "util/outdir.h"
#include "util/rng.h"

#include "util/json.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>



/* Where the rows of each entry come from, and the dtype they go out in. */
typedef struct {
    forge *f;
    const qhxf_entry *entries;
    const qhx_tensor_spec *const *src;  /* each entry's source: the tensor spec->dst */
} write_ctx;

enum { MAX_FILL_THREADS = 64 };

/* One call's rows, split by row groups over the runtime's threads (quantizing a 4B model's
 * matrices to W4 is minutes of arithmetic); each thread sums its own quantization error. */
typedef struct {
    const write_ctx *w;
    int i, r0, r1;
    void *data;
    float *scale;
    double num[MAX_FILL_THREADS], den[MAX_FILL_THREADS];
    int failed;
} fill_job;

static void fill_rows(void *arg, int k, int n) {
    fill_job *j = arg;
    const qhx_tensor_spec *spec = j->w->src[j->i];
    const qhx_tensor *t = spec->dst;
    const qhx_weight_source *src = j->w->f->src->src;
    const int cols = t->cols, groups = (j->r1 - j->r0 + 3) / 4;
    const int r0 = j->r0 + 4 * (int)((long long)groups * k / n), r1 = j->r0 + 4 * (int)((long long)groups * (k + 1) / n);
    float *row = malloc(sizeof(float) * (size_t)cols);
    int8_t *q8 = malloc((size_t)cols);
    if (!row || !q8) {
        free(row), free(q8);
        j->failed = 1;
        return;
    }
    double num = 0, den = 0;
    void *data = j->data;
    for (int r = r0; r < r1 && r < j->r1; r++) {
        if (!t->data) src->row(src, spec, r, row); /* drawn, or decoded a row at a time */
        else for (int c = 0; c < cols; c++) row[c] = qhx_tensor_get(t, (size_t)r * cols + c);
        const size_t at = (size_t)(r - j->r0) * cols;
        switch (j->w->entries[j->i].dtype) {
        case QHX_I8: {
            const float sc = j->scale[r - j->r0] = qhx_quantize_row(row, cols, q8);
            qhx_w8_put_row(data, (size_t)cols, (size_t)(r - j->r0), q8);
            for (int c = 0; c < cols; c++) {
                const double d = row[c] - q8[c] * (double)sc;
                num += d * d, den += (double)row[c] * row[c];
            }
            break;
        }
        case QHX_Q4:
            for (int c0 = 0; c0 < cols; c0 += QHX_W4_BLOCK) {
                const int nc = cols - c0 < QHX_W4_BLOCK ? cols - c0 : QHX_W4_BLOCK;
                uint8_t q[QHX_W4_BLOCK];
                float d, m;
                qhx_quantize_w4(row + c0, nc, 0, q, &d, &m);
                for (int c = nc; c < QHX_W4_BLOCK; c++) q[c] = 8; /* the ragged block's zero columns */
                qhx_w4_put(data, (size_t)cols, (size_t)(r - j->r0), (size_t)c0 / QHX_W4_BLOCK, q, d);
                for (int c = 0; c < nc; c++) {
                    const double e = row[c0 + c] - (double)d * (q[c] - 8);
                    num += e * e, den += (double)row[c0 + c] * row[c0 + c];
                }
            }
            break;
        case QHX_F16:
            for (int c = 0; c < cols; c++) ((uint16_t *)data)[at + c] = qhx_f32_to_f16(row[c]);
            break;
        default: memcpy((float *)data + at, row, sizeof(float) * cols);
        }
    }
    j->num[k] = num, j->den[k] = den;
    free(row), free(q8);
}

static int fill_entry(int i, int r0, int r1, void *data, float *scale, void *user) {
    write_ctx *w = user;
    fill_job j = {.w = w, .i = i, .r0 = r0, .r1 = r1, .data = data, .scale = scale};
    qhx_pool *pool = w->f->src->rt->ex.pool;
    if (qhx_pool_size(pool) <= MAX_FILL_THREADS) qhx_pool_run(pool, fill_rows, &j);
    else fill_rows(&j, 0, 1);
    if (j.failed) return qhx_fail(QHX_ERR_NOMEM, "out of memory"), 1;
    for (int k = 0; k < MAX_FILL_THREADS; k++) w->f->qerr_num += j.num[k], w->f->qerr_den += j.den[k];
    return 0;
}

static void progress(uint64_t bytes, void *user) {
    write_ctx *w = user;
    forge *f = w->f;
    if (f->o->progress) f->o->progress("forge: writing", f->done_bytes + bytes, f->total_bytes, f->o->progress_user);
}

/* Adds a written file's size and XXH3 to the manifest's "files"; returns the size. */
static uint64_t record_file(forge *f, const char *name, uint64_t hash) {
    char *path = qhx_path_join(f->tmp, name), hex[17];
    struct stat st;
    const uint64_t size = path && stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
    free(path);
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)hash);
    json_t *fe = qhx_json_add(f->files, name, json_object());
    json_object_set_new(fe, "bytes", qhx_json_number((double)size));
    json_object_set_new(fe, "xxh3", json_string(hex));
    return size;
}

static qhx_status write_file(forge *f, const char *name, qhxf_kind kind, int l0, int l1, const qhxf_entry *e,
                             const qhx_tensor_spec *const *src, int n, uint64_t *bytes) {
    qhxf_header h;
    memset(&h, 0, sizeof h);
    h.kind = kind;
    snprintf(h.target, sizeof h.target, "%s", QHX_TARGET);
    snprintf(h.layout, sizeof h.layout, "%s", f->layout);
    h.bundle_id = f->bundle_id;
    h.model_hash = f->model_hash;
    h.l0 = l0;
    h.l1 = l1;
    write_ctx w = {f, e, src};
    char *path = qhx_path_join(f->tmp, name);
    uint64_t hash;
    qhx_status rc = !path ? qhx_fail(QHX_ERR_NOMEM, "out of memory") : qhxf_write(path, &h, e, n, fill_entry, &w, &hash, progress);
    free(path);
    if (rc) return rc;
    *bytes = record_file(f, name, hash);
    f->done_bytes += *bytes;
    return QHX_OK;
}


static qhx_status write_text(const char *path, const char *text) {
    FILE *fp = fopen(path, "wb");
    if (!fp) return qhx_fail(QHX_ERR_IO, "%s: cannot create", path);
    const size_t n = strlen(text);
    int ok = fwrite(text, 1, n, fp) == n && fflush(fp) == 0 && fsync(fileno(fp)) == 0;
    ok &= fclose(fp) == 0;
    return ok ? QHX_OK : qhx_fail(QHX_ERR_IO, "%s: write failed", path);
}

/* Writes text to f->tmp/name. */
static qhx_status write_out(forge *f, const char *name, const char *text) {
    char *path = qhx_path_join(f->tmp, name);
    qhx_status rc = path ? write_text(path, text) : qhx_fail(QHX_ERR_NOMEM, "out of memory");
    free(path);
    return rc;
}

static qhx_status record_hashed(forge *f, const char *name) {
    char *path = qhx_path_join(f->tmp, name);
    uint64_t hash;
    qhx_status rc = path ? qhxf_hash_file(path, &hash) : qhx_fail(QHX_ERR_NOMEM, "out of memory");
    if (!rc) record_file(f, name, hash);
    free(path);
    return rc;
}

/* The source's tokenizer.json, copied, and the compact form of its tokenizer; a GGUF (whose
 * tokenizer was built from its metadata) gives the compact form alone, a checkpoint without a
 * tokenizer a bundle without one. */
qhx_status forge_copy_tokenizer(forge *f) {
    if (!f->src->dir) return QHX_OK; /* a synthetic preset has no tokenizer */
    char *src = qhx_path_join(f->src->dir, "tokenizer.json"), *text = NULL;
    if (!src) return qhx_fail(QHX_ERR_NOMEM, "out of memory");
    const int have = access(src, R_OK) == 0;
    size_t len;
    qhx_status rc = have ? qhx_read_file(src, 1u << 30, &text, &len) : QHX_OK;
    free(src);
    if (rc || (!have && !f->src->tok)) return rc;
    if (have) rc = write_out(f, "tokenizer.json", text);
    free(text);
    qhx_tokenizer *tok;
    char *dst = qhx_path_join(f->tmp, "tokenizer.qhxtok");
    if (!rc && !dst) rc = qhx_fail(QHX_ERR_NOMEM, "out of memory");
    if (!rc) rc = qhx_model_tokenizer(f->src, &tok);
    if (!rc) rc = qhx_tokenizer_save_compact(tok, dst);
    free(dst);
    if (!rc && have) rc = record_hashed(f, "tokenizer.json");
    if (!rc) rc = record_hashed(f, "tokenizer.qhxtok");
    return rc;
}

qhx_status forge_write_manifest(forge *f, json_t *root) {
    char *text = json_dumps(root, JSON_INDENT(2));
    if (!text) return qhx_fail(QHX_ERR_NOMEM, "out of memory");
    qhx_status rc = write_out(f, "manifest.json", text);
    free(text);
    return rc;
}

uint64_t forge_random_id(void) {
    uint64_t seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    FILE *fp = fopen("/dev/urandom", "rb");
    if (fp) {
        if (fread(&seed, sizeof seed, 1, fp) != 1) seed ^= (uint64_t)clock();
        fclose(fp);
    }
    return qhx_splitmix64(&seed);
}

void forge_hex64(char out[17], uint64_t v) { snprintf(out, 17, "%016llx", (unsigned long long)v); }

qhx_status forge_export_all(forge *f, json_t *plan_json, const int *first, int n_shards, qhx_dtype head_dt) {
    const qhx_config *c = &f->src->cfg;
    qhx_weights *w = f->src->w;
    qhxf_entry *e = calloc((size_t)f->n_specs + 1, sizeof *e);
    const qhx_tensor_spec **src = calloc((size_t)f->n_specs + 1, sizeof *src);
    const qhx_tensor_spec *embed = NULL, *lm_head = NULL;
    for (int k = 0; k < f->n_specs; k++) {
        if (f->specs[k].dst == &w->embed) embed = &f->specs[k];
        if (f->specs[k].dst == &w->lm_head) lm_head = &f->specs[k];
    }
    if (!e || !src) { free(e), free(src); return qhx_fail(QHX_ERR_NOMEM, "out of memory"); }
    qhx_status rc = QHX_OK;
    json_t *shards = qhx_json_add(plan_json, "decode_shards", json_array());
    for (int i = 0; i < n_shards && !rc; i++) {
        const int l0 = first[i], l1 = first[i + 1], last = l1 == c->n_layers;
        int n = 0;
        for (int k = 0; k < f->n_specs; k++) {
            const qhx_tensor_spec *s = &f->specs[k];
            if (!((s->layer >= l0 && s->layer < l1) || (last && s->dst == &w->final_norm))) continue;
            e[n] = (qhxf_entry){s->name, qhx_bundle_dtype(s, f->matrices), s->dst->rows, s->dst->cols};
            src[n++] = s;
        }
        char name[64];
        snprintf(name, sizeof name, "decode_s%d_%s.qhx", i, f->matrices == QHX_Q4 ? "w4" : "w8");
        uint64_t bytes;
        rc = write_file(f, name, QHXF_SHARD, l0, l1, e, src, n, &bytes);
        json_t *sh = json_object();
        json_object_set_new(sh, "file", json_string(name));
        json_t *layers = qhx_json_add(sh, "layers", json_array());
        json_array_append_new(layers, qhx_json_number(l0));
        json_array_append_new(layers, qhx_json_number(l1));
        json_object_set_new(sh, "bytes", qhx_json_number((double)bytes));
        json_array_append_new(shards, sh);
        if (!rc) forge_say(f, "shard %d: layers %d-%d, %.1f MB", i, l0, l1 - 1, bytes / 1e6);
    }
    uint64_t bytes;
    const int V = c->vocab_size, D = c->hidden;
    e[0] = (qhxf_entry){"embed_tokens.weight", QHX_F16, V, D};
    src[0] = embed;
    if (!rc) rc = write_file(f, "embed_f16.qhx", QHXF_EMBED, 0, 0, e, src, 1, &bytes);
    json_t *emb = qhx_json_add(plan_json, "embedding", json_object());
    json_object_set_new(emb, "file", json_string("embed_f16.qhx"));
    json_object_set_new(emb, "dtype", json_string("f16"));
    json_object_set_new(emb, "lookup", json_string("host"));
    const char *head_file = "embed_f16.qhx";
    const char *head_name = head_dt == QHX_I8 ? "i8" : head_dt == QHX_Q4 ? "q4" : "f16";
    if (!rc && (head_dt != QHX_F16 || !c->tie_embeddings)) {
        head_file = head_dt == QHX_I8 ? "lm_head_w8.qhx" : head_dt == QHX_Q4 ? "lm_head_w4.qhx" : "lm_head_f16.qhx";
        e[0] = (qhxf_entry){"lm_head.weight", head_dt, V, D};
        src[0] = lm_head ? lm_head : embed; /* a tied head is the embedding */
        rc = write_file(f, head_file, QHXF_HEAD, 0, 0, e, src, 1, &bytes);
    }
    json_t *head = qhx_json_add(plan_json, "lm_head", json_object());
    json_object_set_new(head, "file", json_string(head_file));
    json_object_set_new(head, "dtype", json_string(head_name));
    json_object_set_new(head, "tied_to_embedding", json_boolean(!strcmp(head_file, "embed_f16.qhx")));
    if (!rc && w->mtp) { /* the MTP head in a file of its own: decoding never reads it */
        int n = 0;
        for (int k = 0; k < f->n_specs; k++)
            if (f->specs[k].layer == QHX_LAYER_MTP) {
                e[n] = (qhxf_entry){f->specs[k].name, qhx_bundle_dtype(&f->specs[k], f->matrices), f->specs[k].dst->rows, f->specs[k].dst->cols};
                src[n++] = &f->specs[k];
            }
        const char *name = f->matrices == QHX_Q4 ? "mtp_w4.qhx" : "mtp_w8.qhx";
        rc = write_file(f, name, QHXF_MTP, 0, 0, e, src, n, &bytes);
        json_t *mtp = qhx_json_add(plan_json, "mtp", json_object());
        json_object_set_new(mtp, "file", json_string(name));
        json_object_set_new(mtp, "layers", json_integer(1));
        if (!rc) forge_say(f, "MTP head: %.1f MB", bytes / 1e6);
    }
    if (f->o->progress) f->o->progress("forge: writing", f->total_bytes, f->total_bytes, f->o->progress_user); /* done */
    free(e);
    free(src);
    return rc;
}

