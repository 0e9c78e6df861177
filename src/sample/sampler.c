/* Sampling, in Hugging Face's order: repetition/presence/frequency penalties on the raw logits,
 * then temperature, top-k, top-p, min-p, and a draw from what is left with a seeded xoshiro256**.
 * Only the candidates that can matter are ever sorted, so a 250k vocabulary costs one pass. */
#include "sample/sampler.h"
#include "util/argmax.h"
#include "util/rng.h"
#include "util/buf.h"
#include "util/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>


static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static double uniform01(uint64_t *s) { /* xoshiro256**: 53 random bits in [0, 1) */
    uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3]; s[2] ^= t; s[3] = rotl(s[3], 45);
    return (double)(r >> 11) * 0x1.0p-53;
}

qhx_status qhx_sampler_init(qhx_sampler *s, const qhx_generate_opts *o, int vocab) {
    memset(s, 0, sizeof *s);
    if (!(o->temperature >= 0 && o->temperature <= 100) || !(o->top_p >= 0 && o->top_p <= 1) ||
        !(o->min_p >= 0 && o->min_p <= 1) || !(o->repeat_penalty >= 0 && o->repeat_penalty <= 100) ||
        !(fabsf(o->presence_penalty) <= 100) || !(fabsf(o->frequency_penalty) <= 100) || o->top_k < 0 ||
        o->penalty_window < -1)
        return qhx_fail(QHX_ERR_ARG, "sampling options out of range (temperature [0,100], top_p/min_p [0,1], "
                                     "penalties [-100,100], top_k >= 0, penalty_window >= -1)");
    s->temperature = o->temperature;
    s->top_k = o->top_k;
    s->top_p = o->top_p > 0 ? o->top_p : 1;
    s->min_p = o->min_p;
    s->repeat_penalty = o->repeat_penalty > 0 ? o->repeat_penalty : 1;
    s->presence_penalty = o->presence_penalty;
    s->frequency_penalty = o->frequency_penalty;
    s->window = o->penalty_window ? o->penalty_window : 64;
    s->vocab = vocab;
    if (o->n_bias < 0 || (o->n_bias && (!o->bias_ids || !o->bias)))
        return qhx_fail(QHX_ERR_ARG, "logit bias: %d entries without ids and values", o->n_bias);
    for (int i = 0; i < o->n_bias; i++)
        if (o->bias_ids[i] < 0 || o->bias_ids[i] >= vocab || !(fabsf(o->bias[i]) <= 100))
            return qhx_fail(QHX_ERR_ARG, "logit bias %d: token %d must be in [0, %d) and its bias in [-100, 100]", i, o->bias_ids[i], vocab);
    s->bias_ids = o->bias_ids, s->bias = o->bias, s->n_bias = o->n_bias;
    uint64_t x = o->seed;
    for (int i = 0; i < 4; i++) s->rng[i] = qhx_splitmix64(&x);
    s->prob = malloc(sizeof(float) * (size_t)vocab);
    s->idx = malloc(sizeof(int32_t) * (size_t)vocab);
    if (!s->prob || !s->idx) { qhx_sampler_free(s); return qhx_fail(QHX_ERR_NOMEM, "out of memory"); }
    return QHX_OK;
}

void qhx_sampler_free(qhx_sampler *s) {
    free(s->hist);
    free(s->prob);
    free(s->idx);
    memset(s, 0, sizeof *s);
}

static int penalties_on(const qhx_sampler *s) {
    return s->repeat_penalty != 1 || s->presence_penalty != 0 || s->frequency_penalty != 0;
}

qhx_status qhx_sampler_accept(qhx_sampler *s, int32_t tok) {
    if (!penalties_on(s)) return QHX_OK;
    if (s->window > 0 && s->n_hist == s->window) { /* forget the oldest */
        int keep = s->window - 1;
        memmove(s->hist, s->hist + s->n_hist - keep, sizeof(int32_t) * (size_t)keep);
        s->n_hist = keep;
    }
    if (qhx_reserve(&s->hist, &s->cap_hist, (size_t)s->n_hist + 1, sizeof *s->hist)) return qhx_fail(QHX_ERR_NOMEM, "out of memory");
    s->hist[s->n_hist++] = tok;
    return QHX_OK;
}

/* HF's repetition penalty (divide positive logits, multiply negative ones) once per distinct
 * token, then OpenAI's presence (once) and frequency (per occurrence) penalties. */
static void apply_penalties(qhx_sampler *s, float *x) {
    float *count = s->prob; /* scratch, only at the history's ids */
    for (int i = 0; i < s->n_hist; i++) count[s->hist[i]] = 0;
    for (int i = 0; i < s->n_hist; i++) count[s->hist[i]] += 1;
    for (int i = 0; i < s->n_hist; i++) {
        int32_t t = s->hist[i];
        if (count[t] == 0) continue; /* done already */
        float l = x[t];
        l = l > 0 ? l / s->repeat_penalty : l * s->repeat_penalty;
        x[t] = l - s->presence_penalty - count[t] * s->frequency_penalty;
        count[t] = 0;
    }
}

/* a before b: more probable first, then the lower id, so every order is total and reproducible */
static int before(const float *p, int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); }

/* Moves the k most probable of idx[0..n) to the front (in no particular order). */
static void select_top(const float *p, int32_t *idx, int n, int k) {
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        int32_t pivot = idx[lo + (hi - lo) / 2];
        int i = lo, j = hi;
        while (i <= j) {
            while (before(p, idx[i], pivot)) i++;
            while (before(p, pivot, idx[j])) j--;
            if (i <= j) { int32_t t = idx[i]; idx[i++] = idx[j]; idx[j--] = t; }
        }
        if (k - 1 <= j) hi = j;
        else if (k - 1 >= i) lo = i;
        else break;
    }
}

static int cmp_desc(const void *a, const void *b, void *prob) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return before(prob, x, y) ? -1 : before(prob, y, x) ? 1 : 0;
}

/* Penalties, temperature, top-k, top-p and min-p: the tokens kept are idx[0..n) with unnormalised
 * probabilities in prob[]; returns n, or 0 for greedy decoding (the argmax in *greedy). */
static int keep_set(qhx_sampler *s, float *x, int32_t *greedy) {
    const int V = s->vocab;
    if (s->temperature <= 0 || s->top_k == 1) return *greedy = qhx_argmax(x, V), 0;

    float *p = s->prob;
    int32_t *idx = s->idx;
    const float m = x[qhx_argmax(x, V)], inv_t = 1.0f / s->temperature;
    for (int i = 0; i < V; i++) {
        p[i] = expf((x[i] - m) * inv_t); /* unnormalised: the top token is 1 */
        idx[i] = i;
    }
    int n = V;
    if (s->top_k > 0 && s->top_k < V) {
        select_top(p, idx, V, s->top_k);
        n = s->top_k;
    }
    if (s->top_p < 1) {
        /* The nucleus lies among the tokens above some threshold: find one whose tokens hold top_p
         * of the mass, then sort only those. */
        double total = 0;
        for (int i = 0; i < n; i++) total += p[idx[i]];
        const double want = s->top_p * total;
        int k = 0;
        for (float tau = 1e-4f;; tau *= 1e-4f) {
            double mass = 0;
            k = 0;
            for (int i = 0; i < n; i++)
                if (p[idx[i]] >= tau) {
                    int32_t t = idx[k]; idx[k] = idx[i]; idx[i] = t;
                    mass += p[idx[k++]];
                }
            if (mass >= want || tau == 0) break;
            if (tau < 1e-30f) tau = 0;
        }
        qsort_r(idx, (size_t)k, sizeof *idx, cmp_desc, p);
        double cum = 0;
        int keep = 0;
        while (keep < k && cum < want) cum += p[idx[keep++]];
        n = keep > 0 ? keep : 1;
    }
    if (s->min_p > 0) { /* relative to the most probable token, whose p is 1 */
        int keep = 0;
        for (int i = 0; i < n; i++)
            if (p[idx[i]] >= s->min_p) idx[keep++] = idx[i];
        n = keep;
    }
    return n;
}

/* A draw from idx[0..n) in proportion to prob[] */
static int32_t draw(qhx_sampler *s, int n) {
    const float *p = s->prob;
    const int32_t *idx = s->idx;
    double total = 0;
    for (int i = 0; i < n; i++) total += p[idx[i]];
    double r = uniform01(s->rng) * total;
    for (int i = 0; i < n; i++) {
        r -= p[idx[i]];
        if (r < 0) return idx[i];
    }
    return idx[n - 1];
}

void qhx_sampler_adjust(qhx_sampler *s, float *x) {
    for (int i = 0; i < s->n_bias; i++) x[s->bias_ids[i]] += s->bias[i];
    if (penalties_on(s)) apply_penalties(s, x);
}

int32_t qhx_sampler_pick(qhx_sampler *s, float *x) {
    int32_t greedy = 0;
    const int n = keep_set(s, x, &greedy);
    return n ? draw(s, n) : greedy;
}

int32_t qhx_sampler_sample(qhx_sampler *s, float *x) {
    qhx_sampler_adjust(s, x);
    return qhx_sampler_pick(s, x);
}
