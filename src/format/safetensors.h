/* safetensors reader: an 8-byte little-endian header length, a JSON tensor table, then raw data.
 * The file is memory-mapped; tensors are views. Every offset and size is validated on open. */
#ifndef QHX_SAFETENSORS_H
#define QHX_SAFETENSORS_H
#include <stddef.h>
#include <stdint.h>
#include "qhexrt.h"
#include "util/mapfile.h"
#include "util/tensor.h"

#define QHX_MAX_DIMS 8

typedef struct {
    char *name;
    qhx_dtype dtype;
    const char *dtype_name;  /* as written in the file, e.g. "BF16" */
    int ndim;
    int64_t shape[QHX_MAX_DIMS];
    const void *data;
    size_t nbytes;
} qhx_st_tensor;

typedef struct {
    qhx_mapfile map;
    qhx_st_tensor *tensors;
    size_t n_tensors;
} qhx_safetensors;

/* Limits that keep a hostile header from costing unbounded memory or time. */
#define QHX_ST_MAX_HEADER (100u << 20)
#define QHX_ST_MAX_TENSORS 1000000u

qhx_status qhx_st_open(qhx_safetensors *st, const char *path);
/* Parses a header already in memory (used by open and by the fuzzer); data_size = bytes after it. */
qhx_status qhx_st_parse(qhx_safetensors *st, const char *path, const char *json, size_t json_len,
                        const unsigned char *data, size_t data_size);
void qhx_st_close(qhx_safetensors *st);
const qhx_st_tensor *qhx_st_find(const qhx_safetensors *st, const char *name);

#endif
