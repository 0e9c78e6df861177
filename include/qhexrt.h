/*
 * qhexrt — a C runtime for the Qwen3.5 hybrid (Gated DeltaNet + gated attention) language models.
 *
 * This header is the stable public contract (qhexrt_tools.h adds the forge, synthetic checkpoints
 * and the benchmarks' probes). Every function returns a qhx_status (QHX_OK on success);
 * on failure qhx_last_error() holds a one-line, human-readable reason naming the file, tensor or
 * argument at fault. The library never prints and never exits.
 *
 * Typical use:
 *     qhx_runtime *rt;  qhx_model *m;  qhx_session *s;
 *     qhx_runtime_new(NULL, &rt);                        // best kernels for this CPU, all cores
 *     if (qhx_model_open(rt, "bundles/q35-kjv", &m) != QHX_OK) { fprintf(stderr, "%s\n", qhx_last_error()); ... }
 *     qhx_session_new(m, &s);
 *     qhx_generate(s, prompt_ids, n_prompt, &opts, on_token, user, NULL);
 *     qhx_session_free(s);  qhx_model_close(m);  qhx_runtime_free(rt);
 */
#ifndef QHEXRT_H
#define QHEXRT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What the shared library exports: this header's functions and nothing else (it is built with
 * -fvisibility=hidden). */
#ifdef __GNUC__
#pragma GCC visibility push(default)
#endif

#define QHX_VERSION "1.0.0"

/* The values are fixed: new statuses only ever come after these. */
typedef enum {
    QHX_OK = 0,
    QHX_ERR_ARG = 1,          /* a bad argument from the caller */
    QHX_ERR_IO = 2,           /* a file could not be opened, read, mapped or written */
    QHX_ERR_FORMAT = 3,       /* a file is malformed: bad header, wrong shape or dtype, truncated */
    QHX_ERR_UNSUPPORTED = 4,  /* well-formed but not something qhexrt runs (model type, activation, ...) */
    QHX_ERR_RANGE = 5,        /* a token id, length or position outside what the model allows */
    QHX_ERR_NOMEM = 6,        /* an allocation failed or a size would overflow */
    QHX_ERR_CANCELLED = 7     /* the caller's callback asked to stop */
} qhx_status;

/* Growing without breaking compiled programs: the option and info structs only ever gain fields at
 * their end, and each call that takes one is an inline function passing the size of the struct
 * the caller was compiled with to the function the library exports (qhx_*_sized). An older program's
 * options lack the newer fields, which read as zero (their defaults); its info structs get the
 * fields it knows and nothing past them. */

/* A short constant name for a status ("format error", ...). */
const char *qhx_status_str(qhx_status st);

/* The message of the most recent failure on this thread; "" if none. Valid until the next call. */
const char *qhx_last_error(void);

/* Long steps (checking a bundle's checksums, forging, writing a synthetic checkpoint) report how
 * far they are through this, when the caller gives one: `what` names the step and the file
 * ("checking decode_s0_w8.qhx:", "forge: writing", "synth: writing"), done of total bytes; done == total
 * ends the step. The library itself never prints. */
typedef void (*qhx_progress_fn)(const char *what, uint64_t done, uint64_t total, void *user);

/* ---- runtime: the backend (kernel set) and the threads it runs on ---------------------------- */

typedef struct qhx_runtime qhx_runtime;

/* How sessions keep their KV caches (the gated-attention layers' keys and values; a quarter of the
 * layers): QHX_KV_F32 exactly as computed; QHX_KV_F16 half the bytes; QHX_KV_Q8 int8 in blocks of
 * 32 with a scale each, 0.28 of them. Snapshots and state files hold rows in the form they were
 * taken in, and are refused by a session of another form. */
typedef enum { QHX_KV_DEFAULT = 0, QHX_KV_F32 = 1, QHX_KV_F16 = 2, QHX_KV_Q8 = 3 } qhx_kv_form;

typedef struct {
    const char *kernels;   /* "auto" (default; env QHX_KERNELS overrides it: the first this CPU
                              runs of "avx512", "avx2", "scalar"; on aarch64 "neon-i8mm",
                              "neon", "scalar"), or one of them by name, or "ref" (the fp32
                              reference: double accumulation) */
    int n_threads;         /* 0: every core */
    qhx_progress_fn progress;  /* long steps of the models opened on it (NULL: none) */
    void *progress_user;
    int map_weights;       /* 1: map a bundle's weights from the page cache (shared between
                              processes, faulted in as used); 0 (default): read them into this
                              process's memory on huge pages, 1.3-1.4x faster decode and prefill
                              where TLB misses are dear (virtual machines) */
    qhx_kv_form kv_cache;  /* the KV cache's form for every session of the models on it
                              (QHX_KV_DEFAULT: see docs/usage.md) */
} qhx_runtime_opts;

/* opts may be NULL for the defaults. Fails on unknown kernels or ones this CPU cannot run. */
qhx_status qhx_runtime_new_sized(const qhx_runtime_opts *opts, size_t opts_size, qhx_runtime **out);
static inline qhx_status qhx_runtime_new(const qhx_runtime_opts *opts, qhx_runtime **out) {
    return qhx_runtime_new_sized(opts, sizeof(qhx_runtime_opts), out);
}
/* Stops the runtime's threads and frees it (NULL is fine). Models on it must be closed first. */
void qhx_runtime_free(qhx_runtime *rt);
/* The kernel set chosen ("avx2", "ref", ...): what "auto" resolved to on this CPU. */
const char *qhx_runtime_kernels(const qhx_runtime *rt);
/* Threads the runtime computes with (the caller's thread included). */
int qhx_runtime_threads(const qhx_runtime *rt);

typedef struct qhx_tokenizer qhx_tokenizer;

/* ---- model ---------------------------------------------------------------------------------- */

typedef struct qhx_model qhx_model;

/* Opens either
 *  - a bundle (a directory with manifest.json, or the manifest file itself) written by `qhx forge`:
 *    every file's checksum, magic, version, target, layout and ids are checked against the
 *    manifest before this returns; or
 *  - a Hugging Face checkpoint directory (config.json + model.safetensors or sharded safetensors
 *    with model.safetensors.index.json), every tensor checked for presence, dtype and shape.
 * Weights are memory-mapped. rt may be NULL (a default runtime owned by the model); otherwise it
 * must outlive the model. */
qhx_status qhx_model_open(qhx_runtime *rt, const char *path, qhx_model **out);
/* Unmaps the weights and frees the model, its tokenizer and its default runtime (NULL is fine).
 * Its sessions must be freed first. */
void qhx_model_close(qhx_model *m);

typedef struct {
    int vocab_size;        /* rows of the lm-head: valid token ids are [0, vocab_size) */
    int hidden_size;
    int n_layers;
    int n_linear_layers;   /* Gated DeltaNet layers */
    int n_full_layers;     /* gated softmax attention layers */
    int max_context;       /* positions a session may use: a bundle's context length, else
                              max_position_embeddings */
    int n_eos;             /* end-of-generation ids from the config (0..4) */
    int32_t eos[4];
    int is_bundle;
    int n_shards;          /* decode shards the host-op runs (1 for a checkpoint) */
    uint64_t weight_bytes; /* bytes of weights mapped */
    uint64_t decode_bytes_per_token;  /* weight bytes one decode step reads: every layer (of a MoE
                                         layer its router, shared expert and top_k routed experts)
                                         + lm-head */
    uint64_t state_bytes;  /* conv FIFOs + delta-rule states of one session */
    uint64_t kv_bytes_per_token;  /* KV cache of one session, per token */
    int mtp_layers;        /* 1 when the model carries its multi-token-prediction head (QHX_DRAFT_MTP) */
    int is_gguf;           /* opened from a GGUF file (llama.cpp's qwen35), its weights decoded at open */
    int n_experts;         /* Qwen3.5-MoE: routed experts a layer (0: a dense model), */
    int top_k;             /* of which each token runs top_k, */
    int expert_size;       /* each a SwiGLU of this width, */
    int shared_expert_size;  /* beside one shared expert of this width */
    int weights_mapped;    /* a bundle's weights are mapped from the page cache (map_weights, or
                              they would not fit in memory with a GiB to spare), not read in */
    qhx_kv_form kv_cache;  /* the form its sessions keep KV rows in (kv_bytes_per_token is of it) */
} qhx_model_info;

/* Sizes, layer counts and end-of-generation ids of an open model. */
void qhx_model_get_info_sized(const qhx_model *m, qhx_model_info *info, size_t info_size);
static inline void qhx_model_get_info(const qhx_model *m, qhx_model_info *info) { qhx_model_get_info_sized(m, info, sizeof *info); }

/* A bundle's manifest JSON text (owned by the model), or NULL for a checkpoint. */
const char *qhx_model_manifest(const qhx_model *m);


/* The model's tokenizer (the bundle's, or the checkpoint directory's tokenizer.json), loaded on
 * first use and owned by the model. */
qhx_status qhx_model_tokenizer(qhx_model *m, qhx_tokenizer **out);

/* ---- session: all per-sequence state (conv FIFOs, SSM states, KV caches) ---------------------- */

typedef struct qhx_session qhx_session;

/* A fresh session on m: its conv and delta-rule states and its KV caches (sized for the model's
 * context) are allocated here. Sessions are independent of each other, but a runtime's threads run
 * one evaluation at a time: threads sharing a runtime must take turns (or step their sessions
 * together with qhx_sessions_step, as qhx serve does). */
qhx_status qhx_session_new(qhx_model *m, qhx_session **out);
/* Frees a session (NULL is fine). */
void qhx_session_free(qhx_session *s);
/* Forgets every token: the session is as new. */
void qhx_session_reset(qhx_session *s);
/* Tokens consumed so far (the position of the next token). */
int qhx_session_pos(const qhx_session *s);

typedef enum {
    QHX_EVAL_SEQUENCE = 0,  /* the tokens as one sequence (attention over the prompt in tiles), as a
                               prefill would */
    QHX_EVAL_STEPWISE = 1   /* one token at a time, as decode does: n tokens in one call give bit
                               for bit what n one-token calls give, while the weights stream once
                               for up to 16 of them */
} qhx_eval_mode;

/* Feeds n tokens. If logits is not NULL it receives fp32 logits for every one of the n positions,
 * row-major [n][vocab_size]; if last_logits is not NULL it receives the last position's row.
 * A refused call (an id outside the vocabulary, past the context) leaves the session unchanged;
 * running out of memory part-way (QHX_ERR_NOMEM) leaves it empty, as qhx_session_reset does. */
qhx_status qhx_session_eval(qhx_session *s, const int32_t *tokens, int n, qhx_eval_mode mode,
                            float *logits, float *last_logits);

/* One decode step of n sessions at once, s[i] taking tokens[i]: the weights stream once for all of
 * them (up to 16 a pass). Each session ends where qhx_session_eval(s[i], &tokens[i], 1,
 * QHX_EVAL_STEPWISE, NULL, row) leaves it, bit for bit, whatever else the batch holds; logits
 * (NULL: none) gets those rows, [n][vocab_size]. The sessions are distinct and on one model. A
 * refused call (an id outside the vocabulary, a full context) leaves every session unchanged;
 * running out of memory part-way leaves them empty. */
qhx_status qhx_sessions_step(qhx_session *const *s, const int32_t *tokens, int n, float *logits);

/* ---- taking tokens back --------------------------------------------------------------------- */

/* Marks the session's position so that qhx_session_rewind can take back any of the next
 * QHX_MAX_REWIND tokens it evaluates stepwise, without a snapshot and without evaluating anything
 * again: the mark keeps the recurrent state (conv FIFOs, delta-rule states) as it is, each later
 * token leaves the delta rule's inputs, and a rewind replays those of the tokens it keeps (KV rows
 * past the position are simply written over). Speculative decoding takes its drafts back this way.
 * The mark lasts until the next mark, a QHX_EVAL_SEQUENCE call, a token past QHX_MAX_REWIND, a
 * restore or a reset. */
#define QHX_MAX_REWIND 17
qhx_status qhx_session_mark(qhx_session *s);
/* Goes back to position pos, from the mark up to the session's position: bit for bit the session
 * that evaluated only the tokens before pos (QHX_ERR_ARG, the session unchanged, outside that). */
qhx_status qhx_session_rewind(qhx_session *s, int pos);

/* ---- snapshots: resume a session at a position without recomputing ------------------------- */

/* A hybrid model's recurrent state cannot be cut back to an earlier position, so resuming needs a
 * snapshot taken there: the conv FIFOs and delta-rule states (copied), the KV rows and the token
 * ids (shared between the snapshots of a session: each keeps only the rows since the previous
 * one), and the position. A snapshot stays valid whatever the session does later, and may be
 * restored into any session of the same model, any number of times; it is immutable, so several
 * threads may restore one at once. */
typedef struct qhx_snapshot qhx_snapshot;

qhx_status qhx_session_snapshot(qhx_session *s, qhx_snapshot **out);
/* Takes the session's state into an existing snapshot of the same model, reusing its memory (for
 * a snapshot taken over and over, as speculative decoding does each step; only for one that no
 * other thread is restoring). */
qhx_status qhx_session_snapshot_into(qhx_session *s, qhx_snapshot *snap);
/* Puts the session exactly where the snapshot was taken: evaluating the same tokens from there
 * gives bit for bit the logits the session gave after it. Fails (the session unchanged) on a
 * snapshot of another model. KV rows the session still holds from the snapshot's chain are not
 * copied again. */
qhx_status qhx_session_restore(qhx_session *s, const qhx_snapshot *snap);
/* Frees a snapshot (NULL is fine); rows other snapshots share live on with them. */
void qhx_snapshot_free(qhx_snapshot *snap);

typedef struct {
    int pos;                  /* tokens the snapshot covers */
    uint64_t state_bytes;     /* conv FIFOs + delta-rule states it holds */
    uint64_t kv_bytes;        /* KV rows it added (since the previous snapshot of its session) */
    uint64_t kv_shared_bytes; /* KV rows it shares with earlier snapshots */
} qhx_snapshot_info;
void qhx_snapshot_get_info_sized(const qhx_snapshot *snap, qhx_snapshot_info *info, size_t info_size);
static inline void qhx_snapshot_get_info(const qhx_snapshot *snap, qhx_snapshot_info *info) {
    qhx_snapshot_get_info_sized(snap, info, sizeof *info);
}
/* The token ids of positions [0, pos): copies min(pos, cap) of them to out (may be NULL) and
 * returns pos. */
int qhx_snapshot_tokens(const qhx_snapshot *snap, int32_t *out, int cap);
/* The ids the session has consumed, [0, qhx_session_pos(s)) (owned by the session, valid until its
 * next call). */
const int32_t *qhx_session_tokens(const qhx_session *s);

/* A state file: a snapshot with the model it belongs to, written atomically. qhx_snapshot_load
 * refuses, before reading any state into memory, a file of another model or format version, or
 * a truncated or corrupted one (its checksum). */
qhx_status qhx_snapshot_save(const qhx_snapshot *snap, const char *path);
qhx_status qhx_snapshot_load(qhx_model *m, const char *path, qhx_snapshot **out);

/* ---- constrained decoding: grammars and JSON Schema -------------------------------------- */

/* A grammar the output must follow, compiled for a tokenizer's vocabulary (the model's:
 * qhx_model_tokenizer). Immutable once made: one grammar may serve many generations at once. */
typedef struct qhx_grammar qhx_grammar;

/* From llama.cpp's GBNF (start rule `root`): "literals", [classes], [^negated], ., rules, ( ),
 * * + ? {m} {m,} {m,n}, # comments. Left-recursive and undefined rules are refused by name. */
qhx_status qhx_grammar_from_gbnf(const qhx_tokenizer *t, const char *gbnf, size_t len, qhx_grammar **out);
/* From a JSON Schema (draft 2020-12): the output is a JSON value the schema accepts (space
 * around it allowed). docs/usage.md lists the keywords enforced; any other keyword that
 * constrains a value fails with QHX_ERR_UNSUPPORTED naming it. */
qhx_status qhx_grammar_from_json_schema(const qhx_tokenizer *t, const char *schema, size_t len, qhx_grammar **out);
/* The GBNF a schema compiles to (malloc'd, NUL-terminated), to read or to edit. */
qhx_status qhx_json_schema_to_gbnf(const char *schema, size_t len, char **gbnf);
/* Qwen3.5's tool-call format (<tool_call><function=NAME><parameter=K>...) as GBNF, for forcing a
 * call: tools is the OpenAI "tools" array; name: only that function (NULL: any of them);
 * max_calls 1 for one call, else one or more. Parameters come in any order (up to 8 per function;
 * more in the order listed), the required ones present; strings as raw text (an enum's values
 * when it has one), other types as JSON their schema accepts. */
qhx_status qhx_tool_call_gbnf(const char *tools, size_t len, const char *name, int max_calls, char **gbnf);
void qhx_grammar_free(qhx_grammar *g);

/* ---- generation and sampling ------------------------------------------------------------- */

/* The model a session runs. */
qhx_model *qhx_session_model(const qhx_session *s);

/* Called once per generated token with the text it releases: complete UTF-8 only, and never any
 * part of a stop string (text that could still turn into one is held back until it cannot). text
 * is NULL when the model has no tokenizer; an id the tokenizer has no text for (Qwen3.5 pads its
 * lm-head past the tokenizer's ids) is reported with len 0. When generation ends, text still held back arrives in
 * one last call with token -1. Return non-zero to stop: qhx_generate then returns
 * QHX_ERR_CANCELLED with the token counted. */
typedef int (*qhx_token_cb)(int32_t token, const char *text, size_t len, void *user);

#define QHX_MAX_STOP 16          /* stop strings per request */
#define QHX_MAX_STOP_BYTES 256   /* bytes per stop string */

/* Zero-initialised options are greedy decoding that stops at the model's end-of-turn ids. The
 * steps run in Hugging Face's order: penalties on the raw logits, temperature, top-k, top-p,
 * min-p, then a draw from the rest with a generator seeded by `seed` (same seed and inputs, same
 * tokens). */
typedef struct {
    int max_tokens;            /* tokens to generate at most */
    float temperature;         /* 0: greedy (argmax after penalties) */
    int top_k;                 /* keep the k most probable tokens; 0: off (1: greedy) */
    float top_p;               /* keep the smallest most-probable set holding top_p of the mass; 0 or 1: off */
    float min_p;               /* drop tokens less probable than min_p x the most probable; 0: off */
    float repeat_penalty;      /* HF repetition penalty on tokens in the window (>1 discourages); 0 or 1: off */
    float presence_penalty;    /* subtracted once from the logit of every token in the window */
    float frequency_penalty;   /* subtracted per occurrence in the window */
    int penalty_window;        /* last N tokens (prompt and generated) the penalties see; 0: 64; -1: all */
    uint64_t seed;
    const int32_t *stop_ids;   /* ids that end generation (not reported), besides the model's eos ids */
    int n_stop_ids;
    int ignore_eos;            /* do not stop at the model's eos ids */
    const char *const *stop;   /* stop strings: generation ends where one appears in the text, even across
                                  tokens; the stop string and anything after it are never emitted */
    int n_stop;
    int draft;                 /* speculative decoding: QHX_DRAFT_NONE (0), QHX_DRAFT_NGRAM or QHX_DRAFT_MTP */
    int draft_max;             /* tokens drafted per step at most (0: 8; at most QHX_MAX_DRAFT, and
                                  QHX_MAX_MTP_DRAFT for the MTP head) */
    /* Each one-token decode step through step(s, token, logits, step_user) instead of
     * qhx_session_eval(s, &token, 1, QHX_EVAL_STEPWISE, NULL, logits), which it must equal: a
     * server steps its sessions together with qhx_sessions_step. NULL: qhx_session_eval. */
    qhx_status (*step)(qhx_session *s, int32_t token, float *logits, void *step_user);
    void *step_user;
    /* OpenAI's logit_bias: bias[i] added to the logit of token bias_ids[i] before anything else
     * (-100 bans a token, +100 all but forces it); ids outside the vocabulary are refused */
    const int32_t *bias_ids;
    const float *bias;
    int n_bias;
    /* Log-probabilities: when set, called for each generated token just before the token callback
     * with its log-probability and the top_logprobs (at most QHX_MAX_TOP_LOGPROBS) most probable
     * tokens, all under log-softmax of the logits the sampler saw after the bias and the penalties
     * (before temperature, top-k, top-p and min-p). */
    void (*logprobs)(int32_t token, float logprob, const int32_t *top_ids, const float *top_logprobs, int n_top, void *user);
    void *logprobs_user;
    int top_logprobs;
    /* Before each token is sampled: a token to take instead (a thinking budget closing the
     * reasoning block), or -1 to sample as usual. Its logprob is still reported. */
    int32_t (*force)(void *force_user);
    void *force_user;
    /* Constrained decoding: every token sampled keeps the text a prefix of a sentence of the
     * grammar (the end-of-turn ids only once it is whole; generation stops when nothing more may
     * follow): the draw is from the distribution restricted to the tokens the grammar allows
     * (greedy: the best of them), top-k/top-p/min-p applied after the restriction. The sampled
     * token is checked first and the full mask built only when it is refused (or, sampling with
     * top-k/top-p/min-p, always). Logprobs are those before the restriction. With
     * grammar_after, tokens are free until that text has been generated (a reasoning block's
     * "</think>"), and the grammar starts right after it. */
    const qhx_grammar *grammar;
    const char *grammar_after;
} qhx_generate_opts;
#define QHX_MAX_TOP_LOGPROBS 20

/* Speculative decoding drafts a few tokens, evaluates them after the current one in one pass
 * (the weights stream once for all), keeps the longest prefix the model agrees with and takes the
 * rest back (qhx_session_rewind). The output is what decoding without it gives: greedy, the same
 * tokens (the verify pass computes every token as decode does, bit for bit); sampled, the same
 * tokens for the same seed (each token is drawn as without drafts, and a draft is kept when the
 * draw is the draft: with probability p(draft), the speculative-sampling rule for a one-token
 * draft). The session is left as if the tokens had been decoded one by one. The draft length
 * follows the acceptance, and drafting pauses while it does not pay (windows costing more time a
 * token than plain steps, measured as it runs). */
enum {
    QHX_DRAFT_NONE = 0,
    QHX_DRAFT_NGRAM = 1,       /* prompt lookup: the tokens that followed the latest earlier occurrence
                                  of the context's last 3-4 tokens (quotes, edits, code, retrieval) */
    QHX_DRAFT_MTP = 2          /* the model's own multi-token-prediction head (mtp.*, as real Qwen3.5
                                  checkpoints carry; qhx_model_info.mtp_layers), each draft its argmax,
                                  chained on its own output; QHX_ERR_ARG on a model without one. It sees
                                  the context from the qhx_generate call that starts it on */
};
#define QHX_MAX_DRAFT 16
#define QHX_MAX_MTP_DRAFT 15

typedef enum {
    QHX_FINISH_LENGTH = 0,     /* max_tokens reached */
    QHX_FINISH_STOP,           /* an eos/stop id or a stop string */
    QHX_FINISH_CANCELLED       /* the callback asked to stop */
} qhx_finish;

typedef struct {
    int n_prompt, n_generated; /* tokens evaluated from the prompt; tokens reported through the callback */
    qhx_finish finish;
    int n_drafted, n_accepted; /* speculative decoding: tokens drafted, and kept */
    int n_verify;              /* verify passes (each evaluates the current token and its drafts) */
    int stop_string;           /* the index in opts.stop of the stop string that ended it, or -1 */
} qhx_generate_result;

/* Evaluates the prompt (after whatever the session already holds), then samples up to max_tokens
 * tokens, reporting each through cb (may be NULL). result may be NULL. The prompt plus max_tokens
 * must fit in the context left; this is checked before anything runs. */
qhx_status qhx_generate_sized(qhx_session *s, const int32_t *prompt, int n_prompt, const qhx_generate_opts *opts,
                              size_t opts_size, qhx_token_cb cb, void *user, qhx_generate_result *result, size_t result_size);
static inline qhx_status qhx_generate(qhx_session *s, const int32_t *prompt, int n_prompt, const qhx_generate_opts *opts,
                                      qhx_token_cb cb, void *user, qhx_generate_result *result) {
    return qhx_generate_sized(s, prompt, n_prompt, opts, sizeof *opts, cb, user, result, sizeof *result);
}

/* ---- prefix cache: what earlier requests evaluated, resumed ------------------------------------
 * Session snapshots at the split points of earlier prompts and replies: a prompt that starts as
 * an earlier one did (the same system prompt, a conversation's history, a regenerated answer)
 * resumes at the deepest such point instead of evaluating it again. The split points are where
 * the chat's system and user messages start (or, without chat markers, before a prompt's last
 * token); prompts are evaluated in pieces that end there and every QHX_PREFIX_PIECE tokens after,
 * cache or no cache, so a resumed request gives the logits a cold one gives, bit for bit.
 * Thread-safe; entries are copied out, never lent. Eviction weighs the tokens an entry saves
 * against the bytes it holds, and how recently it served. */
typedef struct qhx_prefix_cache qhx_prefix_cache;
#define QHX_PREFIX_PIECE 256

/* A cache of at most budget_bytes (0: off: nothing is kept, prefill evaluates everything) for
 * sessions on m, whose tokenizer gives the chat markers. */
qhx_status qhx_prefix_cache_new(qhx_model *m, uint64_t budget_bytes, qhx_prefix_cache **out);
void qhx_prefix_cache_free(qhx_prefix_cache *pc);
/* Resets s and evaluates a prompt of n ids into it from the deepest cached split point on,
 * keeping the state at each split point reached, up to the last piece end before the prompt's
 * last token: qhx_generate then takes ids + qhx_session_pos(s). *cached: the tokens resumed.
 * yield (may be NULL), called after each piece, may let others use the model; nonzero cancels
 * (QHX_ERR_CANCELLED). */
qhx_status qhx_prefix_cache_prefill(qhx_prefix_cache *pc, qhx_session *s, const int32_t *ids, int n, int *cached,
                                    int (*yield)(void *user), void *user);
/* The lower-level steps: resets s and restores the deepest cached split point of ids (returns
 * its position, 0 when none); keeps s's state at its position. */
int qhx_prefix_cache_lookup(qhx_prefix_cache *pc, qhx_session *s, const int32_t *ids, int n);
void qhx_prefix_cache_insert(qhx_prefix_cache *pc, qhx_session *s);
/* After a chat reply: keeps the state the next turn's prompt will resume from. conversation: the
 * qhx_chat_render request whose last message is the reply; prompt: the ids the reply was
 * generated from. This renders the conversation with the next turn's message after the reply
 * (an empty user message; an empty tool response when the reply has tool_calls, so that, as in
 * an agent's next step, the reply keeps its reasoning_content) and evaluates from the prompt's
 * last split point to that message's start (s is left anywhere). What fails only costs a later hit. */
qhx_status qhx_prefix_cache_add_reply(qhx_prefix_cache *pc, qhx_session *s, const char *conversation, size_t len,
                                      const int32_t *prompt, int n_prompt);
/* Keeps the cache's snapshots as state files in dir as well (created if missing), at most
 * budget_bytes of them (0: none), the least worth deleted first, and resumes from a file where
 * memory holds nothing as deep: a restarted server or the next process on the same model and
 * runtime options takes up long prompts where the last one left them. The files of dir that are
 * this model's are indexed at once (their headers: the checksum is checked when one is read);
 * others (another model, kernel set or KV form) are left alone, so models may share a directory.
 * Writing a snapshot takes its bytes' time on the thread that reached it. Once per cache, on a
 * cache that is on; QHX_ERR_IO names dir when it cannot be made or read. */
qhx_status qhx_prefix_cache_set_dir(qhx_prefix_cache *pc, const char *dir, uint64_t budget_bytes);
typedef struct {
    uint64_t budget, bytes;
    int entries;
    unsigned long hits, misses, evictions;
    /* the directory (all zero without one): its budget, bytes and files; prompts resumed from a
     * file, files written, files deleted (for the budget, or damaged); .qhxstate files found at
     * set_dir that this model cannot take (another model, kernel set or KV form), left alone */
    uint64_t dir_budget, dir_bytes;
    int dir_files;
    unsigned long dir_hits, dir_writes, dir_deleted;
    int dir_others;
} qhx_prefix_cache_stats;
void qhx_prefix_cache_get_stats_sized(qhx_prefix_cache *pc, qhx_prefix_cache_stats *st, size_t st_size);
static inline void qhx_prefix_cache_get_stats(qhx_prefix_cache *pc, qhx_prefix_cache_stats *st) {
    qhx_prefix_cache_get_stats_sized(pc, st, sizeof *st);
}

/* ---- tokenizer: byte-level BPE from a Hugging Face tokenizer.json --------------------------- */

/* Loads a tokenizer.json, a compact tokenizer (qhx_tokenizer_save_compact; told apart by its
 * magic), or the tokenizer.json inside a directory. Vocabulary, merges (either
 * "a b" or ["a", "b"] form), added tokens, normalizer, Split/ByteLevel pre-tokenizer and decoder
 * are all read from the file; nothing about a particular vocabulary is built in. */
qhx_status qhx_tokenizer_load(const char *path, qhx_tokenizer **out);
/* Frees a tokenizer from qhx_tokenizer_load (NULL is fine); never one owned by a model. */
void qhx_tokenizer_free(qhx_tokenizer *t);
/* Writes the loaded tables in the compact binary form (atomically): same encodings, loads in a
 * fraction of the time (no JSON). */
qhx_status qhx_tokenizer_save_compact(const qhx_tokenizer *t, const char *path);
/* One past the largest id the tokenizer knows. */
int qhx_tokenizer_n_ids(const qhx_tokenizer *t);
/* At least the longest token's text in bytes: qhx_detok_push never needs more than 3 x this + 16. */
size_t qhx_tokenizer_max_piece(const qhx_tokenizer *t);
/* The id of an added token's exact content ("<|im_end|>"), or -1. */
int32_t qhx_tokenizer_find_added(const qhx_tokenizer *t, const char *content);

#define QHX_MAX_TEXT_BYTES (64u << 20)  /* one encode call; longer text fails with QHX_ERR_RANGE */

enum {
    QHX_ENCODE_SPECIAL = 1,        /* match special added tokens in the text (otherwise plain text) */
    QHX_ENCODE_REPLACE_INVALID = 2 /* replace invalid UTF-8 with U+FFFD instead of failing */
};

/* Encodes len bytes of UTF-8 text (at most QHX_MAX_TEXT_BYTES). Safe to call on one tokenizer from
 * several threads (its word cache has a lock). *ids is malloc'd (free() it); *n_ids its length. Invalid
 * UTF-8 fails with the byte offset unless QHX_ENCODE_REPLACE_INVALID. */
qhx_status qhx_tokenizer_encode(qhx_tokenizer *t, const char *text, size_t len, int flags,
                                int32_t **ids, size_t *n_ids);
/* Decodes ids to text (malloc'd, NUL-terminated; *len excludes the NUL). Bytes that form no
 * character become U+FFFD, as in Hugging Face's decode. Unknown ids fail. */
qhx_status qhx_tokenizer_decode(const qhx_tokenizer *t, const int32_t *ids, size_t n, char **text, size_t *len);

/* Streaming decode: feed ids one at a time; only complete UTF-8 characters come out, so a
 * character split across tokens is never split across callbacks. */
typedef struct {
    unsigned char pending[8];
    int n_pending;
} qhx_detok_stream;

/* Appends the text that id completes to out (cap bytes; 64 + the longest token suffice) and
 * returns its length, or -1 for an unknown id. Bytes that can never form a character come out
 * as U+FFFD. */
int qhx_detok_push(const qhx_tokenizer *t, qhx_detok_stream *st, int32_t id, char *out, size_t cap);
/* Whatever is still pending at the end, as U+FFFD. */
int qhx_detok_flush(qhx_detok_stream *st, char *out, size_t cap);

/* ---- chat format ------------------------------------------------------------------------------ */

/* Renders a conversation exactly as the Qwen3.5 chat template does. `request` is a JSON object:
 * {"messages": [{"role", "content", "reasoning_content"?, "tool_calls"?}...], "tools"?: [...],
 *  "add_generation_prompt"?: bool (default true), "enable_thinking"?: bool (default: thinking on),
 *  "continue_final_message"?: bool (the final message, an assistant's, left open to be continued,
 *  as Hugging Face's apply_chat_template leaves it; no generation prompt)}.
 * *out is malloc'd and NUL-terminated; *out_len (may be NULL) is its length. */
qhx_status qhx_chat_render(const char *request, size_t len, char **out, size_t *out_len);

#ifdef __GNUC__
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif
#endif
