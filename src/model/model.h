/* What a qhx_model and a qhx_session are inside: a config, bound weights, and the shard plan the
 * host-op runs. A checkpoint is a one-shard plan over its own (BF16) weights; a bundle's plan comes
 * from its manifest. */
#ifndef QHX_MODEL_H
#define QHX_MODEL_H
#include "model/qwen35.h"
#include "format/qhxf.h"
#include "format/w8.h"
#include "kernels/kernels.h"
#include "qhexrt.h"

#define QHX_MAX_SHARDS 64     /* a plan's decode shards: a sanity bound on manifests, not a size */
#define QHX_BUNDLE_SCHEMA 1
/* What a bundle forged here is pinned to (as the seed's bundles name their device). Bundles of
 * either CPU target load on the other when their weight layout is this build's: the W8 layout
 * (format/w8.h) is defined byte for byte, little-endian, with no ISA in it, so the bytes mean the
 * same on both (model/bundle.c checks the pair). */
#if defined(__aarch64__)
#define QHX_TARGET "cpu-aarch64"
#else
#define QHX_TARGET "cpu-x86_64"
#endif
#define QHX_TARGETS_SHARING_LAYOUT "cpu-x86_64", "cpu-aarch64"

struct qhx_runtime {
    qhx_exec ex;
    qhx_acts acts;     /* ex.acts */
    int n_threads;
    qhx_progress_fn progress;
    void *progress_user;
    int map_weights;      /* bundle weights mapped from the page cache, not read in */
    qhx_kv_form kv;       /* the form every session of its models keeps KV rows in */
};

typedef struct {
    int l0, l1;          /* layers [l0, l1) */
    char *file;          /* bundle file name, NULL for checkpoints */
    uint64_t bytes;
} qhx_shard_desc;

/* Where a model's weights are mapped from (a checkpoint's safetensors files, a bundle's QHXF
 * files): what the model needs of them after opening, without asking which it is. */
typedef struct qhx_weight_source qhx_weight_source;
struct qhx_weight_source {
    int n_files;
    const char *kind;   /* "checkpoint", "bundle" or "gguf" */
    uint64_t identity;  /* nonzero: what state files name the model by, as the source defines it */
    const qhx_mapfile *(*file)(const qhx_weight_source *src, int i);
    void (*close)(qhx_weight_source *src);
    /* row r of s's tensor where its data is NULL: weights drawn, not stored (qhx synth --bundle),
     * or a GGUF's decoded a row at a time; NULL where every tensor holds its data. A model with
     * such tensors is read by the forge only: sessions refuse it. */
    void (*row)(const qhx_weight_source *src, const qhx_tensor_spec *s, int r, float *out);
};

struct qhx_model {
    qhx_runtime *rt;
    int owns_rt;
    qhx_config cfg;
    qhx_weights *w;                   /* views into src's files */
    int n_shards;
    qhx_shard_desc *shards;
    int context;                      /* positions a session may use */
    uint64_t weight_bytes;            /* bytes of weights mapped */
    int map;                          /* a bundle's weights mapped from the page cache, not read in:
                                         asked for (map_weights), or they would not fit in memory */
    char *dir;
    char *manifest;                   /* bundle manifest text; NULL for checkpoints */
    qhx_weight_source *src;
    qhx_tokenizer *tok;               /* loaded on first use */
    uint64_t identity;                /* what a state file names it by (model/state_file.c) */
    uint64_t rows_bytes;              /* a GGUF decoded a row at a time: what decoding it whole takes */
};

/* Open the bundle whose manifest is `manifest_path`, or the checkpoint directory `dir`, into m
 * (m->rt already set): config, weights, shard plan, context and m->src. qhx_model_close undoes
 * either, also part-way. */
qhx_status qhx_bundle_open(qhx_model *m, const char *manifest_path);
qhx_status qhx_checkpoint_model_open(qhx_model *m, const char *dir);
/* A GGUF file of llama.cpp's qwen35 architecture (model/gguf_model.c); sets m->tok as well. Its
 * quantized or changed tensors are decoded to fp32 at open, or a row at a time (src->row) when
 * by_rows or when decoding them whole would not fit in memory. */
qhx_status qhx_gguf_model_open(qhx_model *m, const char *path, int by_rows);
/* qhx_model_open, a GGUF's decoded tensors read a row at a time: for the forge, which reads each once */
qhx_status qhx_model_open_rows(qhx_runtime *rt, const char *path, qhx_model **out);
/* A synthetic preset (forge/synth.c) as a model only the forge can read: its weights drawn row by
 * row (src->row), seeded, so a bundle of a shape too large to store as BF16 can be written. */
qhx_status qhx_synth_model(qhx_runtime *rt, const char *preset, uint64_t seed, qhx_model **out);
/* What llama.cpp's converter did to a tensor: stored 1 + w; stored -exp(A_log); value heads
 * reordered from grouped to tiled along the rows, along the rows past q and k, along the columns. */
typedef enum { QHX_GGUF_AS_IS, QHX_GGUF_NORM, QHX_GGUF_A_LOG, QHX_GGUF_V_ROWS, QHX_GGUF_V_ROWS_AFTER_QK, QHX_GGUF_V_COLS } qhx_gguf_change;
/* The GGUF name of Hugging Face tensor `hf` (a qhx_qwen35_specs name, no prefix) and its change;
 * 0 when it has none. A routed expert's matrix is *expert's slice of a 3-D tensor (else -1). */
int qhx_gguf_tensor_name(const qhx_config *c, const char *hf, char *out, size_t cap, qhx_gguf_change *change, int *expert);
/* Its two readers of metadata: the configuration from qwen35.*, the tokenizer from tokenizer.ggml.* */
struct qhx_gguf;
qhx_status qhx_gguf_read_config(qhx_config *c, const struct qhx_gguf *g);
qhx_status qhx_gguf_read_tokenizer(const struct qhx_gguf *g, qhx_tokenizer **out);
/* The dtype a bundle stores a decoder tensor in: int8 for matrices, fp32 for the rest. */
qhx_dtype qhx_bundle_dtype(const qhx_tensor_spec *s, qhx_dtype matrices);

/* The host-op qwen3_5_generate: host embedding lookup, then each decode shard over the residual
 * stream in order (each updating its own layers of the one state; the last applies the final
 * norm), then the lm-head.
 * logits_all [n][vocab] and/or logits_last [vocab] when not NULL. */
typedef struct qhx_kv_segment qhx_kv_segment; /* model/snapshot.h */

typedef struct {
    qhx_state st;             /* every layer's recurrent state and KV; st.pos: tokens consumed */
    float *x;
    size_t x_floats;
    int32_t *tokens;          /* the ids of positions [0, pos) */
    size_t tokens_cap;
    qhx_kv_segment *kv_tip;   /* the snapshot segment chain rows [0, kv_tip->row1) are a copy of, or NULL */
} qhx_hostop_state;

qhx_status qhx_hostop_init(qhx_hostop_state *hs, const qhx_model *m);
void qhx_hostop_free(qhx_hostop_state *hs, const qhx_model *m);
void qhx_hostop_reset(qhx_hostop_state *hs, const qhx_model *m);
qhx_status qhx_hostop_eval(const qhx_model *m, qhx_hostop_state *hs, const int32_t *tokens, int n, int stepwise,
                           float *logits_all, float *logits_last);

/* One stepwise token for each of n distinct states at once (qhx_sessions_step, which checks the
 * ids and positions), at most QHX_DECODE_MAX_T. */
qhx_status qhx_hostop_step(const qhx_model *m, qhx_hostop_state *const *hs, const int32_t *tokens, int n, float *logits);

/* qhx_session_mark / qhx_session_rewind. */
qhx_status qhx_hostop_mark(const qhx_model *m, qhx_hostop_state *hs);
qhx_status qhx_hostop_rewind(const qhx_model *m, qhx_hostop_state *hs, int pos);

/* The final-normed hidden states of the tokens of the session's last qhx_hostop_eval ([n][hidden];
 * a stepwise qhx_session_eval runs in pieces of QHX_DECODE_MAX_T: the last piece's). */
const float *qhx_session_hidden(const qhx_session *s);

#endif
