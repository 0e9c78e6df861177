/* Error reporting: a status code plus a thread-local one-line message, SQLite style. */
#ifndef QHX_ERROR_H
#define QHX_ERROR_H
#include "qhexrt.h"

/* Records a formatted message and returns code, so a failure path reads `return qhx_fail(...)`. */
qhx_status qhx_fail(qhx_status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void qhx_clear_error(void);

#endif
