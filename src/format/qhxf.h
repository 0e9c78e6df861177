/* QHXF: the file format of every tensor file in a bundle (decode shards, embedding, lm-head).
 *
 *   [0, 128)            header: magic, format version, kind, target, weight layout, bundle id,
 *                       model hash, where the directory and the data are, the file's own size
 *   [dir_offset, +len)  directory: JSON {"layers": [l0, l1], "tensors": [{"name", "dtype",
 *                       "shape": [rows, cols], "offset", "nbytes", "scale_offset"?}]}
 *   [data_offset, ...)  tensor data, each tensor (and each scale vector) 64-byte aligned, so the
 *                       file is used in place through mmap.
 *
 * Integers are little-endian. Everything is validated on open before any tensor is handed out. */
#ifndef QHX_QHXF_H
#define QHX_QHXF_H
#include <stdint.h>
#include "format/safetensors.h"
#include "util/mapfile.h"
#include "util/tensor.h"

#define QHXF_MAGIC "QHXF\r\n\x1a\n" /* PNG-style: catches text-mode mangling and truncation */
#define QHXF_VERSION 1
#define QHXF_ALIGN 64
#define QHXF_HEADER_BYTES 128

typedef enum { QHXF_SHARD = 1, QHXF_EMBED = 2, QHXF_HEAD = 3, QHXF_MTP = 4 } qhxf_kind;

typedef struct {
    char magic[8];
    uint32_t version, kind;
    char target[16];        /* e.g. "cpu-x86_64" */
    char layout[24];        /* weight layout the kernels expect, e.g. "w8-r4b32" */
    uint64_t bundle_id;     /* random per forge: every file of a bundle carries the same */
    uint64_t model_hash;    /* hash of the model's architecture (the manifest's "model") */
    uint64_t dir_offset, dir_len, data_offset, file_size;
    int32_t l0, l1;         /* decode shards: layers [l0, l1) */
    uint8_t reserved[16];
} qhxf_header;
_Static_assert(sizeof(qhxf_header) == QHXF_HEADER_BYTES, "QHXF header is 128 bytes");

typedef struct {
    char *name;
    qhx_tensor t;           /* I8: with its fp32 scale per row */
} qhxf_tensor;

typedef struct {
    qhx_mapfile map;
    qhxf_header h;
    qhxf_tensor *tensors;
    int n_tensors;
} qhxf_file;

/* What a file must be to belong where the manifest puts it. */
typedef struct {
    qhxf_kind kind;
    const char *target, *layout;
    uint64_t bundle_id, model_hash;
} qhxf_expect;

qhx_status qhxf_open(qhxf_file *f, const char *path, const qhxf_expect *want, int resident);
void qhxf_close(qhxf_file *f);
const qhxf_tensor *qhxf_find(const qhxf_file *f, const char *name);

/* ---- writing ---- */

typedef struct {
    const char *name;
    qhx_dtype dtype;
    int rows, cols;          /* a vector is rows == 1 */
} qhxf_entry;

/* Bytes of a tensor's data: rows x cols of its dtype; I8 in the W8 layout (format/w8.h), Q4 in
 * the W4 one (format/w4.h). */
uint64_t qhxf_data_bytes(qhx_dtype dt, uint64_t rows, uint64_t cols);

/* fill(i, r0, r1, data, scale, user): rows [r0, r1) of tensor i into data (the tensor's dtype) and,
 * for I8, their scales. I8 data is in the W8 layout, Q4 data in the W4 one (scales inside), r0 a
 * multiple of their row group (4), and the buffer zeroed beforehand (the layout's padding).
 * Returns 0 on success, else the writer fails with the message it left. */
typedef int (*qhxf_fill)(int i, int r0, int r1, void *data, float *scale, void *user);

/* Writes the whole file (header fields other than the offsets and size come from *h) and returns
 * its XXH3-64 in *hash. On failure the file is removed. */
qhx_status qhxf_write(const char *path, const qhxf_header *h, const qhxf_entry *t, int n, qhxf_fill fill,
                      void *user, uint64_t *hash, void (*progress)(uint64_t bytes, void *user));

/* XXH3-64 of a whole file, as the manifest records it. */
qhx_status qhxf_hash_file(const char *path, uint64_t *hash);

#endif
