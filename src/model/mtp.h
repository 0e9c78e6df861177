/* The MTP drafter: the model's multi-token-prediction head run beside a session. The head at
 * position t reads the trunk's final-normed hidden state h[t] and the token at t+1, so it trails
 * the session by one position: it queues each evaluation's hidden states (qhx_mtp_observe) and
 * takes them in once the next token is known, in one pass when it drafts from the token just
 * sampled (qhx_mtp_draft). Its state is one
 * full-attention layer's KV cache, so rolling a draft chain back is moving its position back.
 * Drafts never change what is generated: the trunk verifies every one. */
#ifndef QHX_MTP_H
#define QHX_MTP_H
#include "qhexrt.h"

typedef struct qhx_mtp qhx_mtp;

/* A drafter for s, starting at the session's current position (the head attends to what it sees
 * from there on: RoPE scores depend on distances only, so its positions count from there).
 * QHX_ERR_ARG when the model has no MTP head. */
qhx_status qhx_mtp_new(qhx_session *s, qhx_mtp **out);
void qhx_mtp_free(qhx_mtp *d);

/* The session has just evaluated its last n tokens in one call (at most QHX_DECODE_MAX_T when
 * stepwise): their hidden states join the head's queue, taken in by the next draft in one pass
 * (or once 64 wait). A drafter that missed evaluations starts over from the call's first token. */
qhx_status qhx_mtp_observe(qhx_mtp *d, int n);

/* Takes in every queued position whose next token is known; logits, when not NULL, gets the head's
 * logits for them, [rows][vocab], rows returned in *rows. */
qhx_status qhx_mtp_flush(qhx_mtp *d, float *logits, int *rows);

/* tok was sampled after the session's last token: drafts the max tokens that follow it (each the
 * head's argmax over the draft vocabulary, the lm-head's first 65,536 rows; the next fed the
 * head's own output as vLLM does), into out; returns how many (0 when there is nothing to draft
 * from), or -1 on failure (qhx_last_error). first_logits, when not NULL, gets the head's logits
 * for the first draft over the draft vocabulary. */
int qhx_mtp_draft(qhx_mtp *d, int32_t tok, int32_t *out, int max, float *first_logits);

#endif
