/* The MTP drafter (model/mtp.h). Positions here are the head's own, counted from `base`, the
 * session position it started at. */
#include "model/mtp.h"
#include "model/model.h"
#include "qhexrt_tools.h"
#include "util/argmax.h"
#include "util/buf.h"
#include "util/error.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

struct qhx_mtp {
    qhx_session *s;
    const qhx_model *m;
    qhx_state st;       /* the head's one layer; st.pos positions taken in */
    int base;
    int queued;         /* the trunk's hidden states at the head's next positions, waiting in `in` */
    float *in, *y;      /* [rows][hidden]: the queue, and the head's outputs */
    size_t in_cap, y_cap;
    float *logits;      /* [draft vocabulary] */
    int vocab;          /* the draft vocabulary: the lm-head's first rows */
};

/* Drafts choose among the first 65,536 ids. Byte-level BPE numbers its tokens in merge order, most
 * frequent first: with Qwen3's tokenizer, 98 % of the tokens of English (kjv-dev) and 81 % of a
 * 30-language corpus lie below it, and reading that part of a 248,320-row lm-head is a quarter of
 * the head's bytes (on the 4B shape, 75 ms of a 204 ms decode step for the whole head). A draft
 * outside it is only a draft that fails; the verify pass reads every row. */
#define DRAFT_VOCAB 65536

/* Queued positions are taken in when a draft needs them (one pass over the head's weights for
 * all of them) or when this many wait. */
#define QUEUE_MAX 64

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
    d->vocab = m->cfg.vocab_size < DRAFT_VOCAB ? m->cfg.vocab_size : DRAFT_VOCAB;
    d->logits = malloc(sizeof(float) * d->vocab);
    qhx_status rc = d->logits ? qhx_state_init(&d->st, &m->w->mtp->cfg, m->rt->kv) : qhx_fail(QHX_ERR_NOMEM, "MTP drafter: out of memory");
    if (rc) { qhx_mtp_free(d); return rc; }
    d->st.kv_limit = m->context;
    *out = d;
    return QHX_OK;
}

void qhx_mtp_free(qhx_mtp *d) {
    if (!d) return;
    qhx_state_free(&d->st);
    free(d->in);
    free(d->y);
    free(d->logits);
    free(d);
}

static void start_over(qhx_mtp *d, int at) {
    qhx_state_reset(&d->st);
    d->base = at;
    d->queued = 0;
}

/* The head over the first `rows` queued positions (next tokens `next`): the normed outputs in
 * d->y; the lm-head's first `vocab` rows over the last `with_logits` of them into logits. */
static qhx_status head(qhx_mtp *d, const int32_t *next, int rows, int with_logits, int vocab, float *logits) {
    qhx_exec ex = d->m->rt->ex;
    ex.per_token = 0;
    const size_t D = (size_t)d->m->cfg.hidden;
    qhx_status rc = qhx_reserve(&d->y, &d->y_cap, rows * D, sizeof(float))
                        ? qhx_fail(QHX_ERR_NOMEM, "MTP drafter: out of memory for %d positions", rows)
                        : qhx_qwen35_mtp(&ex, d->m->w, &d->st, d->in, next, rows, d->y);
    if (!rc && with_logits) {
        qhx_tensor rows_of = d->m->w->lm_head; /* a prefix of rows is a view in every layout (format/w8.h) */
        rows_of.rows = vocab;
        const unsigned fp = qhx_fp_enter(ex.ks);
        rc = qhx_matmul(&ex, &rows_of, d->y + (rows - with_logits) * D, with_logits, logits);
        qhx_fp_leave(fp);
    }
    if (rc) start_over(d, -1); /* part-way: start over at the session's next evaluation */
    return rc;
}

qhx_status qhx_mtp_observe(qhx_mtp *d, int n) {
    const int P = qhx_session_pos(d->s);
    const size_t D = (size_t)d->m->cfg.hidden;
    if (n <= 0 || n > P) return qhx_fail(QHX_ERR_ARG, "MTP drafter: observe %d tokens of %d", n, P);
    if (d->base + d->st.pos + d->queued != P - n) start_over(d, P - n); /* evaluations went by unseen */
    if (qhx_reserve(&d->in, &d->in_cap, (d->queued + n) * D, sizeof(float)))
        return qhx_fail(QHX_ERR_NOMEM, "MTP drafter: out of memory for %d positions", d->queued + n);
    memcpy(d->in + d->queued * D, qhx_session_hidden(d->s), sizeof(float) * D * n);
    d->queued += n;
    return d->queued > QUEUE_MAX ? qhx_mtp_flush(d, NULL, NULL) : QHX_OK;
}

qhx_status qhx_mtp_flush(qhx_mtp *d, float *logits, int *rows) {
    const int r = d->queued - 1; /* the last waits for the token after it */
    const size_t D = (size_t)d->m->cfg.hidden;
    if (rows) *rows = r > 0 ? r : 0;
    if (r <= 0) return QHX_OK;
    qhx_status rc = head(d, qhx_session_tokens(d->s) + d->base + d->st.pos + 1, r, logits ? r : 0, d->m->cfg.vocab_size, logits);
    if (rc) return rc;
    memmove(d->in, d->in + r * D, sizeof(float) * D);
    d->queued = 1;
    return QHX_OK;
}

int qhx_mtp_draft(qhx_mtp *d, int32_t tok, int32_t *out, int max, float *first_logits) {
    const int V = d->vocab, P = qhx_session_pos(d->s);
    const size_t D = (size_t)d->m->cfg.hidden;
    const int q = d->queued;
    if (max <= 0 || q < 1 || d->base + d->st.pos + q != P) return 0;
    /* the queue with tok after its last position: the sequence's own, so it stays taken in; the
     * chain after it runs on the head's guesses and is taken back */
    int32_t *next = malloc(sizeof(int32_t) * q);
    if (!next) return qhx_fail(QHX_ERR_NOMEM, "MTP drafter: out of memory"), -1;
    memcpy(next, qhx_session_tokens(d->s) + P - q + 1, sizeof(int32_t) * (q - 1));
    next[q - 1] = tok;
    qhx_status rc = head(d, next, q, 1, V, d->logits);
    free(next);
    if (rc) return -1;
    d->queued = 0;
    if (first_logits) memcpy(first_logits, d->logits, sizeof(float) * V);
    out[0] = qhx_argmax(d->logits, V);
    const int keep = d->st.pos;
    for (int i = 1; i < max; i++) {
        memcpy(d->in, d->y + (size_t)(i == 1 ? q - 1 : 0) * D, sizeof(float) * D);
        if (head(d, &out[i - 1], 1, 1, V, d->logits)) return -1;
        out[i] = qhx_argmax(d->logits, V);
    }
    d->st.pos = keep;
    return max;
}

double qhx_bench_mtp_draft(qhx_session *s, int32_t tok, int n) {
    qhx_mtp *d;
    int32_t out[QHX_MAX_DRAFT];
    if (n < 1 || n > QHX_MAX_DRAFT) return qhx_fail(QHX_ERR_ARG, "bench: %d drafts is not in [1, %d]", n, QHX_MAX_DRAFT), -1;
    if (qhx_mtp_new(s, &d)) return -1;
    struct timespec t0, t1;
    int got = qhx_mtp_observe(d, 1) ? -1 : 0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (!got) got = qhx_mtp_draft(d, tok, out, n, NULL);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    qhx_mtp_free(d);
    if (got != n) return got < 0 ? -1 : (qhx_fail(QHX_ERR_ARG, "bench: the MTP head drafted %d of %d", got, n), -1);
    return (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
}

/* a verify pass (the current token and its drafts) is one decode piece, whose hidden states the
 * session keeps for qhx_mtp_observe */
_Static_assert(QHX_MAX_MTP_DRAFT + 1 <= QHX_DECODE_MAX_T, "an MTP verify pass must be one decode piece");
