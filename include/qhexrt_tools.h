/*
 * qhexrt tools: what `qhx forge`, `qhx synth` and `qhx bench` run, beside the stable API of
 * qhexrt.h. Same conventions: a qhx_status from every call, qhx_last_error() for the reason, and
 * the library never prints (progress through a qhx_progress_fn, reports through a callback).
 */
#ifndef QHEXRT_TOOLS_H
#define QHEXRT_TOOLS_H
#include "qhexrt.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __GNUC__
#pragma GCC visibility push(default)
#endif

/* ---- benchmarks' probes ----------------------------------------------------------------------- */

/* Measures this machine's memory read bandwidth in GB/s with the runtime's threads (best of a few
 * passes over `bytes` of memory; 0 = 1 GiB). The yardstick for decode speed. */
double qhx_runtime_read_bandwidth(qhx_runtime *rt, size_t bytes);

/* One pass of the plain read loop of qhx_runtime_read_bandwidth over the model's mapped weight
 * files, on the runtime's threads: the yardstick measured on the very pages decode streams.
 * bytes / seconds is the read bandwidth of that moment; `qhx bench` interleaves such passes with
 * decode so both see the same machine. */
typedef struct {
    uint64_t bytes;
    double seconds;
} qhx_read_probe;
qhx_read_probe qhx_model_read_weights(qhx_model *m);

/* Seconds the model's MTP head takes to draft n tokens after tok, from a drafter started on s
 * whose last evaluation was one token (its first step takes that position in, as in decoding);
 * negative on failure (qhx_last_error). */
double qhx_bench_mtp_draft(qhx_session *s, int32_t tok, int n);

/* The summed negative log-likelihood (natural log) of ids[0, n) under the session's model, and
 * how many tokens it scores: the text in consecutive windows of ctx tokens (the last may be
 * shorter), each from a fresh state, every token of a window but its first scored. second_half:
 * llama.cpp's definition (llama-perplexity): whole windows only, each scored past its first half.
 * perplexity = exp(nll / scored). progress (may be NULL) hears after each window. */
qhx_status qhx_perplexity(qhx_session *s, const int32_t *ids, size_t n, size_t ctx, int second_half, double *nll,
                          size_t *scored, void (*progress)(size_t done, size_t total, void *user), void *user);

/* ---- the forge and synthetic checkpoints (what `qhx forge` and `qhx synth` run) ------------ */

typedef struct {
    const char *checkpoint, *out;  /* a Hugging Face checkpoint directory -> a bundle directory */
    uint64_t max_context_bytes;    /* per-shard byte ceiling; 0: 2 GiB (the 4B shape -> 2 shards) */
    int context_len;               /* 0: min(max_position_embeddings, 4096) */
    const char *weights;           /* decoder matrices: "w8" (default) or "w4" (docs/bundle.md) */
    const char *lmhead;            /* "f16" (default), "w8" or "w4" */
    int force;                     /* replace an existing bundle (only once the new one is complete) */
    int gate;                      /* run the gates; a failed gate fails the forge */
    int gate_tokens;               /* greedy gate: tokens per prompt (0: 64) */
    int gate_trials;               /* export gate: random inputs per shard (0: 5) */
    qhx_progress_fn progress;      /* writing progress (NULL: none) */
    void *progress_user;
    /* the report: plan, sizes and every gate result, a line a call, without its newline (NULL:
     * none; the manifest holds them all too) */
    void (*report)(const char *line, void *user);
    void *report_user;
    qhx_runtime *rt;               /* kernels and threads for the gates (NULL: defaults) */
    /* instead of a checkpoint: a synthetic preset (qhx_synth_preset_info) whose seeded weights are
     * drawn as they are written, for shapes too large to store in BF16 first; no gates */
    const char *synth;
    uint64_t seed;
} qhx_forge_opts;

/* Forges a checkpoint into a W8 or W4 bundle (docs/bundle.md). Written under a temporary name and
 * renamed: a failure leaves nothing behind. */
qhx_status qhx_forge(const qhx_forge_opts *opts);

/* The i-th synthetic preset's name and description; returns 0 past the last one. */
int qhx_synth_preset_info(int i, const char **name, const char **about);
/* Writes a Hugging Face checkpoint of a preset shape with seeded random weights to dir
 * (atomically; an existing dir only with force). */
qhx_status qhx_synth(const char *preset, uint64_t seed, const char *dir, int force, qhx_progress_fn progress,
                     void *progress_user);

#ifdef __GNUC__
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif
#endif
