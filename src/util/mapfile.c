#include "util/mapfile.h"
#include "util/error.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

qhx_status qhx_map_open(qhx_mapfile *f, const char *path) {
    memset(f, 0, sizeof *f);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return qhx_fail(QHX_ERR_IO, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return qhx_fail(QHX_ERR_IO, "%s: not a regular file", path);
    }
    f->size = (size_t)st.st_size;
    if (f->size > 0) {
        void *p = mmap(NULL, f->size, PROT_READ, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            close(fd);
            return qhx_fail(QHX_ERR_IO, "%s: mmap: %s", path, strerror(e));
        }
        f->data = p;
    }
    close(fd);
    f->path = strdup(path);
    if (!f->path) { qhx_map_close(f); return qhx_fail(QHX_ERR_NOMEM, "%s: out of memory", path); }
    return QHX_OK;
}

void qhx_map_close(qhx_mapfile *f) {
    if (f->data) munmap((void *)f->data, f->size);
    free(f->path);
    memset(f, 0, sizeof *f);
}

qhx_status qhx_read_file(const char *path, size_t max_bytes, char **out, size_t *len) {
    *out = NULL;
    FILE *fp = fopen(path, "rb");
    if (!fp) return qhx_fail(QHX_ERR_IO, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(fp), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(fp);
        return qhx_fail(QHX_ERR_IO, "%s: not a regular file", path);
    }
    if ((unsigned long long)st.st_size > max_bytes) {
        fclose(fp);
        return qhx_fail(QHX_ERR_RANGE, "%s: %lld bytes, over the limit of %zu", path,
                        (long long)st.st_size, max_bytes);
    }
    size_t n = (size_t)st.st_size;
    char *buf = malloc(n + 1);
    if (!buf) { fclose(fp); return qhx_fail(QHX_ERR_NOMEM, "%s: out of memory", path); }
    if (fread(buf, 1, n, fp) != n) {
        free(buf);
        fclose(fp);
        return qhx_fail(QHX_ERR_IO, "%s: short read", path);
    }
    fclose(fp);
    buf[n] = 0;
    *out = buf;
    if (len) *len = n;
    return QHX_OK;
}
