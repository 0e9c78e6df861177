/* The public API (include/qhexrt.h) over the checkpoint loader and the reference forward. */
#include "qhexrt.h"
#include "format/checkpoint.h"
#include "model/qwen35.h"
#include "util/error.h"

#include <stdlib.h>
#include <string.h>

struct qhx_model {
    qhx_checkpoint ck;
};

struct qhx_session {
    qhx_model *model;
    qhx_state state;
    float *logits; /* [vocab] scratch for generation */
};

qhx_status qhx_model_open(const char *path, qhx_model **out) {
    *out = NULL;
    if (!path) return qhx_fail(QHX_ERR_ARG, "model path is NULL");
    qhx_model *m = calloc(1, sizeof *m);
    if (!m) return qhx_fail(QHX_ERR_NOMEM, "out of memory");
    qhx_status rc = qhx_checkpoint_open(&m->ck, path);
    if (rc) { free(m); return rc; }
    *out = m;
    return QHX_OK;
}

void qhx_model_close(qhx_model *m) {
    if (!m) return;
    qhx_checkpoint_close(&m->ck);
    free(m);
}

void qhx_model_get_info(const qhx_model *m, qhx_model_info *info) {
    const qhx_config *c = &m->ck.cfg;
    memset(info, 0, sizeof *info);
    info->vocab_size = c->vocab_size;
    info->hidden_size = c->hidden;
    info->n_layers = c->n_layers;
    for (int i = 0; i < c->n_layers; i++) c->full_attn[i] ? info->n_full_layers++ : info->n_linear_layers++;
    info->max_context = c->max_pos;
    info->n_eos = c->n_eos;
    memcpy(info->eos, c->eos, sizeof info->eos);
}

qhx_status qhx_session_new(qhx_model *m, qhx_session **out) {
    *out = NULL;
    qhx_session *s = calloc(1, sizeof *s);
    if (!s) return qhx_fail(QHX_ERR_NOMEM, "out of memory");
    s->model = m;
    s->logits = malloc(sizeof(float) * (size_t)m->ck.cfg.vocab_size);
    qhx_status rc = s->logits ? qhx_state_init(&s->state, &m->ck.cfg) : qhx_fail(QHX_ERR_NOMEM, "out of memory");
    if (rc) { free(s->logits); free(s); return rc; }
    *out = s;
    return QHX_OK;
}

void qhx_session_free(qhx_session *s) {
    if (!s) return;
    qhx_state_free(&s->state);
    free(s->logits);
    free(s);
}

void qhx_session_reset(qhx_session *s) { qhx_state_reset(&s->state); }

int qhx_session_pos(const qhx_session *s) { return s->state.pos; }

qhx_status qhx_session_eval(qhx_session *s, const int32_t *tokens, int n, qhx_eval_mode mode, float *logits,
                            float *last_logits) {
    if (!s || !tokens || n <= 0) return qhx_fail(QHX_ERR_ARG, "session_eval: need a session and at least one token");
    const qhx_checkpoint *ck = &s->model->ck;
    if (mode == QHX_EVAL_SEQUENCE)
        return qhx_qwen35_forward(&ck->cfg, ck->w, &s->state, tokens, n, 0, logits, last_logits);
    const size_t V = (size_t)ck->cfg.vocab_size;
    for (int t = 0; t < n; t++) {
        qhx_status rc = qhx_qwen35_forward(&ck->cfg, ck->w, &s->state, tokens + t, 1, 1, logits ? logits + t * V : NULL,
                                           t == n - 1 ? last_logits : NULL);
        if (rc) return rc;
    }
    return QHX_OK;
}

static int32_t argmax(const float *x, int n) {
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i; /* first index wins ties, like torch.argmax */
    return best;
}

qhx_status qhx_generate(qhx_session *s, const int32_t *prompt, int n_prompt, const qhx_generate_opts *opts,
                        qhx_token_cb cb, void *user) {
    if (!s || !opts || opts->max_tokens < 0) return qhx_fail(QHX_ERR_ARG, "generate: bad arguments");
    const qhx_config *c = &s->model->ck.cfg;
    if (n_prompt < 1) return qhx_fail(QHX_ERR_ARG, "generate: the prompt is empty");
    if ((long long)s->state.pos + n_prompt + opts->max_tokens > c->max_pos)
        return qhx_fail(QHX_ERR_RANGE, "prompt (%d tokens) plus %d new tokens exceed the context of %d", n_prompt,
                        opts->max_tokens, c->max_pos - s->state.pos);
    qhx_status rc = qhx_session_eval(s, prompt, n_prompt, QHX_EVAL_SEQUENCE, NULL, s->logits);
    for (int i = 0; rc == QHX_OK && i < opts->max_tokens; i++) {
        int32_t tok = argmax(s->logits, c->vocab_size);
        if (opts->stop_at_eos)
            for (int e = 0; e < c->n_eos; e++)
                if (tok == c->eos[e]) return QHX_OK;
        if (cb && cb(tok, user)) return qhx_fail(QHX_ERR_CANCELLED, "generation cancelled by the callback");
        if (i + 1 < opts->max_tokens) rc = qhx_session_eval(s, &tok, 1, QHX_EVAL_STEPWISE, NULL, s->logits);
    }
    return rc;
}
