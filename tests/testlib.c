#include "testlib.h"

#include <stdlib.h>

int tl_passed, tl_failed;

int tl_finish(const char *suite) {
    printf("%s: %d passed, %d failed\n", suite, tl_passed, tl_failed);
    return tl_failed ? 1 : 0;
}

void *tl_read(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) { free(buf); buf = NULL; }
    if (buf) buf[n] = 0;
    fclose(f);
    if (len) *len = (size_t)n;
    return buf;
}
