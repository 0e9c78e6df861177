/* The fp32-activation kernels, written once over a vector layer (kernels/vec_<isa>.h, included
 * first) and instantiated once per ISA (kernels/fp32_<isa>.c). Every dtype's weights widen to
 * fp32 in registers (exact), so results match the scalar twin up to FMA rounding and the layer's
 * lane order. Ragged tails go through zero-filled lanes: every element of every shape gets the
 * same arithmetic as the body.
 *
 *   decode (T <= QHX_DECODE_MAX_T): every dtype is read as one sequential stream: W8 its packed
 *     row groups (format/w8.h), each token in turn over a group while it sits in L1; row-major
 *     dtypes a row at a time, up to 4 tokens over it.
 *   prefill: with QV_PREFILL_WIDEN, 4 rows widened once, every token swept over them
 *     QV_PREFILL_TOKENS at a time, so the FMAs run from registers and the widening is shared by
 *     all T tokens; without, decode's tiles over plain rows (W8 groups unpacked), widening in
 *     registers: the layer says which its registers and caches favour.
 *   attention's tile products (gemm), the delta rule, silu, the conv; attention over the KV
 *   cache (attend, kv_widen) and prefill attention's running softmax (softmax_tile). */
#include "format/w4.h"
#include "format/w8.h"
#include "kernels/kernels.h"
#include "kernels/kv.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define QV_PASTE_(a, b) a##_##b
#define QV_PASTE(a, b) QV_PASTE_(a, b)
#define QV_NAME(f) QV_PASTE(QV_ISA, f)

/* Bytes ahead on each of a tile's rows: the rows are read side by side, so what is fetched is
 * what they read that much later, in the next tile's rows once these run out (a fixed distance
 * past a row's end would land in the row beside it, already read). Into a 4-row fp16 lm-head on
 * the Zen 5 VM, 2 threads: 57-58 GB/s against 36 GB/s without; a row at a time as one stream
 * (decode_rows) then read it at 64-68 GB/s against the tiles' 48-59, alternated 12 times. */
#define QV_ROW_AHEAD 2048

/* One step of a tile: QV_LANES columns from c, every row and token. */
#define QV_TILE_STEP(LOAD, ES)                                                                                         \
    do {                                                                                                               \
        qv_f32 wv[4], xv[4];                                                                                           \
        _Pragma("GCC unroll 4") for (int i = 0; i < NR; i++) wv[i] = LOAD(w + i * wstride + c * ES);                   \
        _Pragma("GCC unroll 4") for (int j = 0; j < NT; j++) xv[j] = qv_load(x + j * xstride + c);                     \
        _Pragma("GCC unroll 4") for (int i = 0; i < NR; i++)                                                           \
            _Pragma("GCC unroll 4") for (int j = 0; j < NT; j++) acc[i][j] = qv_fma(wv[i], xv[j], acc[i][j]);          \
    } while (0)

/* One tile: NR rows x NT tokens of one dtype, all columns: a cache line of each row at a time,
 * its prefetch first, then the whole steps left and the ragged end. */
#define QV_TILE(NAME, LOAD, ES)                                                                                        \
    QV_INLINE void NAME(const unsigned char *w, size_t wstride, const float *x, size_t xstride, size_t cols, int NR,   \
                        int NT, float out[4][4]) {                                                                     \
        qv_f32 acc[4][4];                                                                                              \
        _Pragma("GCC unroll 4") for (int i = 0; i < NR; i++)                                                           \
            _Pragma("GCC unroll 4") for (int j = 0; j < NT; j++) acc[i][j] = qv_zero();                                \
        size_t c = 0;                                                                                                  \
        while (c + 64 / ES <= cols) {                                                                                  \
            const size_t ahead = c * ES + QV_ROW_AHEAD;                                                                \
            const unsigned char *pf = ahead < wstride ? w + ahead : w + NR * wstride + ahead - wstride;                \
            _Pragma("GCC unroll 4") for (int i = 0; i < NR; i++) __builtin_prefetch(pf + i * wstride, 0, 3);          \
            _Pragma("GCC unroll 16") for (int k = 0; k < 64 / ES / QV_LANES; k++, c += QV_LANES) QV_TILE_STEP(LOAD, ES); \
        }                                                                                                              \
        for (; c + QV_LANES <= cols; c += QV_LANES) QV_TILE_STEP(LOAD, ES);                                           \
        if (c < cols) {                                                                                                \
            unsigned char wt[4][QV_LANES * 4] = {{0}};                                                                 \
            _Pragma("GCC unroll 4") for (int i = 0; i < NR; i++) memcpy(wt[i], w + i * wstride + c * ES, (cols - c) * ES); \
            _Pragma("GCC unroll 4") for (int i = 0; i < NR; i++)                                                       \
                _Pragma("GCC unroll 4") for (int j = 0; j < NT; j++)                                                   \
                    acc[i][j] = qv_fma(LOAD(wt[i]), qv_load_n(x + j * xstride + c, (int)(cols - c)), acc[i][j]);       \
        }                                                                                                              \
        _Pragma("GCC unroll 4") for (int i = 0; i < NR; i++)                                                           \
            _Pragma("GCC unroll 4") for (int j = 0; j < NT; j++) out[i][j] = qv_reduce(acc[i][j]);                     \
    }

QV_INLINE qv_f32 load_f32(const void *p) { return qv_load((const float *)p); }

QV_TILE(tile_i8, qv_load_i8, 1)
QV_TILE(tile_f16, qv_load_f16, 2)
QV_TILE(tile_bf16, qv_load_bf16, 2)
QV_TILE(tile_f32, load_f32, 4)
#undef QV_TILE
#undef QV_TILE_STEP

/* Output rows [r, r + nr) for T tokens from rows at w, ws bytes apart: tiles of 4 rows x up to 4
 * tokens, each tile's sizes compile-time constants so its accumulators stay in registers. */
#define QV_ROWS(NAME, TILEFN, ES)                                                                                      \
    QV_INLINE void NAME(const unsigned char *w, size_t cols, const float *X, int T, float *Y, size_t ystride, int r,   \
                        int nr, const float *scale) {                                                                  \
        const size_t ws = cols * ES;                                                                                   \
        float out[4][4];                                                                                               \
        for (int t = 0; t < T; t += 4) {                                                                               \
            const int nt = T - t < 4 ? T - t : 4;                                                                      \
            const float *x = X + (size_t)t * cols;                                                                     \
            if (nr == 4 && nt == 4) TILEFN(w, ws, x, cols, cols, 4, 4, out);                                           \
            else if (nr == 4 && nt == 1) TILEFN(w, ws, x, cols, cols, 4, 1, out);                                      \
            else if (nr == 4 && nt == 2) TILEFN(w, ws, x, cols, cols, 4, 2, out);                                      \
            else if (nr == 4 && nt == 3) TILEFN(w, ws, x, cols, cols, 4, 3, out);                                      \
            else                                                                                                       \
                for (int i = 0; i < nr; i++)                                                                           \
                    for (int j = 0; j < nt; j++) {                                                                     \
                        float o[4][4];                                                                                 \
                        TILEFN(w + i * ws, ws, x + j * cols, cols, cols, 1, 1, o);                                     \
                        out[i][j] = o[0][0];                                                                           \
                    }                                                                                                  \
            for (int i = 0; i < nr; i++)                                                                               \
                for (int j = 0; j < nt; j++) Y[(size_t)(t + j) * ystride + r + i] = scale ? out[i][j] * scale[r + i] : out[i][j]; \
        }                                                                                                              \
    }

QV_ROWS(rows_i8, tile_i8, 1)
QV_ROWS(rows_f16, tile_f16, 2)
QV_ROWS(rows_bf16, tile_bf16, 2)
QV_ROWS(rows_f32, tile_f32, 4)
#undef QV_ROWS

#if !QV_PREFILL_WIDEN
/* Prefill over a row-major dtype, 4 rows at a time. */
QV_TARGET static void tiled(const qhx_tensor *W, const float *X, int T, float *Y, int r0, int r1) {
    const size_t cols = (size_t)W->cols, ws = cols * qhx_dtype_size(W->dtype);
    for (int r = r0; r < r1; r += 4) {
        const int nr = r1 - r < 4 ? r1 - r : 4;
        const unsigned char *w = (const unsigned char *)W->data + (size_t)r * ws;
        switch (W->dtype) {
        case QHX_F16: rows_f16(w, cols, X, T, Y, (size_t)W->rows, r, nr, NULL); break;
        case QHX_BF16: rows_bf16(w, cols, X, T, Y, (size_t)W->rows, r, nr, NULL); break;
        default: rows_f32(w, cols, X, T, Y, (size_t)W->rows, r, nr, NULL); break;
        }
    }
}
#endif

/* Decode over row-major rows (the fp16 lm-head, bf16 and fp32 checkpoints): one row after the
 * next, the matrix read as one stream with the fetch ahead of it, up to 4 tokens a pass over a
 * row. Several tokens (a batched step) take QV_DECODE_ROWS rows side by side, so each load of a
 * token's activations serves them all (the activations of 4 tokens outgrow L1: it is their
 * reloads that a batched step paid for); 4 rows take the tokens 2 at a time, their weights
 * still in L1 for the second pair. Two accumulators a token and row, even and odd vectors, so a
 * token's sum takes the same order however the tokens and rows are grouped. */
#define QV_STREAM(NAME, LOAD, ES)                                                                                      \
    QV_INLINE void NAME(const unsigned char *w, size_t ws, size_t cols, const float *x, int NR, int NT, float out[4][4]) { \
        qv_f32 acc[4][4][2];                                                                                           \
        _Pragma("GCC unroll 4") for (int r = 0; r < NR; r++)                                                           \
            _Pragma("GCC unroll 4") for (int j = 0; j < NT; j++) acc[r][j][0] = acc[r][j][1] = qv_zero();              \
        size_t c = 0;                                                                                                  \
        for (; c + 2 * QV_LANES <= cols; c += 2 * QV_LANES) {                                                          \
            _Pragma("GCC unroll 4") for (int r = 0; r < NR; r++) {                                                     \
                if (2 * QV_LANES * ES >= 64)                                                                            \
                    for (int o = 0; o < 2 * QV_LANES * ES; o += 64) __builtin_prefetch(w + r * ws + c * ES + QHX_STREAM_AHEAD + o, 0, 0); \
                else if (c * ES % 64 == 0) __builtin_prefetch(w + r * ws + c * ES + QHX_STREAM_AHEAD, 0, 0);            \
            }                                                                                                          \
            qv_f32 w0[4], w1[4];                                                                                       \
            _Pragma("GCC unroll 4") for (int r = 0; r < NR; r++) w0[r] = LOAD(w + r * ws + c * ES), w1[r] = LOAD(w + r * ws + (c + QV_LANES) * ES); \
            _Pragma("GCC unroll 4") for (int j = 0; j < NT; j++) {                                                     \
                const qv_f32 x0 = qv_load(x + j * cols + c), x1 = qv_load(x + j * cols + c + QV_LANES);                \
                _Pragma("GCC unroll 4") for (int r = 0; r < NR; r++) {                                                 \
                    acc[r][j][0] = qv_fma(w0[r], x0, acc[r][j][0]);                                                    \
                    acc[r][j][1] = qv_fma(w1[r], x1, acc[r][j][1]);                                                    \
                }                                                                                                      \
            }                                                                                                          \
        }                                                                                                              \
        for (int h = 0; c < cols; c += QV_LANES, h ^= 1) {                                                             \
            const int n = cols - c < QV_LANES ? (int)(cols - c) : QV_LANES;                                            \
            _Pragma("GCC unroll 4") for (int r = 0; r < NR; r++) {                                                     \
                unsigned char wt[QV_LANES * 4] = {0};                                                                  \
                memcpy(wt, w + r * ws + c * ES, n * ES);                                                               \
                _Pragma("GCC unroll 4") for (int j = 0; j < NT; j++) acc[r][j][h] = qv_fma(LOAD(wt), qv_load_n(x + j * cols + c, n), acc[r][j][h]); \
            }                                                                                                          \
        }                                                                                                              \
        _Pragma("GCC unroll 4") for (int r = 0; r < NR; r++)                                                           \
            _Pragma("GCC unroll 4") for (int j = 0; j < NT; j++) out[r][j] = qv_reduce(qv_add(acc[r][j][0], acc[r][j][1])); \
    }
QV_STREAM(stream_f16, qv_load_f16, 2)
QV_STREAM(stream_bf16, qv_load_bf16, 2)
QV_STREAM(stream_f32, load_f32, 4)
#undef QV_STREAM

QV_TARGET static void decode_rows(const qhx_tensor *W, const float *X, int T, float *Y, int r0, int r1) {
    const size_t cols = (size_t)W->cols, ws = cols * qhx_dtype_size(W->dtype);
    float out[4][4];
    for (int r = r0; r < r1;) {
        const unsigned char *w = (const unsigned char *)W->data + (size_t)r * ws;
        const int nr = T == 1 ? 1 : QV_DECODE_ROWS >= 4 && r + 3 < r1 ? 4 : QV_DECODE_ROWS >= 2 && r + 1 < r1 ? 2 : 1;
        const int step = nr == 4 ? 2 : 4; /* tokens a pass: 4 rows take 2 at a time (their accumulators fill the registers) */
        for (int t = 0; t < T; t += step) {
            const float *x = X + (size_t)t * cols;
            const int nt = T - t < step ? T - t : step;
#define QV_NT(FN, NR) (nt == 4 ? FN(w, ws, cols, x, NR, 4, out) : nt == 3 ? FN(w, ws, cols, x, NR, 3, out) : nt == 2 ? FN(w, ws, cols, x, NR, 2, out) : FN(w, ws, cols, x, NR, 1, out))
#define QV_NT2(FN, NR) (nt == 2 ? FN(w, ws, cols, x, NR, 2, out) : FN(w, ws, cols, x, NR, 1, out))
#define QV_ROWS(FN) (nr == 4 ? QV_NT2(FN, 4) : nr == 2 ? QV_NT(FN, 2) : QV_NT(FN, 1))
            switch (W->dtype) {
            case QHX_F16: QV_ROWS(stream_f16); break;
            case QHX_BF16: QV_ROWS(stream_bf16); break;
            default: QV_ROWS(stream_f32); break;
            }
#undef QV_ROWS
#undef QV_NT2
#undef QV_NT
            for (int i = 0; i < nr; i++)
                for (int j = 0; j < nt; j++) Y[(size_t)(t + j) * W->rows + r + i] = out[i][j];
        }
        r += nr;
    }
}

QV_INLINE void w8_block(const int8_t *wb, const float *x, qv_f32 acc[4]) {
    __builtin_prefetch(wb + QHX_STREAM_AHEAD, 0, 0);
    __builtin_prefetch(wb + QHX_STREAM_AHEAD + 64, 0, 0);
    _Pragma("GCC unroll 4") for (int k = 0; k < QHX_W8_BLOCK / QV_LANES; k++) {
        const qv_f32 xv = qv_load(x + QV_LANES * k);
        _Pragma("GCC unroll 4") for (int i = 0; i < QHX_W8_GROUP; i++)
            acc[i] = qv_fma(qv_load_i8(wb + i * QHX_W8_BLOCK + QV_LANES * k), xv, acc[i]);
    }
}

/* Decode over the W8 layout: a row group's 4 rows at a time straight from the packed blocks (the
 * layout's zero padding makes the ragged block plain arithmetic). */
QV_TARGET static void decode_w8(const qhx_tensor *W, const float *X, int T, float *Y, int r0, int r1) {
    const size_t cols = (size_t)W->cols, full = cols / QHX_W8_BLOCK, gbytes = qhx_w8_group_bytes(cols);
    for (int r = r0; r < r1; r += QHX_W8_GROUP) {
        const int8_t *g = (const int8_t *)W->data + (size_t)r / QHX_W8_GROUP * gbytes;
        const int nr = r1 - r < QHX_W8_GROUP ? r1 - r : QHX_W8_GROUP;
        for (int t = 0; t < T; t++) {
            const float *x = X + (size_t)t * cols;
            qv_f32 acc[4] = {qv_zero(), qv_zero(), qv_zero(), qv_zero()};
            for (size_t b = 0; b < full; b++) w8_block(g + b * QHX_W8_GROUP * QHX_W8_BLOCK, x + b * QHX_W8_BLOCK, acc);
            if (cols > full * QHX_W8_BLOCK) { /* the ragged block */
                float xt[QHX_W8_BLOCK] = {0};
                memcpy(xt, x + full * QHX_W8_BLOCK, sizeof(float) * (cols - full * QHX_W8_BLOCK));
                w8_block(g + full * QHX_W8_GROUP * QHX_W8_BLOCK, xt, acc);
            }
            for (int i = 0; i < nr; i++) Y[(size_t)t * W->rows + r + i] = qv_reduce(acc[i]) * W->scale[r + i];
        }
    }
}

#if QV_PREFILL_WIDEN
/* row r of W (plain rows for W8: `plain` holds its unpacked group) widened into out, the
 * columns past cols zero up to whole lanes */
QV_TARGET static void widen_row(const qhx_tensor *W, const int8_t *plain, int r, float *out) {
    const size_t cols = (size_t)W->cols, es = qhx_dtype_size(W->dtype);
    const unsigned char *w = plain ? (const unsigned char *)plain + (size_t)(r % QHX_W8_GROUP) * cols
                                   : (const unsigned char *)W->data + (size_t)r * cols * es;
    size_t c = 0;
    for (;; c += QV_LANES) {
        unsigned char t[QV_LANES * 4] = {0};
        const unsigned char *p = w + c * es;
        if (c + QV_LANES > cols) {
            if (c >= cols) break;
            memcpy(t, p, (cols - c) * es);
            p = t;
        }
        switch (W->dtype) {
        case QHX_I8: qv_store(out + c, qv_load_i8(p)); break;
        case QHX_F16: qv_store(out + c, qv_load_f16(p)); break;
        case QHX_BF16: qv_store(out + c, qv_load_bf16(p)); break;
        default: qv_store(out + c, load_f32(p)); break;
        }
    }
}

/* 4 widened rows (cpad floats apart, zero past cols) x NT tokens */
QV_INLINE void prefill_tile(const float *wf, size_t cpad, size_t cols, const float *x, int NT, float out[4][QV_PREFILL_TOKENS]) {
    qv_f32 acc[4][QV_PREFILL_TOKENS];
    _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++)
        _Pragma("GCC unroll 4") for (int j = 0; j < NT; j++) acc[i][j] = qv_zero();
    size_t c = 0;
    for (; c + QV_LANES <= cols; c += QV_LANES) {
        qv_f32 xv[QV_PREFILL_TOKENS];
        _Pragma("GCC unroll 4") for (int j = 0; j < NT; j++) xv[j] = qv_load(x + j * cols + c);
        _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) {
            const qv_f32 w = qv_load(wf + i * cpad + c);
            _Pragma("GCC unroll 4") for (int j = 0; j < NT; j++) acc[i][j] = qv_fma(w, xv[j], acc[i][j]);
        }
    }
    if (c < cols) {
        qv_f32 xv[QV_PREFILL_TOKENS];
        _Pragma("GCC unroll 4") for (int j = 0; j < NT; j++) xv[j] = qv_load_n(x + j * cols + c, (int)(cols - c));
        _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++)
            _Pragma("GCC unroll 4") for (int j = 0; j < NT; j++) acc[i][j] = qv_fma(qv_load(wf + i * cpad + c), xv[j], acc[i][j]);
    }
    _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++)
        _Pragma("GCC unroll 4") for (int j = 0; j < NT; j++) out[i][j] = qv_reduce(acc[i][j]);
}

QV_TARGET static qhx_status prefill_widened(const qhx_tensor *W, const float *X, int T, float *Y, int r0, int r1) {
    const size_t cols = (size_t)W->cols, cpad = qhx_round_up(cols, QV_LANES);
    float *wf = aligned_alloc(64, qhx_round_up(sizeof(float) * 4 * cpad, 64));
    int8_t *plain = W->dtype == QHX_I8 ? malloc(QHX_W8_GROUP * cols) : NULL; /* W8: a row group unpacked */
    if (!wf || (W->dtype == QHX_I8 && !plain)) {
        free(wf), free(plain);
        return QHX_ERR_NOMEM;
    }
    for (int r = r0; r < r1; r += 4) {
        const int nr = r1 - r < 4 ? r1 - r : 4;
        if (plain) qhx_w8_get_group(W->data, cols, (size_t)r, plain);
        for (int i = 0; i < 4; i++) widen_row(W, plain, r + (i < nr ? i : 0), wf + i * cpad);
        for (int t = 0; t < T; t += QV_PREFILL_TOKENS) {
            const int nt = T - t < QV_PREFILL_TOKENS ? T - t : QV_PREFILL_TOKENS;
            const float *x = X + (size_t)t * cols;
            float out[4][QV_PREFILL_TOKENS];
            switch (nt) {
            case 1: prefill_tile(wf, cpad, cols, x, 1, out); break;
            case 2: prefill_tile(wf, cpad, cols, x, 2, out); break;
#if QV_PREFILL_TOKENS > 3
            case 3: prefill_tile(wf, cpad, cols, x, 3, out); break;
#endif
            default: prefill_tile(wf, cpad, cols, x, QV_PREFILL_TOKENS, out); break;
            }
            for (int i = 0; i < nr; i++)
                for (int j = 0; j < nt; j++) {
                    const float v = out[i][j];
                    Y[(size_t)(t + j) * W->rows + r + i] = W->dtype == QHX_I8 ? v * W->scale[r + i] : v;
                }
        }
    }
    free(wf);
    free(plain);
    return QHX_OK;
}

#define prefill prefill_widened
#else
/* Prefill widening in registers, as decode's tiles do; W8 row groups unpacked to plain rows. */
QV_TARGET static qhx_status prefill(const qhx_tensor *W, const float *X, int T, float *Y, int r0, int r1) {
    if (W->dtype != QHX_I8) {
        tiled(W, X, T, Y, r0, r1);
        return QHX_OK;
    }
    const size_t cols = (size_t)W->cols;
    int8_t *plain = malloc(QHX_W8_GROUP * cols);
    if (!plain) return QHX_ERR_NOMEM;
    for (int r = r0; r < r1; r += QHX_W8_GROUP) {
        qhx_w8_get_group(W->data, cols, (size_t)r, plain);
        rows_i8((const unsigned char *)plain, cols, X, T, Y, (size_t)W->rows, r, r1 - r < 4 ? r1 - r : 4, W->scale);
    }
    free(plain);
    return QHX_OK;
}
#endif

/* W4 with fp32 activations (sets without an integer W4 kernel): each row group widened to fp32
 * rows (exact) and run through the fp32 tiles. */
QV_TARGET static qhx_status w4_fp32(const qhx_tensor *W, const float *X, int T, float *Y, int r0, int r1) {
    const size_t cols = (size_t)W->cols;
    float *plain = malloc(sizeof(float) * QHX_W4_GROUP * cols);
    if (!plain) return QHX_ERR_NOMEM;
    for (int r = r0; r < r1; r += QHX_W4_GROUP) {
        const int nr = r1 - r < QHX_W4_GROUP ? r1 - r : QHX_W4_GROUP;
        for (int i = 0; i < nr; i++) qhx_w4_row_f32(W->data, cols, (size_t)(r + i), plain + (size_t)i * cols);
        rows_f32((const unsigned char *)plain, cols, X, T, Y, (size_t)W->rows, r, nr, NULL);
    }
    free(plain);
    return QHX_OK;
}

QV_TARGET static qhx_status QV_NAME(matmul)(const qhx_tensor *W, const float *X, int T, float *Y, int r0, int r1) {
    if (W->dtype == QHX_Q4) return w4_fp32(W, X, T, Y, r0, r1);
    if (T > QHX_DECODE_MAX_T) return prefill(W, X, T, Y, r0, r1);
    if (W->dtype == QHX_I8) decode_w8(W, X, T, Y, r0, r1);
    else decode_rows(W, X, T, Y, r0, r1);
    return QHX_OK;
}

QV_TARGET static float QV_NAME(dot)(const float *a, const float *b, int n) {
    qv_f32 acc = qv_zero();
    int i = 0;
    for (; i + QV_LANES <= n; i += QV_LANES) acc = qv_fma(qv_load(a + i), qv_load(b + i), acc);
    float s = qv_reduce(acc);
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}


/* w: the live lanes, QV_LANES but at a ragged edge */
QV_INLINE qv_f32 qv_load_w(const float *p, int w) { return w == QV_LANES ? qv_load(p) : qv_load_n(p, w); }
QV_INLINE void qv_store_w(float *p, qv_f32 v, int w) {
    if (w == QV_LANES) qv_store(p, v);
    else qv_store_n(p, v, w);
}

/* MR rows x (2 QV_LANES) columns of C, n of them in place: 2 MR accumulators, B's row loaded once
 * per k for all MR rows; A(r, k) at A[r lda + k acs] */
QV_INLINE void gemm_tile(int MR, int K, float alpha, const float *A, int lda, int acs, const float *B, int ldb, float *C, int ldc, int n) {
    qv_f32 acc[QV_GEMM_ROWS][2];
    const int n0 = n < QV_LANES ? n : QV_LANES, n1 = n - n0;
    _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++) acc[r][0] = acc[r][1] = qv_zero();
    for (int k = 0; k < K; k++) {
        const float *b = B + (size_t)k * ldb, *ak = A + (size_t)k * acs;
        const qv_f32 b0 = qv_load_w(b, n0);
        const qv_f32 b1 = n1 ? qv_load_w(b + QV_LANES, n1) : qv_zero();
        _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++) {
            const qv_f32 a = qv_set1(ak[(size_t)r * lda]);
            acc[r][0] = qv_fma(a, b0, acc[r][0]);
            acc[r][1] = qv_fma(a, b1, acc[r][1]);
        }
    }
    const qv_f32 al = qv_set1(alpha);
    _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++) {
        float *c = C + (size_t)r * ldc;
        qv_store_w(c, qv_fma(al, acc[r][0], qv_load_w(c, n0)), n0);
        if (n1) qv_store_w(c + QV_LANES, qv_fma(al, acc[r][1], qv_load_w(c + QV_LANES, n1)), n1);
    }
}

/* full-width strips with the width a constant, so the tile's loop carries no test for a ragged edge */
#define GEMM_TILE(MR, n) ((n) == 2 * QV_LANES ? gemm_tile(MR, K, alpha, A + (size_t)i * lda, lda, acs, B + j, ldb, C + (size_t)i * ldc + j, ldc, 2 * QV_LANES) \
                                              : gemm_tile(MR, K, alpha, A + (size_t)i * lda, lda, acs, B + j, ldb, C + (size_t)i * ldc + j, ldc, n))
QV_INLINE void gemm_strips(int M, int N, int K, float alpha, const float *A, int lda, int acs, const float *B, int ldb, float *C, int ldc) {
    for (int j = 0; j < N; j += 2 * QV_LANES) {
        const int n = N - j < 2 * QV_LANES ? N - j : 2 * QV_LANES;
        int i = 0;
        for (; i + QV_GEMM_ROWS <= M; i += QV_GEMM_ROWS) GEMM_TILE(QV_GEMM_ROWS, n);
#if QV_GEMM_ROWS > 4
        if (M - i >= 4) GEMM_TILE(4, n), i += 4;
#endif
        for (; i < M; i++) GEMM_TILE(1, n);
    }
}
#undef GEMM_TILE

QV_TARGET static void QV_NAME(gemm)(int M, int N, int K, float alpha, const float *A, int lda, int acs, const float *B, int ldb,
                                    float *C, int ldc) {
    if (acs == 1) gemm_strips(M, N, K, alpha, A, lda, 1, B, ldb, C, ldc); /* A's rows contiguous: the usual case */
    else gemm_strips(M, N, K, alpha, A, lda, acs, B, ldb, C, ldc);
}

/* The gated delta rule (spec §3.5.1) a block of columns at a time, every token over the block
 * before the next block: columns are independent, so each token's block stays in L1 (64 columns x
 * dk rows = 32 KB at dk = 128 with AVX-512) for all T tokens, and each column's sums run over the
 * rows in the same order whatever T or the block's width, so T tokens at once equal T lone steps
 * bit for bit. A token's step is one read of the block, by linearity:  S^T k after the decay =
 * decay (S^T k),  o = S'^T q = decay (S^T q) + (k . q) delta;  the write follows while the block is
 * in L1. The last token's writes fetch as many bytes of `next` as they write, so the caller's next
 * state is in cache when its step begins (decode over 24 layers of 4B states, 2 threads: 1.7x). */
/* vectors in a block of columns: 64 columns with AVX-512, 32 elsewhere (measured per ISA) */
#define QV_DV (QV_LANES >= 16 ? 64 / QV_LANES : 32 / QV_LANES)
#define QV_BLOCK (QV_DV * QV_LANES) /* its columns */
QV_TARGET static void QV_NAME(delta_rule)(float *S, const qhx_delta_args *a) {
    const int dk = a->dk, dv = a->dv;
    int c0 = 0;
    for (; c0 + QV_BLOCK <= dv; c0 += QV_BLOCK)
        for (int t = 0; t < a->T; t++) {
            const float *q = a->q + (size_t)t * a->stride, *k = a->k + (size_t)t * a->stride, *v = a->v + (size_t)t * a->stride;
            const qv_f32 dec = qv_set1(expf(a->g[(size_t)t * a->gstride])), bet = qv_set1(a->beta[(size_t)t * a->gstride]);
            const qv_f32 kqv = qv_set1(QV_NAME(dot)(k, q, dk));
            const float *next = t == a->T - 1 ? a->next : NULL;
            float *o = a->o + (size_t)t * a->ostride;
            qv_f32 sk[QV_DV], sq[QV_DV], delta[QV_DV];
            _Pragma("GCC unroll 4") for (int u = 0; u < QV_DV; u++) sk[u] = sq[u] = qv_zero();
            for (int i = 0; i < dk; i++) {
                const float *row = S + (size_t)i * dv + c0;
                const qv_f32 ki = qv_set1(k[i]), qi = qv_set1(q[i]);
                _Pragma("GCC unroll 4") for (int u = 0; u < QV_DV; u++) {
                    const qv_f32 sv = qv_load(row + QV_LANES * u);
                    sk[u] = qv_fma(ki, sv, sk[u]);
                    sq[u] = qv_fma(qi, sv, sq[u]);
                }
            }
            _Pragma("GCC unroll 4") for (int u = 0; u < QV_DV; u++) {
                delta[u] = qv_mul(qv_fnma(dec, sk[u], qv_load(v + c0 + QV_LANES * u)), bet);
                qv_store(o + c0 + QV_LANES * u, qv_fma(kqv, delta[u], qv_mul(dec, sq[u])));
            }
            for (int i = 0; i < dk; i++) {
                float *row = S + (size_t)i * dv + c0;
                const qv_f32 ki = qv_set1(k[i]);
                if (next) {
                    const char *f = (const char *)next + ((size_t)(c0 / QV_BLOCK) * dk + i) * QV_BLOCK * sizeof(float);
                    _Pragma("GCC unroll 4") for (size_t b = 0; b < QV_BLOCK * sizeof(float); b += 64) __builtin_prefetch(f + b, 0, 3);
                }
                _Pragma("GCC unroll 4") for (int u = 0; u < QV_DV; u++)
                    qv_store(row + QV_LANES * u, qv_fma(ki, delta[u], qv_mul(dec, qv_load(row + QV_LANES * u))));
            }
        }
    if (c0 < dv) /* the last dv % QV_BLOCK columns, one at a time */
        for (int t = 0; t < a->T; t++) {
            const float *q = a->q + (size_t)t * a->stride, *k = a->k + (size_t)t * a->stride, *v = a->v + (size_t)t * a->stride;
            const float decay = expf(a->g[(size_t)t * a->gstride]), beta = a->beta[(size_t)t * a->gstride];
            const float kq = QV_NAME(dot)(k, q, dk);
            float *o = a->o + (size_t)t * a->ostride, *kv = a->work;
            for (int c = c0; c < dv; c++) {
                float sk = 0.0f, sq = 0.0f;
                for (int i = 0; i < dk; i++) sk += k[i] * S[(size_t)i * dv + c], sq += q[i] * S[(size_t)i * dv + c];
                kv[c] = (v[c] - decay * sk) * beta;
                o[c] = decay * sq + kq * kv[c];
            }
            for (int i = 0; i < dk; i++)
                for (int c = c0; c < dv; c++) S[(size_t)i * dv + c] = decay * S[(size_t)i * dv + c] + k[i] * kv[c];
        }
}
#undef QV_BLOCK
#undef QV_DV

/* e^x: Cody-Waite reduction by ln 2 in two parts, then Cephes' expf polynomial on |r| <= ln 2 / 2
 * (relative error a few 1e-8 against double). Below -87 it returns e^-87 (beside 1 in SiLU's
 * denominator, both vanish); above 88.5, infinity (so SiLU goes to -0 as it should). */
QV_INLINE qv_f32 qv_exp(qv_f32 x) {
    const qv_mask over = qv_gt(x, qv_set1(88.5f));
    x = qv_min(qv_max(x, qv_set1(-87.0f)), qv_set1(88.5f));
    const qv_f32 n = qv_round(qv_mul(x, qv_set1(1.44269504088896341f)));
    qv_f32 r = qv_fnma(n, qv_set1(0.693359375f), x);
    r = qv_fnma(n, qv_set1(-2.12194440e-4f), r);
    qv_f32 p = qv_set1(1.9875691500e-4f);
    p = qv_fma(p, r, qv_set1(1.3981999507e-3f));
    p = qv_fma(p, r, qv_set1(8.3334519073e-3f));
    p = qv_fma(p, r, qv_set1(4.1665795894e-2f));
    p = qv_fma(p, r, qv_set1(1.6666665459e-1f));
    p = qv_fma(p, r, qv_set1(5.0000001201e-1f));
    p = qv_fma(p, qv_mul(r, r), qv_add(r, qv_set1(1.0f)));
    return qv_select(over, qv_set1(__builtin_inff()), qv_mul(p, qv_pow2(n)));
}

QV_INLINE qv_f32 qv_silu(qv_f32 x) { return qv_div(x, qv_add(qv_set1(1.0f), qv_exp(qv_sub(qv_zero(), x)))); }

/* x = silu(x) * mul (mul NULL: silu(x)); the MLP's 9216 a token and the conv's and gated norm's
 * SiLUs were one libm expf call each, 5-8 % of prefill */
QV_TARGET static void QV_NAME(silu)(float *x, const float *mul, size_t n) {
    size_t i = 0;
    for (; i + QV_LANES <= n; i += QV_LANES) {
        const qv_f32 y = qv_silu(qv_load(x + i));
        qv_store(x + i, mul ? qv_mul(y, qv_load(mul + i)) : y);
    }
    if (i < n) { /* the tail through the same lanes, so every element gets the same arithmetic */
        const int m = (int)(n - i);
        const qv_f32 y = qv_silu(qv_load_n(x + i, m));
        qv_store_n(x + i, mul ? qv_mul(y, qv_load_n(mul + i, m)) : y, m);
    }
}

/* The conv over T tokens, time outermost, so each token reads its K input rows' channels in order
 * (a tile of channels at a time down the tokens read one cache line a row: 2-4 % of a prefill);
 * the products added as the twin adds them (no FMA), the SiLU the layer's. Qwen3.5's K = 4 is a
 * constant, so the taps' loop unrolls. */
QV_INLINE void conv_rows(const float *taps, float *fifo, const float *in, float *out, size_t C, const int K, int T, int n) {
    const float *src[64];
    for (int t = 0; t < T; t++) {
        for (int j = 0; j < K - 1; j++) src[j] = qhx_conv_row(fifo, in, C, K, t - (K - 1) + j);
        const float *x = in + (size_t)t * C;
        float *y = out + (size_t)t * C;
        for (int c = 0; c < n; c += QV_LANES) {
            const int w = n - c < QV_LANES ? n - c : QV_LANES;
            qv_f32 v = qv_mul(qv_load_w(taps + (size_t)(K - 1) * C + c, w), qv_load_w(x + c, w));
            for (int j = 0; j < K - 1; j++) v = qv_add(v, qv_mul(qv_load_w(taps + (size_t)j * C + c, w), qv_load_w(src[j] + c, w)));
            qv_store_w(y + c, qv_silu(v), w);
        }
    }
    qhx_conv_keep(fifo, in, C, K, T, n);
}

QV_TARGET static void QV_NAME(conv)(const float *taps, float *fifo, const float *in, float *out, size_t C, int K, int T, int n) {
    if (K == 4) conv_rows(taps, fifo, in, out, C, 4, T, n);
    else conv_rows(taps, fifo, in, out, C, K, T, n);
}

QV_TARGET static float QV_NAME(exp_sum)(float *x, int n, float sub) {
    const qv_f32 m = qv_set1(sub);
    qv_f32 acc = qv_zero();
    int i = 0;
    for (; i + QV_LANES <= n; i += QV_LANES) {
        const qv_f32 e = qv_exp(qv_sub(qv_load(x + i), m));
        qv_store(x + i, e);
        acc = qv_add(acc, e);
    }
    float sum = qv_reduce(acc);
    if (i < n) { /* the tail through the same lanes */
        qv_store_n(x + i, qv_exp(qv_sub(qv_load_n(x + i, n - i), m)), n - i);
        for (; i < n; i++) sum += x[i];
    }
    return sum;
}

/* QV_LANES values of a head row from column c (a multiple of QV_LANES), widened: f16 exactly, q8
 * times its block's scale (what qhx_kv_at gives) */
QV_INLINE qv_f32 kv_load(qhx_kv_form form, const unsigned char *row, int hd, int c) {
    if (form == QHX_KV_F16) return qv_load_f16(row + 2 * (size_t)c);
    if (form == QHX_KV_Q8) {
        float s;
        memcpy(&s, row + qhx_kv_q8_scales(hd) + sizeof(float) * (size_t)(c / QHX_Q8_BLOCK), sizeof s);
        return qv_mul(qv_load_i8(row + c), qv_set1(s));
    }
    return qv_load((const float *)row + c);
}

QV_TARGET static void QV_NAME(kv_widen)(qhx_kv_form form, const unsigned char *rows, size_t stride, int hd, int n, float *out,
                                        int ld) {
    if (hd % QV_LANES) {
        qhx_kv_widen_scalar(form, rows, stride, hd, n, out, ld);
        return;
    }
    for (int p = 0; p < n; p++)
        for (int c = 0; c < hd; c += QV_LANES) qv_store(out + (size_t)p * ld + c, kv_load(form, rows + (size_t)p * stride, hd, c));
}

/* Register blocks of attend: ATT_R rows x 4 queries of scores, ATT_C vectors x 4 queries of the
 * weighted sum (16 accumulators where the layer has 32 registers; 8 with AVX2's 16) */
#define ATT_R (QV_GEMM_ROWS >= 8 ? 4 : 2)
#define ATT_C (QV_GEMM_ROWS >= 8 ? 4 : 2)

/* attend's strides: compile-time constants on the common path, so every row and query is an
 * immediate offset from one register (the general form runs out of registers and spills) */
typedef struct {
    int hd;
    size_t stride, qs, os; /* bytes between cached rows; floats between queries, between outputs */
} att_shape;

/* scores s[g][p0 + r] of rows r < nr (from row) for queries g0 + g, g < ng: each loaded vector of
 * the rows and of the queries serves nr x ng products. Between the column steps go the fetches of
 * the same rows' values (fv, read once the tile's scores are done) into every level and of the
 * next tile's keys (fk) into L2: a few lines a step keep the misses in flight, where one burst a
 * tile queued them (bench/README.md, "Kernels alone"). */
QV_INLINE void attend_scores(const qhx_attend_args *a, qhx_kv_form form, att_shape z, const unsigned char *row, int nr, int g0,
                             int ng, float *s, int p, const unsigned char *fv, const unsigned char *fk) {
    const int steps = z.hd / QV_LANES, lines = (int)(((size_t)nr * z.stride + 63) / 64);
    const float *q0 = a->q + (size_t)g0 * z.qs;
    qv_f32 acc[ATT_R][4], k[ATT_R], q[4];
    _Pragma("GCC unroll 4") for (int r = 0; r < ATT_R; r++) _Pragma("GCC unroll 4") for (int g = 0; g < 4; g++) acc[r][g] = qv_zero();
    _Pragma("GCC unroll 4") for (int r = 0; r < ATT_R; r++) k[r] = qv_zero();
    _Pragma("GCC unroll 4") for (int g = 0; g < 4; g++) q[g] = qv_zero();
    _Pragma("GCC unroll 16") for (int j = 0; j < steps; j++) {
        const int c = j * QV_LANES;
        if (fv)
            for (int l = j; l < lines; l += steps) {
                __builtin_prefetch(fv + (size_t)l * 64, 0, 3);
                if (fk) __builtin_prefetch(fk + (size_t)l * 64, 0, 2);
            }
        _Pragma("GCC unroll 4") for (int r = 0; r < ATT_R; r++) if (r < nr) k[r] = kv_load(form, row + (size_t)r * z.stride, z.hd, c);
        _Pragma("GCC unroll 4") for (int g = 0; g < 4; g++) if (g < ng) q[g] = qv_load(q0 + (size_t)g * z.qs + c);
        _Pragma("GCC unroll 4") for (int r = 0; r < ATT_R; r++) _Pragma("GCC unroll 4") for (int g = 0; g < 4; g++)
            if (r < nr && g < ng) acc[r][g] = qv_fma(q[g], k[r], acc[r][g]);
    }
    _Pragma("GCC unroll 4") for (int r = 0; r < ATT_R; r++) _Pragma("GCC unroll 4") for (int g = 0; g < 4; g++)
        if (r < nr && g < ng) s[(size_t)(g0 + g) * QHX_ATTEND_TILE + p + r] = qv_reduce(acc[r][g]) * a->scale;
}

/* o[g0 + g][c .. c + nc vectors) = o * shrink[g] + sum over the tile's np rows of s[g][p] v[p] */
QV_INLINE void attend_values(const qhx_attend_args *a, qhx_kv_form form, att_shape z, const unsigned char *rows, int np, int g0,
                             int ng, int c, int nc, const float *s, const float *shrink) {
    float *o = a->o + (size_t)g0 * z.os + c;
    const float *w0 = s + (size_t)g0 * QHX_ATTEND_TILE;
    qv_f32 acc[4][ATT_C], v[ATT_C];
    _Pragma("GCC unroll 4") for (int u = 0; u < ATT_C; u++) v[u] = qv_zero();
    _Pragma("GCC unroll 4") for (int g = 0; g < 4; g++) _Pragma("GCC unroll 4") for (int u = 0; u < ATT_C; u++)
        acc[g][u] = g < ng && u < nc ? qv_mul(qv_set1(shrink[g0 + g]), qv_load(o + (size_t)g * z.os + u * QV_LANES)) : qv_zero();
    for (int p = 0; p < np; p++) {
        const unsigned char *row = rows + (size_t)p * z.stride;
        _Pragma("GCC unroll 4") for (int u = 0; u < ATT_C; u++) if (u < nc) v[u] = kv_load(form, row, z.hd, c + u * QV_LANES);
        _Pragma("GCC unroll 4") for (int g = 0; g < 4; g++) {
            if (g >= ng) continue;
            const qv_f32 w = qv_set1(w0[(size_t)g * QHX_ATTEND_TILE + p]);
            _Pragma("GCC unroll 4") for (int u = 0; u < ATT_C; u++) if (u < nc) acc[g][u] = qv_fma(w, v[u], acc[g][u]);
        }
    }
    _Pragma("GCC unroll 4") for (int g = 0; g < 4; g++) _Pragma("GCC unroll 4") for (int u = 0; u < ATT_C; u++)
        if (g < ng && u < nc) qv_store(o + (size_t)g * z.os + u * QV_LANES, acc[g][u]);
}

/* the form and the shape constants, so kv_load's choice is made once a call and the column loops
 * have known bounds */
QV_INLINE void attend_form(const qhx_attend_args *a, qhx_kv_form form, att_shape z) {
    const int G = a->G, hd = z.hd, chunks = hd / QV_LANES;
    float m[64], l[64], shrink[64];
    for (int g = 0; g < G; g++) {
        m[g] = -__builtin_inff(), l[g] = 0.0f;
        memset(a->o + (size_t)g * z.os, 0, sizeof(float) * hd);
    }
    float *s = a->scratch; /* [G][QHX_ATTEND_TILE] */
    for (int p0 = 0; p0 < a->n; p0 += QHX_ATTEND_TILE) {
        const int np = a->n - p0 < QHX_ATTEND_TILE ? a->n - p0 : QHX_ATTEND_TILE;
        const unsigned char *krows = a->k + (size_t)p0 * z.stride, *vrows = a->v + (size_t)p0 * z.stride;
        const unsigned char *knext = p0 + QHX_ATTEND_TILE < a->n ? krows + (size_t)QHX_ATTEND_TILE * z.stride : NULL;
        for (int g0 = 0; g0 < G; g0 += 4) {
            const int ng = G - g0 < 4 ? G - g0 : 4;
            int p = 0;
            if (ng == 4)
                for (; p + ATT_R <= np; p += ATT_R) {
                    const size_t at = (size_t)p * z.stride;
                    attend_scores(a, form, z, krows + at, ATT_R, g0, 4, s, p, g0 ? NULL : vrows + at, knext ? knext + at : NULL);
                }
            for (; p < np; p++) {
                const size_t at = (size_t)p * z.stride;
                attend_scores(a, form, z, krows + at, 1, g0, ng, s, p, g0 ? NULL : vrows + at, knext ? knext + at : NULL);
            }
        }
        for (int g = 0; g < G; g++) { /* the running maximum; the sums and outputs rescaled to it */
            float *sg = s + (size_t)g * QHX_ATTEND_TILE, mx = m[g], t[QV_LANES];
            qv_f32 mv = qv_set1(mx);
            int p = 0;
            for (; p + QV_LANES <= np; p += QV_LANES) mv = qv_max(mv, qv_load(sg + p));
            qv_store(t, mv);
            for (int i = 0; i < QV_LANES; i++) mx = t[i] > mx ? t[i] : mx;
            for (; p < np; p++) mx = sg[p] > mx ? sg[p] : mx;
            shrink[g] = expf(m[g] - mx);
            l[g] = l[g] * shrink[g] + QV_NAME(exp_sum)(sg, np, mx);
            m[g] = mx;
        }
        for (int g0 = 0; g0 < G; g0 += 4) {
            const int ng = G - g0 < 4 ? G - g0 : 4;
            int c = 0;
            if (ng == 4)
                for (; c + ATT_C <= chunks; c += ATT_C) attend_values(a, form, z, vrows, np, g0, 4, c * QV_LANES, ATT_C, s, shrink);
            for (; c < chunks; c++) attend_values(a, form, z, vrows, np, g0, ng, c * QV_LANES, 1, s, shrink);
        }
    }
    for (int g = 0; g < G; g++) {
        float *o = a->o + (size_t)g * z.os;
        const qv_f32 inv = qv_set1(1.0f / l[g]);
        for (int c = 0; c < hd; c += QV_LANES) qv_store(o + c, qv_mul(inv, qv_load(o + c)));
    }
}

/* the model's layout at Qwen3.5's head width (256): rows packed, each query followed by its gate,
 * outputs packed; any other layout through the same code with its strides read at run time */
#define ATT_PACKED(form) ((att_shape){256, qhx_kv_head_bytes(form, 256), 512, 256})

QV_TARGET static void QV_NAME(attend)(const qhx_attend_args *a) {
    const att_shape any = {a->hd, a->stride, a->q_stride, a->o_stride}, model = ATT_PACKED(a->form);
    const int packed = any.hd == model.hd && any.stride == model.stride && any.qs == model.qs && any.os == model.os;
    if (a->hd % QV_LANES || a->G > 64) qhx_attend_scalar(a);
    else if (packed && a->form == QHX_KV_F16) attend_form(a, QHX_KV_F16, ATT_PACKED(QHX_KV_F16));
    else if (packed && a->form == QHX_KV_Q8) attend_form(a, QHX_KV_Q8, ATT_PACKED(QHX_KV_Q8));
    else if (packed) attend_form(a, QHX_KV_F32, ATT_PACKED(QHX_KV_F32));
    else if (a->form == QHX_KV_F16) attend_form(a, QHX_KV_F16, any);
    else if (a->form == QHX_KV_Q8) attend_form(a, QHX_KV_Q8, any);
    else attend_form(a, QHX_KV_F32, any);
}
#undef ATT_R
#undef ATT_C
#undef ATT_PACKED

/* A lane a query: each row of the tile is one load for QV_LANES queries, so the maxima, the
 * exponentials and the sums need no transposition (kernels.h) */
QV_TARGET static void QV_NAME(softmax_tile)(float *s, int n, int ld, int nq, const int *seen, float *m, float *sum, float *o,
                                            size_t ostride, int hd) {
    const qv_f32 ninf = qv_set1(-INFINITY);
    for (int c = 0; c < nq; c += QV_LANES) {
        const int w = nq - c < QV_LANES ? nq - c : QV_LANES;
        float sf[QV_LANES] = {0}, sh[QV_LANES];
        for (int i = 0; i < w; i++) sf[i] = (float)seen[c + i];
        const qv_f32 sv = qv_load(sf), mold = qv_load_w(m + c, w);
        qv_f32 mx = mold;
        for (int p = 0; p < n; p++)
            mx = qv_max(mx, qv_select(qv_gt(sv, qv_set1((float)p)), qv_load_w(s + (size_t)p * ld + c, w), ninf));
        const qv_f32 shrink = qv_select(qv_gt(mx, ninf), qv_exp(qv_sub(mold, mx)), qv_set1(1.0f)); /* no row seen yet: 1 */
        qv_f32 acc = qv_zero();
        for (int p = 0; p < n; p++) {
            float *row = s + (size_t)p * ld + c;
            const qv_f32 e = qv_select(qv_gt(sv, qv_set1((float)p)), qv_exp(qv_sub(qv_load_w(row, w), mx)), qv_zero());
            qv_store_w(row, e, w);
            acc = qv_add(acc, e);
        }
        qv_store_w(sum + c, qv_fma(qv_load_w(sum + c, w), shrink, acc), w);
        qv_store_w(m + c, mx, w);
        qv_store(sh, shrink);
        for (int i = 0; i < w; i++) {
            if (sh[i] == 1.0f) continue;
            float *oi = o + (size_t)(c + i) * ostride;
            const qv_f32 f = qv_set1(sh[i]);
            int e = 0;
            for (; e + QV_LANES <= hd; e += QV_LANES) qv_store(oi + e, qv_mul(f, qv_load(oi + e)));
            if (e < hd) qv_store_n(oi + e, qv_mul(f, qv_load_n(oi + e, hd - e)), hd - e);
        }
    }
}

const qhx_fp32_ops QV_PASTE(qhx_fp32, QV_ISA) = {.matmul = QV_NAME(matmul), 
                                         .gemm = QV_NAME(gemm), .delta_rule = QV_NAME(delta_rule), .silu = QV_NAME(silu), .conv = QV_NAME(conv),
                                         .attend = QV_NAME(attend), .softmax_tile = QV_NAME(softmax_tile),
                                         .kv_widen = QV_NAME(kv_widen)};
