/* Taking and restoring snapshots of a session (model/snapshot.h). */
#include "model/snapshot.h"
#include "util/buf.h"
#include "util/error.h"

#include <stdlib.h>
#include <string.h>

size_t qhx_snapshot_recurrent_floats(const qhx_config *c) {
    return qhx_state_fixed_bytes(c) / sizeof(float);
}

size_t qhx_snapshot_row_bytes(const qhx_model *m) { return qhx_state_kv_bytes_per_token(&m->cfg, m->rt->kv); }

void qhx_kv_segment_unref(qhx_kv_segment *seg) {
    while (seg && __atomic_sub_fetch(&seg->refs, 1, __ATOMIC_ACQ_REL) == 0) {
        qhx_kv_segment *parent = seg->parent;
        free(seg->tokens);
        free(seg->rows);
        free(seg);
        seg = parent;
    }
}

static qhx_kv_segment *segment_ref(qhx_kv_segment *seg) {
    if (seg) __atomic_add_fetch(&seg->refs, 1, __ATOMIC_RELAXED);
    return seg;
}

static qhx_kv_segment *segment_new(const qhx_model *m, qhx_kv_segment *parent, int row0, int row1) {
    qhx_kv_segment *seg = calloc(1, sizeof *seg);
    const size_t n = (size_t)(row1 - row0);
    if (!seg) return NULL;
    seg->tokens = malloc(sizeof(int32_t) * (n ? n : 1));
    seg->rows = malloc(n * qhx_snapshot_row_bytes(m) + 1);
    if (!seg->tokens || !seg->rows) {
        free(seg->tokens);
        free(seg->rows);
        free(seg);
        return NULL;
    }
    seg->refs = 1;
    seg->parent = segment_ref(parent);
    seg->row0 = row0;
    seg->row1 = row1;
    return seg;
}

/* Copies rows [seg->row0, seg->row1) between a segment and the session's caches: to the segment
 * when `save`, else back into the session. */
static void segment_copy(const qhx_model *m, qhx_hostop_state *hs, qhx_kv_segment *seg, int save) {
    const qhx_config *c = &m->cfg;
    const size_t n = (size_t)(seg->row1 - seg->row0), block = n * hs->st.kv_head; /* a head's rows */
    unsigned char *at = seg->rows;
    for (int l = 0; l < c->n_layers; l++) {
        if (!c->full_attn[l]) continue;
        qhx_layer_state *ls = qhx_state_layer(&hs->st, l);
        unsigned char *const cache[2] = {ls->k_cache, ls->v_cache};
        for (int kv = 0; kv < 2; kv++)
            for (int j = 0; j < c->n_kv_heads; j++, at += block) {
                unsigned char *rows = qhx_state_kv(&hs->st, cache[kv], j, seg->row0);
                save ? memcpy(at, rows, block) : memcpy(rows, at, block);
            }
    }
    if (save) memcpy(seg->tokens, hs->tokens + seg->row0, sizeof(int32_t) * n);
    else memcpy(hs->tokens + seg->row0, seg->tokens, sizeof(int32_t) * n);
}

/* The recurrent state to a snapshot (save) or back. */
static void recurrent_copy(const qhx_model *m, qhx_hostop_state *hs, float *at, int save) {
    const qhx_config *c = &m->cfg;
    const size_t conv = qhx_state_conv_floats(c), ssm = qhx_state_ssm_floats(c);
    for (int l = 0; l < c->n_layers; l++) {
        if (c->full_attn[l]) continue;
        qhx_layer_state *ls = qhx_state_layer(&hs->st, l);
        if (save) memcpy(at, ls->conv, sizeof(float) * conv), memcpy(at + conv, ls->ssm, sizeof(float) * ssm);
        else memcpy(ls->conv, at, sizeof(float) * conv), memcpy(ls->ssm, at + conv, sizeof(float) * ssm);
        at += conv + ssm;
    }
}

qhx_status qhx_snapshot_alloc(const qhx_model *m, int pos, qhx_snapshot **out) {
    *out = NULL;
    qhx_snapshot *snap = calloc(1, sizeof *snap);
    if (!snap || !(snap->recurrent = malloc(sizeof(float) * (qhx_snapshot_recurrent_floats(&m->cfg) + 1))) ||
        (pos > 0 && !(snap->kv = segment_new(m, NULL, 0, pos)))) {
        qhx_snapshot_free(snap);
        return qhx_fail(QHX_ERR_NOMEM, "snapshot: out of memory for %d positions", pos);
    }
    snap->model = m;
    snap->pos = pos;
    snap->own_kv = pos > 0;
    *out = snap;
    return QHX_OK;
}

/* Takes the session's state into snap, whose recurrent buffer is already allocated. */
static qhx_status snapshot_fill(const qhx_model *m, qhx_hostop_state *hs, qhx_snapshot *snap) {
    qhx_kv_segment *tip = hs->kv_tip;
    int own = 0;
    if (hs->st.pos > 0 && (!tip || tip->row1 < hs->st.pos)) { /* the rows since the session's last snapshot */
        qhx_kv_segment *seg = segment_new(m, tip, tip ? tip->row1 : 0, hs->st.pos);
        if (!seg) return qhx_fail(QHX_ERR_NOMEM, "snapshot: out of memory for %d KV rows", hs->st.pos);
        segment_copy(m, hs, seg, 1);
        qhx_kv_segment_unref(tip);
        hs->kv_tip = tip = seg;
        own = 1;
    }
    qhx_kv_segment_unref(snap->kv);
    snap->kv = segment_ref(hs->st.pos > 0 ? tip : NULL);
    snap->own_kv = own;
    snap->model = m;
    snap->pos = hs->st.pos;
    recurrent_copy(m, hs, snap->recurrent, 1);
    return QHX_OK;
}

qhx_status qhx_hostop_snapshot(const qhx_model *m, qhx_hostop_state *hs, qhx_snapshot **out) {
    qhx_status rc = qhx_snapshot_alloc(m, 0, out);
    if (!rc && (rc = snapshot_fill(m, hs, *out))) {
        qhx_snapshot_free(*out);
        *out = NULL;
    }
    return rc;
}

qhx_status qhx_hostop_snapshot_into(const qhx_model *m, qhx_hostop_state *hs, qhx_snapshot *snap) {
    if (snap->model != m) return qhx_fail(QHX_ERR_ARG, "snapshot: it was taken on another model");
    return snapshot_fill(m, hs, snap);
}

static int in_chain(const qhx_kv_segment *chain, const qhx_kv_segment *seg) {
    for (; chain; chain = chain->parent)
        if (chain == seg) return 1;
    return 0;
}

qhx_status qhx_hostop_restore(const qhx_model *m, qhx_hostop_state *hs, const qhx_snapshot *snap) {
    if (snap->model != m) return qhx_fail(QHX_ERR_ARG, "snapshot: it was taken on another model");
    if (qhx_reserve(&hs->tokens, &hs->tokens_cap, (size_t)snap->pos, sizeof *hs->tokens))
        return qhx_fail(QHX_ERR_NOMEM, "snapshot: out of memory for %d tokens", snap->pos);
    qhx_status rc = qhx_state_reserve_kv(&hs->st, snap->pos);
    if (rc) return rc;
    /* the rows the session holds as a copy of this chain stay; the rest come from the segments */
    for (qhx_kv_segment *seg = snap->kv; seg && !in_chain(hs->kv_tip, seg); seg = seg->parent) segment_copy(m, hs, seg, 0);
    qhx_kv_segment *old = hs->kv_tip;
    hs->kv_tip = segment_ref(snap->kv);
    qhx_kv_segment_unref(old);
    recurrent_copy(m, hs, snap->recurrent, 0);
    hs->st.pos = snap->pos;
    hs->st.mark = -1;
    return QHX_OK;
}

void qhx_snapshot_free(qhx_snapshot *snap) {
    if (!snap) return;
    qhx_kv_segment_unref(snap->kv);
    free(snap->recurrent);
    free(snap);
}

void qhx_snapshot_get_info_sized(const qhx_snapshot *snap, qhx_snapshot_info *out, size_t size) {
    const qhx_config *c = &snap->model->cfg;
    qhx_snapshot_info full, *info = &full;
    const uint64_t row = qhx_snapshot_row_bytes(snap->model);
    memset(info, 0, sizeof *info);
    info->pos = snap->pos;
    info->state_bytes = qhx_snapshot_recurrent_floats(c) * sizeof(float);
    const int own = snap->own_kv ? snap->kv->row1 - snap->kv->row0 : 0;
    info->kv_bytes = (uint64_t)own * row;
    info->kv_shared_bytes = (uint64_t)(snap->pos - own) * row;
    memcpy(out, &full, size < sizeof full ? size : sizeof full);
}

int qhx_snapshot_tokens(const qhx_snapshot *snap, int32_t *out, int cap) {
    if (out)
        for (const qhx_kv_segment *seg = snap->kv; seg; seg = seg->parent)
            for (int r = seg->row0; r < seg->row1 && r < cap; r++) out[r] = seg->tokens[r - seg->row0];
    return snap->pos;
}
