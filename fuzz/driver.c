/* Runs a libFuzzer harness without libFuzzer: each argument is an input file, run once. Built with
 * the normal compiler (and under ASan/UBSan in make test-asan), so the seed corpus and every input
 * that once crashed (fuzz/regress/) are replayed by the ordinary test suite. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));
/* A harness that opens something once in LLVMFuzzerInitialize closes it here, so that memcheck
 * (tests/fuzz_regress.sh under QHX_VALGRIND) sees no threads or blocks left at exit. */
void qhx_fuzz_cleanup(void) __attribute__((weak));

int main(int argc, char **argv) {
    if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
    for (int i = 1; i < argc; i++) {
        FILE *f = fopen(argv[i], "rb");
        if (!f) { perror(argv[i]); return 1; }
        size_t cap = 1 << 16, n = 0, got;
        unsigned char *buf = malloc(cap);
        while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0)
            if ((n += got) == cap) {
                unsigned char *b = realloc(buf, cap *= 2);
                if (!b) { free(buf); buf = NULL; }
                else buf = b;
            }
        fclose(f);
        if (!buf) { fprintf(stderr, "%s: out of memory\n", argv[i]); return 1; }
        LLVMFuzzerTestOneInput(buf, n);
        free(buf);
    }
    if (qhx_fuzz_cleanup) qhx_fuzz_cleanup();
    return 0;
}
