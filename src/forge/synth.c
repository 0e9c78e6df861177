/*
 * `qhx synth`: a checkpoint of a real (or small) Qwen3.5 shape with seeded random weights, written in
 * exact Hugging Face format. Benchmarks need the 4B's shapes, not its values. Scales keep activations
 * sane and logits peaked: matrices N(0, 1/fan_in), embeddings N(0, 0.35^2), zero-centred norms
 * N(0, 0.3^2), gated norm 1 + N(0, 0.3^2), conv N(0, 0.5^2), A_log U(-1.5, 1), dt_bias N(0, 0.5^2).
 */
#include "qhexrt.h"
#include "qhexrt_tools.h"
#include "util/rng.h"
#include "format/hfconfig.h"
#include "format/safetensors_write.h"
#include "model/model.h"
#include "model/qwen35.h"
#include "util/error.h"
#include "util/half.h"
#include "util/outdir.h"

#include "util/json.h"
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

typedef struct {
    const char *name, *about;
    int vocab, hidden, layers, ffn, heads, kv_heads, head_dim, lk_heads, lv_heads, lk_dim, lv_dim, conv, tied;
    double theta;
    int interval;
    int experts, top_k, expert_ffn; /* Qwen3.5-MoE: ffn is then the shared expert's width */
} preset;

static const preset presets[] = {
    {"tiny", "4 layers, hidden 128, GQA 4/2, GDN 2/4 heads (vocab 4160)", 4160, 128, 4, 320, 4, 2, 32, 2, 4, 32, 32, 4, 1, 1e7, 4, 0, 0, 0},
    {"tiny-odd", "5 layers, GDN key dim 24 != value dim 40, heads 6/3, untied", 1000, 96, 5, 200, 6, 3, 40, 3, 6, 24, 40, 4, 0, 1e6, 3, 0, 0, 0},
    {"tiny-3to1", "4 layers, GDN heads 2/6 (value:key 3:1), key dim 24 != value dim 40", 1000, 96, 4, 200, 4, 2, 32, 2, 6, 24, 40, 4, 1, 1e7, 4, 0, 0, 0},
    {"0.8b", "Qwen3.5-0.8B shape (24 layers, hidden 1024)", 248320, 1024, 24, 3584, 8, 2, 256, 16, 16, 128, 128, 4, 1, 1e7, 4, 0, 0, 0},
    {"2b", "Qwen3.5-2B shape (24 layers, hidden 2048)", 248320, 2048, 24, 6144, 8, 2, 256, 16, 16, 128, 128, 4, 1, 1e7, 4, 0, 0, 0},
    {"4b", "Qwen3.5-4B shape (32 layers, hidden 2560, ~9 GB BF16)", 248320, 2560, 32, 9216, 16, 4, 256, 16, 32, 128, 128, 4, 1, 1e7, 4, 0, 0, 0},
    {"9b", "Qwen3.5-9B shape (32 layers, hidden 4096, untied)", 248320, 4096, 32, 12288, 16, 4, 256, 16, 32, 128, 128, 4, 0, 1e7, 4, 0, 0, 0},
    {"tiny-moe", "4 layers, hidden 128, 6 experts of 96, top-3, shared 96 (as 35B-A3B: as wide as an expert)", 4160, 128, 4, 96, 4, 2, 32, 2, 4, 32, 32, 4, 1, 1e7, 4, 6, 3, 96},
    {"35b-a3b", "Qwen3.5-35B-A3B shape (40 layers, hidden 2048, 256 experts of 512, top-8; ~70 GB BF16: --bundle)", 248320, 2048,
     40, 512, 16, 2, 256, 16, 32, 128, 128, 4, 0, 1e7, 4, 256, 8, 512},
    {"122b-a10b", "Qwen3.5-122B-A10B shape (48 layers, hidden 3072, 256 experts of 1024, top-8; --bundle)", 248320, 3072, 48,
     1024, 32, 2, 256, 16, 64, 128, 128, 4, 0, 1e7, 4, 256, 8, 1024},
    {"397b-a17b", "Qwen3.5-397B-A17B shape (60 layers, hidden 4096, 512 experts of 1024, top-10; --bundle)", 248320, 4096, 60,
     1024, 32, 2, 256, 16, 64, 128, 128, 4, 0, 1e7, 4, 512, 10, 1024},
};
#define N_PRESETS (sizeof presets / sizeof presets[0])

int qhx_synth_preset_info(int i, const char **name, const char **about) {
    if (i < 0 || (size_t)i >= N_PRESETS) return 0;
    *name = presets[i].name;
    *about = presets[i].about;
    return 1;
}

#define SHARD_BYTES (4ull << 30) /* like HF's max_shard_size: 4 GiB per safetensors file */

static json_t *config_json(const preset *p) {
    json_t *types = json_array();
    for (int i = 0; i < p->layers; i++)
        json_array_append_new(types, json_string((i + 1) % p->interval ? "linear_attention" : "full_attention"));
    const int half = p->head_dim / 8; /* rotary dims / 2, split over the three M-RoPE streams */
    return json_pack("{s:[s], s:s, s:b, s:{s:s, s:s, s:b, s:b, s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, "
                     "s:i, s:i, s:o, s:b, s:i, s:o, s:{s:s, s:o, s:o, s:b, s:[i, i, i]}}, s:i}",
                     "architectures", "Qwen3_5ForConditionalGeneration", "model_type", "qwen3_5", "tie_word_embeddings", p->tied,
                     "text_config", "model_type", "qwen3_5_text", "hidden_act", "silu", "attention_bias", 0, "attn_output_gate", 1,
                     "dtype", "bfloat16", "vocab_size", p->vocab, "hidden_size", p->hidden, "num_hidden_layers", p->layers,
                     "intermediate_size", p->ffn, "num_attention_heads", p->heads, "num_key_value_heads", p->kv_heads,
                     "head_dim", p->head_dim, "linear_num_key_heads", p->lk_heads, "linear_num_value_heads", p->lv_heads,
                     "linear_key_head_dim", p->lk_dim, "linear_value_head_dim", p->lv_dim, "linear_conv_kernel_dim", p->conv,
                     "full_attention_interval", p->interval, "max_position_embeddings", 262144, "rms_norm_eps",
                     qhx_json_number(1e-6), "tie_word_embeddings", p->tied, "mtp_num_hidden_layers", 1, "layer_types", types,
                     "rope_parameters", "rope_type", "default", "rope_theta", qhx_json_number(p->theta), "partial_rotary_factor",
                     qhx_json_number(0.25), "mrope_interleaved", 1, "mrope_section", half - 2 * (half / 3), half / 3, half / 3,
                     "eos_token_id", p->vocab > 248046 ? 248046 : p->vocab - 1);
}

/* A MoE preset's config: Qwen3_5MoeForConditionalGeneration, the MLP fields of qwen3_5_moe_text. */
static json_t *preset_config(const preset *p) {
    json_t *c = config_json(p);
    if (p->experts) {
        json_object_set_new(c, "architectures", json_pack("[s]", "Qwen3_5MoeForConditionalGeneration"));
        json_object_set_new(c, "model_type", json_string("qwen3_5_moe"));
        qhx_config_json_moe(json_object_get(c, "text_config"), p->experts, p->top_k, p->expert_ffn, p->ffn);
    }
    return c;
}

/* ---- seeded values: each tensor has its own stream, so streaming order never matters ---------- */


static float uniform01(uint64_t *s) { return ((qhx_splitmix64(s) >> 40) + 0.5f) * (1.0f / 16777216.0f); }

typedef struct {
    const qhx_tensor_spec *specs;
    const size_t *index; /* shard-local entry -> spec */
    uint64_t seed;
    uint64_t rng;        /* state of the tensor being written */
    size_t total_bytes, base_bytes;
    qhx_progress_fn progress;
    void *progress_user;
} filler;

static float sample(const qhx_tensor_spec *s, uint64_t *rng) {
    float u1 = uniform01(rng), u2 = uniform01(rng);
    float n = sqrtf(-2.0f * logf(u1)) * cosf(6.2831853f * u2);
    switch (s->init) {
    case QHX_INIT_MATRIX: case QHX_INIT_ROUTER: return n / sqrtf((float)s->shape[s->ndim - 1]);
    case QHX_INIT_EMBED: return 0.35f * n;
    case QHX_INIT_NORM: return 0.3f * n;
    case QHX_INIT_GNORM: return 1.0f + 0.3f * n;
    case QHX_INIT_CONV: return 0.5f * n;
    case QHX_INIT_ALOG: return -1.5f + 2.5f * u1;
    case QHX_INIT_DTBIAS: return 0.5f * n;
    }
    return 0.0f;
}

static int fill(size_t i, void *buf, size_t count, size_t offset, void *user) {
    filler *f = user;
    const qhx_tensor_spec *s = &f->specs[f->index[i]];
    if (offset == 0) f->rng = f->seed * 0x100000001b3ull ^ (f->index[i] + 1) * 0x9e3779b97f4a7c15ull;
    for (size_t k = 0; k < count; k++) {
        float v = sample(s, &f->rng);
        if (s->dtype == QHX_F32) ((float *)buf)[k] = v;
        else ((uint16_t *)buf)[k] = qhx_f32_to_bf16(v);
    }
    return 0;
}

/* ---- a preset drawn row by row: the forge's source for a synthetic bundle ------------------- */

typedef struct {
    qhx_weight_source src;
    uint64_t seed;
} drawn;

/* The same distributions as sample(), normals approximated by the sum of four uniforms (mean 2,
 * variance 1/3): 4 bits of a 64-bit draw a value instead of two logs and a cosine, for 35 G weights. */
static void drawn_row(const qhx_weight_source *src, const qhx_tensor_spec *s, int r, float *out) {
    uint64_t st = ((const drawn *)src)->seed * 0x100000001b3ull ^ XXH3_64bits(s->name, strlen(s->name)) ^
                  (uint64_t)(r + 1) * 0x9e3779b97f4a7c15ull;
    int rows, cols;
    qhx_spec_dims(s, &rows, &cols);
    const float fan = 1.0f / sqrtf((float)s->shape[s->ndim - 1]);
    for (int c = 0; c < cols; c++) {
        const uint64_t b = qhx_splitmix64(&st);
        const float u = (float)(b & 0xffff) * (1.0f / 65536.0f);
        const float n = ((float)(b & 0xffff) + (float)(b >> 16 & 0xffff) + (float)(b >> 32 & 0xffff) + (float)(b >> 48)) *
                            (1.0f / 65536.0f) - 2.0f;
        const float z = n * 1.7320508f;
        float v;
        switch (s->init) {
        case QHX_INIT_MATRIX: case QHX_INIT_ROUTER: v = z * fan; break;
        case QHX_INIT_EMBED: v = 0.35f * z; break;
        case QHX_INIT_NORM: v = 0.3f * z; break;
        case QHX_INIT_GNORM: v = 1.0f + 0.3f * z; break;
        case QHX_INIT_CONV: v = 0.5f * z; break;
        case QHX_INIT_ALOG: v = -1.5f + 2.5f * u; break;
        default: v = 0.5f * z; break; /* QHX_INIT_DTBIAS */
        }
        out[c] = v;
    }
}

static void drawn_close(qhx_weight_source *src) { free(src); }

static const preset *find_preset(const char *name) {
    for (size_t i = 0; i < N_PRESETS; i++)
        if (!strcmp(presets[i].name, name)) return &presets[i];
    qhx_fail(QHX_ERR_ARG, "--preset: unknown preset '%s' (see qhx synth --help)", name);
    return NULL;
}

qhx_status qhx_synth_model(qhx_runtime *rt, const char *name, uint64_t seed, qhx_model **out) {
    *out = NULL;
    const preset *p = find_preset(name);
    if (!p) return QHX_ERR_ARG;
    json_t *cj = preset_config(p);
    char *text = cj ? json_dumps(cj, 0) : NULL;
    json_decref(cj);
    qhx_model *m = calloc(1, sizeof *m);
    drawn *d = calloc(1, sizeof *d);
    if (!text || !m || !d || !(m->shards = calloc(1, sizeof *m->shards))) {
        free(text), free(d);
        qhx_model_close(m);
        return qhx_fail(QHX_ERR_NOMEM, "out of memory");
    }
    d->src = (qhx_weight_source){.kind = "synth", .file = NULL, .close = drawn_close, .row = drawn_row};
    d->seed = seed;
    m->rt = rt;
    m->src = &d->src;
    qhx_status rc = qhx_config_parse(&m->cfg, "synth config", text, strlen(text));
    free(text);
    const int n = rc ? 0 : qhx_qwen35_specs(&m->cfg, "", NULL, NULL);
    qhx_tensor_spec *specs = rc ? NULL : calloc((size_t)n, sizeof *specs);
    if (!rc && (!specs || !(m->w = qhx_weights_new(&m->cfg)))) rc = qhx_fail(QHX_ERR_NOMEM, "out of memory");
    if (!rc) {
        qhx_qwen35_specs(&m->cfg, "", m->w, specs);
        for (int i = 0; i < n; i++) {
            specs[i].dst->dtype = specs[i].dtype;
            qhx_spec_dims(&specs[i], &specs[i].dst->rows, &specs[i].dst->cols);
        }
        if (m->cfg.tie_embeddings) m->w->lm_head = m->w->embed;
        m->n_shards = 1;
        m->shards[0].l1 = m->cfg.n_layers;
        m->context = m->cfg.max_pos;
    }
    free(specs);
    if (rc) qhx_model_close(m);
    else *out = m;
    return rc;
}

static void progress(size_t bytes, void *user) {
    filler *f = user;
    if (f->progress) f->progress("synth: writing", f->base_bytes + bytes, f->total_bytes, f->progress_user);
}

static size_t tensor_bytes(int ndim, const int64_t *shape, qhx_dtype dt) {
    size_t n = qhx_dtype_size(dt);
    for (int d = 0; d < ndim; d++) n *= (size_t)shape[d];
    return n;
}

/* ---- directory handling ------------------------------------------------------------------- */

static qhx_status write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) return qhx_fail(QHX_ERR_IO, "%s: %s", path, strerror(errno));
    int ok = fputs(text, f) >= 0 && fputc('\n', f) != EOF;
    ok = fclose(f) == 0 && ok;
    return ok ? QHX_OK : qhx_fail(QHX_ERR_IO, "%s: write failed", path);
}


qhx_status qhx_synth(const char *name, uint64_t seed, const char *dir, int force, qhx_progress_fn show_progress,
                     void *progress_user) {
    const preset *p = find_preset(name);
    if (!p) return QHX_ERR_ARG;
    struct stat st;
    if (stat(dir, &st) == 0 && !force) return qhx_fail(QHX_ERR_IO, "%s: already exists (use --force to replace it)", dir);

    json_t *cj = preset_config(p);
    char *text = json_dumps(cj, JSON_INDENT(2));
    json_decref(cj);
    qhx_config *cfg = calloc(1, sizeof *cfg);
    qhx_status rc = cfg && text ? qhx_config_parse(cfg, "synth config", text, strlen(text)) : qhx_fail(QHX_ERR_NOMEM, "out of memory");
    int n = rc ? 0 : qhx_qwen35_specs(cfg, "model.language_model.", NULL, NULL);
    qhx_tensor_spec *specs = calloc((size_t)n + 1, sizeof *specs);
    qhx_st_entry *entries = calloc((size_t)n + 1, sizeof *entries);
    size_t *index = calloc((size_t)n + 1, sizeof *index);
    int *shard_of = calloc((size_t)n + 1, sizeof *shard_of);
    char *tmp = NULL, *path = NULL;
    if (!rc && (!specs || !entries || !index || !shard_of)) rc = qhx_fail(QHX_ERR_NOMEM, "out of memory");
    if (!rc) rc = qhx_outdir_begin(dir, force, &tmp);
    if (rc) goto out;
    if (!(path = malloc(strlen(tmp) + 64))) { rc = qhx_fail(QHX_ERR_NOMEM, "out of memory"); goto fail; } /* tmp/ + our names */
    qhx_qwen35_specs(cfg, "model.language_model.", NULL, specs);
    sprintf(path, "%s/config.json", tmp);
    if ((rc = write_text(path, text))) goto fail;

    filler f = {specs, index, seed, 0, 0, 0, show_progress, progress_user};
    for (int i = 0; i < n; i++) f.total_bytes += tensor_bytes(specs[i].ndim, specs[i].shape, specs[i].dtype);
    /* Greedy split into shards of at most SHARD_BYTES, in table order, like HF's save_pretrained. */
    int n_shards = 0, first = 0;
    size_t bytes = 0;
    for (int i = 0; i < n; i++) {
        size_t b = tensor_bytes(specs[i].ndim, specs[i].shape, specs[i].dtype);
        if (i > first && bytes + b > SHARD_BYTES) { n_shards++; first = i; bytes = 0; }
        shard_of[i] = n_shards;
        bytes += b;
    }
    n_shards++;
    json_t *wmap = json_object();
    for (int s = 0; s < n_shards && !rc; s++) {
        size_t cnt = 0, shard_bytes = 0;
        for (int i = 0; i < n; i++)
            if (shard_of[i] == s) {
                entries[cnt] = (qhx_st_entry){specs[i].name, specs[i].dtype, specs[i].ndim, specs[i].shape};
                index[cnt++] = (size_t)i;
                shard_bytes += tensor_bytes(specs[i].ndim, specs[i].shape, specs[i].dtype);
            }
        char fname[64];
        if (n_shards == 1) snprintf(fname, sizeof fname, "model.safetensors");
        else snprintf(fname, sizeof fname, "model-%05d-of-%05d.safetensors", s + 1, n_shards);
        for (size_t k = 0; k < cnt; k++) json_object_set_new(wmap, entries[k].name, json_string(fname));
        sprintf(path, "%s/%s", tmp, fname);
        rc = qhx_st_write(path, entries, cnt, fill, &f, progress);
        f.base_bytes += shard_bytes;
    }
    if (show_progress) show_progress("synth: writing", f.total_bytes, f.total_bytes, progress_user); /* done */
    if (!rc && n_shards > 1) {
        json_t *idx = json_object();
        json_t *meta = qhx_json_add(idx, "metadata", json_object());
        json_object_set_new(meta, "total_size", qhx_json_number((double)f.total_bytes));
        json_object_set_new(idx, "weight_map", wmap);
        wmap = NULL;
        char *itext = json_dumps(idx, JSON_INDENT(2));
        json_decref(idx);
        sprintf(path, "%s/model.safetensors.index.json", tmp);
        rc = itext ? write_text(path, itext) : qhx_fail(QHX_ERR_NOMEM, "out of memory");
        free(itext);
    }
    json_decref(wmap);
    if (rc) goto fail;

    if ((rc = qhx_outdir_publish(tmp, dir))) goto fail;
    goto out;
fail:
    qhx_outdir_remove(tmp);
out:
    free(tmp);
    free(path);
    free(text);
    if (cfg) qhx_config_free(cfg);
    free(cfg);
    free(specs);
    free(entries);
    free(index);
    free(shard_of);
    return rc;
}
