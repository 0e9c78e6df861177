/* The public API (include/qhexrt.h): runtime, model, session, generation. */
#include "util/tensor.h"
#include "qhexrt.h"
#include "qhexrt_tools.h"
#include "model/model.h"
#include "model/snapshot.h"
#include "kernels/kv.h"
#include "format/gguf.h"
#include "util/error.h"
#include "util/hugemem.h"
#include "util/mapfile.h"
#include "util/readloop.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- runtime ---- */

qhx_status qhx_runtime_new_sized(const qhx_runtime_opts *given, size_t size, qhx_runtime **out) {
    *out = NULL;
    qhx_runtime_opts all = {0}, *opts = given ? &all : NULL; /* an older caller's lacks the newer fields: zero */
    if (given) memcpy(&all, given, size < sizeof all ? size : sizeof all);
    const qhx_kernel_set *ks = qhx_kernels_find(opts && opts->kernels ? opts->kernels : "auto");
    if (!ks) return QHX_ERR_ARG;
    int n = opts ? opts->n_threads : 0;
    if (n < 0 || n > 1024) return qhx_fail(QHX_ERR_ARG, "threads: %d is not in [0, 1024]", n);
    const qhx_kv_form kv = opts && opts->kv_cache ? opts->kv_cache : QHX_KV_DEFAULT_FORM;
    if (kv < QHX_KV_F32 || kv > QHX_KV_Q8) return qhx_fail(QHX_ERR_ARG, "kv_cache: %d is not a KV cache form", (int)kv);
    if (n == 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        n = cores > 0 ? (int)cores : 1;
    }
    qhx_runtime *rt = calloc(1, sizeof *rt);
    if (!rt) return qhx_fail(QHX_ERR_NOMEM, "out of memory");
    rt->ex.ks = ks;
    rt->ex.acts = &rt->acts;
    rt->n_threads = n;
    rt->progress = opts ? opts->progress : NULL;
    rt->progress_user = opts ? opts->progress_user : NULL;
    rt->map_weights = opts ? opts->map_weights : 0;
    rt->kv = kv;
    if (n > 1 && !(rt->ex.pool = qhx_pool_new(n))) {
        free(rt);
        return qhx_fail(QHX_ERR_NOMEM, "could not start %d threads", n);
    }
    *out = rt;
    return QHX_OK;
}

void qhx_runtime_free(qhx_runtime *rt) {
    if (!rt) return;
    qhx_pool_free(rt->ex.pool);
    qhx_acts_free(&rt->acts);
    free(rt);
}

const char *qhx_runtime_kernels(const qhx_runtime *rt) { return rt->ex.ks->name; }
int qhx_runtime_threads(const qhx_runtime *rt) { return qhx_pool_size(rt->ex.pool); }

typedef struct {
    const unsigned char *buf;
    size_t bytes;
    double sink[64];
} bw_job;

static void bw_part(void *arg, int i, int n) {
    bw_job *j = arg;
    const size_t blocks = j->bytes / 4096, b0 = blocks * i / n, b1 = blocks * (i + 1) / n;
    const unsigned char *p = j->buf + b0 * 4096;
    j->sink[i % 64] += (double)qhx_read_stream(p, (b1 - b0) * 4096);
}

/* seconds one pass of the read loop over buf takes on the runtime's threads */
static double read_pass(qhx_runtime *rt, const unsigned char *buf, size_t bytes) {
    bw_job j = {buf, bytes & ~(size_t)4095, {0}};
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    qhx_pool_run(rt->ex.pool, bw_part, &j);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
}

double qhx_runtime_read_bandwidth(qhx_runtime *rt, size_t bytes) {
    if (!bytes) bytes = (size_t)1 << 30;
    bytes = qhx_round_up(bytes, 4096);
    /* on transparent huge pages, as the weights and states decode reads are, so the yardstick reads
     * the same kind of memory (against 4 KiB pages on a Zen 5 VM: 0.85-1.17x, alternated 6 times) */
    unsigned char *buf = qhx_huge_calloc(bytes);
    if (!buf) return 0;
    memset(buf, 1, bytes); /* fault every page in before timing */
    double best = 0;
    for (int pass = 0; pass < 5; pass++) {
        const double s = read_pass(rt, buf, bytes);
        if (s > 0 && bytes / s / 1e9 > best) best = bytes / s / 1e9;
    }
    free(buf);
    return best;
}

/* ---- model ---- */

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int is_file(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* by its magic, or by its name when it is too short to have one (a truncated .gguf) */
static int is_gguf(const char *p) {
    const size_t n = strlen(p);
    if (n > 5 && !strcmp(p + n - 5, ".gguf")) return 1;
    char magic[4] = {0};
    FILE *f = fopen(p, "rb");
    const int yes = f && fread(magic, 1, 4, f) == 4 && !memcmp(magic, QHX_GGUF_MAGIC, 4);
    if (f) fclose(f);
    return yes;
}

static qhx_status model_open(qhx_runtime *rt, const char *path, int by_rows, qhx_model **out) {
    *out = NULL;
    if (!path) return qhx_fail(QHX_ERR_ARG, "model path is NULL");
    qhx_model *m = calloc(1, sizeof *m);
    if (!m) return qhx_fail(QHX_ERR_NOMEM, "out of memory");
    qhx_status rc = QHX_OK;
    if (!rt) {
        rc = qhx_runtime_new(NULL, &m->rt);
        m->owns_rt = 1;
    } else {
        m->rt = rt;
    }
    char *manifest = qhx_path_join(path, "manifest.json");
    if (rc) {
    } else if (!manifest) {
        rc = qhx_fail(QHX_ERR_NOMEM, "out of memory");
    } else if (is_file(path)) {
        rc = is_gguf(path) ? qhx_gguf_model_open(m, path, by_rows) : qhx_bundle_open(m, path);
    } else if (!is_dir(path)) {
        rc = qhx_fail(QHX_ERR_IO, "%s: no such model directory or manifest", path);
    } else if (is_file(manifest)) {
        rc = qhx_bundle_open(m, manifest);
    } else {
        rc = qhx_checkpoint_model_open(m, path);
    }
    free(manifest);
    if (!rc && !m->src->row && qhx_weights_conv_taps(m->w, &m->cfg)) rc = qhx_fail(QHX_ERR_NOMEM, "out of memory");
    if (rc) {
        qhx_model_close(m);
        return rc;
    }
    m->identity = qhx_model_identity(m);
    *out = m;
    return QHX_OK;
}

qhx_status qhx_model_open(qhx_runtime *rt, const char *path, qhx_model **out) { return model_open(rt, path, 0, out); }
qhx_status qhx_model_open_rows(qhx_runtime *rt, const char *path, qhx_model **out) { return model_open(rt, path, 1, out); }

void qhx_model_close(qhx_model *m) {
    if (!m) return;
    if (m->src) m->src->close(m->src);
    qhx_weights_free(m->w);
    for (int i = 0; i < m->n_shards; i++) free(m->shards[i].file);
    free(m->shards);
    free(m->manifest);
    free(m->dir);
    qhx_tokenizer_free(m->tok);
    qhx_config_free(&m->cfg);
    if (m->owns_rt) qhx_runtime_free(m->rt);
    free(m);
}

void qhx_model_get_info_sized(const qhx_model *m, qhx_model_info *out, size_t size) {
    const qhx_config *c = &m->cfg;
    qhx_model_info full, *info = &full; /* an older caller's struct gets the fields it knows */
    memset(info, 0, sizeof *info);
    info->vocab_size = c->vocab_size;
    info->hidden_size = c->hidden;
    info->n_layers = c->n_layers;
    for (int i = 0; i < c->n_layers; i++) c->full_attn[i] ? info->n_full_layers++ : info->n_linear_layers++;
    info->max_context = m->context;
    info->n_eos = c->n_eos;
    memcpy(info->eos, c->eos, sizeof info->eos);
    info->is_bundle = m->manifest != NULL;
    info->is_gguf = !strcmp(m->src->kind, "gguf");
    info->n_shards = m->n_shards;
    info->weight_bytes = m->weight_bytes;
    info->decode_bytes_per_token = qhx_weights_bytes_per_token(c, m->w);
    info->state_bytes = qhx_state_fixed_bytes(c);
    info->kv_bytes_per_token = qhx_state_kv_bytes_per_token(c, m->rt->kv);
    info->kv_cache = m->rt->kv;
    info->mtp_layers = m->w->mtp ? 1 : 0;
    info->weights_mapped = m->map;
    if (c->n_experts) {
        info->n_experts = c->n_experts;
        info->top_k = c->top_k;
        info->expert_size = c->moe_ffn;
        info->shared_expert_size = c->ffn;
    }
    memcpy(out, &full, size < sizeof full ? size : sizeof full);
}

const char *qhx_model_manifest(const qhx_model *m) { return m->manifest; }

qhx_status qhx_model_tokenizer(qhx_model *m, qhx_tokenizer **out) {
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER; /* sessions on several threads share it */
    pthread_mutex_lock(&lock);
    qhx_status rc = QHX_OK;
    if (!m->tok) { /* a bundle's compact form when there is one: it loads without parsing JSON */
        char *compact = qhx_path_join(m->dir, "tokenizer.qhxtok"), *json = qhx_path_join(m->dir, "tokenizer.json");
        if (!compact || !json) rc = qhx_fail(QHX_ERR_NOMEM, "out of memory");
        else rc = qhx_tokenizer_load(m->manifest && is_file(compact) ? compact : json, &m->tok);
        free(compact);
        free(json);
    }
    *out = m->tok;
    pthread_mutex_unlock(&lock);
    return rc;
}

/* ---- session ---- */

struct qhx_session {
    qhx_model *model;
    qhx_hostop_state hs;
};

qhx_status qhx_session_new(qhx_model *m, qhx_session **out) {
    *out = NULL;
    if (m->src && m->src->row)
        return qhx_fail(QHX_ERR_UNSUPPORTED,
                        "%s: decoded to fp32 its weights take %.1f GB, more than the %.1f GB of memory available: forge it "
                        "into a bundle, which reads them a row at a time (qhx forge %s -o DIR --weights w4 --no-gate)",
                        m->dir ? m->dir : "model", (double)m->rows_bytes / 1e9, (double)qhx_memory_available() / 1e9,
                        m->dir ? m->dir : "MODEL");
    qhx_session *s = calloc(1, sizeof *s);
    if (!s) return qhx_fail(QHX_ERR_NOMEM, "out of memory");
    s->model = m;
    qhx_status rc = qhx_hostop_init(&s->hs, m);
    if (rc) { free(s); return rc; }
    *out = s;
    return QHX_OK;
}

void qhx_session_free(qhx_session *s) {
    if (!s) return;
    qhx_hostop_free(&s->hs, s->model);
    free(s);
}

void qhx_session_reset(qhx_session *s) { qhx_hostop_reset(&s->hs, s->model); }

int qhx_session_pos(const qhx_session *s) { return s->hs.st.pos; }

qhx_status qhx_session_eval(qhx_session *s, const int32_t *tokens, int n, qhx_eval_mode mode, float *logits,
                            float *last_logits) {
    if (!s || !tokens || n <= 0) return qhx_fail(QHX_ERR_ARG, "session_eval: need a session and at least one token");
    if (mode == QHX_EVAL_SEQUENCE) return qhx_hostop_eval(s->model, &s->hs, tokens, n, 0, logits, last_logits);
    if (n > s->model->context - s->hs.st.pos) /* refuse before the first piece, not half-way */
        return qhx_fail(QHX_ERR_RANGE, "%d tokens after %d exceed the context of %d", n, s->hs.st.pos, s->model->context);
    /* pieces the decode kernels take whole, so every token gets decode's arithmetic (kernels.h) */
    const size_t V = (size_t)s->model->cfg.vocab_size;
    for (int t = 0; t < n; t += QHX_DECODE_MAX_T) {
        const int k = n - t < QHX_DECODE_MAX_T ? n - t : QHX_DECODE_MAX_T;
        qhx_status rc = qhx_hostop_eval(s->model, &s->hs, tokens + t, k, 1, logits ? logits + t * V : NULL,
                                        t + k == n ? last_logits : NULL);
        if (rc) return rc;
    }
    return QHX_OK;
}

qhx_status qhx_sessions_step(qhx_session *const *s, const int32_t *tokens, int n, float *logits) {
    if (!s || !tokens || n <= 0) return qhx_fail(QHX_ERR_ARG, "sessions_step: need sessions and a token each");
    qhx_hostop_state *hs[QHX_DECODE_MAX_T];
    for (int i = 0; i < n; i++)
        if (!s[i] || s[i]->model != s[0]->model) return qhx_fail(QHX_ERR_ARG, "sessions_step: session %d is not on the first's model", i);
    for (int i = 0; i < n; i++) /* every session can take its token, or none moves */
        for (int j = i + 1; j < n; j++)
            if (s[i] == s[j]) return qhx_fail(QHX_ERR_ARG, "sessions_step: session %d is also session %d", j, i);
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= s[0]->model->cfg.vocab_size || s[i]->hs.st.pos >= s[0]->model->context)
            return qhx_fail(QHX_ERR_RANGE, "sessions_step: session %d cannot take token %d (vocabulary %d, position %d of %d)", i,
                            tokens[i], s[0]->model->cfg.vocab_size, s[i]->hs.st.pos, s[0]->model->context);
    const size_t V = (size_t)s[0]->model->cfg.vocab_size;
    for (int i0 = 0; i0 < n; i0 += QHX_DECODE_MAX_T) {
        const int k = n - i0 < QHX_DECODE_MAX_T ? n - i0 : QHX_DECODE_MAX_T;
        for (int i = 0; i < k; i++) hs[i] = &s[i0 + i]->hs;
        qhx_status rc = qhx_hostop_step(s[0]->model, hs, tokens + i0, k, logits ? logits + (size_t)i0 * V : NULL);
        if (rc) return rc;
    }
    return QHX_OK;
}

qhx_model *qhx_session_model(const qhx_session *s) { return s->model; }

qhx_status qhx_session_mark(qhx_session *s) { return qhx_hostop_mark(s->model, &s->hs); }

qhx_status qhx_session_rewind(qhx_session *s, int pos) { return qhx_hostop_rewind(s->model, &s->hs, pos); }

const int32_t *qhx_session_tokens(const qhx_session *s) { return s->hs.tokens; }

const float *qhx_session_hidden(const qhx_session *s) { return s->hs.x; }

qhx_status qhx_session_snapshot(qhx_session *s, qhx_snapshot **out) {
    *out = NULL;
    return qhx_hostop_snapshot(s->model, &s->hs, out);
}

qhx_status qhx_session_snapshot_into(qhx_session *s, qhx_snapshot *snap) {
    if (!snap) return qhx_fail(QHX_ERR_ARG, "session_snapshot_into: no snapshot");
    return qhx_hostop_snapshot_into(s->model, &s->hs, snap);
}

qhx_status qhx_session_restore(qhx_session *s, const qhx_snapshot *snap) {
    if (!snap) return qhx_fail(QHX_ERR_ARG, "session_restore: no snapshot");
    return qhx_hostop_restore(s->model, &s->hs, snap);
}

qhx_read_probe qhx_model_read_weights(qhx_model *m) {
    qhx_read_probe r = {0, 0};
    for (int i = 0; i < m->src->n_files; i++) {
        const qhx_mapfile *f = m->src->file(m->src, i);
        r.seconds += read_pass(m->rt, f->data, f->size);
        r.bytes += f->size & ~(uint64_t)4095;
    }
    return r;
}
