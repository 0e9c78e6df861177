/* Token sampling: penalties, temperature, top-k, top-p, min-p and a seeded draw, in the order
 * Hugging Face's generate applies them. One sampler per generation; it remembers the recent tokens
 * the penalties look at. */
#ifndef QHX_SAMPLER_H
#define QHX_SAMPLER_H

#include "qhexrt.h"

typedef struct {
    float temperature, top_p, min_p, repeat_penalty, presence_penalty, frequency_penalty;
    int top_k, window;   /* window: tokens of history the penalties see; -1 all */
    uint64_t rng[4];     /* xoshiro256** */
    int32_t *hist;       /* the last `window` tokens, oldest first */
    int n_hist;
    size_t cap_hist;
    float *prob;         /* [vocab] scratch */
    int32_t *idx;        /* [vocab] scratch */
    int vocab;
    const int32_t *bias_ids; /* logit_bias */
    const float *bias;
    int n_bias;
} qhx_sampler;

qhx_status qhx_sampler_init(qhx_sampler *s, const qhx_generate_opts *o, int vocab);
void qhx_sampler_free(qhx_sampler *s);
/* Remembers a token (prompt or generated) for the penalties. */
qhx_status qhx_sampler_accept(qhx_sampler *s, int32_t tok);
/* The logits as sampling sees them: the bias added, then the penalties applied, in place. */
void qhx_sampler_adjust(qhx_sampler *s, float *logits);
/* Picks the next token from adjusted logits (temperature and the rest modify them in place). */
int32_t qhx_sampler_pick(qhx_sampler *s, float *logits);
/* adjust, then pick */
int32_t qhx_sampler_sample(qhx_sampler *s, float *logits);
#endif
