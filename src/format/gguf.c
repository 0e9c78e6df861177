#include "format/gguf.h"
#include "format/ggml_quant.h"
#include "util/error.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A bounds-checked cursor over the header; the first failure sticks (and names what it read). */
typedef struct {
    const unsigned char *p, *end;
    const char *path;
    qhx_status rc;
} reader;

static int need(reader *r, uint64_t n, const char *what) {
    if (r->rc) return 0;
    if (n > (uint64_t)(r->end - r->p)) {
        r->rc = qhx_fail(QHX_ERR_FORMAT, "%s: truncated GGUF header (%s runs past the end)", r->path, what);
        return 0;
    }
    return 1;
}

static uint64_t rd(reader *r, int bytes, const char *what) {
    uint64_t v = 0;
    if (!need(r, (uint64_t)bytes, what)) return 0;
    memcpy(&v, r->p, (size_t)bytes); /* GGUF is little-endian, as every target of ours */
    r->p += bytes;
    return v;
}

static const char *rd_str(reader *r, size_t *len, const char *what) {
    const uint64_t n = rd(r, 8, what);
    if (!need(r, n, what)) return NULL;
    const char *s = (const char *)r->p;
    r->p += n;
    *len = (size_t)n;
    return s;
}

static int scalar_size(uint32_t type) {
    static const int sizes[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return type < sizeof sizes / sizeof *sizes ? sizes[type] : -1;
}

/* Skips one value of `type` (arrays nest at most a few deep). */
static void skip_value(reader *r, uint32_t type, int depth, const char *key) {
    if (type == QHX_GGUF_STRING) {
        size_t len;
        rd_str(r, &len, key);
    } else if (type == QHX_GGUF_ARRAY) {
        const uint32_t et = (uint32_t)rd(r, 4, key);
        const uint64_t n = rd(r, 8, key);
        if (r->rc) return;
        if (depth >= 3 || scalar_size(et) < 0) {
            r->rc = qhx_fail(QHX_ERR_FORMAT, "%s: metadata '%.80s': %s", r->path, key,
                             depth >= 3 ? "arrays nested too deep" : "array of an unknown value type");
            return;
        }
        if (et != QHX_GGUF_STRING && et != QHX_GGUF_ARRAY) {
            if (n > (uint64_t)(r->end - r->p) / (uint64_t)scalar_size(et)) need(r, UINT64_MAX, key);
            else r->p += n * (uint64_t)scalar_size(et);
            return;
        }
        /* each element takes at least 8 bytes, so n is bounded by what is left */
        if (n > (uint64_t)(r->end - r->p) / 8) need(r, UINT64_MAX, key);
        for (uint64_t i = 0; i < n && !r->rc; i++) skip_value(r, et, depth + 1, key);
    } else if (scalar_size(type) > 0) {
        if (need(r, (uint64_t)scalar_size(type), key)) r->p += scalar_size(type);
    } else {
        r->rc = qhx_fail(QHX_ERR_FORMAT, "%s: metadata '%.80s' has unknown value type %u", r->path, key, type);
    }
}

static int key_is(const qhx_gguf_kv *kv, const char *key) {
    return kv->key_len == strlen(key) && !memcmp(kv->key, key, kv->key_len);
}

const qhx_gguf_kv *qhx_gguf_find(const qhx_gguf *g, const char *key) {
    for (size_t i = 0; i < g->n_kv; i++)
        if (key_is(&g->kv[i], key)) return &g->kv[i];
    return NULL;
}

const qhx_gguf_tensor *qhx_gguf_tensor_find(const qhx_gguf *g, const char *name) {
    for (size_t i = 0; i < g->n_tensors; i++)
        if (!strcmp(g->tensors[i].name, name)) return &g->tensors[i];
    return NULL;
}

static qhx_status read_kv(qhx_gguf *g, reader *r) {
    for (size_t i = 0; i < g->n_kv && !r->rc; i++) {
        qhx_gguf_kv *kv = &g->kv[i];
        kv->key = rd_str(r, &kv->key_len, "a metadata key");
        kv->type = (uint32_t)rd(r, 4, "a metadata type");
        if (r->rc) break;
        char key[96];
        snprintf(key, sizeof key, "%.*s", (int)(kv->key_len < 80 ? kv->key_len : 80), kv->key);
        if (memchr(kv->key, 0, kv->key_len))
            return qhx_fail(QHX_ERR_FORMAT, "%s: metadata key %zu holds a NUL byte", g->path, i);
        for (size_t k = 0; k < i; k++)
            if (g->kv[k].key_len == kv->key_len && !memcmp(g->kv[k].key, kv->key, kv->key_len))
                return qhx_fail(QHX_ERR_FORMAT, "%s: metadata key '%s' appears twice", g->path, key);
        const unsigned char *at = r->p;
        if (kv->type == QHX_GGUF_ARRAY) {
            kv->arr_type = (uint32_t)rd(r, 4, key);
            kv->arr_n = rd(r, 8, key);
            r->p = at;
            kv->val = at + 12;
        } else {
            kv->val = at;
        }
        skip_value(r, kv->type, 0, key);
    }
    return r->rc;
}

static qhx_status read_tensors(qhx_gguf *g, reader *r, const unsigned char *file) {
    for (size_t i = 0; i < g->n_tensors && !r->rc; i++) {
        qhx_gguf_tensor *t = &g->tensors[i];
        size_t len;
        const char *name = rd_str(r, &len, "a tensor name");
        if (r->rc) break;
        if (len > 1024 || memchr(name, 0, len)) return qhx_fail(QHX_ERR_FORMAT, "%s: tensor %zu has a bad name", g->path, i);
        if (!(t->name = malloc(len + 1))) return qhx_fail(QHX_ERR_NOMEM, "out of memory");
        memcpy(t->name, name, len);
        t->name[len] = 0;
        const uint32_t nd = (uint32_t)rd(r, 4, t->name);
        if (!r->rc && (nd < 1 || nd > 4)) return qhx_fail(QHX_ERR_FORMAT, "%s: tensor '%s' has %u dimensions (1 to 4)", g->path, t->name, nd);
        t->n_dims = (int)nd;
        uint64_t count = 1;
        for (uint32_t d = 0; d < 4; d++) {
            const uint64_t ne = d < nd ? rd(r, 8, t->name) : 1;
            if (!r->rc && (ne < 1 || ne > (1ull << 40) || count > (1ull << 42) / ne))
                return qhx_fail(QHX_ERR_FORMAT, "%s: tensor '%s' has an absurd shape", g->path, t->name);
            t->ne[d] = (int64_t)ne;
            count *= ne;
        }
        t->type = (uint32_t)rd(r, 4, t->name);
        const uint64_t off = rd(r, 8, t->name);
        if (r->rc) break;
        const int bv = qhx_ggml_block_values(t->type);
        if (!bv) {
            const char *tn = qhx_ggml_type_name(t->type);
            return qhx_fail(QHX_ERR_UNSUPPORTED, "%s: tensor '%s' has ggml type %u (%s); this reader decodes %s", g->path, t->name,
                            t->type, tn ? tn : "unknown", qhx_ggml_supported());
        }
        if (t->ne[0] % bv)
            return qhx_fail(QHX_ERR_FORMAT, "%s: tensor '%s': rows of %" PRId64 " are not whole %s blocks of %d", g->path, t->name,
                            t->ne[0], qhx_ggml_type_name(t->type), bv);
        t->nbytes = count / (uint64_t)bv * qhx_ggml_block_bytes(t->type);
        t->data = (const unsigned char *)(uintptr_t)off; /* relative until the data section is known */
        for (size_t k = 0; k < i; k++)
            if (!strcmp(g->tensors[k].name, t->name)) return qhx_fail(QHX_ERR_FORMAT, "%s: tensor '%s' appears twice", g->path, t->name);
    }
    if (r->rc) return r->rc;
    const uint64_t header = (uint64_t)(r->p - file);
    const uint64_t data = (header + g->alignment - 1) / g->alignment * g->alignment;
    const uint64_t size = (uint64_t)(r->end - file), avail = data <= size ? size - data : 0;
    for (size_t i = 0; i < g->n_tensors; i++) {
        qhx_gguf_tensor *t = &g->tensors[i];
        const uint64_t off = (uint64_t)(uintptr_t)t->data;
        if (off % g->alignment)
            return qhx_fail(QHX_ERR_FORMAT, "%s: tensor '%s' at offset %" PRIu64 " is not %" PRIu64 "-byte aligned", g->path, t->name, off,
                            g->alignment);
        if (off > avail || t->nbytes > avail - off)
            return qhx_fail(QHX_ERR_FORMAT, "%s: tensor '%s' (%" PRIu64 " bytes at data offset %" PRIu64 ") lies outside the file "
                            "(truncated?)", g->path, t->name, t->nbytes, off);
        t->data = file + data + off;
    }
    return QHX_OK;
}

qhx_status qhx_gguf_parse(qhx_gguf *g, const char *path, const unsigned char *p, size_t n) {
    g->path = path;
    reader r = {p, p + n, path, QHX_OK};
    if (n < 4 || memcmp(p, QHX_GGUF_MAGIC, 4)) return qhx_fail(QHX_ERR_FORMAT, "%s: not a GGUF file (no GGUF magic)", path);
    r.p += 4;
    g->version = (uint32_t)rd(&r, 4, "the version");
    if (!r.rc && (g->version < 2 || g->version > 3))
        return qhx_fail(QHX_ERR_UNSUPPORTED, "%s: GGUF version %u is not supported (2 or 3)", path, g->version);
    const uint64_t nt = rd(&r, 8, "the tensor count"), nkv = rd(&r, 8, "the metadata count");
    if (r.rc) return r.rc;
    if (nt > QHX_GGUF_MAX_COUNT || nkv > QHX_GGUF_MAX_COUNT)
        return qhx_fail(QHX_ERR_FORMAT, "%s: absurd counts (%" PRIu64 " tensors, %" PRIu64 " metadata entries)", path, nt, nkv);
    if (nkv * 13 + nt * 32 > n) /* the least each entry takes */
        return qhx_fail(QHX_ERR_FORMAT, "%s: truncated GGUF header (%" PRIu64 " metadata entries and %" PRIu64 " tensors cannot fit in %zu bytes)",
                        path, nkv, nt, n);
    g->n_kv = (size_t)nkv;
    g->n_tensors = (size_t)nt;
    g->kv = calloc(g->n_kv + 1, sizeof *g->kv);
    g->tensors = calloc(g->n_tensors + 1, sizeof *g->tensors);
    if (!g->kv || !g->tensors) return qhx_fail(QHX_ERR_NOMEM, "out of memory");
    qhx_status rc = read_kv(g, &r);
    if (rc) return rc;
    int64_t align = 32;
    if ((rc = qhx_gguf_int(g, "general.alignment", 1, &align))) return rc;
    if (align < 1 || align > (1 << 20) || (align & (align - 1)))
        return qhx_fail(QHX_ERR_FORMAT, "%s: general.alignment %" PRId64 " is not a power of two up to 1 MiB", path, align);
    g->alignment = (uint64_t)align;
    return read_tensors(g, &r, p);
}

qhx_status qhx_gguf_open(qhx_gguf *g, const char *path) {
    memset(g, 0, sizeof *g);
    qhx_status rc = qhx_map_open(&g->map, path);
    if (!rc) rc = qhx_gguf_parse(g, g->map.path, g->map.data, g->map.size);
    if (rc) qhx_gguf_close(g);
    return rc;
}

void qhx_gguf_close(qhx_gguf *g) {
    for (size_t i = 0; g->tensors && i < g->n_tensors; i++) free(g->tensors[i].name);
    free(g->tensors);
    free(g->kv);
    qhx_map_close(&g->map); /* an empty file maps nothing but has its path */
    memset(g, 0, sizeof *g);
}

static qhx_status lookup(const qhx_gguf *g, const char *key, int optional, const qhx_gguf_kv **kv) {
    *kv = qhx_gguf_find(g, key);
    if (!*kv && !optional) return qhx_fail(QHX_ERR_FORMAT, "%s: missing metadata key '%s'", g->path, key);
    return QHX_OK;
}

static qhx_status wrong_type(const qhx_gguf *g, const char *key, const char *want) {
    return qhx_fail(QHX_ERR_FORMAT, "%s: metadata '%s' is not %s", g->path, key, want);
}

qhx_status qhx_gguf_int(const qhx_gguf *g, const char *key, int optional, int64_t *out) {
    const qhx_gguf_kv *kv;
    qhx_status rc = lookup(g, key, optional, &kv);
    if (rc || !kv) return rc;
    uint64_t u = 0;
    const int size = scalar_size(kv->type);
    if (kv->type == QHX_GGUF_F32 || kv->type == QHX_GGUF_BOOL || kv->type == QHX_GGUF_F64 || size < 1)
        return wrong_type(g, key, "an integer");
    memcpy(&u, kv->val, (size_t)size);
    const int is_signed = kv->type == QHX_GGUF_I8 || kv->type == QHX_GGUF_I16 || kv->type == QHX_GGUF_I32 || kv->type == QHX_GGUF_I64;
    if (is_signed && size < 8 && (u >> (8 * size - 1)) & 1) u |= ~0ull << (8 * size); /* sign-extend */
    if (!is_signed && u > INT64_MAX) return wrong_type(g, key, "an integer in range");
    *out = (int64_t)u;
    return QHX_OK;
}

qhx_status qhx_gguf_float(const qhx_gguf *g, const char *key, int optional, double *out) {
    const qhx_gguf_kv *kv;
    qhx_status rc = lookup(g, key, optional, &kv);
    if (rc || !kv) return rc;
    if (kv->type == QHX_GGUF_F32) {
        float f;
        memcpy(&f, kv->val, 4);
        *out = f;
    } else if (kv->type == QHX_GGUF_F64) {
        memcpy(out, kv->val, 8);
    } else {
        int64_t i;
        if (qhx_gguf_int(g, key, 0, &i)) return wrong_type(g, key, "a number");
        *out = (double)i;
    }
    return QHX_OK;
}

qhx_status qhx_gguf_string(const qhx_gguf *g, const char *key, int optional, const char **s, size_t *len) {
    const qhx_gguf_kv *kv;
    qhx_status rc = lookup(g, key, optional, &kv);
    if (rc || !kv) return rc;
    if (kv->type != QHX_GGUF_STRING) return wrong_type(g, key, "a string");
    const unsigned char *c = kv->val;
    *s = qhx_gguf_next_string(&c, len);
    return QHX_OK;
}

qhx_status qhx_gguf_array(const qhx_gguf *g, const char *key, int optional, uint32_t elem_type, const qhx_gguf_kv **out) {
    qhx_status rc = lookup(g, key, optional, out);
    if (rc || !*out) return rc;
    if ((*out)->type != QHX_GGUF_ARRAY || (*out)->arr_type != elem_type) {
        static const char *const names[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64"};
        char want[32];
        snprintf(want, sizeof want, "an array of %s", elem_type < 13 ? names[elem_type] : "?");
        return wrong_type(g, key, want);
    }
    return QHX_OK;
}

const char *qhx_gguf_next_string(const unsigned char **cursor, size_t *len) {
    uint64_t n;
    memcpy(&n, *cursor, 8);
    const char *s = (const char *)*cursor + 8;
    *cursor += 8 + n;
    *len = (size_t)n;
    return s;
}
