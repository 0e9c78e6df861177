/* Taking stepwise tokens back without a snapshot (qhexrt.h: qhx_session_mark, qhx_session_rewind).
 * Attention layers need nothing: their KV rows past the position are simply written over. A
 * Gated DeltaNet layer's state cannot be cut back, so the mark keeps it as it was (conv FIFO and
 * delta-rule state, one copy), and every stepwise token after the mark leaves what the recurrence
 * read: the conv's input row and the delta rule's inputs (q, k, v after the conv, l2-norm and
 * scale; beta; the log-decay g). Rewinding to the mark plus k tokens puts the copy back and runs
 * the same delta rule over the first k of them, so the state is bit for bit the one those k tokens
 * left, for the cost of the recurrence alone (no projection is read again). */
#include "kernels/kernels.h"
#include "model/qwen35.h"
#include "util/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* the floats of one token's record: the conv input row, the post-conv row (q | k | v), beta, g */
static size_t token_floats(const qhx_config *c) { return 2 * (size_t)qhx_config_conv_dim(c) + 2 * (size_t)c->lin_v_heads; }

static size_t undo_floats(const qhx_config *c) {
    return qhx_state_conv_floats(c) + qhx_state_ssm_floats(c) + QHX_MAX_REWIND * token_floats(c);
}

qhx_status qhx_state_mark(qhx_state *s) {
    const qhx_config *c = s->cfg;
    const size_t conv = qhx_state_conv_floats(c), ssm = qhx_state_ssm_floats(c);
    s->mark = -1;
    for (int l = 0; l < c->n_layers; l++) {
        if (c->full_attn[l]) continue;
        qhx_layer_state *ls = qhx_state_layer(s, l);
        if (!ls->undo && !(ls->undo = malloc(sizeof(float) * undo_floats(c))))
            return qhx_fail(QHX_ERR_NOMEM, "mark: out of memory for the undo record");
        memcpy(ls->undo, ls->conv, sizeof(float) * conv);
        memcpy(ls->undo + conv, ls->ssm, sizeof(float) * ssm);
    }
    s->mark = s->pos;
    return QHX_OK;
}

void qhx_state_record(const qhx_config *c, qhx_layer_state *ls, int at, const float *mixed, const float *xc,
                      const float *beta, const float *g, int T) {
    const size_t C = qhx_config_conv_dim(c), hv = c->lin_v_heads;
    float *r = ls->undo + qhx_state_conv_floats(c) + qhx_state_ssm_floats(c) + (size_t)at * token_floats(c);
    for (int t = 0; t < T; t++, r += token_floats(c)) {
        memcpy(r, mixed + t * C, sizeof(float) * C);
        memcpy(r + C, xc + t * C, sizeof(float) * C);
        memcpy(r + 2 * C, beta + t * hv, sizeof(float) * hv);
        memcpy(r + 2 * C + hv, g + t * hv, sizeof(float) * hv);
    }
}

typedef struct {
    const qhx_kernel_set *ks;
    const qhx_state *s;
    int k;            /* tokens kept after the mark */
    int n_linear;
    int *linear;      /* the linear layers' numbers */
    float *scratch;   /* delta_step's o and work: 2 dv floats a thread */
} replay_job;

/* one (layer, value head) after another: the delta-rule state from the mark, then k steps */
static void replay_part(void *arg, int th, int nth) {
    const replay_job *J = arg;
    const qhx_config *c = J->s->cfg;
    const int hv = c->lin_v_heads, hk = c->lin_k_heads, dk = c->lin_k_dim, dv = c->lin_v_dim, group = hv / hk;
    const size_t C = qhx_config_conv_dim(c), conv = qhx_state_conv_floats(c), tf = token_floats(c);
    float *o = J->scratch + (size_t)th * 2 * dv, *work = o + dv; /* o: each token's overwrites the last's */
    for (int item = th; item < J->n_linear * hv; item += nth) {
        const qhx_layer_state *ls = qhx_state_layer(J->s, J->linear[item / hv]);
        const int j = item % hv, kh = j / group;
        float *S = ls->ssm + (size_t)j * dk * dv;
        memcpy(S, ls->undo + conv + (size_t)j * dk * dv, sizeof(float) * dk * dv);
        const float *xc = ls->undo + conv + qhx_state_ssm_floats(c) + C, *beta = xc + C, *g = beta + hv;
        const qhx_delta_args da = {xc + (size_t)kh * dk, xc + (size_t)(hk + kh) * dk, xc + (size_t)2 * hk * dk + (size_t)j * dv, tf,
                                   beta + j, g + j, tf, o, 0, J->k, dk, dv, work, NULL};
        J->ks->delta_rule(S, &da);
    }
}

qhx_status qhx_state_rewind(const qhx_exec *ex, qhx_state *s, int pos) {
    const qhx_config *c = s->cfg;
    if (s->mark < 0 || pos < s->mark || pos > s->pos)
        return qhx_fail(QHX_ERR_ARG, "rewind to %d: not between the mark (%d) and the position (%d)", pos, s->mark, s->pos);
    const int k = pos - s->mark, K = c->conv_kernel;
    const size_t C = qhx_config_conv_dim(c), conv = qhx_state_conv_floats(c), tf = token_floats(c);
    int *linear = malloc(sizeof(int) * (size_t)(c->n_layers + 1)), n_linear = 0;
    float *scratch = malloc(sizeof(float) * 2 * (size_t)c->lin_v_dim * qhx_pool_size(ex->pool));
    if (!linear || !scratch) {
        free(linear), free(scratch);
        return qhx_fail(QHX_ERR_NOMEM, "rewind: out of memory");
    }
    for (int l = 0; l < c->n_layers; l++) {
        if (c->full_attn[l]) continue;
        linear[n_linear++] = l;
        /* the FIFO after k more inputs: the last K-1 rows of (FIFO at the mark, then their rows) */
        qhx_layer_state *ls = qhx_state_layer(s, l);
        const float *rows = ls->undo + conv + qhx_state_ssm_floats(c);
        for (int i = 0; i < K - 1; i++) {
            const int src = k + i;
            memcpy(ls->conv + i * C, src < K - 1 ? ls->undo + src * C : rows + (size_t)(src - (K - 1)) * tf, sizeof(float) * C);
        }
    }
    replay_job job = {ex->ks, s, k, n_linear, linear, scratch};
    const unsigned fp = qhx_fp_enter(ex->ks);
    qhx_pool_run(ex->pool, replay_part, &job);
    qhx_fp_leave(fp);
    free(linear);
    free(scratch);
    s->pos = pos;
    return QHX_OK;
}
