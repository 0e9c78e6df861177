/* Which int8 weight-scale granularity keeps greedy decoding exact: every decoder matrix of a
 * checkpoint quantized to int8 with one scale per row (the forge's layout), per 128, 64 or 32
 * columns, dequantized in memory and run with fp32 activations; then, for each, the greedy tokens
 * of the golden prompts against Hugging Face's ids, the reference margin at a divergence, the
 * perplexity on a text file, and what the scales cost in bytes per weight (fp32 scales; fp16
 * halves that). With a PROMPTS file (a prompt a line, # comments), also the greedy tokens each keeps
 * of the unquantized checkpoint's own on those prompts. docs/bundle.md records the numbers and the
 * choice.
 *   build/w8_greedy CHECKPOINT TEXT [PROMPTS] */
#include "forge/forge.h"
#include "model/model.h"
#include "model/ops.h"
#include "util/mapfile.h"

#include "util/json.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOKENS 64
#define CTX 256

typedef struct {
    int32_t ids[TOKENS];
    int n;
} sink;

static int collect(int32_t tok, const char *text, size_t len, void *user) {
    (void)text, (void)len;
    sink *k = user;
    if (tok >= 0 && k->n < TOKENS) k->ids[k->n++] = tok;
    return 0;
}

static int ids_of(const json_t *arr, int32_t *out, int cap) {
    int n = 0;
    const json_t *v;
    size_t i;
    json_array_foreach(arr, i, v) if (n < cap) out[n++] = (int32_t)json_integer_value(v);
    return n;
}

/* the reference's margin between its token and ours after prompt + the agreed prefix */
static float ref_margin(qhx_model *ref, const int32_t *prompt, int np, const int32_t *want, int n, int32_t got, int V) {
    int32_t ctx[512];
    memcpy(ctx, prompt, sizeof(int32_t) * (size_t)np);
    memcpy(ctx + np, want, sizeof(int32_t) * (size_t)n);
    float *l = malloc(sizeof(float) * (size_t)V);
    qhx_session *s;
    float m = NAN;
    if (l && !qhx_session_new(ref, &s)) {
        if (!qhx_session_eval(s, ctx, np + n, QHX_EVAL_SEQUENCE, NULL, l)) m = l[want[n]] - l[got];
        qhx_session_free(s);
    }
    free(l);
    return m;
}

static double perplexity(qhx_model *m, const int32_t *ids, size_t n, int V) {
    float *l = malloc(sizeof(float) * CTX * (size_t)V);
    qhx_session *s;
    double nll = 0;
    size_t scored = 0;
    if (!l || qhx_session_new(m, &s)) return free(l), NAN;
    for (size_t w0 = 0; w0 + 1 < n; w0 += CTX) {
        const size_t wn = n - w0 < CTX ? n - w0 : CTX;
        qhx_session_reset(s);
        if (qhx_session_eval(s, ids + w0, (int)wn, QHX_EVAL_SEQUENCE, l, NULL)) break;
        for (size_t t = 0; t + 1 < wn; t++) {
            const float *row = l + t * (size_t)V;
            double mx = row[0], z = 0;
            for (int v = 1; v < V; v++) mx = row[v] > mx ? row[v] : mx;
            for (int v = 0; v < V; v++) z += exp(row[v] - mx);
            nll += mx + log(z) - row[ids[w0 + t + 1]];
            scored++;
        }
    }
    qhx_session_free(s);
    free(l);
    return exp(nll / (double)scored);
}

int main(int argc, char **argv) {
    if (argc != 3 && argc != 4) return fprintf(stderr, "usage: w8_greedy CHECKPOINT TEXT [PROMPTS]\n"), 2;
    qhx_runtime *rt;
    qhx_model *m, *ref;
    qhx_tokenizer *tok;
    if (qhx_runtime_new(&(qhx_runtime_opts){.kernels = "auto"}, &rt) || qhx_model_open(rt, argv[1], &m) ||
        qhx_model_open(rt, argv[1], &ref) || qhx_model_tokenizer(m, &tok))
        return fprintf(stderr, "%s\n", qhx_last_error()), 1;
    char path[2048];
    snprintf(path, sizeof path, "%s/golden/golden.json", argv[1]);
    size_t glen = 0, tlen = 0;
    char *gtext = NULL, *text = NULL;
    if (qhx_read_file(path, 64u << 20, &gtext, &glen) || qhx_read_file(argv[2], 64u << 20, &text, &tlen))
        return fprintf(stderr, "%s\n", qhx_last_error()), 1;
    json_t *golden = gtext ? json_loads(gtext, 0, NULL) : NULL;
    int32_t *text_ids;
    size_t n_text;
    if (!golden || qhx_tokenizer_encode(tok, text, tlen, 0, &text_ids, &n_text))
        return fprintf(stderr, "%s or %s: unreadable (%s)\n", path, argv[2], qhx_last_error()), 1;

    /* held-out prompts and the unquantized model's greedy tokens on them */
    enum { MAX_HELD = 64 };
    int32_t *held[MAX_HELD], held_want[MAX_HELD][TOKENS];
    size_t held_n[MAX_HELD];
    int n_held = 0;
    FILE *pf = argc == 4 ? fopen(argv[3], "r") : NULL;
    if (argc == 4 && !pf) return fprintf(stderr, "%s: cannot open\n", argv[3]), 1;
    for (char line[1024]; pf && n_held < MAX_HELD && fgets(line, sizeof line, pf);) {
        line[strcspn(line, "\n")] = 0;
        if (!line[0] || line[0] == '#') continue;
        sink k = {.n = 0};
        qhx_session *s;
        if (qhx_tokenizer_encode(tok, line, strlen(line), 0, &held[n_held], &held_n[n_held]) || qhx_session_new(ref, &s) ||
            qhx_generate(s, held[n_held], (int)held_n[n_held], &(qhx_generate_opts){.max_tokens = TOKENS, .ignore_eos = 1}, collect, &k, NULL))
            return fprintf(stderr, "%s\n", qhx_last_error()), 1;
        qhx_session_free(s);
        memcpy(held_want[n_held++], k.ids, sizeof k.ids);
    }
    if (pf) fclose(pf);

    const int n = qhx_qwen35_specs(&m->cfg, "", m->w, NULL);
    qhx_tensor_spec *specs = calloc((size_t)n, sizeof *specs);
    qhx_qwen35_specs(&m->cfg, "", m->w, specs);
    qhx_tensor *orig = calloc((size_t)n, sizeof *orig);
    float **buf = calloc((size_t)n, sizeof *buf);
    for (int i = 0; i < n; i++) orig[i] = *specs[i].dst;
    const int V = m->cfg.vocab_size;

    printf("%s: greedy %d tokens per golden prompt against Hugging Face (fp32 activations, the %s kernels);\n"
           "perplexity over %zu tokens of %s in windows of %d\n",
           argv[1], TOKENS, qhx_runtime_kernels(rt), n_text, argv[2], CTX);
    printf("  %-18s %-34s %12s %10s %14s\n", "weights", "greedy tokens before a divergence", "held-out", "perplexity", "scale bytes/wt");
    const int groups[] = {-1, 0, 128, 64, 32}; /* -1: the checkpoint's own weights; 0: one scale per row */
    for (size_t g = 0; g < sizeof groups / sizeof *groups; g++) {
        for (int i = 0; i < n && groups[g] >= 0; i++) {
            if (specs[i].init != QHX_INIT_MATRIX) continue;
            const qhx_tensor *t = &orig[i];
            if (!buf[i]) buf[i] = malloc(sizeof(float) * (size_t)t->rows * t->cols);
            float *row = malloc(sizeof(float) * (size_t)t->cols);
            int8_t *q = malloc((size_t)t->cols);
            const int gs = groups[g] ? groups[g] : t->cols;
            for (int r = 0; r < t->rows; r++) {
                for (int c = 0; c < t->cols; c++) row[c] = qhx_tensor_get(t, (size_t)r * t->cols + c);
                for (int c0 = 0; c0 < t->cols; c0 += gs) {
                    const int len = t->cols - c0 < gs ? t->cols - c0 : gs;
                    const float s = qhx_quantize_row(row + c0, len, q);
                    for (int c = 0; c < len; c++) buf[i][(size_t)r * t->cols + c0 + c] = q[c] * s;
                }
            }
            free(row), free(q);
            *specs[i].dst = (qhx_tensor){QHX_F32, t->rows, t->cols, buf[i], NULL};
        }
        char cases[256] = "";
        const json_t *c;
        size_t ci;
        json_array_foreach(json_object_get(golden, "cases"), ci, c) {
            int32_t prompt[256], want[TOKENS];
            const int np = ids_of(json_object_get(c, "ids"), prompt, 256), nw = ids_of(json_object_get(c, "greedy_ids"), want, TOKENS);
            sink k = {.n = 0};
            qhx_session *s;
            if (qhx_session_new(m, &s) ||
                qhx_generate(s, prompt, np, &(qhx_generate_opts){.max_tokens = nw, .ignore_eos = 1}, collect, &k, NULL))
                return fprintf(stderr, "%s\n", qhx_last_error()), 1;
            qhx_session_free(s);
            int same = 0;
            while (same < nw && same < k.n && k.ids[same] == want[same]) same++;
            char one[64];
            if (same < nw) snprintf(one, sizeof one, "%s%d (%.4f)", cases[0] ? ", " : "", same, ref_margin(ref, prompt, np, want, same, k.ids[same], V));
            else snprintf(one, sizeof one, "%s%d", cases[0] ? ", " : "", same);
            strncat(cases, one, sizeof cases - strlen(cases) - 1);
        }
        int held_same = 0;
        for (int h = 0; h < n_held; h++) {
            sink k = {.n = 0};
            qhx_session *s;
            if (qhx_session_new(m, &s) ||
                qhx_generate(s, held[h], (int)held_n[h], &(qhx_generate_opts){.max_tokens = TOKENS, .ignore_eos = 1}, collect, &k, NULL))
                return fprintf(stderr, "%s\n", qhx_last_error()), 1;
            qhx_session_free(s);
            for (int i = 0; i < k.n && k.ids[i] == held_want[h][i]; i++) held_same++;
        }
        char heldtxt[32];
        snprintf(heldtxt, sizeof heldtxt, "%d/%d", held_same, n_held * TOKENS);
        char name[32], bytes[16];
        snprintf(name, sizeof name, "%s", groups[g] < 0 ? "checkpoint (bf16)" : groups[g] ? "" : "per row");
        if (groups[g] > 0) snprintf(name, sizeof name, "per %d columns", groups[g]);
        snprintf(bytes, sizeof bytes, "%s", groups[g] < 0 ? "-" : "0");
        if (groups[g] > 0) snprintf(bytes, sizeof bytes, "%.2f %%", 400.0 / groups[g]);
        printf("  %-18s %-34s %12s %10.3f %14s\n", name, cases, heldtxt, perplexity(m, text_ids, n_text, V), bytes);
        fflush(stdout);
    }
    for (int i = 0; i < n; i++) free(buf[i]);
    for (int h = 0; h < n_held; h++) free(held[h]);
    free(buf), free(orig), free(specs), free(text_ids), free(text), free(gtext);
    json_decref(golden);
    qhx_model_close(ref);
    qhx_model_close(m);
    qhx_runtime_free(rt);
    return 0;
}
