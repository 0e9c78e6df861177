/* The MTP drafter (model/mtp.h). Positions here are the head's own, counted from `base`, the
 * session position it started at. */
#include "model/mtp.h"
#include "model/model.h"
#include "util/buf.h"
#include "util/error.h"

#include <stdlib.h>
#include <string.h>

struct qhx_mtp {
    qhx_session *s;
    const qhx_model *m;
    qhx_state st;       /* the head's one layer; st.pos positions taken in */
    int base;
    int pending;        /* 1: h is the trunk's hidden state at the head's next position */
    float *h;           /* [hidden] */
    float *in, *y;      /* [rows][hidden] */
    size_t cap;         /* rows in and y hold */
    float *logits;      /* [vocab] */
};

qhx_status qhx_mtp_new(qhx_session *s, qhx_mtp **out) {
    *out = NULL;
    const qhx_model *m = qhx_session_model(s);
    if (!m->w->mtp)
        return qhx_fail(QHX_ERR_ARG, "%s: the model has no MTP head (no mtp.* tensors, or a bundle forged without them)", m->dir);
    qhx_mtp *d = calloc(1, sizeof *d);
    if (!d) return qhx_fail(QHX_ERR_NOMEM, "MTP drafter: out of memory");
    d->s = s;
    d->m = m;
    d->base = qhx_session_pos(s);
    d->h = malloc(sizeof(float) * m->cfg.hidden);
    d->logits = malloc(sizeof(float) * m->cfg.vocab_size);
    qhx_status rc = d->h && d->logits ? qhx_state_init(&d->st, &m->w->mtp->cfg, 0, 1)
                                      : qhx_fail(QHX_ERR_NOMEM, "MTP drafter: out of memory");
    if (rc) { qhx_mtp_free(d); return rc; }
    *out = d;
    return QHX_OK;
}

void qhx_mtp_free(qhx_mtp *d) {
    if (!d) return;
    qhx_state_free(&d->st);
    free(d->h);
    free(d->in);
    free(d->y);
    free(d->logits);
    free(d);
}

static qhx_status reserve_rows(qhx_mtp *d, int rows) {
    size_t cap = d->cap;
    const size_t D = (size_t)d->m->cfg.hidden;
    if (qhx_reserve(&d->in, &cap, (size_t)rows * D, sizeof(float)) ||
        qhx_reserve(&d->y, &d->cap, (size_t)rows * D, sizeof(float)))
        return qhx_fail(QHX_ERR_NOMEM, "MTP drafter: out of memory for %d positions", rows);
    return QHX_OK;
}

/* The head over `rows` positions from its next one: hidden states d->in, next tokens `next`; the
 * normed outputs in d->y and, when logits is not NULL, the lm-head over them. */
static qhx_status head(qhx_mtp *d, const int32_t *next, int rows, float *logits) {
    qhx_exec ex = d->m->rt->ex;
    ex.per_token = 0;
    qhx_status rc = qhx_qwen35_mtp(&ex, d->m->w, &d->st, d->in, next, rows, d->y);
    if (!rc && logits) rc = qhx_qwen35_head(&ex, &d->m->cfg, d->m->w, d->y, rows, logits);
    if (rc) { /* the head is part-way: start over at the session's next evaluation */
        qhx_state_reset(&d->st);
        d->pending = 0;
        d->base = -1;
    }
    return rc;
}

qhx_status qhx_mtp_observe(qhx_mtp *d, int n, float *logits, int *rows) {
    if (rows) *rows = 0;
    const int P = qhx_session_pos(d->s), D = d->m->cfg.hidden;
    if (n <= 0 || n > P) return qhx_fail(QHX_ERR_ARG, "MTP drafter: observe %d tokens of %d", n, P);
    if (d->base + d->st.pos + d->pending != P - n) { /* evaluations went by unseen */
        qhx_state_reset(&d->st);
        d->base = P - n;
        d->pending = 0;
    }
    const int r = n - 1 + d->pending;
    const float *x = qhx_session_hidden(d->s);
    qhx_status rc = reserve_rows(d, r);
    if (rc) return rc;
    if (d->pending) memcpy(d->in, d->h, sizeof(float) * D);
    memcpy(d->in + (size_t)d->pending * D, x, sizeof(float) * D * (size_t)(n - 1));
    memcpy(d->h, x + (size_t)(n - 1) * D, sizeof(float) * D);
    const int32_t *next = qhx_session_tokens(d->s) + (P - n + 1 - d->pending);
    if (r > 0 && (rc = head(d, next, r, logits))) return rc;
    d->pending = 1;
    if (rows) *rows = r;
    return QHX_OK;
}

static int32_t argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

int qhx_mtp_draft(qhx_mtp *d, int32_t tok, int32_t *out, int max, float *first_logits) {
    const int D = d->m->cfg.hidden, V = d->m->cfg.vocab_size;
    if (max <= 0 || !d->pending || d->base + d->st.pos + 1 != qhx_session_pos(d->s)) return 0;
    if (reserve_rows(d, 1)) return -1;
    /* the first step is the head's real next position (h and tok are the sequence's own): it
     * stays; the chain after it runs on the head's guesses and is taken back */
    memcpy(d->in, d->h, sizeof(float) * D);
    if (head(d, &tok, 1, d->logits)) return -1;
    d->pending = 0;
    if (first_logits) memcpy(first_logits, d->logits, sizeof(float) * V);
    out[0] = argmax(d->logits, V);
    const int keep = d->st.pos;
    for (int i = 1; i < max; i++) {
        memcpy(d->in, d->y, sizeof(float) * D);
        if (head(d, &out[i - 1], 1, d->logits)) return -1;
        out[i] = argmax(d->logits, V);
    }
    d->st.pos = keep;
    return max;
}

/* a verify pass (the current token and its drafts) is one decode piece, whose hidden states the
 * session keeps for qhx_mtp_observe */
_Static_assert(QHX_MAX_MTP_DRAFT + 1 <= QHX_DECODE_MAX_T, "an MTP verify pass must be one decode piece");
