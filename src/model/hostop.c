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
    return qhx_state_init(&hs->st, &m->cfg);
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
    const size_t need = (size_t)n * c->hidden;
    if (need > hs->x_floats) {
        float *x = realloc(hs->x, need * sizeof(float));
        if (!x) return qhx_fail(QHX_ERR_NOMEM, "out of memory for %d tokens", n);
        hs->x = x;
        hs->x_floats = need;
    }
    if (qhx_reserve(&hs->tokens, &hs->tokens_cap, (size_t)(hs->st.pos + n), sizeof *hs->tokens))
        return qhx_fail(QHX_ERR_NOMEM, "out of memory for %d tokens", n);
    qhx_exec step = m->rt->ex;
    step.per_token = stepwise;
    const qhx_exec *ex = &step;
    qhx_qwen35_embed(c, m->w, tokens, n, hs->x);
    qhx_status rc = qhx_state_begin(ex, &hs->st, n, stepwise);
    for (int i = 0; i < m->n_shards && !rc; i++)
        rc = qhx_qwen35_layers(ex, c, m->w, &hs->st, m->shards[i].l0, m->shards[i].l1, hs->x, n, stepwise);
    if (!rc) {
        memcpy(hs->tokens + hs->st.pos, tokens, sizeof(int32_t) * n);
        qhx_state_end(&hs->st, n);
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
