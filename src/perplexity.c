/* Perplexity over consecutive windows (what `qhx perplexity` and the quantization benches score). */
#include "qhexrt.h"
#include "qhexrt_tools.h"
#include "util/error.h"

#include <math.h>
#include <stdlib.h>

qhx_status qhx_perplexity(qhx_session *s, const int32_t *ids, size_t n, size_t ctx, int second_half, double *nll_out,
                          size_t *scored_out, void (*progress)(size_t done, size_t total, void *user), void *user) {
    qhx_model_info in;
    qhx_model_get_info(qhx_session_model(s), &in);
    if (ctx < 1) return qhx_fail(QHX_ERR_ARG, "perplexity: a window of %zu tokens", ctx);
    enum { PIECE = 64 }; /* windows are fed in 64-token pieces: the logits of a whole window may not fit */
    const size_t V = (size_t)in.vocab_size;
    float *logits = malloc(sizeof(float) * PIECE * V);
    if (!logits) return qhx_fail(QHX_ERR_NOMEM, "perplexity: out of memory");
    double nll = 0;
    size_t scored = 0;
    qhx_status rc = QHX_OK;
    /* scored: the tokens at window positions first+1 .. wn-1 */
    const size_t first = second_half ? ctx / 2 : 0;
    for (size_t w0 = 0; w0 < n && !(second_half && n - w0 < ctx) && !rc; w0 += ctx) {
        const size_t wn = n - w0 < ctx ? n - w0 : ctx;
        qhx_session_reset(s);
        for (size_t p0 = 0; p0 < wn && !rc; p0 += PIECE) {
            const size_t pn = wn - p0 < PIECE ? wn - p0 : PIECE;
            if ((rc = qhx_session_eval(s, ids + w0 + p0, (int)pn, QHX_EVAL_SEQUENCE, logits, NULL))) break;
            for (size_t t = 0; t < pn && p0 + t + 1 < wn; t++) {
                if (p0 + t < first) continue;
                const float *row = logits + t * V;
                float mx = row[0];
                for (size_t v = 1; v < V; v++) mx = row[v] > mx ? row[v] : mx;
                double sum = 0;
                for (size_t v = 0; v < V; v++) sum += exp((double)row[v] - mx);
                nll += log(sum) + mx - row[ids[w0 + p0 + t + 1]];
                scored++;
            }
        }
        if (progress) progress(w0 + wn, n, user);
    }
    free(logits);
    *nll_out = nll;
    *scored_out = scored;
    return rc;
}
