/* The kernel sets: each a vector layer's fp32 ops composed with its int8-dot specialisation (how
 * W8 and W4 matrices meet their rounded activations), and the CPU features it needs. A new ISA
 * adds a vector layer (kernels/vec_<isa>.h + fp32_<isa>.c), its int8-dot kernels, and a line here. */
#include "kernels/kernels.h"
#include "util/error.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *layer;          /* the set's name */
    const qhx_fp32_ops *fp32;
    const qhx_acts_ops *acts;   /* NULL: fp32 activations throughout */
    unsigned needs;             /* QHX_CPU_* */
} recipe;

/* In the order "auto" tries them: the first this CPU runs is the default (an Armv8.0 CPU, without
 * sdot, runs scalar). A set is a vector layer; the activation form follows the weight type, as in
 * ggml: W8 matrices take int16 activations (exact enough to keep the greedy parity of fp32 ones),
 * W4 int8, fp32/bf16/fp16 fp32. ref is the fp32 oracle. bench/README.md says which sets went and
 * why. */
static const recipe recipes[] = {
#ifdef QHX_HAVE_NEON
    {"neon-i8mm", &qhx_fp32_neon, &qhx_acts_i8mm_q16, QHX_CPU_NEON | QHX_CPU_NEON_DOT | QHX_CPU_NEON_I8MM},
    {"neon", &qhx_fp32_neon, &qhx_acts_neon_q16, QHX_CPU_NEON | QHX_CPU_NEON_DOT},
#endif
#ifdef QHX_HAVE_AVX512
    {"avx512", &qhx_fp32_avx512, &qhx_acts_vnni_q16, QHX_CPU_AVX512 | QHX_CPU_AVX512_VNNI},
#endif
#ifdef QHX_HAVE_AVX2
    {"avx2", &qhx_fp32_avx2, &qhx_acts_avx2_q16, QHX_CPU_AVX2},
#endif
    {"scalar", &qhx_fp32_scalar, &qhx_acts_scalar_q16, 0},
    {"ref", &qhx_fp32_ref, NULL, 0},
};
#define N_SETS (sizeof recipes / sizeof recipes[0])

static qhx_kernel_set sets[N_SETS];
static char all_names[N_SETS * 16];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void compose(void) {
    const unsigned cpu = qhx_cpu_features();
    for (size_t i = 0; i < N_SETS; i++) {
        const recipe *r = &recipes[i];
        sets[i] = (qhx_kernel_set){.name = r->layer, .matmul = r->fp32->matmul,
                                   .gemm = r->fp32->gemm, .delta_rule = r->fp32->delta_rule, .silu = r->fp32->silu, .conv = r->fp32->conv,
                                   .attend = r->fp32->attend, .softmax_tile = r->fp32->softmax_tile, .kv_widen = r->fp32->kv_widen,
                                   .ieee = r->fp32 == &qhx_fp32_ref, .supported = (cpu & r->needs) == r->needs};
        if (r->acts)
            sets[i].matmul_acts = r->acts->matmul, sets[i].decode_acts = r->acts->decode, sets[i].acts = r->acts->form, sets[i].round_acts = r->acts->round,
            sets[i].round_q8 = r->acts->round_q8, sets[i].w4_prep = r->acts->w4_prep,
            sets[i].panel_rows = r->acts->panel_rows, sets[i].matmul_acts_w4 = r->acts->matmul_w4;
    }
    for (size_t i = N_SETS; i-- > 0;)
        snprintf(all_names + strlen(all_names), sizeof all_names - strlen(all_names), "%s%s", all_names[0] ? " " : "", recipes[i].layer);
}

const char *qhx_kernels_names(void) {
    pthread_once(&once, compose);
    return all_names;
}

const qhx_kernel_set *qhx_kernels_find(const char *name) {
    pthread_once(&once, compose);
    if (!name || !strcmp(name, "auto")) {
        const char *env = getenv("QHX_KERNELS");
        if (env && *env && strcmp(env, "auto")) return qhx_kernels_find(env);
        for (size_t i = 0; i < N_SETS; i++)
            if (sets[i].supported) return &sets[i]; /* scalar runs everywhere */
    }
    for (size_t i = 0; i < N_SETS; i++) {
        if (strcmp(sets[i].name, name)) continue;
        if (!sets[i].supported)
            return qhx_fail(QHX_ERR_UNSUPPORTED, "kernels '%s': this CPU lacks the instructions they need", name), NULL;
        return &sets[i];
    }
    qhx_fail(QHX_ERR_ARG, "kernels '%s': unknown (have: auto %s)", name, all_names);
    return NULL;
}
