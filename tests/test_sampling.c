/* Sampling and generation options, each checked for what it must do: the sampler on logits whose
 * distribution is known (frequencies within 5 standard deviations over 20,000 draws), then
 * qhx_generate on the trained KJV model (seeds, top-k 1 = greedy, stop ids, stop strings split
 * across tokens, the held-back text at the end, bad options), and on a checkpoint whose lm-head has
 * more rows than its tokenizer has ids (the ids past the tokenizer are tokens without text). */
#include "qhexrt.h"
#include "qhexrt_tools.h"
#include "sample/sampler.h"
#include "testlib.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DRAWS 20000
#define V 6

/* p = softmax(logits / T) for the 6-token test vocabulary */
static void softmax(const float *l, float T, double *p) {
    double m = l[0], s = 0;
    for (int i = 1; i < V; i++) m = l[i] > m ? l[i] : m;
    for (int i = 0; i < V; i++) s += p[i] = exp((l[i] - m) / T);
    for (int i = 0; i < V; i++) p[i] /= s;
}

/* Draws DRAWS tokens and checks their frequencies against want (0 = must never appear). */
static void check_freq(const char *what, qhx_generate_opts o, const float *logits, const double *want) {
    qhx_sampler s;
    CHECK(qhx_sampler_init(&s, &o, V) == QHX_OK, "%s", qhx_last_error());
    int count[V] = {0};
    for (int d = 0; d < DRAWS; d++) {
        float l[V];
        memcpy(l, logits, sizeof l);
        count[qhx_sampler_sample(&s, l)]++;
    }
    double worst = 0;
    for (int i = 0; i < V; i++) {
        double f = (double)count[i] / DRAWS, sd = sqrt(want[i] * (1 - want[i]) / DRAWS);
        if (want[i] == 0) CHECK(count[i] == 0, "%s: token %d drawn %d times, must never be", what, i, count[i]);
        else {
            double z = fabs(f - want[i]) / sd;
            worst = z > worst ? z : worst;
            CHECK(z < 5, "%s: token %d frequency %.4f, want %.4f", what, i, f, want[i]);
        }
    }
    printf("  %-34s worst deviation %.2f sd\n", what, worst);
    qhx_sampler_free(&s);
}

static void sampler_tests(void) {
    const float logits[V] = {2.0f, 1.5f, 1.0f, 0.0f, -1.0f, -3.0f};
    double p[V], want[V];
    softmax(logits, 1, p);

    check_freq("temperature 1", (qhx_generate_opts){.temperature = 1}, logits, p);
    softmax(logits, 2.5f, want);
    check_freq("temperature 2.5", (qhx_generate_opts){.temperature = 2.5f}, logits, want);

    memset(want, 0, sizeof want); /* top-k 2: the two most probable, renormalised */
    want[0] = p[0] / (p[0] + p[1]);
    want[1] = p[1] / (p[0] + p[1]);
    check_freq("top-k 2", (qhx_generate_opts){.temperature = 1, .top_k = 2}, logits, want);

    /* top-p: the smallest head holding top_p; p = .46 .28 .17 .06 .02 .003: 0.8 keeps three */
    double head = p[0] + p[1] + p[2];
    CHECK(p[0] + p[1] < 0.8 && head >= 0.8, "test distribution: %.3f %.3f", p[0] + p[1], head);
    memset(want, 0, sizeof want);
    for (int i = 0; i < 3; i++) want[i] = p[i] / head;
    check_freq("top-p 0.8 cuts the tail", (qhx_generate_opts){.temperature = 1, .top_p = 0.8f}, logits, want);

    /* min-p 0.3: tokens at least 0.3 x the top one's probability */
    memset(want, 0, sizeof want);
    double kept = 0;
    for (int i = 0; i < V; i++) if (p[i] >= 0.3 * p[0]) kept += p[i];
    for (int i = 0; i < V; i++) want[i] = p[i] >= 0.3 * p[0] ? p[i] / kept : 0;
    check_freq("min-p 0.3", (qhx_generate_opts){.temperature = 1, .min_p = 0.3f}, logits, want);

    /* greedy: temperature 0 and top-k 1 */
    memset(want, 0, sizeof want);
    want[0] = 1 - 1e-12;
    check_freq("top-k 1 is greedy", (qhx_generate_opts){.temperature = 1, .top_k = 1}, logits, want);

    /* the same seed draws the same sequence, another seed another one */
    int seq[3][64];
    for (int r = 0; r < 3; r++) {
        qhx_sampler s;
        qhx_sampler_init(&s, &(qhx_generate_opts){.temperature = 1, .seed = r == 2 ? 8 : 7}, V);
        for (int d = 0; d < 64; d++) {
            float l[V];
            memcpy(l, logits, sizeof l);
            seq[r][d] = qhx_sampler_sample(&s, l);
        }
        qhx_sampler_free(&s);
    }
    CHECK(!memcmp(seq[0], seq[1], sizeof seq[0]), "same seed, different draws");
    CHECK(memcmp(seq[0], seq[2], sizeof seq[0]), "seeds 7 and 8 drew the same 64 tokens");

    /* penalties, on the logits: HF's repetition penalty divides positives and multiplies negatives
     * once per distinct token; presence once; frequency per occurrence; only inside the window */
    qhx_sampler s;
    qhx_generate_opts po = {.repeat_penalty = 2, .presence_penalty = 0.5f, .frequency_penalty = 0.25f, .penalty_window = 3};
    CHECK(qhx_sampler_init(&s, &po, V) == QHX_OK, "%s", qhx_last_error());
    const int32_t hist[] = {5, 0, 0, 4}; /* the window of 3 forgets the 5 */
    for (int i = 0; i < 4; i++) qhx_sampler_accept(&s, hist[i]);
    float l[V];
    memcpy(l, logits, sizeof l);
    int32_t t = qhx_sampler_sample(&s, l);
    CHECK(fabsf(l[0] - (2.0f / 2 - 0.5f - 2 * 0.25f)) < 1e-6f, "token 0 (twice): %f", l[0]);
    CHECK(fabsf(l[4] - (-1.0f * 2 - 0.5f - 0.25f)) < 1e-6f, "token 4 (once): %f", l[4]);
    CHECK(l[5] == -3.0f && l[1] == 1.5f, "untouched tokens changed: %f %f", l[5], l[1]);
    CHECK(t == 1, "greedy after penalties picks token 1, got %d", t);
    qhx_sampler_free(&s);

    /* out-of-range options are refused */
    CHECK(qhx_sampler_init(&s, &(qhx_generate_opts){.temperature = -1}, V) == QHX_ERR_ARG, "temperature -1");
    CHECK(qhx_sampler_init(&s, &(qhx_generate_opts){.top_p = 1.5f}, V) == QHX_ERR_ARG, "top_p 1.5");
    CHECK(qhx_sampler_init(&s, &(qhx_generate_opts){.temperature = NAN}, V) == QHX_ERR_ARG, "temperature NaN");
}

/* ---- qhx_generate on the KJV model ---- */

typedef struct {
    int32_t ids[256];
    int n, calls, final_calls;
    char text[8192];
    size_t len;
    int cancel_at;
} sink;

static int collect(int32_t tok, const char *text, size_t len, void *user) {
    sink *k = user;
    k->calls++;
    if (tok < 0) k->final_calls++;
    else k->ids[k->n++] = tok;
    if (len && k->len + len < sizeof k->text) memcpy(k->text + k->len, text, len), k->len += len;
    k->text[k->len] = 0;
    return k->cancel_at && k->n == k->cancel_at;
}

static qhx_status gen(qhx_model *m, const int32_t *prompt, int n, qhx_generate_opts o, sink *k, qhx_generate_result *r) {
    qhx_session *s;
    memset(k, 0, offsetof(sink, cancel_at));
    if (qhx_session_new(m, &s)) return QHX_ERR_NOMEM;
    qhx_status st = qhx_generate(s, prompt, n, &o, collect, k, r);
    qhx_session_free(s);
    return st;
}

static void generate_tests(const char *model) {
    qhx_model *m;
    if (qhx_model_open(NULL, model, &m) != QHX_OK) { CHECK(0, "%s", qhx_last_error()); return; }
    qhx_tokenizer *tok;
    CHECK(qhx_model_tokenizer(m, &tok) == QHX_OK, "%s", qhx_last_error());
    int32_t *prompt;
    size_t np;
    CHECK(qhx_tokenizer_encode(tok, "And God said", 12, 0, &prompt, &np) == QHX_OK, "%s", qhx_last_error());
    const int n = (int)np;
    qhx_generate_result r;
    sink g = {0}, k = {0};

    /* greedy: max_tokens reached, text = decode(ids) */
    CHECK(gen(m, prompt, n, (qhx_generate_opts){.max_tokens = 40, .ignore_eos = 1}, &g, &r) == QHX_OK, "%s", qhx_last_error());
    CHECK(r.finish == QHX_FINISH_LENGTH && r.n_generated == 40 && g.n == 40 && r.n_prompt == n, "greedy: %d tokens, finish %d", r.n_generated, r.finish);
    char *dec;
    size_t dlen;
    qhx_tokenizer_decode(tok, g.ids, (size_t)g.n, &dec, &dlen);
    CHECK(dlen == g.len && !memcmp(dec, g.text, dlen), "streamed text differs from decode(ids): '%s' vs '%s'", g.text, dec);
    printf("  greedy: %s\n", g.text);

    /* top-k 1 at temperature 1 is greedy */
    CHECK(gen(m, prompt, n, (qhx_generate_opts){.max_tokens = 40, .ignore_eos = 1, .temperature = 1, .top_k = 1, .seed = 3}, &k, &r) == QHX_OK, "%s", qhx_last_error());
    CHECK(k.n == 40 && !memcmp(k.ids, g.ids, sizeof(int32_t) * 40), "top-k 1 differs from greedy");

    /* seeds: the same seed repeats, another one differs */
    qhx_generate_opts so = {.max_tokens = 40, .ignore_eos = 1, .temperature = 1, .top_p = 0.95f, .seed = 42};
    sink a = {0}, b = {0};
    gen(m, prompt, n, so, &a, &r);
    gen(m, prompt, n, so, &b, &r);
    CHECK(a.n == 40 && b.n == 40 && !memcmp(a.ids, b.ids, sizeof(int32_t) * 40), "seed 42 twice gave different tokens");
    so.seed = 43;
    gen(m, prompt, n, so, &b, &r);
    CHECK(memcmp(a.ids, b.ids, sizeof(int32_t) * 40), "seeds 42 and 43 gave the same 40 tokens");
    printf("  seed 42: %s\n", a.text);

    /* a repetition penalty changes what greedy repeats */
    gen(m, prompt, n, (qhx_generate_opts){.max_tokens = 40, .ignore_eos = 1, .repeat_penalty = 5, .penalty_window = -1}, &k, &r);
    CHECK(memcmp(k.ids, g.ids, sizeof(int32_t) * 40), "repeat_penalty 5 did not change the greedy text");
    int repeats = 0;
    for (int i = 0; i < k.n; i++)
        for (int j = 0; j < i; j++) if (k.ids[i] == k.ids[j]) { repeats++; break; }
    int greedy_repeats = 0;
    for (int i = 0; i < g.n; i++)
        for (int j = 0; j < i; j++) if (g.ids[i] == g.ids[j]) { greedy_repeats++; break; }
    CHECK(repeats < greedy_repeats, "repeat_penalty: %d repeated tokens, greedy had %d", repeats, greedy_repeats);

    /* a stop id ends generation before it, unreported */
    gen(m, prompt, n, (qhx_generate_opts){.max_tokens = 40, .ignore_eos = 1, .stop_ids = &g.ids[5], .n_stop_ids = 1}, &k, &r);
    int first = 0;
    while (g.ids[first] != g.ids[5]) first++;
    CHECK(r.finish == QHX_FINISH_STOP && k.n == first && !memcmp(k.ids, g.ids, sizeof(int32_t) * (size_t)first),
          "stop id: %d tokens, want %d", k.n, first);

    /* a stop string split across two tokens: the text ends just before it, nothing of it leaks */
    char piece[256];
    int cut = -1;
    size_t off = 0;
    for (int i = 0; i + 1 < g.n && cut < 0; i++) {
        char *t1;
        size_t l1;
        qhx_tokenizer_decode(tok, &g.ids[i], 1, &t1, &l1);
        if (l1 >= 2 && i > 2) {
            char *t2;
            size_t l2;
            qhx_tokenizer_decode(tok, &g.ids[i + 1], 1, &t2, &l2);
            if (l2 >= 2) { /* last 2 bytes of token i + first 2 of token i+1 */
                snprintf(piece, sizeof piece, "%.2s%.2s", t1 + l1 - 2, t2);
                if (strstr(g.text, piece) == g.text + off + l1 - 2) cut = i;
            }
            free(t2);
        }
        off += l1;
        free(t1);
    }
    CHECK(cut >= 0, "no token boundary to split a stop string over in '%s'", g.text);
    if (cut >= 0) {
        const char *stops[] = {"zzzz", piece};
        gen(m, prompt, n, (qhx_generate_opts){.max_tokens = 40, .ignore_eos = 1, .stop = stops, .n_stop = 2}, &k, &r);
        size_t want = (size_t)(strstr(g.text, piece) - g.text);
        CHECK(r.finish == QHX_FINISH_STOP && r.stop_string == 1 && k.len == want && !memcmp(k.text, g.text, want) && k.n == cut + 2,
              "stop '%s': got '%s' (%d tokens), want '%.*s' (%d)", piece, k.text, k.n, (int)want, g.text, cut + 2);
        printf("  stop string '%s' over tokens %d-%d: '%s'\n", piece, cut, cut + 1, k.text);
    }

    /* text that looks like the start of a stop string is held back, then released at the end */
    char tail[64];
    snprintf(tail, sizeof tail, "%s@@@", g.text + g.len - 3);
    const char *stops2[] = {tail};
    gen(m, prompt, n, (qhx_generate_opts){.max_tokens = 40, .ignore_eos = 1, .stop = stops2, .n_stop = 1}, &k, &r);
    CHECK(r.finish == QHX_FINISH_LENGTH && r.stop_string == -1 && k.len == g.len && !strcmp(k.text, g.text) && k.final_calls == 1,
          "held text: got '%s' (%d final calls)", k.text, k.final_calls);

    /* cancellation from the callback */
    k.cancel_at = 5;
    qhx_status st = gen(m, prompt, n, (qhx_generate_opts){.max_tokens = 40, .ignore_eos = 1}, &k, &r);
    CHECK(st == QHX_ERR_CANCELLED && r.finish == QHX_FINISH_CANCELLED && r.n_generated == 5 && k.final_calls == 0,
          "cancel: status %d, %d tokens", st, r.n_generated);
    k.cancel_at = 0;

    /* bad options */
    const char *many[QHX_MAX_STOP + 1];
    for (int i = 0; i <= QHX_MAX_STOP; i++) many[i] = "x";
    const char *empty[] = {""};
    CHECK(gen(m, prompt, n, (qhx_generate_opts){.max_tokens = 4, .stop = many, .n_stop = QHX_MAX_STOP + 1}, &k, &r) == QHX_ERR_ARG, "17 stops");
    CHECK(gen(m, prompt, n, (qhx_generate_opts){.max_tokens = 4, .stop = empty, .n_stop = 1}, &k, &r) == QHX_ERR_ARG, "empty stop");
    CHECK(gen(m, prompt, n, (qhx_generate_opts){.max_tokens = -1}, &k, &r) == QHX_ERR_ARG, "max_tokens -1");
    CHECK(gen(m, prompt, n, (qhx_generate_opts){.max_tokens = 4, .top_p = -0.5f}, &k, &r) == QHX_ERR_ARG, "top_p -0.5");
    int32_t badp[] = {1, 1 << 30};
    CHECK(gen(m, badp, 2, (qhx_generate_opts){.max_tokens = 4}, &k, &r) == QHX_ERR_RANGE, "prompt id out of range");

    free(dec);
    free(prompt);
    qhx_model_close(m);
}

/* Qwen3.5 pads its vocabulary: the synthetic tiny shape has 4160 lm-head rows, and with q35-kjv's
 * tokenizer (4129 ids) seed 3 greedily picks padded ids (4150 third after the prompt 1,2,3, on the fp32
 * reference). They must be generated, counted and reported like any other token, without text. */
static void padded_vocab_tests(void) {
    char dir[128], cmd[512];
    snprintf(dir, sizeof dir, "/tmp/qhx-test-sampling-%d", (int)getpid());
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", dir, dir);
    if (system(cmd) != 0 || qhx_synth("tiny", 3, dir, 1, NULL, NULL) != QHX_OK) { CHECK(0, "synth: %s", qhx_last_error()); return; }
    snprintf(cmd, sizeof cmd, "cp models/q35-kjv/tokenizer.json '%s/'", dir);
    CHECK(system(cmd) == 0, "copy the tokenizer");
    qhx_runtime *rt;
    qhx_model *m;
    qhx_tokenizer *tok;
    CHECK(qhx_runtime_new(&(qhx_runtime_opts){.kernels = "ref", .n_threads = 1}, &rt) == QHX_OK, "%s", qhx_last_error());
    if (qhx_model_open(rt, dir, &m) != QHX_OK || qhx_model_tokenizer(m, &tok) != QHX_OK) {
        CHECK(0, "%s", qhx_last_error());
        qhx_runtime_free(rt);
        return;
    }
    qhx_model_info mi;
    qhx_model_get_info(m, &mi);
    const int n_text = qhx_tokenizer_n_ids(tok);
    CHECK(mi.vocab_size == 4160 && n_text == 4129, "vocab %d, tokenizer %d ids", mi.vocab_size, n_text);

    const int32_t prompt[] = {1, 2, 3};
    sink k = {0};
    qhx_generate_result r;
    qhx_status st = gen(m, prompt, 3, (qhx_generate_opts){.max_tokens = 64, .ignore_eos = 1}, &k, &r);
    CHECK(st == QHX_OK && r.n_generated == 64 && k.n == 64 && r.finish == QHX_FINISH_LENGTH,
          "padded vocab: status %d (%s), %d tokens", st, qhx_last_error(), r.n_generated);
    int padded = 0, n_plain = 0;
    int32_t plain[64];
    for (int i = 0; i < k.n; i++) {
        if (k.ids[i] >= n_text) padded++;
        else plain[n_plain++] = k.ids[i];
        CHECK(k.ids[i] >= 0 && k.ids[i] < mi.vocab_size, "id %d out of range", k.ids[i]);
    }
    CHECK(padded > 0 && k.ids[2] == 4150, "no padded id generated (third %d): the test proves nothing", k.ids[2]);
    char *dec = NULL;
    size_t dlen = 0;
    CHECK(qhx_tokenizer_decode(tok, plain, (size_t)n_plain, &dec, &dlen) == QHX_OK, "%s", qhx_last_error());
    CHECK(dec && dlen == k.len && !memcmp(dec, k.text, dlen), "text (%zu bytes) is not the decoded text-bearing ids (%zu): '%s' vs '%s'", k.len, dlen, k.text, dec);
    printf("  padded vocabulary: %d of 64 generated ids past the tokenizer's %d, text %zu bytes\n", padded, n_text, k.len);
    free(dec);

    /* a padded id as a stop id ends generation there; as a prompt token it is just a token */
    int32_t stop = 4150;
    gen(m, prompt, 3, (qhx_generate_opts){.max_tokens = 64, .ignore_eos = 1, .stop_ids = &stop, .n_stop_ids = 1}, &k, &r);
    CHECK(r.finish == QHX_FINISH_STOP && r.n_generated == 2, "stop at a padded id: %d tokens", r.n_generated);
    const int32_t pp[] = {4150, 4159, 1};
    CHECK(gen(m, pp, 3, (qhx_generate_opts){.max_tokens = 8, .ignore_eos = 1}, &k, &r) == QHX_OK && k.n == 8,
          "padded ids in the prompt: %s", qhx_last_error());
    const int32_t out_of_range[] = {1, 4160};
    CHECK(gen(m, out_of_range, 2, (qhx_generate_opts){.max_tokens = 8}, &k, &r) == QHX_ERR_RANGE, "id 4160 accepted");
    qhx_model_close(m);
    qhx_runtime_free(rt);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0, "cleanup");
}

/* logit_bias moves the tokens it names; logprobs are log-softmax of the logits sampling saw,
 * checked against an independent evaluation of the same tokens, and the same with speculation */
typedef struct {
    int n;
    int32_t tok[64], top[64][QHX_MAX_TOP_LOGPROBS];
    float lp[64], toplp[64][QHX_MAX_TOP_LOGPROBS];
    int n_top[64];
} lp_sink;

static void on_logprobs(int32_t tok, float logprob, const int32_t *ids, const float *lps, int n, void *user) {
    lp_sink *k = user;
    if (k->n >= 64) return;
    k->tok[k->n] = tok, k->lp[k->n] = logprob, k->n_top[k->n] = n;
    for (int i = 0; i < n; i++) k->top[k->n][i] = ids[i], k->toplp[k->n][i] = lps[i];
    k->n++;
}

static void bias_and_logprobs_tests(const char *model) {
    qhx_model *m;
    if (qhx_model_open(NULL, model, &m) != QHX_OK) { CHECK(0, "%s", qhx_last_error()); return; }
    const int32_t prompt[] = {1000, 17, 400, 5};
    qhx_generate_result r;
    sink g = {0}, b = {0};
    CHECK(gen(m, prompt, 4, (qhx_generate_opts){.max_tokens = 8, .ignore_eos = 1}, &g, &r) == QHX_OK, "%s", qhx_last_error());
    const int32_t force = 77, ban = g.ids[0];
    const float plus = 100, minus = -100;
    CHECK(gen(m, prompt, 4, (qhx_generate_opts){.max_tokens = 8, .ignore_eos = 1, .bias_ids = &force, .bias = &plus, .n_bias = 1}, &b, &r) == QHX_OK &&
              b.ids[0] == force && b.ids[1] == force,
          "a +100 bias on %d: first tokens %d %d", force, b.ids[0], b.ids[1]);
    CHECK(gen(m, prompt, 4, (qhx_generate_opts){.max_tokens = 8, .ignore_eos = 1, .bias_ids = &ban, .bias = &minus, .n_bias = 1}, &b, &r) == QHX_OK &&
              b.ids[0] != ban,
          "a -100 bias on %d: first token %d", ban, b.ids[0]);
    const int32_t bad = 999999;
    CHECK(gen(m, prompt, 4, (qhx_generate_opts){.max_tokens = 8, .bias_ids = &bad, .bias = &plus, .n_bias = 1}, &b, &r) == QHX_ERR_ARG &&
              strstr(qhx_last_error(), "logit bias"),
          "bias on token 999999: %s", qhx_last_error());

    /* logprobs: greedy, 5 alternatives, against the logits of prompt + generated evaluated afresh */
    enum { G = 24 };
    for (int spec = 0; spec < 2; spec++) {
        static lp_sink k;
        memset(&k, 0, sizeof k);
        qhx_session *s;
        qhx_session_new(m, &s);
        qhx_generate_opts o = {.max_tokens = G, .ignore_eos = 1, .logprobs = on_logprobs, .logprobs_user = &k, .top_logprobs = 5,
                               .draft = spec ? QHX_DRAFT_NGRAM : 0};
        CHECK(qhx_generate(s, prompt, 4, &o, NULL, NULL, &r) == QHX_OK && k.n == G, "logprobs: %s (%d)", qhx_last_error(), k.n);
        int32_t all[4 + G];
        memcpy(all, prompt, sizeof prompt);
        memcpy(all + 4, k.tok, sizeof(int32_t) * G);
        qhx_model_info mi;
        qhx_model_get_info(m, &mi);
        const int NV = mi.vocab_size;
        float *logits = malloc(sizeof(float) * (size_t)NV * (4 + G));
        qhx_session_reset(s);
        CHECK(qhx_session_eval(s, all, 4 + G, QHX_EVAL_STEPWISE, logits, NULL) == QHX_OK, "%s", qhx_last_error());
        double worst = 0;
        int order_ok = 1;
        for (int t = 0; t < G; t++) {
            const float *x = logits + (size_t)(3 + t) * NV;
            double mx = -1e30, sum = 0;
            for (int v = 0; v < NV; v++) mx = x[v] > mx ? x[v] : mx;
            for (int v = 0; v < NV; v++) sum += exp(x[v] - mx);
            const double lse = mx + log(sum);
            const double d = fabs((x[k.tok[t]] - lse) - k.lp[t]);
            if (d > worst) worst = d;
            order_ok &= k.n_top[t] == 5 && k.top[t][0] == k.tok[t];
            for (int i = 0; i < k.n_top[t]; i++) {
                const double di = fabs((x[k.top[t][i]] - lse) - k.toplp[t][i]);
                if (di > worst) worst = di;
                if (i) order_ok &= k.toplp[t][i] <= k.toplp[t][i - 1];
            }
        }
        printf("  logprobs%s: %d tokens, worst |logprob - log-softmax of a fresh evaluation| %.2e\n", spec ? " (ngram drafts)" : "", G, worst);
        CHECK(worst < 1e-4 && order_ok, "logprobs: deviation %.3e, order %d", worst, order_ok);
        free(logits);
        qhx_session_free(s);
    }
    qhx_model_close(m);
}

/* The header's promise to compiled programs: a program built against an older header passes
 * smaller option and info structs. Options: the fields past its size are never read (filled here
 * with garbage, generation is still the default's). Info: nothing past its size is written. */
typedef struct { int32_t ids[16]; int n; } got;

static int collect_ids(int32_t tok, const char *text, size_t len, void *user) {
    got *g = user;
    if (tok >= 0 && g->n < 16) g->ids[g->n++] = tok;
    return 0;
}

static void abi_tests(const char *dir) {
    qhx_runtime *rt;
    qhx_model *m;
    qhx_session *s;
    if (tl_open(dir, "auto", &rt, &m, &s)) return;
    const int32_t prompt[] = {1, 2, 3};
    got a = {0}, b = {0};
    qhx_generate_opts plain = {.max_tokens = 8};
    qhx_generate_result ra, rb;
    CHECK(qhx_generate(s, prompt, 3, &plain, collect_ids, &a, &ra) == QHX_OK, "%s", qhx_last_error());
    union { qhx_generate_opts o; unsigned char bytes[sizeof(qhx_generate_opts)]; } old;
    memset(old.bytes, 0xA5, sizeof old.bytes); /* the fields an older program does not have: garbage */
    const size_t old_size = offsetof(qhx_generate_opts, force);
    memset(old.bytes, 0, old_size);
    old.o.max_tokens = 8;
    unsigned char res[sizeof(qhx_generate_result) + 8];
    memset(res, 0x5A, sizeof res);
    qhx_session_reset(s);
    CHECK(qhx_generate_sized(s, prompt, 3, &old.o, old_size, collect_ids, &b, (qhx_generate_result *)res,
                             offsetof(qhx_generate_result, n_drafted)) == QHX_OK, "older options: %s", qhx_last_error());
    CHECK(a.n == b.n && !memcmp(a.ids, b.ids, sizeof(int32_t) * (size_t)a.n), "older options: another output");
    memcpy(&rb, res, sizeof rb);
    CHECK(rb.n_generated == ra.n_generated && res[offsetof(qhx_generate_result, n_drafted)] == 0x5A,
          "an older result struct: written past its size, or not filled");
    unsigned char info[sizeof(qhx_model_info) + 8];
    memset(info, 0x5A, sizeof info);
    qhx_model_get_info_sized(m, (qhx_model_info *)info, 8);
    CHECK(info[8] == 0x5A && info[sizeof info - 1] == 0x5A, "an older info struct: written past its size");
    qhx_session_free(s);
    qhx_model_close(m);
    qhx_runtime_free(rt);
}

int main(void) {
    abi_tests("models/q35-kjv");
    sampler_tests();
    generate_tests("models/q35-kjv");
    bias_and_logprobs_tests("models/q35-kjv");
    padded_vocab_tests();
    return tl_finish("sampling");
}
