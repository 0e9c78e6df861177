#include "util/error.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local char last_error[512];

qhx_status qhx_fail(qhx_status code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return code;
}

void qhx_clear_error(void) { last_error[0] = 0; }

const char *qhx_last_error(void) { return last_error; }

const char *qhx_status_str(qhx_status st) {
    switch (st) {
    case QHX_OK: return "ok";
    case QHX_ERR_ARG: return "bad argument";
    case QHX_ERR_IO: return "i/o error";
    case QHX_ERR_FORMAT: return "format error";
    case QHX_ERR_UNSUPPORTED: return "unsupported";
    case QHX_ERR_RANGE: return "out of range";
    case QHX_ERR_NOMEM: return "out of memory";
    case QHX_ERR_CANCELLED: return "cancelled";
    }
    return "unknown status";
}
