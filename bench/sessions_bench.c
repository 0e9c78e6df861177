/* Batched decode through the C API (qhx_sessions_step, as qhx serve steps its slots): one session
 * against N stepped together, alternated ROUNDS times in one process so both sample the same
 * minutes of the host's bandwidth. Each session has a 128-token prompt of seeded random ids; every
 * step asks for the logits (as a sampler needs them: without, the lm-head is skipped) and feeds
 * each session its argmax. Reports each round's tok/s, one session and N aggregate, and their ratio.
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

/* STEPS steps of the first n sessions from their prompts; returns aggregate tok/s (0 on error) */
static double run(qhx_session **s, int n, int steps, const int32_t *prompt, int vocab, float *logits) {
    int32_t tok[16];
    for (int i = 0; i < n; i++) {
        qhx_session_reset(s[i]);
        if (qhx_session_eval(s[i], prompt, 128, QHX_EVAL_SEQUENCE, NULL, logits)) return 0;
        tok[i] = argmax(logits, vocab);
    }
    const double t0 = now();
    for (int k = 0; k < steps; k++) {
        if (qhx_sessions_step(s, tok, n, logits)) return 0;
        for (int i = 0; i < n; i++) tok[i] = argmax(logits + (size_t)i * vocab, vocab);
    }
    return n * steps / (now() - t0);
}

int main(int argc, char **argv) {
    if (argc < 2) return fprintf(stderr, "usage: sessions_bench MODEL [N [STEPS [ROUNDS [THREADS]]]]\n"), 2;
    const int n = argc > 2 ? atoi(argv[2]) : 4, steps = argc > 3 ? atoi(argv[3]) : 32, rounds = argc > 4 ? atoi(argv[4]) : 3;
    if (n < 1 || n > 16 || steps < 1 || rounds < 1) return fprintf(stderr, "sessions_bench: N in [1, 16], STEPS and ROUNDS >= 1\n"), 2;
    qhx_runtime_opts ro = {0};
    if (argc > 5) ro.n_threads = atoi(argv[5]);
    qhx_runtime *rt = NULL;
    qhx_model *m = NULL;
    qhx_session *s[16] = {0};
    if (qhx_runtime_new(&ro, &rt) || qhx_model_open(rt, argv[1], &m)) return fprintf(stderr, "sessions_bench: %s\n", qhx_last_error()), 1;
    qhx_model_info info;
    qhx_model_get_info(m, &info);
    const int V = info.vocab_size;
    float *logits = malloc(sizeof(float) * (size_t)V * n);
    int32_t prompt[128];
    uint64_t r = 7;
    for (int i = 0; i < 128; i++) r = r * 6364136223846793005ull + 1442695040888963407ull, prompt[i] = (int32_t)((r >> 33) % (uint64_t)V);
    for (int i = 0; i < n; i++)
        if (qhx_session_new(m, &s[i])) return fprintf(stderr, "sessions_bench: %s\n", qhx_last_error()), 1;
    if (!logits) return 1;
    printf("%s, %d threads, %d steps a run: one session, then %d stepped together\n", argv[1], qhx_runtime_threads(rt), steps, n);
    for (int k = 0; k < rounds; k++) {
        const double one = run(s, 1, steps, prompt, V, logits), all = run(s, n, steps, prompt, V, logits);
        if (one == 0 || all == 0) return fprintf(stderr, "sessions_bench: %s\n", qhx_last_error()), 1;
        printf("  round %d: 1 session %.2f tok/s, %d sessions %.2f tok/s aggregate: %.2fx\n", k + 1, one, n, all, all / one);
    }
    for (int i = 0; i < n; i++) qhx_session_free(s[i]);
    qhx_model_close(m);
    qhx_runtime_free(rt);
    free(logits);
    return 0;
}
