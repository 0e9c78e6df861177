/* The MTP head against the golden data of the independent fp32 reference
 * (models/q35-kjv-mtp/golden/mtp.json): its logits at every position of the golden sequences, taken
 * in two ways: after a whole-sequence evaluation (qhx_mtp_observe) and position by position as
 * decoding drafts them (qhx_mtp_draft's first step after each stepwise token). Same tolerance and
 * measure as test_parity (max |ours - golden| over a row / the row's standard deviation). Also the
 * greedy draft hits beside the golden ones, and a model without the head refused. */
#include "qhexrt.h"
#include "qhexrt_tools.h"
#include "model/mtp.h"
#include "testlib.h"

#include "util/json.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TOL 2e-4
#define DIR "models/q35-kjv-mtp"

static double worst_seen;

/* worst row deviation of rows [0, n) against golden rows [g0, g0 + n) */
static double worst_dev(const float *ours, const float *gold, int g0, int n, int V) {
    double worst = 0;
    for (int t = 0; t < n; t++) {
        double d = tl_row_dev(ours + (size_t)t * V, gold + (size_t)(g0 + t) * V, V);
        if (!(d <= worst)) worst = d;
    }
    if (worst > worst_seen) worst_seen = worst;
    return worst;
}

static void check_golden(const char *dir, const char *kernels) {
    json_t *root = tl_json(DIR "/golden/mtp.json");
    qhx_runtime *rt;
    qhx_model *m;
    qhx_session *s;
    if (!root || tl_open(dir, kernels, &rt, &m, &s)) {
        json_decref(root);
        return;
    }
    const int exact = !strcmp(dir, DIR); /* the checkpoint: the fp32 reference's tolerance; a W8 bundle: hits only */
    qhx_model_info info;
    qhx_model_get_info(m, &info);
    CHECK(info.mtp_layers == 1, "mtp_layers %d", info.mtp_layers);
    const int V = info.vocab_size;
    const json_t *c;
    size_t ci;
    json_array_foreach(json_object_get(root, "cases"), ci, c) {
        const char *name = json_string_value(json_object_get(c, "name"));
        const json_t *jids = json_object_get(c, "sequence_ids");
        const int T = (int)json_array_size(jids), P = (int)json_integer_value(json_object_get(c, "prompt_tokens"));
        int32_t *S = malloc(sizeof(int32_t) * T);
        for (int i = 0; i < T; i++) S[i] = (int)json_integer_value(json_array_get(jids, i));
        char path[512];
        snprintf(path, sizeof path, DIR "/golden/%s", json_string_value(json_object_get(c, "mtp_logits_file")));
        size_t len;
        float *gold = tl_read(path, &len);
        CHECK(gold && len == sizeof(float) * (T - 1) * V, "%s: %zu bytes", path, len);
        float *ours = malloc(sizeof(float) * (size_t)T * V);
        int32_t draft[4];
        if (!gold) goto next;

        /* 1. the sequence but its last token, in two evaluations (each taken in whole: the queue
         * holds up to 64), then the last as a draft's first step */
        qhx_session_reset(s);
        qhx_mtp *d = NULL;
        int rows = -1, rows2 = -1;
        const int A = 40;
        CHECK(qhx_mtp_new(s, &d) == QHX_OK, "%s", qhx_last_error());
        CHECK(qhx_session_eval(s, S, A, QHX_EVAL_SEQUENCE, NULL, NULL) == QHX_OK && qhx_mtp_observe(d, A) == QHX_OK &&
                  qhx_mtp_flush(d, ours, &rows) == QHX_OK && rows == A - 1,
              "rows %d: %s", rows, qhx_last_error());
        CHECK(qhx_session_eval(s, S + A, T - 1 - A, QHX_EVAL_SEQUENCE, NULL, NULL) == QHX_OK && qhx_mtp_observe(d, T - 1 - A) == QHX_OK &&
                  qhx_mtp_flush(d, ours + (size_t)(A - 1) * V, &rows2) == QHX_OK && rows2 == T - 1 - A,
              "rows %d: %s", rows2, qhx_last_error());
        CHECK(qhx_mtp_draft(d, S[T - 1], draft, 3, ours + (size_t)(T - 2) * V) == 3, "%s", qhx_last_error());
        double w = worst_dev(ours, gold, 0, T - 1, V);
        printf("  %s sequence   max dev %.2e of logit std over %d positions\n", name, w, T - 1);
        CHECK(!exact || w < TOL, "%s sequence: deviation %.3e >= %.1e", name, w, TOL);
        int agree = 0, hits = 0, gold_hits = (int)json_integer_value(json_object_get(c, "greedy_draft_hits"));
        const json_t *gam = json_object_get(c, "mtp_argmax");
        for (int t = 0; t < T - 1; t++) agree += tl_argmax(ours + (size_t)t * V, V) == (int)json_integer_value(json_array_get(gam, t));
        for (int t = P - 1; t + 2 < T; t++) hits += tl_argmax(ours + (size_t)t * V, V) == S[t + 2];
        printf("  %s argmax = golden at %d/%d positions; greedy draft hits %d/%d (golden %d)\n", name, agree, T - 1, hits,
               T - 1 - P, gold_hits);
        /* W8 weights move the logits by ~1 %: near-ties of the head may flip, a few of them */
        CHECK(exact ? agree == T - 1 : agree >= T - 1 - 6, "%s: argmax differs at %d positions", name, T - 1 - agree);
        CHECK(exact ? hits == gold_hits : abs(hits - gold_hits) <= 3, "%s: %d greedy draft hits, golden %d", name, hits, gold_hits);
        if (!exact) goto done_case;
        qhx_mtp_free(d);

        /* 2. decoding: the prompt, then stepwise tokens, a draft of 1-3 before two of every three
         * (the third leaves its position queued, taken in with the next draft's) */
        qhx_session_reset(s);
        d = NULL;
        CHECK(qhx_mtp_new(s, &d) == QHX_OK, "%s", qhx_last_error());
        CHECK(qhx_session_eval(s, S, P, QHX_EVAL_SEQUENCE, NULL, NULL) == QHX_OK, "%s", qhx_last_error());
        CHECK(qhx_mtp_observe(d, P) == QHX_OK && qhx_mtp_flush(d, ours, &rows) == QHX_OK && rows == P - 1, "rows %d", rows);
        int ok = 1, drafted = P - 1;
        for (int t = P; t < T && ok; t++) {
            if (t % 3 == 2) memcpy(ours + (size_t)drafted++ * V, gold + (size_t)(t - 1) * V, sizeof(float) * V);
            else ok = qhx_mtp_draft(d, S[t], draft, t % 3 + 1, ours + (size_t)drafted++ * V) == t % 3 + 1;
            ok = ok && qhx_session_eval(s, S + t, 1, QHX_EVAL_STEPWISE, NULL, NULL) == QHX_OK && qhx_mtp_observe(d, 1) == QHX_OK;
        }
        CHECK(ok, "decoding %s: %s", name, qhx_last_error());
        w = worst_dev(ours, gold, 0, T - 1, V);
        printf("  %s decoding   max dev %.2e of logit std over %d positions (a third queued, not drafted)\n", name, w, T - 1);
        CHECK(w < TOL, "%s decoding: deviation %.3e >= %.1e", name, w, TOL);
    done_case:
        qhx_mtp_free(d);
    next:
        free(ours);
        free(gold);
        free(S);
    }
    json_decref(root);
    qhx_session_free(s);
    qhx_model_close(m);
    qhx_runtime_free(rt);
}

/* A drafter on a model without the head is refused with a message naming the model. */
static void check_missing(void) {
    qhx_model *m;
    qhx_session *s;
    qhx_mtp *d = NULL;
    CHECK(qhx_model_open(NULL, "models/q35-kjv", &m) == QHX_OK, "%s", qhx_last_error());
    CHECK(qhx_session_new(m, &s) == QHX_OK, "%s", qhx_last_error());
    CHECK(qhx_mtp_new(s, &d) == QHX_ERR_ARG && !d, "a drafter on a model without mtp.*");
    CHECK(strstr(qhx_last_error(), "models/q35-kjv") && strstr(qhx_last_error(), "MTP"), "message: %s", qhx_last_error());
    qhx_session_free(s);
    qhx_model_close(m);
}

int main(void) {
    tl_kv = QHX_KV_F32; /* the golden logits are the fp32 reference's: the exact KV cache */
    if (!tl_quick()) check_golden(DIR, "ref");
    check_golden(DIR, "auto");
    char root[128], cmd[300];
    snprintf(root, sizeof root, "/tmp/qhx-test-mtp-%d", (int)getpid());
    qhx_forge_opts fo = {.checkpoint = DIR, .out = root};
    CHECK(qhx_forge(&fo) == QHX_OK, "forge: %s", qhx_last_error());
    const double exact_worst = worst_seen;
    check_golden(root, "auto"); /* the head forged to W8, in its own file */
    worst_seen = exact_worst;
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    if (system(cmd)) return 1;
    check_missing();
    printf("  worst deviation %.2e of logit std (tolerance %.0e)\n", worst_seen, TOL);
    return tl_finish("mtp");
}
