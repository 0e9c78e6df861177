/* A prefix cache of session snapshots for qhx serve and qhx chat: requests whose tokens start with
 * a cached snapshot's resume from it instead of evaluating the prefix again.
 *
 * Exact by construction: a prompt is evaluated in pieces that end at its split points (every
 * <|im_start|>, so each chat message ends a piece, and the token before the last), cache or no
 * cache, and a snapshot is restored only at one of the request's own split points. A resumed
 * request therefore runs the very evaluation calls a cold one runs, and gives the same logits bit
 * for bit. Thread-safe; restoring copies out of the cache, so entries are never in use. */
#ifndef QHX_PREFIX_CACHE_H
#define QHX_PREFIX_CACHE_H
#include "qhexrt.h"

#include <pthread.h>

typedef struct {
    qhx_snapshot *snap;
    int32_t *tokens;
    int pos;
    uint64_t bytes;          /* its recurrent state and all its KV rows (shared ones counted too: a safe bound) */
    unsigned long used;      /* the cache's clock at its last hit or insertion */
} pc_entry;

typedef struct {
    pthread_mutex_t lock;
    pc_entry *e;
    int n, cap;
    uint64_t budget, bytes;  /* budget 0: the cache is off */
    unsigned long clock, hits, misses, evictions;
} prefix_cache;

void pc_init(prefix_cache *pc, uint64_t budget_bytes);
void pc_free(prefix_cache *pc);

/* The split points of a prompt of n ids (ascending, each in (0, n)): positions of <|im_start|>
 * (im_start < 0: none) and n - 1. Returns the count; *out is malloc'd. */
int pc_split_points(const int32_t *ids, int n, int32_t im_start, int **out);

/* Restores into s the deepest cached snapshot at one of the split points whose tokens are the
 * prompt's first ones, and returns its position (0 when none: s is reset). */
int pc_resume(prefix_cache *pc, qhx_session *s, const int32_t *ids, const int *splits, int n_splits);

/* Snapshots s at its position into the cache (unless an entry holds those tokens already) and
 * evicts until the budget holds. Out of memory only costs a future hit. */
void pc_insert(prefix_cache *pc, qhx_session *s);

/* Evaluates ids [0, n - 1) from the deepest cached split point on, piece by piece, caching the
 * state at each split point reached; leaves s at n - 1 for qhx_generate to take the last token.
 * *cached: the tokens that came from the cache. */
qhx_status pc_prefill(prefix_cache *pc, qhx_session *s, const int32_t *ids, int n, int32_t im_start, int *cached);

#endif
