/* GGUF reader (llama.cpp's model file, versions 2 and 3): a header, typed metadata, a tensor
 * directory, then aligned tensor data. The file is memory-mapped; metadata values and tensors are
 * views. Every length, count, offset and type is validated on open, so later walks are in bounds. */
#ifndef QHX_GGUF_H
#define QHX_GGUF_H
#include <stddef.h>
#include <stdint.h>
#include "qhexrt.h"
#include "util/mapfile.h"

enum {
    QHX_GGUF_U8, QHX_GGUF_I8, QHX_GGUF_U16, QHX_GGUF_I16, QHX_GGUF_U32, QHX_GGUF_I32, QHX_GGUF_F32,
    QHX_GGUF_BOOL, QHX_GGUF_STRING, QHX_GGUF_ARRAY, QHX_GGUF_U64, QHX_GGUF_I64, QHX_GGUF_F64
};

typedef struct {
    const char *key;            /* not NUL-terminated: key_len bytes */
    size_t key_len;
    uint32_t type;
    const unsigned char *val;   /* the value's bytes; for an array, its first element */
    uint32_t arr_type;          /* arrays: element type and count */
    uint64_t arr_n;
} qhx_gguf_kv;

typedef struct {
    char *name;
    int n_dims;
    int64_t ne[4];              /* ggml order: ne[0] is the row length */
    uint32_t type;              /* a ggml type (format/ggml_quant.h) */
    const unsigned char *data;
    uint64_t nbytes;
} qhx_gguf_tensor;

typedef struct qhx_gguf {
    qhx_mapfile map;
    const char *path;
    uint32_t version;
    uint64_t alignment;
    qhx_gguf_kv *kv;
    size_t n_kv;
    qhx_gguf_tensor *tensors;
    size_t n_tensors;
} qhx_gguf;

#define QHX_GGUF_MAGIC "GGUF"
#define QHX_GGUF_MAX_COUNT (1u << 24) /* metadata entries, tensors */

qhx_status qhx_gguf_open(qhx_gguf *g, const char *path);
/* Parses a file already in memory (open and the fuzzer); g->map is left to the caller. */
qhx_status qhx_gguf_parse(qhx_gguf *g, const char *path, const unsigned char *p, size_t n);
void qhx_gguf_close(qhx_gguf *g);

const qhx_gguf_kv *qhx_gguf_find(const qhx_gguf *g, const char *key);
const qhx_gguf_tensor *qhx_gguf_tensor_find(const qhx_gguf *g, const char *name);

/* Typed reads of a scalar key; QHX_ERR_FORMAT naming the file and key when it is missing (and
 * not `optional`) or has another type. Integers of any width and sign are accepted when the
 * value fits. */
qhx_status qhx_gguf_int(const qhx_gguf *g, const char *key, int optional, int64_t *out);
qhx_status qhx_gguf_float(const qhx_gguf *g, const char *key, int optional, double *out);
/* A string value: *s points into the file, *len bytes. */
qhx_status qhx_gguf_string(const qhx_gguf *g, const char *key, int optional, const char **s, size_t *len);
/* An array of elem_type (QHX_GGUF_STRING arrays are walked with qhx_gguf_next_string). */
qhx_status qhx_gguf_array(const qhx_gguf *g, const char *key, int optional, uint32_t elem_type, const qhx_gguf_kv **out);
/* The string at *cursor (start at kv->val), then *cursor moves past it. */
const char *qhx_gguf_next_string(const unsigned char **cursor, size_t *len);

#endif
