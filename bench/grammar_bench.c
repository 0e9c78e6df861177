/* Constrained decoding's cost on a real vocabulary: for each schema (a JSON file in bench/schemas: a
 * schema and an instance of it), the compile time, then along the instance's tokens the time to
 * check one token (what greedy pays when the model's choice is allowed) and to build the full mask
 * (what sampling pays every token, and greedy when its choice is refused), mean and p99. One JSON
 * line per schema. See bench/README.md. */
#include "grammar/grammar.h"
#include "qhexrt.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void stats(double *v, int n, double *mean, double *p99) {
    double s = 0;
    for (int i = 0; i < n; i++) s += v[i];
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    *mean = n ? s / n : 0;
    *p99 = n ? v[(int)(0.99 * (n - 1) + 0.5)] : 0;
}

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: grammar_bench TOKENIZER SCHEMA.json...\n"); return 2; }
    qhx_tokenizer *tok;
    if (qhx_tokenizer_load(argv[1], &tok)) { fprintf(stderr, "%s\n", qhx_last_error()); return 1; }
    double t0 = now();
    qhx_tokenizer_trie(tok); /* once per tokenizer, on first use */
    printf("{\"tokenizer\": \"%s\", \"vocab\": %d, \"trie_ms\": %.1f}\n", argv[1], qhx_tokenizer_n_ids(tok), (now() - t0) * 1e3);
    for (int f = 2; f < argc; f++) {
        json_error_t e;
        json_t *doc = json_load_file(argv[f], 0, &e);
        if (!doc) { fprintf(stderr, "%s: %s\n", argv[f], e.text); return 1; }
        char *schema = json_dumps(json_object_get(doc, "schema"), JSON_COMPACT);
        char *text = json_dumps(json_object_get(doc, "instance"), JSON_COMPACT | JSON_PRESERVE_ORDER);
        qhx_grammar *g = NULL;
        double best = 1e9;
        for (int r = 0; r < 5; r++) {
            qhx_grammar_free(g);
            double c0 = now();
            if (qhx_grammar_from_json_schema(tok, schema, strlen(schema), &g)) { fprintf(stderr, "%s: %s\n", argv[f], qhx_last_error()); return 1; }
            if (now() - c0 < best) best = now() - c0;
        }
        int32_t *ids;
        size_t n;
        qhx_tokenizer_encode(tok, text, strlen(text), 0, &ids, &n);
        double *check = malloc(sizeof(double) * n), *mask = malloc(sizeof(double) * n), *cold = malloc(sizeof(double) * n);
        qhx_gmatch *m, *fresh = NULL;
        qhx_gmatch_new(g, &m);
        int ok = 1;
        for (size_t i = 0; i < n && ok; i++) {
            size_t len;
            const char *p = qhx_gmatch_piece(m, ids[i], &len);
            double a = now();
            ok = qhx_gmatch_check(m, p, len);
            double b = now();
            const uint64_t *mk = qhx_gmatch_mask(m);
            double c = now();
            ok = ok && mk && (mk[ids[i] >> 6] >> (ids[i] & 63) & 1);
            check[i] = (b - a) * 1e6, mask[i] = (c - b) * 1e6;
            if (getenv("QHX_BENCH_TRACE")) fprintf(stderr, "%8.1f us before token %zu (%.*s)\n", mask[i], i, (int)len, p);
            ok = ok && !qhx_gmatch_accept(m, p, len);
        }
        /* cold masks: a new matcher walked to each position, its mask the first it builds */
        size_t at = 0;
        for (size_t i = 0; i < n && ok; i++) {
            qhx_gmatch_free(fresh);
            qhx_gmatch_new(g, &fresh);
            qhx_gmatch_accept(fresh, text, at);
            double a = now();
            qhx_gmatch_mask(fresh);
            cold[i] = (now() - a) * 1e6;
            size_t len;
            qhx_gmatch_piece(m, ids[i], &len);
            at += len;
        }
        double cm, cp, mm, mp, km, kp;
        stats(check, (int)n, &cm, &cp);
        stats(mask, (int)n, &mm, &mp);
        stats(cold, (int)n, &km, &kp);
        const char *name = strrchr(argv[f], '/') ? strrchr(argv[f], '/') + 1 : argv[f];
        printf("{\"schema\": \"%s\", \"ok\": %s, \"tokens\": %zu, \"compile_ms\": %.2f, \"check_us_mean\": %.2f, \"check_us_p99\": %.2f, "
               "\"mask_us_mean\": %.1f, \"mask_us_p99\": %.1f, \"cold_mask_us_mean\": %.1f, \"cold_mask_us_p99\": %.1f}\n",
               name, ok ? "true" : "false", n, best * 1e3, cm, cp, mm, mp, km, kp);
        qhx_gmatch_free(m);
        qhx_gmatch_free(fresh);
        free(check), free(mask), free(cold), free(ids), free(schema), free(text);
        qhx_grammar_free(g);
        json_decref(doc);
    }
    qhx_tokenizer_free(tok);
    return 0;
}
