/* Which W4 scheme the forge should write, by measurement on a real checkpoint: every decoder
 * matrix quantized and put back as fp32 (group size x symmetric or with a minimum, and W8 per row
 * for reference), then the relative RMS error of the weights and of W x (x from N(0, 1)), and the
 * perplexity of the whole model over a text (qhx perplexity's definition, windows of 512).
 * docs/bundle.md records the table and the choice.
 *   build/w4_options models/q35-kjv tests/data/corpora/kjv-dev.txt */
#include "forge/forge.h"
#include "model/model.h"
#include "model/ops.h"
#include "util/rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *name;
    int bits8;       /* W8, one scale a row */
    int group, asym;
    double bits;     /* bits a weight, scales included */
} scheme;

/* one row quantized and dequantized in place */
static void fake_quant(const scheme *s, float *row, int cols) {
    if (s->bits8) {
        int8_t *q = malloc((size_t)cols);
        const float sc = qhx_quantize_row(row, cols, q);
        for (int c = 0; c < cols; c++) row[c] = q[c] * sc;
        free(q);
        return;
    }
    uint8_t q[256];
    for (int c0 = 0; c0 < cols; c0 += s->group) {
        const int n = cols - c0 < s->group ? cols - c0 : s->group;
        float d, m;
        qhx_quantize_w4(row + c0, n, s->asym, q, &d, &m);
        for (int i = 0; i < n; i++) row[c0 + i] = d * q[i] + m;
    }
}

static double perplexity(qhx_model *m, const int32_t *ids, size_t n) {
    qhx_session *s;
    double nll;
    size_t scored;
    if (qhx_session_new(m, &s)) return NAN;
    const qhx_status rc = qhx_perplexity(s, ids, n, 512, 0, &nll, &scored, NULL, NULL);
    qhx_session_free(s);
    return rc || !scored ? NAN : exp(nll / (double)scored);
}

int main(int argc, char **argv) {
    if (argc != 3) return fprintf(stderr, "usage: w4_options CHECKPOINT TEXT\n"), 2;
    qhx_runtime_opts ro = {.kernels = "auto", .n_threads = 2};
    qhx_runtime *rt;
    qhx_model *m;
    qhx_tokenizer *tok;
    int32_t *ids;
    size_t n_ids, len;
    FILE *fp = fopen(argv[2], "rb");
    if (!fp) return fprintf(stderr, "%s: cannot open\n", argv[2]), 1;
    fseek(fp, 0, SEEK_END);
    len = (size_t)ftell(fp);
    rewind(fp);
    char *text = malloc(len);
    if (!text || fread(text, 1, len, fp) != len) return fprintf(stderr, "%s: read error\n", argv[2]), 1;
    fclose(fp);
    if (qhx_runtime_new(&ro, &rt) || qhx_model_open(rt, argv[1], &m) || qhx_model_tokenizer(m, &tok) ||
        qhx_tokenizer_encode(tok, text, len, 0, &ids, &n_ids))
        return fprintf(stderr, "%s\n", qhx_last_error()), 1;
    const int n = qhx_qwen35_specs(&m->cfg, "", m->w, NULL);
    qhx_tensor_spec *specs = calloc((size_t)n, sizeof *specs);
    qhx_qwen35_specs(&m->cfg, "", m->w, specs);
    /* every decoder matrix as fp32, kept to restore between schemes */
    qhx_tensor *saved = calloc((size_t)n, sizeof *saved);
    float **orig = calloc((size_t)n, sizeof *orig), **work = calloc((size_t)n, sizeof *work);
    for (int i = 0; i < n; i++) {
        if (specs[i].init != QHX_INIT_MATRIX) continue;
        qhx_tensor *t = specs[i].dst;
        const size_t sz = (size_t)t->rows * t->cols;
        orig[i] = malloc(sizeof(float) * sz), work[i] = malloc(sizeof(float) * sz);
        for (size_t k = 0; k < sz; k++) orig[i][k] = qhx_tensor_get(t, k);
        saved[i] = *t;
        t->dtype = QHX_F32, t->data = work[i], t->scale = NULL;
    }
    static const scheme schemes[] = {
        {"fp32 (checkpoint)", 0, 0, 0, 32},
        {"W8, one scale a row", 1, 0, 0, 8},
        {"W4 g32 symmetric", 0, 32, 0, 4.5},
        {"W4 g32 with minimum", 0, 32, 1, 5},
        {"W4 g64 symmetric", 0, 64, 0, 4.25},
        {"W4 g64 with minimum", 0, 64, 1, 4.5},
        {"W4 g128 symmetric", 0, 128, 0, 4.125},
        {"W4 g128 with minimum", 0, 128, 1, 4.25},
    };
    printf("%s over %s (%zu tokens), every decoder matrix quantized, the rest fp32\n", argv[1], argv[2], n_ids);
    printf("  %-22s %6s %10s %10s %11s %9s\n", "scheme", "bits", "weights", "W x", "perplexity", "change");
    double base = 0;
    for (size_t k = 0; k < sizeof schemes / sizeof schemes[0]; k++) {
        const scheme *s = &schemes[k];
        double wnum = 0, wden = 0, ynum = 0, yden = 0;
        uint64_t seed = 1;
        for (int i = 0; i < n; i++) {
            if (!orig[i]) continue;
            const int rows = saved[i].rows, cols = saved[i].cols;
            float *x = malloc(sizeof(float) * cols);
            for (int c = 0; c < cols; c++) x[c] = (float)qhx_gauss(&seed);
            for (int r = 0; r < rows; r++) {
                float *w = work[i] + (size_t)r * cols;
                const float *o = orig[i] + (size_t)r * cols;
                memcpy(w, o, sizeof(float) * cols);
                if (s->bits < 32) fake_quant(s, w, cols);
                double y = 0, yq = 0;
                for (int c = 0; c < cols; c++) {
                    wnum += (double)(w[c] - o[c]) * (w[c] - o[c]), wden += (double)o[c] * o[c];
                    y += (double)o[c] * x[c], yq += (double)w[c] * x[c];
                }
                ynum += (yq - y) * (yq - y), yden += y * y;
            }
            free(x);
        }
        const double ppl = perplexity(m, ids, n_ids);
        if (!k) base = ppl;
        printf("  %-22s %6.3f %9.3f%% %9.3f%% %11.4f %+8.2f%%\n", s->name, s->bits, 100 * sqrt(wnum / wden), 100 * sqrt(ynum / yden),
               ppl, 100 * (ppl / base - 1));
        fflush(stdout);
    }
    return 0;
}
