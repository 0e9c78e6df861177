/* The forge's stages (src/forge/forge.c runs them in this order): plan, export, gates, publish.
 * Internal to the forge. */
#ifndef QHX_FORGE_INTERNAL_H
#define QHX_FORGE_INTERNAL_H
#include "forge/forge.h"
#include "model/qwen35.h"

#include "util/json.h"
#include <stdio.h>

typedef struct {
    const qhx_forge_opts *o;
    qhx_model *src;            /* the checkpoint, on the reference runtime */
    qhx_tensor_spec *specs;
    int n_specs;
    char *tmp;                 /* the bundle being written (qhx_outdir_begin) */
    uint64_t bundle_id, model_hash;
    char *model_json;
    json_t *files;              /* name -> {bytes, xxh3} */
    qhx_dtype matrices;        /* QHX_I8 (W8) or QHX_Q4 (W4) */
    const char *layout;        /* QHX_LAYOUT_W8 or QHX_LAYOUT_W4 */
    double qerr_num, qerr_den; /* weight quantization error, summed over matrices */
    uint64_t done_bytes, total_bytes;
} forge;

/* bytes a tensor takes in a bundle file, padding and scales included */
uint64_t forge_spec_bytes(const forge *f, const qhx_tensor_spec *s);
/* 1. decode shards: first[i] is shard i's first layer, first[n_shards] the layer count */
qhx_status forge_plan(forge *f, int *n_shards, int *first, uint64_t ceiling);
/* 2. every shard file, the embedding and the lm-head into f->tmp, hashed into f->files */
qhx_status forge_export_all(forge *f, json_t *plan_json, const int *first, int n_shards, qhx_dtype head_dt);
qhx_status forge_copy_tokenizer(forge *f);
/* 3. the gates on the written bundle b, their results added to gates */
qhx_status forge_gate_export(forge *f, qhx_model *b, json_t *gates, int *passed, int *total);
qhx_status forge_gate_greedy(forge *f, qhx_model *b, json_t *gates, int *matched, int *total, int *ok);
/* 4. manifest.json, written last */
qhx_status forge_write_manifest(forge *f, json_t *root);
uint64_t forge_random_id(void);
void forge_hex64(char out[17], uint64_t v);

/* one line of the report (opts.report), printf-style */
void forge_say(const forge *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
