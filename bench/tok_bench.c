/* Tokenizer throughput and load time: encodes a corpus as one text (single thread) and prints
 * one JSON line {"corpus", "bytes", "tokens", "mb_s", "load_ms", "compact_load_ms"}. See bench/README.md. */
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

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: tok_bench TOKENIZER CORPUS [REPEAT]\n"); return 2; }
    int repeat = argc > 3 ? atoi(argv[3]) : 3;
    double best_load = 1e9;
    qhx_tokenizer *t = NULL;
    for (int i = 0; i < 3; i++) {
        double t0 = now();
        if (qhx_tokenizer_load(argv[1], &t)) { fprintf(stderr, "%s\n", qhx_last_error()); return 1; }
        double dt = now() - t0;
        if (dt < best_load) best_load = dt;
        if (i < 2) qhx_tokenizer_free(t);
    }
    /* the compact form of the same tokenizer, written next to the build and loaded back */
    char cpath[4200];
    snprintf(cpath, sizeof cpath, "%s.qhxtok-bench", argv[1]);
    double best_compact = 1e9;
    if (qhx_tokenizer_save_compact(t, cpath)) { fprintf(stderr, "%s\n", qhx_last_error()); return 1; }
    for (int i = 0; i < 5; i++) {
        qhx_tokenizer *c;
        double t0 = now();
        if (qhx_tokenizer_load(cpath, &c)) { fprintf(stderr, "%s\n", qhx_last_error()); return 1; }
        double dt = now() - t0;
        if (dt < best_compact) best_compact = dt;
        qhx_tokenizer_free(c);
    }
    remove(cpath);
    FILE *f = fopen(argv[2], "rb");
    if (!f) { perror(argv[2]); return 1; }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (fread(buf, 1, (size_t)n, f) != (size_t)n) return 1;
    fclose(f);
    buf[n] = 0;
    double best = 1e9;
    size_t tokens = 0;
    /* the first pass warms the word cache, as a long-running process would be */
    for (int r = 0; r < repeat; r++) {
        tokens = 0;
        double t0 = now();
        int32_t *ids;
        if (qhx_tokenizer_encode(t, buf, (size_t)n, 0, &ids, &tokens)) { fprintf(stderr, "%s\n", qhx_last_error()); return 1; }
        free(ids);
        double dt = now() - t0;
        if (dt < best) best = dt;
    }
    printf("{\"impl\": \"qhexrt\", \"corpus\": \"%s\", \"bytes\": %ld, \"tokens\": %zu, \"mb_s\": %.2f, \"load_ms\": %.1f, "
           "\"compact_load_ms\": %.1f}\n", argv[2], n, tokens, n / best / 1e6, best_load * 1e3, best_compact * 1e3);
    qhx_tokenizer_free(t);
    free(buf);
    return 0;
}
