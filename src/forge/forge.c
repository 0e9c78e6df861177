/*
 * The forge: checkpoint -> bundle.
 *
 *   1. plan     decode shards by contiguous layer range, as few as fit the per-shard byte ceiling,
 *               then balanced (the largest shard as small as that count allows)
 *   2. export   each shard's matrices as int8 with one fp32 scale per output row (W8 weight-only),
 *               small tensors fp32; the embedding fp16; the lm-head fp16 (or W8), stored once when
 *               tied; the tokenizer; every file hashed as it is written
 *   3. gate     oracle-gated export (each shard vs the fp32 reference on random hidden states) and
 *               the greedy gate (the bundle end to end vs the reference on a prompt suite)
 *   4. publish  manifest.json last, then the directory renamed into place
 *
 * Each stage has its file: forge_plan.c, forge_export.c, forge_gate.c (forge_internal.h).
 *
 * Why per-row scales: measured end to end on the bundled trained model (docs/bundle.md,
 * bench/w8_greedy.c), no finer group (128, 64, 32 columns) makes int8 weights greedy-exact, and
 * each costs a scale load per group in the kernels and 3-12 % more bytes per decoded token.
 */
#include "forge/forge_internal.h"
#include "model/model.h"
#include "format/w4.h"
#include "model/ops.h"
#include "util/error.h"
#include "util/half.h"
#include "util/outdir.h"
#include "util/rng.h"

#include "util/json.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

void forge_say(const forge *f, const char *fmt, ...) {
    if (!f->o->report) return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    f->o->report(line, f->o->report_user);
}

qhx_status qhx_forge(const qhx_forge_opts *o) {
    if (!(o->checkpoint || o->synth) || !o->out) return qhx_fail(QHX_ERR_ARG, "forge: needs a checkpoint (or GGUF) and an output directory");
    if (o->synth && o->gate) return qhx_fail(QHX_ERR_ARG, "forge: a synthetic preset has no reference to gate against");
    const qhx_dtype head_dt = !o->lmhead || !strcmp(o->lmhead, "f16") ? QHX_F16
                              : !strcmp(o->lmhead, "w8")               ? QHX_I8
                              : !strcmp(o->lmhead, "w4")               ? QHX_Q4
                                                                       : QHX_DT_OTHER;
    if (head_dt == QHX_DT_OTHER) return qhx_fail(QHX_ERR_ARG, "--lmhead: '%s' is not f16, w8 or w4", o->lmhead);
    const int w4 = o->weights && !strcmp(o->weights, "w4");
    if (o->weights && !w4 && strcmp(o->weights, "w8")) return qhx_fail(QHX_ERR_ARG, "--weights: '%s' is not w8 or w4", o->weights);
    forge f = {.o = o, .matrices = w4 ? QHX_Q4 : QHX_I8, .layout = w4 ? QHX_LAYOUT_W4 : QHX_LAYOUT_W8};
    qhx_runtime *ref_rt = NULL;
    qhx_model *b = NULL;
    json_t *root = NULL;
    int *first = NULL, n_shards = 0;
    /* The reference: the checkpoint's own weights in fp32 arithmetic, on the same kernel set (its
     * bf16/f32 kernels are tested against the double-accumulating "ref" set to ~1e-7). */
    qhx_status rc = QHX_OK;
    if (!o->rt) rc = qhx_runtime_new(NULL, &ref_rt);
    if (!rc) rc = o->synth ? qhx_synth_model(o->rt ? o->rt : ref_rt, o->synth, o->seed, &f.src)
           : o->gate ? qhx_model_open(o->rt ? o->rt : ref_rt, o->checkpoint, &f.src)
                     : qhx_model_open_rows(o->rt ? o->rt : ref_rt, o->checkpoint, &f.src); /* nothing runs the source */
    if (!rc && f.src->manifest) rc = qhx_fail(QHX_ERR_ARG, "%s: is a bundle already; forge needs a checkpoint or a GGUF", o->checkpoint);
    if (!rc && o->gate && f.src->src->row)
        rc = qhx_fail(QHX_ERR_ARG, "%s: decoded to fp32 it takes %.1f GB, more than memory holds, so the gates cannot run it as the "
                                   "reference: forge it with --no-gate", o->checkpoint, (double)f.src->rows_bytes / 1e9);
    if (rc) goto out;
    const qhx_config *c = &f.src->cfg;
    int ctx = o->context_len ? o->context_len : (c->max_pos < 4096 ? c->max_pos : 4096);
    if (ctx < 1 || ctx > c->max_pos) {
        rc = qhx_fail(QHX_ERR_ARG, "--context-len %d: must be in [1, %d] (max_position_embeddings)", ctx, c->max_pos);
        goto out;
    }
    f.n_specs = qhx_qwen35_specs(c, "", f.src->w, NULL);
    f.specs = calloc((size_t)f.n_specs, sizeof *f.specs);
    f.model_json = qhx_config_to_json(c);
    f.files = json_object();
    root = json_object();
    if (!f.specs || !f.model_json || !f.files || !root) { rc = qhx_fail(QHX_ERR_NOMEM, "out of memory"); goto out; }
    qhx_qwen35_specs(c, "", f.src->w, f.specs); /* dst: the checkpoint's own tensors, the sources */
    f.model_hash = XXH3_64bits(f.model_json, strlen(f.model_json));
    f.bundle_id = forge_random_id();
    const uint64_t ceiling = o->max_context_bytes ? o->max_context_bytes : QHX_FORGE_DEFAULT_CEILING;
    if (!(first = calloc((size_t)c->n_layers + 1, sizeof *first))) { rc = qhx_fail(QHX_ERR_NOMEM, "out of memory"); goto out; }
    if ((rc = forge_plan(&f, &n_shards, first, ceiling))) goto out;
    if ((rc = qhx_outdir_begin(o->out, o->force, &f.tmp))) goto out;
    for (int i = 0; i < f.n_specs; i++) f.total_bytes += forge_spec_bytes(&f, &f.specs[i]);
    f.total_bytes += (uint64_t)c->vocab_size * c->hidden * (head_dt == QHX_F16 ? 2 : 3); /* + the fp16 embedding */

    char hex[17];
    json_object_set_new(root, "format", json_string("qhexrt-bundle"));
    json_object_set_new(root, "schema_version", qhx_json_number(QHX_BUNDLE_SCHEMA));
    forge_hex64(hex, f.bundle_id);
    json_object_set_new(root, "bundle_id", json_string(hex));
    forge_hex64(hex, f.model_hash);
    json_object_set_new(root, "model_hash", json_string(hex));
    json_object_set_new(root, "model", json_loads(f.model_json, 0, NULL));
    json_object_set_new(root, "context_length", qhx_json_number(ctx));
    json_t *target = qhx_json_add(root, "target", json_object());
    json_object_set_new(target, "backend", json_string("cpu"));
    json_object_set_new(target, "target", json_string(QHX_TARGET));
    json_object_set_new(target, "weight_layout", json_string(f.layout));
    json_t *plan_json = qhx_json_add(root, "plan", json_object());
    json_object_set_new(plan_json, "host_op", json_string("qwen3_5_generate"));
    json_object_set_new(plan_json, "max_context_bytes", qhx_json_number((double)ceiling));
    if ((rc = forge_export_all(&f, plan_json, first, n_shards, head_dt)) || (rc = forge_copy_tokenizer(&f))) goto out;
    if (json_object_get(f.files, "tokenizer.qhxtok")) {
        json_t *tk = qhx_json_add(plan_json, "tokenizer", json_object());
        if (json_object_get(f.files, "tokenizer.json")) json_object_set_new(tk, "json", json_string("tokenizer.json"));
        json_object_set_new(tk, "compact", json_string("tokenizer.qhxtok"));
    }
    json_t *q = qhx_json_add(root, "quantization", json_object());
    json_object_set_new(q, "matrices", json_string(w4 ? "4-bit codes, symmetric, one fp16 scale per 32 columns of a row (least squares)"
                                                     : "int8, symmetric, one fp32 scale per output row (max|w|/127)"));
    json_object_set_new(q, "other", json_string("norms, conv, A_log, dt_bias in fp32; embedding fp16"));
    json_object_set_new(q, "weight_rel_rms_error", qhx_json_number(sqrt(f.qerr_num / (f.qerr_den > 0 ? f.qerr_den : 1))));
    json_object_set_new(root, "files", f.files);
    f.files = NULL;
    char synth_name[160];
    snprintf(synth_name, sizeof synth_name, "qhx synth --preset %s --seed %llu", o->synth ? o->synth : "", (unsigned long long)o->seed);
    json_object_set_new(root, "source", json_string(o->synth ? synth_name : o->checkpoint));
    json_object_set_new(root, "created_by", json_string("qhexrt " QHX_VERSION));
    json_t *gates = qhx_json_add(root, "gates", json_object());
    json_object_set_new(gates, "run", json_boolean(o->gate));
    if ((rc = forge_write_manifest(&f, root))) goto out;
    forge_say(&f, "forge: %d decode shard%s under %llu bytes each; weight quantization error %.3f %% (relative RMS)",
            n_shards, n_shards > 1 ? "s" : "", (unsigned long long)ceiling, 100 * sqrt(f.qerr_num / (f.qerr_den > 0 ? f.qerr_den : 1)));

    if (o->gate) {
        if ((rc = qhx_model_open(f.src->rt, f.tmp, &b))) goto out;
        int ep = 0, et = 0, gm = 0, gt = 0, gok = 1;
        if ((rc = forge_gate_export(&f, b, gates, &ep, &et)) || (rc = forge_gate_greedy(&f, b, gates, &gm, &gt, &gok))) goto out;
        forge_say(&f, "gates: oracle-gated export %d/%d, greedy %d/%d tokens%s", ep, et, gm, gt, gok ? "" : " (a divergence is not a near-tie)");
        if ((rc = forge_write_manifest(&f, root))) goto out;
        if (ep != et || !gok) {
            rc = qhx_fail(QHX_ERR_FORMAT, "forge: the %s gate failed (see above); nothing was written (--no-gate skips the gates)",
                          ep != et ? "export" : "greedy");
            goto out;
        }
    }
    qhx_model_close(b);
    b = NULL;
    rc = qhx_outdir_publish(f.tmp, o->out);
    if (!rc) free(f.tmp), f.tmp = NULL;
out:
    qhx_model_close(b);
    if (f.tmp) qhx_outdir_remove(f.tmp);
    free(f.tmp);
    qhx_model_close(f.src);
    qhx_runtime_free(ref_rt);
    free(first);
    free(f.specs);
    free(f.model_json);
    json_decref(f.files);
    json_decref(root);
    return rc;
}

