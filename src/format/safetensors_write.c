#include "format/safetensors_write.h"
#include "util/error.h"

#include "util/json.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *dtype_name(qhx_dtype dt) { return dt == QHX_F32 ? "F32" : dt == QHX_F16 ? "F16" : "BF16"; }

static size_t numel(const qhx_st_entry *e) {
    size_t n = 1;
    for (int d = 0; d < e->ndim; d++) n *= (size_t)e->shape[d];
    return n;
}

qhx_status qhx_st_write(const char *path, const qhx_st_entry *t, size_t n, qhx_st_fill fill, void *user,
                        void (*progress)(size_t bytes, void *user)) {
    json_t *root = json_pack("{s:{s:s}}", "__metadata__", "format", "pt");
    size_t off = 0;
    for (size_t i = 0; root && i < n; i++) {
        json_t *shape = json_array();
        for (int d = 0; d < t[i].ndim; d++) json_array_append_new(shape, json_integer((json_int_t)t[i].shape[d]));
        const size_t bytes = numel(&t[i]) * qhx_dtype_size(t[i].dtype);
        json_object_set_new(root, t[i].name,
                            json_pack("{s:s, s:o, s:[I, I]}", "dtype", dtype_name(t[i].dtype), "shape", shape, "data_offsets",
                                      (json_int_t)off, (json_int_t)(off + bytes)));
        off += bytes;
    }
    char *json = root ? qhx_json_canonical(root) : NULL; /* byte for byte what earlier writers wrote */
    json_decref(root);
    if (!json) return qhx_fail(QHX_ERR_NOMEM, "%s: out of memory", path);
    size_t hlen = strlen(json), padded = qhx_round_up(hlen, 8); /* data stays 8-byte aligned */
    FILE *f = fopen(path, "wb");
    if (!f) { free(json); return qhx_fail(QHX_ERR_IO, "%s: %s", path, strerror(errno)); }
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    int ok = fwrite(len8, 1, 8, f) == 8 && fwrite(json, 1, hlen, f) == hlen;
    for (size_t i = hlen; ok && i < padded; i++) ok = fputc(' ', f) != EOF;
    free(json);

    enum { BUF_ELEMS = 1 << 20 };
    void *buf = malloc(BUF_ELEMS * 4);
    ok = ok && buf;
    size_t written = 0;
    for (size_t i = 0; ok && i < n; i++) {
        const size_t total = numel(&t[i]), es = qhx_dtype_size(t[i].dtype);
        for (size_t done = 0; ok && done < total; done += BUF_ELEMS) {
            size_t cnt = total - done < BUF_ELEMS ? total - done : BUF_ELEMS;
            ok = fill(i, buf, cnt, done, user) == 0 && fwrite(buf, es, cnt, f) == cnt;
            written += cnt * es;
            if (progress) progress(written, user);
        }
    }
    free(buf);
    ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
    ok = (fclose(f) == 0) && ok;
    if (!ok) return qhx_fail(QHX_ERR_IO, "%s: write failed: %s", path, strerror(errno));
    return QHX_OK;
}
