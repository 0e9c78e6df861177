/* A tiny test harness: CHECK records a failure and carries on; each test binary ends with the
 * plain "N passed, N failed" line that tests/run.sh adds up. */
#ifndef QHX_TESTLIB_H
#define QHX_TESTLIB_H
#include <stdio.h>

extern int tl_passed, tl_failed;

#define CHECK(cond, ...)                                                        \
    do {                                                                        \
        if (cond) tl_passed++;                                                  \
        else {                                                                  \
            tl_failed++;                                                        \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);     \
            fprintf(stderr, __VA_ARGS__);                                       \
            fputc('\n', stderr);                                                \
        }                                                                       \
    } while (0)

/* Prints the summary and returns the process exit code. */
int tl_finish(const char *suite);
/* Reads a whole file; NULL if absent. */
void *tl_read(const char *path, size_t *len);

#endif
