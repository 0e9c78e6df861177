/* A llama.cpp model of a checkpoint's exact shapes, for timing llama.cpp against qhexrt on the
 * same architecture: a GGUF (v3) of arch "qwen35" with the checkpoint's config, Q8_0 matrices
 * (llama.cpp's 8-bit format: blocks of 32 int8 with one fp16 scale) filled with seeded random
 * values, fp32 norms and small tensors, and a placeholder byte-level vocabulary. Timing does not
 * depend on the values; the output is not the checkpoint's model and is never used for accuracy.
 *   build/gguf_synth CHECKPOINT_DIR OUT.gguf */
#include "format/hfconfig.h"
#include "util/half.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { GGUF_U32 = 4, GGUF_I32 = 5, GGUF_F32 = 6, GGUF_BOOL = 7, GGUF_STR = 8, GGUF_ARR = 9 };
enum { T_F32 = 0, T_Q8_0 = 8 };
#define ALIGN 32

typedef struct {
    char name[64];
    int type;
    uint64_t ne0, ne1; /* ne0: the row length (columns), ne1: rows; ne1 == 0 for a vector */
} tensor;

static FILE *out;
static int failed;

static void put(const void *p, size_t n) { failed |= fwrite(p, 1, n, out) != n; }
static void put_u32(uint32_t v) { put(&v, 4); }
static void put_u64(uint64_t v) { put(&v, 8); }
static void put_str(const char *s) { put_u64(strlen(s)), put(s, strlen(s)); }
static void kv_u32(const char *k, uint32_t v) { put_str(k), put_u32(GGUF_U32), put_u32(v); }
static void kv_f32(const char *k, float v) { put_str(k), put_u32(GGUF_F32), put(&v, 4); }
static void kv_str(const char *k, const char *v) { put_str(k), put_u32(GGUF_STR), put_str(v); }

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}

static uint64_t tensor_bytes(const tensor *t) {
    const uint64_t n = t->ne0 * (t->ne1 ? t->ne1 : 1);
    return t->type == T_Q8_0 ? n / 32 * 34 : n * 4;
}

/* The GPT-2 byte-level alphabet: the printable bytes stand for themselves, the others map to
 * U+0100 onwards, so every byte has a token (llama.cpp looks up the newline, U+010A). */
static void byte_token(int b, char *s) {
    int cp = b, n = 0;
    if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255))) {
        for (int i = 0; i < b; i++)
            if (!((i >= 33 && i <= 126) || (i >= 161 && i <= 172) || (i >= 174 && i <= 255))) n++;
        cp = 256 + n;
    }
    if (cp < 0x80) s[0] = (char)cp, s[1] = 0;
    else s[0] = (char)(0xC0 | cp >> 6), s[1] = (char)(0x80 | (cp & 63)), s[2] = 0;
}

int main(int argc, char **argv) {
    if (argc != 3) return fprintf(stderr, "usage: gguf_synth CHECKPOINT_DIR OUT.gguf\n"), 2;
    qhx_config c;
    if (qhx_config_load(&c, argv[1])) return fprintf(stderr, "gguf_synth: %s\n", qhx_last_error()), 1;

    const uint64_t D = (uint64_t)c.hidden, V = (uint64_t)c.vocab_size, conv = (uint64_t)qhx_config_conv_dim(&c);
    const uint64_t vd = (uint64_t)c.lin_v_heads * c.lin_v_dim, qd = (uint64_t)c.n_heads * c.head_dim;
    const uint64_t kvd = (uint64_t)c.n_kv_heads * c.head_dim;
    tensor *t = calloc((size_t)c.n_layers * 16 + 3, sizeof *t);
    if (!t) return fprintf(stderr, "gguf_synth: out of memory\n"), 1;
    int n = 0;
#define ADD(TYPE, NE0, NE1, ...) (snprintf(t[n].name, sizeof t[n].name, __VA_ARGS__), t[n].type = TYPE, t[n].ne0 = NE0, t[n++].ne1 = NE1)
    ADD(T_Q8_0, D, V, "token_embd.weight");
    ADD(T_F32, D, 0, "output_norm.weight");
    if (!c.tie_embeddings) ADD(T_Q8_0, D, V, "output.weight");
    for (int l = 0; l < c.n_layers; l++) {
        ADD(T_F32, D, 0, "blk.%d.attn_norm.weight", l);
        ADD(T_F32, D, 0, "blk.%d.post_attention_norm.weight", l);
        ADD(T_Q8_0, D, (uint64_t)c.ffn, "blk.%d.ffn_gate.weight", l);
        ADD(T_Q8_0, D, (uint64_t)c.ffn, "blk.%d.ffn_up.weight", l);
        ADD(T_Q8_0, (uint64_t)c.ffn, D, "blk.%d.ffn_down.weight", l);
        if (c.full_attn[l]) {
            ADD(T_Q8_0, D, 2 * qd, "blk.%d.attn_q.weight", l); /* query and output gate */
            ADD(T_Q8_0, D, kvd, "blk.%d.attn_k.weight", l);
            ADD(T_Q8_0, D, kvd, "blk.%d.attn_v.weight", l);
            ADD(T_Q8_0, qd, D, "blk.%d.attn_output.weight", l);
            ADD(T_F32, (uint64_t)c.head_dim, 0, "blk.%d.attn_q_norm.weight", l);
            ADD(T_F32, (uint64_t)c.head_dim, 0, "blk.%d.attn_k_norm.weight", l);
        } else {
            ADD(T_Q8_0, D, conv, "blk.%d.attn_qkv.weight", l);
            ADD(T_Q8_0, D, vd, "blk.%d.attn_gate.weight", l);
            ADD(T_F32, (uint64_t)c.conv_kernel, conv, "blk.%d.ssm_conv1d.weight", l);
            ADD(T_F32, (uint64_t)c.lin_v_heads, 0, "blk.%d.ssm_dt.bias", l);
            ADD(T_F32, (uint64_t)c.lin_v_heads, 0, "blk.%d.ssm_a", l);
            ADD(T_Q8_0, D, (uint64_t)c.lin_v_heads, "blk.%d.ssm_beta.weight", l);
            ADD(T_Q8_0, D, (uint64_t)c.lin_v_heads, "blk.%d.ssm_alpha.weight", l);
            ADD(T_F32, (uint64_t)c.lin_v_dim, 0, "blk.%d.ssm_norm.weight", l);
            ADD(T_Q8_0, vd, D, "blk.%d.ssm_out.weight", l);
        }
    }
    for (int i = 0; i < n; i++)
        if (t[i].type == T_Q8_0 && t[i].ne0 % 32) return fprintf(stderr, "gguf_synth: %s: rows of %llu are not whole Q8_0 blocks\n", t[i].name, (unsigned long long)t[i].ne0), 1;

    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp-%d", argv[2], (int)getpid());
    out = fopen(tmp, "wbx");
    if (!out) return fprintf(stderr, "gguf_synth: %s: %s\n", tmp, strerror(errno)), 1;

    const int n_kv = 24;
    put("GGUF", 4), put_u32(3), put_u64((uint64_t)n), put_u64((uint64_t)n_kv);
    kv_str("general.architecture", "qwen35");
    kv_str("general.name", "qhexrt gguf_synth (random weights)");
    kv_u32("qwen35.block_count", (uint32_t)c.n_layers);
    kv_u32("qwen35.context_length", (uint32_t)c.max_pos);
    kv_u32("qwen35.embedding_length", (uint32_t)D);
    kv_u32("qwen35.feed_forward_length", (uint32_t)c.ffn);
    kv_u32("qwen35.attention.head_count", (uint32_t)c.n_heads);
    kv_u32("qwen35.attention.head_count_kv", (uint32_t)c.n_kv_heads);
    kv_u32("qwen35.attention.key_length", (uint32_t)c.head_dim);
    kv_u32("qwen35.attention.value_length", (uint32_t)c.head_dim);
    kv_u32("qwen35.rope.dimension_count", (uint32_t)c.rot_dim);
    kv_f32("qwen35.rope.freq_base", c.rope_theta);
    kv_f32("qwen35.attention.layer_norm_rms_epsilon", c.eps);
    int interval = 0; /* the distance between full-attention layers */
    for (int l = 0; l < c.n_layers && !interval; l++) interval = c.full_attn[l] ? l + 1 : 0;
    kv_u32("qwen35.full_attention_interval", (uint32_t)(interval ? interval : 4));
    kv_u32("qwen35.ssm.conv_kernel", (uint32_t)c.conv_kernel);
    kv_u32("qwen35.ssm.state_size", (uint32_t)c.lin_k_dim);
    kv_u32("qwen35.ssm.group_count", (uint32_t)c.lin_k_heads);
    kv_u32("qwen35.ssm.time_step_rank", (uint32_t)c.lin_v_heads);
    kv_u32("qwen35.ssm.inner_size", (uint32_t)vd);
    put_str("qwen35.rope.dimension_sections"), put_u32(GGUF_ARR), put_u32(GGUF_I32), put_u64(4);
    const int32_t sections[4] = {c.rot_dim / 2 - 2 * (c.rot_dim / 6), c.rot_dim / 6, c.rot_dim / 6, 0};
    put(sections, sizeof sections);
    kv_str("tokenizer.ggml.model", "gpt2");
    kv_str("tokenizer.ggml.pre", "qwen2");
    put_str("tokenizer.ggml.tokens"), put_u32(GGUF_ARR), put_u32(GGUF_STR), put_u64(V);
    for (uint64_t i = 0; i < V; i++) {
        char s[32];
        if (i < 256) byte_token((int)i, s);
        else snprintf(s, sizeof s, "<|synth_%llu|>", (unsigned long long)i);
        put_str(s);
    }
    put_str("tokenizer.ggml.merges"), put_u32(GGUF_ARR), put_u32(GGUF_STR), put_u64(0);

    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        put_str(t[i].name);
        put_u32(t[i].ne1 ? 2 : 1), put_u64(t[i].ne0);
        if (t[i].ne1) put_u64(t[i].ne1);
        put_u32((uint32_t)t[i].type), put_u64(off);
        off = (off + tensor_bytes(&t[i]) + ALIGN - 1) / ALIGN * ALIGN;
    }
    static const char zeros[ALIGN];
    long pos = ftell(out);
    put(zeros, (size_t)((ALIGN - pos % ALIGN) % ALIGN));

    unsigned char *buf = malloc(34 << 16);
    for (int i = 0; i < n && buf && !failed; i++) {
        uint64_t left = tensor_bytes(&t[i]);
        if (t[i].type == T_F32) { /* norms 1, decays and biases small: values llama.cpp computes with */
            for (uint64_t k = 0; k < left / 4; k++) {
                const float v = strstr(t[i].name, "norm") ? 1.0f : 0.01f * (float)(next() % 100) / 100.0f;
                put(&v, 4);
            }
        } else
            while (left && !failed) {
                const uint64_t blocks = left / 34 < (1u << 16) ? left / 34 : (1u << 16);
                for (uint64_t b = 0; b < blocks; b++) {
                    const uint16_t d = qhx_f32_to_f16(0.02f / 127);
                    memcpy(buf + 34 * b, &d, 2);
                    for (int k = 0; k < 32; k += 8) {
                        const uint64_t r = next();
                        memcpy(buf + 34 * b + 2 + k, &r, 8);
                    }
                }
                put(buf, (size_t)(34 * blocks));
                left -= 34 * blocks;
            }
        const uint64_t pad = (ALIGN - tensor_bytes(&t[i]) % ALIGN) % ALIGN;
        put(zeros, (size_t)pad);
    }
    failed |= !buf;
    free(buf);
    free(t);
    failed |= fclose(out) != 0;
    if (failed || rename(tmp, argv[2])) {
        unlink(tmp);
        return fprintf(stderr, "gguf_synth: %s: write failed\n", argv[2]), 1;
    }
    return 0;
}
