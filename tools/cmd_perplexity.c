/* qhx perplexity: exp(mean negative log-likelihood) over consecutive windows of a text. */
#include "cli.h"
#include "qhexrt.h"
#include "qhexrt_tools.h"

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
    "usage: qhx perplexity MODEL FILE [--ctx N] [--chunks N] [--second-half] [--json] [-t N] [--kernels K]\n"
    "The whole FILE is tokenized as one text (no special tokens), split into consecutive windows of\n"
    "N tokens (default 512; the last may be shorter), each evaluated from a fresh state.\n"
    "perplexity = exp(mean negative log-likelihood of every token of every window but its first).\n"
    "  --chunks N     only the first N windows (llama-perplexity's --chunks)\n"
    "  --second-half  llama.cpp's definition (llama-perplexity): whole windows only, and of each only\n"
    "                 the tokens after its first half are scored, so figures compare with llama.cpp's\n"
    "  --json         print {\"tokens\": scored tokens, \"perplexity\": X} only\n" RUNTIME_HELP;

static void show_progress(size_t done, size_t total, void *user) {
    (void)user;
    fprintf(stderr, "\rperplexity: %zu/%zu tokens", done, total);
}

int cmd_perplexity(int argc, char **argv) {
    opts o = {.ctx = 512};
    if (parse_common(argc, argv, &o, "-m --ctx -c --ctx-size --chunks --json --second-half" RUNTIME_FLAGS)) return 2;
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
    int rc = 1;
    if (open_model(&o, &rt, &m)) goto done;
    if (qhx_model_tokenizer(m, &tok) || qhx_tokenizer_encode(tok, text, len, 0, &ids, &n) || qhx_session_new(m, &s)) {
        api_error();
        goto done;
    }
    if (o.chunks && n > (size_t)o.chunks * (size_t)ctx) n = (size_t)o.chunks * (size_t)ctx;
    qhx_model_info in;
    qhx_model_get_info(m, &in);
    if (ctx > in.max_context) { die("--ctx %lld exceeds the model's context of %d", ctx, in.max_context); goto done; }
    double nll = 0;
    size_t scored = 0;
    if (qhx_perplexity(s, ids, n, (size_t)ctx, o.second_half, &nll, &scored, !json && isatty(2) ? show_progress : NULL, NULL)) {
        api_error();
        goto done;
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
    close_model(rt, m, s);
    return rc;
}
