/* A tiny test harness: CHECK records a failure and carries on; each test binary ends with the
 * plain "N passed, N failed" line that tests/run.sh adds up. */
#ifndef QHX_TESTLIB_H
#define QHX_TESTLIB_H
#include <stdio.h>
#include "qhexrt.h"

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
/* max |a - g| over a row of V logits, divided by the standard deviation of the golden row g (the
 * logit scale): the parity tests' measure. A NaN in a gives NaN. */
double tl_row_dev(const float *a, const float *g, int V);
/* the index of a row's largest logit (ties: the first), as greedy decoding picks it */
int tl_argmax(const float *x, int n);
/* A runtime on `kernels`, the model at dir and a session on it, CHECKed; 0 when all opened (else
 * nothing is left open). */
int tl_open(const char *dir, const char *kernels, qhx_runtime **rt, qhx_model **m, qhx_session **s);
/* the KV cache form tl_open's runtimes take: the default, or QHX_KV_F32 in the tests that hold the
 * forward to the fp32 reference's golden logits (test_kv holds the default form to f32) */
extern qhx_kv_form tl_kv;
/* QHX_TEST_QUICK=1 (make test-quick): the model-level tests run the default kernel set and the
 * forms that can fail differently, not the whole matrix. */
int tl_quick(void);
/* The kernel sets a model-level test runs, into sets[] (at most 8): one per family this CPU runs,
 * its fastest member (test_kernels holds every SIMD set to its scalar twin, so one member stands
 * for the family), the default first; quick: the default alone. Returns the count. */
int tl_kernel_families(const char **sets);
/* A JSON file, CHECKed; NULL when it cannot be read or parsed. */
struct json_t *tl_json(const char *path);
/* Reads a whole file; NULL if absent. */
void *tl_read(const char *path, size_t *len);
/* Writes a safetensors file: the header JSON (canonical) with its 8-byte length, then n bytes of
 * data (a rewritten header over an existing file's data). */
void tl_write_safetensors(const char *path, const struct json_t *header, const void *data, size_t n);

#endif
