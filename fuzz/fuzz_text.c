/* the prompt path: arbitrary bytes (invalid UTF-8, special-token look-alikes) through the real
 * Qwen3 tokenizer, with and without special tokens and replacement, then decoded and streamed. */
#include "qhexrt.h"
#include <stdio.h>
#include <stdlib.h>

static qhx_tokenizer *tok;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    const char *path = getenv("QHX_FUZZ_TOKENIZER");
    if (qhx_tokenizer_load(path ? path : "build/data/tokenizers/qwen3/tokenizer.json", &tok)) {
        fprintf(stderr, "fuzz_text: %s (set QHX_FUZZ_TOKENIZER)\n", qhx_last_error());
        exit(1);
    }
    return 0;
}

void qhx_fuzz_cleanup(void) { qhx_tokenizer_free(tok); } /* called by the replay driver only */

int LLVMFuzzerTestOneInput(const uint8_t *p, size_t n) {
    for (int flags = 0; flags < 4; flags++) {
        int32_t *ids;
        size_t k;
        if (qhx_tokenizer_encode(tok, (const char *)p, n, flags, &ids, &k)) continue;
        char *out;
        if (qhx_tokenizer_decode(tok, ids, k, &out, NULL) == QHX_OK) free(out);
        qhx_detok_stream st = {{0}, 0};
        char buf[4096];
        for (size_t i = 0; i < k; i++) qhx_detok_push(tok, &st, ids[i], buf, sizeof buf);
        qhx_detok_flush(&st, buf, sizeof buf);
        free(ids);
    }
    return 0;
}
