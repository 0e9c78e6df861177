/* Snapshots and state files against cold runs, bit for bit: on q35-kjv as a checkpoint and forged
 * to 1- and 2-shard bundles, on every kernel family this CPU runs (tests/testlib.h). A cold session
 * evaluates the token script below call by call; sessions that take, restore, branch and reload
 * snapshots between the same calls must give the identical logits. Then every way a state file
 * can be bad. */
#include "qhexrt.h"
#include "qhexrt_tools.h"
#include "testlib.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char root[256];

/* The script: a prompt of P as one sequence (snapshot S1), Q more as a sequence, 3 single-token
 * steps (snapshot S2), R more as a sequence; the branch: BR other tokens after S1. */
enum { P = 37, Q = 29, STEPS = 3, R = 11, BR = 9, N_TOK = P + Q + STEPS + R };
static int32_t tok[N_TOK], branch[BR];

typedef struct {
    qhx_model *m;
    int V;
    float *q, *r, *b; /* cold logits of the Q part, the R part, the branch */
} fixture;

static qhx_status eval(qhx_session *s, int from, int n, qhx_eval_mode mode, float *logits) {
    return qhx_session_eval(s, tok + from, n, mode, logits, NULL);
}

static int same(const float *a, const float *b, size_t n) { return memcmp(a, b, sizeof(float) * n) == 0; }

static void cold(fixture *f) {
    qhx_session *s;
    qhx_session_new(f->m, &s);
    eval(s, 0, P, QHX_EVAL_SEQUENCE, NULL);
    eval(s, P, Q, QHX_EVAL_SEQUENCE, f->q);
    eval(s, P + Q, STEPS, QHX_EVAL_STEPWISE, NULL);
    eval(s, P + Q + STEPS, R, QHX_EVAL_SEQUENCE, f->r);
    qhx_session_reset(s);
    eval(s, 0, P, QHX_EVAL_SEQUENCE, NULL);
    qhx_session_eval(s, branch, BR, QHX_EVAL_SEQUENCE, f->b, NULL);
    qhx_session_free(s);
}

static void check_model(const char *path, const char *kernels, qhx_model *other) {
    qhx_runtime_opts ro = {.kernels = kernels, .n_threads = 2};
    qhx_runtime *rt;
    if (qhx_runtime_new(&ro, &rt)) return; /* a set this CPU does not run */
    char what[400];
    snprintf(what, sizeof what, "%s [%s]", path, kernels);
    fixture f = {0};
    if (qhx_model_open(rt, path, &f.m)) { CHECK(0, "%s: %s", what, qhx_last_error()); qhx_runtime_free(rt); return; }
    qhx_model_info info;
    qhx_model_get_info(f.m, &info);
    f.V = info.vocab_size;
    float *l = malloc(sizeof(float) * f.V * Q);
    f.q = malloc(sizeof(float) * f.V * Q), f.r = malloc(sizeof(float) * f.V * R), f.b = malloc(sizeof(float) * f.V * BR);
    cold(&f);

    qhx_session *a, *b, *d;
    qhx_session_new(f.m, &a), qhx_session_new(f.m, &b), qhx_session_new(f.m, &d);
    qhx_snapshot *s1, *s2, *s2f = NULL;
    eval(a, 0, P, QHX_EVAL_SEQUENCE, NULL);
    CHECK(qhx_session_snapshot(a, &s1) == QHX_OK, "%s: snapshot: %s", what, qhx_last_error());
    eval(a, P, Q, QHX_EVAL_SEQUENCE, l);
    CHECK(same(l, f.q, (size_t)f.V * Q), "%s: taking a snapshot changed the logits after it", what);
    eval(a, P + Q, STEPS, QHX_EVAL_STEPWISE, NULL);
    CHECK(qhx_session_snapshot(a, &s2) == QHX_OK, "%s: snapshot after single steps: %s", what, qhx_last_error());
    eval(a, P + Q + STEPS, R, QHX_EVAL_SEQUENCE, l);
    CHECK(same(l, f.r, (size_t)f.V * R), "%s: logits after the second snapshot differ from cold", what);

    /* back in the session that took it (its KV rows still held: only the recurrent state moves) */
    CHECK(qhx_session_restore(a, s1) == QHX_OK, "%s: restore: %s", what, qhx_last_error());
    CHECK(qhx_session_pos(a) == P, "%s: position %d after restore, want %d", what, qhx_session_pos(a), P);
    eval(a, P, Q, QHX_EVAL_SEQUENCE, l);
    CHECK(same(l, f.q, (size_t)f.V * Q), "%s: restored in its own session: logits differ from cold", what);
    /* two conversations from one prefix, then forward again past the branch point */
    CHECK(qhx_session_restore(a, s1) == QHX_OK, "%s: restore: %s", what, qhx_last_error());
    qhx_session_eval(a, branch, BR, QHX_EVAL_SEQUENCE, l, NULL);
    CHECK(same(l, f.b, (size_t)f.V * BR), "%s: branch from the snapshot differs from cold", what);
    CHECK(qhx_session_restore(a, s2) == QHX_OK, "%s: restore: %s", what, qhx_last_error());
    eval(a, P + Q + STEPS, R, QHX_EVAL_SEQUENCE, l);
    CHECK(same(l, f.r, (size_t)f.V * R), "%s: restore past an overwritten branch differs from cold", what);
    CHECK(!memcmp(qhx_session_tokens(a), tok, sizeof(int32_t) * N_TOK), "%s: session tokens wrong after restore", what);

    /* into a fresh session: every KV row comes from the snapshots */
    CHECK(qhx_session_restore(b, s2) == QHX_OK, "%s: restore: %s", what, qhx_last_error());
    eval(b, P + Q + STEPS, R, QHX_EVAL_SEQUENCE, l);
    CHECK(same(l, f.r, (size_t)f.V * R), "%s: restored into a fresh session: logits differ from cold", what);
    CHECK(qhx_session_restore(b, s1) == QHX_OK, "%s: restore: %s", what, qhx_last_error());
    qhx_session_eval(b, branch, BR, QHX_EVAL_SEQUENCE, l, NULL);
    CHECK(same(l, f.b, (size_t)f.V * BR), "%s: second branch in another session differs from cold", what);

    /* the sizes: S2 added the Q + STEPS rows since S1 and shares S1's P */
    qhx_snapshot_info i1, i2;
    qhx_snapshot_get_info(s1, &i1), qhx_snapshot_get_info(s2, &i2);
    CHECK(i2.pos == P + Q + STEPS && i2.state_bytes == info.state_bytes, "%s: snapshot info pos %d state %llu", what, i2.pos,
          (unsigned long long)i2.state_bytes);
    CHECK(i1.kv_bytes == P * info.kv_bytes_per_token && i2.kv_bytes == (Q + STEPS) * info.kv_bytes_per_token &&
              i2.kv_shared_bytes == P * info.kv_bytes_per_token,
          "%s: KV bytes %llu / %llu shared %llu", what, (unsigned long long)i1.kv_bytes, (unsigned long long)i2.kv_bytes,
          (unsigned long long)i2.kv_shared_bytes);
    int32_t ids[N_TOK];
    CHECK(qhx_snapshot_tokens(s2, ids, N_TOK) == P + Q + STEPS && !memcmp(ids, tok, sizeof(int32_t) * (P + Q + STEPS)),
          "%s: snapshot tokens", what);

    /* through a file, into a third session */
    char file[400];
    snprintf(file, sizeof file, "%s/s2.state", root);
    CHECK(qhx_snapshot_save(s2, file) == QHX_OK, "%s: save: %s", what, qhx_last_error());
    CHECK(qhx_snapshot_load(f.m, file, &s2f) == QHX_OK, "%s: load: %s", what, qhx_last_error());
    if (s2f) {
        CHECK(qhx_session_restore(d, s2f) == QHX_OK, "%s: restore loaded: %s", what, qhx_last_error());
        eval(d, P + Q + STEPS, R, QHX_EVAL_SEQUENCE, l);
        CHECK(same(l, f.r, (size_t)f.V * R), "%s: restored from a file: logits differ from cold", what);
    }

    /* a stepwise call of several tokens (what a speculative verify runs) is bit for bit that many
     * one-token calls: logits of every position, and the state after them */
    for (int K = 9; K <= 20; K += 11) { /* 20: past the 16 tokens the decode kernels take at once */
        float *lk = malloc(sizeof(float) * f.V * (K + R)), *l1 = malloc(sizeof(float) * f.V * (K + R));
        qhx_session *x, *y;
        qhx_session_new(f.m, &x), qhx_session_new(f.m, &y);
        eval(x, 0, P, QHX_EVAL_SEQUENCE, NULL), eval(y, 0, P, QHX_EVAL_SEQUENCE, NULL);
        qhx_session_eval(x, tok + P, K, QHX_EVAL_STEPWISE, lk, NULL);
        for (int t = 0; t < K; t++) qhx_session_eval(y, tok + P + t, 1, QHX_EVAL_STEPWISE, l1 + (size_t)t * f.V, NULL);
        CHECK(same(lk, l1, (size_t)f.V * K), "%s: %d tokens in one stepwise call differ from %d one-token calls", what, K, K);
        qhx_session_eval(x, tok + P + K, R, QHX_EVAL_SEQUENCE, lk, NULL), qhx_session_eval(y, tok + P + K, R, QHX_EVAL_SEQUENCE, l1, NULL);
        CHECK(same(lk, l1, (size_t)f.V * R), "%s: the state after a %d-token stepwise call differs", what, K);
        qhx_session_free(x), qhx_session_free(y);
        free(lk), free(l1);
    }

    /* a mark, then QHX_MAX_REWIND stepwise tokens (two decode pieces), rewound to k of them: the
     * next R tokens give what a session that evaluated only those k gives, bit for bit */
    {
        enum { K = QHX_MAX_REWIND };
        float *lr = malloc(sizeof(float) * f.V * R), *lc = malloc(sizeof(float) * f.V * R);
        qhx_session *x, *y;
        qhx_session_new(f.m, &x), qhx_session_new(f.m, &y);
        const int ks[] = {0, 1, 6, 16, 17};
        for (size_t i = 0; i < sizeof ks / sizeof *ks; i++) {
            const int k = ks[i];
            qhx_session_reset(x), qhx_session_reset(y);
            eval(x, 0, P, QHX_EVAL_SEQUENCE, NULL), eval(y, 0, P, QHX_EVAL_SEQUENCE, NULL);
            CHECK(qhx_session_mark(x) == QHX_OK, "%s: mark: %s", what, qhx_last_error());
            eval(x, P, K, QHX_EVAL_STEPWISE, NULL);
            CHECK(qhx_session_rewind(x, P + k) == QHX_OK && qhx_session_pos(x) == P + k, "%s: rewind to %d: %s", what, P + k,
                  qhx_last_error());
            for (int t = 0; t < k; t++) eval(y, P + t, 1, QHX_EVAL_STEPWISE, NULL);
            eval(x, P + k, R, i % 2 ? QHX_EVAL_SEQUENCE : QHX_EVAL_STEPWISE, lr);
            eval(y, P + k, R, i % 2 ? QHX_EVAL_SEQUENCE : QHX_EVAL_STEPWISE, lc);
            CHECK(same(lr, lc, (size_t)f.V * R), "%s: rewound to %d of %d tokens: logits differ from cold", what, k, K);
        }
        /* within one mark: rewind, go on, rewind further back */
        qhx_session_reset(x), qhx_session_reset(y);
        eval(x, 0, P, QHX_EVAL_SEQUENCE, NULL), eval(y, 0, P, QHX_EVAL_SEQUENCE, NULL);
        for (int t = 0; t < 3; t++) eval(y, P + t, 1, QHX_EVAL_STEPWISE, NULL);
        qhx_session_mark(x);
        eval(x, P, 10, QHX_EVAL_STEPWISE, NULL);
        qhx_session_rewind(x, P + 8);
        qhx_session_eval(x, branch, 4, QHX_EVAL_STEPWISE, NULL, NULL);
        CHECK(qhx_session_rewind(x, P + 3) == QHX_OK, "%s: second rewind: %s", what, qhx_last_error());
        qhx_session_eval(x, branch, R - 2, QHX_EVAL_STEPWISE, lr, NULL);
        qhx_session_eval(y, branch, R - 2, QHX_EVAL_STEPWISE, lc, NULL);
        CHECK(same(lr, lc, (size_t)f.V * (R - 2)), "%s: rewind, evaluate, rewind again: logits differ from cold", what);
        /* out of reach: before the mark, past the position, after a sequence call or more tokens
         * than the mark keeps, after a restore; the session stays where it was */
        const int at = qhx_session_pos(x);
        CHECK(qhx_session_rewind(x, P - 1) == QHX_ERR_ARG && qhx_session_rewind(x, at + 1) == QHX_ERR_ARG && qhx_session_pos(x) == at,
              "%s: a rewind outside the mark's reach was not refused", what);
        qhx_session_mark(x);
        eval(x, 0, 2, QHX_EVAL_SEQUENCE, NULL);
        CHECK(qhx_session_rewind(x, at + 1) == QHX_ERR_ARG, "%s: a sequence call kept the mark", what);
        qhx_session_mark(x);
        for (int t = 0; t <= K; t++) eval(x, t, 1, QHX_EVAL_STEPWISE, NULL);
        CHECK(qhx_session_rewind(x, at + 2 + K) == QHX_ERR_ARG, "%s: a mark outlived %d tokens", what, K + 1);
        qhx_session_mark(x);
        qhx_session_restore(x, s1);
        CHECK(qhx_session_rewind(x, P) == QHX_ERR_ARG && qhx_session_pos(x) == P, "%s: a restore kept the mark", what);
        qhx_session_free(x), qhx_session_free(y);
        free(lr), free(lc);
    }

    /* another model's snapshot and file are refused, the session untouched */
    if (other) {
        qhx_session *o;
        qhx_session_new(other, &o);
        CHECK(qhx_session_restore(o, s1) == QHX_ERR_ARG && strstr(qhx_last_error(), "another model"),
              "%s: restore into another model: '%s'", what, qhx_last_error());
        CHECK(qhx_session_pos(o) == 0, "%s: a refused restore moved the session", what);
        qhx_snapshot *x = NULL;
        CHECK(qhx_snapshot_load(other, file, &x) != QHX_OK && strstr(qhx_last_error(), file) && !x,
              "%s: another model's state file: '%s'", what, qhx_last_error());
        qhx_session_free(o);
    }
    qhx_snapshot_free(s1), qhx_snapshot_free(s2), qhx_snapshot_free(s2f);
    qhx_session_free(a), qhx_session_free(b), qhx_session_free(d);
    unlink(file);
    free(l), free(f.q), free(f.r), free(f.b);
    qhx_model_close(f.m);
    qhx_runtime_free(rt);
    printf("  %-44s snapshots and rewinds == cold\n", what);
}

/* ---- bad state files ---- */

static void expect_refused(qhx_model *m, const char *path, const char *needle, const char *what) {
    qhx_snapshot *x = NULL;
    const qhx_status st = qhx_snapshot_load(m, path, &x);
    const char *msg = qhx_last_error();
    CHECK(st != QHX_OK && !x, "%s: loaded", what);
    CHECK(strstr(msg, path) && strstr(msg, needle) && !strchr(msg, '\n'), "%s: message '%s' (want '%s')", what, msg, needle);
    qhx_snapshot_free(x);
}

static void write_edit(const char *src, size_t n, const char *path, size_t at, unsigned char x, size_t keep) {
    FILE *f = fopen(path, "wb");
    for (size_t i = 0; i < keep && i < n; i++) fputc(i == at ? src[i] ^ x : src[i], f);
    fclose(f);
}

static void bad_files(const char *ckpt, const char *bundle) {
    qhx_runtime_opts ro = {.kernels = "scalar", .n_threads = 1};
    qhx_runtime *rt, *rt2;
    qhx_model *m, *mb, *m2;
    qhx_runtime_new(&ro, &rt);
    ro.kernels = "ref";
    qhx_runtime_new(&ro, &rt2);
    if (qhx_model_open(rt, ckpt, &m) || qhx_model_open(rt, bundle, &mb) || qhx_model_open(rt2, ckpt, &m2)) {
        CHECK(0, "open: %s", qhx_last_error());
        return;
    }
    qhx_session *s;
    qhx_session_new(m, &s);
    qhx_session_eval(s, tok, P, QHX_EVAL_SEQUENCE, NULL, NULL);
    qhx_snapshot *snap;
    qhx_session_snapshot(s, &snap);
    char good[400], bad[400];
    snprintf(good, sizeof good, "%s/good.state", root);
    snprintf(bad, sizeof bad, "%s/bad.state", root);
    CHECK(qhx_snapshot_save(snap, good) == QHX_OK, "save: %s", qhx_last_error());
    size_t n;
    char *bytes = tl_read(good, &n);
    CHECK(bytes && n > 200, "state file of %zu bytes", n);
    if (!bytes) return;

    expect_refused(m, "/nonexistent/x.state", "x.state", "missing file");
    write_edit(bytes, n, bad, (size_t)-1, 0, 0);
    expect_refused(m, bad, "", "empty file");
    write_edit(bytes, n, bad, (size_t)-1, 0, 100);
    expect_refused(m, bad, "too short", "a cut header");
    write_edit(bytes, n, bad, (size_t)-1, 0, n - 1);
    expect_refused(m, bad, "truncated", "one byte short");
    write_edit(bytes, n, bad, 0, 0x20, n);
    expect_refused(m, bad, "bad magic", "magic");
    write_edit(bytes, n, bad, 8, 0x02, n);
    expect_refused(m, bad, "version", "another version");
    write_edit(bytes, n, bad, n / 2, 0x01, n);
    expect_refused(m, bad, "checksum", "a flipped bit in the state");
    write_edit(bytes, n, bad, n - 3, 0x80, n);
    expect_refused(m, bad, "checksum", "a flipped bit in the checksum");
    write_edit(bytes, n, bad, 16, 0x01, n);
    expect_refused(m, bad, "another model", "another model identity");
    expect_refused(mb, good, "another model", "a checkpoint's state on its bundle");
    expect_refused(m2, good, "kernels", "another kernel set");
    /* a writer that cannot finish leaves nothing behind */
    CHECK(qhx_snapshot_save(snap, "/nonexistent/dir/x.state") == QHX_ERR_IO && strstr(qhx_last_error(), "/nonexistent/dir"),
          "save into a missing directory: '%s'", qhx_last_error());
    CHECK(qhx_session_restore(s, NULL) == QHX_ERR_ARG, "restore NULL");
    printf("  bad state files refused with their reasons\n");
    free(bytes);
    unlink(good), unlink(bad);
    qhx_snapshot_free(snap);
    qhx_session_free(s);
    qhx_model_close(m), qhx_model_close(mb), qhx_model_close(m2);
    qhx_runtime_free(rt), qhx_runtime_free(rt2);
}

int main(void) {
    snprintf(root, sizeof root, "/tmp/qhx-test-snapshot-%d", (int)getpid());
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", root, root);
    if (system(cmd)) return 1;
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < N_TOK; i++) x = x * 6364136223846793005ull + 1442695040888963407ull, tok[i] = (int32_t)(x >> 33) % 4000 + 10;
    for (int i = 0; i < BR; i++) x = x * 6364136223846793005ull + 1442695040888963407ull, branch[i] = (int32_t)(x >> 33) % 4000 + 10;

    const char *ck = "models/q35-kjv";
    char b1[400], b2[400];
    snprintf(b1, sizeof b1, "%s/b1", root), snprintf(b2, sizeof b2, "%s/b2", root);
    qhx_forge_opts fo = {.checkpoint = ck, .out = b1};
    CHECK(qhx_forge(&fo) == QHX_OK, "forge 1 shard: %s", qhx_last_error());
    fo.out = b2, fo.max_context_bytes = 3500000; /* ~half the decode weights (tests/bundle_test.sh) */
    CHECK(qhx_forge(&fo) == QHX_OK, "forge 2 shards: %s", qhx_last_error());
    qhx_model *other = NULL;
    qhx_model_open(NULL, "models/q35-rand-tiny", &other);
    const char *models[] = {ck, b1, b2};
    for (int mi = 0; mi < 3; mi++) {
        qhx_model *m;
        if (qhx_model_open(NULL, models[mi], &m) == QHX_OK) {
            qhx_model_info in;
            qhx_model_get_info(m, &in);
            printf("%s: %d shard(s)\n", models[mi], in.n_shards);
            CHECK(mi != 2 || in.n_shards == 2, "the 2-shard bundle has %d", in.n_shards);
            qhx_model_close(m);
        }
        /* every kernel family on the 2-shard bundle (the form with the most moving parts), the
         * default set on the others; quick: the checkpoint and the 2-shard bundle */
        const char *sets[8];
        const int n_sets = mi == 2 ? tl_kernel_families(sets) : (sets[0] = "auto", 1);
        if (mi == 1 && tl_quick()) continue;
        for (int k = 0; k < n_sets; k++) check_model(models[mi], sets[k], other);
    }
    check_model("models/q35-moe-kjv", "auto", other); /* MoE: the same state, other MLPs */
    bad_files(ck, b1);
    qhx_model_close(other);
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    if (system(cmd)) return 1;
    return tl_finish("test_snapshot");
}
