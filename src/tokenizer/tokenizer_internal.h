/* The tokenizer's tables, shared by the loader (tokenizer_load.c) and the encoder/decoder. */
#ifndef QHX_TOKENIZER_INTERNAL_H
#define QHX_TOKENIZER_INTERNAL_H
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <pthread.h>
#include "qhexrt.h"
#include "util/hashmap.h"

/* ids a tokenizer may have (vocabulary, merges, added tokens): past it a file is corrupt */
#define QHX_TOK_MAX_IDS (1 << 24)

typedef struct {
    char *content;
    size_t len;
    int32_t id;
    int special, lstrip, rstrip;
} qhx_added_token;

enum { QHX_NORM_NONE = 0 }; /* otherwise a set of utf8proc options */

struct qhx_tokenizer {
    qhx_strmap vocab;         /* raw bytes -> id, regular BPE tokens */
    const char **piece;           /* id -> raw bytes, every id (added tokens too); NULL for gaps; never
                                 owned alone (they lie in the vocab, the added tokens or the file) */
    uint32_t *piece_len;
    uint32_t max_piece;      /* an upper bound on piece_len (a replaced piece may have been longer) */
    int n_ids;               /* one past the largest id seen */
    int id_cap;
    qhx_u64map merges;        /* (left << 32 | right) -> (rank << 32 | merged id) */
    int32_t byte_id[256];     /* the token of each single byte */
    qhx_added_token *added;
    int n_added;
    uint8_t added_first[256]; /* 1 if some added token starts with this byte */
    int norm;                 /* utf8proc options, or QHX_NORM_NONE */
    pcre2_code *split;        /* the pre-tokenizer regex (NULL: no split) */
    char *split_pattern;      /* its source, for the compact form */
    int add_prefix_space, ignore_merges;
    void *blob;               /* a compact file's bytes, when the tables point into them */
    /* word cache: piece bytes -> offset into cache_ids ([count, ids...]) */
    pthread_mutex_t lock;
    qhx_strmap cache;
    int32_t *cache_ids;
    size_t cache_len, cache_cap;
    struct qhx_trie *trie;    /* the pieces as a trie, for grammars: built on first use (under lock) */
};

/* GPT-2's byte <-> printable-unicode map used by byte-level BPE files. */
void qhx_bytelevel_tables(uint32_t byte_to_cp[256]);
/* Byte-level token text -> raw bytes, in place (the result is never longer); characters outside
 * the byte alphabet keep their UTF-8 bytes. cp_to_byte: the inverse of qhx_bytelevel_tables, -1
 * where a code point below 512 stands for no byte. */
size_t qhx_unbytelevel(char *s, size_t len, const int16_t cp_to_byte[512]);
/* Records id's piece. Pieces are never owned alone: a vocab token's lies in the vocab's record, an
 * added token's is its content, a compact form's lies in the file. */
qhx_status qhx_tok_set_piece(qhx_tokenizer *t, int32_t id, const char *bytes, size_t len, const char *name);

qhx_status qhx_tokenizer_parse(const char *json, size_t len, const char *name, qhx_tokenizer **out);
qhx_status qhx_tokenizer_compile_split(qhx_tokenizer *t, const char *pattern, const char *name);
/* The pattern with each \p{X} widened to what X means in utf8proc's newer Unicode (unicode_props.c);
 * malloc'd, NULL when out of memory. */
char *qhx_regex_newer_unicode(const char *pattern);
/* An empty tokenizer with id tables for n_ids ids (the loaders fill it). */
qhx_tokenizer *qhx_tokenizer_alloc(int n_ids);

/* The compact binary form (tokenizer_compact.c): the same tables, loaded without JSON parsing. */
#define QHX_TOK_MAGIC "QHXTOK\r\n"
/* The tokenizer points into p (8-byte aligned), which must outlive it. */
qhx_status qhx_tokenizer_parse_compact(const unsigned char *p, size_t len, const char *name, qhx_tokenizer **out);
/* Sets the size and checksum fields of a compact form in memory (the fuzzer's way past them). */
void qhx_tokenizer_compact_seal(unsigned char *p, size_t len);

#endif
