/* The prefix cache through the public API (qhexrt.h: qhx_prefix_cache_*), as an embedder runs a
 * chat: each turn's prompt is prefilled through the cache, then generated; after the reply the
 * cache keeps the next turn's start. Every turn's logits and greedy reply equal a cold session's
 * (a fresh session through a cache that is off: the same pieces, nothing resumed) bit for bit,
 * with a cache large enough for everything and one so small it evicts all the time; turns after
 * the first resume at their last user message. */
#include "testlib.h"

#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* what a conversation is held to: a cold session through a cache that is off */
typedef struct {
    qhx_session *s, *cold;
    qhx_prefix_cache *off;
    qhx_tokenizer *tok;
    float *want, *got;
    int vocab;
} chat_ctx;

/* Four turns through pc, each reply added to it: every turn's logits and greedy reply equal a cold
 * session's, bit for bit; cached[t]: the tokens turn t resumed of its lens[t]. Returns the conversation. */
static json_t *converse(chat_ctx *c, qhx_prefix_cache *pc, const char *label, int cached[4], int lens[4]) {
    const char *users[] = {"Who made the heaven and the earth?", "And what did he say unto Moses?", "Tell me of David.",
                           "Who was Samuel?"};
    json_t *conv = json_pack("{s:[{s:s, s:s}], s:b}", "messages", "role", "system", "content", "Answer from the scriptures.",
                             "enable_thinking", 0);
    for (int t = 0; t < 4; t++) {
        json_array_append_new(json_object_get(conv, "messages"), json_pack("{s:s, s:s}", "role", "user", "content", users[t]));
        char *req = json_dumps(conv, JSON_COMPACT), *text;
        size_t len, n;
        int32_t *ids;
        qhx_chat_render(req, strlen(req), &text, &len);
        qhx_tokenizer_encode(c->tok, text, len, QHX_ENCODE_SPECIAL, &ids, &n);
        reply rc, rw;
        int none;
        cached[t] = 0, lens[t] = (int)n;
        if (turn(c->cold, c->off, ids, (int)n, c->want, &rc, &none) || turn(c->s, pc, ids, (int)n, c->got, &rw, &cached[t])) break;
        CHECK(!memcmp(c->want, c->got, sizeof(float) * c->vocab), "%s turn %d: logits differ from a cold session's", label, t);
        CHECK(rc.n == rw.n && !memcmp(rc.ids, rw.ids, sizeof(int32_t) * rc.n), "%s turn %d: another reply", label, t);
        json_array_append_new(json_object_get(conv, "messages"), json_pack("{s:s, s:s}", "role", "assistant", "content", rw.text));
        char *cj = json_dumps(conv, JSON_COMPACT);
        CHECK(qhx_prefix_cache_add_reply(pc, c->s, cj, strlen(cj), ids, (int)n) == QHX_OK, "add_reply: %s", qhx_last_error());
        free(cj), free(req), free(text), free(ids);
    }
    return conv;
}

/* the .qhxstate files in dir */
static int state_files(const char *dir, char paths[][512], int cap) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *de; d && (de = readdir(d));)
        if (strstr(de->d_name, ".qhxstate") && !strstr(de->d_name, ".tmp-") && n < cap) snprintf(paths[n++], 512, "%s/%s", dir, de->d_name);
    if (d) closedir(d);
    return n;
}

/* Flips one byte in the middle of a file. */
static void damage(const char *path) {
    FILE *f = fopen(path, "r+b");
    if (!f) return;
    fseek(f, 0, SEEK_END);
    const long mid = ftell(f) / 2;
    fseek(f, mid, SEEK_SET);
    const int b = fgetc(f);
    fseek(f, mid, SEEK_SET);
    fputc(b ^ 0x40, f);
    fclose(f);
}

/* The cache's state files (qhx_prefix_cache_set_dir): a second cache on the same directory (a
 * restarted server) resumes the conversation's first turn from a file, with a cold session's
 * logits bit for bit; damaged files are found on reading, deleted, and the turn evaluated; files
 * the model cannot take (another KV form, not a state file) are left alone and unused; the
 * budget holds. */
static void test_dir(chat_ctx *c, qhx_model *m, qhx_runtime *rt) {
    char dir[] = "/tmp/qhx_pc_XXXXXX", paths[64][512];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp: %s", dir);
    int cached[4], lens[4];
    qhx_prefix_cache_stats st;
    qhx_prefix_cache *pc;
    qhx_prefix_cache_new(m, (uint64_t)1 << 30, &pc);
    CHECK(qhx_prefix_cache_set_dir(pc, dir, (uint64_t)1 << 30) == QHX_OK, "set_dir: %s", qhx_last_error());
    CHECK(qhx_prefix_cache_set_dir(pc, dir, (uint64_t)1 << 30) == QHX_ERR_ARG, "a second directory is refused");
    json_decref(converse(c, pc, "writing files", cached, lens));
    qhx_prefix_cache_get_stats(pc, &st);
    const int written = state_files(dir, paths, 64);
    CHECK(cached[0] == 0 && st.dir_writes > 0 && st.dir_files == written && written == st.entries && st.dir_hits == 0,
          "files: %d on disk, %d indexed, %lu written, %d in memory", written, st.dir_files, st.dir_writes, st.entries);
    qhx_prefix_cache_free(pc);

    /* what another runtime cannot take stays, unused: a state in f32 (this one keeps f16) and junk */
    qhx_runtime *rt32;
    qhx_model *m32;
    qhx_session *s32;
    qhx_snapshot *snap32 = NULL;
    char other[600], junk[600];
    snprintf(other, sizeof other, "%s/f32.qhxstate", dir), snprintf(junk, sizeof junk, "%s/junk.qhxstate", dir);
    const qhx_runtime_opts o32 = {.kv_cache = QHX_KV_F32};
    if (qhx_runtime_new(&o32, &rt32) == QHX_OK && qhx_model_open(rt32, "models/q35-kjv", &m32) == QHX_OK && qhx_session_new(m32, &s32) == QHX_OK) {
        const int32_t ids[3] = {1, 2, 3};
        qhx_session_eval(s32, ids, 3, QHX_EVAL_SEQUENCE, NULL, NULL);
        CHECK(qhx_session_snapshot(s32, &snap32) == QHX_OK && qhx_snapshot_save(snap32, other) == QHX_OK, "f32 state: %s", qhx_last_error());
        qhx_snapshot_free(snap32);
        qhx_session_free(s32);
        qhx_model_close(m32);
    }
    qhx_runtime_free(rt32);
    FILE *f = fopen(junk, "wb");
    if (f) fputs("not a state", f), fclose(f);

    /* a restarted server: memory empty, the files there */
    qhx_prefix_cache_new(m, (uint64_t)1 << 30, &pc);
    CHECK(qhx_prefix_cache_set_dir(pc, dir, (uint64_t)1 << 30) == QHX_OK, "set_dir again: %s", qhx_last_error());
    qhx_prefix_cache_get_stats(pc, &st);
    CHECK(st.dir_files == written && st.dir_others == 2, "reopened: %d files indexed of %d, %d others", st.dir_files, written, st.dir_others);
    json_decref(converse(c, pc, "from files", cached, lens));
    qhx_prefix_cache_get_stats(pc, &st);
    CHECK(cached[0] > 0 && st.dir_hits >= 1, "the first turn after a restart resumed %d tokens, %lu from files", cached[0], st.dir_hits);
    CHECK(access(other, F_OK) == 0 && access(junk, F_OK) == 0, "files the model cannot take are left alone");
    qhx_prefix_cache_free(pc);

    /* damaged: every file of the model, a byte flipped past its header */
    const int n = state_files(dir, paths, 64);
    for (int i = 0; i < n; i++)
        if (strcmp(paths[i], other) && strcmp(paths[i], junk)) damage(paths[i]);
    qhx_prefix_cache_new(m, (uint64_t)1 << 30, &pc);
    qhx_prefix_cache_set_dir(pc, dir, (uint64_t)1 << 30);
    json_decref(converse(c, pc, "damaged files", cached, lens));
    qhx_prefix_cache_get_stats(pc, &st);
    CHECK(cached[0] == 0 && st.dir_hits == 0 && st.dir_deleted >= 1, "damaged files: turn 0 resumed %d, %lu hits, %lu deleted", cached[0],
          st.dir_hits, st.dir_deleted);
    qhx_prefix_cache_free(pc);

    /* a budget of about one file: the least worth go, what is indexed is what is there */
    qhx_prefix_cache_new(m, (uint64_t)1 << 30, &pc);
    uint64_t one = 0;
    for (int i = 0; i < state_files(dir, paths, 64); i++) {
        FILE *g = fopen(paths[i], "rb");
        if (g && !fseek(g, 0, SEEK_END) && (uint64_t)ftell(g) > one && strcmp(paths[i], other) && strcmp(paths[i], junk)) one = (uint64_t)ftell(g);
        if (g) fclose(g);
    }
    qhx_prefix_cache_set_dir(pc, dir, one + one / 2);
    json_decref(converse(c, pc, "small budget", cached, lens));
    qhx_prefix_cache_get_stats(pc, &st);
    CHECK(st.dir_bytes <= one + one / 2 && st.dir_deleted > 0 && st.dir_files + 2 == state_files(dir, paths, 64),
          "budget %llu: %llu bytes in %d files (%d on disk), %lu deleted", (unsigned long long)(one + one / 2),
          (unsigned long long)st.dir_bytes, st.dir_files, state_files(dir, paths, 64), st.dir_deleted);
    qhx_prefix_cache_free(pc);
    for (int i = 0, k = state_files(dir, paths, 64); i < k; i++) remove(paths[i]);
    rmdir(dir);
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
    chat_ctx c = {s, cold, off, tok, want, got, mi.vocab_size};
    const uint64_t budgets[] = {(uint64_t)1 << 30, 40000, 0};
    for (int b = 0; b < 3; b++) {
        qhx_prefix_cache *pc;
        CHECK(qhx_prefix_cache_new(m, budgets[b], &pc) == QHX_OK, "new: %s", qhx_last_error());
        int cached[4], lens[4];
        char label[32];
        snprintf(label, sizeof label, "budget %llu", (unsigned long long)budgets[b]);
        json_t *conv = converse(&c, pc, label, cached, lens);
        /* with room, turns after the first resume at their last user message (past the reply) */
        for (int t = 1; t < 4 && b == 0; t++) CHECK(cached[t] > lens[t] / 2, "turn %d resumed %d of %d tokens", t, cached[t], lens[t]);
        for (int t = 0; t < 4 && b == 2; t++) CHECK(cached[t] == 0, "no cache, yet %d resumed", cached[t]);
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
    test_dir(&c, m, rt);
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
