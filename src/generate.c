/* Generation: the prompt, then one sampled token at a time, with the text each token releases.
 * Text that might be the start of a stop string is held back until it is either a stop (dropped,
 * generation ends) or cannot become one (released), so a stop string split across tokens never
 * leaks out. Built on the public session API. */
#include "qhexrt.h"
#include "grammar/grammar.h"
#include "model/mtp.h"
#include "sample/sampler.h"
#include "util/argmax.h"
#include "util/buf.h"
#include "util/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    const qhx_generate_opts *o;
    qhx_tokenizer *tok;
    qhx_detok_stream ds;
    char *piece;        /* one token's text */
    size_t piece_cap;
    char held[4 * QHX_MAX_STOP_BYTES];  /* text that may start a stop string: < QHX_MAX_STOP_BYTES between calls */
    size_t n_held;
    int hit;            /* the stop string found last */
    qhx_buf out;        /* what the current token releases */
} text_state;

static int release(text_state *ts, const char *p, size_t n) { return qhx_buf_append(&ts->out, p, n); }

/* Where the first stop string starts in held, or -1; which it is in ts->hit. */
static long find_stop(text_state *ts) {
    long best = -1;
    for (int i = 0; i < ts->o->n_stop; i++) {
        const char *hit = memmem(ts->held, ts->n_held, ts->o->stop[i], strlen(ts->o->stop[i]));
        if (hit && (best < 0 || hit - ts->held < best)) best = hit - ts->held, ts->hit = i;
    }
    return best;
}

/* How many trailing bytes of held could still grow into a stop string. */
static size_t could_stop(const text_state *ts) {
    size_t keep = 0;
    for (int i = 0; i < ts->o->n_stop; i++) {
        size_t L = strlen(ts->o->stop[i]);
        for (size_t k = L - 1 < ts->n_held ? L - 1 : ts->n_held; k > keep; k--)
            if (!memcmp(ts->held + ts->n_held - k, ts->o->stop[i], k)) { keep = k; break; }
    }
    return keep;
}

/* Adds a token's text to held and moves what can no longer become a stop string to out (reset
 * first). Returns 1 when a stop string appeared (out then ends just before it), -1 out of memory.
 * The text goes through in slices so held never overflows. */
static int push_text(text_state *ts, const char *text, size_t n) {
    ts->out.len = 0;
    while (n) {
        size_t take = sizeof ts->held - ts->n_held;
        if (take > n) take = n;
        memcpy(ts->held + ts->n_held, text, take);
        ts->n_held += take;
        text += take;
        n -= take;
        long at = find_stop(ts);
        size_t k = at >= 0 ? (size_t)at : ts->n_held - could_stop(ts);
        if (release(ts, ts->held, k)) return -1;
        if (at >= 0) { ts->n_held = 0; return 1; }
        memmove(ts->held, ts->held + k, ts->n_held - k);
        ts->n_held -= k;
    }
    return 0;
}

/* ---- speculative decoding (qhexrt.h: qhx_generate_opts.draft) ----------------------------------
 * A window is one verify pass: v[0] the token just sampled, v[1..] its drafts, evaluated stepwise
 * in one call (bit for bit what one-token calls give), rows[i] the logits after v[0..i]. Sampling
 * walks the window while its tokens match the drafts; where one does not, or at the end, the
 * session is rewound to just after the kept prefix (qhx_session_mark before the pass: the
 * recurrence is replayed, nothing is evaluated again). */
typedef struct {
    int on, max, len;          /* len: the draft length now */
    int cooldown, backoff;     /* after a window whose first draft failed, or while windows cost more
                                  time a token than plain steps: decode plainly a while */
    double t_window;           /* seconds the open window has cost so far */
    double spec_tpt, plain_tpt;/* seconds a token, a running average: in windows, in plain steps (0: none yet) */
    qhx_session *s;
    const qhx_generate_opts *o;
    int at;                    /* the session's position before the open window */
    int32_t v[QHX_MAX_DRAFT + 1];
    int n_v, j;                /* tokens in the open window (0: none); v[0..j] are kept */
    float *rows;               /* [QHX_MAX_DRAFT + 1][vocab] */
    size_t vocab;
    int context;               /* the model's positions: no window reaches past them */
    qhx_mtp *mtp;              /* the MTP drafter (QHX_DRAFT_MTP), fed every evaluation's hidden states */
    qhx_generate_result *res;
} spec_state;

/* One plain decode step, through the caller's step function when it has one. */
static qhx_status decode_step(qhx_session *s, const qhx_generate_opts *o, int32_t tok, float *logits) {
    return o->step ? o->step(s, tok, logits, o->step_user) : qhx_session_eval(s, &tok, 1, QHX_EVAL_STEPWISE, NULL, logits);
}

/* The tokens after the latest earlier occurrence of the context's last 4 or 3 tokens (2-token
 * matches are mostly chance on text that does not repeat, and a failed window costs a pass). The
 * context is what the session holds, h[0..n), then `last`, the token about to be evaluated. */
static int ngram_draft(const int32_t *h, int n, int32_t last, int32_t *out, int max) {
    for (int g = 4; g >= 3; g--) {
        if (n < g) continue;
        for (int i = n - g; i >= 0; i--) { /* an occurrence ending before `last`: it lies in h */
            if (h[i + g - 1] != last || memcmp(h + i, h + n - g + 1, sizeof(int32_t) * (g - 1))) continue;
            int k = 0;
            while (k < max && i + g + k <= n) out[k] = i + g + k < n ? h[i + g + k] : last, k++;
            if (k) return k;
        }
    }
    return 0;
}

/* Up to max drafts after tok into sp->v + 1; -1 on failure. */
static int draft(spec_state *sp, int32_t tok, int max) {
    if (sp->mtp) return qhx_mtp_draft(sp->mtp, tok, sp->v + 1, max, NULL);
    return ngram_draft(qhx_session_tokens(sp->s), qhx_session_pos(sp->s), tok, sp->v + 1, max);
}

/* The session has just evaluated its last n tokens: the MTP head takes in their hidden states. */
static qhx_status observe(spec_state *sp, int n) { return sp->mtp ? qhx_mtp_observe(sp->mtp, n) : QHX_OK; }

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static void average(double *avg, double x) { *avg = *avg > 0 ? *avg + 0.3 * (x - *avg) : x; }

/* The draft for the position being sampled, or -1. */
static int32_t spec_draft(const spec_state *sp) { return sp->n_v && sp->j + 1 < sp->n_v ? sp->v[sp->j + 1] : -1; }

/* Closes the open window: the session back to just after its kept tokens. The draft length
 * follows the acceptance; drafting pauses (for twice as long each time in a row) after a window
 * that kept nothing, or while windows have cost more time a token than plain steps (a drafter
 * whose acceptance does not pay for its passes: the MTP head on a model whose verify pass is not
 * much cheaper than its steps), and drafts again after it to see whether that still holds. */
static qhx_status spec_settle(spec_state *sp) {
    if (!sp->n_v) return QHX_OK;
    const int kept = sp->j, drafted = sp->n_v - 1;
    const double t0 = now_s();
    qhx_status rc = QHX_OK;
    if (kept < drafted) rc = qhx_session_rewind(sp->s, sp->at + kept + 1);
    if (!rc) rc = observe(sp, kept + 1);
    sp->n_v = 0;
    average(&sp->spec_tpt, (sp->t_window + now_s() - t0) / (kept + 1));
    if (kept == drafted) sp->len = 2 * sp->len < sp->max ? 2 * sp->len : sp->max;
    else sp->len = kept + 1;
    if (kept == 0 || (sp->plain_tpt > 0 && sp->spec_tpt > sp->plain_tpt)) {
        sp->cooldown = sp->backoff;
        sp->backoff = sp->backoff < 64 ? 2 * sp->backoff : 64;
    } else {
        sp->backoff = 1;
    }
    return rc;
}

/* tok has been sampled and reported: logits after it, from the open window or a new pass. */
static qhx_status spec_advance(spec_state *sp, int32_t tok, float *logits) {
    qhx_status rc;
    if (sp->n_v) {
        if (tok == spec_draft(sp)) {
            sp->j++;
            sp->res->n_accepted++;
            memcpy(logits, sp->rows + (size_t)sp->j * sp->vocab, sizeof(float) * sp->vocab);
            return QHX_OK;
        }
        if ((rc = spec_settle(sp))) return rc;
    }
    int n = 0; /* the session now holds exactly the tokens before tok */
    const int room = sp->context - qhx_session_pos(sp->s) - 1;
    const double t0 = now_s();
    if (sp->cooldown > 0) sp->cooldown--;
    else if ((n = draft(sp, tok, sp->len < room ? sp->len : room)) < 0) return QHX_ERR_NOMEM;
    if (n <= 0) {
        rc = decode_step(sp->s, sp->o, tok, logits);
        /* a long pause leaves the MTP head out (a position costs it a tenth of a step on small
         * models): it takes in the last 4 positions before drafting resumes, and its attention
         * restarts there (the trunk's hidden state it reads carries the whole context) */
        if (!rc && sp->cooldown < 4) rc = observe(sp, 1);
        average(&sp->plain_tpt, now_s() - t0);
        return rc;
    }
    sp->v[0] = tok;
    sp->n_v = n + 1;
    sp->j = 0;
    sp->at = qhx_session_pos(sp->s);
    if ((rc = qhx_session_mark(sp->s)) || (rc = qhx_session_eval(sp->s, sp->v, sp->n_v, QHX_EVAL_STEPWISE, sp->rows, NULL))) {
        sp->n_v = 0;
        return rc;
    }
    sp->res->n_verify++;
    sp->res->n_drafted += n;
    memcpy(logits, sp->rows, sizeof(float) * sp->vocab);
    sp->t_window = now_s() - t0;
    return QHX_OK;
}

/* ---- constrained decoding (qhexrt.h: qhx_generate_opts.grammar) --------------------------------
 * Greedy takes the best token when the grammar takes it, and masks only when it does not (the
 * result is the best allowed token either way). Sampling draws from the masked distribution: first
 * a plain draw kept when allowed (exact when nothing truncates the distribution), else the mask.
 * End-of-turn ids are allowed once the text is whole. */
typedef struct {
    qhx_gmatch *m;
    int active;              /* grammar_after seen (or none asked for) */
    qhx_buf tail;            /* the last bytes generated, to find grammar_after in */
    float *adjusted, *saved; /* before grammar_after: the logits before the draw, and a scratch copy */
    float *scratch;          /* a draw's copy of the logits */
} gram_state;

static int is_stop_id(const qhx_generate_opts *o, const qhx_model_info *mi, int32_t tok);

static int allowed(gram_state *g, const qhx_generate_opts *o, const qhx_model_info *mi, int32_t tok) {
    if (is_stop_id(o, mi, tok)) return qhx_gmatch_can_end(g->m);
    size_t len;
    const char *p = qhx_gmatch_piece(g->m, tok, &len);
    return p && len && qhx_gmatch_check(g->m, p, len);
}

/* The token to take, the grammar allowing it; -1 when it allows none (the grammar has no way on
 * in this vocabulary), -2 out of memory. logits: adjusted, as the sampler takes them; masked
 * when the best one is refused or when sampling. */
static int32_t constrained_pick(gram_state *g, qhx_sampler *sp, const qhx_generate_opts *o, const qhx_model_info *mi,
                                int n_ids, float *logits) {
    if (o->temperature <= 0 || o->top_k == 1) {
        const int32_t best = qhx_argmax(logits, mi->vocab_size);
        if (allowed(g, o, mi, best)) return best;
    } else if (o->top_k == 0 && (o->top_p <= 0 || o->top_p >= 1) && o->min_p <= 0) {
        /* Without truncation a draw the grammar allows is a draw from the masked distribution:
         * p(t) + (1 - A) p(t) / A = p(t) / A with the masked draw below as the fallback. */
        if (!g->scratch && !(g->scratch = malloc(sizeof(float) * (size_t)mi->vocab_size))) return -2;
        memcpy(g->scratch, logits, sizeof(float) * (size_t)mi->vocab_size);
        int32_t t = qhx_sampler_pick(sp, g->scratch);
        if (allowed(g, o, mi, t)) return t;
    }
    const uint64_t *mask = qhx_gmatch_mask(g->m);
    if (!mask) return -2;
    /* the end-of-turn ids are special tokens, outside the mask: allowed once the text is whole */
    const int can_end = qhx_gmatch_can_end(g->m);
    const int n_end = o->n_stop_ids + (o->ignore_eos ? 0 : mi->n_eos);
    float end_logit[1024 + 16];
    for (int i = 0; i < n_end; i++) {
        int32_t id = i < o->n_stop_ids ? o->stop_ids[i] : mi->eos[i - o->n_stop_ids];
        end_logit[i] = id >= 0 && id < mi->vocab_size ? logits[id] : -INFINITY;
    }
    int any = 0;
    for (int i = 0; i < mi->vocab_size; i++) {
        if (i < n_ids && (mask[i >> 6] >> (i & 63) & 1)) any = 1;
        else logits[i] = -INFINITY;
    }
    for (int i = 0; i < n_end && can_end; i++) {
        int32_t id = i < o->n_stop_ids ? o->stop_ids[i] : mi->eos[i - o->n_stop_ids];
        if (id >= 0 && id < mi->vocab_size) logits[id] = end_logit[i], any = 1;
    }
    return any ? qhx_sampler_pick(sp, logits) : -1;
}

/* Whether tok would complete grammar_after with a rest the grammar refuses (then it is not
 * taken: the next best is, as if the grammar's first byte were part of the trigger). */
static int trigger_refused(gram_state *g, const qhx_generate_opts *o, int32_t tok) {
    size_t len, L = strlen(o->grammar_after);
    const char *p = qhx_gmatch_piece(g->m, tok, &len);
    if (!p || !len) return 0;
    qhx_buf b = {0};
    qhx_buf_append(&b, g->tail.s ? g->tail.s : "", g->tail.len);
    qhx_buf_append(&b, p, len);
    const char *hit = b.s ? memmem(b.s, b.len, o->grammar_after, L) : NULL;
    int refused = hit && hit + L < b.s + b.len && !qhx_gmatch_check(g->m, hit + L, (size_t)(b.s + b.len - hit - L));
    qhx_buf_free(&b);
    return refused;
}

/* A token taken (sampled or forced): the grammar moves on, or starts once grammar_after has
 * been generated (with whatever of the token follows it). */
static qhx_status gram_take(gram_state *g, const qhx_generate_opts *o, int32_t tok) {
    size_t len;
    const char *p = qhx_gmatch_piece(g->m, tok, &len);
    if (g->active) {
        if (!p || qhx_gmatch_accept(g->m, p, len))
            return qhx_fail(QHX_ERR_ARG, "generate: the grammar refuses forced token %d", tok);
        return QHX_OK;
    }
    const size_t L = strlen(o->grammar_after);
    if (qhx_buf_append(&g->tail, p ? p : "", len)) return qhx_fail(QHX_ERR_NOMEM, "out of memory");
    const char *hit = memmem(g->tail.s, g->tail.len, o->grammar_after, L);
    if (hit) {
        g->active = 1;
        const char *rest = hit + L;
        size_t n = g->tail.len - (size_t)(rest - g->tail.s);
        if (n && qhx_gmatch_accept(g->m, rest, n))
            return qhx_fail(QHX_ERR_ARG, "generate: the grammar refuses the text after '%s'", o->grammar_after);
    } else if (g->tail.len >= L) { /* keep what could still start it */
        memmove(g->tail.s, g->tail.s + g->tail.len - (L - 1), L - 1);
        g->tail.len = L - 1;
    }
    return QHX_OK;
}

static qhx_status check_opts(const qhx_generate_opts *o) {
    if (o->max_tokens < 0) return qhx_fail(QHX_ERR_ARG, "generate: max_tokens %d is negative", o->max_tokens);
    if (o->n_stop < 0 || o->n_stop > QHX_MAX_STOP || (o->n_stop && !o->stop))
        return qhx_fail(QHX_ERR_ARG, "generate: %d stop strings (at most %d)", o->n_stop, QHX_MAX_STOP);
    for (int i = 0; i < o->n_stop; i++) {
        size_t L = o->stop[i] ? strlen(o->stop[i]) : 0;
        if (L == 0 || L > QHX_MAX_STOP_BYTES)
            return qhx_fail(QHX_ERR_ARG, "generate: stop string %d is empty or longer than %d bytes", i, QHX_MAX_STOP_BYTES);
    }
    if (o->n_stop_ids < 0 || o->n_stop_ids > 1024 || (o->n_stop_ids && !o->stop_ids))
        return qhx_fail(QHX_ERR_ARG, "generate: %d stop ids (at most 1024)", o->n_stop_ids);
    if (o->grammar_after && (!o->grammar || !*o->grammar_after || strlen(o->grammar_after) > QHX_MAX_STOP_BYTES))
        return qhx_fail(QHX_ERR_ARG, "generate: grammar_after needs a grammar and 1 to %d bytes", QHX_MAX_STOP_BYTES);
    if (o->draft != QHX_DRAFT_NONE && o->draft != QHX_DRAFT_NGRAM && o->draft != QHX_DRAFT_MTP)
        return qhx_fail(QHX_ERR_ARG, "generate: draft %d is not a drafter (QHX_DRAFT_NONE, _NGRAM or _MTP)", o->draft);
    if (o->top_logprobs < 0 || o->top_logprobs > QHX_MAX_TOP_LOGPROBS)
        return qhx_fail(QHX_ERR_ARG, "generate: top_logprobs %d is not in [0, %d]", o->top_logprobs, QHX_MAX_TOP_LOGPROBS);
    if (o->draft_max < 0 || o->draft_max > QHX_MAX_DRAFT)
        return qhx_fail(QHX_ERR_ARG, "generate: draft_max %d is not in [0, %d]", o->draft_max, QHX_MAX_DRAFT);
    return QHX_OK;
}

/* Log-softmax of the logits sampling sees, kept until the token is drawn: its own value and the
 * top_logprobs most probable, reported with it. */
typedef struct {
    float *lsm;     /* [vocab] */
    int32_t top[QHX_MAX_TOP_LOGPROBS];
    int n_top, cap; /* cap: the top_logprobs asked for */
} logprob_state;

static qhx_status logprobs_of(logprob_state *lp, const float *x, int V) {
    if (!lp->lsm && !(lp->lsm = malloc(sizeof(float) * (size_t)V))) return qhx_fail(QHX_ERR_NOMEM, "out of memory");
    float mx = -INFINITY;
    for (int i = 0; i < V; i++) mx = x[i] > mx ? x[i] : mx;
    double sum = 0;
    for (int i = 0; i < V; i++) sum += exp((double)x[i] - mx);
    const float lse = mx + (float)log(sum);
    for (int i = 0; i < V; i++) lp->lsm[i] = x[i] - lse;
    /* the top ones by insertion (there are at most 20); ties go to the lower id */
    lp->n_top = 0;
    for (int i = 0; i < V && lp->cap; i++) {
        if (lp->n_top == lp->cap && !(lp->lsm[i] > lp->lsm[lp->top[lp->n_top - 1]])) continue;
        int k = lp->n_top < lp->cap ? lp->n_top++ : lp->cap - 1;
        while (k > 0 && lp->lsm[i] > lp->lsm[lp->top[k - 1]]) lp->top[k] = lp->top[k - 1], k--;
        lp->top[k] = i;
    }
    return QHX_OK;
}

static void report_logprobs(logprob_state *lp, int32_t tok, const qhx_generate_opts *o) {
    float vals[QHX_MAX_TOP_LOGPROBS];
    for (int i = 0; i < lp->n_top; i++) vals[i] = lp->lsm[lp->top[i]];
    o->logprobs(tok, lp->lsm[tok], lp->top, vals, lp->n_top, o->logprobs_user);
    lp->n_top = 0;
}

static int is_stop_id(const qhx_generate_opts *o, const qhx_model_info *mi, int32_t tok) {
    for (int i = 0; i < o->n_stop_ids; i++)
        if (tok == o->stop_ids[i]) return 1;
    if (!o->ignore_eos)
        for (int e = 0; e < mi->n_eos; e++)
            if (tok == mi->eos[e]) return 1;
    return 0;
}

static qhx_status generate(qhx_session *s, const int32_t *prompt, int n_prompt, const qhx_generate_opts *o,
                           qhx_token_cb cb, void *user, qhx_generate_result *result);

qhx_status qhx_generate_sized(qhx_session *s, const int32_t *prompt, int n_prompt, const qhx_generate_opts *given,
                              size_t opts_size, qhx_token_cb cb, void *user, qhx_generate_result *out, size_t result_size) {
    /* an older caller's options lack the newer fields (zero: defaults); its result gets the fields it knows */
    qhx_generate_opts all = {0};
    const qhx_generate_opts *o = given ? &all : NULL;
    if (given) memcpy(&all, given, opts_size < sizeof all ? opts_size : sizeof all);
    qhx_generate_result full, *result = out ? &full : NULL;
    qhx_status rc = generate(s, prompt, n_prompt, o, cb, user, result);
    if (out) memcpy(out, &full, result_size < sizeof full ? result_size : sizeof full);
    return rc;
}

static qhx_status generate(qhx_session *s, const int32_t *prompt, int n_prompt, const qhx_generate_opts *o,
                           qhx_token_cb cb, void *user, qhx_generate_result *result) {
    qhx_generate_result res = {.stop_string = -1};
    if (result) *result = res;
    if (!s || !o || !prompt) return qhx_fail(QHX_ERR_ARG, "generate: needs a session, a prompt and options");
    if (n_prompt < 1) return qhx_fail(QHX_ERR_ARG, "generate: the prompt is empty");
    qhx_status rc = check_opts(o);
    if (rc) return rc;
    qhx_model *m = qhx_session_model(s);
    qhx_model_info mi;
    qhx_model_get_info(m, &mi);
    const long long room = (long long)mi.max_context - qhx_session_pos(s);
    if ((long long)n_prompt + o->max_tokens > room)
        return qhx_fail(QHX_ERR_RANGE, "prompt (%d tokens) plus %d new tokens exceed the context left (%lld of %d)",
                        n_prompt, o->max_tokens, room, mi.max_context);
    for (int i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= mi.vocab_size)
            return qhx_fail(QHX_ERR_RANGE, "prompt token %d (%d) is not in [0, %d)", i, prompt[i], mi.vocab_size);

    text_state ts = {.o = o};
    logprob_state lp = {.cap = o->top_logprobs};
    gram_state gs = {0};
    if (qhx_model_tokenizer(m, &ts.tok) != QHX_OK) {
        if (o->n_stop) return rc = qhx_fail(QHX_ERR_ARG, "generate: stop strings need a tokenizer: %s", qhx_last_error());
        ts.tok = NULL; /* ids only */
    }
    qhx_sampler sp = {0};
    float *logits = malloc(sizeof(float) * (size_t)mi.vocab_size);
    if (ts.tok) {
        ts.piece_cap = 3 * qhx_tokenizer_max_piece(ts.tok) + 16;
        ts.piece = malloc(ts.piece_cap);
    }
    if (!logits || (ts.tok && !ts.piece)) {
        free(logits);
        free(ts.piece);
        return qhx_fail(QHX_ERR_NOMEM, "out of memory");
    }
    spec_state spec = {.on = o->draft != QHX_DRAFT_NONE, .max = o->draft_max ? o->draft_max : 8, .backoff = 1, .s = s, .o = o,
                       .vocab = (size_t)mi.vocab_size, .context = mi.max_context, .res = &res};
    /* the head reads a verify pass's hidden states, which the session keeps for one decode piece */
    if (o->draft == QHX_DRAFT_MTP && spec.max > QHX_MAX_MTP_DRAFT) spec.max = QHX_MAX_MTP_DRAFT;
    spec.len = spec.max < 2 ? spec.max : 2; /* a failed window costs the pass: start short, double while kept */
    if (o->grammar) {
        if (!ts.tok || o->grammar->trie == NULL || qhx_tokenizer_n_ids(o->grammar->tok) != qhx_tokenizer_n_ids(ts.tok)) {
            rc = qhx_fail(QHX_ERR_ARG, "generate: the grammar was compiled for another tokenizer than the model's");
            goto done;
        }
        if ((rc = qhx_gmatch_new(o->grammar, &gs.m))) goto done;
        gs.active = !o->grammar_after;
    }
    if ((rc = qhx_sampler_init(&sp, o, mi.vocab_size))) goto done;
    for (int i = 0; i < n_prompt && !rc; i++) rc = qhx_sampler_accept(&sp, prompt[i]);
    if (!rc && o->draft == QHX_DRAFT_MTP) rc = qhx_mtp_new(s, &spec.mtp);
    if (!rc) rc = qhx_session_eval(s, prompt, n_prompt, QHX_EVAL_SEQUENCE, NULL, logits);
    if (!rc) rc = observe(&spec, n_prompt);
    if (rc) goto done;
    if (spec.on && !(spec.rows = malloc(sizeof(float) * spec.vocab * (spec.max + 1)))) {
        rc = qhx_fail(QHX_ERR_NOMEM, "out of memory");
        goto done;
    }
    res.n_prompt = n_prompt;
    for (int i = 0; i < o->max_tokens; i++) {
        /* a draft is kept when the token drawn as without drafts is the draft: with probability
         * p(draft), the speculative-sampling rule for a one-token draft, and with the very tokens
         * decoding without drafts gives for the seed */
        qhx_sampler_adjust(&sp, logits);
        if (o->logprobs && (rc = logprobs_of(&lp, logits, mi.vocab_size))) goto done;
        const int32_t forced = o->force ? o->force(o->force_user) : -1;
        if (forced >= mi.vocab_size) { rc = qhx_fail(QHX_ERR_RANGE, "generate: forced token %d is not in [0, %d)", forced, mi.vocab_size); goto done; }
        if (gs.active && forced < 0 && !qhx_gmatch_can_go_on(gs.m)) { res.finish = QHX_FINISH_STOP; break; } /* whole */
        if (gs.m && !gs.active) { /* the logits before the draw changes them, in case the trigger is refused */
            if (!gs.adjusted && !(gs.adjusted = malloc(sizeof(float) * (size_t)mi.vocab_size))) { rc = qhx_fail(QHX_ERR_NOMEM, "out of memory"); goto done; }
            memcpy(gs.adjusted, logits, sizeof(float) * (size_t)mi.vocab_size);
        }
        int32_t tok = forced >= 0 ? forced
                            : gs.active ? constrained_pick(&gs, &sp, o, &mi, qhx_tokenizer_n_ids(ts.tok), logits)
                                        : qhx_sampler_pick(&sp, logits);
        if (gs.m && !gs.active && forced < 0 && trigger_refused(&gs, o, tok)) {
            /* rare: pick again without it, from the logits as the sampler took them */
            if (!gs.saved && !(gs.saved = malloc(sizeof(float) * (size_t)mi.vocab_size))) { rc = qhx_fail(QHX_ERR_NOMEM, "out of memory"); goto done; }
            memcpy(gs.saved, gs.adjusted, sizeof(float) * (size_t)mi.vocab_size);
            int32_t t = tok;
            do {
                gs.saved[t] = -INFINITY;
                memcpy(logits, gs.saved, sizeof(float) * (size_t)mi.vocab_size);
                t = qhx_sampler_pick(&sp, logits);
            } while (trigger_refused(&gs, o, t) && isfinite(gs.saved[t]));
            tok = t;
        }
        if (tok == -2) { rc = qhx_gmatch_error(gs.m); goto done; }
        if (tok < 0) { rc = qhx_fail(QHX_ERR_ARG, "generate: no token of the vocabulary can continue the grammar here"); goto done; }
        if (is_stop_id(o, &mi, tok)) { res.finish = QHX_FINISH_STOP; break; }
        if (gs.m && (rc = gram_take(&gs, o, tok))) goto done;
        int stopped = 0;
        if (ts.tok) {
            /* Padded vocabularies have lm-head rows past the tokenizer's ids: such a token is
             * sampled, counted and reported like any other and, as in Hugging Face's decoder,
             * adds no text. */
            int k = qhx_detok_push(ts.tok, &ts.ds, tok, ts.piece, ts.piece_cap);
            stopped = push_text(&ts, ts.piece, k > 0 ? (size_t)k : 0);
            if (stopped < 0) { rc = qhx_fail(QHX_ERR_NOMEM, "out of memory"); goto done; }
        }
        res.n_generated++;
        if (o->logprobs) report_logprobs(&lp, tok, o);
        if (cb && cb(tok, ts.out.s, ts.out.len, user)) {
            res.finish = QHX_FINISH_CANCELLED;
            rc = qhx_fail(QHX_ERR_CANCELLED, "generation cancelled by the callback");
            goto done;
        }
        if (stopped) { res.finish = QHX_FINISH_STOP, res.stop_string = ts.hit; goto done; }
        if (i + 1 == o->max_tokens) break;
        if ((rc = qhx_sampler_accept(&sp, tok)) ||
            (rc = spec.on ? spec_advance(&spec, tok, logits) : decode_step(s, o, tok, logits)))
            goto done;
    }
    if (ts.tok) { /* the end: whatever was held back is text after all */
        char tail[16];
        int k = qhx_detok_flush(&ts.ds, tail, sizeof tail);
        int stopped = push_text(&ts, tail, k > 0 ? (size_t)k : 0);
        if (stopped == 0) stopped = release(&ts, ts.held, ts.n_held);
        else if (stopped == 1) res.finish = QHX_FINISH_STOP, res.stop_string = ts.hit;
        if (stopped < 0) { rc = qhx_fail(QHX_ERR_NOMEM, "out of memory"); goto done; }
        if (ts.out.len && cb) cb(-1, ts.out.s, ts.out.len, user);
    }
done:
    if (spec.on) { /* the session as if every kept token had been decoded one by one */
        qhx_status settled = spec_settle(&spec);
        if (!rc) rc = settled;
    }
    qhx_mtp_free(spec.mtp);
    qhx_gmatch_free(gs.m);
    qhx_buf_free(&gs.tail);
    free(gs.adjusted);
    free(gs.saved);
    free(gs.scratch);
    free(spec.rows);
    if (result) *result = res;
    qhx_sampler_free(&sp);
    free(lp.lsm);
    free(logits);
    free(ts.piece);
    qhx_buf_free(&ts.out);
    return rc;
}
