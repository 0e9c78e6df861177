/* The prefix cache on a long conversation (qhexrt.h: qhx_prefix_cache, as qhx serve runs it): a system
 * prompt of SYS tokens, then TURNS turns, each a user message of MSG tokens, the generation
 * prompt, the first reply token (time to first token), and the reply (MSG tokens) cached as the
 * server caches it after the answer. The same conversation runs uncached, then cached, in one
 * process; it reports each turn's time to first token both ways, their ratio, and the cache's
 * memory. Token ids are seeded random (timing does not depend on them) but for the chat markers,
 * which the model's tokenizer gives (a synthetic bundle has none: copy the Qwen tokenizer.json
 * beside it).
 *   build/prefix_bench MODEL [SYS [MSG [TURNS [THREADS]]]]   (defaults 2000 100 5, every core) */
#include "qhexrt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int32_t IM_START, ASSISTANT[8];
static int N_ASSISTANT;
static uint64_t rng = 0x853c49e6748fea9bull;
static int32_t next_id(int vocab) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    int32_t id = (int32_t)((rng >> 33) % (uint64_t)(vocab - 100)) + 100;
    return id == IM_START ? id + 1 : id;
}

/* writes an <|im_start|> message of n tokens, its body from body, at ids + at; returns its end */
static int message(int32_t *ids, int at, int n, const int32_t *body) {
    ids[at] = IM_START;
    memcpy(ids + at + 1, body, sizeof(int32_t) * (n - 1));
    return at + n;
}

int main(int argc, char **argv) {
    if (argc < 2) return fprintf(stderr, "usage: prefix_bench MODEL [SYS [MSG [TURNS [THREADS]]]]\n"), 2;
    const int sys = argc > 2 ? atoi(argv[2]) : 2000, msg = argc > 3 ? atoi(argv[3]) : 100, turns = argc > 4 ? atoi(argv[4]) : 5;
    qhx_runtime_opts ro = {.n_threads = argc > 5 ? atoi(argv[5]) : 0};
    qhx_runtime *rt;
    qhx_model *m;
    qhx_session *s;
    if (sys < 2 || msg < 4 || turns < 1 || qhx_runtime_new(&ro, &rt) || qhx_model_open(rt, argv[1], &m) || qhx_session_new(m, &s))
        return fprintf(stderr, "prefix_bench: %s\n", qhx_last_error()), 1;
    qhx_model_info mi;
    qhx_model_get_info(m, &mi);
    qhx_tokenizer *tok;
    int32_t *a = NULL;
    size_t na = 0;
    if (qhx_model_tokenizer(m, &tok) || (IM_START = qhx_tokenizer_find_added(tok, "<|im_start|>")) < 0 ||
        qhx_tokenizer_encode(tok, "assistant", 9, 0, &a, &na) || na > 8 || msg <= (int)na + 2)
        return fprintf(stderr, "prefix_bench: %s needs a tokenizer with <|im_start|> (and MSG over the header)\n", argv[1]), 1;
    memcpy(ASSISTANT, a, sizeof(int32_t) * na);
    N_ASSISTANT = (int)na;
    free(a);
    const int head = 2 + N_ASSISTANT; /* <|im_start|>assistant\n */
    const int cap = sys + turns * (2 * msg + 10) + 8;
    int32_t *conv = malloc(sizeof(int32_t) * cap);
    int32_t *replies = malloc(sizeof(int32_t) * turns * msg), *users = malloc(sizeof(int32_t) * turns * msg);
    int32_t *system = malloc(sizeof(int32_t) * sys);
    for (int i = 0; i < sys; i++) system[i] = next_id(mi.vocab_size);
    for (int i = 0; i < turns * msg; i++) replies[i] = next_id(mi.vocab_size), users[i] = next_id(mi.vocab_size);
    const int n = message(conv, 0, sys, system);
    printf("%s, %s, %d threads: system prompt %d tokens, %d turns of %d-token messages and replies\n", argv[1],
           qhx_runtime_kernels(rt), qhx_runtime_threads(rt), sys, turns, msg);
    double ttft[2][64] = {{0}};
    uint64_t mem = 0;
    int resumed[64] = {0};
    for (int cached = 0; cached < 2; cached++) {
        qhx_prefix_cache *pc;
        if (qhx_prefix_cache_new(m, cached ? (uint64_t)1 << 40 : 0, &pc)) return fprintf(stderr, "prefix_bench: %s\n", qhx_last_error()), 1;
        int len = n;
        for (int t = 0; t < turns && t < 64; t++) {
            const int user = len;
            const int at = message(conv, len, msg, users + t * msg);
            conv[at] = IM_START; /* the generation prompt */
            memcpy(conv + at + 1, ASSISTANT, sizeof(int32_t) * N_ASSISTANT);
            conv[at + 1 + N_ASSISTANT] = 78;
            const int prompt = at + head;
            qhx_generate_opts go = {.max_tokens = 1, .ignore_eos = 1};
            int got = 0;
            const double t0 = now();
            qhx_status st = qhx_prefix_cache_prefill(pc, s, conv, prompt, &got, NULL, NULL);
            const int p = qhx_session_pos(s);
            if (!st) st = qhx_generate(s, conv + p, prompt - p, &go, NULL, NULL, NULL);
            ttft[cached][t] = now() - t0;
            if (st) return fprintf(stderr, "prefix_bench: %s\n", qhx_last_error()), 1;
            if (cached) resumed[t] = got;
            /* the assistant message as the next prompt holds it: the generation prompt, the reply */
            memcpy(conv + prompt, replies + t * msg, sizeof(int32_t) * (msg - head));
            len = at + msg;
            if (cached) { /* what qhx_prefix_cache_add_reply does after the answer */
                if (qhx_prefix_cache_lookup(pc, s, conv, len) == user && !qhx_session_eval(s, conv + user, len - user, QHX_EVAL_SEQUENCE, NULL, NULL))
                    qhx_prefix_cache_insert(pc, s);
            }
            printf("  turn %d (%s): prompt %d tokens, %d resumed, time to first token %.0f ms\n", t + 1,
                   cached ? "cached" : "uncached", prompt, got, ttft[cached][t] * 1e3);
            fflush(stdout);
        }
        qhx_prefix_cache_stats st;
        qhx_prefix_cache_get_stats(pc, &st);
        if (cached) mem = st.bytes;
        qhx_prefix_cache_free(pc);
    }
    printf("turn | uncached ms | cached ms | cached / uncached\n");
    for (int t = 0; t < turns && t < 64; t++)
        printf("%4d | %11.0f | %9.0f | %.3f (%d tokens resumed)\n", t + 1, ttft[0][t] * 1e3, ttft[1][t] * 1e3,
               ttft[1][t] / ttft[0][t], resumed[t]);
    printf("cache: %.1f MB for %d turns (state %.1f MB a snapshot, KV %.1f KB a token)\n", mem / 1048576.0, turns,
           mi.state_bytes / 1048576.0, mi.kv_bytes_per_token / 1024.0);
    free(conv), free(replies), free(users), free(system);
    qhx_session_free(s);
    qhx_model_close(m);
    qhx_runtime_free(rt);
    return 0;
}
