/* JSON Schema compiled to a grammar (src/grammar/json_schema.c, pattern.c): the input is a schema,
 * a NUL, then a text. A schema compiles or is refused with a message; its grammar must compile;
 * and any text the grammar takes whole is JSON. */
#include "grammar/grammar.h"
#include "qhexrt.h"

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *p, size_t n) {
    const uint8_t *nul = memchr(p, 0, n);
    const size_t slen = nul ? (size_t)(nul - p) : n;
    const char *text = nul ? (const char *)nul + 1 : "";
    const size_t tlen = nul ? n - slen - 1 : 0;
    char *gbnf = NULL;
    if (qhx_json_schema_to_gbnf((const char *)p, slen, &gbnf)) {
        if (!*qhx_last_error()) abort();
        return 0;
    }
    qhx_grammar *g = NULL;
    if (qhx_gbnf_compile(gbnf, strlen(gbnf), NULL, &g)) abort(); /* what the schema compiler writes is GBNF */
    free(gbnf);
    qhx_gmatch *m;
    if (qhx_gmatch_new(g, &m)) abort();
    if (qhx_gmatch_accept(m, text, tlen) == 0 && qhx_gmatch_can_end(m)) {
        json_error_t e;
        json_t *j = json_loadb(text, tlen, JSON_DECODE_ANY | JSON_ALLOW_NUL, &e);
        if (!j) abort(); /* the grammar took text that is not JSON */
        json_decref(j);
    }
    qhx_gmatch_free(m);
    qhx_grammar_free(g);
    return 0;
}
