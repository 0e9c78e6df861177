/* the compact tokenizer form (after its magic, which the harness supplies; the harness also seals
 * the size and checksum, so that inputs reach the structural checks behind them). */
#include "tokenizer/tokenizer_internal.h"
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *p, size_t n) {
    unsigned char *buf = malloc(n + 8);
    if (!buf) return 0;
    memcpy(buf, QHX_TOK_MAGIC, 8);
    memcpy(buf + 8, p, n);
    qhx_tokenizer_compact_seal(buf, n + 8);
    qhx_tokenizer *t;
    if (qhx_tokenizer_parse_compact(buf, n + 8, "fuzz", &t) == QHX_OK) {
        int32_t *ids;
        size_t k;
        if (qhx_tokenizer_encode(t, "abc def", 7, 0, &ids, &k) == QHX_OK) free(ids);
        qhx_tokenizer_free(t);
    }
    free(buf);
    return 0;
}
