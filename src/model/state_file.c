/* State files (qhx_snapshot_save / qhx_snapshot_load): a snapshot on disk, little-endian.
 *   header (HEADER_BYTES): "QHXSTATE", version, the model's identity, the kernel set that
 *     computed it, the shape it was taken on (layers, widths, position)
 *   payload: token ids [pos] (int32), the recurrent state (fp32, model/snapshot.h order), the KV
 *     rows of every full-attention layer (K then V, each head's [pos] rows, in the header's form:
 *     kernels/kv.h)
 *   XXH3-64 of everything before it
 * The loader checks all of it, sizes included, before it allocates state; a snapshot loaded from
 * a file is one segment [0, pos) of its own. */
#include "model/snapshot.h"
#include "kernels/kv.h"
#include "util/afile.h"
#include "util/error.h"
#include "util/mapfile.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#define MAGIC "QHXSTATE"
/* 2: the -q16 sets round activations in blocks of 64 (kernels/q8.h), so a version-1 state they
 * computed would resume with other numerics than a cold run under the same set's name.
 * 3: KV rows in a form (f32, f16, q8) the header names, their size in bytes */
#define VERSION 3
#define HEADER_BYTES 128
#define KERNELS_BYTES 32

typedef struct {
    uint32_t version, header_bytes;
    uint64_t model;
    char kernels[KERNELS_BYTES];
    int32_t pos, n_layers, hidden, vocab, kv_dim, n_full;
    uint64_t recurrent_floats, row_bytes;
    int32_t kv_form, unused;
} header;

static void fill_header(const qhx_model *m, int pos, unsigned char out[HEADER_BYTES]) {
    const qhx_config *c = &m->cfg;
    header h = {VERSION, HEADER_BYTES, m->identity, {0}, pos, c->n_layers, c->hidden, c->vocab_size,
                c->n_kv_heads * c->head_dim, 0, qhx_snapshot_recurrent_floats(c), qhx_snapshot_row_bytes(m), (int32_t)m->rt->kv, 0};
    for (int l = 0; l < c->n_layers; l++) h.n_full += c->full_attn[l];
    snprintf(h.kernels, sizeof h.kernels, "%s", m->rt->ex.ks->name);
    memset(out, 0, HEADER_BYTES);
    memcpy(out, MAGIC, 8);
    memcpy(out + 8, &h, sizeof h);
}

static uint64_t payload_bytes(int pos, uint64_t recurrent_floats, uint64_t row_bytes) {
    return (uint64_t)pos * (sizeof(int32_t) + row_bytes) + recurrent_floats * sizeof(float);
}

/* The identity a state file names its model by: a bundle's manifest (which holds every weight
 * file's XXH3), or a checkpoint's config.json, safetensors headers and a sample of their bytes
 * (hashing whole multi-GB checkpoints at every open would cost more than the state saves). */
uint64_t qhx_model_identity(const qhx_model *m) {
    if (m->manifest) return XXH3_64bits(m->manifest, strlen(m->manifest));
    if (m->src->identity) return m->src->identity;
    XXH3_state_t *st = XXH3_createState();
    if (!st) return 0;
    XXH3_64bits_reset(st);
    char *path = qhx_path_join(m->dir, "config.json"), *text = NULL;
    size_t len = 0;
    if (path && qhx_read_file(path, 1u << 24, &text, &len) == QHX_OK) XXH3_64bits_update(st, text, len);
    free(path);
    free(text);
    for (int i = 0; i < m->src->n_files; i++) {
        const qhx_mapfile *f = m->src->file(m->src, i);
        XXH3_64bits_update(st, &f->size, sizeof f->size);
        uint64_t head = 0;
        if (f->size >= 8) memcpy(&head, f->data, 8);
        const size_t header_end = 8 + (head < f->size - 8 ? head : f->size - 8);
        XXH3_64bits_update(st, f->data, f->size >= 8 ? header_end : f->size);
        for (int k = 1; k <= 64 && f->size > 4096; k++) {
            const size_t at = (f->size - 4096) / 64 * k;
            XXH3_64bits_update(st, f->data + at, 4096);
        }
    }
    const uint64_t id = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return id;
}

qhx_status qhx_snapshot_save(const qhx_snapshot *snap, const char *path) {
    if (!snap || !path) return qhx_fail(QHX_ERR_ARG, "snapshot_save: need a snapshot and a path");
    const qhx_model *m = snap->model;
    const qhx_config *c = &m->cfg;
    const size_t head = qhx_kv_head_bytes(m->rt->kv, c->head_dim);
    int32_t *tokens = malloc(sizeof(int32_t) * (snap->pos + 1));
    if (!tokens) return qhx_fail(QHX_ERR_NOMEM, "%s: out of memory", path);
    qhx_snapshot_tokens(snap, tokens, snap->pos);
    qhx_afile w;
    qhx_status rc = qhx_afile_open(&w, path, 0);
    if (!rc) {
        unsigned char h[HEADER_BYTES];
        fill_header(m, snap->pos, h);
        qhx_afile_put(&w, h, sizeof h);
        qhx_afile_put(&w, tokens, sizeof(int32_t) * snap->pos);
        qhx_afile_put(&w, snap->recurrent, sizeof(float) * qhx_snapshot_recurrent_floats(c));
        /* the segments hold each layer's rows of their own range, newest first: gather them oldest first */
        int n = 0;
        for (const qhx_kv_segment *seg = snap->kv; seg; seg = seg->parent) n++;
        const qhx_kv_segment **chain = malloc(sizeof *chain * (n + 1));
        if (!chain) w.bad = 1;
        n = 0;
        for (const qhx_kv_segment *seg = snap->kv; seg && chain; seg = seg->parent) chain[n++] = seg;
        for (int l = 0, full = 0; l < c->n_layers && chain; l++) {
            if (!c->full_attn[l]) continue;
            for (int kv = 0; kv < 2; kv++)
                for (int j = 0; j < c->n_kv_heads; j++)
                    for (int i = n - 1; i >= 0; i--) {
                        const size_t rows = (size_t)(chain[i]->row1 - chain[i]->row0);
                        qhx_afile_put(&w, chain[i]->rows + ((2 * (size_t)full + kv) * c->n_kv_heads + j) * rows * head, rows * head);
                    }
            full++;
        }
        free(chain);
        const uint64_t sum = qhx_afile_sum(&w);
        qhx_afile_put(&w, &sum, sizeof sum);
        rc = qhx_afile_close(&w, 1);
    }
    free(tokens);
    return rc;
}

/* Everything but the checksum: magic, version, model, KV form, kernel set, position and size, and
 * then the token ids (all in the vocabulary), so a file that passes is one a load takes unless its
 * bytes were damaged. */
static qhx_status check(const qhx_model *m, const qhx_mapfile *f, const char *path, header *out) {
    const qhx_config *c = &m->cfg;
    unsigned char want[HEADER_BYTES];
    fill_header(m, 0, want);
    header h, w;
    memcpy(&w, want + 8, sizeof w);
    if (f->size < HEADER_BYTES + 8 || memcmp(f->data, MAGIC, 8))
        return qhx_fail(QHX_ERR_FORMAT, "%s: not a qhexrt state file (%s)", path, f->size < HEADER_BYTES + 8 ? "too short" : "bad magic");
    memcpy(&h, f->data + 8, sizeof h);
    h.kernels[KERNELS_BYTES - 1] = 0;
    if (h.version != VERSION || h.header_bytes != HEADER_BYTES)
        return qhx_fail(QHX_ERR_UNSUPPORTED, "%s: state file version %u; this qhexrt reads version %d", path, h.version, VERSION);
    if (h.model != w.model || h.n_layers != w.n_layers || h.hidden != w.hidden || h.vocab != w.vocab || h.kv_dim != w.kv_dim ||
        h.n_full != w.n_full || h.recurrent_floats != w.recurrent_floats)
        return qhx_fail(QHX_ERR_ARG, "%s: the state of another model (identity %016llx, this one is %016llx)", path,
                        (unsigned long long)h.model, (unsigned long long)w.model);
    if (h.kv_form != w.kv_form || h.row_bytes != w.row_bytes)
        return qhx_fail(QHX_ERR_ARG, "%s: KV cache in %s; this runtime keeps it in %s (--kv)", path,
                        h.kv_form >= QHX_KV_F32 && h.kv_form <= QHX_KV_Q8 ? qhx_kv_form_name((qhx_kv_form)h.kv_form) : "an unknown form",
                        qhx_kv_form_name((qhx_kv_form)w.kv_form));
    if (strcmp(h.kernels, w.kernels))
        return qhx_fail(QHX_ERR_UNSUPPORTED, "%s: computed with kernels %s; this runtime runs %s", path, h.kernels, w.kernels);
    if (h.pos < 0 || h.pos > m->context)
        return qhx_fail(QHX_ERR_FORMAT, "%s: position %d is outside the context of %d", path, h.pos, m->context);
    const uint64_t want_size = HEADER_BYTES + payload_bytes(h.pos, h.recurrent_floats, h.row_bytes) + 8;
    if (f->size != want_size)
        return qhx_fail(QHX_ERR_FORMAT, "%s: %zu bytes where a state of %d tokens takes %llu (truncated?)", path, f->size, h.pos,
                        (unsigned long long)want_size);
    const int32_t *tokens = (const int32_t *)(f->data + HEADER_BYTES);
    for (int i = 0; i < h.pos; i++)
        if (tokens[i] < 0 || tokens[i] >= c->vocab_size)
            return qhx_fail(QHX_ERR_FORMAT, "%s: token id %d at position %d is outside the vocabulary", path, tokens[i], i);
    *out = h;
    return QHX_OK;
}

qhx_status qhx_state_file_peek(qhx_model *m, const char *path, int32_t **tokens, int *pos) {
    *tokens = NULL, *pos = 0;
    qhx_mapfile f;
    header h;
    qhx_status rc = qhx_map_open(&f, path);
    if (rc) return rc;
    if (!(rc = check(m, &f, path, &h))) {
        if ((*tokens = malloc(sizeof(int32_t) * ((size_t)h.pos + 1))))
            memcpy(*tokens, f.data + HEADER_BYTES, sizeof(int32_t) * (size_t)h.pos), *pos = h.pos;
        else
            rc = qhx_fail(QHX_ERR_NOMEM, "%s: out of memory", path);
    }
    qhx_map_close(&f);
    return rc;
}

qhx_status qhx_snapshot_load(qhx_model *m, const char *path, qhx_snapshot **out) {
    *out = NULL;
    if (!m || !path) return qhx_fail(QHX_ERR_ARG, "snapshot_load: need a model and a path");
    qhx_mapfile f;
    qhx_status rc = qhx_map_open(&f, path);
    if (rc) return rc;
    header h;
    if ((rc = check(m, &f, path, &h))) goto done;
    uint64_t sum;
    memcpy(&sum, f.data + f.size - 8, 8);
    if (XXH3_64bits(f.data, f.size - 8) != sum) {
        rc = qhx_fail(QHX_ERR_FORMAT, "%s: checksum mismatch (corrupted)", path);
        goto done;
    }
    const unsigned char *p = f.data + HEADER_BYTES;
    const int32_t *tokens = (const int32_t *)p;
    qhx_snapshot *snap;
    if ((rc = qhx_snapshot_alloc(m, h.pos, &snap))) goto done;
    const size_t rec = h.recurrent_floats, rows = (size_t)h.pos;
    p += sizeof(int32_t) * rows;
    memcpy(snap->recurrent, p, sizeof(float) * rec);
    p += sizeof(float) * rec;
    if (snap->kv) {
        memcpy(snap->kv->tokens, tokens, sizeof(int32_t) * rows);
        memcpy(snap->kv->rows, p, rows * h.row_bytes);
    }
    *out = snap;
done:
    qhx_map_close(&f);
    return rc;
}
