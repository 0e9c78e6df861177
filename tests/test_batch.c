/* qhx_sessions_step against lone steps, bit for bit: sessions at different positions (different
 * prompts, some long enough for attention in tiles), stepped together for several tokens in
 * batches of 1, 2, 3, 8 and 19 (two passes), must give every row and every later state exactly
 * what stepping each alone gives; on a checkpoint and a 2-shard bundle, every kernel family (the
 * scalar ones, ten times slower, on the first two batch sizes), and the same on an MoE model, whose
 * routing and expert grouping are the same C for every family, on the SIMD families. Then a rewind
 * across a batched step, and the refusals. */
#include "qhexrt.h"
#include "qhexrt_tools.h"
#include "testlib.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { MAXN = 19, STEPS = 5 };

static int32_t prompt_tok(int i, int t) { return (int32_t)((i * 7919 + t * 104729 + 13) % 4000) + 10; }
static int prompt_len(int i) { return 3 + (i * 37) % 90; } /* 3 .. 92: some past a chunk of 64 */

static int same(const float *a, const float *b, size_t n) { return !memcmp(a, b, n * sizeof(float)); }

/* a family whose kernels are scalar C: slow, so fewer batch sizes */
static int scalar_family(const char *k) { return !strncmp(k, "scalar", 6) || !strcmp(k, "ref"); }

static void check_model(const char *path, const char *kernels) {
    qhx_runtime_opts ro = {.kernels = kernels, .n_threads = 2};
    qhx_runtime *rt;
    qhx_model *m;
    if (qhx_runtime_new(&ro, &rt)) return;
    if (qhx_model_open(rt, path, &m)) { CHECK(0, "%s: %s", path, qhx_last_error()); qhx_runtime_free(rt); return; }
    qhx_model_info mi;
    qhx_model_get_info(m, &mi);
    const size_t V = (size_t)mi.vocab_size;
    float *alone = malloc(sizeof(float) * V * MAXN), *batch = malloc(sizeof(float) * V * MAXN);
    qhx_session *a[MAXN], *b[MAXN];
    const int sizes[] = {3, MAXN, 1, 2, 8}; /* quick: the first two */
    int rows = 0;
    for (size_t k = 0; k < (tl_quick() || scalar_family(kernels) ? 2 : sizeof sizes / sizeof *sizes); k++) {
        const int n = sizes[k];
        for (int i = 0; i < n; i++) {
            int32_t p[100];
            for (int t = 0; t < prompt_len(i); t++) p[t] = prompt_tok(i, t);
            qhx_session_new(m, &a[i]), qhx_session_new(m, &b[i]);
            qhx_session_eval(a[i], p, prompt_len(i), QHX_EVAL_SEQUENCE, NULL, NULL);
            qhx_session_eval(b[i], p, prompt_len(i), QHX_EVAL_SEQUENCE, NULL, NULL);
        }
        int ok = 1;
        for (int step = 0; step < STEPS; step++) {
            int32_t tok[MAXN];
            for (int i = 0; i < n; i++) tok[i] = prompt_tok(i + 100, step);
            for (int i = 0; i < n; i++) ok &= qhx_session_eval(a[i], &tok[i], 1, QHX_EVAL_STEPWISE, NULL, alone + i * V) == QHX_OK;
            ok &= qhx_sessions_step(b, tok, n, batch) == QHX_OK;
            for (int i = 0; i < n; i++) ok &= same(alone + i * V, batch + i * V, V) && qhx_session_pos(a[i]) == qhx_session_pos(b[i]);
            rows += n;
        }
        /* the states after: a sequence call on each gives the same logits */
        for (int i = 0; i < n; i++) {
            const int32_t more[3] = {11, 12, 13};
            qhx_session_eval(a[i], more, 3, QHX_EVAL_SEQUENCE, alone, NULL);
            qhx_session_eval(b[i], more, 3, QHX_EVAL_SEQUENCE, batch, NULL);
            ok &= same(alone, batch, 3 * V);
        }
        CHECK(ok, "%s [%s]: %d sessions stepped together differ from lone steps", path, kernels, n);
        for (int i = 0; i < n; i++) qhx_session_free(a[i]), qhx_session_free(b[i]);
    }
    /* a mark before a batched step: the rewind still lands on a lone session's state */
    qhx_session *s[2], *cold;
    const int32_t p[5] = {40, 77, 258, 2419, 268}, t1[2] = {379, 198}, t2[2] = {76, 725};
    qhx_session_new(m, &s[0]), qhx_session_new(m, &s[1]), qhx_session_new(m, &cold);
    qhx_session_eval(s[0], p, 5, QHX_EVAL_SEQUENCE, NULL, NULL), qhx_session_eval(s[1], p, 3, QHX_EVAL_SEQUENCE, NULL, NULL);
    qhx_session_eval(cold, p, 5, QHX_EVAL_SEQUENCE, NULL, NULL);
    qhx_session_mark(s[0]);
    CHECK(qhx_sessions_step(s, t1, 2, NULL) == QHX_OK && qhx_sessions_step(s, t2, 2, NULL) == QHX_OK, "step: %s", qhx_last_error());
    CHECK(qhx_session_rewind(s[0], 6) == QHX_OK, "rewind after batched steps: %s", qhx_last_error());
    qhx_session_eval(cold, &t1[0], 1, QHX_EVAL_STEPWISE, NULL, NULL);
    qhx_session_eval(s[0], &t2[1], 1, QHX_EVAL_STEPWISE, NULL, batch);
    qhx_session_eval(cold, &t2[1], 1, QHX_EVAL_STEPWISE, NULL, alone);
    CHECK(same(alone, batch, V), "%s [%s]: a rewind across batched steps is not the lone session's state", path, kernels);
    /* refusals leave every session where it was */
    const int pos0 = qhx_session_pos(s[0]), pos1 = qhx_session_pos(s[1]);
    qhx_session *dup[2] = {s[0], s[0]};
    const int32_t bad[2] = {5, mi.vocab_size};
    CHECK(qhx_sessions_step(dup, t1, 2, NULL) == QHX_ERR_ARG && strstr(qhx_last_error(), "also session"), "duplicate: %s", qhx_last_error());
    CHECK(qhx_sessions_step(s, bad, 2, NULL) == QHX_ERR_RANGE && strstr(qhx_last_error(), "session 1"), "bad id: %s", qhx_last_error());
    CHECK(qhx_session_pos(s[0]) == pos0 && qhx_session_pos(s[1]) == pos1, "a refused step moved a session");
    qhx_session_free(s[0]), qhx_session_free(s[1]), qhx_session_free(cold);
    printf("  %-40s [%-11s] %d batched rows == lone steps\n", path, kernels, rows);
    free(alone), free(batch);
    qhx_model_close(m);
    qhx_runtime_free(rt);
}

int main(void) {
    char root[256], b2[300], cmd[600];
    snprintf(root, sizeof root, "/tmp/qhx-test-batch-%d", (int)getpid());
    snprintf(b2, sizeof b2, "%s/b2", root);
    snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", root, root);
    if (system(cmd)) return 1;
    qhx_forge_opts fo = {.checkpoint = "models/q35-kjv", .out = b2, .max_context_bytes = 3500000}; /* 2 shards */
    CHECK(qhx_forge(&fo) == QHX_OK, "forge: %s", qhx_last_error());
    const char *sets[8];
    const int n_sets = tl_kernel_families(sets);
    check_model("models/q35-kjv", "auto");
    for (int k = 0; k < n_sets; k++) check_model(b2, sets[k]);
    /* MoE: tokens of different sessions share experts in a step (grouped by expert) */
    snprintf(b2, sizeof b2, "%s/moe2", root);
    qhx_forge_opts fm = {.checkpoint = "models/q35-moe-kjv", .out = b2, .max_context_bytes = 12000000};
    CHECK(qhx_forge(&fm) == QHX_OK, "forge: %s", qhx_last_error());
    check_model("models/q35-moe-kjv", "auto");
    for (int k = 0; k < n_sets; k++)
        if (!scalar_family(sets[k])) check_model(b2, sets[k]);
    /* the shared expert as wide as a routed one (35B-A3B): a lone step runs its down in the experts' group */
    snprintf(b2, sizeof b2, "%s/tiny-moe", root);
    CHECK(qhx_synth("tiny-moe", 5, b2, 1, NULL, NULL) == QHX_OK, "synth: %s", qhx_last_error());
    check_model(b2, "auto");
    qhx_model *m1, *m2;
    if (qhx_model_open(NULL, "models/q35-kjv", &m1) == QHX_OK && qhx_model_open(NULL, "models/q35-rand-tiny", &m2) == QHX_OK) {
        qhx_session *s[2];
        qhx_session_new(m1, &s[0]), qhx_session_new(m2, &s[1]);
        const int32_t t[2] = {1, 2};
        CHECK(qhx_sessions_step(s, t, 2, NULL) == QHX_ERR_ARG && strstr(qhx_last_error(), "model"), "two models: %s", qhx_last_error());
        qhx_session_free(s[0]), qhx_session_free(s[1]);
        qhx_model_close(m1), qhx_model_close(m2);
    }
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    if (system(cmd)) return 1;
    return tl_finish("batch");
}
