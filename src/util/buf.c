#include "util/buf.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int qhx_reserve(void *items, size_t *cap, size_t need, size_t size) {
    if (need <= *cap) return 0;
    size_t n = *cap ? *cap : 16;
    while (n < need) n = n > SIZE_MAX / 2 ? need : 2 * n;
    if (n > SIZE_MAX / size) return -1;
    void *old, *p;
    memcpy(&old, items, sizeof old); /* a T *, whatever T: through memcpy, not a void ** lvalue */
    if (!(p = realloc(old, n * size))) return -1;
    memcpy(items, &p, sizeof p);
    *cap = n;
    return 0;
}

int qhx_buf_append(qhx_buf *b, const void *p, size_t n) {
    if (b->oom || n > SIZE_MAX - b->len - 1 || qhx_reserve(&b->s, &b->cap, b->len + n + 1, 1)) {
        b->oom = 1;
        return -1;
    }
    if (n) memcpy(b->s + b->len, p, n);
    b->len += n;
    b->s[b->len] = 0;
    return 0;
}

int qhx_buf_puts(qhx_buf *b, const char *s) { return qhx_buf_append(b, s, strlen(s)); }

void qhx_buf_free(qhx_buf *b) {
    free(b->s);
    memset(b, 0, sizeof *b);
}
