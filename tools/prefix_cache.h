/* A prefix cache of session snapshots for qhx serve and qhx chat: requests whose tokens start with
 * a cached snapshot's resume from it instead of evaluating the prefix again.
 *
 * Exact by construction: a prompt is evaluated in pieces that end at its split points, cache or
 * no cache, and a snapshot is restored only at one of the request's own split points. A resumed
 * request therefore runs the very evaluation calls a cold one runs, and gives the same logits bit
 * for bit. The split points are the starts of the chat's system and user messages (an
 * <|im_start|> not followed by "assistant"): a turn is the user's message and the reply to it, and
 * the generation prompt stays in the last piece, so a resumed turn is one evaluation. A prompt
 * without chat markers splits before its last token (a repeat of it resumes there).
 * Thread-safe; restoring copies out of the cache, so entries are never in use. */
#ifndef QHX_PREFIX_CACHE_H
#define QHX_PREFIX_CACHE_H
#include "qhexrt.h"

#include <jansson.h>

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
    int n;
    size_t cap;
    uint64_t budget, bytes;  /* budget 0: the cache is off */
    int32_t im_start;        /* the message opener, -1: none */
    int32_t assistant[8];    /* the tokens of "assistant" after it */
    int n_assistant;
    unsigned long clock, hits, misses, evictions;
} prefix_cache;

/* A cache of budget_bytes (0: off) that knows no chat markers until pc_markers. */
void pc_init(prefix_cache *pc, uint64_t budget_bytes);
/* The chat markers from tok: <|im_start|> and the encoding of "assistant". */
void pc_markers(prefix_cache *pc, qhx_tokenizer *tok);
void pc_free(prefix_cache *pc);

/* The split points of a prompt of n ids (ascending, each in (0, n)). Returns the count; *out is
 * malloc'd (NULL: out of memory). */
int pc_split_points(const prefix_cache *pc, const int32_t *ids, int n, int **out);

/* Restores into s the deepest cached snapshot at one of the split points whose tokens are the
 * prompt's first ones, and returns its position (0 when none: s is reset). */
int pc_resume(prefix_cache *pc, qhx_session *s, const int32_t *ids, const int *splits, int n_splits);

/* Snapshots s at its position into the cache (unless an entry holds those tokens already) and
 * evicts until the budget holds. Out of memory only costs a future hit. */
void pc_insert(prefix_cache *pc, qhx_session *s);

/* Evaluates ids from the deepest cached split point on, caching the state at each split point
 * reached, in pieces of at most PC_PIECE tokens counted from each split point (so where a piece
 * ends depends on the prompt alone, never on what was cached or what else runs), up to the last
 * piece end before the prompt's last token; qhx_generate takes the rest from qhx_session_pos(s).
 * After each piece, yield(user) (when not NULL) may let others use the model; nonzero cancels
 * (QHX_ERR_CANCELLED). *cached: the tokens that came from the cache. */
#define PC_PIECE 256
qhx_status pc_prefill(prefix_cache *pc, qhx_session *s, const int32_t *ids, int n, int *cached, int (*yield)(void *),
                      void *user);

/* Caches the state after a chat reply as the next turn's prompt will hold it. conversation: the
 * render request ({"messages": [...], "tools"?, "enable_thinking"?}) whose last message is the
 * reply; prompt: the ids the reply was generated from. Renders it with an empty user message
 * after the reply, so the template treats the reply as it will in the next turn (dropping its
 * reasoning), and evaluates one piece from the cached start of the prompt's last user message to
 * the start of that empty one: both split points of the next turn, which then resumes there
 * exactly as a cold evaluation of its whole prompt would run. Leaves s anywhere. */
void pc_cache_reply(prefix_cache *pc, qhx_session *s, qhx_tokenizer *tok, const json_t *conversation, const int32_t *prompt,
                    int n_prompt);

#endif
