/* Forge stage 1: decode shards by contiguous layer range, as few as fit the per-shard byte
 * ceiling, then balanced (the largest shard as small as that count allows). */
#include "util/tensor.h"
#include "forge/forge_internal.h"
#include "model/model.h"
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


static uint64_t align64(uint64_t x) { return qhx_round_up(x, 64); }

uint64_t forge_spec_bytes(const forge *f, const qhx_tensor_spec *s) {
    const qhx_dtype dt = qhx_bundle_dtype(s, f->matrices);
    int rows, cols;
    qhx_spec_dims(s, &rows, &cols);
    return align64(qhxf_data_bytes(dt, (uint64_t)rows, (uint64_t)cols)) + (dt == QHX_I8 ? align64(4 * (uint64_t)rows) : 0);
}

/* Fewest shards under `cap` by greedy packing; 0 when some layer alone exceeds it. */
static int pack(const uint64_t *bytes, int L, uint64_t cap, int *first) {
    int n = 0;
    uint64_t cur = 0;
    for (int l = 0; l < L; l++) {
        if (bytes[l] > cap) return 0;
        if (n == 0 || cur + bytes[l] > cap) {
            if (first) first[n] = l;
            n++;
            cur = 0;
        }
        cur += bytes[l];
    }
    return n;
}

/* Splits layers into as few contiguous shards as fit the ceiling, then lowers the cap as far as
 * that count allows, so the shards come out balanced (16/16 for the 4B shape). */
qhx_status forge_plan(forge *f, int *n_shards, int *first, uint64_t ceiling) {
    const qhx_config *c = &f->src->cfg;
    uint64_t *bytes = calloc((size_t)c->n_layers, sizeof *bytes);
    if (!bytes) return qhx_fail(QHX_ERR_NOMEM, "out of memory");
    const uint64_t overhead = 64 << 10; /* header and directory, generously */
    for (int i = 0; i < f->n_specs; i++) {
        const qhx_tensor_spec *s = &f->specs[i];
        if (s->layer >= 0) bytes[s->layer] += forge_spec_bytes(f, s);
        else if (s->dst == &f->src->w->final_norm) bytes[c->n_layers - 1] += forge_spec_bytes(f, s);
    }
    bytes[0] += overhead;
    int n = pack(bytes, c->n_layers, ceiling, NULL);
    if (!n) {
        int worst = 0;
        for (int l = 1; l < c->n_layers; l++) worst = bytes[l] > bytes[worst] ? l : worst;
        const unsigned long long need = bytes[worst];
        free(bytes);
        return qhx_fail(QHX_ERR_RANGE, "--max-context-bytes %llu: layer %d alone needs %llu bytes", (unsigned long long)ceiling,
                        worst, need);
    }
    uint64_t lo = 1, hi = ceiling; /* smallest cap that still packs into n shards */
    while (lo < hi) {
        const uint64_t mid = lo + (hi - lo) / 2;
        const int k = pack(bytes, c->n_layers, mid, NULL);
        if (k && k <= n) hi = mid;
        else lo = mid + 1;
    }
    *n_shards = pack(bytes, c->n_layers, hi, first);
    first[*n_shards] = c->n_layers;
    free(bytes);
    if (*n_shards > QHX_MAX_SHARDS)
        return qhx_fail(QHX_ERR_RANGE, "--max-context-bytes %llu: would need %d shards (at most %d)",
                        (unsigned long long)ceiling, *n_shards, QHX_MAX_SHARDS);
    return QHX_OK;
}

