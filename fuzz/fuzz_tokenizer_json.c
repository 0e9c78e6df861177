/* tokenizer.json (qhx_tokenizer_parse); a tokenizer that loads must also encode and decode. */
#include "tokenizer/tokenizer_internal.h"
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *p, size_t n) {
    qhx_tokenizer *t;
    if (qhx_tokenizer_parse((const char *)p, n, "fuzz", &t)) return 0;
    static const char text[] = "Hello, world! 123 \xe4\xbd\xa0\xe5\xa5\xbd <|im_start|>";
    int32_t *ids;
    size_t k;
    if (qhx_tokenizer_encode(t, text, sizeof text - 1, QHX_ENCODE_SPECIAL, &ids, &k) == QHX_OK) {
        char *out;
        if (qhx_tokenizer_decode(t, ids, k, &out, NULL) == QHX_OK) free(out);
        free(ids);
    }
    qhx_tokenizer_free(t);
    return 0;
}
