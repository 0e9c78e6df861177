/* The prefix cache through the public API (qhexrt.h: qhx_prefix_cache_*), as an embedder runs a
 * chat: each turn's prompt is prefilled through the cache, then generated; after the reply the
 * cache keeps the next turn's start. Every turn's logits and greedy reply equal a cold session's
 * (a fresh session through a cache that is off: the same pieces, nothing resumed) bit for bit,
 * with a cache large enough for everything and one so small it evicts all the time; turns after
 * the first resume at their last user message. */
#include "testlib.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int32_t ids[64];
    int n;
    char text[2048];
    size_t len;
} reply;

static int on_token(int32_t tok, const char *text, size_t len, void *user) {
    reply *r = user;
    if (tok >= 0 && r->n < 64) r->ids[r->n++] = tok;
    if (text && r->len + len < sizeof r->text) memcpy(r->text + r->len, text, len), r->len += len, r->text[r->len] = 0;
    return 0;
}

/* The logits after the prompt and the greedy reply, the prompt prefilled through pc. */
static int turn(qhx_session *s, qhx_prefix_cache *pc, const int32_t *ids, int n, float *logits, reply *r, int *cached) {
    *cached = 0;
    qhx_status st = qhx_prefix_cache_prefill(pc, s, ids, n, cached, NULL, NULL);
    const int at = qhx_session_pos(s);
    qhx_snapshot *snap = NULL;
    /* the logits after the whole prompt, then the reply from the same point */
    if (!st) st = qhx_session_snapshot(s, &snap);
    if (!st) st = qhx_session_eval(s, ids + at, n - at, QHX_EVAL_SEQUENCE, NULL, logits);
    if (!st) st = qhx_session_restore(s, snap);
    qhx_snapshot_free(snap);
    qhx_generate_opts o = {.max_tokens = 24};
    memset(r, 0, sizeof *r);
    if (!st) st = qhx_generate(s, ids + at, n - at, &o, on_token, r, NULL);
    CHECK(st == QHX_OK, "turn: %s", qhx_last_error());
    return st;
}

int main(void) {
    qhx_runtime *rt;
    qhx_model *m;
    qhx_session *s, *cold;
    if (tl_open("models/q35-kjv", "auto", &rt, &m, &s)) return tl_finish("prefix_cache");
    qhx_session_new(m, &cold);
    qhx_prefix_cache *off;
    qhx_prefix_cache_new(m, 0, &off);
    qhx_tokenizer *tok;
    qhx_model_tokenizer(m, &tok);
    qhx_model_info mi;
    qhx_model_get_info(m, &mi);
    float *want = malloc(sizeof(float) * mi.vocab_size), *got = malloc(sizeof(float) * mi.vocab_size);
    const char *users[] = {"Who made the heaven and the earth?", "And what did he say unto Moses?", "Tell me of David.",
                           "Who was Samuel?"};
    const uint64_t budgets[] = {(uint64_t)1 << 30, 40000, 0};
    for (int b = 0; b < 3; b++) {
        qhx_prefix_cache *pc;
        CHECK(qhx_prefix_cache_new(m, budgets[b], &pc) == QHX_OK, "new: %s", qhx_last_error());
        json_t *conv = json_pack("{s:[{s:s, s:s}], s:b}", "messages", "role", "system", "content", "Answer from the scriptures.",
                                 "enable_thinking", 0);
        for (int t = 0; t < 4; t++) {
            json_array_append_new(json_object_get(conv, "messages"), json_pack("{s:s, s:s}", "role", "user", "content", users[t]));
            char *req = json_dumps(conv, JSON_COMPACT), *text;
            size_t len, n;
            int32_t *ids;
            qhx_chat_render(req, strlen(req), &text, &len);
            qhx_tokenizer_encode(tok, text, len, QHX_ENCODE_SPECIAL, &ids, &n);
            reply rc, rw;
            int cached, none;
            if (turn(cold, off, ids, (int)n, want, &rc, &none) || turn(s, pc, ids, (int)n, got, &rw, &cached)) break;
            CHECK(!memcmp(want, got, sizeof(float) * mi.vocab_size), "budget %llu turn %d: logits differ from a cold session's",
                  (unsigned long long)budgets[b], t);
            CHECK(rc.n == rw.n && !memcmp(rc.ids, rw.ids, sizeof(int32_t) * rc.n), "budget %llu turn %d: another reply",
                  (unsigned long long)budgets[b], t);
            /* with room, turns after the first resume at their last user message (past the reply) */
            if (b == 0 && t > 0) CHECK(cached > (int)n / 2, "turn %d resumed %d of %zu tokens", t, cached, n);
            if (b == 2) CHECK(cached == 0, "no cache, yet %d resumed", cached);
            json_array_append_new(json_object_get(conv, "messages"), json_pack("{s:s, s:s}", "role", "assistant", "content", rw.text));
            char *cj = json_dumps(conv, JSON_COMPACT);
            CHECK(qhx_prefix_cache_add_reply(pc, s, cj, strlen(cj), ids, (int)n) == QHX_OK, "add_reply: %s", qhx_last_error());
            free(cj), free(req), free(text), free(ids);
        }
        qhx_prefix_cache_stats st;
        qhx_prefix_cache_get_stats(pc, &st);
        if (b == 0) CHECK(st.hits >= 3 && st.entries > 0 && st.bytes <= st.budget, "stats: %lu hits, %d entries", st.hits, st.entries);
        if (b == 1) CHECK(st.evictions > 0 && st.bytes <= st.budget, "a small cache evicts: %lu evictions, %llu bytes", st.evictions,
                          (unsigned long long)st.bytes);
        if (b == 2) CHECK(st.entries == 0 && st.hits == 0, "an off cache keeps nothing: %d entries", st.entries);
        /* the lower-level steps: what is inserted at a split point is found there */
        if (b == 0) {
            const char *p = "<|im_start|>user\nHello<|im_end|>\n<|im_start|>user\nAgain";
            int32_t *ids;
            size_t n;
            qhx_tokenizer_encode(tok, p, strlen(p), QHX_ENCODE_SPECIAL, &ids, &n);
            int split = 0;
            for (size_t i = 1; i < n; i++) if (ids[i] == ids[0]) split = (int)i;
            qhx_session_reset(s);
            qhx_session_eval(s, ids, split, QHX_EVAL_SEQUENCE, NULL, NULL);
            qhx_prefix_cache_insert(pc, s);
            CHECK(split > 0 && qhx_prefix_cache_lookup(pc, s, ids, (int)n) == split && qhx_session_pos(s) == split, "lookup after insert");
            free(ids);
        }
        CHECK(qhx_prefix_cache_add_reply(pc, s, "[1]", 3, (const int32_t[]){1, 2}, 2) == (b == 2 ? QHX_OK : QHX_ERR_ARG),
              "a conversation that is no object is refused: %s", qhx_last_error());
        json_decref(conv);
        qhx_prefix_cache_free(pc);
    }
    /* an agent's step: the reply is a tool call (with its reasoning), the next prompt its result.
     * The reply's snapshot is taken before an empty tool response, where the template keeps the
     * reasoning as the next step renders it, so that step resumes past the whole reply */
    qhx_prefix_cache *pc;
    qhx_prefix_cache_new(m, (uint64_t)1 << 30, &pc);
    const char *tools = "[{\"type\":\"function\",\"function\":{\"name\":\"psalm\",\"parameters\":{\"type\":\"object\","
                        "\"properties\":{\"n\":{\"type\":\"integer\"}}}}}]";
    json_t *conv = json_pack("{s:[{s:s, s:s}], s:o, s:b}", "messages", "role", "user", "content", "Read me a psalm.", "tools",
                             json_loads(tools, 0, NULL), "enable_thinking", 1);
    int32_t *ids[2] = {NULL, NULL};
    size_t n[2] = {0, 0};
    for (int step = 0; step < 2; step++) {
        char *req = json_dumps(conv, JSON_COMPACT), *text = NULL;
        size_t len;
        CHECK(qhx_chat_render(req, strlen(req), &text, &len) == QHX_OK &&
                  qhx_tokenizer_encode(tok, text, len, QHX_ENCODE_SPECIAL, &ids[step], &n[step]) == QHX_OK, "agent step %d: %s", step,
              qhx_last_error());
        reply rc, rw;
        int cached = 0, none;
        if (!ids[step] || turn(cold, off, ids[step], (int)n[step], want, &rc, &none) || turn(s, pc, ids[step], (int)n[step], got, &rw, &cached))
            break;
        CHECK(!memcmp(want, got, sizeof(float) * mi.vocab_size), "agent step %d: logits differ from a cold session's", step);
        if (step) CHECK(cached > (int)n[0], "the step after a call resumed %d tokens, not past the %zu of the last prompt", cached, n[0]);
        json_t *msgs = json_object_get(conv, "messages");
        if (!step) {
            json_array_append_new(msgs, json_pack("{s:s, s:s, s:s, s:[{s:s, s:s, s:{s:s, s:s}}]}", "role", "assistant", "content", "",
                                                  "reasoning_content", "A psalm is asked.", "tool_calls", "id", "c0", "type", "function",
                                                  "function", "name", "psalm", "arguments", "{\"n\": 23}"));
            char *cj = json_dumps(conv, JSON_COMPACT);
            CHECK(qhx_prefix_cache_add_reply(pc, s, cj, strlen(cj), ids[0], (int)n[0]) == QHX_OK, "add_reply after a call");
            free(cj);
            json_array_append_new(msgs, json_pack("{s:s, s:s, s:s}", "role", "tool", "tool_call_id", "c0", "content", "The LORD is my shepherd."));
        }
        free(req), free(text);
    }
    free(ids[0]), free(ids[1]);
    json_decref(conv);
    qhx_prefix_cache_free(pc);
    free(want), free(got);
    qhx_prefix_cache_free(off);
    qhx_session_free(cold);
    qhx_session_free(s);
    qhx_model_close(m);
    qhx_runtime_free(rt);
    return tl_finish("prefix_cache");
}
