/* bundle files: the first input byte picks the target, the rest replaces it in a real (tiny)
 * bundle: 0 = manifest.json, 1 = a decode shard, 2 = the embedding file, 3 = the compact
 * tokenizer. qhx_model_open must refuse or accept without crashing; what loads must also run. */
#include "qhexrt.h"
#include "qhexrt_tools.h"
#include "util/outdir.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[320], pristine[256];
static const char *files[] = {"manifest.json", "decode_s0_w8.qhx", "embed_f16.qhx", "tokenizer.qhxtok"};
static qhx_runtime *rt;

static void cleanup(void) {
    qhx_outdir_remove(dir);
    qhx_outdir_remove(pristine);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    snprintf(pristine, sizeof pristine, "/tmp/qhx-fuzz-bundle-%d", (int)getpid());
    snprintf(dir, sizeof dir, "%s-work", pristine);
    qhx_runtime_opts ro = {.kernels = "scalar", .n_threads = 1};
    const char *ck = getenv("QHX_FUZZ_CHECKPOINT");
    qhx_forge_opts fo = {.checkpoint = ck ? ck : "models/q35-rand-tiny", .out = pristine, .force = 1};
    atexit(cleanup);
    if (qhx_runtime_new(&ro, &rt) || (fo.rt = rt, qhx_forge(&fo))) {
        fprintf(stderr, "fuzz_bundle: %s\n", qhx_last_error());
        exit(1);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *p, size_t n) {
    if (n < 1) return 0;
    char cmd[1000], path[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", dir, pristine, dir);
    if (system(cmd)) return 0;
    snprintf(path, sizeof path, "%s/%s", dir, files[p[0] % 4]);
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    fwrite(p + 1, 1, n - 1, f);
    fclose(f);
    qhx_model *m;
    if (qhx_model_open(rt, dir, &m) == QHX_OK) {
        qhx_session *s;
        if (qhx_session_new(m, &s) == QHX_OK) {
            int32_t ids[2] = {1, 2};
            float *logits = malloc(sizeof(float) * 4096 * 2);
            qhx_model_info in;
            qhx_model_get_info(m, &in);
            if (logits && in.vocab_size <= 4096) qhx_session_eval(s, ids, 2, QHX_EVAL_SEQUENCE, logits, NULL);
            free(logits);
            qhx_session_free(s);
        }
        qhx_model_close(m);
    }
    return 0;
}
