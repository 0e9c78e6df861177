/* safetensors writer: header first (offsets computed from the tensor list), then data streamed
 * tensor by tensor through a fill callback, so a multi-GB file never sits in memory. */
#ifndef QHX_SAFETENSORS_WRITE_H
#define QHX_SAFETENSORS_WRITE_H
#include <stdio.h>
#include "format/safetensors.h"

typedef struct {
    const char *name;
    qhx_dtype dtype;
    int ndim;
    const int64_t *shape;
} qhx_st_entry;

/* fill(i, buf, count, offset_elems, user) writes `count` elements of tensor i, starting at element
 * offset_elems, into buf in the tensor's dtype. Returns 0 on success. */
typedef int (*qhx_st_fill)(size_t i, void *buf, size_t count, size_t offset, void *user);

qhx_status qhx_st_write(const char *path, const qhx_st_entry *t, size_t n, qhx_st_fill fill, void *user,
                        void (*progress)(size_t bytes, void *user));

#endif
