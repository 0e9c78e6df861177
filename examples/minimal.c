/* The smallest complete qhexrt program: open a model, encode a prompt, stream a greedy continuation.
 *     cc -Iinclude examples/minimal.c build/libqhexrt.a $(LIBS) -o minimal   (see the Makefile)
 *     ./minimal models/q35-kjv "In the beginning" 32 */
#include "qhexrt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int print_text(int32_t token, const char *text, size_t len, void *user) {
    (void)token, (void)user;
    fwrite(text, 1, len, stdout); /* complete UTF-8, never part of a stop string */
    fflush(stdout);
    return 0; /* non-zero would stop generation */
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s MODEL PROMPT N_TOKENS\n", argv[0]);
        return 2;
    }
    qhx_model *model = NULL;
    qhx_session *session = NULL;
    qhx_tokenizer *tok;
    int32_t *ids = NULL;
    size_t n_ids;
    int rc = 1;
    if (qhx_model_open(NULL, argv[1], &model) || qhx_model_tokenizer(model, &tok) ||
        qhx_tokenizer_encode(tok, argv[2], strlen(argv[2]), 0, &ids, &n_ids) || qhx_session_new(model, &session)) {
        fprintf(stderr, "%s\n", qhx_last_error());
        goto done;
    }
    qhx_generate_opts opts = {.max_tokens = atoi(argv[3])}; /* zeroes: greedy, stop at end of turn */
    qhx_generate_result res;
    fputs(argv[2], stdout);
    if (qhx_generate(session, ids, (int)n_ids, &opts, print_text, NULL, &res)) {
        fprintf(stderr, "\n%s\n", qhx_last_error());
        goto done;
    }
    printf("\n[%d prompt tokens, %d generated]\n", res.n_prompt, res.n_generated);
    rc = 0;
done:
    free(ids);
    qhx_session_free(session);
    qhx_model_close(model); /* also frees the tokenizer and the default runtime */
    return rc;
}
