/* Batched decode through the C API (qhx_sessions_step, as qhx serve steps its slots): one session
 * against N stepped together, their steps alternated one for one so both sample the same moments
 * of the host's bandwidth (it moves from second to second on these VMs). Every session has a
 * 128-token prompt of seeded random ids; every step asks for the logits (as a sampler needs them:
 * without, the lm-head is skipped) and feeds each session its argmax. Reports, for each round of
 * STEPS steps (the first a warm-up: the first steps after loading run slow), one session's tok/s,
 * the N's aggregate, and their ratio.
 *   build/sessions_bench MODEL [N [STEPS [ROUNDS [THREADS]]]]   (defaults 4 32 3, every core) */
#include "qhexrt.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++) best = x[i] > x[best] ? i : best;
    return best;
}

/* sessions s[0..n) from the prompt, their first tokens in tok */
static int start(qhx_session **s, int n, const int32_t *prompt, int vocab, float *logits, int32_t *tok) {
    for (int i = 0; i < n; i++) {
        qhx_session_reset(s[i]);
        if (qhx_session_eval(s[i], prompt, 128, QHX_EVAL_SEQUENCE, NULL, logits)) return 1;
        tok[i] = argmax(logits, vocab);
    }
    return 0;
}

/* one step of s[0..n); returns its seconds (< 0 on error) */
static double step(qhx_session **s, int n, int32_t *tok, int vocab, float *logits) {
    const double t0 = now();
    if (qhx_sessions_step(s, tok, n, logits)) return -1;
    const double dt = now() - t0;
    for (int i = 0; i < n; i++) tok[i] = argmax(logits + (size_t)i * vocab, vocab);
    return dt;
}

int main(int argc, char **argv) {
    if (argc < 2) return fprintf(stderr, "usage: sessions_bench MODEL [N [STEPS [ROUNDS [THREADS]]]]\n"), 2;
    const int n = argc > 2 ? atoi(argv[2]) : 4, steps = argc > 3 ? atoi(argv[3]) : 32, rounds = argc > 4 ? atoi(argv[4]) : 3;
    if (n < 1 || n > 16 || steps < 1 || rounds < 1) return fprintf(stderr, "sessions_bench: N in [1, 16], STEPS and ROUNDS >= 1\n"), 2;
    qhx_runtime_opts ro = {0};
    if (argc > 5) ro.n_threads = atoi(argv[5]);
    qhx_runtime *rt = NULL;
    qhx_model *m = NULL;
    qhx_session *s[17] = {0}; /* s[0] alone, s[1..n] together */
    if (qhx_runtime_new(&ro, &rt) || qhx_model_open(rt, argv[1], &m)) return fprintf(stderr, "sessions_bench: %s\n", qhx_last_error()), 1;
    qhx_model_info info;
    qhx_model_get_info(m, &info);
    const int V = info.vocab_size;
    float *logits = malloc(sizeof(float) * (size_t)V * n);
    int32_t prompt[128], tok[17];
    uint64_t r = 7;
    for (int i = 0; i < 128; i++) r = r * 6364136223846793005ull + 1442695040888963407ull, prompt[i] = (int32_t)((r >> 33) % (uint64_t)V);
    for (int i = 0; i <= n; i++)
        if (qhx_session_new(m, &s[i])) return fprintf(stderr, "sessions_bench: %s\n", qhx_last_error()), 1;
    if (!logits) return 1;
    printf("%s, %d threads, %d steps a round: one session and %d together, step for step\n", argv[1], qhx_runtime_threads(rt), steps, n);
    for (int k = 0; k <= rounds; k++) {
        if (start(s, n + 1, prompt, V, logits, tok)) return fprintf(stderr, "sessions_bench: %s\n", qhx_last_error()), 1;
        double one = 0, all = 0;
        for (int j = 0; j < steps; j++) {
            const double a = step(s, 1, tok, V, logits), b = step(s + 1, n, tok + 1, V, logits);
            if (a < 0 || b < 0) return fprintf(stderr, "sessions_bench: %s\n", qhx_last_error()), 1;
            one += a, all += b;
        }
        printf("  %s %d: 1 session %.2f tok/s, %d sessions %.2f tok/s aggregate: %.2fx\n", k ? "round" : "warm-up", k, steps / one, n,
               n * steps / all, n * one / all);
    }
    for (int i = 0; i <= n; i++) qhx_session_free(s[i]);
    qhx_model_close(m);
    qhx_runtime_free(rt);
    free(logits);
    return 0;
}
