/* The prefix cache (tools/prefix_cache.h). Eviction follows Marconi's idea (Pan et al., 2024):
 * for hybrid models a snapshot's worth is the compute it saves per byte it holds, not recency
 * alone, since every snapshot carries the whole recurrent state however short its prefix. */
#include "util/buf.h"
#include "prefix_cache.h"

#include <stdlib.h>
#include <string.h>

void pc_init(prefix_cache *pc, uint64_t budget_bytes) {
    memset(pc, 0, sizeof *pc);
    pthread_mutex_init(&pc->lock, NULL);
    pc->budget = budget_bytes;
    pc->im_start = -1;
}

void pc_markers(prefix_cache *pc, qhx_tokenizer *tok) {
    pc->im_start = qhx_tokenizer_find_added(tok, "<|im_start|>");
    pc->n_assistant = 0;
    int32_t *ids = NULL;
    size_t n = 0;
    if (pc->im_start >= 0 && qhx_tokenizer_encode(tok, "assistant", 9, 0, &ids, &n) == QHX_OK && n >= 1 && n <= 8) {
        memcpy(pc->assistant, ids, sizeof(int32_t) * n);
        pc->n_assistant = (int)n;
    }
    free(ids);
}

static void entry_free(pc_entry *e) {
    qhx_snapshot_free(e->snap);
    free(e->tokens);
}

void pc_free(prefix_cache *pc) {
    for (int i = 0; i < pc->n; i++) entry_free(&pc->e[i]);
    free(pc->e);
    pthread_mutex_destroy(&pc->lock);
    memset(pc, 0, sizeof *pc);
}

int pc_split_points(const prefix_cache *pc, const int32_t *ids, int n, int **out) {
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

int pc_resume(prefix_cache *pc, qhx_session *s, const int32_t *ids, const int *splits, int n_splits) {
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
    got ? pc->hits++ : pc->misses++; /* a failed restore leaves the session as reset */
    pthread_mutex_unlock(&pc->lock);
    return got;
}

void pc_insert(prefix_cache *pc, qhx_session *s) {
    const int pos = qhx_session_pos(s);
    if (!pc->budget || pos <= 0) return;
    pthread_mutex_lock(&pc->lock);
    const int32_t *ids = qhx_session_tokens(s);
    int i = find(pc, ids, pos);
    if (i >= 0) {
        pc->e[i].used = ++pc->clock;
        pthread_mutex_unlock(&pc->lock);
        return;
    }
    pc_entry e = {0};
    qhx_snapshot_info info;
    if (qhx_reserve(&pc->e, &pc->cap, (size_t)pc->n + 1, sizeof *pc->e)) goto out;
    if (qhx_session_snapshot(s, &e.snap) || !(e.tokens = malloc(sizeof(int32_t) * pos))) {
        entry_free(&e);
        goto out;
    }
    memcpy(e.tokens, ids, sizeof(int32_t) * pos);
    qhx_snapshot_get_info(e.snap, &info);
    e.pos = pos;
    e.bytes = info.state_bytes + info.kv_bytes + info.kv_shared_bytes;
    e.used = ++pc->clock;
    pc->e[pc->n++] = e;
    pc->bytes += e.bytes;
    evict_to_budget(pc);
out:
    pthread_mutex_unlock(&pc->lock);
}

qhx_status pc_prefill(prefix_cache *pc, qhx_session *s, const int32_t *ids, int n, int *cached, int (*yield)(void *),
                      void *user) {
    int *splits;
    const int k = pc_split_points(pc, ids, n, &splits);
    if (!splits) return QHX_ERR_NOMEM;
    int at = *cached = pc_resume(pc, s, ids, splits, k);
    qhx_status rc = QHX_OK;
    for (int i = 0; i <= k && !rc; i++) { /* the segments between split points, then the tail */
        const int from = i ? splits[i - 1] : 0, to = i < k ? splits[i] : n;
        if (to <= at) continue;
        for (int p = from + PC_PIECE; !rc && p < to; p += PC_PIECE) /* whole pieces, counted from the segment's start */
            if (p > at) {
                rc = qhx_session_eval(s, ids + at, p - at, QHX_EVAL_SEQUENCE, NULL, NULL);
                at = p;
                if (!rc && yield && yield(user)) rc = QHX_ERR_CANCELLED;
            }
        if (rc || i == k) break;
        rc = qhx_session_eval(s, ids + at, to - at, QHX_EVAL_SEQUENCE, NULL, NULL);
        at = to;
        if (!rc) pc_insert(pc, s);
    }
    free(splits);
    return rc;
}

/* the last split point of ids, or -1 */
static int last_split(const prefix_cache *pc, const int32_t *ids, int n) {
    int *splits;
    const int k = pc_split_points(pc, ids, n, &splits), at = k ? splits[k - 1] : -1;
    free(splits);
    return at;
}

void pc_cache_reply(prefix_cache *pc, qhx_session *s, qhx_tokenizer *tok, const json_t *conversation, const int32_t *prompt,
                    int n_prompt) {
    const int from = last_split(pc, prompt, n_prompt);
    if (!pc->budget || pc->im_start < 0 || from < 0) return;
    json_t *h = json_deep_copy(conversation);
    char *rj = NULL, *text = NULL;
    int32_t *ids = NULL;
    size_t len = 0, n = 0;
    json_object_set_new(h, "add_generation_prompt", json_false());
    if (json_array_append_new(json_object_get(h, "messages"), json_pack("{s:s, s:s}", "role", "user", "content", "")) ||
        !(rj = json_dumps(h, JSON_COMPACT)) || qhx_chat_render(rj, strlen(rj), &text, &len) ||
        qhx_tokenizer_encode(tok, text, len, QHX_ENCODE_SPECIAL, &ids, &n))
        goto done;
    const int to = last_split(pc, ids, (int)n), split[1] = {from};
    qhx_model_info mi;
    qhx_model_get_info(qhx_session_model(s), &mi);
    if (to > from && to < mi.max_context && !memcmp(ids, prompt, sizeof(int32_t) * from) && pc_resume(pc, s, ids, split, 1) == from &&
        qhx_session_eval(s, ids + from, to - from, QHX_EVAL_SEQUENCE, NULL, NULL) == QHX_OK)
        pc_insert(pc, s);
done:
    json_decref(h);
    free(rj);
    free(text);
    free(ids);
}
