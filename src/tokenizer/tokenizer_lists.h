/* A tokenizer from plain lists (tokenizer_lists.c): what a GGUF's tokenizer.ggml.* keys hold. */
#ifndef QHX_TOKENIZER_LISTS_H
#define QHX_TOKENIZER_LISTS_H
#include <stddef.h>
#include <stdint.h>
#include "qhexrt.h"

/* llama.cpp's token types */
enum { QHX_TOKTYPE_NORMAL = 1, QHX_TOKTYPE_UNKNOWN, QHX_TOKTYPE_CONTROL, QHX_TOKTYPE_USER, QHX_TOKTYPE_UNUSED, QHX_TOKTYPE_BYTE };

typedef struct {
    int n_tokens;                 /* ids 0 .. n_tokens-1 */
    const char *const *tokens;    /* byte-level text of each id (added tokens: their text) */
    const size_t *token_len;
    const int32_t *types;         /* QHX_TOKTYPE_* of each id */
    int n_merges;                 /* by rank */
    const char *const *merges;    /* "left right", byte-level */
    const size_t *merge_len;
    const char *pre;              /* the pre-tokenizer: "qwen2" or "qwen35" */
} qhx_vocab_lists;

qhx_status qhx_tokenizer_from_lists(const qhx_vocab_lists *v, const char *name, qhx_tokenizer **out);

#endif
