/* State files (qhx_snapshot_load). The first input byte picks the form: even, the rest is the
 * whole file; odd, the rest is (offset, byte) pairs XORed into a real state file of the tiny
 * model whose checksum is then made right again, so the checks behind the checksum (shapes,
 * position, sizes, token ids) get the mutations. What loads must restore and run. */
#include "qhexrt.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

static char path[256];
static unsigned char *pristine;
static size_t pristine_n;
static qhx_runtime *rt;
static qhx_model *m;
static qhx_session *s;

void qhx_fuzz_cleanup(void) {
    qhx_session_free(s);
    qhx_model_close(m);
    qhx_runtime_free(rt);
    free(pristine);
    unlink(path);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    snprintf(path, sizeof path, "/tmp/qhx-fuzz-state-%d", (int)getpid());
    qhx_runtime_opts ro = {.kernels = "scalar", .n_threads = 1};
    const char *ck = getenv("QHX_FUZZ_CHECKPOINT");
    const int32_t ids[5] = {1, 2, 3, 4, 5};
    qhx_snapshot *snap = NULL;
    FILE *f = NULL;
    if (qhx_runtime_new(&ro, &rt) || qhx_model_open(rt, ck ? ck : "models/q35-rand-tiny", &m) || qhx_session_new(m, &s) ||
        qhx_session_eval(s, ids, 5, QHX_EVAL_SEQUENCE, NULL, NULL) || qhx_session_snapshot(s, &snap) ||
        qhx_snapshot_save(snap, path) || !(f = fopen(path, "rb"))) {
        fprintf(stderr, "fuzz_state: %s\n", qhx_last_error());
        exit(1);
    }
    qhx_snapshot_free(snap);
    fseek(f, 0, SEEK_END);
    pristine_n = (size_t)ftell(f);
    rewind(f);
    pristine = malloc(pristine_n);
    if (!pristine || fread(pristine, 1, pristine_n, f) != pristine_n) exit(1);
    fclose(f);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *p, size_t n) {
    if (n < 1) return 0;
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    if (p[0] % 2 == 0) {
        fwrite(p + 1, 1, n - 1, f);
    } else {
        unsigned char *b = malloc(pristine_n);
        if (!b) { fclose(f); return 0; }
        memcpy(b, pristine, pristine_n);
        for (size_t i = 1; i + 2 < n; i += 3) b[((size_t)p[i] << 8 | p[i + 1]) % (pristine_n - 8)] ^= p[i + 2];
        const uint64_t sum = XXH3_64bits(b, pristine_n - 8);
        memcpy(b + pristine_n - 8, &sum, 8);
        fwrite(b, 1, pristine_n, f);
        free(b);
    }
    fclose(f);
    qhx_snapshot *snap = NULL;
    if (qhx_snapshot_load(m, path, &snap) == QHX_OK) {
        const int32_t next = 7;
        if (qhx_session_restore(s, snap) == QHX_OK) qhx_session_eval(s, &next, 1, QHX_EVAL_STEPWISE, NULL, NULL);
        qhx_snapshot_free(snap);
        qhx_session_reset(s);
    }
    return 0;
}
