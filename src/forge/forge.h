/* `qhx forge`: a Hugging Face checkpoint -> a W8 multi-shard bundle, then the seed's two gates
 * (oracle-gated export per shard, greedy end to end) against the fp32 reference. */
#ifndef QHX_FORGE_H
#define QHX_FORGE_H
#include <stdint.h>
#include <stdio.h>
#include "qhexrt.h"

#define QHX_FORGE_DEFAULT_CEILING (2ull << 30) /* the 4B shape -> 2 shards of ~1.8 GB, as in the seed */

typedef struct {
    const char *checkpoint, *out;
    uint64_t max_context_bytes;   /* per-shard byte ceiling; 0 = QHX_FORGE_DEFAULT_CEILING */
    int context_len;              /* 0 = min(max_position_embeddings, 4096) */
    const char *lmhead;           /* "f16" (default) or "w8" */
    int force;
    int gate;                     /* run the gates and fail the forge when one fails */
    int gate_tokens;              /* greedy gate: tokens per prompt (0 = 64) */
    int gate_trials;              /* export gate: random inputs per shard (0 = 5) */
    int progress;                 /* progress lines on stderr */
    qhx_runtime *rt;              /* the runtime the bundle is gated on */
} qhx_forge_opts;

/* Writes the bundle and reports what it did (plan, sizes, gate results) on `log`. */
qhx_status qhx_forge(const qhx_forge_opts *o, FILE *log);

/* The quantizer, shared with the tests: one symmetric int8 row, scale = max|w| / 127. */
float qhx_quantize_row(const float *w, int n, int8_t *q);

#endif
