/* Memory for the large arrays decode sweeps every token besides the weights: delta-rule states and
 * KV caches. On 4 KiB pages each page of them costs a TLB miss a token (the weights streamed in
 * between evict every entry), and under a hypervisor a miss walks two page tables: reading the KV
 * cache ran at about a memory latency a row. So: 2 MiB aligned and advised onto transparent huge
 * pages. Freed with free(). */
#ifndef QHX_HUGEMEM_H
#define QHX_HUGEMEM_H
#include <stddef.h>

/* bytes of zeroed memory, or NULL when out of memory */
void *qhx_huge_calloc(size_t bytes);

#endif
