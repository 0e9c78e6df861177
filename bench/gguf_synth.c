/* GGUF files (v3) of llama.cpp's "qwen35" (or, for a mixture-of-experts model, "qwen35moe")
 * architecture made from a checkpoint (a bundle gives its shapes too), in two ways:
 *   build/gguf_synth CHECKPOINT OUT.gguf [q8_0|q4_0|q4_k]
 *       the checkpoint's shapes (or a qhx synth preset's, CHECKPOINT given as preset:NAME) with
 *       seeded random weights of that type (default q8_0), fp32
 *       norms and small tensors and a placeholder byte-level vocabulary: for timing llama.cpp on
 *       our shapes (timing does not depend on the values; never used for accuracy);
 *   build/gguf_synth --convert CHECKPOINT OUT.gguf
 *       the checkpoint's own weights in fp32, changed as llama.cpp's converter changes them
 *       (conversion/qwen.py: 1 + w for the zero-centred norms, -exp(A_log), value heads from
 *       grouped to tiled order where key and value head counts differ, the MTP head as an extra
 *       nextn layer), for testing that qhexrt's GGUF reader undoes each on odd shapes. The
 *       changes are written here from the converter's definitions, not with the reader's code. */
#include "model/model.h"
#include "model/ops.h"
#include "util/half.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { GGUF_U32 = 4, GGUF_I32 = 5, GGUF_F32 = 6, GGUF_BOOL = 7, GGUF_STR = 8, GGUF_ARR = 9 };
enum { T_F32 = 0, T_Q4_0 = 2, T_Q8_0 = 8, T_Q4_K = 12 };
#define ALIGN 32

typedef struct {
    char name[96];
    int type;
    uint64_t ne0, ne1;            /* ne0: the row length (columns), ne1: rows; 0 for a vector */
    uint64_t ne2;                 /* experts of a 3-D expert tensor, else 0 */
    const qhx_tensor *src;        /* --convert: the checkpoint's tensor (an expert tensor's first,
                                     the next expert's 3 tensors on) and its change */
    qhx_gguf_change change;
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

static uint64_t block_bytes(int type) { return type == T_Q8_0 ? 34 : type == T_Q4_0 ? 18 : type == T_Q4_K ? 144 : 4; }
static uint64_t block_values(int type) { return type == T_Q4_K ? 256 : type == T_F32 ? 1 : 32; }
static uint64_t tensor_bytes(const tensor *t) {
    return t->ne0 * (t->ne1 ? t->ne1 : 1) * (t->ne2 ? t->ne2 : 1) / block_values(t->type) * block_bytes(t->type);
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

static const char *arch;
static const char *key(const char *k) {
    static char buf[128];
    snprintf(buf, sizeof buf, "%s.%s", arch, k);
    return buf;
}

static void write_metadata(const qhx_config *c, int n_tensors) {
    const int n_kv = 26 + (c->mtp_layers > 0) + 4 * (c->n_experts > 0);
    arch = c->n_experts ? "qwen35moe" : "qwen35";
    put("GGUF", 4), put_u32(3), put_u64((uint64_t)n_tensors), put_u64((uint64_t)n_kv);
    kv_str("general.architecture", arch);
    kv_str("general.name", "qhexrt gguf_synth");
    kv_u32(key("block_count"), (uint32_t)(c->n_layers + c->mtp_layers));
    if (c->mtp_layers) kv_u32(key("nextn_predict_layers"), (uint32_t)c->mtp_layers);
    kv_u32(key("context_length"), (uint32_t)c->max_pos);
    kv_u32(key("embedding_length"), (uint32_t)c->hidden);
    kv_u32(key("feed_forward_length"), (uint32_t)c->ffn);
    kv_u32(key("attention.head_count"), (uint32_t)c->n_heads);
    kv_u32(key("attention.head_count_kv"), (uint32_t)c->n_kv_heads);
    kv_u32(key("attention.key_length"), (uint32_t)c->head_dim);
    kv_u32(key("attention.value_length"), (uint32_t)c->head_dim);
    kv_u32(key("rope.dimension_count"), (uint32_t)c->rot_dim);
    kv_f32(key("rope.freq_base"), c->rope_theta);
    kv_f32(key("attention.layer_norm_rms_epsilon"), c->eps);
    int interval = 0; /* the distance between full-attention layers */
    for (int l = 0; l < c->n_layers && !interval; l++) interval = c->full_attn[l] ? l + 1 : 0;
    kv_u32(key("full_attention_interval"), (uint32_t)(interval ? interval : 4));
    kv_u32(key("ssm.conv_kernel"), (uint32_t)c->conv_kernel);
    kv_u32(key("ssm.state_size"), (uint32_t)c->lin_k_dim);
    kv_u32(key("ssm.group_count"), (uint32_t)c->lin_k_heads);
    kv_u32(key("ssm.time_step_rank"), (uint32_t)c->lin_v_heads);
    kv_u32(key("ssm.inner_size"), (uint32_t)(c->lin_v_heads * c->lin_v_dim));
    if (c->n_experts) {
        kv_u32(key("expert_count"), (uint32_t)c->n_experts);
        kv_u32(key("expert_used_count"), (uint32_t)c->top_k);
        kv_u32(key("expert_feed_forward_length"), (uint32_t)c->moe_ffn);
        kv_u32(key("expert_shared_feed_forward_length"), (uint32_t)c->ffn);
    }
    put_str(key("rope.dimension_sections")), put_u32(GGUF_ARR), put_u32(GGUF_I32), put_u64(4);
    const int32_t sections[4] = {c->rot_dim / 2 - 2 * (c->rot_dim / 6), c->rot_dim / 6, c->rot_dim / 6, 0};
    put(sections, sizeof sections);
    kv_str("tokenizer.ggml.model", "gpt2");
    kv_str("tokenizer.ggml.pre", "qwen2");
    const uint64_t V = (uint64_t)c->vocab_size;
    put_str("tokenizer.ggml.tokens"), put_u32(GGUF_ARR), put_u32(GGUF_STR), put_u64(V);
    for (uint64_t i = 0; i < V; i++) {
        char s[32];
        if (i < 256) byte_token((int)i, s);
        else snprintf(s, sizeof s, "<|synth_%llu|>", (unsigned long long)i);
        put_str(s);
    }
    put_str("tokenizer.ggml.token_type"), put_u32(GGUF_ARR), put_u32(GGUF_I32), put_u64(V);
    for (uint64_t i = 0; i < V; i++) put_u32(i < 256 ? 1 : 3); /* normal bytes, control placeholders */
    put_str("tokenizer.ggml.merges"), put_u32(GGUF_ARR), put_u32(GGUF_STR), put_u64(0);
    kv_u32("tokenizer.ggml.eos_token_id", (uint32_t)(V - 1));
}

/* ---- --convert: the converter's changes, forwards ----------------------------------------- */

/* llama.cpp's _reorder_v_heads: index i of a [n_k, r, head] block moves to [r, n_k, head]. */
static uint64_t to_tiled(const qhx_config *c, uint64_t i, uint64_t head) {
    const uint64_t nk = (uint64_t)c->lin_k_heads, r = (uint64_t)(c->lin_v_heads / c->lin_k_heads);
    const uint64_t h = i / head, e = i % head, k = h / r, j = h % r;
    return (j * nk + k) * head + e;
}

static float *converted(const qhx_config *c, const tensor *t) {
    const uint64_t cols = t->ne0, rows = t->ne1 ? t->ne1 : 1, qk = 2 * (uint64_t)c->lin_k_heads * c->lin_k_dim;
    float *y = malloc(sizeof(float) * cols * rows);
    if (!y) return NULL;
    const int reorder = c->lin_v_heads != c->lin_k_heads;
    for (uint64_t r = 0; r < rows; r++)
        for (uint64_t j = 0; j < cols; j++) {
            float v = qhx_tensor_get(t->src, r * cols + j);
            uint64_t R = r, J = j;
            if (reorder && t->change == QHX_GGUF_V_ROWS && rows > 1) R = to_tiled(c, r, rows == (uint64_t)c->lin_v_heads ? 1 : (uint64_t)c->lin_v_dim);
            if (reorder && (t->change == QHX_GGUF_V_ROWS || t->change == QHX_GGUF_A_LOG) && rows == 1) J = to_tiled(c, j, 1);
            if (reorder && t->change == QHX_GGUF_V_ROWS_AFTER_QK && r >= qk) R = qk + to_tiled(c, r - qk, (uint64_t)c->lin_v_dim);
            if (reorder && t->change == QHX_GGUF_V_COLS) J = to_tiled(c, j, (uint64_t)c->lin_v_dim);
            if (t->change == QHX_GGUF_NORM) v = v + 1.0f;
            if (t->change == QHX_GGUF_A_LOG) v = -expf(v);
            y[R * cols + J] = v;
        }
    return y;
}

/* ---- the tensor list ---------------------------------------------------------------------- */

static int list_random(const qhx_config *c, int type, tensor *t) {
    const uint64_t D = (uint64_t)c->hidden, V = (uint64_t)c->vocab_size, conv = (uint64_t)qhx_config_conv_dim(c);
    const uint64_t vd = (uint64_t)c->lin_v_heads * c->lin_v_dim, qd = (uint64_t)c->n_heads * c->head_dim;
    const uint64_t kvd = (uint64_t)c->n_kv_heads * c->head_dim;
    int n = 0;
#define ADD(TYPE, NE0, NE1, ...) (snprintf(t[n].name, sizeof t[n].name, __VA_ARGS__), t[n].type = TYPE, t[n].ne0 = NE0, t[n++].ne1 = NE1)
    ADD(type, D, V, "token_embd.weight");
    ADD(T_F32, D, 0, "output_norm.weight");
    if (!c->tie_embeddings) ADD(type, D, V, "output.weight");
    for (int l = 0; l < c->n_layers; l++) {
        ADD(T_F32, D, 0, "blk.%d.attn_norm.weight", l);
        ADD(T_F32, D, 0, "blk.%d.post_attention_norm.weight", l);
        if (c->n_experts) { /* the router kept fp32, as llama.cpp's quantizer keeps it */
            const uint64_t E = (uint64_t)c->n_experts, I = (uint64_t)c->moe_ffn;
            ADD(T_F32, D, E, "blk.%d.ffn_gate_inp.weight", l);
            ADD(type, D, I, "blk.%d.ffn_gate_exps.weight", l), t[n - 1].ne2 = E;
            ADD(type, D, I, "blk.%d.ffn_up_exps.weight", l), t[n - 1].ne2 = E;
            ADD(type, I, D, "blk.%d.ffn_down_exps.weight", l), t[n - 1].ne2 = E;
            ADD(T_F32, D, 0, "blk.%d.ffn_gate_inp_shexp.weight", l);
            ADD(type, D, (uint64_t)c->ffn, "blk.%d.ffn_gate_shexp.weight", l);
            ADD(type, D, (uint64_t)c->ffn, "blk.%d.ffn_up_shexp.weight", l);
            ADD(type, (uint64_t)c->ffn, D, "blk.%d.ffn_down_shexp.weight", l);
        } else {
            ADD(type, D, (uint64_t)c->ffn, "blk.%d.ffn_gate.weight", l);
            ADD(type, D, (uint64_t)c->ffn, "blk.%d.ffn_up.weight", l);
            ADD(type, (uint64_t)c->ffn, D, "blk.%d.ffn_down.weight", l);
        }
        if (c->full_attn[l]) {
            ADD(type, D, 2 * qd, "blk.%d.attn_q.weight", l); /* query and output gate */
            ADD(type, D, kvd, "blk.%d.attn_k.weight", l);
            ADD(type, D, kvd, "blk.%d.attn_v.weight", l);
            ADD(type, qd, D, "blk.%d.attn_output.weight", l);
            ADD(T_F32, (uint64_t)c->head_dim, 0, "blk.%d.attn_q_norm.weight", l);
            ADD(T_F32, (uint64_t)c->head_dim, 0, "blk.%d.attn_k_norm.weight", l);
        } else {
            ADD(type, D, conv, "blk.%d.attn_qkv.weight", l);
            ADD(type, D, vd, "blk.%d.attn_gate.weight", l);
            ADD(T_F32, (uint64_t)c->conv_kernel, conv, "blk.%d.ssm_conv1d.weight", l);
            ADD(T_F32, (uint64_t)c->lin_v_heads, 0, "blk.%d.ssm_dt.bias", l);
            ADD(T_F32, (uint64_t)c->lin_v_heads, 0, "blk.%d.ssm_a", l);
            ADD(type, D, (uint64_t)c->lin_v_heads, "blk.%d.ssm_beta.weight", l);
            ADD(type, D, (uint64_t)c->lin_v_heads, "blk.%d.ssm_alpha.weight", l);
            ADD(T_F32, (uint64_t)c->lin_v_dim, 0, "blk.%d.ssm_norm.weight", l);
            ADD(type, vd, D, "blk.%d.ssm_out.weight", l);
        }
    }
#undef ADD
    return n;
}

/* Every tensor the checkpoint holds, under its GGUF name, in fp32: the routed experts of a layer
 * (one tensor each in the spec list) gathered into the 3-D tensors llama.cpp stores them in. */
static int list_converted(qhx_model *m, tensor *t) {
    const int n = qhx_qwen35_specs(&m->cfg, "", m->w, NULL);
    qhx_tensor_spec *s = calloc((size_t)n, sizeof *s);
    if (!s) return -1;
    qhx_qwen35_specs(&m->cfg, "", m->w, s);
    int k = 0;
    for (int i = 0; i < n; i++) {
        int rows, cols, expert;
        qhx_spec_dims(&s[i], &rows, &cols);
        if (!qhx_gguf_tensor_name(&m->cfg, s[i].name, t[k].name, sizeof t[k].name, &t[k].change, &expert)) {
            fprintf(stderr, "gguf_synth: no GGUF name for %s\n", s[i].name);
            free(s);
            return -1;
        }
        if (expert > 0) continue; /* expert 0's entry stands for all */
        t[k].type = T_F32;
        t[k].ne0 = (uint64_t)cols;
        t[k].ne1 = s[i].ndim == 1 && expert < 0 ? 0 : (uint64_t)rows;
        t[k].ne2 = expert == 0 ? (uint64_t)m->cfg.n_experts : 0;
        t[k++].src = s[i].dst;
    }
    free(s);
    return k;
}

/* Random blocks of a quantized type: small scales, random quants. */
static void put_random_blocks(int type, uint64_t bytes) {
    unsigned char b[144];
    const uint64_t bb = block_bytes(type);
    for (uint64_t done = 0; done < bytes && !failed; done += bb) {
        for (uint64_t k = 0; k < bb; k += 8) {
            const uint64_t r = next();
            memcpy(b + k, &r, bb - k < 8 ? bb - k : 8);
        }
        const uint16_t d = qhx_f32_to_f16(0.02f / 127);
        memcpy(b, &d, 2);
        if (type == T_Q4_K) memcpy(b + 2, &d, 2);
        put(b, (size_t)bb);
    }
}

int main(int argc, char **argv) {
    const int convert = argc == 4 && !strcmp(argv[1], "--convert");
    const char *ck = argv[convert ? 2 : 1], *dst = argv[convert ? 3 : 2];
    const char *tname = !convert && argc == 4 ? argv[3] : "q8_0";
    const int type = !strcmp(tname, "q8_0") ? T_Q8_0 : !strcmp(tname, "q4_0") ? T_Q4_0 : !strcmp(tname, "q4_k") ? T_Q4_K : -1;
    if ((!convert && argc != 3 && argc != 4) || type < 0)
        return fprintf(stderr, "usage: gguf_synth CHECKPOINT OUT.gguf [q8_0|q4_0|q4_k]\n       gguf_synth --convert CHECKPOINT OUT.gguf\n"), 2;
    qhx_model *m;
    qhx_runtime *rt;
    qhx_runtime_opts ro = {.map_weights = 1}; /* a bundle only lends its shapes: mapped, never read */
    if (qhx_runtime_new(&ro, &rt) || (!strncmp(ck, "preset:", 7) ? qhx_synth_model(rt, ck + 7, 0, &m) : qhx_model_open(rt, ck, &m)))
        return fprintf(stderr, "gguf_synth: %s\n", qhx_last_error()), 1;
    const qhx_config *c = &m->cfg;
    tensor *t = calloc(((size_t)c->n_layers + 1) * (20 + 3 * (size_t)c->n_experts) + 40, sizeof *t);
    const int n = !t ? -1 : convert ? list_converted(m, t) : list_random(c, type, t);
    if (n < 0) return fprintf(stderr, "gguf_synth: out of memory\n"), 1;
    for (int i = 0; i < n; i++)
        if (t[i].ne0 % block_values(t[i].type))
            return fprintf(stderr, "gguf_synth: %s: rows of %llu are not whole blocks of %s\n", t[i].name, (unsigned long long)t[i].ne0, tname), 1;

    char *tmp = malloc(strlen(dst) + 32);
    sprintf(tmp, "%s.tmp-%d", dst, (int)getpid());
    out = fopen(tmp, "wbx");
    if (!out) return fprintf(stderr, "gguf_synth: %s: %s\n", tmp, strerror(errno)), 1;
    /* random weights carry no MTP head (list_random writes the trunk), so none is declared */
    qhx_config trunk = *c;
    if (!convert) trunk.mtp_layers = 0;
    write_metadata(&trunk, n);
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        put_str(t[i].name);
        put_u32(t[i].ne2 ? 3 : t[i].ne1 ? 2 : 1), put_u64(t[i].ne0);
        if (t[i].ne1) put_u64(t[i].ne1);
        if (t[i].ne2) put_u64(t[i].ne2);
        put_u32((uint32_t)t[i].type), put_u64(off);
        off = (off + tensor_bytes(&t[i]) + ALIGN - 1) / ALIGN * ALIGN;
    }
    static const char zeros[ALIGN];
    long pos = ftell(out);
    put(zeros, (size_t)((ALIGN - pos % ALIGN) % ALIGN));
    for (int i = 0; i < n && !failed; i++) {
        const uint64_t bytes = tensor_bytes(&t[i]);
        if (convert) {
            for (uint64_t e = 0; e < (t[i].ne2 ? t[i].ne2 : 1); e++) { /* an expert tensor's experts in order */
                tensor one = t[i];
                one.src += 3 * e, one.ne2 = 0;
                float *y = converted(c, &one);
                failed |= !y;
                if (y) put(y, (size_t)tensor_bytes(&one));
                free(y);
            }
        } else if (t[i].type == T_F32) { /* norms 1, decays and biases small: values llama.cpp computes with */
            for (uint64_t k = 0; k < bytes / 4; k++) {
                const float v = strstr(t[i].name, "norm") ? 1.0f : 0.01f * (float)(next() % 100) / 100.0f;
                put(&v, 4);
            }
        } else {
            put_random_blocks(t[i].type, bytes);
        }
        put(zeros, (size_t)((ALIGN - bytes % ALIGN) % ALIGN));
    }
    free(t);
    qhx_model_close(m);
    qhx_runtime_free(rt);
    failed |= fclose(out) != 0;
    if (failed || rename(tmp, dst)) {
        unlink(tmp);
        return fprintf(stderr, "gguf_synth: %s: write failed\n", dst), 1;
    }
    free(tmp);
    return 0;
}
