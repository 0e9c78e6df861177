/* GGUF in, checked against the original: models/q35-kjv-gguf holds models/q35-kjv converted by
 * llama.cpp's converter (BF16) and quantized by its llama-quantize (Q8_0, Q4_K_M).
 *  - weights: every tensor of the BF16 file, with the converter's changes undone, against the
 *    checkpoint's: bit for bit, except the norms (the converter added 1 in bf16, so a norm is the
 *    checkpoint's within half a bf16 ulp of 1 + w) and A_log (log(-(-exp(A_log))) in fp32, an
 *    ulp or two);
 *  - odd shapes (key dim != value dim, 2:1 and 3:1 value:key heads) and the MTP head as extra
 *    layers, from synthetic checkpoints converted by bench/gguf_synth --convert;
 *  - logits against the golden data of the independent fp32 reference, as test_parity measures;
 *  - Q8_0 and Q4_K_M: each matrix decoded against the BF16 file's (relative RMS), so a block
 *    layout read wrongly shows as an error of order 1;
 *  - the tokenizer rebuilt from tokenizer.ggml.* against q35-kjv's own tokenizer.json on the
 *    corpora and the texts of the tokenizer goldens, with and without special tokens;
 *  - bad files: each a clear one-line error naming the file. */
#include "qhexrt.h"
#include "qhexrt_tools.h"
#include "format/gguf.h"
#include "model/model.h"
#include "model/ops.h"
#include "testlib.h"

#include "util/json.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CK "models/q35-kjv"
#define GG "models/q35-kjv-gguf/q35-kjv-"
#define TOL 2e-4 /* test_parity's tolerance against the golden logits */

static char bin[256] = "build"; /* the build directory: where this test and gguf_synth live */

static qhx_model *open_model(const char *path) {
    qhx_model *m = NULL;
    CHECK(qhx_model_open(NULL, path, &m) == QHX_OK, "%s: %s", path, qhx_last_error());
    return m;
}

/* The specs of both models in the same order (same config). */
static qhx_tensor_spec *specs_of(qhx_model *m, int *n) {
    *n = qhx_qwen35_specs(&m->cfg, "", m->w, NULL);
    qhx_tensor_spec *s = calloc((size_t)*n, sizeof *s);
    qhx_qwen35_specs(&m->cfg, "", m->w, s);
    return s;
}

/* Every tensor of the GGUF at gg, its changes undone, against the checkpoint's at ck. */
static void weights_match(const char *ck, const char *gg) {
    qhx_model *c = open_model(ck), *g = open_model(gg);
    if (!c || !g) goto out;
    int n, n2;
    qhx_tensor_spec *sc = specs_of(c, &n), *sg = specs_of(g, &n2);
    CHECK(n == n2, "%d against %d tensors", n, n2);
    int exact = 0, norms = 0, alogs = 0;
    double worst_norm = 0, worst_alog = 0;
    for (int i = 0; i < n && i < n2; i++) {
        const qhx_tensor *a = sc[i].dst, *b = sg[i].dst;
        CHECK(a->rows == b->rows && a->cols == b->cols, "%s: shape", sc[i].name);
        const size_t N = (size_t)a->rows * a->cols;
        const int norm = strstr(sc[i].name, "norm.weight") && !strstr(sc[i].name, "linear_attn.norm");
        const int alog = strstr(sc[i].name, "A_log") != NULL;
        size_t bad = 0;
        for (size_t k = 0; k < N; k++) {
            const float x = qhx_tensor_get(a, k), y = qhx_tensor_get(b, k);
            if (norm) {
                /* stored: bf16(1 + x); half an ulp of bf16 at 1 + x */
                const double ulp = ldexp(1.0, ilogb(1.0 + x) - 7), d = fabs((double)y - x);
                if (d > worst_norm) worst_norm = d;
                bad += d > ulp / 2;
            } else if (alog) {
                /* the forward uses exp(A_log): an absolute error in A_log is a relative one in
                 * the decay; fp32 exp then log costs an ulp or two */
                const double d = fabs((double)y - x) / (fabs(x) > 1 ? fabs(x) : 1);
                if (d > worst_alog) worst_alog = d;
                bad += d > 4e-7;
            } else {
                bad += memcmp(&x, &y, 4) != 0;
            }
        }
        CHECK(bad == 0, "%s: %zu of %zu values differ beyond the bound", sc[i].name, bad, N);
        norm ? norms++ : alog ? alogs++ : exact++;
    }
    printf("  %s: %d tensors bit-identical, %d norms within half a bf16 ulp of 1 + w (worst %.2e), %d A_log (worst %.2e)\n",
           gg, exact, norms, worst_norm, alogs, worst_alog);
    free(sc);
    free(sg);
out:
    qhx_model_close(c);
    qhx_model_close(g);
}

static void logits_golden(const char *path) {
    json_t *root = tl_json(CK "/golden/golden.json");
    qhx_runtime *rt;
    qhx_model *m;
    qhx_session *s;
    if (!root || tl_open(path, "auto", &rt, &m, &s)) {
        json_decref(root);
        return;
    }
    const int V = 4160;
    double worst = 0;
    int greedy_same = 0, greedy_n = 0;
    const json_t *c;
    size_t ci;
    json_array_foreach(json_object_get(root, "cases"), ci, c) {
        const json_t *jids = json_object_get(c, "ids"), *jg = json_object_get(c, "greedy_ids");
        const int T = (int)json_array_size(jids), G = (int)json_array_size(jg);
        int32_t *ids = malloc(sizeof(int32_t) * (size_t)(T + G));
        for (int i = 0; i < T; i++) ids[i] = (int)json_integer_value(json_array_get(jids, i));
        char file[256];
        snprintf(file, sizeof file, CK "/golden/%s", json_string_value(json_object_get(c, "logits_file")));
        size_t len;
        float *gold = tl_read(file, &len), *ours = malloc(sizeof(float) * (size_t)T * V);
        CHECK(gold && len == sizeof(float) * (size_t)T * V, "%s", file);
        qhx_session_reset(s);
        CHECK(qhx_session_eval(s, ids, T, QHX_EVAL_SEQUENCE, ours, NULL) == QHX_OK, "%s", qhx_last_error());
        for (int t = 0; gold && t < T; t++) {
            const double d = tl_row_dev(ours + (size_t)t * V, gold + (size_t)t * V, V);
            if (!(d <= worst)) worst = d;
        }
        /* greedy continuation against the golden ids */
        float *last = malloc(sizeof(float) * V);
        memcpy(last, ours + (size_t)(T - 1) * V, sizeof(float) * V);
        for (int i = 0; i < G; i++) {
            int32_t best = 0;
            for (int v = 1; v < V; v++) best = last[v] > last[best] ? v : best;
            const int want = (int)json_integer_value(json_array_get(jg, i));
            greedy_n++;
            if (best != want) break;
            greedy_same++;
            if (qhx_session_eval(s, &best, 1, QHX_EVAL_STEPWISE, last, NULL)) break;
        }
        free(last);
        free(ids);
        free(gold);
        free(ours);
    }
    printf("  %s: logits within %.2e of the golden logit std; greedy %d/%d golden ids before the first difference\n", path, worst,
           greedy_same, greedy_n);
    if (strstr(path, "bf16")) {
        CHECK(worst < TOL, "%s: deviation %.3e >= %.1e", path, worst, TOL);
        CHECK(greedy_same == greedy_n, "%s: greedy %d/%d", path, greedy_same, greedy_n);
    }
    qhx_session_free(s);
    qhx_model_close(m);
    qhx_runtime_free(rt);
    json_decref(root);
}

/* Each matrix of a quantized file against the BF16 file's: relative RMS error. */
static void quantized(const char *path, double bound) {
    qhx_model *b = open_model(GG "bf16.gguf"), *q = open_model(path);
    if (!b || !q) goto out;
    int n, n2;
    qhx_tensor_spec *sb = specs_of(b, &n), *sq = specs_of(q, &n2);
    double worst = 0;
    const char *worst_name = "";
    for (int i = 0; i < n && i < n2; i++) {
        const qhx_tensor *x = sb[i].dst, *y = sq[i].dst;
        if (x->rows < 2) continue; /* vectors are stored in F32 by both */
        double num = 0, den = 0;
        for (size_t k = 0; k < (size_t)x->rows * x->cols; k++) {
            const double e = (double)qhx_tensor_get(y, k) - qhx_tensor_get(x, k);
            num += e * e, den += (double)qhx_tensor_get(x, k) * qhx_tensor_get(x, k);
        }
        const double r = sqrt(num / (den > 0 ? den : 1));
        if (r > worst) worst = r, worst_name = sb[i].name;
        CHECK(r < bound, "%s %s: relative RMS error %.3e >= %.2e", path, sb[i].name, r, bound);
    }
    printf("  %s: worst matrix relative RMS error %.2e (%s)\n", path, worst, worst_name);
    free(sb);
    free(sq);
out:
    qhx_model_close(b);
    qhx_model_close(q);
}

/* Opened to be read a row at a time (as the forge reads a GGUF, and as a model too large to decode
 * whole opens), every row of every tensor equals the whole decode's, bit for bit; sessions refuse
 * such a model by name. */
static void by_rows(const char *path) {
    qhx_model *w = open_model(path), *r = NULL;
    CHECK(qhx_model_open_rows(NULL, path, &r) == QHX_OK, "%s: %s", path, qhx_last_error());
    if (!w || !r) goto out;
    int n, n2, lazy = 0;
    qhx_tensor_spec *sw = specs_of(w, &n), *sr = specs_of(r, &n2);
    float *row = malloc(sizeof(float) * 300000);
    size_t bad = 0;
    for (int i = 0; i < n && i < n2 && row; i++) {
        const qhx_tensor *a = sw[i].dst, *b = sr[i].dst;
        lazy += !b->data;
        for (int y = 0; y < a->rows; y++) {
            r->src->row(r->src, &sr[i], y, row);
            for (int c = 0; c < a->cols; c++) {
                const float x = qhx_tensor_get(a, (size_t)y * a->cols + c);
                bad += memcmp(&x, &row[c], 4) != 0;
            }
        }
    }
    CHECK(n == n2 && bad == 0 && lazy > 0, "%s: %zu values differ read a row at a time (%d tensors of %d so read)", path, bad, lazy, n);
    printf("  %s: %d of %d tensors read a row at a time, equal to the whole decode\n", path, lazy, n);
    qhx_session *s = NULL;
    CHECK(qhx_session_new(r, &s) == QHX_ERR_UNSUPPORTED && strstr(qhx_last_error(), path) && strstr(qhx_last_error(), "qhx forge"),
          "a session of %s read a row at a time: %s", path, qhx_last_error());
    qhx_session_free(s);
    free(row), free(sw), free(sr);
out:
    qhx_model_close(w);
    qhx_model_close(r);
}

/* A random qwen35moe GGUF of quantized experts (build/gguf_synth): its expert slices read a row at a time. */
static void moe_by_rows(const char *type) {
    char gg[340], cmd[800];
    snprintf(gg, sizeof gg, "%s/test_gguf.%d.moe-%s.gguf", bin, (int)getpid(), type);
    snprintf(cmd, sizeof cmd, "%s/gguf_synth preset:tiny-moe %s %s >/dev/null", bin, gg, type);
    CHECK(system(cmd) == 0, "%s failed", cmd);
    by_rows(gg);
    unlink(gg);
}

/* Every line of a file, and every "text" of a golden jsonl, through both tokenizers. */
static void same_ids(qhx_tokenizer *a, qhx_tokenizer *b, const char *text, size_t len, int *n, int *same) {
    for (int flags = 0; flags <= QHX_ENCODE_SPECIAL; flags += QHX_ENCODE_SPECIAL) {
        int32_t *ia = NULL, *ib = NULL;
        size_t na = 0, nb = 0;
        const qhx_status ra = qhx_tokenizer_encode(a, text, len, flags, &ia, &na), rb = qhx_tokenizer_encode(b, text, len, flags, &ib, &nb);
        const int eq = ra == rb && na == nb && (!na || !memcmp(ia, ib, na * sizeof *ia));
        (*n)++, *same += eq;
        CHECK(eq, "ids differ (flags %d) for '%.60s'", flags, text);
        free(ia);
        free(ib);
    }
}

static void tokenizer(void) {
    qhx_tokenizer *ref = NULL, *tg = NULL;
    qhx_model *g = open_model(GG "bf16.gguf");
    CHECK(qhx_tokenizer_load(CK "/tokenizer.json", &ref) == QHX_OK, "%s", qhx_last_error());
    CHECK(!g || qhx_model_tokenizer(g, &tg) == QHX_OK, "%s", qhx_last_error());
    if (!ref || !tg) goto out;
    int n = 0, same = 0;
    const char *corpora[] = {"tests/data/corpora/kjv-dev.txt", "tests/data/corpora/multilingual.txt"};
    for (int f = 0; f < 2; f++) {
        size_t len;
        char *text = tl_read(corpora[f], &len);
        CHECK(text != NULL, "%s", corpora[f]);
        for (char *line = text; text && line < text + len;) {
            char *end = memchr(line, '\n', (size_t)(text + len - line));
            if (!end) end = text + len;
            same_ids(ref, tg, line, (size_t)(end - line) + (end < text + len), &n, &same); /* with its newline */
            line = end + 1;
        }
        if (text) same_ids(ref, tg, text, len, &n, &same); /* and whole */
        free(text);
    }
    const char *goldens[] = {"edge", "kjv", "multilingual"};
    for (int f = 0; f < 3; f++) {
        char path[128];
        snprintf(path, sizeof path, "tests/data/tokenizer/qwen3-qwen35regex.%s.jsonl", goldens[f]);
        size_t len;
        char *text = tl_read(path, &len);
        CHECK(text != NULL, "%s", path);
        for (char *line = text; text && line < text + len;) {
            char *end = memchr(line, '\n', (size_t)(text + len - line));
            if (!end) end = text + len;
            json_t *o = json_loadb(line, (size_t)(end - line), JSON_ALLOW_NUL, NULL);
            const json_t *t = json_object_get(o, "text");
            if (json_is_string(t)) same_ids(ref, tg, json_string_value(t), json_string_length(t), &n, &same);
            json_decref(o);
            line = end + 1;
        }
        free(text);
    }
    printf("  tokenizer from tokenizer.ggml.*: %d/%d encodings equal to tokenizer.json's\n", same, n);
    CHECK(n > 5000, "only %d texts", n);
out:
    qhx_tokenizer_free(ref);
    qhx_model_close(g);
}

/* ---- bad files ---------------------------------------------------------------------------- */

static unsigned char *orig;
static size_t orig_len;

static void expect_refused(const unsigned char *bytes, size_t len, const char *needle, const char *what) {
    char path[320];
    snprintf(path, sizeof path, "%s/test_gguf_bad.%d.gguf", bin, (int)getpid());
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(bytes, 1, len, f) != len) { CHECK(0, "cannot write %s", path); if (f) fclose(f); return; }
    fclose(f);
    qhx_model *m = NULL;
    const qhx_status rc = qhx_model_open(NULL, path, &m);
    const char *e = qhx_last_error();
    CHECK(rc != QHX_OK && !m, "%s: accepted", what);
    CHECK(strstr(e, path) && !strchr(e, '\n') && strstr(e, needle), "%s: message '%s' (wanted '%s' and the path)", what, e, needle);
    qhx_model_close(m);
    unlink(path);
}

#define NOWHERE ((size_t)1 << 40)

/* Offset of the first occurrence of a length-prefixed string s in the header. */
static size_t find_str(const char *s) {
    const size_t n = strlen(s);
    for (size_t i = 8; i + 8 + n < orig_len && i < (1u << 20); i++)
        if (!memcmp(orig + i + 8, s, n) && orig[i] == n && !orig[i + 1]) return i;
    return NOWHERE;
}

static void patched(size_t at, const void *bytes, size_t n, const char *needle, const char *what) {
    unsigned char *b = malloc(orig_len);
    memcpy(b, orig, orig_len);
    CHECK(at + n <= orig_len, "%s: nothing to patch", what);
    if (at + n <= orig_len) memcpy(b + at, bytes, n);
    expect_refused(b, orig_len, needle, what);
    free(b);
}

static void bad_files(void) {
    orig = tl_read(GG "Q4_K_M.gguf", &orig_len);
    CHECK(orig != NULL, "Q4_K_M");
    if (!orig) return;
    qhx_gguf g;
    memset(&g, 0, sizeof g);
    CHECK(qhx_gguf_parse(&g, "mem", orig, orig_len) == QHX_OK, "%s", qhx_last_error());
    const size_t data = (size_t)(g.tensors[0].data - orig); /* the data section starts at or before it */
    qhx_gguf_close(&g);
    const size_t cuts[] = {0, 3, 4, 7, 12, 23, 100, 5000, 100000, data - 1, orig_len / 2, orig_len - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof *cuts; i++) {
        char what[64];
        snprintf(what, sizeof what, "truncated to %zu bytes", cuts[i]);
        expect_refused(orig, cuts[i], cuts[i] < 4 ? "not a GGUF" : cuts[i] < data ? "truncated" : "outside the file", what);
    }
    const uint32_t v1 = 1, v9 = 9;
    patched(4, &v1, 4, "version 1", "version 1");
    patched(4, &v9, 4, "version 9", "version 9");
    patched(0, "GGML", 4, "not a GGUF", "magic");
    const uint64_t huge = 1ull << 40;
    patched(8, &huge, 8, "absurd counts", "tensor count");
    patched(16, &huge, 8, "absurd counts", "metadata count");
    size_t k = find_str("general.architecture");
    patched(k + 8 + 20 + 4 + 8, "llama1", 6, "is not qwen35", "another architecture");
    k = find_str("qwen35.block_count");
    patched(k + 8, "qwen35.block_xount", 18, "missing metadata key 'qwen35.block_count'", "missing key");
    const uint32_t bad_type = 99;
    patched(k + 8 + 18, &bad_type, 4, "unknown value type", "unknown metadata type");
    const uint32_t str_type = 8;
    patched(k + 8 + 18, &str_type, 4, "", "a count read as a string");
    k = find_str("blk.0.ssm_a");
    const uint32_t iq2 = 16;
    patched(k + 8 + 11 + 4 + 8, &iq2, 4, "IQ2_XXS", "unsupported tensor type");
    const uint32_t t200 = 200;
    patched(k + 8 + 11 + 4 + 8, &t200, 4, "unknown", "unknown tensor type");
    const uint64_t far = 1ull << 33;
    patched(k + 8 + 11 + 4 + 8 + 4, &far, 8, "outside the file", "tensor outside the file");
    const uint64_t odd = 33;
    patched(k + 8 + 11 + 4 + 8 + 4, &odd, 8, "aligned", "misaligned tensor");
    const uint64_t ne5 = 5;
    patched(k + 8 + 11 + 4, &ne5, 8, "shape", "wrong shape");
    const uint32_t dims9 = 9;
    patched(k + 8 + 11, &dims9, 4, "dimensions", "9 dimensions");
    k = find_str("tokenizer.ggml.pre");
    patched(k + 8 + 18 + 4 + 8, "qwen99", 6, "pre-tokenizer 'qwen99'", "unknown pre-tokenizer");
    free(orig);
}

/* Odd shapes: a synthetic checkpoint converted as llama.cpp converts (bench/gguf_synth --convert,
 * its MTP head as a nextn layer) reads back as the checkpoint: every weight as above (the head's
 * too), and the logits. */
static void converted(const char *preset) {
    char ck[320], gg[340], cmd[1100];
    snprintf(ck, sizeof ck, "%s/test_gguf.%d.%s", bin, (int)getpid(), preset);
    snprintf(gg, sizeof gg, "%s.gguf", ck);
    CHECK(qhx_synth(preset, 11, ck, 1, NULL, NULL) == QHX_OK, "%s", qhx_last_error());
    snprintf(cmd, sizeof cmd, "%s/gguf_synth --convert %s %s", bin, ck, gg);
    CHECK(system(cmd) == 0, "%s failed", cmd);
    weights_match(ck, gg);
    qhx_runtime *rt;
    qhx_model *mc, *mg;
    qhx_session *sc, *sg;
    qhx_runtime *rt2;
    if (tl_open(ck, "auto", &rt, &mc, &sc)) return;
    if (tl_open(gg, "auto", &rt2, &mg, &sg)) return;
    qhx_model_info ic, ig;
    qhx_model_get_info(mc, &ic);
    qhx_model_get_info(mg, &ig);
    CHECK(ic.mtp_layers == 1 && ig.mtp_layers == 1 && ic.vocab_size == ig.vocab_size, "%s: MTP %d/%d", preset, ic.mtp_layers, ig.mtp_layers);
    const int V = ic.vocab_size, T = 37;
    int32_t ids[37];
    for (int i = 0; i < T; i++) ids[i] = (i * 7919 + 13) % V;
    float *a = malloc(sizeof(float) * T * V), *b = malloc(sizeof(float) * T * V);
    double worst = 0;
    for (int mode = 0; mode < 2; mode++) {
        CHECK(qhx_session_eval(sc, ids, T, mode, a, NULL) == QHX_OK && qhx_session_eval(sg, ids, T, mode, b, NULL) == QHX_OK, "%s", qhx_last_error());
        for (int t = 0; t < T; t++) {
            const double d = tl_row_dev(b + (size_t)t * V, a + (size_t)t * V, V);
            if (!(d <= worst)) worst = d;
        }
        qhx_session_reset(sc), qhx_session_reset(sg);
    }
    printf("  %s as GGUF: logits within %.2e of the checkpoint's logit std\n", preset, worst);
    by_rows(gg); /* the changed tensors (value heads put back, norms, A_log) decoded a row at a time */
    CHECK(worst < 1e-5, "%s: deviation %.3e", preset, worst); /* only A_log's log(exp()) differs */
    free(a);
    free(b);
    qhx_session_free(sc), qhx_session_free(sg);
    qhx_model_close(mc), qhx_model_close(mg);
    qhx_runtime_free(rt), qhx_runtime_free(rt2);
    snprintf(cmd, sizeof cmd, "rm -rf %s %s", ck, gg);
    CHECK(system(cmd) == 0, "%s", cmd);
}

int main(int argc, char **argv) {
    tl_kv = QHX_KV_F32; /* the golden logits are the fp32 reference's: the exact KV cache */
    const char *slash = argc > 0 ? strrchr(argv[0], '/') : NULL;
    if (slash && slash - argv[0] < (long)sizeof bin) snprintf(bin, sizeof bin, "%.*s", (int)(slash - argv[0]), argv[0]);
    weights_match(CK, GG "bf16.gguf");
    converted("tiny-odd");
    converted("tiny-3to1");
    converted("tiny-moe"); /* qwen35moe: experts as 3-D tensors, the MTP head's too */
    logits_golden(GG "bf16.gguf");
    logits_golden(GG "Q8_0.gguf");
    logits_golden(GG "Q4_K_M.gguf");
    quantized(GG "Q8_0.gguf", 0.01);
    quantized(GG "Q4_K_M.gguf", 0.12);
    by_rows(GG "Q8_0.gguf");
    by_rows(GG "Q4_K_M.gguf");
    moe_by_rows("q8_0");
    moe_by_rows("q4_0");
    tokenizer();
    bad_files();
    return tl_finish("gguf");
}
