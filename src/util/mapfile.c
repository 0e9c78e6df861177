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

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

/* The whole file read into anonymous memory on transparent huge pages, or NULL (and errno) */
static void *read_resident(int fd, size_t size) {
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    madvise(p, size, MADV_HUGEPAGE); /* advice only: without THP the copy still works */
    /* Fault every page in before the read: pread faulting them one by one took 2-6 s a 1.8 GB
     * shard on a VM, this 0.3 s. An older kernel without it (EINVAL) faults them as before. */
    if (madvise(p, size, MADV_POPULATE_WRITE) != 0 && errno == ENOMEM) {
        munmap(p, size);
        errno = ENOMEM;
        return NULL;
    }
    for (size_t done = 0; done < size;) {
        const ssize_t r = pread(fd, (char *)p + done, size - done < (1u << 30) ? size - done : (1u << 30), (off_t)done);
        if (r <= 0) {
            const int e = r < 0 ? errno : EIO; /* 0: the file shrank under us */
            munmap(p, size);
            errno = e;
            return NULL;
        }
        done += (size_t)r;
    }
    mprotect(p, size, PROT_READ);
    return p;
}

static qhx_status open_file(qhx_mapfile *f, const char *path, int resident) {
    memset(f, 0, sizeof *f);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return qhx_fail(QHX_ERR_IO, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return qhx_fail(QHX_ERR_IO, "%s: not a regular file", path);
    }
    f->size = (size_t)st.st_size;
    if (f->size > 0 && resident) {
        void *p = read_resident(fd, f->size);
        if (!p && errno != ENOMEM) {
            int e = errno;
            close(fd);
            return qhx_fail(QHX_ERR_IO, "%s: read: %s", path, strerror(e));
        }
        f->data = p; /* out of memory for a copy: mapped below instead, the page cache can still hold it */
    }
    if (f->size > 0 && !f->data) {
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

qhx_status qhx_map_open(qhx_mapfile *f, const char *path) { return open_file(f, path, 0); }
qhx_status qhx_map_open_resident(qhx_mapfile *f, const char *path) { return open_file(f, path, 1); }

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

char *qhx_path_join(const char *dir, const char *name) {
    char *p;
    return asprintf(&p, "%s/%s", dir, name) < 0 ? NULL : p;
}

static unsigned long long read_ull(const char *path) {
    FILE *f = fopen(path, "r");
    unsigned long long v = 0;
    if (!f) return 0;
    if (fscanf(f, "%llu", &v) != 1) v = 0; /* "max": no limit */
    fclose(f);
    return v;
}

/* The room left under this process's memory cgroup, or 0 when it has no limit (or none is found). */
static unsigned long long cgroup_room(void) {
    FILE *f = fopen("/proc/self/cgroup", "r");
    char line[512], v2[512] = "", v1[512] = "";
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        if (!strncmp(line, "0::", 3)) snprintf(v2, sizeof v2, "%s", line + 3);
        const char *m = strstr(line, ":memory:");
        if (m) snprintf(v1, sizeof v1, "%s", m + 8);
    }
    if (f) fclose(f);
    char a[1100], b[1100];
    unsigned long long limit = 0, used = 0;
    if (*v1) {
        snprintf(a, sizeof a, "/sys/fs/cgroup/memory%s/memory.limit_in_bytes", v1);
        snprintf(b, sizeof b, "/sys/fs/cgroup/memory%s/memory.usage_in_bytes", v1);
        limit = read_ull(a), used = read_ull(b);
    }
    if (!limit && *v2) {
        snprintf(a, sizeof a, "/sys/fs/cgroup%s/memory.max", v2);
        snprintf(b, sizeof b, "/sys/fs/cgroup%s/memory.current", v2);
        limit = read_ull(a), used = read_ull(b);
    }
    if (!limit || limit >= (1ull << 60)) return 0; /* v1 writes "no limit" as a huge number */
    return limit > used ? limit - used : 1;
}

size_t qhx_memory_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    unsigned long long kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    if (f) fclose(f);
    unsigned long long avail = kb * 1024ull;
    const unsigned long long room = cgroup_room();
    if (room && (!avail || room < avail)) avail = room;
    return (size_t)avail;
}
