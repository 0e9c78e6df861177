/* Files written whole or not at all (util/afile.h). */
#include "util/afile.h"
#include "util/error.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

qhx_status qhx_afile_open(qhx_afile *a, const char *path, uint64_t hash_from) {
    memset(a, 0, sizeof *a);
    a->path = path;
    a->hash_from = hash_from;
    if (!(a->tmp = malloc(strlen(path) + 32))) return qhx_fail(QHX_ERR_NOMEM, "out of memory");
    snprintf(a->tmp, strlen(path) + 32, "%s.tmp-%d", path, (int)getpid());
    if (hash_from != UINT64_MAX && (!(a->sum = XXH3_createState()) || XXH3_64bits_reset(a->sum) == XXH_ERROR)) {
        qhx_afile_close(a, 0);
        return qhx_fail(QHX_ERR_NOMEM, "out of memory");
    }
    if (!(a->f = fopen(a->tmp, "wb"))) {
        qhx_status rc = qhx_fail(QHX_ERR_IO, "%s: %s", a->tmp, strerror(errno));
        qhx_afile_close(a, 0);
        return rc;
    }
    return QHX_OK;
}

void qhx_afile_put(qhx_afile *a, const void *p, size_t n) {
    if (a->bad || !n) return;
    if (fwrite(p, 1, n, a->f) != n) a->bad = 1;
    if (a->sum && a->at + n > a->hash_from) {
        const uint64_t skip = a->at < a->hash_from ? a->hash_from - a->at : 0;
        XXH3_64bits_update(a->sum, (const char *)p + skip, n - skip);
    }
    a->at += n;
}

uint64_t qhx_afile_sum(qhx_afile *a) { return a->sum ? XXH3_64bits_digest(a->sum) : 0; }

void qhx_afile_patch(qhx_afile *a, uint64_t offset, const void *p, size_t n) {
    if (a->bad) return;
    if (fseek(a->f, (long)offset, SEEK_SET) || fwrite(p, 1, n, a->f) != n || fseek(a->f, 0, SEEK_END)) a->bad = 1;
}

qhx_status qhx_afile_close(qhx_afile *a, int keep) {
    qhx_status rc = QHX_OK;
    if (a->f) {
        if (keep && !a->bad && (fflush(a->f) || fsync(fileno(a->f)))) a->bad = 1;
        if (fclose(a->f)) a->bad = 1;
        if (keep && (a->bad || rename(a->tmp, a->path))) rc = qhx_fail(QHX_ERR_IO, "%s: write failed: %s", a->path, strerror(errno));
        if (!keep || rc) remove(a->tmp);
    }
    if (a->sum) XXH3_freeState(a->sum);
    free(a->tmp);
    memset(a, 0, sizeof *a);
    return rc;
}
