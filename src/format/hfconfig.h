/* The Qwen3.5 text-decoder hyper-parameters, read from a Hugging Face config.json in either the
 * multimodal form (top level model_type "qwen3_5" or "qwen3_5_moe" with a "text_config") or the
 * flat text-only form ("qwen3_5_text", "qwen3_5_moe_text"). */
#ifndef QHX_HFCONFIG_H
#define QHX_HFCONFIG_H
#include <stdint.h>
#include "qhexrt.h"

/* A plausibility bound on num_hidden_layers (tables are sized from the config, not by this). */
#define QHX_MAX_LAYERS 65536
#define QHX_MAX_TOP_K 64      /* experts a token (Qwen3.5-MoE: 8 or 10) */

typedef struct {
    int vocab_size, hidden, n_layers;
    int ffn;          /* the SwiGLU MLP's width; in a mixture-of-experts model the shared expert's */
    int n_experts, top_k, moe_ffn;  /* > 0: every layer's MLP is a sparse MoE block of n_experts
                                       routed experts of width moe_ffn (top_k a token) + the shared one */
    int n_heads, n_kv_heads, head_dim, rot_dim;  /* gated softmax attention */
    float rope_theta;
    int lin_k_heads, lin_v_heads, lin_k_dim, lin_v_dim, conv_kernel;  /* Gated DeltaNet */
    float eps;
    int tie_embeddings;
    int max_pos;
    int mtp_layers;   /* mtp_num_hidden_layers: 0, or 1 when the model carries its MTP head (mtp.*) */
    int n_eos;
    int32_t eos[4];
    uint8_t *full_attn;  /* n_layers entries, 1 where layer i is gated softmax attention; owned */
} qhx_config;

/* Parses config text; `path` only names the file in messages. On success c owns full_attn
 * (qhx_config_free); on failure c holds nothing. */
qhx_status qhx_config_parse(qhx_config *c, const char *path, const char *json, size_t len);
/* Reads dir/config.json and, if present, the eos ids of dir/generation_config.json. */
qhx_status qhx_config_load(qhx_config *c, const char *dir);
void qhx_config_free(qhx_config *c);

/* The config as a flat text-config JSON object that qhx_config_parse reads back identically
 * (a bundle manifest's "model"). malloc'd; NULL when out of memory. */
char *qhx_config_to_json(const qhx_config *c);

/* A text config object made a Qwen3.5-MoE one: its model_type and MLP fields (the config writer's
 * and the synthesizer's). */
struct json_t;
void qhx_config_json_moe(struct json_t *text_config, int n_experts, int top_k, int expert_ffn, int shared_ffn);

static inline int qhx_config_conv_dim(const qhx_config *c) {
    return 2 * c->lin_k_heads * c->lin_k_dim + c->lin_v_heads * c->lin_v_dim;
}

#endif
