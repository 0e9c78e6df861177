/* Read-only files in memory: mapped from the page cache, or read whole into this process's memory
 * ("resident"). Weights are views into either, never copied again. */
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
/* The file read into anonymous memory on transparent huge pages: decode streams every weight each
 * token, and with 4 KiB page-cache pages each 4 KiB costs a TLB miss, which under a hypervisor walks
 * two page tables (1.3-1.4x slower decode and prefill measured on a VM; bench/README.md in git history). Falls
 * back to mapping when there is no memory for the copy. */
qhx_status qhx_map_open_resident(qhx_mapfile *f, const char *path);
void qhx_map_close(qhx_mapfile *f);

/* Bytes this process could still take without pushing anything out: the kernel's MemAvailable,
 * less where the process's memory cgroup (v2 memory.max, v1 memory.limit_in_bytes) ends sooner;
 * 0 when neither can be read. */
size_t qhx_memory_available(void);

/* Reads a whole (small) file into a NUL-terminated heap buffer; refuses files over max_bytes. */
qhx_status qhx_read_file(const char *path, size_t max_bytes, char **out, size_t *len);

/* "dir/name", malloc'd (NULL when out of memory): paths are as long as they are. */
char *qhx_path_join(const char *dir, const char *name);

#endif
