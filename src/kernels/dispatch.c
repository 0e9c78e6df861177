/* Run-time choice of the kernel set, and the parallel-for that splits a matmul by rows. */
#include "kernels/kernels.h"
#include "util/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const qhx_kernel_set *const all_sets[] = {
#ifdef QHX_HAVE_AVX512
    &qhx_kernels_avx512,
#endif
#ifdef QHX_HAVE_AVX2
    &qhx_kernels_avx2, &qhx_kernels_avx2_q8,
#endif
    &qhx_kernels_scalar, &qhx_kernels_scalar_q8, &qhx_kernels_ref,
};
#define N_SETS (sizeof all_sets / sizeof all_sets[0])

const char *qhx_kernels_names(void) {
    static char names[128];
    if (!names[0])
        for (size_t i = N_SETS; i-- > 0;)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", names[0] ? " " : "", all_sets[i]->name);
    return names;
}

const qhx_kernel_set *qhx_kernels_find(const char *name) {
    if (!name || !strcmp(name, "auto")) {
        const char *env = getenv("QHX_KERNELS");
        if (env && *env && strcmp(env, "auto")) return qhx_kernels_find(env);
        /* avx512 is opt-in (by name) until it has been run against its scalar twin on real
         * AVX-512 hardware; decode is bandwidth-bound, so AVX2 gives up little meanwhile */
        for (size_t i = 0; i < N_SETS; i++)
            if (strcmp(all_sets[i]->name, "avx512") && !strstr(all_sets[i]->name, "-q8") && all_sets[i]->supported())
                return all_sets[i];
    }
    for (size_t i = 0; i < N_SETS; i++) {
        if (strcmp(all_sets[i]->name, name)) continue;
        if (!all_sets[i]->supported())
            return qhx_fail(QHX_ERR_UNSUPPORTED, "kernels '%s': this CPU lacks the instructions they need", name), NULL;
        return all_sets[i];
    }
    qhx_fail(QHX_ERR_ARG, "kernels '%s': unknown (have: auto %s)", name, qhx_kernels_names());
    return NULL;
}

typedef struct {
    const qhx_kernel_set *ks;
    const qhx_tensor *W;
    const float *X;
    float *Y;
    int T;
} matmul_job;

/* Row blocks of 16 keep each thread's slice aligned to what SIMD kernels process at once. */
static void matmul_part(void *arg, int i, int n) {
    const matmul_job *j = arg;
    const int blocks = (j->W->rows + 15) / 16;
    const int b0 = (int)((long long)blocks * i / n), b1 = (int)((long long)blocks * (i + 1) / n);
    const int r0 = b0 * 16, r1 = b1 * 16 < j->W->rows ? b1 * 16 : j->W->rows;
    if (r0 < r1) j->ks->matmul(j->W, j->X, j->T, j->Y, r0, r1);
}

void qhx_matmul(const qhx_exec *ex, const qhx_tensor *W, const float *X, int T, float *Y) {
    matmul_job j = {ex->ks, W, X, Y, T};
    if (!ex->pool || W->rows < 64) ex->ks->matmul(W, X, T, Y, 0, W->rows);
    else qhx_pool_run(ex->pool, matmul_part, &j);
}
