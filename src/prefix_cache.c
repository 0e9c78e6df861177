/* The prefix cache (qhexrt.h: qhx_prefix_cache_*): session snapshots at the split points of
 * earlier prompts and replies, so a request that starts the same way resumes instead of
 * evaluating the prefix again.
 *
 * Exact by construction: a prompt is evaluated in pieces that end at its split points, cache or
 * no cache, and a snapshot is restored only at one of the request's own split points. A resumed
 * request therefore runs the very evaluation calls a cold one runs, and gives the same logits bit
 * for bit. The split points are the starts of the chat's system and user messages (an
 * <|im_start|> not followed by "assistant"): a turn is the user's message and the reply to it, and
 * the generation prompt stays in the last piece, so a resumed turn is one evaluation. A prompt
 * without chat markers splits before its last token (a repeat of it resumes there). Restoring
 * copies out of the cache, so entries are never in use; one lock makes it thread-safe.
 *
 * Eviction follows Marconi's idea (Pan et al., 2024): for hybrid models a snapshot's worth is the
 * compute it saves per byte it holds, not recency alone, since every snapshot carries the whole
 * recurrent state however short its prefix.
 *
 * With a directory (qhx_prefix_cache_set_dir) every snapshot is also written as a state file
 * (src/prefix_store.c), and a prompt resumes from a file where memory holds nothing as deep: a
 * file is the state a cold run reaches at that split point, so the exactness above holds for it. */
#include "prefix_store.h"
#include "qhexrt.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/json.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    qhx_snapshot *snap;
    int32_t *tokens;
    int pos;
    uint64_t bytes;          /* its recurrent state and all its KV rows (shared ones counted too: a safe bound) */
    unsigned long used;      /* the cache's clock at its last hit or insertion */
} pc_entry;

struct qhx_prefix_cache {
    pthread_mutex_t lock;
    pc_entry *e;
    int n;
    size_t cap;
    uint64_t budget, bytes;  /* budget 0: the cache is off */
    qhx_model *model;
    pc_store *store;         /* the state files (NULL: memory only) */
    qhx_tokenizer *tok;      /* the model's, for replies (NULL: none) */
    int32_t im_start;        /* the message opener, -1: none */
    int32_t assistant[8];    /* the tokens of "assistant" after it */
    int n_assistant;
    unsigned long clock, hits, misses, evictions;
};

typedef struct qhx_prefix_cache prefix_cache;

qhx_status qhx_prefix_cache_new(qhx_model *m, uint64_t budget_bytes, qhx_prefix_cache **out) {
    *out = NULL;
    prefix_cache *pc = calloc(1, sizeof *pc);
    if (!pc) return qhx_fail(QHX_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&pc->lock, NULL);
    pc->budget = budget_bytes;
    pc->model = m;
    pc->im_start = -1;
    qhx_tokenizer *tok;
    if (m && qhx_model_tokenizer(m, &tok) == QHX_OK) { /* the chat markers */
        pc->tok = tok;
        pc->im_start = qhx_tokenizer_find_added(tok, "<|im_start|>");
        int32_t *ids = NULL;
        size_t n = 0;
        if (pc->im_start >= 0 && qhx_tokenizer_encode(tok, "assistant", 9, 0, &ids, &n) == QHX_OK && n >= 1 && n <= 8) {
            memcpy(pc->assistant, ids, sizeof(int32_t) * n);
            pc->n_assistant = (int)n;
        }
        free(ids);
    }
    qhx_clear_error();
    *out = pc;
    return QHX_OK;
}

static void entry_free(pc_entry *e) {
    qhx_snapshot_free(e->snap);
    free(e->tokens);
}

void qhx_prefix_cache_free(qhx_prefix_cache *pc) {
    if (!pc) return;
    for (int i = 0; i < pc->n; i++) entry_free(&pc->e[i]);
    free(pc->e);
    pc_store_free(pc->store);
    pthread_mutex_destroy(&pc->lock);
    free(pc);
}

qhx_status qhx_prefix_cache_set_dir(qhx_prefix_cache *pc, const char *dir, uint64_t budget_bytes) {
    if (pc->store) return qhx_fail(QHX_ERR_ARG, "prefix cache: it has a directory already");
    if (!pc->budget) return qhx_fail(QHX_ERR_ARG, "prefix cache: off (no memory budget), so it keeps no files either");
    if (!budget_bytes) return qhx_fail(QHX_ERR_ARG, "prefix cache: a directory needs a budget above 0 bytes");
    return pc_store_open(pc->model, dir, budget_bytes, &pc->store);
}

void qhx_prefix_cache_get_stats_sized(qhx_prefix_cache *pc, qhx_prefix_cache_stats *st, size_t size) {
    pthread_mutex_lock(&pc->lock);
    qhx_prefix_cache_stats full = {.budget = pc->budget, .bytes = pc->bytes, .entries = pc->n, .hits = pc->hits,
                                   .misses = pc->misses, .evictions = pc->evictions};
    pthread_mutex_unlock(&pc->lock);
    if (pc->store) {
        pc_store_stats ss;
        pc_store_get_stats(pc->store, &ss);
        full.dir_budget = ss.budget, full.dir_bytes = ss.bytes, full.dir_files = ss.files, full.dir_others = ss.others;
        full.dir_hits = ss.hits, full.dir_writes = ss.writes, full.dir_deleted = ss.deleted;
    }
    memcpy(st, &full, size < sizeof full ? size : sizeof full);
}

/* The split points of a prompt of n ids (ascending, each in (0, n)). Returns the count; *out is
 * malloc'd (NULL: out of memory). */
static int split_points(const prefix_cache *pc, const int32_t *ids, int n, int **out) {
    int *p = malloc(sizeof(int) * (n + 1)), k = 0;
    *out = p;
    if (!p) return 0;
    for (int i = 1; i < n && pc->im_start >= 0; i++)
        if (ids[i] == pc->im_start && !(i + pc->n_assistant < n && !memcmp(ids + i + 1, pc->assistant, sizeof(int32_t) * pc->n_assistant)))
            p[k++] = i;
    if (!k && n > 1) p[k++] = n - 1;
    return k;
}

/* Higher is worth keeping: prefix tokens per MB held, halved for every 8 insertions or hits
 * since it was last used (recency). */
static double worth(const prefix_cache *pc, const pc_entry *e) {
    const double age = (double)(pc->clock - e->used) / 8.0;
    return (double)e->pos / ((double)e->bytes / 1e6 + 1e-9) / (1.0 + age * age);
}

static void evict_to_budget(prefix_cache *pc) {
    while (pc->bytes > pc->budget && pc->n > 0) {
        int worst = 0;
        for (int i = 1; i < pc->n; i++)
            if (worth(pc, &pc->e[i]) < worth(pc, &pc->e[worst])) worst = i;
        pc->bytes -= pc->e[worst].bytes;
        entry_free(&pc->e[worst]);
        pc->e[worst] = pc->e[--pc->n];
        pc->evictions++;
    }
}

static int find(const prefix_cache *pc, const int32_t *ids, int pos) {
    for (int i = 0; i < pc->n; i++)
        if (pc->e[i].pos == pos && !memcmp(pc->e[i].tokens, ids, sizeof(int32_t) * pos)) return i;
    return -1;
}

/* Keeps snap (taken over: kept or freed) as the entry for ids[0, pos) unless one is there. */
static void keep(prefix_cache *pc, qhx_snapshot *snap, const int32_t *ids, int pos) {
    pc_entry e = {.snap = snap, .pos = pos};
    qhx_snapshot_info info;
    pthread_mutex_lock(&pc->lock);
    const int i = find(pc, ids, pos);
    if (i >= 0 || qhx_reserve(&pc->e, &pc->cap, (size_t)pc->n + 1, sizeof *pc->e) || !(e.tokens = malloc(sizeof(int32_t) * pos))) {
        if (i >= 0) pc->e[i].used = ++pc->clock;
        pthread_mutex_unlock(&pc->lock);
        entry_free(&e);
        return;
    }
    memcpy(e.tokens, ids, sizeof(int32_t) * pos);
    qhx_snapshot_get_info(snap, &info);
    e.bytes = info.state_bytes + info.kv_bytes + info.kv_shared_bytes;
    e.used = ++pc->clock;
    pc->e[pc->n++] = e;
    pc->bytes += e.bytes;
    evict_to_budget(pc);
    pthread_mutex_unlock(&pc->lock);
}

/* Restores into s the deepest cached snapshot at one of the split points whose tokens are the
 * prompt's first ones, from memory or, deeper, from a file (then kept in memory too), and returns
 * its position (0 when none: s is reset). */
static int resume(prefix_cache *pc, qhx_session *s, const int32_t *ids, const int *splits, int n_splits) {
    qhx_session_reset(s);
    if (!pc->budget) return 0;
    pthread_mutex_lock(&pc->lock);
    int got = 0;
    for (int k = n_splits - 1; k >= 0 && !got; k--) {
        const int i = find(pc, ids, splits[k]);
        if (i >= 0 && qhx_session_restore(s, pc->e[i].snap) == QHX_OK) {
            got = splits[k];
            pc->e[i].used = ++pc->clock;
        }
    }
    pthread_mutex_unlock(&pc->lock);
    qhx_snapshot *snap = NULL;
    const int deeper = pc->store ? pc_store_get(pc->store, ids, splits, n_splits, got, &snap) : 0;
    if (deeper) {
        if (qhx_session_restore(s, snap) == QHX_OK) {
            got = deeper;
            keep(pc, snap, ids, deeper);
        } else { /* a failed restore leaves the session as reset */
            qhx_snapshot_free(snap);
            got = 0;
        }
    }
    pthread_mutex_lock(&pc->lock);
    got ? pc->hits++ : pc->misses++;
    pthread_mutex_unlock(&pc->lock);
    return got;
}

int qhx_prefix_cache_lookup(qhx_prefix_cache *pc, qhx_session *s, const int32_t *ids, int n) {
    int *splits;
    const int k = split_points(pc, ids, n, &splits);
    const int at = splits ? resume(pc, s, ids, splits, k) : (qhx_session_reset(s), 0);
    free(splits);
    return at;
}

void qhx_prefix_cache_insert(qhx_prefix_cache *pc, qhx_session *s) {
    const int pos = qhx_session_pos(s);
    if (!pc->budget || pos <= 0) return;
    const int32_t *ids = qhx_session_tokens(s);
    pthread_mutex_lock(&pc->lock);
    const int i = find(pc, ids, pos);
    if (i >= 0) pc->e[i].used = ++pc->clock;
    pthread_mutex_unlock(&pc->lock);
    qhx_snapshot *snap;
    if (i >= 0 || qhx_session_snapshot(s, &snap)) return; /* the session is the caller's: no lock needed */
    ids = qhx_session_tokens(s);
    if (pc->store) pc_store_put(pc->store, snap, ids, pos); /* outside the lock: a long state takes a while to write */
    keep(pc, snap, ids, pos);
}

qhx_status qhx_prefix_cache_prefill(qhx_prefix_cache *pc, qhx_session *s, const int32_t *ids, int n, int *cached,
                                    int (*yield)(void *user), void *user) {
    int *splits;
    const int k = split_points(pc, ids, n, &splits);
    if (!splits) return qhx_fail(QHX_ERR_NOMEM, "out of memory");
    int at = *cached = resume(pc, s, ids, splits, k);
    qhx_status rc = QHX_OK;
    for (int i = 0; i <= k && !rc; i++) { /* the segments between split points, then the tail */
        const int from = i ? splits[i - 1] : 0, to = i < k ? splits[i] : n;
        if (to <= at) continue;
        for (int p = from + QHX_PREFIX_PIECE; !rc && p < to; p += QHX_PREFIX_PIECE) /* whole pieces, counted from the segment's start */
            if (p > at) {
                rc = qhx_session_eval(s, ids + at, p - at, QHX_EVAL_SEQUENCE, NULL, NULL);
                at = p;
                if (!rc && yield && yield(user)) rc = qhx_fail(QHX_ERR_CANCELLED, "prefill cancelled");
            }
        if (rc || i == k) break;
        rc = qhx_session_eval(s, ids + at, to - at, QHX_EVAL_SEQUENCE, NULL, NULL);
        at = to;
        if (!rc) qhx_prefix_cache_insert(pc, s);
    }
    free(splits);
    return rc;
}

/* the last split point of ids, or -1 */
static int last_split(const prefix_cache *pc, const int32_t *ids, int n) {
    int *splits;
    const int k = split_points(pc, ids, n, &splits), at = k ? splits[k - 1] : -1;
    free(splits);
    return at;
}

qhx_status qhx_prefix_cache_add_reply(qhx_prefix_cache *pc, qhx_session *s, const char *conversation, size_t len,
                                      const int32_t *prompt, int n_prompt) {
    const int from = last_split(pc, prompt, n_prompt);
    if (!pc->budget || pc->im_start < 0 || !pc->tok || from < 0) return QHX_OK;
    json_t *h = qhx_json_parse(conversation, len);
    if (!json_is_object(h) || !json_is_array(json_object_get(h, "messages"))) {
        json_decref(h);
        return qhx_fail(QHX_ERR_ARG, "prefix cache: the conversation is not {\"messages\": [...], ...}");
    }
    char *rj = NULL, *text = NULL;
    int32_t *ids = NULL;
    size_t tlen = 0, n = 0;
    json_object_set_new(h, "add_generation_prompt", json_false());
    json_t *msgs = json_object_get(h, "messages"), *reply = json_array_get(msgs, json_array_size(msgs) - 1);
    const char *next = json_array_size(json_object_get(reply, "tool_calls")) ? "tool" : "user"; /* what follows a call is its result */
    if (json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", next, "content", "")) ||
        !(rj = json_dumps(h, JSON_COMPACT)) || qhx_chat_render(rj, strlen(rj), &text, &tlen) ||
        qhx_tokenizer_encode(pc->tok, text, tlen, QHX_ENCODE_SPECIAL, &ids, &n))
        goto done;
    const int to = last_split(pc, ids, (int)n), split[1] = {from};
    qhx_model_info mi;
    qhx_model_get_info(qhx_session_model(s), &mi);
    if (to > from && to < mi.max_context && !memcmp(ids, prompt, sizeof(int32_t) * from) && resume(pc, s, ids, split, 1) == from &&
        qhx_session_eval(s, ids + from, to - from, QHX_EVAL_SEQUENCE, NULL, NULL) == QHX_OK)
        qhx_prefix_cache_insert(pc, s);
done:
    json_decref(h);
    free(rj);
    free(text);
    free(ids);
    qhx_clear_error(); /* what fails here only costs a future hit */
    return QHX_OK;
}
