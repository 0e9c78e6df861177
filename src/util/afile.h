/* The one way a file is written: under a temporary name beside it, synced, then renamed into place,
 * so that a reader never sees half a file and a failure leaves no debris; the bytes from hash_from on
 * feed an XXH3-64 checksum the writer can store. (Bundles are directories: util/outdir.h.) */
#ifndef QHX_AFILE_H
#define QHX_AFILE_H
#include <stdint.h>
#include <stdio.h>
#include <xxhash.h>
#include "qhexrt.h"

typedef struct {
    FILE *f;
    char *tmp;
    const char *path;
    XXH3_state_t *sum;
    uint64_t at, hash_from;
    int bad;            /* a write failed: closing will not put the file in place */
} qhx_afile;

/* Opens path's temporary file (hash_from: UINT64_MAX for no checksum). */
qhx_status qhx_afile_open(qhx_afile *a, const char *path, uint64_t hash_from);
void qhx_afile_put(qhx_afile *a, const void *p, size_t n);
/* The checksum of the hashed bytes so far. */
uint64_t qhx_afile_sum(qhx_afile *a);
/* Writes n bytes again at offset (a header filled in at the end), outside the checksum. */
void qhx_afile_patch(qhx_afile *a, uint64_t offset, const void *p, size_t n);
/* keep: synced and renamed into place ("PATH: write failed" when it cannot be); else the temporary
 * file is removed. Frees what open took either way. */
qhx_status qhx_afile_close(qhx_afile *a, int keep);
#endif
