/* qhx logits: the fp32 logits of every prompt position, written atomically. */
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
/* ---- qhx logits ------------------------------------------------------------------------------ */

static const char logits_help[] =
    "usage: qhx logits MODEL --tokens 1,2,3 --out FILE [--stepwise]\n"
    "Evaluates the tokens from a fresh state and writes the fp32 little-endian logits of every\n"
    "position, row-major [T, vocab_size], to FILE (atomically).\n"
    "  MODEL        a bundle (qhx forge) or a Hugging Face checkpoint directory\n"
    "  --stepwise   feed one token at a time (recurrent path) instead of the whole sequence\n" RUNTIME_HELP;

int cmd_logits(int argc, char **argv) {
    opts o = {0};
    if (parse_common(argc, argv, &o, "-m --tokens -o --out --stepwise" RUNTIME_FLAGS)) return 2;
    if (o.help) return fputs(logits_help, stdout), 0;
    if (!o.model || !o.tokens || !o.out || o.prompt) return die("needs MODEL, --tokens and --out (see qhx logits --help)"), 2;
    int32_t *ids;
    int n;
    if (parse_ids("--tokens", o.tokens, &ids, &n)) return 2;
    qhx_runtime *rt = NULL;
    qhx_model *m = NULL;
    qhx_session *s = NULL;
    float *logits = NULL;
    int rc = 1;
    if (open_model(&o, &rt, &m)) goto done;
    if (qhx_session_new(m, &s)) { api_error(); goto done; }
    qhx_model_info info;
    qhx_model_get_info(m, &info);
    logits = malloc(sizeof(float) * (size_t)n * info.vocab_size);
    if (!logits) { die("out of memory for %d x %d logits", n, info.vocab_size); goto done; }
    if (qhx_session_eval(s, ids, n, o.stepwise ? QHX_EVAL_STEPWISE : QHX_EVAL_SEQUENCE, logits, NULL)) { api_error(); goto done; }
    rc = write_atomic(o.out, logits, sizeof(float) * (size_t)n * info.vocab_size);
done:
    free(logits);
    free(ids);
    close_model(rt, m, s);
    return rc;
}
