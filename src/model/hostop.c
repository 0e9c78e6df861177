/* qwen3_5_generate, the host-op of the seed's runtime, over any shard plan: one state for the
 * session, each shard's layers run over it in order. */
#include "model/model.h"
#include "model/snapshot.h"
#include "util/buf.h"
#include "util/error.h"

#include <stdlib.h>
#include <string.h>

qhx_status qhx_hostop_init(qhx_hostop_state *hs, const qhx_model *m) {
    memset(hs, 0, sizeof *hs);
    const qhx_status rc = qhx_state_init(&hs->st, &m->cfg, m->rt->kv);
    hs->st.kv_limit = m->context;
    return rc;
}

void qhx_hostop_free(qhx_hostop_state *hs, const qhx_model *m) {
    (void)m;
    qhx_state_free(&hs->st);
    free(hs->x);
    free(hs->tokens);
    qhx_kv_segment_unref(hs->kv_tip);
    memset(hs, 0, sizeof *hs);
}

void qhx_hostop_reset(qhx_hostop_state *hs, const qhx_model *m) {
    (void)m;
    qhx_state_reset(&hs->st);
    qhx_kv_segment_unref(hs->kv_tip);
    hs->kv_tip = NULL;
}

/* The layers over runs of x's T rows, shard by shard, and the states advanced. */
static qhx_status forward(const qhx_model *m, const qhx_exec *ex, const qhx_run *runs, int n_runs, float *x, int T, int stepwise) {
    qhx_status rc = qhx_state_begin(ex, runs, n_runs, stepwise);
    for (int i = 0; i < m->n_shards && !rc; i++)
        rc = qhx_qwen35_layers(ex, &m->cfg, m->w, runs, n_runs, m->shards[i].l0, m->shards[i].l1, x, T);
    return rc;
}

qhx_status qhx_hostop_eval(const qhx_model *m, qhx_hostop_state *hs, const int32_t *tokens, int n, int stepwise,
                           float *logits_all, float *logits_last) {
    const qhx_config *c = &m->cfg;
    if (n <= 0) return qhx_fail(QHX_ERR_ARG, "no tokens to evaluate");
    for (int t = 0; t < n; t++)
        if (tokens[t] < 0 || tokens[t] >= c->vocab_size)
            return qhx_fail(QHX_ERR_RANGE, "token id %d at position %d is outside the vocabulary [0, %d)", tokens[t], t,
                            c->vocab_size);
    if (n > m->context - hs->st.pos)
        return qhx_fail(QHX_ERR_RANGE, "%d tokens after %d exceed the context of %d", n, hs->st.pos, m->context);
    if (qhx_reserve(&hs->x, &hs->x_floats, (size_t)n * c->hidden, sizeof(float)) ||
        qhx_reserve(&hs->tokens, &hs->tokens_cap, (size_t)(hs->st.pos + n), sizeof *hs->tokens))
        return qhx_fail(QHX_ERR_NOMEM, "out of memory for %d tokens", n);
    qhx_exec step = m->rt->ex;
    step.per_token = stepwise;
    const qhx_exec *ex = &step;
    qhx_qwen35_embed(c, m->w, tokens, n, hs->x);
    const qhx_run run = {&hs->st, 0, n};
    qhx_status rc = forward(m, ex, &run, 1, hs->x, n, stepwise);
    if (!rc) {
        memcpy(hs->tokens + hs->st.pos, tokens, sizeof(int32_t) * n);
        qhx_state_end(&run, 1);
        if (logits_all) rc = qhx_qwen35_head(ex, c, m->w, hs->x, n, logits_all);
        if (logits_last && !rc) {
            if (logits_all) memcpy(logits_last, logits_all + (size_t)(n - 1) * c->vocab_size, sizeof(float) * c->vocab_size);
            else rc = qhx_qwen35_head(ex, c, m->w, hs->x + (size_t)(n - 1) * c->hidden, 1, logits_last);
        }
    }
    /* out of memory part-way: some layers moved on, others not; an empty session is the one
     * state that is still true */
    if (rc) qhx_hostop_reset(hs, m);
    return rc;
}

qhx_status qhx_hostop_step(const qhx_model *m, qhx_hostop_state *const *hs, const int32_t *tokens, int n, float *logits) {
    const qhx_config *c = &m->cfg;
    const size_t D = (size_t)c->hidden;
    qhx_run runs[QHX_DECODE_MAX_T];
    if (n <= 0 || n > QHX_DECODE_MAX_T) return qhx_fail(QHX_ERR_ARG, "step: %d sessions (1 to %d a pass)", n, QHX_DECODE_MAX_T);
    for (int i = 0; i < n; i++) { /* ids, positions and distinctness: checked by qhx_sessions_step */
        if (qhx_reserve(&hs[i]->tokens, &hs[i]->tokens_cap, (size_t)hs[i]->st.pos + 1, sizeof *hs[i]->tokens) ||
            qhx_reserve(&hs[i]->x, &hs[i]->x_floats, (i ? 1 : (size_t)n) * D, sizeof(float)))
            return qhx_fail(QHX_ERR_NOMEM, "step: out of memory");
        runs[i] = (qhx_run){&hs[i]->st, i, 1};
    }
    qhx_exec step = m->rt->ex;
    step.per_token = 1;
    const qhx_exec *ex = &step;
    float *x = hs[0]->x; /* the batch's residual stream: row i is session i's */
    qhx_qwen35_embed(c, m->w, tokens, n, x);
    qhx_status rc = forward(m, ex, runs, n, x, n, 1);
    if (!rc) {
        for (int i = 0; i < n; i++) hs[i]->tokens[hs[i]->st.pos] = tokens[i];
        qhx_state_end(runs, n);
        if (logits) rc = qhx_qwen35_head(ex, c, m->w, x, n, logits);
        for (int i = 1; i < n; i++) memcpy(hs[i]->x, x + i * D, sizeof(float) * D); /* qhx_session_hidden: its last row */
    }
    if (rc)
        for (int i = 0; i < n; i++) qhx_hostop_reset(hs[i], m);
    return rc;
}

qhx_status qhx_hostop_mark(const qhx_model *m, qhx_hostop_state *hs) {
    (void)m;
    return qhx_state_mark(&hs->st);
}

qhx_status qhx_hostop_rewind(const qhx_model *m, qhx_hostop_state *hs, int pos) {
    if (hs->st.mark < 0 || pos < hs->st.mark || pos > hs->st.pos)
        return qhx_fail(QHX_ERR_ARG, "rewind to %d: not between the session's mark and its position %d", pos, hs->st.pos);
    qhx_status rc = qhx_state_rewind(&m->rt->ex, &hs->st, pos);
    if (rc) {
        qhx_hostop_reset(hs, m);
        return rc;
    }
    /* rows past pos will be written over: they are no longer a copy of the snapshot chain */
    if (hs->kv_tip && hs->kv_tip->row1 > pos) {
        qhx_kv_segment_unref(hs->kv_tip);
        hs->kv_tip = NULL;
    }
    return QHX_OK;
}
