#include "format/safetensors.h"
#include "util/error.h"

#include "util/json.h"
#include <stdlib.h>
#include <string.h>

static const struct { const char *name; qhx_dtype dt; size_t size; } dtypes[] = {
    {"F32", QHX_F32, 4},       {"BF16", QHX_BF16, 2},     {"F16", QHX_F16, 2},
    {"F64", QHX_DT_OTHER, 8},  {"I64", QHX_DT_OTHER, 8},  {"U64", QHX_DT_OTHER, 8},
    {"I32", QHX_DT_OTHER, 4},  {"U32", QHX_DT_OTHER, 4},  {"I16", QHX_DT_OTHER, 2},
    {"U16", QHX_DT_OTHER, 2},  {"I8", QHX_DT_OTHER, 1},   {"U8", QHX_DT_OTHER, 1},
    {"BOOL", QHX_DT_OTHER, 1}, {"F8_E4M3", QHX_DT_OTHER, 1}, {"F8_E5M2", QHX_DT_OTHER, 1},
};

static qhx_status parse_entry(const char *path, const char *name, const json_t *e, qhx_st_tensor *t, size_t data_size,
                              const unsigned char *data) {
    if (!json_is_object(e)) return qhx_fail(QHX_ERR_FORMAT, "%s: tensor '%s' is not an object", path, name);
    const json_t *dt = json_object_get(e, "dtype");
    const json_t *shape = json_object_get(e, "shape");
    const json_t *offs = json_object_get(e, "data_offsets");
    if (!json_is_string(dt) || !json_is_array(shape) || !json_is_array(offs) || (int)json_array_size(offs) != 2)
        return qhx_fail(QHX_ERR_FORMAT, "%s: tensor '%s' needs dtype, shape and data_offsets [begin, end]", path, name);
    size_t esize = 0;
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
        if (!strcmp(json_string_value(dt), dtypes[i].name)) {
            t->dtype = dtypes[i].dt;
            t->dtype_name = dtypes[i].name;
            esize = dtypes[i].size;
        }
    if (!esize) return qhx_fail(QHX_ERR_FORMAT, "%s: tensor '%s' has unknown dtype '%.32s'", path, name, json_string_value(dt));
    int nd = (int)json_array_size(shape);
    if (nd > QHX_MAX_DIMS) return qhx_fail(QHX_ERR_FORMAT, "%s: tensor '%s' has %d dims (max %d)", path, name, nd, QHX_MAX_DIMS);
    t->ndim = nd;
    uint64_t numel = 1;
    for (int i = 0; i < nd; i++) {
        const json_t *d = json_array_get(shape, i);
        if (!json_is_number(d) || json_number_value(d) < 0 || json_number_value(d) > 9.0e15 ||
            json_number_value(d) != (double)(int64_t)json_number_value(d))
            return qhx_fail(QHX_ERR_FORMAT, "%s: tensor '%s' has an invalid shape", path, name);
        t->shape[i] = (int64_t)json_number_value(d);
        if (t->shape[i] && numel > UINT64_MAX / (uint64_t)t->shape[i])
            return qhx_fail(QHX_ERR_FORMAT, "%s: tensor '%s' shape overflows", path, name);
        numel *= (uint64_t)t->shape[i];
    }
    double b = json_number_value(json_array_get(offs, 0)), en = json_number_value(json_array_get(offs, 1));
    if (!json_is_number(json_array_get(offs, 0)) || !json_is_number(json_array_get(offs, 1)) ||
        b < 0 || en < b || en > (double)data_size || b != (double)(uint64_t)b || en != (double)(uint64_t)en)
        return qhx_fail(QHX_ERR_FORMAT, "%s: tensor '%s' data_offsets [%.0f, %.0f] lie outside the %zu data bytes",
                        path, name, b, en, data_size);
    uint64_t begin = (uint64_t)b, end = (uint64_t)en;
    if (numel > UINT64_MAX / esize || numel * esize != end - begin)
        return qhx_fail(QHX_ERR_FORMAT, "%s: tensor '%s' has %llu bytes for a shape that needs %llu x %zu", path,
                        name, (unsigned long long)(end - begin), (unsigned long long)numel, esize);
    t->data = data + begin;
    t->nbytes = (size_t)(end - begin);
    t->name = strdup(name);
    if (!t->name) return qhx_fail(QHX_ERR_NOMEM, "%s: out of memory", path);
    return QHX_OK;
}

qhx_status qhx_st_parse(qhx_safetensors *st, const char *path, const char *json, size_t json_len,
                        const unsigned char *data, size_t data_size) {
    json_t *root = qhx_json_parse(json, json_len);
    if (!root || !json_is_object(root)) {
        json_decref(root);
        return qhx_fail(QHX_ERR_FORMAT, "%s: safetensors header is not a JSON object", path);
    }
    const size_t n = json_object_size(root) - (json_object_get(root, "__metadata__") != NULL);
    if (n > QHX_ST_MAX_TENSORS) {
        json_decref(root);
        return qhx_fail(QHX_ERR_RANGE, "%s: header lists %zu tensors (limit %u)", path, n, QHX_ST_MAX_TENSORS);
    }
    st->tensors = calloc(n ? n : 1, sizeof *st->tensors);
    if (!st->tensors) { json_decref(root); return qhx_fail(QHX_ERR_NOMEM, "%s: out of memory", path); }
    qhx_status rc = QHX_OK;
    const char *key;
    json_t *e;
    json_object_foreach(root, key, e) {
        if (rc) break;
        if (!strcmp(key, "__metadata__")) continue;
        rc = parse_entry(path, key, e, &st->tensors[st->n_tensors], data_size, data);
        if (rc == QHX_OK) st->n_tensors++;
    }
    json_decref(root);
    if (rc) { /* a failed parse leaves nothing behind (found by fuzz_safetensors) */
        for (size_t i = 0; i < st->n_tensors; i++) free(st->tensors[i].name);
        free(st->tensors);
        st->tensors = NULL;
        st->n_tensors = 0;
    }
    return rc;
}

qhx_status qhx_st_open(qhx_safetensors *st, const char *path) {
    memset(st, 0, sizeof *st);
    qhx_status rc = qhx_map_open(&st->map, path);
    if (rc) return rc;
    const unsigned char *p = st->map.data;
    if (st->map.size < 8) { qhx_st_close(st); return qhx_fail(QHX_ERR_FORMAT, "%s: truncated (%zu bytes, no header)", path, st->map.size); }
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | p[i];
    if (hlen > QHX_ST_MAX_HEADER || hlen > st->map.size - 8) {
        size_t sz = st->map.size;
        qhx_st_close(st);
        return qhx_fail(QHX_ERR_FORMAT, "%s: header length %llu does not fit the %zu-byte file", path,
                        (unsigned long long)hlen, sz);
    }
    rc = qhx_st_parse(st, path, (const char *)p + 8, (size_t)hlen, p + 8 + hlen, st->map.size - 8 - hlen);
    if (rc) qhx_st_close(st);
    return rc;
}

void qhx_st_close(qhx_safetensors *st) {
    for (size_t i = 0; i < st->n_tensors; i++) free(st->tensors[i].name);
    free(st->tensors);
    qhx_map_close(&st->map);
    memset(st, 0, sizeof *st);
}

const qhx_st_tensor *qhx_st_find(const qhx_safetensors *st, const char *name) {
    for (size_t i = 0; i < st->n_tensors; i++)
        if (!strcmp(st->tensors[i].name, name)) return &st->tensors[i];
    return NULL;
}
