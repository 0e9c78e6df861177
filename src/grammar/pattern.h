/* JSON Schema's `pattern` (an ECMAScript regular expression) as a GBNF expression. */
#ifndef QHX_PATTERN_H
#define QHX_PATTERN_H
#include "util/buf.h"

/* Appends to body a GBNF expression matching the bodies of the JSON strings (the text between the
 * quotes, escapes included) whose value the regex matches somewhere, as `pattern` means it (only
 * ^ and $ anchor). Helper rules go to rules, named prefix-N. Constructs a grammar cannot express
 * (backreferences, lookaround, word boundaries) fail with a message naming them: -1. */
int qhx_pattern_gbnf(const char *re, const char *prefix, qhx_buf *rules, qhx_buf *body);
#endif
