/* The prefix cache's second tier (src/prefix_store.c): its snapshots kept as state files in a
 * directory too, so that a restarted server, or the next process on the same model, resumes a
 * long prompt (an agent's tools and system prompt run to 15-25k tokens) instead of evaluating it
 * again. Private to src/prefix_cache.c; thread-safe, its file I/O outside its lock. */
#ifndef QHX_PREFIX_STORE_H
#define QHX_PREFIX_STORE_H
#include "qhexrt.h"
#include <stdint.h>

typedef struct pc_store pc_store;

/* Indexes dir's state files of model m (creating dir if missing), deleting the least worth until
 * they fit in budget bytes. Other files (another model, kernel set or KV form; not state files)
 * are left alone: a directory may serve several models. */
qhx_status pc_store_open(qhx_model *m, const char *dir, uint64_t budget, pc_store **out);
void pc_store_free(pc_store *st);
/* Writes snap, the state after ids[0, pos), unless a file holds it already; then deletes the least
 * worth files past the budget. What fails only costs a later hit. */
void pc_store_put(pc_store *st, const qhx_snapshot *snap, const int32_t *ids, int pos);
/* The deepest of the n ascending split points above `above` whose state a file holds: loads it
 * (checksum and all) into *out and returns its position; 0 when none. A damaged file is
 * deleted, and the next split point down tried. */
int pc_store_get(pc_store *st, const int32_t *ids, const int *splits, int n, int above, qhx_snapshot **out);

typedef struct {
    uint64_t budget, bytes;
    int files, others; /* others: state files at open this model cannot take, left alone */
    unsigned long hits, writes, deleted;
} pc_store_stats;
void pc_store_get_stats(pc_store *st, pc_store_stats *out);

#endif
