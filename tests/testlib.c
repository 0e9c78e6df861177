#include "testlib.h"

#include "util/json.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int tl_passed, tl_failed;

int tl_finish(const char *suite) {
    printf("%s: %d passed, %d failed\n", suite, tl_passed, tl_failed);
    return tl_failed ? 1 : 0;
}

void *tl_read(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) { free(buf); buf = NULL; }
    if (buf) buf[n] = 0;
    fclose(f);
    if (len) *len = (size_t)n;
    return buf;
}

int tl_argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

double tl_row_dev(const float *a, const float *g, int V) {
    double mean = 0, var = 0, mx = 0;
    for (int i = 0; i < V; i++) mean += g[i];
    mean /= V;
    for (int i = 0; i < V; i++) var += (g[i] - mean) * (g[i] - mean);
    const double sd = sqrt(var / V);
    for (int i = 0; i < V; i++) {
        const double d = fabs((double)a[i] - g[i]);
        if (!(d <= mx)) mx = d; /* NaN-safe: a NaN makes the deviation NaN */
    }
    return mx / (sd > 0 ? sd : 1);
}

qhx_kv_form tl_kv = QHX_KV_DEFAULT;

int tl_open(const char *dir, const char *kernels, qhx_runtime **rt, qhx_model **m, qhx_session **s) {
    qhx_runtime_opts ro = {.kernels = kernels, .kv_cache = tl_kv};
    *rt = NULL, *m = NULL, *s = NULL;
    printf("  %s on %s kernels\n", dir, kernels);
    const int ok = qhx_runtime_new(&ro, rt) == QHX_OK && qhx_model_open(*rt, dir, m) == QHX_OK && qhx_session_new(*m, s) == QHX_OK;
    CHECK(ok, "%s [%s]: %s", dir, kernels, qhx_last_error());
    if (ok) return 0;
    qhx_session_free(*s), qhx_model_close(*m), qhx_runtime_free(*rt);
    return -1;
}

json_t *tl_json(const char *path) {
    char *text = tl_read(path, NULL);
    json_t *root = text ? json_loads(text, JSON_ALLOW_NUL, NULL) : NULL;
    free(text);
    CHECK(root != NULL, "cannot read or parse %s", path);
    return root;
}

int tl_quick(void) {
    const char *q = getenv("QHX_TEST_QUICK");
    return q && *q && strcmp(q, "0");
}

int tl_kernel_families(const char **sets) {
    /* the integer family (every set but ref: int16 activations for W8, int8 for W4; the sets are
     * held to their scalar twin kernel by kernel in test_kernels), and the fp32 reference */
    sets[0] = "auto";
    if (tl_quick()) return 1;
    sets[1] = "ref";
    return 2;
}

void tl_write_safetensors(const char *path, const json_t *header, const void *data, size_t n) {
    char *text = qhx_json_canonical(header);
    const size_t nh = text ? strlen(text) : 0;
    FILE *f = fopen(path, "wb");
    CHECK(f && text, "%s: cannot write", path);
    if (f && text) {
        for (int i = 0; i < 8; i++) fputc((int)((nh >> (8 * i)) & 0xff), f);
        fwrite(text, 1, nh, f);
        fwrite(data, 1, n, f);
    }
    if (f) fclose(f);
    free(text);
}
