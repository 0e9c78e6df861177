/* What quantization does to a mixture-of-experts model's routing and greedy output: a MoE
 * checkpoint (fp32 reference kernels) against bundles forged from it, over the same tokens
 * teacher-forced (the golden sequences, then windows of a text): how often a (token, layer)
 * routing decision picks another top-k set than fp32's, and how many experts of it differ; then
 * each bundle's greedy ids on the golden prompts against the reference's, with the reference's
 * top-1/top-2 margin where they part. bench/README.md records the figures.
 *   build/moe_quality CHECKPOINT TEXT BUNDLE... */
#include "model/model.h"
#include "util/mapfile.h"

#include "util/json.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { WINDOW = 256, WINDOWS = 16, MAX_SEQ = 4096 };

typedef struct { int32_t *ids; int n; } seq;

/* the routing of every MoE layer over s, in the route log's order */
static qhx_route_log routes_of(const char *path, const char *kernels, const seq *s, int n_seq) {
    qhx_runtime_opts ro = {.kernels = kernels};
    qhx_runtime *rt;
    qhx_model *m;
    qhx_session *ss;
    qhx_route_log log = {0};
    if (qhx_runtime_new(&ro, &rt) || qhx_model_open(rt, path, &m) || qhx_session_new(m, &ss)) {
        fprintf(stderr, "%s: %s\n", path, qhx_last_error());
        exit(1);
    }
    rt->ex.routes = &log;
    for (int i = 0; i < n_seq; i++) {
        qhx_session_reset(ss);
        if (qhx_session_eval(ss, s[i].ids, s[i].n, QHX_EVAL_SEQUENCE, NULL, NULL)) fprintf(stderr, "%s\n", qhx_last_error()), exit(1);
    }
    rt->ex.routes = NULL;
    qhx_session_free(ss);
    qhx_model_close(m);
    qhx_runtime_free(rt);
    return log;
}

static int greedy(const char *path, const int32_t *prompt, int n, int G, int32_t *out) {
    qhx_runtime_opts ro = {0};
    qhx_runtime *rt;
    qhx_model *m;
    qhx_session *ss;
    if (qhx_runtime_new(&ro, &rt) || qhx_model_open(rt, path, &m) || qhx_session_new(m, &ss)) return -1;
    float *logits = malloc(sizeof(float) * (size_t)m->cfg.vocab_size);
    int32_t tok;
    int got = 0;
    qhx_status rc = qhx_session_eval(ss, prompt, n, QHX_EVAL_SEQUENCE, NULL, logits);
    while (!rc && got < G) {
        tok = 0;
        for (int v = 1; v < m->cfg.vocab_size; v++) if (logits[v] > logits[tok]) tok = v;
        out[got++] = tok;
        rc = qhx_session_eval(ss, &tok, 1, QHX_EVAL_STEPWISE, NULL, logits);
    }
    free(logits);
    qhx_session_free(ss);
    qhx_model_close(m);
    qhx_runtime_free(rt);
    return got;
}

int main(int argc, char **argv) {
    if (argc < 4) return fprintf(stderr, "usage: moe_quality CHECKPOINT TEXT BUNDLE...\n"), 2;
    char path[1024], *text;
    size_t len;
    snprintf(path, sizeof path, "%s/golden/golden.json", argv[1]);
    if (qhx_read_file(path, 1u << 24, &text, &len)) return fprintf(stderr, "%s\n", qhx_last_error()), 1;
    json_t *root = qhx_json_parse(text, len);
    free(text);
    const json_t *cases = json_object_get(root, "cases");
    const int n_cases = (int)json_array_size(cases);
    seq s[16 + WINDOWS];
    int n_seq = 0;
    for (int c = 0; c < n_cases && c < 16; c++) { /* prompt + greedy ids */
        const json_t *a = json_object_get(json_array_get(cases, c), "ids"), *g = json_object_get(json_array_get(cases, c), "greedy_ids");
        seq *q = &s[n_seq++];
        q->n = (int)(json_array_size(a) + json_array_size(g));
        q->ids = malloc(sizeof(int32_t) * (size_t)q->n);
        for (size_t i = 0; i < json_array_size(a); i++) q->ids[i] = (int32_t)json_integer_value(json_array_get(a, i));
        for (size_t i = 0; i < json_array_size(g); i++) q->ids[json_array_size(a) + i] = (int32_t)json_integer_value(json_array_get(g, i));
    }
    /* windows of the text, tokenized with the checkpoint's tokenizer */
    qhx_tokenizer *tok;
    snprintf(path, sizeof path, "%s/tokenizer.json", argv[1]);
    int32_t *ids;
    size_t n_ids;
    if (qhx_tokenizer_load(path, &tok) || qhx_read_file(argv[2], 1u << 26, &text, &len) ||
        qhx_tokenizer_encode(tok, text, len, 0, &ids, &n_ids))
        return fprintf(stderr, "%s\n", qhx_last_error()), 1;
    for (int w = 0; w < WINDOWS && (size_t)(w + 1) * WINDOW <= n_ids; w++) s[n_seq++] = (seq){ids + (size_t)w * WINDOW, WINDOW};
    const int n_golden = n_cases < 16 ? n_cases : 16;

    qhx_route_log ref = routes_of(argv[1], "ref", s, n_seq);
    qhx_runtime_opts ro0 = {.kernels = "ref"};
    qhx_runtime *rt0;
    qhx_model *m0;
    if (qhx_runtime_new(&ro0, &rt0) || qhx_model_open(rt0, argv[1], &m0)) return fprintf(stderr, "%s\n", qhx_last_error()), 1;
    const int k = m0->cfg.top_k, layers = m0->cfg.n_layers;
    printf("%s: %d experts, top-%d, %d layers; %zu routing decisions over %d golden sequences and %d windows of %d tokens\n",
           argv[1], m0->cfg.n_experts, k, layers, ref.n / (size_t)k, n_golden, n_seq - n_golden, WINDOW);
    qhx_model_close(m0);
    qhx_runtime_free(rt0);

    for (int b = 3; b < argc; b++) {
        qhx_route_log got = routes_of(argv[b], "auto", s, n_seq);
        if (got.n != ref.n) return fprintf(stderr, "%s: %zu routing entries, the checkpoint %zu\n", argv[b], got.n, ref.n), 1;
        size_t changed = 0, experts = 0, decisions = ref.n / (size_t)k;
        for (size_t d = 0; d < decisions; d++) {
            int diff = 0; /* both lists ascending: count ref's experts missing from got's */
            for (int i = 0, j = 0; i < k; i++) {
                while (j < k && got.ids[d * k + j] < ref.ids[d * k + i]) j++;
                diff += !(j < k && got.ids[d * k + j] == ref.ids[d * k + i]);
            }
            changed += diff > 0, experts += (size_t)diff;
        }
        printf("%s: routed set changed in %zu of %zu decisions (%.2f %%), %zu of %zu expert slots (%.3f %%)\n", argv[b], changed,
               decisions, 100.0 * changed / decisions, experts, ref.n, 100.0 * experts / ref.n);
        free(got.ids);
        for (int c = 0; c < n_golden; c++) {
            const json_t *cs = json_array_get(cases, c), *a = json_object_get(cs, "ids"), *g = json_object_get(cs, "greedy_ids");
            const json_t *mg = json_object_get(cs, "greedy_top1_top2_margins");
            const int np = (int)json_array_size(a), G = (int)json_array_size(g);
            int32_t out[MAX_SEQ];
            const int n = greedy(argv[b], s[c].ids, np, G < MAX_SEQ ? G : MAX_SEQ, out);
            int match = 0;
            while (match < n && out[match] == (int32_t)json_integer_value(json_array_get(g, match))) match++;
            if (match == G) printf("  %s greedy %d/%d\n", json_string_value(json_object_get(cs, "name")), match, G);
            else printf("  %s greedy %d/%d; parts where the reference's top-1/top-2 margin is %.4f\n",
                        json_string_value(json_object_get(cs, "name")), match, G, json_number_value(json_array_get(mg, match)));
        }
    }
    free(ref.ids);
    for (int i = 0; i < n_golden; i++) free(s[i].ids);
    free(ids);
    free(text);
    qhx_tokenizer_free(tok);
    json_decref(root);
    return 0;
}
