#include "util/hugemem.h"
#include "util/tensor.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define HUGE_PAGE ((size_t)2 << 20)

void *qhx_huge_calloc(size_t bytes) {
    if (bytes < HUGE_PAGE / 2) return calloc(1, bytes ? bytes : 1); /* not worth a huge page */
    const size_t size = qhx_round_up(bytes, HUGE_PAGE);
    void *p = aligned_alloc(HUGE_PAGE, size);
    if (!p) return NULL;
#ifdef MADV_HUGEPAGE
    madvise(p, size, MADV_HUGEPAGE); /* advice only: on 4 KiB pages it still works */
#endif
    memset(p, 0, size);
    return p;
}
