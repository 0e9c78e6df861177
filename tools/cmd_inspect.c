/* qhx inspect: what a bundle or checkpoint holds, the kernels it runs on, its state footprint. */
#include "cli.h"
#include "qhexrt.h"

#include <jansson.h>

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
/* ---- qhx inspect ----------------------------------------------------------------------------- */

static const char inspect_help[] =
    "usage: qhx inspect MODEL\n"
    "Summarises a bundle (manifest, shards and their sizes, gate results), a checkpoint or a GGUF, and the\n"
    "per-session state footprint: conv + delta-rule state, KV cache per token.\n";

static double jnum(json_t *o, const char *path) {
    char key[128];
    snprintf(key, sizeof key, "%s", path);
    for (char *k = key, *dot; o && k; k = dot ? dot + 1 : NULL) {
        if ((dot = strchr(k, '.'))) *dot = 0;
        o = json_object_get(o, k);
    }
    return o ? json_number_value(o) : NAN;
}

int cmd_inspect(int argc, char **argv) {
    opts o = {0};
    if (parse_common(argc, argv, &o, "-m" RUNTIME_FLAGS)) return 2;
    if (o.help) return fputs(inspect_help, stdout), 0;
    if (!o.model || o.prompt) return die("needs one MODEL (see qhx inspect --help)"), 2;
    qhx_runtime *rt = NULL;
    qhx_model *m = NULL;
    if (open_model(&o, &rt, &m)) { close_model(rt, m, NULL); return 1; }
    qhx_model_info in;
    qhx_model_get_info(m, &in);
    printf("%s: %s\n", o.model, in.is_bundle ? "bundle" : in.is_gguf ? "GGUF (llama.cpp qwen35)" : "Hugging Face checkpoint");
    printf("model: %d layers (%d Gated DeltaNet, %d gated attention), hidden %d, vocab %d\n", in.n_layers,
           in.n_linear_layers, in.n_full_layers, in.hidden_size, in.vocab_size);
    if (in.n_experts)
        printf("MLP: mixture of experts in every layer: %d routed experts of width %d, top-%d a token, + a shared expert of width %d\n",
               in.n_experts, in.expert_size, in.top_k, in.shared_expert_size);
    printf("context: %d positions\nweights: %.1f MB %s, %.1f MB read a token%s\n", in.max_context, in.weight_bytes / 1e6,
           !in.is_bundle ? "mapped" : in.weights_mapped ? "mapped from the page cache" : "read into memory", in.decode_bytes_per_token / 1e6,
           in.n_experts ? " (active: the routed experts at their average size)" : "");
    printf("kernels: %s, %d threads\n", qhx_runtime_kernels(rt), qhx_runtime_threads(rt));
    printf("state per session: %.2f MB fixed (conv + delta-rule), KV cache (%s) %.1f KB per token (%.1f MB at full context)\n",
           in.state_bytes / 1e6, kv_name(in.kv_cache), in.kv_bytes_per_token / 1e3,
           in.kv_bytes_per_token * (double)in.max_context / 1e6);
    printf("MTP head: %s\n", in.mtp_layers ? "1 layer (--draft mtp)" : "none");
    const char *text = qhx_model_manifest(m);
    json_t *root = text ? json_loads(text, 0, NULL) : NULL;
    if (root) {
        const char *layout = json_string_value(json_object_get(json_object_get(root, "target"), "weight_layout"));
        printf("host op: %s; target %s, weight layout %s\n", json_string_value(json_object_get(json_object_get(root, "plan"), "host_op")),
               json_string_value(json_object_get(json_object_get(root, "target"), "target")), layout);
        printf("weights: %s\n", layout && !strncmp(layout, "w4-", 3) ? "W4: 4-bit codes, an fp16 scale every 32 columns (4.5 bits a weight)"
                                                                    : "W8: int8, an fp32 scale a row");
        size_t i;
        json_t *sh;
        json_array_foreach(json_object_get(json_object_get(root, "plan"), "decode_shards"), i, sh)
            printf("decode shard %zu: %s, layers %d-%d, %.1f MB\n", i, json_string_value(json_object_get(sh, "file")),
                   (int)json_integer_value(json_array_get(json_object_get(sh, "layers"), 0)),
                   (int)json_integer_value(json_array_get(json_object_get(sh, "layers"), 1)) - 1,
                   jnum(sh, "bytes") / 1e6);
        json_t *plan = json_object_get(root, "plan");
        printf("embedding: %s (fp16, host lookup)\nlm-head: %s (%s%s)\n", json_string_value(json_object_get(json_object_get(plan, "embedding"), "file")),
               json_string_value(json_object_get(json_object_get(plan, "lm_head"), "file")),
               json_string_value(json_object_get(json_object_get(plan, "lm_head"), "dtype")),
               json_is_true(json_object_get(json_object_get(plan, "lm_head"), "tied_to_embedding")) ? ", tied: the embedding file" : "");
        const json_t *mtp = json_object_get(plan, "mtp");
        if (mtp) printf("MTP head file: %s\n", json_string_value(json_object_get(mtp, "file")));
        printf("quantization: weight relative RMS error %.3f %%\n", 100 * jnum(root, "quantization.weight_rel_rms_error"));
        json_t *g = json_object_get(root, "gates");
        if (json_is_true(json_object_get(g, "run")))
            printf("gates: oracle-gated export %.0f/%.0f (worst relative error %.2e, tolerance %.2g); greedy %.0f/%.0f tokens, %s\n",
                   jnum(g, "export.passed"), jnum(g, "export.total"), jnum(g, "export.worst_rel_error"), jnum(g, "export.tolerance"),
                   jnum(g, "greedy.matched"), jnum(g, "greedy.total"),
                   json_is_true(json_object_get(json_object_get(g, "greedy"), "passed")) ? "passed" : "FAILED");
        else
            printf("gates: not run (forged with --no-gate)\n");
        json_decref(root);
    }
    close_model(rt, m, NULL);
    return 0;
}
