/* Loader and model-shape tests on synthetic checkpoints: every bad input of issue #2 gets a clear
 * error naming the file, tensor or argument; odd shapes (key dim != value dim, untied head, 5
 * layers) run, and token-by-token decode equals whole-sequence evaluation. */
#include "qhexrt.h"
#include "qhexrt_tools.h"
#include "qhexrt.h"
#include "testlib.h"

#include "util/json.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char root[256];

static void sh(const char *fmt, const char *a, const char *b) __attribute__((format(printf, 1, 0)));
static void sh(const char *fmt, const char *a, const char *b) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, fmt, a, b);
    if (system(cmd) != 0) fprintf(stderr, "command failed: %s\n", cmd);
}

/* Copies `src` to a fresh dir named `name` under the scratch root and returns its path. */
static const char *clone(const char *src, const char *name) {
    static char dst[512];
    snprintf(dst, sizeof dst, "%s/%s", root, name);
    sh("rm -rf '%s'%s", dst, "");
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "cp -r '%s' '%s'", src, dst);
    if (system(cmd) != 0) fprintf(stderr, "clone failed\n");
    return dst;
}

/* Rewrites a safetensors header through `edit`, keeping the data bytes. */
static void edit_header(const char *file, void (*edit)(json_t *)) {
    size_t len;
    unsigned char *buf = tl_read(file, &len);
    uint64_t h = 0;
    for (int i = 7; i >= 0; i--) h = h << 8 | buf[i];
    json_t *j = qhx_json_parse((char *)buf + 8, h);
    edit(j);
    tl_write_safetensors(file, j, buf + 8 + h, len - 8 - h);
    json_decref(j);
    free(buf);
}

#define NORM "model.language_model.norm.weight"
static void bad_shape(json_t *j) { json_object_set_new(json_object_get(j, NORM), "shape", json_pack("[i, i]", 64, 2)); }
static void bad_dtype(json_t *j) {
    json_object_set_new(json_object_get(j, "model.language_model.layers.0.linear_attn.A_log"), "dtype", json_string("I32"));
}
static void missing_tensor(json_t *j) { json_object_del(j, NORM); }
static void bad_offsets(json_t *j) {
    json_object_set_new(json_object_get(j, NORM), "data_offsets", json_pack("[i, i]", 1 << 30, (1 << 30) + 256));
}

static void expect_fail(const char *dir, qhx_status want, const char *needle, const char *what) {
    qhx_model *m = NULL;
    qhx_status st = qhx_model_open(NULL, dir, &m);
    const char *msg = qhx_last_error();
    CHECK(st == want, "%s: status %d (%s), want %d", what, st, msg, want);
    CHECK(strstr(msg, needle) != NULL, "%s: message '%s' does not name '%s'", what, msg, needle);
    CHECK(strchr(msg, '\n') == NULL, "%s: message is not one line", what);
    CHECK(m == NULL, "%s: model returned on failure", what);
    qhx_model_close(m);
}

static void write_bytes(const char *path, const char *data, size_t len) {
    FILE *f = fopen(path, "wb");
    fwrite(data, 1, len, f);
    fclose(f);
}
#define write_file(path, text) write_bytes(path, text, strlen(text))
#define write_lit(path, lit) write_bytes(path, lit, sizeof lit - 1)

static void config_edit(const char *name, const char *from, const char *to, qhx_status want, const char *needle) {
    const char *d = clone("models/q35-rand-tiny", name);
    char p[600];
    snprintf(p, sizeof p, "%s/config.json", d);
    char *text = tl_read(p, NULL);
    char *at = strstr(text, from);
    CHECK(at != NULL, "%s: pattern '%s' not in config", name, from);
    if (!at) { free(text); return; }
    char *out = malloc(strlen(text) + strlen(to) + 1);
    sprintf(out, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
    write_file(p, out);
    free(out);
    free(text);
    expect_fail(d, want, needle, name);
}

static double max_rel(const float *a, const float *b, size_t n) {
    double mx = 0, scale = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= mx)) mx = d;
        if (fabs(b[i]) > scale) scale = fabs(b[i]);
    }
    return mx / (scale > 0 ? scale : 1);
}

/* decode-over-prompt == whole sequence, on a synthetic shape nothing else exercises */
static void check_shape(const char *preset) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", root, preset);
    CHECK(qhx_synth(preset, 7, dir, 0, NULL, NULL) == QHX_OK, "synth %s: %s", preset, qhx_last_error());
    qhx_model *m;
    qhx_session *s;
    if (qhx_model_open(NULL, dir, &m)) { CHECK(0, "open %s: %s", preset, qhx_last_error()); return; }
    qhx_session_new(m, &s);
    qhx_model_info info;
    qhx_model_get_info(m, &info);
    enum { T = 80 };
    int32_t ids[T];
    for (int i = 0; i < T; i++) ids[i] = (i * 7919 + 13) % info.vocab_size;
    float *a = malloc(sizeof(float) * T * info.vocab_size), *b = malloc(sizeof(float) * T * info.vocab_size);
    CHECK(qhx_session_eval(s, ids, T, QHX_EVAL_SEQUENCE, a, NULL) == QHX_OK, "%s", qhx_last_error());
    qhx_session_reset(s);
    CHECK(qhx_session_eval(s, ids, T, QHX_EVAL_STEPWISE, b, NULL) == QHX_OK, "%s", qhx_last_error());
    double dev = max_rel(b, a, (size_t)T * info.vocab_size);
    printf("  %s: stepwise vs sequence over %d tokens: max dev %.2e of max |logit|\n", preset, T, dev);
    CHECK(dev < 1e-4, "%s: stepwise vs sequence %.3e", preset, dev);
    /* split evaluation: 50 as a sequence then 30 more as a sequence continues the same state */
    qhx_session_reset(s);
    qhx_session_eval(s, ids, 50, QHX_EVAL_SEQUENCE, NULL, NULL);
    qhx_session_eval(s, ids + 50, 30, QHX_EVAL_SEQUENCE, b + (size_t)50 * info.vocab_size, NULL);
    dev = max_rel(b + (size_t)50 * info.vocab_size, a + (size_t)50 * info.vocab_size, (size_t)30 * info.vocab_size);
    CHECK(dev < 1e-4, "%s: split sequence %.3e", preset, dev);
    double sd = 0, mean = 0;
    for (int i = 0; i < info.vocab_size; i++) mean += a[i];
    mean /= info.vocab_size;
    for (int i = 0; i < info.vocab_size; i++) sd += (a[i] - mean) * (a[i] - mean);
    sd = sqrt(sd / info.vocab_size);
    CHECK(sd > 0.5 && isfinite(sd), "%s: logits are flat or not finite (std %g)", preset, sd);
    int32_t bad = info.vocab_size;
    CHECK(qhx_session_eval(s, &bad, 1, QHX_EVAL_SEQUENCE, NULL, NULL) == QHX_ERR_RANGE, "token id out of range accepted");
    CHECK(strstr(qhx_last_error(), "token id") != NULL, "message: %s", qhx_last_error());
    free(a);
    free(b);
    qhx_session_free(s);
    qhx_model_close(m);
}

int main(void) {
    snprintf(root, sizeof root, "/tmp/qhx-test-loader-%d", (int)getpid());
    sh("rm -rf '%s' && mkdir -p '%s'", root, root);

    check_shape("tiny");
    check_shape("tiny-odd");

    char dir[600], file[700];
    snprintf(dir, sizeof dir, "%s/tiny", root);
    CHECK(qhx_synth("tiny", 7, dir, 0, NULL, NULL) == QHX_ERR_IO, "synth over an existing dir must refuse");
    CHECK(qhx_synth("huge", 7, dir, 1, NULL, NULL) == QHX_ERR_ARG && strstr(qhx_last_error(), "huge"), "unknown preset: %s", qhx_last_error());

    expect_fail("/nonexistent/model", QHX_ERR_IO, "/nonexistent/model: no such model", "missing dir");
    config_edit("bad-json", "{", "{{", QHX_ERR_FORMAT, "config.json");
    config_edit("model-type", "\"qwen3_5_text\"", "\"llama\"", QHX_ERR_UNSUPPORTED, "llama");
    config_edit("top-type", "\"model_type\": \"qwen3_5\"", "\"model_type\": \"qwen3_next\"", QHX_ERR_UNSUPPORTED, "qwen3_next");
    config_edit("missing-field", "\"hidden_size\"", "\"hidden_sizeX\"", QHX_ERR_FORMAT, "hidden_size");
    config_edit("layer-type", "\"full_attention\"", "\"sliding_attention\"", QHX_ERR_UNSUPPORTED, "layer_types");
    config_edit("act", "\"silu\"", "\"gelu\"", QHX_ERR_UNSUPPORTED, "hidden_act");
    config_edit("heads", "\"num_key_value_heads\": 2", "\"num_key_value_heads\": 3", QHX_ERR_FORMAT, "num_key_value_heads");
    config_edit("neg", "\"intermediate_size\": 384", "\"intermediate_size\": -384", QHX_ERR_FORMAT, "intermediate_size");
    config_edit("wrong-dim", "\"intermediate_size\": 384", "\"intermediate_size\": 385", QHX_ERR_FORMAT, "mlp.gate_proj.weight");

    const char *d = clone("models/q35-rand-tiny", "no-shard");
    snprintf(file, sizeof file, "%s/model-00002-of-00002.safetensors", d);
    unlink(file);
    expect_fail(d, QHX_ERR_IO, "model-00002-of-00002.safetensors", "missing shard");

    struct { const char *name; void (*edit)(json_t *); qhx_status want; const char *needle; } edits[] = {
        {"shape", bad_shape, QHX_ERR_FORMAT, NORM},
        {"dtype", bad_dtype, QHX_ERR_FORMAT, "A_log"},
        {"missing", missing_tensor, QHX_ERR_FORMAT, NORM},
        {"offsets", bad_offsets, QHX_ERR_FORMAT, NORM},
    };
    for (size_t i = 0; i < sizeof edits / sizeof edits[0]; i++) {
        d = clone(dir, edits[i].name);
        snprintf(file, sizeof file, "%s/model.safetensors", d);
        edit_header(file, edits[i].edit);
        expect_fail(d, edits[i].want, edits[i].needle, edits[i].name);
    }
    d = clone(dir, "truncated");
    snprintf(file, sizeof file, "%s/model.safetensors", d);
    CHECK(truncate(file, 500000) == 0, "truncate");
    expect_fail(d, QHX_ERR_FORMAT, "model.safetensors", "truncated data");
    CHECK(truncate(file, 5) == 0, "truncate");
    expect_fail(d, QHX_ERR_FORMAT, "truncated", "truncated header");
    write_lit(file, "\x10\x00\x00\x00\x00\x00\x00\x00not json at all!");
    expect_fail(d, QHX_ERR_FORMAT, "not a JSON object", "header not JSON");
    write_lit(file, "\xff\xff\xff\xff\xff\xff\x00\x00{}");
    expect_fail(d, QHX_ERR_FORMAT, "header length", "huge header length");

    sh("rm -rf '%s'%s", root, "");
    return tl_finish("loader");
}
