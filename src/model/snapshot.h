/* Snapshots of a session (qhexrt.h: qhx_session_snapshot): what a hybrid model needs to resume at
 * a position. The recurrent part (conv FIFOs, delta-rule states) is copied whole: it cannot be cut
 * back. The KV rows are append-only, so snapshots keep them in a chain of refcounted segments,
 * each holding the rows since the previous snapshot of its session: every row is stored once, and
 * restoring into a session that still holds a prefix of the chain copies only the rest. */
#ifndef QHX_SNAPSHOT_H
#define QHX_SNAPSHOT_H
#include "model/model.h"

struct qhx_kv_segment {
    int refs;                 /* atomic: snapshots and sessions on several threads share segments */
    qhx_kv_segment *parent;   /* rows [0, row0) */
    int row0, row1;
    int32_t *tokens;          /* [row1 - row0]: the tokens those rows came from */
    unsigned char *rows;      /* each full-attention layer in order: K then V, each head's
                                 [row1 - row0] rows in the model's KV form (kernels/kv.h) */
};

struct qhx_snapshot {
    const qhx_model *model;
    int pos;
    qhx_kv_segment *kv;       /* rows [0, pos); NULL at position 0 */
    float *recurrent;         /* each linear-attention layer in order: conv FIFO, then delta-rule state */
    int own_kv;               /* 1 when this snapshot added kv (its rows count in its bytes) */
};

/* qhx_session_snapshot / qhx_session_restore on a host-op state */
qhx_status qhx_hostop_snapshot(const qhx_model *m, qhx_hostop_state *hs, qhx_snapshot **out);
qhx_status qhx_hostop_snapshot_into(const qhx_model *m, qhx_hostop_state *hs, qhx_snapshot *snap);
qhx_status qhx_hostop_restore(const qhx_model *m, qhx_hostop_state *hs, const qhx_snapshot *snap);

void qhx_kv_segment_unref(qhx_kv_segment *seg);
/* floats of the recurrent state of the whole model, and bytes of one KV row over every full layer */
size_t qhx_snapshot_recurrent_floats(const qhx_config *c);
size_t qhx_snapshot_row_bytes(const qhx_model *m);
/* A snapshot over a fresh single segment [0, pos), its buffers allocated, for a reader to fill
 * (tokens, rows, recurrent). */
qhx_status qhx_snapshot_alloc(const qhx_model *m, int pos, qhx_snapshot **out);

/* what state files name a model by (model/state_file.c) */
uint64_t qhx_model_identity(const qhx_model *m);
/* A state file's token ids (*tokens malloc'd), the file checked as qhx_snapshot_load checks it but
 * for its checksum: what a load will take unless the bytes were damaged, found without reading
 * them all (the prefix cache's files are indexed this way). */
qhx_status qhx_state_file_peek(qhx_model *m, const char *path, int32_t **tokens, int *pos);

#endif
