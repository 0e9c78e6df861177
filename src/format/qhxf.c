#include "format/qhxf.h"
#include "format/w4.h"
#include "format/w8.h"
#include "util/error.h"

#include "util/json.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

static const char *const dtype_names[] = {"f32", "bf16", "f16", "i8", "q4"};
#define N_DTYPES (int)(sizeof dtype_names / sizeof *dtype_names)

static uint64_t align_up(uint64_t x) { return qhx_round_up(x, QHXF_ALIGN); }

uint64_t qhxf_data_bytes(qhx_dtype dt, uint64_t rows, uint64_t cols) {
    return dt == QHX_I8 ? qhx_w8_bytes(rows, cols) : dt == QHX_Q4 ? qhx_w4_bytes(rows, cols) : rows * cols * qhx_dtype_size(dt);
}

static const char *kind_name(uint32_t k) {
    return k == QHXF_SHARD ? "decode shard" : k == QHXF_EMBED ? "embedding" : k == QHXF_HEAD ? "lm-head" : k == QHXF_MTP ? "MTP head" : "unknown";
}

/* fixed-size string fields are NUL-padded; a field without a NUL is corrupt */
static int field_eq(const char *field, size_t size, const char *want) {
    return memchr(field, 0, size) && !strcmp(field, want);
}

static qhx_status parse_dir(qhxf_file *f, const char *path) {
    const qhxf_header *h = &f->h;
    json_t *root = qhx_json_parse((const char *)f->map.data + h->dir_offset, h->dir_len);
    const json_t *list = root ? json_object_get(root, "tensors") : NULL;
    if (!json_is_array(list)) {
        json_decref(root);
        return qhx_fail(QHX_ERR_FORMAT, "%s: tensor directory is not valid JSON with a 'tensors' list", path);
    }
    int n = (int)json_array_size(list);
    f->tensors = calloc(n ? (size_t)n : 1, sizeof *f->tensors);
    if (!f->tensors) { json_decref(root); return qhx_fail(QHX_ERR_NOMEM, "%s: out of memory", path); }
    qhx_status rc = QHX_OK;
    size_t k;
    const json_t *e;
    json_array_foreach(list, k, e) {
        const json_t *name = json_object_get(e, "name"), *dt = json_object_get(e, "dtype");
        const json_t *shape = json_object_get(e, "shape"), *off = json_object_get(e, "offset");
        const json_t *sc = json_object_get(e, "scale_offset");
        if (!json_is_string(name) || !json_is_string(dt) || !json_is_array(shape) || (int)json_array_size(shape) != 2 ||
            !json_is_number(off)) {
            rc = qhx_fail(QHX_ERR_FORMAT, "%s: directory entry %d lacks name, dtype, shape [rows, cols] or offset", path,
                          f->n_tensors);
            break;
        }
        qhxf_tensor *ft = &f->tensors[f->n_tensors];
        qhx_tensor *t = &ft->t;
        int d = 0;
        while (d < N_DTYPES && strcmp(dtype_names[d], json_string_value(dt))) d++;
        const double rows = json_number_value(json_array_get(shape, 0)), cols = json_number_value(json_array_get(shape, 1));
        const double o = json_number_value(off);
        if (d == N_DTYPES || rows < 1 || cols < 1 || rows > 1e9 || cols > 1e9 || o < 0 || o > 1e18 || o != (double)(uint64_t)o ||
            (sc && !json_is_number(sc))) {
            rc = qhx_fail(QHX_ERR_FORMAT, "%s: tensor '%s' has a bad dtype, shape or offset", path, json_string_value(name));
            break;
        }
        t->dtype = (qhx_dtype)d;
        t->rows = (int)rows;
        t->cols = (int)cols;
        const uint64_t bytes = qhxf_data_bytes(t->dtype, t->rows, t->cols), start = (uint64_t)o;
        if (start % QHXF_ALIGN || start < h->data_offset || start > h->file_size || bytes > h->file_size - start) {
            rc = qhx_fail(QHX_ERR_FORMAT, "%s: tensor '%s' data [%llu, +%llu) is misaligned or outside the file", path,
                          json_string_value(name), (unsigned long long)start, (unsigned long long)bytes);
            break;
        }
        t->data = f->map.data + start;
        if (t->dtype == QHX_I8) {
            const double so = sc ? json_number_value(sc) : -1;
            const uint64_t sbytes = 4 * (uint64_t)t->rows;
            if (so < 0 || so != (double)(uint64_t)so || (uint64_t)so % QHXF_ALIGN || (uint64_t)so < h->data_offset ||
                (uint64_t)so > h->file_size || sbytes > h->file_size - (uint64_t)so) {
                rc = qhx_fail(QHX_ERR_FORMAT, "%s: int8 tensor '%s' has no valid scale_offset", path, json_string_value(name));
                break;
            }
            t->scale = (const float *)(f->map.data + (uint64_t)so);
        }
        ft->name = strdup(json_string_value(name));
        if (!ft->name) { rc = qhx_fail(QHX_ERR_NOMEM, "%s: out of memory", path); break; }
        f->n_tensors++;
    }
    json_decref(root);
    return rc;
}

qhx_status qhxf_open(qhxf_file *f, const char *path, const qhxf_expect *want, int resident) {
    memset(f, 0, sizeof *f);
    qhx_status rc = resident ? qhx_map_open_resident(&f->map, path) : qhx_map_open(&f->map, path);
    if (rc) return rc;
    qhxf_header *h = &f->h;
    if (f->map.size < QHXF_HEADER_BYTES || memcmp(f->map.data, QHXF_MAGIC, 8)) {
        rc = qhx_fail(QHX_ERR_FORMAT, "%s: not a qhexrt bundle file (bad magic or shorter than its header)", path);
        goto fail;
    }
    memcpy(h, f->map.data, sizeof *h);
    if (h->version != QHXF_VERSION) {
        rc = qhx_fail(QHX_ERR_UNSUPPORTED, "%s: format version %u, this qhexrt reads version %d", path, h->version, QHXF_VERSION);
        goto fail;
    }
    if (h->file_size != f->map.size) {
        rc = qhx_fail(QHX_ERR_FORMAT, "%s: %zu bytes, its header says %llu (truncated or appended to)", path, f->map.size,
                      (unsigned long long)h->file_size);
        goto fail;
    }
    if (h->dir_offset < QHXF_HEADER_BYTES || h->dir_offset > h->file_size || h->dir_len > h->file_size - h->dir_offset ||
        h->data_offset < h->dir_offset + h->dir_len || h->data_offset > h->file_size) {
        rc = qhx_fail(QHX_ERR_FORMAT, "%s: directory or data offsets lie outside the file", path);
        goto fail;
    }
    if (want) {
        if (h->kind != (uint32_t)want->kind) {
            rc = qhx_fail(QHX_ERR_FORMAT, "%s: is a %s file, the manifest uses it as a %s", path, kind_name(h->kind),
                          kind_name(want->kind));
            goto fail;
        }
        if (!field_eq(h->target, sizeof h->target, want->target) || !field_eq(h->layout, sizeof h->layout, want->layout)) {
            rc = qhx_fail(QHX_ERR_UNSUPPORTED, "%s: built for target '%.16s' with layout '%.24s', need '%s' / '%s'", path,
                          h->target, h->layout, want->target, want->layout);
            goto fail;
        }
        if (h->model_hash != want->model_hash) {
            rc = qhx_fail(QHX_ERR_FORMAT, "%s: belongs to another model (model hash %016llx, manifest %016llx)", path,
                          (unsigned long long)h->model_hash, (unsigned long long)want->model_hash);
            goto fail;
        }
        if (h->bundle_id != want->bundle_id) {
            rc = qhx_fail(QHX_ERR_FORMAT, "%s: belongs to another bundle (id %016llx, manifest %016llx)", path,
                          (unsigned long long)h->bundle_id, (unsigned long long)want->bundle_id);
            goto fail;
        }
    }
    if ((rc = parse_dir(f, path))) goto fail;
    return QHX_OK;
fail:
    qhxf_close(f);
    return rc;
}

void qhxf_close(qhxf_file *f) {
    for (int i = 0; i < f->n_tensors; i++) free(f->tensors[i].name);
    free(f->tensors);
    qhx_map_close(&f->map);
    memset(f, 0, sizeof *f);
}

const qhxf_tensor *qhxf_find(const qhxf_file *f, const char *name) {
    for (int i = 0; i < f->n_tensors; i++)
        if (!strcmp(f->tensors[i].name, name)) return &f->tensors[i];
    return NULL;
}

/* ---- writing ---- */

typedef struct {
    FILE *fp;
    const char *path;
    uint64_t pos;
    XXH3_state_t *xx;
} out_file;

static int put(out_file *o, const void *p, size_t n) {
    if (n && fwrite(p, 1, n, o->fp) != n) return -1;
    XXH3_64bits_update(o->xx, p, n);
    o->pos += n;
    return 0;
}

static int pad_to(out_file *o, uint64_t at) {
    static const unsigned char zeros[QHXF_ALIGN];
    while (o->pos < at) {
        size_t n = at - o->pos < sizeof zeros ? (size_t)(at - o->pos) : sizeof zeros;
        if (put(o, zeros, n)) return -1;
    }
    return 0;
}

qhx_status qhxf_write(const char *path, const qhxf_header *hdr, const qhxf_entry *t, int n, qhxf_fill fill,
                      void *user, uint64_t *hash, void (*progress)(uint64_t bytes, void *user)) {
    /* lay out: directory right after the header, data from the next aligned offset */
    uint64_t *off = calloc((size_t)n * 2 + 1, sizeof *off);
    json_t *root = json_object();
    char *dir = NULL;
    qhx_status rc = QHX_OK;
    if (!off || !root) { rc = qhx_fail(QHX_ERR_NOMEM, "%s: out of memory", path); goto done; }
    if (hdr->kind == QHXF_SHARD) json_object_set_new(root, "layers", json_pack("[i, i]", hdr->l0, hdr->l1));
    /* two passes: the directory's length moves data_offset, which moves every offset in it */
    uint64_t data_offset = QHXF_HEADER_BYTES;
    for (int pass = 0; pass < 2; pass++) {
        uint64_t at = data_offset;
        json_t *list = json_array();
        json_object_set_new(root, "tensors", list);
        for (int i = 0; i < n; i++) {
            at = align_up(at);
            off[2 * i] = at;
            const uint64_t nbytes = qhxf_data_bytes(t[i].dtype, t[i].rows, t[i].cols);
            json_t *e = json_pack("{s:s, s:s, s:[i, i], s:I, s:I}", "name", t[i].name, "dtype", dtype_names[t[i].dtype], "shape",
                                  t[i].rows, t[i].cols, "offset", (json_int_t)at, "nbytes", (json_int_t)nbytes);
            at += nbytes;
            if (t[i].dtype == QHX_I8) {
                at = align_up(at);
                off[2 * i + 1] = at;
                json_object_set_new(e, "scale_offset", json_integer((json_int_t)at));
                at += 4 * (uint64_t)t[i].rows;
            }
            json_array_append_new(list, e);
        }
        off[2 * n] = at;
        free(dir);
        dir = qhx_json_canonical(root);
        if (!dir) { rc = qhx_fail(QHX_ERR_NOMEM, "%s: out of memory", path); goto done; }
        /* the first pass's directory, padded generously, sets where the data starts; the
         * second pass's offsets (longer numbers, 8 digits a tensor at most) must still fit */
        if (pass == 0) data_offset = align_up(QHXF_HEADER_BYTES + strlen(dir) + 64 + 16 * (uint64_t)n);
    }
    qhxf_header h = *hdr;
    memcpy(h.magic, QHXF_MAGIC, 8);
    h.version = QHXF_VERSION;
    h.dir_offset = QHXF_HEADER_BYTES;
    h.dir_len = strlen(dir);
    h.data_offset = data_offset;
    h.file_size = align_up(off[2 * n]);
    if (h.dir_offset + h.dir_len > h.data_offset) { rc = qhx_fail(QHX_ERR_FORMAT, "%s: directory layout", path); goto done; }

    out_file o = {fopen(path, "wbx"), path, 0, XXH3_createState()};
    if (!o.fp || !o.xx) {
        rc = qhx_fail(QHX_ERR_IO, "%s: %s", path, o.fp ? "out of memory" : strerror(errno));
        if (o.fp) fclose(o.fp);
        XXH3_freeState(o.xx);
        goto done;
    }
    XXH3_64bits_reset(o.xx);
    int bad = put(&o, &h, sizeof h) || put(&o, dir, h.dir_len);
    void *buf = NULL;
    float *sbuf = NULL;
    for (int i = 0; i < n && !bad; i++) {
        /* W8 and W4 are written in whole row groups (of 4 rows, both) */
        const size_t row = qhxf_data_bytes(t[i].dtype, 1, t[i].cols) / (t[i].dtype == QHX_I8 || t[i].dtype == QHX_Q4 ? QHX_W8_GROUP : 1);
        int step = (int)((16u << 20) / row);
        const int rows = (t[i].rows + QHX_W8_GROUP - 1) / QHX_W8_GROUP * QHX_W8_GROUP; /* no more than the tensor */
        if (step > rows) step = rows;
        if (step < QHX_W8_GROUP) step = QHX_W8_GROUP; /* whole W8 row groups */
        step -= step % QHX_W8_GROUP;
        free(buf);
        free(sbuf);
        buf = malloc((size_t)step * row);
        sbuf = malloc(sizeof(float) * (size_t)t[i].rows);
        if (!buf || !sbuf) { bad = 1; qhx_fail(QHX_ERR_NOMEM, "%s: out of memory", path); break; }
        if (pad_to(&o, off[2 * i])) { bad = 1; break; }
        for (int r = 0; r < t[i].rows && !bad; r += step) {
            const int r1 = r + step < t[i].rows ? r + step : t[i].rows;
            const size_t bytes = qhxf_data_bytes(t[i].dtype, (uint64_t)(r1 - r), (uint64_t)t[i].cols);
            memset(buf, 0, bytes);
            if (fill(i, r, r1, buf, sbuf + r, user)) { bad = 2; break; }
            if (put(&o, buf, bytes)) bad = 1;
            if (progress) progress(o.pos, user);
        }
        if (!bad && t[i].dtype == QHX_I8) bad = pad_to(&o, off[2 * i + 1]) || put(&o, sbuf, 4 * (size_t)t[i].rows);
    }
    free(buf);
    free(sbuf);
    if (!bad) bad = pad_to(&o, h.file_size);
    if (fflush(o.fp) || fsync(fileno(o.fp))) bad = bad ? bad : 1;
    if (fclose(o.fp) && !bad) bad = 1;
    *hash = XXH3_64bits_digest(o.xx);
    XXH3_freeState(o.xx);
    if (bad) {
        rc = bad == 1 ? qhx_fail(QHX_ERR_IO, "%s: write failed: %s", path, strerror(errno)) : QHX_ERR_FORMAT;
        remove(path);
    }
done:
    free(off);
    free(dir);
    json_decref(root);
    return rc;
}

qhx_status qhxf_hash_file(const char *path, uint64_t *hash) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return qhx_fail(QHX_ERR_IO, "%s: %s", path, strerror(errno));
    XXH3_state_t *xx = XXH3_createState();
    enum { BUF = 1 << 20 };
    unsigned char *buf = malloc(BUF);
    if (!xx || !buf) {
        fclose(fp);
        XXH3_freeState(xx);
        free(buf);
        return qhx_fail(QHX_ERR_NOMEM, "%s: out of memory", path);
    }
    XXH3_64bits_reset(xx);
    size_t got;
    while ((got = fread(buf, 1, BUF, fp)) > 0) XXH3_64bits_update(xx, buf, got);
    int err = ferror(fp);
    fclose(fp);
    *hash = XXH3_64bits_digest(xx);
    XXH3_freeState(xx);
    free(buf);
    return err ? qhx_fail(QHX_ERR_IO, "%s: read error", path) : QHX_OK;
}
