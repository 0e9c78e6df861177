/* How much each int8 scale granularity costs in accuracy, on a real checkpoint: for every decoder
 * matrix, quantize with one scale per row, per 128 columns and per 32 columns, and report the
 * relative RMS error of the weights and of W·x for x drawn from N(0, 1). The forge uses per-row
 * scales; docs/bundle.md records these numbers and the reasoning.
 *   build/quant_error models/q35-kjv */
#include "forge/forge.h"
#include "model/model.h"
#include "model/ops.h"
#include "util/rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    if (argc != 2) return fprintf(stderr, "usage: quant_error CHECKPOINT\n"), 2;
    qhx_runtime_opts ro = {.kernels = "ref", .n_threads = 1};
    qhx_runtime *rt;
    qhx_model *m;
    if (qhx_runtime_new(&ro, &rt) || qhx_model_open(rt, argv[1], &m)) return fprintf(stderr, "%s\n", qhx_last_error()), 1;
    const int n = qhx_qwen35_specs(&m->cfg, "", m->w, NULL);
    qhx_tensor_spec *specs = calloc((size_t)n, sizeof *specs);
    qhx_qwen35_specs(&m->cfg, "", m->w, specs);
    const int groups[] = {0, 128, 32}; /* 0 = the whole row */
    double wnum[3] = {0}, wden = 0, ynum[3] = {0}, yden = 0;
    uint64_t seed = 1;
    for (int i = 0; i < n; i++) {
        if (specs[i].init != QHX_INIT_MATRIX) continue;
        const qhx_tensor *t = specs[i].dst;
        float *row = malloc(sizeof(float) * t->cols), *x = malloc(sizeof(float) * t->cols);
        int8_t *q = malloc((size_t)t->cols);
        for (int c = 0; c < t->cols; c++) x[c] = (float)qhx_gauss(&seed);
        for (int r = 0; r < t->rows; r++) {
            double y = 0;
            for (int c = 0; c < t->cols; c++) {
                row[c] = qhx_tensor_get(t, (size_t)r * t->cols + c);
                wden += (double)row[c] * row[c];
                y += (double)row[c] * x[c];
            }
            yden += y * y;
            for (int g = 0; g < 3; g++) {
                const int gs = groups[g] ? groups[g] : t->cols;
                double yq = 0;
                for (int c0 = 0; c0 < t->cols; c0 += gs) {
                    const int len = t->cols - c0 < gs ? t->cols - c0 : gs;
                    const float s = qhx_quantize_row(row + c0, len, q);
                    for (int c = 0; c < len; c++) {
                        const double d = row[c0 + c] - q[c] * (double)s;
                        wnum[g] += d * d;
                        yq += q[c] * (double)s * x[c0 + c];
                    }
                }
                ynum[g] += (yq - y) * (yq - y);
            }
        }
        free(row), free(x), free(q);
    }
    printf("%s: int8 weight quantization, relative RMS error over every decoder matrix\n", argv[1]);
    printf("  %-22s %10s %10s %16s\n", "scales", "weights", "W x", "extra bytes/wt");
    for (int g = 0; g < 3; g++)
        printf("  %-22s %9.3f%% %9.3f%% %15.2f%%\n", groups[g] ? (groups[g] == 128 ? "per 128 columns" : "per 32 columns") : "per row (the forge)",
               100 * sqrt(wnum[g] / wden), 100 * sqrt(ynum[g] / yden), groups[g] ? 400.0 / groups[g] : 0.0);
    free(specs);
    qhx_model_close(m);
    qhx_runtime_free(rt);
    return 0;
}
