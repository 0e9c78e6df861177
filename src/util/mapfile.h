/* Read-only memory-mapped files: weights are views into the mapping, never copies. */
#ifndef QHX_MAPFILE_H
#define QHX_MAPFILE_H
#include <stddef.h>
#include "qhexrt.h"

typedef struct {
    const unsigned char *data;
    size_t size;
    char *path;
} qhx_mapfile;

qhx_status qhx_map_open(qhx_mapfile *f, const char *path);
void qhx_map_close(qhx_mapfile *f);

/* Reads a whole (small) file into a NUL-terminated heap buffer; refuses files over max_bytes. */
qhx_status qhx_read_file(const char *path, size_t max_bytes, char **out, size_t *len);

#endif
