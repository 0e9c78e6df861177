/* The server's request parsing (qhx serve): a JSON body for /v1/completions or, when the first byte
 * is odd, /v1/chat/completions, when it is 2 /v1/responses, when 3 /v1/messages (3 is odd: that
 * byte is taken first), through the type checks, chat rendering, tokenization and context
 * check against the bundled q35-kjv model (run from the repository root). Nothing is generated; a
 * refusal must be a 400 (or a 500 for an allocation failure, a 404 for a previous_response_id not
 * stored: "resp-1" is, a conversation with a call and reasoning). It links the parser qhx serve
 * runs (tools/serve.h). */
#include "../tools/serve.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static server sv;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    if (qhx_model_open(NULL, "models/q35-kjv", &sv.m) || qhx_model_tokenizer(sv.m, &sv.tok)) {
        fprintf(stderr, "fuzz_request: %s\n", qhx_last_error());
        abort();
    }
    qhx_model_get_info(sv.m, &sv.mi);
    sv.max_tokens = sv.mi.max_context; /* so a context overflow is reachable */
    pthread_mutex_init(&sv.lock, NULL);
    pthread_cond_init(&sv.cv, NULL);
    sv.responses = rstore_new(RSTORE_BYTES);
    json_t *items = json_loads("[{\"role\":\"user\",\"content\":\"Who?\"},{\"type\":\"reasoning\",\"summary\":[{\"type\":"
                               "\"summary_text\",\"text\":\"r\"}]},{\"type\":\"function_call\",\"call_id\":\"c\",\"name\":\"f\","
                               "\"arguments\":\"{}\"},{\"type\":\"function_call_output\",\"call_id\":\"c\",\"output\":\"x\"},"
                               "{\"type\":\"message\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"The LORD.\"}]}]",
                               0, NULL);
    if (!sv.responses || !items) abort();
    rstore_put(sv.responses, "resp-1", items, json_object());
    return 0;
}

void qhx_fuzz_cleanup(void) { /* called by the replay driver only */
    rstore_free(sv.responses);
    qhx_model_close(sv.m);
}

int LLVMFuzzerTestOneInput(const uint8_t *p, size_t n) {
    if (n < 1 || n > (1 << 16)) return 0;
    refusal why;
    request *rq = p[0] == 2 ? parse_responses(&sv, (const char *)p + 1, n - 1, &why)
                  : p[0] == 3 ? parse_messages(&sv, (const char *)p + 1, n - 1, &why)
                              : parse_request(&sv, (const char *)p + 1, n - 1, p[0] & 1, &why);
    if (rq) request_free(rq);
    else if ((why.status != 400 && why.status != 500 && why.status != 404) || !why.message[0]) abort();
    return 0;
}
