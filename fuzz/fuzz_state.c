/* State files (qhx_snapshot_load, and the prefix cache's directory, whose index reads their
 * headers alone). The first input byte picks the form: even, the rest is the whole file; odd, the
 * rest is (offset, byte) pairs XORed into a real state file of the tiny model whose checksum is
 * then made right again, so the checks behind the checksum (shapes, position, sizes, token ids)
 * get the mutations. What loads must restore and run. The cache's index must take a file exactly
 * when it loads (the odd form; the even one may also fail its checksum, found on reading), and a
 * prompt of the file's tokens and one more must resume from it. */
#include "qhexrt.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

static char dir[256], path[300];
static unsigned char *pristine;
static size_t pristine_n;
static qhx_runtime *rt;
static qhx_model *m;
static qhx_session *s;
static int32_t im_start = -1;

void qhx_fuzz_cleanup(void) {
    qhx_session_free(s);
    qhx_model_close(m);
    qhx_runtime_free(rt);
    free(pristine);
    unlink(path);
    rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    snprintf(dir, sizeof dir, "/tmp/qhx-fuzz-state-%d", (int)getpid());
    snprintf(path, sizeof path, "%s/x.qhxstate", dir);
    mkdir(dir, 0700);
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
    qhx_tokenizer *tok;
    if (qhx_model_tokenizer(m, &tok) == QHX_OK) im_start = qhx_tokenizer_find_added(tok, "<|im_start|>");
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
    qhx_prefix_cache *pc = NULL;
    qhx_prefix_cache_stats st = {0};
    if (qhx_prefix_cache_new(m, 1u << 30, &pc) || qhx_prefix_cache_set_dir(pc, dir, 1u << 30)) abort();
    qhx_prefix_cache_get_stats(pc, &st);
    int pos = 0;
    int32_t *ids = NULL;
    if (qhx_snapshot_load(m, path, &snap) == QHX_OK) {
        qhx_snapshot_info info;
        qhx_snapshot_get_info(snap, &info);
        pos = info.pos;
        const int32_t next = 7;
        if ((ids = malloc(sizeof(int32_t) * ((size_t)pos + 1)))) qhx_snapshot_tokens(snap, ids, pos), ids[pos] = next;
        if (qhx_session_restore(s, snap) == QHX_OK) qhx_session_eval(s, &next, 1, QHX_EVAL_STEPWISE, NULL, NULL);
        qhx_snapshot_free(snap);
        qhx_session_reset(s);
    }
    /* indexed exactly when it loads (a state of no tokens is not kept); its prompt resumes there */
    const int loads = ids != NULL && pos > 0;
    if ((p[0] % 2 || loads) && (st.dir_files == 1) != loads) abort();
    int plain = 1; /* no chat markers: the prompt's one split point is before its last token */
    for (int i = 1; loads && i < pos; i++) plain &= ids[i] != im_start;
    if (loads && plain && qhx_prefix_cache_lookup(pc, s, ids, pos + 1) != pos) abort();
    qhx_prefix_cache_free(pc);
    free(ids);
    qhx_session_reset(s);
    return 0;
}
