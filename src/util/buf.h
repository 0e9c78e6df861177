/* The one growable buffer, and the one way to grow an array: capacity doubles, contents stay. */
#ifndef QHX_BUF_H
#define QHX_BUF_H
#include <stddef.h>

/* Room for `need` elements of `size` bytes in the array at *items (a T **), whose capacity *cap
 * counts elements: 0, or -1 when out of memory (the array and *cap unchanged). */
int qhx_reserve(void *items, size_t *cap, size_t need, size_t size);

/* Bytes appended at the end, NUL-terminated whenever s is set. A failed append sets oom and
 * leaves the text as it was, so builders can append freely and check once. */
typedef struct {
    char *s;
    size_t len, cap;
    int oom;
} qhx_buf;

int qhx_buf_append(qhx_buf *b, const void *p, size_t n);
int qhx_buf_puts(qhx_buf *b, const char *s);
void qhx_buf_free(qhx_buf *b);

#endif
