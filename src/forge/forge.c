/*
 * The forge: checkpoint -> bundle.
 *
 *   1. plan     decode shards by contiguous layer range, as few as fit the per-shard byte ceiling,
 *               then balanced (the largest shard as small as that count allows)
 *   2. export   each shard's matrices as int8 with one fp32 scale per output row (W8 weight-only),
 *               small tensors fp32; the embedding fp16; the lm-head fp16 (or W8), stored once when
 *               tied; the tokenizer; every file hashed as it is written
 *   3. gate     oracle-gated export (each shard vs the fp32 reference on random hidden states) and
 *               the greedy gate (the bundle end to end vs the reference on a prompt suite)
 *   4. publish  manifest.json last, then the directory renamed into place
 *
 * Why per-row scales: measured on the bundled trained model (docs/bundle.md), per-row int8 gives
 * a relative weight RMS error of ~0.5 % and greedy parity; finer groups (32/128 columns) cut the
 * error further but cost a scale load per group in the kernels and 3-12 % more bytes per token.
 */
#include "forge/forge.h"
#include "model/model.h"
#include "model/ops.h"
#include "util/error.h"
#include "util/half.h"
#include "util/outdir.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#define EXPORT_TOL 0.05    /* export gate: relative error of a shard's contribution */
#define TIE_FRAC 0.02      /* greedy gate: a divergence is a near-tie if the reference margin is
                              below this fraction of the logit range of that step */

float qhx_quantize_row(const float *w, int n, int8_t *q) {
    float mx = 0.0f;
    for (int i = 0; i < n; i++) mx = fmaxf(mx, fabsf(w[i]));
    const float scale = mx / 127.0f, inv = mx > 0 ? 127.0f / mx : 0.0f;
    for (int i = 0; i < n; i++) {
        long v = lrintf(w[i] * inv);
        q[i] = (int8_t)(v > 127 ? 127 : v < -127 ? -127 : v);
    }
    return scale;
}

/* ---- what goes where ------------------------------------------------------------------------ */

typedef struct {
    const qhx_forge_opts *o;
    FILE *log;
    qhx_model *src;            /* the checkpoint, on the reference runtime */
    qhx_tensor_spec *specs;
    int n_specs;
    char tmp[4096];
    uint64_t bundle_id, model_hash;
    char *model_json;
    cJSON *files;              /* name -> {bytes, xxh3} */
    double qerr_num, qerr_den; /* weight quantization error, summed over matrices */
    uint64_t done_bytes, total_bytes;
} forge;

/* Where the rows of each entry come from, and the dtype they go out in. */
typedef struct {
    forge *f;
    const qhxf_entry *entries;
    const qhx_tensor *const *src;
    float *row;
    int8_t *qrow;      /* a quantized row before it is packed */
} write_ctx;

static int fill_entry(int i, int r0, int r1, void *data, float *scale, void *user) {
    write_ctx *w = user;
    const qhx_tensor *t = w->src[i];
    const int cols = t->cols;
    for (int r = r0; r < r1; r++) {
        for (int c = 0; c < cols; c++) w->row[c] = qhx_tensor_get(t, (size_t)r * cols + c);
        const size_t at = (size_t)(r - r0) * cols;
        switch (w->entries[i].dtype) {
        case QHX_I8: {
            int8_t *q = w->qrow;
            const float sc = scale[r - r0] = qhx_quantize_row(w->row, cols, q);
            qhx_w8_put_row(data, (size_t)cols, (size_t)(r - r0), q);
            for (int c = 0; c < cols; c++) {
                const double d = w->row[c] - q[c] * (double)sc;
                w->f->qerr_num += d * d;
                w->f->qerr_den += (double)w->row[c] * w->row[c];
            }
            break;
        }
        case QHX_F16:
            for (int c = 0; c < cols; c++) ((uint16_t *)data)[at + c] = qhx_f32_to_f16(w->row[c]);
            break;
        default: memcpy((float *)data + at, w->row, sizeof(float) * cols);
        }
    }
    return 0;
}

static void progress(uint64_t bytes, void *user) {
    write_ctx *w = user;
    forge *f = w->f;
    if (f->o->progress)
        fprintf(stderr, "\rforge: writing %5.1f%% of %.2f GB", 100.0 * (f->done_bytes + bytes) / (double)f->total_bytes,
                f->total_bytes / 1e9);
}

/* Adds a written file's size and XXH3 to the manifest's "files"; returns the size. */
static uint64_t record_file(forge *f, const char *name, uint64_t hash) {
    char path[4400], hex[17];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", f->tmp, name);
    const uint64_t size = stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)hash);
    cJSON *fe = cJSON_AddObjectToObject(f->files, name);
    cJSON_AddNumberToObject(fe, "bytes", (double)size);
    cJSON_AddStringToObject(fe, "xxh3", hex);
    return size;
}

static qhx_status write_file(forge *f, const char *name, qhxf_kind kind, int l0, int l1, const qhxf_entry *e,
                             const qhx_tensor *const *src, int n, uint64_t *bytes) {
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", f->tmp, name);
    qhxf_header h;
    memset(&h, 0, sizeof h);
    h.kind = kind;
    snprintf(h.target, sizeof h.target, "%s", QHX_TARGET);
    snprintf(h.layout, sizeof h.layout, "%s", QHX_LAYOUT_W8);
    h.bundle_id = f->bundle_id;
    h.model_hash = f->model_hash;
    h.l0 = l0;
    h.l1 = l1;
    int maxcols = 1;
    for (int i = 0; i < n; i++) maxcols = e[i].cols > maxcols ? e[i].cols : maxcols;
    write_ctx w = {f, e, src, malloc(sizeof(float) * (size_t)maxcols), malloc((size_t)maxcols)};
    if (!w.row || !w.qrow) {
        free(w.row);
        free(w.qrow);
        return qhx_fail(QHX_ERR_NOMEM, "out of memory");
    }
    uint64_t hash;
    qhx_status rc = qhxf_write(path, &h, e, n, fill_entry, &w, &hash, progress);
    free(w.row);
    free(w.qrow);
    if (rc) return rc;
    *bytes = record_file(f, name, hash);
    f->done_bytes += *bytes;
    return QHX_OK;
}

/* ---- 1. plan ------------------------------------------------------------------------------- */

static uint64_t align64(uint64_t x) { return (x + 63) & ~(uint64_t)63; }

static uint64_t spec_bytes(const qhx_tensor_spec *s) {
    const qhx_dtype dt = qhx_bundle_dtype(s);
    int rows, cols;
    qhx_spec_dims(s, &rows, &cols);
    return align64(qhxf_data_bytes(dt, (uint64_t)rows, (uint64_t)cols)) + (dt == QHX_I8 ? align64(4 * (uint64_t)rows) : 0);
}

/* Fewest shards under `cap` by greedy packing; 0 when some layer alone exceeds it. */
static int pack(const uint64_t *bytes, int L, uint64_t cap, int *first) {
    int n = 0;
    uint64_t cur = 0;
    for (int l = 0; l < L; l++) {
        if (bytes[l] > cap) return 0;
        if (n == 0 || cur + bytes[l] > cap) {
            if (first) first[n] = l;
            n++;
            cur = 0;
        }
        cur += bytes[l];
    }
    return n;
}

/* Splits layers into as few contiguous shards as fit the ceiling, then lowers the cap as far as
 * that count allows, so the shards come out balanced (16/16 for the 4B shape). */
static qhx_status plan(forge *f, int *n_shards, int *first, uint64_t ceiling) {
    const qhx_config *c = &f->src->cfg;
    uint64_t *bytes = calloc((size_t)c->n_layers, sizeof *bytes);
    if (!bytes) return qhx_fail(QHX_ERR_NOMEM, "out of memory");
    const uint64_t overhead = 64 << 10; /* header and directory, generously */
    for (int i = 0; i < f->n_specs; i++) {
        const qhx_tensor_spec *s = &f->specs[i];
        if (s->layer >= 0) bytes[s->layer] += spec_bytes(s);
        else if (s->dst == &f->src->w->final_norm) bytes[c->n_layers - 1] += spec_bytes(s);
    }
    bytes[0] += overhead;
    int n = pack(bytes, c->n_layers, ceiling, NULL);
    if (!n) {
        int worst = 0;
        for (int l = 1; l < c->n_layers; l++) worst = bytes[l] > bytes[worst] ? l : worst;
        const unsigned long long need = bytes[worst];
        free(bytes);
        return qhx_fail(QHX_ERR_RANGE, "--max-context-bytes %llu: layer %d alone needs %llu bytes", (unsigned long long)ceiling,
                        worst, need);
    }
    uint64_t lo = 1, hi = ceiling; /* smallest cap that still packs into n shards */
    while (lo < hi) {
        const uint64_t mid = lo + (hi - lo) / 2;
        const int k = pack(bytes, c->n_layers, mid, NULL);
        if (k && k <= n) hi = mid;
        else lo = mid + 1;
    }
    *n_shards = pack(bytes, c->n_layers, hi, first);
    first[*n_shards] = c->n_layers;
    free(bytes);
    if (*n_shards > QHX_MAX_SHARDS)
        return qhx_fail(QHX_ERR_RANGE, "--max-context-bytes %llu: would need %d shards (at most %d)",
                        (unsigned long long)ceiling, *n_shards, QHX_MAX_SHARDS);
    return QHX_OK;
}

/* ---- 3. gates ------------------------------------------------------------------------------ */

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static float gauss(uint64_t *s) {
    const double u1 = ((splitmix(s) >> 11) + 1.0) / 9007199254740993.0, u2 = (splitmix(s) >> 11) / 9007199254740992.0;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

/* Oracle-gated export: each shard, on the kernels the bundle runs with, against the same layers in
 * fp32 from the checkpoint, on random hidden states (8 tokens, N(0, 1)). The error is measured on
 * what the shard adds to the residual stream (on the normed output for the last shard), so a
 * broken shard cannot hide behind the residual. */
static qhx_status gate_export(forge *f, qhx_model *b, cJSON *gates, int *passed, int *total) {
    const qhx_config *c = &b->cfg;
    enum { T = 8 };
    const size_t n = (size_t)T * c->hidden;
    float *x0 = malloc(n * sizeof(float)), *xr = malloc(n * sizeof(float)), *xb = malloc(n * sizeof(float));
    if (!x0 || !xr || !xb) { free(x0), free(xr), free(xb); return qhx_fail(QHX_ERR_NOMEM, "out of memory"); }
    cJSON *g = cJSON_AddObjectToObject(gates, "export"), *list = cJSON_AddArrayToObject(g, "shards");
    const int trials = f->o->gate_trials > 0 ? f->o->gate_trials : 5;
    qhx_status rc = QHX_OK;
    double worst_all = 0;
    *passed = *total = 0;
    for (int i = 0; i < b->n_shards && !rc; i++) {
        const qhx_shard_desc *d = &b->shards[i];
        const int last = d->l1 == c->n_layers;
        int ok = 0;
        double worst = 0;
        for (int k = 0; k < trials && !rc; k++) {
            uint64_t seed = 1000003ull * (uint64_t)(i + 1) + (uint64_t)k;
            for (size_t j = 0; j < n; j++) x0[j] = gauss(&seed);
            memcpy(xr, x0, n * sizeof(float));
            memcpy(xb, x0, n * sizeof(float));
            qhx_state sr, sb;
            if ((rc = qhx_state_init(&sr, c, d->l0, d->l1))) break;
            if ((rc = qhx_state_init(&sb, c, d->l0, d->l1))) { qhx_state_free(&sr); break; }
            rc = qhx_qwen35_layers(&f->src->rt->ex, c, f->src->w, &sr, xr, T, 0);
            if (!rc) rc = qhx_qwen35_layers(&b->rt->ex, c, b->w, &sb, xb, T, 0);
            qhx_state_free(&sr);
            qhx_state_free(&sb);
            double num = 0, den = 0;
            for (size_t j = 0; j < n; j++) {
                num += ((double)xb[j] - xr[j]) * ((double)xb[j] - xr[j]);
                const double ref = last ? xr[j] : (double)xr[j] - x0[j];
                den += ref * ref;
            }
            const double err = sqrt(num / (den > 0 ? den : 1));
            if (!(err <= worst)) worst = err;
            ok += err <= EXPORT_TOL;
        }
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "passed", ok);
        cJSON_AddNumberToObject(e, "trials", trials);
        cJSON_AddNumberToObject(e, "worst_rel_error", worst);
        cJSON_AddItemToArray(list, e);
        fprintf(f->log, "export gate: shard %d (layers %d-%d) %d/%d within %.2g (worst relative error %.2e)\n", i, d->l0,
                d->l1 - 1, ok, trials, EXPORT_TOL, worst);
        *passed += ok;
        *total += trials;
        if (!(worst <= worst_all)) worst_all = worst;
    }
    cJSON_AddNumberToObject(g, "passed", *passed);
    cJSON_AddNumberToObject(g, "total", *total);
    cJSON_AddNumberToObject(g, "tolerance", EXPORT_TOL);
    cJSON_AddNumberToObject(g, "worst_rel_error", worst_all);
    free(x0), free(xr), free(xb);
    return rc;
}

typedef struct {
    int32_t *ids;
    int n;
} collected;

static int collect(int32_t tok, const char *text, size_t len, void *user) {
    collected *c = user;
    if (tok >= 0) c->ids[c->n++] = tok;
    return 0;
}

static qhx_status greedy(qhx_model *m, const int32_t *prompt, int n, int gen, collected *out) {
    qhx_session *s;
    qhx_status rc = qhx_session_new(m, &s);
    if (rc) return rc;
    out->n = 0;
    qhx_generate_opts go = {.max_tokens = gen, .ignore_eos = 1};
    rc = qhx_generate(s, prompt, n, &go, collect, out, NULL);
    qhx_session_free(s);
    return rc;
}

static const char *const gate_prompts[] = {
    "In the beginning God created", "The capital of France is", "And it came to pass, when", "Blessed are the",
};
#define N_GATE_PROMPTS 4

/* The greedy gate: the bundle end to end against the fp32 reference. A prompt passes when every
 * token matches, or when the first divergence is a near-tie of the reference (its margin between
 * the two tokens is under TIE_FRAC of that step's logit range): W8 may flip a coin the reference
 * itself barely decided. */
static qhx_status gate_greedy(forge *f, qhx_model *b, cJSON *gates, int *matched, int *total, int *ok) {
    const int gen = f->o->gate_tokens > 0 ? f->o->gate_tokens : 64;
    qhx_tokenizer *tok = NULL;
    const int have_tok = qhx_model_tokenizer(f->src, &tok) == QHX_OK;
    const int V = b->cfg.vocab_size;
    cJSON *g = cJSON_AddObjectToObject(gates, "greedy"), *list = cJSON_AddArrayToObject(g, "prompts");
    collected r = {malloc(sizeof(int32_t) * (size_t)gen), 0}, q = {malloc(sizeof(int32_t) * (size_t)gen), 0};
    int32_t *ctx = malloc(sizeof(int32_t) * (size_t)(gen + 64));
    float *logits = malloc(sizeof(float) * (size_t)V);
    qhx_status rc = r.ids && q.ids && ctx && logits ? QHX_OK : qhx_fail(QHX_ERR_NOMEM, "out of memory");
    *matched = *total = 0;
    *ok = 1;
    for (int p = 0; p < N_GATE_PROMPTS && !rc; p++) {
        int32_t *ids = NULL;
        size_t n = 0;
        if (have_tok) {
            rc = qhx_tokenizer_encode(tok, gate_prompts[p], strlen(gate_prompts[p]), 0, &ids, &n);
            if (rc) break;
            if (n > 64) n = 64;
        } else { /* no tokenizer: seeded random ids */
            uint64_t seed = 77 + (uint64_t)p;
            n = 8;
            ids = malloc(sizeof(int32_t) * n);
            if (!ids) { rc = qhx_fail(QHX_ERR_NOMEM, "out of memory"); break; }
            for (size_t i = 0; i < n; i++) ids[i] = (int32_t)(splitmix(&seed) % (uint64_t)V);
        }
        const int g_n = (int)n + gen <= b->context ? gen : b->context - (int)n;
        if (g_n < 1 || (rc = greedy(f->src, ids, (int)n, g_n, &r)) || (rc = greedy(b, ids, (int)n, g_n, &q))) {
            if (!rc) rc = qhx_fail(QHX_ERR_RANGE, "greedy gate: context too short");
            free(ids);
            break;
        }
        int same = 0;
        while (same < g_n && r.ids[same] == q.ids[same]) same++;
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "prompt", have_tok ? gate_prompts[p] : "(random ids)");
        cJSON_AddNumberToObject(e, "matched", same);
        cJSON_AddNumberToObject(e, "tokens", g_n);
        fprintf(f->log, "greedy gate: prompt %d %s%s%s: %d/%d tokens match", p, have_tok ? "\"" : "",
                have_tok ? gate_prompts[p] : "(random ids)", have_tok ? "\"" : "", same, g_n);
        if (same < g_n) { /* the reference's margin at the divergence */
            memcpy(ctx, ids, n * sizeof(int32_t));
            memcpy(ctx + n, r.ids, (size_t)same * sizeof(int32_t));
            qhx_session *s;
            if ((rc = qhx_session_new(f->src, &s))) { free(ids); cJSON_Delete(e); break; }
            rc = qhx_session_eval(s, ctx, (int)n + same, QHX_EVAL_SEQUENCE, NULL, logits);
            qhx_session_free(s);
            if (rc) { free(ids); cJSON_Delete(e); break; }
            float lo = logits[0], hi = logits[0];
            for (int v = 1; v < V; v++) lo = fminf(lo, logits[v]), hi = fmaxf(hi, logits[v]);
            const double margin = (double)logits[r.ids[same]] - logits[q.ids[same]];
            const int tie = margin < TIE_FRAC * (hi - lo);
            cJSON_AddNumberToObject(e, "divergence_at", same);
            cJSON_AddNumberToObject(e, "reference_margin", margin);
            cJSON_AddNumberToObject(e, "logit_range", hi - lo);
            cJSON_AddBoolToObject(e, "near_tie", tie);
            fprintf(f->log, "; diverges at %d: reference margin %.4f of logit range %.2f (%s)", same, margin, hi - lo,
                    tie ? "near-tie" : "FAIL");
            *ok &= tie;
        }
        fputc('\n', f->log);
        cJSON_AddItemToArray(list, e);
        *matched += same;
        *total += g_n;
        free(ids);
    }
    cJSON_AddNumberToObject(g, "matched", *matched);
    cJSON_AddNumberToObject(g, "total", *total);
    cJSON_AddNumberToObject(g, "tie_fraction", TIE_FRAC);
    cJSON_AddBoolToObject(g, "passed", *ok);
    free(r.ids), free(q.ids), free(ctx), free(logits);
    return rc;
}

/* ---- 2. export and 4. publish -------------------------------------------------------------- */

static qhx_status write_text(const char *path, const char *text) {
    FILE *fp = fopen(path, "wb");
    if (!fp) return qhx_fail(QHX_ERR_IO, "%s: cannot create", path);
    const size_t n = strlen(text);
    int ok = fwrite(text, 1, n, fp) == n && fflush(fp) == 0 && fsync(fileno(fp)) == 0;
    ok &= fclose(fp) == 0;
    return ok ? QHX_OK : qhx_fail(QHX_ERR_IO, "%s: write failed", path);
}

static qhx_status copy_tokenizer(forge *f) {
    char src[1200], dst[4400];
    snprintf(src, sizeof src, "%s/tokenizer.json", f->src->dir);
    if (access(src, R_OK) != 0) return QHX_OK; /* a checkpoint without one gives a bundle without one */
    char *text;
    size_t len;
    qhx_status rc = qhx_read_file(src, 1u << 30, &text, &len);
    if (rc) return rc;
    snprintf(dst, sizeof dst, "%s/tokenizer.json", f->tmp);
    rc = write_text(dst, text);
    free(text);
    qhx_tokenizer *tok;
    if (!rc) rc = qhx_model_tokenizer(f->src, &tok);
    if (rc) return rc;
    snprintf(dst, sizeof dst, "%s/tokenizer.qhxtok", f->tmp);
    if ((rc = qhx_tokenizer_save_compact(tok, dst))) return rc;
    const char *names[] = {"tokenizer.json", "tokenizer.qhxtok"};
    for (int i = 0; i < 2; i++) {
        snprintf(dst, sizeof dst, "%s/%s", f->tmp, names[i]);
        uint64_t hash;
        if ((rc = qhxf_hash_file(dst, &hash))) return rc;
        record_file(f, names[i], hash);
    }
    return QHX_OK;
}

static qhx_status write_manifest(forge *f, cJSON *root) {
    char path[4400];
    snprintf(path, sizeof path, "%s/manifest.json", f->tmp);
    char *text = cJSON_Print(root);
    if (!text) return qhx_fail(QHX_ERR_NOMEM, "out of memory");
    qhx_status rc = write_text(path, text);
    free(text);
    return rc;
}

static uint64_t random_id(void) {
    uint64_t seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    FILE *fp = fopen("/dev/urandom", "rb");
    if (fp) {
        if (fread(&seed, sizeof seed, 1, fp) != 1) seed ^= (uint64_t)clock();
        fclose(fp);
    }
    return splitmix(&seed);
}

static void hex64(char out[17], uint64_t v) { snprintf(out, 17, "%016llx", (unsigned long long)v); }

static qhx_status export_all(forge *f, cJSON *plan_json, const int *first, int n_shards, int w8_head) {
    const qhx_config *c = &f->src->cfg;
    qhx_weights *w = f->src->w;
    qhxf_entry *e = calloc((size_t)f->n_specs + 1, sizeof *e);
    const qhx_tensor **src = calloc((size_t)f->n_specs + 1, sizeof *src);
    if (!e || !src) { free(e), free(src); return qhx_fail(QHX_ERR_NOMEM, "out of memory"); }
    qhx_status rc = QHX_OK;
    cJSON *shards = cJSON_AddArrayToObject(plan_json, "decode_shards");
    for (int i = 0; i < n_shards && !rc; i++) {
        const int l0 = first[i], l1 = first[i + 1], last = l1 == c->n_layers;
        int n = 0;
        for (int k = 0; k < f->n_specs; k++) {
            const qhx_tensor_spec *s = &f->specs[k];
            if (!((s->layer >= l0 && s->layer < l1) || (last && s->dst == &w->final_norm))) continue;
            e[n] = (qhxf_entry){s->name, qhx_bundle_dtype(s), s->dst->rows, s->dst->cols};
            src[n++] = s->dst;
        }
        char name[64];
        snprintf(name, sizeof name, "decode_s%d_w8.qhx", i);
        uint64_t bytes;
        rc = write_file(f, name, QHXF_SHARD, l0, l1, e, src, n, &bytes);
        cJSON *sh = cJSON_CreateObject();
        cJSON_AddStringToObject(sh, "file", name);
        cJSON *layers = cJSON_AddArrayToObject(sh, "layers");
        cJSON_AddItemToArray(layers, cJSON_CreateNumber(l0));
        cJSON_AddItemToArray(layers, cJSON_CreateNumber(l1));
        cJSON_AddNumberToObject(sh, "bytes", (double)bytes);
        cJSON_AddItemToArray(shards, sh);
        if (!rc) fprintf(f->log, "%sshard %d: layers %d-%d, %.1f MB\n", f->o->progress ? "\n" : "", i, l0, l1 - 1, bytes / 1e6);
    }
    uint64_t bytes;
    const int V = c->vocab_size, D = c->hidden;
    e[0] = (qhxf_entry){"embed_tokens.weight", QHX_F16, V, D};
    src[0] = &w->embed;
    if (!rc) rc = write_file(f, "embed_f16.qhx", QHXF_EMBED, 0, 0, e, src, 1, &bytes);
    cJSON *emb = cJSON_AddObjectToObject(plan_json, "embedding");
    cJSON_AddStringToObject(emb, "file", "embed_f16.qhx");
    cJSON_AddStringToObject(emb, "dtype", "f16");
    cJSON_AddStringToObject(emb, "lookup", "host");
    const char *head_file = "embed_f16.qhx";
    if (!rc && (w8_head || !c->tie_embeddings)) {
        head_file = w8_head ? "lm_head_w8.qhx" : "lm_head_f16.qhx";
        e[0] = (qhxf_entry){"lm_head.weight", w8_head ? QHX_I8 : QHX_F16, V, D};
        src[0] = &w->lm_head;
        rc = write_file(f, head_file, QHXF_HEAD, 0, 0, e, src, 1, &bytes);
    }
    cJSON *head = cJSON_AddObjectToObject(plan_json, "lm_head");
    cJSON_AddStringToObject(head, "file", head_file);
    cJSON_AddStringToObject(head, "dtype", w8_head ? "i8" : "f16");
    cJSON_AddBoolToObject(head, "tied_to_embedding", !strcmp(head_file, "embed_f16.qhx"));
    if (f->o->progress) fputc('\n', stderr);
    free(e);
    free(src);
    return rc;
}

qhx_status qhx_forge(const qhx_forge_opts *o, FILE *log) {
    if (!o->checkpoint || !o->out) return qhx_fail(QHX_ERR_ARG, "forge: needs a checkpoint and an output directory");
    const int w8_head = o->lmhead && !strcmp(o->lmhead, "w8");
    if (o->lmhead && !w8_head && strcmp(o->lmhead, "f16"))
        return qhx_fail(QHX_ERR_ARG, "--lmhead: '%s' is not f16 or w8", o->lmhead);
    forge f = {.o = o, .log = log};
    qhx_runtime *ref_rt = NULL;
    qhx_model *b = NULL;
    cJSON *root = NULL;
    int first[QHX_MAX_LAYERS + 1], n_shards = 0;
    /* The reference: the checkpoint's own weights in fp32 arithmetic, on the same kernel set (its
     * bf16/f32 kernels are tested against the double-accumulating "ref" set to ~1e-7). */
    qhx_status rc = QHX_OK;
    if (!o->rt) rc = qhx_runtime_new(NULL, &ref_rt);
    if (!rc) rc = qhx_model_open(o->rt ? o->rt : ref_rt, o->checkpoint, &f.src);
    if (!rc && f.src->manifest) rc = qhx_fail(QHX_ERR_ARG, "%s: is a bundle already; forge needs a checkpoint", o->checkpoint);
    if (rc) goto out;
    const qhx_config *c = &f.src->cfg;
    int ctx = o->context_len ? o->context_len : (c->max_pos < 4096 ? c->max_pos : 4096);
    if (ctx < 1 || ctx > c->max_pos) {
        rc = qhx_fail(QHX_ERR_ARG, "--context-len %d: must be in [1, %d] (max_position_embeddings)", ctx, c->max_pos);
        goto out;
    }
    f.n_specs = qhx_qwen35_specs(c, "", f.src->w, NULL);
    f.specs = calloc((size_t)f.n_specs, sizeof *f.specs);
    f.model_json = qhx_config_to_json(c);
    f.files = cJSON_CreateObject();
    root = cJSON_CreateObject();
    if (!f.specs || !f.model_json || !f.files || !root) { rc = qhx_fail(QHX_ERR_NOMEM, "out of memory"); goto out; }
    qhx_qwen35_specs(c, "", f.src->w, f.specs); /* dst: the checkpoint's own tensors, the sources */
    f.model_hash = XXH3_64bits(f.model_json, strlen(f.model_json));
    f.bundle_id = random_id();
    const uint64_t ceiling = o->max_context_bytes ? o->max_context_bytes : QHX_FORGE_DEFAULT_CEILING;
    if ((rc = plan(&f, &n_shards, first, ceiling))) goto out;
    if ((rc = qhx_outdir_begin(o->out, o->force, f.tmp, sizeof f.tmp))) { f.tmp[0] = 0; goto out; }
    for (int i = 0; i < f.n_specs; i++) f.total_bytes += spec_bytes(&f.specs[i]);
    f.total_bytes += (uint64_t)c->vocab_size * c->hidden * (w8_head ? 3 : 2);

    char hex[17];
    cJSON_AddStringToObject(root, "format", "qhexrt-bundle");
    cJSON_AddNumberToObject(root, "schema_version", QHX_BUNDLE_SCHEMA);
    hex64(hex, f.bundle_id);
    cJSON_AddStringToObject(root, "bundle_id", hex);
    hex64(hex, f.model_hash);
    cJSON_AddStringToObject(root, "model_hash", hex);
    cJSON_AddItemToObject(root, "model", cJSON_Parse(f.model_json));
    cJSON_AddNumberToObject(root, "context_length", ctx);
    cJSON *target = cJSON_AddObjectToObject(root, "target");
    cJSON_AddStringToObject(target, "backend", "cpu");
    cJSON_AddStringToObject(target, "target", QHX_TARGET);
    cJSON_AddStringToObject(target, "weight_layout", QHX_LAYOUT_W8);
    cJSON *plan_json = cJSON_AddObjectToObject(root, "plan");
    cJSON_AddStringToObject(plan_json, "host_op", "qwen3_5_generate");
    cJSON_AddNumberToObject(plan_json, "max_context_bytes", (double)ceiling);
    if ((rc = export_all(&f, plan_json, first, n_shards, w8_head)) || (rc = copy_tokenizer(&f))) goto out;
    if (cJSON_GetObjectItem(f.files, "tokenizer.json")) {
        cJSON *tk = cJSON_AddObjectToObject(plan_json, "tokenizer");
        cJSON_AddStringToObject(tk, "json", "tokenizer.json");
        cJSON_AddStringToObject(tk, "compact", "tokenizer.qhxtok");
    }
    cJSON *q = cJSON_AddObjectToObject(root, "quantization");
    cJSON_AddStringToObject(q, "matrices", "int8, symmetric, one fp32 scale per output row (max|w|/127)");
    cJSON_AddStringToObject(q, "other", "norms, conv, A_log, dt_bias in fp32; embedding fp16");
    cJSON_AddNumberToObject(q, "weight_rel_rms_error", sqrt(f.qerr_num / (f.qerr_den > 0 ? f.qerr_den : 1)));
    cJSON_AddItemToObject(root, "files", f.files);
    f.files = NULL;
    cJSON_AddStringToObject(root, "source", o->checkpoint);
    cJSON_AddStringToObject(root, "created_by", "qhexrt " QHX_VERSION);
    cJSON *gates = cJSON_AddObjectToObject(root, "gates");
    cJSON_AddBoolToObject(gates, "run", o->gate);
    if ((rc = write_manifest(&f, root))) goto out;
    fprintf(log, "forge: %d decode shard%s under %llu bytes each; weight quantization error %.3f %% (relative RMS)\n",
            n_shards, n_shards > 1 ? "s" : "", (unsigned long long)ceiling, 100 * sqrt(f.qerr_num / (f.qerr_den > 0 ? f.qerr_den : 1)));

    if (o->gate) {
        if ((rc = qhx_model_open(f.src->rt, f.tmp, &b))) goto out;
        int ep = 0, et = 0, gm = 0, gt = 0, gok = 1;
        if ((rc = gate_export(&f, b, gates, &ep, &et)) || (rc = gate_greedy(&f, b, gates, &gm, &gt, &gok))) goto out;
        fprintf(log, "gates: oracle-gated export %d/%d, greedy %d/%d tokens%s\n", ep, et, gm, gt, gok ? "" : " (a divergence is not a near-tie)");
        if ((rc = write_manifest(&f, root))) goto out;
        if (ep != et || !gok) {
            rc = qhx_fail(QHX_ERR_FORMAT, "forge: the %s gate failed (see above); nothing was written (--no-gate skips the gates)",
                          ep != et ? "export" : "greedy");
            goto out;
        }
    }
    qhx_model_close(b);
    b = NULL;
    rc = qhx_outdir_publish(f.tmp, o->out);
    if (!rc) f.tmp[0] = 0;
out:
    qhx_model_close(b);
    if (f.tmp[0]) qhx_outdir_remove(f.tmp);
    qhx_model_close(f.src);
    qhx_runtime_free(ref_rt);
    free(f.specs);
    free(f.model_json);
    cJSON_Delete(f.files);
    cJSON_Delete(root);
    return rc;
}
