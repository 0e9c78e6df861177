/* qhx perplexity: exp(mean negative log-likelihood) over consecutive windows of a text. */
#include "cli.h"
#include "qhexrt.h"

#include <jansson.h>

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
/* ---- qhx perplexity -------------------------------------------------------------------------- */

static const char perplexity_help[] =
    "usage: qhx perplexity MODEL FILE [--ctx N] [--second-half] [--json] [-t N] [--kernels K]\n"
    "The whole FILE is tokenized as one text (no special tokens), split into consecutive windows of\n"
    "N tokens (default 512; the last may be shorter), each evaluated from a fresh state.\n"
    "perplexity = exp(mean negative log-likelihood of every token of every window but its first).\n"
    "  --second-half  llama.cpp's definition (llama-perplexity): whole windows only, and of each only\n"
    "                 the tokens after its first half are scored, so figures compare with llama.cpp's\n"
    "  --json         print {\"tokens\": scored tokens, \"perplexity\": X} only\n" RUNTIME_HELP;

int cmd_perplexity(int argc, char **argv) {
    opts o = {.ctx = 512};
    if (parse_common(argc, argv, &o)) return 2;
    if (o.help) return fputs(perplexity_help, stdout), 0;
    const int json = o.json;
    const long long ctx = o.ctx;
    if (!o.model || !o.prompt) return die("needs MODEL and FILE (see qhx perplexity --help)"), 2;
    const char *file = o.prompt;
    size_t len;
    char *text = read_text(file, &len);
    if (!text) return 1;
    qhx_runtime *rt = NULL;
    qhx_model *m = NULL;
    qhx_session *s = NULL;
    qhx_tokenizer *tok;
    int32_t *ids = NULL;
    size_t n = 0;
    float *logits = NULL;
    int rc = 1;
    if (open_model(&o, &rt, &m)) goto done;
    if (qhx_model_tokenizer(m, &tok) || qhx_tokenizer_encode(tok, text, len, 0, &ids, &n) || qhx_session_new(m, &s)) {
        api_error();
        goto done;
    }
    qhx_model_info in;
    qhx_model_get_info(m, &in);
    if (ctx > in.max_context) { die("--ctx %lld exceeds the model's context of %d", ctx, in.max_context); goto done; }
    enum { PIECE = 64 }; /* windows are fed in 64-token pieces: the logits of a whole window may not fit */
    const size_t V = (size_t)in.vocab_size;
    logits = malloc(sizeof(float) * PIECE * V);
    if (!logits) { die("out of memory"); goto done; }
    double nll = 0;
    size_t scored = 0;
    /* scored: the tokens at window positions first+1 .. wn-1 */
    const size_t first = o.second_half ? (size_t)ctx / 2 : 0;
    for (size_t w0 = 0; w0 < n && !(o.second_half && n - w0 < (size_t)ctx); w0 += (size_t)ctx) {
        const size_t wn = n - w0 < (size_t)ctx ? n - w0 : (size_t)ctx;
        qhx_session_reset(s);
        for (size_t p0 = 0; p0 < wn; p0 += PIECE) {
            const size_t pn = wn - p0 < PIECE ? wn - p0 : PIECE;
            if (qhx_session_eval(s, ids + w0 + p0, (int)pn, QHX_EVAL_SEQUENCE, logits, NULL)) { api_error(); goto done; }
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
        if (!json && isatty(2)) fprintf(stderr, "\rperplexity: %zu/%zu tokens", w0 + wn, n);
    }
    if (!scored) { die("%s: fewer than 2 tokens in every window: nothing to score", file); goto done; }
    if (!json && isatty(2)) fputc('\n', stderr);
    if (json) {
        json_t *j = json_pack("{s:I, s:f}", "tokens", (json_int_t)scored, "perplexity", round(exp(nll / scored) * 1e6) / 1e6);
        const int bad = !j || json_dumpf(j, stdout, JSON_REAL_PRECISION(15)) || putchar('\n') == EOF;
        json_decref(j);
        if (bad) { die("stdout: write error"); goto done; }
    } else
        printf("%s: %zu tokens scored in windows of %lld; perplexity %.4f\n", file, scored, ctx, exp(nll / scored));
    rc = 0;
done:
    free(text);
    free(ids);
    free(logits);
    close_model(rt, m, s);
    return rc;
}
