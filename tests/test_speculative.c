/* Speculative decoding against plain decoding: greedy output token for token, and the session
 * afterwards bit for bit (the next logits), on both shipped models' golden prompts, a prompt that
 * quotes itself, and 512-token generations, on checkpoints and 1- and 2-shard bundles, over
 * several draft lengths; the sampler's draft rule against the exact distribution; bad options. */
#include "qhexrt.h"
#include "qhexrt_tools.h"
#include "testlib.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    int32_t ids[1024];
    int n;
} collected;

static int collect(int32_t tok, const char *text, size_t len, void *user) {
    collected *c = user;
    (void)text, (void)len;
    if (tok >= 0 && c->n < 1024) c->ids[c->n++] = tok;
    return 0;
}

/* ids and final next-token logits of one generation */
static int run(qhx_model *m, const int32_t *prompt, int n, qhx_generate_opts o, collected *out, float *next, qhx_generate_result *res) {
    qhx_session *s;
    if (qhx_session_new(m, &s)) return -1;
    out->n = 0;
    int rc = qhx_generate(s, prompt, n, &o, collect, out, res);
    const int32_t probe = 11;
    if (!rc) rc = qhx_session_eval(s, &probe, 1, QHX_EVAL_STEPWISE, NULL, next);
    if (!rc) out->ids[1023] = qhx_session_pos(s); /* where the session stood (ids never reach 1023 here) */
    qhx_session_free(s);
    return rc;
}

static const char *const prompts[] = {
    "In the beginning", "And the LORD said unto Moses,", "Blessed are the poor in spirit: for",
    /* a passage quoted twice, so the continuation repeats the context */
    "And God said, Let there be light: and there was light. And God saw the light, that it was good: and God divided "
    "the light from the darkness. And God said, Let there be light: and there was light. And God saw the light,"};

static void check_model(const char *path, int drafter, int tokens, int quick, int must_accept) {
    qhx_model *m;
    if (qhx_model_open(NULL, path, &m)) { CHECK(0, "open %s: %s", path, qhx_last_error()); return; }
    qhx_tokenizer *tok;
    qhx_model_tokenizer(m, &tok);
    qhx_model_info mi;
    qhx_model_get_info(m, &mi);
    float *want = malloc(sizeof(float) * mi.vocab_size), *got = malloc(sizeof(float) * mi.vocab_size);
    static collected a, b;
    int drafted = 0, accepted = 0;
    for (size_t p = quick ? 2 : 0; p < sizeof prompts / sizeof *prompts; p++) {
        int32_t *ids;
        size_t n;
        if (qhx_tokenizer_encode(tok, prompts[p], strlen(prompts[p]), 0, &ids, &n)) { CHECK(0, "encode"); continue; }
        qhx_generate_opts plain = {.max_tokens = tokens, .ignore_eos = 1};
        qhx_generate_result rp, rs;
        CHECK(run(m, ids, (int)n, plain, &a, want, &rp) == 0, "%s: plain: %s", path, qhx_last_error());
        for (int dm = quick ? 8 : 1; dm <= 16; dm = quick ? 17 : dm * 4) {
            qhx_generate_opts spec = plain;
            spec.draft = drafter, spec.draft_max = dm;
            CHECK(run(m, ids, (int)n, spec, &b, got, &rs) == 0, "%s: speculative: %s", path, qhx_last_error());
            int same = a.n == b.n && !memcmp(a.ids, b.ids, sizeof(int32_t) * a.n), at = 0;
            while (at < a.n && at < b.n && a.ids[at] == b.ids[at]) at++;
            CHECK(same, "%s prompt %zu draft-max %d: ids differ from plain decoding at %d of %d", path, p, dm, at, a.n);
            CHECK(a.ids[1023] == b.ids[1023] && !memcmp(want, got, sizeof(float) * mi.vocab_size),
                  "%s prompt %zu draft-max %d: the session after speculation is not the plain one (pos %d vs %d)", path, p, dm,
                  b.ids[1023], a.ids[1023]);
            CHECK(rs.n_accepted <= rs.n_drafted && rs.n_generated == rp.n_generated, "%s: counts %d/%d", path, rs.n_accepted, rs.n_drafted);
            drafted += rs.n_drafted, accepted += rs.n_accepted;
        }
        free(ids);
    }
    printf("  %-40s %-5s %d tokens: speculative == plain (drafted %d, accepted %d)\n", path,
           drafter == QHX_DRAFT_MTP ? "mtp" : "ngram", tokens, drafted, accepted);
    CHECK(!must_accept || accepted > 0, "%s: no draft was ever accepted", path);
    free(want), free(got);
    qhx_model_close(m);
}

/* sampled decoding with drafts gives the tokens sampled decoding without them gives for the seed
 * (a draft is kept when the token drawn as without drafts is the draft), for each drafter, over
 * sampler settings that keep many tokens and few */
static void sampled_same(const char *path, int drafter) {
    qhx_model *m;
    if (qhx_model_open(NULL, path, &m)) { CHECK(0, "open %s: %s", path, qhx_last_error()); return; }
    qhx_model_info mi;
    qhx_model_get_info(m, &mi);
    float *want = malloc(sizeof(float) * mi.vocab_size), *got = malloc(sizeof(float) * mi.vocab_size);
    const int32_t prompt[] = {40, 77, 258, 2419, 268, 379, 198, 76, 725, 11, 40, 77, 258, 2419, 268, 379, 198, 76, 725, 11}; /* said twice */
    const qhx_generate_opts settings[] = {
        {.temperature = 1.0f, .seed = 1},
        {.temperature = 0.7f, .top_p = 0.9f, .seed = 2},
        {.temperature = 0.8f, .top_k = 5, .repeat_penalty = 1.2f, .seed = 3},
        {.temperature = 0.3f, .min_p = 0.1f, .presence_penalty = 0.5f, .seed = 4},
    };
    static collected a, b;
    int drafted = 0, accepted = 0;
    for (size_t k = 0; k < sizeof settings / sizeof *settings; k++) {
        qhx_generate_opts plain = settings[k], spec = settings[k];
        plain.max_tokens = spec.max_tokens = 96, plain.ignore_eos = spec.ignore_eos = 1;
        spec.draft = drafter;
        qhx_generate_result rs;
        CHECK(run(m, prompt, 20, plain, &a, want, NULL) == 0 && run(m, prompt, 20, spec, &b, got, &rs) == 0, "%s: %s", path, qhx_last_error());
        int at = 0;
        while (at < a.n && at < b.n && a.ids[at] == b.ids[at]) at++;
        CHECK(a.n == b.n && at == a.n && !memcmp(want, got, sizeof(float) * mi.vocab_size),
              "%s setting %zu: sampled with drafts differs from without at %d of %d", path, k, at, a.n);
        drafted += rs.n_drafted, accepted += rs.n_accepted;
    }
    printf("  %-40s %-5s sampled, 4 settings: with drafts == without (drafted %d, accepted %d)\n", path,
           drafter == QHX_DRAFT_MTP ? "mtp" : "ngram", drafted, accepted);
    free(want), free(got);
    qhx_model_close(m);
}

/* sampled generation with drafts: a seed repeats its tokens; bad options are refused */
static void sampled_and_bad(void) {
    qhx_model *m;
    if (qhx_model_open(NULL, "models/q35-kjv", &m)) { CHECK(0, "open: %s", qhx_last_error()); return; }
    const int32_t prompt[] = {1, 2, 3, 4, 5, 1, 2, 3};
    qhx_generate_opts o = {.max_tokens = 48, .temperature = 0.8f, .top_p = 0.95f, .seed = 42, .draft = QHX_DRAFT_NGRAM};
    static collected x, y;
    float *l = malloc(sizeof(float) * 4160);
    qhx_generate_result r;
    CHECK(run(m, prompt, 8, o, &x, l, &r) == 0 && run(m, prompt, 8, o, &y, l, &r) == 0, "sampled: %s", qhx_last_error());
    CHECK(x.n == y.n && !memcmp(x.ids, y.ids, sizeof(int32_t) * x.n), "sampled speculative generation is not repeatable by seed");
    qhx_session *s;
    qhx_session_new(m, &s);
    qhx_generate_opts bad = {.max_tokens = 4, .draft = 7};
    CHECK(qhx_generate(s, prompt, 8, &bad, NULL, NULL, NULL) == QHX_ERR_ARG && strstr(qhx_last_error(), "draft 7"), "draft 7: %s",
          qhx_last_error());
    bad.draft = QHX_DRAFT_MTP, bad.draft_max = 0; /* q35-kjv carries no head */
    CHECK(qhx_generate(s, prompt, 8, &bad, NULL, NULL, NULL) == QHX_ERR_ARG && strstr(qhx_last_error(), "MTP head") &&
              qhx_session_pos(s) == 0,
          "mtp without a head: %s", qhx_last_error());
    bad.draft = QHX_DRAFT_NGRAM, bad.draft_max = QHX_MAX_DRAFT + 1;
    CHECK(qhx_generate(s, prompt, 8, &bad, NULL, NULL, NULL) == QHX_ERR_ARG && strstr(qhx_last_error(), "draft_max"), "draft_max: %s",
          qhx_last_error());
    qhx_session_free(s);
    free(l);
    qhx_model_close(m);
}

int main(void) {
    char root[256], b1[300], b2[300], m1[300], m2[300], cmd[700];
    snprintf(root, sizeof root, "/tmp/qhx-test-spec-%d", (int)getpid());
    snprintf(b1, sizeof b1, "%s/b1", root), snprintf(b2, sizeof b2, "%s/b2", root);
    snprintf(m1, sizeof m1, "%s/m1", root), snprintf(m2, sizeof m2, "%s/m2", root);
    snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", root, root);
    if (system(cmd)) return 1;
    qhx_forge_opts fo = {.checkpoint = "models/q35-kjv", .out = b1};
    CHECK(qhx_forge(&fo) == QHX_OK, "forge: %s", qhx_last_error());
    fo.out = b2, fo.max_context_bytes = 3500000; /* 2 shards (tests/bundle_test.sh) */
    CHECK(qhx_forge(&fo) == QHX_OK, "forge: %s", qhx_last_error());
    qhx_forge_opts fm = {.checkpoint = "models/q35-kjv-mtp", .out = m1}; /* with the head's own file */
    CHECK(qhx_forge(&fm) == QHX_OK, "forge: %s", qhx_last_error());
    fm.out = m2, fm.max_context_bytes = 3500000;
    CHECK(qhx_forge(&fm) == QHX_OK, "forge: %s", qhx_last_error());
    const int NG = QHX_DRAFT_NGRAM, MTP = QHX_DRAFT_MTP;
    if (tl_quick()) { /* each drafter on a checkpoint and a 2-shard bundle, greedy and sampled */
        check_model("models/q35-kjv", NG, 64, 1, 1);
        check_model(b2, NG, 64, 1, 1);
        check_model("models/q35-kjv-mtp", MTP, 64, 1, 1);
        check_model(m2, MTP, 64, 1, 1);
        sampled_same("models/q35-kjv", NG);
        sampled_and_bad();
        snprintf(cmd, sizeof cmd, "rm -rf %s", root);
        if (system(cmd)) return 1;
        return tl_finish("test_speculative");
    }
    check_model("models/q35-kjv", NG, 64, 0, 1);
    check_model("models/q35-rand-tiny", NG, 64, 0, 0); /* random weights: its text never repeats, so nothing is drafted */
    check_model(b1, NG, 64, 0, 1);
    check_model(b2, NG, 64, 1, 1);
    check_model("models/q35-kjv", NG, 512, 1, 1);
    check_model(b1, NG, 512, 1, 1);
    check_model("models/q35-kjv-mtp", MTP, 64, 0, 1);
    check_model("models/q35-kjv-mtp", MTP, 512, 1, 1);
    check_model("models/q35-moe-kjv", NG, 64, 1, 1);
    check_model("models/q35-moe-tiny", MTP, 64, 1, 0); /* its MTP head's MLP is a MoE block too (random weights) */
    check_model(m1, MTP, 64, 0, 1);
    check_model(m2, MTP, 64, 1, 1);
    check_model(m1, MTP, 512, 1, 1);
    sampled_same("models/q35-kjv", NG);
    sampled_same("models/q35-kjv-mtp", MTP);
    sampled_and_bad();
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    if (system(cmd)) return 1;
    return tl_finish("test_speculative");
}
