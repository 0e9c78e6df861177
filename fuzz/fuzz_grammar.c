/* GBNF grammars (src/grammar/gbnf.c) and their matcher (src/grammar/matcher.c): the input is a
 * grammar, a NUL, then a text. A grammar compiles or is refused with a message; a compiled one
 * takes the text the same whole as in pieces (a character split across pieces included), and,
 * over the Qwen vocabulary (QHX_FUZZ_TOKENIZER), its mask after each prefix holds exactly the
 * tokens its check accepts, on a sample of ids. */
#include "grammar/grammar.h"
#include "qhexrt.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static qhx_tokenizer *tok;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    const char *path = getenv("QHX_FUZZ_TOKENIZER");
    if (path && qhx_tokenizer_load(path, &tok)) tok = NULL;
    return 0;
}

void qhx_fuzz_cleanup(void) { qhx_tokenizer_free(tok); }

int LLVMFuzzerTestOneInput(const uint8_t *p, size_t n) {
    const uint8_t *nul = memchr(p, 0, n);
    const size_t glen = nul ? (size_t)(nul - p) : n;
    const char *text = nul ? (const char *)nul + 1 : "";
    const size_t tlen = nul ? n - glen - 1 : 0;
    qhx_grammar *g = NULL;
    if (qhx_gbnf_compile((const char *)p, glen, tok, &g)) {
        if (!*qhx_last_error()) abort(); /* a refusal says why */
        return 0;
    }
    qhx_gmatch *whole, *part;
    if (qhx_gmatch_new(g, &whole) || qhx_gmatch_new(g, &part)) abort();
    const int all = qhx_gmatch_accept(whole, text, tlen) == 0;
    const size_t piece = tlen ? (size_t)text[0] % 5 + 1 : 1;
    int ok = 1;
    size_t at = 0;
    uint32_t seed = 2166136261u;
    for (size_t i = 0; i < n; i++) seed = (seed ^ p[i]) * 16777619u;
    while (ok && at < tlen) {
        size_t k = at + piece <= tlen ? piece : tlen - at;
        if (tok && at % 16 == 0) { /* the mask against the check, here */
            const uint64_t *mask = qhx_gmatch_mask(part);
            if (!mask && qhx_gmatch_error(part) == QHX_ERR_RANGE) goto done; /* too ambiguous, and said so */
            if (!mask) abort();
            for (int j = 0; j < 64; j++) {
                seed = seed * 1103515245u + 12345u;
                int32_t id = (int32_t)(seed % (uint32_t)qhx_tokenizer_n_ids(tok));
                size_t len;
                const char *pc = qhx_gmatch_piece(part, id, &len);
                int want = pc && len && qhx_gmatch_check(part, pc, len);
                if ((int)(mask[id >> 6] >> (id & 63) & 1) != want) abort();
            }
        }
        ok = qhx_gmatch_accept(part, text + at, k) == 0;
        at += k;
    }
    if (ok != all) abort();
    if (all && (qhx_gmatch_can_end(whole) != qhx_gmatch_can_end(part) || qhx_gmatch_can_go_on(whole) != qhx_gmatch_can_go_on(part)))
        abort();
done:
    qhx_gmatch_free(whole);
    qhx_gmatch_free(part);
    qhx_grammar_free(g);
    return 0;
}
